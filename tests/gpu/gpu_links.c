/* gpu_links.c - test_kernels_gpu's check of the stage links' formats
 * packed where the stage runs: a middle stage whose link is bf16 or int8
 * must take and give exactly the bytes that common/codec.c's
 * codec_encode makes of what the same stage computes with an f32 link
 * (so a CUDA stage and a CPU stage read each other's links), forward and
 * backward, a row holding a NaN included. */
#include "gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct link_case {
    const char *name;
    struct model_config model;
    int B, T;
};

/* A GPT-2 middle stage of odd sizes and a Llama one with kv heads. */
static const struct link_case link_cases[] = {
    {"links-gpt2-middle", {.vocab = 101, .context = 48, .d_model = 96, .heads = 3, .layers = 3}, 2, 40},
    {"links-llama-middle", {.vocab = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 3, .arch = MODEL_LLAMA,
                            .kv_heads = 2, .ffn_dim = 176, .rope_theta = 10000}, 1, 33},
};

/* Bytes where a and b differ. */
static size_t differing(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += x[i] != y[i];
    return d;
}

/* Forward and backward of one micro-batch through `plain` (f32 link) and
 * `packed` (link id), the latter fed what codec_encode makes of x and g,
 * the former what comes back out of it; the packed stage's bytes must be
 * codec_encode's of the plain stage's results. */
static void check_link(const char *scope, enum codec_id id, struct kern_stage *plain, struct kern_stage *packed,
                       int mb, const float *x, const float *g, size_t btc, size_t cols)
{
    const char *name = codec_get(id)->name;
    size_t bytes = (size_t)codec_bytes(id, btc, cols);
    struct kern_err err = {{0}};
    char what[96];
    float *xd = malloc(btc * sizeof(float)), *gd = malloc(btc * sizeof(float));
    float *y = malloc(btc * sizeof(float)), *gi = malloc(btc * sizeof(float));
    unsigned char *xw = malloc(bytes), *gw = malloc(bytes), *yw = malloc(bytes), *giw = malloc(bytes);
    unsigned char *want = malloc(bytes);
    if (!xd || !gd || !y || !gi || !xw || !gw || !yw || !giw || !want) {
        check(scope, name, 0, "out of memory");
        goto out;
    }
    codec_encode(id, x, btc, cols, xw, NULL);
    codec_decode(id, xw, btc, cols, xd, 0);
    codec_encode(id, g, btc, cols, gw, NULL);
    codec_decode(id, gw, btc, cols, gd, 0);
    memset(yw, 0xa5, bytes);
    memset(giw, 0xa5, bytes);
    if (kern_stage_forward(plain, mb, xd, NULL, y, &err) || kern_stage_backward(plain, mb, gd, gi, &err) ||
        kern_stage_forward(packed, mb, xw, NULL, yw, &err) || kern_stage_backward(packed, mb, gw, giw, &err)) {
        check(scope, name, 0, "%s", err.msg);
        goto out;
    }
    codec_encode(id, y, btc, cols, want, NULL);
    snprintf(what, sizeof what, "%s link: forward output is codec_encode's bytes (micro-batch %d)", name, mb);
    check(scope, what, differing(yw, want, bytes) == 0, "%zu of %zu bytes differ", differing(yw, want, bytes), bytes);
    codec_encode(id, gi, btc, cols, want, NULL);
    snprintf(what, sizeof what, "%s link: grad_input is codec_encode's bytes (micro-batch %d)", name, mb);
    check(scope, what, differing(giw, want, bytes) == 0, "%zu of %zu bytes differ", differing(giw, want, bytes),
          bytes);
out:
    free(xd), free(gd), free(y), free(gi), free(xw), free(gw), free(yw), free(giw), free(want);
}

static void check_link_case(const struct link_case *lc, const struct kern_device *d, enum codec_id id)
{
    struct kern_stage_spec sp = {.layer_start = 1, .layer_end = 2, .micro_batch = lc->B, .seq_len = lc->T,
                                 .in_flight = 1, .seed = 77};
    struct kern_stage *plain = NULL, *packed = NULL;
    struct kern_err err = {{0}};
    size_t cols = (size_t)lc->model.d_model, btc = (size_t)lc->B * lc->T * cols;
    float *x = malloc(btc * sizeof(float)), *g = malloc(btc * sizeof(float));
    struct rng r = {4242};
    if (!x || !g) {
        check(lc->name, codec_get(id)->name, 0, "out of memory");
        goto out;
    }
    if (kern_stage_new(d, &lc->model, &sp, &plain, &err)) {
        check(lc->name, "new stage, f32 link", 0, "%s", err.msg);
        goto out;
    }
    sp.link = id;
    if (kern_stage_new(d, &lc->model, &sp, &packed, &err)) {
        check(lc->name, "new stage, packed link", 0, "%s", err.msg);
        goto out;
    }
    check(lc->name, "link bytes", kern_stage_link_bytes(packed) == codec_bytes(id, btc, cols), "%zu",
          kern_stage_link_bytes(packed));
    for (size_t i = 0; i < btc; i++) {
        x[i] = 3.0f * rng_normal(&r);
        g[i] = 1e-3f * rng_normal(&r);
    }
    check_link(lc->name, id, plain, packed, 0, x, g, btc, cols);
    /* the last sequence's last row: NaN, so its rows out are NaN too */
    x[btc - cols / 2] = NAN;
    check_link(lc->name, id, plain, packed, 1, x, g, btc, cols);
out:
    kern_stage_free(plain);
    kern_stage_free(packed);
    free(x);
    free(g);
}

void check_links(const struct kern_device *d)
{
    for (size_t i = 0; i < sizeof link_cases / sizeof link_cases[0]; i++) {
        printf("# case %s: link formats packed on %s\n", link_cases[i].name, dev_label);
        check_link_case(&link_cases[i], d, CODEC_BF16);
        check_link_case(&link_cases[i], d, CODEC_INT8);
    }
}
