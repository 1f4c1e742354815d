/* stage_file.c - a stage file's header read, packed and checked
 * (stage_file.h; the layout is in checkpoint.c).  Needs nothing but libc
 * and common/model.c. */
#include "stage_file.h"

#include <stdarg.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "stage files are written in host order, which must be little-endian"
#endif

#define EXTRAS_ALL ((1 << KERN_EXTRA_COUNT) - 1)

/* kern_fail's job (layout.c), here so that this file links alone. */
static int fail(struct kern_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct kern_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err)
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* int32 and float64 fields of the header of a file of `version`. */
static size_t header_ints(uint32_t version)
{
    return version == 1 ? 9 : version == 2 ? 10 : version == 3 ? 15 : STAGE_FILE_INTS;
}

static size_t header_reals(uint32_t version)
{
    return version < 3 ? 0 : STAGE_FILE_REALS;
}

/* Bytes of the header of a file of `version`. */
static size_t header_bytes(uint32_t version)
{
    return 8 + 4 + 4 * header_ints(version) + 8 * header_reals(version) + 8 + 8 + (version >= 4 ? 8 : 0);
}

/* Buffers a file of header h holds: params, both moments (unless left
 * out), the extras. */
int stage_file_buffers(const struct stage_file_header *h)
{
    return (h->extras & STAGE_FILE_NO_MOMENTS ? 1 : 3) + __builtin_popcount((unsigned)h->extras & EXTRAS_ALL);
}

size_t stage_file_header_pack(const struct stage_file_header *h, unsigned char out[STAGE_FILE_HEADER_MAX])
{
    const struct model_config *m = &h->model;
    const struct model_rope_scaling *r = &m->rope_scaling;
    uint32_t version = KERN_STAGE_FILE_VERSION;
    int32_t v[STAGE_FILE_INTS] = {m->vocab, m->context, m->d_model, m->heads, m->layers, h->layer_start,
                                  h->layer_end, !!h->first, !!h->last, h->extras, (int32_t)m->arch, m->kv_heads,
                                  m->ffn_dim, m->tied, r->original_context, m->head_dim, m->sliding_window};
    double d[STAGE_FILE_REALS] = {m->norm_eps, m->rope_theta, r->factor, r->low_freq_factor, r->high_freq_factor};
    memcpy(out, STAGE_FILE_MAGIC, 8);
    memcpy(out + 8, &version, 4);
    memcpy(out + 12, v, sizeof v);
    memcpy(out + 12 + sizeof v, d, sizeof d);
    memcpy(out + 12 + sizeof v + sizeof d, &h->step, 8);
    memcpy(out + 20 + sizeof v + sizeof d, &h->n, 8);
    memcpy(out + 28 + sizeof v + sizeof d, &h->source_bytes, 8);
    return header_bytes(version);
}

int stage_file_header_read(FILE *f, struct stage_file_header *got, unsigned char raw[STAGE_FILE_HEADER_MAX],
                           size_t *raw_len, struct kern_err *err)
{
    int32_t v[STAGE_FILE_INTS] = {0};
    double d[STAGE_FILE_REALS] = {0};
    if (fread(raw, 1, 12, f) != 12)
        return fail(err, "load: file is shorter than a stage file header");
    memcpy(&got->version, raw + 8, 4);
    if (memcmp(raw, STAGE_FILE_MAGIC, 8))
        return fail(err, "load: not a shoal stage file (bad magic)");
    if (got->version < 1 || got->version > KERN_STAGE_FILE_VERSION)
        return fail(err, "load: stage file version %u, this build reads 1 to %d", got->version,
                    KERN_STAGE_FILE_VERSION);
    size_t ints = header_ints(got->version), reals = header_reals(got->version);
    *raw_len = header_bytes(got->version);
    if (fread(raw + 12, 1, *raw_len - 12, f) != *raw_len - 12)
        return fail(err, "load: file is shorter than a stage file header");
    memcpy(v, raw + 12, 4 * ints);
    memcpy(d, raw + 12 + 4 * ints, 8 * reals);
    memcpy(&got->step, raw + 12 + 4 * ints + 8 * reals, 8);
    memcpy(&got->n, raw + 20 + 4 * ints + 8 * reals, 8);
    got->source_bytes = 0;
    if (got->version >= 4)
        memcpy(&got->source_bytes, raw + 28 + 4 * ints + 8 * reals, 8);
    if (got->source_bytes > KERN_STAGE_SOURCE_MAX)
        return fail(err, "load: the stage file's source section is %llu bytes, over the %u this build reads",
                    (unsigned long long)got->source_bytes, KERN_STAGE_SOURCE_MAX);
    got->model = (struct model_config){ .vocab = v[0], .context = v[1], .d_model = v[2], .heads = v[3],
                                        .layers = v[4], .arch = (enum model_arch)v[10], .kv_heads = v[11],
                                        .ffn_dim = v[12], .tied = v[13], .head_dim = v[15],
                                        .sliding_window = v[16], .norm_eps = d[0], .rope_theta = d[1],
                                        .rope_scaling = { .factor = d[2], .low_freq_factor = d[3],
                                                          .high_freq_factor = d[4], .original_context = v[14] } };
    if ((uint32_t)v[10] >= MODEL_ARCH_COUNT)
        return fail(err, "load: the stage file holds a model of architecture %d, which this build does not know",
                    v[10]);
    model_config_normalise(&got->model);
    got->layer_start = v[5];
    got->layer_end = v[6];
    got->first = v[7];
    got->last = v[8];
    got->extras = v[9];
    if (got->extras & ~(EXTRAS_ALL | STAGE_FILE_NO_MOMENTS))
        return fail(err, "load: the stage file holds extra state this build does not know (mask %#x)",
                    (unsigned)got->extras);
    if ((got->extras & STAGE_FILE_NO_MOMENTS) && got->step != 0)
        return fail(err, "load: the stage file leaves its AdamW moments out after %llu AdamW steps (only a "
                    "stage at step 0 has none)", (unsigned long long)got->step);
    return 0;
}

