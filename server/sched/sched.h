/* sched.h - the scheduler: which node runs which tasklet.
 *
 * A job with P pipeline stages and D data-parallel replicas has P x D
 * tasklets.  The scheduler partitions the nodes into P data-parallel groups
 * of D nodes (plus, when there are more nodes than tasklets, a group of
 * spares), orders the groups into a pipeline, pairs the nodes of
 * neighbouring groups into replicas (bottleneck matchings), and, for the
 * `shoal` cost model, gives each stage its layer range.  It searches for the
 * plan with the lowest cost under one of two cost models (see README.md in
 * this directory for the formulas):
 *
 *   dtfm   the model of Yuan et al., NeurIPS 2022, exactly;
 *   shoal  the predicted wall time of one training iteration.
 *
 * This library knows nothing of HTTP or SQL: the server and shoal-sched
 * fill a sched_problem and read a sched_plan.  Nodes are indices 0..n-1.
 */
#ifndef SHOAL_SCHED_H
#define SHOAL_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../../common/model.h"

enum sched_cost { SCHED_COST_DTFM, SCHED_COST_SHOAL };
enum sched_schedule { SCHED_GPIPE, SCHED_1F1B };

struct sched_node {
    int64_t id;             /* the caller's id (server node id), reported back */
    char region[32];        /* label for humans; "" if unknown */
    double tflops;          /* measured dense TFLOP/s */
    double mem_bytes;       /* memory for the stage: GPU memory, or RAM for CPU nodes, bytes */
};

/* The model and batch as the `shoal` cost model needs them: its family
 * (common/model.h's row gives FLOPs, parameters and activation values) and
 * sizes. */
struct sched_model {
    int64_t vocab_size, context_length, d_model, heads, layers;
    enum model_arch arch;       /* MODEL_GPT2 (0) unless said */
    int64_t kv_heads, ffn_dim;  /* 0: the family's default (heads; gpt2's 4 d_model) */
    int64_t head_dim;           /* channels of a head; 0: d_model / heads */
    int64_t sliding_window;     /* positions a token attends to; 0: all */
    int tied;                   /* 1: the head shares the embedding's matrix; across stages the
                                   first and last stage of each replica sum its gradient each step */
    int64_t micro_batches;      /* M, per replica and step */
    int64_t micro_batch_size;   /* B, sequences */
    enum sched_schedule schedule;
    int act_bytes;              /* bytes per activation element kept for backward (2: bf16/fp16) */
    /* What crosses the links (the job's communication, common/codec.h):
     * bytes per value with any scales, codec_bytes / values. */
    double wire_bytes;          /* an activation value between stages; 0: act_bytes */
    double sync_bytes;          /* a parameter value in a data-parallel sync; 0: 4 (f32) */
    int sync_every;             /* steps between syncs: 1 every step, diloco's inner_steps; 0: 1 */
};

/* The model's description (common/model.h) from its sizes and family. */
struct model_config sched_model_family(const struct sched_model *m);

struct sched_problem {
    int n;                          /* nodes */
    const struct sched_node *nodes; /* n entries */
    const double *latency_ms;       /* n*n, [i*n + j] from i to j, ms */
    const double *bandwidth_gbps;   /* n*n, Gbit/s; > 0 off the diagonal */
    int stages, replicas;           /* P, D; P*D <= n */
    enum sched_cost cost;
    double c_dp_gb, c_pp_gb;        /* dtfm: gradient and activation sizes, GB (GiB, as the paper) */
    struct sched_model model;       /* shoal */
};

struct sched_breakdown {
    double total_s;        /* the plan's cost, seconds (model-seconds for dtfm) */
    double dp_s;           /* dtfm: DP cost; shoal: gradient sums: the all-reduce, and a tied
                              head's exchange between the pipeline's ends */
    double pipeline_s;     /* dtfm: pipeline cost (counted twice in total); shoal: forward+backward pipeline time */
    double compute_s;      /* shoal: busiest stage's compute per step */
    double comm_s;         /* shoal: activation/gradient transfer time on the critical path */
    double bubble_s;       /* shoal: idle time of the busiest stage in the pipeline */
    double optimizer_s;    /* shoal: AdamW step */
    int feasible;          /* 0: some node lacks memory for its stage */
};

struct sched_baselines {
    double sequential_s;     /* node i at tasklet i, stage-major */
    double best_random_s;    /* best of `random_plans` uniformly random assignments */
    long random_plans;
};

struct sched_plan {
    int stages, replicas;
    int *node;             /* [stage * replicas + replica] -> node index */
    int *layer_start;      /* [stage], first layer; layer_end[s] = layer_start[s+1] or layers */
    int *layer_end;
    struct sched_breakdown cost;
    long evaluations;      /* sched_search: candidate evaluations made */
    double best_at_ms;     /* sched_search: when the returned plan's cost was first reached, ms */
    double start_cost;     /* sched_search: its cheapest start's cost before any local search (the
                              structured and baseline starts, and the first random ones) */
    struct sched_baselines baselines;   /* sched_search: the baselines it computed and never returns worse than */
};

#define SCHED_THREADS_DEFAULT 2   /* fixed, so that a plan does not depend on the machine's cores */
#define SCHED_THREADS_MAX 64
#define SCHED_POPULATION_DEFAULT 16   /* small: a large one spends a short budget on its first local searches */

