/* import.c - a GPT-2 checkpoint as a job's starting weights (import.h). */
#include "import.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/model_json.h"
#include "../../common/opts.h"
#include "../../common/sha256.h"
#include "../../models/checkpoint.h"
#include "../../models/hf_source.h"
#include "../../models/model_io.h"
#include "../train/job_ckpt.h"

#define IMPORT_CALL_S 30             /* s for one JSON call */
#define IMPORT_UPLOAD_DEADLINE_S 600 /* s to upload one stage file, retries included */
#define IMPORT_STAGES_MAX 1024       /* as the server allows */
#define IMPORT_CONFIG_MAX (1u << 20) /* bytes of a config.json we read */
#define IMPORT_TOKENIZER_MAX (32u << 20) /* bytes of a tokenizer file we read */

struct import_config {
    struct job_ckpt_source src;   /* --server, --job, --tmp-dir, ... (no --step) */
    char model_path[PATH_MAX];
    char config_path[PATH_MAX];
    char tokenizer_dir[PATH_MAX];
};

/* What the import read besides the weights: the config.json's text (kept
 * whole with the checkpoint: hf_source.h) and the context the file says. */
struct import_read_out {
    char *config;                 /* malloc'd, or NULL: no config.json */
    size_t config_len;
    int file_context;
};

#define S(f) OPT_STR_FIELD(struct import_config, f)
static const struct opt import_opts[] = {
    JOB_CKPT_SERVER_OPTS(struct import_config, "SHOAL_IMPORT", "that starts from the weights"),
    { "--model", "SHOAL_IMPORT_MODEL", S(model_path), "",
      "the weights (required): llm.c's checkpoint (gpt2_124M.bin, ...), Hugging Face's model.safetensors, or "
      "for a Llama job its model.safetensors.index.json with the shards beside it" },
    { "--config", "SHOAL_IMPORT_CONFIG", S(config_path), "",
      "a safetensors file's config.json, checked against the job; empty: config.json beside --model if there "
      "is one, else the job's model" },
    { "--tokenizer", "SHOAL_IMPORT_TOKENIZER", S(tokenizer_dir), "",
      "folder of the model's tokenizer.json, tokenizer_config.json and special_tokens_map.json, kept with the "
      "weights for export to write beside them; empty: --model's folder when it holds tokenizer.json" },
    { "--tmp-dir", "SHOAL_IMPORT_TMP_DIR", S(src.tmp_dir), "/tmp", "where stage files are kept while uploading" },
};
#undef S
#define N_IMPORT_OPTS (sizeof import_opts / sizeof import_opts[0])

static const char import_usage[] =
    "usage: shoal-agent import --job ID --model FILE [options]\n\n"
    "Makes a checkpoint the starting weights of job ID, which must not have\n"
    "been scheduled yet: GPT-2's (llm.c's gpt2_124M.bin family, or Hugging\n"
    "Face's model.safetensors with its config.json) or a Llama's (Hugging\n"
    "Face's LlamaForCausalLM: model.safetensors or model.safetensors.index.json\n"
    "and its shards, with its config.json).  The model is checked against the\n"
    "job's, split into its stages and uploaded as its step-0 checkpoint.  The\n"
    "job's context may be shorter than the file's.  Prints each stage file's\n"
    "layers, size and SHA-256.\n\n";

/* What the job trains, from GET /v1/jobs/{id}. */
struct import_job {
    struct model_config model;
    int stages;
};

static void model_text(const struct model_config *m, char *buf, size_t len)
{
    snprintf(buf, len, "architecture %s, vocab_size %d, context_length %d, d_model %d, heads %d, layers %d",
             model_families[m->arch].name, m->vocab, m->context, m->d_model, m->heads, m->layers);
}

