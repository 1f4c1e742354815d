/* jobspec.h - a training job's specification: parse, validate, normalise.
 *
 * The spec names the model, the parallelism, the training hyper-parameters,
 * the data and the checkpoint interval.  Validation is complete: every range
 * and every relation between fields (layers >= stages, d_model % heads == 0,
 * ...) is checked here, each failure naming its field, so nothing invalid
 * reaches the database or the scheduler. */
#ifndef SHOAL_JOBSPEC_H
#define SHOAL_JOBSPEC_H

#include <jansson.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../../common/model.h"
#include "../sched/sched.h"

struct job_spec {
    char name[64];
    struct model_config model;  /* normalised and checked (common/model_json.h) */
    /* parallelism */
    int64_t stages;             /* pipeline depth, P */
    int64_t replicas;           /* data-parallel width, D */
    int64_t micro_batches;      /* per step and replica, M */
    int64_t micro_batch_size;   /* sequences per micro-batch, B */
    char schedule[8];           /* "gpipe" or "1f1b" */
    /* training */
    int64_t steps;
    double learning_rate;       /* peak, after warm-up */
    int64_t warmup_steps;
    double weight_decay;        /* AdamW, decoupled */
    double grad_clip;           /* global norm; 0 = off */
    int64_t seed;
    /* data */
    char data_path[512];        /* as the agents see it */
    char data_format[16];       /* "llmc": llm.c token shards; "text": bytes, vocabulary 256 */
    char data_sha256[65];       /* the dataset's manifest's SHA-256, lowercase; "": the first agent's */
    int64_t checkpoint_interval; /* steps; 0 = only at the end; default min(100, steps)
                                    (under diloco: a multiple of inner_steps) */
    /* communication: what crosses the links (common/codec.h names) */
    char stage_link[8];         /* activations and their gradients: "f32", "bf16", "int8" */
    char sync[16];              /* data-parallel groups: "every_step" or "diloco" */
    int64_t inner_steps;        /* diloco: steps between outer steps (H); every_step: 1 */
    double outer_learning_rate; /* diloco's outer Nesterov SGD step */
    double outer_momentum;
    char sync_dtype[8];         /* diloco's pseudo-gradients on the wire (every_step: "f32") */
    /* validation: fixed sequences evaluated every eval_interval steps */
    int has_validation;         /* 0: none */
    char val_path[512];         /* a second file; "" when val_holdout is used */
    char val_format[16];        /* its format; default data.format */
    double val_holdout;         /* the last fraction of data.path instead; 0 with a path */
    char val_sha256[65];        /* validation.path's manifest's SHA-256, as data_sha256 */
    int64_t val_sequences;      /* a multiple of micro_batch_size */
    int64_t eval_interval;      /* steps; the last step is always evaluated */
    /* start from a complete checkpoint of another job (checked against that
     * job when this one is created, see h_jobs.c) */
    int64_t resume_job_id;      /* 0: from scratch */
    int64_t resume_step;
};

/* Validates the JSON body of POST /v1/jobs into `spec`, filling defaults for
 * optional fields.  Returns 0, or -1 with `err` naming the field (400 for
 * bad shape or type, 422 for values out of range or inconsistent).  What
 * needs the database (resume_from names a job with a matching complete
 * checkpoint) is checked by the caller. */
int jobspec_parse(const json_t *body, struct job_spec *spec, struct shoal_err *err);

/* A new job's data.path and validation.path must be absolute (422
 * otherwise): every agent opens them on its own machine.  Checked when a
 * job is created, not when a stored one or a job file is read. */
int jobspec_check_paths(const struct job_spec *s, struct shoal_err *err);

/* A job file as shoal-sched reads it: a POST /v1/jobs body, or GET
 * /v1/jobs/{id} output with the spec under "spec".  As jobspec_parse. */
int jobspec_from_document(const json_t *doc, struct job_spec *spec, struct shoal_err *err);

/* The normalised spec as JSON (every field present, defaults filled), as
 * stored in jobs.spec.  New reference; NULL if memory is short. */
json_t *jobspec_to_json(const struct job_spec *spec);

/* The defaults a spec gets for what it leaves out (a changed default is a
 * changed row here and in openapi.yaml). */
#define JOBSPEC_STAGE_LINK_DEFAULT "bf16"
#define JOBSPEC_INNER_STEPS_DEFAULT 100
#define JOBSPEC_OUTER_LR_DEFAULT 0.7
#define JOBSPEC_OUTER_MOMENTUM_DEFAULT 0.9
#define JOBSPEC_VAL_SEQUENCES_DEFAULT 32   /* rounded up to a multiple of micro_batch_size */

/* The model's counts the straggler rule's SQL needs (server/store/queries.h,
 * stored in jobs.model_costs): parameters of a block, the embedding and
 * the head, FLOPs of a forward+backward per token of a block and of the
 * head, from the family's row.  New reference; NULL if memory is short. */
json_t *jobspec_model_costs(const struct job_spec *spec);

/* Fills the job's shape, model and batch into a scheduling problem
 * (stages, replicas, model, and dtfm's c_dp/c_pp derived from them). */
void jobspec_sched_model(const struct job_spec *spec, struct sched_problem *pb);

#endif
