/* cpu_stage.c - the CPU backend: a stage's forward and backward in fp32 on
 * the host, built from cpu_layers.h. Simple on purpose: it is the oracle the
 * CUDA backend is checked against. */
#include "cpu_layers.h"
#include "stage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Activations one block keeps for its backward, per micro-batch. */
struct cpu_block_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (B,T,C), (B,T), (B,T) */
    float *qkv;                       /* (B,T,3C) */
    float *atty;                      /* (B,T,C) attention output before projection */
    float *att;                       /* (B,NH,T,T) softmax probabilities */
    float *res2;                      /* (B,T,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (B,T,C), (B,T), (B,T) */
    float *fch, *fch_gelu;            /* (B,T,4C) each */
    float *res3;                      /* (B,T,C) block output */
};

/* Everything one micro-batch in flight keeps. */
struct cpu_slot {
    float *mem;                  /* one allocation holding all of the below */
    int32_t *tokens, *targets;   /* (B,T) each, first / last stage */
    float *x0;                   /* (B,T,C) residual stream entering the first block */
    struct cpu_block_acts *blocks;
    float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C), (B,T), (B,T), last stage */
    float *probs;                /* (B,T,V) last stage */
    float *losses;               /* (B,T) last stage */
};

struct cpu_stage {
    float *params, *grads, *m, *v; /* n_params each */
    struct cpu_slot *slots;        /* in_flight */
    /* Scratch shared by all micro-batches (one runs at a time). */
    float *scratch;
    float *attproj;                /* (B,T,C) projection output before the residual add */
    float *logits;                 /* (B,T,V) last stage */
    float *dres;                   /* (B,T,C) gradient of the residual stream */
    float *dln;                    /* (B,T,C) */
    float *datty;                  /* (B,T,C) */
    float *dqkv;                   /* (B,T,3C) */
    float *datt;                   /* (B,NH,T,T) */
    float *dfch, *dfch_gelu;       /* (B,T,4C) each */
    float *dlogits;                /* (B,T,V) last stage */
};

/* Hands out consecutive pieces of one allocation; pass base NULL to count. */
static float *carve(float *base, size_t *used, size_t n)
{
    float *p = base ? base + *used : NULL;
    *used += n;
    return p;
}

static size_t slot_layout(const struct kern_stage *st, struct cpu_slot *s, float *base)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t NH = st->model.heads, V = st->model.vocab, BT = B * T, used = 0;
    int nb = st->spec.layer_end - st->spec.layer_start;

    s->tokens = (int32_t *)carve(base, &used, BT); /* int32 and float are both 4 bytes */
    s->targets = (int32_t *)carve(base, &used, BT);
    s->x0 = carve(base, &used, BT * C);
    for (int l = 0; l < nb; l++) {
        struct cpu_block_acts *a = &s->blocks[l];
        a->ln1 = carve(base, &used, BT * C);
        a->ln1_mean = carve(base, &used, BT);
        a->ln1_rstd = carve(base, &used, BT);
        a->qkv = carve(base, &used, BT * 3 * C);
        a->atty = carve(base, &used, BT * C);
        a->att = carve(base, &used, B * NH * T * T);
        a->res2 = carve(base, &used, BT * C);
        a->ln2 = carve(base, &used, BT * C);
        a->ln2_mean = carve(base, &used, BT);
        a->ln2_rstd = carve(base, &used, BT);
        a->fch = carve(base, &used, BT * 4 * C);
        a->fch_gelu = carve(base, &used, BT * 4 * C);
        a->res3 = carve(base, &used, BT * C);
    }
    if (st->spec.last) {
        s->lnf = carve(base, &used, BT * C);
        s->lnf_mean = carve(base, &used, BT);
        s->lnf_rstd = carve(base, &used, BT);
        s->probs = carve(base, &used, BT * V);
        s->losses = carve(base, &used, BT);
    }
    return used;
}

static size_t scratch_layout(const struct kern_stage *st, struct cpu_stage *c, float *base)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t NH = st->model.heads, V = st->model.vocab, BT = B * T, used = 0;
    size_t last_v = st->spec.last ? V : 0;

    c->attproj = carve(base, &used, BT * C);
    c->logits = carve(base, &used, BT * last_v);
    c->dres = carve(base, &used, BT * C);
    c->dln = carve(base, &used, BT * C);
    c->datty = carve(base, &used, BT * C);
    c->dqkv = carve(base, &used, BT * 3 * C);
    c->datt = carve(base, &used, B * NH * T * T);
    c->dfch = carve(base, &used, BT * 4 * C);
    c->dfch_gelu = carve(base, &used, BT * 4 * C);
    c->dlogits = carve(base, &used, BT * last_v);
    return used;
}

