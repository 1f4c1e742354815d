/* sample.c - text from a job's checkpoint (sample.h). */
#include "sample.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/mix.h"
#include "../common/opts.h"
#include "../kernels/kernels.h"
#include "control.h"
#include "tokenizer.h"

#define SAMPLE_CALL_S 30          /* s for one JSON call */
#define SAMPLE_FILE_DEADLINE_S 300 /* s to fetch one stage file, retries included */
#define SAMPLE_STAGES_MAX 1024    /* as the server allows */

struct sample_config {
    char server_url[512];
    char ca_file[4096];
    char admin_token[TOKEN_MAX];
    char admin_token_file[PATH_MAX];
    long job;
    long step;                    /* 0: the newest complete checkpoint */
    char prompt[4096];
    char prompt_tokens[32768];    /* "15496,11,995": ids, checked against the model's vocab */
    char tokenizer[PATH_MAX];     /* llm.c tokenizer file; llmc jobs print text through it */
    long tokens;                  /* to generate */
    char temperature[32];         /* text: strtod'ed and checked */
    long seed;
    char tmp_dir[PATH_MAX];       /* stage files pass through here */
};

#define S(f) OPT_STR_FIELD(struct sample_config, f)
#define L(f, lo, hi) OPT_LONG_FIELD(struct sample_config, f, lo, hi)
static const struct opt sample_opts[] = {
    { "--server", "SHOAL_SERVER_URL", S(server_url), "http://127.0.0.1:8080", "shoal-server's base URL" },
    { "--ca-file", "SHOAL_CA_FILE", S(ca_file), "",
      "PEM CA certificate(s) to verify an https --server with; empty: the system's CA store" },
    { "--admin-token", "SHOAL_ADMIN_TOKEN", S(admin_token), "", "the server's admin token" },
    { "--admin-token-file", "SHOAL_ADMIN_TOKEN_FILE", S(admin_token_file), "",
      "file holding the admin token (the server's <data-dir>/admin.token), instead of --admin-token" },
    { "--job", "SHOAL_SAMPLE_JOB", L(job, 0, LONG_MAX), "0", "the job whose checkpoint to sample (required)" },
    { "--step", "SHOAL_SAMPLE_STEP", L(step, 0, LONG_MAX), "0",
      "the checkpoint's step; 0: the newest complete one" },
    { "--prompt", "SHOAL_SAMPLE_PROMPT", S(prompt), "",
      "text the sample continues (byte-level \"text\" jobs); empty: it starts after a newline.  Refused for "
      "\"llmc\" jobs: shoal decodes GPT-2 tokens but cannot encode text into them, use --prompt-tokens" },
    { "--prompt-tokens", "SHOAL_SAMPLE_PROMPT_TOKENS", S(prompt_tokens), "",
      "token ids the sample continues, comma-separated (15496,11,995), each below the model's vocab_size; "
      "empty: \"llmc\" jobs start at token 0 (llm.c starts at <|endoftext|>: pass 50256)" },
    { "--tokenizer", "SHOAL_SAMPLE_TOKENIZER", S(tokenizer), "",
      "llm.c tokenizer file (gpt2_tokenizer.bin) to print an \"llmc\" job's tokens as text; empty: they print as "
      "ids.  Ids past its vocabulary (a padded model's rows) print as <|id|>" },
    { "--tokens", "SHOAL_SAMPLE_TOKENS", L(tokens, 1, 100000), "200", "tokens to generate" },
    { "--temperature", "SHOAL_SAMPLE_TEMPERATURE", S(temperature), "0.8",
      "divides the logits; lower is more predictable, 0 takes the likeliest token" },
    { "--seed", "SHOAL_SAMPLE_SEED", L(seed, 0, LONG_MAX), "1", "random seed of the draws" },
    { "--tmp-dir", "SHOAL_SAMPLE_TMP_DIR", S(tmp_dir), "/tmp", "where stage files are kept while loading" },
};
#undef S
#undef L
#define N_SAMPLE_OPTS (sizeof sample_opts / sizeof sample_opts[0])

