/* cuda_stage.cu - the CUDA backend: a stage's forward and backward on one GPU,
 * step for step the same as cpu_stage.c (same layers in the same order, same
 * buffers accumulated), built from cuda_layers.cuh.
 *
 * Precision: fp32 master weights, gradients and AdamW moments, plus a bf16
 * copy of the whole flat parameter buffer (same offsets) that the matrix
 * products read, refreshed by every AdamW step and by write(KERN_PARAMS). The
 * residual stream and its gradient are fp32; every input of a matrix product
 * is bf16, accumulated in fp32. The host sees fp32 and int32 only, through
 * pinned staging buffers; every operation synchronises its stream before it
 * returns. */
#include "cuda_layers.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hidden states cross the host boundary through the pinned staging buffer in
 * at most KCU_COPY_CHUNKS pieces, so that the CPU's copy of one piece (by the
 * OpenMP threads) overlaps the DMA of the next: a pageable memcpy on one
 * thread was half of an XL middle stage's time on an H200 (kernels/README.md). */
#define KCU_COPY_CHUNKS 8
#define KCU_COPY_MIN ((size_t)1 << 20) /* bytes: smaller pieces, one thread */

/* Activations one block keeps for its backward, per micro-batch (device). */
struct kcu_block_acts {
    bf16 *ln1;                   /* (B,T,C) */
    float *ln1_mean, *ln1_rstd;  /* (B,T) each */
    bf16 *qkvr;                  /* (3,B,NH,T,hs) q, k, v split into heads */
    bf16 *att;                   /* (B,NH,T,T) softmax probabilities */
    bf16 *atty;                  /* (B,T,C) attention output before projection */
    float *res2;                 /* (B,T,C) residual after attention */
    bf16 *ln2;                   /* (B,T,C) */
    float *ln2_mean, *ln2_rstd;  /* (B,T) each */
    float *fch;                  /* (B,T,4C) before GELU */
    bf16 *fch_gelu;              /* (B,T,4C) */
    float *res3;                 /* (B,T,C) block output */
};

/* Everything one micro-batch in flight keeps. */
struct kcu_slot {
    void *mem;                   /* device: one allocation holding all of the below */
    int32_t *tokens, *targets;   /* (B,T) each, first / last stage */
    float *x0;                   /* (B,T,C) residual stream entering the first block */
    struct kcu_block_acts *blocks; /* host array, one per block held */
    bf16 *lnf;                   /* (B,T,C) last stage */
    float *lnf_mean, *lnf_rstd;  /* (B,T) each */
    float *probs;                /* (B,T,Vp) logits, turned into probabilities in place;
                                  * Vp = kcu_padded_vocab(V), columns [V, Vp) unused */
    float *losses;               /* (B,T) */
};

struct kcu_stage {
    struct kcu_ctx cx;             /* stream, cuBLAS handle, column-sum scratch */
    float *params, *grads, *m, *v; /* device, n_params each */
    bf16 *params_bf;               /* device, n_params: what the products read */
    struct kcu_slot *slots;        /* in_flight */
    /* Device scratch shared by all micro-batches (one runs at a time). */
    void *scratch;                 /* one allocation holding the rest */
    float *qkv;                    /* (B,T,3C) qkv product before the split into heads */
    float *attproj;                /* (B,T,C) projection output before the residual add */
    float *scores;                 /* (B,NH,T,T) forward q.k^T; backward d att */
    bf16 *atty_heads;              /* (B,NH,T,hs) att . v before the merge of heads */
    float *dres;                   /* (B,T,C) gradient of the residual stream */
    bf16 *dres_bf;                 /* (B,T,C) */
    float *dln;                    /* (B,T,C) */
    float *datty;                  /* (B,T,C) */
    bf16 *dy;                      /* (B,NH,T,hs) datty split into heads */
    bf16 *dpre;                    /* (B,NH,T,T) d of q.k^T */
    float *dqkvr;                  /* (3,B,NH,T,hs) dq, dk, dv */
    float *dqkv;                   /* (B,T,3C) */
    bf16 *dqkv_bf;                 /* (B,T,3C) */
    float *dfch_gelu, *dfch;       /* (B,T,4C) each */
    bf16 *dfch_bf;                 /* (B,T,4C) */
    bf16 *dlogits;                 /* (B,T,Vp) last stage, columns [V, Vp) unused */
    float *loss;                   /* (1) mean loss, last stage */
    double *norm_partial;          /* (KCU_NORM_BLOCKS) */
    /* Pinned host staging, allocated once. */
    float *h_act;                  /* (B,T,C): hidden states in and out, token ids, loss */
    int32_t *h_targets;            /* (B,T) */
    double *h_norm_partial;        /* (KCU_NORM_BLOCKS) */
    cudaEvent_t copied[KCU_COPY_CHUNKS]; /* a download's pieces, landed in h_act */
};

