/* model.c - the model families as data (model.h): their tensors, and the
 * counts every layer above derives from them. */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ROW(d, t) {d, t}
#define VEC ROW(MD_ONE, 1)

/* GPT-2 (kernels/README.md): learned positions, LayerNorm with bias, fused
 * QKV, GELU MLP of 4C, biases everywhere, head untied.  The order is the
 * flat buffer's and the streams are those of the first stage files, so
 * weights and files stay what they were. */
static const struct model_tensor gpt2_embed[] = {
    {"wte", ROW(MD_V, 1), ROW(MD_C, 1), MI_NORMAL, 0, 1, 0, NULL},
    {"wpe", ROW(MD_CTX, 1), ROW(MD_C, 1), MI_NORMAL, 1, 1, 0, NULL},
};
static const struct model_tensor gpt2_block[] = {
    {"ln1w", VEC, ROW(MD_C, 1), MI_ONES, 0, 0, 0, NULL},
    {"ln1b", VEC, ROW(MD_C, 1), MI_ZEROS, 1, 0, 0, NULL},
    {"qkvw", ROW(MD_C, 3), ROW(MD_C, 1), MI_NORMAL, 2, 1, 1, NULL},
    {"qkvb", VEC, ROW(MD_C, 3), MI_ZEROS, 3, 0, 0, NULL},
    {"attprojw", ROW(MD_C, 1), ROW(MD_C, 1), MI_NORMAL_OUT, 4, 1, 1, NULL},
    {"attprojb", VEC, ROW(MD_C, 1), MI_ZEROS, 5, 0, 0, NULL},
    {"ln2w", VEC, ROW(MD_C, 1), MI_ONES, 6, 0, 0, NULL},
    {"ln2b", VEC, ROW(MD_C, 1), MI_ZEROS, 7, 0, 0, NULL},
    {"fcw", ROW(MD_FFN, 1), ROW(MD_C, 1), MI_NORMAL, 8, 1, 1, NULL},
    {"fcb", VEC, ROW(MD_FFN, 1), MI_ZEROS, 9, 0, 0, NULL},
    {"fcprojw", ROW(MD_C, 1), ROW(MD_FFN, 1), MI_NORMAL_OUT, 10, 1, 1, NULL},
    {"fcprojb", VEC, ROW(MD_C, 1), MI_ZEROS, 11, 0, 0, NULL},
};
static const struct model_tensor gpt2_head[] = {
    {"lnfw", VEC, ROW(MD_C, 1), MI_ONES, 2, 0, 0, NULL},
    {"lnfb", VEC, ROW(MD_C, 1), MI_ZEROS, 3, 0, 0, NULL},
    {"head", ROW(MD_V, 1), ROW(MD_C, 1), MI_NORMAL, 4, 1, 1, NULL},
};

/* Llama (LlamaForCausalLM): rotary positions, RMSNorm without bias, q, k
 * and v projections (k and v of kv_heads heads), SwiGLU MLP of ffn_dim, no
 * biases; the head may be tied to wte.  q, k and v are consecutive in the
 * buffer, so the kernels multiply them as one (NH hd + 2 KV, C) matrix;
 * gate and up likewise as one (2F, C). */
#define LLAMA_QKV(q_rows)                                                                                        \
    {"ln1w", VEC, ROW(MD_C, 1), MI_ONES, 0, 0, 0, "model.layers.%d.input_layernorm.weight"},                    \
    {"qw", ROW(q_rows, 1), ROW(MD_C, 1), MI_NORMAL, 1, 1, 1, "model.layers.%d.self_attn.q_proj.weight"},        \
    {"kw", ROW(MD_KV, 1), ROW(MD_C, 1), MI_NORMAL, 2, 1, 1, "model.layers.%d.self_attn.k_proj.weight"},         \
    {"vw", ROW(MD_KV, 1), ROW(MD_C, 1), MI_NORMAL, 3, 1, 1, "model.layers.%d.self_attn.v_proj.weight"}
