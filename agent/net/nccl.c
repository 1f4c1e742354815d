/* nccl.c - a stage's data-parallel group over NCCL (nccl.h).
 *
 * The communicator is created non-blocking (ncclConfig_t.blocking = 0) so
 * that no NCCL call can hang the agent: every wait is a poll of
 * ncclCommGetAsyncError (and of the stream) against a deadline, and a
 * group whose peer does not keep up is aborted with ncclCommAbort. */
#include "nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/hex.h"
#include "../../common/log.h"
#include "../../common/patience.h"
#include "../control/control.h"

#define NCCL_CALL_MAX_S PATIENCE_AGENT_CALL_S   /* s; one HTTP call while polling for the id */
#define NCCL_CLOSE_S 5.0        /* s a clean finalize may take before we abort instead */
#define NCCL_SPIN_MIN_NS 10000  /* first pause between polls: an all-reduce may end in microseconds */
#define NCCL_SPIN_MAX_NS 1000000 /* longest pause: a forming group may take seconds */

struct nccl_group {
    ncclComm_t comm;        /* NULL once aborted or destroyed */
    cudaStream_t stream;    /* the all-reduce runs here, apart from the kernels' stream */
    int device;             /* CUDA device index */
    int rank, size;
    const atomic_int *stop;  /* the ctl's at open: the agent is stopping */
    const atomic_int *abort; /* the tasklet's: its assignment was replaced (the job is re-planned) */
    unsigned char *words;    /* device, 8 bytes a rank: the all-gather of the ranks' losses; a
                                broadcast's length (the first 8) */
};

int nccl_built(void)
{
    return 1;
}

static int cuda_failed(cudaError_t e, const char *what, struct shoal_err *err)
{
    return err_set(err, 500, "device_error", NULL, "CUDA %s: %s", what, cudaGetErrorString(e));
}

/* A failed NCCL call or an asynchronous NCCL error.  ncclRemoteError
 * means a peer went away or broke: that is the peer's failure, not ours. */
static int nccl_failed(ncclComm_t comm, ncclResult_t r, const char *what, struct shoal_err *err)
{
    const char *detail = comm ? ncclGetLastError(comm) : NULL;
    return err_set(err, 500, r == ncclRemoteError ? "peer_io" : "nccl_error", NULL, "NCCL %s: %s%s%s", what,
                   ncclGetErrorString(r), detail && detail[0] ? ": " : "", detail ? detail : "");
}

/* -1 with err set when a wait must end before its deadline: the agent
 * is stopping (503 "stopped") or the tasklet's assignment was replaced
 * (503 "aborted", as tasklet.c's waits say: train.c then ends the tasklet
 * as aborted, not failed).  Either flag may be NULL.  Else 0. */
static int wait_cut_short(const atomic_int *stop, const atomic_int *abort, const char *what, struct shoal_err *err)
{
    if (stop && atomic_load(stop))
        return err_set(err, 503, "stopped", NULL, "the agent is stopping; gave up %s", what);
    if (abort && atomic_load(abort))
        return err_set(err, 503, "aborted", NULL, "the assignment changed; gave up %s", what);
    return 0;
}

/* Waits until the communicator has no operation in progress and, when
 * `stream` is set, the stream is idle.  Returns 0; or -1 with err set on
 * an NCCL or CUDA error, on `stop` or `abort` (wait_cut_short), or (504
 * "peer_timeout") at `deadline` (monotonic s).  The caller aborts the
 * communicator on -1. */
