/* h_dataset.c - the dataset a job trains on, proven (sql/013).
 *
 * An agent that opens a dataset by its manifest sends the manifest's
 * SHA-256; the first one sent for a job is recorded, unless the job was
 * created with one (data.sha256, validation.sha256).  The answer is the
 * recorded digest: the agent compares it with its own and fails the job
 * when they differ (agent/train/train.c).  One statement: the checks and the
 * write. */
#include <stdio.h>
#include <string.h>

#include "bodies.h"
#include "../http/http.h"
#include "../store/queries.h"
#include "routes.h"
#include "../store/db.h"

/* $1 job, $2 epoch, $3 node, $4 source, $5 sha256: recorded where none
 * is, under the row lock, so two agents racing record one of theirs. */
#define DATASET_SQL \
    "WITH v AS (SELECT j.id, j.state, j.plan_epoch, CASE" \
    "   WHEN $2::int <> j.plan_epoch THEN 'stale_epoch'" \
    "   WHEN NOT EXISTS (SELECT 1 FROM assignments a JOIN plans p ON p.id = a.plan_id" \
    "     WHERE p.job_id = j.id AND p.epoch = $2::int AND a.node_id = $3::bigint) THEN 'not_assigned'" \
    "   WHEN j.state NOT IN ('scheduled', 'running', 'recovering') THEN 'not_running'" \
    "   ELSE 'ok' END AS verdict FROM jobs j WHERE j.id = $1::bigint AND " JOB_MEMBER_SQL("j", "$3::bigint") ")," \
    " u AS (UPDATE jobs SET" \
    "   data_sha256 = CASE WHEN $4 = 'data' THEN coalesce(jobs.data_sha256, $5) ELSE jobs.data_sha256 END," \
    "   val_sha256 = CASE WHEN $4 = 'validation' THEN coalesce(jobs.val_sha256, $5) ELSE jobs.val_sha256 END" \
    "   FROM v WHERE jobs.id = v.id AND v.verdict = 'ok'" \
    "   RETURNING CASE WHEN $4 = 'data' THEN jobs.data_sha256 ELSE jobs.val_sha256 END AS recorded)" \
    " SELECT json_build_object('verdict', v.verdict, 'state', v.state, 'plan_epoch', v.plan_epoch," \
    "   'recorded', (SELECT recorded FROM u)) FROM v"

void h_dataset(struct request *rq, struct response *rs)
{
    struct body_dataset p;
    struct shoal_err e;
    char v[3][24], what[40];
    json_t *res = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (body_dataset_parse(body, &p, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    const char *params[] = { db_param_i64(v[0], p.job_id), db_param_i64(v[1], p.epoch),
                             db_param_i64(v[2], rq->node_id), p.source, p.sha256 };
    snprintf(what, sizeof what, "job %lld", (long long)p.job_id);
    if (!(res = db_query_json(rq->srv->db, DATASET_SQL, 5, params, what, &e))) {
        reply_error(rs, &e);
        goto out;
    }
    const char *verdict = json_string_value(json_object_get(res, "verdict"));
    const char *state = json_string_value(json_object_get(res, "state"));
    if (verdict && strcmp(verdict, "stale_epoch") == 0)
        reply_fail(rs, 409, "stale_epoch", "epoch", "epoch %lld is not job %lld's current plan epoch (%lld)",
                   (long long)p.epoch, (long long)p.job_id,
                   (long long)json_integer_value(json_object_get(res, "plan_epoch")));
    else if (verdict && strcmp(verdict, "not_assigned") == 0)
        reply_fail(rs, 403, "forbidden", NULL, "node %lld holds no tasklet of job %lld in epoch %lld",
                   (long long)rq->node_id, (long long)p.job_id, (long long)p.epoch);
    else if (verdict && strcmp(verdict, "not_running") == 0)
        reply_fail(rs, 409, "conflict", "state", "job %lld is %s", (long long)p.job_id, state ? state : "?");
    else
        reply_json(rs, 200, json_pack("{s:I, s:s, s:O}", "job_id", (json_int_t)p.job_id, "source", p.source,
                                      "sha256", json_object_get(res, "recorded")));
out:
    json_decref(res);
    json_decref(body);
}
