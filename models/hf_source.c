/* hf_source.c - a Hugging Face folder's files beside its weights, kept by
 * an import and written back by an export (hf_source.h). */
#include "hf_source.h"
#include "hf_json.h"
#include "model_io.h"
#include "../kernels/stage.h"

#include <stdlib.h>
#include <string.h>

const char *const kern_hf_source_files[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                            "special_tokens_map.json", NULL};

static int llama_config_write(FILE *f, const struct model_config *m, const float *params, struct kern_err *err)
{
    (void)params;
    return kern_llama_config_write(f, m, err);
}

/* Each kind of family's config.json: its writer, and the members of it
 * that shoal's model sets (the rest of an imported file is kept as it
 * was); the llama kind's model_type and class come from the family's row. */
static const struct {
    int (*write)(FILE *f, const struct model_config *m, const float *params, struct kern_err *err);
    const char *const *keys;
} config_kinds[MODEL_BLOCKS_COUNT] = {
    [MODEL_BLOCKS_GPT2] = {kern_gpt2_config_write, (const char *const[]){"vocab_size", "n_positions", "n_ctx",
                           "n_embd", "n_head", "n_layer", "tie_word_embeddings", NULL}},
    [MODEL_BLOCKS_LLAMA] = {llama_config_write, (const char *const[]){"vocab_size", "hidden_size",
                            "intermediate_size", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
                            "head_dim", "rms_norm_eps", "rope_theta", "tie_word_embeddings", NULL}},
};

int kern_hf_source_pack(const char *const *names, const char *const *texts, const size_t *lens, int n, char **out,
                        size_t *out_len, struct kern_err *err)
{
    json_t *src = json_object(), *file;
    int rc = -1;
    *out = NULL;
    if (!src)
        return kern_fail(err, "source: out of memory");
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (kern_hf_source_files[k] && strcmp(kern_hf_source_files[k], names[i]) != 0)
            k++;
        if (!kern_hf_source_files[k] || json_object_get(src, names[i])) {
            kern_fail(err, "source: %s is %s", names[i], kern_hf_source_files[k] ? "given twice"
                                                                                  : "not a file an import keeps");
            goto out;
        }
        json_t *obj = hj_parse_object(texts[i], lens[i], names[i], err);
        json_decref(obj);
        if (!obj)
            goto out;
        if (!(file = json_stringn(texts[i], lens[i])) || json_object_set_new(src, names[i], file) != 0) {
            kern_fail(err, "source: out of memory");
            goto out;
        }
    }
    if (!(*out = json_dumps(src, JSON_COMPACT))) {
        kern_fail(err, "source: out of memory");
        goto out;
    }
    *out_len = strlen(*out);
    rc = 0;
out:
    json_decref(src);
    return rc;
}

int kern_hf_source_get(const char *source, size_t len, const char *name, char **text, size_t *text_len,
                       struct kern_err *err)
{
    json_t *src = hj_parse_object(source, len, "the stored source", err);
    const json_t *file;
    int rc = -1;
    *text = NULL;
    *text_len = 0;
    if (!src)
        return -1;
    if (!(file = json_object_get(src, name))) {
        rc = 0;
        goto out;
    }
    if (!json_is_string(file)) {
        kern_fail(err, "the stored source: %s is not a string", name);
        goto out;
    }
    *text_len = json_string_length(file);
    if (!(*text = malloc(*text_len + 1))) {
        kern_fail(err, "source: out of memory");
        goto out;
    }
    memcpy(*text, json_string_value(file), *text_len + 1);
    rc = 0;
out:
    json_decref(src);
    return rc;
}

/* Whether two values say the same: numbers by value (10000 and 10000.0,
 * 1e-05 and 1.0000000000000001e-05 are one number), others as jansson
 * compares them. */
