/* test_kernels_stage_file.c - models/checkpoint.h's stage files on the CPU
 * backend (kernels_fixture.h): save, load and train on exactly; a checkpoint
 * of one layer split assembled into another; the extra state of version 2
 * (outer momentum, sync feedback); a step-0 stage saved without its zero
 * moments; headers peeked and bounded; bad input. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/checkpoint.h"
#include "kernels_fixture.h"

static void test_save_load_continue(void **state)
{
    (void)state;
    enum { K = 5 };
    struct kern_err err;
    struct kern_stage *s0 = stage_new(&small, 0, 1, 4, 32, 2, 11);
    struct kern_stage *s1 = stage_new(&small, 1, 2, 4, 32, 2, 11);
    float before[K], after[K], reloaded[K];
    train(s0, s1, 0, K, before);
    FILE *f0 = tmpfile(), *f1 = tmpfile();
    assert_non_null(f0), assert_non_null(f1);
    save_to(s0, f0);
    save_to(s1, f1);
    train(s0, s1, K, K, after);

    /* fresh stages, another seed: loading must replace everything */
    struct kern_stage *r0 = stage_new(&small, 0, 1, 4, 32, 2, 12345);
    struct kern_stage *r1 = stage_new(&small, 1, 2, 4, 32, 2, 12345);
    assert_int_equal(kern_stage_load(r0, f0, &err), 0);
    assert_int_equal(kern_stage_load(r1, f1, &err), 0);
    assert_int_equal(kern_stage_step(r0), K);
    train(r0, r1, K, K, reloaded);
    assert_memory_equal(after, reloaded, sizeof after);

    /* the file of stage 0 does not fit stage 1 */
    rewind(f0);
    float *p = read_buf(r1, KERN_PARAMS);
    assert_int_equal(kern_stage_load(r1, f0, &err), -1);
    assert_non_null(strstr(err.msg, "the file holds layers 0-0 of a model"));
    float *q = read_buf(r1, KERN_PARAMS);
    assert_memory_equal(p, q, kern_stage_param_count(r1) * sizeof(float));
    free(q);

    /* a header whose layer_end is INT_MIN (after the magic, the version and
     * six int32) is named in the refusal without overflowing its "less one"
     * (fuzz_checkpoint: regress/header-layer-end-int-min) */
    {
        unsigned char hdr[4096];
        rewind(f0);
        size_t got = fread(hdr, 1, sizeof hdr, f0);
        int32_t int_min = INT32_MIN;
        assert_true(got > 40);
        memcpy(hdr + 8 + 4 + 6 * 4, &int_min, sizeof int_min);
        FILE *bad = tmpfile();
        assert_non_null(bad);
        assert_int_equal(fwrite(hdr, 1, got, bad), got);
        rewind(bad);
        assert_int_equal(kern_stage_load(r1, bad, &err), -1);
        assert_non_null(strstr(err.msg, "the file holds layers 0--2147483649 of a model"));
        fclose(bad);
    }

    /* damaged files: truncated, flipped byte, bad magic, trailing byte */
    rewind(f1);
    long len;
    fseek(f1, 0, SEEK_END);
    len = ftell(f1);
    unsigned char *raw = malloc((size_t)len + 1);
    assert_non_null(raw);
    rewind(f1);
    assert_int_equal(fread(raw, 1, (size_t)len, f1), (size_t)len);
    struct {
        const char *why;
        long cut;       /* bytes kept */
        long flip;      /* byte to flip, -1 none */
        int extra;      /* 1: append a byte */
        const char *msg;
    } bad[] = {
        {"truncated", len - 9, -1, 0, "truncated"},
        {"short header", 20, -1, 0, "shorter than"},
        {"flipped payload byte", len, len / 2, 0, "checksum"},
        {"bad magic", len, 0, 0, "magic"},
        {"trailing byte", len, -1, 1, "trailing"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *g = tmpfile();
        assert_non_null(g);
        if (bad[i].flip >= 0)
            raw[bad[i].flip] ^= 0x5a;
        assert_int_equal(fwrite(raw, 1, (size_t)bad[i].cut, g), (size_t)bad[i].cut);
        if (bad[i].extra)
            fputc(0, g);
        if (bad[i].flip >= 0)
            raw[bad[i].flip] ^= 0x5a;
        rewind(g);
        if (kern_stage_load(r1, g, &err) != -1 || !strstr(err.msg, bad[i].msg))
            fail_msg("%s: load said '%s'", bad[i].why, err.msg);
        q = read_buf(r1, KERN_PARAMS);
        assert_memory_equal(p, q, kern_stage_param_count(r1) * sizeof(float));
        free(q);
        fclose(g);
    }
    free(raw), free(p);
    fclose(f0), fclose(f1);
    kern_stage_free(s0), kern_stage_free(s1), kern_stage_free(r0), kern_stage_free(r1);
}

