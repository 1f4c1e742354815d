/* bench_kernels.c - speed of one pipeline stage: forward+backward of one
 * micro-batch, tokens/s, achieved TFLOP/s and MFU.
 *
 * Configs (--device cuda, the default):
 *   xl-mid-b{1,2,4}   GPT-3 XL-like middle stage: V=50257, context 2048,
 *                     C=2048, NH=16, layers [3,6) of 24, T=2048, B=1/2/4
 *   gpt2-124m-b{4,8}  GPT-2 124M whole (first and last): V=50257, T=1024,
 *                     C=768, NH=12, L=12, B=4/8
 *   smollm2-whole-b1  Llama: SmolLM2-135M whole (V=49152, C=576, 9 heads, 3 kv
 *                     heads, MLP 1536, L=30, tied), T=512, B=1
 *   llama1b-mid-b1    Llama: Llama-3.2-1B's layers [4,8) of 16 (C=2048, 32
 *                     heads, 8 kv heads, MLP 8192), T=2048, B=1
 * With --device cpu the default is a small set a CI machine runs in seconds
 * (small-mid-b2, small-whole-b2: C=256, T=256, 2 layers; small-llama-whole-b2,
 * the Llama of that size, 2 kv heads of 4, MLP 688); --only picks any config
 * by name on either device.
 *
 * Each config: 3 warm-up iterations, then --steps timed ones (default 10) of
 * forward then backward of micro-batch 0, wall clock (CLOCK_MONOTONIC; the
 * cuda backend synchronises before it returns). The times include what the
 * API implies: copying the (B,T,C) input/output and their gradients between
 * host and device on a stage that is not first/last. FLOPs are
 * kern_stage_flops() (matrix products, 6N + 6LCT per token, llm.c's
 * convention); MFU is against --peak-tflops (default 989: H100 SXM dense
 * bf16). Gradients accumulate across iterations; nothing is checked.
 *
 * Output: a table, then one JSON line per config:
 *   {"bench":"kernels","impl":"shoal","config":...,"device":...,"B":...,"T":...,
 *    "steps":...,"ms":...,"fwd_ms":...,"bwd_ms":...,"tokens_per_s":...,
 *    "tflops":...,"mfu":...}        (ms per micro-batch, mfu a fraction)
 * or {... ,"error":"..."} for a config that could not run (e.g. out of memory).
 *
 * Run: make bench-kernels, or  bench_kernels [--device cuda|cuda:N|cpu]
 *        [--steps N] [--only NAME] [--peak-tflops X]
 * Exit: 0 every config ran, 1 one failed, 2 usage, 3 device unavailable.
 * Compare with tests/bench/bench_kernels_torch.py (same configs in PyTorch).
 */
#include "../../kernels/kernels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARMUP 3
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_NO_DEVICE 3

struct bench_config {
    const char *name;
    struct model_config model; /* the family and its sizes */
    int layer_start, layer_end;
    int B, T;
    int small; /* 1: the default set on cpu; 0: the default set on cuda */
};

