/* h_links.c - agents report measured links; operators read the matrix. */
#include <stdio.h>
#include <string.h>

#include "../../common/log.h"
#include "bodies.h"
#include "../http/http.h"
#include "routes.h"
#include "../store/db.h"

void h_links_put(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    struct body_links links;
    char p_self[24];
    json_t *res = NULL;
    json_t *body = request_json(rq, rs);
    memset(&links, 0, sizeof links);
    if (!body)
        goto out;
    if (body_links_parse(body, rq->node_id, &links, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    /* a link only to the relay this server names (it is what plans use;
     * any other would be a made-up row) */
    const char *mine = rq->srv->cfg.relay;
    if (links.relay.address[0] && strcmp(links.relay.address, mine) != 0) {
        if (mine[0])
            reply_fail(rs, 422, "invalid_field", "relay.address", "relay.address names '%s', but this server's relay "
                       "is '%s' (--relay): report the link to that one", links.relay.address, mine);
        else
            reply_fail(rs, 422, "invalid_field", "relay.address", "relay.address names '%s', but this server has no "
                       "relay (--relay)", links.relay.address);
        goto out;
    }
    char *unreachable = json_dumps(links.unreachable, JSON_COMPACT);
    if (!unreachable) {
        reply_fail(rs, 500, "internal", NULL, "out of memory");
        goto out;
    }
    char p_rlat[32], p_rbw[32];
    int relay = links.relay.address[0] != '\0', relay_ok = relay && links.relay.reachable;
    const char *params[] = { db_param_i64(p_self, rq->node_id), links.to.data, links.latency_ms.data,
                             links.bandwidth_gbps.data, links.report_id, unreachable,
                             relay ? links.relay.address : NULL,
                             relay_ok ? db_param_f64(p_rlat, links.relay.latency_ms) : NULL,
                             relay_ok ? db_param_f64(p_rbw, links.relay.bandwidth_gbps) : NULL,
                             relay ? (relay_ok ? "true" : "false") : NULL,
                             relay && links.relay.why[0] ? links.relay.why : NULL };
    /* A named report stores its samples only the first time its name
     * comes (a retry after a lost answer stores nothing); the node's names
     * older than a day are pruned on the way.  Each link tried is noted in
     * link_reach (016_reachability.sql): connected (measured) or not; the
     * link to a relay goes to relay_links (018_link_ways.sql) when its probe
     * worked, and whether it did to relay_reach (020_plan_visible.sql),
     * answering what the node said the time before ("relay_was"). */
    res = db_query_json(rq->srv->db,
        "WITH k AS (INSERT INTO link_reports (node_id, report_id) SELECT $1, $5 WHERE $5::text IS NOT NULL"
        "   ON CONFLICT (node_id, report_id) DO NOTHING RETURNING 1),"
        " fresh AS (SELECT $5::text IS NULL OR EXISTS (SELECT 1 FROM k) AS yes),"
        " ins AS (INSERT INTO link_samples (from_node, to_node, latency_ms, bandwidth_gbps)"
        "   SELECT $1, t, l, b FROM unnest($2::bigint[], $3::float8[], $4::float8[]) AS s(t, l, b), fresh"
        "   WHERE fresh.yes RETURNING 1),"
        " un AS (SELECT (x->>'to')::bigint AS t, x->>'why' AS why FROM json_array_elements($6::json) x, fresh"
        "   WHERE fresh.yes),"
        " reach AS (INSERT INTO link_reach (from_node, to_node, reachable, why)"
        "   SELECT DISTINCT ON (t) $1, t, r, w FROM (SELECT t, true AS r, NULL::text AS w FROM unnest($2::bigint[]) t,"
        "     fresh WHERE fresh.yes UNION ALL SELECT t, false, why FROM un) s ORDER BY t, r DESC"
        "   ON CONFLICT (from_node, to_node) DO UPDATE SET reachable = excluded.reachable, why = excluded.why,"
        "     checked_at = now() RETURNING 1),"
        " rl AS (INSERT INTO relay_links (node_id, relay, latency_ms, bandwidth_gbps)"
        "   SELECT $1, $7, $8::float8, $9::float8 FROM fresh WHERE fresh.yes AND $10::boolean"
        "   ON CONFLICT (node_id, relay) DO UPDATE SET latency_ms = excluded.latency_ms,"
        "     bandwidth_gbps = excluded.bandwidth_gbps, measured_at = now() RETURNING 1),"
        " was AS (SELECT reachable FROM relay_reach WHERE node_id = $1 AND relay = $7),"
        " rr AS (INSERT INTO relay_reach (node_id, relay, reachable, why)"
        "   SELECT $1, $7, $10::boolean, $11 FROM fresh WHERE fresh.yes AND $7::text IS NOT NULL"
        "   ON CONFLICT (node_id, relay) DO UPDATE SET reachable = excluded.reachable, why = excluded.why,"
        "     checked_at = now() RETURNING 1),"
        " old AS (DELETE FROM link_reports WHERE node_id = $1 AND received_at < now() - interval '1 day')"
        " SELECT json_build_object('accepted', (SELECT count(*) FROM ins) + (SELECT count(*) FROM un)"
        "   + (SELECT count(*) FROM rr),"
        "   'duplicate', $5::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM k),"
        "   'relay_was', (SELECT reachable FROM was))", 11, params, "samples", &e);
    free(unreachable);
    if (!res) {
        if (e.status == 409)   /* the foreign key on to_node */
            err_set(&e, 422, "invalid_field", "samples", "a sample's 'to' names a node that does not exist");
        reply_error(rs, &e);
        goto out;
    }
    /* a node that cannot reach the relay cannot be planned through it:
     * said once, when it starts (relay_check.h is the server's own look) */
    if (relay && !relay_ok && !json_is_false(json_object_get(res, "relay_was")) &&
        !json_is_true(json_object_get(res, "duplicate")))
        log_warn("relay %s (--relay) does not answer node %lld's probe: %s; no link of that node is planned "
                 "through it until its probe works", links.relay.address, (long long)rq->node_id,
                 links.relay.why[0] ? links.relay.why : "no reason given");
    else if (relay_ok && json_is_false(json_object_get(res, "relay_was")))
        log_info("relay %s (--relay) answers node %lld's probe again", links.relay.address, (long long)rq->node_id);
    json_object_del(res, "relay_was");
    reply_json(rs, 200, res);
out:
    body_links_free(&links);
    json_decref(body);
}

void h_links_get(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    json_t *m = db_query_json(rq->srv->db, "SELECT links_matrix_json()", 0, NULL, "links", &e);
    if (!m)
        reply_error(rs, &e);
    else
        reply_json(rs, 200, m);
}
