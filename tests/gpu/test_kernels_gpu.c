/* test_kernels_gpu.c - the CUDA backend of kernels/ against the CPU oracle.
 *
 * For each small stage in `cases` (first and last, first only, last only, a
 * middle stage, odd sizes, T < context, head sizes 32/64/128, stages with no
 * block) it builds the stage on cpu and on the device with the same seed and
 * checks:
 *   - the initial parameters are equal (they are then copied cpu -> device
 *     with kern_stage_write anyway);
 *   - forward: hidden state within relative 2e-2, loss within 2e-2 nats;
 *   - backward: grad_input and every gradient tensor within relative 5e-2
 *     (the worst tensor is named), nothing NaN or Inf;
 *   - every element of output and grad_input is written (filled with NaN
 *     before the call);
 *   - grad_norm2 within relative 5e-2;
 *   - two AdamW steps from the same gradients (the cpu's, written into the
 *     device stage) give parameters and moments within relative 1e-5, and
 *     the forward pass afterwards still matches (no stale bf16 weights);
 *   - stage files: saved on the device and loaded on cpu, and the reverse;
 *   - two micro-batches in flight (forward 2, forward 3, backward 3,
 *     backward 2) give the outputs and gradients of running them one by one.
 * Then (gpu_links.c) a middle stage whose stage link is bf16 or int8 must
 * take and give exactly codec_encode's bytes of what it computes with an
 * f32 link, forward and backward (the formats are packed on the device).
 * Then (gpu_training.c) it trains a 2-layer character model as two stages [0,1) + [1,2) for
 * 100 AdamW steps on each backend with the same data and compares the loss
 * curves (final losses within 5% of each other; the device's loss falls by
 * more than 30%).
 *
 * Output: one "ok - NAME (detail)" or "not ok - NAME: WHY" line per check,
 * "# ..." lines of context. Exit 0 when every check passed, 1 when one
 * failed, 2 on a usage error, 77 ("skip - no CUDA device: ...") when
 * kern_device_parse("cuda") fails, which is what the skip code of automake
 * test drivers means.
 *
 * Run: make test-gpu   or   build/rel/tests/gpu/test_kernels_gpu [--device cuda:N]
 * make test runs these same sources as test_kernels_host --small, linked with
 * the CUDA backend compiled for the host emulation in tests/gpu/host.
 * `--device cpu` compares the oracle with itself: it checks this harness
 * (every error is ~0) on a machine without a GPU.
 */
#include "../../models/checkpoint.h"
#include "gpu_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_HIDDEN 2e-2   /* forward hidden state, relative L2 */
#define TOL_LOSS 2e-2     /* forward loss, absolute, nats */
#define TOL_GRAD 5e-2     /* grad_input and each gradient tensor, relative L2 */
#define TOL_NORM2 5e-2    /* grad_norm2, relative */
#define TOL_ADAMW 1e-5    /* parameters and moments after AdamW, relative L2 */
#define TOL_INFLIGHT 1e-3 /* interleaved vs one-by-one on the same device, relative */
#define LOSS_GRAD 0.5f    /* d(objective)/d(loss) fed to the last stage; not 1, so a
                           * backend that ignores grad_output is caught */

/* ---- numerics ------------------------------------------------------------ */

static void fill_nan(float *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = NAN;
}

static size_t count_nan(const float *a, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += isnan(a[i]) != 0;
    return k;
}

static size_t count_nonfinite(const float *a, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += !isfinite(a[i]);
    return k;
}

/* ||got - want|| / ||want|| in double; ||got - want|| when want is all zero
 * (a tensor whose true value is zero is held to an absolute bound). */
static double rel_err(const float *got, const float *want, size_t n)
{
    double d = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)got[i] - want[i];
        d += e * e;
        w += (double)want[i] * want[i];
    }
    return w > 0 ? sqrt(d / w) : sqrt(d);
}

/* What the values checked are compared with. */
#define REF_CPU "cpu"
#define REF_ONE_BY_ONE "one by one"

/* Compares n values of a buffer with the reference `ref`; `loss` means one
 * value held to an absolute bound. Reports one check line. */