/* A stage at AdamW step 0 with zero moments (fresh, or imported weights)
 * is saved without them: a header, the parameters and a checksum.  It
 * loads with zero moments (over a stage that had others) and trains on
 * exactly as the stage it was saved from; a step-0 stage whose moments are
 * not zero keeps them; a file that leaves them out at another step is
 * refused. */
static void test_step0_without_moments(void **state)
{
    (void)state;
    enum { K = 3 };
    struct kern_err err;
    struct kern_stage *s0 = stage_new(&small, 0, 1, 4, 32, 2, 11), *s1 = stage_new(&small, 1, 2, 4, 32, 2, 11);
    size_t n = kern_stage_param_count(s0);
    FILE *f = tmpfile();
    assert_non_null(f);
    save_to(s0, f);
    fseek(f, 0, SEEK_END);
    long header = 8 + 4 + 4 * 17 + 8 * 5 + 8 + 8 + 8;   /* version 4 (checkpoint.c), no source */
    assert_int_equal(ftell(f), header + 4 * (long)n + 8);
    rewind(f);

    /* over a trained stage of the same layers: its moments become zero */
    struct kern_stage *r0 = stage_new(&small, 0, 1, 4, 32, 2, 99), *r1 = stage_new(&small, 1, 2, 4, 32, 2, 99);
    float scratch[K], fresh[K], reloaded[K];
    train(r0, r1, 0, K, scratch);
    struct model_config m;
    struct kern_stage_spec sp;
    uint64_t step = 9;
    assert_int_equal(kern_stage_file_peek(f, &m, &sp, &step, &err), 0);
    assert_true(step == 0);
    assert_int_equal(kern_stage_load(r0, f, &err), 0);
    assert_true(kern_stage_step(r0) == 0);
    float *mo = read_buf(r0, KERN_ADAM_M), *vo = read_buf(r0, KERN_ADAM_V);
    for (size_t i = 0; i < n; i++)
        assert_true(mo[i] == 0 && vo[i] == 0);
    free(mo), free(vo);
    FILE *g = tmpfile();
    assert_non_null(g);
    save_to(s1, g);
    assert_int_equal(kern_stage_load(r1, g, &err), 0);
    train(s0, s1, 0, K, fresh);
    train(r0, r1, 0, K, reloaded);
    assert_memory_equal(fresh, reloaded, sizeof fresh);

    /* step 0 with a moment that is not zero: both moments are written */
    struct kern_stage *odd = stage_new(&small, 0, 1, 4, 32, 2, 11);
    float *v = read_buf(odd, KERN_ADAM_V);
    v[n / 2] = 0.25f;
    assert_int_equal(kern_stage_write(odd, KERN_ADAM_V, v, &err), 0);
    FILE *h = tmpfile();
    assert_non_null(h);
    save_to(odd, h);
    fseek(h, 0, SEEK_END);
    assert_int_equal(ftell(h), header + 3 * 4 * (long)n + 8);
    rewind(h);
    assert_int_equal(kern_stage_load(r0, h, &err), 0);
    float *back = read_buf(r0, KERN_ADAM_V);
    assert_memory_equal(back, v, n * sizeof *v);
    free(back), free(v);

    /* the moments left out after AdamW steps: refused by peek and load */
    unsigned char raw[8 + 4 + 4 * 17 + 8 * 5 + 8 + 8 + 8];
    rewind(f);
    assert_int_equal(fread(raw, 1, sizeof raw, f), sizeof raw);
    uint64_t five = 5;
    memcpy(raw + 12 + 4 * 17 + 8 * 5, &five, 8);
    FILE *bad = tmpfile();
    assert_non_null(bad);
    rewind(f);
    fseek(f, (long)sizeof raw, SEEK_SET);
    assert_int_equal(fwrite(raw, 1, sizeof raw, bad), sizeof raw);
    for (int c; (c = fgetc(f)) != EOF;)
        fputc(c, bad);
    rewind(bad);
    assert_int_equal(kern_stage_file_peek(bad, &m, &sp, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "after 5 AdamW steps"));
    assert_int_equal(kern_stage_load(r0, bad, &err), -1);
    assert_non_null(strstr(err.msg, "after 5 AdamW steps"));
    fclose(f), fclose(g), fclose(h), fclose(bad);
    kern_stage_free(s0), kern_stage_free(s1), kern_stage_free(r0), kern_stage_free(r1), kern_stage_free(odd);
}

