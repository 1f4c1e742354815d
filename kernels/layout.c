/* layout.c - the flat parameter buffer of a stage: which tensors it holds, in
 * what order, and their deterministic initial values, all read from the
 * model family's row (common/model.c).
 *
 * Buffer order: the family's embedding tensors on the first stage (gpt2:
 * wte (V,C), wpe (T_ctx,C); llama: wte), then each block held, then the
 * head's tensors on the last stage (gpt2: lnfw, lnfb, head (V,C); llama:
 * lnfw, head).
 *
 * Initial values follow GPT-2: matrices and embeddings N(0, 0.02), the
 * projections that write into the residual stream N(0, 0.02/sqrt(2L)),
 * biases 0, norm weights 1; a tied head starts equal to wte.  Each value is
 * a pure function of (seed, tensor identity, element index), so block i
 * gets the same weights on any stage.
 */
#include "stage.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERN_STREAM_SPECIAL (1ull << 40) /* streams of the embedding's and head's tensors */

size_t kern_block_offset(const struct model_config *m, int t)
{
    const struct model_tensor *bt = model_families[m->arch].tensors[MODEL_BLOCK];
    size_t off = 0;
    for (int i = 0; i < t; i++)
        off += model_extent_size(m, bt[i].rows) * model_extent_size(m, bt[i].cols);
    return off;
}

