/* stage_file.h - the header of a stage file (layout in checkpoint.c): read,
 * checked against itself and the file's size.  Not part of the public API;
 * kern_stage_file_peek (kernels.h) is.  stage_file.c needs nothing but
 * libc, so that a program that only checks stage files (the server) links
 * it without the rest of the kernels. */
#ifndef SHOAL_KERNELS_STAGE_FILE_H
#define SHOAL_KERNELS_STAGE_FILE_H

#include "kernels.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define STAGE_FILE_MAGIC "SHOALSTG"
#define STAGE_FILE_INTS 10                       /* version 2; version 1 has the first 9 */
#define STAGE_FILE_EXTRAS (STAGE_FILE_INTS - 1)  /* the index of the extras mask */
#define STAGE_FILE_HEADER_MAX (8 + 4 + 4 * STAGE_FILE_INTS + 8 + 8)   /* bytes */
/* In the extras mask: the AdamW moments are left out of the file (they
 * are zero: a stage at AdamW step 0, such as imported weights). */
#define STAGE_FILE_NO_MOMENTS (1 << 30)

struct stage_file_header {
    char magic[8];
    uint32_t version;
    int32_t ints[STAGE_FILE_INTS];   /* V, T, C, NH, L, layer_start, layer_end, first, last, extras */
    uint64_t step;                   /* AdamW steps taken */
    uint64_t n;                      /* floats per buffer */
};

/* Reads and unpacks a header (version 1: no extras) from the file's
 * current position; checks its magic, version and extras.  `raw` gets its
 * bytes and *raw_len their count.  Returns 0, or -1 with err set. */
int stage_file_header_read(FILE *f, struct stage_file_header *got, unsigned char raw[STAGE_FILE_HEADER_MAX],
                           size_t *raw_len, struct kern_err *err);

#endif
