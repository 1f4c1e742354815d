/* tokenize.c - `shoal-agent tokenize` (tokenize.h): documents read in
 * batches, encoded by worker threads, written in document order. */
#include "tokenize.h"

#include "bpe.h"
#include "tokenizer.h"
#include "../train/data.h"

#include "../../common/err.h"
#include "../../common/mix.h"
#include "../../common/opts.h"
#include "../../common/sha256.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../common/clock.h"

#define BATCH_BYTES ((size_t)32 << 20)   /* text read before the workers encode it */
#define BATCH_DOCS 65536
#define THREADS_MAX 64
#define LINE_MAX_BYTES ((size_t)256 << 20)   /* one JSON line */

struct tokenize_config {
    char tokenizer[PATH_MAX];
    char format[16];
    char encoding[32];
    char out_dir[PATH_MAX];
    char text_field[64];
    char separator[128];
    char val_fraction[32];
    long shard_tokens;
    long threads;
    long print_ids;
    long extend;
    char write_llmc[PATH_MAX];
};

#define S(f) OPT_STR_FIELD(struct tokenize_config, f)
#define L(f, lo, hi) OPT_LONG_FIELD(struct tokenize_config, f, lo, hi)
static const struct opt tokenize_opts[] = {
    { "--tokenizer", "SHOAL_TOKENIZER", S(tokenizer), "",
      "the tokenizer file: Hugging Face tokenizer.json, a tiktoken file (cl100k_base.tiktoken, Llama 3's "
      "tokenizer.model) or llm.c's gpt2_tokenizer.bin" },
    { "--tokenizer-format", "SHOAL_TOKENIZER_FORMAT", S(format), "",
      "hf, tiktoken or llmc; empty: recognised from the file" },
    { "--encoding", "SHOAL_TOKENIZER_ENCODING", S(encoding), "",
      "a tiktoken file's encoding (gpt2, p50k_base, cl100k_base, o200k_base, llama3): its split pattern and "
      "special tokens; empty: recognised by its number of ranks" },
    { "--out", "SHOAL_TOKENIZE_OUT", S(out_dir), "",
      "directory the shards and dataset.json go to (created; must not hold a dataset.json, but with --extend 1)" },
    { "--text-field", "SHOAL_TOKENIZE_TEXT_FIELD", S(text_field), "text",
      "the field of each JSON line that holds a document" },
    { "--separator", "SHOAL_TOKENIZE_SEPARATOR", S(separator), "",
      "the special token each document starts with; empty: the tokenizer's begin-of-text token, else its "
      "end-of-text token" },
    { "--val-fraction", "SHOAL_TOKENIZE_VAL_FRACTION", S(val_fraction), "0.005",
      "documents held out for the validation shards, by a hash of their index (0 to 0.5)" },
    { "--shard-tokens", "SHOAL_TOKENIZE_SHARD_TOKENS", L(shard_tokens, 1024, INT32_MAX), "100000000",
      "tokens per shard (llm.c's fineweb shards hold 100 million)" },
    { "--threads", "SHOAL_TOKENIZE_THREADS", L(threads, 0, THREADS_MAX), "0",
      "encoding threads; 0: one per core (the output is the same whatever the count)" },
    { "--print-ids", "SHOAL_TOKENIZE_PRINT_IDS", L(print_ids, 0, 1), "0",
      "1: print each document's ids (no separator) on a line of its own instead of writing shards" },
    { "--extend", "SHOAL_TOKENIZE_EXTEND", L(extend, 0, 1), "0",
      "1: add the INPUTs' documents to the dataset in --out, as shards after its own, and rewrite its dataset.json; "
      "it must have been made with the same tokenizer file, separator and Unicode version (PCRE2's)" },
    { "--write-llmc-tokenizer", "SHOAL_TOKENIZE_WRITE_LLMC", S(write_llmc), "",
      "FILE: instead of tokenizing (no INPUT, no --out), write the --tokenizer as llm.c's tokenizer file "
      "(version 2: every id's bytes, its end-of-text token), which llm.c and --tokenizer read; from GPT-2's "
      "tokenizer.json or tiktoken ranks it is gpt2_tokenizer.bin, byte for byte" },
};
#undef S
#undef L
#define N_TOKENIZE_OPTS (sizeof tokenize_opts / sizeof tokenize_opts[0])

