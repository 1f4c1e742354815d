/* fuzz_gpt2_llmc.c - the llm.c checkpoint reader (models/gpt2_llmc.c), as
 * an import reads a gpt2_124M.bin someone uploaded: from memory and from a
 * FILE* (fmemopen), then again with the file cut or zero-padded to the
 * length its header makes (so that mutated headers reach the parameters
 * too).  An accepted file must make a model a stage can be built from, a
 * whole-model buffer of kern_model_param_count floats (ASan sees any read
 * past it), a tied head, the same bits from both readers, an export that
 * reads back bit for bit, and a split into two stages that joins back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/model_io.h"

#define HEADER 1024
#define MAX_FIXED (1u << 20) /* bytes: the longest length-fixed copy tried */

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_gpt2_llmc: broken promise: %s\n", what);
        abort();
    }
}

/* The promises of an accepted file. */
static void check_accepted(const uint8_t *data, size_t size, const struct model_config *m, const float *p)
{
    struct kern_err err;
    struct model_config m2;
    float *q = NULL;
    size_t n = kern_model_param_count(m);
    expect(n > 0 && kern_model_check(m, &err) == 0, "an accepted model is one a stage can be built from");
    expect(kern_model_head_tied(m, p), "the head is wte");
    volatile float last = p[n - 1]; /* ASan: the buffer holds n floats */
    (void)last;

    FILE *f = fmemopen((void *)data, size, "rb");
    expect(f && kern_llmc_read_file(f, &m2, &q, &err) == 0, "the FILE* reader accepts it too");
    expect(model_config_equal(&m2, m) && memcmp(p, q, n * sizeof *p) == 0, "both readers agree");
    fclose(f);
    free(q);

    char *out = NULL;
    size_t out_len = 0;
    FILE *w = open_memstream(&out, &out_len);
    expect(w && kern_llmc_write(w, m, p, &err) == 0, "an accepted model exports");
    fclose(w);
    expect(kern_llmc_read(out, out_len, &m2, &q, &err) == 0, "the export reads back");
    expect(model_config_equal(&m2, m) && memcmp(p, q, n * sizeof *p) == 0, "the export round-trips");
    free(q);
    free(out);

    int half = m->layers / 2;
    struct kern_stage_spec spec[2] = {{.layer_start = 0, .layer_end = half, .first = 1},
                                      {.layer_start = half, .layer_end = m->layers, .first = half == 0, .last = 1}};
    float *part[2] = {NULL, NULL}, *joined = malloc(n * sizeof *joined);
    for (int k = 0; k < 2; k++) {
        size_t c = kern_model_stage_param_count(m, &spec[k]);
        part[k] = malloc((c ? c : 1) * sizeof *part[k]);
        expect(c > 0 && part[k] && kern_model_split(m, p, &spec[k], part[k], &err) == 0, "a split");
    }
    expect(joined && kern_model_join(m, spec, (const float *const *)part, 2, joined, &err) == 0 &&
           memcmp(joined, p, n * sizeof *p) == 0, "the split joins back");
    free(part[0]), free(part[1]), free(joined);
}

static void read_both(const uint8_t *data, size_t size)
{
    struct model_config m;
    struct kern_err err;
    float *p = NULL;
    if (kern_llmc_read(data, size, &m, &p, &err) == 0) {
        check_accepted(data, size, &m, p);
        free(p);
        return;
    }
    FILE *f = fmemopen((void *)data, size, "rb");
    if (f) {
        expect(kern_llmc_read_file(f, &m, &p, &err) != 0, "the FILE* reader refuses it too");
        fclose(f);
    }
}

/* The length the header makes (0 when it makes none worth trying). */
static size_t header_length(const uint8_t *data, size_t size)
{
    int32_t h[8];
    if (size < HEADER)
        return 0;
    memcpy(h, data, sizeof h);
    for (int i = 2; i < 8; i++)
        if (h[i] < 1 || h[i] > (1 << 20))
            return 0;
    uint64_t C = (uint64_t)h[6], floats = ((uint64_t)h[7] + (uint64_t)h[2]) * C + 2 * C +
                                           (uint64_t)h[4] * (12 * C * C + 13 * C);
    uint64_t len = HEADER + (h[1] == 5 ? 2 : 4) * floats;
    return len <= MAX_FIXED ? (size_t)len : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_both(data, size);
    size_t len = header_length(data, size);
    if (len && len != size) {
        uint8_t *fixed = calloc(len, 1);
        if (fixed) {
            memcpy(fixed, data, size < len ? size : len);
            read_both(fixed, len);
            free(fixed);
        }
    }
    return 0;
}