int kern_fail(struct kern_err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void add_tensor(struct kern_stage *st, const char *name, const struct model_tensor *desc)
{
    struct kern_tensor *t = &st->tensors[st->n_tensors++];
    size_t rows = model_extent_size(&st->model, desc->rows), cols = model_extent_size(&st->model, desc->cols);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = st->n_params;
    t->count = rows * cols;
    t->rows = (int)rows;
    t->cols = (int)cols;
    t->decay = desc->decay;
    st->n_params += t->count;
}

const char *const kern_llama_names[LT_COUNT] = {
    [LT_LN1W] = "ln1w", [LT_QW] = "qw", [LT_OW] = "ow", [LT_LN2W] = "ln2w", [LT_GATEW] = "gatew",
    [LT_DOWNW] = "downw", [LT_QB] = "qb", [LT_QNORMW] = "qnormw", [LT_KNORMW] = "knormw",
};

/* The offset in a block of the family's block tensor `name`, or
 * KERN_ABSENT. */
static size_t block_offset_of(const struct model_config *m, const char *name)
{
    const struct model_family *f = &model_families[m->arch];
    for (int t = 0; t < f->n_tensors[MODEL_BLOCK]; t++)
        if (strcmp(f->tensors[MODEL_BLOCK][t].name, name) == 0)
            return kern_block_offset(m, t);
    return KERN_ABSENT;
}

/* The offset of the stage's tensor `name`, or KERN_ABSENT. */
static size_t offset_of(const struct kern_stage *st, const char *name)
{
    for (int i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return st->tensors[i].offset;
    return KERN_ABSENT;
}

int kern_layout_build(struct kern_stage *st, struct kern_err *err)
{
    const struct model_config *m = &st->model;
    const struct kern_stage_spec *s = &st->spec;
    const struct model_family *f = &model_families[m->arch];
    int blocks = s->layer_end - s->layer_start;
    int max = f->n_tensors[MODEL_EMBED] + blocks * f->n_tensors[MODEL_BLOCK] + f->n_tensors[MODEL_HEAD];

    st->tensors = calloc((size_t)max, sizeof *st->tensors);
    if (!st->tensors)
        return kern_fail(err, "out of memory for the tensor table of %d tensors", max);
    st->n_tensors = 0;
    st->n_params = 0;
    for (int i = 0; s->first && i < f->n_tensors[MODEL_EMBED]; i++)
        add_tensor(st, f->tensors[MODEL_EMBED][i].name, &f->tensors[MODEL_EMBED][i]);
    st->off_block0 = st->n_params;
    st->block_floats = model_part_params(m, MODEL_BLOCK);
    for (int l = s->layer_start; l < s->layer_end; l++)
        for (int t = 0; t < f->n_tensors[MODEL_BLOCK]; t++) {
            char name[32];
            snprintf(name, sizeof name, "h%d.%s", l, f->tensors[MODEL_BLOCK][t].name);
            add_tensor(st, name, &f->tensors[MODEL_BLOCK][t]);
        }
    for (int i = 0; s->last && i < f->n_tensors[MODEL_HEAD]; i++)
        add_tensor(st, f->tensors[MODEL_HEAD][i].name, &f->tensors[MODEL_HEAD][i]);
    st->off_wte = offset_of(st, "wte");
    st->off_wpe = offset_of(st, "wpe");
    st->off_lnfw = offset_of(st, "lnfw");
    st->off_lnfb = offset_of(st, "lnfb");
    st->off_head = offset_of(st, "head");
    for (int r = 0; r < LT_COUNT; r++)
        st->llama_off[r] = block_offset_of(m, kern_llama_names[r]);
    /* the row's fields and its tensors say the same */
    assert(f->blocks != MODEL_BLOCKS_LLAMA ||
           ((st->llama_off[LT_QB] != KERN_ABSENT) == f->qkv_bias &&
            (st->llama_off[LT_QNORMW] != KERN_ABSENT) == (f->qk_norm != MODEL_QK_NONE)));
    return 0;
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in (0,1): 53 random bits, never 0. */
static double uniform01(uint64_t key, uint64_t i)
{
    uint64_t r = splitmix64(key ^ splitmix64(i));
    return ((double)(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* std * N(0,1) for element i of the tensor with this stream (Box-Muller). */
static void fill_normal(float *dst, size_t n, uint64_t seed, uint64_t stream, double std)
{
    uint64_t key = splitmix64(seed ^ splitmix64(stream));
    for (size_t i = 0; i < n; i++) {
        double u1 = uniform01(key, 2 * (uint64_t)i);
        double u2 = uniform01(key, 2 * (uint64_t)i + 1);
        dst[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
}

static void fill_const(float *dst, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = v;
}

/* Fills one tensor of `n` floats as its description says. */
static void init_tensor(float *dst, size_t n, const struct model_tensor *t, uint64_t seed, uint64_t stream,
                        int layers)
{
    switch (t->init) {
    case MI_ZEROS: fill_const(dst, n, 0.0f); break;
    case MI_ONES: fill_const(dst, n, 1.0f); break;
    case MI_NORMAL: fill_normal(dst, n, seed, stream, 0.02); break;
    case MI_NORMAL_OUT: fill_normal(dst, n, seed, stream, 0.02 / sqrt(2.0 * layers)); break;
    }
}

void kern_layout_init_params(const struct kern_stage *st, float *params)
{
    const struct model_config *m = &st->model;
    const struct model_family *f = &model_families[m->arch];
    const struct kern_stage_spec *s = &st->spec;
    int k = 0; /* index into st->tensors, which follows the same order */

    for (int i = 0; s->first && i < f->n_tensors[MODEL_EMBED]; i++, k++) {
        const struct model_tensor *t = &f->tensors[MODEL_EMBED][i];
        init_tensor(params + st->tensors[k].offset, st->tensors[k].count, t, s->seed,
                    KERN_STREAM_SPECIAL + (uint64_t)t->stream, m->layers);
    }
    for (int l = s->layer_start; l < s->layer_end; l++)
        for (int i = 0; i < f->n_tensors[MODEL_BLOCK]; i++, k++) {
            const struct model_tensor *t = &f->tensors[MODEL_BLOCK][i];
            init_tensor(params + st->tensors[k].offset, st->tensors[k].count, t, s->seed,
                        (uint64_t)l * 64 + (uint64_t)t->stream, m->layers);
        }
    for (int i = 0; s->last && i < f->n_tensors[MODEL_HEAD]; i++, k++) {
        const struct model_tensor *t = &f->tensors[MODEL_HEAD][i];
        /* A tied head starts as the embedding it shares (wte's stream). */
        int tied_head = m->tied && strcmp(t->name, "head") == 0;
        init_tensor(params + st->tensors[k].offset, st->tensors[k].count, t, s->seed,
                    KERN_STREAM_SPECIAL + (uint64_t)(tied_head ? f->tensors[MODEL_EMBED][0].stream : t->stream),
                    m->layers);
    }
}