#define LLAMA_REST                                                                                              \
    {"ow", ROW(MD_C, 1), ROW(MD_Q, 1), MI_NORMAL_OUT, 4, 1, 1, "model.layers.%d.self_attn.o_proj.weight"},      \
    {"ln2w", VEC, ROW(MD_C, 1), MI_ONES, 5, 0, 0, "model.layers.%d.post_attention_layernorm.weight"},           \
    {"gatew", ROW(MD_FFN, 1), ROW(MD_C, 1), MI_NORMAL, 6, 1, 1, "model.layers.%d.mlp.gate_proj.weight"},        \
    {"upw", ROW(MD_FFN, 1), ROW(MD_C, 1), MI_NORMAL, 7, 1, 1, "model.layers.%d.mlp.up_proj.weight"},            \
    {"downw", ROW(MD_C, 1), ROW(MD_FFN, 1), MI_NORMAL_OUT, 8, 1, 1, "model.layers.%d.mlp.down_proj.weight"}
static const struct model_tensor llama_embed[] = {
    {"wte", ROW(MD_V, 1), ROW(MD_C, 1), MI_NORMAL, 0, 1, 0, "model.embed_tokens.weight"},
};
static const struct model_tensor llama_block[] = {LLAMA_QKV(MD_Q), LLAMA_REST};
static const struct model_tensor llama_head[] = {
    {"lnfw", VEC, ROW(MD_C, 1), MI_ONES, 2, 0, 0, "model.norm.weight"},
    {"head", ROW(MD_V, 1), ROW(MD_C, 1), MI_NORMAL, 4, 1, 1, "lm_head.weight"},
};
/* Older Llama checkpoints carry the rotary frequencies as a buffer. */
static const char *const llama_skipped[] = {"model.layers.%d.self_attn.rotary_emb.inv_freq", NULL};

/* Qwen2/2.5 (Qwen2ForCausalLM): Llama with biases on q, k and v (none on
 * o), consecutive like their matrices, so the fused product adds one
 * (NH hd + 2 KV) bias. */
static const struct model_tensor qwen2_block[] = {
    LLAMA_QKV(MD_Q),
    {"qb", VEC, ROW(MD_Q, 1), MI_ZEROS, 9, 0, 0, "model.layers.%d.self_attn.q_proj.bias"},
    {"kb", VEC, ROW(MD_KV, 1), MI_ZEROS, 10, 0, 0, "model.layers.%d.self_attn.k_proj.bias"},
    {"vb", VEC, ROW(MD_KV, 1), MI_ZEROS, 11, 0, 0, "model.layers.%d.self_attn.v_proj.bias"},
    LLAMA_REST,
};

/* Qwen3 (Qwen3ForCausalLM): Llama with an RMSNorm over each head of q and
 * of k (one weight of hd each, shared by the heads) between the projection
 * and the rotation, and head_dim free of C / NH; no biases. */
static const struct model_tensor qwen3_block[] = {
    LLAMA_QKV(MD_Q),
    {"qnormw", VEC, ROW(MD_HD, 1), MI_ONES, 12, 0, 0, "model.layers.%d.self_attn.q_norm.weight"},
    {"knormw", VEC, ROW(MD_HD, 1), MI_ONES, 13, 0, 0, "model.layers.%d.self_attn.k_norm.weight"},
    LLAMA_REST,
};
/* OLMo-2 (Olmo2ForCausalLM): no norm before the attention or the MLP,
 * one after each, inside the residual (post_attention_layernorm,
 * post_feedforward_layernorm: x + norm(attn(x)), x + norm(mlp(x))), and an
 * RMSNorm over the whole q (NH hd) and k (KV hd) projections before the
 * rotation; no biases. */
