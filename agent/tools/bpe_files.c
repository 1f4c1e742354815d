/* bpe_files.c - the tokenizer file formats (a row each in bpe_formats) and
 * the tiktoken encodings (a row each in bpe_encodings): their split
 * patterns and special tokens, which tiktoken files do not carry. */
#include "bpe.h"
#include "tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The patterns as tiktoken's encoders (and FACTS.md) write them. */
#define PAT_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define PAT_CL100K "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
                   "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PAT_O200K "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
                  "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+" \
                  "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
                  "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

struct bpe_special_token {
    uint32_t id;
    const char *text;
};

/* A tiktoken encoding: its ranks are ids 0..ranks-1. */
struct bpe_encoding {
    const char *name;
    uint32_t ranks;
    const char *pattern;
    const struct bpe_special_token *specials;   /* ends with a NULL text */
    int llama3_reserved;   /* 1: ids ranks+2 .. ranks+255 are Llama 3's reserved specials */
};

static const struct bpe_special_token specials_gpt2[] = { { 50256, "<|endoftext|>" }, { 0, NULL } };
static const struct bpe_special_token specials_cl100k[] = {
    { 100257, "<|endoftext|>" }, { 100258, "<|fim_prefix|>" }, { 100259, "<|fim_middle|>" },
    { 100260, "<|fim_suffix|>" }, { 100276, "<|endofprompt|>" }, { 0, NULL } };
static const struct bpe_special_token specials_o200k[] = {
    { 199999, "<|endoftext|>" }, { 200018, "<|endofprompt|>" }, { 0, NULL } };
static const struct bpe_special_token specials_llama3[] = {
    { 128000, "<|begin_of_text|>" }, { 128001, "<|end_of_text|>" }, { 128002, "<|reserved_special_token_0|>" },
    { 128003, "<|reserved_special_token_1|>" }, { 128004, "<|finetune_right_pad_id|>" },
    { 128005, "<|reserved_special_token_2|>" }, { 128006, "<|start_header_id|>" },
    { 128007, "<|end_header_id|>" }, { 128008, "<|eom_id|>" }, { 128009, "<|eot_id|>" },
    { 128010, "<|python_tag|>" }, { 0, NULL } };

static const struct bpe_encoding bpe_encodings[] = {
    { "gpt2", 50256, PAT_GPT2, specials_gpt2, 0 },          /* also r50k_base */
    { "p50k_base", 50280, PAT_GPT2, specials_gpt2, 0 },
    { "cl100k_base", 100256, PAT_CL100K, specials_cl100k, 0 },
    { "o200k_base", 199998, PAT_O200K, specials_o200k, 0 },
    { "llama3", 128000, PAT_CL100K, specials_llama3, 1 },   /* Llama 3, 3.1, 3.2: tokenizer.model */
};
#define N_ENCODINGS (sizeof bpe_encodings / sizeof bpe_encodings[0])

static const struct bpe_encoding *encoding_find(const char *name, uint32_t ranks, const char *file,
                                                struct shoal_err *err)
{
    for (size_t i = 0; i < N_ENCODINGS; i++)
        if (name && name[0] ? strcmp(name, bpe_encodings[i].name) == 0 ||
                                  (strcmp(name, "r50k_base") == 0 && i == 0)
                            : ranks == bpe_encodings[i].ranks) {
            if (ranks != bpe_encodings[i].ranks) {
                bpe_bad(err, file, "%u ranks, but encoding %s has %u", ranks, bpe_encodings[i].name,
                        bpe_encodings[i].ranks);
                return NULL;
            }
            return &bpe_encodings[i];
        }
    if (name && name[0])
        bpe_bad(err, file, "no encoding '%s': use gpt2, r50k_base, p50k_base, cl100k_base, o200k_base or llama3",
                name);
    else
        bpe_bad(err, file, "%u ranks match no known encoding (gpt2 50256, p50k_base 50280, cl100k_base 100256, "
                "o200k_base 199998, llama3 128000)", ranks);
    return NULL;
}