/* Hands out consecutive 256-byte aligned pieces of one allocation; pass base
 * NULL to count. Returns the piece (NULL when counting). */
static void *carve(void *base, size_t *used, size_t bytes)
{
    void *p = base ? (char *)base + *used : NULL;
    *used += (bytes + 255) & ~(size_t)255;
    return p;
}
#define CARVE_F32(base, used, n) ((float *)carve(base, used, (n) * sizeof(float)))
#define CARVE_BF16(base, used, n) ((bf16 *)carve(base, used, (n) * sizeof(bf16)))
#define CARVE_I32(base, used, n) ((int32_t *)carve(base, used, (n) * sizeof(int32_t)))

/* Bytes of one slot; with base, also sets its pointers. */
static size_t slot_layout(const struct kern_stage *st, struct kcu_slot *s, void *base)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t NH = st->model.heads, V = (size_t)kcu_padded_vocab(st->model.vocab), BT = B * T;
    size_t used = 0;
    int nb = st->spec.layer_end - st->spec.layer_start;

    s->tokens = CARVE_I32(base, &used, st->spec.first ? BT : 0);
    s->targets = CARVE_I32(base, &used, st->spec.last ? BT : 0);
    s->x0 = CARVE_F32(base, &used, BT * C);
    for (int l = 0; l < nb; l++) {
        struct kcu_block_acts *a = &s->blocks[l];
        a->ln1 = CARVE_BF16(base, &used, BT * C);
        a->ln1_mean = CARVE_F32(base, &used, BT);
        a->ln1_rstd = CARVE_F32(base, &used, BT);
        a->qkvr = CARVE_BF16(base, &used, BT * 3 * C);
        a->att = CARVE_BF16(base, &used, B * NH * T * T);
        a->atty = CARVE_BF16(base, &used, BT * C);
        a->res2 = CARVE_F32(base, &used, BT * C);
        a->ln2 = CARVE_BF16(base, &used, BT * C);
        a->ln2_mean = CARVE_F32(base, &used, BT);
        a->ln2_rstd = CARVE_F32(base, &used, BT);
        a->fch = CARVE_F32(base, &used, BT * 4 * C);
        a->fch_gelu = CARVE_BF16(base, &used, BT * 4 * C);
        a->res3 = CARVE_F32(base, &used, BT * C);
    }
    if (st->spec.last) {
        s->lnf = CARVE_BF16(base, &used, BT * C);
        s->lnf_mean = CARVE_F32(base, &used, BT);
        s->lnf_rstd = CARVE_F32(base, &used, BT);
        s->probs = CARVE_F32(base, &used, BT * V);
        s->losses = CARVE_F32(base, &used, BT);
    }
    return used;
}