static const struct model_tensor olmo2_block[] = {
    {"qw", ROW(MD_Q, 1), ROW(MD_C, 1), MI_NORMAL, 1, 1, 1, "model.layers.%d.self_attn.q_proj.weight"},
    {"kw", ROW(MD_KV, 1), ROW(MD_C, 1), MI_NORMAL, 2, 1, 1, "model.layers.%d.self_attn.k_proj.weight"},
    {"vw", ROW(MD_KV, 1), ROW(MD_C, 1), MI_NORMAL, 3, 1, 1, "model.layers.%d.self_attn.v_proj.weight"},
    {"qnormw", VEC, ROW(MD_Q, 1), MI_ONES, 12, 0, 0, "model.layers.%d.self_attn.q_norm.weight"},
    {"knormw", VEC, ROW(MD_KV, 1), MI_ONES, 13, 0, 0, "model.layers.%d.self_attn.k_norm.weight"},
    {"ow", ROW(MD_C, 1), ROW(MD_Q, 1), MI_NORMAL_OUT, 4, 1, 1, "model.layers.%d.self_attn.o_proj.weight"},
    {"ln1w", VEC, ROW(MD_C, 1), MI_ONES, 0, 0, 0, "model.layers.%d.post_attention_layernorm.weight"},
    {"gatew", ROW(MD_FFN, 1), ROW(MD_C, 1), MI_NORMAL, 6, 1, 1, "model.layers.%d.mlp.gate_proj.weight"},
    {"upw", ROW(MD_FFN, 1), ROW(MD_C, 1), MI_NORMAL, 7, 1, 1, "model.layers.%d.mlp.up_proj.weight"},
    {"downw", ROW(MD_C, 1), ROW(MD_FFN, 1), MI_NORMAL_OUT, 8, 1, 1, "model.layers.%d.mlp.down_proj.weight"},
    {"ln2w", VEC, ROW(MD_C, 1), MI_ONES, 5, 0, 0, "model.layers.%d.post_feedforward_layernorm.weight"},
};
#undef LLAMA_QKV
#undef LLAMA_REST

/* Values kept per token and block, counted as Korthikanti et al. count
 * GPT's (34 C + 5 NH T bytes at 2 bytes a value, dropout masks included):
 * GPT-2's is that; Llama keeps x, its norm, q k v, the rotated q and k,
 * scores and probabilities, the attention output, the residual, its norm,
 * gate and up, silu(gate) and their product, and no dropout masks. */
static double gpt2_act_values(const struct model_config *m, double T)
{
    return 17.0 * m->d_model + 2.5 * m->heads * T;
}

static double llama_act_values(const struct model_config *m, double T)
{
    double q = model_q_width(m), kv = (double)m->kv_heads * model_head_dim(m);
    double qk_norm = model_families[m->arch].qk_norm != MODEL_QK_NONE ? q + kv : 0;   /* the norms' inputs */
    return 3.0 * m->d_model + 3.0 * q + 3.0 * kv + qk_norm + 4.0 * m->ffn_dim + 2.0 * m->heads * T;
}

