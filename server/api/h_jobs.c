/* h_jobs.c - operators create, list, inspect and cancel training jobs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../http/http.h"
#include "../jobs/jobspec.h"
#include "routes.h"
#include "../store/db.h"

/* The documents are functions in the database (sql/017_read_models.sql):
 * job_json(jobs) for a job as listed, job_detail_json(id) for one shown. */

static const char *const job_states[] = { "pending", "scheduled", "running", "recovering",
                                          "succeeded", "failed", "cancelled", NULL };

/* Checks resume_from against the job it names: that job exists, trains the
 * same model, and has a checkpoint of every stage at the step; in another
 * number of stages only when its files say which layers they hold (the
 * agents assemble their stages from them).  Checked once, here at creation: checkpoints are never removed, so
 * what holds now holds when the job is scheduled.  Returns 0, or -1 with
 * `e` set (422, field "resume_from"). */
static int job_check_resume(struct server *srv, const struct job_spec *spec, struct shoal_err *e)
{
    char p_job[24], p_step[24];
    struct job_spec from;
    int rc = -1;
    if (spec->resume_job_id <= 0)
        return 0;
    const char *params[] = { db_param_i64(p_job, spec->resume_job_id), db_param_i64(p_step, spec->resume_step) };
    json_t *res = db_query_json(srv->db,
        "SELECT json_build_object('spec', j.spec, 'stored', (SELECT count(*) FROM checkpoints c"
        "   WHERE c.job_id = j.id AND c.step = $2::bigint AND c.stage < j.stages AND c.replica = 0),"
        "  'layered', (SELECT count(*) FROM checkpoints c WHERE c.job_id = j.id AND c.step = $2::bigint"
        "   AND c.stage < j.stages AND c.replica = 0 AND c.layer_start IS NOT NULL))"
        " FROM jobs j WHERE j.id = $1::bigint", 2, params, "job", e);
    if (!res) {
        if (e->status == 404)
            err_set(e, 422, "invalid_field", "resume_from", "resume_from names job %s, which does not exist", p_job);
        return -1;
    }
    if (jobspec_parse(json_object_get(res, "spec"), &from, e) != 0) {
        err_set(e, 500, "internal", NULL, "job %s has a stored spec that no longer parses", p_job);
        goto out;
    }
    long long stored = json_integer_value(json_object_get(res, "stored"));
    if (!model_config_equal(&from.model, &spec->model)) {
        err_set(e, 422, "invalid_field", "resume_from", "job %s trains another model (its architecture and every "
                "field of model must match)", p_job);
    } else if (stored < from.stages) {
        err_set(e, 422, "invalid_field", "resume_from", "job %s has no complete checkpoint at step %s "
                "(%lld of %lld stages stored)", p_job, p_step, stored, (long long)from.stages);
    } else if (from.stages != spec->stages &&
               json_integer_value(json_object_get(res, "layered")) < from.stages) {
        err_set(e, 422, "invalid_field", "resume_from", "job %s has %lld stages and this job %lld, and its "
                "checkpoint files do not say which layers they hold (an older agent uploaded them): "
                "use as many stages", p_job, (long long)from.stages, (long long)spec->stages);
    } else {
        rc = 0;
    }
out:
    json_decref(res);
    return rc;
}

void h_job_create(struct request *rq, struct response *rs)
{
    struct job_spec spec;
    struct shoal_err e;
    char p_stages[24], p_replicas[24], p_steps[24], secret[TOKEN_MAX];
    json_t *job = NULL, *norm = NULL, *costs = NULL;
    char *spec_text = NULL, *costs_text = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (jobspec_parse(body, &spec, &e) != 0 || jobspec_check_paths(&spec, &e) != 0 ||
        job_check_resume(rq->srv, &spec, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    norm = jobspec_to_json(&spec);
    spec_text = norm ? json_dumps(norm, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    if (!spec_text) {
        reply_fail(rs, 500, "internal", NULL, "out of memory");
        goto out;
    }
    /* The secret the job's agents prove to each other: 64 hex digits. */
    if (token_generate("", secret, sizeof secret) != 0) {
        reply_fail(rs, 500, "internal", NULL, "cannot generate the job's peer secret");
        goto out;
    }
    costs = jobspec_model_costs(&spec);
    costs_text = costs ? json_dumps(costs, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    if (!costs_text) {
        reply_fail(rs, 500, "internal", NULL, "out of memory");
        goto out;
    }
    const char *params[] = { spec.name, spec_text, db_param_i64(p_stages, spec.stages),
                             db_param_i64(p_replicas, spec.replicas), db_param_i64(p_steps, spec.steps), secret,
                             costs_text };
    job = db_query_json(rq->srv->db, "INSERT INTO jobs AS j (name, spec, stages, replicas, total_steps, peer_secret,"
                                     " model_costs, data_sha256, val_sha256) VALUES ($1, $2::jsonb, $3, $4, $5, $6,"
                                     " $7::jsonb, $2::jsonb #>> '{data,sha256}', $2::jsonb #>> '{validation,sha256}')"
                                     " RETURNING job_json(j)", 7, params, "job", &e);
    if (job)
        reply_json(rs, 201, job);
    else
        reply_error(rs, &e);
out:
    free(spec_text);
    free(costs_text);
    json_decref(costs);
    json_decref(norm);
    json_decref(body);
}

void h_jobs_list(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    const char *state;
    if (request_query_choice(rq, rs, "state", job_states, &state) != 0)
        return;
    const char *params[] = { state };
    json_t *jobs = db_query_json(rq->srv->db, "SELECT coalesce(json_agg(job_json(j) ORDER BY j.id), '[]')"
                                              " FROM jobs j WHERE $1::text IS NULL OR j.state = $1",
                                 1, params, "jobs", &e);
    if (jobs)
        reply_json(rs, 200, json_pack("{s:o}", "jobs", jobs));
    else
        reply_error(rs, &e);
}

void h_job_get(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    char p_id[24], what[40];
    const char *params[] = { db_param_i64(p_id, rq->match.ids[0]) };
    snprintf(what, sizeof what, "job %s", p_id);
    json_t *job = db_query_json(rq->srv->db, "SELECT job_detail_json(j.id) FROM jobs j WHERE j.id = $1",
                                1, params, what, &e);
    if (job)
        reply_json(rs, 200, job);
    else
        reply_error(rs, &e);
}

void h_job_cancel(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    char p_id[24], what[40];
    const char *params[] = { db_param_i64(p_id, rq->match.ids[0]) };
    snprintf(what, sizeof what, "job %s", p_id);
    /* One statement: cancel if still live, and say what the job was either way. */
    json_t *res = db_query_json(rq->srv->db,
        "WITH before AS (SELECT id, state FROM jobs WHERE id = $1 FOR UPDATE),"
        " done AS (UPDATE jobs j SET state = 'cancelled', updated_at = now(), finished_at = now()"
        "   FROM before b WHERE j.id = b.id"
        "   AND b.state NOT IN ('succeeded', 'failed', 'cancelled') RETURNING job_json(j) AS job)"
        " SELECT json_build_object('was', b.state, 'job', (SELECT job FROM done)) FROM before b",
        1, params, what, &e);
    if (!res) {
        reply_error(rs, &e);
        return;
    }
    json_t *job = json_object_get(res, "job");
    if (json_is_null(job))
        reply_fail(rs, 409, "conflict", "state", "job %s is already %s", p_id,
                   json_string_value(json_object_get(res, "was")));
    else
        reply_json(rs, 200, json_incref(job));
    json_decref(res);
}
