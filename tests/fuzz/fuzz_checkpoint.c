/* fuzz_checkpoint.c - the stage file reader (models/checkpoint.c) as the
 * agent uses it on a checkpoint it downloaded: read from memory (fmemopen),
 *
 *   1. kern_stage_file_peek, then a CPU stage built from the header, then
 *      kern_stage_load into it (agent/train/ckpt.c, load_source);
 *   2. kern_stage_load into a stage that exists already (load_same), the
 *      small model of the seed corpus;
 *
 * and both again with the checksum set right where the header puts it, so
 * that what lies behind the checksum is reached too.  What a header may
 * make the agent allocate is bounded by the file's size (the peek checks
 * it), which libFuzzer's -max_len bounds here. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/checkpoint.h"

/* magic 8, version 4, 9 (version 1) or 10 int32, step 8, n 8 (models/checkpoint.c) */
#define HEADER_BYTES_V1 64
#define HEADER_BYTES_V2 68
#define EXTRAS_AT 48      /* version 2: the extras mask, after 9 int32 */

/* The header bytes of the file's version and the float buffers it says it
 * holds (params, both moments, its extras); 0 when it is too short. */
static size_t file_layout(const uint8_t *data, size_t size, int *buffers)
{
    uint32_t version;
    int32_t extras = 0;
    if (size < HEADER_BYTES_V2)
        return 0;
    memcpy(&version, data + 8, 4);
    if (version != 1)
        memcpy(&extras, data + EXTRAS_AT, 4);
    *buffers = 3 + __builtin_popcount((unsigned)extras & 3u);
    return version == 1 ? HEADER_BYTES_V1 : HEADER_BYTES_V2;
}

/* The seed corpus's model (tests/fuzz/README.md says how the seeds are made). */
static const struct model_config seed_model = { .vocab = 8, .context = 4, .d_model = 4, .heads = 2, .layers = 2 };

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_checkpoint: broken promise: %s\n", what);
        abort();
    }
}

/* Stage 0 of two of the seed model, built once and loaded into again and again. */
static struct kern_stage *seed_stage(void)
{
    static struct kern_stage *st;
    struct kern_device cpu = { KERN_CPU, 0 };
    struct kern_stage_spec sp = { .layer_start = 0, .layer_end = 1, .first = 1, .last = 0,
                                  .micro_batch = 1, .seq_len = 1, .in_flight = 1, .seed = 1 };
    struct kern_err err;
    if (!st && kern_stage_new(&cpu, &seed_model, &sp, &st, &err) != 0) {
        fprintf(stderr, "fuzz_checkpoint: cannot build the seed stage: %s\n", err.msg);
        abort();
    }
    return st;
}

/* load_source: a stage from the header, then the file into it. */
static void load_as_source(const uint8_t *data, size_t size)
{
    struct kern_device cpu = { KERN_CPU, 0 };
    struct kern_stage_spec sp = { .micro_batch = 1, .seq_len = 1, .in_flight = 1 };
    struct model_config m;
    struct kern_err err;
    struct kern_stage *st = NULL;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        return;
    if (kern_stage_file_peek(f, &m, &sp, NULL, &err) == 0) {
        expect(ftell(f) == 0, "peek leaves the file at its start");
        int buffers = 3;
        size_t header = file_layout(data, size, &buffers);
        if (kern_stage_new(&cpu, &m, &sp, &st, &err) == 0) {
            expect(kern_stage_param_count(st) * 4 * (size_t)buffers + header + 8 == size,
                   "a stage built from a peeked header holds what the file holds");
            kern_stage_load(st, f, &err);
        }
    }
    kern_stage_free(st);
    fclose(f);
}

/* load_same: the file into the seed stage. */
static void load_into_seed(const uint8_t *data, size_t size)
{
    struct kern_err err;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        return;
    kern_stage_load(seed_stage(), f, &err);
    fclose(f);
}

/* A copy with the FNV-1a checksum where the header's float count puts it
 * (the file's tail when that lies past it); NULL when it cannot be. */
static uint8_t *with_checksum(const uint8_t *data, size_t size)
{
    uint64_t n;
    int buffers = 3;
    size_t header = file_layout(data, size, &buffers);
    if (header == 0 || size < header + 8)
        return NULL;
    memcpy(&n, data + header - 8, 8);
    size_t per = 4 * (size_t)buffers;
    size_t at = n <= (size - header - 8) / per ? header + per * (size_t)n : size - 8;
    uint8_t *copy = malloc(size);
    if (!copy)
        return NULL;
    memcpy(copy, data, size);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < at; i++) {
        h ^= copy[i];
        h *= 0x100000001b3ull;
    }
    memcpy(copy + at, &h, 8);
    return copy;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    load_as_source(data, size);
    load_into_seed(data, size);
    uint8_t *fixed = with_checksum(data, size);
    if (fixed) {
        load_as_source(fixed, size);
        load_into_seed(fixed, size);
        free(fixed);
    }
    return 0;
}
