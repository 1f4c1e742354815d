/* test_nccl_host.c - agent/net/nccl.c's data-parallel groups, run for real on
 * the host emulation of CUDA and NCCL (tests/gpu/host): each rank is a
 * thread with its own emulated device, and the ranks exchange their NCCL id
 * through a real shoal-server, as agents do.
 *
 * usage: test_nccl_host URL JOB EPOCH STAGE:REPLICA:TOKEN...
 *   a scheduled job of at least SCENARIO_STAGES stages and RANKS (3)
 *   replicas, with the node token of every (stage, replica) below those;
 *   needs SHOAL_HOST_CUDA_DEVICES=3 or more.
 *   tests/integration/test_nccl_host.sh sets all of this up.
 *
 * Each scenario uses a stage of its own (ranks.h).  This file holds the
 * groups and the all-reduce; bytes.c the losses' all-gather and the state
 * broadcast; tasklet.c the agent's tasklets on a group (sync.c, live.c).
 * Prints "ok - ..." / "not ok - ..." lines; exits 0 when every check
 * passed, 1 when one failed, 2 on bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../host/cuda_runtime.h" /* the emulation: this test never runs on a device */
#include "../host/nccl.h"
#include "../gpu_check.h"
#include "ranks.h"

/* ---- the job on the server ------------------------------------------------- */

/* Parses "STAGE:REPLICA:TOKEN" into tokens[][]. Returns 0, or -1. */
static int parse_token_arg(const char *arg)
{
    char *end;
    long stage = strtol(arg, &end, 10);
    if (end == arg || *end != ':' || stage < 0)
        return -1;
    const char *p = end + 1;
    long replica = strtol(p, &end, 10);
    if (end == p || *end != ':' || replica < 0)
        return -1;
    if (stage >= SCENARIO_STAGES || replica >= RANKS)
        return 0; /* a tasklet no scenario uses */
    if (strlen(end + 1) == 0 || strlen(end + 1) >= TOKEN_MAX)
        return -1;
    snprintf(tokens[stage][replica], TOKEN_MAX, "%s", end + 1);
    return 0;
}

/* ---- stderr, to see what nccl_group_close logged ----------------------- */

/* common/log.c writes through the stdio stream stderr, the sanitizers to
 * file descriptor 2 directly: swapping the stream (glibc lets a program
 * assign it) captures the log lines and leaves a sanitizer's report, which
 * ends the process, where it always goes. */
struct capture {
    FILE *file, *saved;
};

/* Call with no other thread running. */
static void capture_start(struct capture *c)
{
    fflush(stderr);
    c->saved = stderr;
    if ((c->file = tmpfile()))
        stderr = c->file;
}

/* Ends the capture (no other thread running), passes what was captured on
 * to stderr, and returns 1 when it held `needle`. */
static int capture_end(struct capture *c, const char *needle)
{
    char text[1 << 16];
    if (!c->file)
        return 0;
    stderr = c->saved;
    rewind(c->file);
    size_t n = fread(text, 1, sizeof text - 1, c->file);
    text[n] = '\0';
    fclose(c->file);
    fputs(text, stderr);
    return strstr(text, needle) != NULL;
}

/* ---- the scenarios ---------------------------------------------------------- */

/* What nccl.c's waits rely on, seen on the emulation directly: one thread
 * drives both ranks of a non-blocking communicator. */
