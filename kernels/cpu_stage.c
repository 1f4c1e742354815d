/* cpu_stage.c - the CPU backend: a stage in fp32 on the host, its memory,
 * gradients and AdamW; each family's forward and backward (cpu_gpt2.c,
 * cpu_llama.c) is a row of cpu_families.  Simple on purpose: it is the
 * oracle the CUDA backend is checked against. */
#include "cpu_stage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The CPU stage of each kind of block (a family's row names its kind). */
static const struct cpu_family *const cpu_families[MODEL_BLOCKS_COUNT] = {
    [MODEL_BLOCKS_GPT2] = &kern_cpu_gpt2,
    [MODEL_BLOCKS_LLAMA] = &kern_cpu_llama,
};

static const struct cpu_family *family(const struct kern_stage *st)
{
    return cpu_families[model_families[st->model.arch].blocks];
}

static size_t slot_layout(const struct kern_stage *st, struct cpu_slot *s, float *base)
{
    const struct cpu_stage *c = st->impl;
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t V = st->model.vocab, BT = B * T, used = 0;
    size_t nb = (size_t)(st->spec.layer_end - st->spec.layer_start);

    s->tokens = (int32_t *)cpu_carve(base, &used, BT); /* int32 and float are both 4 bytes */
    s->targets = (int32_t *)cpu_carve(base, &used, BT);
    s->x0 = cpu_carve(base, &used, BT * C);
    s->blocks = cpu_carve(base, &used, nb * c->block_floats);
    if (st->spec.last) {
        s->lnf = cpu_carve(base, &used, BT * C);
        s->lnf_stat1 = cpu_carve(base, &used, BT);
        s->lnf_stat2 = cpu_carve(base, &used, BT);
        s->probs = cpu_carve(base, &used, BT * V);
        s->losses = cpu_carve(base, &used, BT);
    }
    return used;
}

static size_t scratch_layout(const struct kern_stage *st, struct cpu_stage *c, float *base)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t V = st->model.vocab, BT = B * T, used = 0;
    size_t last_v = st->spec.last ? V : 0;

    c->scratch = cpu_carve(base, &used, family(st)->work_floats(st));
    c->logits = cpu_carve(base, &used, BT * last_v);
    c->dlogits = cpu_carve(base, &used, BT * last_v);
    c->dres = cpu_carve(base, &used, BT * C);
    c->dln = cpu_carve(base, &used, BT * C);
    return used;
}

static void cpu_release(struct kern_stage *st)
{
    struct cpu_stage *c = st->impl;
    if (c->slots)
        for (int i = 0; i < st->spec.in_flight; i++)
            free(c->slots[i].mem);
    free(c->slots);
    free(c->scratch_mem);
    free(c->tables);
    free(c->params);
    free(c->grads);
    free(c->m);
    free(c->v);
    free(c);
    st->impl = NULL;
}

