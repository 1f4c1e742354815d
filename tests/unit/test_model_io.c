/* test_model_io.c - models/model_io.h: GPT-2 weights in llm.c's and
 * Hugging Face's formats, in and out.  Files are written by the test
 * itself (model_io_fixture.h: known weights from a formula, writers that
 * share no code with kernels/), imported, checked tensor by tensor by name
 * (transposes included), run forward against a stage whose weights were
 * written into it directly and against a GPT-2 forward in double; exports
 * read back by a minimal reader of the test's own and re-imported bit for
 * bit; malformed files refused with the outputs untouched.
 *
 * SHOAL_WRITE_GPT2_SEEDS=DIR also writes the fuzz targets' seeds into
 * DIR/fuzz_gpt2_llmc and DIR/fuzz_safetensors (tests/fuzz/seeds/). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/checkpoint.h"
#include "../../models/model_io.h"
#include "model_io_fixture.h"

static const struct kern_device cpu_dev = {KERN_CPU, 0};
/* odd V (not a multiple of 128), several heads and blocks */
static const struct model_config M = {.vocab = 67, .context = 16, .d_model = 32, .heads = 4, .layers = 3};
enum { FT = 8 }; /* tokens of the forward checks */

static struct kern_stage *new_stage(const struct model_config *m, int start, int end, int T)
{
    struct kern_stage_spec s = {.layer_start = start, .layer_end = end, .first = start == 0,
                                .last = end == m->layers, .micro_batch = 1, .seq_len = T, .in_flight = 1,
                                .seed = 5};
    struct kern_stage *st;
    struct kern_err err = {{0}};
    if (kern_stage_new(&cpu_dev, m, &s, &st, &err))
        fail_msg("kern_stage_new: %s", err.msg);
    return st;
}

/* got equals want tensor by tensor; the first that does not is named. */
static void expect_params(const struct model_config *m, const float *got, const float *want, const char *what)
{
    struct kern_stage *whole = new_stage(m, 0, m->layers, 1);
    for (int i = 0; i < kern_stage_tensor_count(whole); i++) {
        const struct kern_tensor *t = kern_stage_tensor(whole, i);
        for (size_t j = 0; j < t->count; j++)
            if (memcmp(&got[t->offset + j], &want[t->offset + j], sizeof(float)) != 0)
                fail_msg("%s: tensor %s element (%zu,%zu) is %g, want %g", what, t->name, j / (size_t)t->cols,
                         j % (size_t)t->cols, got[t->offset + j], want[t->offset + j]);
    }
    kern_stage_free(whole);
}

/* The formula's model in shoal's layout (tied: head = wte). */
static float *formula(const struct model_config *m, int tied)
{
    struct kern_stage *whole = new_stage(m, 0, m->layers, 1);
    float *p = formula_params(whole, tied);
    kern_stage_free(whole);
    return p;
}

/* A stage of the imported params and one with the formula written into it
 * directly give the same logits and loss, bit for bit, and both follow the
 * forward in double within fp32's error. */
static void check_forward(const struct model_config *m, const float *params, int tied, const char *what)
{
    struct kern_err err;
    struct kern_stage *a = new_stage(m, 0, m->layers, FT), *b = new_stage(m, 0, m->layers, FT);
    float *direct = formula_params(b, tied), la[FT * 67], lb[FT * 67], loss_a, loss_b;
    double ref[FT * 67];
    int32_t tok[FT], tgt[FT];
    assert_int_equal(m->vocab, 67);
    for (int t = 0; t < FT; t++) {
        tok[t] = (t * 29 + 3) % m->vocab;
        tgt[t] = (t * 13 + 1) % m->vocab;
    }
    assert_int_equal(kern_stage_write(a, KERN_PARAMS, params, &err), 0);
    assert_int_equal(kern_stage_write(b, KERN_PARAMS, direct, &err), 0);
    if (kern_stage_logits(a, tok, la, &err) || kern_stage_logits(b, tok, lb, &err))
        fail_msg("%s: logits: %s", what, err.msg);
    assert_memory_equal(la, lb, sizeof la);
    ref_forward(m, tok, FT, tied, ref);
    for (int i = 0; i < FT * m->vocab; i++)
        if (fabs(la[i] - ref[i]) > 1e-4 * (1 + fabs(ref[i])))
            fail_msg("%s: logit %d is %.7g, the forward in double says %.7g", what, i, la[i], ref[i]);
    assert_int_equal(kern_stage_forward(a, 0, tok, tgt, &loss_a, &err), 0);
    assert_int_equal(kern_stage_forward(b, 0, tok, tgt, &loss_b, &err), 0);
    assert_memory_equal(&loss_a, &loss_b, sizeof loss_a);
    free(direct);
    kern_stage_free(a), kern_stage_free(b);
}

/* The bytes a FILE* holds (open_memstream's buffer after fclose). */
struct sink {
    char *p;
    size_t n;
    FILE *f;
};
static void sink_open(struct sink *s)
{
    s->p = NULL;
    s->n = 0;
    s->f = open_memstream(&s->p, &s->n);
    assert_non_null(s->f);
}
static void sink_close(struct sink *s)
{
    assert_int_equal(fclose(s->f), 0);
}