/* The encoding's specials after its ranks: n_ids and their bytes. */
static uint32_t encoding_ids(const struct bpe_encoding *e)
{
    uint32_t n = e->ranks;
    for (const struct bpe_special_token *s = e->specials; s->text; s++)
        if (s->id + 1 > n)
            n = s->id + 1;
    return e->llama3_reserved ? e->ranks + 256 : n;
}

static int encoding_specials(struct bpe *b, const struct bpe_encoding *e, struct shoal_err *err)
{
    uint32_t next = e->ranks;
    for (const struct bpe_special_token *s = e->specials; s->text; s++) {
        if (bpe_set_token(b, s->id, (const unsigned char *)s->text, strlen(s->text), 1, err) != 0)
            return -1;
        next = s->id + 1;
    }
    for (uint32_t id = next; e->llama3_reserved && id < e->ranks + 256; id++) {
        char text[48];
        int n = snprintf(text, sizeof text, "<|reserved_special_token_%u|>", id - e->ranks - 8);
        if (bpe_set_token(b, id, (const unsigned char *)text, (size_t)n, 1, err) != 0)
            return -1;
    }
    return bpe_add_split(b, e->pattern, BPE_ISOLATED, 0, err);
}

/* ---- llm.c: gpt2_tokenizer.bin ---------------------------------------- */

static int detect_llmc(const unsigned char *buf, size_t len)
{
    return len >= 4 && buf[0] == (TOKENIZER_MAGIC & 0xff) && buf[1] == (TOKENIZER_MAGIC >> 8 & 0xff) &&
           buf[2] == (TOKENIZER_MAGIC >> 16 & 0xff) && buf[3] == (TOKENIZER_MAGIC >> 24);
}

static int load_llmc(struct bpe *b, const unsigned char *buf, size_t len, const char *encoding,
                     struct shoal_err *err)
{
    struct tokenizer t;
    int rc = -1;
    if (tokenizer_load(buf, len, b->name, &t, err) != 0)
        return -1;
    const struct bpe_encoding *e = encoding_find(encoding, t.vocab - 1, b->name, err);
    if (!e && encoding && encoding[0])
        goto out;
    if (e && t.eot != e->ranks) {
        bpe_bad(err, b->name, "eot_token %u, but encoding %s's <|endoftext|> is %u", t.eot, e->name, e->ranks);
        goto out;
    }
    b->decode_only = !e;   /* llm.c's file of another vocabulary: its tokens print */
    b->mode = BPE_RANKS;
    if (bpe_begin(b, t.vocab, len, err) != 0)
        goto out;
    b->eot = t.eot;
    for (uint32_t id = 0; id < t.vocab; id++) {
        size_t n;
        const unsigned char *p = tokenizer_decode(&t, id, &n);
        if (bpe_set_token(b, id, p, n, id == t.eot, err) != 0)
            goto out;
    }
    rc = e ? bpe_add_split(b, e->pattern, BPE_ISOLATED, 0, err) : 0;
out:
    tokenizer_free(&t);
    return rc;
}

/* ---- tiktoken: `base64 rank` lines ------------------------------------ */