static void scenario_emulation(void)
{
    enum { N = 64, PAIR = 2 };
    ncclUniqueId id;
    ncclComm_t comm[PAIR] = { NULL, NULL };
    ncclResult_t init[PAIR] = { ncclSuccess, ncclSuccess };
    ncclResult_t state[3] = { ncclInternalError, ncclInternalError, ncclInternalError };
    cudaStream_t stream[PAIR] = { NULL, NULL };
    float *dev[PAIR] = { NULL, NULL }, host[PAIR][N];
    cudaError_t busy = cudaSuccess, idle[PAIR];
    int sums = 0;
    if (ncclGetUniqueId(&id) != ncclSuccess) {
        check("nccl", "emulation: ncclGetUniqueId", 0, "%s", ncclGetLastError(NULL));
        return;
    }
    for (int k = 0; k < PAIR; k++) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        for (int i = 0; i < N; i++)
            host[k][i] = rank_value(0, k, (size_t)i);
        cudaSetDevice(k);
        cudaStreamCreateWithFlags(&stream[k], cudaStreamNonBlocking);
        cudaMalloc((void **)&dev[k], sizeof host[k]);
        cudaMemcpy(dev[k], host[k], sizeof host[k], cudaMemcpyHostToDevice);
        init[k] = ncclCommInitRankConfig(&comm[k], PAIR, id, k, &cfg);
        if (k == 0)
            ncclCommGetAsyncError(comm[0], &state[0]);
    }
    ncclCommGetAsyncError(comm[0], &state[1]);
    check("nccl", "emulation: a non-blocking init is in progress until every rank joined",
          init[0] == ncclInProgress && init[1] == ncclInProgress && state[0] == ncclInProgress &&
          state[1] == ncclSuccess, "init %d and %d; rank 0 %d alone, %d with rank 1", init[0], init[1], state[0],
          state[1]);
    if (state[1] == ncclSuccess) {
        ncclAllReduce(dev[0], dev[0], N, ncclFloat32, ncclSum, comm[0], stream[0]);
        busy = cudaStreamQuery(stream[0]);
        ncclCommGetAsyncError(comm[0], &state[2]);
        check("nccl", "emulation: an all-reduce only one rank called keeps its stream busy, with no async error",
              busy == cudaErrorNotReady && state[2] == ncclSuccess, "cudaStreamQuery %d, async %d", busy, state[2]);
        ncclAllReduce(dev[1], dev[1], N, ncclFloat32, ncclSum, comm[1], stream[1]);
        for (int k = 0; k < PAIR; k++) {
            idle[k] = cudaStreamQuery(stream[k]);
            cudaMemcpy(host[k], dev[k], sizeof host[k], cudaMemcpyDeviceToHost);
        }
        for (int i = 0; i < N; i++)
            sums += host[0][i] == rank_value(0, 0, (size_t)i) + rank_value(0, 1, (size_t)i) &&
                    memcmp(&host[0][i], &host[1][i], sizeof(float)) == 0;
        check("nccl", "emulation: the last rank's call lands the sum on both ranks and frees both streams",
              idle[0] == cudaSuccess && idle[1] == cudaSuccess && sums == N,
              "cudaStreamQuery %d and %d; %d of %d sums right", idle[0], idle[1], sums, N);
    }
    for (int k = 0; k < PAIR; k++) {
        cudaSetDevice(k);
        ncclCommAbort(comm[k]);
        cudaFree(dev[k]);
        cudaStreamDestroy(stream[k]);
    }
}

/* Both ranks: two all-reduces of fresh values, then a clean close.  In
 * the first, rank 1 comes late, so rank 0 must wait for the sum to land. */
static void *sum_rank(void *arg)
{
    struct rank *r = arg;
    rank_open(r, OPEN_S);
    for (int s = 0; s < STEPS; s++) {
        float *dev = r->g ? device_values(s, r->rank, SUM_FLOATS) : NULL;
        if (s == 0 && r->rank == 1)
            sleep_s(SETTLE_S);
        if (dev)
            rank_allreduce(r, s, dev, SUM_FLOATS, OPEN_S, 1);
        /* A rank that returned too early must not free what its peer's sum
         * still reads: the check on the values is the better report. */
        pthread_barrier_wait(r->barrier);
        cudaFree(dev);
    }
    rank_close(r);
    return NULL;
}

