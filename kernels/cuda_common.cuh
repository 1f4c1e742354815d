/* cuda_common.cuh - what every file of the CUDA backend shares: the headers,
 * the bf16 type, launch sizes, and the macros that turn a failed CUDA or
 * cuBLAS call into a sentence in err->msg.
 *
 * The KCU_TRY macros jump to the function's `out:` label on failure. A
 * function that uses them has a `struct kern_err *err` in scope, starts with
 * `int rc = -1;`, declares every initialised variable before its first TRY
 * (C++ forbids a goto that skips an initialisation) and ends with
 * `rc = 0; out: ... return rc;`. */
#ifndef SHOAL_KERNELS_CUDA_COMMON_CUH
#define SHOAL_KERNELS_CUDA_COMMON_CUH

#include "stage.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

typedef __nv_bfloat16 bf16;

/* KCU_LAUNCH(kernel, grid, block, stream)(args...) queues a kernel with no
 * dynamic shared memory. Under nvcc it is the <<<...>>> launch; compiled as
 * host code against tests/gpu/host (make test), it runs the same kernel body
 * on the host emulation, which is how CI runs every kernel here. */
#ifdef __CUDACC__
#define KCU_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#else
#define KCU_LAUNCH(kernel, grid, block, stream) hcu_launch(#kernel, (grid), (block), (stream), kernel)
#endif

/* KCU_SHARED_BUFFER(name, bytes) declares a kernel's block-wide shared
 * buffer of `bytes` (a constant, at most 48 KiB), 32-byte aligned, as
 * `unsigned char *name`-like: a __shared__ array under nvcc, the host
 * thread's buffer on the emulation (tests/gpu/host/grid.h).  One per
 * kernel. */
#ifdef __CUDACC__
#define KCU_SHARED_BUFFER(name, bytes) alignas(32) __shared__ unsigned char name[bytes]
#else
#define KCU_SHARED_BUFFER(name, bytes) unsigned char *name = hcu_shared_buffer(bytes)
#endif

/* A CUDA runtime call; the error string comes first so that a long call text
 * is what the 256-byte message loses. A failed call also leaves its error as
 * the thread's last error, which the next KCU_TRY_LAUNCH would report as its
 * own: it is taken (cudaGetLastError) here. */
#define KCU_TRY(call)                                                               \
    do {                                                                            \
        cudaError_t kcu_e_ = (call);                                                \
        if (kcu_e_ != cudaSuccess) {                                                \
            (void)cudaGetLastError();                                               \
            kern_fail(err, "CUDA: %s (%s at %s:%d)", cudaGetErrorString(kcu_e_),     \
                      #call, __FILE__, __LINE__);                                   \
            goto out;                                                               \
        }                                                                           \
    } while (0)

/* A cuBLAS call: status number and name. */
#define KCU_TRY_BLAS(call)                                                          \
    do {                                                                            \
        cublasStatus_t kcu_s_ = (call);                                             \
        if (kcu_s_ != CUBLAS_STATUS_SUCCESS) {                                      \
            kern_fail(err, "cuBLAS: status %d %s: %s (%s at %s:%d)", (int)kcu_s_,    \
                      cublasGetStatusName(kcu_s_), cublasGetStatusString(kcu_s_),   \
                      #call, __FILE__, __LINE__);                                   \
            goto out;                                                               \
        }                                                                           \
    } while (0)

/* Right after a kernel launch: a bad configuration shows up here, a fault
 * inside the kernel at the next synchronisation. */
#define KCU_TRY_LAUNCH(kernel_name)                                                 \
    do {                                                                            \
        cudaError_t kcu_e_ = cudaGetLastError();                                    \
        if (kcu_e_ != cudaSuccess) {                                                \
            kern_fail(err, "CUDA: %s (launching %s at %s:%d)",                      \
                      cudaGetErrorString(kcu_e_), kernel_name, __FILE__, __LINE__); \
            goto out;                                                               \
        }                                                                           \
    } while (0)

/* One of our own functions that returns 0 or -1 and has already filled err. */
#define KCU_TRY_OK(expr)                                                            \
    do {                                                                            \
        if ((expr) != 0)                                                            \
            goto out;                                                               \
    } while (0)

#define KCU_THREADS 256           /* threads per block of element-wise kernels */
#define KCU_MAX_BLOCKS (1u << 16) /* grid-stride loops cover the rest */

/* Blocks for n elements, one per thread, at least 1. */
static inline unsigned kcu_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    if (b > KCU_MAX_BLOCKS)
        b = KCU_MAX_BLOCKS;
    return b ? (unsigned)b : 1u;
}

/* Threads for a kernel that gives one block to each row of `width` elements:
 * whole warps, at most cap (a multiple of 32, <= 1024). */
static inline unsigned kcu_row_threads(size_t width, unsigned cap)
{
    size_t t = (width + 31) / 32 * 32;
    return t > cap ? cap : (t ? (unsigned)t : 32u);
}

#endif