static int detect_tiktoken(const unsigned char *buf, size_t len)
{
    (void)buf;
    (void)len;
    return 1;   /* the last row: what is neither of the others */
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with its padding; -1 when it is not. */
static long b64_decode(const unsigned char *in, size_t n, unsigned char *out)
{
    if (n == 0 || n % 4)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (in[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad || (v[k] = b64_value(in[i + k])) < 0)
                return -1;
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(x >> 16);
        if (pad < 2) out[o++] = (unsigned char)(x >> 8);
        if (pad < 1) out[o++] = (unsigned char)x;
    }
    return (long)o;
}

struct rank_line {
    uint32_t rank;
    uint32_t at, len;   /* in the decoded bytes */
};

static int by_rank(const void *a, const void *b)
{
    uint32_t x = ((const struct rank_line *)a)->rank, y = ((const struct rank_line *)b)->rank;
    return x < y ? -1 : x > y;
}

static int load_tiktoken(struct bpe *b, const unsigned char *buf, size_t len, const char *encoding,
                         struct shoal_err *err)
{
    size_t lines = 0, line = 0;
    for (size_t i = 0; i < len; i++)
        lines += buf[i] == '\n';
    lines += len && buf[len - 1] != '\n';
    struct rank_line *r = malloc((lines ? lines : 1) * sizeof *r);
    unsigned char *bytes = malloc(len ? len : 1);
    size_t used = 0, n = 0;
    int rc = -1;
    if (!r || !bytes) {
        err_set(err, 500, "internal", NULL, "out of memory for tokenizer '%s'", b->name);
        goto out;
    }
    for (size_t i = 0; i < len; line++) {
        size_t end = i;
        while (end < len && buf[end] != '\n')
            end++;
        size_t sp = i;
        while (sp < end && buf[sp] != ' ')
            sp++;
        if (end == i) {   /* a blank line (the last one) */
            i = end + 1;
            continue;
        }
        long got = sp < end ? b64_decode(buf + i, sp - i, bytes + used) : -1;
        char digits[16];
        size_t dn = end - sp - 1;
        char *stop;
        if (got < 1 || dn == 0 || dn >= sizeof digits) {
            bpe_bad(err, b->name, "line %zu is not `base64 rank`%s", line + 1,
                    line == 0 ? " (a tiktoken file; or name its format)" : "");
            goto out;
        }
        memcpy(digits, buf + sp + 1, dn);
        digits[dn] = 0;
        errno = 0;
        unsigned long rank = strtoul(digits, &stop, 10);
        if (*stop || errno || digits[0] < '0' || digits[0] > '9' || rank >= BPE_TOKENS_MAX) {
            bpe_bad(err, b->name, "line %zu: rank '%s' is not a number below %u", line + 1, digits, BPE_TOKENS_MAX);
            goto out;
        }
        r[n++] = (struct rank_line){ .rank = (uint32_t)rank, .at = (uint32_t)used, .len = (uint32_t)got };
        used += (size_t)got;
        i = end + 1;
    }
    qsort(r, n, sizeof *r, by_rank);
    for (size_t i = 0; i < n; i++)
        if (r[i].rank != i) {
            bpe_bad(err, b->name, "ranks are not 0..%zu: %s %u", n - 1, i && r[i].rank == r[i - 1].rank ?
                    "a repeated rank" : "a missing rank before", r[i].rank);
            goto out;
        }
    const struct bpe_encoding *e = encoding_find(encoding, (uint32_t)n, b->name, err);
    if (!e)
        goto out;
    b->mode = BPE_RANKS;
    if (bpe_begin(b, encoding_ids(e), used + 256 * 48, err) != 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (bpe_set_token(b, r[i].rank, bytes + r[i].at, r[i].len, 0, err) != 0)
            goto out;
    rc = encoding_specials(b, e, err);
out:
    free(r);
    free(bytes);
    return rc;
}

/* ---- Hugging Face tokenizer.json -------------------------------------- */

static int detect_hf(const unsigned char *buf, size_t len)
{
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t'))
        i++;
    return i < len && buf[i] == '{';
}

/* GPT-2's byte-to-unicode alphabet, inverted: code point -> byte, -1. */
static void byte_alphabet(int *to_byte, int n)
{
    for (int c = 0; c < n; c++)
        to_byte[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        to_byte[printable ? b : 256 + extra++] = b;
    }
}

/* A vocabulary string in the byte-level alphabet to its bytes; -1 when a
 * character is outside the alphabet or the UTF-8 is broken. */
static long alphabet_bytes(const char *s, size_t n, const int *to_byte, unsigned char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = (unsigned char)s[i];
        unsigned cp;
        if (c < 0x80)
            cp = c, i += 1;
        else if ((c & 0xe0) == 0xc0 && i + 1 < n)
            cp = (c & 0x1f) << 6 | ((unsigned char)s[i + 1] & 0x3f), i += 2;
        else
            return -1;   /* the alphabet ends at U+0143: two bytes at most */
        if (cp >= 324 || to_byte[cp] < 0)
            return -1;
        out[o++] = (unsigned char)to_byte[cp];
    }
    return (long)o;
}

/* Hugging Face's SplitDelimiterBehavior names, in enum bpe_split_behavior's order. */
static const char *const split_behaviors[] = { "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                               "Contiguous" };

/* A Split pattern's String as a regex: every ASCII character but a letter
 * or digit escaped (PCRE2 reads those escapes as the character itself). */
static int hf_literal(struct bpe *b, const char *text, char *re, size_t cap, struct shoal_err *err)
{
    size_t n = 0;
    if (!text[0])
        return bpe_bad(err, b->name, "a Split pre_tokenizer of an empty String pattern");
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        int plain = *p >= 0x80 || (*p >= '0' && *p <= '9') || ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z');
        if (n + 3 > cap)
            return bpe_bad(err, b->name, "a Split pre_tokenizer's String pattern of %zu bytes", strlen(text));
        if (!plain)
            re[n++] = '\\';
        re[n++] = (char)*p;
    }
    re[n] = 0;
    return 0;
}

/* A Split step: its pattern (a Regex, or a String taken literally), its
 * behavior and invert, as Hugging Face's Split pre-tokenizer has them. */
static int hf_split(struct bpe *b, json_t *step, struct shoal_err *err)
{
    json_t *pattern = json_object_get(step, "pattern"), *inv = json_object_get(step, "invert");
    const char *re = json_string_value(json_object_get(pattern, "Regex"));
    const char *text = json_string_value(json_object_get(pattern, "String"));
    const char *behavior = json_string_value(json_object_get(step, "behavior"));
    char literal[512];
    if (!re && !text)
        return bpe_bad(err, b->name, "a Split pre_tokenizer without a Regex or String pattern");
    if (!re && hf_literal(b, text, literal, sizeof literal, err) != 0)
        return -1;
    if (inv && !json_is_boolean(inv))
        return bpe_bad(err, b->name, "a Split pre_tokenizer's invert is not true or false");
    for (size_t k = 0; behavior && k < sizeof split_behaviors / sizeof split_behaviors[0]; k++)
        if (strcmp(behavior, split_behaviors[k]) == 0)
            return bpe_add_split(b, re ? re : literal, (enum bpe_split_behavior)k, json_is_true(inv), err);
    return bpe_bad(err, b->name, "a Split pre_tokenizer of behavior %s: Isolated, Removed, MergedWithPrevious, "
                   "MergedWithNext or Contiguous", behavior ? behavior : "(none)");
}

/* One pre-tokenizer step: Split, ByteLevel (GPT-2's pattern when
 * use_regex), Digits (Contiguous runs of numbers, or each alone). */
static int hf_pre_step(struct bpe *b, json_t *step, struct shoal_err *err)
{
    const char *type = json_string_value(json_object_get(step, "type"));
    if (!type)
        return bpe_bad(err, b->name, "a pre_tokenizer without a type");
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(step, "add_prefix_space")))
            return bpe_bad(err, b->name, "ByteLevel's add_prefix_space is not supported");
        json_t *use = json_object_get(step, "use_regex");
        return use && !json_is_true(use) ? 0 : bpe_add_split(b, PAT_GPT2, BPE_ISOLATED, 0, err);
    }
    if (strcmp(type, "Digits") == 0)
        return bpe_add_split(b, json_is_true(json_object_get(step, "individual_digits")) ? "\\p{N}" : "\\p{N}+",
                             BPE_ISOLATED, 0, err);
    if (strcmp(type, "Split") == 0)
        return hf_split(b, step, err);
    return bpe_bad(err, b->name, "pre_tokenizer %s is not supported (ByteLevel, Split, Digits are)", type);
}

