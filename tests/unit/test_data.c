/* test_data.c - agent/data.h: dataset files are checked before use, and
 * sampling is a pure function of (seed, step, global sequence number). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../agent/data.h"

static char dir[] = "/tmp/shoal-data-test.XXXXXX";

static const char *write_file(const char *name, const void *data, size_t n)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
    return path;
}

static const char text[] = "the quick brown fox jumps over the lazy dog, again and again.";

static void test_text_batches(void **state)
{
    (void)state;
    struct data_source src;
    struct shoal_err err;
    enum { T = 8, N = 6 };
    const char *path = write_file("a.txt", text, sizeof text - 1);
    assert_int_equal(data_open(path, "text", 256, T, &src, &err), 0);
    assert_int_equal(src.n_tokens, sizeof text - 1);

    int32_t tok[N * T], tgt[N * T], tok2[N * T], tgt2[N * T];
    data_batch(&src, 1, 7, 0, N, T, tok, tgt);
    for (int s = 0; s < N; s++) {
        /* each sequence is a window of the text and its targets are shifted by one */
        const char *at = NULL;
        for (size_t off = 0; off + T < sizeof text - 1 && !at; off++) {
            int same = 1;
            for (int t = 0; t < T; t++)
                same &= (unsigned char)text[off + t] == tok[s * T + t] &&
                        (unsigned char)text[off + t + 1] == tgt[s * T + t];
            if (same)
                at = text + off;
        }
        assert_non_null(at);
    }
    /* pure: same arguments, same data; split into pieces, same data */
    data_batch(&src, 1, 7, 0, N, T, tok2, tgt2);
    assert_memory_equal(tok, tok2, sizeof tok);
    data_batch(&src, 1, 7, 0, 2, T, tok2, tgt2);
    data_batch(&src, 1, 7, 2, N - 2, T, tok2 + 2 * T, tgt2 + 2 * T);
    assert_memory_equal(tok, tok2, sizeof tok);
    assert_memory_equal(tgt, tgt2, sizeof tgt);
    /* another step or seed reads other windows */
    data_batch(&src, 1, 8, 0, N, T, tok2, tgt2);
    assert_memory_not_equal(tok, tok2, sizeof tok);
    data_batch(&src, 2, 7, 0, N, T, tok2, tgt2);
    assert_memory_not_equal(tok, tok2, sizeof tok);
    data_close(&src);
}

