/* tokenizer.h - llm.c's tokenizer file, read and checked.
 *
 * The file (`gpt2_tokenizer.bin`, written by llm.c's `write_tokenizer`,
 * read by its `tokenizer_init`): a header of 256 little-endian uint32,
 *
 *   [0] magic 20240328   [1] version: 1 or 2   [2] vocab_size
 *   [3] eot_token (version 2; version 1 means GPT-2's, 50256)
 *
 * then, for each token id 0..vocab_size-1, one uint8 length (1..255) and
 * that many raw bytes: the token's UTF-8, possibly part of one character
 * (GPT-2's byte-level tokens), possibly holding a NUL byte.  The file ends
 * after the last token.
 *
 * The bytes of GPT-2's tokens by id are also its merge ranks: bpe_files.c
 * reads this file as the `llmc` row of the BPE tokenizers (bpe.h), which
 * encode text and decode ids. */
#ifndef SHOAL_AGENT_TOKENIZER_H
#define SHOAL_AGENT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define TOKENIZER_MAGIC 20240328u
#define TOKENIZER_HEADER_BYTES 1024            /* 256 uint32 */
#define TOKENIZER_VOCAB_MAX (1u << 20)         /* tokens; GPT-2 has 50257 */
#define TOKENIZER_V1_EOT 50256u                /* version 1 files are GPT-2's */
/* The largest file the cap allows, bytes: every token 255 bytes long. */
#define TOKENIZER_FILE_MAX ((size_t)TOKENIZER_HEADER_BYTES + (size_t)TOKENIZER_VOCAB_MAX * 256)

struct tokenizer {
    uint32_t vocab;            /* tokens in the file */
    uint32_t eot;              /* <|endoftext|>'s id, below vocab */
    int version;               /* 1 or 2 */
    unsigned char *pieces;     /* the file's token part: length byte, bytes, ... */
    uint32_t *at;              /* (vocab) offset of each token's length byte in pieces */
};

/* Reads a tokenizer from the `len` bytes at `buf` (copied; the caller keeps
 * buf), named `name` in messages.  Every field is checked: the magic, the
 * version, 1 <= vocab_size <= TOKENIZER_VOCAB_MAX, eot below vocab_size,
 * every length at least 1, the file ending exactly after the last token.
 * Returns 0 with *out filled (free it with tokenizer_free), else -1 with
 * err set (422 "invalid_tokenizer", or 500 when memory runs out) and *out
 * empty, so tokenizer_free on it is harmless. */
int tokenizer_load(const unsigned char *buf, size_t len, const char *name, struct tokenizer *out,
                   struct shoal_err *err);

/* tokenizer_load on the file at `path` (a regular file of at most
 * TOKENIZER_FILE_MAX bytes).  Errors as tokenizer_load's; a file that
 * cannot be read is a 422 naming the path and the reason. */
int tokenizer_open(const char *path, struct tokenizer *out, struct shoal_err *err);

/* The bytes of token `id` (1 to 255 of them, not NUL-terminated, owned by
 * t) with their count in *len.  An id outside [0, vocab) has no bytes:
 * NULL, *len 0; callers print a placeholder for it (sample prints
 * "<|id|>"), since models padded past the tokenizer's vocabulary (llm.c's
 * 50304 rows for GPT-2's 50257 tokens) can emit such ids. */
const unsigned char *tokenizer_decode(const struct tokenizer *t, int64_t id, size_t *len);

/* The bytes of token `id` and their count, or NULL: what tokenizer_write
 * asks of the tokenizer it writes (bpe_decode's shape). */
typedef const unsigned char *(*tokenizer_piece_fn)(const void *ctx, uint32_t id, size_t *len);

/* Writes llm.c's tokenizer file, version 2 (`vocab` tokens, `eot` the end
 * of text), to `path`: piece(ctx, id) for every id 0..vocab-1, each 1 to
 * 255 bytes, all checked before anything is written.  The file is written
 * beside `path` and renamed onto it, so `path` is whole or as it was.
 * Returns 0, or -1 with err set: 422 invalid_tokenizer naming the id that
 * does not fit (a gap, or a token over 255 bytes) or a bad vocab/eot; 500
 * write_failed when the file cannot be written. */
int tokenizer_write(const char *path, uint32_t vocab, uint32_t eot, tokenizer_piece_fn piece, const void *ctx,
                    struct shoal_err *err);

/* Releases what tokenizer_load allocated and empties *t; NULL or an empty
 * tokenizer is fine. */
void tokenizer_free(struct tokenizer *t);

#endif