static int cpu_init(struct kern_stage *st, const float *params, struct kern_err *err)
{
    const struct cpu_family *fam = family(st);
    struct cpu_stage *c = calloc(1, sizeof *c);
    if (!c)
        return kern_fail(err, "out of memory");
    st->impl = c;
    size_t n = st->n_params;
    c->block_floats = fam->block_floats(st);
    c->params = malloc(n * sizeof(float));
    c->grads = calloc(n, sizeof(float));
    c->m = calloc(n, sizeof(float));
    c->v = calloc(n, sizeof(float));
    c->slots = calloc((size_t)st->spec.in_flight, sizeof *c->slots);
    size_t scratch_floats = scratch_layout(st, c, NULL);
    c->scratch_mem = malloc(scratch_floats * sizeof(float));
    size_t table_floats = fam->table_floats ? fam->table_floats(st) : 0;
    c->tables = table_floats ? malloc(table_floats * sizeof(float)) : NULL;
    if (!c->params || !c->grads || !c->m || !c->v || !c->slots || !c->scratch_mem || (table_floats && !c->tables))
        goto oom;
    memcpy(c->params, params, n * sizeof(float));
    scratch_layout(st, c, c->scratch_mem);
    if (table_floats)
        fam->fill_tables(st, c->tables);
    for (int i = 0; i < st->spec.in_flight; i++) {
        struct cpu_slot *s = &c->slots[i];
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

void cpu_head_forward(struct kern_stage *st, struct cpu_slot *s, const int32_t *targets, float *output)
{
    struct cpu_stage *c = st->impl;
    int N = st->spec.micro_batch * st->spec.seq_len, C = st->model.d_model, V = st->model.vocab;
    kern_cpu_matmul_forward_f32(c->logits, s->lnf, c->params + st->off_head, NULL, N, C, V);
    if (!targets) {
        /* kern_stage_logits: (B,T,V) out, no loss. */
        memcpy(output, c->logits, (size_t)N * V * sizeof(float));
        return;
    }
    memcpy(s->targets, targets, (size_t)N * sizeof(int32_t));
    kern_cpu_crossentropy_forward_f32(s->losses, s->probs, c->logits, s->targets, N, V);
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += s->losses[i];
    *output = (float)(sum / N);
}

void cpu_head_backward(struct kern_stage *st, struct cpu_slot *s, const float *grad_output)
{
    struct cpu_stage *c = st->impl;
    int N = st->spec.micro_batch * st->spec.seq_len, C = st->model.d_model, V = st->model.vocab;
    /* the loss is a mean over N tokens */
    kern_cpu_crossentropy_backward_f32(c->dlogits, s->probs, s->targets, grad_output[0] / (float)N, N, V);
    memset(c->dln, 0, (size_t)N * C * sizeof(float));
    kern_cpu_matmul_backward_f32(c->dln, c->grads + st->off_head, NULL, c->dlogits, s->lnf,
                                 c->params + st->off_head, N, C, V);
}

static int cpu_forward(struct kern_stage *st, int slot, const void *input, const int32_t *targets, void *output,
                       struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    (void)err;
    return family(st)->forward(st, &c->slots[slot], input, targets, output);
}

static int cpu_backward(struct kern_stage *st, int slot, const void *grad_output, void *grad_input,
                        struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    (void)err;
    family(st)->backward(st, &c->slots[slot], grad_output, grad_input);
    return 0;
}

static int cpu_zero_grad(struct kern_stage *st, struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    (void)err;
    memset(c->grads, 0, st->n_params * sizeof(float));
    return 0;
}

static int cpu_grad_norm2(struct kern_stage *st, size_t from, size_t count, double *out, struct kern_err *err)
{
    struct cpu_stage *c = st->impl;
    double sum = 0;
    (void)err;
    for (size_t i = from; i < from + count; i++)
        sum += (double)c->grads[i] * c->grads[i];
    *out = sum;
    return 0;
}

static int cpu_tie_grads(struct kern_stage *st, size_t a, size_t b, size_t count, struct kern_err *err)
{
    float *g = ((struct cpu_stage *)st->impl)->grads;
    (void)err;
#pragma omp parallel for
    for (size_t i = 0; i < count; i++)
        g[a + i] = g[b + i] = g[a + i] + g[b + i];
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
static int cpu_transfer_range(struct kern_stage *st, enum kern_buffer which, size_t off, size_t count,
                              float *host, int to_host, struct kern_err *err)
{
    float *buf = cpu_buffer(st, which);
    if (!buf)
        return kern_fail(err, "unknown buffer %d", (int)which);
    if (to_host)
        memcpy(host, buf + off, count * sizeof(float));
    else
        memcpy(buf + off, host, count * sizeof(float));
    return 0;
}

static int cpu_transfer(struct kern_stage *st, enum kern_buffer which, float *host,
                        int to_host, struct kern_err *err)
{
    return cpu_transfer_range(st, which, 0, st->n_params, host, to_host, err);
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
    .tie_grads = cpu_tie_grads,
    .adamw = cpu_adamw,
    .grad_buffer = cpu_grad_buffer,
    .read = cpu_read,
    .write = cpu_write,
    .transfer_range = cpu_transfer_range,
};