static void check_values(const char *scope, const char *what, const float *got,
                         const float *want, const char *ref, size_t n, int loss, double tol)
{
    size_t bad_got = count_nonfinite(got, n), bad_want = count_nonfinite(want, n);
    if (bad_want)
        check(scope, what, 0, "the reference (%s) has %zu NaN/Inf of %zu", ref, bad_want, n);
    else if (bad_got)
        check(scope, what, 0, "%zu NaN/Inf of %zu values", bad_got, n);
    else if (loss)
        check(scope, what, fabs((double)got[0] - want[0]) <= tol,
              "loss %.6f vs %s %.6f, |diff| %.2e, tolerance %.0e", got[0], ref, want[0],
              fabs((double)got[0] - want[0]), tol);
    else {
        double rel = rel_err(got, want, n);
        check(scope, what, rel <= tol, "relative error %.2e, tolerance %.0e", rel, tol);
    }
}

/* Per-tensor comparison of two flat buffers of stage st. */
struct tensor_cmp {
    double worst;    /* largest relative error */
    int worst_i;     /* its tensor, -1 when the stage has none */
    int nonfinite_i; /* first tensor of got holding NaN/Inf, else -1 */
    int oracle_bad_i; /* first tensor of want holding NaN/Inf, else -1 */
};

static struct tensor_cmp compare_tensors(const struct kern_stage *st, const float *got,
                                         const float *want)
{
    struct tensor_cmp c = {0, -1, -1, -1};
    for (int i = 0; i < kern_stage_tensor_count(st); i++) {
        const struct kern_tensor *t = kern_stage_tensor(st, i);
        if (c.oracle_bad_i < 0 && count_nonfinite(want + t->offset, t->count))
            c.oracle_bad_i = i;
        if (c.nonfinite_i < 0 && count_nonfinite(got + t->offset, t->count))
            c.nonfinite_i = i;
        double rel = rel_err(got + t->offset, want + t->offset, t->count);
        if (c.worst_i < 0 || rel > c.worst) {
            c.worst = rel;
            c.worst_i = i;
        }
    }
    return c;
}

/* Lists every tensor over tol, for the log of a failed check. */
static void list_bad_tensors(const struct kern_stage *st, const float *got, const float *want,
                             double tol)
{
    for (int i = 0; i < kern_stage_tensor_count(st); i++) {
        const struct kern_tensor *t = kern_stage_tensor(st, i);
        double rel = rel_err(got + t->offset, want + t->offset, t->count);
        if (!(rel <= tol))
            printf("#   %-14s (%d x %d) relative error %.3e\n", t->name, t->rows, t->cols, rel);
    }
}

static void check_tensors(const char *scope, const char *what, const struct kern_stage *st,
                          const float *got, const float *want, const char *ref, double tol)
{
    struct tensor_cmp c = compare_tensors(st, got, want);
    if (c.oracle_bad_i >= 0) {
        check(scope, what, 0, "the reference (%s) has NaN/Inf in %s", ref,
              kern_stage_tensor(st, c.oracle_bad_i)->name);
    } else if (c.nonfinite_i >= 0) {
        check(scope, what, 0, "NaN/Inf in %s", kern_stage_tensor(st, c.nonfinite_i)->name);
    } else if (c.worst_i < 0) {
        check(scope, what, 1, "stage holds no tensor");
    } else {
        check(scope, what, c.worst <= tol, "worst tensor %s, relative error %.2e, tolerance %.0e",
              kern_stage_tensor(st, c.worst_i)->name, c.worst, tol);
        if (!(c.worst <= tol))
            list_bad_tensors(st, got, want, tol);
    }
}

/* ---- stages and their inputs --------------------------------------------- */

struct test_case {
    const char *name;
    struct model_config model; /* the family and its sizes */
    int layer_start, layer_end;
    int B, T;
};

