/* sched_random_net.h - random networks of up to 12 nodes and a small
 * model's problem on them, for the cost suites (test_sched_cost.c's
 * predictions, test_sched_cand.c's cached costs). */
#ifndef SHOAL_TEST_SCHED_RANDOM_NET_H
#define SHOAL_TEST_SCHED_RANDOM_NET_H

#include "../../server/sched/internal.h"

/* Random networks (rng_next of internal.h): TFLOP/s in [1,100), latency
 * in [1,100) ms, bandwidth in [0.2,10) Gbit/s. */
static __attribute__((unused)) double unit(uint64_t *rng)
{
    return (double)(rng_next(rng) >> 11) / 9007199254740992.0;
}

struct net {
    int n;
    struct sched_node nodes[12];
    double lat[144], bw[144];
};

static __attribute__((unused)) void random_net(struct net *w, int n, uint64_t *rng, int symmetric)
{
    w->n = n;
    for (int i = 0; i < n; i++) {
        w->nodes[i] = (struct sched_node){ .id = 100 + i, .tflops = 1 + 99 * unit(rng), .mem_bytes = 1e15 };
        for (int j = 0; j < n; j++) {
            if (symmetric && j < i) {
                w->lat[i * n + j] = w->lat[j * n + i];
                w->bw[i * n + j] = w->bw[j * n + i];
                continue;
            }
            w->lat[i * n + j] = i == j ? 0 : 1 + 99 * unit(rng);
            w->bw[i * n + j] = i == j ? 1 : 0.2 + 9.8 * unit(rng);
        }
    }
}

static __attribute__((unused)) struct sched_problem net_problem(const struct net *w, int P, int D, enum sched_cost cost)
{
    struct sched_problem pb = { .n = w->n, .nodes = w->nodes, .latency_ms = w->lat, .bandwidth_gbps = w->bw,
                                .stages = P, .replicas = D, .cost = cost, .c_dp_gb = 0.3, .c_pp_gb = 0.1 };
    pb.model = (struct sched_model){ .vocab_size = 1000, .context_length = 128, .d_model = 256, .heads = 4,
                                     .layers = 8, .micro_batches = 4, .micro_batch_size = 1,
                                     .schedule = SCHED_1F1B, .act_bytes = 2 };
    return pb;
}

#endif
