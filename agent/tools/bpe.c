/* bpe.c - byte-level BPE: the tables, encoding and decoding (bpe.h).  The
 * file formats are read in bpe_files.c. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"
#include "bpe_pattern.h"

#include "../../common/mix.h"

#include <pcre2.h>
#include <utf8proc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS 16384        /* short pieces remembered per thread */
#define CACHE_PIECE 15           /* bytes of a piece worth remembering */
#define NONE UINT32_MAX

int bpe_bad(struct shoal_err *err, const char *name, const char *fmt, ...)
{
    char why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return err_set(err, 422, "invalid_tokenizer", "tokenizer", "tokenizer '%s': %s", name, why);
}

/* ---- tables ------------------------------------------------------------ */

static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h | 1;   /* 0 marks an empty slot */
}

static int table_init(struct bpe_table *t, size_t entries, int pairs)
{
    size_t slots = 16;
    while (slots < 2 * entries)
        slots *= 2;
    t->keys = calloc(slots, sizeof *t->keys);
    t->vals = malloc(slots * sizeof *t->vals);
    t->vals2 = pairs ? malloc(slots * sizeof *t->vals2) : NULL;
    t->mask = slots - 1;
    return t->keys && t->vals && (!pairs || t->vals2) ? 0 : -1;
}

static void table_free(struct bpe_table *t)
{
    free(t->keys);
    free(t->vals);
    free(t->vals2);
    memset(t, 0, sizeof *t);
}

static const unsigned char *token_bytes(const struct bpe *b, uint32_t id, size_t *len)
{
    *len = (size_t)(b->at[id + 1] - b->at[id]);
    return b->bytes + b->at[id];
}

int64_t bpe_lookup(const struct bpe *b, const unsigned char *bytes, size_t len)
{
    uint64_t h = hash_bytes(bytes, len);
    for (uint64_t i = h & b->vocab.mask;; i = (i + 1) & b->vocab.mask) {
        if (b->vocab.keys[i] == 0)
            return -1;
        if (b->vocab.keys[i] == h) {
            size_t n;
            const unsigned char *t = token_bytes(b, b->vocab.vals[i], &n);
            if (n == len && memcmp(t, bytes, len) == 0)
                return b->vocab.vals[i];
        }
    }
}

/* BPE_MERGES: the rank of merging left and right, NONE if they do not. */
static uint32_t merge_rank(const struct bpe *b, uint32_t left, uint32_t right, uint32_t *merged)
{
    uint64_t key = (uint64_t)left << 32 | right | 1ull << 63;
    for (uint64_t i = splitmix64(key) & b->merges.mask;; i = (i + 1) & b->merges.mask) {
        if (b->merges.keys[i] == 0)
            return NONE;
        if (b->merges.keys[i] == key) {
            *merged = b->merges.vals2[i];
            return b->merges.vals[i];
        }
    }
}

int bpe_add_merge(struct bpe *b, uint32_t left, uint32_t right, uint32_t rank, uint32_t merged,
                  struct shoal_err *err)
{
    uint64_t key = (uint64_t)left << 32 | right | 1ull << 63;
    for (uint64_t i = splitmix64(key) & b->merges.mask;; i = (i + 1) & b->merges.mask) {
        if (b->merges.keys[i] == key)
            return 0;   /* a repeated merge keeps its first (lowest) rank, as the hf reader does */
        if (b->merges.keys[i] == 0) {
            if (!b->merges.vals2)
                return bpe_bad(err, b->name, "a merge in a tokenizer without a merges table");
            b->merges.keys[i] = key;
            b->merges.vals[i] = rank;
            b->merges.vals2[i] = merged;
            return 0;
        }
    }
}

/* ---- building ---------------------------------------------------------- */