static const struct test_case cases[] = {
    /* head size 32 */
    {"tiny-whole", {.vocab = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 2}, 0, 2, 2, 64},
    {"tiny-first", {.vocab = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 2}, 0, 1, 2, 64},
    {"tiny-last", {.vocab = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 2}, 1, 2, 2, 64},
    /* odd vocab, d_model, heads, batch; T < context on the whole model */
    {"odd-whole", {.vocab = 101, .context = 48, .d_model = 96, .heads = 3, .layers = 3}, 0, 3, 3, 37},
    {"odd-middle", {.vocab = 101, .context = 48, .d_model = 96, .heads = 3, .layers = 3}, 1, 2, 3, 40},
    /* stages without a block: only the head, and a pass-through middle */
    {"odd-head-only", {.vocab = 101, .context = 48, .d_model = 96, .heads = 3, .layers = 3}, 3, 3, 3, 40},
    {"odd-empty-middle", {.vocab = 101, .context = 48, .d_model = 96, .heads = 3, .layers = 3}, 1, 1, 3, 40},
    /* head size 64 with T over 128; head size 128 (as GPT-3 XL) middle */
    {"hs64-whole", {.vocab = 1000, .context = 256, .d_model = 256, .heads = 4, .layers = 2}, 0, 2, 2, 256},
    {"hs128-middle", {.vocab = 512, .context = 128, .d_model = 512, .heads = 4, .layers = 4}, 1, 3, 2, 128},
    /* flash attention's other tiles: a head size of no multiple of 16
     * (padded), and 256 (tiles of 16 rows) */
    {"hs20-whole", {.vocab = 64, .context = 40, .d_model = 60, .heads = 3, .layers = 1}, 0, 1, 2, 33},
    {"hs256-first", {.vocab = 64, .context = 40, .d_model = 512, .heads = 2, .layers = 1}, 0, 1, 1, 40},
    /* an odd C: the MLP's 4C is no multiple of 8, which cuBLASLt's GELU
     * epilogue needs, so its bias and GELU run in kernels of ours */
    {"odd-c-whole", {.vocab = 50, .context = 24, .d_model = 45, .heads = 3, .layers = 2}, 0, 2, 2, 20},
    /* Llama: two kv heads of four (whole); one kv head for three query
     * heads, a tied head, llama3 scaling, odd sizes, T < context (whole);
     * multi-head (kv heads = heads) of head size 64 with T over 128 (first) */
    {"llama-gqa-whole", {.vocab = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 2, .arch = MODEL_LLAMA,
                         .kv_heads = 2, .ffn_dim = 176, .rope_theta = 10000}, 0, 2, 2, 64},
    {"llama-mqa-tied-whole", {.vocab = 101, .context = 48, .d_model = 96, .heads = 3, .layers = 2,
                              .arch = MODEL_LLAMA, .kv_heads = 1, .ffn_dim = 160, .tied = 1, .rope_theta = 500000,
                              .rope_scaling = {.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                               .original_context = 16}}, 0, 2, 3, 37},
    {"llama-mha-hs64-first", {.vocab = 1000, .context = 256, .d_model = 256, .heads = 4, .layers = 2,
                              .arch = MODEL_LLAMA, .kv_heads = 4, .ffn_dim = 512, .rope_theta = 10000}, 0, 1, 2, 256},
    /* Qwen2's q, k, v biases on a last stage (the bias gradient in the
     * product that overlaps the input gradient's copy); Qwen3's per-head
     * q and k norms with heads of 32 where C / NH is 24 (q 128 wide, C 96) */
    {"qwen2-gqa-last", {.vocab = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 2, .arch = MODEL_QWEN2,
                        .kv_heads = 2, .ffn_dim = 176, .rope_theta = 1000000}, 1, 2, 2, 64},
    {"qwen3-hd32-whole", {.vocab = 101, .context = 48, .d_model = 96, .heads = 4, .layers = 2, .arch = MODEL_QWEN3,
                          .kv_heads = 2, .ffn_dim = 160, .head_dim = 32, .rope_theta = 1000000, .tied = 1},
     0, 2, 3, 37},
    /* OLMo-2's norms after the attention and the MLP and over q's and k's
     * whole width, on two blocks ending a stage of its hidden state in */
    {"olmo2-mha-last", {.vocab = 101, .context = 48, .d_model = 96, .heads = 4, .layers = 3, .arch = MODEL_OLMO2,
                        .ffn_dim = 160, .rope_theta = 500000}, 1, 3, 2, 40},
    /* a sliding window of 40 positions over rows of 32 (heads of 32): the
     * key tiles wholly before a row tile's window are skipped, and (in the
     * backward) the query tiles wholly after a key tile's */
    {"llama-window-first", {.vocab = 256, .context = 256, .d_model = 128, .heads = 4, .layers = 2,
                            .arch = MODEL_LLAMA, .kv_heads = 2, .ffn_dim = 176, .rope_theta = 10000,
                            .sliding_window = 40}, 0, 1, 2, 256},
};

static struct kern_stage_spec case_spec(const struct test_case *tc, int in_flight,
                                        uint64_t seed)
{
    struct kern_stage_spec s = {
        .layer_start = tc->layer_start,
        .layer_end = tc->layer_end,
        .first = tc->layer_start == 0,
        .last = tc->layer_end == tc->model.layers,
        .micro_batch = tc->B,
        .seq_len = tc->T,
        .in_flight = in_flight,
        .seed = seed,
    };
    return s;
}

