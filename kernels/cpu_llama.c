/* cpu_llama.c - a stage of the llama kind on the CPU (LlamaForCausalLM's
 * equations, and the families that differ from it only in what their
 * row of common/model.c says):
 *
 *   x0 = wte[token]                                           first stage
 *   per block:  h = x + o(attn(rope(qkn(qkv(n1)))),  n1 = rmsnorm(x)
 *               x' = h + down(silu(gate(n2)) * up(n2)),   n2 = rmsnorm(h)
 *   or, norm_after (OLMo-2):
 *               h = x + rmsnorm(o(attn(rope(qkn(qkv(x)))))
 *               x' = h + rmsnorm(down(silu(gate(h)) * up(h)))
 *   rmsnorm(x) -> head (V,C) -> cross-entropy                 last stage
 *
 * k and v have kv_heads heads, each serving heads / kv_heads query heads;
 * heads of hd channels (q NH hd wide, C or not); rotary embeddings in
 * Hugging Face's rotate_half convention.  q, k and v are one product with
 * the fused (NH hd + 2KV, C) matrix their consecutive weights make, plus
 * their consecutive biases where the family has them (Qwen2); qkn is the
 * family's RMSNorm of q and k (Qwen3: each head; OLMo-2: the whole q and
 * k), else nothing; gate and up are one product with (2F, C).  Built from cpu_layers.h. */
#include "cpu_stage.h"

#include <math.h>
#include <string.h>

/* Activations one block keeps for its backward, per micro-batch (Q = NH
 * hd, W = Q + 2KV). */
struct llama_acts {
    float *ln1, *ln1_rstd; /* (B,T,C), (B,T): the attention's norm, its output (before) or its
                              input, o's output (norm_after) */
    float *qkvp;           /* (B,T,W) the product, before q and k are normalised (qk_norm families) */
    float *qk_rstd;        /* (B,T,nq+nk) the q and k norms' statistics (qk_norm families) */
    float *qkv;            /* (B,T,W) after the norm and the rotation */
    float *atty;           /* (B,T,Q) attention output before projection */
    float *att;            /* (B,NH,T,T) softmax probabilities */
    float *res2;           /* (B,T,C) residual after attention */
    float *ln2, *ln2_rstd; /* (B,T,C), (B,T): the MLP's norm, its output or (norm_after) input */
    float *gu;             /* (B,T,2F) gate | up */
    float *h;              /* (B,T,F) silu(gate) * up */
    float *res3;           /* (B,T,C) block output */
};

/* The family's scratch. */
struct llama_work {
    float *proj;   /* (B,T,C) a projection's output before the residual add */
    float *datty;  /* (B,T,Q) */
    float *dqkv;   /* (B,T,W) */
    float *dqkvp;  /* (B,T,W) before the q and k norms (qk_norm families) */
    float *datt;   /* (B,NH,T,T) */
    float *dgu;    /* (B,T,2F) */
    float *dh;     /* (B,T,F) */
};

static size_t acts_layout(const struct kern_stage *st, float *base, struct llama_acts *a)
{
    const struct model_config *m = &st->model;
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = m->d_model, Q = model_q_width(m);
    size_t NH = m->heads, F = m->ffn_dim, BT = B * T, W = model_qkv_width(m), used = 0;
    int sq, sk;
    size_t stats = (size_t)model_qk_segments(m, &sq, &sk);
    a->ln1 = cpu_carve(base, &used, BT * C);
    a->ln1_rstd = cpu_carve(base, &used, BT);
    a->qkvp = cpu_carve(base, &used, stats ? BT * W : 0);
    a->qk_rstd = cpu_carve(base, &used, BT * stats);
    a->qkv = cpu_carve(base, &used, BT * W);
    a->atty = cpu_carve(base, &used, BT * Q);
    a->att = cpu_carve(base, &used, B * NH * T * T);
    a->res2 = cpu_carve(base, &used, BT * C);
    a->ln2 = cpu_carve(base, &used, BT * C);
    a->ln2_rstd = cpu_carve(base, &used, BT);
    a->gu = cpu_carve(base, &used, BT * 2 * F);
    a->h = cpu_carve(base, &used, BT * F);
    a->res3 = cpu_carve(base, &used, BT * C);
    return used;
}

