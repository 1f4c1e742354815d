/* data.c - datasets of shards mapped read-only (data.h): a file, a
 * manifest, a directory or a glob; and the pure sampling function. */
#include "data.h"

#include "../../common/mix.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int bad_data(struct shoal_err *err, const char *path, const char *what)
{
    return err_set(err, 422, "invalid_dataset", "data.path", "dataset '%s': %s", path, what);
}

/* ---- one shard ---------------------------------------------------------- */

/* The header of an llm.c shard (either width) or a text file's bytes. */
static int shard_header(struct data_shard *sh, enum data_format format, struct shoal_err *err)
{
    if (sh->map_len == 0)
        return bad_data(err, sh->path, "the file is empty");
    if (format == DATA_TEXT) {
        sh->tokens = sh->map;
        sh->n_tokens = sh->map_len;
        sh->token_bytes = 1;
        return 0;
    }
    int32_t header[DATA_LLMC_HEADER_INTS];
    if (sh->map_len < sizeof header)
        return bad_data(err, sh->path, "shorter than an llm.c shard header (1024 bytes)");
    memcpy(header, sh->map, sizeof header);
    if (header[0] == DATA_LLMC_MAGIC && header[1] == DATA_LLMC_VERSION)
        sh->token_bytes = 2;
    else if (header[0] == DATA_LLMC32_MAGIC && header[1] == DATA_LLMC32_VERSION)
        sh->token_bytes = 4;
    else
        return bad_data(err, sh->path, "not an llm.c token shard (magic 20240520 version 1, or 20240801 "
                        "version 7)");
    if (header[2] < 0 || (uint64_t)header[2] * (uint64_t)sh->token_bytes != sh->map_len - sizeof header)
        return err_set(err, 422, "invalid_dataset", "data.path",
                       "dataset '%s': the header promises %d tokens but the file holds %zu", sh->path, header[2],
                       (sh->map_len - sizeof header) / (size_t)sh->token_bytes);
    sh->tokens = sh->map + sizeof header;
    sh->n_tokens = (uint64_t)header[2];
    return 0;
}

static uint32_t token_of(const struct data_shard *sh, uint64_t i)
{
    if (sh->token_bytes == 1)
        return sh->tokens[i];
    if (sh->token_bytes == 2) {
        uint16_t t;
        memcpy(&t, sh->tokens + 2 * i, 2);
        return t;
    }
    uint32_t t;
    memcpy(&t, sh->tokens + 4 * i, 4);
    return t;
}

/* Its tokens below the vocabulary and (from a manifest) its digest. */
static int shard_ready(const struct data_source *src, struct data_shard *sh, struct shoal_err *err)
{
    if (sh->ready)
        return 0;
    for (uint64_t i = 0; i < sh->n_tokens; i++) {
        uint32_t t = token_of(sh, i);
        if (t >= (uint32_t)src->vocab)
            return err_set(err, 422, "invalid_dataset", "data.path",
                           "dataset '%s': %s %u at %s %llu is outside the vocabulary of %d", sh->path,
                           sh->token_bytes == 1 ? "byte" : "token", t, sh->token_bytes == 1 ? "offset" : "index",
                           (unsigned long long)i, src->vocab);
    }
    if (sh->sha256[0]) {
        char got[SHA256_HEX];
        digest_of(src->digests, sh->path, &sh->st, sh->map, sh->map_len, got);
        if (strcmp(got, sh->sha256) != 0)
            return err_set(err, 422, "invalid_dataset", "data.path",
                           "shard '%s' is not the one its manifest lists: its SHA-256 is %s, the manifest's %s",
                           sh->path, got, sh->sha256);
    }
    sh->ready = 1;
    return 0;
}

