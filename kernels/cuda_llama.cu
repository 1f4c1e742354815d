/* cuda_llama.cu - a Llama stage on the GPU, step for step cpu_llama.c
 * (same layers in the same order, same buffers accumulated), built from
 * cuda_layers.cuh, with the precision of cuda_stage.cu: fp32 residual
 * stream, statistics and gradients, bf16 inputs of every product.  q and k
 * are rotated as the attention splits them into heads, k and v repeated
 * for each query head of their group; the backward sums the group and
 * rotates back as it merges them (cuda_layers.cu). */
#include "cuda_stage.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Activations one block keeps for its backward, per micro-batch (device). */
struct kcu_llama_acts {
    bf16 *ln1;       /* (B,T,C) */
    float *ln1_rstd; /* (B,T) */
    bf16 *qkvr;      /* (3,B,NH,T,hs) q and k rotated, k and v repeated per query head */
    float *lse;      /* (B,NH,T) log-sum-exp of each row's scaled scores */
    bf16 *atty;      /* (B,T,C) attention output before projection */
    float *res2;     /* (B,T,C) residual after attention */
    bf16 *ln2;       /* (B,T,C) */
    float *ln2_rstd; /* (B,T) */
    float *gu;       /* (B,T,2F) gate | up, before SwiGLU */
    bf16 *h;         /* (B,T,F) silu(gate) * up */
    float *res3;     /* (B,T,C) block output */
};

/* The family's scratch (device), beside kcu_stage's shared fields. */
struct kcu_llama_work {
    float *qkv;        /* (B,T,C+2KV) the q|k|v product */
    float *proj;       /* (B,T,C) a projection before the residual add */
    float *delta;      /* (B,NH,T) backward: each row's dy . y */
    bf16 *atty_heads;  /* (B,NH,T,hs) */
    float *datty;      /* (B,T,C) */
    bf16 *dy;          /* (B,NH,T,hs) */
    float *dqkvr;      /* (3,B,NH,T,hs) */
    float *dqkv;       /* (B,T,C+2KV) */
    bf16 *dqkv_bf;     /* (B,T,C+2KV) */
    float *dh;         /* (B,T,F) */
    float *dgu;        /* (B,T,2F) */
    bf16 *dgu_bf;      /* (B,T,2F) */
    float *cos_t, *sin_t; /* (T,hs/2) each: rope's angles of each position */
};

static size_t slot_layout(const struct kern_stage *st, struct kcu_slot *s, void *base)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model, F = st->model.ffn_dim;
    size_t NH = st->model.heads, BT = B * T, used = 0;
    int nb = st->spec.layer_end - st->spec.layer_start;

    kcu_slot_inputs(st, s, base, &used);
    for (int l = 0; l < nb; l++) {
        struct kcu_llama_acts *a = &s->llama[l];
        a->ln1 = CARVE_BF16(base, &used, BT * C);
        a->ln1_rstd = CARVE_F32(base, &used, BT);
        a->qkvr = CARVE_BF16(base, &used, BT * 3 * C);
        a->lse = CARVE_F32(base, &used, B * NH * T);
        a->atty = CARVE_BF16(base, &used, BT * C);
        a->res2 = CARVE_F32(base, &used, BT * C);
        a->ln2 = CARVE_BF16(base, &used, BT * C);
        a->ln2_rstd = CARVE_F32(base, &used, BT);
        a->gu = CARVE_F32(base, &used, BT * 2 * F);
        a->h = CARVE_BF16(base, &used, BT * F);
        a->res3 = CARVE_F32(base, &used, BT * C);
    }
    kcu_slot_head(st, s, base, &used);
    return used;
}

