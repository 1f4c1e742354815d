/* reach.c - the server's probe of every node's peer port (reach.h). */
#include "reach.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "../../common/ticker.h"
#include "../base/server.h"
#include "../store/db.h"
#include "peer_probe.h"
#include "relay_check.h"

struct reach {
    struct server *srv;
    struct ticker *ticker;
};

/* $1 REACH_RECHECK_S, $2 REACH_BATCH: the nodes due, [{id, name, address,
 * was}] (was: the last verdict on this address, or null), never checked
 * first. */
#define DUE_SQL \
    "SELECT coalesce(json_agg(json_build_object('id', d.id, 'name', d.name, 'address', d.peer_address," \
    "   'was', d.was) ORDER BY d.peer_checked_at NULLS FIRST, d.id), '[]')" \
    " FROM (SELECT id, name, peer_address, peer_checked_at," \
    "   CASE WHEN peer_checked_address = peer_address THEN peer_reachable END AS was FROM nodes" \
    "   WHERE removed_at IS NULL AND state <> 'lost' AND (peer_checked_address IS DISTINCT FROM peer_address" \
    "     OR peer_checked_at < now() - make_interval(secs => $1::float8))" \
    "   ORDER BY peer_checked_at NULLS FIRST, id LIMIT $2::int) d"

/* $1 node, $2 the address probed, $3 reachable, $4 why not (or null).
 * Stored only while that is still the node's address. */
#define STORE_SQL \
    "UPDATE nodes SET peer_reachable = $3::boolean, peer_reach_why = $4, peer_checked_at = now()," \
    " peer_checked_address = $2 WHERE id = $1::bigint AND peer_address = $2 RETURNING id"

static int stopping(void *arg)
{
    return ticker_stopping(arg);
}

/* Stores node `node`'s verdict and logs a change. */
static void store(struct server *srv, const json_t *node, int reachable, const char *why)
{
    struct shoal_err e;
    char p_id[24];
    long long id = (long long)json_integer_value(json_object_get(node, "id"));
    const char *addr = json_string_value(json_object_get(node, "address"));
    const char *params[] = { db_param_i64(p_id, id), addr, reachable ? "true" : "false", reachable ? NULL : why };
    json_t *res = db_query_json(srv->db, STORE_SQL, 4, params, "node", &e);
    if (!res) {
        if (e.status != 404 && e.status != 503)   /* 404: it moved meanwhile; an outage is logged by the pool */
            log_warn("reach: cannot store node %lld's verdict: %s", id, e.message);
        return;
    }
    json_decref(res);
    const json_t *was = json_object_get(node, "was");
    const char *name = json_string_value(json_object_get(node, "name"));
    if (!reachable && !json_is_false(was))
        log_warn("node %lld (%s): the server cannot reach its peer port %s: %s; agents outside its network "
                 "cannot connect to it either (NAT, a firewall, or a wrong --advertise)", id, name, addr, why);
    else if (reachable && json_is_false(was))
        log_info("node %lld (%s): its peer port %s is reachable again", id, name, addr);
}

static void check(struct ticker *t, void *arg)
{
    struct reach *r = arg;
    struct shoal_err e;
    char p_recheck[32], p_batch[24];
    const char *params[] = { db_param_f64(p_recheck, REACH_RECHECK_S), db_param_i64(p_batch, REACH_BATCH) };
    const char *addrs[REACH_BATCH];
    int ok[REACH_BATCH];
    char why[REACH_BATCH][PEER_PROBE_WHY_MAX];
    json_t *due = db_query_json(r->srv->db, DUE_SQL, 2, params, "nodes", &e);
    size_t n = json_array_size(due);   /* at most REACH_BATCH: the query's LIMIT */
    if (!due && e.status != 503)
        log_warn("reach: cannot list the nodes to check: %s", e.message);
    if (n > REACH_BATCH)
        n = REACH_BATCH;
    for (size_t i = 0; i < n; i++)
        addrs[i] = json_string_value(json_object_get(json_array_get(due, i), "address"));
    if (n > 0)
        peer_probe_all_until(addrs, (int)n, PEER_PROBE_TIMEOUT_MS, ok, why, stopping, t);
    for (size_t i = 0; i < n && !ticker_stopping(t); i++)
        store(r->srv, json_array_get(due, i), ok[i] == PEER_PROBE_ANSWERED, why[i]);
    json_decref(due);
    if (!ticker_stopping(t)) {
        struct shoal_err e = { 0 };
        relay_check_due(r->srv->relay);
        if (relay_check_forget_failures(r->srv->relay, r->srv->db, &e) != 0)
            log_warn("reachability: %s", e.message);
    }
}

struct reach *reach_start(struct server *srv, struct shoal_err *err)
{
    struct reach *r = calloc(1, sizeof *r);
    if (!r) {
        err_set(err, 1, "oom", NULL, "out of memory");
        return NULL;
    }
    r->srv = srv;
    r->ticker = ticker_start("the peer-port reachability thread", REACH_TICK_S, check, r, err);
    if (!r->ticker) {
        free(r);
        return NULL;
    }
    return r;
}

void reach_wake(struct reach *r)
{
    if (r)
        ticker_wake(r->ticker);
}

void reach_stop(struct reach *r)
{
    if (!r)
        return;
    ticker_stop(r->ticker);
    free(r);
}