/* A checkpoint taken under one layer split continues under another: the
 * new stages are assembled tensor by tensor and train on exactly as the
 * old ones do. */
static void test_assemble_other_split(void **state)
{
    (void)state;
    enum { K = 4 };
    struct kern_err err;
    struct model_config three = small;
    three.layers = 3;
    struct kern_stage *a0 = stage_new(&three, 0, 1, 4, 32, 2, 11), *a1 = stage_new(&three, 1, 3, 4, 32, 2, 11);
    struct kern_stage *b0 = stage_new(&three, 0, 2, 4, 32, 2, 99), *b1 = stage_new(&three, 2, 3, 4, 32, 2, 99);
    float before[K], old_split[K], new_split[K];
    train(a0, a1, 0, K, before);
    struct kern_stage *old[2] = {a0, a1};
    assert_int_equal(kern_stage_assemble(b0, old, 1, &err), -1);
    assert_non_null(strstr(err.msg, "h1.ln1w"));
    assert_int_equal(kern_stage_assemble(b0, old, 2, &err), 0);
    assert_int_equal(kern_stage_assemble(b1, old + 1, 1, &err), 0);
    assert_int_equal(kern_stage_step(b0), K);
    train(a0, a1, K, K, old_split);
    train(b0, b1, K, K, new_split);
    assert_memory_equal(old_split, new_split, sizeof old_split);
    struct kern_stage *fresh = stage_new(&three, 1, 3, 4, 32, 2, 11);
    struct kern_stage *mixed[2] = {a0, fresh};
    assert_int_equal(kern_stage_assemble(b0, mixed, 2, &err), -1);
    assert_non_null(strstr(err.msg, "step"));
    kern_stage_free(a0), kern_stage_free(a1), kern_stage_free(b0), kern_stage_free(b1), kern_stage_free(fresh);
}

/* Extra state (DiLoCo's outer momentum, a sync's error feedback) travels
 * with the stage: saved after the moments, loaded (a file without it
 * leaves the stage without it), assembled under another split, and a
 * version 1 file (no extras) still loads. */
