/* job_ckpt.c - a job's checkpoint from the server as cpu stages (job_ckpt.h). */
#include "job_ckpt.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define JOB_CKPT_CALL_S 30            /* s for one JSON call */
#define JOB_CKPT_FILE_DEADLINE_S 300  /* s to fetch one stage file, retries included */
#define JOB_CKPT_STAGES_MAX 1024      /* as the server allows */

int job_ckpt_connect(const struct job_ckpt_source *src, const char *verb, struct ctl *c, struct shoal_err *err)
{
    memset(c, 0, sizeof *c);
    if (src->job <= 0)
        return err_set(err, 2, "invalid_config", "--job", "--job is required: the id of the job to %s", verb);
    if (ctl_token_load(src->admin_token, src->admin_token_file, "a job's checkpoints are the operator's to read: "
                       "pass --admin-token or --admin-token-file (the server's <data-dir>/admin.token)", c->token,
                       err) != 0) {
        struct shoal_err why = *err;   /* err_set must not read what it writes */
        return err_set(err, 2, why.code, "--admin-token", "%s", why.message);
    }
    snprintf(c->url, sizeof c->url, "%s", src->server_url);
    snprintf(c->ca_file, sizeof c->ca_file, "%s", src->ca_file);
    size_t n = strlen(c->url);
    while (n > 0 && c->url[n - 1] == '/')
        c->url[--n] = '\0';
    return 0;
}

/* GETs `path`; 0 with *out set, else -1 with err set. */
static int get_json(const struct ctl *c, const char *path, json_t **out, struct shoal_err *err)
{
    return ctl_call_retry(c, "GET", path, NULL, JOB_CKPT_CALL_S, JOB_CKPT_CALL_S, out, err);
}

int job_ckpt_find(const struct ctl *c, const struct job_ckpt_source *src, struct job_ckpt *ck,
                  struct shoal_err *err)
{
    char path[96];
    json_t *job = NULL, *list = NULL;
    json_int_t P = 0;
    const char *fmt = NULL;
    int rc = -1;
    snprintf(path, sizeof path, "/v1/jobs/%ld", src->job);
    if (get_json(c, path, &job, err) != 0)
        goto out;
    if (json_unpack(job, "{s:{s:{s:I}, s:{s:s}}}", "spec", "parallelism", "stages", &P, "data", "format", &fmt) != 0 ||
        P < 1 || P > JOB_CKPT_STAGES_MAX || strlen(fmt) >= sizeof ck->format) {
        err_set(err, 502, "bad_answer", NULL, "job %ld's spec has no usable parallelism.stages and data.format",
                src->job);
        goto out;
    }
    snprintf(path, sizeof path, "/v1/jobs/%ld/checkpoints", src->job);
    if (get_json(c, path, &list, err) != 0)
        goto out;
    json_t *entry, *all = json_object_get(list, "checkpoints");
    size_t i;
    ck->step = -1;
    json_array_foreach(all, i, entry) {
        json_int_t s = json_integer_value(json_object_get(entry, "step"));
        if (json_is_true(json_object_get(entry, "complete")) && (src->step == 0 || s == src->step)) {
            ck->step = s;   /* newest first: the first match is the one */
            break;
        }
    }
    if (ck->step < 0) {
        if (src->step)
            err_set(err, 404, "not_found", "step", "job %ld has no complete checkpoint at step %ld; "
                    "GET /v1/jobs/%ld/checkpoints lists them", src->job, src->step, src->job);
        else
            err_set(err, 404, "not_found", "job", "job %ld has no complete checkpoint yet (one is written every "
                    "checkpoint_interval steps and at the end)", src->job);
        goto out;
    }
    ck->stages = (int)P;
    snprintf(ck->format, sizeof ck->format, "%s", fmt);
    json_int_t V = json_integer_value(json_object_get(json_object_get(json_object_get(job, "spec"), "model"),
                                                      "vocab_size"));
    ck->spec_vocab = V > 0 && V <= INT_MAX ? (int)V : 0;
    rc = 0;
out:
    json_decref(job);
    json_decref(list);
    return rc;
}

/* Fetches stage s's file and reads it: into a cpu stage with one
 * micro-batch of one sequence of seq_len tokens (0: the context), or
 * (params set) its parameters alone. */
