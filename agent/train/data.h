/* data.h - training data: which tokens go into which micro-batch.
 *
 * Two formats: "text", files read as bytes (vocabulary 256), and "llmc",
 * llm.c token shards: a header of 256 little-endian int32 (magic 20240520,
 * version 1, token count) then uint16 tokens, or (magic 20240801, version
 * 7, as llm.c writes Llama 3's) uint32 tokens.
 *
 * A dataset is one or more shards, read as one sequence of tokens in
 * order (64-bit counts).  data.path names:
 *   - a file: the one shard;
 *   - a manifest (dataset.json, written by `shoal-agent tokenize`), or a
 *     directory holding one: its shards of the split asked for ("train" for
 *     data.path, "val" for validation.path), each checked against the
 *     manifest's token count and SHA-256, and the manifest's own SHA-256 is
 *     the dataset's identity (what the job records and every agent proves);
 *   - a directory without one (llm.c's layout): its *.bin files, those with
 *     "train" (or "val") in their names where any are so named, by name;
 *   - a glob (a * ? or [ in the path): the files it matches, by name.
 * A shard's header is checked when the data is opened; its tokens (each
 * below the vocabulary) and its digest when it is first read (the first
 * shard at once), so a job over terabytes starts without reading them all.
 * Digests are cached (digests.h).
 *
 * Sampling is a pure function: sequence g of step t starts at an offset
 * drawn from (seed, t, g) over the whole token sequence. A job numbers the
 * sequences of one step globally, g = (replica * M + micro_batch) * B + b,
 * so every layout of the same global batch (2x2, 4x1, 1x4) reads the same
 * sequences, and a node that takes over a role reads what its predecessor
 * would have; how the tokens are cut into shards changes nothing. */
#ifndef SHOAL_AGENT_DATA_H
#define SHOAL_AGENT_DATA_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "../../common/err.h"
#include "../../common/sha256.h"
#include "digests.h"
#include "roots.h"

#define DATA_LLMC_MAGIC 20240520
#define DATA_LLMC_VERSION 1
/* llm.c's shards of uint32 tokens (its Llama 3 data): vocabularies above 65536 */
#define DATA_LLMC32_MAGIC 20240801
#define DATA_LLMC32_VERSION 7
#define DATA_LLMC_HEADER_INTS 256
#define DATA_SHARDS_MAX 100000
#define DATA_MANIFEST_MAX ((size_t)64 << 20)   /* bytes of a dataset.json */

enum data_format { DATA_TEXT, DATA_LLMC };

struct data_shard {
    char path[PATH_MAX];
    const unsigned char *map;    /* the whole file, read-only (data_check: the caller's bytes) */
    size_t map_len;              /* bytes */
    int mapped;                  /* 1: map is ours to unmap */
    const unsigned char *tokens; /* its first token */
    uint64_t n_tokens;
    int token_bytes;             /* 1 text, 2 or 4 llmc */
    uint64_t first;              /* the source's index of its first token */
    char sha256[SHA256_HEX];     /* the manifest's, "" when there is none */
    struct stat st;              /* when mapped: size and mtime for the digest cache */
    int ready;                   /* its tokens and digest are checked */
};

struct data_source {
    enum data_format format;
    struct data_shard *shards;
    int n_shards;
    int owner;                   /* 1: data_close unmaps the shards (views share them) */
    uint64_t base, n_tokens;     /* tokens [base, base + n_tokens) of the shards */
    int vocab;
    char identity[SHA256_HEX];   /* the manifest's SHA-256; "" for other sources */
    struct digest_cache *digests;   /* shared by the views; the owner frees it */
    const struct data_roots *roots; /* where its files are opened (data_open's caller keeps it) */
};

/* Opens the dataset at `path` (see above) for `split` ("train" or "val";
 * which a manifest's or llm.c directory's shards are read) and checks the
 * first shard.  Every file and directory is opened beneath `roots`
 * (roots.h; the caller keeps them open while the source lives): a path
 * outside them is 422 "path_refused" and nothing outside is read.
 * `cache_dir` holds the digest cache ("" for none).  A
 * missing, empty, short or damaged shard, a manifest that does not parse,
 * or a shard that is not what the manifest says is an error that names the
 * file and what is wrong (err->status 422, code "invalid_dataset", field
 * "data.path"; an I/O fault that may pass is a 503). */
int data_open(const struct data_roots *roots, const char *path, const char *format, const char *split, int vocab,
              int seq_len, const char *cache_dir, struct data_source *out, struct shoal_err *err);
void data_close(struct data_source *src);

/* data_open's checks on `len` bytes already in memory (`name` for the
 * messages; seq_len >= 1): one shard, checked at once, pointing into
 * `bytes`, which the caller keeps alive and frees itself (data_close
 * releases the source, not the bytes).  0, or -1 with `err` set as
 * data_open's and `out` zeroed. */
int data_check(const unsigned char *bytes, size_t len, enum data_format format, int vocab, int seq_len,
               const char *name, struct data_source *out, struct shoal_err *err);

/* Splits src into its first tokens and the last `fraction` of them (a
 * held-out tail for validation): two views of src's shards (data_close
 * the owner only).  Each part must hold a sequence of seq_len plus its
 * target: else -1 with err (422, field "validation.holdout"). */
int data_holdout(const struct data_source *src, double fraction, int seq_len, struct data_source *train,
                 struct data_source *val, struct shoal_err *err);

/* Fills tokens and targets (n sequences of T each, int32) with sequences
 * first .. first+n-1 of step `step`; targets are the tokens shifted by
 * one.  -1 with err (422 "invalid_dataset") when a shard it reads for the
 * first time holds a token outside the vocabulary or is not the
 * manifest's. */
int data_batch(struct data_source *src, uint64_t seed, uint64_t step, uint64_t first, int n, int T,
               int32_t *tokens, int32_t *targets, struct shoal_err *err);

/* The validation sequences: sequence g of `total` starts at token
 * floor(g * (n_tokens - T) / total), evenly over the source, the same
 * whatever the layout and the step.  Fills sequences first .. first+n-1;
 * errors as data_batch's. */
int data_eval_batch(struct data_source *src, uint64_t total, uint64_t first, int n, int T, int32_t *tokens,
                    int32_t *targets, struct shoal_err *err);

#endif
