/* cuda_reduce.cuh - what the CUDA layer files share inside a kernel (not
 * public): row-block sizes, the grid-stride loop, and sums and maxima over a
 * warp or a block with warp shuffles, in a fixed order. */
#ifndef SHOAL_KERNELS_CUDA_REDUCE_CUH
#define SHOAL_KERNELS_CUDA_REDUCE_CUH

#include "cuda_layers.cuh"

#include <math.h>

#define KCU_ROW_THREADS 256 /* most threads per row block of layernorm and softmax */
#define KCU_CE_THREADS 1024 /* most threads per row block of the cross-entropy (rows of V) */

/* Grid-stride loop over [0, n) with a size_t index. */
#define KCU_FOR(i, n)                                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (size_t)gridDim.x * blockDim.x)

/* A value of either storage type as fp32 (for kernels templated on it). */
__device__ static inline float kcu_f32(float x)
{
    return x;
}
__device__ static inline float kcu_f32(bf16 x)
{
    return __bfloat162float(x);
}

/* ---- reductions (blockDim.x a multiple of 32) ---- */

__device__ static inline float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ static inline double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum of v over the block, returned to every thread. */
__device__ static inline float block_sum(float v)
{
    __shared__ float part[32]; /* one per warp */
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads(); /* a previous call may still be reading part */
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? part[lane] : 0.0f);
}

__device__ static inline float block_max(float v)
{
    __shared__ float part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? part[lane] : -INFINITY);
}

__device__ static inline double block_sum_d(double v)
{
    __shared__ double part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    return warp_sum_d(lane < warps ? part[lane] : 0.0);
}

#endif
