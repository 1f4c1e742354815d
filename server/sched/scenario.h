/* scenario.h - networks to schedule on without a server: the paper's five
 * 64-GPU scenarios, and generated multi-region networks of any size. */
#ifndef SHOAL_SCHED_SCENARIO_H
#define SHOAL_SCHED_SCENARIO_H

#include <stdint.h>

#include "sched.h"

struct scenario {
    int n;
    struct sched_node *nodes;     /* n */
    double *latency_ms;           /* n*n */
    double *bandwidth_gbps;       /* n*n */
};

/* Builds "dc", "spot", "multi", "regional" or "world" (Yuan et al., 2022):
 * 64 GPUs, values as in the paper, V100-like nodes (100 TFLOP/s, 32 GiB).
 * Returns 0, or -1 with `err` set for an unknown name. */
int scenario_paper(const char *name, struct scenario *sc, struct shoal_err *err);

/* A generated network of `n` nodes in `regions` regions: 5 ms / 10 Gbit/s
 * inside a region, 20-200 ms / 0.2-2 Gbit/s between two regions (one draw
 * per pair of regions, from `seed`).  Returns 0, or -1 if memory is short. */
int scenario_generated(int n, int regions, uint64_t seed, struct scenario *sc, struct shoal_err *err);

/* Generated families of irregular networks (seeded, any size >= 2):
 *   plane    nodes scattered on a plane: distance sets latency and
 *            bandwidth, per-link noise, 60-140 TFLOP/s;
 *   regions  many small regions of unequal size, each with its own links;
 *   mixed    data-centre, university and home GPUs (uplinks of 5, 1 and
 *            0.05-0.5 Gbit/s), of unequal speed and memory.
 * Details in scenario.c.  Returns 0, or -1 with `err` (unknown family). */
int scenario_family(const char *family, int n, uint64_t seed, struct scenario *sc, struct shoal_err *err);

/* Allocates an n-node scenario with zeroed matrices; 0 or -1. */
int scenario_alloc(struct scenario *sc, int n);
void scenario_free(struct scenario *sc);

#endif
