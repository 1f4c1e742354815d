/* tokenizer.c - llm.c's tokenizer file, read and checked (tokenizer.h). */
#include "tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A 422 naming the file; the reason is printf-formatted. */
__attribute__((format(printf, 3, 4)))
static int bad_tokenizer(struct shoal_err *err, const char *name, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return err_set(err, 422, "invalid_tokenizer", "tokenizer", "tokenizer '%s': %s", name, why);
}

int tokenizer_load(const unsigned char *buf, size_t len, const char *name, struct tokenizer *out,
                   struct shoal_err *err)
{
    memset(out, 0, sizeof *out);
    if (len < TOKENIZER_HEADER_BYTES)
        return bad_tokenizer(err, name, "%zu bytes, shorter than the 1024-byte header of an llm.c tokenizer "
                             "file", len);
    uint32_t magic = u32le(buf), version = u32le(buf + 4), vocab = u32le(buf + 8);
    if (magic != TOKENIZER_MAGIC)
        return bad_tokenizer(err, name, "not an llm.c tokenizer file (magic %u, not 20240328)", magic);
    if (version != 1 && version != 2)
        return bad_tokenizer(err, name, "version %u; llm.c's tokenizer files are version 1 or 2", version);
    if (vocab < 1 || vocab > TOKENIZER_VOCAB_MAX)
        return bad_tokenizer(err, name, "vocab_size %u is outside 1..%u", vocab, TOKENIZER_VOCAB_MAX);
    uint32_t eot = version == 1 ? TOKENIZER_V1_EOT : u32le(buf + 12);
    if (eot >= vocab)
        return bad_tokenizer(err, name, "eot_token %u%s is not below vocab_size %u", eot,
                             version == 1 ? " (version 1: GPT-2's)" : "", vocab);
    size_t body = len - TOKENIZER_HEADER_BYTES;
    /* Each token takes two bytes at least (its length and one byte):
     * checked before anything is allocated for vocab_size of them ... */
    if (body / 2 < vocab)
        return bad_tokenizer(err, name, "the header promises %u tokens but the %zu bytes after it hold at most "
                             "%zu", vocab, body, body / 2);
    /* ... and 256 at most: what is left over is trailing bytes, refused
     * here before it is copied (this also bounds the copy by the cap). */
    if (body > (size_t)vocab * 256)
        return bad_tokenizer(err, name, "%zu bytes after the header, more than its %u tokens can fill (256 bytes "
                             "each at most)", body, vocab);
    const unsigned char *p = buf + TOKENIZER_HEADER_BYTES;
    size_t off = 0;
    out->at = malloc((size_t)vocab * sizeof *out->at);
    out->pieces = malloc(body);
    if (!out->at || !out->pieces) {
        tokenizer_free(out);
        return err_set(err, 500, "internal", NULL, "out of memory for a tokenizer of %u tokens", vocab);
    }
    for (uint32_t i = 0; i < vocab; i++) {
        if (off >= body || off + 1 + p[off] > body || p[off] == 0) {
            if (off >= body)
                bad_tokenizer(err, name, "the file ends before token %u of %u", i, vocab);
            else if (p[off] == 0)
                bad_tokenizer(err, name, "token %u has length 0 (every token is at least one byte)", i);
            else
                bad_tokenizer(err, name, "the file ends inside token %u (length %u, %zu bytes left)", i, p[off],
                              body - off - 1);
            tokenizer_free(out);
            return -1;
        }
        out->at[i] = (uint32_t)off;   /* off < body <= TOKENIZER_FILE_MAX < 2^32 */
        off += 1 + (size_t)p[off];
    }
    if (off != body) {
        bad_tokenizer(err, name, "%zu bytes after the last of its %u tokens", body - off, vocab);
        tokenizer_free(out);
        return -1;
    }
    memcpy(out->pieces, p, body);
    out->vocab = vocab;
    out->eot = eot;
    out->version = (int)version;
    return 0;
}

