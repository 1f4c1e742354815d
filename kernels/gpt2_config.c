/* gpt2_config.c - the config.json beside a Hugging Face GPT-2's
 * model.safetensors (model_io.h): its sizes in, and out for an export.
 * safetensors files do not say the number of attention heads; this file
 * does (n_head). */
#include "json_scan.h"
#include "model_io_impl.h"

#include <limits.h>
#include <math.h>
#include <string.h>

enum { C_VOCAB, C_POSITIONS, C_EMBD, C_HEAD, C_LAYER, C_SIZES,
       C_TYPE = C_SIZES, C_ACTIVATION, C_INNER, C_EPS, C_CHECKED };
static const char *const members[C_CHECKED] = {"vocab_size", "n_positions", "n_embd", "n_head", "n_layer",
                                               "model_type", "activation_function", "n_inner",
                                               "layer_norm_epsilon"};

/* One checked member's value; *inner -1 for n_inner null. */
static int read_member(struct jscan *j, int k, uint64_t *size, int64_t *inner)
{
    char s[64];
    double eps;
    int lit;
    switch (k) {
    case C_TYPE:
    case C_ACTIVATION:
        if (js_peek(j) != '"')
            return js_fail(j, "%s is not a string", members[k]);
        if (js_string(j, s, sizeof s, NULL))
            return -1;
        if (k == C_TYPE && strcmp(s, "gpt2") != 0)
            return js_fail(j, "model_type is '%s'; this reads GPT-2 ('gpt2')", s);
        if (k == C_ACTIVATION && strcmp(s, "gelu_new") != 0 && strcmp(s, "gelu_pytorch_tanh") != 0)
            return js_fail(j, "activation_function is '%s'; shoal's GELU is the tanh approximation "
                           "('gelu_new')", s);
        return 0;
    case C_INNER:
        if (js_peek(j) == 'n') {
            if (js_literal(j, &lit))
                return -1;
            if (lit != -1)
                return js_fail(j, "n_inner is neither null nor an integer");
            *inner = -1;
            return 0;
        }
        if (js_uint64(j, size))
            return -1;
        *inner = *size > INT_MAX ? INT64_MAX : (int64_t)*size;
        return 0;
    case C_EPS:
        if (js_number(j, &eps))
            return -1;
        if (fabs(eps - 1e-5) > 1e-12)
            return js_fail(j, "layer_norm_epsilon is %g; shoal's LayerNorm uses 1e-5", eps);
        return 0;
    default:
        if (js_uint64(j, size))
            return -1;
        if (*size < 1 || *size > INT_MAX)
            return js_fail(j, "%s is %llu, not in [1, %d]", members[k], (unsigned long long)*size, INT_MAX);
        return 0;
    }
}

int kern_gpt2_config_read(const char *text, size_t len, struct model_config *model, struct kern_err *err)
{
    struct jscan j;
    char key[128];
    uint64_t size[C_SIZES] = {0}, scratch;
    int64_t inner = -1;
    int first = 1, r, seen = 0;
    size_t klen;

    js_init(&j, text, len, "config.json", err);
    if (js_object(&j))
        return -1;
    while ((r = js_member(&j, &first, key, sizeof key, &klen)) == 1) {
        int k = 0;
        while (k < C_CHECKED && strcmp(key, members[k]) != 0)
            k++;
        if (k == C_CHECKED) {
            if (js_skip(&j))
                return -1;
            continue;
        }
        if (seen & (1 << k))
            return js_fail(&j, "a second %s", key);
        seen |= 1 << k;
        if (read_member(&j, k, k < C_SIZES ? &size[k] : &scratch, &inner))
            return -1;
    }
    if (r < 0 || js_finish(&j))
        return -1;
    for (int k = 0; k < C_SIZES; k++)
        if (!(seen & (1 << k)))
            return kern_fail(err, "config.json: %s is missing", members[k]);
    if (inner != -1 && inner != 4 * (int64_t)size[C_EMBD])
        return kern_fail(err, "config.json: n_inner is %lld; shoal's MLP is 4 n_embd = %lld wide",
                         (long long)inner, 4 * (long long)size[C_EMBD]);
    struct model_config m = {.vocab = (int)size[C_VOCAB], .context = (int)size[C_POSITIONS],
                           .d_model = (int)size[C_EMBD], .heads = (int)size[C_HEAD], .layers = (int)size[C_LAYER]};
    if (kern_model_check(&m, err))
        return io_fail_in(err, "config.json");
    *model = m;
    return 0;
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