static size_t scratch_layout(const struct kern_stage *st, struct kcu_stage *c, struct kcu_llama_work *w, void *base)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model, F = st->model.ffn_dim;
    size_t NH = st->model.heads, BT = B * T, W = model_qkv_width(&st->model), half = C / NH / 2, used = 0;
    size_t last_v = st->spec.last ? (size_t)kcu_padded_vocab(st->model.vocab) : 0;

    c->cx.colsum = CARVE_F32(base, &used, kcu_colsum_chunks((int)BT) * C);   /* rmsnorm's weight sums */
    c->dres = CARVE_F32(base, &used, BT * C);
    c->dres_bf = CARVE_BF16(base, &used, BT * C);
    c->dln = CARVE_F32(base, &used, BT * C);
    c->dlogits = CARVE_BF16(base, &used, BT * last_v);
    c->loss = CARVE_F32(base, &used, 1);
    c->norm_partial = (double *)carve(base, &used, KCU_NORM_BLOCKS * sizeof(double));
    w->qkv = CARVE_F32(base, &used, BT * W);
    w->proj = CARVE_F32(base, &used, BT * C);
    w->delta = CARVE_F32(base, &used, B * NH * T);
    w->atty_heads = CARVE_BF16(base, &used, BT * C);
    w->datty = CARVE_F32(base, &used, BT * C);
    w->dy = CARVE_BF16(base, &used, BT * C);
    w->dqkvr = CARVE_F32(base, &used, BT * 3 * C);
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
    int rc = -1, T = st->spec.seq_len, half = st->model.d_model / st->model.heads / 2;
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
    if (nb)
        KCU_TRY_OK(kcu_rmsnorm_forward(cx, s->llama[0].ln1, s->llama[0].ln1_rstd, res, p + kcu_toff(st, 0, LT_LN1W),
                                       eps, N, C, err));
    else if (st->spec.last)
        KCU_TRY_OK(kcu_rmsnorm_forward(cx, s->lnf, s->lnf_rstd, res, p + st->off_lnfw, eps, N, C, err));
    for (int l = 0; l < nb; l++) {
        struct kcu_llama_acts *a = &s->llama[l], *next = l + 1 < nb ? &s->llama[l + 1] : NULL;
        KCU_TRY_OK(kcu_matmul_forward(cx, w->qkv, a->ln1, pb + kcu_toff(st, l, LT_QW), NULL, N, C, W, W, err));
        KCU_TRY_OK(kcu_attention_forward(cx, a->atty, a->qkvr, a->lse, w->qkv, w->atty_heads, B, T, C, NH, KVH,
                                         w->cos_t, w->sin_t, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, w->proj, a->atty, pb + kcu_toff(st, l, LT_OW), NULL, N, C, C, C, err));
        KCU_TRY_OK(kcu_residual_rmsnorm_forward(cx, a->res2, a->ln2, a->ln2_rstd, res, w->proj,
                                                p + kcu_toff(st, l, LT_LN2W), eps, N, C, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, a->gu, a->ln2, pb + kcu_toff(st, l, LT_GATEW), NULL, N, C, 2 * F, 2 * F,
                                      err));
        KCU_TRY_OK(kcu_swiglu_forward(cx, a->h, a->gu, N, F, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, w->proj, a->h, pb + kcu_toff(st, l, LT_DOWNW), NULL, N, F, C, C, err));
        if (next)
            KCU_TRY_OK(kcu_residual_rmsnorm_forward(cx, a->res3, next->ln1, next->ln1_rstd, a->res2, w->proj,
                                                    p + kcu_toff(st, l + 1, LT_LN1W), eps, N, C, err));
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
        /* res3 = res2 + down(swiglu(gate|up(ln2(res2)))): dres is d res3, then d res2 */
        KCU_TRY_OK(kcu_to_bf16(cx, c->dres_bf, c->dres, BTC, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, w->dh, g + kcu_toff(st, l, LT_DOWNW), NULL, NULL, c->dres_bf, a->h,
                                       pb + kcu_toff(st, l, LT_DOWNW), N, F, C, C, err));
        KCU_TRY_OK(kcu_swiglu_backward(cx, w->dgu, w->dgu_bf, a->gu, w->dh, N, F, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, g + kcu_toff(st, l, LT_GATEW), NULL, NULL, w->dgu_bf, a->ln2,
                                       pb + kcu_toff(st, l, LT_GATEW), N, C, 2 * F, 2 * F, err));
        KCU_TRY_OK(kcu_rmsnorm_backward(cx, c->dres, g + kcu_toff(st, l, LT_LN2W), c->dln, a->res2,
                                        p + kcu_toff(st, l, LT_LN2W), a->ln2_rstd, N, C, err));
        /* res2 = res_in + o(attention(rope(qkv(ln1(res_in))))): dres becomes d res_in */
        KCU_TRY_OK(kcu_to_bf16(cx, c->dres_bf, c->dres, BTC, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, w->datty, g + kcu_toff(st, l, LT_OW), NULL, NULL, c->dres_bf, a->atty,
                                       pb + kcu_toff(st, l, LT_OW), N, C, C, C, err));
        KCU_TRY_OK(kcu_attention_backward(cx, w->dqkv, w->dqkv_bf, w->datty, a->atty, a->qkvr, a->lse, w->delta,
                                          w->dy, w->dqkvr, B, T, C, NH, KVH, w->cos_t, w->sin_t, err));
        /* on the stage's first block (but the model's), d res_in goes to
         * the host while the q, k, v weight gradients are computed */
        int overlap = l == 0 && !st->spec.first;
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, overlap ? NULL : g + kcu_toff(st, l, LT_QW), NULL, NULL,
                                       w->dqkv_bf, a->ln1, pb + kcu_toff(st, l, LT_QW), N, C, W, W, err));
        KCU_TRY_OK(kcu_rmsnorm_backward(cx, c->dres, g + kcu_toff(st, l, LT_LN1W), c->dln, res_in,
                                        p + kcu_toff(st, l, LT_LN1W), a->ln1_rstd, N, C, err));
        if (overlap) {
            KCU_TRY_OK(kcu_hidden_out_start(st, c->dres, err));
            KCU_TRY_OK(kcu_matmul_backward(cx, NULL, g + kcu_toff(st, l, LT_QW), NULL, NULL, w->dqkv_bf, a->ln1,
                                           pb + kcu_toff(st, l, LT_QW), N, C, W, W, err));
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
