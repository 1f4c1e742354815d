/* cuda_layers.cu - the CUDA layers, in the order of cpu_layers_impl.inc; each
 * kernel says which lines of the CPU layer it computes. Shapes and precision
 * are in cuda_layers.cuh. Row kernels give one block to each row and reduce
 * with warp shuffles; reductions over rows (weight and bias gradients) run in
 * two fixed-order passes, so results do not depend on scheduling, except the
 * token-embedding gradient, which uses atomic adds.  The attention is in
 * cuda_attention.cu; the reductions both use are in cuda_reduce.cuh. */
#include "cuda_reduce.cuh"

/* ---- column sums: dst (width) += sums over rows, in two passes ---- */

/* partial (chunks, OC): row c = sum of a (N,OC), rows ld apart, over rows
 * [c*R, c*R+R); a fp32 or bf16, summed in fp32. */
template <typename T>
__global__ static void colsum_partial_kernel(float *partial, const T *a, int N, int OC, int ld)
{
    int o = blockIdx.y * blockDim.x + threadIdx.x;
    int n0 = blockIdx.x * KCU_COLSUM_ROWS, n1 = min(N, n0 + KCU_COLSUM_ROWS);
    if (o >= OC)
        return;
    float sum = 0.0f;
    for (int n = n0; n < n1; n++)
        sum += kcu_f32(a[(size_t)n * ld + o]);
    partial[(size_t)blockIdx.x * OC + o] = sum;
}

/* dst (width) += sum over c < chunks of partial[c * stride + i], c in order. */
__global__ static void colsum_finish_kernel(float *dst, const float *partial, int chunks,
                                            int width, int stride)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= width)
        return;
    float sum = 0.0f;
    for (int c = 0; c < chunks; c++)
        sum += partial[(size_t)c * stride + i];
    dst[i] += sum;
}

int kcu_colsum_finish(const struct kcu_ctx *cx, float *dst, const float *partial, int chunks, int width,
                      int stride, struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(colsum_finish_kernel, (width + KCU_THREADS - 1) / KCU_THREADS, KCU_THREADS, cx->stream)(
        dst, partial, chunks, width, stride);
    KCU_TRY_LAUNCH("colsum_finish_kernel");
    rc = 0;
out:
    return rc;
}

/* ---- matrix products ---- */

