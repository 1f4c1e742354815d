/* hcu_internal.h - what the files of the host emulation share
 * (tests/gpu/host): the allocation registry behind every pointer check, the
 * sticky error, and holds on a stream for work that ends later (a
 * collective of the emulated NCCL). Not for the code under test. */
#ifndef SHOAL_TESTS_GPU_HOST_HCU_INTERNAL_H
#define SHOAL_TESTS_GPU_HOST_HCU_INTERNAL_H

#include "cuda_runtime.h"

#include <stddef.h>

enum hcu_mem { HCU_MEM_NONE, HCU_MEM_DEVICE, HCU_MEM_PINNED };

#ifdef __cplusplus
extern "C" {
#endif

/* The kind of allocation that holds all of [p, p + bytes), or HCU_MEM_NONE
 * when no single allocation does (host memory of the caller's own). */
enum hcu_mem hcu_mem_kind(const void *p, size_t bytes);

/* Records a fault as a device would: prints "hcu: WHAT" to stderr once and
 * makes `e` the sticky error every later runtime call returns. */
void hcu_fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The sticky error, or cudaSuccess. */
cudaError_t hcu_sticky(void);

/* Sets this thread's last error (cudaGetLastError) when e is not success. */
cudaError_t hcu_set_last(cudaError_t e);

/* 1 when `stream` is NULL or a live stream. */
int hcu_stream_valid(cudaStream_t stream);

/* A hold keeps cudaStreamQuery at cudaErrorNotReady, and makes
 * cudaStreamSynchronize wait, until it is released (from any thread). */
void hcu_stream_hold(cudaStream_t stream);
void hcu_stream_release(cudaStream_t stream);

/* The column-major product alpha op(A) (m,k) . op(B) (k,n) of bf16 device
 * operands (ta, tb: transposed) into c (m*n floats, leading dimension m),
 * through OpenBLAS on fp32 copies; 0, or -1 after a fault when an operand
 * reaches outside device memory (cublas.cc; cuBLAS and cuBLASLt share it). */
int hcu_bf16_product(int ta, int tb, int m, int n, int k, float alpha, const void *A, int lda, const void *B,
                     int ldb, float *c);

/* The device this thread set (cudaSetDevice), 0 by default. */
int hcu_current_device(void);

#ifdef __cplusplus
}
#endif

#endif