/* The model, its stages in order, and the window of tokens they see. */
struct sampler {
    struct kern_model model;
    int stages;
    struct kern_stage **st;       /* stages, each B=1, T=context */
    float *hidden;                /* (1,T,C) between stages */
    float *logits;                /* (1,T,V) */
    int32_t *window;              /* (T) the latest tokens */
    int filled;                   /* tokens in the window */
    double temperature;
    uint64_t rng;
};

/* GETs `path`; 0 with *out set, else -1 with err set. */
static int get_json(const struct ctl *c, const char *path, json_t **out, struct shoal_err *err)
{
    return ctl_call_retry(c, "GET", path, NULL, SAMPLE_CALL_S, SAMPLE_CALL_S, out, err);
}

/* Picks the checkpoint: cfg->step if it is complete, else the newest
 * complete one.  The job's stage count and data format come along. */
static int find_checkpoint(const struct ctl *c, const struct sample_config *cfg, int64_t *step, int *stages,
                           char format[16], struct shoal_err *err)
{
    char path[96];
    json_t *job = NULL, *list = NULL;
    json_int_t P = 0;
    const char *fmt = NULL;
    int rc = -1;
    snprintf(path, sizeof path, "/v1/jobs/%ld", cfg->job);
    if (get_json(c, path, &job, err) != 0)
        goto out;
    if (json_unpack(job, "{s:{s:{s:I}, s:{s:s}}}", "spec", "parallelism", "stages", &P, "data", "format", &fmt) != 0 ||
        P < 1 || P > SAMPLE_STAGES_MAX || strlen(fmt) >= 16) {
        err_set(err, 502, "bad_answer", NULL, "job %ld's spec has no usable parallelism.stages and data.format",
                cfg->job);
        goto out;
    }
    snprintf(path, sizeof path, "/v1/jobs/%ld/checkpoints", cfg->job);
    if (get_json(c, path, &list, err) != 0)
        goto out;
    json_t *ck, *all = json_object_get(list, "checkpoints");
    size_t i;
    *step = -1;
    json_array_foreach(all, i, ck) {
        json_int_t s = json_integer_value(json_object_get(ck, "step"));
        if (json_is_true(json_object_get(ck, "complete")) && (cfg->step == 0 || s == cfg->step)) {
            *step = s;   /* newest first: the first match is the one */
            break;
        }
    }
    if (*step < 0) {
        if (cfg->step)
            err_set(err, 404, "not_found", "step", "job %ld has no complete checkpoint at step %ld; "
                    "GET /v1/jobs/%ld/checkpoints lists them", cfg->job, cfg->step, cfg->job);
        else
            err_set(err, 404, "not_found", "job", "job %ld has no complete checkpoint yet (one is written every "
                    "checkpoint_interval steps and at the end)", cfg->job);
        goto out;
    }
    *stages = (int)P;
    snprintf(format, 16, "%s", fmt);
    rc = 0;
out:
    json_decref(job);
    json_decref(list);
    return rc;
}

/* Fetches stage s's file at `step` and builds a cpu stage from it, with
 * one micro-batch of one full-context sequence. */
