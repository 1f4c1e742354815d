/* model_json.c - a job's model object to and from struct model_config
 * (model_json.h). */
#include "model_json.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "jsonv.h"

/* The object as it comes, before the family's defaults. */
struct model_raw {
    char architecture[16];
    int64_t vocab_size, context_length, d_model, heads, layers, kv_heads, ffn_dim, head_dim, sliding_window;
    double rope_theta, norm_eps;
    int tie_embeddings;
    char rope_type[16];
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_context;
};

static const char *const architectures[] = {"gpt2", "llama", "qwen2", "qwen3", "olmo2", NULL};   /* model_families' names */
static const char *const rope_types[] = {"llama3", NULL};

#define F(f) offsetof(struct model_raw, f)
#define SZ(f) sizeof(((struct model_raw *)0)->f)
/* name, type, required, nullable, min, max, offset, size, choices, fields */
static const struct jv_field rope_scaling_fields[] = {
    {"rope_type", JV_STR, 0, 0, 1, 15, F(rope_type), SZ(rope_type), rope_types, NULL},
    {"factor", JV_NUM, 1, 0, 1, 1e6, F(factor), 0, NULL, NULL},
    {"low_freq_factor", JV_NUM, 1, 0, 1e-9, 1e6, F(low_freq_factor), 0, NULL, NULL},
    {"high_freq_factor", JV_NUM, 1, 0, 1e-9, 1e6, F(high_freq_factor), 0, NULL, NULL},
    {"original_max_position_embeddings", JV_INT, 1, 0, 1, 16777216, F(original_context), 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL},
};
static const struct jv_field model_fields[] = {
    {"architecture", JV_STR, 0, 0, 1, 15, F(architecture), SZ(architecture), architectures, NULL},
    {"vocab_size", JV_INT, 1, 0, 2, 1000000, F(vocab_size), 0, NULL, NULL},
    {"context_length", JV_INT, 1, 0, 1, 131072, F(context_length), 0, NULL, NULL},
    {"d_model", JV_INT, 1, 0, 1, 65536, F(d_model), 0, NULL, NULL},
    {"heads", JV_INT, 1, 0, 1, 1024, F(heads), 0, NULL, NULL},
    {"layers", JV_INT, 1, 0, 1, 1024, F(layers), 0, NULL, NULL},
    {"kv_heads", JV_INT, 0, 0, 1, 1024, F(kv_heads), 0, NULL, NULL},
    {"ffn_dim", JV_INT, 0, 0, 1, 1048576, F(ffn_dim), 0, NULL, NULL},
    {"head_dim", JV_INT, 0, 0, 1, 1024, F(head_dim), 0, NULL, NULL},
    {"sliding_window", JV_INT, 0, 0, 0, 16777216, F(sliding_window), 0, NULL, NULL},
    {"rope_theta", JV_NUM, 0, 0, 1.000001, 1e12, F(rope_theta), 0, NULL, NULL},
    {"rope_scaling", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, rope_scaling_fields},
    {"norm_eps", JV_NUM, 0, 0, 1e-12, 0.5, F(norm_eps), 0, NULL, NULL},
    {"tie_embeddings", JV_BOOL, 0, 0, 0, 0, F(tie_embeddings), 0, NULL, NULL},
    {NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL},
};
#undef F
#undef SZ

/* The members only the rotary families have: given for gpt2, they are
 * refused. */
static const char *const llama_only[] = {"rope_theta", "rope_scaling", "tie_embeddings", "ffn_dim", "kv_heads",
                                         "norm_eps", "head_dim", "sliding_window", NULL};

int model_json_parse(const json_t *obj, const char *path, struct model_config *m, struct shoal_err *err)
{
    struct model_raw r = {.architecture = "gpt2"};
    char sub[160];
    if (jv_object(obj, model_fields, path, &r, err) != 0)
        return -1;
    const struct model_family *fam = model_family_by_name(r.architecture);
    enum model_arch arch = (enum model_arch)(fam - model_families);
    if (fam->blocks == MODEL_BLOCKS_GPT2)
        for (const char *const *k = llama_only; *k; k++) {
            const json_t *v = json_object_get(obj, *k);
            if (v && !json_is_null(v)) {
                snprintf(sub, sizeof sub, "%s.%s", path, *k);
                return err_set(err, 400, "invalid_field", sub, "%s is for architecture \"llama\"; \"gpt2\" has "
                               "multi-head attention, learned positions, a 4 x d_model MLP and an untied head",
                               sub);
            }
        }
    if (fam->blocks == MODEL_BLOCKS_LLAMA && !json_object_get(obj, "ffn_dim")) {
        snprintf(sub, sizeof sub, "%s.ffn_dim", path);
        return err_set(err, 400, "missing_field", sub, "%s (the SwiGLU hidden width) is required for "
                       "architecture \"%s\"", sub, fam->name);
    }
    struct model_config c;
    memset(&c, 0, sizeof c);   /* padding too: specs holding it are compared byte for byte */
    c.vocab = (int)r.vocab_size, c.context = (int)r.context_length, c.d_model = (int)r.d_model;
    c.heads = (int)r.heads, c.layers = (int)r.layers, c.arch = arch, c.kv_heads = (int)r.kv_heads;
    c.ffn_dim = (int)r.ffn_dim, c.tied = r.tie_embeddings, c.norm_eps = r.norm_eps, c.rope_theta = r.rope_theta;
    c.head_dim = (int)r.head_dim, c.sliding_window = (int)r.sliding_window;
    c.rope_scaling.factor = r.factor, c.rope_scaling.low_freq_factor = r.low_freq_factor;
    c.rope_scaling.high_freq_factor = r.high_freq_factor, c.rope_scaling.original_context = (int)r.original_context;
    model_config_normalise(&c);
    const char *field = "";
    char msg[300];
    if (model_config_check(&c, &field, msg, sizeof msg) != 0) {
        snprintf(sub, sizeof sub, "%s.%s", path, field);
        return err_set(err, 422, "invalid_field", sub, "%s.%s", path, msg);
    }
    memcpy(m, &c, sizeof c);
    return 0;
}

json_t *model_json(const struct model_config *m)
{
    json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "architecture", model_families[m->arch].name,
                          "vocab_size", m->vocab, "context_length", m->context, "d_model", m->d_model, "heads",
                          m->heads, "layers", m->layers);
    if (!o || model_families[m->arch].blocks == MODEL_BLOCKS_GPT2)
        return o;
    const struct model_rope_scaling *s = &m->rope_scaling;
    json_t *scaling = s->factor == 0 ? json_null()
        : json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor", s->factor, "low_freq_factor",
                    s->low_freq_factor, "high_freq_factor", s->high_freq_factor,
                    "original_max_position_embeddings", s->original_context);
    json_t *more = json_pack("{s:i, s:i, s:i, s:i, s:f, s:o, s:f, s:b}", "kv_heads", m->kv_heads, "ffn_dim",
                             m->ffn_dim, "head_dim", m->head_dim, "sliding_window", m->sliding_window, "rope_theta",
                             m->rope_theta, "rope_scaling", scaling, "norm_eps", m->norm_eps, "tie_embeddings",
                             m->tied);
    if (!more || json_object_update(o, more) != 0) {
        json_decref(more);
        json_decref(o);
        return NULL;
    }
    json_decref(more);
    return o;
}