static const struct bench_config configs[] = {
    {"xl-mid-b1", {.vocab = 50257, .context = 2048, .d_model = 2048, .heads = 16, .layers = 24}, 3, 6, 1, 2048, 0},
    {"xl-mid-b2", {.vocab = 50257, .context = 2048, .d_model = 2048, .heads = 16, .layers = 24}, 3, 6, 2, 2048, 0},
    {"xl-mid-b4", {.vocab = 50257, .context = 2048, .d_model = 2048, .heads = 16, .layers = 24}, 3, 6, 4, 2048, 0},
    {"gpt2-124m-b4", {.vocab = 50257, .context = 1024, .d_model = 768, .heads = 12, .layers = 12}, 0, 12, 4, 1024, 0},
    {"gpt2-124m-b8", {.vocab = 50257, .context = 1024, .d_model = 768, .heads = 12, .layers = 12}, 0, 12, 8, 1024, 0},
    {"small-mid-b2", {.vocab = 8192, .context = 256, .d_model = 256, .heads = 4, .layers = 4}, 1, 3, 2, 256, 1},
    {"small-whole-b2", {.vocab = 8192, .context = 256, .d_model = 256, .heads = 4, .layers = 2}, 0, 2, 2, 256, 1},
    /* Llama: SmolLM2-135M whole (tied), a Llama-3.2-1B middle stage, and a
     * small whole model for the CPU's default set */
    {"smollm2-whole-b1", {.vocab = 49152, .context = 2048, .d_model = 576, .heads = 9, .layers = 30,
                          .arch = MODEL_LLAMA, .kv_heads = 3, .ffn_dim = 1536, .tied = 1, .rope_theta = 100000},
     0, 30, 1, 512, 0},
    {"llama1b-mid-b1", {.vocab = 128256, .context = 2048, .d_model = 2048, .heads = 32, .layers = 16,
                        .arch = MODEL_LLAMA, .kv_heads = 8, .ffn_dim = 8192, .tied = 1, .rope_theta = 500000,
                        .rope_scaling = {.factor = 32, .low_freq_factor = 1, .high_freq_factor = 4,
                                         .original_context = 8192}},
     4, 8, 1, 2048, 0},
    {"small-llama-whole-b2", {.vocab = 8192, .context = 256, .d_model = 256, .heads = 4, .layers = 2,
                              .arch = MODEL_LLAMA, .kv_heads = 2, .ffn_dim = 688, .rope_theta = 10000},
     0, 2, 2, 256, 1},
};
#define N_CONFIGS (sizeof configs / sizeof configs[0])

struct options {
    const char *device; /* as given: "cuda", "cuda:1", "cpu" */
    int steps;
    const char *only;   /* NULL: the default set of the device */
    double peak_tflops;
};