static void test_extra_state(void **state)
{
    (void)state;
    struct kern_err err;
    struct model_config three = small;
    three.layers = 3;
    struct kern_stage *a0 = stage_new(&three, 0, 1, 4, 32, 2, 11), *a1 = stage_new(&three, 1, 3, 4, 32, 2, 11);
    struct kern_stage *old[2] = {a0, a1};
    for (int k = 0; k < 2; k++) {
        float *u = kern_stage_extra(old[k], KERN_EXTRA_OUTER_MOMENTUM);
        assert_non_null(u);
        assert_ptr_equal(kern_stage_extra(old[k], KERN_EXTRA_OUTER_MOMENTUM), u);   /* made once */
        assert_null(kern_stage_extra_if(old[k], KERN_EXTRA_SYNC_FEEDBACK));
        for (size_t i = 0; i < kern_stage_param_count(old[k]); i++) {
            assert_true(u[i] == 0);   /* zeroed */
            u[i] = (float)(k + 1) * 1e-3f * (float)(i % 101);
        }
    }
    assert_null(kern_stage_extra(a0, KERN_EXTRA_COUNT));
    /* a moment that is not zero, so that the file holds both (a step-0
     * stage with zero moments leaves them out: test_step0_without_moments) */
    float *m1 = read_buf(a1, KERN_ADAM_M);
    m1[0] = 1e-3f;
    assert_int_equal(kern_stage_write(a1, KERN_ADAM_M, m1, &err), 0);
    free(m1);
    /* save and load: the momentum comes back, the feedback stays absent */
    FILE *f = tmpfile();
    assert_non_null(f);
    save_to(a1, f);
    struct kern_stage *r1 = stage_new(&three, 1, 3, 4, 32, 2, 5);
    kern_stage_extra(r1, KERN_EXTRA_SYNC_FEEDBACK)[0] = 7;
    assert_int_equal(kern_stage_load(r1, f, &err), 0);
    assert_non_null(kern_stage_extra_if(r1, KERN_EXTRA_OUTER_MOMENTUM));
    assert_memory_equal(kern_stage_extra_if(r1, KERN_EXTRA_OUTER_MOMENTUM), kern_stage_extra_if(a1, KERN_EXTRA_OUTER_MOMENTUM),
                        kern_stage_param_count(a1) * sizeof(float));
    assert_null(kern_stage_extra_if(r1, KERN_EXTRA_SYNC_FEEDBACK));
    /* its size: header (144), params, moments and one extra, checksum */
    fseek(f, 0, SEEK_END);
    assert_int_equal(ftell(f), 144 + 4 * 4 * (long)kern_stage_param_count(a1) + 8);
    /* a version 1 file: the same without the extras word and buffers */
    long len = ftell(f);
    unsigned char *raw = malloc((size_t)len);
    rewind(f);
    assert_int_equal(fread(raw, 1, (size_t)len, f), (size_t)len);
    size_t n = kern_stage_param_count(a1), v1_len = 64 + 12 * n + 8;
    unsigned char *v1 = malloc(v1_len);
    uint32_t one = 1;
    memcpy(v1, raw, 8);
    memcpy(v1 + 8, &one, 4);
    memcpy(v1 + 12, raw + 12, 36);            /* 9 ints */
    memcpy(v1 + 48, raw + 120, 16);           /* step, n (after version 4's 17 ints and 5 doubles) */
    memcpy(v1 + 64, raw + 144, 12 * n);       /* params and moments (after the source's size) */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < v1_len - 8; i++) {
        h ^= v1[i];
        h *= 0x100000001b3ull;
    }
    memcpy(v1 + v1_len - 8, &h, 8);
    FILE *g = fmemopen(v1, v1_len, "rb");
    struct model_config pm;
    struct kern_stage_spec psp = {.micro_batch = 1, .seq_len = 1, .in_flight = 1};
    assert_int_equal(kern_stage_file_peek(g, &pm, &psp, NULL, &err), 0);
    assert_int_equal(kern_stage_load(r1, g, &err), 0);
    assert_null(kern_stage_extra_if(r1, KERN_EXTRA_OUTER_MOMENTUM));
    fclose(g);
    /* a version 3 file: 15 ints (no head_dim, no window), no source's size, the rest as 4's */
    size_t v3_len = (size_t)len - 16;
    unsigned char *v3 = malloc(v3_len);
    uint32_t three_v = 3;
    memcpy(v3, raw, 8);
    memcpy(v3 + 8, &three_v, 4);
    memcpy(v3 + 12, raw + 12, 60);                         /* 15 ints */
    memcpy(v3 + 72, raw + 80, 56);                         /* doubles, step, n */
    memcpy(v3 + 128, raw + 144, (size_t)len - 144 - 8);    /* the buffers */
    h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < v3_len - 8; i++) {
        h ^= v3[i];
        h *= 0x100000001b3ull;
    }
    memcpy(v3 + v3_len - 8, &h, 8);
    g = fmemopen(v3, v3_len, "rb");
    assert_int_equal(kern_stage_file_peek(g, &pm, &psp, NULL, &err), 0);
    assert_true(model_config_equal(&pm, kern_stage_model(a1)));   /* head_dim C / NH */
    assert_int_equal(kern_stage_load(r1, g, &err), 0);
    assert_memory_equal(kern_stage_extra_if(r1, KERN_EXTRA_OUTER_MOMENTUM),
                        kern_stage_extra_if(a1, KERN_EXTRA_OUTER_MOMENTUM), n * sizeof(float));
    fclose(g);
    free(v1), free(v3), free(raw);
    fclose(f);
    /* assembled under another split, tensor by tensor */
    struct kern_stage *b0 = stage_new(&three, 0, 2, 4, 32, 2, 99);
    assert_int_equal(kern_stage_assemble(b0, old, 2, &err), 0);
    const float *bu = kern_stage_extra_if(b0, KERN_EXTRA_OUTER_MOMENTUM);
    assert_non_null(bu);
    for (int t = 0; t < kern_stage_tensor_count(b0); t++) {
        const struct kern_tensor *bt = kern_stage_tensor(b0, t);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < kern_stage_tensor_count(old[k]); j++) {
                const struct kern_tensor *ot = kern_stage_tensor(old[k], j);
                if (strcmp(ot->name, bt->name) == 0)
                    assert_memory_equal(bu + bt->offset, kern_stage_extra_if(old[k], KERN_EXTRA_OUTER_MOMENTUM) + ot->offset,
                                        bt->count * sizeof(float));
            }
    }
    /* sources that disagree on their extras are refused */
    struct kern_stage *plain = stage_new(&three, 1, 3, 4, 32, 2, 11);
    struct kern_stage *mixed[2] = {a0, plain};
    assert_int_equal(kern_stage_assemble(b0, mixed, 2, &err), -1);
    assert_non_null(strstr(err.msg, "extra state"));
    kern_stage_free(a0), kern_stage_free(a1), kern_stage_free(r1), kern_stage_free(b0), kern_stage_free(plain);
}

