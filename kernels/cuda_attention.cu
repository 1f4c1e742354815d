/* cuda_attention.cu - the CUDA backend's causal attention (cuda_layers.cuh):
 * q, k and v split into heads (rotated and repeated for grouped-query
 * attention where asked), batched products through cuBLAS, the causal
 * softmax and its backward, and the merge back; the CPU's
 * kern_cpu_attention_* and kern_cpu_rope_*. */
#include "cuda_reduce.cuh"

/* Offset of element i of a (B,NH,T,hs) tensor in a (B,T,ld) tensor whose row
 * holds head h at columns [h*hs, h*hs+hs). */
__device__ static size_t head_to_token(size_t i, int T, int NH, int hs, int ld)
{
    size_t d = i % hs, r = i / hs;
    size_t t = r % T;
    r /= T;
    size_t h = r % NH, b = r / NH;
    return (b * T + t) * ld + h * hs + d;
}

/* Element d of a head's row x (hs values), rotated by the angle table of
 * position t (cos, sin (T, hs/2)) as rotate_half pairs d with d +- hs/2;
 * sign +1 rotates, -1 rotates back.  Without tables, x[d]. */
__device__ static float rope_at(const float *x, int d, int hs, int t, const float *cos_t, const float *sin_t,
                                float sign)
{
    if (!cos_t)
        return x[d];
    int half = hs / 2, i = d % half;
    float c = cos_t[(size_t)t * half + i], s = sign * sin_t[(size_t)t * half + i];
    return d < half ? x[d] * c - x[d + half] * s : x[d] * c + x[d - half] * s;
}

/* q, k, v (B,NH,T,hs) bf16 <- qkv (B,T,C+2KV) fp32: the CPU reads them in
 * place from qkv; here they are split into heads for batched products, k
 * and v repeated for the query heads of their group (kv head h / (NH /
 * KVH)), q and k rotated first when tables are given (the CPU's
 * kern_cpu_rope_forward). */
__global__ static void permute_qkv_kernel(bf16 *q, bf16 *k, bf16 *v, const float *qkv, int T, int NH,
                                          int KVH, int hs, const float *cos_t, const float *sin_t, size_t n)
{
    int C = NH * hs, KV = KVH * hs, W = C + 2 * KV, group = NH / KVH;
    KCU_FOR(i, n) {
        size_t d = i % hs, r = i / hs;
        int t = (int)(r % T);
        r /= T;
        size_t h = r % NH, b = r / NH, g = h / group;
        const float *row = qkv + (b * T + t) * W;
        q[i] = __float2bfloat16(rope_at(row + h * hs, (int)d, hs, t, cos_t, sin_t, 1.0f));
        k[i] = __float2bfloat16(rope_at(row + C + g * hs, (int)d, hs, t, cos_t, sin_t, 1.0f));
        v[i] = __float2bfloat16(row[C + KV + g * hs + d]);
    }
}

/* out (B,T,C) bf16 <- y (B,NH,T,hs) bf16 */
__global__ static void unpermute_kernel(bf16 *out, const bf16 *y, int T, int NH, int hs,
                                        size_t n)
{
    KCU_FOR(i, n)
        out[head_to_token(i, T, NH, hs, NH * hs)] = y[i];
}

/* dy (B,NH,T,hs) bf16 <- dout (B,T,C) fp32 */
__global__ static void permute_kernel(bf16 *dy, const float *dout, int T, int NH, int hs,
                                      size_t n)
{
    KCU_FOR(i, n)
        dy[i] = __float2bfloat16(dout[head_to_token(i, T, NH, hs, NH * hs)]);
}

/* dqkv (B,T,C+2KV) fp32 and bf16 <- dq, dk, dv (B,NH,T,hs) fp32: one thread
 * per element of dqkv; dk and dv of a kv head sum its group's query heads
 * in order, and dq and dk are rotated back when tables are given (the
 * CPU's kern_cpu_rope_backward). */