static int same_value(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

/* What transformers takes for member `key` of m's family's config.json
 * when the file leaves it out (a new reference), or NULL when it has no
 * default that shoal's model could equal. */
static json_t *default_of(const char *key, const struct model_config *m)
{
    const struct model_family *fam = &model_families[m->arch];
    int gpt2 = fam->blocks == MODEL_BLOCKS_GPT2;
    if (strcmp(key, "tie_word_embeddings") == 0)
        return json_boolean(gpt2);
    if (gpt2)
        return NULL;
    if (strcmp(key, "num_key_value_heads") == 0)
        return json_integer(m->heads);
    if (strcmp(key, "head_dim") == 0 && m->heads > 0 && m->d_model % m->heads == 0)
        return json_integer(m->d_model / m->heads);
    if (strcmp(key, "rms_norm_eps") == 0)
        return json_real(fam->hf_norm_eps);
    if (strcmp(key, "rope_theta") == 0)
        return json_real(10000);
    return NULL;
}

/* The family's own config.json as an object: its writer's text, parsed. */
static json_t *family_config(const struct model_config *m, const float *params, struct kern_err *err)
{
    char *text = NULL;
    size_t len = 0;
    json_t *obj = NULL;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) {
        kern_fail(err, "config.json export: out of memory");
        return NULL;
    }
    int bad = config_kinds[model_families[m->arch].blocks].write(mem, m, params, err);
    if (fclose(mem) != 0 && !bad)
        bad = kern_fail(err, "config.json export: out of memory");
    if (!bad)
        obj = hj_parse_object(text, len, "config.json export", err);
    free(text);
    return obj;
}

int kern_hf_config_merge(FILE *f, const char *config, size_t clen, const struct model_config *m, const float *params,
                         const char *torch_dtype, struct kern_err *err)
{
    const char *const *keys = config_kinds[model_families[m->arch].blocks].keys;
    json_t *ours = family_config(m, params, err), *out = NULL;
    int rc = -1;
    if (!ours)
        goto done;
    if (!config) {
        out = json_incref(ours);
    } else {
        if (!(out = hj_parse_object(config, clen, "the imported config.json", err)))
            goto done;
        for (int k = 0; keys[k]; k++) {
            json_t *mine = json_object_get(ours, keys[k]);
            const json_t *theirs = json_object_get(out, keys[k]);
            json_t *dflt = theirs ? NULL : default_of(keys[k], m);
            int as_default = dflt && mine && same_value(mine, dflt);   /* absent, and the model says the default */
            json_decref(dflt);
            if (as_default)
                continue;
            if (mine && (!theirs || !same_value(mine, theirs)) && json_object_set(out, keys[k], mine) != 0) {
                kern_fail(err, "config.json export: out of memory");
                goto done;
            }
        }
    }
    if (json_object_set_new(out, "torch_dtype", json_string(torch_dtype)) != 0 ||
        json_dumpf(out, f, JSON_INDENT(2) | JSON_SORT_KEYS) != 0 || fputc('\n', f) == EOF || fflush(f) != 0) {
        kern_fail(err, "config.json export: write failed");
        goto done;
    }
    rc = 0;
done:
    json_decref(ours);
    json_decref(out);
    return rc;
}

int kern_hf_generation_config_write(FILE *f, const char *config, size_t len, const struct model_config *m,
                                    struct kern_err *err)
{
    static const char *const ids[] = {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"};
    /* transformers' defaults of bos and eos when a config leaves them out */
    const json_int_t defaults[2] = {model_families[m->arch].hf_bos, model_families[m->arch].hf_eos};
    json_t *cfg = hj_parse_object(config, len, "config.json", err), *gen = json_object();
    const json_t *v;
    int rc = -1;
    if (!cfg || !gen) {
        if (cfg)
            kern_fail(err, "generation_config.json: out of memory");
        goto out;
    }
    json_object_set_new(gen, "_from_model_config", json_true());
    for (int k = 0; k < 4; k++) {
        if ((v = json_object_get(cfg, ids[k])) && !json_is_null(v))
            json_object_set(gen, ids[k], (json_t *)v);
        else if (k < 2 && !v && defaults[k] >= 0)   /* -1: transformers' None, left out as it leaves it */
            json_object_set_new(gen, ids[k], json_integer(defaults[k]));
    }
    if ((v = json_object_get(cfg, "transformers_version")) && json_is_string(v))
        json_object_set(gen, "transformers_version", (json_t *)v);
    if (json_dumpf(gen, f, JSON_INDENT(2) | JSON_SORT_KEYS) != 0 || fputc('\n', f) == EOF || fflush(f) != 0) {
        kern_fail(err, "generation_config.json: write failed");
        goto out;
    }
    rc = 0;
out:
    json_decref(cfg);
    json_decref(gen);
    return rc;
}
