/* stage_file.c - a stage file's header read and checked (stage_file.h;
 * the layout is in checkpoint.c).  Needs nothing but libc. */
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

/* Bytes of the header of a file of `version`. */
static size_t header_bytes(uint32_t version)
{
    return 8 + 4 + 4 * (size_t)(version == 1 ? STAGE_FILE_INTS - 1 : STAGE_FILE_INTS) + 8 + 8;
}

/* Buffers a file of header h holds: params, both moments (unless left
 * out), the extras. */
static int header_buffers(const struct stage_file_header *h)
{
    int32_t mask = h->ints[STAGE_FILE_EXTRAS];
    return (mask & STAGE_FILE_NO_MOMENTS ? 1 : 3) + __builtin_popcount((unsigned)mask & EXTRAS_ALL);
}

int stage_file_header_read(FILE *f, struct stage_file_header *got, unsigned char raw[STAGE_FILE_HEADER_MAX],
                           size_t *raw_len, struct kern_err *err)
{
    if (fread(raw, 1, 12, f) != 12)
        return fail(err, "load: file is shorter than a stage file header");
    memcpy(got->magic, raw, 8);
    memcpy(&got->version, raw + 8, 4);
    if (memcmp(got->magic, STAGE_FILE_MAGIC, 8))
        return fail(err, "load: not a shoal stage file (bad magic)");
    if (got->version < 1 || got->version > KERN_STAGE_FILE_VERSION)
        return fail(err, "load: stage file version %u, this build reads 1 to %d", got->version,
                    KERN_STAGE_FILE_VERSION);
    size_t ints = got->version == 1 ? STAGE_FILE_INTS - 1 : STAGE_FILE_INTS;
    *raw_len = header_bytes(got->version);
    if (fread(raw + 12, 1, *raw_len - 12, f) != *raw_len - 12)
        return fail(err, "load: file is shorter than a stage file header");
    memset(got->ints, 0, sizeof got->ints);
    memcpy(got->ints, raw + 12, 4 * ints);
    memcpy(&got->step, raw + 12 + 4 * ints, 8);
    memcpy(&got->n, raw + 20 + 4 * ints, 8);
    if (got->ints[STAGE_FILE_EXTRAS] & ~(EXTRAS_ALL | STAGE_FILE_NO_MOMENTS))
        return fail(err, "load: the stage file holds extra state this build does not know (mask %#x)",
                    (unsigned)got->ints[STAGE_FILE_EXTRAS]);
    if ((got->ints[STAGE_FILE_EXTRAS] & STAGE_FILE_NO_MOMENTS) && got->step != 0)
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
 * layers: [wte (V,C), wpe (T,C)] when first, 12C^2 + 13C per block, [lnfw,
 * lnfb, head (V,C)] when last.  0 when the numbers make no stage or
 * overflow 64 bits, so that nothing is ever allocated from them. */
static uint64_t header_stage_floats(const struct stage_file_header *h)
{
    const int32_t *v = h->ints;   /* vocab, context, d_model, heads, layers, layer_start, layer_end, first, last */
    uint64_t V = (uint64_t)v[0], T = (uint64_t)v[1], C = (uint64_t)v[2], block = 13 * C, n = 0;
    if (v[0] < 1 || v[1] < 1 || v[2] < 1 || v[3] < 1 || v[4] < 1 || v[5] < 0 || v[6] < v[5] || v[6] > v[4])
        return 0;
    if (mul_add(&block, 12 * C, C) || mul_add(&n, block, (uint64_t)(v[6] - v[5])) ||
        (v[7] && mul_add(&n, V + T, C)) || (v[8] && mul_add(&n, V + 2, C)))
        return 0;
    return n;
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
    if (floats == 0 || floats != h->n)
        return fail(err, "peek: the header says %llu floats per buffer, but its model (V=%d T=%d C=%d NH=%d "
                    "L=%d) and layers [%d,%d) make %llu", (unsigned long long)h->n, h->ints[0], h->ints[1],
                    h->ints[2], h->ints[3], h->ints[4], h->ints[5], h->ints[6], (unsigned long long)floats);
    /* header, params, adam_m, adam_v (unless left out), extras (4 bytes a
     * float), checksum */
    uint64_t want = header_bytes(h->version) + 8;
    if (mul_add(&want, 4 * (uint64_t)header_buffers(h), floats) || (uint64_t)size != want)
        return fail(err, "peek: the header says %llu floats per buffer, and the file is %ld bytes instead of "
                    "the %llu that makes", (unsigned long long)floats, size, (unsigned long long)want);
    return 0;
}

int kern_stage_file_peek(FILE *f, struct kern_model *model, struct kern_stage_spec *spec, uint64_t *step,
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
    *model = (struct kern_model){ .vocab = h.ints[0], .context = h.ints[1], .d_model = h.ints[2],
                                  .heads = h.ints[3], .layers = h.ints[4] };
    spec->layer_start = h.ints[5];
    spec->layer_end = h.ints[6];
    spec->first = h.ints[7];
    spec->last = h.ints[8];
    if (step)
        *step = h.step;
    return 0;
}
