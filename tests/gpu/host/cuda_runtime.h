/* cuda_runtime.h - the host emulation of the CUDA runtime (tests/gpu/host).
 *
 * Exactly the surface that kernels/cuda_*.cu and agent/net/nccl.c use, so that
 * the same sources compile as host code (g++ or gcc, no nvcc) and run under
 * ASan and UBSan in `make test`:
 *   - memory: cudaMalloc / cudaFree (device), cudaMallocHost / cudaFreeHost
 *     (pinned); every copy and memset checks that each side lies inside an
 *     allocation of the right kind, as a real device would fault;
 *     fresh device memory is filled with 0xff bytes (NaN in fp32 and bf16)
 *     so that a kernel reading what nothing wrote is seen;
 *   - streams and events: work runs when it is queued, so every stream is
 *     always idle and events complete at once (see README.md: what this
 *     cannot show);
 *   - errors: the last error of this thread (cudaGetLastError), and a sticky
 *     error (a fault inside a kernel or a product) that every later call
 *     returns, as on a device;
 *   - kernels (C++ only): KCU_LAUNCH in kernels/cuda_common.cuh calls
 *     hcu_launch, which runs every block of the grid on this thread, one
 *     fibre per CUDA thread (grid.cc), so __syncthreads, __shared__ memory
 *     and __shfl_xor_sync behave as on a device, and a barrier that not
 *     every thread reaches is reported instead of passing by.
 * The number of emulated devices is SHOAL_HOST_CUDA_DEVICES (default 1). */
#ifndef SHOAL_TESTS_GPU_HOST_CUDA_RUNTIME_H
#define SHOAL_TESTS_GPU_HOST_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "library_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The values are the CUDA runtime's, so messages read the same. */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorMisalignedAddress = 716,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
} cudaMemcpyKind;

typedef struct hcu_stream *cudaStream_t; /* NULL: the default stream */
typedef struct hcu_event *cudaEvent_t;

#define cudaStreamNonBlocking 0x01u
#define cudaEventDisableTiming 0x02u

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem; /* bytes */
    int major, minor;      /* compute capability emulated: 9.0 */
};
typedef struct cudaDeviceProp cudaDeviceProp;

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemsetAsync(void *dev, int value, size_t bytes, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
/* Work queued on `stream` after this waits for the event's work (here all
 * work has run when it is queued: only the handles are checked). */
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
/* The runtime's C++ overloads: any pointer type. */
template <class T> static inline cudaError_t cudaMalloc(T **ptr, size_t bytes)
{
    return cudaMalloc((void **)ptr, bytes);
}
template <class T> static inline cudaError_t cudaMallocHost(T **ptr, size_t bytes)
{
    return cudaMallocHost((void **)ptr, bytes);
}

#include "grid.h" /* kernels: launches, thread indices, barriers, shuffles */
#endif

#endif