static int nccl_wait(ncclComm_t comm, cudaStream_t stream, double deadline, const atomic_int *stop,
                     const atomic_int *abort, const char *what, struct shoal_err *err)
{
    long pause_ns = NCCL_SPIN_MIN_NS;
    double t0 = ctl_now();
    for (;;) {
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess)
            return nccl_failed(comm, r, "ncclCommGetAsyncError", err);
        if (state != ncclSuccess && state != ncclInProgress)
            return nccl_failed(comm, state, what, err);
        if (state == ncclSuccess) {
            if (!stream)
                return 0;
            cudaError_t e = cudaStreamQuery(stream);
            /* an error the communicator took while its stream drained (a
             * collective that failed on every rank releases their streams) */
            if (e == cudaSuccess && ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess &&
                state != ncclInProgress)
                return nccl_failed(comm, state, what, err);
            if (e == cudaSuccess)
                return 0;
            if (e != cudaErrorNotReady)
                return cuda_failed(e, what, err);
        }
        if (wait_cut_short(stop, abort, what, err) != 0)
            return -1;
        if (ctl_now() >= deadline)
            return err_set(err, 504, "peer_timeout", NULL, "NCCL %s did not finish within %.1f s: a peer of the "
                           "data-parallel group is gone or stalled; the communicator was aborted", what,
                           ctl_now() - t0);
        struct timespec ts = { 0, pause_ns };
        nanosleep(&ts, NULL);
        pause_ns = pause_ns * 2 > NCCL_SPIN_MAX_NS ? NCCL_SPIN_MAX_NS : pause_ns * 2;
    }
}

/* ---- the unique id through the server ------------------------------------ */

static void id_to_hex(const ncclUniqueId *id, char hex[2 * NCCL_UNIQUE_ID_BYTES + 1])
{
    hex_encode(id->internal, NCCL_UNIQUE_ID_BYTES, hex);
}

/* Returns 0 when `hex` is exactly 2 * NCCL_UNIQUE_ID_BYTES hex digits. */
static int id_from_hex(const char *hex, ncclUniqueId *id)
{
    return hex_decode(hex, id->internal, NCCL_UNIQUE_ID_BYTES);
}

static int id_put(const struct ctl *ctl, int64_t job_id, uint32_t epoch, int stage, const ncclUniqueId *id,
                  double deadline, struct shoal_err *err)
{
    char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
    id_to_hex(id, hex);
    json_t *body = json_pack("{s:I, s:I, s:i, s:s}", "job_id", (json_int_t)job_id, "epoch", (json_int_t)epoch,
                             "stage", stage, "unique_id", hex);
    if (!body)
        return err_set(err, 500, "internal", NULL, "out of memory for the NCCL id");
    double left = deadline - ctl_now();
    int rc = ctl_call_retry(ctl, "PUT", NCCL_ID_PATH, body, NCCL_CALL_MAX_S, left > 0.001 ? left : 0.001, NULL, err);
    json_decref(body);
    return rc;
}

/* Polls for replica 0's id until it is there, `deadline` passes, the
 * agent stops or `abort` is set.  404 (not put yet) and server errors are
 * waited out; other answers are final. */
static int id_get(const struct ctl *ctl, const atomic_int *abort, int64_t job_id, uint32_t epoch, int stage,
                  ncclUniqueId *id, double deadline, struct shoal_err *err)
{
    char path[128], last[sizeof err->message] = "no answer yet";
    snprintf(path, sizeof path, NCCL_ID_PATH "?job=%lld&epoch=%u&stage=%d", (long long)job_id, (unsigned)epoch,
             stage);
    for (;;) {
        long status = 0;
        json_t *ans = NULL;
        double left = deadline - ctl_now();
        long call_s = left >= NCCL_CALL_MAX_S ? NCCL_CALL_MAX_S : left < 1 ? 1 : (long)left + 1;
        int rc = ctl_call(ctl, "GET", path, NULL, call_s, &status, &ans, err);
        if (rc == 0 && status == 200) {
            int bad = id_from_hex(json_string_value(json_object_get(ans, "unique_id")), id);
            json_decref(ans);
            if (bad)
                return err_set(err, 502, "bad_answer", NULL, "the server's NCCL id for job %lld stage %d is not "
                               "%d hex digits", (long long)job_id, stage, 2 * NCCL_UNIQUE_ID_BYTES);
            return 0;
        }
        json_decref(ans);
        if (rc == 0 && status < 400)
            return err_set(err, 502, "bad_answer", NULL, "the server answered HTTP %ld to %s", status, path);
        if (rc == 0 && status != 404 && status < 500)
            return -1;   /* refused (403, 409 stale_epoch, ...): err holds the server's reason */
        snprintf(last, sizeof last, "%s", err->message);
        if (wait_cut_short(ctl->stop, abort, "waiting for the NCCL id", err) != 0)
            return -1;
        if (ctl_now() + NCCL_POLL_S > deadline)
            return err_set(err, 504, "peer_timeout", NULL, "replica 0 of stage %d did not put job %lld's NCCL id "
                           "for epoch %u in time (last answer: %s)", stage, (long long)job_id, (unsigned)epoch,
                           last);
        ctl_sleep(ctl, NCCL_POLL_S);
    }
}