struct result {
    double fwd_ms, bwd_ms, ms; /* means over the timed iterations, per micro-batch */
    double flops;              /* one forward+backward */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t x = (*state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [-1,1): inputs only need to be ordinary numbers, not normal. */
static float rand_pm1(uint64_t *state)
{
    return (float)((double)(splitmix64(state) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Host buffers of one micro-batch. */
struct io {
    void *input;        /* int32 (B,T) on the first stage, else float (B,T,C) */
    int32_t *targets;   /* (B,T) on the last stage */
    float *output;      /* 1 float on the last stage, else (B,T,C) */
    float *grad_output; /* like output */
    float *grad_input;  /* (B,T,C), not on the first stage */
};

static void io_free(struct io *io)
{
    free(io->input);
    free(io->targets);
    free(io->output);
    free(io->grad_output);
    free(io->grad_input);
}

static int io_alloc(struct io *io, const struct bench_config *c, const struct kern_stage_spec *s)
{
    uint64_t rng = 1;
    size_t bt = (size_t)c->B * c->T, btc = bt * (size_t)c->model.d_model;
    size_t out_n = s->last ? 1 : btc;

    memset(io, 0, sizeof *io);
    io->input = malloc((s->first ? bt : btc) * 4); /* int32 or float */
    io->targets = s->last ? malloc(bt * sizeof(int32_t)) : NULL;
    io->output = malloc(out_n * sizeof(float));
    io->grad_output = malloc(out_n * sizeof(float));
    io->grad_input = s->first ? NULL : malloc(btc * sizeof(float));
    if (!io->input || (s->last && !io->targets) || !io->output || !io->grad_output ||
        (!s->first && !io->grad_input))
        return -1;
    for (size_t i = 0; i < (s->first ? bt : btc); i++) {
        if (s->first)
            ((int32_t *)io->input)[i] = (int32_t)(splitmix64(&rng) % (uint64_t)c->model.vocab);
        else
            ((float *)io->input)[i] = rand_pm1(&rng);
    }
    for (size_t i = 0; s->last && i < bt; i++)
        io->targets[i] = (int32_t)(splitmix64(&rng) % (uint64_t)c->model.vocab);
    for (size_t i = 0; i < out_n; i++)
        io->grad_output[i] = s->last ? 1.0f : 1e-3f * rand_pm1(&rng);
    return 0;
}

/* WARMUP + steps iterations of forward and backward; means of the timed ones. */
static int time_stage(struct kern_stage *st, const struct io *io, int steps, struct result *r,
                      struct kern_err *err)
{
    double fwd = 0, bwd = 0;
    for (int i = 0; i < WARMUP + steps; i++) {
        double t0 = now_ms();
        if (kern_stage_forward(st, 0, io->input, io->targets, io->output, err))
            return -1;
        double t1 = now_ms();
        if (kern_stage_backward(st, 0, io->grad_output, io->grad_input, err))
            return -1;
        double t2 = now_ms();
        if (i >= WARMUP) {
            fwd += t1 - t0;
            bwd += t2 - t1;
        }
    }
    r->fwd_ms = fwd / steps;
    r->bwd_ms = bwd / steps;
    r->ms = r->fwd_ms + r->bwd_ms;
    return 0;
}

static int bench_one(const struct kern_device *dev, const struct bench_config *c, int steps,
                     struct result *r, struct kern_err *err)
{
    struct kern_stage_spec s = {
        .layer_start = c->layer_start,
        .layer_end = c->layer_end,
        .first = c->layer_start == 0,
        .last = c->layer_end == c->model.layers,
        .micro_batch = c->B,
        .seq_len = c->T,
        .in_flight = 1,
        .seed = 1,
    };
    struct kern_stage *st = NULL;
    struct io io;
    int rc = -1;

    if (io_alloc(&io, c, &s)) {
        snprintf(err->msg, sizeof err->msg, "out of host memory for the micro-batch");
        goto out;
    }
    if (kern_stage_new(dev, &c->model, &s, &st, err))
        goto out;
    r->flops = kern_stage_flops(st);
    rc = time_stage(st, &io, steps, r, err);
out:
    kern_stage_free(st);
    io_free(&io);
    return rc;
}

/* s as a JSON string literal. */
static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void json_head(const struct options *o, const struct bench_config *c)
{
    printf("{\"bench\":\"kernels\",\"impl\":\"shoal\",\"config\":");
    json_string(c->name);
    printf(",\"device\":");
    json_string(o->device);
    printf(",\"B\":%d,\"T\":%d,\"steps\":%d", c->B, c->T, o->steps);
}

static void print_header(const struct options *o)
{
    printf("# bench_kernels: device %s, timed steps %d (after %d warm-up), peak %.0f TFLOP/s\n",
           o->device, o->steps, WARMUP, o->peak_tflops);
    printf("%-20s %3s %5s %10s %10s %10s %12s %9s %7s\n", "config", "B", "T", "fwd ms",
           "bwd ms", "ms", "tokens/s", "TFLOP/s", "MFU");
}

/* One table row: the timings, or the error that stopped the config. */
static void print_row(const struct options *o, const struct bench_config *c,
                      const struct result *r, const char *error)
{
    if (error) {
        printf("%-20s %3d %5d error: %s\n", c->name, c->B, c->T, error);
        return;
    }
    double tokens_per_s = (double)c->B * c->T / (r->ms / 1e3);
    double tflops = r->flops / (r->ms / 1e3) / 1e12;
    printf("%-20s %3d %5d %10.2f %10.2f %10.2f %12.0f %9.2f %6.2f%%\n", c->name, c->B, c->T,
           r->fwd_ms, r->bwd_ms, r->ms, tokens_per_s, tflops, 100 * tflops / o->peak_tflops);
}

/* One JSON line; main prints them all after the table. */
static void json_line(const struct options *o, const struct bench_config *c,
                      const struct result *r, const char *error)
{
    json_head(o, c);
    if (error) {
        printf(",\"error\":");
        json_string(error);
    } else {
        double tflops = r->flops / (r->ms / 1e3) / 1e12;
        printf(",\"ms\":%.4f,\"fwd_ms\":%.4f,\"bwd_ms\":%.4f,\"tokens_per_s\":%.1f,"
               "\"tflops\":%.6g,\"mfu\":%.6g",
               r->ms, r->fwd_ms, r->bwd_ms, (double)c->B * c->T / (r->ms / 1e3), tflops,
               tflops / o->peak_tflops);
    }
    printf("}\n");
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_kernels [--device cuda|cuda:N|cpu] [--steps N] [--only NAME]\n"
               "                     [--peak-tflops X]\n"
               "  --steps N         timed iterations after %d warm-up (default 10)\n"
               "  --only NAME       one config:",
            WARMUP);
    for (size_t i = 0; i < N_CONFIGS; i++)
        fprintf(f, " %s", configs[i].name);
    fprintf(f, "\n  --peak-tflops X   MFU denominator (default 989, H100 SXM dense bf16)\n");
}

static int parse_args(int argc, char **argv, struct options *o)
{
    const char *bad_arg = "", *bad_val = NULL;
    *o = (struct options){"cuda", 10, NULL, 989.0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        bad_arg = a;
        bad_val = v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (!v)
            goto bad;
        errno = 0;
        if (strcmp(a, "--device") == 0) {
            o->device = v;
        } else if (strcmp(a, "--only") == 0) {
            o->only = v;
        } else if (strcmp(a, "--steps") == 0) {
            long n = strtol(v, &end, 10);
            if (errno || end == v || *end || n < 1 || n > 1000000)
                goto bad;
            o->steps = (int)n;
        } else if (strcmp(a, "--peak-tflops") == 0) {
            o->peak_tflops = strtod(v, &end);
            if (errno || end == v || *end || !(o->peak_tflops > 0) || !isfinite(o->peak_tflops))
                goto bad;
        } else {
            goto bad;
        }
        i++;
    }
    return 0;
bad:
    fprintf(stderr, "bench_kernels: bad argument: %s%s%s\n", bad_arg, bad_val ? " " : "",
            bad_val ? bad_val : "");
    usage(stderr);
    return -1;
}

static int selected(const struct options *o, const struct kern_device *dev,
                    const struct bench_config *c)
{
    if (o->only)
        return strcmp(o->only, c->name) == 0;
    return c->small == (dev->kind == KERN_CPU);
}

int main(int argc, char **argv)
{
    struct options o;
    struct kern_device dev;
    struct kern_err err = {{0}};
    struct result results[N_CONFIGS];
    char errors[N_CONFIGS][KERN_ERR_LEN];
    int ran[N_CONFIGS] = {0}, any = 0, failed = 0;

    if (parse_args(argc, argv, &o))
        return EXIT_USAGE;
    if (kern_device_parse(o.device, &dev, &err)) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        return strncmp(o.device, "cuda", 4) == 0 ? EXIT_NO_DEVICE : EXIT_USAGE;
    }
    for (size_t i = 0; i < N_CONFIGS; i++)
        any |= selected(&o, &dev, &configs[i]);
    if (!any) {
        fprintf(stderr, "bench_kernels: no config named '%s'\n", o.only);
        usage(stderr);
        return EXIT_USAGE;
    }
    print_header(&o);
    for (size_t i = 0; i < N_CONFIGS; i++) {
        if (!selected(&o, &dev, &configs[i]))
            continue;
        ran[i] = 1;
        errors[i][0] = '\0';
        memset(&results[i], 0, sizeof results[i]);
        if (bench_one(&dev, &configs[i], o.steps, &results[i], &err)) {
            snprintf(errors[i], sizeof errors[i], "%s", err.msg);
            failed++;
        }
        print_row(&o, &configs[i], &results[i], errors[i][0] ? errors[i] : NULL);
        fflush(stdout);
    }
    for (size_t i = 0; i < N_CONFIGS; i++)
        if (ran[i])
            json_line(&o, &configs[i], &results[i], errors[i][0] ? errors[i] : NULL);
    return failed ? EXIT_FAILED : 0;
}