static int load_stage(const struct ctl *c, const struct sample_config *cfg, int64_t step, int s,
                      struct kern_stage **out, struct kern_model *model, struct shoal_err *err)
{
    char file[PATH_MAX + 64], path[128];
    struct kern_err ke = {{0}};
    struct kern_device cpu = { KERN_CPU, 0 };
    struct kern_stage_spec sp = { .micro_batch = 1, .in_flight = 1 };
    FILE *f = NULL;
    int fd, rc = -1;
    *out = NULL;
    snprintf(file, sizeof file, "%s/shoal-sample-XXXXXX", cfg->tmp_dir);
    if ((fd = mkstemp(file)) < 0)
        return err_set(err, 500, "io_error", "tmp_dir", "cannot create a file in %s: %s", cfg->tmp_dir,
                       strerror(errno));
    close(fd);
    snprintf(path, sizeof path, "/v1/jobs/%ld/checkpoints/%lld/stages/%d", cfg->job, (long long)step, s);
    if (ctl_get_file(c, path, file, SAMPLE_FILE_DEADLINE_S, err) != 0)
        goto out;
    if (!(f = fopen(file, "rb"))) {
        err_set(err, 500, "io_error", NULL, "cannot open %s: %s", file, strerror(errno));
        goto out;
    }
    if (kern_stage_file_peek(f, model, &sp, &ke) != 0)
        goto bad;
    sp.seq_len = model->context;
    if (kern_stage_new(&cpu, model, &sp, out, &ke) != 0 || kern_stage_load(*out, f, &ke) != 0)
        goto bad;
    rc = 0;
    goto out;
bad:
    err_set(err, 422, "bad_checkpoint", NULL, "stage %d of job %ld at step %lld: %s", s, cfg->job,
            (long long)step, ke.msg);
out:
    if (f)
        fclose(f);
    unlink(file);
    if (rc != 0) {
        kern_stage_free(*out);
        *out = NULL;
    }
    return rc;
}

/* Checks that the stages chain: same model, layers back to back, first
 * and last where they belong. */
static int check_chain(const struct sampler *sm, const struct kern_model *models, struct shoal_err *err)
{
    int next_layer = 0;
    for (int s = 0; s < sm->stages; s++) {
        const struct kern_stage_spec *sp = kern_stage_spec(sm->st[s]);
        if (memcmp(&models[s], &models[0], sizeof models[0]) != 0 || sp->layer_start != next_layer ||
            sp->first != (s == 0) || sp->last != (s == sm->stages - 1))
            return err_set(err, 422, "bad_checkpoint", NULL, "the checkpoint's stage %d (layers [%d,%d)) does "
                           "not follow stage %d of the same model", s, sp->layer_start, sp->layer_end, s - 1);
        next_layer = sp->layer_end;
    }
    if (next_layer != models[0].layers)
        return err_set(err, 422, "bad_checkpoint", NULL, "the checkpoint's stages hold %d of the model's %d layers",
                       next_layer, models[0].layers);
    return 0;
}

static void sampler_free(struct sampler *sm)
{
    for (int s = 0; sm->st && s < sm->stages; s++)
        kern_stage_free(sm->st[s]);
    free(sm->st);
    free(sm->hidden);
    free(sm->logits);
    free(sm->window);
}

static int sampler_open(const struct ctl *c, const struct sample_config *cfg, int64_t step, int stages,
                        struct sampler *sm, struct shoal_err *err)
{
    struct kern_model *models = calloc((size_t)stages, sizeof *models);
    int rc = -1;
    sm->stages = stages;
    if (!models || !(sm->st = calloc((size_t)stages, sizeof *sm->st))) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    for (int s = 0; s < stages; s++)
        if (load_stage(c, cfg, step, s, &sm->st[s], &models[s], err) != 0)
            goto out;
    if (check_chain(sm, models, err) != 0)
        goto out;
    sm->model = models[0];
    size_t T = (size_t)sm->model.context;
    sm->hidden = malloc(T * (size_t)sm->model.d_model * sizeof(float));
    sm->logits = malloc(T * (size_t)sm->model.vocab * sizeof(float));
    sm->window = calloc(T, sizeof(int32_t));
    if (!sm->hidden || !sm->logits || !sm->window) {
        err_set(err, 500, "internal", NULL, "out of memory for a context of %zu tokens", T);
        goto out;
    }
    rc = 0;
out:
    free(models);
    return rc;
}

/* Appends a token, dropping the oldest when the window is full. */
static void window_push(struct sampler *sm, int32_t token)
{
    int T = sm->model.context;
    if (sm->filled == T) {
        memmove(sm->window, sm->window + 1, (size_t)(T - 1) * sizeof(int32_t));
        sm->filled--;
    }
    sm->window[sm->filled++] = token;
}

