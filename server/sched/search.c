/* search.c - the steady-state genetic algorithm over balanced partitions,
 * after Yuan et al. (NeurIPS 2022): a random population, offspring by
 * five-point crossover with balance repair, local search on each offspring,
 * and replacement of the worse parent.  The local search swaps nodes
 * between groups and keeps a swap when the true cost (or, at equal cost,
 * the tie-breaker) improves; only the two groups involved are re-costed. */
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define CROSSOVER_POINTS 5

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* a better than b: lower cost, or equal cost and lower tie-breaker. */
static int better(const struct cand *a, const struct cand *b)
{
    if (a->cost < b->cost - 1e-12)
        return 1;
    return a->cost <= b->cost + 1e-12 && a->tie < b->tie - 1e-12;
}

/* Group of node x: index in member / D (P means the spares). */
static int group_of(const struct sched_ctx *cx, const struct cand *c, int x)
{
    int g = c->pos[x] / cx->D;
    return g < cx->P ? g : cx->P;
}

static void swap_nodes(struct cand *c, int x, int y)
{
    int px = c->pos[x], py = c->pos[y];
    c->member[px] = y;
    c->member[py] = x;
    c->pos[x] = py;
    c->pos[y] = px;
}

static void cand_random(const struct sched_ctx *cx, struct cand *c, uint64_t *rng)
{
    rng_permutation(c->member, cx->n, rng);
    for (int i = 0; i < cx->n; i++)
        c->pos[c->member[i]] = i;
}

/* Orders the nodes so that neighbours are close (a nearest-neighbour chain
 * over the pipeline edge costs), then deals them into groups: `strided` 0
 * puts runs of D close nodes in one group (data parallelism inside a
 * cluster), 1 deals them round-robin (each pipeline inside a cluster).
 * Two structured starting points the random population lacks. */
static void cand_structured(const struct sched_ctx *cx, struct cand *c, int strided)
{
    int n = cx->n, P = cx->P, D = cx->D;
    int chain[n];
    char used[n];
    memset(used, 0, sizeof used);
    chain[0] = 0;
    used[0] = 1;
    for (int k = 1; k < n; k++) {
        int last = chain[k - 1], next = -1;
        for (int x = 0; x < n; x++)
            if (!used[x] && (next < 0 || cx->pp[last * n + x] < cx->pp[last * n + next]))
                next = x;
        chain[k] = next;
        used[next] = 1;
    }
    for (int k = 0; k < n; k++) {
        int slot = k;
        if (strided && k < P * D)
            slot = (k % P) * D + k / P;
        c->member[slot] = chain[k];
        c->pos[chain[k]] = slot;
    }
}

struct search {
    const struct sched_ctx *cx;
    const struct sched_options *opt;
    uint64_t rng;
    long evals;
    double started;         /* ms on the monotonic clock */
    double deadline;        /* ms on the monotonic clock, 0 = none */
    double best_cost;       /* lowest cost seen in any evaluation */
    double best_at;         /* ms after `started` when it was first seen */
    struct cand trial;      /* scratch for reverting swaps */
};

static int out_of_budget(struct search *S)
{
    if (S->opt->candidates > 0 && S->evals >= S->opt->candidates)
        return 1;
    return S->deadline > 0 && now_ms() > S->deadline;
}

/* Counts one evaluation and notes when a new lowest cost first appears. */
static void evaluated(struct search *S, const struct cand *c)
{
    S->evals++;
    if (c->cost < S->best_cost - 1e-12) {
        S->best_cost = c->cost;
        S->best_at = now_ms() - S->started;
    }
}

/* Swaps random pairs of nodes in different groups, keeping improvements,
 * until `patience` swaps in a row have failed or the budget is gone. */
static void local_search(struct search *S, struct cand *c, int patience)
{
    const struct sched_ctx *cx = S->cx;
    int fails = 0;
    while (fails < patience && !out_of_budget(S)) {
        int x = rng_below(&S->rng, cx->n), y = rng_below(&S->rng, cx->n);
        int gx = group_of(cx, c, x), gy = group_of(cx, c, y);
        if (gx == gy) {
            fails++;
            continue;
        }
        cand_copy(&S->trial, c, cx);
        swap_nodes(&S->trial, x, y);
        cand_eval_groups(cx, &S->trial, gx, gy);
        evaluated(S, &S->trial);
        if (better(&S->trial, c)) {
            cand_copy(c, &S->trial, cx);
            fails = 0;
        } else {
            fails++;
        }
    }
}

