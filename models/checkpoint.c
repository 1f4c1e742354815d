/* checkpoint.c - stage files: one stage's parameters, AdamW state and
 * extra per-parameter state (kern_stage_extra).
 *
 * Layout, little-endian:
 *   char     magic[8]      "SHOALSTG"
 *   uint32   version       KERN_STAGE_FILE_VERSION (4; 1 to 3 are read too)
 *   int32    vocab, context, d_model, heads, layers
 *   int32    layer_start, layer_end, first, last
 *   int32    extras        bit i set: extra buffer i follows (from version 2);
 *                          bit 30 (STAGE_FILE_NO_MOMENTS): the moments are
 *                          left out, zero (saved so at AdamW step 0 when
 *                          they are all zero: a third of the bytes)
 *   int32    architecture, kv_heads, ffn_dim, tied,
 *            rope_scaling.original_context          (from version 3)
 *   int32    head_dim, sliding_window               (version 4)
 *   float64  norm_eps, rope_theta, rope_scaling.factor,
 *            low_freq_factor, high_freq_factor       (from version 3)
 *   uint64   step          AdamW steps taken
 *   uint64   n             floats per buffer
 *   uint64   source_bytes  bytes of the source section, 0: none (version 4)
 *   float32  params[n], adam_m[n], adam_v[n], then each extra[n] in order
 *   char     source[source_bytes]   the stage's file_source (version 4)
 *   uint64   checksum      FNV-1a 64 of every byte before it
 *
 * The header is read and checked by stage_file.c (kern_stage_file_peek).
 */
#include "../kernels/stage.h"
#include "checkpoint.h"
#include "stage_file.h"

#include <stdlib.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "stage files are written in host order, which must be little-endian"
#endif

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

static void header_of_stage(const struct kern_stage *st, struct stage_file_header *h)
{
    int32_t extras = 0;
    for (int i = 0; i < KERN_EXTRA_COUNT; i++)
        extras |= st->extra[i] ? 1 << i : 0;
    *h = (struct stage_file_header){ .version = KERN_STAGE_FILE_VERSION, .model = st->model,
                                     .layer_start = st->spec.layer_start, .layer_end = st->spec.layer_end,
                                     .first = !!st->spec.first, .last = !!st->spec.last, .extras = extras,
                                     .step = st->step, .n = st->n_params,
                                     .source_bytes = st->file_source_len };
}

int kern_stage_set_source(struct kern_stage *st, const void *bytes, size_t len, struct kern_err *err)
{
    char *copy = NULL;
    if (len > KERN_STAGE_SOURCE_MAX)
        return kern_fail(err, "source: %zu bytes, over the %u a stage file holds", len, KERN_STAGE_SOURCE_MAX);
    if (len && !(copy = malloc(len)))
        return kern_fail(err, "source: out of memory");
    if (len)
        memcpy(copy, bytes, len);
    free(st->file_source);
    st->file_source = copy;
    st->file_source_len = len;
    return 0;
}

const char *kern_stage_source(const struct kern_stage *st, size_t *len)
{
    *len = st->file_source_len;
    return st->file_source;
}