static const char tokenize_usage[] =
    "usage: shoal-agent tokenize --tokenizer FILE --out DIR [options] INPUT...\n"
    "       shoal-agent tokenize --tokenizer FILE --write-llmc-tokenizer gpt2_tokenizer.bin\n\n"
    "Turns text into token shards a job can train on (data.path: DIR), with a\n"
    "manifest, DIR/dataset.json, listing every shard's tokens and SHA-256.  Each\n"
    "INPUT is a text file (one document) or a .jsonl file (one document a line,\n"
    "its text field); - reads standard input as one document.\n\n";

/* ---- documents ---------------------------------------------------------- */

struct doc {
    char *text;          /* owned: a whole text file, or one JSON line */
    size_t len;
    int jsonl;           /* 1: a JSON line; its text field is the document */
    char where[PATH_MAX + 32];   /* "file.jsonl:12" for messages */
    struct bpe_ids ids;
    struct shoal_err err;
    int failed;
};

struct batch {
    struct doc *docs;
    size_t n, bytes;
};

static void batch_clear(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->docs[i].text);
        bpe_ids_free(&b->docs[i].ids);
    }
    b->n = b->bytes = 0;
}

struct input {
    char **paths;
    int n, at;
    FILE *f;              /* the input being read, for JSON lines */
    long line;
    int jsonl;
};

static int has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A whole file (or standard input) into memory. */
static int read_all(FILE *f, const char *name, char **text, size_t *len, struct shoal_err *err)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            return err_set(err, 500, "internal", NULL, "out of memory reading '%s'", name);
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *more = realloc(buf, cap * 2);
        if (!more)
            free(buf);
        buf = more;
        cap *= 2;
    }
    if (ferror(f)) {
        free(buf);
        return err_set(err, 422, "invalid_input", NULL, "cannot read '%s': %s", name, strerror(errno));
    }
    *text = buf;
    *len = n;
    return 0;
}

/* The next batch of documents; 0 with b->n == 0 at the end. */
static int batch_fill(struct input *in, struct batch *b, struct shoal_err *err)
{
    batch_clear(b);
    while (b->n < BATCH_DOCS && b->bytes < BATCH_BYTES) {
        if (!in->f && in->at == in->n)
            return 0;
        struct doc *d = &b->docs[b->n];
        memset(d, 0, sizeof *d);
        const char *path = in->paths[in->at];
        if (!in->f) {
            in->jsonl = has_suffix(path, ".jsonl");
            FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
            if (!f)
                return err_set(err, 422, "invalid_input", NULL, "cannot open '%s': %s", path, strerror(errno));
            if (!in->jsonl) {
                int rc = read_all(f, path, &d->text, &d->len, err);
                if (f != stdin)
                    fclose(f);
                in->at++;
                if (rc != 0)
                    return -1;
                snprintf(d->where, sizeof d->where, "%s", path);
                b->bytes += d->len;
                b->n++;
                continue;
            }
            in->f = f;
            in->line = 0;
        }
        size_t cap = 0;
        ssize_t got = getline(&d->text, &cap, in->f);
        in->line++;
        if (got < 0) {
            free(d->text);
            d->text = NULL;
            int bad = ferror(in->f);
            if (in->f != stdin)
                fclose(in->f);
            in->f = NULL;
            in->at++;
            if (bad)
                return err_set(err, 422, "invalid_input", NULL, "cannot read '%s': %s", path, strerror(errno));
            continue;
        }
        if ((size_t)got > LINE_MAX_BYTES) {
            free(d->text);
            d->text = NULL;
            return err_set(err, 422, "invalid_input", NULL, "%s:%ld: a line of %zd bytes (at most %zu)", path,
                           in->line, got, LINE_MAX_BYTES);
        }
        size_t len = (size_t)got;
        while (len && (d->text[len - 1] == '\n' || d->text[len - 1] == '\r'))
            len--;
        if (len == 0) {   /* blank lines are no documents */
            free(d->text);
            d->text = NULL;
            continue;
        }
        d->len = len;
        d->jsonl = 1;
        snprintf(d->where, sizeof d->where, "%s:%ld", path, in->line);
        b->bytes += len;
        b->n++;
    }
    return 0;
}

/* ---- encoding, in parallel ---------------------------------------------- */

struct pool {
    const struct bpe *bpe;
    const char *field;
    struct batch *batch;
    int64_t separator;         /* -1: none (--print-ids) */
    atomic_size_t next;
};