/* A copy of bytes in a temporary file, at its start. */
static FILE *as_file(const void *p, size_t n)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    rewind(f);
    return f;
}

/* ---- llm.c ------------------------------------------------------------ */

static float *llmc_import(const struct bytes *b, struct model_config *m)
{
    struct kern_err err;
    float *p = NULL;
    if (kern_llmc_read(b->p, b->n, m, &p, &err))
        fail_msg("llmc import: %s", err.msg);
    return p;
}

/* Every tensor lands where it should, from fp32 and bf16 files, padded or
 * not, from memory and from a FILE*; the padding rows are dropped whatever
 * they hold; head = wte; the forward agrees. */
static void test_llmc_import(void **state)
{
    (void)state;
    static const struct { int Vp, bf16; float pad; } v[] = {{128, 0, 7.0f}, {67, 0, 0}, {128, 1, -3.0f}};
    float *want = formula(&M, 1);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct bytes b = llmc_file(&M, v[i].Vp, v[i].bf16, v[i].pad);
        struct model_config m;
        struct kern_err err;
        float *p = llmc_import(&b, &m), *q = NULL;
        assert_memory_equal(&m, &M, sizeof m);
        expect_params(&M, p, want, "llmc import");
        FILE *f = as_file(b.p, b.n);
        assert_int_equal(kern_llmc_read_file(f, &m, &q, &err), 0);
        assert_memory_equal(p, q, kern_model_param_count(&M) * sizeof(float));
        assert_int_equal(kern_model_head_tied(&M, p), 1);
        if (i == 0)
            check_forward(&M, p, 1, "llmc import");
        fclose(f);
        free(b.p), free(p), free(q);
    }
    /* NaN in a padding row is not read */
    struct bytes b = llmc_file(&M, 128, 0, NAN);
    struct model_config m;
    free(llmc_import(&b, &m));
    free(b.p), free(want);
}

/* Export writes exactly what llm.c writes (the test's file with zero
 * padding), re-imports bit for bit, and refuses an untied head. */
static void test_llmc_export(void **state)
{
    (void)state;
    struct bytes b = llmc_file(&M, 67, 0, 0), want = llmc_file(&M, 128, 0, 0);
    struct model_config m;
    struct kern_err err;
    struct sink s;
    float *p = llmc_import(&b, &m), *q;
    sink_open(&s);
    if (kern_llmc_write(s.f, &M, p, &err))
        fail_msg("llmc export: %s", err.msg);
    sink_close(&s);
    assert_int_equal(s.n, want.n);
    assert_memory_equal(s.p, want.p, want.n);
    struct bytes again = {(unsigned char *)s.p, s.n, s.n};
    q = llmc_import(&again, &m);
    assert_memory_equal(p, q, kern_model_param_count(&M) * sizeof(float));
    free(s.p), free(q);

    size_t head = kern_model_param_count(&M) - (size_t)M.vocab * M.d_model;
    p[head + 2 * M.d_model + 3] += 1.0f / 64;
    sink_open(&s);
    assert_int_equal(kern_llmc_write(s.f, &M, p, &err), -1);
    sink_close(&s);
    assert_int_equal(s.n, 0);
    assert_non_null(strstr(err.msg, "head differs"));
    assert_non_null(strstr(err.msg, "row 2, column 3"));
    assert_int_equal(kern_model_head_tied(&M, p), 0);
    free(s.p);

    struct model_config bad = M;
    bad.heads = 5;
    sink_open(&s);
    assert_int_equal(kern_llmc_write(s.f, &bad, p, &err), -1);
    sink_close(&s);
    assert_int_equal(s.n, 0);
    assert_non_null(strstr(err.msg, "multiple of heads"));
    free(s.p), free(p), free(b.p), free(want.p);
}

static const struct model_config sentinel_model = {.vocab = -7, .context = -7, .d_model = -7, .heads = -7, .layers = -7};
static float sentinel_param;

/* Reads that must fail: the message holds `msg`, and *model and *params
 * are as they were, from memory and from a FILE*. */
static void expect_refused(int (*mem)(const void *, size_t, struct model_config *, float **, struct kern_err *),
                           int (*file)(FILE *, struct model_config *, float **, struct kern_err *),
                           const void *data, size_t size, const char *msg, const char *why)
{
    for (int from_file = 0; from_file < 2; from_file++) {
        struct model_config m = sentinel_model;
        float *p = &sentinel_param;
        struct kern_err err = {{0}};
        FILE *f = from_file ? as_file(data, size) : NULL;
        int rc = from_file ? file(f, &m, &p, &err) : mem(data, size, &m, &p, &err);
        if (rc != -1 || !strstr(err.msg, msg))
            fail_msg("%s (%s): rc %d, said '%s', want '%s'", why, from_file ? "FILE*" : "memory", rc, err.msg, msg);
        assert_memory_equal(&m, &sentinel_model, sizeof m);
        assert_ptr_equal(p, &sentinel_param);
        if (f)
            fclose(f);
    }
}