int kern_stage_save(struct kern_stage *st, FILE *f, struct kern_err *err)
{
    static const enum kern_buffer order[3] = {KERN_PARAMS, KERN_ADAM_M, KERN_ADAM_V};
    struct stage_file_header h;
    unsigned char raw[STAGE_FILE_HEADER_MAX];
    float *buf = malloc(st->n_params * sizeof *buf);
    uint64_t sum = FNV_START;
    int rc = -1;

    if (!buf) {
        kern_fail(err, "save: out of memory");
        goto out;
    }
    header_of_stage(st, &h);
    int no_moments = st->step == 0;   /* at step 0, when both moments are zero */
    for (int i = 1; i < 3 && no_moments; i++) {
        if (st->ops->read(st, order[i], buf, err))
            goto out;
        for (size_t k = 0; k < st->n_params && no_moments; k++)
            no_moments = buf[k] == 0;
    }
    if (no_moments)
        h.extras |= STAGE_FILE_NO_MOMENTS;
    size_t hb = stage_file_header_pack(&h, raw);
    sum = fnv1a(sum, raw, hb);
    if (fwrite(raw, 1, hb, f) != hb) {
        kern_fail(err, "save: write failed");
        goto out;
    }
    for (int i = 0; i < 3 + KERN_EXTRA_COUNT; i++) {
        const float *b = buf;
        if ((i >= 3 && !(b = st->extra[i - 3])) || (i >= 1 && i < 3 && no_moments))
            continue;
        if (i < 3 && st->ops->read(st, order[i], buf, err))
            goto out;
        sum = fnv1a(sum, b, st->n_params * sizeof *b);
        if (fwrite(b, sizeof *b, st->n_params, f) != st->n_params) {
            kern_fail(err, "save: write failed");
            goto out;
        }
    }
    sum = fnv1a(sum, st->file_source, st->file_source_len);
    if (st->file_source_len && fwrite(st->file_source, 1, st->file_source_len, f) != st->file_source_len) {
        kern_fail(err, "save: write failed");
        goto out;
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

int kern_stage_load(struct kern_stage *st, FILE *f, struct kern_err *err)
{
    struct stage_file_header want, got;
    unsigned char raw[STAGE_FILE_HEADER_MAX];
    size_t raw_len;
    float *buf[3 + KERN_EXTRA_COUNT] = {NULL};
    char *source = NULL;
    uint64_t sum = FNV_START, stored;
    int rc = -1;

    if (stage_file_header_read(f, &got, raw, &raw_len, err))
        goto out;
    sum = fnv1a(sum, raw, raw_len);
    header_of_stage(st, &want);
    /* the model and layers must match; the extras are the file's to say */
    if (!model_config_equal(&got.model, &want.model) || got.layer_start != want.layer_start ||
        got.layer_end != want.layer_end || !got.first != !want.first || !got.last != !want.last ||
        got.n != want.n) {
        char a[200], b[200];
        model_config_text(&got.model, a, sizeof a);
        model_config_text(&want.model, b, sizeof b);
        kern_fail(err, "load: the file holds layers " LAYER_RANGE_FMT " of a model (%s); this stage is layers "
                  LAYER_RANGE_FMT " of (%s)", LAYER_RANGE(got.layer_start, got.layer_end), a,
                  LAYER_RANGE(want.layer_start, want.layer_end), b);
        goto out;
    }
    int no_moments = !!(got.extras & STAGE_FILE_NO_MOMENTS);
    for (int i = 0; i < 3 + KERN_EXTRA_COUNT; i++) {
        if (i >= 3 && !(got.extras & (1 << (i - 3))))
            continue;
        int absent = i >= 1 && i < 3 && no_moments;   /* zero moments, not in the file */
        buf[i] = absent ? calloc(st->n_params, sizeof *buf[i]) : malloc(st->n_params * sizeof *buf[i]);
        if (!buf[i]) {
            kern_fail(err, "load: out of memory");
            goto out;
        }
        if (absent)
            continue;
        if (fread(buf[i], sizeof *buf[i], st->n_params, f) != st->n_params) {
            kern_fail(err, "load: file is truncated");
            goto out;
        }
        sum = fnv1a(sum, buf[i], st->n_params * sizeof *buf[i]);
    }
    if (got.source_bytes && !(source = malloc(got.source_bytes))) {
        kern_fail(err, "load: out of memory");
        goto out;
    }
    if (got.source_bytes && fread(source, 1, got.source_bytes, f) != got.source_bytes) {
        kern_fail(err, "load: file is truncated (in its source section)");
        goto out;
    }
    sum = fnv1a(sum, source, got.source_bytes);
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
    free(st->file_source);
    st->file_source = source;
    st->file_source_len = got.source_bytes;
    source = NULL;
    st->step = got.step;
    kern_stage_drop_in_flight(st);
    rc = 0;
out:
    for (int i = 0; i < 3 + KERN_EXTRA_COUNT; i++)
        free(buf[i]);
    free(source);
    return rc;
}

int kern_stage_file_params(FILE *f, struct model_config *model, struct kern_stage_spec *spec, float **params,
                           uint64_t *n, struct kern_err *err)
{
    struct stage_file_header h;
    unsigned char raw[STAGE_FILE_HEADER_MAX], chunk[1 << 16];
    size_t raw_len;
    uint64_t sum = FNV_START, stored;
    int rc = -1;
    *params = NULL;
    if (kern_stage_file_peek(f, model, spec, NULL, err) != 0 || fseek(f, 0, SEEK_SET) != 0 ||
        stage_file_header_read(f, &h, raw, &raw_len, err) != 0)
        goto out;
    sum = fnv1a(sum, raw, raw_len);
    if (!(*params = malloc(h.n ? h.n * sizeof **params : 1))) {
        kern_fail(err, "params: out of memory for %llu floats", (unsigned long long)h.n);
        goto out;
    }
    if (fread(*params, sizeof **params, h.n, f) != h.n) {
        kern_fail(err, "params: file is truncated");
        goto out;
    }
    sum = fnv1a(sum, *params, h.n * sizeof **params);
    /* the moments (unless left out), the extras and the source: summed,
     * not kept (kern_stage_file_source reads the source) */
    uint64_t rest = (uint64_t)(h.extras & STAGE_FILE_NO_MOMENTS ? 0 : 2);
    for (int i = 0; i < KERN_EXTRA_COUNT; i++)
        rest += (h.extras >> i) & 1;
    for (uint64_t left = rest * h.n * sizeof(float) + h.source_bytes; left > 0;) {
        size_t want = left < sizeof chunk ? (size_t)left : sizeof chunk;
        if (fread(chunk, 1, want, f) != want) {
            kern_fail(err, "params: file is truncated");
            goto out;
        }
        sum = fnv1a(sum, chunk, want);
        left -= want;
    }
    int has_sum = fread(&stored, sizeof stored, 1, f) == 1;
    if (!has_sum || stored != sum || fgetc(f) != EOF) {
        kern_fail(err, "params: %s", !has_sum ? "file is truncated (no checksum)"
                                   : stored != sum ? "checksum mismatch: the file is corrupt"
                                                   : "trailing bytes after the checksum");
        goto out;
    }
    *n = h.n;
    rc = 0;
out:
    if (rc != 0) {
        free(*params);
        *params = NULL;
    }
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
        if (!model_config_equal(&from->model, &st->model)) {
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
    for (int k = 0; k < n_sources; k++)   /* the first source's file_source that there is */
        if (sources[k]->file_source_len) {
            if (kern_stage_set_source(st, sources[k]->file_source, sources[k]->file_source_len, err))
                goto out;
            break;
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

int kern_stage_file_source(FILE *f, char **text, size_t *len, struct kern_err *err)
{
    struct stage_file_header h;
    struct model_config m;
    struct kern_stage_spec sp;
    unsigned char raw[STAGE_FILE_HEADER_MAX];
    size_t raw_len;
    uint64_t skip;
    *text = NULL;
    *len = 0;
    if (fseek(f, 0, SEEK_SET) != 0)
        return kern_fail(err, "source: the file is not seekable");
    if (kern_stage_file_peek(f, &m, &sp, NULL, err) != 0 || stage_file_header_read(f, &h, raw, &raw_len, err) != 0)
        return -1;
    if (h.source_bytes == 0)
        return 0;
    skip = (uint64_t)raw_len + (uint64_t)4 * h.n * (uint64_t)stage_file_buffers(&h);   /* bytes; peek checked them */
    if (!(*text = malloc(h.source_bytes + 1)))
        return kern_fail(err, "source: out of memory");
    if (fseeko(f, (off_t)skip, SEEK_SET) != 0 || fread(*text, 1, h.source_bytes, f) != h.source_bytes) {
        free(*text);
        *text = NULL;
        return kern_fail(err, "source: file is truncated");
    }
    (*text)[h.source_bytes] = '\0';
    *len = h.source_bytes;
    return 0;
}
