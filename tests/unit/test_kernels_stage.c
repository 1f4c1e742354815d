/* test_kernels_stage.c - kernels/kernels.h on the CPU backend: whole stages.
 * Loss at initialisation ~ ln(V); weights independent of the split; stages
 * [0,2)+[2,4) equal one stage [0,4) bit for bit (loss and every gradient);
 * stage gradients against fp32 finite differences along directions; AdamW
 * by hand; overfitting a fixed text; save/load/continue; logits for
 * sampling; stage file headers; bad input. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/kernels.h"

static const struct kern_device cpu = {KERN_CPU, 0};

static const char corpus[] =
    "It was the best of times, it was the worst of times, it was the age of "
    "wisdom, it was the age of foolishness, it was the epoch of belief, it was "
    "the epoch of incredulity, it was the season of Light, it was the season of "
    "Darkness, it was the spring of hope, it was the winter of despair.";

static struct kern_stage *stage_new(const struct kern_model *m, int start, int end, int B,
                                    int T, int in_flight, uint64_t seed)
{
    struct kern_stage_spec s = {.layer_start = start, .layer_end = end, .first = start == 0,
                                .last = end == m->layers, .micro_batch = B, .seq_len = T,
                                .in_flight = in_flight, .seed = seed};
    struct kern_stage *st;
    struct kern_err err = {{0}};
    if (kern_stage_new(&cpu, m, &s, &st, &err))
        fail_msg("kern_stage_new: %s", err.msg);
    return st;
}

/* Fills tokens (B,T) and targets (B,T) with the text at deterministic offsets
 * derived from batch number k. */
static void text_batch(int B, int T, int k, int32_t *tokens, int32_t *targets)
{
    size_t len = sizeof corpus - 1;
    for (int b = 0; b < B; b++) {
        size_t start = ((size_t)k * 7919 + (size_t)b * 104729) % (len - (size_t)T - 1);
        for (int t = 0; t < T; t++) {
            tokens[b * T + t] = (unsigned char)corpus[start + t];
            targets[b * T + t] = (unsigned char)corpus[start + t + 1];
        }
    }
}

static float *read_buf(struct kern_stage *st, enum kern_buffer which)
{
    struct kern_err err;
    float *p = malloc(kern_stage_param_count(st) * sizeof *p);
    assert_non_null(p);
    if (kern_stage_read(st, which, p, &err))
        fail_msg("read: %s", err.msg);
    return p;
}

static const struct kern_tensor *find_tensor(struct kern_stage *st, const char *name)
{
    for (int i = 0; i < kern_stage_tensor_count(st); i++)
        if (strcmp(kern_stage_tensor(st, i)->name, name) == 0)
            return kern_stage_tensor(st, i);
    return NULL;
}

/* Whole-model forward+backward of one micro-batch on a first-and-last stage. */
static float step_loss(struct kern_stage *st, int mb, const int32_t *tok, const int32_t *tgt,
                       float dloss)
{
    struct kern_err err;
    float loss;
    if (kern_stage_forward(st, mb, tok, tgt, &loss, &err))
        fail_msg("forward: %s", err.msg);
    if (dloss != 0 && kern_stage_backward(st, mb, &dloss, NULL, &err))
        fail_msg("backward: %s", err.msg);
    return loss;
}