/* What one micro-batch feeds a stage. */
struct case_io {
    size_t btc;          /* B*T*C floats of a hidden state */
    size_t out_n;        /* floats of the output: 1 on the last stage, else btc */
    void *input;         /* int32 (B,T) on the first stage, else float (B,T,C) */
    int32_t *targets;    /* (B,T) on the last stage, else NULL */
    float *grad_output;  /* out_n */
};

static void io_free(struct case_io *io)
{
    free(io->input);
    free(io->targets);
    free(io->grad_output);
    memset(io, 0, sizeof *io);
}

/* Random token ids in [0,V), or a hidden state and its gradient N(0,1). */
static int io_alloc(struct case_io *io, const struct model_config *m,
                    const struct kern_stage_spec *s, uint64_t seed)
{
    struct rng r = {seed};
    size_t bt = (size_t)s->micro_batch * s->seq_len;
    io->btc = bt * (size_t)m->d_model;
    io->out_n = s->last ? 1 : io->btc;
    io->input = malloc((s->first ? bt : io->btc) * 4);
    io->targets = s->last ? malloc(bt * sizeof(int32_t)) : NULL;
    io->grad_output = malloc(io->out_n * sizeof(float));
    if (!io->input || (s->last && !io->targets) || !io->grad_output) {
        io_free(io);
        return -1;
    }
    for (size_t i = 0; i < (s->first ? bt : io->btc); i++) {
        if (s->first)
            ((int32_t *)io->input)[i] = (int32_t)(rng_u64(&r) % (uint64_t)m->vocab);
        else
            ((float *)io->input)[i] = rng_normal(&r);
    }
    for (size_t i = 0; s->last && i < bt; i++)
        io->targets[i] = (int32_t)(rng_u64(&r) % (uint64_t)m->vocab);
    for (size_t i = 0; i < io->out_n; i++)
        io->grad_output[i] = s->last ? LOSS_GRAD : rng_normal(&r);
    return 0;
}

/* What a stage gives back for one micro-batch. */
struct pass {
    float *output;     /* out_n */
    float *grad_input; /* btc; unused on the first stage */
    float *grads;      /* n_params: the whole gradient buffer afterwards */
};

static void pass_free(struct pass *p)
{
    free(p->output);
    free(p->grad_input);
    free(p->grads);
    memset(p, 0, sizeof *p);
}

static int pass_alloc(struct pass *p, const struct case_io *io, size_t n_params)
{
    p->output = malloc(io->out_n * sizeof(float));
    p->grad_input = malloc(io->btc * sizeof(float));
    p->grads = malloc((n_params ? n_params : 1) * sizeof(float));
    if (!p->output || !p->grad_input || !p->grads) {
        pass_free(p);
        return -1;
    }
    return 0;
}

/* Forward of micro-batch mb into a NaN-filled p->output. */
static int do_forward(struct kern_stage *st, int mb, const struct case_io *io,
                      struct pass *p, struct kern_err *err)
{
    fill_nan(p->output, io->out_n);
    return kern_stage_forward(st, mb, io->input, io->targets, p->output, err);
}

/* Backward of micro-batch mb into a NaN-filled p->grad_input. */
static int do_backward(struct kern_stage *st, int mb, const struct case_io *io,
                       struct pass *p, struct kern_err *err)
{
    int first = kern_stage_spec(st)->first;
    fill_nan(p->grad_input, io->btc);
    return kern_stage_backward(st, mb, io->grad_output, first ? NULL : p->grad_input, err);
}

/* Zeroed gradients, forward and backward of one micro-batch, gradients read. */
static int do_pass(struct kern_stage *st, const struct case_io *io, struct pass *p,
                   struct kern_err *err)
{
    if (kern_stage_zero_grad(st, err) || do_forward(st, 0, io, p, err) ||
        do_backward(st, 0, io, p, err))
        return -1;
    return kern_stage_read(st, KERN_GRADS, p->grads, err);
}

/* A malloc'd host copy of one flat buffer, or NULL with err set. */
static float *read_copy(struct kern_stage *st, enum kern_buffer which, struct kern_err *err)
{
    size_t n = kern_stage_param_count(st);
    float *buf = malloc((n ? n : 1) * sizeof *buf);
    if (!buf) {
        snprintf(err->msg, sizeof err->msg, "out of memory for %zu floats", n);
        return NULL;
    }
    if (kern_stage_read(st, which, buf, err)) {
        free(buf);
        return NULL;
    }
    return buf;
}

