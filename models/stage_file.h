/* stage_file.h - the header of a stage file (layout in checkpoint.c): read,
 * checked against itself and the file's size.  Not part of the public API;
 * kern_stage_file_peek (checkpoint.h) is.  stage_file.c needs nothing but
 * libc and common/model.c, so that a program that only checks stage files
 * (the server) links it without the rest of models/ (jansson) or the
 * kernels (OpenBLAS, CUDA). */
#ifndef SHOAL_MODELS_STAGE_FILE_H
#define SHOAL_MODELS_STAGE_FILE_H

#include "checkpoint.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define STAGE_FILE_MAGIC "SHOALSTG"
/* Version 4's header: 17 int32 (V, T, C, NH, L, layer_start, layer_end,
 * first, last, extras, architecture, kv_heads, ffn_dim, tied,
 * rope_scaling.original_context, head_dim, sliding_window) and 5 float64
 * (norm_eps, rope_theta, rope_scaling's factor, low_freq_factor,
 * high_freq_factor).  Version 3 has the first 15 ints (head_dim C / NH,
 * no window), version 2 the first 10 and no float64, version 1 the first
 * 9; both of these hold GPT-2. */
#define STAGE_FILE_INTS 17
#define STAGE_FILE_REALS 5
/* Version 4 adds a uint64 after n: the bytes of the source section, which
 * follows the buffers (KERN_STAGE_SOURCE_MAX at most).  A file without a
 * source is written as version 3. */
#define STAGE_FILE_HEADER_MAX (8 + 4 + 4 * STAGE_FILE_INTS + 8 * STAGE_FILE_REALS + 8 + 8 + 8)   /* bytes */
/* In the extras mask: the AdamW moments are left out of the file (they
 * are zero: a stage at AdamW step 0, such as imported weights). */
#define STAGE_FILE_NO_MOMENTS (1 << 30)

struct stage_file_header {
    uint32_t version;
    struct model_config model;       /* normalised */
    int layer_start, layer_end, first, last;
    int32_t extras;                  /* bit i: extra buffer i follows; STAGE_FILE_NO_MOMENTS */
    uint64_t step;                   /* AdamW steps taken */
    uint64_t n;                      /* floats per buffer */
    uint64_t source_bytes;           /* bytes of the source section (version 4; else 0) */
};

/* Reads and unpacks a header (of any version) from the file's current
 * position; checks its magic, version and extras.  `raw` gets its bytes
 * and *raw_len their count.  Returns 0, or -1 with err set. */
int stage_file_header_read(FILE *f, struct stage_file_header *got, unsigned char raw[STAGE_FILE_HEADER_MAX],
                           size_t *raw_len, struct kern_err *err);

/* Float buffers a file of header h holds: params, both moments (unless
 * left out), the extras. */
int stage_file_buffers(const struct stage_file_header *h);

/* Packs h into out as KERN_STAGE_FILE_VERSION (its source_bytes 0 when it
 * has no source section); returns its bytes. */
size_t stage_file_header_pack(const struct stage_file_header *h, unsigned char out[STAGE_FILE_HEADER_MAX]);

#endif