int bpe_begin(struct bpe *b, uint32_t n_ids, size_t total_bytes, struct shoal_err *err)
{
    if (n_ids < (b->decode_only ? 1u : 256u) || n_ids > BPE_TOKENS_MAX)
        return bpe_bad(err, b->name, "%u tokens; a byte-level BPE has 256 to %u", n_ids, BPE_TOKENS_MAX);
    b->n_ids = n_ids;
    b->bytes_cap = total_bytes;
    b->bytes = malloc(total_bytes ? total_bytes : 1);
    b->at = calloc((size_t)n_ids + 1, sizeof *b->at);
    b->special = calloc(n_ids, 1);
    b->eot = b->bot = -1;
    if (!b->bytes || !b->at || !b->special)
        return err_set(err, 500, "internal", NULL, "out of memory for a tokenizer of %u tokens", n_ids);
    return 0;
}

/* Tokens are set in increasing id order (the readers sort them), so their
 * bytes go back to back; an id skipped is a gap with no bytes. */
int bpe_set_token(struct bpe *b, uint32_t id, const unsigned char *bytes, size_t len, int special,
                  struct shoal_err *err)
{
    if (id >= b->n_ids)
        return bpe_bad(err, b->name, "token id %u is not below its %u tokens", id, b->n_ids);
    if (id < b->set_next)
        return bpe_bad(err, b->name, "token id %u appears twice", id);
    if (len == 0 || len > BPE_TOKEN_BYTES_MAX)
        return bpe_bad(err, b->name, "token %u has %zu bytes (1 to %d)", id, len, BPE_TOKEN_BYTES_MAX);
    uint64_t end = b->at[b->set_next];
    if (len > b->bytes_cap - end)
        return bpe_bad(err, b->name, "token %u passes the %zu bytes its file holds", id, b->bytes_cap);
    for (uint32_t k = b->set_next; k <= id; k++)
        b->at[k] = end;   /* ids skipped: no bytes */
    memcpy(b->bytes + end, bytes, len);
    b->at[id + 1] = end + len;
    b->special[id] = (unsigned char)(special != 0);
    b->set_next = id + 1;
    return 0;
}

int bpe_add_split(struct bpe *b, const char *pattern, enum bpe_split_behavior behavior, int invert,
                  struct shoal_err *err)
{
    int code;
    PCRE2_SIZE at;
    char spelled[8192], why[128];
    if (b->n_splits == BPE_SPLITS_MAX)
        return bpe_bad(err, b->name, "more than %d split patterns", BPE_SPLITS_MAX);
    if (strlen(pattern) >= sizeof b->pattern[0])
        return bpe_bad(err, b->name, "a split pattern of %zu bytes (at most %zu)", strlen(pattern),
                       sizeof b->pattern[0] - 1);
    if (bpe_pattern_white_space(pattern, spelled, sizeof spelled, why, sizeof why) != 0)
        return bpe_bad(err, b->name, "split pattern '%s': %s", pattern, why);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)spelled, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at,
                                   NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return bpe_bad(err, b->name, "split pattern '%s' does not compile (as '%s', White_Space spelled out) at "
                       "offset %zu: %s", pattern, spelled, (size_t)at, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* the interpreter is the fallback */
    snprintf(b->pattern[b->n_splits], sizeof b->pattern[0], "%s", pattern);
    b->behavior[b->n_splits] = (unsigned char)behavior;
    b->invert[b->n_splits] = (unsigned char)(invert != 0);
    b->split[b->n_splits++] = re;
    return 0;
}