static const char *buffer_name(enum kern_buffer which)
{
    switch (which) {
    case KERN_PARAMS: return "params";
    case KERN_GRADS: return "grads";
    case KERN_ADAM_M: return "adam_m";
    case KERN_ADAM_V: return "adam_v";
    }
    return "?";
}

/* 0 when buffer `which` of a and b holds the same bits; else -1 with the
 * first difference in why. */
static int same_buffer(struct kern_stage *a, struct kern_stage *b, enum kern_buffer which,
                       char *why, size_t why_len)
{
    struct kern_err err = {{0}};
    size_t n = kern_stage_param_count(a);
    float *x = read_copy(a, which, &err), *y = x ? read_copy(b, which, &err) : NULL;
    int rc = -1;
    if (!y) {
        snprintf(why, why_len, "read %s: %s", buffer_name(which), err.msg);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof x[i])) {
            snprintf(why, why_len, "%s differ first at float %zu: %.9g vs %.9g",
                     buffer_name(which), i, x[i], y[i]);
            goto out;
        }
    rc = 0;
out:
    free(x);
    free(y);
    return rc;
}

/* ---- the checks of one case ---------------------------------------------- */

const char *dev_label = "cuda"; /* the device under test, as named on the command line */

/* Equal seeds give equal parameters; then the cpu's are written to be sure. */
static int check_init(const char *scope, struct kern_stage *cpu, struct kern_stage *dev)
{
    char why[KERN_ERR_LEN + 64];
    struct kern_err err = {{0}};
    if (same_buffer(dev, cpu, KERN_PARAMS, why, sizeof why) == 0)
        check(scope, "initial params equal cpu", 1, "%zu floats", kern_stage_param_count(cpu));
    else
        check(scope, "initial params equal cpu", 0, "%s", why);
    float *p = read_copy(cpu, KERN_PARAMS, &err);
    int rc = p ? kern_stage_write(dev, KERN_PARAMS, p, &err) : -1;
    free(p);
    if (rc)
        check(scope, "write params", 0, "%s", err.msg);
    return rc;
}

static void check_written(const char *scope, const char *what, const float *buf, size_t n)
{
    size_t left = count_nan(buf, n);
    check(scope, what, left == 0, "%zu of %zu values left NaN", left, n);
}

static void check_norm2(const char *scope, struct kern_stage *cpu, struct kern_stage *dev)
{
    struct kern_err err = {{0}};
    double c = 0, d = 0;
    if (kern_stage_grad_norm2(cpu, &c, &err) || kern_stage_grad_norm2(dev, &d, &err)) {
        check(scope, "grad_norm2", 0, "%s", err.msg);
        return;
    }
    double rel = c > 0 ? fabs(d - c) / c : fabs(d);
    check(scope, "grad_norm2", rel <= TOL_NORM2, "%.6g vs cpu %.6g, relative error %.2e, "
          "tolerance %.0e", d, c, rel, TOL_NORM2);
}

/* Forward and backward of one micro-batch on both stages: output, grad_input,
 * every gradient tensor, grad_norm2. -1 when a call failed. */
static int check_pass(const char *scope, struct kern_stage *cpu, struct kern_stage *dev,
                      const struct case_io *io, struct pass *pc, struct pass *pd)
{
    const struct kern_stage_spec *s = kern_stage_spec(cpu);
    struct kern_err err = {{0}};

    if (do_pass(cpu, io, pc, &err)) {
        check(scope, "cpu oracle forward+backward", 0, "%s", err.msg);
        return -1;
    }
    if (kern_stage_zero_grad(dev, &err) || do_forward(dev, 0, io, pd, &err)) {
        check(scope, "forward", 0, "%s", err.msg);
        return -1;
    }
    check_written(scope, "forward writes every output", pd->output, io->out_n);
    check_values(scope, s->last ? "forward loss" : "forward output", pd->output, pc->output,
                 REF_CPU, io->out_n, s->last, s->last ? TOL_LOSS : TOL_HIDDEN);
    if (do_backward(dev, 0, io, pd, &err) || kern_stage_read(dev, KERN_GRADS, pd->grads, &err)) {
        check(scope, "backward", 0, "%s", err.msg);
        return -1;
    }
    if (!s->first) {
        check_written(scope, "backward writes every grad_input", pd->grad_input, io->btc);
        check_values(scope, "backward grad_input", pd->grad_input, pc->grad_input, REF_CPU,
                     io->btc, 0, TOL_GRAD);
    }
    check_tensors(scope, "backward gradients", cpu, pd->grads, pc->grads, REF_CPU, TOL_GRAD);
    check_norm2(scope, cpu, dev);
    return 0;
}

