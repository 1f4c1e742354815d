/* checkpoint.c - stage files: one stage's parameters, AdamW state and
 * extra per-parameter state (kern_stage_extra).
 *
 * Layout, little-endian:
 *   char     magic[8]      "SHOALSTG"
 *   uint32   version       KERN_STAGE_FILE_VERSION (2; 1 is read too)
 *   int32    vocab, context, d_model, heads, layers
 *   int32    layer_start, layer_end, first, last
 *   int32    extras        bit i set: extra buffer i follows (version 2 only)
 *   uint64   step          AdamW steps taken
 *   uint64   n             floats per buffer
 *   float32  params[n], adam_m[n], adam_v[n], then each extra[n] in order
 *   uint64   checksum      FNV-1a 64 of every byte before it
 */
#include "stage.h"

#include <stdlib.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "stage files are written in host order, which must be little-endian"
#endif

#define STAGE_MAGIC "SHOALSTG"
#define HEADER_INTS 10         /* version 2; version 1 has the first 9 */
#define EXTRAS (HEADER_INTS - 1) /* the index of the extras mask */

struct header {
    char magic[8];
    uint32_t version;
    int32_t ints[HEADER_INTS];
    uint64_t step;
    uint64_t n;
};

/* Bytes of the header of a file of `version`. */
static size_t header_bytes(uint32_t version)
{
    return 8 + 4 + 4 * (size_t)(version == 1 ? HEADER_INTS - 1 : HEADER_INTS) + 8 + 8;
}
#define HEADER_BYTES_MAX (8 + 4 + 4 * HEADER_INTS + 8 + 8)
#define EXTRAS_ALL ((1 << KERN_EXTRA_COUNT) - 1)

