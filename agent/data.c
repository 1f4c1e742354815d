/* data.c - dataset files mapped read-only, and the pure sampling function. */
#include "data.h"

#include "../common/mix.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int bad_data(struct shoal_err *err, const char *path, const char *what)
{
    return err_set(err, 422, "invalid_dataset", "data.path", "dataset '%s': %s", path, what);
}

/* The llm.c shard header and its tokens, each below vocab. */
static int data_check_llmc(const char *name, int vocab, struct data_source *out, struct shoal_err *err)
{
    int32_t header[DATA_LLMC_HEADER_INTS];
    if (out->map_len < sizeof header)
        return bad_data(err, name, "shorter than an llm.c shard header (1024 bytes)");
    memcpy(header, out->map, sizeof header);
    if (header[0] != DATA_LLMC_MAGIC || header[1] != DATA_LLMC_VERSION)
        return bad_data(err, name, "not an llm.c token shard (magic 20240520, version 1)");
    if (header[2] < 0 || (uint64_t)header[2] * 2 != out->map_len - sizeof header)
        return err_set(err, 422, "invalid_dataset", "data.path",
                       "dataset '%s': the header promises %d tokens but the file holds %zu",
                       name, header[2], (out->map_len - sizeof header) / 2);
    out->tokens = out->map + sizeof header;
    out->n_tokens = (size_t)header[2];
    const unsigned char *t = out->tokens;
    for (size_t i = 0; i < out->n_tokens; i++) {
        uint16_t tok;
        memcpy(&tok, t + 2 * i, 2);
        if (tok >= vocab)
            return err_set(err, 422, "invalid_dataset", "data.path",
                           "dataset '%s': token %u at index %zu is outside the vocabulary of %d",
                           name, tok, i, vocab);
    }
    return 0;
}

int data_check(const unsigned char *bytes, size_t len, enum data_format format, int vocab, int seq_len,
               const char *name, struct data_source *out, struct shoal_err *err)
{
    memset(out, 0, sizeof *out);
    out->format = format;
    out->map = bytes;
    out->map_len = len;
    if (len == 0) {
        bad_data(err, name, "the file is empty");
        goto fail;
    }
    if (format == DATA_TEXT) {
        out->tokens = out->map;
        out->n_tokens = out->map_len;
        for (size_t i = 0; vocab < 256 && i < out->n_tokens; i++)
            if (out->map[i] >= vocab) {
                err_set(err, 422, "invalid_dataset", "data.path",
                        "dataset '%s': byte %u at offset %zu is outside the vocabulary of %d",
                        name, out->map[i], i, vocab);
                goto fail;
            }
    } else if (data_check_llmc(name, vocab, out, err) != 0) {
        goto fail;
    }
    if (out->n_tokens < (size_t)seq_len + 1) {
        err_set(err, 422, "invalid_dataset", "data.path",
                "dataset '%s': %zu tokens, fewer than one sequence of %d plus its target",
                name, out->n_tokens, seq_len);
        goto fail;
    }
    return 0;
fail:
    memset(out, 0, sizeof *out);
    return -1;
}

int data_open(const char *path, const char *format, int vocab, int seq_len,
              struct data_source *out, struct shoal_err *err)
{
    struct stat sb;
    enum data_format fmt;
    int fd = -1, rc = -1;
    void *map = MAP_FAILED;

    memset(out, 0, sizeof *out);
    if (strcmp(format, "text") == 0)
        fmt = DATA_TEXT;
    else if (strcmp(format, "llmc") == 0)
        fmt = DATA_LLMC;
    else {
        err_set(err, 422, "invalid_field", "data.format",
                "unknown dataset format '%s': use text or llmc", format);
        goto out;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int why = errno;
        if (why == ENOENT || why == ENOTDIR || why == EACCES || why == ELOOP || why == ENAMETOOLONG)
            bad_data(err, path, strerror(why));
        else   /* EIO, ENOMEM, a stale mount, ...: perhaps not for long */
            err_set(err, 503, "dataset_io", "data.path", "dataset '%s': %s", path, strerror(why));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        bad_data(err, path, "not a regular file");
        goto out;
    }
    if (sb.st_size == 0) {   /* mmap takes no empty mapping */
        bad_data(err, path, "the file is empty");
        goto out;
    }
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        err_set(err, 503, "dataset_io", "data.path", "dataset '%s': %s", path, strerror(errno));
        goto out;
    }
    rc = data_check(map, (size_t)sb.st_size, fmt, vocab, seq_len, path, out, err);
out:
    if (fd >= 0)
        close(fd);
    if (rc && map != MAP_FAILED)
        munmap(map, (size_t)sb.st_size);
    return rc;
}

void data_close(struct data_source *src)
{
    if (src->map)
        munmap((void *)src->map, src->map_len);
    memset(src, 0, sizeof *src);
}

static int32_t token_at(const struct data_source *src, size_t i)
{
    if (src->format == DATA_TEXT)
        return ((const unsigned char *)src->tokens)[i];
    uint16_t tok;
    memcpy(&tok, (const unsigned char *)src->tokens + 2 * i, 2);
    return tok;
}

int data_holdout(const struct data_source *src, double fraction, int seq_len, struct data_source *train,
                 struct data_source *val, struct shoal_err *err)
{
    size_t tail = (size_t)((double)src->n_tokens * fraction);
    size_t head = src->n_tokens - tail;
    size_t bytes = src->format == DATA_TEXT ? 1 : 2;   /* per token */
    if (tail < (size_t)seq_len + 1 || head < (size_t)seq_len + 1)
        return err_set(err, 422, "invalid_dataset", "validation.holdout",
                       "dataset of %zu tokens: a holdout of %g leaves %zu for training and %zu for validation; "
                       "each needs at least %d (a sequence and its target)", src->n_tokens, fraction, head, tail,
                       seq_len + 1);
    *train = (struct data_source){ .format = src->format, .tokens = src->tokens, .n_tokens = head };
    *val = (struct data_source){ .format = src->format, .tokens = (const unsigned char *)src->tokens + head * bytes,
                                 .n_tokens = tail };
    return 0;
}

void data_eval_batch(const struct data_source *src, uint64_t total, uint64_t first, int n, int T,
                     int32_t *tokens, int32_t *targets)
{
    uint64_t starts = src->n_tokens - (size_t)T;   /* valid start offsets: [0, starts) */
    for (int s = 0; s < n; s++) {
        uint64_t g = first + (uint64_t)s;
        /* g < total <= 2^20 and starts < 2^44 or so: the product fits */
        size_t start = (size_t)((unsigned __int128)g * starts / total);
        for (int t = 0; t < T; t++) {
            tokens[(size_t)s * T + t] = token_at(src, start + t);
            targets[(size_t)s * T + t] = token_at(src, start + t + 1);
        }
    }
}

void data_batch(const struct data_source *src, uint64_t seed, uint64_t step, uint64_t first,
                int n, int T, int32_t *tokens, int32_t *targets)
{
    size_t starts = src->n_tokens - (size_t)T; /* valid start offsets: [0, starts) */
    for (int s = 0; s < n; s++) {
        uint64_t h = splitmix64(seed ^ splitmix64(step ^ splitmix64(first + (uint64_t)s)));
        size_t start = (size_t)(h % starts);
        for (int t = 0; t < T; t++) {
            tokens[(size_t)s * T + t] = token_at(src, start + t);
            targets[(size_t)s * T + t] = token_at(src, start + t + 1);
        }
    }
}
