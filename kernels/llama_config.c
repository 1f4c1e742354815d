/* llama_config.c - the config.json beside a Hugging Face LlamaForCausalLM's
 * weights (model_io.h): every field shoal's model has, in and out. */
#include "json_scan.h"
#include "model_io_impl.h"

#include <limits.h>
#include <math.h>
#include <string.h>

enum {
    K_VOCAB, K_POSITIONS, K_HIDDEN, K_INTERMEDIATE, K_HEADS, K_LAYERS, K_REQUIRED,
    K_KV_HEADS = K_REQUIRED, K_HEAD_DIM, K_EPS, K_THETA, K_SCALING, K_TIE, K_TYPE, K_ACT, K_ATT_BIAS, K_MLP_BIAS,
    K_COUNT
};
static const char *const members[K_COUNT] = {
    "vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size", "num_attention_heads",
    "num_hidden_layers", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling",
    "tie_word_embeddings", "model_type", "hidden_act", "attention_bias", "mlp_bias",
};

/* A positive integer within int. */
static int read_size(struct jscan *j, const char *what, int *out)
{
    uint64_t v;
    if (js_uint64(j, &v))
        return -1;
    if (v < 1 || v > INT_MAX)
        return js_fail(j, "%s is %llu, not in [1, %d]", what, (unsigned long long)v, INT_MAX);
    *out = (int)v;
    return 0;
}

/* rope_scaling: null, or {"rope_type" (or "type"): "llama3", "factor",
 * "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}. */
static int read_scaling(struct jscan *j, struct model_rope_scaling *s)
{
    char key[64], type[32] = "";
    int first = 1, r, lit, seen = 0;
    size_t len;
    if (js_peek(j) == 'n')
        return js_literal(j, &lit) || lit != -1 ? js_fail(j, "rope_scaling is neither null nor an object") : 0;
    if (js_object(j))
        return -1;
    while ((r = js_member(j, &first, key, sizeof key, &len)) == 1) {
        double *num = strcmp(key, "factor") == 0 ? &s->factor : strcmp(key, "low_freq_factor") == 0
                      ? &s->low_freq_factor : strcmp(key, "high_freq_factor") == 0 ? &s->high_freq_factor : NULL;
        if (num) {
            if (js_number(j, num))
                return -1;
            seen |= num == &s->factor ? 1 : num == &s->low_freq_factor ? 2 : 4;
        } else if (strcmp(key, "original_max_position_embeddings") == 0) {
            if (read_size(j, key, &s->original_context))
                return -1;
            seen |= 8;
        } else if (strcmp(key, "rope_type") == 0 || strcmp(key, "type") == 0) {
            if (js_peek(j) != '"' || js_string(j, type, sizeof type, &len))
                return js_peek(j) != '"' ? js_fail(j, "rope_scaling.%s is not a string", key) : -1;
        } else if (js_skip(j)) {
            return -1;
        }
    }
    if (r < 0)
        return -1;
    if (strcmp(type, "llama3") != 0)
        return js_fail(j, "rope_scaling of type '%s'; this reads Llama 3's (\"llama3\")", type);
    if (seen != 15)
        return js_fail(j, "rope_scaling lacks one of factor, low_freq_factor, high_freq_factor and "
                       "original_max_position_embeddings");
    return 0;
}

/* A string member that must be one of two values (the second may be NULL). */
static int read_expected(struct jscan *j, const char *what, const char *a, const char *b)
{
    char s[64];
    size_t len;
    if (js_peek(j) != '"')
        return js_fail(j, "%s is not a string", what);
    if (js_string(j, s, sizeof s, &len))
        return -1;
    if (strcmp(s, a) != 0 && (!b || strcmp(s, b) != 0))
        return js_fail(j, "%s is '%s'; a Llama here has %s", what, s, a);
    return 0;
}