/* ---- the group ------------------------------------------------------------ */

/* Releases what `g` holds.  A clean close finalizes the communicator (its
 * peers may still be finishing) for at most NCCL_CLOSE_S; an unclean one,
 * or one that cannot finalize in time, aborts it. */
static void group_free(struct nccl_group *g, int clean)
{
    struct shoal_err ignored;
    if (!g)
        return;
    (void)cudaSetDevice(g->device);
    if (g->comm && clean) {
        ncclResult_t r = ncclCommFinalize(g->comm);
        if ((r == ncclSuccess || r == ncclInProgress) &&
            nccl_wait(g->comm, NULL, ctl_now() + NCCL_CLOSE_S, NULL, NULL, "finalize", &ignored) == 0) {
            /* Destroyed, whatever it answers: the handle is not NCCL's to
             * abort any more (an abort after a failed destroy could free
             * it twice). */
            r = ncclCommDestroy(g->comm);
            if (r != ncclSuccess)
                log_warn("nccl close rank=%d size=%d: destroy failed: %s", g->rank, g->size,
                         ncclGetErrorString(r));
            g->comm = NULL;
        } else {
            log_warn("nccl close rank=%d size=%d: finalize failed, aborting the communicator", g->rank, g->size);
        }
    }
    if (g->comm)
        (void)ncclCommAbort(g->comm);
    if (g->stream)
        (void)cudaStreamDestroy(g->stream);
    (void)cudaFree(g->words);
    free(g);
}

int nccl_group_open(const struct ctl *ctl, const atomic_int *abort, int64_t job_id, uint32_t epoch, int stage,
                    int rank, int size, int device_index, double timeout_s, struct nccl_group **out,
                    struct shoal_err *err)
{
    int rc = -1;
    double deadline = ctl_now() + timeout_s;
    ncclUniqueId id;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t r;
    cudaError_t e;
    struct nccl_group *g = NULL;
    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size || stage < 0 || device_index < 0 || !(timeout_s > 0))
        return err_set(err, 500, "internal", NULL, "nccl_group_open: rank %d of %d, stage %d, device %d, "
                       "timeout %g s is no group", rank, size, stage, device_index, timeout_s);
    if (!(g = calloc(1, sizeof *g))) {
        err_set(err, 500, "internal", NULL, "out of memory for an NCCL group");
        goto out;
    }
    g->device = device_index;
    g->rank = rank;
    g->size = size;
    g->stop = ctl->stop;
    g->abort = abort;
    /* The device first: a wrong index should fail before anyone waits on us. */
    if ((e = cudaSetDevice(device_index)) != cudaSuccess) {
        cuda_failed(e, "cudaSetDevice", err);
        goto out;
    }
    if ((e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cuda_failed(e, "cudaStreamCreate", err);
        goto out;
    }
    if ((e = cudaMalloc((void **)&g->words, (size_t)size * sizeof(double))) != cudaSuccess) {
        cuda_failed(e, "cudaMalloc", err);
        goto out;
    }
    if (rank == 0) {
        if ((r = ncclGetUniqueId(&id)) != ncclSuccess) {
            nccl_failed(NULL, r, "ncclGetUniqueId", err);
            goto out;
        }
        if (id_put(ctl, job_id, epoch, stage, &id, deadline, err) != 0)
            goto out;
    } else if (id_get(ctl, abort, job_id, epoch, stage, &id, deadline, err) != 0) {
        goto out;
    }
    cfg.blocking = 0;
    r = ncclCommInitRankConfig(&g->comm, size, id, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_failed(g->comm, r, "ncclCommInitRankConfig", err);
        goto out;
    }
    if (nccl_wait(g->comm, NULL, deadline, g->stop, g->abort, "forming the group", err) != 0)
        goto out;
    log_info("nccl group job=%lld epoch=%u stage=%d rank=%d size=%d device=%d", (long long)job_id,
             (unsigned)epoch, stage, rank, size, device_index);
    *out = g;
    rc = 0;
out:
    if (rc != 0)
        group_free(g, 0);
    return rc;
}

