/* test_kernels_layers.c - every CPU layer's backward against central finite
 * differences of its forward, in float64 (the _f64 build of the very source
 * the fp32 backend runs). Each check uses the objective sum(out * R) for a
 * fixed random R, so backward is called with dout = R. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu_layers.h"
#include "../../kernels/cpu_exp.h"
#include "../../kernels/cpu_tanh.h"

#define FD_H 1e-5       /* finite-difference step */
#define FD_TOL 1e-6     /* |numeric - analytic| <= FD_TOL * (1 + |analytic|) */
#define FD_SAMPLES 48   /* elements checked per input (all when fewer) */

static uint64_t rng_state = 12345;

static double rnd_normal(void)
{
    /* xorshift64* into Box-Muller; plenty for test data */
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        u[i] = ((double)((rng_state * 2685821657736338717ull) >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2 * log(u[0])) * cos(2 * M_PI * u[1]);
}

static double *rnd_array(size_t n, double scale)
{
    double *a = malloc(n * sizeof *a);
    assert_non_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = scale * rnd_normal();
    return a;
}

static double *zeros(size_t n)
{
    double *a = calloc(n, sizeof *a);
    assert_non_null(a);
    return a;
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

struct fd_input {
    const char *name;
    double *x;    /* the input, perturbed in place */
    double *grad; /* the analytic gradient of the objective */
    size_t n;
};

typedef double (*objective_fn)(void *ctx);

/* Compares every analytic gradient with (f(x+h) - f(x-h)) / 2h at up to
 * FD_SAMPLES elements per input; fails on the first mismatch, naming it. */
static void check_gradients(const char *layer, objective_fn f, void *ctx,
                            struct fd_input *in, int n_in)
{
    for (int k = 0; k < n_in; k++) {
        size_t stride = in[k].n > FD_SAMPLES ? in[k].n / FD_SAMPLES : 1;
        for (size_t i = 0; i < in[k].n; i += stride) {
            double keep = in[k].x[i];
            in[k].x[i] = keep + FD_H;
            double fp = f(ctx);
            in[k].x[i] = keep - FD_H;
            double fm = f(ctx);
            in[k].x[i] = keep;
            double num = (fp - fm) / (2 * FD_H), ana = in[k].grad[i];
            if (fabs(num - ana) > FD_TOL * (1 + fabs(ana)))
                fail_msg("%s: d/d %s[%zu]: finite difference %.10g, backward %.10g", layer,
                         in[k].name, i, num, ana);
        }
    }
}

/* ---- encoder ---- */
struct encoder_case {
    int B, T, C, V;
    int32_t *inp;
    double *wte, *wpe, *out, *r;
};

static double encoder_objective(void *p)
{
    struct encoder_case *c = p;
    kern_cpu_encoder_forward_f64(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return dot(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static void test_encoder(void **state)
{
    (void)state;
    struct encoder_case c = {.B = 2, .T = 5, .C = 6, .V = 7};
    size_t BT = (size_t)c.B * c.T, BTC = BT * c.C;
    int32_t ids[10] = {1, 3, 3, 0, 6, 2, 3, 5, 1, 1}; /* repeats: gradients add up */
    c.inp = ids;
    c.wte = rnd_array((size_t)c.V * c.C, 1);
    c.wpe = rnd_array((size_t)c.T * c.C, 1);
    c.out = zeros(BTC);
    c.r = rnd_array(BTC, 1);
    double *dwte = zeros((size_t)c.V * c.C), *dwpe = zeros((size_t)c.T * c.C);
    kern_cpu_encoder_backward_f64(dwte, dwpe, c.r, c.inp, c.B, c.T, c.C);
    struct fd_input in[] = {{"wte", c.wte, dwte, (size_t)c.V * c.C},
                            {"wpe", c.wpe, dwpe, (size_t)c.T * c.C}};
    check_gradients("encoder", encoder_objective, &c, in, 2);
    free(c.wte), free(c.wpe), free(c.out), free(c.r), free(dwte), free(dwpe);
}

/* ---- layernorm ---- */
struct layernorm_case {
    int N, C;
    double *inp, *w, *b, *out, *mean, *rstd, *r;
};

static double layernorm_objective(void *p)
{
    struct layernorm_case *c = p;
    kern_cpu_layernorm_forward_f64(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}

static void test_layernorm(void **state)
{
    (void)state;
    struct layernorm_case c = {.N = 6, .C = 9};
    size_t NC = (size_t)c.N * c.C;
    c.inp = rnd_array(NC, 2);
    c.w = rnd_array((size_t)c.C, 1);
    c.b = rnd_array((size_t)c.C, 1);
    c.out = zeros(NC), c.mean = zeros((size_t)c.N), c.rstd = zeros((size_t)c.N);
    c.r = rnd_array(NC, 1);
    double *dinp = zeros(NC), *dw = zeros((size_t)c.C), *db = zeros((size_t)c.C);
    layernorm_objective(&c);
    kern_cpu_layernorm_backward_f64(dinp, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    struct fd_input in[] = {{"inp", c.inp, dinp, NC},
                            {"weight", c.w, dw, (size_t)c.C},
                            {"bias", c.b, db, (size_t)c.C}};
    check_gradients("layernorm", layernorm_objective, &c, in, 3);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.r);
    free(dinp), free(dw), free(db);
}

/* ---- matmul ---- */
struct matmul_case {
    int N, IC, OC;
    double *inp, *w, *b, *out, *r;
};

static double matmul_objective(void *p)
{
    struct matmul_case *c = p;
    kern_cpu_matmul_forward_f64(c->out, c->inp, c->w, c->b, c->N, c->IC, c->OC);
    return dot(c->out, c->r, (size_t)c->N * c->OC);
}

static void test_matmul(void **state)
{
    (void)state;
    struct matmul_case c = {.N = 7, .IC = 5, .OC = 6};
    c.inp = rnd_array((size_t)c.N * c.IC, 1);
    c.w = rnd_array((size_t)c.OC * c.IC, 1);
    c.b = rnd_array((size_t)c.OC, 1);
    c.out = zeros((size_t)c.N * c.OC);
    c.r = rnd_array((size_t)c.N * c.OC, 1);
    double *dinp = zeros((size_t)c.N * c.IC), *dw = zeros((size_t)c.OC * c.IC);
    double *db = zeros((size_t)c.OC);
    kern_cpu_matmul_backward_f64(dinp, dw, db, c.r, c.inp, c.w, c.N, c.IC, c.OC);
    struct fd_input in[] = {{"inp", c.inp, dinp, (size_t)c.N * c.IC},
                            {"weight", c.w, dw, (size_t)c.OC * c.IC},
                            {"bias", c.b, db, (size_t)c.OC}};
    check_gradients("matmul", matmul_objective, &c, in, 3);

    /* no bias, and backward without dinp (the head of the last stage) */
    double *dw2 = zeros((size_t)c.OC * c.IC);
    c.b = NULL;
    kern_cpu_matmul_backward_f64(NULL, dw2, NULL, c.r, c.inp, c.w, c.N, c.IC, c.OC);
    struct fd_input in2[] = {{"weight", c.w, dw2, (size_t)c.OC * c.IC}};
    check_gradients("matmul without bias", matmul_objective, &c, in2, 1);
    free(in[2].x);
    free(c.inp), free(c.w), free(c.out), free(c.r), free(dinp), free(dw), free(db), free(dw2);
}

/* ---- attention ---- */
struct attention_case {
    int B, T, C, NH, KVH, window;
    double *qkv, *out, *att, *r;
};

static double attention_objective(void *p)
{
    struct attention_case *c = p;
    kern_cpu_attention_forward_f64(c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH, c->KVH, c->window);
    return dot(c->out, c->r, (size_t)c->B * c->T * c->C);
}

/* Multi-head (KVH = NH, GPT-2's qkv of 3C) and grouped-query attention:
 * one kv head for all query heads, and two for four; a sliding window of 3
 * positions (Mistral's: row t sees (t - 3, t]). */
static void test_attention(void **state)
{
    (void)state;
    static const int shapes[][6] = {{2, 5, 8, 2, 2, 0}, {2, 5, 16, 4, 1, 0}, {1, 7, 16, 4, 2, 0}, {2, 7, 16, 4, 2, 3}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    struct attention_case c = {.B = shapes[k][0], .T = shapes[k][1], .C = shapes[k][2], .NH = shapes[k][3],
                               .KVH = shapes[k][4], .window = shapes[k][5]};
    size_t BTC = (size_t)c.B * c.T * c.C, att_n = (size_t)c.B * c.NH * c.T * c.T;
    size_t W = (size_t)c.C + 2 * (size_t)c.KVH * (c.C / c.NH), BTW = (size_t)c.B * c.T * W;
    c.qkv = rnd_array(BTW, 1);
    c.out = zeros(BTC), c.att = zeros(att_n);
    c.r = rnd_array(BTC, 1);
    double *dqkv = zeros(BTW), *datt = zeros(att_n);
    attention_objective(&c);
    /* causal: every row of att sums to 1 and is zero above the diagonal
     * and (a window) before t - window + 1; within, above zero */
    for (int bh = 0; bh < c.B * c.NH; bh++)
        for (int t = 0; t < c.T; t++) {
            const double *row = c.att + ((size_t)bh * c.T + t) * c.T;
            double sum = 0;
            for (int s = 0; s < c.T; s++) {
                sum += row[s];
                int seen = s <= t && (c.window == 0 || s > t - c.window);
                assert_true(seen ? row[s] > 0 : row[s] == 0.0);
            }
            assert_true(fabs(sum - 1) < 1e-12);
        }
    kern_cpu_attention_backward_f64(dqkv, datt, c.r, c.qkv, c.att, c.B, c.T, c.C, c.NH, c.KVH, c.window);
    struct fd_input in[] = {{"qkv", c.qkv, dqkv, BTW}};
    check_gradients("attention", attention_objective, &c, in, 1);
    free(c.qkv), free(c.out), free(c.att), free(c.r), free(dqkv), free(datt);
    }
}

/* ---- rmsnorm ---- */
struct rmsnorm_case {
    int N, C;
    double eps;
    double *inp, *w, *out, *rstd, *r;
};

static double rmsnorm_objective(void *p)
{
    struct rmsnorm_case *c = p;
    kern_cpu_rmsnorm_forward_f64(c->out, c->rstd, c->inp, c->w, c->eps, c->N, c->C);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    struct rmsnorm_case c = {.N = 6, .C = 9, .eps = 1e-5};
    size_t NC = (size_t)c.N * c.C;
    c.inp = rnd_array(NC, 2);
    c.w = rnd_array((size_t)c.C, 1);
    c.out = zeros(NC), c.rstd = zeros((size_t)c.N);
    c.r = rnd_array(NC, 1);
    double *dinp = zeros(NC), *dw = zeros((size_t)c.C);
    rmsnorm_objective(&c);
    /* x * rsqrt(mean(x^2) + eps) * w, by hand for row 0 */
    double ss = 0;
    for (int i = 0; i < c.C; i++)
        ss += c.inp[i] * c.inp[i];
    assert_true(fabs(c.out[3] - c.inp[3] / sqrt(ss / c.C + c.eps) * c.w[3]) < 1e-12);
    kern_cpu_rmsnorm_backward_f64(dinp, dw, c.r, c.inp, c.w, c.rstd, c.N, c.C);
    struct fd_input in[] = {{"inp", c.inp, dinp, NC}, {"weight", c.w, dw, (size_t)c.C}};
    check_gradients("rmsnorm", rmsnorm_objective, &c, in, 2);
    free(c.inp), free(c.w), free(c.out), free(c.rstd), free(c.r), free(dinp), free(dw);
}

/* ---- qknorm ---- */
struct qknorm_case {
    int N, Q, KV, sq, sk;
    double *inp, *wq, *wk, *out, *rstd, *r;
};

static double qknorm_objective(void *p)
{
    struct qknorm_case *c = p;
    kern_cpu_qknorm_forward_f64(c->out, c->rstd, c->inp, c->wq, c->wk, 1e-6, c->N, c->Q, c->KV, c->sq, c->sk);
    return dot(c->out, c->r, (size_t)c->N * (c->Q + 2 * c->KV));
}

/* Per head (Qwen3: three q heads and one k head of 4, one weight of 4
 * each) and over the whole width (OLMo-2: q 12, k 4): the input and both
 * weights by finite differences; a segment by hand; v passed through. */
static void test_qknorm(void **state)
{
    (void)state;
    static const int shapes[][5] = {{5, 12, 4, 4, 4}, {5, 12, 4, 12, 4}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        struct qknorm_case c = {.N = shapes[k][0], .Q = shapes[k][1], .KV = shapes[k][2], .sq = shapes[k][3],
                                .sk = shapes[k][4]};
        size_t W = (size_t)c.Q + 2 * c.KV, NW = (size_t)c.N * W, stats = c.Q / c.sq + c.KV / c.sk;
        c.inp = rnd_array(NW, 2);
        c.wq = rnd_array((size_t)c.sq, 1), c.wk = rnd_array((size_t)c.sk, 1);
        c.out = zeros(NW), c.rstd = zeros((size_t)c.N * stats);
        c.r = rnd_array(NW, 1);
        double *dinp = zeros(NW), *dwq = zeros((size_t)c.sq), *dwk = zeros((size_t)c.sk);
        qknorm_objective(&c);
        /* row 1's second q segment and its k segment, by hand; its v copied */
        const double *x = c.inp + W, *o = c.out + W;
        double ss = 0, ssk = 0;
        int q0 = c.sq < c.Q ? c.sq : 0;
        for (int i = 0; i < c.sq; i++)
            ss += x[q0 + i] * x[q0 + i];
        for (int i = 0; i < c.sk; i++)
            ssk += x[c.Q + i] * x[c.Q + i];
        assert_true(fabs(o[q0 + 1] - c.wq[1] * x[q0 + 1] / sqrt(ss / c.sq + 1e-6)) < 1e-12);
        assert_true(fabs(o[c.Q + 2] - c.wk[2] * x[c.Q + 2] / sqrt(ssk / c.sk + 1e-6)) < 1e-12);
        assert_true(o[c.Q + c.KV + 1] == x[c.Q + c.KV + 1]);
        kern_cpu_qknorm_backward_f64(dinp, dwq, dwk, c.r, c.inp, c.wq, c.wk, c.rstd, c.N, c.Q, c.KV, c.sq, c.sk);
        struct fd_input in[] = {{"inp", c.inp, dinp, NW}, {"wq", c.wq, dwq, (size_t)c.sq},
                                {"wk", c.wk, dwk, (size_t)c.sk}};
        check_gradients(c.sq < c.Q ? "qknorm per head" : "qknorm over the width", qknorm_objective, &c, in, 3);
        free(c.inp), free(c.wq), free(c.wk), free(c.out), free(c.rstd), free(c.r), free(dinp), free(dwq),
            free(dwk);
    }
}

/* ---- rope ---- */
struct rope_case {
    int B, T, C, NH, KVH;
    double *x, *y, *cos_t, *sin_t, *r;
};

static double rope_objective(void *p)
{
    struct rope_case *c = p;
    size_t n = (size_t)c->B * c->T * (c->C + 2 * c->KVH * (c->C / c->NH));
    memcpy(c->y, c->x, n * sizeof *c->y);
    kern_cpu_rope_forward_f64(c->y, c->cos_t, c->sin_t, c->B, c->T, c->C, c->NH, c->KVH);
    return dot(c->y, c->r, n);
}

/* Rotations by position: q and k heads turn, v is left alone, position 0
 * is the identity, channel i pairs with i + hs/2, and the backward is the
 * rotation back. */
static void test_rope(void **state)
{
    (void)state;
    struct rope_case c = {.B = 2, .T = 5, .C = 16, .NH = 4, .KVH = 2};
    int hs = c.C / c.NH, half = hs / 2;
    size_t W = (size_t)c.C + 2 * (size_t)c.KVH * hs, n = (size_t)c.B * c.T * W;
    c.x = rnd_array(n, 1), c.y = zeros(n), c.r = rnd_array(n, 1);
    c.cos_t = zeros((size_t)c.T * half), c.sin_t = zeros((size_t)c.T * half);
    for (int t = 0; t < c.T; t++)
        for (int i = 0; i < half; i++) {
            double a = t * pow(10000.0, -2.0 * i / hs);
            c.cos_t[t * half + i] = cos(a), c.sin_t[t * half + i] = sin(a);
        }
    rope_objective(&c);
    for (size_t bt = 0; bt < (size_t)c.B * c.T; bt++) {
        const double *x = c.x + bt * W, *y = c.y + bt * W;
        int t = (int)(bt % (size_t)c.T);
        for (size_t j = (size_t)c.C + (size_t)c.KVH * hs; j < W; j++)
            assert_true(y[j] == x[j]);   /* v untouched */
        /* head 1 (a q head) and head NH (the first k head), pair 1 */
        for (int h = 1; h <= c.NH; h += c.NH - 1) {
            double a = x[h * hs + 1], b = x[h * hs + 1 + half], co = c.cos_t[t * half + 1], si = c.sin_t[t * half + 1];
            assert_true(fabs(y[h * hs + 1] - (a * co - b * si)) < 1e-12);
            assert_true(fabs(y[h * hs + 1 + half] - (b * co + a * si)) < 1e-12);
            if (t == 0)
                assert_true(y[h * hs + 1] == a);
        }
    }
    double *dx = zeros(n);
    memcpy(dx, c.r, n * sizeof *dx);
    kern_cpu_rope_backward_f64(dx, c.cos_t, c.sin_t, c.B, c.T, c.C, c.NH, c.KVH);
    struct fd_input in[] = {{"qkv", c.x, dx, n}};
    check_gradients("rope", rope_objective, &c, in, 1);
    free(c.x), free(c.y), free(c.r), free(c.cos_t), free(c.sin_t), free(dx);
}

/* ---- swiglu ---- */
struct swiglu_case {
    int N, F;
    double *gu, *out, *r;
};

static double swiglu_objective(void *p)
{
    struct swiglu_case *c = p;
    kern_cpu_swiglu_forward_f64(c->out, c->gu, c->N, c->F);
    return dot(c->out, c->r, (size_t)c->N * c->F);
}

static void test_swiglu(void **state)
{
    (void)state;
    struct swiglu_case c = {.N = 5, .F = 7};
    size_t n = (size_t)c.N * c.F;
    c.gu = rnd_array(2 * n, 3), c.out = zeros(n), c.r = rnd_array(n, 1);
    double *dgu = zeros(2 * n);
    swiglu_objective(&c);
    double g = c.gu[2 * c.F + 3], u = c.gu[3 * c.F + 3];   /* row 1, column 3 */
    assert_true(fabs(c.out[c.F + 3] - g / (1 + exp(-g)) * u) < 1e-12);
    kern_cpu_swiglu_backward_f64(dgu, c.gu, c.r, c.N, c.F);
    struct fd_input in[] = {{"gate|up", c.gu, dgu, 2 * n}};
    check_gradients("swiglu", swiglu_objective, &c, in, 1);
    /* silu stays finite far out: -> 0 below, -> g above */
    double far[4] = {-200, 200, 1, 1}, y[2];
    kern_cpu_swiglu_forward_f64(y, far, 1, 2);
    assert_true(fabs(y[0]) < 1e-80 && fabs(y[1] - 200) < 1e-9);
    free(c.gu), free(c.out), free(c.r), free(dgu);
}

/* ---- gelu ---- */
struct gelu_case {
    size_t n;
    double *inp, *out, *r;
};

static double gelu_objective(void *p)
{
    struct gelu_case *c = p;
    kern_cpu_gelu_forward_f64(c->out, c->inp, c->n);
    return dot(c->out, c->r, c->n);
}

static void test_gelu(void **state)
{
    (void)state;
    struct gelu_case c = {.n = 40};
    c.inp = rnd_array(c.n, 3);
    c.out = zeros(c.n);
    c.r = rnd_array(c.n, 1);
    double *dinp = zeros(c.n);
    kern_cpu_gelu_backward_f64(dinp, c.inp, c.r, c.n);
    struct fd_input in[] = {{"inp", c.inp, dinp, c.n}};
    check_gradients("gelu", gelu_objective, &c, in, 1);
    /* known values: gelu(0) = 0, gelu(x) -> x for large x, -> 0 for very negative x */
    double x[3] = {0, 10, -10}, y[3];
    kern_cpu_gelu_forward_f64(y, x, 3);
    assert_true(y[0] == 0.0 && fabs(y[1] - 10) < 1e-9 && fabs(y[2]) < 1e-9);
    free(c.inp), free(c.out), free(c.r), free(dinp);
}

/* GELU in float runs on kern_tanh_f32 (cpu_tanh.h), the double build that
 * the finite differences check on libm's tanh: the two agree to 1.2e-7
 * absolute over [-20, 20] (every float 1e-4 apart, and the edges), NaN stays
 * NaN, infinities and signed zeros come out as tanh's; and GELU's float
 * forward and backward agree with the double ones to float rounding. */
static void test_gelu_float_tanh(void **state)
{
    (void)state;
    double worst = 0;
    for (double u = -20; u <= 20; u += 1e-4) {
        float f = (float)u;
        double d = fabs((double)kern_tanh_f32(f) - tanh((double)f));
        worst = d > worst ? d : worst;
    }
    const float edges[] = {8.999999f, 9.0f, 9.000001f, 1e-30f, 1e-45f, 0.5f, 0.0f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        for (int s = -1; s <= 1; s += 2) {
            float f = (float)s * edges[i];
            double d = fabs((double)kern_tanh_f32(f) - tanh((double)f));
            worst = d > worst ? d : worst;
        }
    print_message("kern_tanh_f32: worst absolute error %.3g\n", worst);
    assert_true(worst <= 1.2e-7);
    assert_true(isnan(kern_tanh_f32(NAN)));
    assert_true(kern_tanh_f32(INFINITY) == 1.0f && kern_tanh_f32(-INFINITY) == -1.0f);
    assert_true(signbit(kern_tanh_f32(-0.0f)) && !signbit(kern_tanh_f32(0.0f)));

    enum { N = 4099 }; /* odd: the vector loops' remainder runs too */
    static float xf[N], yf[N], df[N], gf[N];
    static double xd[N], yd[N], dd[N], gd[N];
    double *r = rnd_array(N, 6);
    for (int i = 0; i < N; i++) {
        xf[i] = (float)r[i];
        xd[i] = xf[i];
        gf[i] = 0.25f, gd[i] = 0.25; /* dout */
        df[i] = 0, dd[i] = 0;
    }
    kern_cpu_gelu_forward_f32(yf, xf, N);
    kern_cpu_gelu_forward_f64(yd, xd, N);
    kern_cpu_gelu_backward_f32(df, xf, gf, N);
    kern_cpu_gelu_backward_f64(dd, xd, gd, N);
    /* Errors over max(1, |x|): where 1 + tanh(u) cancels (x < -3), float
     * loses relative precision with libm's tanhf as well (1.2e-7 forward,
     * 1.2e-7 backward over [-12, 12]; kern_tanh_f32: 1.2e-7, 2.1e-7). */
    double fw = 0, bw = 0;
    for (int i = 0; i < N; i++) {
        double s = fmax(1, fabs(xd[i]));
        fw = fmax(fw, fabs(yf[i] - yd[i]) / s);
        bw = fmax(bw, fabs(df[i] - dd[i]) / s);
    }
    free(r);
    print_message("gelu float vs double: forward %.3g, backward %.3g\n", fw, bw);
    assert_true(fw < 4e-7 && bw < 4e-7);
}

/* The softmaxes in float run on kern_exp_f32 (cpu_exp.h), the double
 * build on libm's exp: relative error 1.2e-7 at most over [-87, 0] (every
 * float 1e-4 apart, and the edges), 0 below -87 and at -inf, NaN stays
 * NaN. */
static void test_softmax_float_exp(void **state)
{
    (void)state;
    double worst = 0;
    for (double x = -87; x <= 0; x += 1e-4) {
        float f = (float)x;
        double d = fabs((double)kern_exp_f32(f) - exp((double)f)) / exp((double)f);
        worst = d > worst ? d : worst;
    }
    const float edges[] = {0.0f, -0.0f, -1e-30f, -0.34657359f, -0.34657360f, -86.99999f, -87.0f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        double d = fabs((double)kern_exp_f32(edges[i]) - exp((double)edges[i])) / exp((double)edges[i]);
        worst = d > worst ? d : worst;
    }
    print_message("kern_exp_f32: worst relative error %.3g\n", worst);
    assert_true(worst <= 1.2e-7);
    assert_true(kern_exp_f32(-87.00001f) == 0.0f && kern_exp_f32(-1e30f) == 0.0f && kern_exp_f32(-INFINITY) == 0.0f);
    assert_true(isnan(kern_exp_f32(NAN)));
}

/* ---- cross-entropy ---- */
struct crossentropy_case {
    int N, V;
    double dloss;
    int32_t *targets;
    double *logits, *probs, *losses;
};

static double crossentropy_objective(void *p)
{
    struct crossentropy_case *c = p;
    kern_cpu_crossentropy_forward_f64(c->losses, c->probs, c->logits, c->targets, c->N, c->V);
    double s = 0;
    for (int i = 0; i < c->N; i++)
        s += c->losses[i];
    return c->dloss * s;
}

static void test_crossentropy(void **state)
{
    (void)state;
    int32_t targets[6] = {0, 4, 4, 2, 1, 3};
    struct crossentropy_case c = {.N = 6, .V = 5, .dloss = 0.37, .targets = targets};
    size_t NV = (size_t)c.N * c.V;
    c.logits = rnd_array(NV, 3);
    c.probs = zeros(NV), c.losses = zeros((size_t)c.N);
    double *dlogits = zeros(NV);
    crossentropy_objective(&c);
    /* loss is -log p(target) */
    for (int n = 0; n < c.N; n++)
        assert_true(fabs(c.losses[n] + log(c.probs[(size_t)n * c.V + targets[n]])) < 1e-12);
    kern_cpu_crossentropy_backward_f64(dlogits, c.probs, c.targets, c.dloss, c.N, c.V);
    struct fd_input in[] = {{"logits", c.logits, dlogits, NV}};
    check_gradients("crossentropy", crossentropy_objective, &c, in, 1);
    /* huge logits stay finite: the max is subtracted first */
    c.logits[0] = 1e4;
    crossentropy_objective(&c);
    assert_true(isfinite(c.losses[0]) && c.losses[0] < 1e-6 + (targets[0] == 0 ? 0 : 1e5));
    free(c.logits), free(c.probs), free(c.losses), free(dlogits);
}

/* The float build runs the same code: it agrees with double to float precision. */
static void test_float_matches_double(void **state)
{
    (void)state;
    int B = 2, T = 6, C = 8, NH = 2;
    size_t BTC = (size_t)B * T * C, att_n = (size_t)B * NH * T * T;
    double *qkv = rnd_array(3 * BTC, 1), *out = zeros(BTC), *att = zeros(att_n);
    float *qkvf = malloc(3 * BTC * sizeof *qkvf), *outf = malloc(BTC * sizeof *outf);
    float *attf = malloc(att_n * sizeof *attf);
    assert_non_null(qkvf), assert_non_null(outf), assert_non_null(attf);
    for (size_t i = 0; i < 3 * BTC; i++)
        qkvf[i] = (float)qkv[i];
    kern_cpu_attention_forward_f64(out, att, qkv, B, T, C, NH, NH, 0);
    kern_cpu_attention_forward_f32(outf, attf, qkvf, B, T, C, NH, NH, 0);
    for (size_t i = 0; i < BTC; i++)
        assert_true(fabs(outf[i] - out[i]) < 1e-5 * (1 + fabs(out[i])));
    free(qkv), free(out), free(att), free(qkvf), free(outf), free(attf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_qknorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_gelu_float_tanh),
        cmocka_unit_test(test_softmax_float_exp),
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_float_matches_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