/* Fetches the job and checks it can still be given starting weights. */
static int import_job_get(const struct ctl *c, long job, struct import_job *out, struct shoal_err *err)
{
    char path[64];
    json_t *doc = NULL;
    json_int_t P = 0;
    struct shoal_err merr;
    const char *state = NULL;
    int rc = -1;
    snprintf(path, sizeof path, "/v1/jobs/%ld", job);
    if (ctl_call_retry(c, "GET", path, NULL, IMPORT_CALL_S, IMPORT_CALL_S, &doc, err) != 0)
        goto out;
    if (json_unpack(doc, "{s:s, s:{s:{s:I}}}", "state", &state, "spec", "parallelism", "stages", &P) != 0 ||
        model_json_parse(json_object_get(json_object_get(doc, "spec"), "model"), "spec.model", &out->model,
                         &merr) != 0 ||
        P < 1 || P > IMPORT_STAGES_MAX || out->model.layers < P) {
        err_set(err, 502, "bad_answer", NULL, "job %ld's spec has no usable model and parallelism.stages", job);
        goto out;
    }
    if (strcmp(state, "pending") != 0) {
        err_set(err, 409, "conflict", "--job", "job %ld is %s: starting weights can be given only before a job's "
                "first schedule", job, state);
        goto out;
    }
    if (json_is_object(json_object_get(json_object_get(doc, "spec"), "resume_from"))) {
        err_set(err, 409, "conflict", "--job", "job %ld starts from another job's checkpoint (resume_from); "
                "create it without resume_from to start it from imported weights", job);
        goto out;
    }
    out->stages = (int)P;
    rc = 0;
out:
    json_decref(doc);
    return rc;
}

/* The text of a JSON file (a config.json or an index) of at most `max`
 * bytes: *text malloc'd, *len bytes.  `opt` names the option in errors. */
static int read_text(const char *path, size_t max, const char *opt, char **text, size_t *len, struct shoal_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, 2, "invalid_config", opt, "cannot open %s: %s", path, strerror(errno));
    *text = malloc(max);
    *len = *text ? fread(*text, 1, max, f) : 0;
    int bad = !*text || ferror(f) || *len == max;
    fclose(f);
    if (!bad)
        return 0;
    if (!*text || *len == max)
        err_set(err, 422, "bad_model", opt, "%s: %s %zu bytes", path, !*text ? "out of memory for" : "larger than the",
                max - 1);
    else
        err_set(err, 422, "bad_model", opt, "%s: %s", path, strerror(errno));
    free(*text);
    *text = NULL;
    return -1;
}

/* --config, else the config.json beside --model; "" when neither is. */
static void config_path(const struct import_config *cfg, char *path, size_t cap)
{
    if (cfg->config_path[0]) {
        snprintf(path, cap, "%s", cfg->config_path);
        return;
    }
    const char *slash = strrchr(cfg->model_path, '/');
    int dir_len = slash ? (int)(slash - cfg->model_path) + 1 : 0;
    snprintf(path, cap, "%.*sconfig.json", dir_len, cfg->model_path);
    if (access(path, F_OK) != 0)
        path[0] = '\0';
}

/* The heads a safetensors file is read with: --config's n_head, else the
 * config.json beside the model's file when there is one, else the job's.
 * *cfg_model gets the config's model (vocab 0 when no config was read),
 * got->config its text. */
static int import_heads(const struct import_config *cfg, const struct import_job *job, int *heads,
                        struct model_config *cfg_model, struct import_read_out *got, struct shoal_err *err)
{
    char path[PATH_MAX + 16];
    struct kern_err ke = {{0}};
    memset(cfg_model, 0, sizeof *cfg_model);
    *heads = job->model.heads;
    config_path(cfg, path, sizeof path);
    if (!path[0])
        return 0;   /* none beside it: the job's heads */
    if (read_text(path, IMPORT_CONFIG_MAX, "--config", &got->config, &got->config_len, err) != 0)
        return -1;
    if (kern_gpt2_config_read(got->config, got->config_len, cfg_model, &ke) != 0)
        return err_set(err, 422, "bad_model", "--config", "%s: %s", path, ke.msg);
    *heads = cfg_model->heads;
    return 0;
}

/* Hugging Face weights of a family whose row names its tensors (Llama):
 * config.json (when there is one) checked against the job's model, then
 * --model, a model.safetensors or a model.safetensors.index.json and the
 * shards beside it, read in the job's model's shapes. */
