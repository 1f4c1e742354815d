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
#include "cuda_stage.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of one slot; with base, also sets its pointers. */
static size_t slot_layout(const struct kern_stage *st, struct kcu_slot *s, void *base)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t NH = st->model.heads, BT = B * T, used = 0;
    int nb = st->spec.layer_end - st->spec.layer_start;

    kcu_slot_inputs(st, s, base, &used);
    for (int l = 0; l < nb; l++) {
        struct kcu_block_acts *a = &s->blocks[l];
        a->ln1 = CARVE_BF16(base, &used, BT * C);
        a->ln1_mean = CARVE_F32(base, &used, BT);
        a->ln1_rstd = CARVE_F32(base, &used, BT);
        a->qkvr = CARVE_BF16(base, &used, BT * 3 * C);
        a->lse = CARVE_F32(base, &used, B * NH * T);
        a->atty = CARVE_BF16(base, &used, BT * C);
        a->res2 = CARVE_F32(base, &used, BT * C);
        a->ln2 = CARVE_BF16(base, &used, BT * C);
        a->ln2_mean = CARVE_F32(base, &used, BT);
        a->ln2_rstd = CARVE_F32(base, &used, BT);
        a->fch = CARVE_BF16(base, &used, BT * 4 * C);
        a->fch_gelu = CARVE_BF16(base, &used, BT * 4 * C);
        a->res3 = CARVE_F32(base, &used, BT * C);
    }
    kcu_slot_head(st, s, base, &used);
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
    c->delta = CARVE_F32(base, &used, B * NH * T);
    c->atty_heads = CARVE_BF16(base, &used, BT * C);
    c->dres = CARVE_F32(base, &used, BT * C);
    c->dres_bf = CARVE_BF16(base, &used, BT * C);
    c->dln = CARVE_F32(base, &used, BT * C);
    c->datty = CARVE_F32(base, &used, BT * C);
    c->dy = CARVE_BF16(base, &used, BT * C);
    c->dqkvr = CARVE_F32(base, &used, BT * 3 * C);
    c->dqkv = CARVE_F32(base, &used, BT * 3 * C);
    c->dqkv_bf = CARVE_BF16(base, &used, BT * 3 * C);
    c->dfch_gelu = CARVE_F32(base, &used, BT * 4 * C);
    c->dfch_bf = CARVE_BF16(base, &used, BT * 4 * C);
    c->dlogits = CARVE_BF16(base, &used, BT * last_v);
    c->loss = CARVE_F32(base, &used, 1);
    c->norm_partial = (double *)carve(base, &used, KCU_NORM_BLOCKS * sizeof(double));
    return used;
}

/* The GPU stage of each kind of block (a family's row names its kind). */
static const struct kcu_family *const kcu_kinds[MODEL_BLOCKS_COUNT] = {&kcu_gpt2, &kcu_llama};
#define kcu_families(st) kcu_kinds[model_families[(st)->model.arch].blocks]

int kcu_slots_alloc(struct kern_stage *st, struct kcu_stage *c,
                    size_t (*layout)(const struct kern_stage *st, struct kcu_slot *s, void *base),
                    struct kern_err *err)
{
    for (int i = 0; i < st->spec.in_flight; i++) {
        struct kcu_slot *s = &c->slots[i];
        size_t bytes = layout(st, s, NULL);
        cudaError_t e = cudaMalloc(&s->mem, bytes);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* taken, as KCU_TRY does */
            return kern_fail(err, "CUDA: %s allocating %zu MiB of activations for micro-batch slot %d of %d (lower "
                             "in_flight, micro_batch or seq_len)", cudaGetErrorString(e), bytes >> 20, i + 1,
                             st->spec.in_flight);
        }
        layout(st, s, s->mem);
    }
    return 0;
}

/* GPT-2's scratch and slot activations (kcu_family.alloc). */
static int gpt2_alloc(struct kern_stage *st, struct kcu_stage *c, struct kern_err *err)
{
    int rc = -1;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t scratch_bytes = scratch_layout(st, c, NULL);
    KCU_TRY(cudaMalloc(&c->scratch, scratch_bytes));
    scratch_layout(st, c, c->scratch);
    for (int i = 0; i < st->spec.in_flight; i++)
        if (!(c->slots[i].blocks = (struct kcu_block_acts *)calloc(nb ? (size_t)nb : 1, sizeof(struct kcu_block_acts)))) {
            kern_fail(err, "out of memory");
            goto out;
        }
    rc = kcu_slots_alloc(st, c, slot_layout, err);
out:
    return rc;
}

