/* bench_pipeline.c - the kernels-only time of one training step of a whole
 * pipeline: every stage of a GPT-2 model built on one device in one
 * process, M micro-batches forward through the stages and back (GPipe
 * order, the hidden states handed from stage to stage in the link's
 * format, packed and unpacked by the stages as an agent's are), then each
 * stage's gradient norm and AdamW step. It is the same work that
 * `tests/gpu/pipeline_bench.sh` has two agents do over TCP, without the
 * network, the processes or the control plane: what the pipeline would
 * take if nothing but the kernels cost time.
 *
 * usage: bench_pipeline [--device cuda|cuda:N|cpu] [--vocab V] [--context N]
 *          [--d-model C] [--heads NH] [--layers L] [--stages S]
 *          [--micro-batches M] [--micro-batch-size B] [--link f32|bf16|int8]
 *          [--steps N]
 * Defaults: a GPT-2-124M-sized byte model (V 256, context 1024, C 768, NH
 * 12, L 12) as 2 stages, M 4 of B 4 (16 sequences of 1024 tokens a step),
 * f32 links, 10 timed steps after 2 warm-up steps.
 * Output: one table row and one JSON line
 *   {"bench":"pipeline_kernels","device":...,"link":...,"stages":...,"M":...,
 *    "B":...,"T":...,"steps":...,"step_ms":...,"tokens_per_s":...}
 * (step_ms the median). Exit 0, 1 a stage failed, 2 usage, 3 no device. */
#include "../../kernels/kernels.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WARMUP 2
#define MAX_STAGES 64

struct options {
    const char *device, *link;
    struct model_config model;
    int stages, M, B, steps;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_pipeline [--device cuda|cuda:N|cpu] [--vocab V] [--context N] [--d-model C]\n"
               "         [--heads NH] [--layers L] [--stages S] [--micro-batches M] [--micro-batch-size B]\n"
               "         [--link f32|bf16|int8] [--steps N]\n");
}

static int parse_args(int argc, char **argv, struct options *o)
{
    *o = (struct options){"cuda", "f32", {.vocab = 256, .context = 1024, .d_model = 768, .heads = 12, .layers = 12},
                          2, 4, 4, 10};
    struct { const char *flag; int *v; int lo; } ints[] = {
        {"--vocab", &o->model.vocab, 1}, {"--context", &o->model.context, 1}, {"--d-model", &o->model.d_model, 1},
        {"--heads", &o->model.heads, 1}, {"--layers", &o->model.layers, 1}, {"--stages", &o->stages, 1},
        {"--micro-batches", &o->M, 1}, {"--micro-batch-size", &o->B, 1}, {"--steps", &o->steps, 1},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t k;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (!v)
            goto bad;
        if (strcmp(a, "--device") == 0) {
            o->device = v;
        } else if (strcmp(a, "--link") == 0) {
            o->link = v;
        } else {
            for (k = 0; k < sizeof ints / sizeof ints[0] && strcmp(a, ints[k].flag) != 0; k++)
                ;
            char *end;
            errno = 0;
            long n = k < sizeof ints / sizeof ints[0] ? strtol(v, &end, 10) : 0;
            if (k == sizeof ints / sizeof ints[0] || errno || end == v || *end || n < ints[k].lo || n > 1 << 20)
                goto bad;
            *ints[k].v = (int)n;
        }
        i++;
        continue;
    bad:
        fprintf(stderr, "bench_pipeline: bad argument: %s%s%s\n", a, v ? " " : "", v ? v : "");
        usage(stderr);
        return -1;
    }
    if (!codec_by_name(o->link) || o->stages > MAX_STAGES || o->stages > o->model.layers) {
        fprintf(stderr, "bench_pipeline: --link is f32, bf16 or int8 and --stages at most the layers (and %d)\n",
                MAX_STAGES);
        return -1;
    }
    return 0;
}