int kern_llama_config_read(const char *text, size_t len, struct model_config *model, struct kern_err *err)
{
    struct jscan j;
    char key[128];
    int first = 1, r, lit, head_dim = 0;
    unsigned seen = 0;
    size_t klen;
    struct model_config m = {.arch = MODEL_LLAMA, .norm_eps = 1e-6, .rope_theta = 10000};

    js_init(&j, text, len, "config.json", err);
    if (js_object(&j))
        return -1;
    while ((r = js_member(&j, &first, key, sizeof key, &klen)) == 1) {
        int k = 0;
        while (k < K_COUNT && strcmp(key, members[k]) != 0)
            k++;
        if (k == K_COUNT) {
            if (js_skip(&j))
                return -1;
            continue;
        }
        if (seen & (1u << k))
            return js_fail(&j, "a second %s", key);
        seen |= 1u << k;
        int *size[] = {&m.vocab, &m.context, &m.d_model, &m.ffn_dim, &m.heads, &m.layers, &m.kv_heads, &head_dim};
        int rc = 0;
        switch (k) {
        case K_EPS: rc = js_number(&j, &m.norm_eps); break;
        case K_THETA: rc = js_number(&j, &m.rope_theta); break;
        case K_SCALING: rc = read_scaling(&j, &m.rope_scaling); break;
        case K_TYPE: rc = read_expected(&j, key, "llama", NULL); break;
        case K_ACT: rc = read_expected(&j, key, "silu", NULL); break;
        case K_TIE:
        case K_ATT_BIAS:
        case K_MLP_BIAS:
            if (js_literal(&j, &lit))
                return -1;
            if (lit < 0)
                return js_fail(&j, "%s is not true or false", key);
            if (k == K_TIE)
                m.tied = lit;
            else if (lit)
                return js_fail(&j, "%s is true; a Llama here has no biases (Qwen2's q/k/v biases are not read)",
                               key);
            break;
        default: rc = read_size(&j, key, size[k]); break;
        }
        if (rc)
            return -1;
    }
    if (r < 0 || js_finish(&j))
        return -1;
    if (!(seen & (1u << K_TYPE)))
        return kern_fail(err, "config.json: model_type is missing; this reads Llama's (\"llama\")");
    for (int k = 0; k < K_REQUIRED; k++)
        if (!(seen & (1u << k)))
            return kern_fail(err, "config.json: %s is missing", members[k]);
    if (head_dim && (m.d_model % m.heads || head_dim != m.d_model / m.heads))
        return kern_fail(err, "config.json: head_dim %d is not hidden_size / num_attention_heads (%d / %d)",
                         head_dim, m.d_model, m.heads);
    model_config_normalise(&m);
    if (kern_model_check(&m, err))
        return io_fail_in(err, "config.json");
    *model = m;
    return 0;
}

int kern_llama_config_write(FILE *f, const struct model_config *m, struct kern_err *err)
{
    struct model_config n = *m;
    model_config_normalise(&n);
    if (n.arch != MODEL_LLAMA)
        return kern_fail(err, "config.json export: the model is architecture \"%s\", not llama",
                         model_families[n.arch < MODEL_ARCH_COUNT ? n.arch : MODEL_GPT2].name);
    if (kern_model_check(&n, err))
        return io_fail_in(err, "config.json export");
    const struct model_rope_scaling *s = &n.rope_scaling;
    char scaling[256] = "null";
    if (s->factor != 0)
        snprintf(scaling, sizeof scaling, "{\n    \"factor\": %.17g,\n    \"high_freq_factor\": %.17g,\n"
                 "    \"low_freq_factor\": %.17g,\n    \"original_max_position_embeddings\": %d,\n"
                 "    \"rope_type\": \"llama3\"\n  }", s->factor, s->high_freq_factor, s->low_freq_factor,
                 s->original_context);
    /* the members in the order transformers writes them: sorted */
    if (fprintf(f,
                "{\n"
                "  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n"
                "  \"attention_bias\": false,\n"
                "  \"attention_dropout\": 0.0,\n"
                "  \"head_dim\": %d,\n"
                "  \"hidden_act\": \"silu\",\n"
                "  \"hidden_size\": %d,\n"
                "  \"initializer_range\": 0.02,\n"
                "  \"intermediate_size\": %d,\n"
                "  \"max_position_embeddings\": %d,\n"
                "  \"mlp_bias\": false,\n"
                "  \"model_type\": \"llama\",\n"
                "  \"num_attention_heads\": %d,\n"
                "  \"num_hidden_layers\": %d,\n"
                "  \"num_key_value_heads\": %d,\n"
                "  \"pretraining_tp\": 1,\n"
                "  \"rms_norm_eps\": %.17g,\n"
                "  \"rope_scaling\": %s,\n"
                "  \"rope_theta\": %.17g,\n"
                "  \"tie_word_embeddings\": %s,\n"
                "  \"torch_dtype\": \"float32\",\n"
                "  \"use_cache\": true,\n"
                "  \"vocab_size\": %d\n"
                "}\n",
                n.d_model / n.heads, n.d_model, n.ffn_dim, n.context, n.heads, n.layers, n.kv_heads, n.norm_eps,
                scaling, n.rope_theta, n.tied ? "true" : "false", n.vocab) < 0 || fflush(f) != 0)
        return kern_fail(err, "config.json export: write failed");
    return 0;
}