/* ---- collectives ------------------------------------------------------------ */

/* A failed collective, or a failed copy around one, leaves the peers
 * waiting in it: the communicator is aborted so that they fail fast too,
 * and so that it is never used again.  Returns -1. */
static int group_broken(struct nccl_group *g)
{
    (void)ncclCommAbort(g->comm);
    g->comm = NULL;
    return -1;
}

/* Before a collective: the group is usable and its device is this
 * thread's (the device is per thread: the caller's may not have set it).
 * Returns 0, or -1 with err set. */
static int group_ready(struct nccl_group *g, struct shoal_err *err)
{
    cudaError_t e;
    if (!g->comm)
        return err_set(err, 500, "nccl_error", NULL, "the NCCL group was aborted by an earlier failure");
    if ((e = cudaSetDevice(g->device)) != cudaSuccess) {
        cuda_failed(e, "cudaSetDevice", err);
        return group_broken(g);
    }
    return 0;
}

/* Ends a collective that `call` queued on g->stream (`issued`: its
 * answer): waits at most timeout_s (s) for it to land, or until a flag is
 * set (nccl_wait).  Returns 0 once it has landed; else -1 with err set and
 * the group aborted. */
static int collective_end(struct nccl_group *g, ncclResult_t issued, const char *call, const char *what,
                          double timeout_s, struct shoal_err *err)
{
    if (issued != ncclSuccess && issued != ncclInProgress)
        nccl_failed(g->comm, issued, call, err);
    else if (nccl_wait(g->comm, g->stream, ctl_now() + timeout_s, g->stop, g->abort, what, err) == 0)
        return 0;
    return group_broken(g);
}

/* Copies `bytes` between host memory and the group's device on g->stream:
 * to the device before a collective (ordered before it on the stream; the
 * host side may be reused at once, as it is pageable), from it after one
 * has landed (done on return).  Returns 0, or -1 with err set and the
 * group aborted. */
static int group_copy(struct nccl_group *g, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                      struct shoal_err *err)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, g->stream);
    if (e == cudaSuccess && kind == cudaMemcpyDeviceToHost)
        e = cudaStreamSynchronize(g->stream);
    if (e == cudaSuccess)
        return 0;
    cuda_failed(e, kind == cudaMemcpyHostToDevice ? "copy to the device" : "copy from the device", err);
    return group_broken(g);
}

int nccl_allreduce_sum(struct nccl_group *g, float *device_data, size_t n, double timeout_s,
                       struct shoal_err *err)
{
    if (group_ready(g, err) != 0)
        return -1;
    /* In place (send = receive buffer).  The gradients are complete: the
     * kernels synchronise their own stream before backward returns. */
    ncclResult_t r = ncclAllReduce(device_data, device_data, n, ncclFloat32, ncclSum, g->comm, g->stream);
    return collective_end(g, r, "ncclAllReduce", "all-reduce", timeout_s, err);
}

