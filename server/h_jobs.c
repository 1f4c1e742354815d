/* h_jobs.c - operators create, list, inspect and cancel training jobs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "jobspec.h"
#include "routes.h"

#define JOB_JSON \
    "json_build_object('id', j.id, 'name', j.name, 'state', j.state, 'spec', j.spec," \
    " 'plan_epoch', j.plan_epoch, 'created_at', j.created_at, 'updated_at', j.updated_at," \
    " 'finished_at', j.finished_at)"

/* The detail view adds the current plan and the latest reported step. */
#define JOB_DETAIL_JSON \
    "(" JOB_JSON "::jsonb || jsonb_build_object(" \
    " 'plan', (SELECT json_build_object('epoch', p.epoch, 'cost_model', p.cost_model," \
    "   'predicted_iteration_s', p.predicted_iteration_s, 'created_at', p.created_at," \
    "   'breakdown', p.detail->'breakdown', 'baselines', p.detail->'baselines'," \
    "   'assignments', (SELECT coalesce(json_agg(json_build_object('stage', a.stage," \
    "     'replica', a.replica, 'node_id', a.node_id, 'layer_start', a.layer_start," \
    "     'layer_end', a.layer_end) ORDER BY a.stage, a.replica), '[]')" \
    "     FROM assignments a WHERE a.plan_id = p.id))" \
    "   FROM plans p WHERE p.job_id = j.id ORDER BY p.epoch DESC LIMIT 1)," \
    " 'progress', (SELECT json_build_object('step', s.step, 'loss', s.loss," \
    "   'iteration_s', s.iteration_s, 'reported_at', s.reported_at)" \
    "   FROM job_steps s WHERE s.job_id = j.id AND s.loss IS NOT NULL" \
    "   ORDER BY s.step DESC LIMIT 1)))"

static const char *const job_states[] = { "pending", "scheduled", "running", "recovering",
                                          "completed", "failed", "cancelled", NULL };

void h_job_create(struct request *rq, struct response *rs)
{
    struct job_spec spec;
    struct shoal_err e;
    char p_stages[24], p_replicas[24], p_steps[24];
    json_t *job = NULL, *norm = NULL;
    char *spec_text = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (jobspec_parse(body, &spec, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    norm = jobspec_to_json(&spec);
    spec_text = norm ? json_dumps(norm, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    if (!spec_text) {
        reply_fail(rs, 500, "internal", NULL, "out of memory");
        goto out;
    }
    const char *params[] = { spec.name, spec_text, db_param_i64(p_stages, spec.stages),
                             db_param_i64(p_replicas, spec.replicas), db_param_i64(p_steps, spec.steps) };
    job = db_query_json(rq->srv->db, "INSERT INTO jobs AS j (name, spec, stages, replicas, total_steps)"
                                     " VALUES ($1, $2::jsonb, $3, $4, $5) RETURNING " JOB_JSON,
                        5, params, "job", &e);
    if (job)
        reply_json(rs, 201, job);
    else
        reply_error(rs, &e);
out:
    free(spec_text);
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
    json_t *jobs = db_query_json(rq->srv->db, "SELECT coalesce(json_agg(" JOB_JSON " ORDER BY j.id), '[]')"
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
    json_t *job = db_query_json(rq->srv->db, "SELECT " JOB_DETAIL_JSON " FROM jobs j WHERE j.id = $1",
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
        "   AND b.state NOT IN ('completed', 'failed', 'cancelled') RETURNING " JOB_JSON " AS job)"
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
