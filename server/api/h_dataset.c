/* h_dataset.c - the dataset a job trains on, proven by its members
 * (sql/013, sql/019).
 *
 * Every agent that reads the job's data (the nodes of its first and last
 * stages) says what it opened: its manifest's SHA-256, or null for a
 * source without one.  The job's own digest (data.sha256,
 * validation.sha256) is the answer when it was given; else one that every
 * member of an earlier epoch agreed on; else the answer waits (202) until
 * every member of this epoch has spoken, and is theirs when they all said
 * the same.  When they differ the job fails, the reason naming the nodes
 * on each side and blaming none: one member cannot make the others look
 * wrong.  The agent compares the answer with its own copy
 * (agent/train/train.c).  One call: dataset_claim() does the checks and
 * the writes under the job's row lock. */
#include <stdio.h>
#include <string.h>

#include "bodies.h"
#include "../http/http.h"
#include "routes.h"
#include "../store/db.h"

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
                             db_param_i64(v[2], rq->node_id), p.source, p.sha256[0] ? p.sha256 : NULL };
    snprintf(what, sizeof what, "job %lld", (long long)p.job_id);
    if (!(res = db_query_json(rq->srv->db, "SELECT dataset_claim($1::bigint, $2::int, $3::bigint, $4, $5)", 5,
                              params, what, &e))) {
        reply_error(rs, &e);
        goto out;
    }
    const char *verdict = json_string_value(json_object_get(res, "verdict"));
    const char *field = strcmp(p.source, "data") == 0 ? "data.path" : "validation.path";
    if (!verdict || strcmp(verdict, "not_found") == 0)
        reply_fail(rs, 404, "not_found", NULL, "job %lld does not exist", (long long)p.job_id);   /* to a stranger */
    else if (strcmp(verdict, "stale_epoch") == 0)
        reply_fail(rs, 409, "stale_epoch", "epoch", "epoch %lld is not job %lld's current plan epoch (%lld)",
                   (long long)p.epoch, (long long)p.job_id,
                   (long long)json_integer_value(json_object_get(res, "plan_epoch")));
    else if (strcmp(verdict, "not_assigned") == 0)
        reply_fail(rs, 403, "forbidden", NULL, "node %lld holds no tasklet of job %lld in epoch %lld",
                   (long long)rq->node_id, (long long)p.job_id, (long long)p.epoch);
    else if (strcmp(verdict, "not_running") == 0)
        reply_fail(rs, 409, "conflict", "state", "job %lld is %s", (long long)p.job_id,
                   json_string_value(json_object_get(res, "state")));
    else if (strcmp(verdict, "no_split") == 0)
        reply_fail(rs, 422, "invalid_field", "source", "job %lld has no validation.path (no validation, or a "
                   "holdout of data.path): there is no validation dataset to claim", (long long)p.job_id);
    else if (strcmp(verdict, "no_manifest") == 0)
        reply_fail(rs, 422, "invalid_field", "sha256", "job %lld reads %s as text, which has no manifest: claim "
                   "null", (long long)p.job_id, field);
    else if (strcmp(verdict, "disagree") == 0)
        reply_fail(rs, 409, "dataset_disagreement", field, "job %lld failed: %s", (long long)p.job_id,
                   json_string_value(json_object_get(res, "reason")));
    else if (strcmp(verdict, "waiting") == 0)
        reply_json(rs, 202, json_pack("{s:I, s:s, s:O, s:O}", "job_id", (json_int_t)p.job_id, "source", p.source,
                                      "claimed", json_object_get(res, "claimed"), "members",
                                      json_object_get(res, "members")));
    else
        reply_json(rs, 200, json_pack("{s:I, s:s, s:O, s:O}", "job_id", (json_int_t)p.job_id, "source", p.source,
                                      "sha256", json_object_get(res, "sha256"), "by", json_object_get(res, "by")));
out:
    json_decref(res);
    json_decref(body);
}