static void test_llmc_bad(void **state)
{
    (void)state;
    enum { FLOATS_AT = 1024 / 4 };
    static const struct {
        const char *why;
        int field[2];      /* header ints to set, -1: none */
        int32_t value[2];
        long resize;       /* bytes added (negative: cut); LONG_MIN: keep 100 */
        long nan_at;       /* float index after the header to set NaN, -1: none */
        const char *msg;
    } bad[] = {
        {"short header", {-1, -1}, {0, 0}, LONG_MIN, -1, "shorter than the 1024-byte header"},
        {"wrong magic", {0, -1}, {1234, 0}, 0, -1, "magic 1234"},
        {"tokenizer file", {0, -1}, {20240328, 0}, 0, -1, "tokenizer"},
        {"version 2", {1, -1}, {2, 0}, 0, -1, "version 2"},
        {"zero layers", {4, -1}, {0, 0}, 0, -1, "num_layers is 0"},
        {"negative channels", {6, -1}, {-32, 0}, 0, -1, "channels is -32"},
        {"L = 2^30", {4, -1}, {1 << 30, 0}, 0, -1, "1073741824 layers"},
        {"V = 2^30", {3, 7}, {1 << 30, 1 << 30}, 0, -1, "too large"},
        {"padded vocab huge", {7, -1}, {INT_MAX, 0}, 0, -1, "padded_vocab_size"},
        {"context 2^31-1", {2, -1}, {INT_MAX, 0}, 0, -1, "too large"},
        {"heads do not divide C", {5, -1}, {5, 0}, 0, -1, "multiple of heads"},
        {"padded below V", {7, -1}, {60, 0}, 0, -1, "below vocab_size"},
        {"wrong shape: C", {6, -1}, {16, 0}, 0, -1, "makes"},
        {"wrong shape: L", {4, -1}, {2, 0}, 0, -1, "makes"},
        {"truncated data", {-1, -1}, {0, 0}, -4, -1, "makes"},
        {"trailing byte", {-1, -1}, {0, 0}, 1, -1, "makes"},
        {"NaN weight", {-1, -1}, {0, 0}, 0, 128 * 32 + 16 * 32 + 5, "tensor h0.ln1w holds NaN at element 5"},
    };
    struct bytes good = llmc_file(&M, 128, 0, 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = bad[i].resize == LONG_MIN ? 100 : (size_t)((long)good.n + bad[i].resize);
        unsigned char *b = calloc(n + 1, 1);
        assert_non_null(b);
        memcpy(b, good.p, n < good.n ? n : good.n);
        for (int k = 0; k < 2; k++)
            if (bad[i].field[k] >= 0)
                memcpy(b + 4 * bad[i].field[k], &bad[i].value[k], 4);
        if (bad[i].nan_at >= 0) {
            float nan = NAN;
            memcpy(b + 4 * (FLOATS_AT + bad[i].nan_at), &nan, 4);
        }
        expect_refused(kern_llmc_read, kern_llmc_read_file, b, n, bad[i].msg, bad[i].why);
        free(b);
    }
    free(good.p);
}

/* ---- safetensors ------------------------------------------------------ */

static int st_read_h4(const void *d, size_t n, struct model_config *m, float **p, struct kern_err *e)
{
    return kern_safetensors_read(d, n, 4, m, p, e);
}
static int st_read_file_h4(FILE *f, struct model_config *m, float **p, struct kern_err *e)
{
    return kern_safetensors_read_file(f, 4, m, p, e);
}

static float *st_import(const struct bytes *b, struct model_config *m)
{
    struct kern_err err;
    float *p = NULL;
    if (kern_safetensors_read(b->p, b->n, M.heads, m, &p, &err))
        fail_msg("safetensors import: %s", err.msg);
    return p;
}

/* Every tensor lands where it should, transposes included: with and
 * without the prefix, tied and untied, F32, F16 and BF16, mask buffers
 * skipped, data in any order; the forward agrees. */
static void test_safetensors_import(void **state)
{
    (void)state;
    static const struct st_opts v[] = {
        {.prefix = 1, .lm_head = 1},
        {.prefix = 0, .lm_head = 0, .masks = 1, .reverse = 1},
        {.prefix = 1, .lm_head = 0, .dtype = 1, .masks = 1},
        {.prefix = 0, .lm_head = 1, .dtype = 2, .reverse = 1},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct st_file *f = st_build(&M, &v[i]);
        struct bytes b = st_serialize(f, NULL);
        struct model_config m;
        struct kern_err err;
        float *want = formula(&M, !v[i].lm_head), *p = st_import(&b, &m), *q = NULL;
        assert_memory_equal(&m, &M, sizeof m);
        expect_params(&M, p, want, "safetensors import");
        assert_int_equal(kern_model_head_tied(&M, p), !v[i].lm_head);
        FILE *fp = as_file(b.p, b.n);
        if (kern_safetensors_read_file(fp, M.heads, &m, &q, &err))
            fail_msg("safetensors import from a FILE*: %s", err.msg);
        assert_memory_equal(p, q, kern_model_param_count(&M) * sizeof(float));
        if (i < 2)
            check_forward(&M, p, !v[i].lm_head, "safetensors import");
        fclose(fp);
        free(want), free(p), free(q), free(b.p);
        st_free(f);
    }
}

