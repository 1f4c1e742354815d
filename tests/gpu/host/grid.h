/* grid.h - kernels on the host (tests/gpu/host): what device code sees
 * (threadIdx, blockIdx, blockDim, gridDim, __syncthreads, __shfl_xor_sync,
 * atomicAdd, __shared__) and the launch that kernels/cuda_common.cuh's
 * KCU_LAUNCH expands to where no nvcc compiles it. C++ only.
 *
 * A launch runs the grid at once: its blocks are shared out among the
 * OpenMP threads, and within a block each CUDA thread is a fibre of that
 * host thread (grid.cc). Fibres switch only at a barrier, so a block's
 * threads run one at a time up to the next __syncthreads (or, for a warp,
 * the next shuffle), in thread order. __shared__ is a function-level static
 * of the host thread: a host thread runs one block at a time, so each block
 * has it to itself, as on a device. */
#ifndef SHOAL_TESTS_GPU_HOST_GRID_H
#define SHOAL_TESTS_GPU_HOST_GRID_H

#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

/* The position of the running CUDA thread (grid.cc keeps it per host thread). */
struct hcu_where {
    uint3 thread, block;
    dim3 block_dim, grid_dim;
};
extern thread_local hcu_where hcu_here;

#define threadIdx (hcu_here.thread)
#define blockIdx (hcu_here.block)
#define blockDim (hcu_here.block_dim)
#define gridDim (hcu_here.grid_dim)

/* Waits until every thread of the block that has not returned is here. */
void __syncthreads();

/* Exchanges 8 bytes with the lane `lane ^ lane_mask` of this warp once every
 * lane in `mask` is here (a lane outside the block's threads, or one that
 * returned, makes it a reported fault). */
uint64_t hcu_shfl_xor(unsigned mask, uint64_t v, int lane_mask, int width);

template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = hcu_shfl_xor(mask, bits, lane_mask, width);
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Blocks may one day run on several host threads: adds are atomic. */
static inline float atomicAdd(float *p, float v)
{
    float old, sum;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do
        sum = old + v;
    while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}

static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

/* KCU_SHARED_BUFFER's buffer (kernels/cuda_common.cuh): a block's
 * `bytes` of shared memory, 128-byte aligned, the host thread's own (a host
 * thread runs one block at a time, so the block has it to itself, as the
 * __shared__ statics).  Kept on the heap, not in thread-local storage,
 * whose size the sanitizers' threads do not take well.  More than a
 * device's 48 KiB of static shared memory is a fault. */
unsigned char *hcu_shared_buffer(size_t bytes);

/* Runs body(arg) as every thread of the grid; a bad configuration or stream
 * sets the last error (cudaGetLastError) and runs nothing. */
void hcu_run_grid(const char *name, dim3 grid, dim3 block, struct hcu_stream *stream,
                  void (*body)(void *), void *arg);

template <class K> struct hcu_launch_t {
    const char *name;
    dim3 grid, block;
    struct hcu_stream *stream;
    K *kernel;

    template <class... A> void operator()(A... args) const
    {
        auto call = [&]() { kernel(args...); };
        hcu_run_grid(name, grid, block, stream,
                     [](void *p) { (*static_cast<decltype(call) *>(p))(); }, &call);
    }
};

/* KCU_LAUNCH(kernel, grid, block, stream)(args...) without nvcc. */
template <class K>
static inline hcu_launch_t<K> hcu_launch(const char *name, dim3 grid, dim3 block,
                                         struct hcu_stream *stream, K *kernel)
{
    return hcu_launch_t<K>{name, grid, block, stream, kernel};
}

#endif
