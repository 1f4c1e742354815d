/* bytes.c - test_nccl_host's scenarios of the collectives that move bytes
 * rather than sum floats: the last stage's losses passed round by an
 * all-gather (nccl_pass_loss). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../host/cuda_runtime.h" /* the emulation: this test never runs on a device */
#include "../gpu_check.h"
#include "ranks.h"

/* ---- the losses ------------------------------------------------------------ */

/* Rank r's loss: bits that only a byte-exact pass keeps (a subnormal, a
 * NaN with a payload), different for every rank. */
static double rank_loss(int rank)
{
    static const uint64_t bits[RANKS] = { 0x400921fb54442d18ull /* pi */, 0x000000000000beefull /* subnormal */,
                                          0x7ff80000deadbeefull /* a NaN's payload */ };
    double d;
    memcpy(&d, &bits[rank], sizeof d);
    return d;
}

static uint64_t bits_of(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* Every rank passes its loss, then all-reduces on the same group (call 1). */
static void *loss_rank(void *arg)
{
    struct rank *r = arg;
    float *dev = NULL;
    rank_open(r, OPEN_S);
    if (r->g) {
        double t0 = ctl_now();
        r->rc[0] = nccl_pass_loss(r->g, rank_loss(r->rank), &r->from_prev, SLOW_S, &r->err[0]);
        r->secs[0] = ctl_now() - t0;
        dev = device_values(1, r->rank, SUM_FLOATS);
    }
    if (dev)
        rank_allreduce(r, 1, dev, SUM_FLOATS, SLOW_S, 1);
    /* A rank that returned too early must not free what its peers' sum still reads. */
    pthread_barrier_wait(r->barrier);
    cudaFree(dev);
    rank_close(r);
    return NULL;
}

/* Three ranks, so that the previous rank is not the next one. */
void scenario_loss(void)
{
    struct rank r[RANKS];
    run_ranks(loss_rank, STAGE_LOSS, RANKS, (const int[]){ 0, 1, 2 }, r);
    if (!formed("losses", r, RANKS))
        return;
    for (int k = 0; k < RANKS; k++) {
        char what[128];
        int prev = (k - 1 + RANKS) % RANKS;
        double want = rank_loss(prev);
        snprintf(what, sizeof what, "losses: rank %d of 3 gets rank %d's loss, bit for bit", k, prev);
        check("nccl", what, r[k].rc[0] == 0 && memcmp(&r[k].from_prev, &want, sizeof want) == 0,
              "%s; got %016llx, want %016llx (rank %d's is %016llx)", outcome(r[k].rc[0], &r[k].err[0]),
              (unsigned long long)bits_of(r[k].from_prev), (unsigned long long)bits_of(want), (k + 1) % RANKS,
              (unsigned long long)bits_of(rank_loss((k + 1) % RANKS)));
    }
    size_t wrong = 0, first = SUM_FLOATS;
    int done = 1;
    for (int k = 0; k < RANKS; k++) {
        done &= r[k].rc[1] == 0 && r[k].result[1] != NULL;
        for (size_t i = 0; r[k].result[1] && i < SUM_FLOATS; i++) {
            float want = rank_value(1, 0, i) + rank_value(1, 1, i);
            want += rank_value(1, 2, i); /* in rank order, as the emulation sums */
            if (memcmp(&r[k].result[1][i], &want, sizeof want) != 0) {
                wrong++;
                first = i < first ? i : first;
            }
        }
    }
    check("nccl", "losses: an all-reduce on the same group then sums right on every rank", done && wrong == 0,
          "%s, %s, %s; %zu of %d floats wrong over the ranks, the first at %zu", outcome(r[0].rc[1], &r[0].err[1]),
          outcome(r[1].rc[1], &r[1].err[1]), outcome(r[2].rc[1], &r[2].err[1]), wrong, 3 * SUM_FLOATS, first);
    for (int k = 0; k < RANKS; k++)
        rank_free(&r[k]);
}

/* Rank 0 passes its loss (an all-gather of 8 bytes) while rank 1
 * all-reduces 2 floats (8 bytes): the same bytes, not the same call. */
static void *mismatch_rank(void *arg)
{
    struct rank *r = arg;
    float *dev = NULL;
    rank_open(r, OPEN_S);
    if (r->g && r->rank == 0) {
        double t0 = ctl_now();
        r->rc[0] = nccl_pass_loss(r->g, rank_loss(0), &r->from_prev, SLOW_S, &r->err[0]);
        r->secs[0] = ctl_now() - t0;
    }
    if (r->g && r->rank == 1 && (dev = device_values(0, 1, 2)))
        rank_allreduce(r, 0, dev, 2, SLOW_S, 0);
    pthread_barrier_wait(r->barrier);
    cudaFree(dev);
    rank_close(r);
    return NULL;
}

void scenario_mismatch(void)
{
    struct rank r[RANKS];
    const char *calls[2] = { "loss pass", "all-reduce" };
    run_ranks(mismatch_rank, STAGE_MISMATCH, 2, (const int[]){ 0, 1 }, r);
    if (!formed("mismatch", r, 2))
        return;
    for (int k = 0; k < 2; k++) {
        char what[160];
        snprintf(what, sizeof what, "mismatch: rank %d's %s, met by another collective, fails fast (nccl_error, "
                 "invalid usage)", k, calls[k]);
        check("nccl", what, r[k].rc[0] == -1 && err_is(&r[k].err[0], "nccl_error", "invalid usage") &&
              r[k].secs[0] < FAST_S, "after %.2f s: %s", r[k].secs[0], outcome(r[k].rc[0], &r[k].err[0]));
    }
}