/* What the writer produced, read by the test's own reader: names as
 * GPT2LMHeadModel saves them, F32, HF's shapes, offsets one after another
 * from 0, the formula's values in HF's orientation (Conv1D transposed back);
 * lm_head only when untied. */
static void check_export(const struct model_config *m, const struct sink *s, int tied)
{
    struct st_file *f = calloc(1, sizeof *f);
    assert_non_null(f);
    size_t data = st_parse((const unsigned char *)s->p, s->n, f);
    int want_n = 0;
    uint64_t at = 0;
    for (int k = 0; k < TK_N; k++)
        for (int l = 0; l < (tk[k].block ? m->layers : 1); l++) {
            if (k == TK_HEAD && tied)
                continue;
            char name[96];
            size_t hr, hc;
            hf_shape(m, k, &hr, &hc);
            if (tk[k].block)
                snprintf(name, sizeof name, "transformer.h.%d.%s", l, tk[k].hf);
            else
                snprintf(name, sizeof name, "%s%s", k == TK_HEAD ? "" : "transformer.", tk[k].hf);
            struct st_entry *e = st_find(f, name);
            want_n++;
            assert_string_equal(e->dtype, "F32");
            assert_int_equal(e->ndim, hr ? 2 : 1);
            assert_int_equal(e->dim[0], hr ? hr : hc);
            if (hr)
                assert_int_equal(e->dim[1], hc);
            assert_int_equal(e->end - e->begin, 4 * hf_count(m, k));
            for (size_t i = 0; i < hf_count(m, k); i++) {
                float got, v = hf_value(k, l, i, tied);
                memcpy(&got, s->p + data + e->begin + 4 * i, 4);
                if (memcmp(&got, &v, 4) != 0)
                    fail_msg("export: %s element %zu is %g, want %g", name, i, got, v);
            }
        }
    assert_int_equal(f->n, want_n);
    for (int i = 0; i < f->n; i++) { /* in order, no gap, to the end */
        assert_int_equal(f->e[i].begin, at);
        at = f->e[i].end;
    }
    assert_int_equal(data + at, s->n);
    st_free(f);
}

static void test_safetensors_export(void **state)
{
    (void)state;
    for (int tied = 0; tied < 2; tied++) {
        struct st_file *f = st_build(&M, &(struct st_opts){.prefix = 0, .lm_head = !tied, .masks = 1});
        struct bytes b = st_serialize(f, NULL);
        struct model_config m;
        struct kern_err err;
        struct sink s, c;
        float *p = st_import(&b, &m), *q;
        sink_open(&s);
        if (kern_safetensors_write(s.f, &M, p, &err))
            fail_msg("safetensors export: %s", err.msg);
        sink_close(&s);
        check_export(&M, &s, tied);
        struct bytes again = {(unsigned char *)s.p, s.n, s.n};
        q = st_import(&again, &m);
        assert_memory_equal(p, q, kern_model_param_count(&M) * sizeof(float));

        sink_open(&c);
        assert_int_equal(kern_gpt2_config_write(c.f, &M, p, &err), 0);
        sink_close(&c);
        assert_non_null(strstr(c.p, tied ? "\"tie_word_embeddings\": true" : "\"tie_word_embeddings\": false"));
        assert_non_null(strstr(c.p, "\"architectures\": [\n    \"GPT2LMHeadModel\"\n  ]"));
        assert_non_null(strstr(c.p, "\"activation_function\": \"gelu_new\""));
        assert_int_equal(kern_gpt2_config_read(c.p, c.n, &m, &err), 0);
        assert_memory_equal(&m, &M, sizeof m);
        free(c.p), free(s.p), free(p), free(q), free(b.p);
        st_free(f);
    }
}

/* Replaces the first `from` in the bytes by `to` of the same length. */
static void bytes_edit(struct bytes *b, const char *from, const char *to)
{
    size_t n = strlen(from);
    assert_int_equal(n, strlen(to));
    for (size_t i = 0; i + n <= b->n; i++)
        if (memcmp(b->p + i, from, n) == 0) {
            memcpy(b->p + i, to, n);
            return;
        }
    fail_msg("no '%s' in the file", from);
}

static void st_expect_refused(struct st_file *f, const uint64_t *hlen, long resize, const char *msg, const char *why)
{
    struct bytes b = st_serialize(f, hlen);
    size_t n = (size_t)((long)b.n + resize);
    if (resize > 0) {
        b.p = realloc(b.p, n);
        assert_non_null(b.p);
        memset(b.p + b.n, 0, (size_t)resize);
    }
    expect_refused(st_read_h4, st_read_file_h4, b.p, n, msg, why);
    free(b.p);
    st_free(f);
}