static void gpt2_release(struct kern_stage *st, struct kcu_stage *c)
{
    for (int i = 0; c->slots && i < st->spec.in_flight; i++)
        free(c->slots[i].blocks);
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
    if (c->copy_stream)
        (void)cudaStreamSynchronize(c->copy_stream);
    kcu_families(st)->release(st, c);
    if (c->slots)
        for (int i = 0; i < st->spec.in_flight; i++)
            (void)cudaFree(c->slots[i].mem);
    free(c->slots);
    (void)cudaFree(c->scratch);
    (void)cudaFree(c->params);
    (void)cudaFree(c->grads);
    (void)cudaFree(c->m);
    (void)cudaFree(c->v);
    (void)cudaFree(c->params_bf);
    (void)cudaFree(c->wire);
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
    if (c->cx.lt)
        (void)cublasLtDestroy(c->cx.lt);
    (void)cudaFree(c->cx.lt_workspace);
    if (c->ready)
        (void)cudaEventDestroy(c->ready);
    if (c->copy_stream)
        (void)cudaStreamDestroy(c->copy_stream);
    if (c->cx.stream)
        (void)cudaStreamDestroy(c->cx.stream);
    free(c);
    st->impl = NULL;
}

/* cuBLASLt's epilogues, unless SHOAL_CUDA_LT=0 turns them off (then every
 * product is cuBLAS's and the bias and GELU kernels of ours: a way round a
 * cuBLASLt that misbehaves, and how make test runs those kernels). */
static int kcu_lt_wanted(void)
{
    const char *v = getenv("SHOAL_CUDA_LT");
    return !v || strcmp(v, "0") != 0;
}