static void scenario_sum(void)
{
    struct rank r[RANKS];
    struct capture cap;
    capture_start(&cap);
    run_ranks(sum_rank, STAGE_SUM, 2, (const int[]){ 0, 1 }, r);
    int warned = capture_end(&cap, "finalize failed");
    check("nccl", "two ranks on devices 0 and 1 form a group through the server", r[0].open_rc == 0 && r[1].open_rc == 0,
          "rank 0: %s in %.2f s; rank 1: %s in %.2f s", outcome(r[0].open_rc, &r[0].open_err), r[0].open_s,
          outcome(r[1].open_rc, &r[1].open_err), r[1].open_s);
    for (int s = 0; s < STEPS; s++) {
        char what[128];
        size_t wrong[RANKS] = { 0, 0 }, first = SUM_FLOATS, differ = SUM_FLOATS;
        int done = 1;
        for (int k = 0; k < 2; k++) {
            done &= r[k].rc[s] == 0 && r[k].result[s] != NULL;
            for (size_t i = 0; r[k].result[s] && i < SUM_FLOATS; i++) {
                float want = rank_value(s, 0, i) + rank_value(s, 1, i);
                if (r[k].result[s][i] != want) {
                    wrong[k]++;
                    first = i < first ? i : first;
                }
            }
        }
        snprintf(what, sizeof what, "all-reduce %d: every element on both ranks is the sum of the ranks' values",
                 s + 1);
        if (!done)
            check("nccl", what, 0, "rank 0: %s; rank 1: %s", outcome(r[0].rc[s], &r[0].err[s]),
                  outcome(r[1].rc[s], &r[1].err[s]));
        else if (wrong[0] || wrong[1])
            check("nccl", what, 0, "of %d floats %zu are wrong on rank 0, %zu on rank 1, the first at %zu", SUM_FLOATS,
                  wrong[0], wrong[1], first);
        else
            check("nccl", what, 1, "%d floats", SUM_FLOATS);
        for (size_t i = 0; done && i < SUM_FLOATS && differ == SUM_FLOATS; i++)
            if (memcmp(&r[0].result[s][i], &r[1].result[s][i], sizeof(float)) != 0)
                differ = i;
        snprintf(what, sizeof what, "all-reduce %d: both ranks hold the same bits", s + 1);
        if (!done)
            check("nccl", what, 0, "no result to compare");
        else
            check("nccl", what, differ == SUM_FLOATS, "%s %zu", differ == SUM_FLOATS ? "floats alike:" : "they differ first at",
                  differ == SUM_FLOATS ? (size_t)SUM_FLOATS : differ);
    }
    check("nccl", "both ranks close cleanly (finalize, no abort)", !warned && r[0].close_s < FAST_S && r[1].close_s < FAST_S,
          "%s; %.2f s and %.2f s", warned ? "'finalize failed' was logged" : "nothing logged", r[0].close_s,
          r[1].close_s);
    rank_free(&r[0]);
    rank_free(&r[1]);
}

/* Rank 0 all-reduces twice while rank 1 stays silent, then rank 1 tries. */
static void *deadline_rank(void *arg)
{
    struct rank *r = arg;
    float *dev = NULL;
    rank_open(r, OPEN_S);
    if (r->g)
        dev = device_values(0, r->rank, SUM_FLOATS);
    pthread_barrier_wait(r->barrier);
    if (r->rank == 0 && dev) {
        rank_allreduce(r, 0, dev, SUM_FLOATS, DEADLINE_S, 0);
        rank_allreduce(r, 1, dev, SUM_FLOATS, DEADLINE_S, 0);
    }
    pthread_barrier_wait(r->barrier); /* rank 0 has given up */
    if (r->rank == 1 && dev)
        rank_allreduce(r, 0, dev, SUM_FLOATS, SLOW_S, 0);
    cudaFree(dev);
    rank_close(r);
    return NULL;
}

static void scenario_deadline(void)
{
    struct rank r[RANKS];
    run_ranks(deadline_rank, STAGE_DEADLINE, 2, (const int[]){ 0, 1 }, r);
    if (!formed("deadline", r, 2))
        return;
    check("nccl", "deadline: an all-reduce whose peer never calls fails with peer_timeout",
          r[0].rc[0] == -1 && err_is(&r[0].err[0], "peer_timeout", NULL), "%s", outcome(r[0].rc[0], &r[0].err[0]));
    check("nccl", "deadline: it gives up after its 1 s timeout, not much later", r[0].secs[0] >= 0.9 * DEADLINE_S &&
          r[0].secs[0] < DEADLINE_S + FAST_S, "%.2f s", r[0].secs[0]);
    check("nccl", "deadline: after it the group is unusable", r[0].rc[1] == -1 &&
          err_is(&r[0].err[1], "nccl_error", "aborted by an earlier failure"), "%s", outcome(r[0].rc[1], &r[0].err[1]));
    check("nccl", "deadline: the silent peer's own all-reduce then fails with peer_io instead of hanging",
          r[1].rc[0] == -1 && err_is(&r[1].err[0], "peer_io", NULL) && r[1].secs[0] < FAST_S,
          "after %.2f s: %s", r[1].secs[0], outcome(r[1].rc[0], &r[1].err[0]));
}

