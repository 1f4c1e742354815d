/* cuda_llama.cu - a stage of the llama kind on the GPU (Llama and the
 * families whose rows add q, k, v biases or q and k norms), step for step
 * cpu_llama.c (same layers in the same order, same buffers accumulated),
 * built from cuda_layers.cuh, with the precision of cuda_stage.cu: fp32
 * residual stream, statistics and gradients, bf16 inputs of every product.
 * q and k are rotated as the attention splits them into heads, k and v
 * repeated for each query head of their group; the backward sums the group
 * and rotates back as it merges them (cuda_layers.cu).  The q and k norms
 * and OLMo-2's norms after a sublayer (norm_after) are kernels of this
 * file. */
#include "cuda_reduce.cuh"
#include "cuda_stage.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Activations one block keeps for its backward, per micro-batch (device). */
struct kcu_llama_acts {
    bf16 *ln1;       /* (B,T,C) what q, k, v read: the norm of the stream, or (norm_after) the stream */
    float *ln1_rstd; /* (B,T) */
    float *n1in;     /* (B,T,C) norm_after: o's output, the attention's norm's input */
    float *qkvp;     /* (B,T,W) the q|k|v product before the q and k norms (qk_norm families) */
    float *qk_rstd;  /* (B,T,nq+nk) the q and k norms' statistics (qk_norm families) */
    bf16 *qkvr;      /* (3,B,NH,T,hd) q and k rotated, k and v repeated per query head */
    float *lse;      /* (B,NH,T) log-sum-exp of each row's scaled scores */
    bf16 *atty;      /* (B,T,Q) attention output before projection, Q = NH hd */
    float *res2;     /* (B,T,C) residual after attention */
    bf16 *ln2;       /* (B,T,C) what gate and up read (as ln1) */
    float *ln2_rstd; /* (B,T) */
    float *n2in;     /* (B,T,C) norm_after: down's output, the MLP's norm's input */
    float *gu;       /* (B,T,2F) gate | up, before SwiGLU */
    bf16 *h;         /* (B,T,F) silu(gate) * up */
    float *res3;     /* (B,T,C) block output */
};

/* The family's scratch (device), beside kcu_stage's shared fields. */
struct kcu_llama_work {
    float *qkv;        /* (B,T,W) the q|k|v product (plus bias), q and k normalised; W = Q + 2KV */
    float *proj;       /* (B,T,C) a projection before the residual add */
    float *delta;      /* (B,NH,T) backward: each row's dy . y */
    bf16 *atty_heads;  /* (B,NH,T,hd) */
    float *datty;      /* (B,T,Q) */
    bf16 *dy;          /* (B,NH,T,hd) */
    float *dqkvr;      /* (3,B,NH,T,hd) */
    float *dqkv;       /* (B,T,W) */
    bf16 *dqkv_bf;     /* (B,T,W) */
    float *dh;         /* (B,T,F) */
    float *dgu;        /* (B,T,2F) */
    bf16 *dgu_bf;      /* (B,T,2F) */
    float *cos_t, *sin_t; /* (T,hd/2) each: rope's angles of each position */
};

/* ---- the q and k norms (cpu_layers_impl.inc's qknorm), in place ---- */

/* Where segment j of a row of qkv (W wide) starts, its length and weight:
 * nq segments of q (sq each, weight wq), then nk of k (sk, wk). */
__device__ static size_t qk_segment(int j, int nq, int Q, int sq, int sk, const float *wq, const float *wk, int *len,
                                    const float **w)
{
    *len = j < nq ? sq : sk;
    *w = j < nq ? wq : wk;
    return j < nq ? (size_t)j * sq : (size_t)Q + (size_t)(j - nq) * sk;
}

/* One block per (row, segment): x = w * (x * rsqrt(mean(x^2) + eps)) in
 * place, rstd (N, nq+nk). */