struct sched_options {
    uint64_t seed;          /* same seed, problem, threads and candidate budget -> same plan, when
                               the candidate budget ends the search before the time budget does */
    double budget_ms;       /* wall-clock limit for the search; 0 = none */
    long candidates;        /* evaluations limit; 0 = none (then budget_ms must be > 0) */
    int population;         /* GA population, over all islands; 0 = SCHED_POPULATION_DEFAULT */
    int threads;            /* islands searched in parallel, one thread each; 0 = SCHED_THREADS_DEFAULT */
    long random_plans;      /* the random baseline: best of this many random plans (0: sequential only) */
    int random_starts_only; /* 1: no structured starts nor baseline start (measures the search itself) */
    /* Called now and then with the fraction done (0..1); may be NULL. */
    void (*progress)(double fraction, double best_cost, void *arg);
    void *progress_arg;
};

/* Allocates a plan for P stages and D replicas (node, layer arrays).
 * Returns 0, or -1 if memory is short.  Free with sched_plan_free. */
int sched_plan_init(struct sched_plan *plan, int stages, int replicas);
void sched_plan_free(struct sched_plan *plan);

/* Checks the problem: sizes, P*D <= n, finite positive bandwidths, model
 * shapes for the shoal model.  Returns 0, or -1 with `err` (422). */
int sched_problem_check(const struct sched_problem *pb, struct shoal_err *err);

/* Searches for the cheapest plan.  `plan` must be initialised for the
 * problem's P and D.  Returns 0, or -1 with `err` set (bad problem, or
 * no feasible plan under the shoal model's memory check: 422). */
int sched_search(const struct sched_problem *pb, const struct sched_options *opt,
                 struct sched_plan *plan, struct shoal_err *err);

/* Costs a given assignment: `plan->node` fixed as given (stage order and
 * replica pairing as given, no matching or reordering); layer ranges are
 * chosen by the cost model (shoal) or split evenly (dtfm).  Fills
 * plan->cost and the layer arrays.  Returns 0, or -1 with `err` set when
 * the assignment is not a valid one (a node twice, an index out of range). */
int sched_evaluate(const struct sched_problem *pb, struct sched_plan *plan, struct shoal_err *err);

/* Costs a complete plan as it stands: nodes and layer ranges both as given
 * (a stored or forced plan, costed under either model).  Fills plan->cost;
 * under `shoal` a layer split that overflows a node's memory is infeasible
 * (cost.feasible 0).  Returns 0, or -1 with `err` (422) for a bad
 * assignment or layer ranges that are not contiguous, non-empty and
 * covering the model's layers. */
int sched_predict(const struct sched_problem *pb, struct sched_plan *plan, struct shoal_err *err);

/* What one training step of a plan sends, in bytes, summed over every
 * tasklet, as the `shoal` cost model prices it (the agents count the same
 * things in their progress reports, docs/api.md).  A tied head split
 * across stages is its own line: its gradient (f32, vocab x d_model) goes
 * between each replica's first and last stage every step, whatever the
 * stage links' and sync's codecs. */
struct sched_bytes {
    double stage_links;   /* activations forward and their gradients back, at every stage boundary of every
                             replica (the job's stage_link codec) */
    double sync;          /* each stage's data-parallel all-reduce (the job's sync codec; diloco: an outer
                             step's share of each step) */
    double tied_head;     /* a tied head across stages: each end of each replica sends the gradient's worth
                             (a ring of two); 0 when untied or on one stage */
};

/* Fills `out` for `plan` (its layer ranges as given).  Returns 0, or -1
 * with `err` set (500: out of memory). */
int sched_bytes_per_step(const struct sched_problem *pb, const struct sched_plan *plan, struct sched_bytes *out,
                         struct shoal_err *err);

/* Why a costed plan does not fit (cost.feasible 0), in bytes, for an error
 * message: the stage whose need most exceeds its smallest node's memory,
 * its layers, its weights-gradients-AdamW bytes and stashed activations
 * (shoal's memory model), and that node. Writes "" for a plan that fits
 * or a dtfm problem. */
void sched_memory_report(const struct sched_problem *pb, const struct sched_plan *plan, char *out, size_t len);

/* Baselines: `plan` gets node i at tasklet i in stage-major order
 * (sequential), or a uniformly random assignment; then sched_evaluate. */
int sched_baseline_sequential(const struct sched_problem *pb, struct sched_plan *plan,
                              struct shoal_err *err);
int sched_baseline_random(const struct sched_problem *pb, uint64_t seed, struct sched_plan *plan,
                          struct shoal_err *err);

/* Both baselines at once, sharing one evaluation context (fast enough for
 * thousands of random plans on large networks).  Returns 0, or -1. */
int sched_baselines(const struct sched_problem *pb, uint64_t seed, long random_plans,
                    struct sched_baselines *out, struct shoal_err *err);

/* The paper's GPT-3 XL set-up: 24 layers on 8 stages x 8 replicas,
 * c_dp = 0.65 GB, c_pp = 0.47124922 GB; for the shoal model, GPT-3 XL's
 * shapes (d_model 2048, 16 heads, context 2048), 32 micro-batches of 1
 * sequence, bf16 activations, and 1F1B (GPipe's stash of 32 micro-batches
 * does not fit a 32 GiB V100 without recomputation).  Sets those fields. */
#define SCHED_PAPER_C_DP_GB 0.65
#define SCHED_PAPER_C_PP_GB 0.47124922
void sched_paper_job(struct sched_problem *pb);

/* dtfm's sizes for a model: c_dp = fp32 gradients of one stage, c_pp =
 * 16-bit activations of one replica's batch at a stage boundary, both in
 * GB of 2^30 bytes as the paper counts them.  Sets pb->c_dp_gb, c_pp_gb. */
void sched_dtfm_sizes(struct sched_problem *pb);

#endif
