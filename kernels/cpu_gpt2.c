/* cpu_gpt2.c - a GPT-2 stage on the CPU (kernels/README.md): learned
 * positions, pre-LayerNorm blocks with fused QKV and a GELU MLP, final
 * LayerNorm.  Built from cpu_layers.h. */
#include "cpu_stage.h"

#include <string.h>

/* Activations one block keeps for its backward, per micro-batch. */
struct gpt2_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (B,T,C), (B,T), (B,T) */
    float *qkv;                       /* (B,T,3C) */
    float *atty;                      /* (B,T,C) attention output before projection */
    float *att;                       /* (B,NH,T,T) softmax probabilities */
    float *res2;                      /* (B,T,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (B,T,C), (B,T), (B,T) */
    float *fch, *fch_gelu;            /* (B,T,F) each */
    float *res3;                      /* (B,T,C) block output */
};

/* The family's scratch. */
struct gpt2_work {
    float *attproj;        /* (B,T,C) projection output before the residual add */
    float *datty;          /* (B,T,C) */
    float *dqkv;           /* (B,T,3C) */
    float *datt;           /* (B,NH,T,T) */
    float *dfch, *dfch_gelu; /* (B,T,F) each */
};

static size_t acts_layout(const struct kern_stage *st, float *base, struct gpt2_acts *a)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t NH = st->model.heads, F = st->model.ffn_dim, BT = B * T, used = 0;
    a->ln1 = cpu_carve(base, &used, BT * C);
    a->ln1_mean = cpu_carve(base, &used, BT);
    a->ln1_rstd = cpu_carve(base, &used, BT);
    a->qkv = cpu_carve(base, &used, BT * 3 * C);
    a->atty = cpu_carve(base, &used, BT * C);
    a->att = cpu_carve(base, &used, B * NH * T * T);
    a->res2 = cpu_carve(base, &used, BT * C);
    a->ln2 = cpu_carve(base, &used, BT * C);
    a->ln2_mean = cpu_carve(base, &used, BT);
    a->ln2_rstd = cpu_carve(base, &used, BT);
    a->fch = cpu_carve(base, &used, BT * F);
    a->fch_gelu = cpu_carve(base, &used, BT * F);
    a->res3 = cpu_carve(base, &used, BT * C);
    return used;
}

static size_t work_layout(const struct kern_stage *st, float *base, struct gpt2_work *w)
{
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    size_t NH = st->model.heads, F = st->model.ffn_dim, BT = B * T, used = 0;
    w->attproj = cpu_carve(base, &used, BT * C);
    w->datty = cpu_carve(base, &used, BT * C);
    w->dqkv = cpu_carve(base, &used, BT * 3 * C);
    w->datt = cpu_carve(base, &used, B * NH * T * T);
    w->dfch = cpu_carve(base, &used, BT * F);
    w->dfch_gelu = cpu_carve(base, &used, BT * F);
    return used;
}

static size_t gpt2_block_floats(const struct kern_stage *st)
{
    struct gpt2_acts a;
    return acts_layout(st, NULL, &a);
}

static size_t gpt2_work_floats(const struct kern_stage *st)
{
    struct gpt2_work w;
    return work_layout(st, NULL, &w);
}

/* Block l's activations in slot s. */
static void block_acts(const struct kern_stage *st, const struct cpu_slot *s, int l, struct gpt2_acts *a)
{
    const struct cpu_stage *c = st->impl;
    acts_layout(st, s->blocks + (size_t)l * c->block_floats, a);
}

static int gpt2_forward(struct kern_stage *st, struct cpu_slot *s, const void *input, const int32_t *targets,
                        float *output)
{
    struct cpu_stage *c = st->impl;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    int NH = st->model.heads, F = st->model.ffn_dim, N = B * T;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t BTC = (size_t)N * C;
    float *p = c->params;
    struct gpt2_work w;
    work_layout(st, c->scratch, &w);

    if (st->spec.first) {
        memcpy(s->tokens, input, (size_t)N * sizeof(int32_t));
        kern_cpu_encoder_forward_f32(s->x0, s->tokens, p + st->off_wte, p + st->off_wpe, B, T, C);
    } else {
        memcpy(s->x0, input, BTC * sizeof(float));
    }
    const float *res = s->x0; /* (B,T,C) */
    for (int l = 0; l < nb; l++) {
        struct gpt2_acts a;
        block_acts(st, s, l, &a);
        kern_cpu_layernorm_forward_f32(a.ln1, a.ln1_mean, a.ln1_rstd, res, cpu_block_tensor(st, p, l, KT_LN1W),
                                       cpu_block_tensor(st, p, l, KT_LN1B), N, C);
        kern_cpu_matmul_forward_f32(a.qkv, a.ln1, cpu_block_tensor(st, p, l, KT_QKVW),
                                    cpu_block_tensor(st, p, l, KT_QKVB), N, C, 3 * C);
        kern_cpu_attention_forward_f32(a.atty, a.att, a.qkv, B, T, C, NH, NH, 0);
        kern_cpu_matmul_forward_f32(w.attproj, a.atty, cpu_block_tensor(st, p, l, KT_ATTPROJW),
                                    cpu_block_tensor(st, p, l, KT_ATTPROJB), N, C, C);
        kern_cpu_residual_forward_f32(a.res2, res, w.attproj, BTC);
        kern_cpu_layernorm_forward_f32(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, cpu_block_tensor(st, p, l, KT_LN2W),
                                       cpu_block_tensor(st, p, l, KT_LN2B), N, C);
        kern_cpu_matmul_forward_f32(a.fch, a.ln2, cpu_block_tensor(st, p, l, KT_FCW),
                                    cpu_block_tensor(st, p, l, KT_FCB), N, C, F);
        kern_cpu_gelu_forward_f32(a.fch_gelu, a.fch, (size_t)N * F);
        kern_cpu_matmul_forward_f32(w.attproj, a.fch_gelu, cpu_block_tensor(st, p, l, KT_FCPROJW),
                                    cpu_block_tensor(st, p, l, KT_FCPROJB), N, F, C);
        kern_cpu_residual_forward_f32(a.res3, a.res2, w.attproj, BTC);
        res = a.res3;
    }
    if (!st->spec.last) {
        memcpy(output, res, BTC * sizeof(float));
        return 0;
    }
    kern_cpu_layernorm_forward_f32(s->lnf, s->lnf_stat1, s->lnf_stat2, res, p + st->off_lnfw, p + st->off_lnfb,
                                   N, C);
    cpu_head_forward(st, s, targets, output);
    return 0;
}