static int kcu_init(struct kern_stage *st, const float *params, struct kern_err *err)
{
    int rc = -1;
    size_t n = st->n_params, BT = (size_t)st->spec.micro_batch * st->spec.seq_len;
    size_t act_floats = BT * st->model.d_model; /* >= BT: also holds token ids */
    struct kcu_stage *c = (struct kcu_stage *)calloc(1, sizeof *c);

    if (!c) {
        kern_fail(err, "out of memory");
        goto out;
    }
    st->impl = c;
    if (!kcu_attention_head_size_ok(model_head_dim(&st->model))) {
        kern_fail(err, "the CUDA backend's attention takes head sizes (head_dim) up to 256, not %d",
                  model_head_dim(&st->model));
        goto out;
    }
    KCU_TRY(cudaSetDevice(st->device.index));
    KCU_TRY(cudaStreamCreateWithFlags(&c->cx.stream, cudaStreamNonBlocking));
    for (int i = 0; i < KCU_COPY_CHUNKS; i++)
        KCU_TRY(cudaEventCreateWithFlags(&c->copied[i], cudaEventDisableTiming));
    KCU_TRY(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    KCU_TRY(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
    KCU_TRY_BLAS(cublasCreate(&c->cx.blas));
    KCU_TRY_BLAS(cublasSetStream(c->cx.blas, c->cx.stream));
    KCU_TRY_BLAS(cublasSetMathMode(c->cx.blas, CUBLAS_DEFAULT_MATH));
    if (kcu_lt_wanted()) {
        KCU_TRY_BLAS(cublasLtCreate(&c->cx.lt));
        KCU_TRY(cudaMalloc(&c->cx.lt_workspace, KCU_LT_WORKSPACE));
        c->cx.lt_workspace_bytes = KCU_LT_WORKSPACE;
    }
    KCU_TRY(cudaMalloc(&c->params, n * sizeof(float)));
    KCU_TRY(cudaMalloc(&c->grads, n * sizeof(float)));
    KCU_TRY(cudaMalloc(&c->m, n * sizeof(float)));
    KCU_TRY(cudaMalloc(&c->v, n * sizeof(float)));
    KCU_TRY(cudaMalloc(&c->params_bf, n * sizeof(bf16)));
    c->slots = (struct kcu_slot *)calloc((size_t)st->spec.in_flight, sizeof *c->slots);
    if (!c->slots) {
        kern_fail(err, "out of memory");
        goto out;
    }
    if (kcu_families(st)->alloc(st, c, err) != 0)
        goto out;
    if (st->spec.link != CODEC_F32 && !(st->spec.first && st->spec.last))
        KCU_TRY(cudaMalloc(&c->wire, kern_stage_link_bytes(st)));
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

#define toff kcu_toff

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
cudaError_t kcu_upload(struct kcu_stage *c, void *dev, const void *host, size_t bytes)
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

/* dev -> h_act on `stream`, piece by piece, each piece's landing recorded
 * in copied[]; kcu_download_finish takes them to the host. */
static cudaError_t kcu_download_start(struct kcu_stage *c, cudaStream_t stream, const void *dev, size_t bytes)
{
    size_t piece = copy_piece(bytes), off;
    int k;
    cudaError_t e = cudaSuccess;
    for (off = 0, k = 0; off < bytes && e == cudaSuccess; off += piece, k++) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        e = cudaMemcpyAsync((char *)c->h_act + off, (const char *)dev + off, len, cudaMemcpyDeviceToHost, stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(c->copied[k], stream);
    }
    return e;
}

/* h_act -> host, each piece as soon as it lands. */
static cudaError_t kcu_download_finish(struct kcu_stage *c, void *host, size_t bytes)
{
    size_t piece = copy_piece(bytes), off;
    int k;
    cudaError_t e = cudaSuccess;
    for (off = 0, k = 0; off < bytes && e == cudaSuccess; off += piece, k++) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        e = cudaEventSynchronize(c->copied[k]);
        if (e == cudaSuccess)
            host_copy((char *)host + off, (const char *)c->h_act + off, len);
    }
    return e;
}

/* dev -> h_act -> host, after all the stream's work so far. Returns when
 * host holds it all. */
cudaError_t kcu_download(struct kcu_stage *c, void *host, const void *dev, size_t bytes)
{
    cudaError_t e = kcu_download_start(c, c->cx.stream, dev, bytes);
    return e == cudaSuccess ? kcu_download_finish(c, host, bytes) : e;
}

int kcu_hidden_in(struct kern_stage *st, float *dev, const void *host, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    int N = st->spec.micro_batch * st->spec.seq_len, C = st->model.d_model;
    if (st->spec.link == CODEC_F32) {
        KCU_TRY(kcu_upload(c, dev, host, (size_t)N * C * sizeof(float)));
    } else {
        KCU_TRY(kcu_upload(c, c->wire, host, kern_stage_link_bytes(st)));
        KCU_TRY_OK(kcu_link_decode(&c->cx, st->spec.link, dev, c->wire, N, C, err));
    }
    rc = 0;
out:
    return rc;
}

int kcu_hidden_out_start(struct kern_stage *st, const float *dev, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    int N = st->spec.micro_batch * st->spec.seq_len, C = st->model.d_model;
    const void *src = dev;
    if (st->spec.link != CODEC_F32) {
        KCU_TRY_OK(kcu_link_encode(&c->cx, st->spec.link, c->wire, dev, N, C, err));
        src = c->wire;
    }
    KCU_TRY(cudaEventRecord(c->ready, c->cx.stream));
    KCU_TRY(cudaStreamWaitEvent(c->copy_stream, c->ready, 0));
    KCU_TRY(kcu_download_start(c, c->copy_stream, src, kern_stage_link_bytes(st)));
    rc = 0;
out:
    return rc;
}

int kcu_hidden_out_finish(struct kern_stage *st, void *host, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    KCU_TRY(kcu_download_finish(c, host, kern_stage_link_bytes(st)));
    KCU_TRY(cudaStreamSynchronize(c->cx.stream));
    rc = 0;
out:
    return rc;
}

int kcu_hidden_out(struct kern_stage *st, void *host, const float *dev, struct kern_err *err)
{
    if (kcu_hidden_out_start(st, dev, err) != 0)
        return -1;
    return kcu_hidden_out_finish(st, host, err);
}

int kcu_tokens_in(struct kcu_stage *c, int32_t *dev, const void *host, int n, struct kern_err *err)
{
    int rc = -1;
    memcpy(c->h_act, host, (size_t)n * sizeof(int32_t));
    KCU_TRY(cudaMemcpyAsync(dev, c->h_act, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, c->cx.stream));
    rc = 0;
out:
    return rc;
}

int kcu_head_forward(struct kern_stage *st, struct kcu_slot *s, const int32_t *targets, void *output,
                     struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    const struct kcu_ctx *cx = &c->cx;
    int N = st->spec.micro_batch * st->spec.seq_len, C = st->model.d_model, V = st->model.vocab;
    int Vp = kcu_padded_vocab(V);
    memcpy(c->h_targets, targets, (size_t)N * sizeof(int32_t));
    KCU_TRY(cudaMemcpyAsync(s->targets, c->h_targets, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice,
                            cx->stream));
    /* the logits go straight into probs, which the loss turns into probabilities */
    KCU_TRY_OK(kcu_matmul_forward(cx, s->probs, s->lnf, c->params_bf + st->off_head, NULL, N, C, V, Vp, err));
    KCU_TRY_OK(kcu_crossentropy_forward(cx, s->losses, s->probs, s->targets, N, V, Vp, err));
    KCU_TRY_OK(kcu_mean(cx, c->loss, s->losses, N, err));
    KCU_TRY(cudaMemcpyAsync(c->h_act, c->loss, sizeof(float), cudaMemcpyDeviceToHost, cx->stream));
    KCU_TRY(cudaStreamSynchronize(cx->stream));
    memcpy(output, c->h_act, sizeof(float));
    rc = 0;
out:
    return rc;
}

int kcu_head_backward(struct kern_stage *st, struct kcu_slot *s, const void *grad_output, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    const struct kcu_ctx *cx = &c->cx;
    int N = st->spec.micro_batch * st->spec.seq_len, C = st->model.d_model, V = st->model.vocab;
    int Vp = kcu_padded_vocab(V);
    /* the loss is a mean over N tokens */
    KCU_TRY_OK(kcu_crossentropy_backward(cx, c->dlogits, s->probs, s->targets, *(const float *)grad_output / (float)N, N, V,
                                         Vp, err));
    KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, c->grads + st->off_head, NULL, NULL, c->dlogits, s->lnf,
                                   c->params_bf + st->off_head, N, C, V, Vp, err));
    rc = 0;
out:
    return rc;
}

