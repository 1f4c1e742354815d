/* gpt2_config.c - the config.json beside a Hugging Face GPT-2's
 * model.safetensors (model_io.h): its sizes in, and out for an export.
 * safetensors files do not say the number of attention heads; this file
 * does (n_head). */
#include "hf_json.h"
#include "model_io_impl.h"

#include <math.h>
#include <string.h>

static const char *const sizes[] = {"vocab_size", "n_positions", "n_embd", "n_head", "n_layer"};
#define N_SIZES (int)(sizeof sizes / sizeof sizes[0])

/* The members that say which model this is: each absent, or what shoal's
 * GPT-2 is. */
static int check_kind(const json_t *root, struct kern_err *err)
{
    const char *s;
    const json_t *v;
    double eps;
    int64_t inner;
    if ((v = json_object_get(root, "model_type"))) {
        if (hj_string(v, "config.json", "model_type", &s, err))
            return -1;
        if (strcmp(s, "gpt2") != 0)
            return kern_fail(err, "config.json: model_type is '%s'; this reads GPT-2 ('gpt2')", s);
    }
    if ((v = json_object_get(root, "activation_function"))) {
        if (hj_string(v, "config.json", "activation_function", &s, err))
            return -1;
        if (strcmp(s, "gelu_new") != 0 && strcmp(s, "gelu_pytorch_tanh") != 0)
            return kern_fail(err, "config.json: activation_function is '%s'; shoal's GELU is the tanh "
                             "approximation ('gelu_new')", s);
    }
    if ((v = json_object_get(root, "layer_norm_epsilon"))) {
        if (hj_number(v, "config.json", "layer_norm_epsilon", &eps, err))
            return -1;
        if (fabs(eps - 1e-5) > 1e-12)
            return kern_fail(err, "config.json: layer_norm_epsilon is %g; shoal's LayerNorm uses 1e-5", eps);
    }
    if ((v = json_object_get(root, "n_inner")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return kern_fail(err, "config.json: n_inner is neither null nor an integer");
        inner = json_integer_value(v);
        int64_t embd = json_integer_value(json_object_get(root, "n_embd"));
        if (inner != 4 * embd)
            return kern_fail(err, "config.json: n_inner is %lld; shoal's MLP is 4 n_embd = %lld wide",
                             (long long)inner, 4 * (long long)embd);
    }
    return 0;
}

int kern_gpt2_config_read(const char *text, size_t len, struct model_config *model, struct kern_err *err)
{
    int size[N_SIZES];
    int rc = -1;
    json_t *root = hj_parse_object(text, len, "config.json", err);
    if (!root)
        return -1;
    for (int k = 0; k < N_SIZES; k++) {
        const json_t *v = json_object_get(root, sizes[k]);
        if (!v) {
            kern_fail(err, "config.json: %s is missing", sizes[k]);
            goto out;
        }
        if (hj_size(v, "config.json", sizes[k], &size[k], err))
            goto out;
    }
    if (check_kind(root, err))
        goto out;
    struct model_config m = {.vocab = size[0], .context = size[1], .d_model = size[2], .heads = size[3],
                             .layers = size[4]};
    if (kern_model_check(&m, err)) {
        io_fail_in(err, "config.json");
        goto out;
    }
    *model = m;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int kern_gpt2_config_write(FILE *f, const struct model_config *m, const float *params, struct kern_err *err)
{
    struct kern_stage w;
    if (io_check_gpt2(m, "config.json export", err))
        return -1;
    if (io_layout(m, 0, m->layers, &w, err))
        return io_fail_in(err, "config.json export");
    io_layout_free(&w);
    /* the members in the order transformers writes them: sorted */
    if (fprintf(f,
                "{\n"
                "  \"activation_function\": \"gelu_new\",\n"
                "  \"architectures\": [\n"
                "    \"GPT2LMHeadModel\"\n"
                "  ],\n"
                "  \"layer_norm_epsilon\": 1e-05,\n"
                "  \"model_type\": \"gpt2\",\n"
                "  \"n_ctx\": %d,\n"
                "  \"n_embd\": %d,\n"
                "  \"n_head\": %d,\n"
                "  \"n_layer\": %d,\n"
                "  \"n_positions\": %d,\n"
                "  \"tie_word_embeddings\": %s,\n"
                "  \"torch_dtype\": \"float32\",\n"
                "  \"vocab_size\": %d\n"
                "}\n",
                m->context, m->d_model, m->heads, m->layers, m->context,
                kern_model_head_tied(m, params) ? "true" : "false", m->vocab) < 0 ||
        fflush(f) != 0)
        return kern_fail(err, "config.json export: write failed");
    return 0;
}
