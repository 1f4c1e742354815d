/* sched.c - the library's entry points besides the search: plans, problem
 * checks, costing a given assignment, and the baselines. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int sched_plan_init(struct sched_plan *plan, int stages, int replicas)
{
    memset(plan, 0, sizeof *plan);
    plan->stages = stages;
    plan->replicas = replicas;
    plan->node = calloc((size_t)stages * (size_t)replicas, sizeof(int));
    plan->layer_start = calloc((size_t)stages, sizeof(int));
    plan->layer_end = calloc((size_t)stages, sizeof(int));
    if (!plan->node || !plan->layer_start || !plan->layer_end) {
        sched_plan_free(plan);
        return -1;
    }
    return 0;
}

void sched_plan_free(struct sched_plan *plan)
{
    free(plan->node);
    free(plan->layer_start);
    free(plan->layer_end);
    memset(plan, 0, sizeof *plan);
}

int sched_problem_check(const struct sched_problem *pb, struct shoal_err *err)
{
    int n = pb->n, P = pb->stages, D = pb->replicas;
    if (P < 1 || D < 1 || D > MATCH_MAX_D)
        return err_set(err, 422, "invalid_field", "parallelism", "stages must be >= 1 and replicas 1..%d",
                       MATCH_MAX_D);
    if ((long)P * D > n)
        return err_set(err, 409, "not_enough_nodes", "parallelism",
                       "the job needs %d nodes (%d stages x %d replicas) and %d are available",
                       P * D, P, D, n);
    for (int i = 0; i < n; i++) {
        if (!(pb->nodes[i].tflops >= 1e-6) && pb->cost == SCHED_COST_SHOAL)
            return err_set(err, 422, "invalid_field", "tflops", "node %lld has no measured speed",
                           (long long)pb->nodes[i].id);
        for (int j = 0; j < n; j++) {
            if (i == j)
                continue;
            double lat = pb->latency_ms[i * n + j], bw = pb->bandwidth_gbps[i * n + j];
            if (!isfinite(lat) || lat < 0 || !isfinite(bw) || bw <= 0)
                return err_set(err, 422, "invalid_field", "links",
                               "link %lld -> %lld needs latency >= 0 ms and bandwidth > 0 Gbit/s",
                               (long long)pb->nodes[i].id, (long long)pb->nodes[j].id);
        }
    }
    if (pb->cost == SCHED_COST_DTFM && !(pb->c_dp_gb >= 0 && pb->c_pp_gb >= 0))
        return err_set(err, 422, "invalid_field", "cost", "dtfm needs c_dp and c_pp >= 0 GB");
    if (pb->cost == SCHED_COST_SHOAL) {
        const struct sched_model *m = &pb->model;
        if (m->layers < P || m->d_model < 1 || m->heads < 1 || m->context_length < 1 ||
            m->vocab_size < 1 || m->micro_batches < 1 || m->micro_batch_size < 1 || m->act_bytes < 1)
            return err_set(err, 422, "invalid_field", "model",
                           "the shoal cost model needs the model's shapes, layers >= stages, and the batch");
        struct model_config f = sched_model_family(m);
        const char *field;
        char msg[200];
        if ((unsigned)m->arch >= MODEL_ARCH_COUNT || model_config_check(&f, &field, msg, sizeof msg) != 0)
            return err_set(err, 422, "invalid_field", "model", "the model cannot be costed: %s",
                           (unsigned)m->arch >= MODEL_ARCH_COUNT ? "unknown architecture" : msg);
    }
    return 0;
}

/* Checks the plan's nodes (and, with layers_given, its layer ranges) and
 * costs it. */
static int evaluate(const struct sched_problem *pb, struct sched_plan *plan, int layers_given, struct shoal_err *err)
{
    struct sched_ctx cx;
    int P = pb->stages, D = pb->replicas, rc = -1;
    if (sched_problem_check(pb, err) != 0)
        return -1;
    if (plan->stages != P || plan->replicas != D)
        return err_set(err, 422, "invalid_field", "assignments", "the plan must have %d stages x %d replicas", P, D);
    char *seen = calloc((size_t)pb->n, 1);
    if (!seen)
        return err_set(err, 500, "internal", NULL, "out of memory");
    for (int t = 0; t < P * D; t++) {
        int x = plan->node[t];
        if (x < 0 || x >= pb->n) {
            err_set(err, 422, "invalid_field", "assignments", "tasklet %d names an unknown node", t);
            goto out;
        }
        if (seen[x]++) {
            err_set(err, 422, "invalid_field", "assignments", "node %lld has two tasklets",
                    (long long)pb->nodes[x].id);
            goto out;
        }
    }
    for (int s = 0; layers_given && s < P; s++) {
        int want = s == 0 ? 0 : plan->layer_end[s - 1];
        if (plan->layer_start[s] != want || plan->layer_end[s] <= plan->layer_start[s] ||
            (s == P - 1 && plan->layer_end[s] != pb->model.layers)) {
            err_set(err, 422, "invalid_field", "layers", "stage %d's layer_start %d and layer_end %d: stages must "
                    "hold at least one layer each, in order, and together all %lld", s, plan->layer_start[s],
                    plan->layer_end[s],
                    (long long)pb->model.layers);
            goto out;
        }
    }
    if (ctx_init(&cx, pb) != 0) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    cost_plan(&cx, plan, layers_given);
    ctx_free(&cx);
    rc = 0;
out:
    free(seen);
    return rc;
}

int sched_evaluate(const struct sched_problem *pb, struct sched_plan *plan, struct shoal_err *err)
{
    return evaluate(pb, plan, 0, err);
}