static int gpt2_forward(struct kern_stage *st, struct kcu_slot *s, const void *input,
                        const int32_t *targets, void *output, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    const struct kcu_ctx *cx = &c->cx;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    int NH = st->model.heads, N = B * T;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t BTC = (size_t)N * C;
    const float *p = c->params; /* fp32: embeddings, biases, LN */
    const bf16 *pb = c->params_bf; /* bf16: matrices */
    const float *res = s->x0;   /* (B,T,C) */

    KCU_TRY(cudaSetDevice(st->device.index));
    if (st->spec.first) {
        KCU_TRY_OK(kcu_tokens_in(c, s->tokens, input, N, err));
        KCU_TRY_OK(kcu_encoder_forward(cx, s->x0, s->tokens, p + st->off_wte,
                                       p + st->off_wpe, B, T, C, err));
    } else {
        KCU_TRY_OK(kcu_hidden_in(st, s->x0, input, err));
    }
    /* Each residual add runs with the norm after it (the block's ln2, the
     * next block's ln1 or the final lnf) in one pass. */
    if (nb)
        KCU_TRY_OK(kcu_layernorm_forward(cx, s->blocks[0].ln1, s->blocks[0].ln1_mean, s->blocks[0].ln1_rstd, res,
                                         p + toff(st, 0, KT_LN1W), p + toff(st, 0, KT_LN1B), N, C, err));
    else if (st->spec.last)
        KCU_TRY_OK(kcu_layernorm_forward(cx, s->lnf, s->lnf_mean, s->lnf_rstd, res, p + st->off_lnfw,
                                         p + st->off_lnfb, N, C, err));
    for (int l = 0; l < nb; l++) {
        struct kcu_block_acts *a = &s->blocks[l], *next = l + 1 < nb ? &s->blocks[l + 1] : NULL;
        KCU_TRY_OK(kcu_matmul_forward(cx, c->qkv, a->ln1, pb + toff(st, l, KT_QKVW),
                                      p + toff(st, l, KT_QKVB), N, C, 3 * C, 3 * C, err));
        KCU_TRY_OK(kcu_attention_forward(cx, a->atty, a->qkvr, a->lse, c->qkv, c->atty_heads, B, T, C, NH, NH,
                                         NULL, NULL, 0, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, c->attproj, a->atty, pb + toff(st, l, KT_ATTPROJW),
                                      p + toff(st, l, KT_ATTPROJB), N, C, C, C, err));
        KCU_TRY_OK(kcu_residual_layernorm_forward(cx, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, res, c->attproj,
                                                  p + toff(st, l, KT_LN2W), p + toff(st, l, KT_LN2B), N, C, err));
        KCU_TRY_OK(kcu_matmul_gelu_forward(cx, a->fch_gelu, a->fch, a->ln2, pb + toff(st, l, KT_FCW),
                                           pb + toff(st, l, KT_FCB), p + toff(st, l, KT_FCB), c->dfch_gelu, N, C,
                                           4 * C, err));
        KCU_TRY_OK(kcu_matmul_forward(cx, c->attproj, a->fch_gelu,
                                      pb + toff(st, l, KT_FCPROJW),
                                      p + toff(st, l, KT_FCPROJB), N, 4 * C, C, C, err));
        if (next)
            KCU_TRY_OK(kcu_residual_layernorm_forward(cx, a->res3, next->ln1, next->ln1_mean, next->ln1_rstd,
                                                      a->res2, c->attproj, p + toff(st, l + 1, KT_LN1W),
                                                      p + toff(st, l + 1, KT_LN1B), N, C, err));
        else if (st->spec.last)
            KCU_TRY_OK(kcu_residual_layernorm_forward(cx, a->res3, s->lnf, s->lnf_mean, s->lnf_rstd, a->res2,
                                                      c->attproj, p + st->off_lnfw, p + st->off_lnfb, N, C, err));
        else
            KCU_TRY_OK(kcu_residual_forward(cx, a->res3, a->res2, c->attproj, BTC, err));
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

static int gpt2_backward(struct kern_stage *st, struct kcu_slot *s, const void *grad_output,
                         void *grad_input, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    const struct kcu_ctx *cx = &c->cx;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    int NH = st->model.heads, N = B * T;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t BTC = (size_t)N * C;
    const float *p = c->params;
    const bf16 *pb = c->params_bf;
    float *g = c->grads;

    KCU_TRY(cudaSetDevice(st->device.index));
    if (st->spec.last) {
        const float *res = nb ? s->blocks[nb - 1].res3 : s->x0;
        KCU_TRY_OK(kcu_head_backward(st, s, grad_output, err));
        KCU_TRY(cudaMemsetAsync(c->dres, 0, BTC * sizeof(float), cx->stream));
        KCU_TRY_OK(kcu_layernorm_backward(cx, c->dres, g + st->off_lnfw, g + st->off_lnfb,
                                          c->dln, res, p + st->off_lnfw, s->lnf_mean,
                                          s->lnf_rstd, N, C, err));
    } else {
        KCU_TRY_OK(kcu_hidden_in(st, c->dres, grad_output, err));
    }
    for (int l = nb - 1; l >= 0; l--) {
        struct kcu_block_acts *a = &s->blocks[l];
        const float *res_in = l ? s->blocks[l - 1].res3 : s->x0;
        /* res3 = res2 + fcproj(gelu(fc(ln2(res2)))): dres is d res3, then d res2 */
        KCU_TRY_OK(kcu_to_bf16(cx, c->dres_bf, c->dres, BTC, err));
        KCU_TRY_OK(kcu_matmul_dgelu_backward(cx, c->dfch_bf, a->fch, c->dres_bf, pb + toff(st, l, KT_FCPROJW),
                                             c->dfch_gelu, N, 4 * C, C, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, NULL, g + toff(st, l, KT_FCPROJW), g + toff(st, l, KT_FCPROJB), c->dres,
                                       c->dres_bf, a->fch_gelu, pb + toff(st, l, KT_FCPROJW), N, 4 * C, C, C,
                                       err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, g + toff(st, l, KT_FCW), g + toff(st, l, KT_FCB), NULL,
                                       c->dfch_bf, a->ln2, pb + toff(st, l, KT_FCW), N, C, 4 * C, 4 * C, err));
        KCU_TRY_OK(kcu_layernorm_backward(cx, c->dres, g + toff(st, l, KT_LN2W),
                                          g + toff(st, l, KT_LN2B), c->dln, a->res2,
                                          p + toff(st, l, KT_LN2W), a->ln2_mean, a->ln2_rstd,
                                          N, C, err));
        /* res2 = res_in + attproj(attention(qkv(ln1(res_in)))): dres becomes d res_in */
        KCU_TRY_OK(kcu_to_bf16(cx, c->dres_bf, c->dres, BTC, err));
        KCU_TRY_OK(kcu_matmul_backward(cx, c->datty, g + toff(st, l, KT_ATTPROJW),
                                       g + toff(st, l, KT_ATTPROJB), c->dres, c->dres_bf,
                                       a->atty, pb + toff(st, l, KT_ATTPROJW), N, C, C, C, err));
        KCU_TRY_OK(kcu_attention_backward(cx, c->dqkv, c->dqkv_bf, c->datty, a->atty, a->qkvr, a->lse,
                                          c->delta, c->dy, c->dqkvr, B, T, C, NH, NH, NULL, NULL, 0, err));
        /* on the stage's first block (but the model's), d res_in is the
         * stage's grad_input: it goes to the host while the qkv weight
         * gradients are computed */
        int overlap = l == 0 && !st->spec.first;
        KCU_TRY_OK(kcu_matmul_backward(cx, c->dln, overlap ? NULL : g + toff(st, l, KT_QKVW),
                                       overlap ? NULL : g + toff(st, l, KT_QKVB), c->dqkv, c->dqkv_bf, a->ln1,
                                       pb + toff(st, l, KT_QKVW), N, C, 3 * C, 3 * C, err));
        KCU_TRY_OK(kcu_layernorm_backward(cx, c->dres, g + toff(st, l, KT_LN1W),
                                          g + toff(st, l, KT_LN1B), c->dln, res_in,
                                          p + toff(st, l, KT_LN1W), a->ln1_mean, a->ln1_rstd,
                                          N, C, err));
        if (overlap) {
            KCU_TRY_OK(kcu_hidden_out_start(st, c->dres, err));
            KCU_TRY_OK(kcu_matmul_backward(cx, NULL, g + toff(st, l, KT_QKVW), g + toff(st, l, KT_QKVB), c->dqkv,
                                           c->dqkv_bf, a->ln1, pb + toff(st, l, KT_QKVW), N, C, 3 * C, 3 * C,
                                           err));
        }
    }
    if (st->spec.first) {
        KCU_TRY_OK(kcu_encoder_backward(cx, g + st->off_wte, g + st->off_wpe, c->dres,
                                        s->tokens, B, T, C, err));
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

const struct kcu_family kcu_gpt2 = {gpt2_alloc, gpt2_release, gpt2_forward, gpt2_backward};

static int kcu_forward(struct kern_stage *st, int slot, const void *input, const int32_t *targets, void *output,
                       struct kern_err *err)
{
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    return kcu_families(st)->forward(st, &c->slots[slot], input, targets, output, err);
}

static int kcu_backward(struct kern_stage *st, int slot, const void *grad_output, void *grad_input,
                        struct kern_err *err)
{
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    return kcu_families(st)->backward(st, &c->slots[slot], grad_output, grad_input, err);
}

static int kcu_tie_grads(struct kern_stage *st, size_t a, size_t b, size_t count, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    KCU_TRY(cudaSetDevice(st->device.index));
    KCU_TRY_OK(kcu_add_pair(&c->cx, c->grads + a, c->grads + b, count, err));
    KCU_TRY(cudaStreamSynchronize(c->cx.stream));
    rc = 0;
out:
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
static int kcu_transfer_range(struct kern_stage *st, enum kern_buffer which, size_t off, size_t count,
                              float *host, int to_host, struct kern_err *err)
{
    int rc = -1;
    struct kcu_stage *c = (struct kcu_stage *)st->impl;
    float *dev = kcu_buffer(c, which) + off;
    size_t bytes = count * sizeof(float);
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
        KCU_TRY_OK(kcu_to_bf16(&c->cx, c->params_bf + off, c->params + off, count, err));
    KCU_TRY(cudaStreamSynchronize(c->cx.stream));
    rc = 0;
out:
    return rc;
}

static int kcu_transfer(struct kern_stage *st, enum kern_buffer which, float *host, int to_host,
                        struct kern_err *err)
{
    return kcu_transfer_range(st, which, 0, st->n_params, host, to_host, err);
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
    kcu_tie_grads,   /* tie_grads */
    kcu_adamw_step,  /* adamw */
    kcu_grad_buffer, /* grad_buffer */
    kcu_read,        /* read */
    kcu_write,       /* write */
    kcu_transfer_range, /* transfer_range */
    1,               /* encodes_links: cuda_codec.cu */
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
