/* h_progress.c - agents report each step's loss and timings, and the
 * failures that stop a run (the job recovers, recovery.h).
 *
 * A progress report is one statement: checks, the job_steps row, the job's
 * move to running (first report), and the node's current job and step.  A
 * last step's report then asks whether the job is done (every tasklet's
 * last step reported and the final checkpoint stored:
 * checkpoints_job_done), as the final checkpoint's upload does.  The job row is the
 * lock two agents reporting at once queue on, so the last of them sees the
 * other's count (see jobs.tasklets_finished in sql/002_agent.sql). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../common/log.h"
#include "bodies.h"
#include "../store/checkpoints.h"
#include "../http/http.h"
#include "../store/queries.h"
#include "../jobs/recovery.h"
#include "routes.h"
#include "../store/db.h"

/* $1 job, $2 epoch, $3 step, $4 stage, $5 replica, $6 node, $7 loss (or
 * NULL), $8 iteration_s, $9 compute_s, $10 send_s, $11 recv_wait_s,
 * $12 allreduce_s, $13 bubble_s, $14 tokens, $15 eval_s, $16 val_loss,
 * $17 val_micro_batches, $18 stage_link_bytes, $19 sync_bytes, $20
 * ring_prev_loss, $21 checkpoint_error (the last seven NULL when not
 * reported).  One row, or none when the job does not exist: {verdict,
 * state, recorded, stages, replicas, total_steps, plan_epoch}.  Only the
 * first report, last-step rows and a report of a checkpoint the node's
 * disk refused write the job.
 *
 * A checkpoint_error is a fault of the reporting node's uploads, counted
 * once (with the row): in the job's checkpoint_failures and, naming the
 * node, its checkpoint_error and checkpoint_error_node, and in the node's
 * upload_failures and upload_error, until that node stores a checkpoint
 * again (h_checkpoints.c).  The job trains on.
 *
 * A report of the current epoch counts while the job is scheduled,
 * running or recovering (a recovering job's rows from its resume step on
 * are dropped when it is re-planned).  A report of an earlier epoch that
 * arrives late (the agent's queue held it while the server was away) is
 * 'late': kept when its step lies before every later epoch's resume step,
 * so it fills what would otherwise be a hole, and refused as a stale epoch
 * otherwise (that step was trained again).  A late report never moves the
 * job or the node. */
