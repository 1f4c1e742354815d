/* assign.h - an assignment from GET /v1/agent/assignment, checked and in C
 * types: the job's spec, this node's tasklet, its neighbours' addresses. */
#ifndef SHOAL_AGENT_ASSIGN_H
#define SHOAL_AGENT_ASSIGN_H

#include <jansson.h>
#include <stdint.h>

#include "../../common/codec.h"
#include "../../common/err.h"
#include "../../common/relay_ticket.h"
#include "../../kernels/kernels.h"
#include "../net/peer.h"
#include "pipeline.h"

#define ASSIGN_ADDR_MAX 262   /* host:port, as the server validates it */
#define ASSIGN_STAGES_MAX 1024 /* pipeline stages, as the server validates them */

/* How a stage's data-parallel group sums its gradients; the server picks
 * one per group, so every member agrees. */
enum assign_allreduce {
    ASSIGN_ALLREDUCE_RING,   /* the TCP ring (ring.h), on host memory */
    ASSIGN_ALLREDUCE_NCCL,   /* one NCCL communicator (nccl.h), on the GPUs */
};

/* How a stage's replicas stay together (sync.h has what each does). */
enum assign_sync {
    ASSIGN_SYNC_EVERY_STEP,  /* gradients summed every step */
    ASSIGN_SYNC_DILOCO,      /* inner_steps local steps, then an outer step */
};

/* How our connection to a neighbour is made, from our end (the plan's way,
 * sql/018_link_ways.sql). */
enum assign_way {
    ASSIGN_DIAL,          /* we dial its peer port */
    ASSIGN_TAKE,          /* it dials ours */
    ASSIGN_RELAY_DIAL,    /* both dial the plan's relay; we speak the dialer's hello */
    ASSIGN_RELAY_TAKE,    /* both dial the plan's relay; we answer as the listener */
};

/* A neighbour in the plan: the tasklet it runs and the node running it. */
struct assign_peer {
    char addr[ASSIGN_ADDR_MAX];     /* host:port of its peer listener; "": no such neighbour */
    enum assign_way way;            /* of the connection (the plan says, per link) */
    unsigned channel;               /* the connection's, enum wire_channel */
    int64_t node;
    int stage, replica;
    unsigned char key[WIRE_KEY_BYTES]; /* of our link to it (wire_link_key) */
    struct relay_ticket ticket;     /* ASSIGN_RELAY_*: the server's ticket for our end at the relay */
};

struct assignment {
    int64_t job_id;
    uint32_t epoch;
    int stage, replica;             /* this node's tasklet */
    int stages, replicas;           /* P, D */
    int layer_start, layer_end;     /* this stage's blocks */
    /* spec */
    struct model_config model;
    int micro_batches;              /* M, per replica and step */
    int micro_batch_size;           /* B, sequences */
    enum pipe_kind schedule;
    int64_t steps;
    double learning_rate;           /* peak */
    int64_t warmup_steps;
    double weight_decay;
    double grad_clip;               /* global norm; 0 = off */
    uint64_t seed;
    char data_path[512];
    char data_format[16];
    /* The datasets' manifests' SHA-256 the job recorded ("": none yet; the
     * first agent to open one records it, sql/013) */
    char data_sha256[65], val_sha256[65];
    int64_t checkpoint_interval;    /* steps; 0: only at the end */
    /* communication (a spec from before it: f32, every step) */
    enum codec_id stage_link;       /* activations and their gradients */
    enum assign_sync sync;
    int64_t inner_steps;            /* H; 1 under every_step */
    double outer_lr, outer_momentum;
    enum codec_id sync_codec;       /* diloco's pseudo-gradients */
    /* validation: has_validation 0 when the job names none */
    int has_validation;
    char val_path[512];             /* "" with a holdout */
    char val_format[16];
    double val_holdout;             /* fraction of data_path's tail */
    int val_sequences;
    int64_t eval_interval;
    enum assign_allreduce allreduce;
    int64_t node_id;                /* this node's, as the plan names it */
    /* neighbours; addr "" where there is none (the ring's too under NCCL) */
    struct assign_peer prev_stage, next_stage, ring_prev, ring_next;
    /* a tied model's other copy of the shared matrix: the last stage of this
     * replica for stage 0, stage 0 for the last; addr "" otherwise */
    struct assign_peer tie_peer;    /* the connection we send on */
    struct assign_peer tie_back;    /* the same peer: the connection we receive on */
    char relay[ASSIGN_ADDR_MAX];    /* the plan's relay (host:port) for ways through it; "": none */
    /* start from this complete checkpoint; resume_job 0: from scratch */
    int64_t resume_job, resume_step;
    /* the layers [start, end) each of its stage files holds, by stage;
     * resume_stages 0 (or a start of -1) when the server did not say */
    int resume_stages;
    struct { int layer_start, layer_end; } resume_layers[ASSIGN_STAGES_MAX];
    /* files per stage at the resume point: 1, or under diloco one per
     * replica of the job that saved it */
    int resume_replicas;
    /* a live resume (live.h): live 1 when the epoch starts at resume_step
     * from the state its nodes hold instead of a checkpoint; live_root the
     * replica that hands its state to the others (round the stage's ring,
     * or by NCCL), or -1 when every replica of the stage holds it */
    int live, live_root;
};

/* Reads the "assignment" object.  Returns 0, or -1 with err naming what is
 * missing or inconsistent (the server's answer is not trusted blindly). */
int assign_parse(const json_t *a, struct assignment *out, struct shoal_err *err);

#endif
