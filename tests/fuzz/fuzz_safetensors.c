/* fuzz_safetensors.c - the Hugging Face readers (models/gpt2_safetensors.c,
 * gpt2_config.c, their JSON through jansson in hf_json.c), as an import reads an
 * uploaded model.safetensors and config.json.  Byte 0 says what follows:
 *
 *   bit 7 set      a config.json text;
 *   bit 6 set      a safetensors file in two parts, JSON header, a NUL byte,
 *                  data: the target writes the size field, so that the JSON
 *                  can grow and shrink under mutation and still be read;
 *   otherwise      a safetensors file as it is;
 *   bits 0-5       the number of heads to read it with.
 *
 * An accepted file must make a model a stage can be built from, a
 * whole-model buffer of kern_model_param_count floats, the same bits from
 * the FILE* reader, an export (and config.json) that read back to the same
 * model bit for bit; an accepted config.json a model that passes
 * kern_model_check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/model_io.h"

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_safetensors: broken promise: %s\n", what);
        abort();
    }
}

static void check_accepted(const uint8_t *data, size_t size, int heads, const struct model_config *m, const float *p)
{
    struct kern_err err;
    struct model_config m2;
    float *q = NULL;
    size_t n = kern_model_param_count(m);
    expect(n > 0 && kern_model_check(m, &err) == 0 && m->heads == heads, "an accepted model is whole");
    volatile float last = p[n - 1]; /* ASan: the buffer holds n floats */
    (void)last;

    FILE *f = fmemopen((void *)data, size, "rb");
    expect(f && kern_safetensors_read_file(f, heads, &m2, &q, &err) == 0, "the FILE* reader accepts it too");
    expect(model_config_equal(&m2, m) && memcmp(p, q, n * sizeof *p) == 0, "both readers agree");
    fclose(f);
    free(q);

    char *out = NULL;
    size_t out_len = 0;
    FILE *w = open_memstream(&out, &out_len);
    expect(w && kern_safetensors_write(w, m, p, &err) == 0, "an accepted model exports");
    fclose(w);
    expect(kern_safetensors_read(out, out_len, heads, &m2, &q, &err) == 0, "the export reads back");
    expect(model_config_equal(&m2, m) && memcmp(p, q, n * sizeof *p) == 0, "the export round-trips");
    free(q);
    free(out);

    w = open_memstream(&out, &out_len);
    expect(w && kern_gpt2_config_write(w, m, p, &err) == 0, "its config.json is written");
    fclose(w);
    expect(kern_gpt2_config_read(out, out_len, &m2, &err) == 0 && model_config_equal(&m2, m),
           "its config.json reads back");
    free(out);
}

static void read_file(const uint8_t *data, size_t size, int heads)
{
    struct model_config m;
    struct kern_err err;
    float *p = NULL;
    if (kern_safetensors_read(data, size, heads, &m, &p, &err) == 0) {
        check_accepted(data, size, heads, &m, p);
        free(p);
        return;
    }
    FILE *f = fmemopen((void *)data, size, "rb");
    if (f) {
        expect(kern_safetensors_read_file(f, heads, &m, &p, &err) != 0, "the FILE* reader refuses it too");
        fclose(f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int mode = data[0], heads = mode & 0x3f;
    data++, size--;
    if (mode & 0x80) {
        struct model_config m;
        struct kern_err err;
        if (kern_gpt2_config_read((const char *)data, size, &m, &err) == 0)
            expect(kern_model_check(&m, &err) == 0, "an accepted config.json makes a model");
        return 0;
    }
    if (!(mode & 0x40)) {
        read_file(data, size, heads);
        return 0;
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t json = nul ? (size_t)(nul - data) : size, rest = nul ? size - json - 1 : 0;
    uint8_t *file = malloc(8 + json + rest + 1);
    if (!file)
        return 0;
    uint64_t n = json;
    memcpy(file, &n, 8);
    memcpy(file + 8, data, json);
    if (rest)
        memcpy(file + 8 + json, nul + 1, rest);
    read_file(file, 8 + json + rest, heads);
    free(file);
    return 0;
}