/* Parameters alone (export): the same floats as the stage holds, with and
 * without moments and extras in the file; a damaged file is refused. */
static void test_file_params(void **state)
{
    (void)state;
    struct kern_err err;
    struct model_config three = small;
    three.layers = 3;
    struct kern_stage *st = stage_new(&three, 1, 3, 4, 32, 2, 11);
    float *m = read_buf(st, KERN_ADAM_M);
    m[0] = 1e-3f;   /* moments in the file */
    assert_int_equal(kern_stage_write(st, KERN_ADAM_M, m, &err), 0);
    free(m);
    kern_stage_extra(st, KERN_EXTRA_OUTER_MOMENTUM)[3] = 0.5f;
    for (int fresh = 0; fresh < 2; fresh++) {
        struct kern_stage *src = fresh ? stage_new(&three, 0, 1, 4, 32, 2, 7) : st;   /* step 0: no moments */
        FILE *f = tmpfile();
        assert_non_null(f);
        save_to(src, f);
        rewind(f);
        struct model_config got;
        struct kern_stage_spec sp = {0};
        float *params;
        uint64_t n;
        assert_int_equal(kern_stage_file_params(f, &got, &sp, &params, &n, &err), 0);
        assert_int_equal(n, kern_stage_param_count(src));
        assert_true(got.layers == 3 && got.d_model == three.d_model && got.vocab == three.vocab);
        assert_int_equal(sp.layer_start, fresh ? 0 : 1);
        assert_int_equal(sp.layer_end, fresh ? 1 : 3);
        float *want = read_buf(src, KERN_PARAMS);
        assert_memory_equal(params, want, n * sizeof(float));
        free(params), free(want);
        /* a flipped byte in the moments (read but not kept) or the params */
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        unsigned char *raw = malloc((size_t)len);
        rewind(f);
        assert_int_equal(fread(raw, 1, (size_t)len, f), (size_t)len);
        for (int k = 0; k < 3; k++) {
            unsigned char *bad = malloc((size_t)len);
            memcpy(bad, raw, (size_t)len);
            size_t at = k == 0 ? (size_t)len - 20 : 200;
            bad[at] ^= 0x40;
            FILE *g = fmemopen(bad, (size_t)(k == 2 ? len - 9 : len), "rb");
            assert_int_equal(kern_stage_file_params(g, &got, &sp, &params, &n, &err), -1);
            assert_null(params);
            if (!strstr(err.msg, k == 2 ? "the file is" : "checksum"))
                fail_msg("case %d: %s", k, err.msg);
            fclose(g);
            free(bad);
        }
        free(raw);
        fclose(f);
        if (fresh)
            kern_stage_free(src);
    }
    kern_stage_free(st);
}