static void encode_doc(struct pool *p, struct bpe_work *w, struct doc *d)
{
    const char *text = d->text;
    size_t len = d->len;
    json_t *line = NULL;
    if (d->jsonl) {
        json_error_t je;
        line = json_loadb(d->text, d->len, 0, &je);
        json_t *t = json_object_get(line, p->field);
        if (!json_is_string(t)) {
            d->failed = 1;
            err_set(&d->err, 422, "invalid_input", NULL, "%s: %s", d->where,
                    !line ? je.text : "no string field of the --text-field's name");
            goto out;
        }
        text = json_string_value(t);
        len = json_string_length(t);
    }
    if ((p->separator >= 0 && bpe_ids_push(&d->ids, (uint32_t)p->separator, &d->err) != 0) ||
        bpe_encode(p->bpe, w, text, len, &d->ids, &d->err) != 0)
        d->failed = 1;
out:
    json_decref(line);
}

static void *worker(void *arg)
{
    struct pool *p = arg;
    struct bpe_work w = {0};
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->batch->n)
            break;
        encode_doc(p, &w, &p->batch->docs[i]);
    }
    bpe_work_free(&w);
    return NULL;
}

static int encode_batch(struct pool *p, int threads, struct shoal_err *err)
{
    pthread_t tid[THREADS_MAX];
    int started = 0;
    atomic_store(&p->next, 0);
    for (; started < threads - 1; started++)
        if (pthread_create(&tid[started], NULL, worker, p) != 0)
            break;
    worker(p);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    for (size_t i = 0; i < p->batch->n; i++)
        if (p->batch->docs[i].failed) {
            *err = p->batch->docs[i].err;
            return -1;
        }
    return 0;
}

/* ---- shards ------------------------------------------------------------- */

struct shard_out {
    const char *dir, *split;
    int token_bytes;
    long limit;                /* tokens per shard */
    int index;                 /* of the open shard */
    FILE *f;
    uint64_t in_shard;         /* tokens in the open shard */
    uint64_t total;            /* tokens in the split */
    json_t *list;              /* the manifest's shards */
};

static int shard_close(struct shard_out *s, struct shoal_err *err)
{
    if (!s->f)
        return 0;
    int32_t header[DATA_LLMC_HEADER_INTS] = {0};
    header[0] = s->token_bytes == 2 ? DATA_LLMC_MAGIC : DATA_LLMC32_MAGIC;
    header[1] = s->token_bytes == 2 ? DATA_LLMC_VERSION : DATA_LLMC32_VERSION;
    header[2] = (int32_t)s->in_shard;
    char name[64], tmp[PATH_MAX + 80], path[PATH_MAX + 80], hex[SHA256_HEX];
    snprintf(name, sizeof name, "%s_%06d.bin", s->split, s->index);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", s->dir, name);
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    int bad = fseek(s->f, 0, SEEK_SET) != 0 || fwrite(header, sizeof header, 1, s->f) != 1 || fflush(s->f) != 0 ||
              fsync(fileno(s->f)) != 0;
    bad |= fclose(s->f) != 0;
    s->f = NULL;
    if (bad || rename(tmp, path) != 0)
        return err_set(err, 500, "io_error", "--out", "cannot write %s: %s", path, strerror(errno));
    if (sha256_file_hex(path, hex, err) != 0)
        return -1;
    json_array_append_new(s->list, json_pack("{s:s, s:s, s:I, s:s}", "name", name, "split", s->split, "tokens",
                                             (json_int_t)s->in_shard, "sha256", hex));
    s->index++;
    s->in_shard = 0;
    return 0;
}