/* The normalizer: none, NFC (Qwen2's), or a Sequence of those (an empty
 * one, DeepSeek-V3's, does nothing). */
static int hf_normalizer(struct bpe *b, json_t *norm, int depth, struct shoal_err *err)
{
    const char *type = json_string_value(json_object_get(norm, "type"));
    size_t i;
    json_t *v;
    if (!norm || json_is_null(norm))
        return 0;
    if (type && strcmp(type, "NFC") == 0) {
        b->nfc = 1;
        return 0;
    }
    if (type && strcmp(type, "Sequence") == 0 && depth < 4 && json_is_array(json_object_get(norm, "normalizers"))) {
        json_array_foreach(json_object_get(norm, "normalizers"), i, v)
            if (hf_normalizer(b, v, depth + 1, err) != 0)
                return -1;
        return 0;
    }
    return bpe_bad(err, b->name, "normalizer %s is not supported (NFC is, and a Sequence of NFC or of none)",
                   type ? type : "(untyped)");
}

struct hf_token {
    uint32_t id;
    const char *text;
    size_t len;
    int special;
};

static int by_id(const void *a, const void *b)
{
    uint32_t x = ((const struct hf_token *)a)->id, y = ((const struct hf_token *)b)->id;
    return x < y ? -1 : x > y;
}

