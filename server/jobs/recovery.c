/* recovery.c - the recovery thread (recovery.h). */
#include "recovery.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/log.h"
#include "../../common/ticker.h"
#include "../store/db.h"
#include "fault_judge.h"
#include "../http/http.h"
#include "live_resume.h"
#include "planner.h"
#include "../store/queries.h"
#include "../sched/input.h"
#include "../base/server.h"
#include "../http/metrics.h"

struct recovery {
    struct server *srv;
    struct ticker *ticker;     /* runs sweep every RECOVERY_TICK_S and when woken */
    double started;            /* monotonic s, for the start-up grace */
};

/* Monotonic s from which on heartbeats could reach the database without a
 * break: since this server started, and since the database answered again
 * after it last failed the server (an outage, a freeze, a statement that
 * ran out of time).  A node is called lost only a heartbeat timeout after
 * that, so an outage of any length marks no node lost and rolls no job
 * back. */
static double heartbeats_heard_since(const struct recovery *r)
{
    double healthy = db_pool_healthy_since(r->srv->db);
    return healthy > r->started ? healthy : r->started;
}

void recovery_wake(struct recovery *r)
{
    if (r)
        ticker_wake(r->ticker);
}

/* $1 --heartbeat-timeout s, $2 the database's clock when the sweep asked it
 * (db_clock_at_once).  Nodes whose heartbeat was older then go lost: silence
 * is measured up to that moment, not to when this statement runs, so one
 * sent into a frozen database and run when it thaws (the server gave up
 * waiting, the statement stayed queued) marks no node lost for heartbeats
 * the freeze held back. */
#define LOST_NODES_SQL \
    "WITH l AS (UPDATE nodes SET state = 'lost' WHERE state IN ('idle', 'busy')" \
    "   AND last_heartbeat_at < $2::timestamptz - make_interval(secs => $1::float8) RETURNING id, name)" \
    " SELECT coalesce(json_agg(json_build_object('id', id, 'name', name) ORDER BY id), '[]') FROM l"

/* $1 --max-recoveries, $2 --heartbeat-timeout s.  Live jobs whose current
 * plan holds a lost node go to recovery at once: the node is known dead.
 * A trained job (every tasklet reported its last step; it waits for its
 * final checkpoint, a full store say) needs its nodes no more, except one
 * whose part of that checkpoint is still to be stored: only that one's
 * loss re-plans it. */
#define LOST_JOBS_SQL \
    "WITH hit AS (SELECT DISTINCT ON (j.id) j.id," \
    "   'node ' || n.id || ' (' || n.name || ') was lost: no heartbeat for ' || $2::text || ' s' AS reason" \
    "   FROM jobs j JOIN plans p ON p.job_id = j.id AND p.epoch = j.plan_epoch" \
    "   JOIN assignments a ON a.plan_id = p.id JOIN nodes n ON n.id = a.node_id" \
    "   WHERE j.state IN ('scheduled', 'running') AND n.state = 'lost' AND " JOB_NEEDS_PLACE_SQL("j", "p", "a") \
    "   ORDER BY j.id, n.id)," \
    " upd AS (UPDATE jobs SET" JOB_RECOVER_SET("hit.reason", "$1::int", "now()") \
    "   FROM hit WHERE jobs.id = hit.id AND jobs.state IN ('scheduled', 'running')" \
    "   RETURNING jobs.id, jobs.state, hit.reason)" \
    " SELECT coalesce(json_agg(json_build_object('id', id, 'state', state, 'reason', reason) ORDER BY id), '[]')" \
    " FROM upd"

/* Running jobs that are done (trained, their final checkpoint stored) but
 * not yet called so: the report or upload that made them done asks at
 * once (checkpoints_job_done); this catches one whose asking failed. */
#define DONE_JOBS_SQL \
    "WITH d AS (UPDATE jobs r SET state = 'succeeded', finished_at = now(), updated_at = now()" \
    "   WHERE " JOB_DONE_WHERE_SQL("r") " RETURNING r.id)" \
    " SELECT coalesce(json_agg(json_build_object('id', id) ORDER BY id), '[]') FROM d"

/* Jobs whose re-plan is due. */
#define DUE_JOBS_SQL \
    "SELECT coalesce(json_agg(id ORDER BY id), '[]') FROM jobs" \
    " WHERE state = 'recovering' AND (recover_after IS NULL OR recover_after <= now())"

/* $1 job, $2 what its re-plan waits for.  Written only when it changes. */
#define WAITING_SQL \
    "UPDATE jobs SET recovery_waiting = $2, updated_at = now()" \
    " WHERE id = $1::bigint AND state = 'recovering' AND recovery_waiting IS DISTINCT FROM $2 RETURNING id"

/* Runs `sql` and logs each element of its JSON array answer with `what`. */
static void sweep_step(struct server *srv, const char *sql, int n, const char *const *params, const char *what)
{
    struct shoal_err e;
    json_t *res = db_query_json(srv->db, sql, n, params, what, &e);
    if (!res) {
        if (e.status != 503)   /* an outage is logged once, by the pool */
            log_warn("recovery: %s: %s", what, e.message);
        return;
    }
    size_t i;
    json_t *row;
    json_array_foreach(res, i, row) {
        char *text = json_dumps(row, JSON_COMPACT);
        log_warn("recovery: %s %s", what, text ? text : "?");
        free(text);
    }
    json_decref(res);
}