static int shard_put(struct shard_out *s, const uint32_t *ids, size_t n, struct shoal_err *err)
{
    unsigned char buf[8192];
    while (n > 0) {
        if (!s->f) {
            char tmp[PATH_MAX + 80];
            snprintf(tmp, sizeof tmp, "%s/.%s_%06d.bin.tmp", s->dir, s->split, s->index);
            static const unsigned char zero[DATA_LLMC_HEADER_INTS * 4];
            if (!(s->f = fopen(tmp, "wb")) || fwrite(zero, sizeof zero, 1, s->f) != 1)
                return err_set(err, 500, "io_error", "--out", "cannot write %s: %s", tmp, strerror(errno));
        }
        size_t room = (size_t)((uint64_t)s->limit - s->in_shard), take = n < room ? n : room;
        size_t per = sizeof buf / (size_t)s->token_bytes, done = 0;
        while (done < take) {
            size_t k = take - done < per ? take - done : per;
            for (size_t i = 0; i < k; i++) {
                uint32_t v = ids[done + i];
                unsigned char *o = buf + i * (size_t)s->token_bytes;
                o[0] = (unsigned char)v, o[1] = (unsigned char)(v >> 8);
                if (s->token_bytes == 4)
                    o[2] = (unsigned char)(v >> 16), o[3] = (unsigned char)(v >> 24);
            }
            if (fwrite(buf, (size_t)s->token_bytes, k, s->f) != k)
                return err_set(err, 500, "io_error", "--out", "cannot write a shard in %s: %s", s->dir,
                               strerror(errno));
            done += k;
        }
        s->in_shard += take;
        s->total += take;
        ids += take;
        n -= take;
        if (s->in_shard == (uint64_t)s->limit && shard_close(s, err) != 0)
            return -1;
    }
    return 0;
}

/* ---- the command -------------------------------------------------------- */

/* Document i is held out when a hash of i falls under the fraction. */
static int held_out(uint64_t i, double fraction)
{
    return (double)(splitmix64(i ^ 0x5eed0fda7a5e7ull) >> 11) * 0x1.0p-53 < fraction;
}

static int print_batch(const struct batch *b, FILE *out)
{
    for (size_t i = 0; i < b->n; i++) {
        const struct bpe_ids *ids = &b->docs[i].ids;
        for (size_t k = 0; k < ids->n; k++)
            fprintf(out, k ? " %u" : "%u", ids->id[k]);
        fputc('\n', out);
    }
    return ferror(out) ? -1 : 0;
}

static int write_manifest(const struct tokenize_config *cfg, const struct bpe *tok, int64_t separator,
                          int token_bytes, struct shard_out *split, uint64_t docs[2], struct shoal_err *err)
{
    char hex[SHA256_HEX], path[PATH_MAX + 32], tmp[PATH_MAX + 40], unicode[BPE_UNICODE_VERSION_MAX];
    if (sha256_file_hex(cfg->tokenizer, hex, err) != 0)
        return -1;
    const char *base = strrchr(cfg->tokenizer, '/');
    json_t *shards = json_array();
    json_array_extend(shards, split[0].list);
    json_array_extend(shards, split[1].list);
    json_t *doc = json_pack("{s:s, s:i, s:{s:s, s:s, s:s, s:I, s:I, s:I, s:s}, s:I, s:s, s:o, s:{s:I, s:I}, "
                            "s:{s:I, s:I}}",
                            "format", "shoal-dataset", "version", 1,
                            "tokenizer", "file", base ? base + 1 : cfg->tokenizer, "format", tok->format,
                            "sha256", hex, "vocab_size", (json_int_t)tok->n_ids, "eot", (json_int_t)tok->eot,
                            "bot", (json_int_t)tok->bot, "unicode_version", bpe_unicode_version(unicode),
                            "separator", (json_int_t)separator, "token_type", token_bytes == 2 ? "uint16" : "uint32",
                            "shards", shards,
                            "tokens", "train", (json_int_t)split[0].total, "val", (json_int_t)split[1].total,
                            "documents", "train", (json_int_t)docs[0], "val", (json_int_t)docs[1]);
    snprintf(path, sizeof path, "%s/dataset.json", cfg->out_dir);
    snprintf(tmp, sizeof tmp, "%s/.dataset.json.tmp", cfg->out_dir);
    int rc = doc && json_dump_file(doc, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) == 0 && rename(tmp, path) == 0 ? 0 : -1;
    json_decref(doc);
    if (rc != 0)
        return err_set(err, 500, "io_error", "--out", "cannot write %s: %s", path, strerror(errno));
    return 0;
}

/* --extend: the dataset in cfg->out_dir, checked against what this run
 * writes (the tokenizer file, the Unicode version its ids were made with,
 * the separator, the shards' names); its shards, token and document counts
 * carried into split and docs, so new shards follow its own and documents
 * are held out as one run over all the inputs would. */
