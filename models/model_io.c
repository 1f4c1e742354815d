/* model_io.c - the whole model's flat buffer (model_io.h): its size, its
 * split into the buffers of a layer split and the join back, whether its
 * head is tied; and what the format readers share: a file read from memory
 * or a FILE*, and fp16/bf16 to fp32.
 *
 * Offsets are never computed here: the whole model and each stage get their
 * tensor tables from layout.c (kern_layout_build on a stage shell), and
 * tensors move between them by name, as kern_stage_assemble moves them
 * between stage objects.  A stage's tensors are a subsequence of the whole
 * model's in the same order, so one walk over both finds them all.
 */
#include "model_io_impl.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* Floats of the whole model (common/model.c's count for a stage holding
 * every layer); 0 on overflow.  m has passed kern_model_check. */
static uint64_t whole_floats(const struct model_config *m)
{
    return model_stage_params(m, 0, m->layers, 1, 1);
}

/* kern_model_check, the layer cap and the parameter cap. */
static int check_whole(const struct model_config *m, struct kern_err *err)
{
    if (kern_model_check(m, err))
        return -1;
    if (m->layers > KERN_MODEL_MAX_LAYERS)
        return kern_fail(err, "model: %d layers, more than the %d this build reads", m->layers,
                         KERN_MODEL_MAX_LAYERS);
    uint64_t n = whole_floats(m);
    if (n == 0 || n > KERN_MODEL_MAX_PARAMS)
        return kern_fail(err, "model: V=%d T=%d C=%d F=%d L=%d is over the limit of %llu parameters",
                         m->vocab, m->context, m->d_model, m->ffn_dim, m->layers,
                         (unsigned long long)KERN_MODEL_MAX_PARAMS);
    return 0;
}

int io_layout(const struct model_config *m, int start, int end, struct kern_stage *shell,
              struct kern_err *err)
{
    memset(shell, 0, sizeof *shell);
    if (check_whole(m, err))
        return -1;
    if (start < 0 || end < start || end > m->layers)
        return kern_fail(err, "stage: a layer range of layer_start %d and layer_end %d is not within the "
                         "model's layers " LAYER_RANGE_FMT, start, end, LAYER_RANGE(0, m->layers));
    shell->model = *m;
    model_config_normalise(&shell->model);
    shell->spec.layer_start = start;
    shell->spec.layer_end = end;
    shell->spec.first = start == 0;
    shell->spec.last = end == m->layers;
    return kern_layout_build(shell, err);
}

void io_layout_free(struct kern_stage *shell)
{
    free(shell->tensors);
    shell->tensors = NULL;
}

int io_check_gpt2(const struct model_config *m, const char *format, struct kern_err *err)
{
    if (m->arch != MODEL_GPT2)
        return kern_fail(err, "%s: the model is architecture \"%s\", and this format holds GPT-2", format,
                         model_families[m->arch < MODEL_ARCH_COUNT ? m->arch : MODEL_GPT2].name);
    return 0;
}

size_t kern_model_param_count(const struct model_config *m)
{
    struct kern_err err;
    return check_whole(m, &err) ? 0 : (size_t)whole_floats(m);
}

/* The layout of the stage spec describes, whose first/last flags must be
 * what its range makes them. */
static int stage_layout(const struct model_config *m, const struct kern_stage_spec *spec,
                        struct kern_stage *shell, struct kern_err *err)
{
    if (io_layout(m, spec->layer_start, spec->layer_end, shell, err))
        return -1;
    if (!!spec->first != shell->spec.first || !!spec->last != shell->spec.last) {
        io_layout_free(shell);
        return kern_fail(err, "stage: layers " LAYER_RANGE_FMT " of %d make first=%d last=%d, not first=%d "
                         "last=%d", LAYER_RANGE(spec->layer_start, spec->layer_end), m->layers, shell->spec.first,
                         shell->spec.last, !!spec->first, !!spec->last);
    }
    return 0;
}

size_t kern_model_stage_param_count(const struct model_config *m, const struct kern_stage_spec *spec)
{
    struct kern_stage s;
    struct kern_err err;
    if (stage_layout(m, spec, &s, &err))
        return 0;
    size_t n = s.n_params;
    io_layout_free(&s);
    return n;
}

/* For each tensor of `part` (a stage), its index in `whole`: the walk that
 * the shared order allows. */
static void match_tensors(const struct kern_stage *whole, const struct kern_stage *part, int *index)
{
    int j = 0;
    for (int i = 0; i < part->n_tensors; i++) {
        while (j < whole->n_tensors && strcmp(whole->tensors[j].name, part->tensors[i].name) != 0)
            j++;
        assert(j < whole->n_tensors && whole->tensors[j].count == part->tensors[i].count);
        index[i] = j++;
    }
}

int kern_model_split(const struct model_config *m, const float *whole,
                     const struct kern_stage_spec *spec, float *stage, struct kern_err *err)
{
    struct kern_stage w, s;
    int *index = NULL, rc = -1;
    if (stage_layout(m, spec, &s, err))
        return -1;
    if (io_layout(m, 0, m->layers, &w, err))
        goto out;
    if (!(index = malloc((size_t)s.n_tensors * sizeof *index + 1))) {
        kern_fail(err, "split: out of memory");
        goto out;
    }
    match_tensors(&w, &s, index);
    for (int i = 0; i < s.n_tensors; i++)
        memcpy(stage + s.tensors[i].offset, whole + w.tensors[index[i]].offset,
               s.tensors[i].count * sizeof(float));
    rc = 0;
out:
    free(index);
    io_layout_free(&w);
    io_layout_free(&s);
    return rc;
}