int tokenizer_open(const char *path, struct tokenizer *out, struct shoal_err *err)
{
    struct stat sb;
    unsigned char *buf = NULL;
    int rc = -1;
    FILE *f = fopen(path, "rb");
    memset(out, 0, sizeof *out);
    if (!f || fstat(fileno(f), &sb) != 0) {
        bad_tokenizer(err, path, "%s (llm.c's dev/data scripts write gpt2_tokenizer.bin beside the shards; "
                      "or write it from GPT-2's tokenizer.json: shoal-agent tokenize --tokenizer tokenizer.json "
                      "--write-llmc-tokenizer gpt2_tokenizer.bin)", strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        bad_tokenizer(err, path, "not a regular file");
        goto out;
    }
    if ((uint64_t)sb.st_size > TOKENIZER_FILE_MAX) {
        bad_tokenizer(err, path, "%lld bytes, more than %zu (%u tokens of 255 bytes)", (long long)sb.st_size,
                      TOKENIZER_FILE_MAX, TOKENIZER_VOCAB_MAX);
        goto out;
    }
    size_t len = (size_t)sb.st_size;
    if (!(buf = malloc(len ? len : 1))) {
        err_set(err, 500, "internal", NULL, "out of memory for tokenizer '%s' (%zu bytes)", path, len);
        goto out;
    }
    if (fread(buf, 1, len, f) != len) {
        bad_tokenizer(err, path, "cannot read %zu bytes: %s", len, ferror(f) ? strerror(errno) : "it shrank");
        goto out;
    }
    rc = tokenizer_load(buf, len, path, out, err);
out:
    free(buf);
    if (f)
        fclose(f);
    return rc;
}

static void put_u32le(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

int tokenizer_write(const char *path, uint32_t vocab, uint32_t eot, tokenizer_piece_fn piece, const void *ctx,
                    struct shoal_err *err)
{
    unsigned char header[TOKENIZER_HEADER_BYTES] = {0};
    char tmp[PATH_MAX + 16];
    int rc = -1, wrote = 0;
    FILE *f = NULL;
    if (vocab < 1 || vocab > TOKENIZER_VOCAB_MAX)
        return bad_tokenizer(err, path, "%u tokens; llm.c's file holds 1 to %u", vocab, TOKENIZER_VOCAB_MAX);
    if (eot >= vocab)
        return bad_tokenizer(err, path, "eot_token %u is not below its %u tokens", eot, vocab);
    for (uint32_t i = 0; i < vocab; i++) {   /* every token checked before a byte is written */
        size_t n;
        if (!piece(ctx, i, &n) || n < 1 || n > 255)
            return bad_tokenizer(err, path, "token %u has %zu bytes; llm.c's file holds 1 to 255 for every id "
                                 "below %u", i, n, vocab);
    }
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return bad_tokenizer(err, path, "the path is too long");
    put_u32le(header, TOKENIZER_MAGIC);
    put_u32le(header + 4, 2);
    put_u32le(header + 8, vocab);
    put_u32le(header + 12, eot);
    if (!(f = fopen(tmp, "wb")) || fwrite(header, 1, sizeof header, f) != sizeof header)
        goto out;
    for (uint32_t i = 0; i < vocab; i++) {
        size_t n;
        const unsigned char *p = piece(ctx, i, &n);
        unsigned char len = (unsigned char)n;
        if (fwrite(&len, 1, 1, f) != 1 || fwrite(p, 1, n, f) != n)
            goto out;
    }
    wrote = 1;
out:;
    int why = errno;   /* the failed call's, before the cleanup's calls */
    if (f && (fflush(f) != 0 || fsync(fileno(f)) != 0) && wrote)
        wrote = 0, why = errno;
    if (f && fclose(f) != 0 && wrote)
        wrote = 0, why = errno;
    if (wrote && rename(tmp, path) != 0)
        wrote = 0, why = errno;
    if (wrote)
        rc = 0;
    else {
        err_set(err, 500, "write_failed", NULL, "cannot write tokenizer '%s': %s", path, strerror(why));
        if (f)
            unlink(tmp);
    }
    return rc;
}

const unsigned char *tokenizer_decode(const struct tokenizer *t, int64_t id, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= (int64_t)t->vocab)
        return NULL;
    const unsigned char *piece = t->pieces + t->at[id];
    *len = piece[0];
    return piece + 1;
}

void tokenizer_free(struct tokenizer *t)
{
    if (!t)
        return;
    free(t->pieces);
    free(t->at);
    memset(t, 0, sizeof *t);
}