static void test_init_loss_is_ln_vocab(void **state)
{
    (void)state;
    struct kern_model m = {.vocab = 256, .context = 32, .d_model = 64, .heads = 4, .layers = 2};
    struct kern_stage *st = stage_new(&m, 0, 2, 4, 32, 1, 7);
    int32_t tok[4 * 32], tgt[4 * 32];
    text_batch(4, 32, 0, tok, tgt);
    float loss = step_loss(st, 0, tok, tgt, 0);
    assert_true(fabsf(loss - logf(256)) < 0.05f);
    /* 2 + 12*2 + 3 tensors; 12C^2+13C per block */
    assert_int_equal(kern_stage_tensor_count(st), 29);
    assert_int_equal(kern_stage_param_count(st),
                     2 * (256 * 64) + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
    kern_stage_free(st);
}

static void test_init_independent_of_split(void **state)
{
    (void)state;
    struct kern_model m = {.vocab = 50, .context = 16, .d_model = 32, .heads = 4, .layers = 4};
    struct kern_stage *whole = stage_new(&m, 0, 4, 2, 8, 1, 99);
    struct kern_stage *tail = stage_new(&m, 2, 4, 2, 8, 1, 99);
    struct kern_stage *other = stage_new(&m, 2, 4, 2, 8, 1, 100);
    float *pw = read_buf(whole, KERN_PARAMS), *pt = read_buf(tail, KERN_PARAMS);
    float *po = read_buf(other, KERN_PARAMS);
    for (int i = 0; i < kern_stage_tensor_count(tail); i++) {
        const struct kern_tensor *t = kern_stage_tensor(tail, i);
        const struct kern_tensor *w = find_tensor(whole, t->name);
        assert_non_null(w);
        assert_int_equal(t->count, w->count);
        assert_memory_equal(pt + t->offset, pw + w->offset, t->count * sizeof(float));
    }
    /* another seed gives other weights */
    const struct kern_tensor *q = find_tensor(other, "h2.qkvw");
    assert_memory_not_equal(po + q->offset, pt + q->offset, q->count * sizeof(float));
    /* GPT-2 statistics: N(0,0.02) matrices, ones and zeros for LN */
    double sum2 = 0;
    for (size_t i = 0; i < q->count; i++)
        sum2 += (double)pt[q->offset + i] * pt[q->offset + i];
    assert_true(fabs(sqrt(sum2 / q->count) - 0.02) < 0.002);
    assert_true(pt[find_tensor(tail, "h3.ln1w")->offset] == 1.0f);
    assert_true(pt[find_tensor(tail, "h3.ln1b")->offset] == 0.0f);
    free(pw), free(pt), free(po);
    kern_stage_free(whole), kern_stage_free(tail), kern_stage_free(other);
}

static void test_split_equals_whole_bit_for_bit(void **state)
{
    (void)state;
    enum { B = 2, T = 16, M = 3 };
    struct kern_model m = {.vocab = 97, .context = 16, .d_model = 48, .heads = 3, .layers = 4};
    struct kern_stage *whole = stage_new(&m, 0, 4, B, T, M, 5);
    struct kern_stage *s0 = stage_new(&m, 0, 2, B, T, M, 5);
    struct kern_stage *s1 = stage_new(&m, 2, 4, B, T, M, 5);
    struct kern_err err;
    int32_t tok[M][B * T], tgt[M][B * T];
    float hidden[M][B * T * 48], dhidden[B * T * 48];
    float lw[M], ls[M], dloss = 1.0f / M;

    for (int k = 0; k < M; k++) {
        text_batch(B, T, k, tok[k], tgt[k]);
        for (int i = 0; i < B * T; i++) /* vocab 97: fold bytes into range */
            tok[k][i] %= 97, tgt[k][i] %= 97;
    }
    /* GPipe order: all forwards, then all backwards in reverse */
    for (int k = 0; k < M; k++) {
        assert_int_equal(kern_stage_forward(whole, k, tok[k], tgt[k], &lw[k], &err), 0);
        assert_int_equal(kern_stage_forward(s0, k, tok[k], NULL, hidden[k], &err), 0);
        assert_int_equal(kern_stage_forward(s1, k, hidden[k], tgt[k], &ls[k], &err), 0);
    }
    for (int k = M - 1; k >= 0; k--) {
        assert_int_equal(kern_stage_backward(whole, k, &dloss, NULL, &err), 0);
        assert_int_equal(kern_stage_backward(s1, k, &dloss, dhidden, &err), 0);
        assert_int_equal(kern_stage_backward(s0, k, dhidden, NULL, &err), 0);
    }
    assert_memory_equal(lw, ls, sizeof lw);
    float *gw = read_buf(whole, KERN_GRADS);
    struct kern_stage *parts[2] = {s0, s1};
    int compared = 0;
    for (int p = 0; p < 2; p++) {
        float *gp = read_buf(parts[p], KERN_GRADS);
        for (int i = 0; i < kern_stage_tensor_count(parts[p]); i++) {
            const struct kern_tensor *t = kern_stage_tensor(parts[p], i);
            const struct kern_tensor *w = find_tensor(whole, t->name);
            if (memcmp(gp + t->offset, gw + w->offset, t->count * sizeof(float)))
                fail_msg("gradient of %s differs between the split and the whole model",
                         t->name);
            compared++;
        }
        free(gp);
    }
    assert_int_equal(compared, kern_stage_tensor_count(whole));
    /* and the squared norms add up */
    double n_whole, n0, n1;
    kern_stage_grad_norm2(whole, &n_whole, &err);
    kern_stage_grad_norm2(s0, &n0, &err);
    kern_stage_grad_norm2(s1, &n1, &err);
    assert_true(n_whole > 0 && fabs(n0 + n1 - n_whole) < 1e-9 * n_whole);
    free(gw);
    kern_stage_free(whole), kern_stage_free(s0), kern_stage_free(s1);
}

/* Objective of a middle stage: sum(output * R). */
static double middle_objective(struct kern_stage *st, const float *in, const float *r, float *out,
                               size_t n)
{
    struct kern_err err;
    if (kern_stage_forward(st, 0, in, NULL, out, &err))
        fail_msg("forward: %s", err.msg);
    kern_stage_drop_in_flight(st);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)out[i] * r[i];
    return s;
}