__global__ static void qknorm_forward_kernel(float *qkv, float *rstd, const float *wq, const float *wk, float eps,
                                             int Q, int W, int nq, int nk, int sq, int sk)
{
    int j = (int)(blockIdx.x % (nq + nk)), len;
    const float *w;
    float *x = qkv + (size_t)(blockIdx.x / (nq + nk)) * W + qk_segment(j, nq, Q, sq, sk, wq, wk, &len, &w);
    float ss = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x)
        ss += x[i] * x[i];
    float r = 1.0f / sqrtf(block_sum(ss) / len + eps);
    for (int i = threadIdx.x; i < len; i += blockDim.x)
        x[i] = w[i] * (x[i] * r);
    if (threadIdx.x == 0)
        rstd[blockIdx.x] = r;
}

/* The input gradient in place, in fp32 and bf16: d = r w d - x r^3
 * (w.d.x) / len over each segment, x the norm's input. */
__global__ static void qknorm_backward_kernel(float *dqkv, bf16 *dqkv_bf, const float *inp, const float *wq,
                                              const float *wk, const float *rstd, int Q, int W, int nq, int nk,
                                              int sq, int sk)
{
    int j = (int)(blockIdx.x % (nq + nk)), len;
    const float *w;
    size_t at = (size_t)(blockIdx.x / (nq + nk)) * W + qk_segment(j, nq, Q, sq, sk, wq, wk, &len, &w);
    float *d = dqkv + at, r = rstd[blockIdx.x], dot = 0.0f;
    const float *x = inp + at;
    for (int i = threadIdx.x; i < len; i += blockDim.x)
        dot += w[i] * d[i] * x[i];
    float k = block_sum(dot) * r * r * r / len;
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        float v = r * w[i] * d[i] - x[i] * k;
        d[i] = v;
        dqkv_bf[at + i] = __float2bfloat16(v);
    }
}

/* The weight gradients' first pass: partial (chunks, sq+sk), per chunk of
 * KCU_COLSUM_ROWS rows, of x r d over every segment of the kind (columns
 * [0, sq) q's weight, [sq, sq+sk) k's). */
__global__ static void qknorm_dweight_kernel(float *partial, const float *dout, const float *inp, const float *rstd,
                                             int N, int Q, int W, int nq, int nk, int sq, int sk)
{
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    int n0 = blockIdx.x * KCU_COLSUM_ROWS, n1 = min(N, n0 + KCU_COLSUM_ROWS);
    if (i >= sq + sk)
        return;
    int is_q = i < sq, from = is_q ? 0 : nq, to = is_q ? nq : nq + nk, c = is_q ? i : i - sq;
    float dw = 0.0f;
    for (int n = n0; n < n1; n++)
        for (int j = from; j < to; j++) {
            size_t at = (size_t)n * W + (is_q ? (size_t)j * sq : (size_t)Q + (size_t)(j - nq) * sk) + c;
            dw += inp[at] * rstd[(size_t)n * (nq + nk) + j] * dout[at];
        }
    partial[(size_t)blockIdx.x * (sq + sk) + i] = dw;
}

/* ---- a norm after a sublayer, inside the residual (norm_after) ---- */

/* One block per row: res = a + w * (x * rsqrt(mean(x^2) + eps)), the CPU's
 * rmsnorm into the projection's scratch and its residual add. */