static int extend_load(const struct tokenize_config *cfg, int64_t separator, struct shard_out split[2],
                       uint64_t docs[2], struct shoal_err *err)
{
    char path[PATH_MAX + 32], hex[SHA256_HEX], ours[BPE_UNICODE_VERSION_MAX];
    const char *fmt = NULL, *sha = NULL, *unicode = NULL;
    json_int_t version = 0, sep = -1, tokens[2] = {0, 0}, count[2] = {0, 0};
    json_t *shards = NULL, *sh;
    json_error_t je;
    size_t i;
    int rc = -1;
    snprintf(path, sizeof path, "%s/dataset.json", cfg->out_dir);
    json_t *m = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!m || json_unpack(m, "{s:s, s:I, s:{s:s, s?s}, s:I, s:o, s:{s:I, s:I}, s:{s:I, s:I}}", "format", &fmt,
                          "version", &version, "tokenizer", "sha256", &sha, "unicode_version", &unicode,
                          "separator", &sep, "shards", &shards, "tokens", "train", &tokens[0], "val", &tokens[1],
                          "documents", "train", &count[0], "val", &count[1]) != 0 ||
        strcmp(fmt, "shoal-dataset") != 0 || version != 1 || !json_is_array(shards)) {
        err_set(err, 2, "invalid_config", "--extend", "cannot extend %s: not a manifest tokenize writes (format "
                "shoal-dataset, version 1)%s%s", path, m ? "" : ": ", m ? "" : je.text);
        goto out;
    }
    if (sha256_file_hex(cfg->tokenizer, hex, err) != 0)
        goto out;
    bpe_unicode_version(ours);
    if (strcmp(sha, hex) != 0)
        err_set(err, 2, "invalid_config", "--extend", "cannot extend %s: its ids are of the tokenizer file of SHA-256 "
                "%.16s..., --tokenizer's is %.16s...", path, sha, hex);
    else if (!unicode)
        err_set(err, 2, "invalid_config", "--extend", "cannot extend %s: it records no Unicode version (it is older), "
                "so its ids may be of another Unicode's letters than this site's %s: tokenize it all again", path,
                ours);
    else if (strcmp(unicode, ours) != 0)
        err_set(err, 2, "invalid_config", "--extend", "cannot extend %s: its ids were made with Unicode %s, this "
                "site's PCRE2 has Unicode %s (a letter new in either gets other ids here): extend it where PCRE2 has "
                "%s, or tokenize it all again", path, unicode, ours, unicode);
    else if (sep != separator)
        err_set(err, 2, "invalid_config", "--extend", "cannot extend %s: its documents start with token %lld, this "
                "run's with %lld: name its separator with --separator", path, (long long)sep, (long long)separator);
    else
        rc = 0;
    json_array_foreach(shards, i, sh) {
        const char *name = json_string_value(json_object_get(sh, "name"));
        const char *which = json_string_value(json_object_get(sh, "split"));
        int k = which && strcmp(which, "val") == 0;
        char want[64];
        if (rc != 0)
            break;
        snprintf(want, sizeof want, "%s_%06d.bin", split[k].split, split[k].index);
        if (!name || !which || (!k && strcmp(which, "train") != 0) || strcmp(name, want) != 0) {
            rc = err_set(err, 2, "invalid_config", "--extend", "cannot extend %s: shard %zu is '%s', where "
                         "tokenize writes '%s'", path, i, name ? name : "(none)", want);
            break;
        }
        json_array_append(split[k].list, sh);
        split[k].index++;
    }
    for (int k = 0; rc == 0 && k < 2; k++) {
        split[k].total = (uint64_t)tokens[k];
        docs[k] = (uint64_t)count[k];
    }
out:
    json_decref(m);
    return rc;
}