static float lcg_normal(uint32_t *s)
{
    float u = 0;
    for (int i = 0; i < 12; i++) { /* Irwin-Hall: mean 6, variance 1 */
        *s = *s * 1664525u + 1013904223u;
        u += (float)(*s >> 8) / 16777216.0f;
    }
    return u - 6.0f;
}

/* Directional derivatives in fp32: for each tensor, move every element along
 * a random direction d by h and compare (f(p+hd)-f(p-hd))/2h with g.d. */
static void check_directions(struct kern_stage *st, double (*objective)(void *), void *ctx,
                             const float *grads)
{
    struct kern_err err;
    float *p0 = read_buf(st, KERN_PARAMS);
    size_t n = kern_stage_param_count(st);
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    uint32_t seed = 17;
    for (int i = 0; i < kern_stage_tensor_count(st); i++) {
        const struct kern_tensor *t = kern_stage_tensor(st, i);
        float *d = malloc(t->count * sizeof *d);
        assert_non_null(d);
        double gd = 0, dd = 0, pp = 0;
        for (size_t j = 0; j < t->count; j++) {
            d[j] = lcg_normal(&seed);
            gd += (double)grads[t->offset + j] * d[j];
            dd += (double)d[j] * d[j];
            pp += (double)p0[t->offset + j] * p0[t->offset + j];
        }
        /* steps of 4% and 2% of the tensor's own scale, combined by
         * Richardson extrapolation so the h^2 error of the central difference
         * cancels; large enough to rise above fp32 rounding of the loss */
        double rms = sqrt(pp / (double)t->count);
        double h = 0.04 * (rms > 0.02 ? rms : 0.02) / sqrt(dd / (double)t->count);
        double slope[2];
        for (int k = 0; k < 2; k++) {
            double hk = k ? h / 2 : h, f[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                memcpy(p, p0, n * sizeof *p);
                for (size_t j = 0; j < t->count; j++)
                    p[t->offset + j] += (float)((sgn ? -hk : hk) * d[j]);
                assert_int_equal(kern_stage_write(st, KERN_PARAMS, p, &err), 0);
                f[sgn] = objective(ctx);
            }
            slope[k] = (f[0] - f[1]) / (2 * hk);
        }
        double num = (4 * slope[1] - slope[0]) / 3;
        double scale = fabs(gd) + 1e-3 * sqrt(dd);
        if (fabs(num - gd) > 0.03 * scale)
            fail_msg("tensor %s: finite difference %.6g, backward %.6g", t->name, num, gd);
        free(d);
    }
    assert_int_equal(kern_stage_write(st, KERN_PARAMS, p0, &err), 0);
    free(p), free(p0);
}

