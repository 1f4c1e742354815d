/* llama_config.c - the config.json beside the weights of a Hugging Face
 * model of the llama kind (model_io.h): LlamaForCausalLM's, and those of
 * the families whose rows of common/model.c share its blocks (Qwen2, Qwen3,
 * OLMo-2), told apart by model_type; every field shoal's model has, in and
 * out. */
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
        return kern_fail(err, WHAT ": %s is '%s'; a model of the llama kind here has %s", name, s, want);
    return 0;
}

/* The family whose row names this model_type (of the llama kind). */
static int read_family(const json_t *root, enum model_arch *arch, struct kern_err *err)
{
    const json_t *v = json_object_get(root, "model_type");
    const char *type;
    if (!v)
        return kern_fail(err, WHAT ": model_type is missing; this reads Llama's (\"llama\"), \"qwen2\", "
                         "\"qwen3\" and \"olmo2\"");
    if (hj_string(v, WHAT, "model_type", &type, err))
        return -1;
    for (int a = 0; a < MODEL_ARCH_COUNT; a++)
        if (model_families[a].blocks == MODEL_BLOCKS_LLAMA && strcmp(model_families[a].hf_model_type, type) == 0) {
            *arch = (enum model_arch)a;
            return 0;
        }
    return kern_fail(err, WHAT ": model_type is '%s'; this reads \"llama\", \"qwen2\", \"qwen3\" and \"olmo2\"",
                     type);
}

/* The members that say which model this is: model_type one of the rows',
 * and the others absent or what its row is (silu; no biases but the ones
 * the row has, which come with its model_type: Qwen2's). */
static int check_kind(const json_t *root, enum model_arch *arch, struct kern_err *err)
{
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    const json_t *v;
    int on;
    if (read_family(root, arch, err) || read_expected(root, "hidden_act", "silu", err))
        return -1;
    for (int k = 0; k < 2; k++) {
        if (!(v = json_object_get(root, biases[k])))
            continue;
        if (hj_bool(v, WHAT, biases[k], &on, err))
            return -1;
        if (on)
            return kern_fail(err, WHAT ": %s is true; shoal's models have no biases on o or the MLP (the "
                             "q, k, v biases of Qwen2 come with its model_type)", biases[k]);
    }
    return 0;
}

/* Qwen's sliding window: use_sliding_window true slides layers
 * max_window_layers and on over sliding_window positions; shoal slides all
 * of them or none. */
static int read_window(const json_t *root, struct model_config *m, struct kern_err *err)
{
    const json_t *v = json_object_get(root, "use_sliding_window");
    int on = 0;
    int64_t from = 0;
    if (v && hj_bool(v, WHAT, "use_sliding_window", &on, err))
        return -1;
    if (!on)
        return 0;
    if (!(v = json_object_get(root, "max_window_layers")) || hj_int(v, WHAT, "max_window_layers", 0, INT32_MAX,
                                                                     &from, err))
        return v ? -1 : kern_fail(err, WHAT ": use_sliding_window is true without max_window_layers");
    if (from >= m->layers)
        return 0;   /* no layer slides */
    if (from > 0)
        return kern_fail(err, WHAT ": a sliding window on layers %lld and on only (max_window_layers); shoal "
                         "slides every layer or none", (long long)from);
    if (!(v = json_object_get(root, "sliding_window")) || hj_size(v, WHAT, "sliding_window", &m->sliding_window, err))
        return v ? -1 : kern_fail(err, WHAT ": use_sliding_window is true without sliding_window");
    return 0;
}

int kern_llama_config_read(const char *text, size_t len, struct model_config *model, struct kern_err *err)
{
    struct model_config m = {.arch = MODEL_LLAMA, .rope_theta = 10000};
    enum model_arch arch = MODEL_LLAMA;
    int *size[N_SIZES] = {&m.vocab, &m.context, &m.d_model, &m.ffn_dim, &m.heads, &m.layers};
    const json_t *v;
    int rc = -1;
    json_t *root = hj_parse_object(text, len, WHAT, err);
    if (!root)
        return -1;
    if (check_kind(root, &arch, err) || read_scaling(json_object_get(root, "rope_scaling"), &m.rope_scaling, err))
        goto out;
    m.arch = arch;
    m.norm_eps = model_families[arch].hf_norm_eps;   /* what transformers takes when the file says none */
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
        ((v = json_object_get(root, "head_dim")) && !json_is_null(v) &&
         hj_size(v, WHAT, "head_dim", &m.head_dim, err)) ||
        read_window(root, &m, err))
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
    if (n.arch >= MODEL_ARCH_COUNT || model_families[n.arch].blocks != MODEL_BLOCKS_LLAMA)
        return kern_fail(err, "config.json export: the model is architecture \"%s\", not of the llama kind",
                         model_families[n.arch < MODEL_ARCH_COUNT ? n.arch : MODEL_GPT2].name);
    if (n.sliding_window)
        return kern_fail(err, "config.json export: a sliding window (%d) is not written (transformers' Llama "
                         "and OLMo-2 have none, Qwen's slides per layer)", n.sliding_window);
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
                "  \"architectures\": [\n    \"%s\"\n  ],\n"
                "  \"attention_bias\": false,\n"
                "  \"attention_dropout\": 0.0,\n"
                "  \"head_dim\": %d,\n"
                "  \"hidden_act\": \"silu\",\n"
                "  \"hidden_size\": %d,\n"
                "  \"initializer_range\": 0.02,\n"
                "  \"intermediate_size\": %d,\n"
                "  \"max_position_embeddings\": %d,\n"
                "  \"mlp_bias\": false,\n"
                "  \"model_type\": \"%s\",\n"
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
                model_families[n.arch].hf_class, n.head_dim, n.d_model, n.ffn_dim, n.context,
                model_families[n.arch].hf_model_type, n.heads, n.layers, n.kv_heads, n.norm_eps,
                scaling, n.rope_theta, n.tied ? "true" : "false", n.vocab) < 0 || fflush(f) != 0)
        return kern_fail(err, "config.json export: write failed");
    return 0;
}
