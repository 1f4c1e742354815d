/* kernels_fixture.h - what the whole-stage suites share: the CPU device,
 * a fixed text and batches of it, stages, their buffers and tensors, a
 * whole-model step, a two-stage training run and a save to a file.
 * Include after cmocka.h. */
#ifndef SHOAL_TEST_KERNELS_FIXTURE_H
#define SHOAL_TEST_KERNELS_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/checkpoint.h"

static const struct kern_device cpu = {KERN_CPU, 0};

static const char corpus[] =
    "It was the best of times, it was the worst of times, it was the age of "
    "wisdom, it was the age of foolishness, it was the epoch of belief, it was "
    "the epoch of incredulity, it was the season of Light, it was the season of "
    "Darkness, it was the spring of hope, it was the winter of despair.";

static __attribute__((unused)) struct kern_stage *stage_new(const struct model_config *m, int start, int end, int B,
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
static __attribute__((unused)) void text_batch(int B, int T, int k, int32_t *tokens, int32_t *targets)
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

static __attribute__((unused)) float *read_buf(struct kern_stage *st, enum kern_buffer which)
{
    struct kern_err err;
    float *p = malloc(kern_stage_param_count(st) * sizeof *p);
    assert_non_null(p);
    if (kern_stage_read(st, which, p, &err))
        fail_msg("read: %s", err.msg);
    return p;
}

static __attribute__((unused)) const struct kern_tensor *find_tensor(struct kern_stage *st, const char *name)
{
    for (int i = 0; i < kern_stage_tensor_count(st); i++)
        if (strcmp(kern_stage_tensor(st, i)->name, name) == 0)
            return kern_stage_tensor(st, i);
    return NULL;
}

/* Whole-model forward+backward of one micro-batch on a first-and-last stage. */
static __attribute__((unused)) float step_loss(struct kern_stage *st, int mb, const int32_t *tok, const int32_t *tgt,
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


/* Runs `steps` AdamW steps of M micro-batches on stages [0,1)+[1,2) and
 * records each step's mean loss. */
static __attribute__((unused)) void train(struct kern_stage *s0, struct kern_stage *s1, int first_step, int steps,
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

/* The gradients of the stages `parts` are those of `whole`, tensor by
 * tensor, bit for bit, and between them they hold every tensor of whole. */
static __attribute__((unused)) void expect_split_grads(struct kern_stage *whole, struct kern_stage *const *parts,
                                                       int n)
{
    float *gw = read_buf(whole, KERN_GRADS);
    int compared = 0;
    for (int p = 0; p < n; p++) {
        float *gp = read_buf(parts[p], KERN_GRADS);
        for (int i = 0; i < kern_stage_tensor_count(parts[p]); i++, compared++) {
            const struct kern_tensor *t = kern_stage_tensor(parts[p], i), *w = find_tensor(whole, t->name);
            if (!w || memcmp(gp + t->offset, gw + w->offset, t->count * sizeof(float)))
                fail_msg("gradient of %s differs between the split and the whole model", t->name);
        }
        free(gp);
    }
    assert_int_equal(compared, kern_stage_tensor_count(whole));
    free(gw);
}

/* M micro-batches (tok, tgt: M rows of B*T) in GPipe order, all forwards
 * then the backwards in reverse, through `whole` and through s0 then s1:
 * the same losses and gradients, bit for bit. */
static __attribute__((unused)) void expect_gpipe_split(struct kern_stage *whole, struct kern_stage *s0,
                                                       struct kern_stage *s1, int M, const int32_t *tok,
                                                       const int32_t *tgt)
{
    struct kern_err err;
    size_t bt = (size_t)kern_stage_spec(s0)->micro_batch * kern_stage_spec(s0)->seq_len;
    size_t btc = bt * (size_t)kern_stage_model(s0)->d_model;
    float *hidden = malloc((size_t)M * btc * sizeof *hidden), *dhidden = malloc(btc * sizeof *dhidden);
    float *lw = malloc((size_t)M * sizeof *lw), *ls = malloc((size_t)M * sizeof *ls), dloss = 1.0f / M;
    assert_true(hidden && dhidden && lw && ls);
    for (int k = 0; k < M; k++) {
        assert_int_equal(kern_stage_forward(whole, k, tok + k * bt, tgt + k * bt, &lw[k], &err), 0);
        assert_int_equal(kern_stage_forward(s0, k, tok + k * bt, NULL, hidden + k * btc, &err), 0);
        assert_int_equal(kern_stage_forward(s1, k, hidden + k * btc, tgt + k * bt, &ls[k], &err), 0);
    }
    for (int k = M - 1; k >= 0; k--) {
        assert_int_equal(kern_stage_backward(whole, k, &dloss, NULL, &err), 0);
        assert_int_equal(kern_stage_backward(s1, k, &dloss, dhidden, &err), 0);
        assert_int_equal(kern_stage_backward(s0, k, dhidden, NULL, &err), 0);
    }
    assert_memory_equal(lw, ls, (size_t)M * sizeof *lw);
    struct kern_stage *parts[2] = {s0, s1};
    expect_split_grads(whole, parts, 2);
    free(hidden), free(dhidden), free(lw), free(ls);
}

static const struct model_config small = {.vocab = 256, .context = 32, .d_model = 32,
                                        .heads = 4, .layers = 2};
static __attribute__((unused)) void save_to(struct kern_stage *st, FILE *f)
{
    struct kern_err err;
    if (kern_stage_save(st, f, &err))
        fail_msg("save: %s", err.msg);
    rewind(f);
}

#endif
