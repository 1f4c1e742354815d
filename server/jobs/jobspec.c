#include "jobspec.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../../common/codec.h"
#include "../../common/jsonv.h"
#include "../../common/model_json.h"

static const char *const schedules[] = { "gpipe", "1f1b", NULL };
static const char *const data_formats[] = { "llmc", "text", NULL };
static const char *const codecs[] = { "f32", "bf16", "int8", NULL };   /* common/codec.h */
static const char *const syncs[] = { "every_step", "diloco", NULL };
#define TEXT_VOCAB 256   /* "text" data is read byte by byte */

#define F(f) offsetof(struct job_spec, f)
#define SZ(f) sizeof(((struct job_spec *)0)->f)
/* name, type, required, nullable, min, max, offset, size, choices, fields */
static const struct jv_field parallelism_fields[] = {
    { "stages", JV_INT, 1, 0, 1, 1024, F(stages), 0, NULL, NULL },
    { "replicas", JV_INT, 1, 0, 1, 4096, F(replicas), 0, NULL, NULL },
    { "micro_batches", JV_INT, 1, 0, 1, 4096, F(micro_batches), 0, NULL, NULL },
    { "micro_batch_size", JV_INT, 1, 0, 1, 65536, F(micro_batch_size), 0, NULL, NULL },
    { "schedule", JV_STR, 0, 0, 1, 7, F(schedule), SZ(schedule), schedules, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field training_fields[] = {
    { "steps", JV_INT, 1, 0, 1, 1e9, F(steps), 0, NULL, NULL },
    { "learning_rate", JV_NUM, 1, 0, 1e-12, 10, F(learning_rate), 0, NULL, NULL },
    { "warmup_steps", JV_INT, 0, 0, 0, 1e9, F(warmup_steps), 0, NULL, NULL },
    { "weight_decay", JV_NUM, 0, 0, 0, 10, F(weight_decay), 0, NULL, NULL },
    { "grad_clip", JV_NUM, 0, 0, 0, 1e6, F(grad_clip), 0, NULL, NULL },
    { "seed", JV_INT, 0, 0, 0, 9007199254740991.0, F(seed), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field data_fields[] = {
    { "path", JV_STR, 1, 0, 1, 511, F(data_path), SZ(data_path), NULL, NULL },
    { "format", JV_STR, 0, 0, 1, 15, F(data_format), SZ(data_format), data_formats, NULL },
    { "sha256", JV_STR, 0, 1, 64, 64, F(data_sha256), SZ(data_sha256), NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field resume_fields[] = {
    { "job_id", JV_INT, 1, 0, 1, 9e18, F(resume_job_id), 0, NULL, NULL },
    { "step", JV_INT, 1, 0, 0, 1e9, F(resume_step), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field communication_fields[] = {
    { "stage_link", JV_STR, 0, 0, 1, 7, F(stage_link), SZ(stage_link), codecs, NULL },
    { "sync", JV_STR, 0, 0, 1, 15, F(sync), SZ(sync), syncs, NULL },
    { "inner_steps", JV_INT, 0, 0, 1, 1e9, F(inner_steps), 0, NULL, NULL },
    { "outer_learning_rate", JV_NUM, 0, 0, 1e-6, 10, F(outer_learning_rate), 0, NULL, NULL },
    { "outer_momentum", JV_NUM, 0, 0, 0, 0.999, F(outer_momentum), 0, NULL, NULL },
    { "sync_dtype", JV_STR, 0, 0, 1, 7, F(sync_dtype), SZ(sync_dtype), codecs, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field validation_fields[] = {
    { "path", JV_STR, 0, 1, 1, 511, F(val_path), SZ(val_path), NULL, NULL },
    { "format", JV_STR, 0, 0, 1, 15, F(val_format), SZ(val_format), data_formats, NULL },
    { "holdout", JV_NUM, 0, 1, 1e-6, 0.5, F(val_holdout), 0, NULL, NULL },
    { "sequences", JV_INT, 0, 0, 1, 65536, F(val_sequences), 0, NULL, NULL },
    { "sha256", JV_STR, 0, 1, 64, 64, F(val_sha256), SZ(val_sha256), NULL, NULL },
    { "eval_interval", JV_INT, 0, 0, 1, 1e9, F(eval_interval), 0, NULL, NULL },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
static const struct jv_field job_fields[] = {
    { "name", JV_STR, 0, 0, 1, 63, F(name), SZ(name), NULL, NULL },
    { "model", JV_OBJ, 1, 0, 0, 0, 0, 0, NULL, NULL },   /* model_json_parse */
    { "parallelism", JV_OBJ, 1, 0, 0, 0, 0, 0, NULL, parallelism_fields },
    { "training", JV_OBJ, 1, 0, 0, 0, 0, 0, NULL, training_fields },
    { "data", JV_OBJ, 1, 0, 0, 0, 0, 0, NULL, data_fields },
    { "checkpoint_interval", JV_INT, 0, 0, 0, 1e9, F(checkpoint_interval), 0, NULL, NULL },
    { "resume_from", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, resume_fields },
    { "communication", JV_OBJ, 0, 0, 0, 0, 0, 0, NULL, communication_fields },
    { "validation", JV_OBJ, 0, 1, 0, 0, 0, 0, NULL, validation_fields },
    { NULL, 0, 0, 0, 0, 0, 0, 0, NULL, NULL },
};
#undef F
#undef SZ

/* The smallest multiple of `every` at or above min(100, steps), or steps
 * when that is past the end: the default of an interval that must fall on
 * an outer step (the last step always is one). */
static int64_t default_interval(int64_t steps, int64_t every)
{
    int64_t want = steps < 100 ? steps : 100;
    int64_t at = (want + every - 1) / every * every;
    return at > steps ? steps : at;
}

/* communication: defaults and the relations between its fields. */
static int check_communication(struct job_spec *s, struct shoal_err *err)
{
    int diloco = strcmp(s->sync, "diloco") == 0;
    if (s->inner_steps < 0)
        s->inner_steps = diloco ? (s->steps < JOBSPEC_INNER_STEPS_DEFAULT ? s->steps : JOBSPEC_INNER_STEPS_DEFAULT) : 1;
    if (!diloco && s->inner_steps != 1)
        return err_set(err, 422, "invalid_field", "communication.inner_steps",
                       "communication.inner_steps applies to sync \"diloco\"; \"every_step\" syncs every step (1)");
    if (!diloco && strcmp(s->sync_dtype, "f32") != 0)
        return err_set(err, 422, "invalid_field", "communication.sync_dtype",
                       "communication.sync_dtype applies to sync \"diloco\"'s pseudo-gradients; \"every_step\" "
                       "sums f32 gradients");
    if (s->inner_steps > s->steps)
        return err_set(err, 422, "invalid_field", "communication.inner_steps",
                       "communication.inner_steps (%lld) must not exceed training.steps (%lld)",
                       (long long)s->inner_steps, (long long)s->steps);
    if (s->checkpoint_interval < 0)
        s->checkpoint_interval = default_interval(s->steps, s->inner_steps);
    if (diloco && s->checkpoint_interval % s->inner_steps != 0 && s->checkpoint_interval != s->steps)
        return err_set(err, 422, "invalid_field", "checkpoint_interval",
                       "under sync \"diloco\" checkpoints are taken at outer steps: checkpoint_interval (%lld) must "
                       "be a multiple of communication.inner_steps (%lld), training.steps, or 0",
                       (long long)s->checkpoint_interval, (long long)s->inner_steps);
    return 0;
}

/* validation: one source, its format, and intervals that fall on steps
 * whose weights all replicas share. */
static int check_validation(const json_t *body, struct job_spec *s, struct shoal_err *err)
{
    const json_t *v = json_object_get(body, "validation");
    s->has_validation = v && !json_is_null(v);
    if (!s->has_validation) {
        s->val_path[0] = s->val_format[0] = '\0';
        s->val_holdout = 0;
        s->val_sequences = s->eval_interval = 0;
        return 0;
    }
    if (!s->val_path[0] == !(s->val_holdout > 0))
        return err_set(err, 422, "invalid_field", "validation",
                       "validation needs exactly one of path (a second file) and holdout (the last fraction of "
                       "data.path, 0 < holdout <= 0.5)");
    if (!s->val_format[0])
        snprintf(s->val_format, sizeof s->val_format, "%s", s->data_format);
    if (s->val_holdout > 0 && s->val_sha256[0])
        return err_set(err, 422, "invalid_field", "validation.sha256",
                       "validation.sha256 names validation.path's manifest; a holdout is a part of data.path, "
                       "which data.sha256 names");
    if (s->val_holdout > 0 && strcmp(s->val_format, s->data_format) != 0)
        return err_set(err, 422, "invalid_field", "validation.format",
                       "validation.holdout is a part of data.path: its format is data.format (\"%s\")",
                       s->data_format);
    if (strcmp(s->val_format, "text") == 0 && s->model.vocab != TEXT_VOCAB)
        return err_set(err, 422, "invalid_field", "validation.format",
                       "validation.format \"text\" is read as bytes: model.vocab_size must be %d", TEXT_VOCAB);
    int64_t B = s->micro_batch_size;
    if (s->val_sequences < 0)
        s->val_sequences = (JOBSPEC_VAL_SEQUENCES_DEFAULT + B - 1) / B * B;
    if (s->val_sequences % B != 0)
        return err_set(err, 422, "invalid_field", "validation.sequences",
                       "validation.sequences (%lld) must be a multiple of parallelism.micro_batch_size (%lld): "
                       "they are evaluated in whole micro-batches", (long long)s->val_sequences, (long long)B);
    if (s->eval_interval < 0)
        s->eval_interval = default_interval(s->steps, s->inner_steps);
    if (s->eval_interval > s->steps)
        return err_set(err, 422, "invalid_field", "validation.eval_interval",
                       "validation.eval_interval must not exceed training.steps");
    if (s->eval_interval % s->inner_steps != 0 && s->eval_interval != s->steps)
        return err_set(err, 422, "invalid_field", "validation.eval_interval",
                       "under sync \"diloco\" replicas share their weights only after an outer step: "
                       "validation.eval_interval (%lld) must be a multiple of communication.inner_steps (%lld) or "
                       "training.steps",
                       (long long)s->eval_interval, (long long)s->inner_steps);
    return 0;
}

/* A manifest's SHA-256: 64 hex digits, lowercased in place; "" passes. */
static int sha256_field(char *hex, const char *field, struct shoal_err *err)
{
    for (char *c = hex; *c; c++) {
        if (*c >= 'A' && *c <= 'F')
            *c = (char)(*c - 'A' + 'a');
        else if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return err_set(err, 422, "invalid_field", field, "%s must be the 64 hex digits of a SHA-256 (sha256sum "
                           "dataset.json)", field);
    }
    return 0;
}

int jobspec_parse(const json_t *body, struct job_spec *spec, struct shoal_err *err)
{
    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "job");
    snprintf(spec->schedule, sizeof spec->schedule, "1f1b");
    snprintf(spec->data_format, sizeof spec->data_format, "llmc");
    snprintf(spec->stage_link, sizeof spec->stage_link, "%s", JOBSPEC_STAGE_LINK_DEFAULT);
    snprintf(spec->sync, sizeof spec->sync, "every_step");
    snprintf(spec->sync_dtype, sizeof spec->sync_dtype, "f32");
    spec->grad_clip = 1.0;
    spec->checkpoint_interval = -1;   /* absent: a default, in check_communication */
    spec->inner_steps = -1;           /* absent: by sync mode */
    spec->outer_learning_rate = JOBSPEC_OUTER_LR_DEFAULT;
    spec->outer_momentum = JOBSPEC_OUTER_MOMENTUM_DEFAULT;
    spec->val_sequences = spec->eval_interval = -1;
    if (jv_object(body, job_fields, "", spec, err) != 0 ||
        model_json_parse(json_object_get(body, "model"), "model", &spec->model, err) != 0)
        return -1;
    if (check_communication(spec, err) != 0 || check_validation(body, spec, err) != 0 ||
        sha256_field(spec->data_sha256, "data.sha256", err) != 0 ||
        sha256_field(spec->val_sha256, "validation.sha256", err) != 0)
        return -1;
    if (spec->model.layers < spec->stages)
        return err_set(err, 422, "invalid_field", "parallelism.stages",
                       "parallelism.stages (%lld) must not exceed model.layers (%d): each stage needs a layer",
                       (long long)spec->stages, spec->model.layers);
    if (spec->stages * spec->replicas > 65536)
        return err_set(err, 422, "invalid_field", "parallelism.replicas",
                       "stages x replicas must be at most 65536 tasklets");
    if (spec->warmup_steps > spec->steps)
        return err_set(err, 422, "invalid_field", "training.warmup_steps",
                       "training.warmup_steps must not exceed training.steps");
    if (spec->checkpoint_interval > spec->steps)
        return err_set(err, 422, "invalid_field", "checkpoint_interval",
                       "checkpoint_interval must not exceed training.steps (0 checkpoints only at the end)");
    if (strcmp(spec->data_format, "text") == 0 && spec->model.vocab != TEXT_VOCAB)
        return err_set(err, 422, "invalid_field", "model.vocab_size",
                       "data.format \"text\" is read as bytes: model.vocab_size must be %d", TEXT_VOCAB);
    if (spec->resume_job_id > 0 && spec->resume_step >= spec->steps)
        return err_set(err, 422, "invalid_field", "resume_from",
                       "resume_from.step (%lld) must be below training.steps (%lld)",
                       (long long)spec->resume_step, (long long)spec->steps);
    return 0;
}

int jobspec_check_paths(const struct job_spec *s, struct shoal_err *err)
{
    if (s->data_path[0] != '/')
        return err_set(err, 422, "invalid_field", "data.path",
                       "data.path ('%s') must be an absolute path: each agent opens it on its own machine, "
                       "where a relative one would depend on the agent's working directory", s->data_path);
    if (s->val_path[0] && s->val_path[0] != '/')
        return err_set(err, 422, "invalid_field", "validation.path",
                       "validation.path ('%s') must be an absolute path, as data.path", s->val_path);
    return 0;
}

int jobspec_from_document(const json_t *doc, struct job_spec *spec, struct shoal_err *err)
{
    const json_t *inner = json_object_get(doc, "spec");
    return jobspec_parse(inner ? inner : doc, spec, err);
}

json_t *jobspec_to_json(const struct job_spec *s)
{
    json_t *resume = s->resume_job_id > 0
        ? json_pack("{s:I, s:I}", "job_id", (json_int_t)s->resume_job_id, "step", (json_int_t)s->resume_step)
        : json_null();
    json_t *validation = s->has_validation
        ? json_pack("{s:o, s:s, s:o, s:I, s:I, s:o}", "path", s->val_path[0] ? json_string(s->val_path) : json_null(),
                    "format", s->val_format, "holdout", s->val_holdout > 0 ? json_real(s->val_holdout) : json_null(),
                    "sequences", (json_int_t)s->val_sequences, "eval_interval", (json_int_t)s->eval_interval,
                    "sha256", s->val_sha256[0] ? json_string(s->val_sha256) : json_null())
        : json_null();
    return json_pack(
        "{s:s, s:o, s:{s:I, s:I, s:I, s:I, s:s},"
        " s:{s:I, s:f, s:I, s:f, s:f, s:I}, s:{s:s, s:s, s:o}, s:I, s:o,"
        " s:{s:s, s:s, s:I, s:f, s:f, s:s}, s:o}",
        "name", s->name,
        "model", model_json(&s->model),
        "parallelism", "stages", (json_int_t)s->stages, "replicas", (json_int_t)s->replicas,
        "micro_batches", (json_int_t)s->micro_batches, "micro_batch_size", (json_int_t)s->micro_batch_size,
        "schedule", s->schedule,
        "training", "steps", (json_int_t)s->steps, "learning_rate", s->learning_rate,
        "warmup_steps", (json_int_t)s->warmup_steps, "weight_decay", s->weight_decay,
        "grad_clip", s->grad_clip, "seed", (json_int_t)s->seed,
        "data", "path", s->data_path, "format", s->data_format, "sha256",
        s->data_sha256[0] ? json_string(s->data_sha256) : json_null(),
        "checkpoint_interval", (json_int_t)s->checkpoint_interval,
        "resume_from", resume,
        "communication", "stage_link", s->stage_link, "sync", s->sync, "inner_steps", (json_int_t)s->inner_steps,
        "outer_learning_rate", s->outer_learning_rate, "outer_momentum", s->outer_momentum,
        "sync_dtype", s->sync_dtype,
        "validation", validation);
}

json_t *jobspec_model_costs(const struct job_spec *spec)
{
    const struct model_config *m = &spec->model;
    double T = (double)m->context;
    return json_pack("{s:f, s:f, s:f, s:f, s:f}", "layer_params", (double)model_part_params(m, MODEL_BLOCK),
                     "first_params", (double)model_part_params(m, MODEL_EMBED),
                     "last_params", (double)model_part_params(m, MODEL_HEAD),
                     "layer_flops", model_flops_per_token(m, 1, 0, T), "last_flops", model_flops_per_token(m, 0, 1, T));
}

void jobspec_sched_model(const struct job_spec *spec, struct sched_problem *pb)
{
    const struct codec *link = codec_by_name(spec->stage_link), *sync = codec_by_name(spec->sync_dtype);
    pb->stages = (int)spec->stages;
    pb->replicas = (int)spec->replicas;
    const struct model_config *m = &spec->model;
    pb->model = (struct sched_model){
        .vocab_size = m->vocab, .context_length = m->context, .d_model = m->d_model,
        .heads = m->heads, .layers = m->layers, .arch = m->arch, .kv_heads = m->kv_heads, .ffn_dim = m->ffn_dim,
        .head_dim = m->head_dim, .sliding_window = m->sliding_window,
        .tied = m->tied, .micro_batches = spec->micro_batches,
        .micro_batch_size = spec->micro_batch_size,
        .schedule = strcmp(spec->schedule, "gpipe") == 0 ? SCHED_GPIPE : SCHED_1F1B, .act_bytes = 2,
        /* What the agents send, on the CPU and the CUDA backend alike:
         * activations and their gradients in the stage link's codec (int8:
         * a scale per token of C values), and the sync's parameters. */
        .wire_bytes = (double)codec_bytes(link ? link->id : CODEC_F32, (uint64_t)m->d_model,
                                          (uint64_t)m->d_model) / (double)m->d_model,
        .sync_bytes = (double)codec_bytes(sync ? sync->id : CODEC_F32, CODEC_BLOCK, CODEC_BLOCK) / CODEC_BLOCK,
        .sync_every = (int)spec->inner_steps };
    sched_dtfm_sizes(pb);
}
