/* test_jobspec.c - server/jobs/jobspec.h: a job spec is parsed, validated with
 * every failure naming its field, and normalised back to JSON. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/jobs/jobspec.h"

/* Every field given, none at its default. */
static const char full_spec[] =
    "{\"name\":\"gpt2-small\","
    " \"model\":{\"architecture\":\"gpt2\",\"vocab_size\":50257,\"context_length\":1024,\"d_model\":768,"
    "            \"heads\":12,\"layers\":12},"
    " \"parallelism\":{\"stages\":4,\"replicas\":2,\"micro_batches\":8,"
    "                  \"micro_batch_size\":4,\"schedule\":\"gpipe\"},"
    " \"training\":{\"steps\":5000,\"learning_rate\":0.0006,\"warmup_steps\":700,"
    "               \"weight_decay\":0.1,\"grad_clip\":0.5,\"seed\":1337},"
    " \"data\":{\"path\":\"/data/fineweb10B\",\"format\":\"llmc\",\"sha256\":null},"
    " \"checkpoint_interval\":250,"
    " \"resume_from\":{\"job_id\":3,\"step\":200},"
    " \"communication\":{\"stage_link\":\"int8\",\"sync\":\"diloco\",\"inner_steps\":50,"
    "                    \"outer_learning_rate\":0.5,\"outer_momentum\":0.8,\"sync_dtype\":\"bf16\"},"
    " \"validation\":{\"path\":\"/data/val.bin\",\"format\":\"llmc\",\"holdout\":null,"
    "                 \"sequences\":64,\"eval_interval\":500,\"sha256\":null}}";

/* Only the required fields. */
static const char minimal_spec[] =
    "{\"model\":{\"vocab_size\":50257,\"context_length\":1024,\"d_model\":768,"
    "            \"heads\":12,\"layers\":12},"
    " \"parallelism\":{\"stages\":4,\"replicas\":2,\"micro_batches\":8,"
    "                  \"micro_batch_size\":4},"
    " \"training\":{\"steps\":5000,\"learning_rate\":0.0006},"
    " \"data\":{\"path\":\"/data/fineweb10B\"}}";

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!j)
        fail_msg("test JSON does not parse: %s: %s", text, je.text);
    return j;
}

static void expect_json_equal(json_t *got, const char *want_text)
{
    json_t *want = load(want_text);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_SORT_KEYS);
        char *w = json_dumps(want, JSON_SORT_KEYS);
        print_error("got  %s\nwant %s\n", g, w);
        free(g);
        free(w);
        json_decref(want);
        fail();
    }
    json_decref(want);
}

static void test_jobspec_full_spec_parses(void **state)
{
    (void)state;
    json_t *body = load(full_spec);
    struct job_spec s;
    struct shoal_err err;
    err_clear(&err);
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    assert_int_equal(err.status, 0);
    assert_string_equal(s.name, "gpt2-small");
    assert_int_equal(s.model.vocab, 50257);
    assert_int_equal(s.model.context, 1024);
    assert_int_equal(s.model.d_model, 768);
    assert_int_equal(s.model.heads, 12);
    assert_int_equal(s.model.layers, 12);
    assert_int_equal(s.stages, 4);
    assert_int_equal(s.replicas, 2);
    assert_int_equal(s.micro_batches, 8);
    assert_int_equal(s.micro_batch_size, 4);
    assert_string_equal(s.schedule, "gpipe");
    assert_int_equal(s.steps, 5000);
    assert_true(s.learning_rate == 0.0006);
    assert_int_equal(s.warmup_steps, 700);
    assert_true(s.weight_decay == 0.1);
    assert_true(s.grad_clip == 0.5);
    assert_int_equal(s.seed, 1337);
    assert_string_equal(s.data_path, "/data/fineweb10B");
    assert_string_equal(s.data_format, "llmc");
    assert_int_equal(s.checkpoint_interval, 250);
    assert_int_equal(s.resume_job_id, 3);
    assert_int_equal(s.resume_step, 200);
    assert_string_equal(s.stage_link, "int8");
    assert_string_equal(s.sync, "diloco");
    assert_int_equal(s.inner_steps, 50);
    assert_true(s.outer_learning_rate == 0.5);
    assert_true(s.outer_momentum == 0.8);
    assert_string_equal(s.sync_dtype, "bf16");
    assert_int_equal(s.has_validation, 1);
    assert_string_equal(s.val_path, "/data/val.bin");
    assert_string_equal(s.val_format, "llmc");
    assert_true(s.val_holdout == 0);
    assert_int_equal(s.val_sequences, 64);
    assert_int_equal(s.eval_interval, 500);

    /* The normalised JSON carries the same values ... */
    json_t *out = jobspec_to_json(&s);
    assert_non_null(out);
    expect_json_equal(out, full_spec);

    /* ... and parses back to the identical struct. */
    struct job_spec again;
    assert_int_equal(jobspec_parse(out, &again, &err), 0);
    assert_memory_equal(&again, &s, sizeof s);
    json_decref(out);
    json_decref(body);
}