#define PROGRESS_SQL \
    "WITH j AS (SELECT id, state, plan_epoch, total_steps, stages, replicas, stages * (SELECT p.replicas" \
    "   FROM plans p WHERE p.job_id = jobs.id AND p.epoch = jobs.plan_epoch) AS tasklets" \
    "   FROM jobs WHERE id = $1::bigint AND " JOB_MEMBER_SQL("jobs", "$6::bigint") ")," \
    " v AS (SELECT j.*, CASE" \
    "   WHEN $4::int >= j.stages OR $5::int >= j.replicas THEN 'out_of_range'" \
    "   WHEN $2::int > j.plan_epoch THEN 'stale_epoch'" \
    "   WHEN NOT EXISTS (SELECT 1 FROM assignments a JOIN plans p ON p.id = a.plan_id" \
    "     WHERE p.job_id = j.id AND p.epoch = $2::int AND a.stage = $4::int AND a.replica = $5::int" \
    "       AND a.node_id = $6::bigint) THEN 'not_assigned'" \
    "   WHEN $3::bigint >= j.total_steps THEN 'step_out_of_range'" \
    "   WHEN $4::int = j.stages - 1 AND $7::float8 IS NULL THEN 'loss_missing'" \
    "   WHEN $2::int < j.plan_epoch THEN CASE WHEN $3::bigint < (SELECT min(coalesce(p.resume_step, 0))" \
    "     FROM plans p WHERE p.job_id = j.id AND p.epoch > $2::int) THEN 'late' ELSE 'stale_epoch' END" \
    "   WHEN j.state NOT IN ('scheduled', 'running', 'recovering') THEN 'not_running'" \
    "   ELSE 'ok' END AS verdict FROM j)," \
    " ins AS (INSERT INTO job_steps (job_id, step, stage, replica, epoch, node_id, loss, iteration_s," \
    "     compute_s, comm_s, send_s, recv_wait_s, allreduce_s, bubble_s, tokens, eval_s, val_loss," \
    "     val_micro_batches, stage_link_bytes, sync_bytes, ring_prev_loss)" \
    "   SELECT $1::bigint, $3::bigint, $4::int, $5::int, $2::int, $6::bigint, $7::float8, $8::float8," \
    "     $9::float8, $10::float8 + $11::float8 + $12::float8, $10::float8, $11::float8, $12::float8," \
    "     $13::float8, $14::bigint, $15::float8, $16::float8, $17::int, $18::bigint, $19::bigint, $20::float8" \
    "   FROM v WHERE v.verdict IN ('ok', 'late')" \
    "   ON CONFLICT (job_id, step, stage, replica) DO NOTHING RETURNING step)," \
    " upd AS (UPDATE jobs SET" \
    "     tasklets_finished = jobs.tasklets_finished + (ins.step = jobs.total_steps - 1)::int," \
    "     state = 'running'," \
    "     started_at = coalesce(jobs.started_at, now()), updated_at = now()," \
    "     checkpoint_failures = jobs.checkpoint_failures + ($21::text IS NOT NULL)::int," \
    "     checkpoint_error = coalesce('node ' || $6::bigint || ' (' ||" \
    "       (SELECT name FROM nodes WHERE id = $6::bigint) || '): ' || $21::text, jobs.checkpoint_error)," \
    "     checkpoint_error_node = CASE WHEN $21::text IS NULL THEN jobs.checkpoint_error_node ELSE $6::bigint END" \
    "   FROM ins, j WHERE jobs.id = $1::bigint AND jobs.plan_epoch = $2::int" \
    "     AND jobs.state IN ('scheduled', 'running')" \
    "     AND (jobs.state = 'scheduled' OR ins.step = jobs.total_steps - 1 OR $21::text IS NOT NULL)" \
    "   RETURNING jobs.state)," \
    " nd AS (UPDATE nodes SET current_job_id = $1::bigint, current_step = $3::bigint," \
    "     last_heartbeat_at = now(), state = CASE WHEN nodes.state = 'draining' THEN 'draining' ELSE 'busy' END," \
    "     upload_failures = nodes.upload_failures + ($21::text IS NOT NULL AND EXISTS (SELECT 1 FROM ins))::int," \
    "     upload_error = CASE WHEN $21::text IS NOT NULL AND EXISTS (SELECT 1 FROM ins) THEN $21::text" \
    "       ELSE nodes.upload_error END" \
    "   FROM v WHERE nodes.id = $6::bigint AND v.verdict = 'ok' RETURNING 1)" \
    " SELECT json_build_object('verdict', v.verdict, 'state', coalesce((SELECT state FROM upd), v.state)," \
    "   'recorded', EXISTS (SELECT 1 FROM ins), 'stages', v.stages, 'replicas', v.replicas," \
    "   'total_steps', v.total_steps, 'plan_epoch', v.plan_epoch) FROM v"

/* Turns a verdict other than "ok" into its error.  Returns 0 for "ok". */
static int progress_verdict(const json_t *res, const struct body_progress *p, int64_t node, struct shoal_err *e)
{
    const char *verdict = json_string_value(json_object_get(res, "verdict"));
    long long epoch = json_integer_value(json_object_get(res, "plan_epoch"));
    long long stages = json_integer_value(json_object_get(res, "stages"));
    long long replicas = json_integer_value(json_object_get(res, "replicas"));
    long long total = json_integer_value(json_object_get(res, "total_steps"));
    const char *state = json_string_value(json_object_get(res, "state"));
    if (!verdict || strcmp(verdict, "ok") == 0 || strcmp(verdict, "late") == 0)
        return 0;
    if (strcmp(verdict, "out_of_range") == 0)
        return err_set(e, 422, "invalid_field", p->stage >= stages ? "stage" : "replica",
                       "job %lld has %lld stages and %lld replicas; stage %lld replica %lld is not one of its tasklets",
                       (long long)p->job_id, stages, replicas, (long long)p->stage, (long long)p->replica);
    if (strcmp(verdict, "stale_epoch") == 0)
        return err_set(e, 409, "stale_epoch", "epoch", "epoch %lld is not job %lld's current plan epoch (%lld)",
                       (long long)p->epoch, (long long)p->job_id, epoch);
    if (strcmp(verdict, "not_assigned") == 0)
        return err_set(e, 409, "stale_epoch", "stage", "node %lld is not assigned stage %lld replica %lld of job %lld "
                       "in epoch %lld", (long long)node, (long long)p->stage, (long long)p->replica,
                       (long long)p->job_id, (long long)p->epoch);
    if (strcmp(verdict, "step_out_of_range") == 0)
        return err_set(e, 422, "invalid_field", "step", "step must be below job %lld's %lld steps",
                       (long long)p->job_id, total);
    if (strcmp(verdict, "loss_missing") == 0)
        return err_set(e, 422, "missing_field", "loss", "stage %lld is the last stage: its report needs the loss",
                       (long long)p->stage);
    return err_set(e, 409, "conflict", "state", "job %lld is %s; only scheduled, running or recovering jobs take "
                   "progress",
                   (long long)p->job_id, state ? state : "?");
}

