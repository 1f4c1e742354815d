/* h_nccl.c - the NCCL unique id of a stage's data-parallel group.
 *
 * Replica 0 of a stage creates the id (ncclGetUniqueId) and puts it here;
 * the stage's other replicas poll for it, then all of them open one
 * communicator with it.  The id is 128 opaque bytes, sent as 256 hex
 * digits and stored lowercase (sql/003_nccl.sql).  Both calls are one
 * statement: the checks and the write or read. */
#include <stdio.h>
#include <string.h>

#include "bodies.h"
#include "../http/http.h"
#include "../store/queries.h"
#include "routes.h"
#include "../store/db.h"

/* The checks both statements share, as CTE v with a verdict: $1 job,
 * $2 epoch, $3 stage, $4 node, $5 true when any replica of the stage may
 * ask (a get), false when only replica 0 may (a put). */
#define NCCL_VERDICT_SQL \
    "WITH j AS (SELECT id, state, plan_epoch, stages FROM jobs WHERE id = $1::bigint" \
    "   AND " JOB_MEMBER_SQL("jobs", "$4::bigint") ")," \
    " v AS (SELECT j.*, CASE" \
    "   WHEN $3::int >= j.stages THEN 'out_of_range'" \
    "   WHEN $2::int <> j.plan_epoch THEN 'stale_epoch'" \
    "   WHEN NOT EXISTS (SELECT 1 FROM assignments a JOIN plans p ON p.id = a.plan_id" \
    "     WHERE p.job_id = j.id AND p.epoch = $2::int AND a.stage = $3::int AND a.node_id = $4::bigint" \
    "       AND ($5::boolean OR a.replica = 0)) THEN 'not_assigned'" \
    "   WHEN j.state NOT IN ('scheduled', 'running') THEN 'not_running'" \
    "   ELSE 'ok' END AS verdict FROM j)"

/* $6 the id, lowercase hex.  A re-put (replica 0 restarted its group)
 * replaces the id. */
#define NCCL_PUT_SQL NCCL_VERDICT_SQL "," \
    " ins AS (INSERT INTO nccl_ids (job_id, epoch, stage, unique_id)" \
    "   SELECT $1::bigint, $2::int, $3::int, $6 FROM v WHERE v.verdict = 'ok'" \
    "   ON CONFLICT (job_id, epoch, stage) DO UPDATE SET unique_id = EXCLUDED.unique_id, created_at = now()" \
    "   RETURNING 1)" \
    " SELECT json_build_object('verdict', v.verdict, 'state', v.state, 'stages', v.stages," \
    "   'plan_epoch', v.plan_epoch, 'stored', EXISTS (SELECT 1 FROM ins)) FROM v"

#define NCCL_GET_SQL NCCL_VERDICT_SQL \
    " SELECT json_build_object('verdict', v.verdict, 'state', v.state, 'stages', v.stages," \
    "   'plan_epoch', v.plan_epoch, 'unique_id', (SELECT n.unique_id FROM nccl_ids n" \
    "     WHERE n.job_id = $1::bigint AND n.epoch = $2::int AND n.stage = $3::int)) FROM v"

/* Turns a verdict other than "ok" into its error.  Returns 0 for "ok". */
static int nccl_verdict(const json_t *res, int64_t job, int64_t epoch, int64_t stage, int64_t node,
                        int any_replica, struct shoal_err *e)
{
    const char *verdict = json_string_value(json_object_get(res, "verdict"));
    const char *state = json_string_value(json_object_get(res, "state"));
    long long stages = json_integer_value(json_object_get(res, "stages"));
    long long current = json_integer_value(json_object_get(res, "plan_epoch"));
    if (!verdict || strcmp(verdict, "ok") == 0)
        return 0;
    if (strcmp(verdict, "out_of_range") == 0)
        return err_set(e, 422, "invalid_field", "stage", "job %lld has %lld stages; stage %lld is not one of them",
                       (long long)job, stages, (long long)stage);
    if (strcmp(verdict, "stale_epoch") == 0)
        return err_set(e, 409, "stale_epoch", "epoch", "epoch %lld is not job %lld's current plan epoch (%lld)",
                       (long long)epoch, (long long)job, current);
    if (strcmp(verdict, "not_assigned") == 0)
        return err_set(e, 403, "forbidden", NULL, any_replica
                       ? "node %lld is not assigned stage %lld of job %lld in epoch %lld; only its replicas "
                         "read the group's NCCL id"
                       : "node %lld is not replica 0 of stage %lld of job %lld in epoch %lld; only that node "
                         "puts the group's NCCL id",
                       (long long)node, (long long)stage, (long long)job, (long long)epoch);
    return err_set(e, 409, "conflict", "state", "job %lld is %s; only scheduled or running jobs form NCCL groups",
                   (long long)job, state ? state : "?");
}

void h_nccl_put(struct request *rq, struct response *rs)
{
    struct body_nccl_put p;
    struct shoal_err e;
    char v[4][24], what[40];
    json_t *res = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (body_nccl_put_parse(body, &p, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    const char *params[] = { db_param_i64(v[0], p.job_id), db_param_i64(v[1], p.epoch),
                             db_param_i64(v[2], p.stage), db_param_i64(v[3], rq->node_id), "false", p.unique_id };
    snprintf(what, sizeof what, "job %lld", (long long)p.job_id);
    res = db_query_json(rq->srv->db, NCCL_PUT_SQL, 6, params, what, &e);
    if (!res || nccl_verdict(res, p.job_id, p.epoch, p.stage, rq->node_id, 0, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    reply_json(rs, 200, json_pack("{s:I, s:I, s:I, s:s}", "job_id", (json_int_t)p.job_id, "epoch",
                                  (json_int_t)p.epoch, "stage", (json_int_t)p.stage, "unique_id", p.unique_id));
out:
    json_decref(res);
    json_decref(body);
}

void h_nccl_get(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    long long job = 0, epoch = 0, stage = 0;
    char v[4][24], what[40];
    json_t *res = NULL;
    int has_job, has_epoch, has_stage;
    if ((has_job = request_query_int(rq, rs, "job", 1, INT64_MAX, &job)) < 0 ||
        (has_epoch = request_query_int(rq, rs, "epoch", 0, INT32_MAX, &epoch)) < 0 ||
        (has_stage = request_query_int(rq, rs, "stage", 0, 1023, &stage)) < 0)
        return;
    if (!has_job || !has_epoch || !has_stage) {
        const char *missing = !has_job ? "job" : !has_epoch ? "epoch" : "stage";
        reply_fail(rs, 400, "missing_field", missing, "query parameters job, epoch and stage name the group; "
                   "%s is missing", missing);
        return;
    }
    const char *params[] = { db_param_i64(v[0], job), db_param_i64(v[1], epoch), db_param_i64(v[2], stage),
                             db_param_i64(v[3], rq->node_id), "true" };
    snprintf(what, sizeof what, "job %lld", job);
    res = db_query_json(rq->srv->db, NCCL_GET_SQL, 5, params, what, &e);
    if (!res || nccl_verdict(res, job, epoch, stage, rq->node_id, 1, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    const char *id = json_string_value(json_object_get(res, "unique_id"));
    if (!id) {
        /* Normal while replica 0 is still starting: the agent polls. */
        reply_fail(rs, 404, "not_found", NULL, "replica 0 of stage %lld has not put job %lld's NCCL id for epoch %lld "
                   "yet", stage, job, epoch);
        goto out;
    }
    reply_json(rs, 200, json_pack("{s:s}", "unique_id", id));
out:
    json_decref(res);
}