static void test_jobspec_defaults_filled(void **state)
{
    (void)state;
    json_t *body = load(minimal_spec);
    struct job_spec s;
    struct shoal_err err;
    err_clear(&err);
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    assert_string_equal(s.name, "job");
    assert_string_equal(s.schedule, "1f1b");
    assert_string_equal(s.data_format, "llmc");
    assert_true(s.grad_clip == 1.0);
    assert_int_equal(s.checkpoint_interval, 100);
    assert_int_equal(s.warmup_steps, 0);
    assert_true(s.weight_decay == 0.0);
    assert_int_equal(s.seed, 0);
    assert_int_equal(s.resume_job_id, 0);

    /* Every field is present in the normalised JSON, defaults included.
     * Doubles are written as JSON reals (0.0, 1.0), integers as integers. */
    json_t *out = jobspec_to_json(&s);
    assert_non_null(out);
    expect_json_equal(out,
        "{\"name\":\"job\","
        " \"model\":{\"architecture\":\"gpt2\",\"vocab_size\":50257,\"context_length\":1024,\"d_model\":768,"
        "            \"heads\":12,\"layers\":12},"
        " \"parallelism\":{\"stages\":4,\"replicas\":2,\"micro_batches\":8,"
        "                  \"micro_batch_size\":4,\"schedule\":\"1f1b\"},"
        " \"training\":{\"steps\":5000,\"learning_rate\":0.0006,\"warmup_steps\":0,"
        "               \"weight_decay\":0.0,\"grad_clip\":1.0,\"seed\":0},"
        " \"data\":{\"path\":\"/data/fineweb10B\",\"format\":\"llmc\",\"sha256\":null},"
        " \"checkpoint_interval\":100, \"resume_from\":null,"
        " \"communication\":{\"stage_link\":\"" JOBSPEC_STAGE_LINK_DEFAULT "\",\"sync\":\"every_step\","
        "                    \"inner_steps\":1,\"outer_learning_rate\":0.7,\"outer_momentum\":0.9,"
        "                    \"sync_dtype\":\"f32\"},"
        " \"validation\":null}");
    json_decref(out);
    json_decref(body);
}

/* One edit to the full spec: set `path` (dotted) to the JSON `value`, or
 * delete the member when `value` is NULL. */
struct edit {
    const char *path;
    const char *value;
};

static void apply_edit(json_t *root, const struct edit *e)
{
    char path[128];
    snprintf(path, sizeof path, "%s", e->path);
    json_t *obj = root;
    char *key = path, *dot;
    while ((dot = strchr(key, '.')) != NULL) {
        *dot = '\0';
        obj = json_object_get(obj, key);
        assert_non_null(obj);
        key = dot + 1;
    }
    if (e->value)
        assert_int_equal(json_object_set_new(obj, key, load(e->value)), 0);
    else
        assert_int_equal(json_object_del(obj, key), 0);
}

struct spec_case {
    const char *what;
    struct edit edits[4];
    int status;        /* 0: accepted */
    const char *code;
    const char *field;
};

