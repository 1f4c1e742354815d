/* fuzz_hf_llama.c - the Llama readers (models/hf_weights.c,
 * llama_config.c, the safetensors container safetensors.c and their JSON
 * through jansson, hf_json.c), as an import reads a model.safetensors, its
 * config.json and a shard index.  Byte 0 says what follows:
 *
 *   0x80 set     a config.json text;
 *   0x40 set     a model.safetensors.index.json text;
 *   otherwise    a model.safetensors of the model below (bit 0: tied).
 *
 * The model: V 8, context 4, C 8, 2 heads of 4, 1 kv head, MLP 4, 1 layer
 * (tests/integration/llama_files.py write DIR 8 4 8 2 1 4 1 writes seeds).
 * An accepted file must fill the whole-model buffer, export, and read back
 * to the same bits (its tied head equal to the embedding); an accepted
 * config.json must make a model that passes kern_model_check and write a
 * config.json that reads back to it, and merged into itself as an export
 * keeps it (models/hf_source.h) give a config.json that reads back to it
 * and a generation_config.json; an accepted index must name between 1 and
 * KERN_HF_FILES_MAX plain file names. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/hf_source.h"
#include "../../models/model_io.h"

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_hf_llama: broken promise: %s\n", what);
        abort();
    }
}

static void read_weights(const uint8_t *data, size_t size, int tied)
{
    struct model_config m = {.vocab = 8, .context = 4, .d_model = 8, .heads = 2, .layers = 1,
                             .arch = MODEL_LLAMA, .kv_heads = 1, .ffn_dim = 4, .tied = tied, .rope_theta = 10000};
    struct kern_err err;
    float *p = NULL, *q = NULL;
    const char *name = "model.safetensors";
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        return;
    int rc = kern_hf_read(&m, &f, &name, 1, &p, &err);
    fclose(f);
    if (rc != 0)
        return;
    size_t n = kern_model_param_count(&m), vc = (size_t)m.vocab * m.d_model;
    volatile float last = p[n - 1]; /* ASan: the buffer holds n floats */
    (void)last;
    expect(!tied || memcmp(p, p + n - vc, vc * sizeof *p) == 0, "a tied head is the embedding");
    char *out = NULL;
    size_t out_len = 0;
    FILE *w = open_memstream(&out, &out_len);
    expect(w && kern_hf_write(w, &m, p, &err) == 0, "an accepted model exports");
    fclose(w);
    f = fmemopen(out, out_len, "rb");
    expect(f && kern_hf_read(&m, &f, &name, 1, &q, &err) == 0, "the export reads back");
    fclose(f);
    expect(memcmp(p, q, n * sizeof *p) == 0, "the export round-trips");
    free(out), free(p), free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int mode = data[0];
    data++, size--;
    struct kern_err err;
    if (mode & 0x80) {
        struct model_config m, back;
        if (kern_llama_config_read((const char *)data, size, &m, &err) != 0)
            return 0;
        expect(kern_model_check(&m, &err) == 0 && m.arch == MODEL_LLAMA, "an accepted config.json makes a model");
        char *out = NULL;
        size_t out_len = 0;
        FILE *w = open_memstream(&out, &out_len);
        expect(w && kern_llama_config_write(w, &m, &err) == 0, "its config.json is written");
        fclose(w);
        expect(kern_llama_config_read(out, out_len, &back, &err) == 0 && model_config_equal(&back, &m),
               "its config.json reads back");
        free(out);
        out = NULL;
        w = open_memstream(&out, &out_len);
        expect(w && kern_hf_config_merge(w, (const char *)data, size, &m, NULL, "bfloat16", &err) == 0,
               "an accepted config.json merges");
        fclose(w);
        expect(kern_llama_config_read(out, out_len, &back, &err) == 0 && model_config_equal(&back, &m),
               "the merged config.json reads back");
        char *gen = NULL;
        size_t gen_len = 0;
        FILE *g = open_memstream(&gen, &gen_len);
        expect(g && kern_hf_generation_config_write(g, out, out_len, &m, &err) == 0,
               "its generation_config.json is written");
        fclose(g);
        free(gen);
        free(out);
        return 0;
    }
    if (mode & 0x40) {
        struct kern_hf_index *ix = malloc(sizeof *ix);
        if (ix && kern_hf_index_read((const char *)data, size, ix, &err) == 0) {
            expect(ix->n_files >= 1 && ix->n_files <= KERN_HF_FILES_MAX, "an accepted index names shards");
            for (int i = 0; i < ix->n_files; i++)
                expect(ix->files[i][0] && !strchr(ix->files[i], '/'), "shards are plain file names");
        }
        free(ix);
        return 0;
    }
    read_weights(data, size, mode & 1);
    return 0;
}