__global__ static void unpermute_qkv_kernel(float *dqkv, bf16 *dqkv_bf, const float *dq, const float *dk,
                                            const float *dv, int T, int NH, int KVH, int hs,
                                            const float *cos_t, const float *sin_t, size_t n)
{
    int C = NH * hs, KV = KVH * hs, W = C + 2 * KV, group = NH / KVH;
    KCU_FOR(i, n) {
        size_t col = i % W, bt = i / W, b = bt / T;
        int t = (int)(bt % T), part = col < (size_t)C ? 0 : col < (size_t)(C + KV) ? 1 : 2;
        size_t in = part == 0 ? col : part == 1 ? col - C : col - C - KV;   /* column within the part */
        int head = (int)(in / hs), d = (int)(in % hs);
        float x[2] = {0.0f, 0.0f};   /* the element and its rotation pair */
        const float *src = part == 0 ? dq : part == 1 ? dk : dv;
        int from = part == 0 ? head : head * group, to = part == 0 ? head + 1 : (head + 1) * group;
        int half = hs / 2, pair = d < half ? d + half : d - half;
        for (int h = from; h < to; h++) {
            const float *r = src + (((size_t)b * NH + h) * T + t) * hs;
            x[0] += r[d];
            x[1] += r[pair];
        }
        float val = x[0];
        if (part < 2 && cos_t) {   /* rotated back: the transpose of the rotation */
            int j = d % half;
            float c = cos_t[(size_t)t * half + j], s = sin_t[(size_t)t * half + j];
            val = d < half ? x[0] * c + x[1] * s : x[0] * c - x[1] * s;
        }
        dqkv[i] = val;
        dqkv_bf[i] = __float2bfloat16(val);
    }
}

/* One block per row (b,h,t) of scores (B,NH,T,T): the CPU's softmax of
 * scale * q.k^T over s <= t, zeros above the diagonal (causal mask). */
__global__ static void softmax_forward_kernel(bf16 *att, const float *scores, int T,
                                              float scale)
{
    size_t row = blockIdx.x;
    int t = (int)(row % T);
    const float *z = scores + row * T; /* (T) */
    bf16 *a = att + row * T;           /* (T) */
    float max = -INFINITY, sum = 0.0f;
    for (int s = threadIdx.x; s <= t; s += blockDim.x)
        max = fmaxf(max, scale * z[s]);
    max = block_max(max);
    for (int s = threadIdx.x; s <= t; s += blockDim.x)
        sum += expf(scale * z[s] - max);
    sum = block_sum(sum);
    for (int s = threadIdx.x; s < T; s += blockDim.x)
        a[s] = __float2bfloat16(s <= t ? expf(scale * z[s] - max) / sum : 0.0f);
}

/* One block per row: the CPU's in-place softmax backward, and the scale of the
 * CPU's dq, dk products, so dpre is d(q.k^T) before scaling. */
__global__ static void softmax_backward_kernel(bf16 *dpre, const bf16 *att, const float *datt,
                                               int T, float scale)
{
    size_t row = blockIdx.x;
    int t = (int)(row % T);
    const bf16 *a = att + row * T;  /* (T) */
    const float *d = datt + row * T; /* (T) */
    bf16 *dp = dpre + row * T;       /* (T) */
    float dot = 0.0f;
    for (int s = threadIdx.x; s <= t; s += blockDim.x)
        dot += __bfloat162float(a[s]) * d[s];
    dot = block_sum(dot);
    for (int s = threadIdx.x; s < T; s += blockDim.x)
        dp[s] = __float2bfloat16(s <= t ? scale * __bfloat162float(a[s]) * (d[s] - dot) : 0.0f);
}