/* Buffers a file of header h holds: params, both moments, the extras. */
static int header_buffers(const struct header *h)
{
    return 3 + __builtin_popcount((unsigned)h->ints[EXTRAS] & EXTRAS_ALL);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV_START 0xcbf29ce484222325ull

/* Packs a version 2 header; returns its bytes. */
static size_t header_pack(const struct header *h, unsigned char *out)
{
    memcpy(out, h->magic, 8);
    memcpy(out + 8, &h->version, 4);
    memcpy(out + 12, h->ints, 4 * HEADER_INTS);
    memcpy(out + 12 + 4 * HEADER_INTS, &h->step, 8);
    memcpy(out + 20 + 4 * HEADER_INTS, &h->n, 8);
    return HEADER_BYTES_MAX;
}

static void header_of_stage(const struct kern_stage *st, struct header *h)
{
    const struct kern_model *m = &st->model;
    const struct kern_stage_spec *s = &st->spec;
    memcpy(h->magic, STAGE_MAGIC, 8);
    h->version = KERN_STAGE_FILE_VERSION;
    int32_t extras = 0;
    for (int i = 0; i < KERN_EXTRA_COUNT; i++)
        extras |= st->extra[i] ? 1 << i : 0;
    int32_t v[HEADER_INTS] = {m->vocab, m->context, m->d_model, m->heads, m->layers,
                              s->layer_start, s->layer_end, !!s->first, !!s->last, extras};
    memcpy(h->ints, v, sizeof v);
    h->step = st->step;
    h->n = st->n_params;
}

int kern_stage_save(struct kern_stage *st, FILE *f, struct kern_err *err)
{
    static const enum kern_buffer order[3] = {KERN_PARAMS, KERN_ADAM_M, KERN_ADAM_V};
    struct header h;
    unsigned char raw[HEADER_BYTES_MAX];
    float *buf = malloc(st->n_params * sizeof *buf);
    uint64_t sum = FNV_START;
    int rc = -1;

    if (!buf) {
        kern_fail(err, "save: out of memory");
        goto out;
    }
    header_of_stage(st, &h);
    size_t hb = header_pack(&h, raw);
    sum = fnv1a(sum, raw, hb);
    if (fwrite(raw, 1, hb, f) != hb) {
        kern_fail(err, "save: write failed");
        goto out;
    }
    for (int i = 0; i < 3 + KERN_EXTRA_COUNT; i++) {
        const float *b = buf;
        if (i >= 3 && !(b = st->extra[i - 3]))
            continue;
        if (i < 3 && st->ops->read(st, order[i], buf, err))
            goto out;
        sum = fnv1a(sum, b, st->n_params * sizeof *b);
        if (fwrite(b, sizeof *b, st->n_params, f) != st->n_params) {
            kern_fail(err, "save: write failed");
            goto out;
        }
    }
    if (fwrite(&sum, sizeof sum, 1, f) != 1 || fflush(f)) {
        kern_fail(err, "save: write failed");
        goto out;
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

/* Reads and unpacks a header (version 1: no extras); checks its magic,
 * version and extras.  *raw_len gets its bytes. */
static int header_read(FILE *f, struct header *got, unsigned char raw[HEADER_BYTES_MAX], size_t *raw_len,
                       struct kern_err *err)
{
    if (fread(raw, 1, 12, f) != 12)
        return kern_fail(err, "load: file is shorter than a stage file header");
    memcpy(got->magic, raw, 8);
    memcpy(&got->version, raw + 8, 4);
    if (memcmp(got->magic, STAGE_MAGIC, 8))
        return kern_fail(err, "load: not a shoal stage file (bad magic)");
    if (got->version < 1 || got->version > KERN_STAGE_FILE_VERSION)
        return kern_fail(err, "load: stage file version %u, this build reads 1 to %d", got->version,
                         KERN_STAGE_FILE_VERSION);
    size_t ints = got->version == 1 ? HEADER_INTS - 1 : HEADER_INTS;
    *raw_len = header_bytes(got->version);
    if (fread(raw + 12, 1, *raw_len - 12, f) != *raw_len - 12)
        return kern_fail(err, "load: file is shorter than a stage file header");
    memset(got->ints, 0, sizeof got->ints);
    memcpy(got->ints, raw + 12, 4 * ints);
    memcpy(&got->step, raw + 12 + 4 * ints, 8);
    memcpy(&got->n, raw + 20 + 4 * ints, 8);
    if (got->ints[EXTRAS] & ~EXTRAS_ALL)
        return kern_fail(err, "load: the stage file holds extra state this build does not know (mask %#x)",
                         (unsigned)got->ints[EXTRAS]);
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
static uint64_t header_stage_floats(const struct header *h)
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
 * header, three buffers of them and a checksum.  Leaves the position at
 * the start. */
static int header_check_size(FILE *f, const struct header *h, struct kern_err *err)
{
    uint64_t floats = header_stage_floats(h);
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;   /* bytes */
    if (fseek(f, 0, SEEK_SET) != 0 || size < 0)
        return kern_fail(err, "peek: cannot find the size of the file");
    if (floats == 0 || floats != h->n)
        return kern_fail(err, "peek: the header says %llu floats per buffer, but its model (V=%d T=%d C=%d NH=%d "
                         "L=%d) and layers [%d,%d) make %llu", (unsigned long long)h->n, h->ints[0], h->ints[1],
                         h->ints[2], h->ints[3], h->ints[4], h->ints[5], h->ints[6], (unsigned long long)floats);
    /* header, params, adam_m, adam_v, extras (4 bytes a float), checksum */
    uint64_t want = header_bytes(h->version) + 8;
    if (mul_add(&want, 4 * (uint64_t)header_buffers(h), floats) || (uint64_t)size != want)
        return kern_fail(err, "peek: the header says %llu floats per buffer, and the file is %ld bytes instead of "
                         "the %llu that makes", (unsigned long long)floats, size, (unsigned long long)want);
    return 0;
}

int kern_stage_file_peek(FILE *f, struct kern_model *model, struct kern_stage_spec *spec,
                         struct kern_err *err)
{
    struct header h;
    unsigned char raw[HEADER_BYTES_MAX];
    size_t raw_len;
    if (header_read(f, &h, raw, &raw_len, err) != 0) {
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
    return 0;
}

int kern_stage_load(struct kern_stage *st, FILE *f, struct kern_err *err)
{
    struct header want, got;
    unsigned char raw[HEADER_BYTES_MAX];
    size_t raw_len;
    float *buf[3 + KERN_EXTRA_COUNT] = {NULL};
    uint64_t sum = FNV_START, stored;
    int rc = -1;

    if (header_read(f, &got, raw, &raw_len, err))
        goto out;
    sum = fnv1a(sum, raw, raw_len);
    header_of_stage(st, &want);
    /* the model and layers must match; the extras are the file's to say */
    if (memcmp(got.ints, want.ints, sizeof got.ints[0] * EXTRAS) || got.n != want.n) {
        kern_fail(err, "load: the file holds layers [%d,%d) of a model (V=%d T=%d C=%d "
                  "NH=%d L=%d); this stage is layers [%d,%d) of (V=%d T=%d C=%d NH=%d L=%d)",
                  got.ints[5], got.ints[6], got.ints[0], got.ints[1], got.ints[2],
                  got.ints[3], got.ints[4], want.ints[5], want.ints[6], want.ints[0],
                  want.ints[1], want.ints[2], want.ints[3], want.ints[4]);
        goto out;
    }
    for (int i = 0; i < 3 + KERN_EXTRA_COUNT; i++) {
        if (i >= 3 && !(got.ints[EXTRAS] & (1 << (i - 3))))
            continue;
        buf[i] = malloc(st->n_params * sizeof *buf[i]);
        if (!buf[i]) {
            kern_fail(err, "load: out of memory");
            goto out;
        }
        if (fread(buf[i], sizeof *buf[i], st->n_params, f) != st->n_params) {
            kern_fail(err, "load: file is truncated");
            goto out;
        }
        sum = fnv1a(sum, buf[i], st->n_params * sizeof *buf[i]);
    }
    if (fread(&stored, sizeof stored, 1, f) != 1) {
        kern_fail(err, "load: file is truncated (no checksum)");
        goto out;
    }
    if (stored != sum) {
        kern_fail(err, "load: checksum mismatch: the file is corrupt");
        goto out;
    }
    if (fgetc(f) != EOF) {
        kern_fail(err, "load: trailing bytes after the checksum");
        goto out;
    }
    if (st->ops->write(st, KERN_PARAMS, buf[0], err) ||
        st->ops->write(st, KERN_ADAM_M, buf[1], err) ||
        st->ops->write(st, KERN_ADAM_V, buf[2], err))
        goto out;
    for (int i = 0; i < KERN_EXTRA_COUNT; i++) {   /* the stage takes the file's buffers */
        free(st->extra[i]);
        st->extra[i] = buf[3 + i];
        buf[3 + i] = NULL;
    }
    st->step = got.step;
    kern_stage_drop_in_flight(st);
    rc = 0;
out:
    for (int i = 0; i < 3 + KERN_EXTRA_COUNT; i++)
        free(buf[i]);
    return rc;
}

/* Index of the tensor named `name` in `st`, or -1. */
static int tensor_index(const struct kern_stage *st, const char *name)
{
    for (int i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return i;
    return -1;
}

int kern_stage_assemble(struct kern_stage *st, struct kern_stage *const *sources, int n_sources,
                        struct kern_err *err)
{
    static const enum kern_buffer order[3] = {KERN_PARAMS, KERN_ADAM_M, KERN_ADAM_V};
    enum { NB = 3 + KERN_EXTRA_COUNT };
    float *dst[NB] = {NULL}, *src[NB] = {NULL};
    char *filled = calloc((size_t)st->n_tensors + 1, 1);
    int rc = -1, have = 0;
    /* the extras the sources hold: all of them, or none */
    for (int e = 0; e < KERN_EXTRA_COUNT; e++) {
        int with = 0;
        for (int k = 0; k < n_sources; k++)
            with += sources[k]->extra[e] != NULL;
        if (with != 0 && with != n_sources) {
            kern_fail(err, "assemble: %d of %d sources hold extra state %d", with, n_sources, e);
            goto out;
        }
    }
    for (int b = 0; b < NB; b++)
        if (b < 3 || (n_sources > 0 && sources[0]->extra[b - 3]))
            if (!(dst[b] = malloc(st->n_params * sizeof(float)))) {
                kern_fail(err, "assemble: out of memory");
                goto out;
            }
    if (!filled || !dst[0] || !dst[1] || !dst[2]) {
        kern_fail(err, "assemble: out of memory");
        goto out;
    }
    for (int k = 0; k < n_sources; k++) {
        const struct kern_stage *from = sources[k];
        if (memcmp(&from->model, &st->model, sizeof st->model) != 0) {
            kern_fail(err, "assemble: source %d is of another model", k);
            goto out;
        }
        if (from->step != sources[0]->step) {
            kern_fail(err, "assemble: source %d is at step %llu, source 0 at step %llu", k,
                      (unsigned long long)from->step, (unsigned long long)sources[0]->step);
            goto out;
        }
        for (int b = 0; b < 3; b++) {
            free(src[b]);
            if (!(src[b] = malloc(from->n_params * sizeof(float)))) {
                kern_fail(err, "assemble: out of memory");
                goto out;
            }
            if (from->ops->read((struct kern_stage *)from, order[b], src[b], err))
                goto out;
        }
        for (int b = 3; b < NB; b++)
            src[b] = from->extra[b - 3];   /* borrowed */
        for (int i = 0; i < st->n_tensors; i++) {
            const struct kern_tensor *t = &st->tensors[i];
            int j = filled[i] ? -1 : tensor_index(from, t->name);
            if (j < 0)
                continue;
            if (from->tensors[j].count != t->count) {
                kern_fail(err, "assemble: tensor %s has %zu floats in source %d, %zu here", t->name,
                          from->tensors[j].count, k, t->count);
                goto out;
            }
            for (int b = 0; b < NB; b++)
                if (dst[b])
                    memcpy(dst[b] + t->offset, src[b] + from->tensors[j].offset, t->count * sizeof(float));
            filled[i] = 1;
            have++;
        }
        for (int b = 3; b < NB; b++)
            src[b] = NULL;
    }
    for (int i = 0; have < st->n_tensors && i < st->n_tensors; i++) {
        if (!filled[i]) {
            kern_fail(err, "assemble: no source holds tensor %s", st->tensors[i].name);
            goto out;
        }
    }
    for (int b = 0; b < 3; b++)
        if (st->ops->write(st, order[b], dst[b], err))
            goto out;
    for (int e = 0; e < KERN_EXTRA_COUNT; e++) {   /* the stage takes the assembled extras */
        free(st->extra[e]);
        st->extra[e] = dst[3 + e];
        dst[3 + e] = NULL;
    }
    st->step = n_sources > 0 ? sources[0]->step : 0;
    kern_stage_drop_in_flight(st);
    rc = 0;
out:
    for (int b = 0; b < NB; b++) {
        free(dst[b]);
        if (b < 3)
            free(src[b]);
    }
    free(filled);
    return rc;
}
