/* bpe.h - byte-level BPE tokenizers: text to token ids and back.
 *
 * One code path for every file format people ship byte-level BPE in; each
 * format is a row of bpe_formats (bpe_files.c):
 *
 *   llmc      llm.c's gpt2_tokenizer.bin (tokenizer.h): GPT-2's token bytes
 *             by id, which are also its merge ranks; <|endoftext|> the eot
 *             (a file of another size decodes only)
 *   tiktoken  `base64(bytes) rank` lines (cl100k_base.tiktoken, o200k,
 *             Llama 3's tokenizer.model); the split pattern and special
 *             tokens come from the encoding's row of bpe_encodings, named
 *             or recognised by its number of ranks
 *   hf        Hugging Face tokenizer.json of the byte-level BPE kind
 *             (GPT-2, SmolLM2, Llama 3, Qwen2): model.vocab, model.merges,
 *             the pre-tokenizer's splits, added tokens
 *
 * Encoding (FACTS.md): the text, made valid UTF-8 first (every invalid
 * sequence becomes U+FFFD, as a WHATWG decoder and so Node's readFile do)
 * and, where the tokenizer.json says so, NFC-normalised (utf8proc),
 * is cut into pieces by each split pattern in turn (PCRE2 with UTF and
 * UCP: \p{L}, \p{N} are Unicode's, of PCRE2's Unicode version; \s is
 * Unicode's White_Space, bpe_pattern.h), the matches and the text between
 * them made pieces as the pattern's Split behavior says (tiktoken's and
 * ByteLevel's: Isolated); a piece that is a token is that token
 * where the format says so (tiktoken always, hf with ignore_merges);
 * otherwise its bytes start as one token each and the adjacent pair of
 * lowest rank merges until none is left: tiktoken's rank is the merged
 * bytes' rank, hf's the pair's line in model.merges.  Special tokens in
 * the text are text ("encode ordinary"); they are added by the caller.
 *
 * A loaded struct bpe is read-only: encode from any number of threads,
 * each with its own struct bpe_work. */
#ifndef SHOAL_AGENT_BPE_H
#define SHOAL_AGENT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

#define BPE_SPLITS_MAX 4            /* pre-tokenizer patterns applied in turn */
#define BPE_TOKENS_MAX (1u << 21)   /* ids; o200k has 200019 */
#define BPE_TOKEN_BYTES_MAX 4096    /* bytes of one token */
#define BPE_FILE_MAX ((size_t)64 << 20)   /* bytes of a tokenizer file; Llama 3's tokenizer.json is 9 MB */

/* What a split pattern's matches and the text between them become
 * (Hugging Face's SplitDelimiterBehavior), splitting "the-final--countdown"
 * on "-": */
enum bpe_split_behavior {
    BPE_ISOLATED,                /* the, -, final, -, -, countdown (tiktoken's patterns; ByteLevel) */
    BPE_REMOVED,                 /* the, final, countdown */
    BPE_MERGED_WITH_PREVIOUS,    /* the-, final-, -, countdown */
    BPE_MERGED_WITH_NEXT,        /* the, -final, -, -countdown */
    BPE_CONTIGUOUS,              /* the, -, final, --, countdown */
};

enum bpe_mode {
    BPE_RANKS,    /* tiktoken and llm.c: a pair's rank is its merged bytes' rank (= id) */
    BPE_MERGES,   /* hf: a pair's rank is its line in model.merges */
};

/* An open-addressed table: token bytes -> id, or an id pair -> merge. */
struct bpe_table {
    uint64_t *keys;    /* 0: empty */
    uint32_t *vals;
    uint32_t *vals2;   /* merges: the merged id */
    uint64_t mask;
};

struct bpe {
    char name[4096];            /* the file, for messages */
    const char *format;         /* its bpe_formats row's name */
    int decode_only;            /* 1: an llm.c file of no known encoding (its tokens print; text cannot be
                                   encoded: bpe_encode refuses) */
    enum bpe_mode mode;
    int ignore_merges;          /* a piece that is a token is that token */
    int nfc;                    /* 1: the text is put in Unicode NFC first (utf8proc; Qwen2's normalizer) */
    uint32_t n_ids;             /* ids are 0..n_ids-1; some may have no bytes (gaps) */
    unsigned char *bytes;       /* every token's bytes, back to back */
    size_t bytes_cap;           /* what bytes holds */
    uint32_t set_next;          /* building: the next id bpe_set_token may set */
    uint64_t *at;               /* (n_ids + 1) token i is bytes[at[i] .. at[i+1]) */
    unsigned char *special;     /* (n_ids) 1: a special (added) token, never merged into */
    struct bpe_table vocab;     /* mergeable token bytes -> id */
    struct bpe_table merges;    /* BPE_MERGES: (left << 32 | right) -> rank, merged id */
    uint32_t byte_id[256];      /* each single byte's id */
    int n_splits;
    void *split[BPE_SPLITS_MAX];   /* pcre2_code *, JIT-compiled where PCRE2 can */
    char pattern[BPE_SPLITS_MAX][512];   /* as the file or encoding writes it, for messages */
    unsigned char behavior[BPE_SPLITS_MAX];   /* enum bpe_split_behavior */
    unsigned char invert[BPE_SPLITS_MAX];     /* 1: the text between matches is what the behavior calls matches */
    int64_t eot;                /* end of text (<|endoftext|>, <|end_of_text|>), -1 if none */
    int64_t bot;                /* begin of text (<|begin_of_text|>), -1 if none */
};