/* Relabels parent 1's groups so that each matches the parent 2 group it
 * shares most nodes with (greedy), writing parent 1's label per node. */
static void aligned_labels(const struct sched_ctx *cx, const struct cand *p1, const struct cand *p2, int *label)
{
    int G = cx->P + (cx->spares > 0);
    int overlap[G * G], map[G], taken[G];
    memset(overlap, 0, sizeof overlap);
    for (int x = 0; x < cx->n; x++)
        overlap[group_of(cx, p1, x) * G + group_of(cx, p2, x)]++;
    for (int g = 0; g < G; g++)
        map[g] = taken[g] = -1;
    if (cx->spares > 0) {   /* spares stay spares */
        map[cx->P] = cx->P;
        taken[cx->P] = 1;
    }
    for (int round = 0; round < cx->P; round++) {
        int bg = -1, bh = -1, best = -1;
        for (int g = 0; g < cx->P; g++) {
            if (map[g] >= 0)
                continue;
            for (int h = 0; h < cx->P; h++)
                if (taken[h] < 0 && overlap[g * G + h] > best) {
                    best = overlap[g * G + h];
                    bg = g;
                    bh = h;
                }
        }
        map[bg] = bh;
        taken[bh] = 1;
    }
    for (int x = 0; x < cx->n; x++)
        label[x] = map[group_of(cx, p1, x)];
}

/* Child = parent 2 with parent 1's (aligned) group at a few random nodes,
 * then balance repaired by moving nodes out of over-full groups. */
static void crossover(struct search *S, const struct cand *p1, const struct cand *p2, struct cand *child)
{
    const struct sched_ctx *cx = S->cx;
    int n = cx->n, P = cx->P, D = cx->D, G = P + (cx->spares > 0);
    int label1[n], label[n], size[G], cap[G];
    aligned_labels(cx, p1, p2, label1);
    for (int g = 0; g < G; g++) {
        size[g] = 0;
        cap[g] = g < P ? D : cx->spares;
    }
    for (int x = 0; x < n; x++) {
        label[x] = group_of(cx, p2, x);
    }
    for (int k = 0; k < CROSSOVER_POINTS; k++) {
        int x = rng_below(&S->rng, n);
        label[x] = label1[x];
    }
    for (int x = 0; x < n; x++)
        size[label[x]]++;
    /* Repair: a random node of each over-full group moves to an under-full one. */
    for (int g = 0; g < G; g++) {
        while (size[g] > cap[g]) {
            int x;
            do x = rng_below(&S->rng, n); while (label[x] != g);
            int h = 0;
            while (size[h] >= cap[h])
                h++;
            label[x] = h;
            size[g]--;
            size[h]++;
        }
    }
    int fill[G];
    for (int g = 0; g < G; g++)
        fill[g] = g * D;
    for (int x = 0; x < n; x++) {
        int i = fill[label[x]]++;
        child->member[i] = x;
        child->pos[x] = i;
    }
    cand_eval_full(cx, child);
    evaluated(S, child);
}

/* shoal: the groups' pairings into replicas come from bottleneck matchings
 * of link times, which know nothing of the nodes' speeds nor of the rest
 * of a replica's chain.  Swapping two replicas' nodes within a stage
 * re-pairs them (the stage's ring does not change: it depends only on the
 * group); keep each swap that lowers the plan's cost, until none does. */
static void refine_pairings(const struct sched_ctx *cx, struct sched_plan *plan)
{
    int P = cx->P, D = cx->D;
    for (int improved = 1; improved;) {
        improved = 0;
        for (int s = 0; s < P; s++) {
            for (int a = 0; a < D; a++) {
                for (int b = a + 1; b < D; b++) {
                    double before = plan->cost.total_s;
                    int *x = &plan->node[s * D + a], *y = &plan->node[s * D + b], t = *x;
                    *x = *y;
                    *y = t;
                    cost_plan(cx, plan, 0);
                    if (plan->cost.total_s < before * (1 - 1e-12)) {
                        improved = 1;
                        continue;
                    }
                    *y = *x;
                    *x = t;
                    cost_plan(cx, plan, 0);
                }
            }
        }
    }
}

