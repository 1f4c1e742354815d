/* export.c - a job's checkpoint as safetensors, config.json and llm.c's
 * format (export.h). */
#include "export.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/opts.h"
#include "../../common/sha256.h"
#include "../../models/hf_source.h"
#include "../../models/model_io.h"
#include "../train/job_ckpt.h"

struct export_config {
    struct job_ckpt_source src;   /* --server, --job, --step, ... */
    char out_dir[PATH_MAX];
    char llmc[8];                 /* "off" or "on": also write model.bin */
    char dtype[8];                /* "f32" or "bf16": model.safetensors' tensors */
    char tokenizer_dir[PATH_MAX]; /* tokenizer files to write, instead of the imported ones */
};

#define S(f) OPT_STR_FIELD(struct export_config, f)
static const struct opt export_opts[] = {
    JOB_CKPT_OPTS(struct export_config, "SHOAL_EXPORT", "export"),
    { "--out", "SHOAL_EXPORT_OUT", S(out_dir), "",
      "directory the files go to (required; created if missing, its parent must exist); files of the same "
      "names there are replaced" },
    { "--llmc", "SHOAL_EXPORT_LLMC", S(llmc), "off",
      "off or on: on also writes model.bin in llm.c's checkpoint format, which needs the head tied to the "
      "embedding (exit 1 when it is not, after the other files)" },
    { "--dtype", "SHOAL_EXPORT_DTYPE", S(dtype), "f32",
      "f32 or bf16: model.safetensors' tensors (bf16: each value rounded to nearest, ties to even, and "
      "torch_dtype \"bfloat16\", as save_pretrained writes a bf16 model)" },
    { "--tokenizer", "SHOAL_EXPORT_TOKENIZER", S(tokenizer_dir), "",
      "folder whose tokenizer.json, tokenizer_config.json and special_tokens_map.json are written beside the "
      "model; empty: those kept by the import, if any" },
};
#undef S
#define N_EXPORT_OPTS (sizeof export_opts / sizeof export_opts[0])

static const char export_usage[] =
    "usage: shoal-agent export --job ID --out DIR [options]\n\n"
    "Writes a job's model from its newest complete checkpoint (or --step) into\n"
    "DIR: model.safetensors, config.json and generation_config.json, which\n"
    "Hugging Face's AutoModelForCausalLM.from_pretrained(DIR) loads, the\n"
    "tokenizer files kept by the import (or --tokenizer's), which\n"
    "AutoTokenizer.from_pretrained(DIR) loads, and with --llmc on model.bin in\n"
    "llm.c's format (only for a head tied to the embedding).  config.json is the\n"
    "imported one with only what training changed changed.  Prints each file's\n"
    "name, size and SHA-256.\n\n";

/* What an export writes from: the whole model and the texts beside it. */
struct export_what {
    struct model_config m;
    const float *whole;
    int bf16;
    const char *text;             /* export_text's: the file's bytes */
    size_t text_len;
};

/* Writes one file of the export into f. */
typedef int (*export_writer)(FILE *f, const struct export_what *w, struct kern_err *err);

/* Makes --out a directory this process can write into, creating it (not
 * its parents) when it is missing.  A failure is a bad option (status 2):
 * it is found before anything is downloaded. */
static int out_dir_ready(const char *dir, struct shoal_err *err)
{
    struct stat st;
    if (!dir[0])
        return err_set(err, 2, "invalid_config", "--out", "--out is required: the directory to write "
                       "model.safetensors and config.json into");
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return err_set(err, 2, "invalid_config", "--out", "cannot create the --out directory '%s': %s", dir,
                       strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, 2, "invalid_config", "--out", "--out '%s' is not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return err_set(err, 2, "invalid_config", "--out", "cannot write into the --out directory '%s': %s", dir,
                       strerror(errno));
    return 0;
}

/* The whole model from the checkpoint's stages (kern_model_join), each
 * stage's parameters released as soon as they are in.  On success *whole
 * is malloc'd, kern_model_param_count floats; the caller frees it. */
static int export_join(struct job_ckpt *ck, float **whole, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    size_t n = kern_model_param_count(&ck->model);
    *whole = NULL;
    if (n == 0)
        return err_set(err, 422, "bad_checkpoint", NULL, "the checkpoint's model is over what model_io.h can write "
                       "(KERN_MODEL_MAX_PARAMS, KERN_MODEL_MAX_LAYERS)");
    if (!(*whole = malloc(n * sizeof(float))))
        return err_set(err, 500, "internal", NULL, "out of memory for a model of %zu parameters", n);
    if (kern_model_join(&ck->model, ck->spec, (const float *const *)ck->params, ck->stages, *whole, &ke) != 0) {
        free(*whole);
        *whole = NULL;
        return err_set(err, 422, "bad_checkpoint", NULL, "joining the checkpoint's stages: %s", ke.msg);
    }
    return 0;
}