static int load_stage(const struct ctl *c, const struct job_ckpt_source *src, int64_t step, int s, int seq_len,
                      const char *progress, struct kern_stage **out, float **params, struct kern_stage_spec *sp,
                      struct model_config *model, struct job_ckpt *ck, struct shoal_err *err)
{
    char file[PATH_MAX + 64], path[128];
    struct kern_err ke = {{0}};
    struct kern_device cpu = { KERN_CPU, 0 };
    FILE *f = NULL;
    uint64_t n;
    int fd, rc = -1;
    *sp = (struct kern_stage_spec){ .micro_batch = 1, .in_flight = 1 };
    snprintf(file, sizeof file, "%s/shoal-ckpt-XXXXXX", src->tmp_dir);
    if ((fd = mkstemp(file)) < 0)
        return err_set(err, 500, "io_error", "tmp_dir", "cannot create a file in %s: %s", src->tmp_dir,
                       strerror(errno));
    close(fd);
    snprintf(path, sizeof path, "/v1/jobs/%ld/checkpoints/%lld/stages/%d", src->job, (long long)step, s);
    if (ctl_get_file(c, path, file, JOB_CKPT_FILE_DEADLINE_S, err) != 0)
        goto out;
    if (!(f = fopen(file, "rb"))) {
        err_set(err, 500, "io_error", NULL, "cannot open %s: %s", file, strerror(errno));
        goto out;
    }
    if (progress && fseek(f, 0, SEEK_END) == 0) {
        fprintf(stderr, "shoal-agent %s: stage %d: %.1f MB fetched; building it\n", progress, s, ftell(f) / 1e6);
        rewind(f);
    }
    if (params) {
        if (kern_stage_file_params(f, model, sp, params, &n, &ke) != 0 ||
            (s == 0 && kern_stage_file_source(f, &ck->source, &ck->source_len, &ke) != 0))
            goto bad;
    } else {
        if (kern_stage_file_peek(f, model, sp, NULL, &ke) != 0)
            goto bad;
        sp->seq_len = seq_len > 0 && seq_len < model->context ? seq_len : model->context;
        if (kern_stage_new(&cpu, model, sp, out, &ke) != 0 || kern_stage_load(*out, f, &ke) != 0)
            goto bad;
    }
    rc = 0;
    goto out;
bad:
    err_set(err, 422, "bad_checkpoint", NULL, "stage %d of job %ld at step %lld: %s", s, src->job,
            (long long)step, ke.msg);
out:
    if (f)
        fclose(f);
    unlink(file);
    if (rc != 0 && out) {
        kern_stage_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Checks that the stages chain: same model, layers back to back, first
 * and last where they belong. */
static int check_chain(const struct job_ckpt *ck, const struct kern_stage_spec *specs,
                       const struct model_config *models, struct shoal_err *err)
{
    int next_layer = 0;
    for (int s = 0; s < ck->stages; s++) {
        const struct kern_stage_spec *sp = &specs[s];
        if (!model_config_equal(&models[s], &models[0]) || sp->layer_start != next_layer ||
            sp->first != (s == 0) || sp->last != (s == ck->stages - 1))
            return err_set(err, 422, "bad_checkpoint", NULL, "the checkpoint's stage %d (layer_start %d, "
                           "layer_end %d) does not follow stage %d of the same model", s, sp->layer_start,
                           sp->layer_end, s - 1);
        next_layer = sp->layer_end;
    }
    if (next_layer != models[0].layers)
        return err_set(err, 422, "bad_checkpoint", NULL, "the checkpoint's stages hold %d of the model's %d layers",
                       next_layer, models[0].layers);
    return 0;
}

static int load_all(const struct ctl *c, const struct job_ckpt_source *src, int seq_len, int params_only,
                    struct job_ckpt *ck, struct shoal_err *err)
{
    struct model_config *models = calloc((size_t)ck->stages, sizeof *models);
    struct kern_stage_spec *specs = calloc((size_t)ck->stages, sizeof *specs);
    int rc = -1;
    if (!models || !specs || !(params_only ? (ck->params = calloc((size_t)ck->stages, sizeof *ck->params)) != NULL
                                           : (ck->st = calloc((size_t)ck->stages, sizeof *ck->st)) != NULL)) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    double start = ctl_now();
    if (ck->progress)
        fprintf(stderr, "shoal-agent %s: loading job %ld's checkpoint of step %lld: %d stage file(s) from the "
                "server\n", ck->progress, src->job, (long long)ck->step, ck->stages);
    for (int s = 0; s < ck->stages; s++) {
        if (load_stage(c, src, ck->step, s, seq_len, ck->progress, params_only ? NULL : &ck->st[s],
                       params_only ? &ck->params[s] : NULL, &specs[s], &models[s], ck, err) != 0)
            goto out;
        if (ck->progress)
            fprintf(stderr, "shoal-agent %s: stage %d built (%d of %d, %.1f s so far)\n", ck->progress, s,
                    s + 1, ck->stages, ctl_now() - start);
    }
    if (check_chain(ck, specs, models, err) != 0)
        goto out;
    ck->model = models[0];
    if (params_only) {
        ck->spec = specs;
        specs = NULL;
    }
    rc = 0;
out:
    free(models);
    free(specs);
    return rc;
}

int job_ckpt_load(const struct ctl *c, const struct job_ckpt_source *src, int seq_len, struct job_ckpt *ck,
                  struct shoal_err *err)
{
    return load_all(c, src, seq_len, 0, ck, err);
}

int job_ckpt_load_params(const struct ctl *c, const struct job_ckpt_source *src, struct job_ckpt *ck,
                         struct shoal_err *err)
{
    return load_all(c, src, 0, 1, ck, err);
}

void job_ckpt_free(struct job_ckpt *ck)
{
    for (int s = 0; ck->st && s < ck->stages; s++)
        kern_stage_free(ck->st[s]);
    free(ck->st);
    ck->st = NULL;
    for (int s = 0; ck->params && s < ck->stages; s++)
        free(ck->params[s]);
    free(ck->params);
    free(ck->spec);
    ck->params = NULL;
    ck->spec = NULL;
    free(ck->source);
    ck->source = NULL;
    ck->source_len = 0;
}

int job_ckpt_main(const struct job_ckpt_command *cmd, int argc, char **argv, int first, FILE *out)
{
    struct shoal_err err = {0};
    void *cfg = calloc(1, cmd->config_size);
    int rc = cfg ? opts_load(cmd->opts, cmd->n_opts, cfg, argc, argv, first, &err)
                 : err_set(&err, 1, "internal", NULL, "out of memory");
    if (rc == 1) {
        fputs(cmd->usage, out);
        fputs("Every option can also be set by its environment variable; flags win.\n\n", out);
        opts_usage(cmd->opts, cmd->n_opts, out);
        rc = 0;
    } else if (rc == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        rc = err_set(&err, 1, "internal", NULL, "cannot initialise libcurl");
    } else if (rc == 0) {
        rc = cmd->run(cfg, out, &err);
        curl_global_cleanup();
    }
    free(cfg);
    if (rc != 0) {
        fprintf(stderr, "shoal-agent %s: %s\n", cmd->name, err.message);
        return err.status == 2 ? 2 : 1;
    }
    return 0;
}