/* One step: M micro-batches forward through every stage, back, AdamW. */
static int step(struct kern_stage **st, int S, int M, const int32_t *tokens, void **hidden, void **grad,
                struct kern_err *err)
{
    struct kern_adamw h = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f / M};
    float loss, dloss = 1.0f;
    for (int s = 0; s < S; s++)
        if (kern_stage_zero_grad(st[s], err))
            return -1;
    /* hidden[s]: micro-batch m's output of stage s; tokens double as targets */
    for (int m = 0; m < M; m++)
        for (int s = 0; s < S; s++)
            if (kern_stage_forward(st[s], m, s ? hidden[s - 1] : tokens, s == S - 1 ? tokens : NULL,
                                   s == S - 1 ? (void *)&loss : hidden[s], err))
                return -1;
    for (int m = M - 1; m >= 0; m--)
        for (int s = S - 1; s >= 0; s--)
            if (kern_stage_backward(st[s], m, s == S - 1 ? (void *)&dloss : grad[s], s ? grad[s - 1] : NULL, err))
                return -1;
    for (int s = 0; s < S; s++) {
        double n2;
        if (kern_stage_grad_norm2(st[s], &n2, err) || kern_stage_adamw(st[s], &h, err))
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    struct kern_device dev;
    struct kern_err err = {{0}};
    struct kern_stage *st[MAX_STAGES] = {0};
    void *hidden[MAX_STAGES] = {0}, *grad[MAX_STAGES] = {0};
    int32_t *tokens = NULL;
    double *ms = NULL;
    int rc = 1;

    if (parse_args(argc, argv, &o))
        return 2;
    if (kern_device_parse(o.device, &dev, &err)) {
        fprintf(stderr, "bench_pipeline: %s\n", err.msg);
        return strncmp(o.device, "cuda", 4) == 0 ? 3 : 2;
    }
    int S = o.stages, L = o.model.layers, T = o.model.context;
    size_t bt = (size_t)o.B * T;
    tokens = malloc(bt * sizeof *tokens);
    ms = malloc((size_t)o.steps * sizeof *ms);
    if (!tokens || !ms)
        goto oom;
    for (size_t i = 0; i < bt; i++)
        tokens[i] = (int32_t)((i * 7919u + 13u) % (unsigned)o.model.vocab);
    for (int s = 0; s < S; s++) {
        struct kern_stage_spec sp = {.layer_start = L * s / S, .layer_end = L * (s + 1) / S, .first = s == 0,
                                     .last = s == S - 1, .micro_batch = o.B, .seq_len = T, .in_flight = o.M,
                                     .seed = 1, .link = codec_by_name(o.link)->id};
        if (kern_stage_new(&dev, &o.model, &sp, &st[s], &err)) {
            fprintf(stderr, "bench_pipeline: stage %d: %s\n", s, err.msg);
            goto out;
        }
        size_t bytes = kern_stage_link_bytes(st[s]);
        if (!(hidden[s] = malloc(bytes)) || !(grad[s] = malloc(bytes)))
            goto oom;
    }
    for (int i = -WARMUP; i < o.steps; i++) {
        double t0 = now_ms();
        if (step(st, S, o.M, tokens, hidden, grad, &err)) {
            fprintf(stderr, "bench_pipeline: %s\n", err.msg);
            goto out;
        }
        if (i >= 0)
            ms[i] = now_ms() - t0;
    }
    qsort(ms, (size_t)o.steps, sizeof *ms, cmp_double);
    double med = o.steps % 2 ? ms[o.steps / 2] : (ms[o.steps / 2 - 1] + ms[o.steps / 2]) / 2;
    double tps = (double)bt * o.M / (med / 1e3);
    printf("%-10s %-5s %6s %4s %4s %6s %10s %12s\n", "device", "link", "stages", "M", "B", "T", "step_ms",
           "tokens/s");
    printf("%-10s %-5s %6d %4d %4d %6d %10.2f %12.0f\n", o.device, o.link, S, o.M, o.B, T, med, tps);
    printf("{\"bench\":\"pipeline_kernels\",\"device\":\"%s\",\"link\":\"%s\",\"stages\":%d,\"M\":%d,\"B\":%d,"
           "\"T\":%d,\"d_model\":%d,\"layers\":%d,\"steps\":%d,\"step_ms\":%.3f,\"tokens_per_s\":%.1f}\n",
           o.device, o.link, S, o.M, o.B, T, o.model.d_model, L, o.steps, med, tps);
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "bench_pipeline: out of memory\n");
out:
    for (int s = 0; s < S; s++) {
        kern_stage_free(st[s]);
        free(hidden[s]);
        free(grad[s]);
    }
    free(tokens);
    free(ms);
    return rc;
}