static size_t work_layout(const struct kern_stage *st, float *base, struct llama_work *w)
{
    const struct model_config *m = &st->model;
    size_t B = st->spec.micro_batch, T = st->spec.seq_len, C = m->d_model, Q = model_q_width(m);
    size_t NH = m->heads, F = m->ffn_dim, BT = B * T, W = model_qkv_width(m), used = 0;
    w->proj = cpu_carve(base, &used, BT * C);
    w->datty = cpu_carve(base, &used, BT * Q);
    w->dqkv = cpu_carve(base, &used, BT * W);
    int sq, sk;
    w->dqkvp = cpu_carve(base, &used, model_qk_segments(m, &sq, &sk) ? BT * W : 0);
    w->datt = cpu_carve(base, &used, B * NH * T * T);
    w->dgu = cpu_carve(base, &used, BT * 2 * F);
    w->dh = cpu_carve(base, &used, BT * F);
    return used;
}

static size_t llama_block_floats(const struct kern_stage *st)
{
    struct llama_acts a;
    return acts_layout(st, NULL, &a);
}

static size_t llama_work_floats(const struct kern_stage *st)
{
    struct llama_work w;
    return work_layout(st, NULL, &w);
}

/* cos then sin of position t's angle for pair i, (seq_len, hd/2) each. */
static size_t llama_table_floats(const struct kern_stage *st)
{
    return 2 * (size_t)st->spec.seq_len * (size_t)(model_head_dim(&st->model) / 2);
}

static void llama_fill_tables(const struct kern_stage *st, float *tables)
{
    int T = st->spec.seq_len, half = model_head_dim(&st->model) / 2;
    float *cos_t = tables, *sin_t = tables + (size_t)T * half;
    for (int i = 0; i < half; i++) {
        double inv = model_rope_inv_freq(&st->model, i); /* radians per position */
        for (int t = 0; t < T; t++) {
            cos_t[(size_t)t * half + i] = (float)cos(t * inv);
            sin_t[(size_t)t * half + i] = (float)sin(t * inv);
        }
    }
}

/* Block l's activations in slot s. */
static void block_acts(const struct kern_stage *st, const struct cpu_slot *s, int l, struct llama_acts *a)
{
    const struct cpu_stage *c = st->impl;
    acts_layout(st, s->blocks + (size_t)l * c->block_floats, a);
}

static int llama_forward(struct kern_stage *st, struct cpu_slot *s, const void *input, const int32_t *targets,
                         float *output)
{
    struct cpu_stage *c = st->impl;
    const struct model_config *m = &st->model;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = m->d_model, NH = m->heads, KVH = m->kv_heads;
    int F = m->ffn_dim, N = B * T, W = (int)model_qkv_width(m), nb = st->spec.layer_end - st->spec.layer_start;
    int Q = model_q_width(m), KV = KVH * model_head_dim(m), sq, sk;
    size_t BTC = (size_t)N * C;
    const float *cos_t = c->tables, *sin_t = c->tables + llama_table_floats(st) / 2;
    float *p = c->params, eps = (float)m->norm_eps;
    int post = model_families[m->arch].norm_after;
    model_qk_segments(m, &sq, &sk);
    struct llama_work w;
    work_layout(st, c->scratch, &w);

    if (st->spec.first) {
        memcpy(s->tokens, input, (size_t)N * sizeof(int32_t));
        kern_cpu_encoder_forward_f32(s->x0, s->tokens, p + st->off_wte, NULL, B, T, C);
    } else {
        memcpy(s->x0, input, BTC * sizeof(float));
    }
    const float *res = s->x0; /* (B,T,C) */
    for (int l = 0; l < nb; l++) {
        struct llama_acts a;
        block_acts(st, s, l, &a);
        const float *in = res;   /* the attention's input: the stream or (before) its norm */
        if (!post) {
            kern_cpu_rmsnorm_forward_f32(a.ln1, a.ln1_rstd, res, cpu_llama_tensor(st, p, l, LT_LN1W), eps, N, C);
            in = a.ln1;
        }
        kern_cpu_matmul_forward_f32(sq ? a.qkvp : a.qkv, in, cpu_llama_tensor(st, p, l, LT_QW),
                                    cpu_llama_tensor(st, p, l, LT_QB), N, C, W);
        if (sq)
            kern_cpu_qknorm_forward_f32(a.qkv, a.qk_rstd, a.qkvp, cpu_llama_tensor(st, p, l, LT_QNORMW),
                                        cpu_llama_tensor(st, p, l, LT_KNORMW), eps, N, Q, KV, sq, sk);
        kern_cpu_rope_forward_f32(a.qkv, cos_t, sin_t, B, T, Q, NH, KVH);
        kern_cpu_attention_forward_f32(a.atty, a.att, a.qkv, B, T, Q, NH, KVH, m->sliding_window);
        kern_cpu_matmul_forward_f32(post ? a.ln1 : w.proj, a.atty, cpu_llama_tensor(st, p, l, LT_OW), NULL, N, Q, C);
        if (post)   /* (after) the norm of the attention's output */
            kern_cpu_rmsnorm_forward_f32(w.proj, a.ln1_rstd, a.ln1, cpu_llama_tensor(st, p, l, LT_LN1W), eps, N, C);
        kern_cpu_residual_forward_f32(a.res2, res, w.proj, BTC);
        in = a.res2;
        if (!post) {
            kern_cpu_rmsnorm_forward_f32(a.ln2, a.ln2_rstd, a.res2, cpu_llama_tensor(st, p, l, LT_LN2W), eps, N, C);
            in = a.ln2;
        }
        kern_cpu_matmul_forward_f32(a.gu, in, cpu_llama_tensor(st, p, l, LT_GATEW), NULL, N, C, 2 * F);
        kern_cpu_swiglu_forward_f32(a.h, a.gu, N, F);
        kern_cpu_matmul_forward_f32(post ? a.ln2 : w.proj, a.h, cpu_llama_tensor(st, p, l, LT_DOWNW), NULL, N, F, C);
        if (post)
            kern_cpu_rmsnorm_forward_f32(w.proj, a.ln2_rstd, a.ln2, cpu_llama_tensor(st, p, l, LT_LN2W), eps, N, C);
        kern_cpu_residual_forward_f32(a.res3, a.res2, w.proj, BTC);
        res = a.res3;
    }
    if (!st->spec.last) {
        memcpy(output, res, BTC * sizeof(float));
        return 0;
    }
    kern_cpu_rmsnorm_forward_f32(s->lnf, s->lnf_stat1, res, p + st->off_lnfw, eps, N, C);
    cpu_head_forward(st, s, targets, output);
    return 0;
}