/* Maps shard sh, opened beneath the source's data roots (roots.h). */
static int shard_map(const struct data_source *src, struct data_shard *sh, struct shoal_err *err)
{
    int fd = roots_open(src->roots, sh->path, 0, "data.path", err), rc = -1;
    if (fd < 0)
        return -1;
    if (fstat(fd, &sh->st) != 0) {
        err_set(err, 503, "dataset_io", "data.path", "dataset '%s': %s", sh->path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sh->st.st_mode)) {
        bad_data(err, sh->path, "not a regular file");
        goto out;
    }
    if (sh->st.st_size == 0) {   /* mmap takes no empty mapping */
        bad_data(err, sh->path, "the file is empty");
        goto out;
    }
    void *map = mmap(NULL, (size_t)sh->st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        err_set(err, 503, "dataset_io", "data.path", "dataset '%s': %s", sh->path, strerror(errno));
        goto out;
    }
    sh->map = map;
    sh->map_len = (size_t)sh->st.st_size;
    sh->mapped = 1;
    rc = 0;
out:
    close(fd);
    return rc;
}

/* ---- which files -------------------------------------------------------- */

static int shard_add(struct data_source *src, const char *path, struct shoal_err *err)
{
    if (src->n_shards == DATA_SHARDS_MAX)
        return bad_data(err, path, "more than 100000 shards");
    struct data_shard *more = realloc(src->shards, (size_t)(src->n_shards + 1) * sizeof *more);
    if (!more)
        return err_set(err, 500, "internal", NULL, "out of memory");
    src->shards = more;
    struct data_shard *sh = &src->shards[src->n_shards++];
    memset(sh, 0, sizeof *sh);
    if ((size_t)snprintf(sh->path, sizeof sh->path, "%s", path) >= sizeof sh->path)
        return bad_data(err, path, "the path is too long");
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A directory without a manifest: its *.bin files (text: every file), the
 * split's by name where any file is named for a split. */
static int list_dir(struct data_source *src, const char *dir, const char *split, struct shoal_err *err)
{
    DIR *d = roots_opendir(src->roots, dir, "data.path", err);
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = -1, named = 0;
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || (src->format == DATA_LLMC && (len < 4 || strcmp(e->d_name + len - 4, ".bin"))))
            continue;
        if (n == cap) {
            char **more = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
            if (!more)
                goto oom;
            names = more;
        }
        if (!(names[n] = strdup(e->d_name)))
            goto oom;
        named |= strstr(names[n], "train") || strstr(names[n], "val");
        n++;
    }
    if (n)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        if (named && !strstr(names[i], split))
            continue;
        char path[2 * PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (shard_add(src, path, err) != 0)
            goto out;
    }
    if (src->n_shards == 0) {
        char why[200];
        snprintf(why, sizeof why, named ? "no %s shards (files named for the split) in the directory"
                                        : "the directory holds no %s", named ? split : src->format == DATA_LLMC ?
                                                                            "*.bin shards" : "files");
        bad_data(err, dir, why);
        goto out;
    }
    rc = 0;
    goto out;
oom:
    err_set(err, 500, "internal", NULL, "out of memory");
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