int kcu_gemm(const struct kcu_ctx *cx, int trans_a, int trans_b, int M, int N, int K,
             float alpha, const bf16 *A, int lda, long long stride_a, const bf16 *B, int ldb,
             long long stride_b, float beta, void *C, cudaDataType_t c_type, int ldc,
             long long stride_c, int batch, struct kern_err *err)
{
    int rc = -1;
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* cuBLAS is column-major, and a row-major (r,c) matrix with ld is the
     * column-major (c,r) matrix with the same ld: its transpose. So row-major
     * C = op(A) . op(B) is column-major C^T = op(B)^T . op(A)^T: B goes first,
     * M and N swap, and each operand keeps its own op and ld. */
    if (batch == 1)
        KCU_TRY_BLAS(cublasGemmEx(cx->blas, op_b, op_a, N, M, K, &alpha, B, CUDA_R_16BF, ldb,
                                  A, CUDA_R_16BF, lda, &beta, C, c_type, ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
        KCU_TRY_BLAS(cublasGemmStridedBatchedEx(
            cx->blas, op_b, op_a, N, M, K, &alpha, B, CUDA_R_16BF, ldb, stride_b, A,
            CUDA_R_16BF, lda, stride_a, &beta, C, c_type, ldc, stride_c, batch,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    rc = 0;
out:
    return rc;
}

/* ---- encoder ---- */

/* out (B,T,C) = wte[inp] + wpe[t] */
__global__ static void encoder_forward_kernel(float *out, const int32_t *inp, const float *wte,
                                              const float *wpe, int T, int C, size_t n)
{
    KCU_FOR(i, n) {
        size_t bt = i / C, c = i % C;
        out[i] = wte[(size_t)inp[bt] * C + c] + (wpe ? wpe[(bt % T) * C + c] : 0.0f);
    }
}

int kcu_encoder_forward(const struct kcu_ctx *cx, float *out, const int32_t *inp,
                        const float *wte, const float *wpe, int B, int T, int C,
                        struct kern_err *err)
{
    int rc = -1;
    size_t n = (size_t)B * T * C;
    KCU_LAUNCH(encoder_forward_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(
        out, inp, wte, wpe, T, C, n);
    KCU_TRY_LAUNCH("encoder_forward_kernel");
    rc = 0;
out:
    return rc;
}

/* dwte[inp[bt]] += dout[bt]; several positions may hit one token's row. */
__global__ static void encoder_backward_wte_kernel(float *dwte, const float *dout,
                                                   const int32_t *inp, int C, size_t n)
{
    KCU_FOR(i, n) {
        size_t bt = i / C, c = i % C;
        atomicAdd(&dwte[(size_t)inp[bt] * C + c], dout[i]);
    }
}

/* dwpe[t] (T,C) += sum over b of dout[b][t]: each position owns its row. */
__global__ static void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T,
                                                   int C)
{
    KCU_FOR(i, (size_t)T * C) {
        float sum = 0.0f;
        for (int b = 0; b < B; b++)
            sum += dout[(size_t)b * T * C + i];
        dwpe[i] += sum;
    }
}

int kcu_encoder_backward(const struct kcu_ctx *cx, float *dwte, float *dwpe, const float *dout,
                         const int32_t *inp, int B, int T, int C, struct kern_err *err)
{
    int rc = -1;
    size_t n = (size_t)B * T * C;
    KCU_LAUNCH(encoder_backward_wte_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(
        dwte, dout, inp, C, n);
    KCU_TRY_LAUNCH("encoder_backward_wte_kernel");
    if (dwpe) {   /* NULL: no learned positions */
        KCU_LAUNCH(encoder_backward_wpe_kernel, kcu_blocks((size_t)T * C, KCU_THREADS), KCU_THREADS,
                   cx->stream)(dwpe, dout, B, T, C);
        KCU_TRY_LAUNCH("encoder_backward_wpe_kernel");
    }
    rc = 0;
out:
    return rc;
}

/* ---- layernorm ---- */

/* One block per row n: mean, then variance around it, then out = (x - m) * s
 * * weight + bias, as the CPU does. */
/* One block per row. With b, the row's input is the residual a + b, written
 * to res as it is made (res2 = res + attproj, then ln2 of it, in one pass);
 * each thread reads back only what it wrote, so it needs no barrier and the
 * values are those of kcu_residual_forward then kcu_layernorm_forward. */
__global__ static void layernorm_forward_kernel(bf16 *out, float *mean, float *rstd, float *res,
                                                const float *a, const float *b, const float *weight,
                                                const float *bias, int C)
{
    size_t n = blockIdx.x;
    const float *x = (b ? res : a) + n * C; /* (C) */
    bf16 *o = out + n * C;                  /* (C) */
    float m = 0.0f, v = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        if (b)
            res[n * C + i] = a[n * C + i] + b[n * C + i];
        m += x[i];
    }
    m = block_sum(m) / C;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        v += (x[i] - m) * (x[i] - m);
    v = block_sum(v) / C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        o[i] = __float2bfloat16((x[i] - m) * s * weight[i] + bias[i]);
    if (threadIdx.x == 0) {
        mean[n] = m;
        rstd[n] = s;
    }
}

int kcu_layernorm_forward(const struct kcu_ctx *cx, bf16 *out, float *mean, float *rstd,
                          const float *inp, const float *weight, const float *bias, int N,
                          int C, struct kern_err *err)
{
    return kcu_residual_layernorm_forward(cx, NULL, out, mean, rstd, inp, NULL, weight, bias, N, C, err);
}

int kcu_residual_layernorm_forward(const struct kcu_ctx *cx, float *res, bf16 *out, float *mean, float *rstd,
                                   const float *a, const float *b, const float *weight, const float *bias,
                                   int N, int C, struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(layernorm_forward_kernel, N, kcu_row_threads(C, KCU_ROW_THREADS), cx->stream)(
        out, mean, rstd, res, a, b, weight, bias, C);
    KCU_TRY_LAUNCH("layernorm_forward_kernel");
    rc = 0;
out:
    return rc;
}

/* The CPU's first loop: one block per row, dinp (C) += ... */
__global__ static void layernorm_backward_dinp_kernel(float *dinp, const float *dout,
                                                      const float *inp, const float *weight,
                                                      const float *mean, const float *rstd,
                                                      int C)
{
    size_t n = blockIdx.x;
    const float *d = dout + n * C, *x = inp + n * C; /* (C) each */
    float *di = dinp + n * C;                         /* (C) */
    float m = mean[n], s = rstd[n], dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float norm = (x[i] - m) * s, dnorm = weight[i] * d[i];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean = block_sum(dnorm_mean) / C;
    dnorm_norm_mean = block_sum(dnorm_norm_mean) / C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float norm = (x[i] - m) * s, dnorm = weight[i] * d[i];
        di[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

/* The CPU's second loop, first pass: partial (chunks, 2C) holds, per chunk of
 * rows, the sums of (x - mean) * rstd * d (dweight) then of d (dbias). */
__global__ static void layernorm_backward_colsum_kernel(float *partial, const float *dout,
                                                        const float *inp, const float *mean,
                                                        const float *rstd, int N, int C)
{
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    int n0 = blockIdx.x * KCU_COLSUM_ROWS, n1 = min(N, n0 + KCU_COLSUM_ROWS);
    if (i >= C)
        return;
    float dw = 0.0f, db = 0.0f;
    for (int n = n0; n < n1; n++) {
        size_t at = (size_t)n * C + i;
        dw += (inp[at] - mean[n]) * rstd[n] * dout[at];
        db += dout[at];
    }
    partial[(size_t)blockIdx.x * 2 * C + i] = dw;
    partial[(size_t)blockIdx.x * 2 * C + C + i] = db;
}

int kcu_layernorm_backward(const struct kcu_ctx *cx, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight,
                           const float *mean, const float *rstd, int N, int C,
                           struct kern_err *err)
{
    int rc = -1;
    int chunks = (int)kcu_colsum_chunks(N);
    dim3 grid(chunks, (C + KCU_THREADS - 1) / KCU_THREADS);
    unsigned finish_blocks = (C + KCU_THREADS - 1) / KCU_THREADS;
    KCU_LAUNCH(layernorm_backward_dinp_kernel, N, kcu_row_threads(C, KCU_ROW_THREADS), cx->stream)(
        dinp, dout, inp, weight, mean, rstd, C);
    KCU_TRY_LAUNCH("layernorm_backward_dinp_kernel");
    KCU_LAUNCH(layernorm_backward_colsum_kernel, grid, KCU_THREADS, cx->stream)(
        cx->colsum, dout, inp, mean, rstd, N, C);
    KCU_TRY_LAUNCH("layernorm_backward_colsum_kernel");
    KCU_LAUNCH(colsum_finish_kernel, finish_blocks, KCU_THREADS, cx->stream)(dweight, cx->colsum,
                                                                       chunks, C, 2 * C);
    KCU_TRY_LAUNCH("colsum_finish_kernel (dweight)");
    KCU_LAUNCH(colsum_finish_kernel, finish_blocks, KCU_THREADS, cx->stream)(dbias, cx->colsum + C,
                                                                       chunks, C, 2 * C);
    KCU_TRY_LAUNCH("colsum_finish_kernel (dbias)");
    rc = 0;
out:
    return rc;
}

/* ---- matmul ---- */

/* out (N,OC), rows ld apart, += bias (OC) on every row; n = N * OC */
__global__ static void add_bias_kernel(float *out, const float *bias, int OC, int ld, size_t n)
{
    KCU_FOR(i, n)
        out[i / OC * ld + i % OC] += bias[i % OC];
}

int kcu_matmul_forward(const struct kcu_ctx *cx, float *out, const bf16 *inp,
                       const bf16 *weight, const float *bias, int N, int IC, int OC, int ldo,
                       struct kern_err *err)
{
    int rc = -1, lt;
    size_t n = (size_t)N * OC;
    /* out (N,OC) = inp (N,IC) . weight^T (IC,OC) (+ bias in the product's epilogue) */
    lt = kcu_gemm_epilogue(cx, bias ? KCU_EPI_BIAS : KCU_EPI_NONE, 0, 1, N, OC, IC, inp, IC, weight, IC, 0.0f, out,
                           CUDA_R_32F, ldo, bias, NULL, 0, err);
    if (lt < 0)
        goto out;
    if (lt == 1) {
        KCU_TRY_OK(kcu_gemm(cx, 0, 1, N, OC, IC, 1.0f, inp, IC, 0, weight, IC, 0, 0.0f, out,
                            CUDA_R_32F, ldo, 0, 1, err));
        if (bias) {
            KCU_LAUNCH(add_bias_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(
                out, bias, OC, ldo, n);
            KCU_TRY_LAUNCH("add_bias_kernel");
        }
    }
    rc = 0;
out:
    return rc;
}

int kcu_matmul_backward(const struct kcu_ctx *cx, float *dinp, float *dweight, float *dbias,
                        const float *dout, const bf16 *dout_bf, const bf16 *inp,
                        const bf16 *weight, int N, int IC, int OC, int ldd,
                        struct kern_err *err)
{
    int rc = -1;
    int chunks = (int)kcu_colsum_chunks(N);
    dim3 grid(chunks, (OC + KCU_THREADS - 1) / KCU_THREADS);
    /* dinp (N,IC) = dout (N,OC) . weight (OC,IC); the CPU adds into zeros */
    if (dinp)
        KCU_TRY_OK(kcu_gemm(cx, 0, 0, N, IC, OC, 1.0f, dout_bf, ldd, 0, weight, IC, 0, 0.0f,
                            dinp, CUDA_R_32F, IC, 0, 1, err));
    /* dweight (OC,IC) += dout^T (OC,N) . inp (N,IC), straight into fp32 */
    if (dweight)
        KCU_TRY_OK(kcu_gemm(cx, 1, 0, OC, IC, N, 1.0f, dout_bf, ldd, 0, inp, IC, 0, 1.0f, dweight,
                            CUDA_R_32F, IC, 0, 1, err));
    if (dbias) {
        /* dbias (OC) += sum over n of dout (N,OC), from the fp32 copy where there is one */
        if (dout)
            KCU_LAUNCH(colsum_partial_kernel<float>, grid, KCU_THREADS, cx->stream)(cx->colsum, dout, N, OC, ldd);
        else
            KCU_LAUNCH(colsum_partial_kernel<bf16>, grid, KCU_THREADS, cx->stream)(cx->colsum, dout_bf, N, OC, ldd);
        KCU_TRY_LAUNCH("colsum_partial_kernel");
        KCU_LAUNCH(colsum_finish_kernel, (OC + KCU_THREADS - 1) / KCU_THREADS, KCU_THREADS,
                   cx->stream)(dbias, cx->colsum, chunks, OC, OC);
        KCU_TRY_LAUNCH("colsum_finish_kernel (dbias)");
    }
    rc = 0;
out:
    return rc;
}

/* ---- gelu (the fc product's epilogue, or these kernels where cuBLASLt has none) ---- */

#define KCU_GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* pre = x + bias, out = gelu(x + bias), both bf16; x (n) fp32, rows of OC */
__global__ static void bias_gelu_forward_kernel(bf16 *out, bf16 *pre, const float *x, const float *bias, int OC,
                                                size_t n)
{
    KCU_FOR(i, n) {
        float v = x[i] + bias[i % OC];
        float u = KCU_GELU_K * (v + 0.044715f * v * v * v);
        pre[i] = __float2bfloat16(v);
        out[i] = __float2bfloat16(0.5f * v * (1.0f + tanhf(u)));
    }
}

/* dinp = gelu'(pre) * dout in bf16; pre bf16, dout fp32 */
__global__ static void gelu_backward_kernel(bf16 *dinp, const bf16 *pre, const float *dout, size_t n)
{
    KCU_FOR(i, n) {
        float x = __bfloat162float(pre[i]);
        float u = KCU_GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float du = KCU_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
        dinp[i] = __float2bfloat16(grad * dout[i]);
    }
}

int kcu_matmul_gelu_forward(const struct kcu_ctx *cx, bf16 *out, bf16 *pre, const bf16 *inp, const bf16 *weight,
                            const bf16 *bias_bf, const float *bias, float *scratch, int N, int IC, int OC,
                            struct kern_err *err)
{
    int rc = -1, lt;
    size_t n = (size_t)N * OC;
    lt = kcu_gemm_epilogue(cx, KCU_EPI_GELU_BIAS, 0, 1, N, OC, IC, inp, IC, weight, IC, 0.0f, out, CUDA_R_16BF, OC,
                           bias_bf, pre, OC, err);
    if (lt < 0)
        goto out;
    if (lt == 1) {
        KCU_TRY_OK(kcu_gemm(cx, 0, 1, N, OC, IC, 1.0f, inp, IC, 0, weight, IC, 0, 0.0f, scratch, CUDA_R_32F, OC, 0,
                            1, err));
        KCU_LAUNCH(bias_gelu_forward_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(out, pre, scratch,
                                                                                             bias, OC, n);
        KCU_TRY_LAUNCH("bias_gelu_forward_kernel");
    }
    rc = 0;
out:
    return rc;
}

int kcu_matmul_dgelu_backward(const struct kcu_ctx *cx, bf16 *dinp, const bf16 *pre, const bf16 *dout_bf,
                              const bf16 *weight, float *scratch, int N, int IC, int OC, struct kern_err *err)
{
    int rc = -1, lt;
    size_t n = (size_t)N * IC;
    /* dinp (N,IC) = dout (N,OC) . weight (OC,IC), times gelu'(pre) */
    lt = kcu_gemm_epilogue(cx, KCU_EPI_DGELU, 0, 0, N, IC, OC, dout_bf, OC, weight, IC, 0.0f, dinp, CUDA_R_16BF, IC,
                           NULL, (void *)pre, IC, err);
    if (lt < 0)
        goto out;
    if (lt == 1) {
        KCU_TRY_OK(kcu_gemm(cx, 0, 0, N, IC, OC, 1.0f, dout_bf, OC, 0, weight, IC, 0, 0.0f, scratch, CUDA_R_32F, IC,
                            0, 1, err));
        KCU_LAUNCH(gelu_backward_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(dinp, pre, scratch, n);
        KCU_TRY_LAUNCH("gelu_backward_kernel");
    }
    rc = 0;
out:
    return rc;
}

/* ---- rmsnorm ---- */

/* One block per row n: out = weight * (x * r), r = 1 / sqrt(mean(x^2) + eps),
 * as the CPU does. */
/* One block per row; with b, the residual a + b is made on the way, as in
 * layernorm_forward_kernel. */
__global__ static void rmsnorm_forward_kernel(bf16 *out, float *rstd, float *res, const float *a, const float *b,
                                              const float *weight, float eps, int C)
{
    size_t n = blockIdx.x;
    const float *x = (b ? res : a) + n * C; /* (C) */
    bf16 *o = out + n * C;                  /* (C) */
    float ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        if (b)
            res[n * C + i] = a[n * C + i] + b[n * C + i];
        ss += x[i] * x[i];
    }
    float r = 1.0f / sqrtf(block_sum(ss) / C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        o[i] = __float2bfloat16(weight[i] * (x[i] * r));
    if (threadIdx.x == 0)
        rstd[n] = r;
}

int kcu_rmsnorm_forward(const struct kcu_ctx *cx, bf16 *out, float *rstd, const float *inp, const float *weight,
                        float eps, int N, int C, struct kern_err *err)
{
    return kcu_residual_rmsnorm_forward(cx, NULL, out, rstd, inp, NULL, weight, eps, N, C, err);
}

int kcu_residual_rmsnorm_forward(const struct kcu_ctx *cx, float *res, bf16 *out, float *rstd, const float *a,
                                 const float *b, const float *weight, float eps, int N, int C, struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(rmsnorm_forward_kernel, N, kcu_row_threads(C, KCU_ROW_THREADS), cx->stream)(out, rstd, res, a, b,
                                                                                        weight, eps, C);
    KCU_TRY_LAUNCH("rmsnorm_forward_kernel");
    rc = 0;
out:
    return rc;
}

/* The CPU's first loop: one block per row, dinp (C) += r w d - x r^3 (w.d.x) / C. */
__global__ static void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                                    const float *weight, const float *rstd, int C)
{
    size_t n = blockIdx.x;
    const float *d = dout + n * C, *x = inp + n * C; /* (C) each */
    float *di = dinp + n * C, r = rstd[n], dot = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        dot += weight[i] * d[i] * x[i];
    float k = block_sum(dot) * r * r * r / C;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        di[i] += r * weight[i] * d[i] - x[i] * k;
}

/* The CPU's second loop, first pass: partial (chunks, C) holds, per chunk of
 * rows, the sums of x * rstd * d. */
__global__ static void rmsnorm_backward_colsum_kernel(float *partial, const float *dout, const float *inp,
                                                      const float *rstd, int N, int C)
{
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    int n0 = blockIdx.x * KCU_COLSUM_ROWS, n1 = min(N, n0 + KCU_COLSUM_ROWS);
    if (i >= C)
        return;
    float dw = 0.0f;
    for (int n = n0; n < n1; n++) {
        size_t at = (size_t)n * C + i;
        dw += inp[at] * rstd[n] * dout[at];
    }
    partial[(size_t)blockIdx.x * C + i] = dw;
}

int kcu_rmsnorm_backward(const struct kcu_ctx *cx, float *dinp, float *dweight, const float *dout,
                         const float *inp, const float *weight, const float *rstd, int N, int C,
                         struct kern_err *err)
{
    int rc = -1;
    int chunks = (int)kcu_colsum_chunks(N);
    dim3 grid(chunks, (C + KCU_THREADS - 1) / KCU_THREADS);
    KCU_LAUNCH(rmsnorm_backward_dinp_kernel, N, kcu_row_threads(C, KCU_ROW_THREADS), cx->stream)(
        dinp, dout, inp, weight, rstd, C);
    KCU_TRY_LAUNCH("rmsnorm_backward_dinp_kernel");
    KCU_LAUNCH(rmsnorm_backward_colsum_kernel, grid, KCU_THREADS, cx->stream)(cx->colsum, dout, inp, rstd, N, C);
    KCU_TRY_LAUNCH("rmsnorm_backward_colsum_kernel");
    KCU_LAUNCH(colsum_finish_kernel, (C + KCU_THREADS - 1) / KCU_THREADS, KCU_THREADS, cx->stream)(
        dweight, cx->colsum, chunks, C, C);
    KCU_TRY_LAUNCH("colsum_finish_kernel (rmsnorm dweight)");
    rc = 0;
out:
    return rc;
}

/* ---- swiglu ---- */

__device__ static float sigmoidf(float g)
{
    return 1.0f / (1.0f + expf(-g));
}

/* out (N,F) = silu(gate) * up, gu (N,2F) = [gate | up]. */
__global__ static void swiglu_forward_kernel(bf16 *out, const float *gu, int F, size_t n)
{
    KCU_FOR(i, n) {
        size_t row = i / F, c = i % F;
        float g = gu[row * 2 * F + c], u = gu[row * 2 * F + F + c];
        out[i] = __float2bfloat16(g * sigmoidf(g) * u);
    }
}

/* dgu (N,2F) overwritten in fp32 and bf16, from dout (N,F). */
__global__ static void swiglu_backward_kernel(float *dgu, bf16 *dgu_bf, const float *gu, const float *dout, int F,
                                              size_t n)
{
    KCU_FOR(i, n) {
        size_t row = i / F, c = i % F, at = row * 2 * F + c;
        float g = gu[at], u = gu[at + F], d = dout[i], s = sigmoidf(g);
        float dg = d * u * s * (1.0f + g * (1.0f - s)), du = d * g * s;
        dgu[at] = dg;
        dgu[at + F] = du;
        dgu_bf[at] = __float2bfloat16(dg);
        dgu_bf[at + F] = __float2bfloat16(du);
    }
}

int kcu_swiglu_forward(const struct kcu_ctx *cx, bf16 *out, const float *gu, int N, int F, struct kern_err *err)
{
    int rc = -1;
    size_t n = (size_t)N * F;
    KCU_LAUNCH(swiglu_forward_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(out, gu, F, n);
    KCU_TRY_LAUNCH("swiglu_forward_kernel");
    rc = 0;
out:
    return rc;
}

int kcu_swiglu_backward(const struct kcu_ctx *cx, float *dgu, bf16 *dgu_bf, const float *gu, const float *dout,
                        int N, int F, struct kern_err *err)
{
    int rc = -1;
    size_t n = (size_t)N * F;
    KCU_LAUNCH(swiglu_backward_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(dgu, dgu_bf, gu, dout,
                                                                                          F, n);
    KCU_TRY_LAUNCH("swiglu_backward_kernel");
    rc = 0;
out:
    return rc;
}

/* ---- a tied matrix's two gradients ---- */

__global__ static void add_pair_kernel(float *a, float *b, size_t n)
{
    KCU_FOR(i, n)
        a[i] = b[i] = a[i] + b[i];
}

int kcu_add_pair(const struct kcu_ctx *cx, float *a, float *b, size_t n, struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(add_pair_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(a, b, n);
    KCU_TRY_LAUNCH("add_pair_kernel");
    rc = 0;
out:
    return rc;
}

/* ---- residual ---- */

__global__ static void residual_forward_kernel(float *out, const float *a, const float *b,
                                               size_t n)
{
    KCU_FOR(i, n)
        out[i] = a[i] + b[i];
}

int kcu_residual_forward(const struct kcu_ctx *cx, float *out, const float *a, const float *b,
                         size_t n, struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(residual_forward_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(
        out, a, b, n);
    KCU_TRY_LAUNCH("residual_forward_kernel");
    rc = 0;
out:
    return rc;
}

/* ---- cross-entropy ---- */

/* One block per row n: probs (V) <- softmax of the logits it holds, in place;
 * losses[n] = -(z[target] - max - log(sum)). Each thread rewrites only the
 * elements it read, and z[target] is read before the first barrier, so the
 * in-place update is safe. */
__global__ static void crossentropy_forward_kernel(float *losses, float *probs,
                                                   const int32_t *targets, int V, int ld)
{
    size_t n = blockIdx.x;
    float *z = probs + n * ld; /* (V) */
    float zt = z[targets[n]], max = -INFINITY, sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        max = fmaxf(max, z[i]);
    max = block_max(max);
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        sum += expf(z[i] - max);
    sum = block_sum(sum);
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        z[i] = expf(z[i] - max) / sum;
    if (threadIdx.x == 0)
        losses[n] = -(zt - max - logf(sum));
}

/* dlogits (N,V) = (probs - onehot(target)) * dloss, one block per row. */
__global__ static void crossentropy_backward_kernel(bf16 *dlogits, const float *probs,
                                                    const int32_t *targets, float dloss, int V,
                                                    int ld)
{
    size_t n = blockIdx.x;
    const float *p = probs + n * ld; /* (V) */
    bf16 *d = dlogits + n * ld;      /* (V) */
    int target = targets[n];
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        d[i] = __float2bfloat16((p[i] - (i == target ? 1.0f : 0.0f)) * dloss);
}

int kcu_crossentropy_forward(const struct kcu_ctx *cx, float *losses, float *probs,
                             const int32_t *targets, int N, int V, int ld, struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(crossentropy_forward_kernel, N, kcu_row_threads(V, KCU_CE_THREADS), cx->stream)(
        losses, probs, targets, V, ld);
    KCU_TRY_LAUNCH("crossentropy_forward_kernel");
    rc = 0;
out:
    return rc;
}

int kcu_crossentropy_backward(const struct kcu_ctx *cx, bf16 *dlogits, const float *probs,
                              const int32_t *targets, float dloss, int N, int V, int ld,
                              struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(crossentropy_backward_kernel, N, kcu_row_threads(V, KCU_CE_THREADS), cx->stream)(
        dlogits, probs, targets, dloss, V, ld);
    KCU_TRY_LAUNCH("crossentropy_backward_kernel");
    rc = 0;
out:
    return rc;
}

/* ---- whole-buffer helpers: mean loss, conversion, norm, AdamW ---- */

/* One block: out[0] = (sum of x (n) in double) / n. */
__global__ static void mean_kernel(float *out, const float *x, int n)
{
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        sum += x[i];
    sum = block_sum_d(sum);
    if (threadIdx.x == 0)
        out[0] = (float)(sum / n);
}

int kcu_mean(const struct kcu_ctx *cx, float *out, const float *x, int n, struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(mean_kernel, 1, 1024, cx->stream)(out, x, n);
    KCU_TRY_LAUNCH("mean_kernel");
    rc = 0;
out:
    return rc;
}

__global__ static void to_bf16_kernel(bf16 *out, const float *inp, size_t n)
{
    KCU_FOR(i, n)
        out[i] = __float2bfloat16(inp[i]);
}

int kcu_to_bf16(const struct kcu_ctx *cx, bf16 *out, const float *inp, size_t n,
                struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(to_bf16_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(out, inp, n);
    KCU_TRY_LAUNCH("to_bf16_kernel");
    rc = 0;
out:
    return rc;
}

/* Exactly KCU_NORM_BLOCKS blocks: partial[b] = this block's sum of x^2. */
__global__ static void sum_squares_kernel(double *partial, const float *x, size_t n)
{
    double sum = 0.0;
    KCU_FOR(i, n)
        sum += (double)x[i] * x[i];
    sum = block_sum_d(sum);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = sum;
}

int kcu_sum_squares(const struct kcu_ctx *cx, double *partial, const float *x, size_t n,
                    struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(sum_squares_kernel, KCU_NORM_BLOCKS, KCU_THREADS, cx->stream)(partial, x, n);
    KCU_TRY_LAUNCH("sum_squares_kernel");
    rc = 0;
out:
    return rc;
}

/* cpu_adamw's loop body, term for term; p_bf gets the new weight in bf16. */
__global__ static void adamw_kernel(float *p, bf16 *p_bf, const float *g, float *m, float *v,
                                    size_t n, float lr, float beta1, float beta2, float eps,
                                    float grad_scale, float b1c, float b2c, float wd)
{
    KCU_FOR(i, n) {
        float grad = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * grad;
        float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
        float mhat = mi / b1c, vhat = vi / b2c;
        float pi = p[i];
        pi -= lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        p_bf[i] = __float2bfloat16(pi);
    }
}

int kcu_adamw(const struct kcu_ctx *cx, float *p, bf16 *p_bf, const float *g, float *m,
              float *v, size_t n, const struct kern_adamw *h, float b1c, float b2c, float wd,
              struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(adamw_kernel, kcu_blocks(n, KCU_THREADS), KCU_THREADS, cx->stream)(
        p, p_bf, g, m, v, n, h->lr, h->beta1, h->beta2, h->eps, h->grad_scale, b1c, b2c, wd);
    KCU_TRY_LAUNCH("adamw_kernel");
    rc = 0;
out:
    return rc;
}