/* *acc += a * b; -1 when that overflows 64 bits. */
static int mul_add(uint64_t *acc, uint64_t a, uint64_t b)
{
    uint64_t p;
    return __builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(*acc, p, acc) ? -1 : 0;
}

/* Floats per buffer that layout.c gives a stage of the header's model and
 * layers (common/model.c's count).  0 when the numbers make no model or
 * stage, or overflow 64 bits, so that nothing is ever allocated from them. */
static uint64_t header_stage_floats(const struct stage_file_header *h)
{
    const char *field;
    char msg[160];
    if (model_config_check(&h->model, &field, msg, sizeof msg) || h->layer_start < 0 ||
        h->layer_end < h->layer_start || h->layer_end > h->model.layers)
        return 0;
    return model_stage_params(&h->model, h->layer_start, h->layer_end, h->first, h->last);
}

/* Checks that the header agrees with itself and with the file's size, so
 * that a stage built from it allocates no more than the file holds: its
 * model and layers make the floats per buffer it says, and the file is a
 * header, its buffers of them and a checksum.  Leaves the position at
 * the start. */
static int header_check_size(FILE *f, const struct stage_file_header *h, struct kern_err *err)
{
    uint64_t floats = header_stage_floats(h);
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;   /* bytes */
    if (fseek(f, 0, SEEK_SET) != 0 || size < 0)
        return fail(err, "peek: cannot find the size of the file");
    if (floats == 0 || floats != h->n) {
        char text[200];
        model_config_text(&h->model, text, sizeof text);
        return fail(err, "peek: the header says %llu floats per buffer, but its model (%s) and layer_start %d, "
                    "layer_end %d make %llu", (unsigned long long)h->n, text, h->layer_start, h->layer_end,
                    (unsigned long long)floats);
    }
    /* header, params, adam_m, adam_v (unless left out), extras (4 bytes a
     * float), the source section, checksum */
    uint64_t want = header_bytes(h->version) + 8 + h->source_bytes;
    if (mul_add(&want, 4 * (uint64_t)stage_file_buffers(h), floats) || (uint64_t)size != want)
        return fail(err, "peek: the header says %llu floats per buffer, and the file is %ld bytes instead of "
                    "the %llu that makes", (unsigned long long)floats, size, (unsigned long long)want);
    return 0;
}

int kern_stage_file_peek(FILE *f, struct model_config *model, struct kern_stage_spec *spec, uint64_t *step,
                         struct kern_err *err)
{
    struct stage_file_header h;
    unsigned char raw[STAGE_FILE_HEADER_MAX];
    size_t raw_len;
    if (stage_file_header_read(f, &h, raw, &raw_len, err) != 0) {
        fseek(f, 0, SEEK_SET);
        return -1;
    }
    if (header_check_size(f, &h, err) != 0)
        return -1;
    *model = h.model;
    spec->layer_start = h.layer_start;
    spec->layer_end = h.layer_end;
    spec->first = h.first;
    spec->last = h.last;
    if (step)
        *step = h.step;
    return 0;
}