static int import_read_hf(const struct import_config *cfg, const struct import_job *job, struct model_config *model,
                          float **params, struct import_read_out *got, struct shoal_err *err)
{
    char path[PATH_MAX + 16], *text = NULL;
    const char *file_names[KERN_HF_FILES_MAX];
    char (*paths)[PATH_MAX + KERN_HF_FILE_MAX] = NULL;
    FILE **files = NULL;
    struct kern_hf_index *ix = NULL;
    struct kern_err ke = {{0}};
    size_t len;
    int n = 0, rc = -1;
    config_path(cfg, path, sizeof path);
    if (path[0]) {
        struct model_config c;
        if (read_text(path, IMPORT_CONFIG_MAX, "--config", &got->config, &got->config_len, err) != 0)
            return -1;
        if (kern_llama_config_read(got->config, got->config_len, &c, &ke) != 0)
            return err_set(err, 422, "bad_model", "--config", "%s: %s", path, ke.msg);
        got->file_context = c.context;
        c.context = job->model.context;   /* rotary positions: any context works */
        if (!model_config_equal(&c, &job->model)) {
            char a[200], b[200];
            model_config_text(&c, a, sizeof a);
            model_config_text(&job->model, b, sizeof b);
            return err_set(err, 422, "model_mismatch", "--config", "%s describes %s; the job trains %s (every "
                           "field must match): nothing was uploaded", path, a, b);
        }
    }
    size_t ml = strlen(cfg->model_path);
    int sharded = ml > 11 && strcmp(cfg->model_path + ml - 11, ".index.json") == 0;
    if (!(ix = calloc(1, sizeof *ix)) || !(paths = calloc(KERN_HF_FILES_MAX, sizeof *paths)) ||
        !(files = calloc(KERN_HF_FILES_MAX, sizeof *files))) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    if (sharded) {
        if (read_text(cfg->model_path, 16u << 20, "--model", &text, &len, err) != 0)
            goto out;
        if (kern_hf_index_read(text, len, ix, &ke) != 0) {
            err_set(err, 422, "bad_model", "--model", "%s: %s", cfg->model_path, ke.msg);
            goto out;
        }
        const char *slash = strrchr(cfg->model_path, '/');
        int dir_len = slash ? (int)(slash - cfg->model_path) + 1 : 0;
        for (int i = 0; i < ix->n_files; i++)
            snprintf(paths[i], sizeof paths[i], "%.*s%s", dir_len, cfg->model_path, ix->files[i]);
        n = ix->n_files;
    } else {
        snprintf(paths[0], sizeof paths[0], "%s", cfg->model_path);
        n = 1;
    }
    for (int i = 0; i < n; i++) {
        file_names[i] = paths[i];
        if (!(files[i] = fopen(paths[i], "rb"))) {
            err_set(err, 2, "invalid_config", "--model", "cannot open %s: %s", paths[i], strerror(errno));
            goto out;
        }
    }
    if (kern_hf_read(&job->model, files, file_names, n, params, &ke) != 0) {
        err_set(err, 422, "bad_model", "--model", "%s", ke.msg);
        goto out;
    }
    *model = job->model;
    if (!got->file_context)
        got->file_context = model->context;   /* no config.json: nothing says another */
    rc = 0;
out:
    for (int i = 0; files && i < n; i++)
        if (files[i])
            fclose(files[i]);
    free(files);
    free(paths);
    free(ix);
    free(text);
    return rc;
}

/* Reads --model in whichever of the two formats it is (llm.c's files
 * start with their magic number).  *params is the malloc'd whole model. */