/* Bytes of the shared scratch; with base, also sets its pointers. */
static size_t scratch_layout(const struct kern_stage *st, struct kcu_stage *c, void *base)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t NH = st->model.heads, BT = B * T, used = 0;
    size_t last_v = st->spec.last ? (size_t)kcu_padded_vocab(st->model.vocab) : 0;

    c->cx.colsum = CARVE_F32(base, &used, kcu_colsum_chunks((int)BT) * 4 * C);
    c->qkv = CARVE_F32(base, &used, BT * 3 * C);
    c->attproj = CARVE_F32(base, &used, BT * C);
    c->scores = CARVE_F32(base, &used, B * NH * T * T);
    c->atty_heads = CARVE_BF16(base, &used, BT * C);
    c->dres = CARVE_F32(base, &used, BT * C);
    c->dres_bf = CARVE_BF16(base, &used, BT * C);
    c->dln = CARVE_F32(base, &used, BT * C);
    c->datty = CARVE_F32(base, &used, BT * C);
    c->dy = CARVE_BF16(base, &used, BT * C);
    c->dpre = CARVE_BF16(base, &used, B * NH * T * T);
    c->dqkvr = CARVE_F32(base, &used, BT * 3 * C);
    c->dqkv = CARVE_F32(base, &used, BT * 3 * C);
    c->dqkv_bf = CARVE_BF16(base, &used, BT * 3 * C);
    c->dfch_gelu = CARVE_F32(base, &used, BT * 4 * C);
    c->dfch = CARVE_F32(base, &used, BT * 4 * C);
    c->dfch_bf = CARVE_BF16(base, &used, BT * 4 * C);
    c->dlogits = CARVE_BF16(base, &used, BT * last_v);
    c->loss = CARVE_F32(base, &used, 1);
    c->norm_partial = (double *)carve(base, &used, KCU_NORM_BLOCKS * sizeof(double));
    return used;
}

/* Frees whatever kcu_init got to; safe on a half-built stage. */
static void kcu_release(struct kern_stage *st)
{
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    if (!c)
        return;
    (void)cudaSetDevice(st->device.index);
    if (c->cx.stream)
        (void)cudaStreamSynchronize(c->cx.stream);
    if (c->slots)
        for (int i = 0; i < st->spec.in_flight; i++) {
            (void)cudaFree(c->slots[i].mem);
            free(c->slots[i].blocks);
        }
    free(c->slots);
    (void)cudaFree(c->scratch);
    (void)cudaFree(c->params);
    (void)cudaFree(c->grads);
    (void)cudaFree(c->m);
    (void)cudaFree(c->v);
    (void)cudaFree(c->params_bf);
    if (c->h_act)
        (void)cudaFreeHost(c->h_act);
    if (c->h_targets)
        (void)cudaFreeHost(c->h_targets);
    if (c->h_norm_partial)
        (void)cudaFreeHost(c->h_norm_partial);
    for (int i = 0; i < KCU_COPY_CHUNKS; i++)
        if (c->copied[i])
            (void)cudaEventDestroy(c->copied[i]);
    if (c->cx.blas)
        (void)cublasDestroy(c->cx.blas);
    if (c->cx.stream)
        (void)cudaStreamDestroy(c->cx.stream);
    free(c);
    st->impl = NULL;
}