/* The vocabulary id of a merge side (a string in the alphabet). */
static int64_t hf_side(const struct bpe *b, const char *s, size_t n, const int *to_byte, unsigned char *scratch)
{
    long got = alphabet_bytes(s, n, to_byte, scratch);
    return got > 0 ? bpe_lookup(b, scratch, (size_t)got) : -1;
}

static int hf_merges(struct bpe *b, json_t *merges, const int *to_byte, struct shoal_err *err)
{
    size_t count = json_array_size(merges);
    unsigned char scratch[2 * BPE_TOKEN_BYTES_MAX];
    b->merges.mask = 0;
    size_t slots = 16;
    while (slots < 2 * count)
        slots *= 2;
    b->merges.keys = calloc(slots, sizeof *b->merges.keys);
    b->merges.vals = malloc(slots * sizeof *b->merges.vals);
    b->merges.vals2 = malloc(slots * sizeof *b->merges.vals2);
    b->merges.mask = slots - 1;
    if (!b->merges.keys || !b->merges.vals || !b->merges.vals2)
        return err_set(err, 500, "internal", NULL, "out of memory for %zu merges", count);
    for (size_t i = 0; i < count; i++) {
        json_t *m = json_array_get(merges, i);
        const char *l, *r;
        size_t ln, rn;
        if (json_is_string(m)) {   /* "left right": the alphabet has no space */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return bpe_bad(err, b->name, "merge %zu ('%.40s') is not two tokens", i, s);
            l = s, ln = (size_t)(sp - s), r = sp + 1, rn = strlen(sp + 1);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            l = json_string_value(json_array_get(m, 0)), ln = json_string_length(json_array_get(m, 0));
            r = json_string_value(json_array_get(m, 1)), rn = json_string_length(json_array_get(m, 1));
        } else
            return bpe_bad(err, b->name, "merge %zu is neither \"left right\" nor [left, right]", i);
        if (ln + rn > BPE_TOKEN_BYTES_MAX)
            return bpe_bad(err, b->name, "merge %zu is longer than %d bytes", i, BPE_TOKEN_BYTES_MAX);
        int64_t left = hf_side(b, l, ln, to_byte, scratch), right = hf_side(b, r, rn, to_byte, scratch);
        long a = alphabet_bytes(l, ln, to_byte, scratch), c = a > 0 ? alphabet_bytes(r, rn, to_byte, scratch + a) : -1;
        int64_t merged = c > 0 ? bpe_lookup(b, scratch, (size_t)(a + c)) : -1;
        if (left < 0 || right < 0 || merged < 0)
            return bpe_bad(err, b->name, "merge %zu ('%.*s' + '%.*s') names a token not in model.vocab", i,
                           (int)(ln < 40 ? ln : 40), l, (int)(rn < 40 ? rn : 40), r);
        if (bpe_add_merge(b, (uint32_t)left, (uint32_t)right, (uint32_t)i, (uint32_t)merged, err) != 0)
            return -1;
    }
    return 0;
}