static void gpt2_backward(struct kern_stage *st, struct cpu_slot *s, const float *grad_output, float *grad_input)
{
    struct cpu_stage *c = st->impl;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = st->model.d_model;
    int NH = st->model.heads, F = st->model.ffn_dim, N = B * T;
    int nb = st->spec.layer_end - st->spec.layer_start;
    size_t BTC = (size_t)N * C;
    float *p = c->params, *g = c->grads;
    struct gpt2_work w;
    work_layout(st, c->scratch, &w);

    if (st->spec.last) {
        struct gpt2_acts top;
        if (nb)
            block_acts(st, s, nb - 1, &top);
        const float *res = nb ? top.res3 : s->x0;
        cpu_head_backward(st, s, grad_output);
        memset(c->dres, 0, BTC * sizeof(float));
        kern_cpu_layernorm_backward_f32(c->dres, g + st->off_lnfw, g + st->off_lnfb, c->dln, res, p + st->off_lnfw,
                                        s->lnf_stat1, s->lnf_stat2, N, C);
    } else {
        memcpy(c->dres, grad_output, BTC * sizeof(float));
    }
    for (int l = nb - 1; l >= 0; l--) {
        struct gpt2_acts a, prev;
        block_acts(st, s, l, &a);
        if (l)
            block_acts(st, s, l - 1, &prev);
        const float *res_in = l ? prev.res3 : s->x0;
        /* res3 = res2 + fcproj(gelu(fc(ln2(res2)))): dres is d res3, then d res2 */
        memset(w.dfch_gelu, 0, (size_t)N * F * sizeof(float));
        kern_cpu_matmul_backward_f32(w.dfch_gelu, cpu_block_tensor(st, g, l, KT_FCPROJW),
                                     cpu_block_tensor(st, g, l, KT_FCPROJB), c->dres, a.fch_gelu,
                                     cpu_block_tensor(st, p, l, KT_FCPROJW), N, F, C);
        memset(w.dfch, 0, (size_t)N * F * sizeof(float));
        kern_cpu_gelu_backward_f32(w.dfch, a.fch, w.dfch_gelu, (size_t)N * F);
        memset(c->dln, 0, BTC * sizeof(float));
        kern_cpu_matmul_backward_f32(c->dln, cpu_block_tensor(st, g, l, KT_FCW), cpu_block_tensor(st, g, l, KT_FCB),
                                     w.dfch, a.ln2, cpu_block_tensor(st, p, l, KT_FCW), N, C, F);
        kern_cpu_layernorm_backward_f32(c->dres, cpu_block_tensor(st, g, l, KT_LN2W),
                                        cpu_block_tensor(st, g, l, KT_LN2B), c->dln, a.res2,
                                        cpu_block_tensor(st, p, l, KT_LN2W), a.ln2_mean, a.ln2_rstd, N, C);
        /* res2 = res_in + attproj(attention(qkv(ln1(res_in)))): dres becomes d res_in */
        memset(w.datty, 0, BTC * sizeof(float));
        kern_cpu_matmul_backward_f32(w.datty, cpu_block_tensor(st, g, l, KT_ATTPROJW),
                                     cpu_block_tensor(st, g, l, KT_ATTPROJB), c->dres, a.atty,
                                     cpu_block_tensor(st, p, l, KT_ATTPROJW), N, C, C);
        memset(w.dqkv, 0, BTC * 3 * sizeof(float));
        kern_cpu_attention_backward_f32(w.dqkv, w.datt, w.datty, a.qkv, a.att, B, T, C, NH, NH, 0);
        memset(c->dln, 0, BTC * sizeof(float));
        kern_cpu_matmul_backward_f32(c->dln, cpu_block_tensor(st, g, l, KT_QKVW),
                                     cpu_block_tensor(st, g, l, KT_QKVB), w.dqkv, a.ln1,
                                     cpu_block_tensor(st, p, l, KT_QKVW), N, C, 3 * C);
        kern_cpu_layernorm_backward_f32(c->dres, cpu_block_tensor(st, g, l, KT_LN1W),
                                        cpu_block_tensor(st, g, l, KT_LN1B), c->dln, res_in,
                                        cpu_block_tensor(st, p, l, KT_LN1W), a.ln1_mean, a.ln1_rstd, N, C);
    }
    if (st->spec.first)
        kern_cpu_encoder_backward_f32(g + st->off_wte, g + st->off_wpe, c->dres, s->tokens, B, T, C);
    else
        memcpy(grad_input, c->dres, BTC * sizeof(float));
}

const struct cpu_family kern_cpu_gpt2 = {
    .block_floats = gpt2_block_floats,
    .work_floats = gpt2_work_floats,
    .forward = gpt2_forward,
    .backward = gpt2_backward,
};