#define N(a) (int)(sizeof a / sizeof a[0])
const struct model_family model_families[MODEL_ARCH_COUNT] = {
    /* name, blocks, qkv_bias, qk_norm, norm_after, hf_model_type, hf_class, hf_bos, hf_eos, hf_norm_eps,
     * tensors, their counts, ... */
    [MODEL_GPT2] = {"gpt2", MODEL_BLOCKS_GPT2, 0, MODEL_QK_NONE, 0, "gpt2", "GPT2LMHeadModel", 50256, 50256, 1e-5,
                    {gpt2_embed, gpt2_block, gpt2_head}, {N(gpt2_embed), N(gpt2_block), N(gpt2_head)},
                    gpt2_act_values, NULL},
    [MODEL_LLAMA] = {"llama", MODEL_BLOCKS_LLAMA, 0, MODEL_QK_NONE, 0, "llama", "LlamaForCausalLM", 1, 2, 1e-6,
                     {llama_embed, llama_block, llama_head}, {N(llama_embed), N(llama_block), N(llama_head)},
                     llama_act_values, llama_skipped},
    [MODEL_QWEN2] = {"qwen2", MODEL_BLOCKS_LLAMA, 1, MODEL_QK_NONE, 0, "qwen2", "Qwen2ForCausalLM", -1, -1, 1e-6,
                     {llama_embed, qwen2_block, llama_head}, {N(llama_embed), N(qwen2_block), N(llama_head)},
                     llama_act_values, NULL},
    [MODEL_QWEN3] = {"qwen3", MODEL_BLOCKS_LLAMA, 0, MODEL_QK_HEAD, 0, "qwen3", "Qwen3ForCausalLM", -1, -1, 1e-6,
                     {llama_embed, qwen3_block, llama_head}, {N(llama_embed), N(qwen3_block), N(llama_head)},
                     llama_act_values, NULL},
    [MODEL_OLMO2] = {"olmo2", MODEL_BLOCKS_LLAMA, 0, MODEL_QK_WIDTH, 1, "olmo2", "Olmo2ForCausalLM", -1, 50279, 1e-5,
                     {llama_embed, olmo2_block, llama_head}, {N(llama_embed), N(olmo2_block),
                     N(llama_head)}, llama_act_values, NULL},
};
#undef N

const struct model_family *model_family_by_name(const char *name)
{
    for (int a = 0; a < MODEL_ARCH_COUNT; a++)
        if (name && strcmp(model_families[a].name, name) == 0)
            return &model_families[a];
    return NULL;
}

void model_config_normalise(struct model_config *m)
{
    int rotary = (unsigned)m->arch < MODEL_ARCH_COUNT && model_families[m->arch].blocks == MODEL_BLOCKS_LLAMA;
    if (m->kv_heads == 0)
        m->kv_heads = m->heads;
    if (m->head_dim == 0 && m->heads > 0 && m->d_model % m->heads == 0)
        m->head_dim = m->d_model / m->heads;   /* (else it stays 0, which model_config_check names) */
    if (m->arch == MODEL_GPT2 && m->ffn_dim == 0 && m->d_model > 0 && m->d_model <= INT32_MAX / 4)
        m->ffn_dim = 4 * m->d_model;   /* (a d_model too large for it fails model_config_check) */
    if (m->norm_eps == 0)
        m->norm_eps = 1e-5;
    if (rotary && m->rope_theta == 0)
        m->rope_theta = 10000.0;
}