/* Rank 0 all-reduces; rank 1 then all-reduces host memory, which NCCL
 * refuses, so nccl.c aborts its communicator. */
static void *abort_rank(void *arg)
{
    struct rank *r = arg;
    float *dev = NULL, host[16] = { 0 };
    rank_open(r, OPEN_S);
    if (r->g)
        dev = device_values(0, r->rank, SUM_FLOATS);
    pthread_barrier_wait(r->barrier);
    if (r->rank == 0 && dev)
        rank_allreduce(r, 0, dev, SUM_FLOATS, SLOW_S, 0);
    if (r->rank == 1) {
        sleep_s(SETTLE_S);
        rank_allreduce(r, 0, host, 16, SLOW_S, 0);
    }
    cudaFree(dev);
    rank_close(r);
    return NULL;
}

static void scenario_abort(void)
{
    struct rank r[RANKS];
    run_ranks(abort_rank, STAGE_ABORT, 2, (const int[]){ 0, 1 }, r);
    if (!formed("abort", r, 2))
        return;
    check("nccl", "abort: an all-reduce of host memory is refused (nccl_error, invalid argument)",
          r[1].rc[0] == -1 && err_is(&r[1].err[0], "nccl_error", "invalid argument"), "%s",
          outcome(r[1].rc[0], &r[1].err[0]));
    check("nccl", "abort: the peer's pending all-reduce fails fast with peer_io", r[0].rc[0] == -1 &&
          err_is(&r[0].err[0], "peer_io", NULL) && r[0].secs[0] < FAST_S, "after %.2f s of %.0f: %s", r[0].secs[0],
          SLOW_S, outcome(r[0].rc[0], &r[0].err[0]));
}

/* Rank 0 all-reduces; rank 1, silent, lets that be queued, then closes the
 * group (STAGE_LEAVE), sets rank 0's stop flag (STAGE_STOP: its agent shuts
 * down) or its abort flag (STAGE_REPLAN: its job was re-planned). */
static void *cut_short_rank(void *arg)
{
    struct rank *r = arg;
    float *dev = NULL;
    rank_open(r, OPEN_S);
    if (r->g)
        dev = device_values(0, r->rank, SUM_FLOATS);
    pthread_barrier_wait(r->barrier);
    if (r->rank == 0 && dev)
        rank_allreduce(r, 0, dev, SUM_FLOATS, SLOW_S, 0);
    if (r->rank == 1) {
        sleep_s(SETTLE_S);
        if (r->stage == STAGE_STOP)
            atomic_store(&r->all[0].stop, 1);
        else if (r->stage == STAGE_REPLAN)
            atomic_store(&r->all[0].abort, 1);
        else
            rank_close(r);
    }
    pthread_barrier_wait(r->barrier); /* rank 0 has returned */
    cudaFree(dev);
    if (r->g)
        rank_close(r);
    return NULL;
}

/* Rank 0's pending all-reduce, cut short by rank 1 on `stage`, must fail
 * with `code` long before its timeout. */
static void scenario_cut_short(int stage, const char *name, const char *code, const char *what)
{
    struct rank r[RANKS];
    char title[192];
    run_ranks(cut_short_rank, stage, 2, (const int[]){ 0, 1 }, r);
    if (!formed(name, r, 2))
        return;
    snprintf(title, sizeof title, "%s: %s", name, what);
    check("nccl", title, r[0].rc[0] == -1 && err_is(&r[0].err[0], code, NULL) && r[0].secs[0] < FAST_S,
          "after %.2f s of %.0f: %s", r[0].secs[0], SLOW_S, outcome(r[0].rc[0], &r[0].err[0]));
}