/* Moves every parameter by N(0, scale^2): away from the initialisation, where
 * the residual branches are nearly silent and a wrongly wired backward can
 * pass unnoticed. */
static void scramble_params(struct kern_stage *st, float scale, uint32_t seed)
{
    struct kern_err err;
    float *p = read_buf(st, KERN_PARAMS);
    for (size_t i = 0; i < kern_stage_param_count(st); i++)
        p[i] += scale * lcg_normal(&seed);
    assert_int_equal(kern_stage_write(st, KERN_PARAMS, p, &err), 0);
    free(p);
}

struct whole_ctx {
    struct kern_stage *st;
    const int32_t *tok, *tgt;
};

static double whole_objective(void *p)
{
    struct whole_ctx *c = p;
    float loss = step_loss(c->st, 0, c->tok, c->tgt, 0);
    kern_stage_drop_in_flight(c->st);
    return loss;
}

struct middle_ctx {
    struct kern_stage *st;
    const float *in, *r;
    float *out;
    size_t n;
};

static double middle_objective_ctx(void *p)
{
    struct middle_ctx *c = p;
    return middle_objective(c->st, c->in, c->r, c->out, c->n);
}

static void test_stage_gradients_finite_difference(void **state)
{
    (void)state;
    enum { B = 2, T = 8, C = 16 };
    struct kern_model m = {.vocab = 40, .context = 8, .d_model = C, .heads = 2, .layers = 3};
    struct kern_err err;
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 7 + 3) % 40, tgt[i] = (i * 11 + 5) % 40;

    /* whole model, first and last */
    struct kern_stage *st = stage_new(&m, 0, 3, B, T, 1, 3);
    scramble_params(st, 0.2f, 1);
    step_loss(st, 0, tok, tgt, 1.0f);
    float *g = read_buf(st, KERN_GRADS);
    struct whole_ctx wc = {st, tok, tgt};
    check_directions(st, whole_objective, &wc, g);
    free(g);
    kern_stage_free(st);

    /* a middle stage: weights and the input gradient */
    st = stage_new(&m, 1, 2, B, T, 1, 3);
    scramble_params(st, 0.2f, 2);
    size_t n = (size_t)B * T * C;
    float in[B * T * C], r[B * T * C], out[B * T * C], din[B * T * C];
    uint32_t seed = 5;
    for (size_t i = 0; i < n; i++)
        in[i] = lcg_normal(&seed), r[i] = lcg_normal(&seed);
    assert_int_equal(kern_stage_forward(st, 0, in, NULL, out, &err), 0);
    assert_int_equal(kern_stage_backward(st, 0, r, din, &err), 0);
    g = read_buf(st, KERN_GRADS);
    struct middle_ctx mc = {st, in, r, out, n};
    check_directions(st, middle_objective_ctx, &mc, g);
    float dirv[B * T * C], inp[B * T * C];
    double gd = 0, h = 1e-2;
    for (size_t i = 0; i < n; i++)
        dirv[i] = lcg_normal(&seed), gd += (double)din[i] * dirv[i];
    double f[2];
    for (int sgn = 0; sgn < 2; sgn++) {
        for (size_t i = 0; i < n; i++)
            inp[i] = in[i] + (float)((sgn ? -h : h) * dirv[i]);
        f[sgn] = middle_objective(st, inp, r, out, n);
    }
    double num = (f[0] - f[1]) / (2 * h);
    if (fabs(num - gd) > 0.03 * fabs(gd))
        fail_msg("input gradient: finite difference %.6g, backward %.6g", num, gd);
    free(g);
    kern_stage_free(st);
}

