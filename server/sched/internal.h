/* internal.h - what the scheduler's files share: the evaluation context,
 * a candidate partition with its cached costs, and the random generator. */
#ifndef SHOAL_SCHED_INTERNAL_H
#define SHOAL_SCHED_INTERNAL_H

#include <stdint.h>

#include "matching.h"
#include "path.h"
#include "sched.h"
#include "../../common/mix.h"

#define NEAR_MAX 32   /* nearest neighbours kept per node (the local search's partners) */

/* A plan that does not fit in memory costs this much plus its shortfall,
 * so the search still prefers plans that are closer to fitting. */
#define SCHED_INFEASIBLE_S 1e9

struct sched_ctx {
    const struct sched_problem *pb;
    int n, P, D, spares;      /* spares = n - P*D, kept in a group of their own */
    double *pp;               /* n*n symmetric pipeline edge cost between two nodes, s */
    double *dp;               /* n*n dtfm DP term 2*(lat/1000 + c_dp*8/(bw*D)), s */
    /* shoal model, per micro-batch unless said otherwise */
    double layer_flops;       /* forward + backward FLOPs of one block */
    double last_flops;        /* forward + backward FLOPs of final LayerNorm, head and loss */
    double layer_params;      /* parameters of one block */
    double first_params;      /* token + position embeddings */
    double last_params;       /* final LayerNorm + output head */
    double layer_act_bytes;   /* activations one block keeps for backward, bytes */
    double last_act_bytes;    /* logits and their gradient on the last stage, bytes */
    double boundary_bytes;    /* hidden state crossing a stage boundary, bytes */
    double sync_bytes;        /* bytes per parameter a sync sends (4: f32) */
    double sync_every;        /* steps per sync, its cost spread over them */
    double tied_bytes;        /* a tied matrix's gradient the pipeline's ends sum each step, bytes;
                                 0 when untied or on one stage */
    int near_k;               /* entries per node in `near` */
    int *near;                /* n*near_k: each node's nearest others by pp, nearest first */
    struct match_work *mw;
    struct path_work *pw;
    double *wbuf;             /* D*(D+1) scratch for matchings: the costs, then column minima */
    int *ibuf;                /* scratch, 2n + P*D ints */
    double *ebuf;             /* scratch, P*P: links' lower bounds */
};

/* A candidate: P groups of D nodes, spares after them, and cached costs. */
struct cand {
    int *member;              /* n: group g is member[g*D .. g*D+D); spares follow */
    int *pos;                 /* n: node -> index in member */
    double *group_dp;         /* P: dtfm DP cost of the group, s; shoal: the ring's slowest bandwidth, Gbit/s */
    double *group_lat;        /* P: shoal: worst ring latency of the group, ms */
    double *edge;             /* P*P: bottleneck matching cost between groups */
    int *pairing;             /* P*P*D: for g < h, member i of g pairs with member pairing[..+i] of h */
    int *order;               /* P: stage -> group, from the last finish */
    int *edge_node;           /* P*P: [g*P + h] the node of g in the worst pair of the g-h matching */
    double *edge_soft;        /* P*P: mean cost of each node's best partner in the other group, s
                                 (in the tie-breaker: it moves before the bottleneck does) */
    double cost;              /* the plan's cost, s */
    double tie;               /* tie-breaker: lower is better among equal costs */
    int crit;                 /* the group whose term sets the largest max: dtfm's worst DP cost,
                                 shoal's slowest all-reduce */
};

int ctx_init(struct sched_ctx *cx, const struct sched_problem *pb);
void ctx_free(struct sched_ctx *cx);

int cand_alloc(struct cand *c, const struct sched_ctx *cx);
void cand_free(struct cand *c);
void cand_copy(struct cand *dst, const struct cand *src, const struct sched_ctx *cx);

/* Recomputes every cached cost of `c` and its total. */
void cand_eval_full(const struct sched_ctx *cx, struct cand *c);
/* After nodes moved between groups a and b (either may be P, the spares):
 * recomputes what depends on those groups and the total; returns 1.  A
 * move whose cost cannot come below `bound` may keep the old stage order
 * (its cost is then that order's, still a real plan's), or, under dtfm,
 * be rejected by lower bounds before its matchings: 0, and `c` must be
 * discarded.  DBL_MAX: always evaluated in full, with a new order. */
int cand_eval_groups(const struct sched_ctx *cx, struct cand *c, int a, int b, double bound);

/* Writes the plan the candidate stands for (order, pairing, layer ranges,
 * cost breakdown) into `plan`. */
void cand_to_plan(const struct sched_ctx *cx, const struct cand *c, struct sched_plan *plan);

/* Costs a complete plan as it is (plan->node fixed); fills the layer
 * ranges (the cost model's split) and the cost, or with `layers_given`
 * keeps the plan's layer ranges and only fills the cost. */
void cost_plan(const struct sched_ctx *cx, struct sched_plan *plan, int layers_given);

/* The sequential plan and the best of `random_plans` random ones (sched.h);
 * `best_node`, when not NULL, gets the cheapest of them all (P*D).  0 or -1. */
int baselines_run(const struct sched_ctx *cx, uint64_t seed, long random_plans, struct sched_baselines *out,
                  int *best_node);

/* Structured starts (starts.c): a chain of nodes in which neighbours are
 * close, from a nearest-neighbour walk (which 0, 1) or average-linkage
 * clustering (2, 3), dealt into groups in runs of D (even `which`: data
 * parallelism inside a cluster) or round-robin (odd: each pipeline inside
 * a cluster); the chain's tail is the spares.  Fills member and pos. */
int starts_count(void);
void cand_structured(const struct sched_ctx *cx, struct cand *c, int which);

/* splitmix64: small, fast, and the same everywhere for a given seed. */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t z = *s;
    *s += 0x9e3779b97f4a7c15ULL;
    return splitmix64(z);
}

/* Uniform integer in [0, n). */
static inline int rng_below(uint64_t *s, int n)
{
    return (int)(rng_next(s) % (uint64_t)n);
}

/* Writes a uniformly random permutation of 0..n-1 into `a` (Fisher-Yates). */
static inline void rng_permutation(int *a, int n, uint64_t *s)
{
    for (int i = 0; i < n; i++)
        a[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = rng_below(s, i + 1);
        int t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

#endif
