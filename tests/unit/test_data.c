/* test_data.c - agent/train/data.h: dataset files are checked before use,
 * sampling is a pure function of (seed, step, global sequence number),
 * and a dataset of shards (a manifest, a directory, a glob; uint16 or
 * uint32; past 2^32 tokens) reads as the one sequence they hold. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../agent/train/data.h"

static char dir[] = "/tmp/shoal-data-test.XXXXXX";
static struct data_roots roots;   /* dir: every file the tests name lies beneath it */

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
    assert_int_equal(data_open(&roots, path, "text", "train", 256, T, "", &src, &err), 0);
    assert_int_equal(src.n_tokens, sizeof text - 1);

    int32_t tok[N * T], tgt[N * T], tok2[N * T], tgt2[N * T];
    assert_int_equal(data_batch(&src, 1, 7, 0, N, T, tok, tgt, &err), 0);
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
    assert_int_equal(data_batch(&src, 1, 7, 0, N, T, tok2, tgt2, &err), 0);
    assert_memory_equal(tok, tok2, sizeof tok);
    assert_int_equal(data_batch(&src, 1, 7, 0, 2, T, tok2, tgt2, &err), 0);
    assert_int_equal(data_batch(&src, 1, 7, 2, N - 2, T, tok2 + 2 * T, tgt2 + 2 * T, &err), 0);
    assert_memory_equal(tok, tok2, sizeof tok);
    assert_memory_equal(tgt, tgt2, sizeof tgt);
    /* another step or seed reads other windows */
    assert_int_equal(data_batch(&src, 1, 8, 0, N, T, tok2, tgt2, &err), 0);
    assert_memory_not_equal(tok, tok2, sizeof tok);
    assert_int_equal(data_batch(&src, 2, 7, 0, N, T, tok2, tgt2, &err), 0);
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
    assert_int_equal(data_open(&roots, path, "llmc", "train", 50, 16, "", &src, &err), 0);
    assert_int_equal(src.n_tokens, NTOK);
    int32_t tok[16], tgt[16];
    assert_int_equal(data_batch(&src, 3, 0, 0, 1, 16, tok, tgt, &err), 0);
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
        if (data_open(&roots, path, "llmc", "train", bad[i].vocab, bad[i].seq, "", &src, &err) != -1 ||
            !strstr(err.message, bad[i].msg) || strcmp(err.field, "data.path"))
            fail_msg("%s: got '%s'", bad[i].why, err.message);
        assert_null(src.shards);
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
    assert_int_equal(data_open(&roots, missing, "text", "train", 256, 8, "", &src, &err), -1);
    assert_non_null(strstr(err.message, "nope.txt"));
    assert_non_null(strstr(err.message, "No such file"));
    assert_int_equal(err.status, 422);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/empty-dir", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(data_open(&roots, sub, "text", "train", 256, 8, "", &src, &err), -1);
    assert_non_null(strstr(err.message, "holds no files"));
    const char *empty = write_file("empty.txt", "", 0);
    assert_int_equal(data_open(&roots, empty, "text", "train", 256, 8, "", &src, &err), -1);
    assert_non_null(strstr(err.message, "empty"));
    const char *path = write_file("b.txt", text, sizeof text - 1);
    assert_int_equal(data_open(&roots, path, "csv", "train", 256, 8, "", &src, &err), -1);
    assert_string_equal(err.field, "data.format");
    assert_int_equal(data_open(&roots, path, "text", "train", 100, 8, "", &src, &err), -1);
    assert_non_null(strstr(err.message, "outside the vocabulary of 100"));
    assert_int_equal(data_open(&roots, path, "text", "train", 256, 1000, "", &src, &err), -1);
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
    assert_ptr_equal(src.shards[0].tokens, bytes);
    assert_int_equal(src.n_tokens, sizeof text - 1);
    data_close(&src);
    assert_int_equal(data_check(bytes, 0, DATA_TEXT, 256, 8, "mem", &src, &err), -1);
    assert_non_null(strstr(err.message, "dataset 'mem': the file is empty"));
    assert_null(src.shards);
    assert_int_equal(data_check(bytes, sizeof text - 1, DATA_TEXT, 100, 8, "mem", &src, &err), -1);
    assert_non_null(strstr(err.message, "outside the vocabulary of 100"));
    int32_t header[DATA_LLMC_HEADER_INTS] = { DATA_LLMC_MAGIC, DATA_LLMC_VERSION, 3 };
    unsigned char shard[sizeof header + 6];
    uint16_t tokens[3] = { 1, 2, 3 };
    memcpy(shard, header, sizeof header);
    memcpy(shard + sizeof header, tokens, sizeof tokens);
    assert_int_equal(data_check(shard, sizeof shard, DATA_LLMC, 4, 2, "mem", &src, &err), 0);
    assert_int_equal(src.n_tokens, 3);
    data_close(&src);
    assert_int_equal(data_check(shard, sizeof shard - 1, DATA_LLMC, 4, 2, "mem", &src, &err), -1);
    assert_non_null(strstr(err.message, "promises 3 tokens"));
    assert_int_equal(data_check(shard, 100, DATA_LLMC, 4, 2, "mem", &src, &err), -1);
    assert_non_null(strstr(err.message, "shorter than an llm.c shard header"));
}