static void cpu_release(struct kern_stage *st)
{
    struct cpu_stage *c = st->impl;
    if (c->slots)
        for (int i = 0; i < st->spec.in_flight; i++) {
            free(c->slots[i].mem);
            free(c->slots[i].blocks);
        }
    free(c->slots);
    free(c->scratch);
    free(c->params);
    free(c->grads);
    free(c->m);
    free(c->v);
    free(c);
    st->impl = NULL;
}

static int cpu_init(struct kern_stage *st, const float *params, struct kern_err *err)
{
    int nb = st->spec.layer_end - st->spec.layer_start;
    struct cpu_stage *c = calloc(1, sizeof *c);
    if (!c)
        return kern_fail(err, "out of memory");
    st->impl = c;
    size_t n = st->n_params;
    c->params = malloc(n * sizeof(float));
    c->grads = calloc(n, sizeof(float));
    c->m = calloc(n, sizeof(float));
    c->v = calloc(n, sizeof(float));
    c->slots = calloc((size_t)st->spec.in_flight, sizeof *c->slots);
    size_t scratch_floats = scratch_layout(st, c, NULL);
    c->scratch = malloc(scratch_floats * sizeof(float));
    if (!c->params || !c->grads || !c->m || !c->v || !c->slots || !c->scratch)
        goto oom;
    memcpy(c->params, params, n * sizeof(float));
    scratch_layout(st, c, c->scratch);
    for (int i = 0; i < st->spec.in_flight; i++) {
        struct cpu_slot *s = &c->slots[i];
        s->blocks = calloc(nb ? (size_t)nb : 1, sizeof *s->blocks);
        if (!s->blocks)
            goto oom;
        size_t floats = slot_layout(st, s, NULL);
        s->mem = malloc(floats * sizeof(float));
        if (!s->mem)
            goto oom;
        slot_layout(st, s, s->mem);
    }
    return 0;
oom:
    cpu_release(st);
    return kern_fail(err, "out of memory for the parameters and activations of "
                     "%d micro-batches in flight", st->spec.in_flight);
}

/* Parameters (or gradients) of block l of this stage, by tensor. */
static float *block_tensor(const struct kern_stage *st, float *base, int l,
                           enum kern_block_tensor t)
{
    return base + st->off_block0 + (size_t)l * st->block_floats +
           kern_block_offset(st->model.d_model, t);
}

static int cpu_forward(struct kern_stage *st, int slot, const void *input,
                       const int32_t *targets, float *output, struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    struct cpu_slot *s = &c->slots[slot];
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    int NH = st->model.heads, V = st->model.vocab, N = B * T;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t BTC = (size_t)N * C;
    float *p = c->params;
    (void)err;

    if (st->spec.first) {
        memcpy(s->tokens, input, (size_t)N * sizeof(int32_t));
        kern_cpu_encoder_forward_f32(s->x0, s->tokens, p + st->off_wte, p + st->off_wpe,
                                     B, T, C);
    } else {
        memcpy(s->x0, input, BTC * sizeof(float));
    }
    const float *res = s->x0; /* (B,T,C) */
    for (int l = 0; l < nb; l++) {
        struct cpu_block_acts *a = &s->blocks[l];
        kern_cpu_layernorm_forward_f32(a->ln1, a->ln1_mean, a->ln1_rstd, res,
                                       block_tensor(st, p, l, KT_LN1W),
                                       block_tensor(st, p, l, KT_LN1B), N, C);
        kern_cpu_matmul_forward_f32(a->qkv, a->ln1, block_tensor(st, p, l, KT_QKVW),
                                    block_tensor(st, p, l, KT_QKVB), N, C, 3 * C);
        kern_cpu_attention_forward_f32(a->atty, a->att, a->qkv, B, T, C, NH);
        kern_cpu_matmul_forward_f32(c->attproj, a->atty, block_tensor(st, p, l, KT_ATTPROJW),
                                    block_tensor(st, p, l, KT_ATTPROJB), N, C, C);
        kern_cpu_residual_forward_f32(a->res2, res, c->attproj, BTC);
        kern_cpu_layernorm_forward_f32(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                                       block_tensor(st, p, l, KT_LN2W),
                                       block_tensor(st, p, l, KT_LN2B), N, C);
        kern_cpu_matmul_forward_f32(a->fch, a->ln2, block_tensor(st, p, l, KT_FCW),
                                    block_tensor(st, p, l, KT_FCB), N, C, 4 * C);
        kern_cpu_gelu_forward_f32(a->fch_gelu, a->fch, BTC * 4);
        kern_cpu_matmul_forward_f32(c->attproj, a->fch_gelu, block_tensor(st, p, l, KT_FCPROJW),
                                    block_tensor(st, p, l, KT_FCPROJB), N, 4 * C, C);
        kern_cpu_residual_forward_f32(a->res3, a->res2, c->attproj, BTC);
        res = a->res3;
    }
    if (!st->spec.last) {
        memcpy(output, res, BTC * sizeof(float));
        return 0;
    }
    kern_cpu_layernorm_forward_f32(s->lnf, s->lnf_mean, s->lnf_rstd, res, p + st->off_lnfw,
                                   p + st->off_lnfb, N, C);
    kern_cpu_matmul_forward_f32(c->logits, s->lnf, p + st->off_head, NULL, N, C, V);
    if (!targets) {
        /* kern_stage_logits: (B,T,V) out, no loss. */
        memcpy(output, c->logits, (size_t)N * V * sizeof(float));
        return 0;
    }
    memcpy(s->targets, targets, (size_t)N * sizeof(int32_t));
    kern_cpu_crossentropy_forward_f32(s->losses, s->probs, c->logits, s->targets, N, V);
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += s->losses[i];
    *output = (float)(sum / N);
    return 0;
}

