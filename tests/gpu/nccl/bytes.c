/* bytes.c - test_nccl_host's scenarios of the collectives that move bytes
 * rather than sum floats: the last stage's losses passed round by an
 * all-gather (nccl_pass_loss), and a live resume's state handed from a
 * root to the other replicas (nccl_broadcast_bytes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../host/cuda_runtime.h" /* the emulation: this test never runs on a device */
#include "../host/nccl.h"
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

/* Checks that call `step` of all three ranks was an all-reduce of
 * rank_value(step, rank, .) that landed the rank-order sum everywhere. */
static void check_sum3(const char *what, const struct rank *r, int step)
{
    size_t wrong = 0, first = SUM_FLOATS;
    int done = 1;
    for (int k = 0; k < RANKS; k++) {
        done &= r[k].rc[step] == 0 && r[k].result[step] != NULL;
        for (size_t i = 0; r[k].result[step] && i < SUM_FLOATS; i++) {
            float want = rank_value(step, 0, i) + rank_value(step, 1, i);
            want += rank_value(step, 2, i); /* in rank order, as the emulation sums */
            if (memcmp(&r[k].result[step][i], &want, sizeof want) != 0) {
                wrong++;
                first = i < first ? i : first;
            }
        }
    }
    check("nccl", what, done && wrong == 0, "%s, %s, %s; %zu of %d floats wrong over the ranks, the first at %zu",
          outcome(r[0].rc[step], &r[0].err[step]), outcome(r[1].rc[step], &r[1].err[step]),
          outcome(r[2].rc[step], &r[2].err[step]), wrong, 3 * SUM_FLOATS, first);
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
    check_sum3("losses: an all-reduce on the same group then sums right on every rank", r, 1);
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

/* ---- the state broadcast -------------------------------------------------------- */

#define STATE_BYTES (3 * NCCL_STATE_CHUNK_BYTES + 17) /* three whole chunks and a short one */

/* Byte i of the state a root sends: no period that a chunk size divides. */
static unsigned char state_byte(size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    return (unsigned char)(x >> 56 ^ x >> 23);
}

/* n bytes of state (malloc'd), or NULL. */
static unsigned char *state_new(size_t n)
{
    unsigned char *b = malloc(n);
    for (size_t i = 0; b && i < n; i++)
        b[i] = state_byte(i);
    return b;
}

/* What the ranks of a broadcast scenario do: the root's state of `len`
 * bytes, each rank's len_max, and whether an all-reduce follows. */
struct broadcast_case {
    int root;
    size_t len;
    size_t len_max[RANKS];
    int then_sum;
};
static const struct broadcast_case *the_case; /* the scenario running */

/* nccl_broadcast_bytes as call 0, into r->state; then, when the case says
 * so and it worked, an all-reduce (call 1). */
static void *broadcast_rank(void *arg)
{
    struct rank *r = arg;
    float *dev = NULL;
    rank_open(r, OPEN_S);
    if (r->rank == the_case->root && (r->state = state_new(the_case->len)))
        r->state_len = the_case->len;
    if (r->g && (r->rank != the_case->root || r->state)) {
        double t0 = ctl_now();
        r->rc[0] = nccl_broadcast_bytes(r->g, the_case->root, &r->state, &r->state_len,
                                        the_case->len_max[r->rank], SLOW_S, &r->err[0]);
        r->done_at = ctl_now();
        r->secs[0] = r->done_at - t0;
    }
    if (the_case->then_sum && r->rc[0] == 0 && (dev = device_values(1, r->rank, SUM_FLOATS)))
        rank_allreduce(r, 1, dev, SUM_FLOATS, SLOW_S, 1);
    pthread_barrier_wait(r->barrier);
    cudaFree(dev);
    rank_close(r);
    return NULL;
}

/* Bytes of `got` (n of them) that differ from the state sent; the first
 * in *first. */
static size_t state_wrong(const unsigned char *got, size_t n, size_t *first)
{
    size_t wrong = 0;
    *first = n;
    for (size_t i = 0; got && i < n; i++)
        if (got[i] != state_byte(i)) {
            wrong++;
            *first = i < *first ? i : *first;
        }
    return wrong;
}

/* Rank 1 of 3 hands three chunks and 17 bytes to ranks 0 and 2, as a live
 * resume's root does; then the group all-reduces as the next step would. */
void scenario_broadcast(void)
{
    static const struct broadcast_case c = { .root = 1, .len = STATE_BYTES,
                                             .len_max = { STATE_BYTES, STATE_BYTES, STATE_BYTES + 1 },
                                             .then_sum = 1 };
    struct rank r[RANKS];
    the_case = &c;
    run_ranks(broadcast_rank, STAGE_BROADCAST, RANKS, (const int[]){ 0, 1, 2 }, r);
    if (!formed("broadcast", r, RANKS))
        return;
    for (int k = 0; k < RANKS; k++) {
        char what[160];
        size_t first, wrong = state_wrong(r[k].state, r[k].state_len, &first);
        if (k == c.root)
            snprintf(what, sizeof what, "broadcast: the root (rank 1) sends its %zu bytes and keeps them as they "
                     "were", c.len);
        else
            snprintf(what, sizeof what, "broadcast: rank %d gets the root's %zu bytes (3 chunks + 17), byte for "
                     "byte", k, c.len);
        check("nccl", what, r[k].rc[0] == 0 && r[k].state && r[k].state_len == c.len && wrong == 0,
              "%s in %.2f s; %zu bytes, %zu wrong, the first at %zu", outcome(r[k].rc[0], &r[k].err[0]),
              r[k].secs[0], r[k].state_len, wrong, first);
    }
    check_sum3("broadcast: an all-reduce on the same group then sums right on every rank", r, 1);
    for (int k = 0; k < RANKS; k++)
        rank_free(&r[k]);
}

/* Rank 0 sends 1000 bytes; rank 1 takes at most 999: it refuses them, and
 * the root and rank 2, waiting for the bytes, fail fast. */
void scenario_len_max(void)
{
    static const struct broadcast_case c = { .root = 0, .len = 1000, .len_max = { 1000, 999, 1000 } };
    struct rank r[RANKS];
    the_case = &c;
    run_ranks(broadcast_rank, STAGE_LEN_MAX, RANKS, (const int[]){ 0, 1, 2 }, r);
    if (!formed("len_max", r, RANKS))
        return;
    check("nccl", "len_max: a rank that takes at most 999 bytes refuses the root's 1000 (peer_protocol), keeping "
          "nothing", r[1].rc[0] == -1 && err_is(&r[1].err[0], "peer_protocol", "1000 bytes, expected 1 to 999") &&
          !r[1].state && r[1].state_len == 0 && r[1].secs[0] < FAST_S, "after %.2f s: %s", r[1].secs[0],
          outcome(r[1].rc[0], &r[1].err[0]));
    for (int k = 0; k < RANKS; k += 2) {
        char what[128];
        snprintf(what, sizeof what, "len_max: %s then fails fast (peer_io), not at its timeout",
                 k == 0 ? "the root" : "the other receiver");
        check("nccl", what, r[k].rc[0] == -1 && err_is(&r[k].err[0], "peer_io", NULL) && r[k].secs[0] < FAST_S &&
              (k == 0 || !r[k].state), "after %.2f s of %.0f: %s", r[k].secs[0], SLOW_S,
              outcome(r[k].rc[0], &r[k].err[0]));
    }
    for (int k = 0; k < RANKS; k++)
        rank_free(&r[k]);
}

/* ---- a root that leaves mid-way, driven by hand --------------------------------- */

/* Waits at most s seconds for `stream` to be idle.  Returns 0, or -1. */
static int stream_idle(cudaStream_t stream, double s)
{
    double until = ctl_now() + s;
    cudaError_t e;
    while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady && ctl_now() < until)
        sleep_s(0.001);
    return e == cudaSuccess ? 0 : -1;
}