int bpe_finish(struct bpe *b, struct shoal_err *err)
{
    size_t mergeable = 0;
    for (uint32_t k = b->set_next; k < b->n_ids; k++)
        b->at[k + 1] = b->at[b->set_next];   /* ids after the last one set: no bytes */
    if (b->decode_only)
        return 0;
    for (uint32_t i = 0; i < b->n_ids; i++)
        mergeable += b->at[i + 1] > b->at[i] && !b->special[i];
    if (table_init(&b->vocab, mergeable, 0) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory for a tokenizer's index");
    for (uint32_t i = 0; i < b->n_ids; i++) {
        size_t n;
        const unsigned char *t = token_bytes(b, i, &n);
        if (n == 0 || b->special[i])
            continue;
        int64_t same = bpe_lookup(b, t, n);
        if (same >= 0)
            return bpe_bad(err, b->name, "tokens %lld and %u have the same bytes", (long long)same, i);
        uint64_t h = hash_bytes(t, n), k = h & b->vocab.mask;
        while (b->vocab.keys[k])
            k = (k + 1) & b->vocab.mask;
        b->vocab.keys[k] = h;
        b->vocab.vals[k] = i;
    }
    for (int c = 0; c < 256; c++) {
        unsigned char one = (unsigned char)c;
        int64_t id = bpe_lookup(b, &one, 1);
        if (id < 0)
            return bpe_bad(err, b->name, "byte 0x%02x is no token: not a byte-level BPE", c);
        b->byte_id[c] = (uint32_t)id;
    }
    static const char *const eots[] = { "<|endoftext|>", "<|end_of_text|>", "</s>" };
    static const char *const bots[] = { "<|begin_of_text|>", "<s>" };
    for (size_t k = 0; b->eot < 0 && k < sizeof eots / sizeof eots[0]; k++)
        b->eot = bpe_special(b, eots[k]);
    for (size_t k = 0; b->bot < 0 && k < sizeof bots / sizeof bots[0]; k++)
        b->bot = bpe_special(b, bots[k]);
    return 0;
}

int64_t bpe_special(const struct bpe *b, const char *text)
{
    size_t len = strlen(text);
    for (uint32_t i = 0; i < b->n_ids; i++) {
        size_t n;
        const unsigned char *t = token_bytes(b, i, &n);
        if (b->special[i] && n == len && memcmp(t, text, len) == 0)
            return i;
    }
    return -1;
}

void bpe_free(struct bpe *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n_splits; i++)
        pcre2_code_free(b->split[i]);
    table_free(&b->vocab);
    table_free(&b->merges);
    free(b->bytes);
    free(b->at);
    free(b->special);
    memset(b, 0, sizeof *b);
    b->eot = b->bot = -1;
}

const char *bpe_unicode_version(char out[BPE_UNICODE_VERSION_MAX])
{
    if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, out) < 0)
        snprintf(out, BPE_UNICODE_VERSION_MAX, "unknown");
    return out;
}

const unsigned char *bpe_decode(const struct bpe *b, int64_t id, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= (int64_t)b->n_ids || b->at[id + 1] == b->at[id])
        return NULL;
    return token_bytes(b, (uint32_t)id, len);
}

/* ---- encoding ---------------------------------------------------------- */

int bpe_ids_push(struct bpe_ids *ids, uint32_t id, struct shoal_err *err)
{
    if (ids->cap && ids->n >= ids->cap)
        return err_set(err, 413, "too_large", NULL, "more than %zu tokens", ids->cap);
    if (ids->n == ids->alloc) {
        size_t alloc = ids->alloc ? 2 * ids->alloc : 1024;
        uint32_t *p = realloc(ids->id, alloc * sizeof *p);
        if (!p)
            return err_set(err, 500, "internal", NULL, "out of memory for %zu tokens", alloc);
        ids->id = p;
        ids->alloc = alloc;
    }
    ids->id[ids->n++] = id;
    return 0;
}

void bpe_ids_free(struct bpe_ids *ids)
{
    free(ids->id);
    memset(ids, 0, sizeof *ids);
}

void bpe_work_free(struct bpe_work *w)
{
    pcre2_match_data_free(w->match);
    free(w->clean);
    free(w->part_id);
    free(w->part_at);
    free(w->part_rank);
    free(w->cache_key);
    free(w->cache_ids);
    memset(w, 0, sizeof *w);
}

/* Valid UTF-8 into w->clean: each maximal invalid subpart becomes U+FFFD
 * (the Unicode standard's practice, which WHATWG's decoder follows). */
static size_t utf8_clean(struct bpe_work *w, const unsigned char *s, size_t len)
{
    unsigned char *o = w->clean;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            *o++ = (unsigned char)c;
            i++;
            continue;
        }
        int n = 0;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            n = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        }
        /* the continuation bytes that fit: the first within [lo, hi] */
        size_t j = i + 1;
        int k = 0;
        while (k < n && j < len && s[j] >= (k ? 0x80u : lo) && s[j] <= (k ? 0xbfu : hi)) {
            j++;
            k++;
        }
        if (n > 0 && k == n) {
            memcpy(o, s + i, j - i);
            o += j - i;
        } else {
            *o++ = 0xef, *o++ = 0xbf, *o++ = 0xbd;   /* U+FFFD for the maximal subpart s[i, j) */
        }
        i = j;
    }
    return (size_t)(o - w->clean);
}