static void run_spec_cases(const struct spec_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct spec_case *c = &cases[i];
        json_t *body = load(full_spec);
        for (size_t k = 0; k < 4 && c->edits[k].path; k++)
            apply_edit(body, &c->edits[k]);
        struct job_spec s;
        struct shoal_err err;
        err_clear(&err);
        int rc = jobspec_parse(body, &s, &err);
        json_decref(body);
        if (c->status == 0) {
            if (rc != 0)
                fail_msg("%s: refused (%d %s on \"%s\": %s), want accepted", c->what,
                         err.status, err.code, err.field, err.message);
            continue;
        }
        if (rc != -1)
            fail_msg("%s: accepted, want %d %s on \"%s\"", c->what, c->status, c->code,
                     c->field);
        if (err.status != c->status || strcmp(err.code, c->code) != 0 ||
            strcmp(err.field, c->field) != 0)
            fail_msg("%s: got %d %s on \"%s\" (%s), want %d %s on \"%s\"", c->what,
                     err.status, err.code, err.field, err.message, c->status, c->code,
                     c->field);
        if (err.message[0] == '\0')
            fail_msg("%s: no message", c->what);
    }
}

static void test_jobspec_relations(void **state)
{
    (void)state;
    static const struct spec_case cases[] = {
        { "d_model not divisible by heads", { { "model.d_model", "770" } },
          422, "invalid_field", "model.d_model" },
        { "fewer layers than stages", { { "model.layers", "3" } },
          422, "invalid_field", "parallelism.stages" },
        { "more stages than layers", { { "parallelism.stages", "13" } },
          422, "invalid_field", "parallelism.stages" },
        /* 32 stages x 4096 replicas = 131072 tasklets, over the 65536 limit. */
        { "stages x replicas > 65536",
          { { "model.layers", "32" }, { "parallelism.stages", "32" },
            { "parallelism.replicas", "4096" } },
          422, "invalid_field", "parallelism.replicas" },
        { "stages x replicas == 65536",
          { { "model.layers", "32" }, { "parallelism.stages", "32" },
            { "parallelism.replicas", "2048" } },
          0, NULL, NULL },
        { "warmup_steps > steps", { { "training.warmup_steps", "5001" } },
          422, "invalid_field", "training.warmup_steps" },
        { "checkpoint_interval > steps", { { "checkpoint_interval", "5001" } },
          422, "invalid_field", "checkpoint_interval" },
        /* Boundaries that are allowed. */
        { "layers == stages", { { "parallelism.stages", "12" } }, 0, NULL, NULL },
        { "warmup_steps == steps", { { "training.warmup_steps", "5000" } }, 0, NULL, NULL },
        { "checkpoint_interval == steps", { { "checkpoint_interval", "5000" } }, 0, NULL, NULL },
        { "checkpoint_interval 0 (only at the end)", { { "checkpoint_interval", "0" } },
          0, NULL, NULL },
        { "one head", { { "model.heads", "1" } }, 0, NULL, NULL },
        /* "text" data is bytes: the vocabulary must be 256. */
        { "text data with a 50257-token vocabulary", { { "data.format", "\"text\"" } },
          422, "invalid_field", "model.vocab_size" },
        { "text data with 256 tokens", { { "data.format", "\"text\"" }, { "model.vocab_size", "256" } },
          0, NULL, NULL },
        /* A resumed job must have steps left after the checkpoint. */
        { "resume_from.step == steps", { { "resume_from.step", "5000" } }, 422, "invalid_field", "resume_from" },
        { "resume_from.step == steps - 1", { { "resume_from.step", "4999" } }, 0, NULL, NULL },
        { "resume_from.step 0", { { "resume_from.step", "0" } }, 0, NULL, NULL },
        { "resume_from null", { { "resume_from", "null" } }, 0, NULL, NULL },
        /* communication: what applies to which sync mode */
        { "every_step with inner_steps", { { "communication.sync", "\"every_step\"" } },
          422, "invalid_field", "communication.inner_steps" },
        { "every_step with inner_steps 1",
          { { "communication.sync", "\"every_step\"" }, { "communication.inner_steps", "1" },
            { "communication.sync_dtype", "\"f32\"" } }, 0, NULL, NULL },
        { "every_step with a compressed sync",
          { { "communication.sync", "\"every_step\"" }, { "communication.inner_steps", "1" } },
          422, "invalid_field", "communication.sync_dtype" },
        { "inner_steps > steps", { { "communication.inner_steps", "5001" } },
          422, "invalid_field", "communication.inner_steps" },
        { "diloco checkpoint between outer steps", { { "checkpoint_interval", "260" } },
          422, "invalid_field", "checkpoint_interval" },
        { "diloco checkpoint only at the end", { { "checkpoint_interval", "0" } }, 0, NULL, NULL },
        { "diloco evaluation between outer steps", { { "validation.eval_interval", "510" } },
          422, "invalid_field", "validation.eval_interval" },
        { "eval_interval > steps", { { "validation.eval_interval", "5050" } },
          422, "invalid_field", "validation.eval_interval" },
        /* validation: one source, whole micro-batches */
        { "validation with a path and a holdout", { { "validation.holdout", "0.1" } },
          422, "invalid_field", "validation" },
        { "validation with neither", { { "validation.path", "null" } }, 422, "invalid_field", "validation" },
        { "validation holdout", { { "validation.path", "null" }, { "validation.holdout", "0.05" } }, 0, NULL, NULL },
        { "a holdout in another format than its file",
          { { "validation.path", "null" }, { "validation.holdout", "0.05" }, { "validation.format", "\"text\"" } },
          422, "invalid_field", "validation.format" },
        { "a text validation file with 50257 tokens", { { "validation.format", "\"text\"" } },
          422, "invalid_field", "validation.format" },
        { "validation sequences not whole micro-batches", { { "validation.sequences", "66" } },
          422, "invalid_field", "validation.sequences" },
        { "validation null", { { "validation", "null" } }, 0, NULL, NULL },
    };
    run_spec_cases(cases, sizeof cases / sizeof cases[0]);
}