/* Waits at most s seconds for `comm` to form.  Returns 0, or -1. */
static int comm_formed(ncclComm_t comm, double s)
{
    double until = ctl_now() + s;
    ncclResult_t state = ncclInProgress;
    while (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress && ctl_now() < until)
        sleep_s(0.001);
    return state == ncclSuccess ? 0 : -1;
}

/* PUTs `id` for r's stage, as nccl.c's rank 0 does. */
static int id_put(const struct rank *r, const ncclUniqueId *id, struct shoal_err *err)
{
    char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->internal[i]);
    json_t *body = json_pack("{s:I, s:I, s:i, s:s}", "job_id", (json_int_t)job_id, "epoch", (json_int_t)epoch,
                             "stage", r->stage, "unique_id", hex);
    int rc = body ? ctl_call_retry(&r->ctl, "PUT", NCCL_ID_PATH, body, 10, OPEN_S, NULL, err) : -1;
    json_decref(body);
    return rc;
}

/* Rank 0 as nccl.c's root would be, but driven by hand on the emulation so
 * that it can leave mid-way: it joins the group, broadcasts the length of
 * a three-chunk state and the first chunk, then aborts.  What went wrong
 * goes into r->err[0]. */
static void hand_root(struct rank *r)
{
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cudaStream_t stream = NULL;
    unsigned char *dev = NULL;
    uint64_t total = 3 * NCCL_STATE_CHUNK_BYTES; /* bytes, as nccl_broadcast_bytes sends it */
    const char *step = "the device";
    cfg.blocking = 0;
    r->rc[0] = -1;
    if (cudaSetDevice(r->device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&dev, NCCL_STATE_CHUNK_BYTES) != cudaSuccess)
        goto out;
    step = "the id";
    if (ncclGetUniqueId(&id) != ncclSuccess || id_put(r, &id, &r->err[0]) != 0)
        goto out;
    step = "forming";
    if (ncclCommInitRankConfig(&comm, r->size, id, 0, &cfg) != ncclInProgress || comm_formed(comm, OPEN_S) != 0)
        goto out;
    step = "the length";
    if (cudaMemcpy(dev, &total, sizeof total, cudaMemcpyHostToDevice) != cudaSuccess ||
        ncclBroadcast(dev, dev, sizeof total, ncclUint8, 0, comm, stream) != ncclSuccess ||
        stream_idle(stream, SLOW_S) != 0)
        goto out;
    step = "the first chunk";
    if (cudaMemsetAsync(dev, 0x5a, NCCL_STATE_CHUNK_BYTES, stream) != cudaSuccess ||
        ncclBroadcast(dev, dev, NCCL_STATE_CHUNK_BYTES, ncclUint8, 0, comm, stream) != ncclSuccess ||
        stream_idle(stream, SLOW_S) != 0)
        goto out;
    r->rc[0] = 0;
out:
    if (r->rc[0] != 0 && !r->err[0].code[0])
        err_set(&r->err[0], 500, "hand_root", NULL, "the root driven by hand failed at %s", step);
    ncclCommAbort(comm);
    r->done_at = ctl_now();
    cudaFree(dev);
    if (stream)
        cudaStreamDestroy(stream);
}