int kern_model_join(const struct model_config *m, const struct kern_stage_spec *specs,
                    const float *const *stages, int n, float *whole, struct kern_err *err)
{
    struct kern_stage w, s;
    int *from = NULL, *index = NULL, rc = -1;
    size_t *at = NULL;
    memset(&s, 0, sizeof s);
    if (io_layout(m, 0, m->layers, &w, err))
        return -1;
    from = malloc((size_t)w.n_tensors * sizeof *from);
    at = malloc((size_t)w.n_tensors * sizeof *at);
    index = malloc((size_t)w.n_tensors * sizeof *index);
    if (!from || !at || !index) {
        kern_fail(err, "join: out of memory");
        goto out;
    }
    for (int i = 0; i < w.n_tensors; i++)
        from[i] = -1;
    for (int k = 0; k < n; k++) {
        if (stage_layout(m, &specs[k], &s, err))
            goto out;
        match_tensors(&w, &s, index);
        for (int i = 0; i < s.n_tensors; i++)
            if (from[index[i]] < 0) {
                from[index[i]] = k;
                at[index[i]] = s.tensors[i].offset;
            }
        io_layout_free(&s);
    }
    for (int i = 0; i < w.n_tensors; i++)
        if (from[i] < 0) {
            kern_fail(err, "join: no stage holds tensor %s", w.tensors[i].name);
            goto out;
        }
    for (int i = 0; i < w.n_tensors; i++)
        memcpy(whole + w.tensors[i].offset, stages[from[i]] + at[i], w.tensors[i].count * sizeof(float));
    rc = 0;
out:
    free(from);
    free(at);
    free(index);
    io_layout_free(&w);
    return rc;
}

int kern_model_head_tied(const struct model_config *m, const float *whole)
{
    size_t n = kern_model_param_count(m), vc = (size_t)m->vocab * (size_t)m->d_model;
    /* wte is first in the buffer and head last */
    return n != 0 && memcmp(whole, whole + n - vc, vc * sizeof(float)) == 0;
}

/* ---- reading files ---------------------------------------------------- */

void io_src_mem(struct io_src *s, const void *data, size_t size)
{
    s->mem = data;
    s->f = NULL;
    s->size = size;
}

int io_src_file(struct io_src *s, FILE *f, struct kern_err *err)
{
    off_t size = fseeko(f, 0, SEEK_END) == 0 ? ftello(f) : -1;
    if (size < 0)
        return kern_fail(err, "cannot find the size of the file (a pipe? give a regular file)");
    s->mem = NULL;
    s->f = f;
    s->size = (uint64_t)size;
    return 0;
}

int io_read(const struct io_src *s, uint64_t off, void *dst, size_t n, struct kern_err *err)
{
    if (off > s->size || n > s->size - off)
        return kern_fail(err, "bytes [%llu,%llu) lie past the end of the %llu-byte file",
                         (unsigned long long)off, (unsigned long long)off + n,
                         (unsigned long long)s->size);
    if (s->mem) {
        memcpy(dst, s->mem + off, n);
        return 0;
    }
    if (fseeko(s->f, (off_t)off, SEEK_SET) != 0 || fread(dst, 1, n, s->f) != n)
        return kern_fail(err, "cannot read bytes [%llu,%llu) of the file", (unsigned long long)off,
                         (unsigned long long)off + n);
    return 0;
}

size_t io_dtype_size(enum io_dtype t)
{
    return t == IO_F32 ? 4 : 2;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float f;
    if (exp == 0 && man != 0) { /* subnormal: man x 2^-24 */
        f = (float)man * 0x1p-24f;
        return sign ? -f : f;
    }
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | (man << 13);
    else if (exp)
        bits = sign | ((exp + 112) << 23) | (man << 13);
    else
        bits = sign;
    memcpy(&f, &bits, 4);
    return f;
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int io_read_floats(const struct io_src *s, uint64_t off, enum io_dtype t, size_t count,
                   float *dst, const char *what, struct kern_err *err)
{
    if (t == IO_F32) {
        if (io_read(s, off, dst, count * sizeof(float), err))
            return -1;
    } else {
        enum { CHUNK = 4096 };
        uint16_t half[CHUNK];
        for (size_t done = 0; done < count; done += CHUNK) {
            size_t k = count - done < CHUNK ? count - done : CHUNK;
            if (io_read(s, off + 2 * done, half, 2 * k, err))
                return -1;
            for (size_t i = 0; i < k; i++)
                dst[done + i] = t == IO_F16 ? f16_to_f32(half[i]) : bf16_to_f32(half[i]);
        }
    }
    for (size_t i = 0; i < count; i++)
        if (!isfinite(dst[i]))
            return kern_fail(err, "tensor %s holds %s at element %zu", what,
                             isnan(dst[i]) ? "NaN" : "an infinity", i);
    return 0;
}

int io_fail_in(struct kern_err *err, const char *prefix)
{
    if (err) {
        char msg[KERN_ERR_LEN - 48]; /* room for the prefix; the end of a long message is cut */
        memcpy(msg, err->msg, sizeof msg - 1);
        msg[sizeof msg - 1] = '\0';
        snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, msg);
    }
    return -1;
}

int io_write(FILE *f, const void *p, size_t n, const char *who, struct kern_err *err)
{
    if (n && fwrite(p, 1, n, f) != n)
        return kern_fail(err, "%s: write failed", who);
    return 0;
}