#define LLAMA { "model.architecture", "\"llama\"" }, { "model.ffn_dim", "2048" }

/* The Llama family's fields: defaults, what cannot work, and what belongs
 * to the other family. */
static void test_jobspec_llama(void **state)
{
    (void)state;
    static const struct spec_case cases[] = {
        { "llama", { LLAMA }, 0, NULL, NULL },
        { "llama with grouped-query attention", { LLAMA, { "model.kv_heads", "4" } }, 0, NULL, NULL },
        { "llama without ffn_dim", { { "model.architecture", "\"llama\"" } }, 400, "missing_field",
          "model.ffn_dim" },
        { "kv_heads not dividing heads", { LLAMA, { "model.kv_heads", "5" } }, 422, "invalid_field",
          "model.kv_heads" },
        { "an odd head size", { LLAMA, { "model.heads", "256" } }, 422, "invalid_field", "model.heads" },
        { "llama3 rope scaling", { LLAMA, { "model.rope_scaling", "{\"rope_type\":\"llama3\",\"factor\":32,"
          "\"low_freq_factor\":1,\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}" } },
          0, NULL, NULL },
        { "rope scaling with high below low", { LLAMA, { "model.rope_scaling", "{\"factor\":32,"
          "\"low_freq_factor\":4,\"high_freq_factor\":1,\"original_max_position_embeddings\":8192}" } },
          422, "invalid_field", "model.rope_scaling.high_freq_factor" },
        { "another rope scaling type", { LLAMA, { "model.rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":4,"
          "\"low_freq_factor\":1,\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}" } },
          422, "invalid_field", "model.rope_scaling.rope_type" },
        { "tied across 4 stages", { LLAMA, { "model.tie_embeddings", "true" } }, 0, NULL, NULL },
        { "tied in 1 stage", { LLAMA, { "model.tie_embeddings", "true" }, { "parallelism.stages", "1" } },
          0, NULL, NULL },
        { "gpt2 with rope_theta", { { "model.rope_theta", "10000" } }, 400, "invalid_field", "model.rope_theta" },
        { "gpt2 with kv_heads", { { "model.kv_heads", "4" } }, 400, "invalid_field", "model.kv_heads" },
        { "an unknown architecture", { { "model.architecture", "\"mamba\"" } }, 422, "invalid_field",
          "model.architecture" },
        { "norm_eps out of range", { LLAMA, { "model.norm_eps", "0" } }, 422, "invalid_field", "model.norm_eps" },
        { "qwen2", { { "model.architecture", "\"qwen2\"" }, { "model.ffn_dim", "2048" } }, 0, NULL, NULL },
        { "qwen2 without ffn_dim", { { "model.architecture", "\"qwen2\"" } }, 400, "missing_field",
          "model.ffn_dim" },
        { "qwen3 with heads of 128 (q 1536 wide)", { { "model.architecture", "\"qwen3\"" },
          { "model.ffn_dim", "2048" }, { "model.head_dim", "128" } }, 0, NULL, NULL },
        { "olmo2", { { "model.architecture", "\"olmo2\"" }, { "model.ffn_dim", "2048" } }, 0, NULL, NULL },
        { "an odd head_dim", { LLAMA, { "model.head_dim", "63" } }, 422, "invalid_field", "model.head_dim" },
        { "gpt2 with head_dim", { { "model.head_dim", "64" } }, 400, "invalid_field", "model.head_dim" },
        { "a sliding window", { LLAMA, { "model.sliding_window", "4096" } }, 0, NULL, NULL },
        { "a negative sliding_window", { LLAMA, { "model.sliding_window", "-1" } }, 422, "invalid_field",
          "model.sliding_window" },
    };
    run_spec_cases(cases, sizeof cases / sizeof cases[0]);

    /* normalised: every field of the family, defaults filled, and back */
    json_t *body = load(minimal_spec);
    json_object_set_new(json_object_get(body, "model"), "architecture", json_string("llama"));
    json_object_set_new(json_object_get(body, "model"), "ffn_dim", json_integer(2048));
    struct job_spec s, again;
    struct shoal_err err;
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    json_t *out = jobspec_to_json(&s);
    expect_json_equal(json_object_get(out, "model"),
                      "{\"architecture\":\"llama\",\"vocab_size\":50257,\"context_length\":1024,\"d_model\":768,"
                      "\"heads\":12,\"layers\":12,\"kv_heads\":12,\"ffn_dim\":2048,\"head_dim\":64,"
                      "\"sliding_window\":0,\"rope_theta\":10000.0,"
                      "\"rope_scaling\":null,\"norm_eps\":1e-05,\"tie_embeddings\":false}");
    assert_int_equal(jobspec_parse(out, &again, &err), 0);
    assert_true(model_config_equal(&again.model, &s.model));
    json_decref(out);
    json_decref(body);
}