static int is_hex64(const char *s)
{
    if (!s || strlen(s) != 64)
        return 0;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* A manifest: its shards of the split, with their token counts and
 * digests, beside it; its own SHA-256 the identity. */
static int list_manifest(struct data_source *src, const char *file, const char *split, struct shoal_err *err)
{
    struct stat sb;
    json_error_t je;
    json_t *m = NULL;
    unsigned char *bytes = NULL;
    int rc = -1, fd = roots_open(src->roots, file, 0, "data.path", err);
    char dir[PATH_MAX], why[PATH_MAX + 200];
    if (fd < 0)
        return -1;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size > DATA_MANIFEST_MAX) {
        bad_data(err, file, "not a manifest file of at most 64 MiB");
        goto out;
    }
    if (!(bytes = malloc((size_t)sb.st_size + 1))) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    for (size_t got = 0; got < (size_t)sb.st_size;) {
        ssize_t r = read(fd, bytes + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            err_set(err, 503, "dataset_io", "data.path", "dataset '%s': %s", file, r < 0 ? strerror(errno) :
                    "the file shrank while read");
            goto out;
        }
        got += (size_t)r;
    }
    sha256_hex(bytes, (size_t)sb.st_size, src->identity);
    if (!(m = json_loadb((const char *)bytes, (size_t)sb.st_size, JSON_REJECT_DUPLICATES, &je))) {
        snprintf(why, sizeof why, "the manifest is not JSON (line %d: %s)", je.line, je.text);
        bad_data(err, file, why);
        goto out;
    }
    const char *format = json_string_value(json_object_get(m, "format"));
    const char *type = json_string_value(json_object_get(m, "token_type"));
    json_t *shards = json_object_get(m, "shards");
    json_int_t vocab = json_integer_value(json_object_get(json_object_get(m, "tokenizer"), "vocab_size"));
    if (!format || strcmp(format, "shoal-dataset") != 0 || json_integer_value(json_object_get(m, "version")) != 1 ||
        !json_is_array(shards) || !type) {
        bad_data(err, file, "not a shoal dataset manifest (format \"shoal-dataset\", version 1, token_type, "
                 "shards): `shoal-agent tokenize` writes one");
        goto out;
    }
    if (src->format != DATA_LLMC || (strcmp(type, "uint16") != 0 && strcmp(type, "uint32") != 0)) {
        snprintf(why, sizeof why, "a manifest of %s tokens is read with data.format \"llmc\"", type);
        bad_data(err, file, why);
        goto out;
    }
    if (vocab > src->vocab) {
        snprintf(why, sizeof why, "its tokenizer has %lld tokens, more than model.vocab_size %d",
                 (long long)vocab, src->vocab);
        bad_data(err, file, why);
        goto out;
    }
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    size_t i;
    json_t *s;
    json_array_foreach(shards, i, s) {
        const char *name = json_string_value(json_object_get(s, "name"));
        const char *sp = json_string_value(json_object_get(s, "split"));
        const char *sha = json_string_value(json_object_get(s, "sha256"));
        json_t *tokens = json_object_get(s, "tokens");
        if (!name || !name[0] || strchr(name, '/') || strcmp(name, "..") == 0 || !sp || !is_hex64(sha) ||
            !json_is_integer(tokens) || json_integer_value(tokens) < 1) {
            snprintf(why, sizeof why, "shards[%zu] needs a plain file name, a split, tokens and a sha256", i);
            bad_data(err, file, why);
            goto out;
        }
        if (strcmp(sp, split) != 0)
            continue;
        char path[2 * PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (shard_add(src, path, err) != 0)
            goto out;
        struct data_shard *sh = &src->shards[src->n_shards - 1];
        memcpy(sh->sha256, sha, SHA256_HEX);
        sh->n_tokens = (uint64_t)json_integer_value(tokens);   /* checked against the header when mapped */
    }
    if (src->n_shards == 0) {
        snprintf(why, sizeof why, "the manifest lists no %s shards", split);
        bad_data(err, file, why);
        goto out;
    }
    rc = 0;
out:
    json_decref(m);
    free(bytes);
    close(fd);
    return rc;
}

struct glob_into {
    struct data_source *src;
    struct shoal_err *err;
};

static int glob_shard(void *arg, const char *path)
{
    struct glob_into *g = arg;
    return shard_add(g->src, path, g->err);
}

/* A glob's files, found beneath the data roots (roots_glob), by name. */
static int list_glob(struct data_source *src, const char *pattern, struct shoal_err *err)
{
    int found = 0;
    struct glob_into g = { src, err };
    int rc = roots_glob(src->roots, pattern, "data.path", &found, glob_shard, &g, err);
    if (rc == 0 && found == 0)
        return bad_data(err, pattern, "the pattern matches no file");
    return rc == 0 ? 0 : -1;
}

/* ---- the source --------------------------------------------------------- */

static int source_finish(struct data_source *src, int seq_len, const char *name, struct shoal_err *err)
{
    uint64_t total = 0;
    for (int i = 0; i < src->n_shards; i++) {
        src->shards[i].first = total;
        total += src->shards[i].n_tokens;
    }
    src->base = 0;
    src->n_tokens = total;
    if (total < (uint64_t)seq_len + 1) {
        char why[200];
        snprintf(why, sizeof why, "%llu tokens, fewer than one sequence of %d plus its target",
                 (unsigned long long)total, seq_len);
        return bad_data(err, name, why);
    }
    return shard_ready(src, &src->shards[0], err);
}

int data_check(const unsigned char *bytes, size_t len, enum data_format format, int vocab, int seq_len,
               const char *name, struct data_source *out, struct shoal_err *err)
{
    memset(out, 0, sizeof *out);
    out->format = format;
    out->vocab = vocab;
    struct data_shard *sh = calloc(1, sizeof *sh);
    if (!sh)
        return err_set(err, 500, "internal", NULL, "out of memory");
    snprintf(sh->path, sizeof sh->path, "%s", name);
    sh->map = bytes;   /* not mapped: data_close leaves it */
    sh->map_len = len;
    out->shards = sh;
    out->n_shards = 1;
    out->owner = 1;
    int rc = shard_header(sh, format, err) != 0 || source_finish(out, seq_len, name, err) != 0 ? -1 : 0;
    if (rc != 0) {
        free(sh);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

/* Whether path (beneath the roots) is a directory: 1, 0, or -1 with err. */
static int is_dir(const struct data_source *src, const char *path, struct shoal_err *err)
{
    struct stat sb;
    int fd = roots_open(src->roots, path, O_PATH, "data.path", err);
    if (fd < 0)
        return -1;
    int dir = fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode);
    close(fd);
    return dir;
}

int data_open(const struct data_roots *roots, const char *path, const char *format, const char *split, int vocab,
              int seq_len, const char *cache_dir, struct data_source *out, struct shoal_err *err)
{
    char manifest[PATH_MAX + 16];
    struct shoal_err quiet;
    memset(out, 0, sizeof *out);
    if (strcmp(format, "text") == 0)
        out->format = DATA_TEXT;
    else if (strcmp(format, "llmc") == 0)
        out->format = DATA_LLMC;
    else
        return err_set(err, 422, "invalid_field", "data.format", "unknown dataset format '%s': use text or llmc",
                       format);
    out->vocab = vocab;
    out->owner = 1;
    out->roots = roots;
    if (!(out->digests = calloc(1, sizeof *out->digests)))
        return err_set(err, 500, "internal", NULL, "out of memory");
    if (cache_dir && cache_dir[0])
        snprintf(out->digests->file, sizeof out->digests->file, "%s/dataset-digests", cache_dir);
    int rc, dir = 0;
    size_t len = strlen(path);
    snprintf(manifest, sizeof manifest, "%s/dataset.json", path);
    if (strpbrk(path, "*?["))
        rc = list_glob(out, path, err);
    else if ((dir = is_dir(out, path, err)) < 0)
        rc = -1;
    else if (dir) {
        int m = roots_open(roots, manifest, O_PATH, "data.path", &quiet);
        if (m >= 0)
            close(m);
        rc = m >= 0 ? list_manifest(out, manifest, split, err) : list_dir(out, path, split, err);
    } else if (len > 5 && strcmp(path + len - 5, ".json") == 0)
        rc = list_manifest(out, path, split, err);
    else
        rc = shard_add(out, path, err);
    for (int i = 0; rc == 0 && i < out->n_shards; i++) {
        struct data_shard *sh = &out->shards[i];
        uint64_t listed = sh->n_tokens;
        rc = shard_map(out, sh, err) != 0 || shard_header(sh, out->format, err) != 0 ? -1 : 0;
        if (rc == 0 && out->identity[0] && sh->n_tokens != listed) {
            char why[200];
            snprintf(why, sizeof why, "%llu tokens, but its manifest lists %llu", (unsigned long long)sh->n_tokens,
                     (unsigned long long)listed);
            rc = bad_data(err, sh->path, why);
        }
    }
    if (rc == 0)
        rc = source_finish(out, seq_len, path, err);
    if (rc != 0)
        data_close(out);
    return rc;
}

void data_close(struct data_source *src)
{
    for (int i = 0; src->owner && i < src->n_shards; i++)
        if (src->shards[i].mapped)
            munmap((void *)src->shards[i].map, src->shards[i].map_len);
    if (src->owner) {
        free(src->shards);
        if (src->digests)
            digest_cache_free(src->digests);
        free(src->digests);
    }
    memset(src, 0, sizeof *src);
}

int data_holdout(const struct data_source *src, double fraction, int seq_len, struct data_source *train,
                 struct data_source *val, struct shoal_err *err)
{
    uint64_t tail = (uint64_t)((double)src->n_tokens * fraction);
    uint64_t head = src->n_tokens - tail;
    if (tail < (uint64_t)seq_len + 1 || head < (uint64_t)seq_len + 1)
        return err_set(err, 422, "invalid_dataset", "validation.holdout",
                       "dataset of %llu tokens: a holdout of %g leaves %llu for training and %llu for validation; "
                       "each needs at least %d (a sequence and its target)", (unsigned long long)src->n_tokens,
                       fraction, (unsigned long long)head, (unsigned long long)tail, seq_len + 1);
    *train = *src;
    train->owner = 0;
    train->n_tokens = head;
    *val = *src;
    val->owner = 0;
    val->base = src->base + head;
    val->n_tokens = tail;
    return 0;
}

/* count tokens from index `at` of the source into out (int32). */
static int read_span(struct data_source *src, uint64_t at, int count, int32_t *out, struct shoal_err *err)
{
    uint64_t g = src->base + at;
    int lo = 0, hi = src->n_shards - 1;
    while (lo < hi) {   /* the last shard starting at or before g */
        int mid = (lo + hi + 1) / 2;
        if (src->shards[mid].first <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    for (int i = lo, k = 0; k < count && i < src->n_shards; i++) {
        struct data_shard *sh = &src->shards[i];
        if (shard_ready(src, sh, err) != 0)
            return -1;
        for (uint64_t j = g + (uint64_t)k - sh->first; j < sh->n_tokens && k < count; j++)
            out[k++] = (int32_t)token_of(sh, j);
    }
    return 0;
}

static int read_sequence(struct data_source *src, uint64_t start, int T, int32_t *tokens, int32_t *targets,
                         struct shoal_err *err)
{
    if (read_span(src, start, T, tokens, err) != 0)
        return -1;
    memcpy(targets, tokens + 1, (size_t)(T - 1) * sizeof *targets);
    return read_span(src, start + (uint64_t)T, 1, targets + T - 1, err);
}

int data_eval_batch(struct data_source *src, uint64_t total, uint64_t first, int n, int T, int32_t *tokens,
                    int32_t *targets, struct shoal_err *err)
{
    uint64_t starts = src->n_tokens - (uint64_t)T;   /* valid start offsets: [0, starts) */
    for (int s = 0; s < n; s++) {
        uint64_t g = first + (uint64_t)s;
        /* g < total <= 2^20 and starts < 2^64: the product fits in 128 bits */
        uint64_t start = (uint64_t)((unsigned __int128)g * starts / total);
        if (read_sequence(src, start, T, tokens + (size_t)s * T, targets + (size_t)s * T, err) != 0)
            return -1;
    }
    return 0;
}

int data_batch(struct data_source *src, uint64_t seed, uint64_t step, uint64_t first, int n, int T,
               int32_t *tokens, int32_t *targets, struct shoal_err *err)
{
    uint64_t starts = src->n_tokens - (uint64_t)T; /* valid start offsets: [0, starts) */
    for (int s = 0; s < n; s++) {
        uint64_t h = splitmix64(seed ^ splitmix64(step ^ splitmix64(first + (uint64_t)s)));
        if (read_sequence(src, h % starts, T, tokens + (size_t)s * T, targets + (size_t)s * T, err) != 0)
            return -1;
    }
    return 0;
}