static int run(const struct tokenize_config *cfg, char **inputs, int n_inputs, FILE *out, struct shoal_err *err)
{
    struct bpe tok;
    struct batch b = {0};
    struct input in = { .paths = inputs, .n = n_inputs };
    struct shard_out split[2] = {{0}};   /* train, val */
    uint64_t docs[2] = {0, 0}, doc_index = 0;
    char *end;
    int rc = -1;
    double fraction = strtod(cfg->val_fraction, &end);
    if (!cfg->tokenizer[0])
        return err_set(err, 2, "invalid_config", "--tokenizer", "--tokenizer names the tokenizer file");
    if (n_inputs == 0)
        return err_set(err, 2, "invalid_config", NULL, "no INPUT: name text or .jsonl files, or - for stdin");
    if (*end || !(fraction >= 0 && fraction <= 0.5))
        return err_set(err, 2, "invalid_config", "--val-fraction", "--val-fraction must be 0 to 0.5, not '%s'",
                       cfg->val_fraction);
    if (!cfg->print_ids && !cfg->out_dir[0])
        return err_set(err, 2, "invalid_config", "--out", "--out names the directory the shards go to");
    if (cfg->print_ids && cfg->extend)
        return err_set(err, 2, "invalid_config", "--extend", "--extend adds to a dataset; --print-ids writes none");
    if (bpe_open(cfg->tokenizer, cfg->format, cfg->encoding, &tok, err) != 0)
        return -1;
    int64_t separator = -1;
    if (!cfg->print_ids) {
        separator = cfg->separator[0] ? bpe_special(&tok, cfg->separator) : tok.bot >= 0 ? tok.bot : tok.eot;
        if (separator < 0) {
            err_set(err, 2, "invalid_config", "--separator", cfg->separator[0] ?
                    "'%s' is no special token of the tokenizer" : "%sthe tokenizer has no begin- or end-of-text "
                    "token: name one with --separator", cfg->separator);
            goto out;
        }
        char probe[PATH_MAX + 32];
        snprintf(probe, sizeof probe, "%s/dataset.json", cfg->out_dir);
        if (cfg->extend && access(probe, F_OK) != 0) {
            err_set(err, 2, "invalid_config", "--extend", "'%s' holds no dataset.json to extend", cfg->out_dir);
            goto out;
        }
        if (mkdir(cfg->out_dir, 0755) != 0 && errno != EEXIST) {
            err_set(err, 2, "invalid_config", "--out", "cannot create '%s': %s", cfg->out_dir, strerror(errno));
            goto out;
        }
        if (!cfg->extend && access(probe, F_OK) == 0) {
            err_set(err, 2, "invalid_config", "--out", "'%s' already holds a dataset.json: choose an empty directory "
                    "(or add to it with --extend 1)", cfg->out_dir);
            goto out;
        }
    }
    int token_bytes = tok.n_ids <= 65536 ? 2 : 4;
    for (int k = 0; k < 2; k++) {
        split[k] = (struct shard_out){ .dir = cfg->out_dir, .split = k ? "val" : "train", .token_bytes = token_bytes,
                                       .limit = cfg->shard_tokens, .list = json_array() };
    }
    if (cfg->extend && extend_load(cfg, separator, split, docs, err) != 0)
        goto out;
    doc_index = docs[0] + docs[1];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cfg->threads ? (int)cfg->threads : (int)(cores < 1 ? 1 : cores > THREADS_MAX ? THREADS_MAX : cores);
    if (!(b.docs = calloc(BATCH_DOCS, sizeof *b.docs))) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    struct pool p = { .bpe = &tok, .field = cfg->text_field, .batch = &b, .separator = separator };
    double start = mono_s(), last = start;
    uint64_t bytes_in = 0;
    for (;;) {
        if (batch_fill(&in, &b, err) != 0)
            goto out;
        if (b.n == 0)
            break;
        if (encode_batch(&p, threads, err) != 0)
            goto out;
        bytes_in += b.bytes;
        if (cfg->print_ids) {
            if (print_batch(&b, out) != 0) {
                err_set(err, 500, "io_error", NULL, "cannot write the ids");
                goto out;
            }
            continue;
        }
        for (size_t i = 0; i < b.n; i++, doc_index++) {
            int val = held_out(doc_index, fraction);
            docs[val]++;
            if (shard_put(&split[val], b.docs[i].ids.id, b.docs[i].ids.n, err) != 0)
                goto out;
        }
        double t = mono_s();
        if (t - last >= 1) {
            fprintf(stderr, "shoal-agent tokenize: %llu documents, %.1f MB, %llu tokens, %.1f MB/s\n",
                    (unsigned long long)doc_index, bytes_in / 1e6,
                    (unsigned long long)(split[0].total + split[1].total), bytes_in / 1e6 / (t - start));
            last = t;
        }
    }
    if (!cfg->print_ids) {
        if (docs[1] == 0 && fraction > 0)
            fprintf(stderr, "shoal-agent tokenize: no document of %llu fell under --val-fraction %s: no validation "
                    "shard (a job can validate on validation.holdout instead)\n", (unsigned long long)doc_index,
                    cfg->val_fraction);
        if (shard_close(&split[0], err) != 0 || shard_close(&split[1], err) != 0 ||
            write_manifest(cfg, &tok, separator, token_bytes, split, docs, err) != 0)
            goto out;
        double t = mono_s() - start;
        fprintf(stderr, "shoal-agent tokenize: %llu documents (%llu held out), %.1f MB in %.1f s (%.1f MB/s, %d "
                "threads): %llu train tokens, %llu validation tokens in %s\n",
                (unsigned long long)doc_index, (unsigned long long)docs[1], bytes_in / 1e6, t,
                t > 0 ? bytes_in / 1e6 / t : 0.0, threads, (unsigned long long)split[0].total,
                (unsigned long long)split[1].total, cfg->out_dir);
        fprintf(out, "%s/dataset.json\n", cfg->out_dir);
    }
    rc = 0;
out:
    for (int k = 0; k < 2; k++) {
        if (split[k].f)
            fclose(split[k].f);
        json_decref(split[k].list);
    }
    if (in.f && in.f != stdin)
        fclose(in.f);
    batch_clear(&b);
    free(b.docs);
    bpe_free(&tok);
    return rc;
}

