/* test_tokenizer.c - agent/tools/tokenizer.h: llm.c's tokenizer files, written
 * here byte by byte as llm.c's write_tokenizer does, are read back token for
 * token; malformed ones are refused with a 422 that says why; tokenizer_write
 * writes those bytes exactly, and refuses what the format cannot hold. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../agent/tools/tokenizer.h"

/* A tokenizer file being built: header, then length-prefixed tokens. */
struct tokfile {
    unsigned char *b;
    size_t len, cap;
};

static void put(struct tokfile *f, const void *p, size_t n)
{
    if (f->len + n > f->cap) {
        f->cap = (f->len + n) * 2;
        f->b = realloc(f->b, f->cap);
        assert_non_null(f->b);
    }
    memcpy(f->b + f->len, p, n);
    f->len += n;
}

static void set_u32(struct tokfile *f, int field, uint32_t v)
{
    unsigned char le[4] = { v & 255, v >> 8 & 255, v >> 16 & 255, v >> 24 };
    memcpy(f->b + 4 * field, le, 4);
}

/* A header: magic, version, vocab, eot (written whatever the version). */
static struct tokfile header(uint32_t magic, uint32_t version, uint32_t vocab, uint32_t eot)
{
    struct tokfile f = { NULL, 0, 0 };
    unsigned char zero[TOKENIZER_HEADER_BYTES] = { 0 };
    put(&f, zero, sizeof zero);
    set_u32(&f, 0, magic);
    set_u32(&f, 1, version);
    set_u32(&f, 2, vocab);
    set_u32(&f, 3, eot);
    return f;
}

static void token(struct tokfile *f, const void *bytes, size_t n)
{
    unsigned char len = (unsigned char)n;
    put(f, &len, 1);
    put(f, bytes, n);
}

/* The small vocabulary: whole words, a NUL byte, the two halves of "é"
 * (GPT-2's byte tokens split characters like this), a 255-byte token and
 * the end-of-text marker. */
static const char *const words[] = { "hello", ",", " world", "\0", "\xc3", "\xa9", NULL, "<|endoftext|>" };
enum { WORDS = sizeof words / sizeof words[0], LONG_TOKEN = 6 };

static size_t word_len(int i)
{
    return i == 3 ? 1 : i == LONG_TOKEN ? 255 : strlen(words[i]);
}

static struct tokfile small_file(void)
{
    struct tokfile f = header(TOKENIZER_MAGIC, 2, WORDS, WORDS - 1);
    char lng[255];
    memset(lng, 'x', sizeof lng);
    for (int i = 0; i < WORDS; i++)
        token(&f, i == LONG_TOKEN ? lng : words[i], word_len(i));
    return f;
}

static void test_v2_decodes_every_token(void **state)
{
    (void)state;
    struct tokfile f = small_file();
    struct tokenizer t;
    struct shoal_err err = { 0 };
    assert_int_equal(tokenizer_load(f.b, f.len, "small", &t, &err), 0);
    assert_int_equal(t.vocab, WORDS);
    assert_int_equal(t.eot, WORDS - 1);
    assert_int_equal(t.version, 2);
    for (int i = 0; i < WORDS; i++) {
        size_t n;
        const unsigned char *p = tokenizer_decode(&t, i, &n);
        assert_non_null(p);
        assert_int_equal(n, word_len(i));
        if (i == LONG_TOKEN)
            for (size_t k = 0; k < n; k++)
                assert_int_equal(p[k], 'x');
        else
            assert_memory_equal(p, words[i], n);
    }
    /* tokens 4 and 5 together are "é": bytes come out as they are */
    size_t n4, n5;
    const unsigned char *a = tokenizer_decode(&t, 4, &n4), *b = tokenizer_decode(&t, 5, &n5);
    char e[3] = { (char)a[0], (char)b[0], 0 };
    assert_true(n4 == 1 && n5 == 1);
    assert_string_equal(e, "é");
    /* ids outside the vocabulary have no bytes */
    int64_t outside[] = { -1, WORDS, WORDS + 100, INT64_MIN, INT64_MAX };
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
        size_t n = 99;
        assert_null(tokenizer_decode(&t, outside[i], &n));
        assert_int_equal(n, 0);
    }
    tokenizer_free(&t);
    tokenizer_free(&t);   /* twice is harmless */
    free(f.b);
}

/* Version 1 has no eot field: it is GPT-2's 50256, so the file must hold
 * GPT-2's 50257 tokens (or more). */