/* The gradient of a sublayer's output: c->dres itself, or (norm_after)
 * c->dres through the norm after it (x its input, rstd its statistics,
 * `norm` its weight in block l) into c->dln. */
static const float *sublayer_dout(struct kern_stage *st, int post, int l, enum kern_llama_tensor norm, const float *x,
                                  const float *rstd)
{
    struct cpu_stage *c = st->impl;
    int N = st->spec.micro_batch * st->spec.seq_len, C = st->model.d_model;
    if (!post)
        return c->dres;
    memset(c->dln, 0, (size_t)N * C * sizeof(float));
    kern_cpu_rmsnorm_backward_f32(c->dln, cpu_llama_tensor(st, c->grads, l, norm), c->dres, x,
                                  cpu_llama_tensor(st, c->params, l, norm), rstd, N, C);
    return c->dln;
}

/* The backward of a sublayer's first product (weight `mat` of block l, OC
 * outputs, their gradient dout; dbias NULL: none) into c->dres: added to
 * it (norm_after: the product read the stream x), or through the norm
 * before it (n its output, rstd its statistics, `norm` its weight). */
static void sublayer_din(struct kern_stage *st, int post, int l, enum kern_llama_tensor mat, float *dbias,
                         const float *dout, int OC, const float *x, const float *n, enum kern_llama_tensor norm,
                         const float *rstd)
{
    struct cpu_stage *c = st->impl;
    int N = st->spec.micro_batch * st->spec.seq_len, C = st->model.d_model;
    float *p = c->params, *g = c->grads;
    if (post) {
        kern_cpu_matmul_backward_f32(c->dres, cpu_llama_tensor(st, g, l, mat), dbias, dout, x,
                                     cpu_llama_tensor(st, p, l, mat), N, C, OC);
        return;
    }
    memset(c->dln, 0, (size_t)N * C * sizeof(float));
    kern_cpu_matmul_backward_f32(c->dln, cpu_llama_tensor(st, g, l, mat), dbias, dout, n,
                                 cpu_llama_tensor(st, p, l, mat), N, C, OC);
    kern_cpu_rmsnorm_backward_f32(c->dres, cpu_llama_tensor(st, g, l, norm), c->dln, x,
                                  cpu_llama_tensor(st, p, l, norm), rstd, N, C);
}

