/* fuzz_bpe.c - the BPE tokenizer readers and encoder (agent/tools/bpe.c,
 * agent/tools/bpe_files.c).  Byte 0 says what follows:
 *
 *   0x80 set     text, encoded by a small tokenizer.json built here (the
 *                256 bytes and a few merges, Digits then GPT-2's split);
 *   otherwise    a tokenizer file, its format byte 0 % 3 (llmc, hf,
 *                tiktoken; tiktoken files name no encoding and fit none
 *                this small, so their lines are what is fuzzed).
 *
 * Promises: an accepted file has every byte as a token and encodes text
 * into ids below its n_ids; encoded text decodes to the text made valid
 * UTF-8 (each invalid sequence one U+FFFD), whatever the bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../../agent/tools/bpe.h"

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_bpe: broken promise: %s\n", what);
        abort();
    }
}

static struct bpe small;
static int small_ready;

/* GPT-2's byte-to-unicode alphabet for byte b, as UTF-8. */
static void alphabet(int b, char *out)
{
    static int map[256];
    static int made;
    if (!made) {
        int extra = 0;
        for (int c = 0; c < 256; c++) {
            int printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
            map[c] = printable ? c : 256 + extra++;
        }
        made = 1;
    }
    int cp = map[b];
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

static void make_small(void)
{
    json_t *vocab = json_object(), *merges = json_array();
    char s[8];
    for (int b = 0; b < 256; b++) {
        alphabet(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    static const char *const m[][3] = { { "h", "e", "he" }, { "\xc4\xa0", "t", "\xc4\xa0t" },
                                        { "\xc4\xa0t", "he", "\xc4\xa0the" }, { "l", "l", "ll" },
                                        { "e", "ll", "ell" }, { "\xc4\xa0", "\xc4\xa0", "\xc4\xa0\xc4\xa0" } };
    for (int i = 0; i < 6; i++) {
        char pair[32];
        snprintf(pair, sizeof pair, "%s %s", m[i][0], m[i][1]);
        json_array_append_new(merges, json_string(pair));
        json_object_set_new(vocab, m[i][2], json_integer(256 + i));
    }
    json_t *doc = json_pack("{s:[{s:i, s:s, s:b}], s:n, s:{s:s, s:[{s:s, s:b}, {s:s, s:b, s:b}]}, "
                            "s:{s:s, s:o, s:o, s:b}}",
                            "added_tokens", "id", 262, "content", "<|endoftext|>", "special", 1,
                            "normalizer",
                            "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Digits",
                            "individual_digits", 1, "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1,
                            "model", "type", "BPE", "vocab", vocab, "merges", merges, "ignore_merges", 0);
    char *text = json_dumps(doc, 0);
    struct shoal_err err;
    expect(text && bpe_load((const unsigned char *)text, strlen(text), "small.json", "hf", NULL, &small, &err) == 0,
           "the built tokenizer.json loads");
    free(text);
    json_decref(doc);
    small_ready = 1;
}

/* The text as bpe.c makes it valid: each maximal invalid subpart one U+FFFD. */
static size_t clean(const uint8_t *s, size_t len, uint8_t *o)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        int need = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : -1;
        unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
        size_t j = i + 1;
        int k = 0;
        while (need > 0 && k < need && j < len && s[j] >= (k ? 0x80u : lo) && s[j] <= (k ? 0xbfu : hi))
            j++, k++;
        if (need == 0 || (need > 0 && k == need)) {
            memcpy(o + n, s + i, j - i);
            n += j - i;
        } else {
            memcpy(o + n, "\xef\xbf\xbd", 3);
            n += 3;
        }
        i = j;
    }
    return n;
}

static void roundtrip(const struct bpe *b, const uint8_t *text, size_t len)
{
    struct bpe_work w = {0};
    struct bpe_ids ids = {0};
    struct shoal_err err;
    if (bpe_encode(b, &w, (const char *)text, len, &ids, &err) == 0) {
        uint8_t *want = malloc(3 * len + 1), *got = malloc(3 * len + 1);
        size_t n = clean(text, len, want), at = 0;
        expect(want && got, "memory");
        for (size_t i = 0; i < ids.n; i++) {
            size_t k;
            expect(ids.id[i] < b->n_ids, "ids below n_ids");
            const unsigned char *p = bpe_decode(b, ids.id[i], &k);
            expect(p && at + k <= n, "a token decodes within the text");
            memcpy(got + at, p, k);
            at += k;
        }
        expect(at == n && memcmp(got, want, n) == 0, "decode(encode(text)) is the text made valid");
        free(want);
        free(got);
    }
    bpe_ids_free(&ids);
    bpe_work_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!small_ready)
        make_small();
    if (data[0] & 0x80) {
        roundtrip(&small, data + 1, size - 1);
        return 0;
    }
    static const char *const formats[] = { "llmc", "hf", "tiktoken" };
    struct bpe b;
    struct shoal_err err;
    if (bpe_load(data + 1, size - 1, "fuzz", formats[data[0] % 3], NULL, &b, &err) != 0)
        return 0;
    for (int c = 0; c < 256; c++)
        expect(b.byte_id[c] < b.n_ids, "every byte is a token");
    static const char hello[] = "Hello, world 123!\n\xff  x";
    roundtrip(&b, (const uint8_t *)hello, sizeof hello - 1);
    roundtrip(&b, data + 1, size - 1 < 512 ? size - 1 : 512);
    bpe_free(&b);
    return 0;
}