/* Draws the next token from the logits at the newest position. */
static int32_t draw(struct sampler *sm)
{
    int V = sm->model.vocab;
    const float *l = sm->logits + (size_t)(sm->filled - 1) * V;
    int best = 0;
    for (int v = 1; v < V; v++)
        best = l[v] > l[best] ? v : best;
    if (sm->temperature <= 0)
        return best;
    double z = 0;
    for (int v = 0; v < V; v++)
        z += exp((l[v] - l[best]) / sm->temperature);
    sm->rng = splitmix64(sm->rng);
    double u = (double)(sm->rng >> 11) * 0x1.0p-53 * z, acc = 0;
    for (int v = 0; v < V; v++) {
        acc += exp((l[v] - l[best]) / sm->temperature);
        if (u < acc)
            return v;
    }
    return best;
}

/* Runs the window through every stage; the logits land in sm->logits.
 * Positions past sm->filled hold token 0 and, the attention being causal,
 * do not change the ones before them. */
static int forward(struct sampler *sm, struct shoal_err *err)
{
    struct kern_err ke = {{0}};
    const void *in = sm->window;
    for (int s = 0; s < sm->stages - 1; s++) {
        int rc = kern_stage_forward(sm->st[s], 0, in, NULL, sm->hidden, &ke);
        kern_stage_drop_in_flight(sm->st[s]);   /* no backward follows */
        if (rc != 0)
            return err_set(err, 500, "device_error", NULL, "stage %d: %s", s, ke.msg);
        in = sm->hidden;
    }
    if (kern_stage_logits(sm->st[sm->stages - 1], in, sm->logits, &ke) != 0)
        return err_set(err, 500, "device_error", NULL, "last stage: %s", ke.msg);
    return 0;
}

/* The prompt as token ids (--prompt-tokens). */
struct prompt_ids {
    int32_t *id;
    size_t n;
};

/* Parses --prompt-tokens: decimal ids separated by commas, spaces around
 * them allowed; empty text gives none.  On success *p holds them (free
 * p->id); the range is checked once the model's vocabulary is known. */
static int prompt_parse(const char *text, struct prompt_ids *p, struct shoal_err *err)
{
    const char *at = text;
    size_t cap = 1;
    p->id = NULL;
    p->n = 0;
    while (*at == ' ')
        at++;
    if (!*at)
        return 0;
    for (const char *c = at; *c; c++)
        cap += *c == ',';
    if (!(p->id = malloc(cap * sizeof *p->id)))
        return err_set(err, 1, "internal", NULL, "out of memory for %zu prompt tokens", cap);
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(at, &end, 10);
        if (end == at || errno || v < 0 || v > INT32_MAX)
            break;
        p->id[p->n++] = (int32_t)v;
        for (at = end; *at == ' '; at++)
            ;
        if (!*at)
            return 0;
        if (*at != ',')
            break;
        at++;
    }
    err_set(err, 2, "invalid_config", "--prompt-tokens", "--prompt-tokens must be token ids from 0 to %d separated "
            "by commas (15496,11,995); '%.40s' is not, at character %td", INT32_MAX, text, at - text + 1);
    free(p->id);
    p->id = NULL;
    p->n = 0;
    return -1;
}

/* One byte the model wrote, as it is, but for control characters other
 * than newline and tab, which could drive the terminal: those print as '?'. */
static void put_byte(FILE *out, unsigned char c)
{
    fputc(c == '\n' || c == '\t' || (c >= 32 && c != 127) ? c : '?', out);
}

/* Byte-level jobs print the byte.  Token jobs print the token's bytes
 * through the tokenizer (a character split over two tokens comes out
 * whole, byte after byte), "<|id|>" for an id past its vocabulary, or,
 * without a tokenizer, the id and a space. */
static void emit(FILE *out, const char *format, const struct tokenizer *tok, int32_t token)
{
    if (strcmp(format, "text") == 0) {
        put_byte(out, (unsigned char)token);
    } else if (!tok) {
        fprintf(out, "%d ", token);
    } else {
        size_t n;
        const unsigned char *b = tokenizer_decode(tok, token, &n);
        if (!b)
            fprintf(out, "<|%d|>", token);
        for (size_t i = 0; i < n; i++)
            put_byte(out, b[i]);
    }
    fflush(out);
}