static int load_hf(struct bpe *b, const unsigned char *buf, size_t len, const char *encoding,
                   struct shoal_err *err)
{
    json_error_t je;
    json_t *doc = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, &je);
    struct hf_token *tok = NULL;
    unsigned char *bytes = NULL;
    int rc = -1, to_byte[324];
    byte_alphabet(to_byte, 324);
    if (encoding && encoding[0]) {
        bpe_bad(err, b->name, "a tokenizer.json names its own pattern: drop the encoding '%s'", encoding);
        goto out;
    }
    if (!doc) {
        bpe_bad(err, b->name, "not JSON (line %d: %s)", je.line, je.text);
        goto out;
    }
    json_t *model = json_object_get(doc, "model"), *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges"), *added = json_object_get(doc, "added_tokens");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE") != 0) {
        bpe_bad(err, b->name, "model.type is %s; only BPE is supported", type ? type : "missing");
        goto out;
    }
    if (json_is_true(json_object_get(model, "byte_fallback"))) {
        bpe_bad(err, b->name, "model.byte_fallback: a SentencePiece-style BPE, not a byte-level one");
        goto out;
    }
    static const char *const empty[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (int k = 0; k < 2; k++) {
        const char *v = json_string_value(json_object_get(model, empty[k]));
        if (v && v[0]) {
            bpe_bad(err, b->name, "model.%s '%s' is not supported", empty[k], v);
            goto out;
        }
    }
    if (hf_normalizer(b, json_object_get(doc, "normalizer"), 0, err) != 0)
        goto out;
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        bpe_bad(err, b->name, "model.vocab (an object) or model.merges (an array) is missing");
        goto out;
    }
    size_t n = json_object_size(vocab) + json_array_size(added), k = 0, total = 0;
    uint32_t max_id = 0;
    if (!(tok = calloc(n ? n : 1, sizeof *tok))) {
        err_set(err, 500, "internal", NULL, "out of memory for tokenizer '%s'", b->name);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= BPE_TOKENS_MAX) {
            bpe_bad(err, b->name, "model.vocab['%.40s'] is not an id below %u", key, BPE_TOKENS_MAX);
            goto out;
        }
        tok[k++] = (struct hf_token){ .id = (uint32_t)id, .text = key, .len = strlen(key) };
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        const char *content = json_string_value(json_object_get(v, "content"));
        if (!content || !content[0] || !json_is_integer(json_object_get(v, "id")) || id < 0 || id >= BPE_TOKENS_MAX) {
            bpe_bad(err, b->name, "added_tokens[%zu] needs an id below %u and a content", i, BPE_TOKENS_MAX);
            goto out;
        }
        /* an added token replaces a vocabulary entry of the same id */
        size_t j = 0;
        while (j < k && !(tok[j].id == (uint32_t)id && !tok[j].special))
            j++;
        if (j == k)
            k++;
        tok[j] = (struct hf_token){ .id = (uint32_t)id, .text = content, .len = strlen(content), .special = 1 };
    }
    qsort(tok, k, sizeof *tok, by_id);
    for (i = 0; i < k; i++) {
        total += tok[i].len;
        if (tok[i].id + 1 > max_id)
            max_id = tok[i].id + 1;
    }
    b->mode = BPE_MERGES;
    b->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    if (bpe_begin(b, max_id, total, err) != 0 || !(bytes = malloc(BPE_TOKEN_BYTES_MAX + 4)))
        goto out;
    for (i = 0; i < k; i++) {
        long got;
        if (tok[i].special) {
            got = (long)tok[i].len;
            if (tok[i].len > BPE_TOKEN_BYTES_MAX) {
                bpe_bad(err, b->name, "added token %u is longer than %d bytes", tok[i].id, BPE_TOKEN_BYTES_MAX);
                goto out;
            }
            memcpy(bytes, tok[i].text, tok[i].len);
        } else if (tok[i].len > BPE_TOKEN_BYTES_MAX ||
                   (got = alphabet_bytes(tok[i].text, tok[i].len, to_byte, bytes)) < 1) {
            bpe_bad(err, b->name, "model.vocab['%.40s'] is not in the byte-level alphabet", tok[i].text);
            goto out;
        }
        if (i && tok[i].id == tok[i - 1].id) {
            bpe_bad(err, b->name, "two tokens have id %u", tok[i].id);
            goto out;
        }
        if (bpe_set_token(b, tok[i].id, bytes, (size_t)got, tok[i].special, err) != 0)
            goto out;
    }
    json_t *pre = json_object_get(doc, "pre_tokenizer");
    const char *pre_type = json_string_value(json_object_get(pre, "type"));
    if (pre_type && strcmp(pre_type, "Sequence") == 0) {
        json_array_foreach(json_object_get(pre, "pretokenizers"), i, v)
            if (hf_pre_step(b, v, err) != 0)
                goto out;
    } else if (pre && !json_is_null(pre) && hf_pre_step(b, pre, err) != 0)
        goto out;
    if (bpe_finish(b, err) != 0 || hf_merges(b, merges, to_byte, err) != 0)
        goto out;
    rc = 0;