/* The ranks all-reduce different counts. */
static void *count_rank(void *arg)
{
    struct rank *r = arg;
    size_t n = SUM_FLOATS - (size_t)r->rank;
    float *dev = NULL;
    rank_open(r, OPEN_S);
    if (r->g && (dev = device_values(0, r->rank, n)))
        rank_allreduce(r, 0, dev, n, SLOW_S, 0);
    cudaFree(dev);
    rank_close(r);
    return NULL;
}

static void scenario_count(void)
{
    struct rank r[RANKS];
    run_ranks(count_rank, STAGE_COUNT, 2, (const int[]){ 0, 1 }, r);
    if (!formed("counts", r, 2))
        return;
    for (int k = 0; k < 2; k++) {
        char what[128];
        snprintf(what, sizeof what, "counts: rank %d's all-reduce of a count its peer does not share fails "
                 "(nccl_error, invalid usage)", k);
        check("nccl", what, r[k].rc[0] == -1 && err_is(&r[k].err[0], "nccl_error", "invalid usage") &&
              r[k].secs[0] < FAST_S, "after %.2f s: %s", r[k].secs[0], outcome(r[k].rc[0], &r[k].err[0]));
    }
}

/* nccl_group_open's own failures: no id, bad arguments, one device twice. */
static void scenario_open(void)
{
    struct rank alone;
    rank_init(&alone, 1, 2, 1, STAGE_NO_ID, NULL);
    rank_open(&alone, DEADLINE_S);
    check("nccl", "open: a rank whose id never appears fails with peer_timeout within its timeout",
          alone.open_rc == -1 && !alone.g && err_is(&alone.open_err, "peer_timeout", NULL) && alone.open_s < FAST_S,
          "after %.2f s of %.0f: %s", alone.open_s, DEADLINE_S, outcome(alone.open_rc, &alone.open_err));
    nccl_group_close(alone.g);

    struct nccl_group *g = (struct nccl_group *)&alone; /* must be overwritten with NULL */
    struct shoal_err err;
    int rc = nccl_group_open(&alone.ctl, NULL, job_id, epoch, STAGE_NO_ID, 2, 2, 0, OPEN_S, &g, &err);
    check("nccl", "open: rank 2 of 2 is refused with no group", rc == -1 && !g && err_is(&err, "internal", NULL), "%s",
          outcome(rc, &err));
    g = (struct nccl_group *)&alone;
    double t0 = ctl_now();
    rc = nccl_group_open(&alone.ctl, NULL, job_id, epoch, STAGE_NO_ID, 1, 2, 7, OPEN_S, &g, &err);
    check("nccl", "open: a device the node does not have fails at once with device_error",
          rc == -1 && !g && err_is(&err, "device_error", NULL) && ctl_now() - t0 < 1.0, "after %.2f s: %s",
          ctl_now() - t0, outcome(rc, &err));
    (void)cudaGetLastError(); /* the refused cudaSetDevice's */
}

static void *lone_open_rank(void *arg)
{
    rank_open(arg, SLOW_S);
    return NULL;
}

/* A re-plan ends an open's waits: rank 1 polls for an id nobody puts,
 * rank 0 puts its id and waits for a group rank 1 never joins; once their
 * tasklets' abort flags are raised both give up, long before their
 * timeout, with "aborted" (train.c then ends the tasklet as aborted). */
static void scenario_open_replan(void)
{
    struct rank r[2];
    pthread_t threads[2];
    rank_init(&r[0], 0, 2, 0, STAGE_REPLAN_OPEN, NULL);
    rank_init(&r[1], 1, 2, 1, STAGE_NO_ID, NULL);
    for (int k = 0; k < 2; k++)
        if (pthread_create(&threads[k], NULL, lone_open_rank, &r[k]) != 0) {
            fprintf(stderr, "test_nccl_host: cannot start a rank thread\n");
            exit(2);
        }
    sleep_s(2 * SETTLE_S); /* rank 0 has put its id and waits in ncclCommInitRankConfig's forming */
    for (int k = 0; k < 2; k++)
        atomic_store(&r[k].abort, 1);
    for (int k = 0; k < 2; k++)
        pthread_join(threads[k], NULL);
    const char *waits[2] = { "forming the group", "waiting for the NCCL id" };
    for (int k = 0; k < 2; k++) {
        char what[160];
        snprintf(what, sizeof what, "replan: an open %s gives up when the assignment is replaced (aborted, 503), "
                 "not at its timeout", waits[k]);
        check("nccl", what, r[k].open_rc == -1 && !r[k].g && err_is(&r[k].open_err, "aborted", waits[k]) &&
              r[k].open_err.status == 503 && r[k].open_s >= SETTLE_S && r[k].open_s < 2 * SETTLE_S + FAST_S,
              "after %.2f s of %.0f (raised at %.1f s): %s", r[k].open_s, SLOW_S, 2 * SETTLE_S,
              outcome(r[k].open_rc, &r[k].open_err));
    }
}

