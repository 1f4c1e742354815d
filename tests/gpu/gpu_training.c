/* gpu_training.c - the end of test_kernels_gpu: a 2-layer character model
 * as two stages [0,1) + [1,2), trained for 100 AdamW steps on the cpu and on
 * the device with the same data; the final losses must be within 5% of each
 * other and the device's loss must fall by more than 30%. */
#include "gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- training: a character model as two stages ---------------------------- */

#define TRAIN_STEPS 100
#define TRAIN_B 4
#define TRAIN_T 32
#define TRAIN_C 64

static const char train_text[] =
    "The river ran slowly past the old mill, and the miller's daughter sat on the "
    "stone wall to watch the boats go by. Every morning the same boats came down "
    "from the hills with wool and timber, and every evening they went back up with "
    "flour, salt and news from the town. She knew the boatmen by name and they knew "
    "her, and when the water was high they threw her apples from the barrels on "
    "their decks. In the winter the river froze at the edges and the boats stopped, "
    "and the mill wheel stood still under a beard of ice. Then the village was "
    "quiet, and she read by the fire and waited for the spring, when the ice would "
    "break and the boats would come down from the hills again.\n";

/* 64 symbols: token id = index; any other character reads as a space. */
static const char train_alphabet[] =
    " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,;:'-!?()\n";
_Static_assert(sizeof train_alphabet == 65, "the alphabet is the 64-token vocabulary");

static int32_t train_token(char ch)
{
    const char *p = ch ? strchr(train_alphabet, ch) : NULL;
    return p ? (int32_t)(p - train_alphabet) : 0;
}

/* B windows of T+1 characters at positions drawn from r. */
static void train_batch(struct rng *r, int32_t *tokens, int32_t *targets)
{
    size_t len = sizeof train_text - 1;
    for (int b = 0; b < TRAIN_B; b++) {
        size_t start = (size_t)(rng_u64(r) % (len - TRAIN_T));
        for (int t = 0; t < TRAIN_T; t++) {
            tokens[b * TRAIN_T + t] = train_token(train_text[start + t]);
            targets[b * TRAIN_T + t] = train_token(train_text[start + t + 1]);
        }
    }
}

/* TRAIN_STEPS AdamW steps of stages [0,1) and [1,2) on device d; the loss of
 * every step into losses. The data and initial weights do not depend on d. */
static int train_run(const struct kern_device *d, float *losses, struct kern_err *err)
{
    static const struct model_config m = {.vocab = 64, .context = TRAIN_T, .d_model = TRAIN_C, .heads = 4, .layers = 2};
    static const struct kern_adamw h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f,
                                        .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 1.0f};
    const struct kern_stage_spec sa = {0, 1, 1, 0, TRAIN_B, TRAIN_T, 1, 42, CODEC_F32};
    const struct kern_stage_spec sb = {1, 2, 0, 1, TRAIN_B, TRAIN_T, 1, 42, CODEC_F32};
    struct kern_stage *a = NULL, *b = NULL;
    float *hidden = malloc(TRAIN_B * TRAIN_T * TRAIN_C * sizeof(float));
    float *dhidden = malloc(TRAIN_B * TRAIN_T * TRAIN_C * sizeof(float));
    int32_t tokens[TRAIN_B * TRAIN_T], targets[TRAIN_B * TRAIN_T];
    const float dloss = 1.0f;
    struct rng r = {7};
    int rc = -1;

    if (!hidden || !dhidden) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        goto out;
    }
    if (kern_stage_new(d, &m, &sa, &a, err) || kern_stage_new(d, &m, &sb, &b, err))
        goto out;
    for (int step = 0; step < TRAIN_STEPS; step++) {
        train_batch(&r, tokens, targets);
        if (kern_stage_zero_grad(a, err) || kern_stage_zero_grad(b, err) ||
            kern_stage_forward(a, step, tokens, NULL, hidden, err) ||
            kern_stage_forward(b, step, hidden, targets, &losses[step], err) ||
            kern_stage_backward(b, step, &dloss, dhidden, err) ||
            kern_stage_backward(a, step, dhidden, NULL, err) ||
            kern_stage_adamw(a, &h, err) || kern_stage_adamw(b, &h, err))
            goto out;
    }
    rc = 0;
out:
    kern_stage_free(a);
    kern_stage_free(b);
    free(hidden);
    free(dhidden);
    return rc;
}

static double mean_tail(const float *x, int n, int tail)
{
    double s = 0;
    for (int i = n - tail; i < n; i++)
        s += x[i];
    return s / tail;
}

void check_training(const struct kern_device *d)
{
    static float lc[TRAIN_STEPS], ld[TRAIN_STEPS];
    const struct kern_device cpu_dev = {KERN_CPU, 0};
    struct kern_err err = {{0}};

    printf("# train: stages [0,1)+[1,2) of V=64 C=%d NH=4 L=2, B=%d T=%d, AdamW lr 1e-3, "
           "%d steps\n", TRAIN_C, TRAIN_B, TRAIN_T, TRAIN_STEPS);
    if (train_run(&cpu_dev, lc, &err)) {
        check("train", "cpu oracle", 0, "%s", err.msg);
        return;
    }
    if (train_run(d, ld, &err)) {
        check("train", "run", 0, "%s", err.msg);
        return;
    }
    printf("# %5s %10s %10s\n", "step", "cpu", dev_label);
    for (int s = 0; s < TRAIN_STEPS; s++)
        if (s == 0 || (s + 1) % 10 == 0)
            printf("# %5d %10.4f %10.4f\n", s + 1, lc[s], ld[s]);
    /* the mean of the last 10 steps: the same batches on both, less noise */
    double fc = mean_tail(lc, TRAIN_STEPS, 10), fd = mean_tail(ld, TRAIN_STEPS, 10);
    double apart = fabs(fd - fc) / fc;
    check("train", "final loss matches cpu", apart < 0.05,
          "mean of the last 10 steps %.4f vs cpu %.4f, %.2f%% apart, tolerance 5%%", fd, fc,
          100 * apart);
    double fell = 1 - fd / ld[0];
    check("train", "loss falls", fell > 0.30, "%.4f at step 1, %.4f at the end: %.1f%% down, "
          "need more than 30%%", ld[0], fd, 100 * fell);
}