static void test_llmc_shard(void **state)
{
    (void)state;
    enum { NTOK = 100 };
    size_t bytes = 1024 + 2 * NTOK;
    unsigned char *raw = calloc(1, bytes);
    assert_non_null(raw);
    int32_t header[3] = {DATA_LLMC_MAGIC, DATA_LLMC_VERSION, NTOK};
    memcpy(raw, header, sizeof header);
    for (uint16_t i = 0; i < NTOK; i++) {
        uint16_t tok = (uint16_t)(i * 3 % 50);
        memcpy(raw + 1024 + 2 * i, &tok, 2);
    }
    struct data_source src;
    struct shoal_err err;
    const char *path = write_file("ok.bin", raw, bytes);
    assert_int_equal(data_open(path, "llmc", 50, 16, &src, &err), 0);
    assert_int_equal(src.n_tokens, NTOK);
    int32_t tok[16], tgt[16];
    data_batch(&src, 3, 0, 0, 1, 16, tok, tgt);
    for (int t = 0; t < 15; t++)
        assert_int_equal(tgt[t], tok[t + 1]);
    data_close(&src);

    struct {
        const char *why;
        size_t len;
        int32_t magic, count;
        int vocab, seq;
        const char *msg;
    } bad[] = {
        {"bad magic", bytes, 1234, NTOK, 50, 16, "not an llm.c token shard"},
        {"count too high", bytes, DATA_LLMC_MAGIC, NTOK + 1, 50, 16, "promises 101 tokens"},
        {"negative count", bytes, DATA_LLMC_MAGIC, -1, 50, 16, "promises -1"},
        {"short header", 100, DATA_LLMC_MAGIC, NTOK, 50, 16, "shorter than"},
        {"token beyond vocab", bytes, DATA_LLMC_MAGIC, NTOK, 40, 16, "outside the vocabulary of 40"},
        {"too few tokens", bytes, DATA_LLMC_MAGIC, NTOK, 50, 100, "fewer than one sequence"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t h[3] = {bad[i].magic, DATA_LLMC_VERSION, bad[i].count};
        memcpy(raw, h, sizeof h);
        path = write_file("bad.bin", raw, bad[i].len);
        if (data_open(path, "llmc", bad[i].vocab, bad[i].seq, &src, &err) != -1 ||
            !strstr(err.message, bad[i].msg) || strcmp(err.field, "data.path"))
            fail_msg("%s: got '%s'", bad[i].why, err.message);
        assert_null(src.map);
    }
    free(raw);
}

static void test_bad_files(void **state)
{
    (void)state;
    struct data_source src;
    struct shoal_err err;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/nope.txt", dir);
    assert_int_equal(data_open(missing, "text", 256, 8, &src, &err), -1);
    assert_non_null(strstr(err.message, "nope.txt"));
    assert_non_null(strstr(err.message, "No such file"));
    assert_int_equal(err.status, 422);
    assert_int_equal(data_open(dir, "text", 256, 8, &src, &err), -1);
    assert_non_null(strstr(err.message, "not a regular file"));
    const char *empty = write_file("empty.txt", "", 0);
    assert_int_equal(data_open(empty, "text", 256, 8, &src, &err), -1);
    assert_non_null(strstr(err.message, "empty"));
    const char *path = write_file("b.txt", text, sizeof text - 1);
    assert_int_equal(data_open(path, "csv", 256, 8, &src, &err), -1);
    assert_string_equal(err.field, "data.format");
    assert_int_equal(data_open(path, "text", 100, 8, &src, &err), -1);
    assert_non_null(strstr(err.message, "outside the vocabulary of 100"));
    assert_int_equal(data_open(path, "text", 256, 1000, &src, &err), -1);
    assert_non_null(strstr(err.message, "fewer than one sequence"));
}

/* data_check is data_open's checks on bytes in memory (what
 * tests/fuzz/fuzz_dataset feeds): the same answers, and `out` points into
 * the caller's bytes. */
static void test_check_in_memory(void **state)
{
    (void)state;
    struct data_source src;
    struct shoal_err err;
    const unsigned char *bytes = (const unsigned char *)text;
    assert_int_equal(data_check(bytes, sizeof text - 1, DATA_TEXT, 256, 8, "mem", &src, &err), 0);
    assert_ptr_equal(src.tokens, bytes);
    assert_int_equal(src.n_tokens, sizeof text - 1);
    assert_int_equal(data_check(bytes, 0, DATA_TEXT, 256, 8, "mem", &src, &err), -1);
    assert_non_null(strstr(err.message, "dataset 'mem': the file is empty"));
    assert_null(src.map);
    assert_int_equal(data_check(bytes, sizeof text - 1, DATA_TEXT, 100, 8, "mem", &src, &err), -1);
    assert_non_null(strstr(err.message, "outside the vocabulary of 100"));
    int32_t header[DATA_LLMC_HEADER_INTS] = { DATA_LLMC_MAGIC, DATA_LLMC_VERSION, 3 };
    unsigned char shard[sizeof header + 6];
    uint16_t tokens[3] = { 1, 2, 3 };
    memcpy(shard, header, sizeof header);
    memcpy(shard + sizeof header, tokens, sizeof tokens);
    assert_int_equal(data_check(shard, sizeof shard, DATA_LLMC, 4, 2, "mem", &src, &err), 0);
    assert_int_equal(src.n_tokens, 3);
    assert_int_equal(data_check(shard, sizeof shard - 1, DATA_LLMC, 4, 2, "mem", &src, &err), -1);
    assert_non_null(strstr(err.message, "promises 3 tokens"));
    assert_int_equal(data_check(shard, 100, DATA_LLMC, 4, 2, "mem", &src, &err), -1);
    assert_non_null(strstr(err.message, "shorter than an llm.c shard header"));
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_batches),
        cmocka_unit_test(test_llmc_shard),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_check_in_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