/* An llm.c shard of `n` tokens (width 2 or 4) at dir/name. */
static const char *write_shard(const char *name, const uint32_t *tokens, size_t n, int width)
{
    size_t bytes = 1024 + (size_t)width * n;
    unsigned char *raw = calloc(1, bytes);
    assert_non_null(raw);
    int32_t header[3] = {width == 2 ? DATA_LLMC_MAGIC : DATA_LLMC32_MAGIC,
                         width == 2 ? DATA_LLMC_VERSION : DATA_LLMC32_VERSION, (int32_t)n};
    memcpy(raw, header, sizeof header);
    for (size_t i = 0; i < n; i++) {
        uint16_t t16 = (uint16_t)tokens[i];
        memcpy(raw + 1024 + (size_t)width * i, width == 2 ? (const void *)&t16 : (const void *)&tokens[i],
               (size_t)width);
    }
    const char *path = write_file(name, raw, bytes);
    free(raw);
    return path;
}

static void sha_of_file(const char *path, char hex[SHA256_HEX])
{
    struct shoal_err err;
    assert_int_equal(sha256_file_hex(path, hex, &err), 0);
}

/* One file, the same tokens cut into shards in a directory (llm.c's
 * names), a glob of them, and a manifest of them: the same sequences for
 * every step and sequence number, crossing shard boundaries; the
 * directory's val shards apart; a manifest's digest checked when a shard
 * is first read, its token counts when it is opened. */