static int kcu_init(struct kern_stage *st, const float *params, struct kern_err *err)
{
    int rc = -1;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t n = st->n_params, BT = (size_t)st->spec.micro_batch * st->spec.seq_len;
    size_t act_floats = BT * st->model.d_model; /* >= BT: also holds token ids */
    size_t scratch_bytes = 0;
    cudaError_t e = cudaSuccess;
    struct kcu_stage *c = NULL;

    if (st->model.arch != MODEL_GPT2) {
        kern_fail(err, "the cuda backend runs architecture \"gpt2\" only so far, not \"%s\"; use --device cpu",
                  model_families[st->model.arch].name);
        return -1;
    }
    c = (struct kcu_stage *)calloc(1, sizeof *c);
    if (!c) {
        kern_fail(err, "out of memory");
        goto out;
    }
    st->impl = c;
    KCU_TRY(cudaSetDevice(st->device.index));
    KCU_TRY(cudaStreamCreateWithFlags(&c->cx.stream, cudaStreamNonBlocking));
    for (int i = 0; i < KCU_COPY_CHUNKS; i++)
        KCU_TRY(cudaEventCreateWithFlags(&c->copied[i], cudaEventDisableTiming));
    KCU_TRY_BLAS(cublasCreate(&c->cx.blas));
    KCU_TRY_BLAS(cublasSetStream(c->cx.blas, c->cx.stream));
    KCU_TRY_BLAS(cublasSetMathMode(c->cx.blas, CUBLAS_DEFAULT_MATH));
    KCU_TRY(cudaMalloc(&c->params, n * sizeof(float)));
    KCU_TRY(cudaMalloc(&c->grads, n * sizeof(float)));
    KCU_TRY(cudaMalloc(&c->m, n * sizeof(float)));
    KCU_TRY(cudaMalloc(&c->v, n * sizeof(float)));
    KCU_TRY(cudaMalloc(&c->params_bf, n * sizeof(bf16)));
    scratch_bytes = scratch_layout(st, c, NULL);
    KCU_TRY(cudaMalloc(&c->scratch, scratch_bytes));
    scratch_layout(st, c, c->scratch);
    c->slots = (struct kcu_slot *)calloc((size_t)st->spec.in_flight, sizeof *c->slots);
    if (!c->slots) {
        kern_fail(err, "out of memory");
        goto out;
    }
    for (int i = 0; i < st->spec.in_flight; i++) {
        struct kcu_slot *s = &c->slots[i];
        s->blocks = (struct kcu_block_acts *)calloc(nb ? (size_t)nb : 1, sizeof *s->blocks);
        if (!s->blocks) {
            kern_fail(err, "out of memory");
            goto out;
        }
        size_t bytes = slot_layout(st, s, NULL);
        e = cudaMalloc(&s->mem, bytes);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* taken, as KCU_TRY does */
            kern_fail(err, "CUDA: %s allocating %zu MiB of activations for micro-batch "
                      "slot %d of %d (lower in_flight, micro_batch or seq_len)",
                      cudaGetErrorString(e), bytes >> 20, i + 1, st->spec.in_flight);
            goto out;
        }
        slot_layout(st, s, s->mem);
    }
    KCU_TRY(cudaMallocHost(&c->h_act, act_floats * sizeof(float)));
    KCU_TRY(cudaMallocHost(&c->h_targets, BT * sizeof(int32_t)));
    KCU_TRY(cudaMallocHost(&c->h_norm_partial, KCU_NORM_BLOCKS * sizeof(double)));
    KCU_TRY(cudaMemcpyAsync(c->params, params, n * sizeof(float), cudaMemcpyHostToDevice,
                            c->cx.stream));
    KCU_TRY_OK(kcu_to_bf16(&c->cx, c->params_bf, c->params, n, err));
    KCU_TRY(cudaMemsetAsync(c->grads, 0, n * sizeof(float), c->cx.stream));
    KCU_TRY(cudaMemsetAsync(c->m, 0, n * sizeof(float), c->cx.stream));
    KCU_TRY(cudaMemsetAsync(c->v, 0, n * sizeof(float), c->cx.stream));
    KCU_TRY(cudaStreamSynchronize(c->cx.stream));
    rc = 0;
out:
    if (rc && st->impl)
        kcu_release(st);
    return rc;
}

/* Offset (floats) of tensor t of block l of this stage in the flat buffers. */
static size_t toff(const struct kern_stage *st, int l, enum kern_block_tensor t)
{
    return st->off_block0 + (size_t)l * st->block_floats + kern_block_offset(&st->model, t);
}