static void check_grad_buffer(const char *scope, struct kern_stage *dev,
                              const struct kern_device *d)
{
    int on_device = -1;
    float *g = kern_stage_grad_buffer(dev, &on_device);
    int want = d->kind == KERN_CUDA;
    check(scope, "grad buffer", (g || !kern_stage_param_count(dev)) && on_device == want,
          "%s, on_device %d (want %d)", g ? "non-NULL" : "NULL", on_device, want);
}

/* Two AdamW steps on both stages from the cpu's gradients, then a forward. */
static void check_adamw(const char *scope, struct kern_stage *cpu, struct kern_stage *dev,
                        const float *cpu_grads, const struct case_io *io, struct pass *pc,
                        struct pass *pd)
{
    static const struct kern_adamw h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                                        .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f};
    static const enum kern_buffer bufs[3] = {KERN_PARAMS, KERN_ADAM_M, KERN_ADAM_V};
    struct kern_err err = {{0}};
    char why[KERN_ERR_LEN + 64];

    if (kern_stage_write(dev, KERN_GRADS, cpu_grads, &err)) {
        check(scope, "write grads", 0, "%s", err.msg);
        return;
    }
    int same = same_buffer(dev, cpu, KERN_GRADS, why, sizeof why) == 0;
    check(scope, "grads write/read round trip", same, "%s", same ? "bit-exact" : why);
    for (int step = 0; step < 2; step++)
        if (kern_stage_adamw(cpu, &h, &err) || kern_stage_adamw(dev, &h, &err)) {
            check(scope, "adamw", 0, "%s", err.msg);
            return;
        }
    check(scope, "adamw step count", kern_stage_step(dev) == 2, "%llu after 2 steps",
          (unsigned long long)kern_stage_step(dev));
    for (int i = 0; i < 3; i++) {
        char what[64];
        float *want = read_copy(cpu, bufs[i], &err);
        float *got = want ? read_copy(dev, bufs[i], &err) : NULL;
        snprintf(what, sizeof what, "adamw x2 %s", buffer_name(bufs[i]));
        if (got)
            check_tensors(scope, what, cpu, got, want, REF_CPU, TOL_ADAMW);
        else
            check(scope, what, 0, "%s", err.msg);
        free(want);
        free(got);
    }
    if (do_forward(cpu, 0, io, pc, &err) || do_forward(dev, 0, io, pd, &err)) {
        check(scope, "forward after adamw", 0, "%s", err.msg);
    } else {
        int last = kern_stage_spec(cpu)->last;
        check_values(scope, "forward after adamw", pd->output, pc->output, REF_CPU, io->out_n,
                     last, last ? TOL_LOSS : TOL_HIDDEN);
    }
    kern_stage_drop_in_flight(cpu);
    kern_stage_drop_in_flight(dev);
}

/* Saves `from`, loads the file into a new stage on `to_dev` built with
 * another seed, and checks the buffers, the step count and a forward pass.
 * `to_is_oracle`: the new stage is the cpu one. */
static void check_save_load(const char *scope, struct kern_stage *from,
                            const struct kern_device *to_dev, int to_is_oracle,
                            const struct case_io *io)
{
    static const enum kern_buffer bufs[3] = {KERN_PARAMS, KERN_ADAM_M, KERN_ADAM_V};
    struct kern_stage_spec spec = *kern_stage_spec(from);
    struct kern_stage *to = NULL;
    struct kern_err err = {{0}};
    char what[96], why[KERN_ERR_LEN + 64] = "";
    float *out_from = malloc(io->out_n * sizeof(float)), *out_to = malloc(io->out_n * sizeof(float));
    FILE *f = tmpfile();

    snprintf(what, sizeof what, "save on %s, load on %s", to_is_oracle ? dev_label : "cpu",
             to_is_oracle ? "cpu" : dev_label);
    spec.seed += 1;
    spec.in_flight = 1;
    if (!f || !out_from || !out_to) {
        check(scope, what, 0, "no temporary file or out of memory");
        goto out;
    }
    if (kern_stage_new(to_dev, kern_stage_model(from), &spec, &to, &err) ||
        kern_stage_save(from, f, &err) || fseek(f, 0, SEEK_SET) ||
        kern_stage_load(to, f, &err)) {
        check(scope, what, 0, "%s", err.msg);
        goto out;
    }
    int same = 1;
    for (int i = 0; i < 3 && same; i++)
        same = same_buffer(to, from, bufs[i], why, sizeof why) == 0;
    if (same && kern_stage_step(to) != kern_stage_step(from)) {
        same = 0;
        snprintf(why, sizeof why, "step %llu, saved %llu", (unsigned long long)kern_stage_step(to),
                 (unsigned long long)kern_stage_step(from));
    }
    check(scope, what, same, "%s", same ? "params, moments and step bit-exact" : why);
    fill_nan(out_from, io->out_n);
    fill_nan(out_to, io->out_n);
    if (kern_stage_forward(from, 0, io->input, io->targets, out_from, &err) ||
        kern_stage_forward(to, 0, io->input, io->targets, out_to, &err)) {
        check(scope, "forward after load", 0, "%s", err.msg);
        goto out;
    }
    int last = spec.last;
    snprintf(what, sizeof what, "forward after load on %s", to_is_oracle ? "cpu" : dev_label);
    check_values(scope, what, to_is_oracle ? out_from : out_to,
                 to_is_oracle ? out_to : out_from, REF_CPU, io->out_n, last,
                 last ? TOL_LOSS : TOL_HIDDEN);
out:
    kern_stage_drop_in_flight(from);
    kern_stage_free(to);
    if (f)
        fclose(f);
    free(out_from);
    free(out_to);
}