static void test_shards_read_as_one(void **state)
{
    (void)state;
    enum { NTOK = 5000, T = 32, N = 8 };
    static uint32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++)
        tok[i] = (uint32_t)((i * 7919u) % 1000u);
    char sub[300], path[400];
    snprintf(sub, sizeof sub, "%s/shards", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    write_shard("one.bin", tok, NTOK, 2);
    static const int cut[] = {0, 1234, 1270, 4000, NTOK};   /* a 36-token shard: sequences span three */
    char hex[4][SHA256_HEX];
    for (int k = 0; k < 4; k++) {
        char name[64];
        snprintf(name, sizeof name, "shards/d_train_%06d.bin", k);
        sha_of_file(write_shard(name, tok + cut[k], (size_t)(cut[k + 1] - cut[k]), 2), hex[k]);
    }
    static const uint32_t val[100] = {999};
    write_shard("shards/d_val_000000.bin", val, 100, 2);
    FILE *m = fopen((snprintf(path, sizeof path, "%s/dataset.json", sub), path), "w");
    assert_non_null(m);
    fprintf(m, "{\"format\":\"shoal-dataset\",\"version\":1,\"token_type\":\"uint16\",\"tokenizer\":{\"vocab_size\":1000},"
               "\"shards\":[");
    for (int k = 0; k < 4; k++)
        fprintf(m, "%s{\"name\":\"d_train_%06d.bin\",\"split\":\"train\",\"tokens\":%d,\"sha256\":\"%s\"}",
                k ? "," : "", k, cut[k + 1] - cut[k], hex[k]);
    fprintf(m, "]}");
    fclose(m);

    struct data_source one, many;
    struct shoal_err err;
    snprintf(path, sizeof path, "%s/one.bin", dir);
    assert_int_equal(data_open(&roots, path, "llmc", "train", 1000, T, "", &one, &err), 0);
    int32_t a[N * T], at[N * T], b[N * T], bt[N * T];
    char where[3][400];
    snprintf(where[0], sizeof where[0], "%s/dataset.json", sub);   /* the manifest */
    snprintf(where[1], sizeof where[1], "%s/d_train_*.bin", sub);  /* a glob */
    snprintf(where[2], sizeof where[2], "%s", sub);                /* the directory (its manifest) */
    for (int w = 0; w < 3; w++) {
        assert_int_equal(data_open(&roots, where[w], "llmc", "train", 1000, T, dir, &many, &err), 0);
        assert_int_equal(many.n_tokens, NTOK);
        assert_int_equal(many.n_shards, 4);
        assert_true((many.identity[0] != 0) == (w != 1));   /* a manifest's SHA-256, not a glob's */
        for (uint64_t step = 0; step < 20; step++) {
            assert_int_equal(data_batch(&one, 5, step, step * N, N, T, a, at, &err), 0);
            assert_int_equal(data_batch(&many, 5, step, step * N, N, T, b, bt, &err), 0);
            assert_memory_equal(a, b, sizeof a);
            assert_memory_equal(at, bt, sizeof at);
        }
        assert_int_equal(data_eval_batch(&one, 64, 0, N, T, a, at, &err), 0);
        assert_int_equal(data_eval_batch(&many, 64, 0, N, T, b, bt, &err), 0);
        assert_memory_equal(a, b, sizeof a);
        data_close(&many);
    }
    /* the manifest's four shards were hashed once: the directory's open found them in the cache */
    snprintf(path, sizeof path, "%s/dataset-digests", dir);
    FILE *cache = fopen(path, "r");
    assert_non_null(cache);
    int lines = 0;
    for (int ch; (ch = fgetc(cache)) != EOF;)
        lines += ch == '\n';
    fclose(cache);
    assert_int_equal(lines, 4);
    /* without the manifest the directory's llm.c names split it */
    snprintf(path, sizeof path, "%s/dataset.json", sub);
    char moved[400];
    snprintf(moved, sizeof moved, "%s/manifest.json", dir);
    assert_int_equal(rename(path, moved), 0);
    assert_int_equal(data_open(&roots, sub, "llmc", "train", 1000, T, "", &many, &err), 0);
    assert_int_equal(many.n_tokens, NTOK);
    data_close(&many);
    assert_int_equal(data_open(&roots, sub, "llmc", "val", 1000, T, "", &many, &err), 0);
    assert_int_equal(many.n_tokens, 100);
    data_close(&many);
    assert_int_equal(rename(moved, path), 0);

    /* a shard changed after the manifest: found when it is first read,
     * named with both digests; the manifest's identity is its own digest */
    snprintf(path, sizeof path, "%s/d_train_000003.bin", sub);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 1024 + 2 * 10, SEEK_SET);
    fputc(7, f);
    fclose(f);
    assert_int_equal(data_open(&roots, sub, "llmc", "train", 1000, T, dir, &many, &err), 0);   /* shard 0 is fine */
    int failed = 0;
    for (uint64_t step = 0; step < 50 && !failed; step++)
        failed = data_batch(&many, 5, step, 0, N, T, b, bt, &err) != 0;
    assert_true(failed);
    assert_non_null(strstr(err.message, "d_train_000003.bin"));
    assert_non_null(strstr(err.message, hex[3]));
    assert_string_equal(err.code, "invalid_dataset");
    data_close(&many);
    /* a token count that is not the manifest's: at open */
    write_shard("shards/d_train_000001.bin", tok, 35, 2);
    assert_int_equal(data_open(&roots, sub, "llmc", "train", 1000, T, "", &many, &err), -1);
    assert_non_null(strstr(err.message, "35 tokens, but its manifest lists 36"));
    /* a manifest whose tokenizer is larger than the model's vocabulary */
    assert_int_equal(data_open(&roots, sub, "llmc", "train", 999, T, "", &many, &err), -1);
    assert_non_null(strstr(err.message, "1000 tokens, more than model.vocab_size 999"));
    data_close(&one);
}

