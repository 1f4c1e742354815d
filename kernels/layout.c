/* layout.c - the flat parameter buffer of a stage: which tensors it holds, in
 * what order, and their deterministic initial values.
 *
 * Buffer order: [wte (V,C), wpe (T_ctx,C)] on the first stage, then each block
 * held (12 tensors, see enum kern_block_tensor), then [lnfw (C), lnfb (C),
 * head (V,C)] on the last stage.
 *
 * Initial values follow GPT-2: matrices and embeddings N(0, 0.02), the two
 * projections that write into the residual stream N(0, 0.02/sqrt(2L)), biases
 * 0, LayerNorm weights 1. Each value is a pure function of (seed, tensor
 * identity, element index), so block i gets the same weights on any stage.
 */
#include "stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERN_STREAM_SPECIAL (1ull << 40) /* streams of non-block tensors */
enum { KS_WTE, KS_WPE, KS_LNFW, KS_LNFB, KS_HEAD };

static const struct {
    const char *name;
    int rows_c;  /* rows in units of C (0: vector) */
    int cols_c;  /* cols in units of C */
    int decay;
} block_tensors[KT_BLOCK_COUNT] = {
    [KT_LN1W] = {"ln1w", 0, 1, 0},     [KT_LN1B] = {"ln1b", 0, 1, 0},
    [KT_QKVW] = {"qkvw", 3, 1, 1},     [KT_QKVB] = {"qkvb", 0, 3, 0},
    [KT_ATTPROJW] = {"attprojw", 1, 1, 1}, [KT_ATTPROJB] = {"attprojb", 0, 1, 0},
    [KT_LN2W] = {"ln2w", 0, 1, 0},     [KT_LN2B] = {"ln2b", 0, 1, 0},
    [KT_FCW] = {"fcw", 4, 1, 1},       [KT_FCB] = {"fcb", 0, 4, 0},
    [KT_FCPROJW] = {"fcprojw", 1, 4, 1}, [KT_FCPROJB] = {"fcprojb", 0, 1, 0},
};

static size_t block_tensor_count(int C, int t)
{
    size_t rows = block_tensors[t].rows_c ? (size_t)block_tensors[t].rows_c * C : 1;
    return rows * (size_t)block_tensors[t].cols_c * C;
}

size_t kern_block_offset(int C, enum kern_block_tensor t)
{
    size_t off = 0;
    for (int i = 0; i < (int)t; i++)
        off += block_tensor_count(C, i);
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

static void add_tensor(struct kern_stage *st, const char *name, size_t rows, size_t cols,
                       int decay)
{
    struct kern_tensor *t = &st->tensors[st->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->offset = st->n_params;
    t->count = rows * cols;
    t->rows = (int)rows;
    t->cols = (int)cols;
    t->decay = decay;
    st->n_params += t->count;
}

int kern_layout_build(struct kern_stage *st, struct kern_err *err)
{
    const struct kern_model *m = &st->model;
    const struct kern_stage_spec *s = &st->spec;
    size_t C = (size_t)m->d_model;
    int blocks = s->layer_end - s->layer_start;
    int max = 2 + blocks * KT_BLOCK_COUNT + 3;

    st->tensors = calloc((size_t)max, sizeof *st->tensors);
    if (!st->tensors)
        return kern_fail(err, "out of memory for the tensor table of %d tensors", max);
    st->n_tensors = 0;
    st->n_params = 0;
    if (s->first) {
        st->off_wte = st->n_params;
        add_tensor(st, "wte", (size_t)m->vocab, C, 1);
        st->off_wpe = st->n_params;
        add_tensor(st, "wpe", (size_t)m->context, C, 1);
    }
    st->off_block0 = st->n_params;
    st->block_floats = 0;
    for (int t = 0; t < KT_BLOCK_COUNT; t++)
        st->block_floats += block_tensor_count((int)C, t);
    for (int l = s->layer_start; l < s->layer_end; l++)
        for (int t = 0; t < KT_BLOCK_COUNT; t++) {
            char name[32];
            size_t rows = block_tensors[t].rows_c ? (size_t)block_tensors[t].rows_c * C : 1;
            snprintf(name, sizeof name, "h%d.%s", l, block_tensors[t].name);
            add_tensor(st, name, rows, (size_t)block_tensors[t].cols_c * C,
                       block_tensors[t].decay);
        }
    if (s->last) {
        st->off_lnfw = st->n_params;
        add_tensor(st, "lnfw", 1, C, 0);
        st->off_lnfb = st->n_params;
        add_tensor(st, "lnfb", 1, C, 0);
        st->off_head = st->n_params;
        add_tensor(st, "head", (size_t)m->vocab, C, 1);
    }
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

void kern_layout_init_params(const struct kern_stage *st, float *params)
{
    const struct kern_model *m = &st->model;
    const struct kern_stage_spec *s = &st->spec;
    int C = m->d_model;
    uint64_t seed = s->seed;
    double std = 0.02, proj_std = 0.02 / sqrt(2.0 * m->layers);

    if (s->first) {
        fill_normal(params + st->off_wte, (size_t)m->vocab * C, seed,
                    KERN_STREAM_SPECIAL + KS_WTE, std);
        fill_normal(params + st->off_wpe, (size_t)m->context * C, seed,
                    KERN_STREAM_SPECIAL + KS_WPE, std);
    }
    for (int l = s->layer_start; l < s->layer_end; l++) {
        float *blk = params + st->off_block0 + (size_t)(l - s->layer_start) * st->block_floats;
        for (int t = 0; t < KT_BLOCK_COUNT; t++) {
            float *p = blk + kern_block_offset(C, t);
            size_t n = block_tensor_count(C, t);
            uint64_t stream = (uint64_t)l * 64 + (uint64_t)t;
            if (t == KT_LN1W || t == KT_LN2W)
                fill_const(p, n, 1.0f);
            else if (!block_tensors[t].rows_c)
                fill_const(p, n, 0.0f);
            else
                fill_normal(p, n, seed, stream,
                            (t == KT_ATTPROJW || t == KT_FCPROJW) ? proj_std : std);
        }
    }
    if (s->last) {
        fill_const(params + st->off_lnfw, (size_t)C, 1.0f);
        fill_const(params + st->off_lnfb, (size_t)C, 0.0f);
        fill_normal(params + st->off_head, (size_t)m->vocab * C, seed,
                    KERN_STREAM_SPECIAL + KS_HEAD, std);
    }
}