/* Fills the window with the prompt (printed as the sample's start), then
 * draws cfg->tokens tokens. */
static int generate(struct sampler *sm, const struct sample_config *cfg, const char *format,
                    const struct prompt_ids *prompt, const struct tokenizer *tok, FILE *out, struct shoal_err *err)
{
    if (strcmp(format, "text") == 0 && cfg->prompt[0]) {
        for (const unsigned char *p = (const unsigned char *)cfg->prompt; *p; p++)
            window_push(sm, (int32_t)(*p % sm->model.vocab));
        fputs(cfg->prompt, out);
    }
    for (size_t i = 0; i < prompt->n; i++) {
        window_push(sm, prompt->id[i]);
        emit(out, format, tok, prompt->id[i]);
    }
    if (sm->filled == 0)
        window_push(sm, strcmp(format, "text") == 0 ? '\n' : 0);
    for (long i = 0; i < cfg->tokens; i++) {
        if (forward(sm, err) != 0)
            return -1;
        int32_t token = draw(sm);
        emit(out, format, tok, token);
        window_push(sm, token);
    }
    fputc('\n', out);
    return 0;
}

/* What the job's data format allows of --prompt and --tokenizer. */
static int check_format(const struct sample_config *cfg, const char *format, struct shoal_err *err)
{
    if (strcmp(format, "text") == 0 && cfg->tokenizer[0])
        return err_set(err, 2, "invalid_config", "--tokenizer", "job %ld is byte-level (data.format \"text\"): its "
                       "tokens are bytes and print as text without a tokenizer; drop --tokenizer", cfg->job);
    if (strcmp(format, "text") != 0 && cfg->prompt[0])
        return err_set(err, 2, "invalid_config", "--prompt", "job %ld trains on token shards (data.format \"%s\"): "
                       "shoal decodes their GPT-2 tokens (--tokenizer) but cannot encode --prompt's text into "
                       "them; pass the prompt's ids with --prompt-tokens (GPT-2's encoding, e.g. tiktoken's)",
                       cfg->job, format);
    return 0;
}

/* The prompt's ids against the model's vocabulary, and a word on stderr
 * about how the tokens will print. */
static int check_tokens(const struct sample_config *cfg, const char *format, const struct sampler *sm,
                        const struct prompt_ids *prompt, const struct tokenizer *tok, struct shoal_err *err)
{
    for (size_t i = 0; i < prompt->n; i++)
        if (prompt->id[i] >= sm->model.vocab)
            return err_set(err, 2, "invalid_config", "--prompt-tokens", "--prompt-tokens: id %d (number %zu) is "
                           "outside the model's vocabulary of %d tokens", prompt->id[i], i + 1, sm->model.vocab);
    if (strcmp(format, "text") == 0)
        return 0;
    if (!tok)
        fprintf(stderr, "shoal-agent sample: job %ld's tokens print as ids; pass --tokenizer gpt2_tokenizer.bin "
                "(llm.c's tokenizer file) to print them as text\n", cfg->job);
    else if ((int64_t)tok->vocab < sm->model.vocab)
        fprintf(stderr, "shoal-agent sample: the tokenizer holds %u tokens, the model %d: ids %u to %d (padding "
                "rows, if the tokenizer is the job's) print as <|id|>\n", tok->vocab, sm->model.vocab, tok->vocab,
                sm->model.vocab - 1);
    return 0;
}