/* A stage file says which stage can load it, and peeking leaves it loadable. */
static void test_file_peek(void **state)
{
    (void)state;
    struct kern_err err;
    struct model_config m;
    struct kern_stage_spec sp = {.micro_batch = 3, .seq_len = 7, .in_flight = 1};
    struct kern_stage *s1 = stage_new(&small, 1, 2, 4, 32, 2, 11);
    FILE *f = tmpfile();
    assert_non_null(f);
    save_to(s1, f);
    uint64_t step = 99;
    assert_int_equal(kern_stage_file_peek(f, &m, &sp, &step, &err), 0);
    struct model_config want = small;
    model_config_normalise(&want);
    assert_true(model_config_equal(&m, &want));
    assert_int_equal(step, kern_stage_step(s1));
    assert_int_equal(sp.layer_start, 1);
    assert_int_equal(sp.layer_end, 2);
    assert_int_equal(sp.first, 0);
    assert_int_equal(sp.last, 1);
    assert_int_equal(sp.micro_batch, 3);   /* left alone */
    struct kern_stage *copy;
    assert_int_equal(kern_stage_new(&cpu, &m, &sp, &copy, &err), 0);
    assert_int_equal(kern_stage_load(copy, f, &err), 0);
    fclose(f);
    f = tmpfile();
    assert_non_null(f);
    fputs("NOTSHOAL and some more bytes to fill a header.............................", f);
    rewind(f);
    assert_int_equal(kern_stage_file_peek(f, &m, &sp, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "bad magic"));
    fclose(f);
    kern_stage_free(s1), kern_stage_free(copy);
}

/* A header cannot make the agent allocate more than the file holds: a
 * header whose model makes another float count, or a file of another size
 * than its header says, is refused by the peek (before a stage is built
 * from it).  tests/fuzz/regress/fuzz_checkpoint/header-claims-3gb-model. */