int sched_search(const struct sched_problem *pb, const struct sched_options *opt,
                 struct sched_plan *plan, struct shoal_err *err)
{
    struct sched_ctx cx;
    struct search S;
    struct cand *pop = NULL, child, best;
    int npop = opt->population > 0 ? opt->population : 100, made = 0, rc = -1;

    if (sched_problem_check(pb, err) != 0)
        return -1;
    if (opt->candidates <= 0 && opt->budget_ms <= 0)
        return err_set(err, 422, "invalid_field", "budget_ms", "give a time budget or a candidate budget");
    if (ctx_init(&cx, pb) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory");
    memset(&S, 0, sizeof S);
    memset(&child, 0, sizeof child);
    memset(&best, 0, sizeof best);
    S.cx = &cx;
    S.opt = opt;
    S.rng = opt->seed ^ 0x5c4ed5c4ed5c4edULL;
    S.started = now_ms();
    S.best_cost = DBL_MAX;
    S.deadline = opt->budget_ms > 0 ? S.started + opt->budget_ms : 0;
    pop = calloc((size_t)npop, sizeof *pop);
    if (!pop || cand_alloc(&S.trial, &cx) || cand_alloc(&child, &cx) || cand_alloc(&best, &cx)) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    /* Initial population: the two structured seeds, both costed before any
     * local search so a large network cannot spend the budget on the first,
     * then random partitions; each is improved locally, with a patience
     * that stays bounded on large networks. */
    int patience = cx.n <= 128 ? 2 * cx.n : 256;
    for (made = 0; made < 2 && made < npop; made++) {
        if (cand_alloc(&pop[made], &cx) != 0) {
            err_set(err, 500, "internal", NULL, "out of memory");
            goto out;
        }
        cand_structured(&cx, &pop[made], made);
        cand_eval_full(&cx, &pop[made]);
        evaluated(&S, &pop[made]);
        if (made == 0 || better(&pop[made], &best))
            cand_copy(&best, &pop[made], &cx);
    }
    for (int i = 0; i < npop; i++) {
        if (i >= made) {
            if (out_of_budget(&S))
                break;
            if (cand_alloc(&pop[made], &cx) != 0) {
                err_set(err, 500, "internal", NULL, "out of memory");
                goto out;
            }
            made++;
            cand_random(&cx, &pop[i], &S.rng);
            cand_eval_full(&cx, &pop[i]);
            evaluated(&S, &pop[i]);
        }
        local_search(&S, &pop[i], patience);
        if (better(&pop[i], &best))
            cand_copy(&best, &pop[i], &cx);
    }
    /* Steady state: two parents, one child, the child replaces the worse
     * parent if it is no worse. */
    long generation = 0;
    while (made > 1 && !out_of_budget(&S)) {
        int a = rng_below(&S.rng, made), b = rng_below(&S.rng, made - 1);
        if (b >= a)
            b++;
        crossover(&S, &pop[a], &pop[b], &child);
        local_search(&S, &child, patience);
        int worse = better(&pop[a], &pop[b]) ? b : a;
        if (!better(&pop[worse], &child))
            cand_copy(&pop[worse], &child, &cx);
        if (better(&child, &best))
            cand_copy(&best, &child, &cx);
        if (opt->progress && (++generation & 7) == 0) {
            double frac = opt->candidates > 0 ? (double)S.evals / (double)opt->candidates : 0;
            if (S.deadline > 0) {
                double t = 1.0 - (S.deadline - now_ms()) / opt->budget_ms;
                if (t > frac) frac = t;
            }
            opt->progress(frac > 1 ? 1 : frac, best.cost, opt->progress_arg);
        }
    }
    cand_to_plan(&cx, &best, plan);
    if (pb->cost == SCHED_COST_SHOAL)
        refine_pairings(&cx, plan);
    plan->evaluations = S.evals;
    plan->best_at_ms = S.best_at;
    if (!plan->cost.feasible) {
        err_set(err, 422, "infeasible", NULL,
                "no plan fits: some stage's layers, optimizer state and stashed activations "
                "exceed its nodes' memory; use more stages, smaller micro-batches or nodes with more memory");
        goto out;
    }
    rc = 0;
out:
    for (int i = 0; i < made && pop; i++)
        cand_free(&pop[i]);
    free(pop);
    cand_free(&S.trial);
    cand_free(&child);
    cand_free(&best);
    ctx_free(&cx);
    return rc;
}