/* A stage holding two micro-batches at once gives what it gives holding one:
 * one by one (mb 0 then 1) against interleaved (forward 2, forward 3,
 * backward 3, backward 2) on the same device. */
static void check_in_flight(const char *scope, const struct kern_device *d,
                            struct kern_stage *cpu, const struct case_io *io0,
                            const struct case_io *io1)
{
    struct kern_stage_spec spec = *kern_stage_spec(cpu);
    struct kern_stage *st = NULL;
    struct pass s0 = {0}, s1 = {0}, i0 = {0}, i1 = {0};
    struct kern_err err = {{0}};
    size_t n = kern_stage_param_count(cpu);
    float *params = NULL;

    spec.in_flight = 2;
    if (pass_alloc(&s0, io0, n) || pass_alloc(&s1, io0, n) || pass_alloc(&i0, io0, n) ||
        pass_alloc(&i1, io0, n)) {
        check(scope, "two in flight", 0, "out of memory");
        goto out;
    }
    if (kern_stage_new(d, kern_stage_model(cpu), &spec, &st, &err) ||
        !(params = read_copy(cpu, KERN_PARAMS, &err)) ||
        kern_stage_write(st, KERN_PARAMS, params, &err) ||
        kern_stage_zero_grad(st, &err) ||
        do_forward(st, 0, io0, &s0, &err) || do_backward(st, 0, io0, &s0, &err) ||
        do_forward(st, 1, io1, &s1, &err) || do_backward(st, 1, io1, &s1, &err) ||
        kern_stage_read(st, KERN_GRADS, s0.grads, &err) ||
        kern_stage_zero_grad(st, &err) ||
        do_forward(st, 2, io0, &i0, &err) || do_forward(st, 3, io1, &i1, &err) ||
        do_backward(st, 3, io1, &i1, &err) || do_backward(st, 2, io0, &i0, &err) ||
        kern_stage_read(st, KERN_GRADS, i0.grads, &err)) {
        check(scope, "two in flight", 0, "%s", err.msg);
        goto out;
    }
    int last = spec.last;
    check_values(scope, "two in flight: output of the first", i0.output, s0.output,
                 REF_ONE_BY_ONE, io0->out_n, last, TOL_INFLIGHT);
    check_values(scope, "two in flight: output of the second", i1.output, s1.output,
                 REF_ONE_BY_ONE, io0->out_n, last, TOL_INFLIGHT);
    if (!spec.first) {
        check_values(scope, "two in flight: grad_input of the first", i0.grad_input,
                     s0.grad_input, REF_ONE_BY_ONE, io0->btc, 0, TOL_INFLIGHT);
        check_values(scope, "two in flight: grad_input of the second", i1.grad_input,
                     s1.grad_input, REF_ONE_BY_ONE, io0->btc, 0, TOL_INFLIGHT);
    }
    check_tensors(scope, "two in flight: gradients", cpu, i0.grads, s0.grads, REF_ONE_BY_ONE,
                  TOL_INFLIGHT);
out:
    kern_stage_free(st);
    free(params);
    pass_free(&s0);
    pass_free(&s1);
    pass_free(&i0);
    pass_free(&i1);
}