int kcu_attention_forward(const struct kcu_ctx *cx, bf16 *out, bf16 *qkvr, bf16 *att,
                          const float *qkv, float *scores, bf16 *y, int B, int T, int C,
                          int NH, int KVH, const float *cos_t, const float *sin_t, struct kern_err *err)
{
    int rc = -1;
    int hs = C / NH, BH = B * NH;
    size_t n = (size_t)B * T * C;                     /* elements of each of q, k, v */
    bf16 *q = qkvr, *k = qkvr + n, *v = qkvr + 2 * n; /* (B,NH,T,hs) each */
    long long s_th = (long long)T * hs, s_tt = (long long)T * T; /* batch strides */
    float scale = 1.0f / sqrtf((float)hs);
    unsigned blocks = kcu_blocks(n, KCU_THREADS);

    KCU_LAUNCH(permute_qkv_kernel, blocks, KCU_THREADS, cx->stream)(q, k, v, qkv, T, NH, KVH, hs, cos_t, sin_t,
                                                                     n);
    KCU_TRY_LAUNCH("permute_qkv_kernel");
    /* scores (T,T) = q (T,hs) . k^T (hs,T), per (b,h) */
    KCU_TRY_OK(kcu_gemm(cx, 0, 1, T, T, hs, 1.0f, q, hs, s_th, k, hs, s_th, 0.0f, scores,
                        CUDA_R_32F, T, s_tt, BH, err));
    KCU_LAUNCH(softmax_forward_kernel, BH * T, kcu_row_threads(T, KCU_ROW_THREADS), cx->stream)(
        att, scores, T, scale);
    KCU_TRY_LAUNCH("softmax_forward_kernel");
    /* y (T,hs) = att (T,T) . v (T,hs), per (b,h) */
    KCU_TRY_OK(kcu_gemm(cx, 0, 0, T, hs, T, 1.0f, att, T, s_tt, v, hs, s_th, 0.0f, y,
                        CUDA_R_16BF, hs, s_th, BH, err));
    KCU_LAUNCH(unpermute_kernel, blocks, KCU_THREADS, cx->stream)(out, y, T, NH, hs, n);
    KCU_TRY_LAUNCH("unpermute_kernel");
    rc = 0;
out:
    return rc;
}

int kcu_attention_backward(const struct kcu_ctx *cx, float *dqkv, bf16 *dqkv_bf,
                           const float *dout, const bf16 *qkvr, const bf16 *att, float *datt,
                           bf16 *dpre, bf16 *dy, float *dqkvr, int B, int T, int C, int NH, int KVH,
                           const float *cos_t, const float *sin_t, struct kern_err *err)
{
    int rc = -1;
    int hs = C / NH, BH = B * NH;
    size_t n = (size_t)B * T * C;
    const bf16 *q = qkvr, *k = qkvr + n, *v = qkvr + 2 * n; /* (B,NH,T,hs) each */
    float *dq = dqkvr, *dk = dqkvr + n, *dv = dqkvr + 2 * n; /* (B,NH,T,hs) each */
    long long s_th = (long long)T * hs, s_tt = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    unsigned blocks = kcu_blocks(n, KCU_THREADS);
    size_t n_out = (size_t)B * T * (C + 2 * (size_t)KVH * hs);   /* elements of dqkv */

    KCU_LAUNCH(permute_kernel, blocks, KCU_THREADS, cx->stream)(dy, dout, T, NH, hs, n);
    KCU_TRY_LAUNCH("permute_kernel");
    /* datt (T,T) = dy (T,hs) . v^T (hs,T) */
    KCU_TRY_OK(kcu_gemm(cx, 0, 1, T, T, hs, 1.0f, dy, hs, s_th, v, hs, s_th, 0.0f, datt,
                        CUDA_R_32F, T, s_tt, BH, err));
    /* dv (T,hs) = att^T (T,T) . dy (T,hs); the CPU adds into zeros */
    KCU_TRY_OK(kcu_gemm(cx, 1, 0, T, hs, T, 1.0f, att, T, s_tt, dy, hs, s_th, 0.0f, dv,
                        CUDA_R_32F, hs, s_th, BH, err));
    KCU_LAUNCH(softmax_backward_kernel, BH * T, kcu_row_threads(T, KCU_ROW_THREADS), cx->stream)(
        dpre, att, datt, T, scale);
    KCU_TRY_LAUNCH("softmax_backward_kernel");
    /* dq (T,hs) = dpre (T,T) . k (T,hs); dk (T,hs) = dpre^T (T,T) . q (T,hs) */
    KCU_TRY_OK(kcu_gemm(cx, 0, 0, T, hs, T, 1.0f, dpre, T, s_tt, k, hs, s_th, 0.0f, dq,
                        CUDA_R_32F, hs, s_th, BH, err));
    KCU_TRY_OK(kcu_gemm(cx, 1, 0, T, hs, T, 1.0f, dpre, T, s_tt, q, hs, s_th, 0.0f, dk,
                        CUDA_R_32F, hs, s_th, BH, err));
    KCU_LAUNCH(unpermute_qkv_kernel, kcu_blocks(n_out, KCU_THREADS), KCU_THREADS, cx->stream)(
        dqkv, dqkv_bf, dq, dk, dv, T, NH, KVH, hs, cos_t, sin_t, n_out);
    KCU_TRY_LAUNCH("unpermute_qkv_kernel");
    rc = 0;
out:
    return rc;
}