/* memcpy by the OpenMP threads, in 256 KiB pieces. */
static void host_copy(void *dst, const void *src, size_t bytes)
{
    const size_t piece = (size_t)256 << 10;
    long n = (long)((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static) if (bytes >= KCU_COPY_MIN)
    for (long i = 0; i < n; i++) {
        size_t off = (size_t)i * piece;
        memcpy((char *)dst + off, (const char *)src + off, bytes - off < piece ? bytes - off : piece);
    }
}

/* Bytes per piece of a copy of `bytes`: at most KCU_COPY_CHUNKS pieces. */
static size_t copy_piece(size_t bytes)
{
    size_t piece = ((bytes + KCU_COPY_CHUNKS - 1) / KCU_COPY_CHUNKS + 4095) & ~(size_t)4095;
    return piece < KCU_COPY_MIN ? KCU_COPY_MIN : piece;
}

/* host -> h_act -> dev, queued on the stream piece by piece: h_act is in
 * use until the stream has passed this point. */
static cudaError_t kcu_upload(struct kcu_stage *c, void *dev, const void *host, size_t bytes)
{
    size_t piece = copy_piece(bytes);
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        host_copy((char *)c->h_act + off, (const char *)host + off, len);
        cudaError_t e = cudaMemcpyAsync((char *)dev + off, (char *)c->h_act + off, len,
                                        cudaMemcpyHostToDevice, c->cx.stream);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* dev -> h_act -> host, after all the stream's work so far; each piece is
 * copied out as soon as it lands. Returns when host holds it all. */
static cudaError_t kcu_download(struct kcu_stage *c, void *host, const void *dev, size_t bytes)
{
    size_t piece = copy_piece(bytes), off;
    int k;
    cudaError_t e = cudaSuccess;
    for (off = 0, k = 0; off < bytes && e == cudaSuccess; off += piece, k++) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        e = cudaMemcpyAsync((char *)c->h_act + off, (const char *)dev + off, len,
                            cudaMemcpyDeviceToHost, c->cx.stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(c->copied[k], c->cx.stream);
    }
    for (off = 0, k = 0; off < bytes && e == cudaSuccess; off += piece, k++) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        e = cudaEventSynchronize(c->copied[k]);
        if (e == cudaSuccess)
            host_copy((char *)host + off, (const char *)c->h_act + off, len);
    }
    return e;
}

static int kcu_forward(struct kern_stage *st, int slot, const void *input,
                       const int32_t *targets, float *output, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    struct kcu_slot *s = &c->slots[slot];
    const struct kcu_ctx *cx = &c->cx;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    int NH = st->model.heads, V = st->model.vocab, Vp = kcu_padded_vocab(V), N = B * T;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t BTC = (size_t)N * C;
    const float *p = c->params; /* fp32: embeddings, biases, LN */
    const bf16 *pb = c->params_bf; /* bf16: matrices */
    const float *res = s->x0;   /* (B,T,C) */

    KCU_TRY(cudaSetDevice(st->device.index));
    if (st->spec.first) {
        memcpy(c->h_act, input, (size_t)N * sizeof(int32_t));
        KCU_TRY(cudaMemcpyAsync(s->tokens, c->h_act, (size_t)N * sizeof(int32_t),
                                cudaMemcpyHostToDevice, cx->stream));
        KCU_TRY_OK(kcu_encoder_forward(cx, s->x0, s->tokens, p + st->off_wte,
                                       p + st->off_wpe, B, T, C, err));
    } else {
        KCU_TRY(kcu_upload(c, s->x0, input, BTC * sizeof(float)));
    }
    for (int l = 0; l < nb; l++) {
        struct kcu_block_acts *a = &s->blocks[l];
        KCU_TRY_OK(kcu_layernorm_forward(cx, a->ln1, a->ln1_mean, a->ln1_rstd, res,
                                         p + toff(st, l, KT_LN1W), p + toff(st, l, KT_LN1B),
                                         N, C, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, c->qkv, a->ln1, pb + toff(st, l, KT_QKVW),
                                      p + toff(st, l, KT_QKVB), N, C, 3 * C, 3 * C, err));
        KCU_TRY_OK(kcu_attention_forward(cx, a->atty, a->qkvr, a->att, c->qkv, c->scores,
                                         c->atty_heads, B, T, C, NH, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, c->attproj, a->atty, pb + toff(st, l, KT_ATTPROJW),
                                      p + toff(st, l, KT_ATTPROJB), N, C, C, C, err));
        KCU_TRY_OK(kcu_residual_forward(cx, a->res2, res, c->attproj, BTC, err));
        KCU_TRY_OK(kcu_layernorm_forward(cx, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                                         p + toff(st, l, KT_LN2W), p + toff(st, l, KT_LN2B),
                                         N, C, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, a->fch, a->ln2, pb + toff(st, l, KT_FCW),
                                      p + toff(st, l, KT_FCB), N, C, 4 * C, 4 * C, err));
        KCU_TRY_OK(kcu_gelu_forward(cx, a->fch_gelu, a->fch, BTC * 4, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, c->attproj, a->fch_gelu,
                                      pb + toff(st, l, KT_FCPROJW),
                                      p + toff(st, l, KT_FCPROJB), N, 4 * C, C, C, err));
        KCU_TRY_OK(kcu_residual_forward(cx, a->res3, a->res2, c->attproj, BTC, err));
        res = a->res3;
    }
    if (!st->spec.last) {
        KCU_TRY(kcu_download(c, output, res, BTC * sizeof(float)));
        rc = 0;
        goto out;
    }
    memcpy(c->h_targets, targets, (size_t)N * sizeof(int32_t));
    KCU_TRY(cudaMemcpyAsync(s->targets, c->h_targets, (size_t)N * sizeof(int32_t),
                            cudaMemcpyHostToDevice, cx->stream));
    KCU_TRY_OK(kcu_layernorm_forward(cx, s->lnf, s->lnf_mean, s->lnf_rstd, res,
                                     p + st->off_lnfw, p + st->off_lnfb, N, C, err));
    /* the logits go straight into probs, which the loss turns into probabilities */
    KCU_TRY_OK(kcu_matmul_forward(cx, s->probs, s->lnf, pb + st->off_head, NULL, N, C, V, Vp,
                                  err));
    KCU_TRY_OK(kcu_crossentropy_forward(cx, s->losses, s->probs, s->targets, N, V, Vp, err));
    KCU_TRY_OK(kcu_mean(cx, c->loss, s->losses, N, err));
    KCU_TRY(cudaMemcpyAsync(c->h_act, c->loss, sizeof(float), cudaMemcpyDeviceToHost,
                            cx->stream));
    KCU_TRY(cudaStreamSynchronize(cx->stream));
    *output = c->h_act[0];
    rc = 0;
out:
    if (rc != 0) /* copies queued from the staging buffers must finish before their reuse */
        (void)cudaStreamSynchronize(cx->stream);
    return rc;
}

static int kcu_backward(struct kern_stage *st, int slot, const float *grad_output,
                        float *grad_input, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    struct kcu_slot *s = &c->slots[slot];
    const struct kcu_ctx *cx = &c->cx;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    int NH = st->model.heads, V = st->model.vocab, Vp = kcu_padded_vocab(V), N = B * T;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t BTC = (size_t)N * C;
    const float *p = c->params;
    const bf16 *pb = c->params_bf;
    float *g = c->grads;

    KCU_TRY(cudaSetDevice(st->device.index));
    if (st->spec.last) {
        const float *res = nb ? s->blocks[nb - 1].res3 : s->x0;
        /* the loss is a mean over N tokens */
        KCU_TRY_OK(kcu_crossentropy_backward(cx, c->dlogits, s->probs, s->targets,
                                             grad_output[0] / (float)N, N, V, Vp, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, g + st->off_head, NULL, NULL, c->dlogits,
                                       s->lnf, pb + st->off_head, N, C, V, Vp, err));
        KCU_TRY(cudaMemsetAsync(c->dres, 0, BTC * sizeof(float), cx->stream));
        KCU_TRY_OK(kcu_layernorm_backward(cx, c->dres, g + st->off_lnfw, g + st->off_lnfb,
                                          c->dln, res, p + st->off_lnfw, s->lnf_mean,
                                          s->lnf_rstd, N, C, err));
    } else {
        KCU_TRY(kcu_upload(c, c->dres, grad_output, BTC * sizeof(float)));
    }
    for (int l = nb - 1; l >= 0; l--) {
        struct kcu_block_acts *a = &s->blocks[l];
        const float *res_in = l ? s->blocks[l - 1].res3 : s->x0;
        /* res3 = res2 + fcproj(gelu(fc(ln2(res2)))): dres is d res3, then d res2 */
        KCU_TRY_OK(kcu_to_bf16(cx, c->dres_bf, c->dres, BTC, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dfch_gelu, g + toff(st, l, KT_FCPROJW),
                                       g + toff(st, l, KT_FCPROJB), c->dres, c->dres_bf,
                                       a->fch_gelu, pb + toff(st, l, KT_FCPROJW), N, 4 * C, C, C,
                                       err));
        KCU_TRY_OK(kcu_gelu_backward(cx, c->dfch, c->dfch_bf, a->fch, c->dfch_gelu, BTC * 4,
                                     err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, g + toff(st, l, KT_FCW),
                                       g + toff(st, l, KT_FCB), c->dfch, c->dfch_bf, a->ln2,
                                       pb + toff(st, l, KT_FCW), N, C, 4 * C, 4 * C, err));
        KCU_TRY_OK(kcu_layernorm_backward(cx, c->dres, g + toff(st, l, KT_LN2W),
                                          g + toff(st, l, KT_LN2B), c->dln, a->res2,
                                          p + toff(st, l, KT_LN2W), a->ln2_mean, a->ln2_rstd,
                                          N, C, err));
        /* res2 = res_in + attproj(attention(qkv(ln1(res_in)))): dres becomes d res_in */
        KCU_TRY_OK(kcu_to_bf16(cx, c->dres_bf, c->dres, BTC, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->datty, g + toff(st, l, KT_ATTPROJW),
                                       g + toff(st, l, KT_ATTPROJB), c->dres, c->dres_bf,
                                       a->atty, pb + toff(st, l, KT_ATTPROJW), N, C, C, C, err));
        KCU_TRY_OK(kcu_attention_backward(cx, c->dqkv, c->dqkv_bf, c->datty, a->qkvr, a->att,
                                          c->scores, c->dpre, c->dy, c->dqkvr, B, T, C, NH,
                                          err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, g + toff(st, l, KT_QKVW),
                                       g + toff(st, l, KT_QKVB), c->dqkv, c->dqkv_bf, a->ln1,
                                       pb + toff(st, l, KT_QKVW), N, C, 3 * C, 3 * C, err));
        KCU_TRY_OK(kcu_layernorm_backward(cx, c->dres, g + toff(st, l, KT_LN1W),
                                          g + toff(st, l, KT_LN1B), c->dln, res_in,
                                          p + toff(st, l, KT_LN1W), a->ln1_mean, a->ln1_rstd,
                                          N, C, err));
    }
    if (st->spec.first) {
        KCU_TRY_OK(kcu_encoder_backward(cx, g + st->off_wte, g + st->off_wpe, c->dres,
                                        s->tokens, B, T, C, err));
        KCU_TRY(cudaStreamSynchronize(cx->stream));
    } else {
        KCU_TRY(kcu_download(c, grad_input, c->dres, BTC * sizeof(float)));
    }
    rc = 0;
out:
    if (rc != 0) /* copies queued from the staging buffers must finish before their reuse */
        (void)cudaStreamSynchronize(cx->stream);
    return rc;
}

static int kcu_zero_grad(struct kern_stage *st, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    KCU_TRY(cudaSetDevice(st->device.index));
    KCU_TRY(cudaMemsetAsync(c->grads, 0, st->n_params * sizeof(float), c->cx.stream));
    KCU_TRY(cudaStreamSynchronize(c->cx.stream));
    rc = 0;
out:
    return rc;
}

/* Partial sums of squares in double on the device, added in a fixed order on
 * the host. */
static int kcu_grad_norm2(struct kern_stage *st, size_t from, size_t count, double *out, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    double sum = 0;
    KCU_TRY(cudaSetDevice(st->device.index));
    KCU_TRY_OK(kcu_sum_squares(&c->cx, c->norm_partial, c->grads + from, count, err));
    KCU_TRY(cudaMemcpyAsync(c->h_norm_partial, c->norm_partial,
                            KCU_NORM_BLOCKS * sizeof(double), cudaMemcpyDeviceToHost,
                            c->cx.stream));
    KCU_TRY(cudaStreamSynchronize(c->cx.stream));
    for (int i = 0; i < KCU_NORM_BLOCKS; i++)
        sum += c->h_norm_partial[i];
    *out = sum;
    rc = 0;
out:
    return rc;
}

/* One launch per tensor, each with its own weight decay, like cpu_adamw. */
static int kcu_adamw_step(struct kern_stage *st, const struct kern_adamw *h, uint64_t step,
                          struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    float b1c = 1.0f - powf(h->beta1, (float)step);
    float b2c = 1.0f - powf(h->beta2, (float)step);
    KCU_TRY(cudaSetDevice(st->device.index));
    for (int t = 0; t < st->n_tensors; t++) {
        const struct kern_tensor *ten = &st->tensors[t];
        float wd = ten->decay ? h->weight_decay : 0.0f;
        size_t o = ten->offset;
        KCU_TRY_OK(kcu_adamw(&c->cx, c->params + o, c->params_bf + o, c->grads + o, c->m + o,
                             c->v + o, ten->count, h, b1c, b2c, wd, err));
    }
    KCU_TRY(cudaStreamSynchronize(c->cx.stream));
    rc = 0;
out:
    return rc;
}

static float *kcu_grad_buffer(struct kern_stage *st)
{
    return ((struct kcu_stage *)st->impl)->grads;
}

static float *kcu_buffer(struct kcu_stage *c, enum kern_buffer which)
{
    switch (which) {
    case KERN_PARAMS: return c->params;
    case KERN_GRADS: return c->grads;
    case KERN_ADAM_M: return c->m;
    case KERN_ADAM_V: return c->v;
    }
    return NULL;
}

/* Copies a whole flat buffer out of (to_host) or into the stage; writing the
 * parameters also refreshes their bf16 copy. */
static int kcu_transfer(struct kern_stage *st, enum kern_buffer which, float *host,
                        int to_host, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    float *dev = kcu_buffer(c, which);
    size_t bytes = st->n_params * sizeof(float);
    if (which != KERN_PARAMS && which != KERN_GRADS && which != KERN_ADAM_M && which != KERN_ADAM_V) {
        kern_fail(err, "unknown buffer %d", (int)which);
        goto out;
    }
    if (bytes == 0) { /* a stage of no blocks has no buffers (cudaMalloc of 0 gives NULL) */
        rc = 0;
        goto out;
    }
    KCU_TRY(cudaSetDevice(st->device.index));
    if (to_host)
        KCU_TRY(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, c->cx.stream));
    else
        KCU_TRY(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, c->cx.stream));
    if (!to_host && which == KERN_PARAMS)
        KCU_TRY_OK(kcu_to_bf16(&c->cx, c->params_bf, c->params, st->n_params, err));
    KCU_TRY(cudaStreamSynchronize(c->cx.stream));
    rc = 0;