static void run_case(const struct test_case *tc, const struct kern_device *d, uint64_t seed)
{
    const char *scope = tc->name;
    const struct kern_device cpu_dev = {KERN_CPU, 0};
    struct kern_stage_spec spec = case_spec(tc, 1, seed);
    struct kern_stage *cpu = NULL, *dev = NULL;
    struct case_io io0 = {0}, io1 = {0};
    struct pass pc = {0}, pd = {0};
    struct kern_err err = {{0}};

    printf("# case %s: V=%d context=%d C=%d NH=%d L=%d, layers [%d,%d)%s%s, B=%d T=%d\n",
           scope, tc->model.vocab, tc->model.context, tc->model.d_model, tc->model.heads,
           tc->model.layers, tc->layer_start, tc->layer_end, spec.first ? " first" : "",
           spec.last ? " last" : "", tc->B, tc->T);
    if (kern_stage_new(&cpu_dev, &tc->model, &spec, &cpu, &err)) {
        check(scope, "new cpu stage", 0, "%s", err.msg);
        goto out;
    }
    if (kern_stage_new(d, &tc->model, &spec, &dev, &err)) {
        check(scope, "new stage", 0, "%s", err.msg);
        goto out;
    }
    size_t n = kern_stage_param_count(cpu);
    if (io_alloc(&io0, &tc->model, &spec, seed + 1) || io_alloc(&io1, &tc->model, &spec, seed + 2) ||
        pass_alloc(&pc, &io0, n) || pass_alloc(&pd, &io0, n)) {
        check(scope, "test buffers", 0, "out of memory");
        goto out;
    }
    if (check_init(scope, cpu, dev) || check_pass(scope, cpu, dev, &io0, &pc, &pd))
        goto out;
    check_grad_buffer(scope, dev, d);
    check_in_flight(scope, d, cpu, &io0, &io1);
    check_adamw(scope, cpu, dev, pc.grads, &io0, &pc, &pd);
    check_save_load(scope, dev, &cpu_dev, 1, &io0);
    check_save_load(scope, cpu, d, 0, &io0);
out:
    kern_stage_free(cpu);
    kern_stage_free(dev);
    io_free(&io0);
    io_free(&io1);
    pass_free(&pc);
    pass_free(&pd);
}

/* ---- main ------------------------------------------------------------------ */

/* --small (the host emulation in make test, which runs each CUDA thread as
 * a fibre): a case longer than SMALL_T_OVER tokens runs one sequence of at
 * most SMALL_T tokens, still over 128 so that rows outgrow a 128-thread
 * block; the shapes that matter (head sizes, odd sizes, stages) stay. */
#define SMALL_T_OVER 64
#define SMALL_T 136

static struct test_case small_case(struct test_case tc)
{
    if (tc.T > SMALL_T_OVER) {
        tc.B = 1;
        tc.T = tc.T < SMALL_T ? tc.T : SMALL_T;
    }
    return tc;
}

/* 1 when name is one of the comma-separated names in list. */
static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: test_kernels_gpu [--device cuda|cuda:N|cpu] [--small] [--only NAME,...]\n"
               "  compares the device's kernels with the cpu oracle (default cuda);\n"
               "  cpu compares the oracle with itself, a check of this harness.\n"
               "  --small: one sequence of at most %d tokens in the cases longer than %d\n"
               "  (for the host emulation of CUDA, tests/gpu/host).\n"
               "  --only: those stage cases alone (no link or training checks)\n"
               "  exit 0 all passed, 1 a check failed, 2 usage, 77 no CUDA device\n",
            SMALL_T, SMALL_T_OVER);
}

int main(int argc, char **argv)
{
    const char *name = "cuda";
    struct kern_device d;
    struct kern_err err = {{0}};
    int small = 0;
    const char *only = NULL;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--small") == 0) {
            small = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (kern_device_parse(name, &d, &err)) {
        if (strncmp(name, "cuda", 4) != 0) {
            fprintf(stderr, "test_kernels_gpu: %s\n", err.msg);
            return 2;
        }
        printf("skip - no CUDA device: %s\n", err.msg);
        return 77;
    }
    dev_label = name;
    printf("# kernels on %s against the cpu oracle%s\n", name,
           d.kind == KERN_CPU ? " (cpu against itself: a check of this harness)" : "");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct test_case tc = small ? small_case(cases[i]) : cases[i];
        if (!only || listed(only, tc.name))
            run_case(&tc, &d, 1000 + 16 * (uint64_t)i);
    }
    if (!only) {
        check_links(&d);
        check_training(&d);
    }
    return check_summary();
}
