/* h_health.c - liveness and readiness probes, /metrics, and the documents
 * the server serves as they are (OpenAPI). */
#include <stdlib.h>
#include <string.h>

#include "embedded.h"
#include "http.h"
#include "longpoll.h"
#include "migrate.h"
#include "prom.h"
#include "routes.h"

void h_healthz(struct request *rq, struct response *rs)
{
    (void)rq;
    reply_json(rs, 200, json_pack("{s:s}", "status", "ok"));
}

void h_readyz(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    PGconn *c = db_acquire(rq->srv->db, &e);
    if (!c) {
        reply_error(rs, &e);
        return;
    }
    int current = migrate_is_current(c, &e);
    db_release(rq->srv->db, c);
    if (current < 0)
        reply_error(rs, &e);
    else if (current)
        reply_json(rs, 200, json_pack("{s:s}", "status", "ready"));
    else
        reply_fail(rs, 503, "not_ready", NULL, "the database schema is not migrated yet");
}

/* Writes one gauge family whose samples come from a query returning
 * (label value, count) rows.  Returns 0, or -1 if the database failed. */
static int h_metrics_gauge(PGconn *c, struct buf *out, const char *name, const char *label,
                           const char *help, const char *sql)
{
    struct shoal_err e;
    PGresult *r = db_exec(c, sql, 0, NULL, &e);
    if (!r)
        return -1;
    prom_family(out, name, "gauge", help);
    for (int i = 0; i < PQntuples(r); i++) {
        const char *labels[] = { label, PQgetvalue(r, i, 0), NULL };
        prom_sample(out, name, labels, strtod(PQgetvalue(r, i, 1), NULL));
    }
    PQclear(r);
    return 0;
}

/* Per live job (running or recovering) with reported steps: the latest
 * step, the mean iteration time of its rows (s), tokens per second of the
 * latest step every tasklet reported (tokens summed over replicas, each
 * replica's largest count over its stages, over the slowest iteration;
 * searched among the last 16 steps), and the mean loss of the latest
 * last-stage rows that have one. */
#define JOB_GAUGES_SQL \
    "WITH l AS (SELECT j.id, j.stages, j.replicas," \
    "   (SELECT max(s.step) FROM job_steps s WHERE s.job_id = j.id) AS step" \
    "   FROM jobs j WHERE j.state IN ('running', 'recovering'))" \
    " SELECT l.id, l.step," \
    "  (SELECT avg(s.iteration_s) FROM job_steps s WHERE s.job_id = l.id AND s.step = l.step)," \
    "  (SELECT sum(r.tok) / nullif(max(r.it), 0) FROM (SELECT max(s.tokens) AS tok, max(s.iteration_s) AS it" \
    "     FROM job_steps s WHERE s.job_id = l.id AND s.step = (SELECT c.step FROM job_steps c" \
    "       WHERE c.job_id = l.id AND c.step > l.step - 16 GROUP BY c.step" \
    "       HAVING count(*) >= l.stages * l.replicas ORDER BY c.step DESC LIMIT 1)" \
    "     GROUP BY s.replica) r)," \
    "  (SELECT avg(s.loss) FROM job_steps s WHERE s.job_id = l.id AND s.stage = l.stages - 1" \
    "     AND s.step = (SELECT max(m.step) FROM job_steps m WHERE m.job_id = l.id" \
    "       AND m.stage = l.stages - 1 AND m.loss IS NOT NULL))" \
    " FROM l WHERE l.step IS NOT NULL ORDER BY l.id"

/* Writes the job gauges above, one family per column; a NULL cell (no
 * complete step yet, no loss yet) has no sample.  Returns 0, or -1 if the
 * database failed. */
