/* llama_config.c - the config.json beside a Hugging Face LlamaForCausalLM's
 * weights (model_io.h): every field shoal's model has, in and out. */
#include "hf_json.h"
#include "model_io_impl.h"

#include <string.h>

#define WHAT "config.json"

/* The sizes, required, and where each goes. */
static const char *const sizes[] = {"vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size",
                                    "num_attention_heads", "num_hidden_layers"};
#define N_SIZES (int)(sizeof sizes / sizeof sizes[0])

/* rope_scaling: null, or {"rope_type" (or "type"): "llama3", "factor",
 * "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}. */
static int read_scaling(const json_t *v, struct model_rope_scaling *s, struct kern_err *err)
{
    const char *type = "";
    const json_t *t;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return kern_fail(err, WHAT ": rope_scaling is neither null nor an object");
    if (((t = json_object_get(v, "rope_type")) || (t = json_object_get(v, "type"))) &&
        hj_string(t, WHAT, "rope_scaling.rope_type", &type, err))
        return -1;
    if (strcmp(type, "llama3") != 0)
        return kern_fail(err, WHAT ": rope_scaling of type '%s'; this reads Llama 3's (\"llama3\")", type);
    const json_t *f = json_object_get(v, "factor"), *lo = json_object_get(v, "low_freq_factor"),
                 *hi = json_object_get(v, "high_freq_factor"),
                 *orig = json_object_get(v, "original_max_position_embeddings");
    if (!f || !lo || !hi || !orig)
        return kern_fail(err, WHAT ": rope_scaling lacks one of factor, low_freq_factor, high_freq_factor and "
                         "original_max_position_embeddings");
    if (hj_number(f, WHAT, "rope_scaling.factor", &s->factor, err) ||
        hj_number(lo, WHAT, "rope_scaling.low_freq_factor", &s->low_freq_factor, err) ||
        hj_number(hi, WHAT, "rope_scaling.high_freq_factor", &s->high_freq_factor, err) ||
        hj_size(orig, WHAT, "original_max_position_embeddings", &s->original_context, err))
        return -1;
    return 0;
}

/* A string member that, when present, must be `want`. */
static int read_expected(const json_t *root, const char *name, const char *want, struct kern_err *err)
{
    const json_t *v = json_object_get(root, name);
    const char *s;
    if (!v)
        return 0;
    if (hj_string(v, WHAT, name, &s, err))
        return -1;
    if (strcmp(s, want) != 0)
        return kern_fail(err, WHAT ": %s is '%s'; a Llama here has %s", name, s, want);
    return 0;
}

/* The members that say which model this is: model_type "llama", and the
 * others absent or what shoal's Llama is (silu, no biases). */
static int check_kind(const json_t *root, struct kern_err *err)
{
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    const json_t *v;
    int on;
    if (!json_object_get(root, "model_type"))
        return kern_fail(err, WHAT ": model_type is missing; this reads Llama's (\"llama\")");
    if (read_expected(root, "model_type", "llama", err) || read_expected(root, "hidden_act", "silu", err))
        return -1;
    for (int k = 0; k < 2; k++) {
        if (!(v = json_object_get(root, biases[k])))
            continue;
        if (hj_bool(v, WHAT, biases[k], &on, err))
            return -1;
        if (on)
            return kern_fail(err, WHAT ": %s is true; a Llama here has no biases (Qwen2's q/k/v biases are "
                             "not read)", biases[k]);
    }
    return 0;
}

/* head_dim, when given: hidden_size / num_attention_heads. */
static int check_head_dim(const json_t *root, const struct model_config *m, struct kern_err *err)
{
    const json_t *v = json_object_get(root, "head_dim");
    int head_dim;
    if (!v || json_is_null(v))
        return 0;
    if (hj_size(v, WHAT, "head_dim", &head_dim, err))
        return -1;
    if (m->d_model % m->heads || head_dim != m->d_model / m->heads)
        return kern_fail(err, WHAT ": head_dim %d is not hidden_size / num_attention_heads (%d / %d)", head_dim,
                         m->d_model, m->heads);
    return 0;
}

int kern_llama_config_read(const char *text, size_t len, struct model_config *model, struct kern_err *err)
{
    struct model_config m = {.arch = MODEL_LLAMA, .norm_eps = 1e-6, .rope_theta = 10000};
    int *size[N_SIZES] = {&m.vocab, &m.context, &m.d_model, &m.ffn_dim, &m.heads, &m.layers};
    const json_t *v;
    int rc = -1;
    json_t *root = hj_parse_object(text, len, WHAT, err);
    if (!root)
        return -1;
    if (check_kind(root, err) || read_scaling(json_object_get(root, "rope_scaling"), &m.rope_scaling, err))
        goto out;
    for (int k = 0; k < N_SIZES; k++) {
        if (!(v = json_object_get(root, sizes[k]))) {
            kern_fail(err, WHAT ": %s is missing", sizes[k]);
            goto out;
        }
        if (hj_size(v, WHAT, sizes[k], size[k], err))
            goto out;
    }
    if (((v = json_object_get(root, "num_key_value_heads")) && !json_is_null(v) &&
         hj_size(v, WHAT, "num_key_value_heads", &m.kv_heads, err)) ||
        ((v = json_object_get(root, "rms_norm_eps")) && hj_number(v, WHAT, "rms_norm_eps", &m.norm_eps, err)) ||
        ((v = json_object_get(root, "rope_theta")) && hj_number(v, WHAT, "rope_theta", &m.rope_theta, err)) ||
        ((v = json_object_get(root, "tie_word_embeddings")) &&
         hj_bool(v, WHAT, "tie_word_embeddings", &m.tied, err)) ||
        check_head_dim(root, &m, err))
        goto out;
    model_config_normalise(&m);
    if (kern_model_check(&m, err)) {
        io_fail_in(err, WHAT);
        goto out;
    }
    *model = m;
    rc = 0;
out:
    json_decref(root);
    return rc;
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