static void test_v1_is_gpt2_sized(void **state)
{
    (void)state;
    struct tokfile f = header(TOKENIZER_MAGIC, 1, 50257, 12345);   /* [3] is ignored in version 1 */
    for (int i = 0; i < 50256; i++) {
        char b[8];
        token(&f, b, (size_t)snprintf(b, sizeof b, "%d", i));
    }
    token(&f, "<|endoftext|>", 13);
    struct tokenizer t;
    struct shoal_err err = { 0 };
    assert_int_equal(tokenizer_load(f.b, f.len, "v1", &t, &err), 0);
    assert_int_equal(t.version, 1);
    assert_int_equal(t.vocab, 50257);
    assert_int_equal(t.eot, 50256);
    size_t n;
    const unsigned char *p = tokenizer_decode(&t, 50256, &n);
    assert_int_equal(n, 13);
    assert_memory_equal(p, "<|endoftext|>", 13);
    p = tokenizer_decode(&t, 15496, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(p, "15496", 5);
    assert_null(tokenizer_decode(&t, 50257, &n));
    tokenizer_free(&t);
    free(f.b);

    /* a version-1 file of fewer tokens has no room for GPT-2's eot */
    f = small_file();
    set_u32(&f, 1, 1);
    assert_int_equal(tokenizer_load(f.b, f.len, "v1-small", &t, &err), -1);
    assert_int_equal(err.status, 422);
    assert_non_null(strstr(err.message, "eot_token 50256 (version 1: GPT-2's) is not below vocab_size 8"));
    free(f.b);
}

/* Malformed files: each is the small file with one thing wrong. */
enum damage { SHORT_HEADER, EMPTY, BAD_MAGIC, VERSION_0, VERSION_3, VOCAB_0, VOCAB_HUGE, VOCAB_MAX_SHORT,
              EOT_IS_VOCAB, EOT_HUGE, ZERO_LENGTH, TRUNCATED_TOKEN, MISSING_TOKEN, TRAILING_BYTE, FAR_TOO_LONG };
static const struct {
    enum damage what;
    const char *says;
} damages[] = {
    { SHORT_HEADER, "1023 bytes, shorter than the 1024-byte header" },
    { EMPTY, "0 bytes, shorter than the 1024-byte header" },
    { BAD_MAGIC, "not an llm.c tokenizer file (magic 20240326, not 20240328)" },
    { VERSION_0, "version 0; llm.c's tokenizer files are version 1 or 2" },
    { VERSION_3, "version 3;" },
    { VOCAB_0, "vocab_size 0 is outside 1..1048576" },
    { VOCAB_HUGE, "vocab_size 1048577 is outside 1..1048576" },
    { VOCAB_MAX_SHORT, "the header promises 1048576 tokens but the" },
    { EOT_IS_VOCAB, "eot_token 8 is not below vocab_size 8" },
    { EOT_HUGE, "eot_token 4294967295 is not below vocab_size 8" },
    { ZERO_LENGTH, "token 2 has length 0" },
    { TRUNCATED_TOKEN, "the file ends inside token 7 (length 13, 12 bytes left)" },
    { MISSING_TOKEN, "the file ends before token 7 of 8" },
    { TRAILING_BYTE, "1 bytes after the last of its 8 tokens" },
    { FAR_TOO_LONG, "more than its 8 tokens can fill" },
};

static void test_malformed_files_are_refused(void **state)
{
    (void)state;
    for (size_t d = 0; d < sizeof damages / sizeof damages[0]; d++) {
        struct tokfile f = small_file();
        size_t zero_at = TOKENIZER_HEADER_BYTES + (1 + 5) + (1 + 1);   /* token 2's length byte */
        switch (damages[d].what) {
        case SHORT_HEADER: f.len = TOKENIZER_HEADER_BYTES - 1; break;
        case EMPTY: f.len = 0; break;
        case BAD_MAGIC: set_u32(&f, 0, 20240326); break;   /* an early llm.c typo */
        case VERSION_0: set_u32(&f, 1, 0); break;
        case VERSION_3: set_u32(&f, 1, 3); break;
        case VOCAB_0: set_u32(&f, 2, 0); break;
        case VOCAB_HUGE: set_u32(&f, 2, TOKENIZER_VOCAB_MAX + 1); break;
        case VOCAB_MAX_SHORT: set_u32(&f, 2, TOKENIZER_VOCAB_MAX); break;
        case EOT_IS_VOCAB: set_u32(&f, 3, WORDS); break;
        case EOT_HUGE: set_u32(&f, 3, UINT32_MAX); break;
        case ZERO_LENGTH: f.b[zero_at] = 0; break;
        case TRUNCATED_TOKEN: f.len--; break;
        case MISSING_TOKEN: f.len -= 1 + 13; break;
        case TRAILING_BYTE: put(&f, "!", 1); break;
        case FAR_TOO_LONG: {
            unsigned char junk[4096] = { 0 };
            put(&f, junk, sizeof junk);
            break;
        }
        }
        struct tokenizer t;
        struct shoal_err err = { 0 };
        memset(&t, 0x5a, sizeof t);
        int rc = tokenizer_load(f.len ? f.b : NULL, f.len, "bad.bin", &t, &err);
        if (rc != -1 || err.status != 422 || strcmp(err.code, "invalid_tokenizer") != 0 ||
            strncmp(err.message, "tokenizer 'bad.bin': ", 21) != 0 || !strstr(err.message, damages[d].says))
            fail_msg("damage %zu: rc %d, status %d, message \"%s\"; want \"%s\"", d, rc, err.status, err.message,
                     damages[d].says);
        /* nothing is left allocated or half-filled */
        assert_null(t.pieces);
        assert_null(t.at);
        assert_int_equal(t.vocab, 0);
        tokenizer_free(&t);
        free(f.b);
    }
}

/* From a path: a file written here, and the ways a path can be wrong. */
static void test_open(void **state)
{
    (void)state;
    char dir[] = "/tmp/shoal-tokenizer-test.XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/gpt2_tokenizer.bin", dir);
    struct tokfile f = small_file();
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(f.b, 1, f.len, out), f.len);
    fclose(out);

    struct tokenizer t;
    struct shoal_err err = { 0 };
    assert_int_equal(tokenizer_open(path, &t, &err), 0);
    size_t n;
    const unsigned char *p = tokenizer_decode(&t, 2, &n);
    assert_int_equal(n, 6);
    assert_memory_equal(p, " world", 6);
    tokenizer_free(&t);

    assert_int_equal(tokenizer_open(dir, &t, &err), -1);
    assert_int_equal(err.status, 422);
    assert_non_null(strstr(err.message, "not a regular file"));
    char missing[300];
    snprintf(missing, sizeof missing, "%s/nope.bin", dir);
    assert_int_equal(tokenizer_open(missing, &t, &err), -1);
    assert_int_equal(err.status, 422);
    assert_non_null(strstr(err.message, "No such file or directory"));
    assert_non_null(strstr(err.message, "gpt2_tokenizer.bin"));
    assert_null(t.pieces);

    /* the path's reason names the file: truncated on disk */
    out = fopen(path, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(f.b, 1, f.len - 3, out), f.len - 3);
    fclose(out);
    assert_int_equal(tokenizer_open(path, &t, &err), -1);
    assert_non_null(strstr(err.message, path));
    assert_non_null(strstr(err.message, "ends inside token 7"));

    unlink(path);
    rmdir(dir);
    free(f.b);
}

