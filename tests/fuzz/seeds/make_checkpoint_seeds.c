/* make_checkpoint_seeds.c - writes the seed corpus of fuzz_checkpoint: real
 * stage files of a small model, saved by the CPU kernels.
 *
 *   build (from the repository root):
 *     cc -std=c11 -D_GNU_SOURCE -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp \
 *        -o /tmp/make_checkpoint_seeds tests/fuzz/seeds/make_checkpoint_seeds.c \
 *        kernels/stage.c kernels/layout.c models/checkpoint.c models/stage_file.c kernels/cpu_layers.c \
 *        kernels/cpu_stage.c kernels/cpu_gpt2.c kernels/cpu_llama.c kernels/cuda_none.c common/model.c \
 *        common/codec.c -lopenblas -lm -fopenmp
 *     /tmp/make_checkpoint_seeds tests/fuzz/corpus/fuzz_checkpoint
 *
 * The model is fuzz_checkpoint.c's seed_model; stage 0 of two is the one
 * that target loads into, so its seed reaches the whole reader. */
#include <stdio.h>
#include <stdlib.h>

#include "../../../models/checkpoint.h"

static const struct model_config model = { .vocab = 8, .context = 4, .d_model = 4, .heads = 2, .layers = 2 };

/* Saves layers [start, end) after one AdamW step, so the moments are not
 * zero; with_extras: with both extra buffers (DiLoCo's state). */
static int save_stage(const char *dir, const char *name, int start, int end, int with_extras)
{
    struct kern_device cpu = { KERN_CPU, 0 };
    struct kern_stage_spec sp = { .layer_start = start, .layer_end = end, .first = start == 0,
                                  .last = end == model.layers, .micro_batch = 1, .seq_len = 1,
                                  .in_flight = 1, .seed = 1 };
    struct kern_adamw h = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .grad_scale = 1.0f };
    struct kern_stage *st;
    struct kern_err err;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int rc = !f || kern_stage_new(&cpu, &model, &sp, &st, &err) != 0 ? -1 : 0;
    if (rc == 0) {
        for (int e = 0; with_extras && e < KERN_EXTRA_COUNT; e++) {
            float *x = kern_stage_extra(st, (enum kern_extra)e);
            for (size_t i = 0; x && i < kern_stage_param_count(st); i++)
                x[i] = 0.001f * (float)(i % 17) - 0.008f * (float)e;
        }
        rc = kern_stage_adamw(st, &h, &err) || kern_stage_save(st, f, &err) ? -1 : 0;
        kern_stage_free(st);
    }
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "make_checkpoint_seeds: %s: %s\n", path, f ? err.msg : "cannot open");
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_checkpoint_seeds DIR\n");
        return 2;
    }
    return save_stage(argv[1], "stage-0-of-2", 0, 1, 0) || save_stage(argv[1], "stage-1-of-2", 1, 2, 0) ||
           save_stage(argv[1], "whole-model", 0, 2, 0) || save_stage(argv[1], "stage-0-of-2-diloco", 0, 1, 1)
           ? 1 : 0;
}
