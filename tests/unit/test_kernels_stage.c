/* test_kernels_stage.c - kernels/kernels.h on the CPU backend: whole stages.
 * Loss at initialisation ~ ln(V); weights independent of the split; stages
 * [0,2)+[2,4) equal one stage [0,4) bit for bit (loss and every gradient);
 * stage gradients against fp32 finite differences along directions; AdamW
 * by hand; overfitting a fixed text; logits for sampling.  Stage files:
 * test_kernels_stage_file.c. */
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
#include "kernels_fixture.h"

static void test_init_loss_is_ln_vocab(void **state)
{
    (void)state;
    struct model_config m = {.vocab = 256, .context = 32, .d_model = 64, .heads = 4, .layers = 2};
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
    struct model_config m = {.vocab = 50, .context = 16, .d_model = 32, .heads = 4, .layers = 4};
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
    struct model_config m = {.vocab = 97, .context = 16, .d_model = 48, .heads = 3, .layers = 4};
    struct kern_stage *whole = stage_new(&m, 0, 4, B, T, M, 5);
    struct kern_stage *s0 = stage_new(&m, 0, 2, B, T, M, 5);
    struct kern_stage *s1 = stage_new(&m, 2, 4, B, T, M, 5);
    struct kern_err err;
    int32_t tok[M][B * T], tgt[M][B * T];

    for (int k = 0; k < M; k++) {
        text_batch(B, T, k, tok[k], tgt[k]);
        for (int i = 0; i < B * T; i++) /* vocab 97: fold bytes into range */
            tok[k][i] %= 97, tgt[k][i] %= 97;
    }
    expect_gpipe_split(whole, s0, s1, M, tok[0], tgt[0]);
    /* and the squared norms add up */
    double n_whole, n0, n1;
    kern_stage_grad_norm2(whole, &n_whole, &err);
    kern_stage_grad_norm2(s0, &n0, &err);
    kern_stage_grad_norm2(s1, &n1, &err);
    assert_true(n_whole > 0 && fabs(n0 + n1 - n_whole) < 1e-9 * n_whole);
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
    struct model_config m = {.vocab = 40, .context = 8, .d_model = C, .heads = 2, .layers = 3};
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
    struct model_config m = {.vocab = 10, .context = 4, .d_model = 8, .heads = 2, .layers = 1};
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_loss_is_ln_vocab),
        cmocka_unit_test(test_init_independent_of_split),
        cmocka_unit_test(test_split_equals_whole_bit_for_bit),
        cmocka_unit_test(test_stage_gradients_finite_difference),
        cmocka_unit_test(test_adamw_by_hand),
        cmocka_unit_test(test_overfits_fixed_text),
        cmocka_unit_test(test_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