static int cpu_backward(struct kern_stage *st, int slot, const float *grad_output,
                        float *grad_input, struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    struct cpu_slot *s = &c->slots[slot];
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    int NH = st->model.heads, V = st->model.vocab, N = B * T;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t BTC = (size_t)N * C;
    float *p = c->params, *g = c->grads;
    (void)err;

    if (st->spec.last) {
        const float *res = nb ? s->blocks[nb - 1].res3 : s->x0;
        /* the loss is a mean over N tokens */
        kern_cpu_crossentropy_backward_f32(c->dlogits, s->probs, s->targets,
                                           grad_output[0] / (float)N, N, V);
        memset(c->dln, 0, BTC * sizeof(float));
        kern_cpu_matmul_backward_f32(c->dln, g + st->off_head, NULL, c->dlogits, s->lnf,
                                     p + st->off_head, N, C, V);
        memset(c->dres, 0, BTC * sizeof(float));
        kern_cpu_layernorm_backward_f32(c->dres, g + st->off_lnfw, g + st->off_lnfb, c->dln,
                                        res, p + st->off_lnfw, s->lnf_mean, s->lnf_rstd, N, C);
    } else {
        memcpy(c->dres, grad_output, BTC * sizeof(float));
    }
    for (int l = nb - 1; l >= 0; l--) {
        struct cpu_block_acts *a = &s->blocks[l];
        const float *res_in = l ? s->blocks[l - 1].res3 : s->x0;
        /* res3 = res2 + fcproj(gelu(fc(ln2(res2)))): dres is d res3, then d res2 */
        memset(c->dfch_gelu, 0, BTC * 4 * sizeof(float));
        kern_cpu_matmul_backward_f32(c->dfch_gelu, block_tensor(st, g, l, KT_FCPROJW),
                                     block_tensor(st, g, l, KT_FCPROJB), c->dres, a->fch_gelu,
                                     block_tensor(st, p, l, KT_FCPROJW), N, 4 * C, C);
        memset(c->dfch, 0, BTC * 4 * sizeof(float));
        kern_cpu_gelu_backward_f32(c->dfch, a->fch, c->dfch_gelu, BTC * 4);
        memset(c->dln, 0, BTC * sizeof(float));
        kern_cpu_matmul_backward_f32(c->dln, block_tensor(st, g, l, KT_FCW),
                                     block_tensor(st, g, l, KT_FCB), c->dfch, a->ln2,
                                     block_tensor(st, p, l, KT_FCW), N, C, 4 * C);
        kern_cpu_layernorm_backward_f32(c->dres, block_tensor(st, g, l, KT_LN2W),
                                        block_tensor(st, g, l, KT_LN2B), c->dln, a->res2,
                                        block_tensor(st, p, l, KT_LN2W), a->ln2_mean,
                                        a->ln2_rstd, N, C);
        /* res2 = res_in + attproj(attention(qkv(ln1(res_in)))): dres becomes d res_in */
        memset(c->datty, 0, BTC * sizeof(float));
        kern_cpu_matmul_backward_f32(c->datty, block_tensor(st, g, l, KT_ATTPROJW),
                                     block_tensor(st, g, l, KT_ATTPROJB), c->dres, a->atty,
                                     block_tensor(st, p, l, KT_ATTPROJW), N, C, C);
        memset(c->dqkv, 0, BTC * 3 * sizeof(float));
        kern_cpu_attention_backward_f32(c->dqkv, c->datt, c->datty, a->qkv, a->att, B, T, C, NH);
        memset(c->dln, 0, BTC * sizeof(float));
        kern_cpu_matmul_backward_f32(c->dln, block_tensor(st, g, l, KT_QKVW),
                                     block_tensor(st, g, l, KT_QKVB), c->dqkv, a->ln1,
                                     block_tensor(st, p, l, KT_QKVW), N, C, 3 * C);
        kern_cpu_layernorm_backward_f32(c->dres, block_tensor(st, g, l, KT_LN1W),
                                        block_tensor(st, g, l, KT_LN1B), c->dln, res_in,
                                        block_tensor(st, p, l, KT_LN1W), a->ln1_mean,
                                        a->ln1_rstd, N, C);
    }
    if (st->spec.first)
        kern_cpu_encoder_backward_f32(g + st->off_wte, g + st->off_wpe, c->dres, s->tokens,
                                      B, T, C);
    else
        memcpy(grad_input, c->dres, BTC * sizeof(float));
    return 0;
}

