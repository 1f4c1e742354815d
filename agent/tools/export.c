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
#include "../../models/model_io.h"
#include "../train/job_ckpt.h"

struct export_config {
    struct job_ckpt_source src;   /* --server, --job, --step, ... */
    char out_dir[PATH_MAX];
    char llmc[8];                 /* "off" or "on": also write model.bin */
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
};
#undef S
#define N_EXPORT_OPTS (sizeof export_opts / sizeof export_opts[0])

static const char export_usage[] =
    "usage: shoal-agent export --job ID --out DIR [options]\n\n"
    "Writes a job's model from its newest complete checkpoint (or --step) into\n"
    "DIR: model.safetensors and config.json, which Hugging Face's\n"
    "GPT2LMHeadModel.from_pretrained(DIR) loads, and with --llmc on model.bin in\n"
    "llm.c's format (only for a head tied to the embedding).  Prints each file's\n"
    "name, size and SHA-256.\n\n";

/* One of model_io.h's writers. */
typedef int (*export_writer)(FILE *f, const struct model_config *m, const float *params, struct kern_err *err);

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
static int export_file(const char *dir, const char *name, export_writer write, const struct model_config *m,
                       const float *whole, FILE *out, struct shoal_err *err)
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
    if (write(f, m, whole, &ke) != 0) {
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

static int llama_config_write(FILE *f, const struct model_config *m, const float *params, struct kern_err *err)
{
    (void)params;
    return kern_llama_config_write(f, m, err);
}

/* Each kind of family's Hugging Face files: model.safetensors and
 * config.json (the llama kind's names and model_type from the family's row). */
static const struct {
    export_writer weights, config;
} hf_writers[MODEL_BLOCKS_COUNT] = {
    [MODEL_BLOCKS_GPT2] = {kern_safetensors_write, kern_gpt2_config_write},
    [MODEL_BLOCKS_LLAMA] = {kern_hf_write, llama_config_write},
};

static int export_run(const void *config, FILE *out, struct shoal_err *err)
{
    const struct export_config *cfg = config;
    struct ctl c;
    struct job_ckpt ck = { .stages = 0 };
    float *whole = NULL;
    int llmc = strcmp(cfg->llmc, "on") == 0, rc = -1;
    if (!llmc && strcmp(cfg->llmc, "off") != 0)
        return err_set(err, 2, "invalid_config", "--llmc", "--llmc must be off or on, not '%s'", cfg->llmc);
    if (job_ckpt_connect(&cfg->src, "export", &c, err) != 0 || out_dir_ready(cfg->out_dir, err) != 0)
        return -1;
    if (job_ckpt_find(&c, &cfg->src, &ck, err) != 0 || job_ckpt_load_params(&c, &cfg->src, &ck, err) != 0 ||
        export_join(&ck, &whole, err) != 0)
        goto out;
    struct model_config m = ck.model;
    int tied = m.tied || kern_model_head_tied(&m, whole);
    job_ckpt_free(&ck);   /* the whole model holds every parameter now */
    fprintf(stderr, "shoal-agent export: job %ld, checkpoint step %lld, %d stage(s), %s, %d layers, d_model %d, "
            "heads %d, vocab %d, context %d, head %s\n", cfg->src.job, (long long)ck.step, ck.stages,
            model_families[m.arch].name, m.layers, m.d_model, m.heads, m.vocab, m.context,
            tied ? "tied to the embedding" : "untied");
    enum model_blocks kind = model_families[m.arch].blocks;
    if (export_file(cfg->out_dir, "model.safetensors", hf_writers[kind].weights, &m, whole, out, err) != 0 ||
        export_file(cfg->out_dir, "config.json", hf_writers[kind].config, &m, whole, out, err) != 0)
        goto out;
    if (llmc && !tied) {
        err_set(err, 1, "untied_head", "--llmc", "model.bin not written: job %ld's head is not tied to its "
                "embedding (shoal trains lm_head apart from wte), and llm.c's format holds one matrix for both; "
                "model.safetensors and config.json hold the whole model", cfg->src.job);
        goto out;
    }
    if (llmc && export_file(cfg->out_dir, "model.bin", kern_llmc_write, &m, whole, out, err) != 0)
        goto out;
    rc = 0;
out:
    job_ckpt_free(&ck);
    free(whole);
    return rc;
}

int export_main(int argc, char **argv, int first, FILE *out)
{
    static const struct job_ckpt_command cmd = { "export", export_usage, export_opts, N_EXPORT_OPTS,
                                                 sizeof(struct export_config), export_run };
    return job_ckpt_main(&cmd, argc, argv, first, out);
}