out:
    return rc;
}

static int kcu_read(struct kern_stage *st, enum kern_buffer which, float *dst,
                    struct kern_err *err)
{
    return kcu_transfer(st, which, dst, 1, err);
}

static int kcu_write(struct kern_stage *st, enum kern_buffer which, const float *src,
                     struct kern_err *err)
{
    return kcu_transfer(st, which, (float *)src, 0, err);
}

static const struct kern_ops kcu_ops = {
    kcu_init,        /* init */
    kcu_release,     /* release */
    kcu_forward,     /* forward */
    kcu_backward,    /* backward */
    kcu_zero_grad,   /* zero_grad */
    kcu_grad_norm2,  /* grad_norm2 */
    NULL,            /* tie_grads: no family the cuda backend runs ties its head */
    kcu_adamw_step,  /* adamw */
    kcu_grad_buffer, /* grad_buffer */
    kcu_read,        /* read */
    kcu_write,       /* write */
};

extern "C" const struct kern_ops *const kern_cuda_ops = &kcu_ops;

extern "C" int kern_cuda_describe(int index, char *name, size_t name_len, size_t *memory_bytes,
                                  struct kern_err *err)
{
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, index);
    if (e != cudaSuccess)
        return kern_fail(err, "cudaGetDeviceProperties(%d): %s", index,
                         cudaGetErrorString(cudaGetLastError()));
    snprintf(name, name_len, "%s", prop.name);
    *memory_bytes = prop.totalGlobalMem;
    return 0;
}

extern "C" int kern_cuda_device_count(struct kern_err *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
        kern_fail(err, "no CUDA device found (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
        return 0;
    }
    if (e != cudaSuccess)
        return kern_fail(err, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    return count;
}