static int cpu_zero_grad(struct kern_stage *st, struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    (void)err;
    memset(c->grads, 0, st->n_params * sizeof(float));
    return 0;
}

static int cpu_grad_norm2(struct kern_stage *st, double *out, struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    double sum = 0;
    (void)err;
    for (size_t i = 0; i < st->n_params; i++)
        sum += (double)c->grads[i] * c->grads[i];
    *out = sum;
    return 0;
}

static int cpu_adamw(struct kern_stage *st, const struct kern_adamw *h, uint64_t step,
                     struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    float b1c = 1.0f - powf(h->beta1, (float)step);
    float b2c = 1.0f - powf(h->beta2, (float)step);
    (void)err;
    for (int t = 0; t < st->n_tensors; t++) {
        const struct kern_tensor *ten = &st->tensors[t];
        float wd = ten->decay ? h->weight_decay : 0.0f;
        float *p = c->params + ten->offset, *g = c->grads + ten->offset;
        float *m = c->m + ten->offset, *v = c->v + ten->offset;
#pragma omp parallel for
        for (size_t i = 0; i < ten->count; i++) {
            float grad = g[i] * h->grad_scale;
            m[i] = h->beta1 * m[i] + (1.0f - h->beta1) * grad;
            v[i] = h->beta2 * v[i] + (1.0f - h->beta2) * grad * grad;
            float mhat = m[i] / b1c, vhat = v[i] / b2c;
            p[i] -= h->lr * (mhat / (sqrtf(vhat) + h->eps) + wd * p[i]);
        }
    }
    return 0;
}

static float *cpu_grad_buffer(struct kern_stage *st)
{
    return ((struct cpu_stage *)st->impl)->grads;
}

static float *cpu_buffer(struct kern_stage *st, enum kern_buffer which)
{
    struct cpu_stage *c = st->impl;
    switch (which) {
    case KERN_PARAMS: return c->params;
    case KERN_GRADS: return c->grads;
    case KERN_ADAM_M: return c->m;
    case KERN_ADAM_V: return c->v;
    }
    return NULL;
}

/* Copies a whole flat buffer out of (to_host) or into the stage. */
static int cpu_transfer(struct kern_stage *st, enum kern_buffer which, float *host,
                        int to_host, struct kern_err *err)
{
    float *buf = cpu_buffer(st, which);
    if (!buf)
        return kern_fail(err, "unknown buffer %d", (int)which);
    if (to_host)
        memcpy(host, buf, st->n_params * sizeof(float));
    else
        memcpy(buf, host, st->n_params * sizeof(float));
    return 0;
}

static int cpu_read(struct kern_stage *st, enum kern_buffer which, float *dst,
                    struct kern_err *err)
{
    return cpu_transfer(st, which, dst, 1, err);
}

static int cpu_write(struct kern_stage *st, enum kern_buffer which, const float *src,
                     struct kern_err *err)
{
    return cpu_transfer(st, which, (float *)src, 0, err);
}

const struct kern_ops kern_cpu_ops = {
    .init = cpu_init,
    .release = cpu_release,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .zero_grad = cpu_zero_grad,
    .grad_norm2 = cpu_grad_norm2,
    .adamw = cpu_adamw,
    .grad_buffer = cpu_grad_buffer,
    .read = cpu_read,
    .write = cpu_write,
};
