/* h_nodes.c - agents registering and heartbeating; the fleet for operators. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "bodies.h"
#include "../http/http.h"
#include "../store/queries.h"
#include "../jobs/reach.h"
#include "../jobs/recovery.h"
#include "routes.h"
#include "../store/db.h"

static const char *const node_states_all[] = { "idle", "busy", "draining", "lost", NULL };

void h_register(struct request *rq, struct response *rs)
{
    struct body_registration reg;
    struct shoal_err e;
    char token[TOKEN_MAX], hash[TOKEN_HASH_HEX];
    char p_mem[24], p_cnt[24], p_tf[32], p_cores[24], p_ram[24];
    json_t *node = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (body_registration_parse(body, &reg, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    if (token_generate("shoal_node_", token, sizeof token) != 0) {
        reply_fail(rs, 500, "internal", NULL, "cannot generate a node token");
        goto out;
    }
    token_sha256_hex(token, strlen(token), hash);
    const char *params[] = {
        reg.name, hash, reg.peer_address, reg.region, reg.gpu_model,
        db_param_i64(p_mem, reg.gpu_memory_bytes), db_param_i64(p_cnt, reg.gpu_count),
        db_param_f64(p_tf, reg.tflops), db_param_i64(p_cores, reg.cpu_cores),
        db_param_i64(p_ram, reg.ram_bytes), reg.policy[0] ? reg.policy : NULL,
    };
    node = db_query_json(rq->srv->db,
        "INSERT INTO nodes (name, token_hash, peer_address, region, gpu_model,"
        " gpu_memory_bytes, gpu_count, tflops, cpu_cores, ram_bytes, policy)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb) RETURNING node_json(nodes)",
        11, params, "node", &e);
    if (!node) {
        reply_error(rs, &e);
        goto out;
    }
    reach_wake(rq->srv->reach);   /* its peer port: reachable from outside? */
    reply_json(rs, 201, json_pack("{s:O, s:s, s:O}", "node_id", json_object_get(node, "id"),
                                  "token", token, "node", node));
out:
    json_decref(node);
    json_decref(body);
}

