/* search.c - the steady-state genetic algorithm over balanced partitions,
 * after Yuan et al. (NeurIPS 2022): a random population, offspring by
 * five-point crossover with balance repair, local search on each offspring,
 * and replacement of the worse parent.  The local search swaps nodes
 * between groups and keeps a swap when the true cost (or, at equal cost,
 * the tie-breaker) improves; only the two groups involved are re-costed. */
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "internal.h"
#include "../../common/clock.h"

#define CROSSOVER_POINTS 5

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

/* Where the islands meet to swap their bests: a barrier whose slots are
 * double-buffered by generation, so an island that runs ahead to the next
 * meeting cannot overwrite a slot another is still to read.  An island
 * whose budget is spent leaves, and no longer holds the others up. */
struct meeting {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int islands, active, arrived;
    long generation;
    struct cand *slot;        /* [2 * islands]: [parity * islands + island] */
    long *slot_generation;    /* the generation each slot was written in */
};

struct island {
    struct sched_ctx cx;      /* each island its own scratch */
    const struct sched_options *opt;
    struct meeting *meet;
    int id, npop, made, patience;
    uint64_t rng;
    long evals, budget;       /* evaluations made, and this island's share of the candidate budget */
    long next_meeting;        /* evaluation count of the next meeting */
    double started, deadline; /* ms on the monotonic clock, deadline 0 = none */
    double best_cost, best_at;/* lowest cost seen, and when (ms after `started`) */
    double start_cost;        /* the cheapest start before any local search */
    struct cand *pop, best, walker, trial, child, swap;
    const int *start_node;    /* a complete plan to start from (the best baseline), or NULL */
    int failed;               /* out of memory */
};

static int out_of_budget(struct island *S)
{
    if (S->budget > 0 && S->evals >= S->budget)
        return 1;
    return S->deadline > 0 && (mono_s() * 1e3) > S->deadline;
}

/* Counts one evaluation and notes when a new lowest cost first appears. */
static void evaluated(struct island *S, const struct cand *c)
{
    S->evals++;
    if (c->cost < S->best_cost - 1e-12) {
        S->best_cost = c->cost;
        S->best_at = (mono_s() * 1e3) - S->started;
    }
}

/* A node to move, one way in three each: a member of the critical group
 * (whose term sets the max the cost is made of: only moving one of those
 * can lower it), a node of the worst pair on a pipeline link (the
 * bottleneck of that link), or any node.  `*anchor` gets a node whose
 * neighbours are good places to look for a partner: the worst pair's
 * other end (a node near it would pair better), another member of the
 * critical group, or the node itself. */
static int pick_node(struct island *S, const struct cand *c, int *anchor)
{
    const struct sched_ctx *cx = &S->cx;
    int P = cx->P, D = cx->D, how = rng_below(&S->rng, 3);
    if (how == 0) {
        *anchor = c->member[c->crit * D + rng_below(&S->rng, D)];
        return c->member[c->crit * D + rng_below(&S->rng, D)];
    }
    if (how == 1 && P > 1) {
        int s = rng_below(&S->rng, P - 1), side = rng_below(&S->rng, 2);
        int g = c->order[s + side], h = c->order[s + 1 - side];
        *anchor = c->edge_node[h * P + g];
        return c->edge_node[g * P + h];
    }
    int x = rng_below(&S->rng, cx->n);
    *anchor = x;
    return x;
}

/* Best-partner local search: draws a node to move (pick_node), costs its
 * swap with each of up to 2 * NEAR_MAX partners in other groups (the
 * anchor's nearest nodes, then random ones), and makes the best swap if it
 * improves the candidate (true cost, then tie-breaker).  Stops after
 * `patience` nodes in a row found no improving partner, or when the budget
 * is gone.  Only the two groups' terms are re-costed, and a swap that
 * cannot beat the best so far skips the new stage order (cand_eval_groups'
 * bound). */
#define LS_PATIENCE 8
static void local_search(struct island *S, struct cand *c, int patience)
{
    const struct sched_ctx *cx = &S->cx;
    int n = cx->n, K = cx->near_k, fails = 0;
    while (fails < patience && !out_of_budget(S)) {
        int anchor, x = pick_node(S, c, &anchor), gx = group_of(cx, c, x), found = 0;
        const int *near = cx->near + (size_t)anchor * NEAR_MAX;
        for (int k = 0; k < 2 * K && !out_of_budget(S); k++) {
            int y = k < K ? near[k] : rng_below(&S->rng, n), gy = group_of(cx, c, y);
            if (gy == gx)
                continue;
            cand_copy(&S->trial, c, cx);
            swap_nodes(&S->trial, x, y);
            int whole = cand_eval_groups(cx, &S->trial, gx, gy, found ? S->swap.cost : c->cost);
            evaluated(S, whole ? &S->trial : c);
            if (whole && better(&S->trial, found ? &S->swap : c)) {
                cand_copy(&S->swap, &S->trial, cx);
                found = 1;
            }
        }
        if (found) {
            cand_copy(c, &S->swap, cx);
            fails = 0;
        } else {
            fails++;
        }
    }
}

