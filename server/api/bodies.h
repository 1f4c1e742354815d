/* bodies.h - the request bodies the API accepts, parsed into structs.
 *
 * Every JSON body the server reads from a client (agents and operators
 * alike) goes through one parser here: the shape, the types, the ranges and
 * every rule between fields that needs no database.  The parsers are pure:
 * no database, no request, no I/O, so a handler reads parse -> validate ->
 * one database call -> answer, and tests/fuzz/fuzz_bodies.c can feed them
 * anything.  A job's specification is the exception that has a file of its
 * own (jobspec.h), being stored and read back as well.
 *
 * Each parser takes the body as jv_parse_object returned it, fills `out`
 * (defaults first, so a member that is absent keeps its default) and
 * returns 0, or -1 with `e` set (400 for shape and type, 422 for values out
 * of range; the field is named).  On failure `out` is not to be used, but
 * what it owns must still be freed where a _free function is given. */
#ifndef SHOAL_BODIES_H
#define SHOAL_BODIES_H

#include <jansson.h>
#include <stdint.h>

#include "../../common/buf.h"
#include "../../common/err.h"
#include "../jobs/planner.h"

/* 0 if `a` is "host:port": a non-empty host without spaces ("[v6]" with
 * brackets) and a port 1..65535, whose host does not resolve to an
 * address shoal never connects to (common/hostport.h: unspecified,
 * link-local such as the metadata service's 169.254.169.254, multicast,
 * broadcast, reserved, in any spelling).  A name that does not resolve
 * here is taken (it may resolve where the peers are); every connect
 * checks again.  Else -1 with the reason in why (HOSTPORT_WHY_MAX). */
int body_peer_address_check(const char *a, char *why, size_t why_len);

/* 1 when body_peer_address_check takes `a`, else 0. */
int body_peer_address_valid(const char *a);

/* A node's policy ("policy" in its registration and heartbeats): the
 * site owner's data roots (1..BODY_ROOTS_MAX absolute paths of at most
 * BODY_ROOT_MAX bytes), max_memory_bytes and threads (integers or null),
 * nothing else. */
#define BODY_ROOTS_MAX 16
#define BODY_ROOT_MAX 1023
#define BODY_POLICY_MAX 8192

/* POST /v1/nodes: an agent registers. */
struct body_registration {
    char name[64];
    char peer_address[262];     /* host:port, [v6]:port */
    char region[64];            /* "": none */
    char gpu_model[128];        /* "": none */
    int64_t gpu_memory_bytes;   /* 0: none */
    int64_t gpu_count;
    double tflops;              /* measured, dense */
    int64_t cpu_cores;
    int64_t ram_bytes;          /* 0: not reported */
    char policy[BODY_POLICY_MAX];   /* the owner's policy, compact JSON; "": not given (an older agent) */
};
int body_registration_parse(const json_t *body, struct body_registration *out, struct shoal_err *e);

/* POST /v1/nodes/{id}/heartbeat. */
struct body_heartbeat {
    char state[16];             /* "idle" or "busy" */
    int64_t job_id;             /* 0: none */
    int64_t step;               /* -1: none */
    char peer_address[262];     /* "": unchanged; a restarted agent may listen elsewhere */
    /* "held" (an idle agent): the stage its last unfinished tasklet left,
     * for a live resume (agent/train/live.h); held_job_id 0: none */
    int64_t held_job_id, held_step, held_layer_start, held_layer_end;   /* JV_INT fields are int64 */
    char policy[BODY_POLICY_MAX];   /* "": unchanged (a restarted agent sends its owner's policy again) */
};
int body_heartbeat_parse(const json_t *body, struct body_heartbeat *out, struct shoal_err *e);

#define BODY_LINKS_MAX_SAMPLES 4096   /* per report; a node has at most this many peers to report */
#define BODY_LINKS_REPORT_ID_MAX 128  /* characters of a report's name */

/* PUT /v1/links: a node's measured links, as three Postgres array literals
 * ("{2,3}", "{0.5,80}", "{10,0.2}") of equal length. */
