/* h_schedule.c - POST /v1/jobs/{id}/schedule: run the scheduler over the
 * live nodes and the latest links, and store the plan as the job's next
 * epoch (or only show it, for a dry run).
 *
 * The handler checks everything that can be checked quickly (body, job,
 * nodes, links, enough nodes) on the HTTP thread; the search itself runs on
 * a thread of its own (request_defer), so it holds no HTTP worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/jsonv.h"
#include "http.h"
#include "jobspec.h"
#include "queries.h"
#include "routes.h"
#include "sched/input.h"

#define SCHEDULE_RANDOM_PLANS 1000   /* baseline: best of this many random plans */

static const char *const cost_models[] = { "shoal", "dtfm", NULL };

struct schedule_req {
    char cost_model[8];
    int64_t seed;
    int64_t budget_ms;
    int64_t candidates;
    int dry_run;
    double fill_latency_ms;       /* < 0: missing links are an error */
    double fill_bandwidth_gbps;
};

#define Q(f) offsetof(struct schedule_req, f)
/* name, type, required, nullable, min, max, offset, size, choices, fields */
static const struct jv_field fill_fields[] = {
    { "latency_ms", JV_NUM, 1, 0, 0, 600000, Q(fill_latency_ms), 0, NULL, NULL },
    { "bandwidth_gbps", JV_NUM, 1, 0, 1e-6, 1e5, Q(fill_bandwidth_gbps), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field schedule_fields[] = {
    { "cost_model", JV_STR, 0, 0, 1, 7, Q(cost_model), sizeof(((struct schedule_req *)0)->cost_model), cost_models, NULL },
    { "seed", JV_INT, 0, 0, 0, 9007199254740991.0, Q(seed), 0, NULL, NULL },
    { "budget_ms", JV_INT, 0, 0, 10, 120000, Q(budget_ms), 0, NULL, NULL },
    { "candidates", JV_INT, 0, 0, 0, 1e9, Q(candidates), 0, NULL, NULL },
    { "dry_run", JV_BOOL, 0, 0, 0, 0, Q(dry_run), 0, NULL, NULL },
    { "fill_missing_links", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, fill_fields },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef Q

/* Everything the scheduling thread needs; it owns all of it. */
struct schedule_work {
    struct schedule_req req;
    int64_t job_id;
    int available;            /* live nodes offered to the scheduler */
    struct scenario net;      /* those nodes and their links */
    struct sched_problem problem;
};

static void schedule_work_free(struct schedule_work *w)
{
    if (!w)
        return;
    scenario_free(&w->net);
    free(w);
}

/* Live nodes: registered, heartbeat within the timeout, idle or busy in
 * this job (or in a job that has finished, whose agents have not said so
 * yet), and not in the current plan of another live job. */
#define LIVE_NODES_SQL \
    "SELECT coalesce(json_agg(" NODE_JSON " ORDER BY id), '[]') FROM nodes" \
    " WHERE state IN ('idle', 'busy')" \
    "   AND last_heartbeat_at > now() - make_interval(secs => $2::float8)" \
    "   AND (current_job_id IS NULL OR current_job_id = $1 OR NOT EXISTS (SELECT 1 FROM jobs cj" \
    "     WHERE cj.id = current_job_id AND cj.state IN ('scheduled', 'running', 'recovering')))" \
    "   AND NOT EXISTS (SELECT 1 FROM assignments a JOIN plans p ON p.id = a.plan_id" \
    "     JOIN jobs j ON j.id = p.job_id AND p.epoch = j.plan_epoch" \
    "     WHERE a.node_id = nodes.id AND j.id <> $1" \
    "       AND j.state IN ('scheduled', 'running', 'recovering'))"

/* Loads the job, the live nodes and the links, and builds the problem.
 * Returns 0, or -1 with `e` set. */
static int schedule_prepare(struct request *rq, struct schedule_work *w, struct shoal_err *e)
{
    char p_id[24], p_timeout[32], what[40];
    struct job_spec spec;
    json_t *job = NULL, *nodes = NULL, *links = NULL, *doc = NULL;
    int rc = -1;
    db_param_i64(p_id, w->job_id);
    snprintf(what, sizeof what, "job %s", p_id);
    db_param_f64(p_timeout, (double)rq->srv->cfg.heartbeat_timeout);
    const char *params[] = { p_id, p_timeout };
    job = db_query_json(rq->srv->db, "SELECT json_build_object('state', state, 'spec', spec) FROM jobs WHERE id = $1",
                        1, params, what, e);
    if (!job)
        goto out;
    const char *state = json_string_value(json_object_get(job, "state"));
    if (strcmp(state, "pending") != 0 && strcmp(state, "scheduled") != 0 && strcmp(state, "recovering") != 0) {
        err_set(e, 409, "conflict", "state", "job %s is %s; only pending, scheduled or recovering jobs are scheduled",
                p_id, state);
        goto out;
    }
    if (jobspec_parse(json_object_get(job, "spec"), &spec, e) != 0)
        goto out;
    nodes = db_query_json(rq->srv->db, LIVE_NODES_SQL, 2, params, "nodes", e);
    if (!nodes)
        goto out;
    links = db_query_json(rq->srv->db, LINKS_MATRIX_SQL, 0, NULL, "links", e);
    if (!links)
        goto out;
    doc = json_pack("{s:O}", "nodes", nodes);
    w->available = (int)json_array_size(nodes);
    if (spec.stages * spec.replicas > w->available) {
        err_set(e, 409, "not_enough_nodes", "parallelism",
                "job %s needs %lld nodes (%lld stages x %lld replicas) and %d are available "
                "(idle or in this job, heartbeat within %ld s, not draining, not planned for another job)",
                p_id, (long long)(spec.stages * spec.replicas), (long long)spec.stages,
                (long long)spec.replicas, w->available, rq->srv->cfg.heartbeat_timeout);
        goto out;
    }
    if (input_network(doc, links, w->req.fill_latency_ms, w->req.fill_bandwidth_gbps, &w->net, e) != 0)
        goto out;
    struct sched_problem *pb = &w->problem;
    memset(pb, 0, sizeof *pb);
    jobspec_sched_model(&spec, pb);
    pb->n = w->net.n;
    pb->nodes = w->net.nodes;
    pb->latency_ms = w->net.latency_ms;
    pb->bandwidth_gbps = w->net.bandwidth_gbps;
    pb->cost = strcmp(w->req.cost_model, "dtfm") == 0 ? SCHED_COST_DTFM : SCHED_COST_SHOAL;
    rc = sched_problem_check(pb, e);
out:
    json_decref(job);
    json_decref(nodes);
    json_decref(links);
    json_decref(doc);
    return rc;
}

/* The plan's stages as JSON: [{stage, layer_start, layer_end, nodes: [ids]}]. */
static json_t *plan_stages_json(const struct sched_problem *pb, const struct sched_plan *plan)
{
    json_t *stages = json_array();
    for (int s = 0; s < plan->stages; s++) {
        json_t *ids = json_array();
        for (int r = 0; r < plan->replicas; r++)
            json_array_append_new(ids, json_integer(pb->nodes[plan->node[s * plan->replicas + r]].id));
        json_array_append_new(stages, json_pack("{s:i, s:i, s:i, s:o}", "stage", s, "layer_start",
                                                plan->layer_start[s], "layer_end", plan->layer_end[s], "nodes", ids));
    }
    return stages;
}

/* Writes the plan as one statement: a new epoch for the job, the plan row
 * and one assignment per tasklet.  Returns the epoch, or -1 with `e` set
 * (409 if the job left a schedulable state meanwhile). */
static long schedule_store(struct server *srv, const struct schedule_work *w, const struct sched_plan *plan,
                           const json_t *detail, struct shoal_err *e)
{
    struct buf a[5];
    const char *sep;
    char p_id[24], p_cost[32];
    long epoch = -1;
    char *detail_text = json_dumps(detail, JSON_COMPACT | JSON_REAL_PRECISION(15));
    for (int k = 0; k < 5; k++)
        buf_init(&a[k], 16u << 20);
    for (int s = 0; s < plan->stages; s++) {
        for (int r = 0; r < plan->replicas; r++) {
            sep = s == 0 && r == 0 ? "{" : ",";
            buf_printf(&a[0], "%s%d", sep, s);
            buf_printf(&a[1], "%s%d", sep, r);
            buf_printf(&a[2], "%s%lld", sep, (long long)w->problem.nodes[plan->node[s * plan->replicas + r]].id);
            buf_printf(&a[3], "%s%d", sep, plan->layer_start[s]);
            buf_printf(&a[4], "%s%d", sep, plan->layer_end[s]);
        }
    }
    for (int k = 0; k < 5; k++)
        buf_append(&a[k], "}", 1);
    const char *params[] = { db_param_i64(p_id, w->job_id), w->req.cost_model,
                             db_param_f64(p_cost, plan->cost.total_s), detail_text,
                             a[0].data, a[1].data, a[2].data, a[3].data, a[4].data };
    json_t *res = db_query_json(srv->db,
        "WITH j AS (UPDATE jobs SET plan_epoch = plan_epoch + 1, state = 'scheduled', updated_at = now()"
        "   WHERE id = $1 AND state IN ('pending', 'scheduled', 'recovering') RETURNING id, plan_epoch),"
        " p AS (INSERT INTO plans (job_id, epoch, cost_model, predicted_iteration_s, detail)"
        "   SELECT id, plan_epoch, $2, $3, $4::jsonb FROM j RETURNING id, epoch),"
        " a AS (INSERT INTO assignments (plan_id, stage, replica, node_id, layer_start, layer_end)"
        "   SELECT p.id, t.s, t.r, t.n, t.ls, t.le FROM p,"
        "   unnest($5::int[], $6::int[], $7::bigint[], $8::int[], $9::int[]) AS t(s, r, n, ls, le) RETURNING 1)"
        " SELECT json_build_object('epoch', p.epoch, 'assignments', (SELECT count(*) FROM a)) FROM p",
        9, params, "job", e);
    if (res) {
        epoch = (long)json_integer_value(json_object_get(res, "epoch"));
    } else if (e->status == 404) {
        err_set(e, 409, "conflict", "state", "job %s changed state while it was being scheduled", p_id);
    }
    json_decref(res);
    free(detail_text);
    for (int k = 0; k < 5; k++)
        buf_free(&a[k]);
    return epoch;
}

/* The scheduling thread: search, baselines, store, answer; then count the
 * run and its time (metrics.h) before the answer goes out. */
static void schedule_run(struct request *rq, struct response *rs, void *arg)
{
    struct schedule_work *w = arg;
    struct sched_plan plan;
    struct sched_baselines bl;
    struct shoal_err e;
    if (!rq) {
        schedule_work_free(w);
        return;
    }
    double started = http_now();   /* monotonic s */
    enum metrics_schedule_result result = METRICS_SCHEDULE_ERROR;
    memset(&plan, 0, sizeof plan);
    struct sched_options opt = { .seed = (uint64_t)w->req.seed, .budget_ms = (double)w->req.budget_ms,
                                 .candidates = w->req.candidates };
    if (sched_plan_init(&plan, w->problem.stages, w->problem.replicas) != 0) {
        reply_fail(rs, 500, "internal", NULL, "out of memory");
        goto out;
    }
    if (sched_search(&w->problem, &opt, &plan, &e) != 0 ||
        sched_baselines(&w->problem, opt.seed, SCHEDULE_RANDOM_PLANS, &bl, &e) != 0) {
        reply_error(rs, &e);
        goto out;
    }
    const struct sched_breakdown *b = &plan.cost;
    json_t *detail = json_pack("{s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f}, s:{s:f, s:f, s:I}, s:I, s:I, s:I, s:i, s:o}",
        "breakdown", "total_s", b->total_s, "dp_s", b->dp_s, "pipeline_s", b->pipeline_s,
        "compute_s", b->compute_s, "comm_s", b->comm_s, "bubble_s", b->bubble_s, "optimizer_s", b->optimizer_s,
        "baselines", "sequential_s", bl.sequential_s, "best_random_s", bl.best_random_s,
        "random_plans", (json_int_t)bl.random_plans,
        "seed", (json_int_t)w->req.seed, "budget_ms", (json_int_t)w->req.budget_ms,
        "candidates", (json_int_t)w->req.candidates, "nodes_available", w->available,
        "stages", plan_stages_json(&w->problem, &plan));
    long epoch = 0;
    if (detail && !w->req.dry_run)
        epoch = schedule_store(rq->srv, w, &plan, detail, &e);
    if (!detail || epoch < 0) {
        if (!detail)
            err_set(&e, 500, "internal", NULL, "out of memory");
        reply_error(rs, &e);
        json_decref(detail);
        goto out;
    }
    json_object_set_new(detail, "job_id", json_integer(w->job_id));
    json_object_set_new(detail, "dry_run", json_boolean(w->req.dry_run));
    json_object_set_new(detail, "epoch", w->req.dry_run ? json_null() : json_integer(epoch));
    json_object_set_new(detail, "cost_model", json_string(w->req.cost_model));
    json_object_set_new(detail, "predicted_iteration_s", json_real(b->total_s));
    reply_json(rs, w->req.dry_run ? 200 : 201, detail);
    result = w->req.dry_run ? METRICS_SCHEDULE_DRY_RUN : METRICS_SCHEDULE_STORED;
out:
    metrics_schedule_observe(rq->srv->metrics, w->problem.cost, result, http_now() - started);
    sched_plan_free(&plan);
    schedule_work_free(w);
}

void h_job_schedule(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    struct schedule_work *w = calloc(1, sizeof *w);
    json_t *body = NULL;
    if (!w) {
        reply_fail(rs, 500, "internal", NULL, "out of memory");
        return;
    }
    w->job_id = rq->match.ids[0];
    snprintf(w->req.cost_model, sizeof w->req.cost_model, "shoal");
    w->req.seed = 1;
    w->req.budget_ms = 2000;
    w->req.fill_latency_ms = w->req.fill_bandwidth_gbps = INPUT_NO_FILL;
    /* An empty body means every default. */
    if (rq->body.len > 0) {
        body = request_json(rq, rs);
        if (!body)
            goto fail;
        if (jv_object(body, schedule_fields, "", &w->req, &e) != 0) {
            reply_error(rs, &e);
            goto fail;
        }
    }
    if (schedule_prepare(rq, w, &e) != 0) {
        reply_error(rs, &e);
        goto fail;
    }
    if (request_defer(rq, rs, schedule_run, w) != 0)
        goto fail;
    json_decref(body);
    return;
fail:
    json_decref(body);
    schedule_work_free(w);
}