/* Both ranks on device 0: NCCL refuses such a group. */
static void *same_device_rank(void *arg)
{
    struct rank *r = arg;
    rank_open(r, SLOW_S);
    rank_close(r);
    return NULL;
}

static void scenario_same_device(void)
{
    struct rank r[RANKS];
    run_ranks(same_device_rank, STAGE_SAME_DEVICE, 2, (const int[]){ 0, 0 }, r);
    for (int k = 0; k < 2; k++) {
        char what[128];
        snprintf(what, sizeof what, "open: rank %d of a group on one device twice is refused with NCCL's reason", k);
        check("nccl", what, r[k].open_rc == -1 && err_is(&r[k].open_err, "nccl_error", "Duplicate GPU detected") &&
              r[k].open_s < SLOW_S, "after %.2f s: %s", r[k].open_s, outcome(r[k].open_rc, &r[k].open_err));
    }
}

int main(int argc, char **argv)
{
    char *end;
    if (argc < 4) {
        fprintf(stderr, "usage: %s URL JOB EPOCH STAGE:REPLICA:TOKEN...\n", argv[0]);
        return 2;
    }
    snprintf(server_url, sizeof server_url, "%s", argv[1]);
    job_id = strtoll(argv[2], &end, 10);
    if (*end || job_id < 1) {
        fprintf(stderr, "test_nccl_host: job '%s' is not a job id\n", argv[2]);
        return 2;
    }
    long long e = strtoll(argv[3], &end, 10);
    if (*end || e < 1 || e > UINT32_MAX) {
        fprintf(stderr, "test_nccl_host: epoch '%s' is not a plan epoch\n", argv[3]);
        return 2;
    }
    epoch = (uint32_t)e;
    for (int i = 4; i < argc; i++)
        if (parse_token_arg(argv[i]) != 0) {
            fprintf(stderr, "test_nccl_host: '%s' is not STAGE:REPLICA:TOKEN\n", argv[i]);
            return 2;
        }
    for (int s = 0; s < SCENARIO_STAGES; s++)
        for (int k = 0; k < RANKS; k++)
            if (!tokens[s][k][0]) {
                fprintf(stderr, "test_nccl_host: no token for stage %d replica %d; the job needs %d stages of %d "
                        "replicas\n", s, k, SCENARIO_STAGES, RANKS);
                return 2;
            }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < RANKS) {
        fprintf(stderr, "test_nccl_host: %d emulated devices; run with SHOAL_HOST_CUDA_DEVICES=%d\n", devices, RANKS);
        return 2;
    }
    scenario_emulation();
    scenario_sum();
    scenario_deadline();
    scenario_abort();
    scenario_cut_short(STAGE_LEAVE, "leave", "peer_io",
                       "a peer that closes mid-way fails the pending all-reduce fast with peer_io");
    scenario_cut_short(STAGE_STOP, "stop", "stopped",
                       "an all-reduce gives up when its agent stops (stopped), not at its timeout");
    scenario_cut_short(STAGE_REPLAN, "replan", "aborted",
                       "an all-reduce gives up when the tasklet's assignment is replaced (aborted), not at its "
                       "timeout");
    scenario_count();
    scenario_open();
    scenario_open_replan();
    scenario_same_device();
    scenario_loss();
    scenario_mismatch();
    scenario_broadcast();
    scenario_len_max();
    scenario_root_leaves();
    scenario_tasklet();
    return check_summary();
}