static void test_adamw_by_hand(void **state)
{
    (void)state;
    struct kern_model m = {.vocab = 10, .context = 4, .d_model = 8, .heads = 2, .layers = 1};
    struct kern_stage *st = stage_new(&m, 0, 1, 1, 4, 1, 1);
    struct kern_err err;
    size_t n = kern_stage_param_count(st);
    float *p0 = read_buf(st, KERN_PARAMS), *g = malloc(n * sizeof *g);
    assert_non_null(g);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)((int)(i % 7) - 3) * 0.1f;
    assert_int_equal(kern_stage_write(st, KERN_GRADS, g, &err), 0);
    struct kern_adamw h = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.1f, .grad_scale = 0.5f};
    assert_int_equal(kern_stage_adamw(st, &h, &err), 0);
    assert_int_equal(kern_stage_step(st), 1);
    float *p1 = read_buf(st, KERN_PARAMS);
    for (int i = 0; i < kern_stage_tensor_count(st); i++) {
        const struct kern_tensor *t = kern_stage_tensor(st, i);
        for (size_t j = t->offset; j < t->offset + t->count; j++) {
            /* step 1: mhat = g', vhat = g'^2, so the update is lr*sign(g') */
            double gs = 0.5 * g[j];
            double upd = gs == 0 ? 0 : gs / (fabs(gs) + 1e-8);
            double want = p0[j] - 0.01 * (upd + (t->decay ? 0.1 * p0[j] : 0));
            assert_true(fabs(p1[j] - want) < 1e-6);
        }
    }
    double norm2;
    assert_int_equal(kern_stage_grad_norm2(st, &norm2, &err), 0);
    double want = 0;
    for (size_t i = 0; i < n; i++)
        want += (double)g[i] * g[i];
    assert_true(fabs(norm2 - want) < 1e-9 * want);
    assert_int_equal(kern_stage_zero_grad(st, &err), 0);
    assert_int_equal(kern_stage_grad_norm2(st, &norm2, &err), 0);
    assert_true(norm2 == 0.0);
    /* bad hyper-parameters are refused and take no step */
    h.beta1 = 1.0f;
    assert_int_equal(kern_stage_adamw(st, &h, &err), -1);
    assert_non_null(strstr(err.msg, "betas"));
    assert_int_equal(kern_stage_step(st), 1);
    free(p0), free(p1), free(g);
    kern_stage_free(st);
}

/* Runs `steps` AdamW steps of M micro-batches on stages [0,1)+[1,2) and
 * records each step's mean loss. */
static void train(struct kern_stage *s0, struct kern_stage *s1, int first_step, int steps,
                  float *losses)
{
    enum { B = 4, T = 32, C = 32, M = 2 };
    struct kern_err err;
    int32_t tok[B * T], tgt[B * T];
    float hidden[B * T * C], dhidden[B * T * C], loss, dloss = 1.0f / M;
    struct kern_adamw h = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.0f, .grad_scale = 1.0f};
    for (int s = 0; s < steps; s++) {
        double sum = 0;
        assert_int_equal(kern_stage_zero_grad(s0, &err), 0);
        assert_int_equal(kern_stage_zero_grad(s1, &err), 0);
        for (int k = 0; k < M; k++) {
            text_batch(B, T, (first_step + s) * M + k, tok, tgt);
            if (kern_stage_forward(s0, k, tok, NULL, hidden, &err) ||
                kern_stage_forward(s1, k, hidden, tgt, &loss, &err) ||
                kern_stage_backward(s1, k, &dloss, dhidden, &err) ||
                kern_stage_backward(s0, k, dhidden, NULL, &err))
                fail_msg("step %d: %s", first_step + s, err.msg);
            sum += loss;
        }
        assert_int_equal(kern_stage_adamw(s0, &h, &err), 0);
        assert_int_equal(kern_stage_adamw(s1, &h, &err), 0);
        losses[s] = (float)(sum / M);
    }
}

static const struct kern_model small = {.vocab = 256, .context = 32, .d_model = 32,
                                        .heads = 4, .layers = 2};

static void test_overfits_fixed_text(void **state)
{
    (void)state;
    enum { STEPS = 300 };
    struct kern_stage *s0 = stage_new(&small, 0, 1, 4, 32, 2, 11);
    struct kern_stage *s1 = stage_new(&small, 1, 2, 4, 32, 2, 11);
    float losses[STEPS];
    train(s0, s1, 0, STEPS, losses);
    print_message("overfit: loss %.3f at step 0, %.3f at step %d\n", losses[0],
                  losses[STEPS - 1], STEPS - 1);
    assert_true(losses[0] > 5.0f);
    assert_true(losses[STEPS - 1] < 0.4f * losses[0]);
    kern_stage_free(s0), kern_stage_free(s1);
}

