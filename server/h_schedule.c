/* h_schedule.c - POST /v1/jobs/{id}/schedule: run the scheduler over the
 * live nodes and the latest links, and store the plan as the job's next
 * epoch (or only show it, for a dry run); planner.h does the work.
 *
 * The handler checks everything that can be checked quickly (body, job,
 * nodes, links, enough nodes) on the HTTP thread; the search itself runs on
 * a thread of its own (request_defer), so it holds no HTTP worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/jsonv.h"
#include "http.h"
#include "planner.h"
#include "routes.h"
#include "sched/input.h"

static const char *const cost_models[] = { "shoal", "dtfm", NULL };

#define Q(f) offsetof(struct plan_request, f)
/* name, type, required, nullable, min, max, offset, size, choices, fields */
static const struct jv_field fill_fields[] = {
    { "latency_ms", JV_NUM, 1, 0, 0, 600000, Q(fill_latency_ms), 0, NULL, NULL },
    { "bandwidth_gbps", JV_NUM, 1, 0, 1e-6, 1e5, Q(fill_bandwidth_gbps), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field schedule_fields[] = {
    { "cost_model", JV_STR, 0, 0, 1, 7, Q(cost_model), sizeof(((struct plan_request *)0)->cost_model), cost_models, NULL },
    { "seed", JV_INT, 0, 0, 0, 9007199254740991.0, Q(seed), 0, NULL, NULL },
    { "budget_ms", JV_INT, 0, 0, 10, 120000, Q(budget_ms), 0, NULL, NULL },
    { "candidates", JV_INT, 0, 0, 0, 1e9, Q(candidates), 0, NULL, NULL },
    { "dry_run", JV_BOOL, 0, 0, 0, 0, Q(dry_run), 0, NULL, NULL },
    { "fill_missing_links", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, fill_fields },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef Q

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
    struct plan_request req = { .seed = 1, .budget_ms = 2000, .fill_latency_ms = INPUT_NO_FILL,
                                .fill_bandwidth_gbps = INPUT_NO_FILL };
    struct plan_work *w = NULL;
    json_t *body = NULL;
    snprintf(req.cost_model, sizeof req.cost_model, "shoal");
    /* An empty body means every default. */
    if (rq->body.len > 0) {
        body = request_json(rq, rs);
        if (!body)
            goto out;
        if (jv_object(body, schedule_fields, "", &req, &e) != 0) {
            reply_error(rs, &e);
            goto out;
        }
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
