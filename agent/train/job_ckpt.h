/* job_ckpt.h - a job's complete checkpoint, from the server onto the cpu:
 * what `shoal-agent sample` and `shoal-agent export` start from.
 *
 * It picks the checkpoint (the newest complete one, or a given step),
 * downloads every stage's file (SHA-256 checked by ctl_get_file), builds a
 * cpu stage from each file's own header and checks that the stages chain
 * into the whole model.  It needs the admin token (checkpoints are an
 * operator's to read) and nothing else of the agent. */
#ifndef SHOAL_AGENT_JOB_CKPT_H
#define SHOAL_AGENT_JOB_CKPT_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "../../common/opts.h"
#include "../../models/checkpoint.h"
#include "../control/control.h"

/* Where the checkpoint comes from: the options both subcommands share. */
struct job_ckpt_source {
    char server_url[512];
    char ca_file[4096];
    char admin_token[TOKEN_MAX];
    char admin_token_file[PATH_MAX];
    long job;
    long step;                    /* 0: the newest complete checkpoint */
    char tmp_dir[PATH_MAX];       /* stage files pass through here */
};

/* The options table entries of a settings struct `type` whose member `src`
 * is a struct job_ckpt_source; ENV is the subcommand's variable prefix
 * ("SHOAL_SAMPLE") and VERB what it does with the checkpoint ("sample").
 * JOB_CKPT_SERVER_OPTS are the server, token and --job entries alone (WHAT
 * says what the job is to the subcommand). */
#define JOB_CKPT_SERVER_OPTS(type, ENV, WHAT)                                                                      \
    { "--server", "SHOAL_SERVER_URL", OPT_STR_FIELD(type, src.server_url), "http://127.0.0.1:8080",                \
      "shoal-server's base URL" },                                                                                 \
    { "--ca-file", "SHOAL_CA_FILE", OPT_STR_FIELD(type, src.ca_file), "",                                          \
      "PEM CA certificate(s) to verify an https --server with; empty: the system's CA store" },                    \
    { "--admin-token", "SHOAL_ADMIN_TOKEN", OPT_STR_FIELD(type, src.admin_token), "", "the server's admin token" }, \
    { "--admin-token-file", "SHOAL_ADMIN_TOKEN_FILE", OPT_STR_FIELD(type, src.admin_token_file), "",               \
      "file holding the admin token (the server's <data-dir>/admin.token), instead of --admin-token" },            \
    { "--job", ENV "_JOB", OPT_LONG_FIELD(type, src.job, 0, LONG_MAX), "0",                                        \
      "the job " WHAT " (required)" }
#define JOB_CKPT_OPTS(type, ENV, VERB)                                                                             \
    JOB_CKPT_SERVER_OPTS(type, ENV, "whose checkpoint to " VERB),                                                  \
    { "--step", ENV "_STEP", OPT_LONG_FIELD(type, src.step, 0, LONG_MAX), "0",                                     \
      "the checkpoint's step; 0: the newest complete one" },                                                       \
    { "--tmp-dir", ENV "_TMP_DIR", OPT_STR_FIELD(type, src.tmp_dir), "/tmp",                                       \
      "where stage files are kept while loading" }

/* A job's checkpoint: which one, and (once loaded) its stages in order. */
struct job_ckpt {
    int64_t step;                 /* the checkpoint's step */
    int stages;                   /* the job's pipeline stages, one file each */
    char format[16];              /* the job's data.format: "text", "llmc" */
    int spec_vocab;               /* the job spec's model.vocab_size, 0 if it has none (job_ckpt_find) */
    const char *progress;         /* the caller's name ("sample"): job_ckpt_load says on stderr as it starts and
                                     as each stage is fetched and built; NULL: silent */
    struct model_config model;      /* set by job_ckpt_load */
    struct kern_stage **st;       /* stage s holds the layers after stage s-1's; cpu, B=1 */
    /* job_ckpt_load_params instead: each stage's layers and parameters alone */
    struct kern_stage_spec *spec;
    float **params;
    /* ... and stage 0's source (checkpoint.h: the Hugging Face files the
     * model was imported from, hf_source.h), NULL when it has none */
    char *source;
    size_t source_len;
};

/* Checks src->job and loads the admin token, and fills *c to call the
 * server with it.  `verb` names the subcommand's use in messages.  Returns
 * 0, or -1 with err set and err->status 2 (bad options). */
int job_ckpt_connect(const struct job_ckpt_source *src, const char *verb, struct ctl *c, struct shoal_err *err);

/* Picks the checkpoint: src->step if it is complete, else (step 0) the
 * newest complete one; fills ck's step, stages, format and spec_vocab.
 * No stage file is fetched yet, so a caller can refuse options the job's
 * format (or vocabulary) rules out first.  -1 with err set (404 when there is none) on failure. */
int job_ckpt_find(const struct ctl *c, const struct job_ckpt_source *src, struct job_ckpt *ck,
                  struct shoal_err *err);

/* Fetches and checks every stage file of the checkpoint job_ckpt_find
 * picked and builds its cpu stages for sequences of seq_len tokens (0: the
 * model's context; export needs no activations and passes 1).  Sets
 * ck->model and ck->st, which job_ckpt_free releases, also on failure.
 * The files are removed from src->tmp_dir as soon as they are loaded. */
int job_ckpt_load(const struct ctl *c, const struct job_ckpt_source *src, int seq_len, struct job_ckpt *ck,
                  struct shoal_err *err);

/* job_ckpt_load for a reader that trains nothing (export): each stage's
 * spec and parameters only (ck->spec, ck->params: 4 bytes a parameter,
 * where a cpu stage holds 16), checked the same way, and stage 0's source
 * (ck->source). */
int job_ckpt_load_params(const struct ctl *c, const struct job_ckpt_source *src, struct job_ckpt *ck,
                         struct shoal_err *err);

void job_ckpt_free(struct job_ckpt *ck);

/* A subcommand that starts from a job's checkpoint. */
struct job_ckpt_command {
    const char *name;             /* "sample": in messages */
    const char *usage;            /* --help's text before the options, paragraphs ending "\n\n" */
    const struct opt *opts;       /* its options table ... */
    size_t n_opts;
    size_t config_size;           /* ... over a settings struct of this size */
    /* The work, given the settings; writes its results to out.  0, or -1
     * with err set (err->status 2: bad options). */
    int (*run)(const void *config, FILE *out, struct shoal_err *err);
};

/* The frame of such a subcommand: its settings from the environment and
 * argv[first..], --help on `out`, libcurl set up around run, the error on
 * stderr.  Returns the process exit status: 0, 1 when run fails, 2 for bad
 * options. */
int job_ckpt_main(const struct job_ckpt_command *cmd, int argc, char **argv, int first, FILE *out);

#endif