static int import_read(const struct import_config *cfg, const struct import_job *job, struct model_config *model,
                       float **params, struct import_read_out *got, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    struct model_config cfg_model;
    int32_t magic = 0;
    int heads, rc = -1;
    FILE *f = fopen(cfg->model_path, "rb");
    if (!f)
        return err_set(err, 2, "invalid_config", "--model", "cannot open %s: %s", cfg->model_path, strerror(errno));
    int llmc = fread(&magic, sizeof magic, 1, f) == 1 && magic == KERN_LLMC_MAGIC;
    if (fseek(f, 0, SEEK_SET) != 0) {
        err_set(err, 2, "invalid_config", "--model", "%s is not a seekable file", cfg->model_path);
        goto out;
    }
    if (llmc) {
        if (kern_llmc_read_file(f, model, params, &ke) != 0)
            goto bad;
    } else if (model_families[job->model.arch].blocks != MODEL_BLOCKS_GPT2) {   /* GPT-2's: their own reader */
        rc = import_read_hf(cfg, job, model, params, got, err);
        goto out;
    } else {
        if (import_heads(cfg, job, &heads, &cfg_model, got, err) != 0)
            goto out;
        if (kern_safetensors_read_file(f, heads, model, params, &ke) != 0)
            goto bad;
        if (cfg_model.vocab && (cfg_model.vocab != model->vocab || cfg_model.context != model->context ||
                                cfg_model.d_model != model->d_model || cfg_model.layers != model->layers)) {
            char a[160], b[160];
            model_text(&cfg_model, a, sizeof a);
            model_text(model, b, sizeof b);
            err_set(err, 422, "bad_model", "--config", "the config says %s; %s holds %s", a, cfg->model_path, b);
            free(*params);
            *params = NULL;
            goto out;
        }
    }
    got->file_context = model->context;
    rc = 0;
    goto out;
bad:
    err_set(err, 422, "bad_model", "--model", "%s: %s", cfg->model_path, ke.msg);
out:
    fclose(f);
    return rc;
}

/* --tokenizer, else --model's folder when it holds tokenizer.json; "" when
 * neither. */
static void tokenizer_dir(const struct import_config *cfg, char *dir, size_t cap)
{
    char probe[PATH_MAX + 32];
    if (cfg->tokenizer_dir[0]) {
        snprintf(dir, cap, "%s", cfg->tokenizer_dir);
        return;
    }
    const char *slash = strrchr(cfg->model_path, '/');
    snprintf(dir, cap, "%.*s", slash ? (int)(slash - cfg->model_path) : 1, slash ? cfg->model_path : ".");
    snprintf(probe, sizeof probe, "%s/tokenizer.json", dir);
    if (access(probe, F_OK) != 0)
        dir[0] = '\0';
}

/* The source kept with the checkpoint (hf_source.h): the config.json the
 * import read and the tokenizer files of --tokenizer (each that is there;
 * --tokenizer given must hold tokenizer.json).  *source NULL when there
 * is nothing to keep. */
static int import_source(const struct import_config *cfg, const struct import_read_out *got, char **source,
                         size_t *source_len, int *n_tokenizer, struct shoal_err *err)
{
    const char *names[8];
    char *texts[8] = {NULL}, dir[PATH_MAX], path[PATH_MAX + 32];
    size_t lens[8];
    struct kern_err ke = {{0}};
    int n = 0, rc = -1;
    *source = NULL;
    *n_tokenizer = 0;
    if (got->config) {
        names[n] = "config.json", texts[n] = got->config, lens[n++] = got->config_len;
    }
    tokenizer_dir(cfg, dir, sizeof dir);
    for (int k = 1; dir[0] && kern_hf_source_files[k]; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, kern_hf_source_files[k]);
        if (access(path, F_OK) != 0) {
            if (k == 1) {
                err_set(err, 2, "invalid_config", "--tokenizer", "%s has no tokenizer.json", dir);
                goto out;
            }
            continue;
        }
        if (read_text(path, IMPORT_TOKENIZER_MAX, "--tokenizer", &texts[n], &lens[n], err) != 0)
            goto out;
        names[n++] = kern_hf_source_files[k];
        (*n_tokenizer)++;
    }
    if (n > 0 && kern_hf_source_pack(names, (const char *const *)texts, lens, n, source, source_len, &ke) != 0) {
        err_set(err, 422, "bad_model", "--tokenizer", "%s/%s", dir, ke.msg);   /* the config was read already */
        goto out;
    }
    rc = 0;
out:
    for (int i = got->config ? 1 : 0; i < n; i++)   /* the config's text is got's */
        free(texts[i]);
    return rc;
}

/* Checks the file's model against the job's and crops the position
 * embedding to the job's context where it is shorter: wpe is the second
 * tensor of the whole-model buffer (model_io.h), so the rows past the
 * job's context are cut out and the rest moves up.  *model becomes the
 * job's. */