static int sample_run(const struct sample_config *cfg, FILE *out, struct shoal_err *err)
{
    struct ctl c = { .stop = NULL };
    struct sampler sm = { .stages = 0 };
    struct prompt_ids prompt = { NULL, 0 };
    struct tokenizer tok = { 0 };
    char format[16];
    int64_t step = 0;
    int stages = 0, rc = -1;
    char *end;
    errno = 0;
    sm.temperature = strtod(cfg->temperature, &end);
    if (errno || end == cfg->temperature || *end || !(sm.temperature >= 0 && sm.temperature <= 100))
        return err_set(err, 2, "invalid_config", "--temperature", "--temperature must be a number from 0 to 100, "
                       "got '%s'", cfg->temperature);
    if (cfg->job <= 0)
        return err_set(err, 2, "invalid_config", "--job", "--job is required: the id of the job to sample");
    if (cfg->prompt[0] && cfg->prompt_tokens[0])
        return err_set(err, 2, "invalid_config", "--prompt-tokens", "--prompt and --prompt-tokens are two ways to "
                       "give the prompt: pass one");
    if (ctl_token_load(cfg->admin_token, cfg->admin_token_file, "sampling needs the admin token: pass "
                       "--admin-token or --admin-token-file (the server's <data-dir>/admin.token)", c.token, err) != 0)
    {
        struct shoal_err why = *err;   /* err_set must not read what it writes */
        return err_set(err, 2, why.code, "--admin-token", "%s", why.message);
    }
    snprintf(c.url, sizeof c.url, "%s", cfg->server_url);
    snprintf(c.ca_file, sizeof c.ca_file, "%s", cfg->ca_file);
    size_t n = strlen(c.url);
    while (n > 0 && c.url[n - 1] == '/')
        c.url[--n] = '\0';
    sm.rng = splitmix64((uint64_t)cfg->seed);
    if (prompt_parse(cfg->prompt_tokens, &prompt, err) != 0)
        goto out;
    if (cfg->tokenizer[0] && tokenizer_open(cfg->tokenizer, &tok, err) != 0) {
        if (err->status == 422)   /* a bad file is a bad option */
            err->status = 2;
        goto out;
    }
    if (find_checkpoint(&c, cfg, &step, &stages, format, err) != 0 || check_format(cfg, format, err) != 0 ||
        sampler_open(&c, cfg, step, stages, &sm, err) != 0)
        goto out;
    fprintf(stderr, "shoal-agent sample: job %ld, checkpoint step %lld, %d stage(s), %d layers, d_model %d, "
            "context %d, temperature %g\n", cfg->job, (long long)step, stages, sm.model.layers, sm.model.d_model,
            sm.model.context, sm.temperature);
    if (check_tokens(cfg, format, &sm, &prompt, cfg->tokenizer[0] ? &tok : NULL, err) != 0)
        goto out;
    rc = generate(&sm, cfg, format, &prompt, cfg->tokenizer[0] ? &tok : NULL, out, err);
out:
    sampler_free(&sm);
    free(prompt.id);
    tokenizer_free(&tok);
    return rc;
}

int sample_main(int argc, char **argv, int first, FILE *out)
{
    struct sample_config cfg;
    struct shoal_err err = {0};
    memset(&cfg, 0, sizeof cfg);
    int rc = opts_load(sample_opts, N_SAMPLE_OPTS, &cfg, argc, argv, first, &err);
    if (rc == 1) {
        fprintf(out, "usage: shoal-agent sample --job ID [options]\n\n"
                     "Prints text generated by a job's model from its newest complete checkpoint\n"
                     "(or --step), on the cpu.  Every option can also be set by its environment\n"
                     "variable; flags win.\n\n"
                     "Jobs on llm.c token shards (data.format \"llmc\") print token ids unless\n"
                     "--tokenizer names llm.c's gpt2_tokenizer.bin; their prompt is ids\n"
                     "(--prompt-tokens): shoal decodes GPT-2 tokens but does not encode text.\n\n");
        opts_usage(sample_opts, N_SAMPLE_OPTS, out);
        return 0;
    }
    if (rc == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
        rc = err_set(&err, 1, "internal", NULL, "cannot initialise libcurl");
    else if (rc == 0) {
        rc = sample_run(&cfg, out, &err);
        curl_global_cleanup();
    }
    if (rc != 0) {
        fprintf(stderr, "shoal-agent sample: %s\n", err.message);
        return err.status == 2 ? 2 : 1;
    }
    return 0;
}