/* The small vocabulary as tokenizer_write asks for it; ctx: the id with no
 * bytes (a gap), or NULL; a 256-byte token for id 0 when it points at -2. */
static const unsigned char *small_piece(const void *ctx, uint32_t id, size_t *len)
{
    static char lng[256];
    int special = ctx ? *(const int *)ctx : -1;
    memset(lng, 'x', sizeof lng);
    *len = 0;
    if ((int)id == special)
        return NULL;
    if (special == -2 && id == 0)
        return *len = 256, (const unsigned char *)lng;
    *len = word_len((int)id);
    return (const unsigned char *)(id == LONG_TOKEN ? lng : words[id]);
}

static void test_write(void **state)
{
    (void)state;
    char dir[] = "/tmp/shoal-tokenizer-test.XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/gpt2_tokenizer.bin", dir);
    struct shoal_err err = { 0 };
    assert_int_equal(tokenizer_write(path, WORDS, WORDS - 1, small_piece, NULL, &err), 0);
    struct tokfile want = small_file();
    FILE *in = fopen(path, "rb");
    assert_non_null(in);
    unsigned char *got = malloc(want.len + 1);
    assert_non_null(got);
    assert_int_equal(fread(got, 1, want.len + 1, in), want.len);   /* the bytes llm.c writes, no more */
    fclose(in);
    assert_memory_equal(got, want.b, want.len);
    free(got);
    free(want.b);
    unlink(path);

    /* what the format cannot hold is refused before a byte is written */
    int gap = 4, too_long = -2;
    assert_int_equal(tokenizer_write(path, WORDS, WORDS - 1, small_piece, &gap, &err), -1);
    assert_int_equal(err.status, 422);
    assert_non_null(strstr(err.message, "token 4 has 0 bytes"));
    assert_int_equal(tokenizer_write(path, WORDS, WORDS - 1, small_piece, &too_long, &err), -1);
    assert_non_null(strstr(err.message, "token 0 has 256 bytes"));
    assert_int_equal(tokenizer_write(path, WORDS, WORDS, small_piece, NULL, &err), -1);
    assert_non_null(strstr(err.message, "eot_token 8 is not below its 8 tokens"));
    assert_int_equal(access(path, F_OK), -1);
    /* a directory that is not there: 500, the reason */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no/such.bin", dir);
    assert_int_equal(tokenizer_write(missing, WORDS, WORDS - 1, small_piece, NULL, &err), -1);
    assert_int_equal(err.status, 500);
    assert_non_null(strstr(err.message, "No such file or directory"));
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_decodes_every_token),
        cmocka_unit_test(test_v1_is_gpt2_sized),
        cmocka_unit_test(test_malformed_files_are_refused),
        cmocka_unit_test(test_open),
        cmocka_unit_test(test_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