static int work_ready(struct bpe_work *w, size_t text_len, struct shoal_err *err)
{
    if (!w->match && !(w->match = pcre2_match_data_create(1, NULL)))
        return err_set(err, 500, "internal", NULL, "out of memory for a match");
    if (!w->cache_key) {
        w->cache_key = calloc(CACHE_SLOTS, sizeof *w->cache_key * 2);
        w->cache_ids = malloc(CACHE_SLOTS * sizeof *w->cache_ids * (CACHE_PIECE + 1));
        if (!w->cache_key || !w->cache_ids)
            return err_set(err, 500, "internal", NULL, "out of memory for a piece cache");
    }
    if (text_len > (SIZE_MAX - 1) / 3)
        return err_set(err, 413, "too_large", NULL, "a text of %zu bytes", text_len);
    size_t need = 3 * text_len + 1;
    if (need > w->clean_cap) {
        unsigned char *p = realloc(w->clean, need);
        if (!p)
            return err_set(err, 500, "internal", NULL, "out of memory for a text of %zu bytes", text_len);
        w->clean = p;
        w->clean_cap = need;
    }
    return 0;
}

static int parts_ready(struct bpe_work *w, size_t n, struct shoal_err *err)
{
    if (n + 1 <= w->part_cap)
        return 0;
    size_t cap = n + 1 > 2 * w->part_cap ? n + 1 : 2 * w->part_cap;
    free(w->part_id);
    free(w->part_at);
    free(w->part_rank);
    w->part_id = malloc(cap * sizeof *w->part_id);
    w->part_at = malloc(cap * sizeof *w->part_at);
    w->part_rank = malloc(2 * cap * sizeof *w->part_rank);   /* rank, then merged id */
    w->part_cap = cap;
    if (!w->part_id || !w->part_at || !w->part_rank) {
        w->part_cap = 0;
        return err_set(err, 500, "internal", NULL, "out of memory for a piece of %zu bytes", n);
    }
    return 0;
}

/* The rank of merging token `left` (the bytes from `from`) with `right`
 * (up to `to`), NONE when they do not merge, and the merged id. */
static uint32_t rank_of(const struct bpe *b, uint32_t left, uint32_t right, const unsigned char *from,
                        const unsigned char *to, uint32_t *merged)
{
    if (b->mode == BPE_MERGES)
        return merge_rank(b, left, right, merged);
    int64_t id = bpe_lookup(b, from, (size_t)(to - from));
    *merged = id < 0 ? NONE : (uint32_t)id;
    return *merged;
}

/* The rank of merging parts i and i+1 of `piece`, as rank_of. */
static uint32_t pair_rank(const struct bpe *b, const struct bpe_work *w, const unsigned char *piece, size_t i,
                          uint32_t *merged)
{
    return rank_of(b, w->part_id[i], w->part_id[i + 1], piece + w->part_at[i], piece + w->part_at[i + 2], merged);
}

/* A short piece's cache key: its bytes (at most 15) and, in the last
 * byte, its length, so that equal keys are equal pieces and an empty
 * slot's zeros match none; its hash picks the slot (returned). */
static uint64_t cache_key(const unsigned char *piece, size_t len, uint64_t key[2])
{
    unsigned char held[16] = {0};
    memcpy(held, piece, len);
    held[15] = (unsigned char)len;
    memcpy(&key[0], held, 8);
    memcpy(&key[1], held + 8, 8);
    return hash_bytes(piece, len) & (CACHE_SLOTS - 1);
}

/* ---- long pieces: merges from a heap --------------------------------- */

#define LONG_PIECE 64   /* bytes above which the heap beats rescanning the pairs */

struct pair_entry {
    uint32_t rank, at;         /* ties go to the leftmost pair: the lower byte offset */
    uint32_t left, right;      /* parts */
    uint32_t merged;
    uint32_t version, rversion;   /* the parts' versions when pushed */
};

static int entry_before(const struct pair_entry *a, const struct pair_entry *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->at < b->at);
}