static struct st_file *good_st(void)
{
    return st_build(&M, &(struct st_opts){.prefix = 1, .lm_head = 1});
}

static void test_safetensors_bad(void **state)
{
    (void)state;
    struct st_file *f;
    uint64_t huge = (uint64_t)1 << 62;

    expect_refused(st_read_h4, st_read_file_h4, "\x10\0\0\0\0", 5, "shorter than its 8-byte", "short file");
    st_expect_refused(good_st(), &huge, 0, "claims 4611686018427387904 bytes", "header of 2^62 bytes");
    f = good_st();
    uint64_t past = 1 << 20;
    st_expect_refused(f, &past, 0, "claims 1048576 bytes", "header past the end");
    st_expect_refused(good_st(), NULL, -10, "not inside", "truncated data");
    st_expect_refused(good_st(), NULL, 4, "tensors end at byte", "trailing data");

    f = good_st();
    struct st_entry *e = st_find(f, "transformer.h.1.attn.c_attn.weight");
    e->dim[0] = 96, e->dim[1] = 32;
    st_expect_refused(f, NULL, 0, "tensor h.1.attn.c_attn.weight has shape [96,32]; a GPT-2 of V=67 T=16 C=32 "
                      "wants [32,96]", "transposed shape");
    f = good_st();
    st_find(f, "transformer.ln_f.bias")->ndim = 2, st_find(f, "transformer.ln_f.bias")->dim[1] = 1;
    st_expect_refused(f, NULL, 0, "has shape [32,1]", "vector as a matrix");
    f = good_st();
    e = st_find(f, "transformer.wpe.weight");
    e->dim[0] = 32, e->dim[1] = 16;
    st_expect_refused(f, NULL, 0, "are not (V,C) and (context,C)", "wpe's C differs");
    f = good_st();
    e = st_find(f, "transformer.wte.weight");
    e->dim[0] = (uint64_t)1 << 40, e->dim[1] = (uint64_t)1 << 40;
    st_expect_refused(f, NULL, 0, "overflows 64 bits", "huge shape");
    f = good_st();
    e = st_find(f, "lm_head.weight");
    e->begin += (uint64_t)1 << 40, e->end += (uint64_t)1 << 40;
    st_expect_refused(f, NULL, 0, "are not inside", "offsets past the end");
    f = good_st();
    e = st_find(f, "transformer.h.2.ln_1.bias");
    e->begin -= 4, e->end -= 4;
    st_expect_refused(f, NULL, 0, "tensors transformer.h.1.ln_1.bias and transformer.h.2.ln_1.bias overlap", "overlapping offsets");
    f = good_st();
    e = st_find(f, "transformer.h.2.ln_1.bias");
    uint64_t tmp = e->begin;
    e->begin = e->end, e->end = tmp;
    st_expect_refused(f, NULL, 0, "are not inside", "offsets reversed");

    st_expect_refused(st_build(&M, &(struct st_opts){.prefix = 1, .lm_head = 1, .skip = "h.2.mlp.c_fc.bias"}),
                      NULL, 0, "tensor h.2.mlp.c_fc.bias is missing", "missing tensor");
    st_expect_refused(st_build(&M, &(struct st_opts){.prefix = 0, .skip = "wte.weight"}), NULL, 0,
                      "tensor wte.weight is missing", "missing wte");
    st_expect_refused(st_build(&M, &(struct st_opts){.prefix = 0, .skip = "ln_f.weight"}), NULL, 0,
                      "tensor ln_f.weight is missing", "missing ln_f");
    st_expect_refused(st_build(&M, &(struct st_opts){.prefix = 1, .lm_head = 1, .dup = "h.0.ln_2.weight"}),
                      NULL, 0, "tensor h.0.ln_2.weight appears twice", "duplicate with and without prefix");
    f = good_st();
    f->e[f->n] = f->e[5];
    f->e[f->n].begin = f->data.n;
    put_bytes(&f->data, f->data.p + f->e[5].begin, f->e[5].end - f->e[5].begin);
    f->e[f->n++].end = f->data.n;
    st_expect_refused(f, NULL, 0, "duplicate object key", "the same key twice");
    f = good_st();
    snprintf(st_find(f, "transformer.h.2.ln_1.weight")->name, 96, "transformer.h.5.ln_1.weight");
    st_expect_refused(f, NULL, 0, "tensor h.2.ln_1.weight is missing", "a block past the others");
    f = good_st();
    snprintf(st_find(f, "transformer.h.0.attn.c_attn.weight")->name, 96, "transformer.h.0.attn.q_proj.weight");
    st_expect_refused(f, NULL, 0, "'transformer.h.0.attn.q_proj.weight' is not part of a GPT-2 model", "unknown name");
    f = good_st();
    snprintf(st_find(f, "transformer.h.1.ln_2.bias")->name, 96, "transformer.h.01.ln_2.bias");
    st_expect_refused(f, NULL, 0, "not part of a GPT-2", "block number with a leading zero");
    f = good_st();
    snprintf(st_find(f, "transformer.h.1.ln_2.bias")->dtype, 8, "I32");
    st_expect_refused(f, NULL, 0, "tensor h.1.ln_2.bias is I32; this reads F32, F16 and BF16", "integer dtype");
    f = good_st();
    snprintf(st_find(f, "transformer.h.1.ln_2.bias")->dtype, 8, "F33");
    st_expect_refused(f, NULL, 0, "unknown dtype 'F33'", "unknown dtype");
    f = good_st();
    float inf = INFINITY;
    memcpy(f->data.p + st_find(f, "transformer.h.0.mlp.c_fc.bias")->begin + 8, &inf, 4);
    st_expect_refused(f, NULL, 0, "tensor h0.fcb holds an infinity at element 2", "infinite weight");

    /* the JSON itself */
    f = good_st();
    struct bytes b = st_serialize(f, NULL);
    b.p[8] = ' ';
    expect_refused(st_read_h4, st_read_file_h4, b.p, b.n, "does not start with '{'", "header not an object");
    free(b.p);
    b = st_serialize(f, NULL);
    bytes_edit(&b, "\"dtype\"", "\"dtypo\"");
    expect_refused(st_read_h4, st_read_file_h4, b.p, b.n, "unknown member 'dtypo'", "unknown member");
    free(b.p);
    b = st_serialize(f, NULL);
    bytes_edit(&b, "]}}", "]},");
    expect_refused(st_read_h4, st_read_file_h4, b.p, b.n, "safetensors header: string or '}' expected",
                   "trailing comma");
    free(b.p);
    b = st_serialize(f, NULL);
    bytes_edit(&b, "\"format\":\"pt\"", "\"format\":\"p\x01\"");
    expect_refused(st_read_h4, st_read_file_h4, b.p, b.n, "control character 0x1", "control character");
    free(b.p);
    b = st_serialize(f, NULL);
    bytes_edit(&b, "\"format\":\"pt\"", "\"format\":\"p\xff\"");
    expect_refused(st_read_h4, st_read_file_h4, b.p, b.n, "unable to decode byte 0xff", "invalid UTF-8");
    free(b.p);
    b = st_serialize(f, NULL);
    bytes_edit(&b, "[0,", "[00");
    expect_refused(st_read_h4, st_read_file_h4, b.p, b.n, "invalid token", "leading zero");
    free(b.p);
    b = st_serialize(f, NULL);
    bytes_edit(&b, "\"shape\":[", "\"shape\":{");
    expect_refused(st_read_h4, st_read_file_h4, b.p, b.n, "string or '}' expected", "shape not an array");
    free(b.p);

    /* the heads the caller gives */
    b = st_serialize(f, NULL);
    struct model_config m = sentinel_model;
    float *p = &sentinel_param;
    struct kern_err err;
    assert_int_equal(kern_safetensors_read(b.p, b.n, 5, &m, &p, &err), -1);
    assert_non_null(strstr(err.msg, "not a multiple of heads 5"));
    assert_int_equal(kern_safetensors_read(b.p, b.n, 0, &m, &p, &err), -1);
    assert_non_null(strstr(err.msg, "n_head"));
    assert_memory_equal(&m, &sentinel_model, sizeof m);
    assert_ptr_equal(p, &sentinel_param);
    free(b.p);
    st_free(f);
}

