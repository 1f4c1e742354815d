/* h_schedule.c - a job's next plan: POST /v1/jobs/{id}/schedule runs the
 * scheduler over the live nodes and the latest links; POST
 * /v1/jobs/{id}/plan takes an explicit assignment from the operator (to
 * compare plans on real links, or to pin one).  Either stores the plan as
 * the job's next epoch (or only shows it, for a dry run); planner.h does
 * the work.
 *
 * The schedule handler checks everything that can be checked quickly
 * (body, job, nodes, links, enough nodes) on the HTTP thread; the search
 * itself runs on a thread of its own (request_defer), so it holds no HTTP
 * worker.  A forced plan needs no search and is answered at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bodies.h"
#include "http.h"
#include "planner.h"
#include "routes.h"

/* The scheduling thread: search, baselines, store, answer; then count the
 * run and its time (metrics.h) before the answer goes out. */
static void schedule_run(struct request *rq, struct response *rs, void *arg)
{
    struct plan_work *w = arg;
    struct shoal_err e;
    if (!rq) {
        planner_free(w);
        return;
    }
    double started = http_now();   /* monotonic s */
    enum metrics_schedule_result result = METRICS_SCHEDULE_ERROR;
    json_t *detail = planner_run(rq->srv, w, &e);
    if (detail) {
        int dry = json_is_true(json_object_get(detail, "dry_run"));
        result = dry ? METRICS_SCHEDULE_DRY_RUN : METRICS_SCHEDULE_STORED;
        reply_json(rs, dry ? 200 : 201, detail);
    } else {
        reply_error(rs, &e);
    }
    metrics_schedule_observe(rq->srv->metrics, planner_cost(w), result, http_now() - started);
    planner_free(w);
}

void h_job_schedule(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    struct plan_request req;
    struct plan_work *w = NULL;
    json_t *body = NULL;
    /* An empty body means every default. */
    if (rq->body.len > 0 && !(body = request_json(rq, rs)))
        goto out;
    if (body_schedule_parse(body, &req, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    if (planner_prepare(rq->srv, rq->match.ids[0], &req, &w, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    if (request_defer(rq, rs, schedule_run, w) == 0)
        w = NULL;   /* the thread owns it now */
out:
    planner_free(w);
    json_decref(body);
}

void h_job_plan(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    struct plan_request req;
    struct plan_force f = { 0 };
    struct plan_work *w = NULL;
    json_t *detail = NULL;
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    if (body_plan_parse(body, &req, &f, &e) != 0 ||
        planner_prepare(rq->srv, rq->match.ids[0], &req, &w, &e) != 0 ||
        !(detail = planner_force(rq->srv, w, &f, &e))) {
        reply_error(rs, &e);
        goto out;
    }
    reply_json(rs, req.dry_run ? 200 : 201, detail);
out:
    planner_free(w);
    body_plan_free(&f);
    json_decref(body);
}
