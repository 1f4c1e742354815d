/* data.h - training data: which tokens go into which micro-batch.
 *
 * Two formats: "text", any file read as bytes (vocabulary 256), and "llmc",
 * llm.c token shards (a header of 256 little-endian int32: magic 20240520,
 * version 1, token count; then that many uint16 tokens).
 *
 * Sampling is a pure function: sequence g of step t starts at an offset
 * drawn from (seed, t, g). A job numbers the sequences of one step globally,
 * g = (replica * M + micro_batch) * B + b, so every layout of the same global
 * batch (2x2, 4x1, 1x4) reads the same sequences, and a node that takes over
 * a role reads what its predecessor would have. */
#ifndef SHOAL_AGENT_DATA_H
#define SHOAL_AGENT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define DATA_LLMC_MAGIC 20240520
#define DATA_LLMC_VERSION 1
/* llm.c's shards of uint32 tokens (its Llama 3 data): vocabularies above 65536 */
#define DATA_LLMC32_MAGIC 20240801
#define DATA_LLMC32_VERSION 7
#define DATA_LLMC_HEADER_INTS 256

enum data_format { DATA_TEXT, DATA_LLMC };

struct data_source {
    enum data_format format;
    const unsigned char *map; /* the whole file, read-only */
    size_t map_len;           /* bytes */
    const void *tokens;       /* first token: bytes (text) or uint16 (llmc) */
    size_t n_tokens;
};

/* Maps `path` and checks it: the llmc header and length, and every token
 * below vocab. A missing, empty, short or damaged file is an error that names
 * the file and what is wrong (err->status 422, field "data.path"). */
int data_open(const char *path, const char *format, int vocab, int seq_len,
              struct data_source *out, struct shoal_err *err);
void data_close(struct data_source *src);

/* data_open's checks on `len` bytes already in memory (`name` for the
 * messages; seq_len >= 1): fills `out` pointing into `bytes`, which the
 * caller keeps alive and frees itself (no data_close).  0, or -1 with `err`
 * set as data_open's and `out` zeroed. */
int data_check(const unsigned char *bytes, size_t len, enum data_format format, int vocab, int seq_len,
               const char *name, struct data_source *out, struct shoal_err *err);

/* Splits src into its first tokens and the last `fraction` of them (a
 * held-out tail for validation): two views into src's mapping (data_close
 * the owner only).  Each part must hold a sequence of seq_len plus its
 * target: else -1 with err (422, field "validation.holdout"). */
int data_holdout(const struct data_source *src, double fraction, int seq_len, struct data_source *train,
                 struct data_source *val, struct shoal_err *err);

/* Fills tokens and targets (n sequences of T each, int32) with sequences
 * first .. first+n-1 of step `step`; targets are the tokens shifted by one. */
void data_batch(const struct data_source *src, uint64_t seed, uint64_t step, uint64_t first,
                int n, int T, int32_t *tokens, int32_t *targets);

/* The validation sequences: sequence g of `total` starts at token
 * floor(g * (n_tokens - T) / total), evenly over the source, the same
 * whatever the layout and the step.  Fills sequences first .. first+n-1. */
void data_eval_batch(const struct data_source *src, uint64_t total, uint64_t first, int n, int T,
                     int32_t *tokens, int32_t *targets);

#endif
