/* nccl.h - the host emulation of NCCL (tests/gpu/host): exactly the
 * surface agent/net/nccl.c uses, with NCCL's own numeric values, so that file
 * compiles as host C and its groups run under ASan and UBSan in make test.
 *
 * Ranks are threads of one process (nccl.cc).  The unique id names a
 * rendezvous by a random 128-bit key; a communicator forms when all its
 * ranks have joined.  What a real communicator does that agent/net/nccl.c
 * depends on is emulated as NCCL documents it:
 *   - non-blocking communicators (config blocking = 0): init answers
 *     ncclInProgress and ncclCommGetAsyncError says ncclInProgress until
 *     every rank joined; a blocking one waits in init;
 *   - init refuses bad arguments (ncclInvalidArgument), two ranks with one
 *     rank number or on one device (ncclInvalidUsage, "Duplicate GPU
 *     detected");
 *   - collectives are asynchronous: the stream stays busy (cudaStreamQuery:
 *     cudaErrorNotReady) until every rank has made its call, then each lands
 *     for all of them: ncclAllReduce (float32 sum only) gives every rank
 *     the same sum, taken in rank order; ncclAllGather (int8, uint8,
 *     float32) rank r's elements at slot r; ncclBroadcast (the same types)
 *     the root's elements;
 *   - the k-th collective of every rank must be the same call with the same
 *     count, datatype and root, else each of them fails (ncclInvalidUsage);
 *   - a rank that aborts or leaves makes its peers' pending and later
 *     collectives fail with ncclRemoteError, and releases their streams;
 *   - ncclGetLastError says what failed last, in a sentence.
 * Every call is thread-safe. */
#ifndef SHOAL_TESTS_GPU_HOST_NCCL_H
#define SHOAL_TESTS_GPU_HOST_NCCL_H

#include <limits.h>
#include <stddef.h>

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t; /* opaque; NULL is no communicator */

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6, /* a peer went away or broke */
    ncclInProgress = 7,  /* a non-blocking call has not finished yet */
    ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

/* Emulated: ncclFloat32 (every collective) and ncclInt8, ncclUint8 (the
 * collectives that only move data: all-gather, broadcast); the others are
 * named so that a call with one is refused as NCCL would refuse an unknown
 * type. */
typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_MAGIC 0xcafebeefu

/* The leading fields of NCCL's ncclConfig_t; as in NCCL, a config that was
 * not set from NCCL_CONFIG_INITIALIZER is refused (ncclInvalidArgument). */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking; /* 1 (or undefined): init waits for every rank; 0: it returns ncclInProgress */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER { sizeof(ncclConfig_t), NCCL_CONFIG_MAGIC, 22809u, NCCL_CONFIG_UNDEF_INT }

/* A fresh id naming a new rendezvous. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);

/* Joins the communicator of `commId` as `rank` of `nranks` on the calling
 * thread's current device.  *comm is set unless the arguments are refused
 * at once; free it with ncclCommDestroy or ncclCommAbort. */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);

/* *asyncError: ncclInProgress while the communicator forms or finalizes,
 * the error that broke it, else ncclSuccess (also while a collective is
 * queued: the stream says when it ends). */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

/* Queues the sum over the ranks of sendbuff[0..count) into
 * recvbuff[0..count) (device memory; in place allowed) on `stream`. */
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

/* Queues, on `stream`, rank r's sendbuff[0..sendcount) into every rank's
 * recvbuff[r * sendcount, (r + 1) * sendcount) (device memory; in place,
 * sendbuff = recvbuff + rank * sendcount, allowed). */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);

/* Queues, on `stream`, the root's sendbuff[0..count) into every rank's
 * recvbuff[0..count) (device memory; sendbuff is read on the root only;
 * in place allowed). */
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);

/* Flushes the queued collectives (ncclInProgress on a non-blocking
 * communicator until they end), then ncclCommDestroy frees it. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);

/* Frees the communicator at once; its peers' pending and later collectives
 * fail with ncclRemoteError.  NULL is ignored. */
ncclResult_t ncclCommAbort(ncclComm_t comm);

/* A static name for `result`. */
const char *ncclGetErrorString(ncclResult_t result);

/* The last failure of `comm` (or of this thread's calls when comm is NULL
 * or has none), "" when nothing failed.  Valid until this thread's next
 * call of it. */
const char *ncclGetLastError(ncclComm_t comm);

#ifdef __cplusplus
}
#endif

#endif