int nccl_pass_loss(struct nccl_group *g, double mine, double *from_prev, double timeout_s, struct shoal_err *err)
{
    unsigned char *slot = g->words + (size_t)g->rank * sizeof mine;
    int prev = (g->rank - 1 + g->size) % g->size;
    if (group_ready(g, err) != 0 || group_copy(g, slot, &mine, sizeof mine, cudaMemcpyHostToDevice, err) != 0)
        return -1;
    /* In place, as bytes: NCCL moves them untouched, so every loss arrives
     * bit for bit (NaN and all). */
    ncclResult_t r = ncclAllGather(slot, g->words, sizeof mine, ncclUint8, g->comm, g->stream);
    if (collective_end(g, r, "ncclAllGather", "loss all-gather", timeout_s, err) != 0)
        return -1;
    return group_copy(g, from_prev, g->words + (size_t)prev * sizeof mine, sizeof mine, cudaMemcpyDeviceToHost,
                      err);
}

/* One broadcast from `root` of host[0, n) through device buffer `dev`:
 * copied in at the root, out at the others.  Returns 0, or -1 with err set
 * and the group aborted. */
static int broadcast_span(struct nccl_group *g, int root, unsigned char *dev, unsigned char *host, size_t n,
                          double timeout_s, struct shoal_err *err)
{
    int is_root = g->rank == root;
    if (is_root && group_copy(g, dev, host, n, cudaMemcpyHostToDevice, err) != 0)
        return -1;
    ncclResult_t r = ncclBroadcast(dev, dev, n, ncclUint8, root, g->comm, g->stream);
    if (collective_end(g, r, "ncclBroadcast", "state broadcast", timeout_s, err) != 0)
        return -1;
    return is_root ? 0 : group_copy(g, host, dev, n, cudaMemcpyDeviceToHost, err);
}

int nccl_broadcast_bytes(struct nccl_group *g, int root, unsigned char **data, size_t *len, size_t len_max,
                         double timeout_s, struct shoal_err *err)
{
    int rc = -1, is_root = g->rank == root;
    uint64_t total = is_root ? (uint64_t)*len : 0;   /* bytes; the first broadcast's 8 */
    unsigned char *buf = is_root ? *data : NULL, *staging = NULL;
    cudaError_t e;
    if (group_ready(g, err) != 0)
        return -1;
    if (root < 0 || root >= g->size) {
        err_set(err, 500, "internal", NULL, "nccl_broadcast_bytes: root %d is not a rank of %d", root, g->size);
        return group_broken(g);
    }
    if (broadcast_span(g, root, g->words, (unsigned char *)&total, sizeof total, timeout_s, err) != 0)
        return -1;
    if (!is_root && (total == 0 || total > len_max)) {
        err_set(err, 502, "peer_protocol", NULL, "state from replica %d: %llu bytes, expected 1 to %zu", root,
                (unsigned long long)total, len_max);
        return group_broken(g);   /* the root and the others, waiting in the first chunk, fail fast */
    }
    if (!is_root && !(buf = malloc((size_t)total))) {
        err_set(err, 500, "internal", NULL, "out of memory for %llu bytes of state", (unsigned long long)total);
        group_broken(g);
        goto out;
    }
    size_t chunk = total < NCCL_STATE_CHUNK_BYTES ? (size_t)total : NCCL_STATE_CHUNK_BYTES;
    if (chunk && (e = cudaMalloc((void **)&staging, chunk)) != cudaSuccess) {
        cuda_failed(e, "cudaMalloc", err);
        group_broken(g);
        goto out;
    }
    for (uint64_t off = 0; off < total; off += chunk) {
        size_t n = total - off < chunk ? (size_t)(total - off) : chunk;
        if (broadcast_span(g, root, staging, buf + off, n, timeout_s, err) != 0)
            goto out;
    }
    if (!is_root) {
        *data = buf;
        *len = (size_t)total;
    }
    rc = 0;
out:
    (void)cudaFree(staging);
    if (rc != 0 && !is_root)
        free(buf);
    return rc;
}

void nccl_group_close(struct nccl_group *g)
{
    group_free(g, 1);
}
