/* h_links.c - agents report measured links; operators read the matrix. */
#include <stdio.h>
#include <string.h>

#include "../common/jsonv.h"
#include "http.h"
#include "queries.h"
#include "routes.h"

#define LINKS_MAX_SAMPLES 4096   /* per request; a node has at most this many peers to report */

struct link_sample {
    int64_t to;
    double latency_ms;        /* round trip / 2 is the agent's business; this is what it measured, ms */
    double bandwidth_gbps;    /* Gbit/s */
};

#define S(f) offsetof(struct link_sample, f)
static const struct jv_field sample_fields[] = {
    { "to", JV_INT, 1, 0, 1, 9e18, S(to), 0, NULL, NULL },
    { "latency_ms", JV_NUM, 1, 0, 0, 600000, S(latency_ms), 0, NULL, NULL },
    { "bandwidth_gbps", JV_NUM, 1, 0, 1e-9, 1e5, S(bandwidth_gbps), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef S

#define LINKS_REPORT_ID_MAX 128   /* characters of a report's name */

/* 1 if `id` is 1..LINKS_REPORT_ID_MAX of [A-Za-z0-9._-]. */
static int report_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > LINKS_REPORT_ID_MAX)
        return 0;
    return strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* Checks the body and writes the samples as three Postgres array literals;
 * *report_id is the report's name, or NULL when it has none. */
static int links_parse(json_t *body, int64_t self, struct buf *to, struct buf *lat,
                       struct buf *bw, const char **report_id, struct shoal_err *e)
{
    const char *key;
    json_t *val;
    json_object_foreach(body, key, val) {
        if (strcmp(key, "samples") != 0 && strcmp(key, "from") != 0 && strcmp(key, "report_id") != 0)
            return err_set(e, 400, "unknown_field", key, "unknown field %s", key);
    }
    json_t *rid = json_object_get(body, "report_id");
    *report_id = NULL;
    if (rid && !json_is_null(rid)) {
        if (!json_is_string(rid))
            return err_set(e, 400, "invalid_field", "report_id", "report_id must be a string");
        if (!report_id_valid(json_string_value(rid)))
            return err_set(e, 422, "invalid_field", "report_id", "report_id must be 1 to %d of A-Z a-z 0-9 . _ -",
                           LINKS_REPORT_ID_MAX);
        *report_id = json_string_value(rid);
    }
    json_t *from = json_object_get(body, "from");
    if (from && !json_is_integer(from))
        return err_set(e, 400, "invalid_field", "from", "from must be an integer node id");
    if (from && json_integer_value(from) != self)
        return err_set(e, 403, "forbidden", "from", "a node may only report its own links (from = %lld)",
                       (long long)self);
    json_t *samples = json_object_get(body, "samples");
    if (!json_is_array(samples))
        return err_set(e, 400, samples ? "invalid_field" : "missing_field", "samples",
                       "samples must be an array of {to, latency_ms, bandwidth_gbps}");
    size_t n = json_array_size(samples);
    if (n == 0 || n > LINKS_MAX_SAMPLES)
        return err_set(e, 422, "invalid_field", "samples", "samples must hold 1 to %d entries",
                       LINKS_MAX_SAMPLES);
    for (size_t i = 0; i < n; i++) {
        struct link_sample s;
        char path[32];
        snprintf(path, sizeof path, "samples[%zu]", i);
        if (jv_object(json_array_get(samples, i), sample_fields, path, &s, e) != 0)
            return -1;
        if (s.to == self)
            return err_set(e, 422, "invalid_field", path, "%s.to is the reporting node itself", path);
        const char *sep = i ? "," : "{";
        if (buf_printf(to, "%s%lld", sep, (long long)s.to) || buf_printf(lat, "%s%.17g", sep, s.latency_ms) ||
            buf_printf(bw, "%s%.17g", sep, s.bandwidth_gbps))
            return err_set(e, 413, "body_too_large", "samples", "too many samples");
    }
    if (buf_append(to, "}", 1) || buf_append(lat, "}", 1) || buf_append(bw, "}", 1))
        return err_set(e, 413, "body_too_large", "samples", "too many samples");
    return 0;
}

void h_links_put(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    struct buf to, lat, bw;
    char p_self[24];
    json_t *res = NULL;
    buf_init(&to, 1 << 20);
    buf_init(&lat, 1 << 20);
    buf_init(&bw, 1 << 20);
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    const char *report_id = NULL;
    if (links_parse(body, rq->node_id, &to, &lat, &bw, &report_id, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    const char *params[] = { db_param_i64(p_self, rq->node_id), to.data, lat.data, bw.data, report_id };
    /* A named report stores its samples only the first time its name
     * comes (a retry after a lost answer stores nothing); the node's names
     * older than a day are pruned on the way. */
    res = db_query_json(rq->srv->db,
        "WITH k AS (INSERT INTO link_reports (node_id, report_id) SELECT $1, $5 WHERE $5::text IS NOT NULL"
        "   ON CONFLICT (node_id, report_id) DO NOTHING RETURNING 1),"
        " ins AS (INSERT INTO link_samples (from_node, to_node, latency_ms, bandwidth_gbps)"
        "   SELECT $1, t, l, b FROM unnest($2::bigint[], $3::float8[], $4::float8[]) AS s(t, l, b)"
        "   WHERE $5::text IS NULL OR EXISTS (SELECT 1 FROM k) RETURNING 1),"
        " old AS (DELETE FROM link_reports WHERE node_id = $1 AND received_at < now() - interval '1 day')"
        " SELECT json_build_object('accepted', count(*),"
        "   'duplicate', $5::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM k)) FROM ins", 5, params, "samples", &e);
    if (!res) {
        if (e.status == 409)   /* the foreign key on to_node */
            err_set(&e, 422, "invalid_field", "samples", "a sample's 'to' names a node that does not exist");
        reply_error(rs, &e);
        goto out;
    }
    reply_json(rs, 200, res);
out:
    json_decref(body);
    buf_free(&to);
    buf_free(&lat);
    buf_free(&bw);
}

void h_links_get(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    json_t *m = db_query_json(rq->srv->db, LINKS_MATRIX_SQL, 0, NULL, "links", &e);
    if (!m)
        reply_error(rs, &e);
    else
        reply_json(rs, 200, m);
}
