/* ckpt_initial.c - a job's initial weights: its own checkpoint at step 0,
 * uploaded by the admin before the job is first scheduled (checkpoints.h),
 * so that it starts from imported weights (shoal-agent import) instead of
 * the seed's. */
#include <stdio.h>
#include <string.h>

#include "checkpoints.h"
#include "db.h"
#include "../base/server.h"

/* What decides a job's initial weights, one row: its state, whether it
 * has been planned or resumes from another job, its stages and layers,
 * and the step-0 files it has.  NULL with e set (404 for no such job). */
static json_t *initial_facts(struct server *srv, int64_t job_id, char p_job[24], struct shoal_err *e)
{
    char what[40];
    const char *params[] = { db_param_i64(p_job, job_id) };
    snprintf(what, sizeof what, "job %s", p_job);
    return db_query_json(srv->db,
        "SELECT json_build_object('state', j.state,"
        " 'planned', EXISTS (SELECT 1 FROM plans p WHERE p.job_id = j.id),"
        " 'resumes', jsonb_typeof(j.spec->'resume_from') = 'object',"
        " 'stages', j.stages, 'layers', (j.spec->'model'->>'layers')::int,"
        " 'have', (SELECT count(*) FROM checkpoints c WHERE c.job_id = j.id AND c.step = 0 AND c.replica = 0"
        "   AND c.stage < j.stages))"
        " FROM jobs j WHERE j.id = $1::bigint", 1, params, what, e);
}

int checkpoints_initial_open(struct server *srv, int64_t job_id, struct shoal_err *e)
{
    char p_job[24];
    json_t *res = initial_facts(srv, job_id, p_job, e);
    if (!res)
        return -1;
    const char *state = json_string_value(json_object_get(res, "state"));
    int rc = -1;
    if (json_is_true(json_object_get(res, "resumes")))
        err_set(e, 409, "conflict", NULL, "job %s resumes from another job's checkpoint (resume_from); it "
                "cannot also start from initial weights", p_job);
    else if (json_is_true(json_object_get(res, "planned")))
        err_set(e, 409, "conflict", NULL, "job %s has been scheduled; initial weights can be given only before "
                "its first schedule", p_job);
    else if (!state || strcmp(state, "pending") != 0)
        err_set(e, 409, "conflict", NULL, "job %s is %s; initial weights can be given only to a pending job "
                "before its first schedule", p_job, state ? state : "in no known state");
    else
        rc = 0;
    json_decref(res);
    return rc;
}

int checkpoints_initial(struct server *srv, int64_t job_id, int64_t *step, struct shoal_err *e)
{
    char p_job[24];
    *step = -1;
    json_t *res = initial_facts(srv, job_id, p_job, e);
    if (!res)
        return -1;
    long long have = json_integer_value(json_object_get(res, "have"));
    long long stages = json_integer_value(json_object_get(res, "stages"));
    long long layers = json_integer_value(json_object_get(res, "layers"));
    json_decref(res);
    if (have == 0)
        return 0;   /* none: the spec's start */
    if (have < stages)
        return err_set(e, 409, "conflict", NULL, "job %s has initial weights for %lld of %lld stages; upload the "
                       "rest (shoal-agent import) before scheduling it", p_job, have, stages);
    if (checkpoints_latest_valid(srv, job_id, 1, step, e) != 0)
        return -1;
    if (*step != 0)
        return err_set(e, 409, "conflict", NULL, "job %s's initial weights cannot be used: their layers do not "
                       "tile [0, %lld) or a file is missing or differs from its recorded SHA-256 (the server log "
                       "says which)", p_job, layers);
    return 0;
}