/* uint32 shards (llm.c's Llama 3 format) hold tokens above 65535. */
static void test_uint32_shard(void **state)
{
    (void)state;
    enum { NTOK = 300, T = 16 };
    uint32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++)
        tok[i] = 128000u + (uint32_t)i % 256u;
    const char *path = write_shard("l3.bin", tok, NTOK, 4);
    struct data_source src;
    struct shoal_err err;
    assert_int_equal(data_open(&roots, path, "llmc", "train", 128256, T, "", &src, &err), 0);
    int32_t a[T], at[T];
    assert_int_equal(data_batch(&src, 1, 0, 0, 1, T, a, at, &err), 0);
    for (int t = 0; t < T; t++)
        assert_true(a[t] >= 128000 && a[t] < 128256);
    data_close(&src);
    assert_int_equal(data_open(&roots, path, "llmc", "train", 128000, T, "", &src, &err), -1);
    assert_non_null(strstr(err.message, "token 128000 at index 0 is outside the vocabulary of 128000"));
}

/* 100 shards of 43 million tokens (sparse files: 8.6 GB that take no
 * disk), 4.3 billion in all, past 2^32: the last sequence reads the last
 * tokens of the last shard. */
static void test_past_four_billion(void **state)
{
    (void)state;
    enum { SHARDS = 100, T = 63 };
    const uint64_t per = 43000000;
    char sub[300], path[400];
    snprintf(sub, sizeof sub, "%s/big", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    for (int k = 0; k < SHARDS; k++) {
        snprintf(path, sizeof path, "%s/big_train_%06d.bin", sub, k);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        int32_t header[DATA_LLMC_HEADER_INTS] = {DATA_LLMC_MAGIC, DATA_LLMC_VERSION, (int32_t)per};
        assert_int_equal(fwrite(header, sizeof header, 1, f), 1);
        if (k == SHARDS - 1) {   /* the last 128 tokens: 1..128 */
            fseek(f, (long)(1024 + 2 * (per - 128)), SEEK_SET);
            for (uint16_t v = 1; v <= 128; v++)
                assert_int_equal(fwrite(&v, 2, 1, f), 1);
        }
        assert_int_equal(ftruncate(fileno(f), (off_t)(1024 + 2 * per)), 0);
        fclose(f);
    }
    struct data_source src, train, val;
    struct shoal_err err;
    assert_int_equal(data_open(&roots, sub, "llmc", "train", 50257, T, "", &src, &err), 0);
    assert_true(src.n_tokens == (uint64_t)SHARDS * per && src.n_tokens > (1ull << 32));
    /* a view of the last 1000 tokens; its last sequence ends at the last token */
    double fraction = 1000.0 / (double)src.n_tokens;
    assert_int_equal(data_holdout(&src, fraction, T, &train, &val, &err), 0);
    uint64_t starts = val.n_tokens - T;
    int32_t tok[T], tgt[T];
    assert_int_equal(data_eval_batch(&val, starts, starts - 1, 1, T, tok, tgt, &err), 0);
    assert_int_equal(tgt[T - 1], 128);   /* the dataset's last token */
    for (int t = 0; t < T; t++)
        assert_int_equal(tok[t], 128 - T + t);
    data_close(&src);
}

static int setup(void **state)
{
    (void)state;
    struct shoal_err err;
    return mkdtemp(dir) && roots_init(&roots, dir, dir, &err) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    roots_free(&roots);
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
        cmocka_unit_test(test_shards_read_as_one),
        cmocka_unit_test(test_uint32_shard),
        cmocka_unit_test(test_past_four_billion),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