static int import_fit(const struct import_job *job, const char *file, struct model_config *model, float *params,
                      struct shoal_err *err)
{
    const struct model_config *want = &job->model;
    if (model->arch != want->arch || model->vocab != want->vocab || model->d_model != want->d_model ||
        model->heads != want->heads ||
        model->layers != want->layers || model->context < want->context) {
        char a[160], b[160];
        model_text(model, a, sizeof a);
        model_text(want, b, sizeof b);
        return err_set(err, 422, "model_mismatch", "--model", "%s holds a model of %s; the job trains %s (the "
                       "sizes must be equal, the job's context_length at most the file's): nothing was uploaded",
                       file, a, b);
    }
    size_t C = (size_t)model->d_model, wpe = (size_t)model->vocab * C;
    size_t n = kern_model_param_count(model), cut = (size_t)(model->context - want->context) * C;
    size_t kept_end = wpe + (size_t)want->context * C;
    memmove(params + kept_end, params + kept_end + cut, (n - kept_end - cut) * sizeof *params);
    *model = *want;
    return 0;
}

/* The layers stage s of `stages` holds in an even split of `layers`. */
static void import_split(int layers, int stages, int s, struct kern_stage_spec *sp)
{
    *sp = (struct kern_stage_spec){ .layer_start = (int)((int64_t)layers * s / stages),
                                    .layer_end = (int)((int64_t)layers * (s + 1) / stages), .first = s == 0,
                                    .last = s == stages - 1, .micro_batch = 1, .seq_len = 1, .in_flight = 1 };
}

/* Writes stage s of the whole model as a stage file (AdamW step 0, zero
 * moments; stage 0's with the source, when there is one) into `file`
 * (created by the caller) and hashes it. */
static int import_stage_file(const struct model_config *m, const float *whole, const struct kern_stage_spec *sp,
                             const char *source, size_t source_len, const char *file, char sha[SHA256_HEX],
                             struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    struct kern_device cpu = { KERN_CPU, 0 };
    struct kern_stage *st = NULL;
    float *buf = NULL;
    FILE *f = NULL;
    int rc = -1;
    if (kern_stage_new(&cpu, m, sp, &st, &ke) != 0)
        goto bad;
    if (!(buf = malloc(kern_stage_param_count(st) * sizeof *buf))) {
        err_set(err, 500, "internal", NULL, "out of memory for a stage of %zu parameters",
                kern_stage_param_count(st));
        goto out;
    }
    if (kern_model_split(m, whole, sp, buf, &ke) != 0 || kern_stage_write(st, KERN_PARAMS, buf, &ke) != 0 ||
        (sp->first && kern_stage_set_source(st, source, source_len, &ke) != 0))
        goto bad;
    if (!(f = fopen(file, "wb"))) {
        err_set(err, 500, "io_error", "--tmp-dir", "cannot write %s: %s", file, strerror(errno));
        goto out;
    }
    int saved = kern_stage_save(st, f, &ke), closed = fclose(f);
    f = NULL;
    if (saved != 0 || closed != 0) {
        err_set(err, 500, "io_error", "--tmp-dir", "cannot write %s: %s", file, saved ? ke.msg : strerror(errno));
        goto out;
    }
    rc = sha256_file_hex(file, sha, err);
    goto out;
bad:
    err_set(err, 500, "internal", NULL, "building layers " LAYER_RANGE_FMT ": %s", LAYER_RANGE(sp->layer_start, sp->layer_end),
            ke.msg);
out:
    if (f)
        fclose(f);
    free(buf);
    kern_stage_free(st);
    return rc;
}