/* Per-thread scratch for bpe_encode; zero it before first use. */
struct bpe_work {
    void *match;                /* pcre2_match_data * */
    unsigned char *clean;       /* the text made valid UTF-8 */
    size_t clean_cap;
    uint32_t *part_id, *part_at, *part_rank;   /* the piece being merged */
    size_t part_cap;
    uint64_t *cache_key;        /* recent short pieces -> their ids */
    uint32_t *cache_ids;
};

/* A growing array of ids; `cap` is the caller's bound on `n` (0: none). */
struct bpe_ids {
    uint32_t *id;
    size_t n, alloc, cap;
};

/* Opens the tokenizer file at `path`: its format is recognised from the
 * content (a row's detect), or named in `format` ("llmc", "tiktoken",
 * "hf"; NULL or "" to recognise).  `encoding` names a bpe_encodings row for
 * a tiktoken file ("cl100k_base", "llama3", ...; NULL or "" to recognise it
 * by its number of ranks).  Returns 0 with *out filled (free it with
 * bpe_free), else -1 with err (422 "invalid_tokenizer" naming the file and
 * the reason; 500 out of memory) and *out empty. */
int bpe_open(const char *path, const char *format, const char *encoding, struct bpe *out, struct shoal_err *err);

/* bpe_open on `len` bytes in memory (the caller keeps buf), named `name`
 * in messages. */
int bpe_load(const unsigned char *buf, size_t len, const char *name, const char *format, const char *encoding,
             struct bpe *out, struct shoal_err *err);

/* Appends the ids of `len` bytes of text (any bytes: invalid UTF-8 is
 * replaced first) to `ids`.  Returns 0, or -1 with err when memory runs
 * out or ids->cap would be passed (ids keeps what fit), or (422) the
 * tokenizer decodes only. */
int bpe_encode(const struct bpe *b, struct bpe_work *w, const char *text, size_t len, struct bpe_ids *ids,
               struct shoal_err *err);

/* Appends one id (a separator the caller adds); -1 as bpe_encode. */
int bpe_ids_push(struct bpe_ids *ids, uint32_t id, struct shoal_err *err);

/* The bytes of token `id` and their count; NULL and 0 for an id with no
 * bytes (a gap, or outside [0, n_ids)).  Owned by b. */
const unsigned char *bpe_decode(const struct bpe *b, int64_t id, size_t *len);

/* The id of a special token by its text, or -1. */
int64_t bpe_special(const struct bpe *b, const char *text);

#define BPE_UNICODE_VERSION_MAX 24   /* bytes, NUL included (PCRE2's own bound) */

/* Writes the Unicode version of PCRE2's tables ("14.0.0" on Debian 12) to
 * out: what \p{L} and \p{N} mean, so which ids a text gets where a letter
 * is newer than the tables.  Returns out. */
const char *bpe_unicode_version(char out[BPE_UNICODE_VERSION_MAX]);

/* Releases what bpe_encode's scratch holds, and empties it. */
void bpe_work_free(struct bpe_work *w);
void bpe_ids_free(struct bpe_ids *ids);
/* Releases what bpe_open allocated and empties *b; harmless on an empty one. */
void bpe_free(struct bpe *b);

/* ---- for the format readers (bpe_files.c) ---------------------------- */

/* A tokenizer under construction: ids 0..n_ids-1 get their bytes with
 * bpe_set_token, then bpe_finish builds the tables. */
int bpe_begin(struct bpe *b, uint32_t n_ids, size_t total_bytes, struct shoal_err *err);
int bpe_set_token(struct bpe *b, uint32_t id, const unsigned char *bytes, size_t len, int special,
                  struct shoal_err *err);
/* Indexes the mergeable tokens, finds the single bytes' ids (every byte
 * must be a token) and the eot and bot specials; compiles the patterns
 * added with bpe_add_split.  -1 with err naming b->name. */
int bpe_finish(struct bpe *b, struct shoal_err *err);
/* A split pattern, after those added before it: `\s` and `\S` mean
 * Unicode's White_Space (bpe_pattern.h); `behavior` and `invert` as
 * Hugging Face's Split (tiktoken's patterns: BPE_ISOLATED, 0).  An empty
 * match is a match (of no text), except where the last match ended, as
 * Oniguruma's find_iter has it; pieces of no text are dropped. */
int bpe_add_split(struct bpe *b, const char *pattern, enum bpe_split_behavior behavior, int invert,
                  struct shoal_err *err);
/* BPE_MERGES: the merge of `left` and `right` at `rank` into `merged`. */
int bpe_add_merge(struct bpe *b, uint32_t left, uint32_t right, uint32_t rank, uint32_t merged,
                  struct shoal_err *err);
/* The id of mergeable token bytes, or -1 (after bpe_finish). */
int64_t bpe_lookup(const struct bpe *b, const unsigned char *bytes, size_t len);
/* A 422 naming b->name with a printf-formatted reason. */
__attribute__((format(printf, 3, 4)))
int bpe_bad(struct shoal_err *err, const char *name, const char *fmt, ...);

#endif