static void heap_push(struct pair_entry *h, size_t *n, struct pair_entry e)
{
    size_t i = (*n)++;
    while (i > 0 && entry_before(&e, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static struct pair_entry heap_pop(struct pair_entry *h, size_t *n)
{
    struct pair_entry top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && entry_before(&h[c + 1], &h[c]))
            c++;
        if (!entry_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* A long piece being merged: its parts as a linked list over the bytes. */
struct long_piece {
    const unsigned char *piece;
    uint32_t len;
    uint32_t *id, *at;         /* each part's token and first byte; at[len] = len */
    uint32_t *next, *prev;     /* neighbours; len and UINT32_MAX: none */
    uint32_t *version;         /* bumped when a part grows; UINT32_MAX once merged away */
    struct pair_entry *heap;
    size_t n_heap;
};

/* The entry of part l and its right neighbour, if they merge. */
static void push_pair(const struct bpe *b, struct long_piece *p, uint32_t l)
{
    uint32_t r = p->next[l], merged;
    uint32_t end = p->next[r] < p->len ? p->at[p->next[r]] : p->len;
    uint32_t rank = rank_of(b, p->id[l], p->id[r], p->piece + p->at[l], p->piece + end, &merged);
    if (rank != NONE)
        heap_push(p->heap, &p->n_heap,
                  (struct pair_entry){ rank, p->at[l], l, r, merged, p->version[l], p->version[r] });
}

/* The same merges as the scan in encode_piece, in O(n log n): each pair
 * is a heap entry, stale once either part has changed (HF's BPE does the
 * same; tiktoken rescans, which long runs of one character make slow). */
static int encode_long(const struct bpe *b, const unsigned char *piece, size_t len, struct bpe_ids *ids,
                       struct shoal_err *err)
{
    struct long_piece p = { .piece = piece, .len = (uint32_t)len };
    int rc = -1;
    p.id = malloc(len * sizeof *p.id), p.at = malloc((len + 1) * sizeof *p.at);
    p.next = malloc(len * sizeof *p.next), p.prev = malloc(len * sizeof *p.prev);
    p.version = calloc(len, sizeof *p.version);
    p.heap = malloc(3 * len * sizeof *p.heap);   /* n - 1 pairs, and two for each merge */
    if (!p.id || !p.at || !p.next || !p.prev || !p.version || !p.heap) {
        err_set(err, 500, "internal", NULL, "out of memory for a piece of %zu bytes", len);
        goto out;
    }
    for (uint32_t i = 0; i < p.len; i++) {
        p.id[i] = b->byte_id[piece[i]];
        p.at[i] = i;
        p.next[i] = i + 1;
        p.prev[i] = i - 1;   /* 0 - 1: UINT32_MAX */
    }
    p.at[len] = p.len;
    for (uint32_t i = 0; i + 1 < p.len; i++)
        push_pair(b, &p, i);
    while (p.n_heap > 0) {
        struct pair_entry e = heap_pop(p.heap, &p.n_heap);
        /* stale: either part grew or went, or the left one's neighbour is another now */
        if (e.version != p.version[e.left] || e.rversion != p.version[e.right] || p.next[e.left] != e.right)
            continue;
        p.id[e.left] = e.merged;
        p.version[e.left]++;
        p.version[e.right] = UINT32_MAX;
        p.next[e.left] = p.next[e.right];
        if (p.next[e.left] < p.len)
            p.prev[p.next[e.left]] = e.left;
        if (p.prev[e.left] != UINT32_MAX)
            push_pair(b, &p, p.prev[e.left]);
        if (p.next[e.left] < p.len)
            push_pair(b, &p, e.left);
    }
    for (uint32_t i = 0; i < p.len; i = p.next[i])
        if (bpe_ids_push(ids, p.id[i], err) != 0)
            goto out;
    rc = 0;
out:
    free(p.id), free(p.at), free(p.next), free(p.prev), free(p.version), free(p.heap);
    return rc;
}

static int encode_piece(const struct bpe *b, struct bpe_work *w, const unsigned char *piece, size_t len,
                        struct bpe_ids *ids, struct shoal_err *err)
{
    if (len == 0)
        return 0;
    uint64_t key[2] = {0, 0}, slot = 0;
    if (len <= CACHE_PIECE) {
        slot = cache_key(piece, len, key);
        if (w->cache_key[2 * slot] == key[0] && w->cache_key[2 * slot + 1] == key[1]) {
            const uint32_t *got = w->cache_ids + slot * (CACHE_PIECE + 1);
            for (uint32_t k = 1; k <= got[0]; k++)
                if (bpe_ids_push(ids, got[k], err) != 0)
                    return -1;
            return 0;
        }
    }
    size_t first = ids->n;
    int64_t whole = b->mode == BPE_RANKS || b->ignore_merges ? bpe_lookup(b, piece, len) : -1;
    if (whole >= 0) {
        if (bpe_ids_push(ids, (uint32_t)whole, err) != 0)
            return -1;
    } else if (len > LONG_PIECE) {
        if (len >= UINT32_MAX / 4)
            return err_set(err, 413, "too_large", NULL, "a piece of %zu bytes", len);
        if (encode_long(b, piece, len, ids, err) != 0)
            return -1;
    } else {
        if (parts_ready(w, len, err) != 0)
            return -1;
        size_t n = len;
        uint32_t *rank = w->part_rank, *merged = w->part_rank + w->part_cap;
        for (size_t i = 0; i < n; i++) {
            w->part_id[i] = b->byte_id[piece[i]];
            w->part_at[i] = (uint32_t)i;
        }
        w->part_at[n] = (uint32_t)n;
        for (size_t i = 0; i + 1 < n; i++)
            rank[i] = pair_rank(b, w, piece, i, &merged[i]);
        while (n > 1) {
            size_t best = 0;
            for (size_t i = 1; i + 1 < n; i++)
                if (rank[i] < rank[best])
                    best = i;
            if (rank[best] == NONE)
                break;
            /* parts best and best+1 become one */
            w->part_id[best] = merged[best];
            memmove(w->part_id + best + 1, w->part_id + best + 2, (n - best - 2) * sizeof *w->part_id);
            memmove(w->part_at + best + 1, w->part_at + best + 2, (n - best - 1) * sizeof *w->part_at);
            size_t after = n >= best + 3 ? n - best - 3 : 0;   /* pairs right of the merged one */
            memmove(rank + best + 1, rank + best + 2, after * sizeof *rank);
            memmove(merged + best + 1, merged + best + 2, after * sizeof *merged);
            n--;
            if (best + 1 < n)
                rank[best] = pair_rank(b, w, piece, best, &merged[best]);
            if (best > 0)
                rank[best - 1] = pair_rank(b, w, piece, best - 1, &merged[best - 1]);
        }
        for (size_t i = 0; i < n; i++)
            if (bpe_ids_push(ids, w->part_id[i], err) != 0)
                return -1;
    }
    size_t got = ids->n - first;
    if (len <= CACHE_PIECE && got <= CACHE_PIECE) {
        w->cache_key[2 * slot] = key[0];
        w->cache_key[2 * slot + 1] = key[1];
        uint32_t *put = w->cache_ids + slot * (CACHE_PIECE + 1);
        put[0] = (uint32_t)got;
        memcpy(put + 1, ids->id + first, got * sizeof *put);
    }
    return 0;
}

static int split_level(const struct bpe *b, struct bpe_work *w, const unsigned char *text, size_t len, int level,
                       struct bpe_ids *ids, struct shoal_err *err);

/* One split level's cutting: the segments its pattern finds (matches and
 * the text between them, in order) folded into pieces by its behavior, as
 * Hugging Face's NormalizedString::split folds them; a piece goes on to
 * the next level as soon as no later segment can join it. */
struct cut {
    const struct bpe *b;
    struct bpe_work *w;
    const unsigned char *text;
    int level;
    struct bpe_ids *ids;
    struct shoal_err *err;
    size_t from, to;       /* the piece held back: a later segment may join it */
    int held;
    int last_match;        /* the last segment was a match */
};

static int cut_piece(struct cut *c, size_t from, size_t to)
{
    return to > from ? split_level(c->b, c->w, c->text + from, to - from, c->level + 1, c->ids, c->err) : 0;
}

/* Hands on the held piece and holds [from, to) instead. */
static int cut_hold(struct cut *c, size_t from, size_t to)
{
    int rc = c->held ? cut_piece(c, c->from, c->to) : 0;
    c->from = from, c->to = to, c->held = 1;
    return rc;
}

/* The segment [from, to), a match or not (after invert). */
static int cut_segment(struct cut *c, size_t from, size_t to, int match)
{
    int last = c->last_match, rc = 0;
    c->last_match = match;
    switch ((enum bpe_split_behavior)c->b->behavior[c->level]) {
    case BPE_ISOLATED:
        return cut_piece(c, from, to);
    case BPE_REMOVED:
        return match ? 0 : cut_piece(c, from, to);
    case BPE_MERGED_WITH_PREVIOUS:   /* a match after a non-match ends the piece before it */
        if (match && !last && c->held)
            return c->to = to, 0;
        return cut_hold(c, from, to);
    case BPE_CONTIGUOUS:             /* runs of matches (and of non-matches) are one piece */
        if (match == last && c->held)
            return c->to = to, 0;
        return cut_hold(c, from, to);
    case BPE_MERGED_WITH_NEXT:       /* a match starts the non-match after it; before a match it is alone */
        if (match)
            return cut_hold(c, from, to);
        if (c->held)
            rc = cut_piece(c, c->from, to);
        else
            rc = cut_piece(c, from, to);
        c->held = 0;
        return rc;
    }
    return 0;
}

/* Pieces of text[0, len) by split pattern `level` and the ones after it. */
static int split_level(const struct bpe *b, struct bpe_work *w, const unsigned char *text, size_t len, int level,
                       struct bpe_ids *ids, struct shoal_err *err)
{
    if (level == b->n_splits)
        return encode_piece(b, w, text, len, ids, err);
    if (len == 0)
        return 0;
    const pcre2_code *re = b->split[level];
    int invert = b->invert[level];
    struct cut c = { .b = b, .w = w, .text = text, .level = level, .ids = ids, .err = err };
    size_t pos = 0, from = 0, last_end = SIZE_MAX;
    while (from <= len) {
        int rc = pcre2_match(re, text, len, from, PCRE2_NO_UTF_CHECK, w->match, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set(err, 422, "invalid_text", NULL, "tokenizer '%s': split pattern '%s' failed at byte %zu: %s",
                           b->name, b->pattern[level], from, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->match);
        size_t s = ov[0], e = ov[1];
        if (e == s && e == last_end) {   /* no empty match where the last one ended: step over a character */
            if (from == len)
                break;
            from++;
            while (from < len && (text[from] & 0xc0) == 0x80)
                from++;
            continue;
        }
        if ((s > pos && cut_segment(&c, pos, s, invert) != 0) || cut_segment(&c, s, e, !invert) != 0)
            return -1;
        pos = from = last_end = e;
    }
    if (pos < len && cut_segment(&c, pos, len, invert) != 0)
        return -1;
    return c.held ? cut_piece(&c, c.from, c.to) : 0;
}

int bpe_encode(const struct bpe *b, struct bpe_work *w, const char *text, size_t len, struct bpe_ids *ids,
               struct shoal_err *err)
{
    if (b->decode_only)
        return bpe_bad(err, b->name, "an llm.c tokenizer file of %u tokens, no encoding shoal knows (GPT-2's has "
                       "50257): it decodes ids but cannot encode text", b->n_ids);
    if (work_ready(w, len, err) != 0)
        return -1;
    size_t n = utf8_clean(w, (const unsigned char *)text, len);
    if (!b->nfc)
        return split_level(b, w, w->clean, n, 0, ids, err);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t got = utf8proc_map(w->clean, (utf8proc_ssize_t)n, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (got < 0)
        return err_set(err, 500, "internal", NULL, "tokenizer '%s': NFC of a text of %zu bytes: %s", b->name, n,
                       utf8proc_errmsg(got));
    int rc = split_level(b, w, nfc, (size_t)got, 0, ids, err);
    free(nfc);
    return rc;
}