int sched_predict(const struct sched_problem *pb, struct sched_plan *plan, struct shoal_err *err)
{
    return evaluate(pb, plan, 1, err);
}

int sched_baseline_sequential(const struct sched_problem *pb, struct sched_plan *plan, struct shoal_err *err)
{
    for (int t = 0; t < pb->stages * pb->replicas; t++)
        plan->node[t] = t;
    return sched_evaluate(pb, plan, err);
}

int sched_baseline_random(const struct sched_problem *pb, uint64_t seed, struct sched_plan *plan,
                          struct shoal_err *err)
{
    int n = pb->n;
    int *perm = malloc(sizeof(int) * (size_t)n);
    if (!perm)
        return err_set(err, 500, "internal", NULL, "out of memory");
    uint64_t rng = seed;
    rng_permutation(perm, n, &rng);
    for (int t = 0; t < pb->stages * pb->replicas; t++)
        plan->node[t] = perm[t];
    free(perm);
    return sched_evaluate(pb, plan, err);
}

int baselines_run(const struct sched_ctx *cx, uint64_t seed, long random_plans, struct sched_baselines *out,
                  int *best_node)
{
    const struct sched_problem *pb = cx->pb;
    struct sched_plan plan;
    int n = pb->n, T = pb->stages * pb->replicas, rc = -1;
    int *perm = malloc(sizeof(int) * (size_t)n);
    if (!perm || sched_plan_init(&plan, pb->stages, pb->replicas) != 0) {
        free(perm);
        return -1;
    }
    for (int t = 0; t < T; t++)
        plan.node[t] = t;
    cost_plan(cx, &plan, 0);
    out->sequential_s = plan.cost.total_s;
    out->best_random_s = out->sequential_s;
    out->random_plans = random_plans;
    double best = out->sequential_s;
    if (best_node)
        memcpy(best_node, plan.node, sizeof(int) * (size_t)T);
    uint64_t rng = seed ^ 0xba5e11e5ULL;
    for (long k = 0; k < random_plans; k++) {
        rng_permutation(perm, n, &rng);
        memcpy(plan.node, perm, sizeof(int) * (size_t)T);
        cost_plan(cx, &plan, 0);
        if (k == 0 || plan.cost.total_s < out->best_random_s)
            out->best_random_s = plan.cost.total_s;
        if (plan.cost.total_s < best) {
            best = plan.cost.total_s;
            if (best_node)
                memcpy(best_node, plan.node, sizeof(int) * (size_t)T);
        }
    }
    rc = 0;
    free(perm);
    sched_plan_free(&plan);
    return rc;
}

int sched_baselines(const struct sched_problem *pb, uint64_t seed, long random_plans,
                    struct sched_baselines *out, struct shoal_err *err)
{
    struct sched_ctx cx;
    if (sched_problem_check(pb, err) != 0)
        return -1;
    if (ctx_init(&cx, pb) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory");
    int rc = baselines_run(&cx, seed, random_plans, out, NULL);
    ctx_free(&cx);
    return rc == 0 ? 0 : err_set(err, 500, "internal", NULL, "out of memory");
}

int sched_bytes_per_step(const struct sched_problem *pb, const struct sched_plan *plan, struct sched_bytes *out,
                         struct shoal_err *err)
{
    struct sched_ctx cx;
    int P = plan->stages, D = plan->replicas;
    memset(out, 0, sizeof *out);
    if (ctx_init(&cx, pb) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory");
    double M = (double)pb->model.micro_batches;
    /* per replica and boundary: M activations forward, M gradients back */
    out->stage_links = (double)D * (double)(P - 1) * M * 2.0 * cx.boundary_bytes;
    for (int s = 0; s < P && D > 1; s++) {
        double layers = (double)(plan->layer_end[s] - plan->layer_start[s]);
        double params = layers * cx.layer_params + (s == 0 ? cx.first_params : 0) +
                        (s == P - 1 ? cx.last_params : 0);
        /* a ring all-reduce: each of D members sends 2 (D - 1) / D of the stage's values */
        out->sync += 2.0 * (double)(D - 1) * params * cx.sync_bytes / (double)cx.sync_every;
    }
    /* cx.tied_bytes is the gradient (f32); each end sends it all, half twice */
    out->tied_head = (double)D * 2.0 * cx.tied_bytes;
    ctx_free(&cx);
    return 0;
}

void sched_paper_job(struct sched_problem *pb)
{
    pb->stages = 8;
    pb->replicas = 8;
    pb->c_dp_gb = SCHED_PAPER_C_DP_GB;
    pb->c_pp_gb = SCHED_PAPER_C_PP_GB;
    pb->model = (struct sched_model){ .vocab_size = 50257, .context_length = 2048, .d_model = 2048,
                                      .heads = 16, .layers = 24, .micro_batches = 32,
                                      .micro_batch_size = 1, .schedule = SCHED_1F1B, .act_bytes = 2,
                                      .wire_bytes = 2 };
}

void sched_dtfm_sizes(struct sched_problem *pb)
{
    const struct sched_model *m = &pb->model;
    struct model_config f = sched_model_family(m);
    double C = (double)m->d_model, GiB = 1024.0 * 1024.0 * 1024.0;
    double params = (double)m->layers * (double)model_part_params(&f, MODEL_BLOCK);   /* gpt2: 12 C^2 + 13 C a block */
    pb->c_dp_gb = params / pb->stages * 4.0 / GiB;
    pb->c_pp_gb = (double)m->micro_batches * (double)m->micro_batch_size * (double)m->context_length * C * 2.0 / GiB;
}