/* ---- config.json ------------------------------------------------------ */

/* The hub's gpt2 config.json, trimmed, with some JSON to skip. */
static const char hub_config[] =
    "{\n  \"activation_function\": \"gelu_new\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n"
    "  \"attn_pdrop\": 0.1, \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256,\n"
    "  \"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\",\n"
    "  \"n_ctx\": 1024, \"n_embd\": 768, \"n_head\": 12, \"n_layer\": 12, \"n_positions\": 1024,\n"
    "  \"n_inner\": null, \"resid_pdrop\": 0.1, \"summary_first_dropout\": 0.1, \"summary_use_proj\": true,\n"
    "  \"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}},\n"
    "  \"note\": \"caf\\u00e9 \\ud83d\\ude00 \xc3\xa9 \\\"q\\\" \\n\", \"list\": [[], {}, -1.5E+3, false],\n"
    "  \"vocab_size\": 50257\n}\n";

static void test_config(void **state)
{
    (void)state;
    struct model_config m;
    struct kern_err err;
    if (kern_gpt2_config_read(hub_config, strlen(hub_config), &m, &err))
        fail_msg("hub config: %s", err.msg);
    struct model_config want = {.vocab = 50257, .context = 1024, .d_model = 768, .heads = 12, .layers = 12};
    assert_memory_equal(&m, &want, sizeof m);

    static const struct { const char *text, *msg; } bad[] = {
        {"{\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67}", "n_head is missing"},
        {"{\"n_head\":\"4\",\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67}", "n_head is not an integer"},
        {"{\"n_head\":4.0,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67}", "n_head is not an integer"},
        {"{\"n_head\":0,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67}", "n_head is 0"},
        {"{\"n_head\":4,\"n_head\":4,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67}", "duplicate object key"},
        {"{\"n_head\":5,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67}", "multiple of heads"},
        {"{\"n_head\":4,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67,\"model_type\":\"llama\"}",
         "model_type is 'llama'"},
        {"{\"n_head\":4,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67,\"activation_function\":\"gelu\"}",
         "tanh approximation"},
        {"{\"n_head\":4,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67,\"n_inner\":100}",
         "n_inner is 100"},
        {"{\"n_head\":4,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67,\"layer_norm_epsilon\":1e-6}",
         "layer_norm_epsilon"},
        {"{\"n_head\":4,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67,}", "string or '}' expected"},
        {"{\"n_head\":4,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":67} x", "end of file expected"},
        {"{\"n_head\":4,\"n_positions\":16,\"n_embd\":32,\"n_layer\":3,\"vocab_size\":99999999999}", "not in [1,"},
        {"{\"x\":\"\\ud800\"}", "invalid Unicode"},
        {"{\"x\":\"\\u0000\"}", "\\u0000"},
        {"{\"x\":\"\xed\xa0\x80\"}", "unable to decode byte 0xed"},
        {"{\"x\":\"\xc0\xaf\"}", "unable to decode byte 0xc0"},
        {"{\"x\":01}", "invalid token"},
        {"{\"x\":1.}", "invalid token"},
        {"{\"x\":tru}", "invalid token"},
        {"[1]", "not a JSON object"},
        {"", "'[' or '{' expected"},
        {"{\"x\":1", "'}' expected"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct model_config got = sentinel_model;
        if (kern_gpt2_config_read(bad[i].text, strlen(bad[i].text), &got, &err) != -1 || !strstr(err.msg, bad[i].msg))
            fail_msg("config %zu: said '%s', want '%s'", i, err.msg, bad[i].msg);
        assert_memory_equal(&got, &sentinel_model, sizeof got);
    }
    /* nesting is capped (jansson's JSON_PARSER_MAX_DEPTH, 2048) */
    static char deep[3000];
    memset(deep, '[', sizeof deep);
    memcpy(deep, "{\"x\":", 5);
    assert_int_equal(kern_gpt2_config_read(deep, sizeof deep, &m, &err), -1);
    assert_non_null(strstr(err.msg, "maximum parsing depth"));
}

/* ---- layer splits ----------------------------------------------------- */

/* kern_model_split gives what kern_stage_assemble gives from a whole-model
 * stage, for each stage of a split; kern_model_join puts them back. */
static void test_split_join(void **state)
{
    (void)state;
    struct kern_err err;
    struct bytes b = llmc_file(&M, 128, 0, 0);
    struct model_config m;
    float *whole = llmc_import(&b, &m);
    size_t n = kern_model_param_count(&M);
    struct kern_stage *w = new_stage(&M, 0, M.layers, 1);
    assert_int_equal(n, kern_stage_param_count(w));
    assert_int_equal(kern_stage_write(w, KERN_PARAMS, whole, &err), 0);

    struct kern_stage_spec specs[3] = {{.layer_start = 0, .layer_end = 1, .first = 1},
                                       {.layer_start = 1, .layer_end = 1},
                                       {.layer_start = 1, .layer_end = 3, .last = 1}};
    float *parts[3];
    for (int k = 0; k < 3; k++) {
        struct kern_stage *s = new_stage(&M, specs[k].layer_start, specs[k].layer_end, 1);
        size_t count = kern_model_stage_param_count(&M, &specs[k]);
        assert_int_equal(count, kern_stage_param_count(s));
        parts[k] = malloc((count + 1) * sizeof(float));
        assert_non_null(parts[k]);
        assert_int_equal(kern_model_split(&M, whole, &specs[k], parts[k], &err), 0);
        assert_int_equal(kern_stage_assemble(s, &w, 1, &err), 0);
        float *assembled = malloc((count + 1) * sizeof(float));
        assert_non_null(assembled);
        assert_int_equal(kern_stage_read(s, KERN_PARAMS, assembled, &err), 0);
        assert_memory_equal(parts[k], assembled, count * sizeof(float));
        free(assembled);
        kern_stage_free(s);
    }
    float *joined = malloc(n * sizeof(float));
    assert_non_null(joined);
    memset(joined, 0xff, n * sizeof(float));
    assert_int_equal(kern_model_join(&M, specs, (const float *const *)parts, 3, joined, &err), 0);
    assert_memory_equal(joined, whole, n * sizeof(float));

    memset(joined, 0xff, n * sizeof(float));
    assert_int_equal(kern_model_join(&M, specs, (const float *const *)parts, 2, joined, &err), -1);
    assert_non_null(strstr(err.msg, "no stage holds tensor h1.ln1w"));
    for (size_t i = 0; i < n; i++)
        assert_true(isnan(joined[i]));
    struct kern_stage_spec wrong = {.layer_start = 1, .layer_end = 3, .last = 0};
    assert_int_equal(kern_model_split(&M, whole, &wrong, parts[2], &err), -1);
    assert_non_null(strstr(err.msg, "first=0 last=1"));
    struct kern_stage_spec outside = {.layer_start = 2, .layer_end = 4, .last = 1};
    assert_int_equal(kern_model_split(&M, whole, &outside, parts[2], &err), -1);
    assert_int_equal(kern_model_stage_param_count(&M, &outside), 0);
    struct model_config huge = M;
    huge.layers = KERN_MODEL_MAX_LAYERS + 1;
    assert_int_equal(kern_model_param_count(&huge), 0);
    for (int k = 0; k < 3; k++)
        free(parts[k]);
    free(joined), free(whole), free(b.p);
    kern_stage_free(w);
}

/* ---- the fuzz targets' seeds ------------------------------------------ */

/* DIR/target/name: the mode byte (none when < 0), then a, then b (when
 * b_len: after a NUL byte). */
static void write_seed(const char *dir, const char *target, const char *name, int mode, const void *a, size_t a_len,
                       const void *b, size_t b_len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("cannot write %s", path);
    if (mode >= 0)
        fputc(mode, f);
    assert_int_equal(fwrite(a, 1, a_len, f), a_len);
    if (b_len) {
        fputc(0, f);
        assert_int_equal(fwrite(b, 1, b_len, f), b_len);
    }
    assert_int_equal(fclose(f), 0);
}

/* Small files of a model of V=5, T=4, C=4, NH=2, L=2 (fuzz_safetensors.c's
 * first byte: the heads, plus 0x40 for a file in two parts, JSON NUL data,
 * or 0x80 for a config.json). */
static void test_write_fuzz_seeds(void **state)
{
    (void)state;
    const char *dir = getenv("SHOAL_WRITE_GPT2_SEEDS");
    if (!dir || !*dir)
        return;
    static const struct model_config S = {.vocab = 5, .context = 4, .d_model = 4, .heads = 2, .layers = 2};
    struct model_config m;
    struct kern_err err;
    struct sink s;
    struct bytes b = llmc_file(&S, 5, 0, 0);
    float *p = NULL;
    write_seed(dir, "fuzz_gpt2_llmc", "fp32-unpadded", -1, b.p, b.n, NULL, 0);
    assert_int_equal(kern_llmc_read(b.p, b.n, &m, &p, &err), 0);
    sink_open(&s);
    assert_int_equal(kern_llmc_write(s.f, &S, p, &err), 0);
    sink_close(&s);
    write_seed(dir, "fuzz_gpt2_llmc", "fp32-export", -1, s.p, s.n, NULL, 0);
    free(s.p), free(b.p), free(p);
    b = llmc_file(&S, 8, 1, 0);
    write_seed(dir, "fuzz_gpt2_llmc", "bf16", -1, b.p, b.n, NULL, 0);
    free(b.p);

    static const struct { const char *name; struct st_opts o; } st[] = {
        {"hub-tied-masks", {.prefix = 0, .masks = 1}},
        {"f16-prefixed-reversed", {.prefix = 1, .lm_head = 1, .dtype = 1, .reverse = 1}},
        {"bf16", {.prefix = 0, .lm_head = 1, .dtype = 2}},
    };
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        struct st_file *f = st_build(&S, &st[i].o);
        b = st_serialize(f, NULL);
        uint64_t hlen;
        char split[64];
        memcpy(&hlen, b.p, 8);
        snprintf(split, sizeof split, "%s-split", st[i].name);
        write_seed(dir, "fuzz_safetensors", st[i].name, S.heads, b.p, b.n, NULL, 0);
        write_seed(dir, "fuzz_safetensors", split, 0x40 | S.heads, b.p + 8, hlen, b.p + 8 + hlen, b.n - 8 - hlen);
        if (i == 1) { /* untied: the export and its config */
            assert_int_equal(kern_safetensors_read(b.p, b.n, S.heads, &m, &p, &err), 0);
            sink_open(&s);
            assert_int_equal(kern_safetensors_write(s.f, &S, p, &err), 0);
            sink_close(&s);
            write_seed(dir, "fuzz_safetensors", "export-untied", S.heads, s.p, s.n, NULL, 0);
            free(s.p);
            sink_open(&s);
            assert_int_equal(kern_gpt2_config_write(s.f, &S, p, &err), 0);
            sink_close(&s);
            write_seed(dir, "fuzz_safetensors", "config-export", 0x80, s.p, s.n, NULL, 0);
            free(s.p), free(p);
        }
        free(b.p);
        st_free(f);
    }
    write_seed(dir, "fuzz_safetensors", "config-hub", 0x80, hub_config, strlen(hub_config), NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llmc_import),
        cmocka_unit_test(test_llmc_export),
        cmocka_unit_test(test_llmc_bad),
        cmocka_unit_test(test_safetensors_import),
        cmocka_unit_test(test_safetensors_export),
        cmocka_unit_test(test_safetensors_bad),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_split_join),
        cmocka_unit_test(test_write_fuzz_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