static void *root_leaves_rank(void *arg)
{
    struct rank *r = arg;
    if (r->rank == 0) {
        hand_root(r);
        return NULL;
    }
    rank_open(r, OPEN_S);
    if (r->g) {
        double t0 = ctl_now();
        r->rc[0] = nccl_broadcast_bytes(r->g, 0, &r->state, &r->state_len, STATE_BYTES, SLOW_S, &r->err[0]);
        r->done_at = ctl_now();
        r->secs[0] = r->done_at - t0;
    }
    rank_close(r);
    return NULL;
}

/* The root leaves after the length and one chunk of three: the receivers,
 * waiting for the second, fail fast and keep nothing. */
void scenario_root_leaves(void)
{
    struct rank r[RANKS];
    run_ranks(root_leaves_rank, STAGE_ROOT_LEAVES, RANKS, (const int[]){ 0, 1, 2 }, r);
    if (r[0].rc[0] != 0 || !formed("root leaves", r + 1, RANKS - 1)) {
        check("nccl", "root leaves: the root sends the length and the first chunk", r[0].rc[0] == 0, "%s",
              outcome(r[0].rc[0], &r[0].err[0]));
        return;
    }
    for (int k = 1; k < RANKS; k++) {
        char what[128];
        double after = r[k].done_at - r[0].done_at;
        snprintf(what, sizeof what, "root leaves: rank %d's broadcast fails fast (peer_io) once the root leaves "
                 "mid-way", k);
        check("nccl", what, r[k].rc[0] == -1 && err_is(&r[k].err[0], "peer_io", NULL) && after < FAST_S &&
              !r[k].state && r[k].state_len == 0, "%.2f s after the root left, %.2f s of %.0f in all: %s", after,
              r[k].secs[0], SLOW_S, outcome(r[k].rc[0], &r[k].err[0]));
    }
    for (int k = 0; k < RANKS; k++)
        rank_free(&r[k]);
}