/* Builds stage s's file and PUTs it as the job's step-0 checkpoint. */
static int import_stage(const struct ctl *c, const struct import_config *cfg, const struct import_job *job,
                        const float *whole, const char *source, size_t source_len, int s, FILE *out,
                        struct shoal_err *err)
{
    char file[PATH_MAX + 32], path[160], sha[SHA256_HEX];
    struct kern_stage_spec sp;
    json_t *ans = NULL;
    int fd, rc = -1;
    import_split(job->model.layers, job->stages, s, &sp);
    snprintf(file, sizeof file, "%s/shoal-import-XXXXXX", cfg->src.tmp_dir);
    if ((fd = mkstemp(file)) < 0)
        return err_set(err, 2, "invalid_config", "--tmp-dir", "cannot create a file in %s: %s", cfg->src.tmp_dir,
                       strerror(errno));
    close(fd);
    if (import_stage_file(&job->model, whole, &sp, source, source_len, file, sha, err) != 0)
        goto out;
    snprintf(path, sizeof path, "/v1/jobs/%ld/checkpoints/0/stages/%d?layer_start=%d&layer_end=%d", cfg->src.job,
             s, sp.layer_start, sp.layer_end);
    if (ctl_put_file(c, path, file, sha, IMPORT_UPLOAD_DEADLINE_S, &ans, err) != 0) {
        struct shoal_err why = *err;   /* err_set must not read what it writes */
        err_set(err, why.status, why.code, why.field, "the server refused stage %d's file: %s", s, why.message);
        goto out;
    }
    fprintf(out, "stage %d layers " LAYER_RANGE_FMT " %lld bytes sha256 %s\n", s, LAYER_RANGE(sp.layer_start, sp.layer_end),
            (long long)json_integer_value(json_object_get(ans, "bytes")), sha);
    fflush(out);
    rc = 0;
out:
    json_decref(ans);
    unlink(file);
    return rc;
}

static int import_run(const void *config, FILE *out, struct shoal_err *err)
{
    const struct import_config *cfg = config;
    struct import_job job;
    struct model_config model;
    struct import_read_out got = {0};
    struct ctl c;
    float *whole = NULL;
    char *source = NULL;
    size_t source_len = 0;
    int rc = -1, n_tokenizer;
    if (!cfg->model_path[0])
        return err_set(err, 2, "invalid_config", "--model", "--model is required: llm.c's gpt2_124M.bin (or "
                       "another of its checkpoints) or a Hugging Face model.safetensors");
    if (job_ckpt_connect(&cfg->src, "import into", &c, err) != 0 || import_job_get(&c, cfg->src.job, &job, err) != 0)
        return -1;
    if (import_read(cfg, &job, &model, &whole, &got, err) != 0 ||
        import_source(cfg, &got, &source, &source_len, &n_tokenizer, err) != 0 ||
        import_fit(&job, cfg->model_path, &model, whole, err) != 0)
        goto out;
    int tied = model.tied || kern_model_head_tied(&model, whole);
    fprintf(stderr, "shoal-agent import: %s into job %ld: %s, %d layers, d_model %d, heads %d, vocab %d, context %d "
            "(the file's %d), head %s, %d stage file(s)\n", cfg->model_path, cfg->src.job,
            model_families[model.arch].name, model.layers, model.d_model, model.heads, model.vocab, model.context,
            got.file_context, tied ? "tied to the embedding" : "untied", job.stages);
    if (tied)
        fprintf(stderr, "shoal-agent import: the head is tied to the embedding: lm_head is wte (%d x %d), %s\n",
                model.vocab, model.d_model, model.tied ? "one matrix trained from both ends, and an export writes "
                "no lm_head.weight (tie_word_embeddings true)" : "a copy that GPT-2 training then trains apart, so "
                "an export writes lm_head.weight (tie_word_embeddings false)");
    fprintf(stderr, "shoal-agent import: kept for export: %s, %d tokenizer file(s)\n",
            got.config ? "config.json" : "no config.json", n_tokenizer);
    for (int s = 0; s < job.stages; s++)
        if (import_stage(&c, cfg, &job, whole, source, source_len, s, out, err) != 0)
            goto out;
    fprintf(out, "job %ld starts from %s\n", cfg->src.job, cfg->model_path);
    rc = 0;
out:
    free(whole);
    free(got.config);
    free(source);
    return rc;
}

int import_main(int argc, char **argv, int first, FILE *out)
{
    static const struct job_ckpt_command cmd = { "import", import_usage, import_opts, N_IMPORT_OPTS,
                                                 sizeof(struct import_config), import_run };
    return job_ckpt_main(&cmd, argc, argv, first, out);
}