out:
    free(tok);
    free(bytes);
    json_decref(doc);
    return rc;
}

/* ---- the formats ------------------------------------------------------- */

struct bpe_format {
    const char *name;
    int (*detect)(const unsigned char *buf, size_t len);
    int (*load)(struct bpe *b, const unsigned char *buf, size_t len, const char *encoding, struct shoal_err *err);
    int finishes;   /* 1: load calls bpe_finish itself (it needs the index for its merges) */
};

static const struct bpe_format bpe_formats[] = {
    { "llmc", detect_llmc, load_llmc, 0 },
    { "hf", detect_hf, load_hf, 1 },
    { "tiktoken", detect_tiktoken, load_tiktoken, 0 },   /* last: detects anything */
};

int bpe_load(const unsigned char *buf, size_t len, const char *name, const char *format, const char *encoding,
             struct bpe *out, struct shoal_err *err)
{
    memset(out, 0, sizeof *out);
    out->eot = out->bot = -1;
    snprintf(out->name, sizeof out->name, "%s", name);
    const struct bpe_format *fmt = NULL;
    for (size_t i = 0; i < sizeof bpe_formats / sizeof bpe_formats[0] && !fmt; i++)
        if (format && format[0] ? strcmp(format, bpe_formats[i].name) == 0 : bpe_formats[i].detect(buf, len))
            fmt = &bpe_formats[i];
    if (!fmt)
        return bpe_bad(err, name, "no tokenizer format '%s': use llmc, tiktoken or hf", format);
    out->format = fmt->name;
    if (fmt->load(out, buf, len, encoding, err) != 0 || (!fmt->finishes && bpe_finish(out, err) != 0)) {
        bpe_free(out);
        return -1;
    }
    return 0;
}

int bpe_open(const char *path, const char *format, const char *encoding, struct bpe *out, struct shoal_err *err)
{
    struct stat sb;
    unsigned char *buf = NULL;
    int rc = -1;
    memset(out, 0, sizeof *out);
    out->eot = out->bot = -1;
    FILE *f = fopen(path, "rb");
    if (!f || fstat(fileno(f), &sb) != 0) {
        bpe_bad(err, path, "%s", strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > BPE_FILE_MAX) {
        bpe_bad(err, path, S_ISREG(sb.st_mode) ? "%lld bytes, more than a tokenizer file's %zu" : "not a regular file",
                (long long)sb.st_size, BPE_FILE_MAX);
        goto out;
    }
    size_t len = (size_t)sb.st_size;
    if (!(buf = malloc(len ? len : 1)) || fread(buf, 1, len, f) != len) {
        if (buf)
            bpe_bad(err, path, "cannot read %zu bytes", len);
        else
            err_set(err, 500, "internal", NULL, "out of memory for tokenizer '%s'", path);
        goto out;
    }
    rc = bpe_load(buf, len, path, format, encoding, out, err);
out:
    free(buf);
    if (f)
        fclose(f);
    return rc;
}