static void save_to(struct kern_stage *st, FILE *f)
{
    struct kern_err err;
    if (kern_stage_save(st, f, &err))
        fail_msg("save: %s", err.msg);
    rewind(f);
}

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
    assert_non_null(strstr(err.msg, "layers [0,1)"));
    float *q = read_buf(r1, KERN_PARAMS);
    assert_memory_equal(p, q, kern_stage_param_count(r1) * sizeof(float));
    free(q);

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

/* Logits for sampling: their cross-entropy is the training loss, a split
 * model gives the same logits, and the slot stays free. */
static void test_logits(void **state)
{
    (void)state;
    enum { B = 2, T = 16 };
    struct kern_err err;
    int V = small.vocab;
    int32_t tok[B * T], tgt[B * T];
    float *whole_logits = malloc((size_t)B * T * V * sizeof(float));
    float *split_logits = malloc((size_t)B * T * V * sizeof(float));
    float hidden[B * T * 32], loss;
    assert_non_null(whole_logits), assert_non_null(split_logits);
    struct kern_stage *whole = stage_new(&small, 0, 2, B, T, 1, 5);
    struct kern_stage *s0 = stage_new(&small, 0, 1, B, T, 1, 5);
    struct kern_stage *s1 = stage_new(&small, 1, 2, B, T, 1, 5);
    text_batch(B, T, 3, tok, tgt);
    assert_int_equal(kern_stage_logits(whole, tok, whole_logits, &err), 0);
    double ce = 0;
    for (int i = 0; i < B * T; i++) {
        const float *l = whole_logits + (size_t)i * V;
        double mx = l[0], z = 0;
        for (int v = 1; v < V; v++)
            mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < V; v++)
            z += exp(l[v] - mx);
        ce += mx + log(z) - l[tgt[i]];
    }
    assert_int_equal(kern_stage_forward(whole, 0, tok, tgt, &loss, &err), 0);
    assert_float_equal(ce / (B * T), loss, 1e-5 * loss);
    assert_int_equal(kern_stage_forward(s0, 0, tok, NULL, hidden, &err), 0);
    kern_stage_drop_in_flight(s0);
    assert_int_equal(kern_stage_logits(s1, hidden, split_logits, &err), 0);
    assert_memory_equal(whole_logits, split_logits, (size_t)B * T * V * sizeof(float));
    /* logits kept nothing in flight: a training forward can follow */
    assert_int_equal(kern_stage_forward(s1, 0, hidden, tgt, &loss, &err), 0);
    assert_int_equal(kern_stage_logits(s1, hidden, split_logits, &err), -1);
    assert_non_null(strstr(err.msg, "in flight"));
    assert_int_equal(kern_stage_logits(s0, tok, split_logits, &err), -1);
    assert_non_null(strstr(err.msg, "not the head"));
    kern_stage_free(whole), kern_stage_free(s0), kern_stage_free(s1);
    free(whole_logits), free(split_logits);
}

/* A checkpoint taken under one layer split continues under another: the
 * new stages are assembled tensor by tensor and train on exactly as the
 * old ones do. */
static void test_assemble_other_split(void **state)
{
    (void)state;
    enum { K = 4 };
    struct kern_err err;
    struct kern_model three = small;
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
    struct kern_model three = small;
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
    /* its size: header (68), params, moments and one extra, checksum */
    fseek(f, 0, SEEK_END);
    assert_int_equal(ftell(f), 68 + 4 * 4 * (long)kern_stage_param_count(a1) + 8);
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
    memcpy(v1 + 48, raw + 52, 16);            /* step, n */
    memcpy(v1 + 64, raw + 68, 12 * n);        /* params and moments */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < v1_len - 8; i++) {
        h ^= v1[i];
        h *= 0x100000001b3ull;
    }
    memcpy(v1 + v1_len - 8, &h, 8);
    FILE *g = fmemopen(v1, v1_len, "rb");
    struct kern_model pm;
    struct kern_stage_spec psp = {.micro_batch = 1, .seq_len = 1, .in_flight = 1};
    assert_int_equal(kern_stage_file_peek(g, &pm, &psp, &err), 0);
    assert_int_equal(kern_stage_load(r1, g, &err), 0);
    assert_null(kern_stage_extra_if(r1, KERN_EXTRA_OUTER_MOMENTUM));
    fclose(g);
    free(v1), free(raw);
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