__global__ static void rmsnorm_residual_kernel(float *res, float *rstd, const float *a, const float *x, const float *w,
                                               float eps, int C)
{
    size_t n = blockIdx.x;
    const float *xr = x + n * C, *ar = a + n * C; /* (C) each */
    float *o = res + n * C, ss = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        ss += xr[i] * xr[i];
    float r = 1.0f / sqrtf(block_sum(ss) / C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        o[i] = ar[i] + w[i] * (xr[i] * r);
    if (threadIdx.x == 0)
        rstd[n] = r;
}

/* res (N,C) = a + rmsnorm(x) by weight w, rstd (N) kept for the backward. */
static int rmsnorm_residual(const struct kcu_ctx *cx, float *res, float *rstd, const float *a, const float *x,
                            const float *w, float eps, int N, int C, struct kern_err *err)
{
    int rc = -1;
    KCU_LAUNCH(rmsnorm_residual_kernel, N, kcu_row_threads((size_t)C, KCU_ROW_THREADS), cx->stream)(res, rstd, a, x,
                                                                                                  w, eps, C);
    KCU_TRY_LAUNCH("rmsnorm_residual_kernel");
    rc = 0;
out:
    return rc;
}

/* q and k of qkv (N,W) normalised in place, rstd (N, nq+nk). */
static int qknorm_forward(const struct kcu_ctx *cx, float *qkv, float *rstd, const float *wq, const float *wk,
                          float eps, int N, int Q, int W, int sq, int sk, struct kern_err *err)
{
    int rc = -1, nq = Q / sq, nk = (W - Q) / 2 / sk;
    KCU_LAUNCH(qknorm_forward_kernel, (unsigned)((size_t)N * (nq + nk)), kcu_row_threads((size_t)sq, KCU_ROW_THREADS),
               cx->stream)(qkv, rstd, wq, wk, eps, Q, W, nq, nk, sq, sk);
    KCU_TRY_LAUNCH("qknorm_forward_kernel");
    rc = 0;
out:
    return rc;
}

/* dqkv (N,W): the gradient of the norms' output in, of their input out
 * (fp32 and bf16), v's columns untouched; dwq (sq), dwk (sk) += . */
static int qknorm_backward(const struct kcu_ctx *cx, float *dqkv, bf16 *dqkv_bf, float *dwq, float *dwk,
                           const float *inp, const float *wq, const float *wk, const float *rstd, int N, int Q,
                           int W, int sq, int sk, struct kern_err *err)
{
    int rc = -1, nq = Q / sq, nk = (W - Q) / 2 / sk, chunks = (int)kcu_colsum_chunks(N);
    dim3 grid(chunks, (sq + sk + KCU_THREADS - 1) / KCU_THREADS);
    KCU_LAUNCH(qknorm_dweight_kernel, grid, KCU_THREADS, cx->stream)(cx->colsum, dqkv, inp, rstd, N, Q, W, nq, nk,
                                                                       sq, sk);
    KCU_TRY_LAUNCH("qknorm_dweight_kernel");
    KCU_TRY_OK(kcu_colsum_finish(cx, dwq, cx->colsum, chunks, sq, sq + sk, err));
    KCU_TRY_OK(kcu_colsum_finish(cx, dwk, cx->colsum + sq, chunks, sk, sq + sk, err));
    KCU_LAUNCH(qknorm_backward_kernel, (unsigned)((size_t)N * (nq + nk)), kcu_row_threads((size_t)sq, KCU_ROW_THREADS),
               cx->stream)(dqkv, dqkv_bf, inp, wq, wk, rstd, Q, W, nq, nk, sq, sk);
    KCU_TRY_LAUNCH("qknorm_backward_kernel");
    rc = 0;
out:
    return rc;
}

static size_t slot_layout(const struct kern_stage *st, struct kcu_slot *s, void *base)
{
    const struct model_config *m = &st->model;
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = m->d_model, F = m->ffn_dim, Q = model_q_width(m);
    size_t NH = m->heads, BT = B * T, W = model_qkv_width(m), used = 0;
    int nb = st->spec.layer_end - st->spec.layer_start, sq, sk;
    size_t stats = (size_t)model_qk_segments(m, &sq, &sk), post = (size_t)model_families[m->arch].norm_after;

    kcu_slot_inputs(st, s, base, &used);
    for (int l = 0; l < nb; l++) {
        struct kcu_llama_acts *a = &s->llama[l];
        a->ln1 = CARVE_BF16(base, &used, BT * C);
        a->ln1_rstd = CARVE_F32(base, &used, BT);
        a->n1in = CARVE_F32(base, &used, post * BT * C);
        a->qkvp = CARVE_F32(base, &used, stats ? BT * W : 0);
        a->qk_rstd = CARVE_F32(base, &used, BT * stats);
        a->qkvr = CARVE_BF16(base, &used, BT * 3 * Q);
        a->lse = CARVE_F32(base, &used, B * NH * T);
        a->atty = CARVE_BF16(base, &used, BT * Q);
        a->res2 = CARVE_F32(base, &used, BT * C);
        a->ln2 = CARVE_BF16(base, &used, BT * C);
        a->ln2_rstd = CARVE_F32(base, &used, BT);
        a->n2in = CARVE_F32(base, &used, post * BT * C);
        a->gu = CARVE_F32(base, &used, BT * 2 * F);
        a->h = CARVE_BF16(base, &used, BT * F);
        a->res3 = CARVE_F32(base, &used, BT * C);
    }
    kcu_slot_head(st, s, base, &used);
    return used;
}

static size_t scratch_layout(const struct kern_stage *st, struct kcu_stage *c, struct kcu_llama_work *w, void *base)
{
    const struct model_config *m = &st->model;
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = m->d_model, F = m->ffn_dim, Q = model_q_width(m);
    size_t NH = m->heads, BT = B * T, W = model_qkv_width(m), half = (size_t)model_head_dim(m) / 2, used = 0;
    size_t last_v = st->spec.last ? (size_t)kcu_padded_vocab(m->vocab) : 0;

    /* the weight sums of the norms (C, or q's and k's: at most W) and of the qkv bias (W) */
    c->cx.colsum = CARVE_F32(base, &used, kcu_colsum_chunks((int)BT) * (W > C ? W : C));
    c->dres = CARVE_F32(base, &used, BT * C);
    c->dres_bf = CARVE_BF16(base, &used, BT * C);
    c->dln = CARVE_F32(base, &used, BT * C);
    c->dlogits = CARVE_BF16(base, &used, BT * last_v);
    c->loss = CARVE_F32(base, &used, 1);
    c->norm_partial = (double *)carve(base, &used, KCU_NORM_BLOCKS * sizeof(double));
    w->qkv = CARVE_F32(base, &used, BT * W);
    w->proj = CARVE_F32(base, &used, BT * C);
    w->delta = CARVE_F32(base, &used, B * NH * T);
    w->atty_heads = CARVE_BF16(base, &used, BT * Q);
    w->datty = CARVE_F32(base, &used, BT * Q);
    w->dy = CARVE_BF16(base, &used, BT * Q);
    w->dqkvr = CARVE_F32(base, &used, BT * 3 * Q);
    w->dqkv = CARVE_F32(base, &used, BT * W);
    w->dqkv_bf = CARVE_BF16(base, &used, BT * W);
    w->dh = CARVE_F32(base, &used, BT * F);
    w->dgu = CARVE_F32(base, &used, BT * 2 * F);
    w->dgu_bf = CARVE_BF16(base, &used, BT * 2 * F);
    w->cos_t = CARVE_F32(base, &used, T * half);
    w->sin_t = CARVE_F32(base, &used, T * half);
    return used;
}

/* The rotary angles of positions [0, T), as cpu_llama.c's tables. */
static int fill_rope(const struct kern_stage *st, struct kcu_stage *c, struct kern_err *err)
{
    int rc = -1, T = st->spec.seq_len, half = model_head_dim(&st->model) / 2;
    float *host = (float *)malloc(2 * (size_t)T * half * sizeof(float));
    if (!host) {
        kern_fail(err, "out of memory");
        goto out;
    }
    for (int i = 0; i < half; i++) {
        double inv = model_rope_inv_freq(&st->model, i);
        for (int t = 0; t < T; t++) {
            host[(size_t)t * half + i] = (float)cos(t * inv);
            host[(size_t)(T + t) * half + i] = (float)sin(t * inv);
        }
    }
    KCU_TRY(cudaMemcpy(c->llama->cos_t, host, (size_t)T * half * sizeof(float), cudaMemcpyHostToDevice));
    KCU_TRY(cudaMemcpy(c->llama->sin_t, host + (size_t)T * half, (size_t)T * half * sizeof(float),
                       cudaMemcpyHostToDevice));
    rc = 0;
out:
    free(host);
    return rc;
}

static int llama_alloc(struct kern_stage *st, struct kcu_stage *c, struct kern_err *err)
{
    int rc = -1, nb = st->spec.layer_end - st->spec.layer_start;
    if (!(c->llama = (struct kcu_llama_work *)calloc(1, sizeof *c->llama))) {
        kern_fail(err, "out of memory");
        goto out;
    }
    KCU_TRY(cudaMalloc(&c->scratch, scratch_layout(st, c, c->llama, NULL)));
    scratch_layout(st, c, c->llama, c->scratch);
    if (fill_rope(st, c, err) != 0)
        goto out;
    for (int i = 0; i < st->spec.in_flight; i++)
        if (!(c->slots[i].llama = (struct kcu_llama_acts *)calloc(nb ? (size_t)nb : 1, sizeof(struct kcu_llama_acts)))) {
            kern_fail(err, "out of memory");
            goto out;
        }
    rc = kcu_slots_alloc(st, c, slot_layout, err);
out:
    return rc;
}

static void llama_release(struct kern_stage *st, struct kcu_stage *c)
{
    for (int i = 0; c->slots && i < st->spec.in_flight; i++)
        free(c->slots[i].llama);
    free(c->llama);
}

static int llama_forward(struct kern_stage *st, struct kcu_slot *s, const void *input, const int32_t *targets,
                         void *output, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    struct kcu_llama_work *w = c->llama;
    const struct kcu_ctx *cx = &c->cx;
    const struct model_config *m = &st->model;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = m->d_model, NH = m->heads, KVH = m->kv_heads;
    int F = m->ffn_dim, N = B * T, W = (int)model_qkv_width(m), nb = st->spec.layer_end - st->spec.layer_start;
    int Q = model_q_width(m), sq, sk, qk_norm = model_qk_segments(m, &sq, &sk) > 0;
    int post = model_families[m->arch].norm_after;
    size_t BTC = (size_t)N * C;
    float eps = (float)m->norm_eps;
    const float *p = c->params;    /* fp32: the embedding, norm weights */
    const bf16 *pb = c->params_bf; /* bf16: matrices */
    const float *res = s->x0;      /* (B,T,C) */

    KCU_TRY(cudaSetDevice(st->device.index));
    if (st->spec.first) {
        KCU_TRY_OK(kcu_tokens_in(c, s->tokens, input, N, err));
        KCU_TRY_OK(kcu_encoder_forward(cx, s->x0, s->tokens, p + st->off_wte, NULL, B, T, C, err));
    } else {
        KCU_TRY_OK(kcu_hidden_in(st, s->x0, input, err));
    }
    /* Each residual add runs with the norm after it (the block's second, the
     * next block's first or the final norm) in one pass. */
    if (nb && post)
        KCU_TRY_OK(kcu_to_bf16(cx, s->llama[0].ln1, res, BTC, err));
    else if (nb)
        KCU_TRY_OK(kcu_rmsnorm_forward(cx, s->llama[0].ln1, s->llama[0].ln1_rstd, res, p + kcu_loff(st, 0, LT_LN1W),
                                       eps, N, C, err));
    else if (st->spec.last)
        KCU_TRY_OK(kcu_rmsnorm_forward(cx, s->lnf, s->lnf_rstd, res, p + st->off_lnfw, eps, N, C, err));
    for (int l = 0; l < nb; l++) {
        struct kcu_llama_acts *a = &s->llama[l], *next = l + 1 < nb ? &s->llama[l + 1] : NULL;
        KCU_TRY_OK(kcu_matmul_forward(cx, w->qkv, a->ln1, pb + kcu_loff(st, l, LT_QW),
                                      kcu_lhas(st, LT_QB) ? p + kcu_loff(st, l, LT_QB) : NULL, N, C, W, W, err));
        if (qk_norm) {
            KCU_TRY(cudaMemcpyAsync(a->qkvp, w->qkv, (size_t)N * W * sizeof(float), cudaMemcpyDeviceToDevice,
                                    cx->stream));
            KCU_TRY_OK(qknorm_forward(cx, w->qkv, a->qk_rstd, p + kcu_loff(st, l, LT_QNORMW),
                                      p + kcu_loff(st, l, LT_KNORMW), eps, N, Q, W, sq, sk, err));
        }
        KCU_TRY_OK(kcu_attention_forward(cx, a->atty, a->qkvr, a->lse, w->qkv, w->atty_heads, B, T, Q, NH, KVH,
                                         w->cos_t, w->sin_t, m->sliding_window, err));
        if (post) {   /* res2 = res + ln1(o(..)), and what the MLP reads */
            KCU_TRY_OK(kcu_matmul_forward(cx, a->n1in, a->atty, pb + kcu_loff(st, l, LT_OW), NULL, N, Q, C, C, err));
            KCU_TRY_OK(rmsnorm_residual(cx, a->res2, a->ln1_rstd, res, a->n1in, p + kcu_loff(st, l, LT_LN1W), eps, N,
                                        C, err));
            KCU_TRY_OK(kcu_to_bf16(cx, a->ln2, a->res2, BTC, err));
        } else {
            KCU_TRY_OK(kcu_matmul_forward(cx, w->proj, a->atty, pb + kcu_loff(st, l, LT_OW), NULL, N, Q, C, C, err));
            KCU_TRY_OK(kcu_residual_rmsnorm_forward(cx, a->res2, a->ln2, a->ln2_rstd, res, w->proj,
                                                    p + kcu_loff(st, l, LT_LN2W), eps, N, C, err));
        }
        KCU_TRY_OK(kcu_matmul_forward(cx, a->gu, a->ln2, pb + kcu_loff(st, l, LT_GATEW), NULL, N, C, 2 * F, 2 * F,
                                      err));
        KCU_TRY_OK(kcu_swiglu_forward(cx, a->h, a->gu, N, F, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, post ? a->n2in : w->proj, a->h, pb + kcu_loff(st, l, LT_DOWNW), NULL, N, F,
                                      C, C, err));
        if (post) {   /* res3 = res2 + ln2(down(..)), and what the next block or the final norm reads */
            KCU_TRY_OK(rmsnorm_residual(cx, a->res3, a->ln2_rstd, a->res2, a->n2in, p + kcu_loff(st, l, LT_LN2W), eps,
                                        N, C, err));
            if (next)
                KCU_TRY_OK(kcu_to_bf16(cx, next->ln1, a->res3, BTC, err));
            else if (st->spec.last)
                KCU_TRY_OK(kcu_rmsnorm_forward(cx, s->lnf, s->lnf_rstd, a->res3, p + st->off_lnfw, eps, N, C, err));
        } else if (next)
            KCU_TRY_OK(kcu_residual_rmsnorm_forward(cx, a->res3, next->ln1, next->ln1_rstd, a->res2, w->proj,
                                                    p + kcu_loff(st, l + 1, LT_LN1W), eps, N, C, err));
        else if (st->spec.last)
            KCU_TRY_OK(kcu_residual_rmsnorm_forward(cx, a->res3, s->lnf, s->lnf_rstd, a->res2, w->proj,
                                                    p + st->off_lnfw, eps, N, C, err));
        else
            KCU_TRY_OK(kcu_residual_forward(cx, a->res3, a->res2, w->proj, BTC, err));
        res = a->res3;
    }
    if (!st->spec.last) {
        KCU_TRY_OK(kcu_hidden_out(st, output, res, err));
        rc = 0;
        goto out;
    }
    KCU_TRY_OK(kcu_head_forward(st, s, targets, output, err));
    rc = 0;
out:
    if (rc != 0)
        kcu_settle(c);
    return rc;
}

/* The gradient of a sublayer's output, in bf16 into c->dres_bf for its
 * last product: c->dres itself, or (norm_after) c->dres through the norm
 * after it (x its input, w its weight, rstd its statistics; into c->dln,
 * the weight's gradient into dw). */
static int sublayer_dout(const struct kcu_ctx *cx, struct kcu_stage *c, int post, float *dw, const float *x,
                         const float *w, const float *rstd, int N, int C, struct kern_err *err)
{
    int rc = -1;
    size_t n = (size_t)N * C;
    if (post) {
        KCU_TRY(cudaMemsetAsync(c->dln, 0, n * sizeof(float), cx->stream));
        KCU_TRY_OK(kcu_rmsnorm_backward(cx, c->dln, dw, c->dres, x, w, rstd, N, C, err));
    }
    KCU_TRY_OK(kcu_to_bf16(cx, c->dres_bf, post ? c->dln : c->dres, n, err));
    rc = 0;
out:
    return rc;
}

/* c->dln, the input gradient of a sublayer's first product, into c->dres:
 * added (norm_after: the product read the stream), or through the norm
 * before it (x the stream, w, rstd, dw as above). */
static int sublayer_din(const struct kcu_ctx *cx, struct kcu_stage *c, int post, float *dw, const float *x,
                        const float *w, const float *rstd, int N, int C, struct kern_err *err)
{
    if (post)
        return kcu_residual_forward(cx, c->dres, c->dres, c->dln, (size_t)N * C, err);
    return kcu_rmsnorm_backward(cx, c->dres, dw, c->dln, x, w, rstd, N, C, err);
}

static int llama_backward(struct kern_stage *st, struct kcu_slot *s, const void *grad_output, void *grad_input,
                          struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    struct kcu_llama_work *w = c->llama;
    const struct kcu_ctx *cx = &c->cx;
    const struct model_config *m = &st->model;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = m->d_model, NH = m->heads, KVH = m->kv_heads;
    int F = m->ffn_dim, N = B * T, W = (int)model_qkv_width(m), nb = st->spec.layer_end - st->spec.layer_start;
    int Q = model_q_width(m), sq, sk, qk_norm = model_qk_segments(m, &sq, &sk) > 0;
    int post = model_families[m->arch].norm_after;
    size_t BTC = (size_t)N * C;
    const float *p = c->params;
    const bf16 *pb = c->params_bf;
    float *g = c->grads;

    KCU_TRY(cudaSetDevice(st->device.index));
    if (st->spec.last) {
        const float *res = nb ? s->llama[nb - 1].res3 : s->x0;
        KCU_TRY_OK(kcu_head_backward(st, s, grad_output, err));
        KCU_TRY(cudaMemsetAsync(c->dres, 0, BTC * sizeof(float), cx->stream));
        KCU_TRY_OK(kcu_rmsnorm_backward(cx, c->dres, g + st->off_lnfw, c->dln, res, p + st->off_lnfw, s->lnf_rstd,
                                        N, C, err));
    } else {
        KCU_TRY_OK(kcu_hidden_in(st, c->dres, grad_output, err));
    }
    for (int l = nb - 1; l >= 0; l--) {
        struct kcu_llama_acts *a = &s->llama[l];
        const float *res_in = l ? s->llama[l - 1].res3 : s->x0;
        /* res3 = res2 + down(swiglu(gate|up(ln2(res2)))), or res2 + ln2(down(..(res2))): dres is d res3,
         * then d res2 */
        KCU_TRY_OK(sublayer_dout(cx, c, post, g + kcu_loff(st, l, LT_LN2W), a->n2in, p + kcu_loff(st, l, LT_LN2W),
                                 a->ln2_rstd, N, C, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, w->dh, g + kcu_loff(st, l, LT_DOWNW), NULL, NULL, c->dres_bf, a->h,
                                       pb + kcu_loff(st, l, LT_DOWNW), N, F, C, C, err));
        KCU_TRY_OK(kcu_swiglu_backward(cx, w->dgu, w->dgu_bf, a->gu, w->dh, N, F, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, g + kcu_loff(st, l, LT_GATEW), NULL, NULL, w->dgu_bf, a->ln2,
                                       pb + kcu_loff(st, l, LT_GATEW), N, C, 2 * F, 2 * F, err));
        KCU_TRY_OK(sublayer_din(cx, c, post, g + kcu_loff(st, l, LT_LN2W), a->res2, p + kcu_loff(st, l, LT_LN2W),
                                a->ln2_rstd, N, C, err));
        /* res2 = res_in + o(attention(rope(qkn(qkv(ln1(res_in)))))), or the norm after o: dres becomes
         * d res_in */
        KCU_TRY_OK(sublayer_dout(cx, c, post, g + kcu_loff(st, l, LT_LN1W), a->n1in, p + kcu_loff(st, l, LT_LN1W),
                                 a->ln1_rstd, N, C, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, w->datty, g + kcu_loff(st, l, LT_OW), NULL, NULL, c->dres_bf, a->atty,
                                       pb + kcu_loff(st, l, LT_OW), N, Q, C, C, err));
        KCU_TRY_OK(kcu_attention_backward(cx, w->dqkv, w->dqkv_bf, w->datty, a->atty, a->qkvr, a->lse, w->delta,
                                          w->dy, w->dqkvr, B, T, Q, NH, KVH, w->cos_t, w->sin_t,
                                          m->sliding_window, err));
        if (qk_norm)
            KCU_TRY_OK(qknorm_backward(cx, w->dqkv, w->dqkv_bf, g + kcu_loff(st, l, LT_QNORMW),
                                       g + kcu_loff(st, l, LT_KNORMW), a->qkvp, p + kcu_loff(st, l, LT_QNORMW),
                                       p + kcu_loff(st, l, LT_KNORMW), a->qk_rstd, N, Q, W, sq, sk, err));
        /* on the stage's first block (but the model's), d res_in goes to
         * the host while the q, k, v weight (and bias) gradients are
         * computed */
        int overlap = l == 0 && !st->spec.first;
        float *dbias = kcu_lhas(st, LT_QB) ? g + kcu_loff(st, l, LT_QB) : NULL;
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, overlap ? NULL : g + kcu_loff(st, l, LT_QW), overlap ? NULL : dbias,
                                       w->dqkv, w->dqkv_bf, a->ln1, pb + kcu_loff(st, l, LT_QW), N, C, W, W, err));
        KCU_TRY_OK(sublayer_din(cx, c, post, g + kcu_loff(st, l, LT_LN1W), res_in, p + kcu_loff(st, l, LT_LN1W),
                                a->ln1_rstd, N, C, err));
        if (overlap) {
            KCU_TRY_OK(kcu_hidden_out_start(st, c->dres, err));
            KCU_TRY_OK(kcu_matmul_backward(cx, NULL, g + kcu_loff(st, l, LT_QW), dbias, w->dqkv, w->dqkv_bf,
                                           a->ln1, pb + kcu_loff(st, l, LT_QW), N, C, W, W, err));
        }
    }
    if (st->spec.first) {
        KCU_TRY_OK(kcu_encoder_backward(cx, g + st->off_wte, NULL, c->dres, s->tokens, B, T, C, err));
        KCU_TRY(cudaStreamSynchronize(cx->stream));
    } else {
        if (nb == 0)
            KCU_TRY_OK(kcu_hidden_out_start(st, c->dres, err));
        KCU_TRY_OK(kcu_hidden_out_finish(st, grad_input, err));
    }
    rc = 0;
out:
    if (rc != 0)
        kcu_settle(c);
    return rc;
}

const struct kcu_family kcu_llama = {llama_alloc, llama_release, llama_forward, llama_backward};