struct body_links {
    const char *report_id;      /* the report's name, in the body (lives as long as it); NULL: none */
    struct buf to;              /* node ids */
    struct buf latency_ms;      /* ms */
    struct buf bandwidth_gbps;  /* Gbit/s */
    json_t *unreachable;        /* [{to, why}]: links the caller could not connect over at all */
    /* "relay": the caller's link to that relay, echoed through it, or its
     * probe that failed (reachable 0, why); address "" when absent */
    struct {
        char address[262];      /* host:port */
        double latency_ms;      /* ms; NAN when not reachable */
        double bandwidth_gbps;  /* Gbit/s; NAN when not reachable */
        int reachable;          /* 0: the probe failed */
        char why[200 + 1];      /* BODY_LINK_WHY_MAX */
    } relay;
};
#define BODY_LINK_WHY_MAX 200   /* bytes of a sample's "why" */
/* `self` is the reporting node: "from", when given, must be it (403), and no
 * sample may be to it; "samples" may be left out (or empty) when "relay" is
 * given.  Free `out` with body_links_free, also on failure. */
int body_links_parse(const json_t *body, int64_t self, struct body_links *out, struct shoal_err *e);
void body_links_free(struct body_links *out);

/* POST /v1/progress: one tasklet's step. */
struct body_progress {
    int64_t job_id, epoch, step, stage, replica;
    double loss;                 /* NAN: absent or null */
    double iteration_s;          /* wall time of the step, s */
    double compute_s;            /* forward + backward + optimizer, s */
    double send_s;               /* activations and gradients out, s */
    double recv_wait_s;          /* waiting for a neighbour's data, s */
    double allreduce_s;          /* data-parallel gradient reduction, s */
    double bubble_s;             /* pipeline idle time, s */
    int64_t tokens;              /* processed by this tasklet in the step */
    double eval_s;               /* the validation pass after the step, s; 0: none */
    double val_loss;             /* last stage: mean of its validation micro-batches; NAN: none */
    int64_t val_micro_batches;   /* how many it ran; -1: absent */
    int64_t stage_link_bytes;    /* sent on pipeline links in the step; -1: absent (an older agent) */
    int64_t sync_bytes;          /* sent to the data-parallel group in the step; -1: absent */
    double ring_prev_loss;       /* last stage: the previous replica's loss, passed round the ring; NAN: none */
    char checkpoint_error[1001]; /* why the node's own disk refused the step's checkpoint; "": it did not */
};
int body_progress_parse(const json_t *body, struct body_progress *out, struct shoal_err *e);

/* POST /v1/failures: a tasklet could not go on. */
/* A failure's cause, when the agent knows it will not heal by itself:
 * "dataset" (the job's data cannot be read or is not what the job says).
 * "": none given, which is a failure worth a re-plan. */
#define BODY_FAILURE_DATASET "dataset"
struct body_failure {
    int64_t job_id, epoch, stage, replica;
    char reason[1001];
    char peer[262];              /* "": none */
    int64_t peer_node;           /* the neighbour that failed, by node id; 0: none named */
    char cause[16];              /* "" or BODY_FAILURE_DATASET */
};
int body_failure_parse(const json_t *body, struct body_failure *out, struct shoal_err *e);

/* POST /v1/agent/dataset: the SHA-256 of the manifest an agent opened. */
struct body_dataset {
    int64_t job_id, epoch;
    char source[16];             /* "data" or "validation" */
    char sha256[65];             /* lowercased; "": null or absent, opened without a manifest */
};
int body_dataset_parse(const json_t *body, struct body_dataset *out, struct shoal_err *e);

#define BODY_NCCL_ID_HEX 256     /* hex digits of a 128-byte ncclUniqueId */

/* PUT /v1/nccl: replica 0 of a stage puts its group's NCCL id. */
struct body_nccl_put {
    int64_t job_id, epoch, stage;
    char unique_id[BODY_NCCL_ID_HEX + 1];   /* lowercased */
};
int body_nccl_put_parse(const json_t *body, struct body_nccl_put *out, struct shoal_err *e);

/* POST /v1/jobs/{id}/schedule.  `body` NULL (an empty body) means every
 * default: shoal, seed 1, 2000 ms, no candidate limit, stored, missing
 * links an error. */
int body_schedule_parse(const json_t *body, struct plan_request *out, struct shoal_err *e);

#define BODY_PLAN_MAX_STAGES 1024     /* the job spec's bounds */
#define BODY_PLAN_MAX_REPLICAS 4096

/* POST /v1/jobs/{id}/plan: the request's options into `req`, the
 * operator's assignment into `f` (its arrays allocated here: free them with
 * body_plan_free, also on failure).  `stages` has the shape a schedule's
 * answer has, so a dry run's stages can be posted back. */
int body_plan_parse(const json_t *body, struct plan_request *req, struct plan_force *f, struct shoal_err *e);
void body_plan_free(struct plan_force *f);

#endif