/* bpe_decode as tokenizer_write asks for a token's bytes. */
static const unsigned char *bpe_piece(const void *ctx, uint32_t id, size_t *len)
{
    return bpe_decode(ctx, id, len);
}

/* --write-llmc-tokenizer: the tokenizer file in llm.c's format; prints
 * what it wrote, with its SHA-256. */
static int write_llmc(const struct tokenize_config *cfg, int n_inputs, FILE *out, struct shoal_err *err)
{
    struct bpe tok;
    char hex[SHA256_HEX];
    int rc = -1;
    if (!cfg->tokenizer[0])
        return err_set(err, 2, "invalid_config", "--tokenizer", "--tokenizer names the tokenizer file to write "
                       "as llm.c's");
    if (n_inputs > 0 || cfg->out_dir[0] || cfg->print_ids)
        return err_set(err, 2, "invalid_config", "--write-llmc-tokenizer", "--write-llmc-tokenizer writes a "
                       "tokenizer file only: no INPUT, --out or --print-ids with it");
    if (bpe_open(cfg->tokenizer, cfg->format, cfg->encoding, &tok, err) != 0)
        return -1;
    if (tok.eot < 0) {
        err_set(err, 422, "invalid_tokenizer", "--tokenizer", "tokenizer '%s' has no end-of-text token, which "
                "llm.c's file names", cfg->tokenizer);
        goto out;
    }
    if (tokenizer_write(cfg->write_llmc, tok.n_ids, (uint32_t)tok.eot, bpe_piece, &tok, err) != 0 ||
        sha256_file_hex(cfg->write_llmc, hex, err) != 0)
        goto out;
    fprintf(out, "%s: %u tokens, eot %lld, sha256 %s\n", cfg->write_llmc, tok.n_ids, (long long)tok.eot, hex);
    rc = 0;
out:
    bpe_free(&tok);
    return rc;
}

int tokenize_main(int argc, char **argv, int first, FILE *out)
{
    struct tokenize_config cfg;
    struct shoal_err err = {0};
    /* options first, then the inputs */
    int a = first;
    while (a < argc && strncmp(argv[a], "--", 2) == 0 && strcmp(argv[a], "--") != 0)
        a += strchr(argv[a], '=') || strcmp(argv[a], "--help") == 0 ? 1 : 2;
    int inputs = a < argc && strcmp(argv[a], "--") == 0 ? a + 1 : a;
    int rc = opts_load(tokenize_opts, N_TOKENIZE_OPTS, &cfg, a < argc ? a : argc, argv, first, &err);
    if (rc == 1) {
        fputs(tokenize_usage, out);
        fputs("Every option can also be set by its environment variable; flags win.\n\n", out);
        opts_usage(tokenize_opts, N_TOKENIZE_OPTS, out);
        return 0;
    }
    if (rc == 0 && cfg.write_llmc[0])
        rc = write_llmc(&cfg, argc > inputs ? argc - inputs : 0, out, &err);
    else if (rc == 0)
        rc = run(&cfg, argv + inputs, argc > inputs ? argc - inputs : 0, out, &err);
    if (rc != 0) {
        fprintf(stderr, "shoal-agent tokenize: %s\n", err.message);
        return err.status == 2 ? 2 : 1;
    }
    return 0;
}