static void llama_backward(struct kern_stage *st, struct cpu_slot *s, const float *grad_output, float *grad_input)
{
    struct cpu_stage *c = st->impl;
    const struct model_config *m = &st->model;
    int B = st->spec.micro_batch, T = st->spec.seq_len, C = m->d_model, NH = m->heads, KVH = m->kv_heads;
    int F = m->ffn_dim, N = B * T, W = (int)model_qkv_width(m), nb = st->spec.layer_end - st->spec.layer_start;
    int Q = model_q_width(m), KV = KVH * model_head_dim(m), sq, sk;
    size_t BTC = (size_t)N * C;
    const float *cos_t = c->tables, *sin_t = c->tables + llama_table_floats(st) / 2;
    float *p = c->params, *g = c->grads;
    int post = model_families[m->arch].norm_after;
    model_qk_segments(m, &sq, &sk);
    struct llama_work w;
    work_layout(st, c->scratch, &w);

    if (st->spec.last) {
        struct llama_acts top;
        if (nb)
            block_acts(st, s, nb - 1, &top);
        const float *res = nb ? top.res3 : s->x0;
        cpu_head_backward(st, s, grad_output);
        memset(c->dres, 0, BTC * sizeof(float));
        kern_cpu_rmsnorm_backward_f32(c->dres, g + st->off_lnfw, c->dln, res, p + st->off_lnfw, s->lnf_stat1, N, C);
    } else {
        memcpy(c->dres, grad_output, BTC * sizeof(float));
    }
    for (int l = nb - 1; l >= 0; l--) {
        struct llama_acts a, prev;
        block_acts(st, s, l, &a);
        if (l)
            block_acts(st, s, l - 1, &prev);
        const float *res_in = l ? prev.res3 : s->x0;
        /* res3 = res2 + down(swiglu(gate|up(ln2(res2)))), or res2 + ln2(down(swiglu(gate|up(res2)))):
         * dres is d res3, then d res2 */
        const float *dout = sublayer_dout(st, post, l, LT_LN2W, a.ln2, a.ln2_rstd);   /* d of down's output */
        memset(w.dh, 0, (size_t)N * F * sizeof(float));
        kern_cpu_matmul_backward_f32(w.dh, cpu_llama_tensor(st, g, l, LT_DOWNW), NULL, dout, a.h,
                                     cpu_llama_tensor(st, p, l, LT_DOWNW), N, F, C);
        memset(w.dgu, 0, (size_t)N * 2 * F * sizeof(float));
        kern_cpu_swiglu_backward_f32(w.dgu, a.gu, w.dh, N, F);
        sublayer_din(st, post, l, LT_GATEW, NULL, w.dgu, 2 * F, a.res2, a.ln2, LT_LN2W, a.ln2_rstd);
        /* res2 = res_in + o(attention(rope(qkn(qkv(ln1(res_in)))))), or the norm after o: dres becomes
         * d res_in */
        dout = sublayer_dout(st, post, l, LT_LN1W, a.ln1, a.ln1_rstd);   /* d of o's output */
        memset(w.datty, 0, (size_t)N * Q * sizeof(float));
        kern_cpu_matmul_backward_f32(w.datty, cpu_llama_tensor(st, g, l, LT_OW), NULL, dout, a.atty,
                                     cpu_llama_tensor(st, p, l, LT_OW), N, Q, C);
        memset(w.dqkv, 0, (size_t)N * W * sizeof(float));
        kern_cpu_attention_backward_f32(w.dqkv, w.datt, w.datty, a.qkv, a.att, B, T, Q, NH, KVH, m->sliding_window);
        kern_cpu_rope_backward_f32(w.dqkv, cos_t, sin_t, B, T, Q, NH, KVH);
        if (sq) {
            memset(w.dqkvp, 0, (size_t)N * W * sizeof(float));
            kern_cpu_qknorm_backward_f32(w.dqkvp, cpu_llama_tensor(st, g, l, LT_QNORMW),
                                         cpu_llama_tensor(st, g, l, LT_KNORMW), w.dqkv, a.qkvp,
                                         cpu_llama_tensor(st, p, l, LT_QNORMW), cpu_llama_tensor(st, p, l, LT_KNORMW),
                                         a.qk_rstd, N, Q, KV, sq, sk);
        }
        sublayer_din(st, post, l, LT_QW, cpu_llama_tensor(st, g, l, LT_QB), sq ? w.dqkvp : w.dqkv, W, res_in, a.ln1,
                     LT_LN1W, a.ln1_rstd);
    }
    if (st->spec.first)
        kern_cpu_encoder_backward_f32(g + st->off_wte, NULL, c->dres, s->tokens, B, T, C);
    else
        memcpy(grad_input, c->dres, BTC * sizeof(float));
}

const struct cpu_family kern_cpu_llama = {
    .block_floats = llama_block_floats,
    .work_floats = llama_work_floats,
    .table_floats = llama_table_floats,
    .fill_tables = llama_fill_tables,
    .forward = llama_forward,
    .backward = llama_backward,
};