/* Notes in the job what its re-plan waits for; logged when that changes. */
static void note_waiting(struct server *srv, int64_t job, const char *why)
{
    char p_job[24];
    struct shoal_err e;
    const char *params[] = { db_param_i64(p_job, job), why };
    json_t *res = db_query_json(srv->db, WAITING_SQL, 2, params, "job", &e);
    if (res)
        log_warn("recovery: job %lld waits: %s", (long long)job, why);
    json_decref(res);
}

/* Re-plans one recovering job, or notes what it waits for. */
static void replan(struct server *srv, int64_t job)
{
    struct plan_request req = { .seed = 1, .budget_ms = RECOVERY_BUDGET_MS,
                                .fill_latency_ms = RECOVERY_FILL_LATENCY_MS,
                                .fill_bandwidth_gbps = RECOVERY_FILL_BANDWIDTH_GBPS, .only_if_recovering = 1,
                                .fewer_replicas = 1 };
    struct plan_work *w = NULL;
    struct shoal_err e;
    json_t *detail = NULL;
    snprintf(req.cost_model, sizeof req.cost_model, "shoal");
    double started = http_now();
    if (planner_prepare(srv, job, &req, &w, &e) != 0) {
        if (e.status == 409 && strcmp(e.code, "not_enough_nodes") == 0)
            note_waiting(srv, job, e.message);
        else if (e.status != 409 && e.status != 503)
            log_warn("recovery: cannot re-plan job %lld: %s", (long long)job, e.message);
        goto out;
    }
    char waiting[200];
    int live = live_resume_offer(srv, job, w, waiting, sizeof waiting, &e);
    if (live == 1) {   /* the survivors have yet to say what they hold */
        note_waiting(srv, job, waiting);
        goto out;
    }
    if (live < 0 && e.status != 503)
        log_warn("recovery: job %lld: no live resume: %s", (long long)job, e.message);
    detail = planner_run(srv, w, &e);
    metrics_schedule_observe(srv->metrics, planner_cost(w), detail ? METRICS_SCHEDULE_STORED : METRICS_SCHEDULE_ERROR,
                             http_now() - started);
    if (detail)
        log_info("recovery: job %lld re-planned epoch=%lld resume_step=%s nodes_available=%lld replicas=%lld "
                 "micro_batches=%lld", (long long)job, (long long)json_integer_value(json_object_get(detail, "epoch")),
                 json_is_null(json_object_get(detail, "resume_step")) ? "start"
                 : planner_resume_live(w) ? "survivors" : "checkpoint",
                 (long long)json_integer_value(json_object_get(detail, "nodes_available")),
                 (long long)json_integer_value(json_object_get(detail, "replicas")),
                 (long long)json_integer_value(json_object_get(detail, "micro_batches")));
    else if (strcmp(e.code, "relay_unreachable") == 0 || strcmp(e.code, "unreachable") == 0)
        note_waiting(srv, job, e.message);   /* the job shows it: a relay to start, a node to leave out */
    else if (e.status != 409)
        log_warn("recovery: re-plan of job %lld failed: %s", (long long)job, e.message);
out:
    json_decref(detail);
    planner_free(w);
}

/* The database's clock now, as timestamptz text in out[n], when it answers
 * at once (within DB_CLOCK_AT_ONCE_S): one that answers late was frozen or
 * stalled, and heartbeats may have waited behind it.  0 if so, else -1. */
static int db_clock_at_once(struct server *srv, char *out, size_t n)
{
    struct shoal_err e;
    double asked = http_now();
    json_t *at = db_query_json(srv->db, "SELECT to_json(clock_timestamp())", 0, NULL, "clock", &e);
    int ok = json_is_string(at) && http_now() - asked <= DB_CLOCK_AT_ONCE_S;
    if (ok)
        snprintf(out, n, "%s", json_string_value(at));
    json_decref(at);
    return ok ? 0 : -1;
}

static void sweep(struct ticker *t, void *arg)
{
    struct recovery *r = arg;
    struct server *srv = r->srv;
    struct shoal_err e;
    char p_timeout[24], p_max[24], p_at[64];
    const char *params[] = { db_param_i64(p_max, srv->cfg.max_recoveries),
                             db_param_i64(p_timeout, srv->cfg.heartbeat_timeout), p_at };
    if (http_now() - heartbeats_heard_since(r) >= (double)srv->cfg.heartbeat_timeout &&
        db_clock_at_once(srv, p_at, sizeof p_at) == 0)
        sweep_step(srv, LOST_NODES_SQL, 2, params + 1, "node lost");
    sweep_step(srv, LOST_JOBS_SQL, 2, params, "job on a lost node");
    sweep_step(srv, DONE_JOBS_SQL, 0, NULL, "job done, found by the sweep:");
    fault_judge_all(srv);
    json_t *due = db_query_json(srv->db, DUE_JOBS_SQL, 0, NULL, "jobs", &e);
    size_t i;
    json_t *id;
    json_array_foreach(due, i, id) {
        if (ticker_stopping(t))
            break;
        replan(srv, json_integer_value(id));
    }
    if (!due && e.status != 503)
        log_warn("recovery: cannot list recovering jobs: %s", e.message);
    json_decref(due);
}

struct recovery *recovery_start(struct server *srv, struct shoal_err *err)
{
    struct recovery *r = calloc(1, sizeof *r);
    if (!r) {
        err_set(err, 1, "oom", NULL, "out of memory");
        return NULL;
    }
    r->srv = srv;
    r->started = http_now();
    r->ticker = ticker_start("the recovery thread", RECOVERY_TICK_S, sweep, r, err);
    if (!r->ticker) {
        free(r);
        return NULL;
    }
    return r;
}

void recovery_stop(struct recovery *r)
{
    if (!r)
        return;
    ticker_stop(r->ticker);
    free(r);
}