void h_progress(struct request *rq, struct response *rs)
{
    struct body_progress p;
    struct shoal_err e;
    char v[20][32], what[40];
    json_t *res = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (body_progress_parse(body, &p, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    const char *params[] = {
        db_param_i64(v[0], p.job_id), db_param_i64(v[1], p.epoch), db_param_i64(v[2], p.step),
        db_param_i64(v[3], p.stage), db_param_i64(v[4], p.replica), db_param_i64(v[5], rq->node_id),
        isnan(p.loss) ? NULL : db_param_f64(v[6], p.loss), db_param_f64(v[7], p.iteration_s),
        db_param_f64(v[8], p.compute_s), db_param_f64(v[9], p.send_s), db_param_f64(v[10], p.recv_wait_s),
        db_param_f64(v[11], p.allreduce_s), db_param_f64(v[12], p.bubble_s), db_param_i64(v[13], p.tokens),
        p.eval_s > 0 ? db_param_f64(v[14], p.eval_s) : NULL, isnan(p.val_loss) ? NULL : db_param_f64(v[15], p.val_loss),
        p.val_micro_batches >= 0 ? db_param_i64(v[16], p.val_micro_batches) : NULL,
        p.stage_link_bytes >= 0 ? db_param_i64(v[17], p.stage_link_bytes) : NULL,
        p.sync_bytes >= 0 ? db_param_i64(v[18], p.sync_bytes) : NULL,
        isnan(p.ring_prev_loss) ? NULL : db_param_f64(v[19], p.ring_prev_loss),
        p.checkpoint_error[0] ? p.checkpoint_error : NULL,
    };
    snprintf(what, sizeof what, "job %lld", (long long)p.job_id);
    res = db_query_json(rq->srv->db, PROGRESS_SQL, 21, params, what, &e);
    if (!res || progress_verdict(res, &p, rq->node_id, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    int recorded = json_is_true(json_object_get(res, "recorded"));
    if (recorded && p.checkpoint_error[0])
        log_warn("node %lld could not keep its checkpoint of job %lld after step %lld (stage %lld), training goes "
                 "on: %s", (long long)rq->node_id, (long long)p.job_id, (long long)p.step, (long long)p.stage,
                 p.checkpoint_error);
    const char *state = json_string_value(json_object_get(res, "state"));
    if (p.step == json_integer_value(json_object_get(res, "total_steps")) - 1 &&
        checkpoints_job_done(rq->srv, p.job_id) == 1)
        state = "succeeded";
    /* A retried report is no error: the first one counted. */
    reply_json(rs, recorded ? 201 : 200, json_pack("{s:b, s:s?}", "recorded", recorded, "state", state));
out:
    json_decref(res);
    json_decref(body);
}

/* $1 job, $2 epoch, $3 stage, $4 replica, $5 node, $6 reason text,
 * $7 --max-recoveries, $8 the neighbour named (node id) or NULL.  A report
 * counts only from the node the job's current plan puts at that tasklet;
 * anything else changes nothing.  A counted report is kept in job_faults
 * (also while the job already recovers from it: a second witness; not
 * while it is being moved off a drained node, whose stop its neighbours
 * see as a failure), with
 * the neighbour it names if that node is one of the tasklet's neighbours
 * in the plan (a stage away in its replica, or in its stage's group), for
 * the recovery thread to judge before it re-plans.  The first report of a
 * running plan moves the job to 'recovering', due at once (the judgement
 * finds out who is gone), or to 'failed' when it has been re-planned
 * --max-recoveries times already, or at once when the failure has a cause
 * that no re-plan heals ($7 = 0). */
#define FAILURE_SQL \
    "WITH j AS (SELECT id, state, plan_epoch, recovery_moved FROM jobs WHERE id = $1::bigint" \
    "   AND " JOB_MEMBER_SQL("jobs", "$5::bigint") ")," \
    " mine AS (SELECT a.plan_id FROM assignments a JOIN plans p ON p.id = a.plan_id" \
    "   WHERE p.job_id = $1::bigint AND p.epoch = $2::int AND a.stage = $3::int AND a.replica = $4::int" \
    "     AND a.node_id = $5::bigint)," \
    " fault AS (INSERT INTO job_faults (job_id, epoch, stage, replica, reporter_node, suspect_node, reason)" \
    "   SELECT $1::bigint, $2::int, $3::int, $4::int, $5::bigint," \
    "     (SELECT s.node_id FROM assignments s WHERE s.plan_id = mine.plan_id AND s.node_id = $8::bigint" \
    "       AND ((s.replica = $4::int AND abs(s.stage - $3::int) = 1) OR (s.stage = $3::int AND s.replica <> $4::int))" \
    "       LIMIT 1), $6" \
    "   FROM mine, j WHERE j.plan_epoch = $2::int" \
    "     AND (j.state IN ('scheduled', 'running') OR (j.state = 'recovering' AND NOT j.recovery_moved))" \
    "   RETURNING suspect_node)," \
    " upd AS (UPDATE jobs SET" JOB_RECOVER_SET("$6", "$7::int", "now()") \
    "   WHERE id = $1::bigint AND plan_epoch = $2::int AND state IN ('scheduled', 'running')" \
    "     AND EXISTS (SELECT 1 FROM mine)" \
    "   RETURNING state)" \
    " SELECT json_build_object('state', coalesce((SELECT state FROM upd), j.state)," \
    "   'suspect_node', (SELECT suspect_node FROM fault)) FROM j"

void h_failure(struct request *rq, struct response *rs)
{
    struct body_failure f;
    struct shoal_err e;
    char v[7][24], what[40], reason[1400];
    json_t *res = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (body_failure_parse(body, &f, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    /* " (peer node M at host:port)", " (peer host:port)" or nothing */
    char peer[320] = "", node[40] = "";
    if (f.peer_node > 0)
        snprintf(node, sizeof node, "node %lld at ", (long long)f.peer_node);
    if (f.peer[0])
        snprintf(peer, sizeof peer, " (peer %s%s)", node, f.peer);
    snprintf(reason, sizeof reason, "stage %lld replica %lld (node %lld): %s%s", (long long)f.stage,
             (long long)f.replica, (long long)rq->node_id, f.reason, peer);
    /* A dataset that cannot be read fails the job now: a re-plan reads the
     * same path again. */
    long max_recoveries = f.cause[0] ? 0 : rq->srv->cfg.max_recoveries;
    const char *params[] = { db_param_i64(v[0], f.job_id), db_param_i64(v[1], f.epoch), db_param_i64(v[2], f.stage),
                             db_param_i64(v[3], f.replica), db_param_i64(v[4], rq->node_id), reason,
                             db_param_i64(v[5], max_recoveries),
                             f.peer_node > 0 ? db_param_i64(v[6], f.peer_node) : NULL };
    snprintf(what, sizeof what, "job %lld", (long long)f.job_id);
    res = db_query_json(rq->srv->db, FAILURE_SQL, 8, params, what, &e);
    if (res) {
        reply_json(rs, 200, json_incref(res));
        recovery_wake(rq->srv->recovery);
    }
    else
        reply_error(rs, &e);
out:
    json_decref(res);
    json_decref(body);
}