/* Fills field and msg; returns -1. */
static int bad(const char **field, const char *name, char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(const char **field, const char *name, char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    *field = name;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return -1;
}

static int check_rope(const struct model_config *m, const char **field, char *msg, size_t len)
{
    const struct model_rope_scaling *r = &m->rope_scaling;
    if (!(m->rope_theta > 1) || !isfinite(m->rope_theta))
        return bad(field, "rope_theta", msg, len, "rope_theta (%g) must be a finite number above 1", m->rope_theta);
    if (r->factor == 0 && r->low_freq_factor == 0 && r->high_freq_factor == 0 && r->original_context == 0)
        return 0;
    if (!(r->factor >= 1) || !isfinite(r->factor))
        return bad(field, "rope_scaling.factor", msg, len, "rope_scaling.factor (%g) must be at least 1",
                   r->factor);
    if (!(r->low_freq_factor > 0) || !isfinite(r->low_freq_factor))
        return bad(field, "rope_scaling.low_freq_factor", msg, len,
                   "rope_scaling.low_freq_factor (%g) must be above 0", r->low_freq_factor);
    if (!(r->high_freq_factor > r->low_freq_factor) || !isfinite(r->high_freq_factor))
        return bad(field, "rope_scaling.high_freq_factor", msg, len,
                   "rope_scaling.high_freq_factor (%g) must be above low_freq_factor (%g)", r->high_freq_factor,
                   r->low_freq_factor);
    if (r->original_context < 1)
        return bad(field, "rope_scaling.original_max_position_embeddings", msg, len,
                   "rope_scaling.original_max_position_embeddings must be at least 1");
    return 0;
}

int model_config_check(const struct model_config *m, const char **field, char *msg, size_t len)
{
    if ((unsigned)m->arch >= MODEL_ARCH_COUNT)
        return bad(field, "architecture", msg, len, "unknown architecture %d", (int)m->arch);
    if (m->vocab < 1 || m->context < 1 || m->d_model < 1 || m->heads < 1 || m->layers < 1 || m->kv_heads < 1 ||
        m->ffn_dim < 1)
        return bad(field, m->vocab < 1 ? "vocab_size" : m->context < 1 ? "context_length" : m->d_model < 1 ? "d_model"
                   : m->heads < 1 ? "heads" : m->layers < 1 ? "layers" : m->kv_heads < 1 ? "kv_heads" : "ffn_dim",
                   msg, len, "vocab_size, context_length, d_model, heads, kv_heads, ffn_dim and layers must be >= 1");
    if (m->head_dim == 0)
        return bad(field, "d_model", msg, len, "d_model %d is not a multiple of heads %d (it must be divisible "
                   "by heads)", m->d_model, m->heads);
    if (m->head_dim < 1 || m->head_dim > 65536)
        return bad(field, "head_dim", msg, len, "head_dim (%d) must be 1 to 65536", m->head_dim);
    if (m->sliding_window < 0)
        return bad(field, "sliding_window", msg, len, "sliding_window (%d) must be >= 0 (0: none)",
                   m->sliding_window);
    if (m->heads % m->kv_heads)
        return bad(field, "kv_heads", msg, len, "heads (%d) must be divisible by kv_heads (%d): each key/value "
                   "head serves a whole group of query heads", m->heads, m->kv_heads);
    /* Keeps every (rows x cols) of one tensor and every index within int. */
    if ((int64_t)m->vocab * m->d_model > INT32_MAX / 4 || (int64_t)m->context * m->d_model > INT32_MAX / 4 ||
        (int64_t)m->ffn_dim * m->d_model > INT32_MAX / 4 || m->d_model > 65536 ||
        (int64_t)m->heads * m->head_dim * m->d_model > INT32_MAX / 4)
        return bad(field, m->d_model > 65536 ? "d_model" : (int64_t)m->vocab * m->d_model > INT32_MAX / 4
                   ? "vocab_size" : (int64_t)m->ffn_dim * m->d_model > INT32_MAX / 4 ? "ffn_dim"
                   : (int64_t)m->context * m->d_model > INT32_MAX / 4 ? "context_length" : "head_dim",
                   msg, len, "vocab_size, context_length, ffn_dim or heads x head_dim times d_model is too large "
                   "(%d x %d, %d x %d, %d x %d, %d x %d x %d)", m->vocab, m->d_model, m->context, m->d_model,
                   m->ffn_dim, m->d_model, m->heads, m->head_dim, m->d_model);
    if (!(m->norm_eps > 0 && m->norm_eps < 1))
        return bad(field, "norm_eps", msg, len, "norm_eps (%g) must be above 0 and below 1", m->norm_eps);
    if (m->tied != 0 && m->tied != 1)
        return bad(field, "tie_embeddings", msg, len, "tie_embeddings must be true or false");
    if (model_families[m->arch].blocks == MODEL_BLOCKS_GPT2) {
        if (m->head_dim * m->heads != m->d_model)
            return bad(field, "head_dim", msg, len, "architecture \"gpt2\" has heads of d_model / heads channels: "
                       "head_dim must be %d", m->d_model / m->heads);
        if (m->sliding_window != 0)
            return bad(field, "sliding_window", msg, len, "architecture \"gpt2\" attends to every earlier "
                       "position: sliding_window is for the rotary families");
        if (m->kv_heads != m->heads)
            return bad(field, "kv_heads", msg, len, "architecture \"gpt2\" has multi-head attention: kv_heads "
                       "must equal heads (%d)", m->heads);
        if (m->ffn_dim != 4 * m->d_model)
            return bad(field, "ffn_dim", msg, len, "architecture \"gpt2\" has an MLP of 4 x d_model: ffn_dim must "
                       "be %d", 4 * m->d_model);
        if (m->norm_eps != 1e-5)
            return bad(field, "norm_eps", msg, len, "architecture \"gpt2\" has layer norm epsilon 1e-5");
        if (m->tied)
            return bad(field, "tie_embeddings", msg, len, "architecture \"gpt2\" trains an untied head here "
                       "(an imported tied head starts equal to wte)");
        if (m->rope_theta != 0 || m->rope_scaling.factor != 0 || m->rope_scaling.original_context != 0)
            return bad(field, "rope_theta", msg, len, "architecture \"gpt2\" has learned positions, no rotary "
                       "embeddings: rope_theta and rope_scaling are for \"llama\"");
        return 0;
    }
    if (m->head_dim % 2)
        return bad(field, m->head_dim * m->heads == m->d_model ? "heads" : "head_dim", msg, len, "rotary "
                   "embeddings rotate pairs of channels: the head size (%d) must be even", m->head_dim);
    return check_rope(m, field, msg, len);
}

int model_config_equal(const struct model_config *a, const struct model_config *b)
{
    const struct model_rope_scaling *ra = &a->rope_scaling, *rb = &b->rope_scaling;
    return a->arch == b->arch && a->vocab == b->vocab && a->context == b->context && a->d_model == b->d_model &&
           a->heads == b->heads && a->kv_heads == b->kv_heads && a->ffn_dim == b->ffn_dim &&
           a->head_dim == b->head_dim && a->sliding_window == b->sliding_window &&
           a->layers == b->layers && a->tied == b->tied && a->norm_eps == b->norm_eps &&
           a->rope_theta == b->rope_theta && ra->factor == rb->factor &&
           ra->low_freq_factor == rb->low_freq_factor && ra->high_freq_factor == rb->high_freq_factor &&
           ra->original_context == rb->original_context;
}

void model_config_text(const struct model_config *m, char *buf, size_t len)
{
    int w = snprintf(buf, len, "%s V=%d T=%d C=%d NH=%d L=%d", (unsigned)m->arch < MODEL_ARCH_COUNT
                     ? model_families[m->arch].name : "?", m->vocab, m->context, m->d_model, m->heads, m->layers);
    if (m->arch != MODEL_GPT2 && w > 0 && (size_t)w < len)
        snprintf(buf + w, len - (size_t)w, " kv=%d hd=%d F=%d %s theta=%g eps=%g%s window=%d", m->kv_heads,
                 m->head_dim, m->ffn_dim, m->tied ? "tied" : "untied", m->rope_theta, m->norm_eps,
                 m->rope_scaling.factor != 0 ? " llama3-scaled" : "", m->sliding_window);
}

size_t model_extent_size(const struct model_config *given, struct model_extent e)
{
    struct model_config norm = *given;   /* a caller's 0 is the family's default */
    const struct model_config *m = &norm;
    model_config_normalise(&norm);
    size_t hd = (size_t)m->head_dim, d = 1;
    switch (e.dim) {
    case MD_ONE: d = 1; break;
    case MD_C: d = (size_t)m->d_model; break;
    case MD_V: d = (size_t)m->vocab; break;
    case MD_CTX: d = (size_t)m->context; break;
    case MD_KV: d = (size_t)m->kv_heads * hd; break;
    case MD_FFN: d = (size_t)m->ffn_dim; break;
    case MD_Q: d = (size_t)m->heads * hd; break;
    case MD_HD: d = hd; break;
    }
    return d * (size_t)e.times;
}

uint64_t model_part_params(const struct model_config *m, enum model_part part)
{
    const struct model_family *f = &model_families[m->arch];
    uint64_t sum = 0;
    for (int i = 0; i < f->n_tensors[part]; i++) {
        const struct model_tensor *t = &f->tensors[part][i];
        sum += (uint64_t)model_extent_size(m, t->rows) * model_extent_size(m, t->cols);
    }
    return sum;
}

uint64_t model_tied_params(const struct model_config *m)
{
    return m->tied ? (uint64_t)m->vocab * (uint64_t)m->d_model : 0;
}

uint64_t model_stage_params(const struct model_config *m, int layer_start, int layer_end, int first, int last)
{
    uint64_t n = 0, p;
    if (__builtin_mul_overflow(model_part_params(m, MODEL_BLOCK), (uint64_t)(layer_end - layer_start), &n) ||
        (first && __builtin_add_overflow(n, model_part_params(m, MODEL_EMBED), &p)))
        return 0;
    n = first ? p : n;
    if (last && __builtin_add_overflow(n, model_part_params(m, MODEL_HEAD), &n))
        return 0;
    return n;
}

double model_part_matmul_params(const struct model_config *m, enum model_part part)
{
    const struct model_family *f = &model_families[m->arch];
    double sum = 0;
    for (int i = 0; i < f->n_tensors[part]; i++) {
        const struct model_tensor *t = &f->tensors[part][i];
        if (t->matmul)
            sum += (double)model_extent_size(m, t->rows) * (double)model_extent_size(m, t->cols);
    }
    return sum;
}

double model_flops_per_token(const struct model_config *m, int blocks, int last, double T)
{
    double matmul = blocks * model_part_matmul_params(m, MODEL_BLOCK)
                    + (last ? model_part_matmul_params(m, MODEL_HEAD) : 0);
    double seen = m->sliding_window > 0 && m->sliding_window < T ? m->sliding_window : T;   /* positions */
    return 6.0 * matmul + 6.0 * blocks * (double)model_q_width(m) * seen;
}

double model_block_act_values(const struct model_config *m, double T)
{
    struct model_config norm = *m;
    model_config_normalise(&norm);
    return model_families[m->arch].block_act_values(&norm, T);
}

int model_head_dim(const struct model_config *m)
{
    return m->head_dim ? m->head_dim : m->heads > 0 ? m->d_model / m->heads : 0;
}

int model_q_width(const struct model_config *m)
{
    return m->heads * model_head_dim(m);
}

int model_qk_segments(const struct model_config *m, int *sq, int *sk)
{
    enum model_qk_norm kind = model_families[m->arch].qk_norm;
    int hd = model_head_dim(m);
    *sq = kind == MODEL_QK_HEAD ? hd : kind == MODEL_QK_WIDTH ? model_q_width(m) : 0;
    *sk = kind == MODEL_QK_HEAD ? hd : kind == MODEL_QK_WIDTH ? m->kv_heads * hd : 0;
    return *sq && *sk ? model_q_width(m) / *sq + m->kv_heads * hd / *sk : 0;
}

size_t model_qkv_width(const struct model_config *m)
{
    return (size_t)model_q_width(m) + 2 * (size_t)m->kv_heads * (size_t)model_head_dim(m);
}

double model_rope_inv_freq(const struct model_config *m, int i)
{
    double hd = (double)model_head_dim(m);
    double inv = pow(m->rope_theta, -2.0 * i / hd);
    const struct model_rope_scaling *r = &m->rope_scaling;
    if (r->factor == 0)
        return inv;
    double wavelen = 2.0 * M_PI / inv;
    double low_wavelen = r->original_context / r->low_freq_factor;    /* longer than this: scaled */
    double high_wavelen = r->original_context / r->high_freq_factor;  /* shorter than this: kept */
    if (wavelen < high_wavelen)
        return inv;
    if (wavelen > low_wavelen)
        return inv / r->factor;
    double s = (r->original_context / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    return (1 - s) * inv / r->factor + s * inv;
}