/* Writes dir/name through `write` under a temporary name in dir, flushed
 * to disk, and renames it into place; then prints its name, size and
 * SHA-256 to `out`.  On failure the temporary file is removed and
 * dir/name is left as it was. */
static int export_file(const char *dir, const char *name, export_writer write, const struct export_what *w,
                       FILE *out, struct shoal_err *err)
{
    char tmp[PATH_MAX + 64], dst[PATH_MAX + 64], hex[SHA256_HEX];
    struct kern_err ke = {{0}};
    struct stat st;
    FILE *f = NULL;
    int fd, rc = -1;
    snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    if ((fd = mkstemp(tmp)) < 0)
        return err_set(err, 1, "io_error", "--out", "cannot create a file in %s: %s", dir, strerror(errno));
    if (fchmod(fd, 0644) != 0 || !(f = fdopen(fd, "wb"))) {
        err_set(err, 1, "io_error", "--out", "cannot open %s: %s", tmp, strerror(errno));
        close(fd);
        goto out;
    }
    if (write(f, w, &ke) != 0) {
        err_set(err, 1, "io_error", "--out", "%s not written: %s", name, ke.msg);
        goto out;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        err_set(err, 1, "io_error", "--out", "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    int closed = fclose(f);
    f = NULL;
    if (closed != 0) {
        err_set(err, 1, "io_error", "--out", "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (sha256_file_hex(tmp, hex, err) != 0)
        goto out;
    if (stat(tmp, &st) != 0 || rename(tmp, dst) != 0) {
        err_set(err, 1, "io_error", "--out", "cannot rename %s to %s: %s", tmp, dst, strerror(errno));
        goto out;
    }
    fprintf(out, "%s %lld bytes sha256 %s\n", name, (long long)st.st_size, hex);
    fflush(out);
    rc = 0;
out:
    if (f)
        fclose(f);
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* Each kind of family's model.safetensors (the llama kind's names from
 * the family's row). */
static int (*const weights_writers[MODEL_BLOCKS_COUNT])(FILE *f, const struct model_config *m, const float *params,
                                                        int bf16, struct kern_err *err) = {
    [MODEL_BLOCKS_GPT2] = kern_safetensors_write_as,
    [MODEL_BLOCKS_LLAMA] = kern_hf_write_as,
};

static int export_weights(FILE *f, const struct export_what *w, struct kern_err *err)
{
    return weights_writers[model_families[w->m.arch].blocks](f, &w->m, w->whole, w->bf16, err);
}

static int export_llmc(FILE *f, const struct export_what *w, struct kern_err *err)
{
    return kern_llmc_write(f, &w->m, w->whole, err);
}

static int export_text(FILE *f, const struct export_what *w, struct kern_err *err)
{
    if (fwrite(w->text, 1, w->text_len, f) != w->text_len || fflush(f) != 0) {
        snprintf(err->msg, sizeof err->msg, "write failed");
        return -1;
    }
    return 0;
}

static int export_generation(FILE *f, const struct export_what *w, struct kern_err *err)
{
    return kern_hf_generation_config_write(f, w->text, w->text_len, &w->m, err);
}

/* config.json's text: the imported one (in source) with what training
 * changed changed, else the family's own; *text malloc'd. */
static int export_config_text(const struct export_what *w, const char *source, size_t source_len, char **text,
                              size_t *len, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    char *imported = NULL;
    size_t imported_len = 0;
    FILE *mem = NULL;
    int rc = -1;
    *text = NULL;
    if (source && kern_hf_source_get(source, source_len, "config.json", &imported, &imported_len, &ke) != 0)
        goto bad;
    if (!(mem = open_memstream(text, len))) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    int merged = kern_hf_config_merge(mem, imported, imported_len, &w->m, w->whole, w->bf16 ? "bfloat16" : "float32",
                                      &ke);
    int closed = fclose(mem);
    if (merged != 0 || closed != 0)
        goto bad;
    rc = 0;
    goto out;
bad:
    err_set(err, 422, "bad_checkpoint", NULL, "config.json not written: %s", ke.msg[0] ? ke.msg : "out of memory");
out:
    if (rc != 0) {
        free(*text);
        *text = NULL;
    }
    free(imported);
    return rc;
}

/* The tokenizer files: --tokenizer's (tokenizer.json required, the others
 * where they are), else those the source holds. */
static int export_tokenizer(const struct export_config *cfg, const char *source, size_t source_len,
                            const struct export_what *model, FILE *out, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    struct export_what w = *model;
    char path[PATH_MAX + 32], *text = NULL;
    int rc = -1;
    for (int k = 1; kern_hf_source_files[k]; k++) {
        const char *name = kern_hf_source_files[k];
        size_t len = 0;
        if (cfg->tokenizer_dir[0]) {
            snprintf(path, sizeof path, "%s/%s", cfg->tokenizer_dir, name);
            FILE *f = fopen(path, "rb");
            if (!f && k == 1) {
                err_set(err, 2, "invalid_config", "--tokenizer", "cannot open %s: %s", path, strerror(errno));
                goto out;
            }
            if (!f)
                continue;
            FILE *mem = open_memstream(&text, &len);
            char buf[1 << 16];
            size_t got;
            while (mem && (got = fread(buf, 1, sizeof buf, f)) > 0)
                fwrite(buf, 1, got, mem);
            int bad = !mem || ferror(f);
            fclose(f);
            if ((mem && fclose(mem) != 0) || bad) {
                err_set(err, 1, "io_error", "--tokenizer", "cannot read %s", path);
                goto out;
            }
        } else if (source && kern_hf_source_get(source, source_len, name, &text, &len, &ke) != 0) {
            err_set(err, 422, "bad_checkpoint", NULL, "%s", ke.msg);
            goto out;
        }
        if (!text)
            continue;
        w.text = text, w.text_len = len;
        if (export_file(cfg->out_dir, name, export_text, &w, out, err) != 0)
            goto out;
        free(text);
        text = NULL;
    }
    rc = 0;
out:
    free(text);
    return rc;
}

static int export_run(const void *config, FILE *out, struct shoal_err *err)
{
    const struct export_config *cfg = config;
    struct ctl c;
    struct job_ckpt ck = { .stages = 0 };
    float *whole = NULL;
    char *source = NULL, *cfg_text = NULL;
    size_t source_len = 0, cfg_len = 0;
    int llmc = strcmp(cfg->llmc, "on") == 0, bf16 = strcmp(cfg->dtype, "bf16") == 0, rc = -1;
    if (!llmc && strcmp(cfg->llmc, "off") != 0)
        return err_set(err, 2, "invalid_config", "--llmc", "--llmc must be off or on, not '%s'", cfg->llmc);
    if (!bf16 && strcmp(cfg->dtype, "f32") != 0)
        return err_set(err, 2, "invalid_config", "--dtype", "--dtype must be f32 or bf16, not '%s'", cfg->dtype);
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/tokenizer.json", cfg->tokenizer_dir);
    if (cfg->tokenizer_dir[0] && access(probe, R_OK) != 0)
        return err_set(err, 2, "invalid_config", "--tokenizer", "cannot read %s: %s", probe, strerror(errno));
    if (job_ckpt_connect(&cfg->src, "export", &c, err) != 0 || out_dir_ready(cfg->out_dir, err) != 0)
        return -1;
    if (job_ckpt_find(&c, &cfg->src, &ck, err) != 0 || job_ckpt_load_params(&c, &cfg->src, &ck, err) != 0 ||
        export_join(&ck, &whole, err) != 0)
        goto out;
    struct model_config m = ck.model;
    int tied = m.tied || kern_model_head_tied(&m, whole);
    source = ck.source, source_len = ck.source_len;
    ck.source = NULL;
    job_ckpt_free(&ck);   /* the whole model holds every parameter now */
    fprintf(stderr, "shoal-agent export: job %ld, checkpoint step %lld, %d stage(s), %s, %d layers, d_model %d, "
            "heads %d, vocab %d, context %d, head %s\n", cfg->src.job, (long long)ck.step, ck.stages,
            model_families[m.arch].name, m.layers, m.d_model, m.heads, m.vocab, m.context,
            tied ? "tied to the embedding" : "untied");
    if (!source)
        fprintf(stderr, "shoal-agent export: the checkpoint keeps no imported files: config.json is shoal's own%s\n",
                cfg->tokenizer_dir[0] ? "" : ", and no tokenizer files are written (--tokenizer DIR writes them)");
    struct export_what w = { .m = m, .whole = whole, .bf16 = bf16 };
    if (export_file(cfg->out_dir, "model.safetensors", export_weights, &w, out, err) != 0 ||
        export_config_text(&w, source, source_len, &cfg_text, &cfg_len, err) != 0)
        goto out;
    w.text = cfg_text, w.text_len = cfg_len;
    if (export_file(cfg->out_dir, "config.json", export_text, &w, out, err) != 0 ||
        export_file(cfg->out_dir, "generation_config.json", export_generation, &w, out, err) != 0 ||
        export_tokenizer(cfg, source, source_len, &w, out, err) != 0)
        goto out;
    if (llmc && !tied) {
        err_set(err, 1, "untied_head", "--llmc", "model.bin not written: job %ld's head is not tied to its "
                "embedding (shoal trains lm_head apart from wte), and llm.c's format holds one matrix for both; "
                "model.safetensors and config.json hold the whole model", cfg->src.job);
        goto out;
    }
    if (llmc && export_file(cfg->out_dir, "model.bin", export_llmc, &w, out, err) != 0)
        goto out;
    rc = 0;
out:
    job_ckpt_free(&ck);
    free(whole);
    free(source);
    free(cfg_text);
    return rc;
}

int export_main(int argc, char **argv, int first, FILE *out)
{
    static const struct job_ckpt_command cmd = { "export", export_usage, export_opts, N_EXPORT_OPTS,
                                                 sizeof(struct export_config), export_run };
    return job_ckpt_main(&cmd, argc, argv, first, out);
}