static void test_jobspec_fields(void **state)
{
    (void)state;
    static const struct spec_case cases[] = {
        { "unknown schedule", { { "parallelism.schedule", "\"zigzag\"" } },
          422, "invalid_field", "parallelism.schedule" },
        { "unknown data format", { { "data.format", "\"npy\"" } },
          422, "invalid_field", "data.format" },
        { "unknown top-level field", { { "priority", "1" } },
          400, "unknown_field", "priority" },
        { "unknown nested field", { { "training.lr", "0.1" } },
          400, "unknown_field", "training.lr" },
        { "missing model", { { "model", NULL } }, 400, "missing_field", "model" },
        { "missing data.path", { { "data.path", NULL } }, 400, "missing_field", "data.path" },
        { "missing training.steps", { { "training.steps", NULL } },
          400, "missing_field", "training.steps" },
        { "model not an object", { { "model", "\"gpt2\"" } }, 400, "invalid_field", "model" },
        { "learning_rate 0", { { "training.learning_rate", "0" } },
          422, "invalid_field", "training.learning_rate" },
        { "learning_rate negative", { { "training.learning_rate", "-0.001" } },
          422, "invalid_field", "training.learning_rate" },
        { "learning_rate as string", { { "training.learning_rate", "\"6e-4\"" } },
          400, "invalid_field", "training.learning_rate" },
        { "heads 0", { { "model.heads", "0" } }, 422, "invalid_field", "model.heads" },
        { "steps as real", { { "training.steps", "5000.0" } },
          400, "invalid_field", "training.steps" },
        { "control char in name", { { "name", "\"bad\\u0001name\"" } },
          422, "invalid_field", "name" },
        { "DEL in name", { { "name", "\"bad\\u007fname\"" } }, 422, "invalid_field", "name" },
        { "newline in data.path", { { "data.path", "\"/data/a\\nb\"" } },
          422, "invalid_field", "data.path" },
        { "empty name", { { "name", "\"\"" } }, 422, "invalid_field", "name" },
        { "name of 64 bytes",
          { { "name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"" } },
          422, "invalid_field", "name" },
        { "name of 63 bytes",
          { { "name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"" } },
          0, NULL, NULL },
        { "UTF-8 name", { { "name", "\"mod\\u00e8le\"" } }, 0, NULL, NULL },
        { "data.sha256 of a manifest (upper case too)",
          { { "data.sha256", "\"889FE3087E2724947A13378D307E1D6E5D6042A50544994A007A6F4A1502F79B\"" } },
          0, NULL, NULL },
        { "data.sha256 not hex", { { "data.sha256", "\"889fe3087e2724947a13378d307e1d6e5d6042a50544994a007a6f4a1502f7zz\"" } },
          422, "invalid_field", "data.sha256" },
        { "data.sha256 short", { { "data.sha256", "\"889fe308\"" } }, 422, "invalid_field", "data.sha256" },
        { "validation.sha256 with a holdout",
          { { "validation", "{\"holdout\":0.1,\"sha256\":\"889fe3087e2724947a13378d307e1d6e5d6042a50544994a007a6f4a1502f79b\"}" } },
          422, "invalid_field", "validation.sha256" },
        /* Huge integers: in int64 but far out of range; no overflow anywhere. */
        { "huge vocab_size", { { "model.vocab_size", "9223372036854775807" } },
          422, "invalid_field", "model.vocab_size" },
        { "huge steps", { { "training.steps", "10000000000" } },
          422, "invalid_field", "training.steps" },
        { "negative steps", { { "training.steps", "-9223372036854775808" } },
          422, "invalid_field", "training.steps" },
        { "seed past 2^53-1", { { "training.seed", "9007199254740992" } },
          422, "invalid_field", "training.seed" },
        { "seed 2^53-1", { { "training.seed", "9007199254740991" } }, 0, NULL, NULL },
        { "huge stages", { { "parallelism.stages", "9223372036854775807" } },
          422, "invalid_field", "parallelism.stages" },
        { "resume_from without job_id", { { "resume_from.job_id", NULL } },
          400, "missing_field", "resume_from.job_id" },
        { "resume_from job 0", { { "resume_from.job_id", "0" } }, 422, "invalid_field", "resume_from.job_id" },
        { "resume_from negative step", { { "resume_from.step", "-1" } }, 422, "invalid_field", "resume_from.step" },
        { "resume_from not an object", { { "resume_from", "5" } }, 400, "invalid_field", "resume_from" },
        { "resume_from unknown member", { { "resume_from.epoch", "1" } }, 400, "unknown_field", "resume_from.epoch" },
        { "unknown stage link", { { "communication.stage_link", "\"fp8\"" } },
          422, "invalid_field", "communication.stage_link" },
        { "unknown sync mode", { { "communication.sync", "\"gossip\"" } },
          422, "invalid_field", "communication.sync" },
        { "unknown sync dtype", { { "communication.sync_dtype", "\"int4\"" } },
          422, "invalid_field", "communication.sync_dtype" },
        { "outer momentum 1", { { "communication.outer_momentum", "1" } },
          422, "invalid_field", "communication.outer_momentum" },
        { "outer learning rate 0", { { "communication.outer_learning_rate", "0" } },
          422, "invalid_field", "communication.outer_learning_rate" },
        { "communication not an object", { { "communication", "\"diloco\"" } },
          400, "invalid_field", "communication" },
        { "unknown communication member", { { "communication.h", "1" } },
          400, "unknown_field", "communication.h" },
        { "validation holdout over 0.5", { { "validation.path", "null" }, { "validation.holdout", "0.6" } },
          422, "invalid_field", "validation.holdout" },
        { "validation sequences 0", { { "validation.sequences", "0" } },
          422, "invalid_field", "validation.sequences" },
        { "unknown validation member", { { "validation.every", "5" } },
          400, "unknown_field", "validation.every" },
    };
    run_spec_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_jobspec_body_not_object(void **state)
{
    (void)state;
    static const char *const bodies[] = { "[]", "null", "42", "\"spec\"" };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        json_t *body = load(bodies[i]);
        struct job_spec s;
        struct shoal_err err;
        err_clear(&err);
        assert_int_equal(jobspec_parse(body, &s, &err), -1);
        assert_int_equal(err.status, 400);
        assert_string_equal(err.code, "invalid_field");
        json_decref(body);
    }
}

/* checkpoint_interval defaults to min(100, steps), so a job shorter than
 * 100 steps is accepted without it; given explicitly, it may not exceed
 * training.steps. */
static void test_jobspec_short_job_checkpoint_default(void **state)
{
    (void)state;
    json_t *body = load(minimal_spec);
    apply_edit(body, &(struct edit){ "training.steps", "50" });
    struct job_spec s;
    struct shoal_err err;
    err_clear(&err);
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    assert_int_equal(s.checkpoint_interval, 50);

    apply_edit(body, &(struct edit){ "checkpoint_interval", "51" });
    err_clear(&err);
    assert_int_equal(jobspec_parse(body, &s, &err), -1);
    assert_int_equal(err.status, 422);
    assert_string_equal(err.field, "checkpoint_interval");

    apply_edit(body, &(struct edit){ "checkpoint_interval", "50" });
    err_clear(&err);
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    assert_int_equal(s.steps, 50);
    assert_int_equal(s.checkpoint_interval, 50);
    json_decref(body);
}

/* Defaults that depend on the sync mode: DiLoCo's H, and checkpoint and
 * evaluation intervals on outer steps; validation sequences in whole
 * micro-batches. */
static void test_jobspec_sync_defaults(void **state)
{
    (void)state;
    json_t *body = load(minimal_spec);
    apply_edit(body, &(struct edit){ "communication", "{\"sync\":\"diloco\"}" });
    apply_edit(body, &(struct edit){ "validation", "{\"holdout\":0.1}" });
    struct job_spec s;
    struct shoal_err err;
    err_clear(&err);
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    assert_int_equal(s.inner_steps, 100);
    assert_int_equal(s.checkpoint_interval, 100);
    assert_int_equal(s.eval_interval, 100);
    assert_int_equal(s.val_sequences, 32);
    assert_string_equal(s.val_format, "llmc");
    assert_true(s.outer_learning_rate == 0.7 && s.outer_momentum == 0.9);
    apply_edit(body, &(struct edit){ "communication", "{\"sync\":\"diloco\",\"inner_steps\":30}" });
    apply_edit(body, &(struct edit){ "parallelism.micro_batch_size", "5" });
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    assert_int_equal(s.checkpoint_interval, 120);
    assert_int_equal(s.eval_interval, 120);
    assert_int_equal(s.val_sequences, 35);
    /* a short job: once, at the end */
    apply_edit(body, &(struct edit){ "training.steps", "40" });
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    assert_int_equal(s.checkpoint_interval, 40);
    assert_int_equal(s.eval_interval, 40);
    apply_edit(body, &(struct edit){ "communication", "{\"sync\":\"diloco\"}" });
    assert_int_equal(jobspec_parse(body, &s, &err), 0);
    assert_int_equal(s.inner_steps, 40);
    json_decref(body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobspec_full_spec_parses),
        cmocka_unit_test(test_jobspec_defaults_filled),
        cmocka_unit_test(test_jobspec_relations),
        cmocka_unit_test(test_jobspec_llama),
        cmocka_unit_test(test_jobspec_fields),
        cmocka_unit_test(test_jobspec_body_not_object),
        cmocka_unit_test(test_jobspec_short_job_checkpoint_default),
        cmocka_unit_test(test_jobspec_sync_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