/* A stage file says which stage can load it, and peeking leaves it loadable. */
static void test_file_peek(void **state)
{
    (void)state;
    struct kern_err err;
    struct kern_model m;
    struct kern_stage_spec sp = {.micro_batch = 3, .seq_len = 7, .in_flight = 1};
    struct kern_stage *s1 = stage_new(&small, 1, 2, 4, 32, 2, 11);
    FILE *f = tmpfile();
    assert_non_null(f);
    save_to(s1, f);
    assert_int_equal(kern_stage_file_peek(f, &m, &sp, &err), 0);
    assert_memory_equal(&m, &small, sizeof m);
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
    assert_int_equal(kern_stage_file_peek(f, &m, &sp, &err), -1);
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
    struct kern_model m;
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
        {"a 3 GB model in a small file", 72, 1024, 0, "bytes instead of"},
        {"n that the model does not make", len, 0, 12345, "make"},
        {"n that fits the model, a truncated file", len - 4, 0, 0, "bytes instead of"},
        {"n that would overflow", len, 0, UINT64_MAX / 4, "make"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char *copy = malloc((size_t)len);
        assert_non_null(copy);
        memcpy(copy, raw, (size_t)len);
        if (bad[i].d_model) {
            int32_t C = bad[i].d_model, L = 64, ints[9];
            memcpy(ints, copy + 12, sizeof ints);
            ints[2] = C, ints[4] = L, ints[5] = 0, ints[6] = L, ints[7] = 1, ints[8] = 1;
            memcpy(copy + 12, ints, sizeof ints);
            uint64_t n = (uint64_t)(ints[0] + ints[1]) * C + (uint64_t)L * (12u * C * C + 13u * C) +
                         (uint64_t)(ints[0] + 2) * C;   /* what that model makes: the header agrees */
            memcpy(copy + 60, &n, 8);   /* version 2: 10 ints, the step, then n */
        }
        if (bad[i].n)
            memcpy(copy + 60, &bad[i].n, 8);
        FILE *g = fmemopen(copy, (size_t)bad[i].keep, "rb");
        assert_non_null(g);
        if (kern_stage_file_peek(g, &m, &sp, &err) != -1 || !strstr(err.msg, bad[i].msg))
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
    struct kern_model m = {.vocab = 16, .context = 8, .d_model = 8, .heads = 2, .layers = 2};
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
        struct kern_model m;
        struct kern_stage_spec s;
        const char *msg;
    } bad[] = {
        {"heads", {16, 8, 9, 2, 2}, ok, "multiple of heads"},
        {"zero vocab", {0, 8, 8, 2, 2}, ok, ">= 1"},
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
        {"huge", {50000, 8, 60000, 2, 2}, ok, "too large"},
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
        cmocka_unit_test(test_init_loss_is_ln_vocab),
        cmocka_unit_test(test_init_independent_of_split),
        cmocka_unit_test(test_split_equals_whole_bit_for_bit),
        cmocka_unit_test(test_stage_gradients_finite_difference),
        cmocka_unit_test(test_adamw_by_hand),
        cmocka_unit_test(test_overfits_fixed_text),
        cmocka_unit_test(test_save_load_continue),
        cmocka_unit_test(test_logits),
        cmocka_unit_test(test_extra_state),
        cmocka_unit_test(test_file_peek),
        cmocka_unit_test(test_file_peek_bounds),
        cmocka_unit_test(test_assemble_other_split),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