static int h_metrics_jobs(PGconn *c, struct buf *out)
{
    static const struct { const char *name, *help; } fam[] = {
        { "shoal_job_step", "Latest step a running job reported." },
        { "shoal_job_step_seconds", "Mean iteration time of the latest step's reports, seconds." },
        { "shoal_job_tokens_per_second", "Tokens of the latest complete step over its slowest iteration." },
        { "shoal_job_loss", "Mean training loss of the latest step the last stage reported." },
    };
    struct shoal_err e;
    PGresult *r = db_exec(c, JOB_GAUGES_SQL, 0, NULL, &e);
    if (!r)
        return -1;
    for (int f = 0; f < 4; f++) {
        prom_family(out, fam[f].name, "gauge", fam[f].help);
        for (int i = 0; i < PQntuples(r); i++) {
            if (PQgetisnull(r, i, f + 1))
                continue;
            const char *labels[] = { "job", PQgetvalue(r, i, 0), NULL };
            prom_sample(out, fam[f].name, labels, strtod(PQgetvalue(r, i, f + 1), NULL));
        }
    }
    PQclear(r);
    return 0;
}

void h_metrics(struct request *rq, struct response *rs)
{
    struct server *srv = rq->srv;
    struct shoal_err e;
    int db_up = 0;
    metrics_render(srv->metrics, routes, &rs->text);
    PGconn *c = db_acquire(srv->db, &e);
    if (c) {
        db_up = h_metrics_gauge(c, &rs->text, "shoal_nodes", "state", "Registered nodes by state.",
                    "SELECT s, count(n.id) FROM unnest(ARRAY['idle','busy','draining','lost']) s"
                    " LEFT JOIN nodes n ON n.state = s GROUP BY s ORDER BY s") == 0 &&
                h_metrics_gauge(c, &rs->text, "shoal_jobs", "state", "Jobs by state.",
                    "SELECT s, count(j.id) FROM unnest(ARRAY['pending','scheduled','running',"
                    "'recovering','succeeded','failed','cancelled']) s"
                    " LEFT JOIN jobs j ON j.state = s GROUP BY s ORDER BY s") == 0 &&
                h_metrics_jobs(c, &rs->text) == 0;
    }
    /* Read before releasing so the scrape's own connection counts as in use. */
    int in_use = db_pool_in_use(srv->db);
    db_release(srv->db, c);
    prom_family(&rs->text, "shoal_database_up", "gauge", "1 if the last query from /metrics reached the database.");
    prom_sample(&rs->text, "shoal_database_up", NULL, db_up);
    prom_family(&rs->text, "shoal_db_pool_connections_in_use", "gauge",
                "Database connections taken from this server's pool.");
    prom_sample(&rs->text, "shoal_db_pool_connections_in_use", NULL, in_use);
    prom_family(&rs->text, "shoal_db_pool_connections", "gauge", "Size of this server's database pool.");
    prom_sample(&rs->text, "shoal_db_pool_connections", NULL, db_pool_size(srv->db));
    prom_family(&rs->text, "shoal_assignment_long_polls", "gauge",
                "Assignment long-polls this server holds now.");
    prom_sample(&rs->text, "shoal_assignment_long_polls", NULL, (double)longpoll_waiting(srv->longpoll));
    prom_family(&rs->text, "shoal_assignment_listener_up", "gauge",
                "1 if this server's LISTEN connection for assignment changes is up.");
    prom_sample(&rs->text, "shoal_assignment_listener_up", NULL, longpoll_listening(srv->longpoll));
    rs->status = 200;
    rs->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* Serves an embedded static file by name. */
static void h_static(struct response *rs, const char *name, const char *type)
{
    for (size_t i = 0; i < embedded_static_count; i++) {
        if (strcmp(embedded_static[i].name, name) == 0) {
            buf_append(&rs->text, embedded_static[i].data, embedded_static[i].len);
            rs->status = 200;
            rs->content_type = type;
            return;
        }
    }
    reply_fail(rs, 404, "not_found", NULL, "%s is not built into this server", name);
}

void h_openapi(struct request *rq, struct response *rs)
{
    (void)rq;
    h_static(rs, "openapi.yaml", "application/yaml");
}

void h_index(struct request *rq, struct response *rs)
{
    (void)rq;
    buf_printf(&rs->text, "shoal-server: the API is under /v1 (see /v1/openapi.yaml); "
                          "probes at /healthz and /readyz; metrics at /metrics\n");
    rs->status = 200;
}