static void test_file_peek_bounds(void **state)
{
    (void)state;
    struct kern_err err;
    struct model_config m;
    struct kern_stage_spec sp = {.micro_batch = 1, .seq_len = 1, .in_flight = 1};
    struct kern_stage *s1 = stage_new(&small, 1, 2, 4, 32, 2, 11);
    FILE *f = tmpfile();
    assert_non_null(f);
    save_to(s1, f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    unsigned char *raw = malloc((size_t)len);
    assert_non_null(raw);
    rewind(f);
    assert_int_equal(fread(raw, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    struct {
        const char *why;
        long keep;          /* bytes of the file kept */
        int d_model;        /* written into the header; 0: as saved */
        uint64_t n;         /* floats per buffer written into the header; 0: as saved */
        const char *msg;
    } bad[] = {
        {"a 3 GB model in a small file", 144, 1024, 0, "bytes instead of"},
        {"n that the model does not make", len, 0, 12345, "make"},
        {"n that fits the model, a truncated file", len - 4, 0, 0, "bytes instead of"},
        {"n that would overflow", len, 0, UINT64_MAX / 4, "make"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char *copy = malloc((size_t)len);
        assert_non_null(copy);
        memcpy(copy, raw, (size_t)len);
        if (bad[i].d_model) {
            int32_t C = bad[i].d_model, L = 64, ints[17];
            memcpy(ints, copy + 12, sizeof ints);
            ints[2] = C, ints[4] = L, ints[5] = 0, ints[6] = L, ints[7] = 1, ints[8] = 1;
            ints[12] = 4 * C;   /* gpt2's ffn_dim */
            ints[15] = C / ints[3];   /* its head_dim */
            memcpy(copy + 12, ints, sizeof ints);
            uint64_t n = (uint64_t)(ints[0] + ints[1]) * C + (uint64_t)L * (12u * C * C + 13u * C) +
                         (uint64_t)(ints[0] + 2) * C;   /* what that model makes: the header agrees */
            memcpy(copy + 128, &n, 8);   /* version 4: 17 ints, 5 doubles, the step, then n */
        }
        if (bad[i].n)
            memcpy(copy + 128, &bad[i].n, 8);
        FILE *g = fmemopen(copy, (size_t)bad[i].keep, "rb");
        assert_non_null(g);
        if (kern_stage_file_peek(g, &m, &sp, NULL, &err) != -1 || !strstr(err.msg, bad[i].msg))
            fail_msg("%s: peek said '%s'", bad[i].why, err.msg);
        assert_int_equal(ftell(g), 0);
        fclose(g);
        free(copy);
    }
    free(raw);
    kern_stage_free(s1);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct kern_err err;
    struct kern_device dev;
    struct kern_stage *st = NULL;
    struct model_config m = {.vocab = 16, .context = 8, .d_model = 8, .heads = 2, .layers = 2};
    struct kern_stage_spec ok = {.layer_start = 0, .layer_end = 1, .first = 1, .last = 0,
                                 .micro_batch = 1, .seq_len = 8, .in_flight = 2, .seed = 1};

    assert_int_equal(kern_device_parse("cpu", &dev, &err), 0);
    assert_int_equal(dev.kind, KERN_CPU);
    assert_int_equal(kern_device_parse("tpu", &dev, &err), -1);
    assert_non_null(strstr(err.msg, "unknown device"));
    assert_int_equal(kern_device_parse("cuda:x", &dev, &err), -1);
    if (!kern_cuda_built()) {
        assert_int_equal(kern_device_parse("cuda", &dev, &err), -1);
        assert_non_null(strstr(err.msg, "no CUDA backend"));
    }

    struct {
        const char *why;
        struct model_config m;
        struct kern_stage_spec s;
        const char *msg;
    } bad[] = {
        {"heads", {.vocab = 16, .context = 8, .d_model = 9, .heads = 2, .layers = 2}, ok, "multiple of heads"},
        {"zero vocab", {.vocab = 0, .context = 8, .d_model = 8, .heads = 2, .layers = 2}, ok, ">= 1"},
        {"range", m, {.layer_start = 1, .layer_end = 3, .micro_batch = 1, .seq_len = 8,
                      .in_flight = 1}, "layer range"},
        {"first flag", m, {.layer_start = 0, .layer_end = 1, .first = 0, .micro_batch = 1,
                           .seq_len = 8, .in_flight = 1}, "first stage"},
        {"last flag", m, {.layer_start = 1, .layer_end = 2, .last = 0, .micro_batch = 1,
                          .seq_len = 8, .in_flight = 1}, "last stage"},
        {"seq_len", m, {.layer_start = 0, .layer_end = 1, .first = 1, .micro_batch = 1,
                        .seq_len = 9, .in_flight = 1}, "seq_len"},
        {"in_flight", m, {.layer_start = 0, .layer_end = 1, .first = 1, .micro_batch = 1,
                          .seq_len = 8, .in_flight = 0}, "in_flight"},
        {"link", m, {.layer_start = 0, .layer_end = 1, .first = 1, .micro_batch = 1,
                     .seq_len = 8, .in_flight = 1, .link = CODEC_COUNT}, "unknown link format"},
        {"huge", {.vocab = 50000, .context = 8, .d_model = 60000, .heads = 2, .layers = 2}, ok, "too large"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (kern_stage_new(&cpu, &bad[i].m, &bad[i].s, &st, &err) != -1 ||
            !strstr(err.msg, bad[i].msg))
            fail_msg("%s: got '%s'", bad[i].why, err.msg);
        assert_null(st);
    }

    assert_int_equal(kern_stage_new(&cpu, &m, &ok, &st, &err), 0);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 16};
    float out[64], dout[64] = {0};
    assert_int_equal(kern_stage_forward(st, 0, tok, NULL, out, &err), -1);
    assert_non_null(strstr(err.msg, "token 16 at position 7"));
    tok[7] = -1;
    assert_int_equal(kern_stage_forward(st, 0, tok, NULL, out, &err), -1);
    tok[7] = 0;
    assert_int_equal(kern_stage_backward(st, 0, dout, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "no forward"));
    assert_int_equal(kern_stage_forward(st, 0, tok, NULL, out, &err), 0);
    assert_int_equal(kern_stage_forward(st, 1, tok, NULL, out, &err), 0);
    assert_int_equal(kern_stage_forward(st, 2, tok, NULL, out, &err), -1);
    assert_non_null(strstr(err.msg, "would overwrite micro-batch 0"));
    assert_int_equal(kern_stage_forward(st, -1, tok, NULL, out, &err), -1);
    assert_int_equal(kern_stage_backward(st, 2, dout, NULL, &err), -1);
    assert_int_equal(kern_stage_backward(st, 1, dout, NULL, &err), 0);
    assert_int_equal(kern_stage_backward(st, 1, dout, NULL, &err), -1);
    kern_stage_drop_in_flight(st);
    assert_int_equal(kern_stage_backward(st, 0, dout, NULL, &err), -1);
    assert_int_equal(kern_stage_forward(st, 2, tok, NULL, out, &err), 0);
    kern_stage_free(st);
}


int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_load_continue),
        cmocka_unit_test(test_extra_state),
        cmocka_unit_test(test_file_peek),
        cmocka_unit_test(test_file_params),
        cmocka_unit_test(test_file_peek_bounds),
        cmocka_unit_test(test_assemble_other_split),
        cmocka_unit_test(test_step0_without_moments),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
