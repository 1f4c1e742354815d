/* h_schedule.c - a job's next plan: POST /v1/jobs/{id}/schedule runs the
 * scheduler over the live nodes and the latest links; POST
 * /v1/jobs/{id}/plan takes an explicit assignment from the operator (to
 * compare plans on real links, or to pin one).  Either stores the plan as
 * the job's next epoch (or only shows it, for a dry run); planner.h does
 * the work.
 *
 * The handlers check the body on the HTTP thread; everything else (the
 * job, the live nodes, their link matrix, which grows with the square of
 * the fleet, then the search or the forced plan's checks) runs on a thread
 * of its own (request_defer), so a large fleet's planning holds no HTTP
 * worker and the heartbeats on it go on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bodies.h"
#include "../http/http.h"
#include "../jobs/planner.h"
#include "routes.h"
#include "../store/db.h"
#include "../http/metrics.h"

/* One planning request, owned by its thread: the job, what was asked, and
 * for a forced plan the operator's assignment (freed by body_plan_free). */
struct plan_call {
    int64_t job_id;
    struct plan_request req;
    struct plan_force force;
    int forced;
};

static void plan_call_free(struct plan_call *c)
{
    if (!c)
        return;
    body_plan_free(&c->force);
    free(c);
}

/* $1 job, $2 status, $3 code, $4 message.  Only a pending job keeps the
 * note: one already planned has a plan to show instead. */
#define REFUSED_SQL \
    "UPDATE jobs SET schedule_refused = jsonb_build_object('status', $2::int, 'code', $3::text," \
    "   'message', $4::text, 'at', now()), updated_at = now()" \
    " WHERE id = $1::bigint AND state = 'pending' RETURNING json_build_object('id', id)"

/* A pending job that could not be planned says why in its detail
 * (schedule_refused) until a plan is stored.  Best effort: the caller's
 * answer carries the same error. */
static void plan_note_refusal(struct server *srv, int64_t job, const struct shoal_err *why)
{
    if (why->status != 409 && why->status != 422)
        return;
    struct shoal_err e;
    char p_job[24], p_status[24];
    const char *params[] = { db_param_i64(p_job, job), db_param_i64(p_status, why->status), why->code, why->message };
    json_decref(db_query_json(srv->db, REFUSED_SQL, 4, params, "pending job", &e));
}

/* The planning thread: the live nodes and their link matrix (which grows
 * with the square of the fleet), then the search, baselines and store, or
 * the forced plan's checks and store; then count a search's run and its
 * time (metrics.h) before the answer goes out. */
static void plan_run(struct request *rq, struct response *rs, void *arg)
{
    struct plan_call *c = arg;
    struct plan_work *w = NULL;
    struct shoal_err e;
    json_t *detail = NULL;
    if (!rq)   /* the thread did not start: only free */
        goto out;
    double started = http_now();   /* monotonic s */
    if (planner_prepare(rq->srv, c->job_id, &c->req, &w, &e) == 0)
        detail = c->forced ? planner_force(rq->srv, w, &c->force, &e) : planner_run(rq->srv, w, &e);
    if (detail) {
        reply_json(rs, c->req.dry_run ? 200 : 201, detail);
    } else {
        if (!c->req.dry_run)
            plan_note_refusal(rq->srv, c->job_id, &e);
        reply_error(rs, &e);
    }
    if (w && !c->forced)
        metrics_schedule_observe(rq->srv->metrics, planner_cost(w),
                                 !detail ? METRICS_SCHEDULE_ERROR
                                 : c->req.dry_run ? METRICS_SCHEDULE_DRY_RUN : METRICS_SCHEDULE_STORED,
                                 http_now() - started);
out:
    planner_free(w);
    plan_call_free(c);
}

/* Parses the body (an empty one means every default for a schedule) and
 * hands the rest to a planning thread.  Returns with the answer in rs, or
 * with the request deferred. */
static void plan_start(struct request *rq, struct response *rs, int forced)
{
    struct shoal_err e;
    json_t *body = NULL;
    struct plan_call *c = calloc(1, sizeof *c);
    if (!c) {
        reply_fail(rs, 500, "internal", NULL, "out of memory");
        return;
    }
    c->job_id = rq->match.ids[0];
    c->forced = forced;
    if ((forced || rq->body.len > 0) && !(body = request_json(rq, rs)))
        goto out;
    if ((forced ? body_plan_parse(body, &c->req, &c->force, &e) : body_schedule_parse(body, &c->req, &e)) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    if (request_defer(rq, rs, plan_run, c) == 0)
        c = NULL;   /* the thread owns it now */
out:
    plan_call_free(c);
    json_decref(body);
}

void h_job_schedule(struct request *rq, struct response *rs)
{
    plan_start(rq, rs, 0);
}

void h_job_plan(struct request *rq, struct response *rs)
{
    plan_start(rq, rs, 1);
}