void h_heartbeat(struct request *rq, struct response *rs)
{
    struct body_heartbeat hb;
    struct shoal_err e;
    char p_id[24], p_job[24], p_step[24], p_hjob[24], p_hls[24], p_hle[24], p_hstep[24];
    json_t *node = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (body_heartbeat_parse(body, &hb, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    const char *params[] = {
        db_param_i64(p_id, rq->node_id), hb.state,
        hb.job_id > 0 ? db_param_i64(p_job, hb.job_id) : NULL,
        hb.step >= 0 ? db_param_i64(p_step, hb.step) : NULL,
        hb.peer_address[0] ? hb.peer_address : NULL,
        hb.held_job_id ? db_param_i64(p_hjob, hb.held_job_id) : NULL,
        hb.held_job_id ? db_param_i64(p_hls, hb.held_layer_start) : NULL,
        hb.held_job_id ? db_param_i64(p_hle, hb.held_layer_end) : NULL,
        hb.held_job_id ? db_param_i64(p_hstep, hb.held_step) : NULL,
        hb.policy[0] ? hb.policy : NULL,
    };
    /* A draining node keeps draining whatever it reports: the operator said
     * so.  The commit does not wait for the WAL flush (synchronous_commit
     * off for this transaction only): a heartbeat is rewritten every few
     * seconds, so a database crash can lose at most the last fraction of a
     * second of them, and not waiting is most of a heartbeat's cost. */
    /* An idle heartbeat also says what the node holds for a live resume
     * (live_resume.c); one holding a stage of a recovering job wakes the
     * re-plan that waits for it. */
    /* The jobs it names must be its own: a node that holds no tasklet of a
     * job may not claim to train it or hold its state (nothing is written).
     * Its peer address changes only in an idle heartbeat (a restarted
     * agent's first, which stands for its registration), never while it
     * says it trains: its neighbours dial the address of their plan. */
    json_t *res = db_query_json(rq->srv->db,
        "WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),"
        " c AS (SELECT ($3::bigint IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE id = $3::bigint AND "
        JOB_MEMBER_SQL("jobs", "$1::bigint") ")) AS job_ok,"
        "   ($6::bigint IS NULL OR EXISTS (SELECT 1 FROM jobs WHERE id = $6::bigint AND "
        JOB_MEMBER_SQL("jobs", "$1::bigint") ")) AS held_ok,"
        "   ($5::text IS NULL OR $2 = 'idle'"
        "     OR $5::text = (SELECT peer_address FROM nodes WHERE id = $1)) AS addr_ok),"
        " claim AS (SELECT job_ok, held_ok, addr_ok, job_ok AND held_ok AND addr_ok AS ok FROM c),"
        " u AS (UPDATE nodes SET last_heartbeat_at = now(),"
        " state = CASE WHEN state = 'draining' THEN 'draining' ELSE $2 END,"
        " current_job_id = $3, current_step = $4, peer_address = coalesce($5, peer_address),"
        " held_job_id = $6::bigint, held_layer_start = $7::int, held_layer_end = $8::int, held_step = $9::bigint,"
        " held_at = CASE WHEN $2 = 'idle' THEN now() ELSE held_at END, policy = coalesce($10::jsonb, policy)"
        " FROM async, claim WHERE id = $1 AND removed_at IS NULL AND claim.ok RETURNING node_json(nodes) AS node,"
        "   EXISTS (SELECT 1 FROM jobs j WHERE j.id = $6::bigint AND j.state = 'recovering') AS wake)"
        " SELECT json_build_object('job_ok', claim.job_ok, 'held_ok', claim.held_ok, 'addr_ok', claim.addr_ok,"
        "   'node', (SELECT node FROM u),"
        "   'wake', (SELECT wake FROM u)) FROM claim",
        10, params, "node", &e);
    int job_ok = !res || json_is_true(json_object_get(res, "job_ok"));
    if (res && job_ok && json_is_false(json_object_get(res, "addr_ok"))) {
        json_decref(res);
        reply_fail(rs, 422, "invalid_field", "peer_address", "node %lld may change its peer_address only in an "
                   "idle heartbeat (as a restarted agent does), not while it says it is %s", (long long)rq->node_id,
                   hb.state);
        goto out;
    }
    if (!job_ok || (res && !json_is_true(json_object_get(res, "held_ok")))) {
        json_decref(res);
        reply_fail(rs, 422, "invalid_field", job_ok ? "held.job_id" : "job_id", "node %lld holds no tasklet of job %lld",
                   (long long)rq->node_id, (long long)(job_ok ? hb.held_job_id : hb.job_id));
        goto out;
    }
    /* "node" is null when no row was updated: no such node, or a removed one */
    node = json_is_object(json_object_get(res, "node")) ? json_incref(json_object_get(res, "node")) : NULL;
    if (res && !node)
        err_set(&e, 404, "not_found", NULL, "node %lld does not exist, or an operator removed it (DELETE "
                "/v1/nodes/{id}); delete this agent's <data-dir>/node.json to register it anew",
                (long long)rq->node_id);
    if (res && json_is_true(json_object_get(res, "wake")))
        recovery_wake(rq->srv->recovery);
    json_decref(res);
    if (!node) {
        if (e.status == 409)   /* the foreign key on current_job_id */
            err_set(&e, 422, "invalid_field", "job_id", "job %s does not exist", p_job);
        reply_error(rs, &e);
        goto out;
    }
    /* a new address (a restarted agent) is checked at once */
    if (json_is_null(json_object_get(json_object_get(node, "reachable"), "from_server")))
        reach_wake(rq->srv->reach);
    reply_json(rs, 200, json_pack("{s:O, s:O, s:O}", "node_id", json_object_get(node, "id"),
                                  "state", json_object_get(node, "state"),
                                  "peer_address", json_object_get(node, "peer_address")));
out:
    json_decref(node);
    json_decref(body);
}

void h_nodes_list(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    const char *state;
    if (request_query_choice(rq, rs, "state", node_states_all, &state) != 0)
        return;
    const char *params[] = { state };
    json_t *nodes = db_query_json(rq->srv->db, "SELECT coalesce(json_agg(node_view_json(nodes) ORDER BY id), '[]')"
                                               " FROM nodes WHERE removed_at IS NULL AND ($1::text IS NULL OR state = $1)",
                                  1, params, "nodes", &e);
    if (nodes)
        reply_json(rs, 200, json_pack("{s:o}", "nodes", nodes));
    else
        reply_error(rs, &e);
}

/* Runs `sql` (one $1 = the node id from the path, returning a node) and
 * answers with the node; where it returns nothing, 409 with `refusal` (a
 * printf format taking the id and the node's state) when the node is in
 * the fleet, else 404. */
static void h_node_one(struct request *rq, struct response *rs, const char *sql, const char *refusal)
{
    struct shoal_err e;
    char p_id[24], what[40];
    const char *params[] = { db_param_i64(p_id, rq->match.ids[0]) };
    snprintf(what, sizeof what, "node %s", p_id);
    json_t *node = db_query_json(rq->srv->db, sql, 1, params, what, &e);
    if (!node && e.status == 404 && refusal) {
        struct shoal_err e2;
        json_t *st = db_query_json(rq->srv->db, "SELECT to_json(state) FROM nodes WHERE id = $1 AND removed_at IS NULL",
                                   1, params, what, &e2);
        if (st) {
            char msg[300];
            snprintf(msg, sizeof msg, refusal, p_id, json_string_value(st));
            json_decref(st);
            reply_fail(rs, 409, "conflict", "state", "%s", msg);
            return;
        }
    }
    if (node)
        reply_json(rs, 200, node);
    else
        reply_error(rs, &e);
}

void h_node_get(struct request *rq, struct response *rs)
{
    h_node_one(rq, rs, "SELECT node_view_json(nodes) FROM nodes WHERE id = $1 AND removed_at IS NULL", NULL);
}

/* $1 node.  Drains it and moves every live job whose current plan still
 * needs it to recovery (JOB_MOVE_SET): the re-plan leaves the node out and
 * goes on from the survivors' step where it can.  {node, moved: [job ids]}. */
#define DRAIN_SQL \
    "WITH n AS (UPDATE nodes SET state = 'draining' WHERE id = $1 AND removed_at IS NULL" \
    "   RETURNING id, name, node_json(nodes) AS doc)," \
    " moved AS (UPDATE jobs j SET" JOB_MOVE_SET("'node ' || n.id || ' (' || n.name || ') is draining'") \
    "   FROM n WHERE j.state IN ('scheduled', 'running') AND EXISTS (SELECT 1 FROM plans p" \
    "     JOIN assignments a ON a.plan_id = p.id WHERE p.job_id = j.id AND p.epoch = j.plan_epoch" \
    "       AND a.node_id = n.id AND " JOB_NEEDS_PLACE_SQL("j", "p", "a") ")" \
    "   RETURNING j.id)" \
    " SELECT json_build_object('node', n.doc, 'moved', (SELECT coalesce(json_agg(id ORDER BY id), '[]')" \
    "   FROM moved)) FROM n"

/* A draining node takes no new tasklet; its agent is told in every
 * heartbeat's answer (state), and it stays draining whatever it reports.
 * Its running job moves off it at once: its tasklets stop at the step in
 * flight and the recovery thread re-plans the job without it. */
void h_node_drain(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    char p_id[24], what[40];
    const char *params[] = { db_param_i64(p_id, rq->match.ids[0]) };
    snprintf(what, sizeof what, "node %s", p_id);
    json_t *res = db_query_json(rq->srv->db, DRAIN_SQL, 1, params, what, &e);
    if (!res) {
        reply_error(rs, &e);
        return;
    }
    json_t *moved = json_object_get(res, "moved");
    if (json_array_size(moved) > 0) {
        char *ids = json_dumps(moved, JSON_COMPACT);
        log_info("node %s drained: job%s %s move%s off it", p_id, json_array_size(moved) == 1 ? "" : "s",
                 ids ? ids : "?", json_array_size(moved) == 1 ? "s" : "");
        free(ids);
        recovery_wake(rq->srv->recovery);
    }
    reply_json(rs, 200, json_incref(json_object_get(res, "node")));
    json_decref(res);
}

/* Back to the fleet: idle until its next heartbeat says what it does. */
void h_node_undrain(struct request *rq, struct response *rs)
{
    h_node_one(rq, rs, "UPDATE nodes SET state = 'idle' WHERE id = $1 AND removed_at IS NULL AND state = 'draining'"
               " RETURNING node_json(nodes)", "node %s is %s, not draining: nothing to undrain");
}

/* A lost node's record leaves the fleet (014_node_removal.sql); the
 * history that names it keeps its id. */
void h_node_remove(struct request *rq, struct response *rs)
{
    h_node_one(rq, rs, "UPDATE nodes SET removed_at = now() WHERE id = $1 AND removed_at IS NULL AND state = 'lost'"
               " RETURNING node_json(nodes)", "node %s is %s: only a lost node's record is removed; stop its agent "
               "first (it is lost --heartbeat-timeout s after its last heartbeat), or drain it (POST "
               "/v1/nodes/{id}/drain)");
}
