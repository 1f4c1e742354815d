/* cuda_codec.cu - the stage links' wire formats (common/codec.h) packed and
 * unpacked on the device, so a hidden state leaves the GPU in the bytes it
 * travels in: bf16 is half of f32's bytes to copy, int8 about a quarter.
 * The bytes are codec_encode's bit for bit (the same integer rounding for
 * bf16; for int8 the same absmax, NaN winning, the same IEEE division and
 * rintf), so a CUDA stage and a CPU stage read each other's links. */
#include "cuda_reduce.cuh"

#include <stdint.h>
#include <string.h>

/* codec.c's bf16_bits: round to nearest even, a NaN kept a quiet NaN. */
__device__ static inline uint16_t link_bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__global__ static void bf16_encode_kernel(uint16_t *out, const float *x, size_t n)
{
    KCU_FOR(i, n)
        out[i] = link_bf16_bits(x[i]);
}

__global__ static void bf16_decode_kernel(float *x, const uint16_t *in, size_t n)
{
    KCU_FOR(i, n) {
        uint32_t u = (uint32_t)in[i] << 16;
        float v;
        memcpy(&v, &u, 4);
        x[i] = v;
    }
}

/* The larger of two absolute values, a NaN winning (codec.c's q8_row). */
__device__ static inline float absmax_nan(float a, float b)
{
    return a > b || a != a ? a : b;
}

/* One block per row: the row's scale into scales[row], its values into q. */
__global__ static void q8_encode_kernel(float *scales, int8_t *q, const float *x, int cols)
{
    __shared__ float part[32];
    size_t row = blockIdx.x;
    const float *xr = x + row * (size_t)cols;
    int8_t *qr = q + row * (size_t)cols;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float m = 0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        m = absmax_nan(fabsf(xr[i]), m);
    for (int o = 16; o > 0; o >>= 1)
        m = absmax_nan(__shfl_xor_sync(0xffffffffu, m, o), m);
    if (lane == 0)
        part[warp] = m;
    __syncthreads();
    m = lane < warps ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        m = absmax_nan(__shfl_xor_sync(0xffffffffu, m, o), m);
    if (!isfinite(m) || m == 0) {
        for (int i = threadIdx.x; i < cols; i += blockDim.x)
            qr[i] = 0;
        if (threadIdx.x == 0)
            scales[row] = m == 0 ? 0.0f : NAN;
        return;
    }
    float inv = 127.0f / m;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        float v = rintf(xr[i] * inv);
        qr[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    if (threadIdx.x == 0)
        scales[row] = m / 127.0f;
}

__global__ static void q8_decode_kernel(float *x, const float *scales, const int8_t *q, int cols, size_t n)
{
    KCU_FOR(i, n)
        x[i] = (float)q[i] * scales[i / (size_t)cols];
}

/* One format, one way: x (rows, cols) packed into wire (pack) or wire
 * unpacked into x. */
static int link_run(const struct kcu_ctx *cx, enum codec_id id, int pack, float *x, void *wire, int rows, int cols,
                    struct kern_err *err)
{
    int rc = -1;
    size_t n = (size_t)rows * cols;
    float *scales = (float *)wire;                 /* int8: every row's scale first, */
    int8_t *q = (int8_t *)wire + 4 * (size_t)rows; /* then the values row by row */
    if (n == 0) {
        rc = 0;
        goto out;
    }
    if (id == CODEC_F32) {
        KCU_TRY(cudaMemcpyAsync(pack ? wire : (void *)x, pack ? (const void *)x : wire, n * sizeof(float),
                                cudaMemcpyDeviceToDevice, cx->stream));
    } else if (id == CODEC_BF16 && pack) {
        KCU_LAUNCH(bf16_encode_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)((uint16_t *)wire, x, n);
        KCU_TRY_LAUNCH("bf16_encode_kernel");
    } else if (id == CODEC_BF16) {
        KCU_LAUNCH(bf16_decode_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(x, (uint16_t *)wire, n);
        KCU_TRY_LAUNCH("bf16_decode_kernel");
    } else if (id == CODEC_INT8 && pack) {
        KCU_LAUNCH(q8_encode_kernel, rows, kcu_row_threads((size_t)cols, KCU_ROW_THREADS), cx->stream)(scales, q, x,
                                                                                                   cols);
        KCU_TRY_LAUNCH("q8_encode_kernel");
    } else if (id == CODEC_INT8) {
        KCU_LAUNCH(q8_decode_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(x, scales, q, cols, n);
        KCU_TRY_LAUNCH("q8_decode_kernel");
    } else {
        kern_fail(err, "the CUDA backend has no link format %d", (int)id);
        goto out;
    }
    rc = 0;
out:
    return rc;
}

int kcu_link_encode(const struct kcu_ctx *cx, enum codec_id id, void *wire, const float *x, int rows, int cols,
                    struct kern_err *err)
{
    return link_run(cx, id, 1, (float *)x, wire, rows, cols, err);
}

int kcu_link_decode(const struct kcu_ctx *cx, enum codec_id id, float *x, const void *wire, int rows, int cols,
                    struct kern_err *err)
{
    return link_run(cx, id, 0, x, (void *)wire, rows, cols, err);
}