/* The perturbation of iterated local search: `k` random swaps between
 * groups, the first from the critical group, then a full evaluation. */
static void kick(struct island *S, struct cand *c, int k)
{
    const struct sched_ctx *cx = &S->cx;
    for (int i = 0; i < k; i++) {
        int x = i == 0 ? c->member[c->crit * cx->D + rng_below(&S->rng, cx->D)] : rng_below(&S->rng, cx->n);
        int y = rng_below(&S->rng, cx->n);
        if (group_of(cx, c, x) != group_of(cx, c, y))
            swap_nodes(c, x, y);
    }
    cand_eval_full(cx, c);
    evaluated(S, c);
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
static void crossover(struct island *S, const struct cand *p1, const struct cand *p2, struct cand *child)
{
    const struct sched_ctx *cx = &S->cx;
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

/* Moves stage `from`'s row of nodes to position `to`, shifting those between. */
static void move_row(int *node, int D, int from, int to)
{
    int row[D];
    memcpy(row, node + from * D, sizeof row);
    if (from < to)
        memmove(node + from * D, node + (from + 1) * D, sizeof(int) * (size_t)((to - from) * D));
    else
        memmove(node + (to + 1) * D, node + to * D, sizeof(int) * (size_t)((from - to) * D));
    memcpy(node + to * D, row, sizeof row);
}

/* shoal: the candidate's stage order is the cheapest path over pipeline
 * links, but the first and last stages also hold the embeddings and the
 * head, whose all-reduce is the largest, and the split of layers follows
 * the order too.  Reorders whole stages (each replica's chain kept) under
 * the full cost: move one stage to another position while that helps. */
static void reorder_stages(const struct sched_ctx *cx, struct sched_plan *plan)
{
    int P = cx->P, D = cx->D;
    for (int improved = 1; improved;) {
        improved = 0;
        for (int from = 0; from < P; from++) {
            for (int to = 0; to < P; to++) {
                if (to == from)
                    continue;
                double before = plan->cost.total_s;
                move_row(plan->node, D, from, to);
                cost_plan(cx, plan, 0);
                if (plan->cost.total_s < before * (1 - 1e-12)) {
                    improved = 1;
                    break;
                }
                move_row(plan->node, D, to, from);
                cost_plan(cx, plan, 0);
            }
        }
    }
}

/* Publishes this island's best and takes the best of those published at
 * the same meeting (lowest island number among equals) into its worst
 * population slot and its best, if better.  Deterministic: the k-th
 * meeting of each island pairs with the k-th of the others. */
static void meet(struct island *S)
{
    struct meeting *m = S->meet;
    const struct sched_ctx *cx = &S->cx;
    pthread_mutex_lock(&m->mu);
    long gen = m->generation;
    int parity = (int)(gen & 1);
    cand_copy(&m->slot[parity * m->islands + S->id], &S->best, cx);
    m->slot_generation[parity * m->islands + S->id] = gen;
    if (++m->arrived >= m->active) {
        m->arrived = 0;
        m->generation++;
        pthread_cond_broadcast(&m->cv);
    } else {
        while (m->generation == gen)
            pthread_cond_wait(&m->cv, &m->mu);
    }
    const struct cand *in = NULL;
    for (int i = 0; i < m->islands; i++) {
        const struct cand *c = &m->slot[parity * m->islands + i];
        if (m->slot_generation[parity * m->islands + i] == gen && (!in || better(c, in)))
            in = c;
    }
    if (in && better(in, &S->best)) {
        int worst = 0;
        for (int i = 1; i < S->made; i++)
            if (better(&S->pop[worst], &S->pop[i]))
                worst = i;
        cand_copy(&S->pop[worst], in, cx);
        cand_copy(&S->best, in, cx);
    }
    pthread_mutex_unlock(&m->mu);
}

static void leave(struct island *S)
{
    struct meeting *m = S->meet;
    pthread_mutex_lock(&m->mu);
    m->active--;
    if (m->arrived > 0 && m->arrived >= m->active) {
        m->arrived = 0;
        m->generation++;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
}

static void keep_best(struct island *S, const struct cand *c)
{
    if (better(c, &S->best))
        cand_copy(&S->best, c, &S->cx);
}

/* Candidate `c` from a complete plan's rows: stage s's nodes are group s,
 * the nodes left out the spares. */
static void cand_from_plan(const struct sched_ctx *cx, const int *node, struct cand *c)
{
    int T = cx->P * cx->D, k = T;
    for (int x = 0; x < cx->n; x++)
        c->pos[x] = -1;
    for (int t = 0; t < T; t++)
        c->pos[node[t]] = t;
    for (int x = 0; x < cx->n; x++)
        if (c->pos[x] < 0)
            c->pos[x] = k++;
    for (int x = 0; x < cx->n; x++)
        c->member[c->pos[x]] = x;
}

/* The starts: island 0 takes the structured ones and the best baseline,
 * every island random ones, all costed and none improved yet: the walker
 * of the iterated local search starts from the best, and the genetic
 * steps improve what they make.  (Improving each start first spends a
 * large network's whole budget on the first ones, whatever they cost.) */
static int populate(struct island *S)
{
    const struct sched_ctx *cx = &S->cx;
    int structured = S->id == 0 && !S->opt->random_starts_only ? starts_count() : 0;
    int fixed = structured + (S->id == 0 && S->start_node != NULL);
    for (S->made = 0; S->made < fixed && S->made < S->npop; S->made++) {
        struct cand *c = &S->pop[S->made];
        if (cand_alloc(c, cx) != 0)
            return -1;
        if (S->made < structured)
            cand_structured(cx, c, S->made);
        else
            cand_from_plan(cx, S->start_node, c);
        cand_eval_full(cx, c);
        evaluated(S, c);
        if (S->made == 0)
            cand_copy(&S->best, c, cx);
        keep_best(S, c);
    }
    S->start_cost = S->made > 0 ? S->best.cost : DBL_MAX;
    for (int i = 0; i < S->npop; i++) {
        if (i >= S->made) {
            if (out_of_budget(S))
                break;
            if (cand_alloc(&S->pop[i], cx) != 0)
                return -1;
            S->made++;
            cand_random(cx, &S->pop[i], &S->rng);
            cand_eval_full(cx, &S->pop[i]);
            evaluated(S, &S->pop[i]);
            if (i == 0)
                cand_copy(&S->best, &S->pop[i], cx);
            if (S->pop[i].cost < S->start_cost)
                S->start_cost = S->pop[i].cost;
        }
        keep_best(S, &S->pop[i]);
    }
    return 0;
}

/* Steady-state genetic step: two parents, one child by crossover and local
 * search; the child replaces the worse parent if it is no worse. */
static void genetic_step(struct island *S)
{
    int a = rng_below(&S->rng, S->made), b = rng_below(&S->rng, S->made - 1);
    if (b >= a)
        b++;
    crossover(S, &S->pop[a], &S->pop[b], &S->child);
    local_search(S, &S->child, S->patience);
    int worse = better(&S->pop[a], &S->pop[b]) ? b : a;
    if (!better(&S->pop[worse], &S->child))
        cand_copy(&S->pop[worse], &S->child, &S->cx);
    keep_best(S, &S->child);
}

/* Iterated local search step: kick the walker by 1-3 swaps, improve it
 * locally, and move there unless it is more than ILS_SLACK worse (so the
 * walker crosses the plateaus of max-based costs and shallow ridges).
 * After `ILS_STALL` steps without a new island best the walker restarts
 * from a random member of the population. */
#define ILS_STALL 64
#define ILS_SLACK 0.01
static void ils_step(struct island *S, int *stall)
{
    const struct sched_ctx *cx = &S->cx;
    cand_copy(&S->child, &S->walker, cx);
    kick(S, &S->child, 1 + rng_below(&S->rng, 3));
    local_search(S, &S->child, S->patience);
    if (S->child.cost <= S->walker.cost * (1 + ILS_SLACK) + 1e-12)
        cand_copy(&S->walker, &S->child, cx);
    if (better(&S->child, &S->best)) {
        cand_copy(&S->best, &S->child, cx);
        *stall = 0;
    } else if (++*stall > ILS_STALL) {
        cand_copy(&S->walker, &S->pop[rng_below(&S->rng, S->made)], cx);
        *stall = 0;
    }
}

#define MEETING_EVALS 4096   /* evaluations between the islands' meetings */

static void *island_run(void *arg)
{
    struct island *S = arg;
    if (populate(S) != 0) {
        S->failed = 1;
        goto out;
    }
    if (S->made == 0)
        goto out;
    cand_copy(&S->walker, &S->best, &S->cx);
    int stall = 0;
    long step = 0;
    while (!out_of_budget(S)) {
        if (S->made > 1 && rng_below(&S->rng, 2) == 0)
            genetic_step(S);
        else
            ils_step(S, &stall);
        if (S->meet->islands > 1 && S->evals >= S->next_meeting) {
            meet(S);
            while (S->next_meeting <= S->evals)
                S->next_meeting += MEETING_EVALS;
        }
        if (S->id == 0 && S->opt->progress && (++step & 7) == 0) {
            double frac = S->budget > 0 ? (double)S->evals / (double)S->budget : 0;
            if (S->deadline > 0) {
                double t = 1.0 - (S->deadline - (mono_s() * 1e3)) / S->opt->budget_ms;
                if (t > frac) frac = t;
            }
            S->opt->progress(frac > 1 ? 1 : frac, S->best.cost, S->opt->progress_arg);
        }
    }
out:
    leave(S);
    return NULL;
}

static void island_free(struct island *S)
{
    for (int i = 0; i < S->made && S->pop; i++)
        cand_free(&S->pop[i]);
    free(S->pop);
    cand_free(&S->best);
    cand_free(&S->walker);
    cand_free(&S->trial);
    cand_free(&S->child);
    cand_free(&S->swap);
    ctx_free(&S->cx);
}

static int island_init(struct island *S, const struct sched_problem *pb, const struct sched_options *opt,
                       int id, int islands)
{
    memset(S, 0, sizeof *S);
    S->id = id;
    S->opt = opt;
    S->best_cost = DBL_MAX;
    S->rng = (opt->seed ^ 0x5c4ed5c4ed5c4edULL) + 0x9e3779b97f4a7c15ULL * (uint64_t)id;
    S->next_meeting = MEETING_EVALS;
    if (opt->candidates > 0)
        S->budget = opt->candidates / islands + (id == 0 ? opt->candidates % islands : 0);
    if (ctx_init(&S->cx, pb) != 0)
        return -1;
    int npop = opt->population > 0 ? opt->population : SCHED_POPULATION_DEFAULT;
    S->npop = npop / islands > 4 ? npop / islands : 4;
    S->patience = LS_PATIENCE;
    S->pop = calloc((size_t)S->npop, sizeof *S->pop);
    if (!S->pop || cand_alloc(&S->best, &S->cx) || cand_alloc(&S->walker, &S->cx) ||
        cand_alloc(&S->trial, &S->cx) || cand_alloc(&S->child, &S->cx) || cand_alloc(&S->swap, &S->cx))
        return -1;
    return 0;
}

/* The plan of the best candidate, finished under the full cost (shoal:
 * stage order and pairings), and never worse than the baselines computed
 * for it: the cheapest of them replaces it if it is. */
static void finish_plan(const struct sched_ctx *cx, const struct cand *best, const int *baseline_node,
                        struct sched_plan *plan)
{
    struct sched_plan alt = { 0 };
    cand_to_plan(cx, best, plan);
    for (int k = 0; k < 2; k++) {
        struct sched_plan *p = k == 0 ? plan : &alt;
        if (k == 1) {
            if (sched_plan_init(&alt, cx->P, cx->D) != 0)
                break;
            memcpy(alt.node, baseline_node, sizeof(int) * (size_t)(cx->P * cx->D));
            cost_plan(cx, &alt, 0);
        }
        if (cx->pb->cost == SCHED_COST_SHOAL) {
            for (double before = DBL_MAX; p->cost.total_s < before * (1 - 1e-12);) {
                before = p->cost.total_s;
                reorder_stages(cx, p);
                refine_pairings(cx, p);
            }
        }
    }
    if (alt.node && alt.cost.total_s < plan->cost.total_s) {
        memcpy(plan->node, alt.node, sizeof(int) * (size_t)(cx->P * cx->D));
        cost_plan(cx, plan, 0);
    }
    sched_plan_free(&alt);
}

int sched_search(const struct sched_problem *pb, const struct sched_options *opt,
                 struct sched_plan *plan, struct shoal_err *err)
{
    struct meeting meet;
    struct island *isl = NULL;
    struct sched_ctx cx;
    int *baseline_node = NULL, islands = opt->threads > 0 ? opt->threads : SCHED_THREADS_DEFAULT, rc = -1;
    int started = 0;
    pthread_t th[SCHED_THREADS_MAX];

    if (sched_problem_check(pb, err) != 0)
        return -1;
    if (opt->candidates <= 0 && opt->budget_ms <= 0)
        return err_set(err, 422, "invalid_field", "budget_ms", "give a time budget or a candidate budget");
    if (islands > SCHED_THREADS_MAX)
        islands = SCHED_THREADS_MAX;
    if (opt->candidates > 0 && opt->candidates < islands)
        islands = (int)opt->candidates;
    memset(&meet, 0, sizeof meet);
    if (ctx_init(&cx, pb) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory");
    pthread_mutex_init(&meet.mu, NULL);
    pthread_cond_init(&meet.cv, NULL);
    meet.islands = meet.active = islands;
    isl = calloc((size_t)islands, sizeof *isl);
    meet.slot = calloc(2 * (size_t)islands, sizeof *meet.slot);
    meet.slot_generation = calloc(2 * (size_t)islands, sizeof *meet.slot_generation);
    baseline_node = malloc(sizeof(int) * (size_t)(pb->stages * pb->replicas));
    if (!isl || !meet.slot || !meet.slot_generation || !baseline_node)
        goto oom;
    for (int i = 0; i < 2 * islands; i++) {
        meet.slot_generation[i] = -1;
        if (cand_alloc(&meet.slot[i], &cx) != 0)
            goto oom;
    }
    /* The baselines first (outside the budget): the search starts from the
     * best of them too, and never returns a plan worse than it. */
    if (baselines_run(&cx, opt->seed, opt->random_plans, &plan->baselines, baseline_node) != 0)
        goto oom;
    double t0 = (mono_s() * 1e3);
    for (started = 0; started < islands; started++) {
        struct island *S = &isl[started];
        if (island_init(S, pb, opt, started, islands) != 0) {
            island_free(S);
            goto oom;
        }
        S->meet = &meet;
        S->start_node = baseline_node;
        S->started = t0;
        S->deadline = opt->budget_ms > 0 ? t0 + opt->budget_ms : 0;
    }
    int spawned = 1;
    for (; spawned < islands; spawned++)
        if (pthread_create(&th[spawned], NULL, island_run, &isl[spawned]) != 0) {
            leave(&isl[spawned]);   /* runs alone: the others must not wait for it */
            isl[spawned].failed = 2;
        }
    island_run(&isl[0]);
    for (int i = 1; i < islands; i++)
        if (isl[i].failed != 2)
            pthread_join(th[i], NULL);
    int winner = -1;
    plan->evaluations = 0;
    plan->start_cost = DBL_MAX;
    for (int i = 0; i < islands; i++) {
        if (isl[i].made > 0 && isl[i].start_cost < plan->start_cost)
            plan->start_cost = isl[i].start_cost;
        if (isl[i].failed == 1)
            goto oom;
        plan->evaluations += isl[i].evals;
        if (isl[i].made > 0 && (winner < 0 || better(&isl[i].best, &isl[winner].best)))
            winner = i;
    }
    if (winner < 0) {   /* no island had budget for even one start */
        cand_from_plan(&cx, baseline_node, &isl[0].best);
        cand_eval_full(&cx, &isl[0].best);
        winner = 0;
    }
    finish_plan(&cx, &isl[winner].best, baseline_node, plan);
    /* when the returned cost was first reached: by whichever island
     * evaluated it (the others may have it from a meeting) */
    plan->best_at_ms = DBL_MAX;
    for (int i = 0; i < islands; i++)
        if (isl[i].best_cost <= isl[winner].best.cost + 1e-12 && isl[i].best_at < plan->best_at_ms)
            plan->best_at_ms = isl[i].best_at;
    if (plan->best_at_ms == DBL_MAX)
        plan->best_at_ms = isl[winner].best_at;
    if (plan->cost.total_s < isl[winner].best.cost * (1 - 1e-12))
        plan->best_at_ms = (mono_s() * 1e3) - t0;
    if (!plan->cost.feasible) {
        char why[256];
        sched_memory_report(pb, plan, why, sizeof why);
        err_set(err, 422, "infeasible", NULL, "no plan fits the nodes' memory: in the best one, %s; use more "
                "stages, smaller micro-batches or nodes with more memory", why);
        goto out;
    }
    rc = 0;
    goto out;
oom:
    err_set(err, 500, "internal", NULL, "out of memory");
out:
    for (int i = 0; i < started; i++)
        island_free(&isl[i]);
    for (int i = 0; meet.slot && i < 2 * islands; i++)
        cand_free(&meet.slot[i]);
    free(meet.slot);
    free(meet.slot_generation);
    free(isl);
    free(baseline_node);
    pthread_mutex_destroy(&meet.mu);
    pthread_cond_destroy(&meet.cv);
    ctx_free(&cx);
    return rc;
}
