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
/* The forced plan's members besides `stages` (checked by hand). */
static const struct jv_field plan_fields[] = {
    { "cost_model", JV_STR, 0, 0, 1, 7, Q(cost_model), sizeof(((struct plan_request *)0)->cost_model), cost_models, NULL },
    { "dry_run", JV_BOOL, 0, 0, 0, 0, Q(dry_run), 0, NULL, NULL },
    { "fill_missing_links", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, fill_fields },
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

#define PLAN_MAX_STAGES 1024     /* the job spec's bound */
#define PLAN_MAX_REPLICAS 4096

/* An integer member of a stage entry, or -1 when absent; -2 (e set) when
 * it is not an integer in [0, max]. */
static long stage_int(json_t *st, const char *key, const char *path, long max, struct shoal_err *e)
{
    json_t *v = json_object_get(st, key);
    if (!v)
        return -1;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max) {
        err_set(e, json_is_integer(v) ? 422 : 400, "invalid_field", path, "%s.%s must be an integer 0..%ld",
                path, key, max);
        return -2;
    }
    return (long)json_integer_value(v);
}

/* `stages`: [{"stage"?, "nodes": [ids], "layer_start"?, "layer_end"?}], the
 * shape a schedule's answer has, so a dry run's stages can be posted back.
 * Layer ranges come with every stage or with none.  Fills f (arrays the
 * caller frees). */
static int plan_stages_parse(json_t *stages, struct plan_force *f, struct shoal_err *e)
{
    if (!json_is_array(stages))
        return err_set(e, 400, stages ? "invalid_field" : "missing_field", "stages",
                       "stages must be an array of {nodes: [node ids], layer_start, layer_end}");
    size_t P = json_array_size(stages);
    if (P == 0 || P > PLAN_MAX_STAGES)
        return err_set(e, 422, "invalid_field", "stages", "stages must hold 1 to %d entries", PLAN_MAX_STAGES);
    f->stages = (int)P;
    int with_layers = 0;
    int64_t *ids = NULL;
    int *start = calloc(P, sizeof *start), *end = calloc(P, sizeof *end);
    f->layer_start = start;
    f->layer_end = end;
    if (!start || !end)
        return err_set(e, 500, "internal", NULL, "out of memory");
    for (size_t s = 0; s < P; s++) {
        json_t *st = json_array_get(stages, s), *val;
        const char *key;
        char path[32];
        snprintf(path, sizeof path, "stages[%zu]", s);
        if (!json_is_object(st))
            return err_set(e, 400, "invalid_field", path, "%s must be an object", path);
        json_object_foreach(st, key, val) {
            if (strcmp(key, "stage") && strcmp(key, "nodes") && strcmp(key, "layer_start") && strcmp(key, "layer_end"))
                return err_set(e, 400, "unknown_field", path, "unknown field %s.%s", path, key);
        }
        long idx = stage_int(st, "stage", path, PLAN_MAX_STAGES, e);
        long ls = stage_int(st, "layer_start", path, 1L << 20, e), le = stage_int(st, "layer_end", path, 1L << 20, e);
        if (idx == -2 || ls == -2 || le == -2)
            return -1;
        if (idx >= 0 && idx != (long)s)
            return err_set(e, 422, "invalid_field", path, "%s.stage is %ld; stages are listed in order", path, idx);
        if ((ls >= 0) != (le >= 0) || (s > 0 && (ls >= 0) != with_layers))
            return err_set(e, 422, "invalid_field", path, "give layer_start and layer_end with every stage or "
                           "with none (then the cost model splits the layers)");
        with_layers = ls >= 0;
        start[s] = (int)ls;
        end[s] = (int)le;
        json_t *nodes = json_object_get(st, "nodes");
        size_t D = json_array_size(nodes);
        if (!json_is_array(nodes) || D == 0 || D > PLAN_MAX_REPLICAS)
            return err_set(e, json_is_array(nodes) ? 422 : 400, "invalid_field", path,
                           "%s.nodes must be an array of 1 to %d node ids, one per replica", path, PLAN_MAX_REPLICAS);
        if (s == 0) {
            f->replicas = (int)D;
            if (!(ids = calloc(P * D, sizeof *ids)))
                return err_set(e, 500, "internal", NULL, "out of memory");
            f->node_ids = ids;
        } else if ((int)D != f->replicas) {
            return err_set(e, 422, "invalid_field", path, "every stage needs as many nodes (replicas) as stage 0");
        }
        for (size_t r = 0; r < D; r++) {
            json_t *id = json_array_get(nodes, r);
            if (!json_is_integer(id) || json_integer_value(id) < 1)
                return err_set(e, 400, "invalid_field", path, "%s.nodes[%zu] must be a node id", path, r);
            ids[s * D + r] = json_integer_value(id);
        }
    }
    if (!with_layers) {
        free(start);
        f->layer_start = f->layer_end = NULL;
        free(end);
    }
    return 0;
}

void h_job_plan(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    struct plan_request req = { .fill_latency_ms = INPUT_NO_FILL, .fill_bandwidth_gbps = INPUT_NO_FILL };
    struct plan_force f = { 0 };
    struct plan_work *w = NULL;
    json_t *rest = NULL, *detail = NULL;
    snprintf(req.cost_model, sizeof req.cost_model, "shoal");
    json_t *body = request_json(rq, rs);
    if (!body)
        goto out;
    rest = json_deep_copy(body);
    json_object_del(rest, "stages");
    if (jv_object(rest, plan_fields, "", &req, &e) != 0 ||
        plan_stages_parse(json_object_get(body, "stages"), &f, &e) != 0 ||
        planner_prepare(rq->srv, rq->match.ids[0], &req, &w, &e) != 0 ||
        !(detail = planner_force(rq->srv, w, &f, &e))) {
        reply_error(rs, &e);
        goto out;
    }
    reply_json(rs, req.dry_run ? 200 : 201, detail);
out:
    planner_free(w);
    free((void *)f.node_ids);
    free((void *)f.layer_start);
    free((void *)f.layer_end);
    json_decref(rest);
    json_decref(body);
}
