/* tasklet.h - one running tasklet's state, shared by the parts of its
 * training loop (train.c: connect and step; eval.c: validation; sync.c:
 * the data-parallel group), and what they all use to talk to the
 * neighbours: waits sliced so a changed assignment stops them, tensors sent
 * and received through the job's stage-link codec (common/codec.h), and
 * failures that name the peer.  Not part of the agent's API. */
#ifndef SHOAL_AGENT_TASKLET_H
#define SHOAL_AGENT_TASKLET_H

#include "../../common/codec.h"
#include "data.h"
#include "../net/nccl.h"
#include "../net/ring.h"
#include "sync.h"
#include "train.h"

struct tasklet {
    const struct train_env *env;
    const struct assignment *as;
    struct peer_auth auth;
    struct kern_stage *st;
    struct data_source file;             /* data_path mapped, first and last stages */
    struct data_source data, val;        /* the training part of it, and the validation sequences' source */
    struct data_source val_file;         /* a validation file of its own, when the job names one */
    int have_data, have_val;
    struct pipe_op *ops;                 /* 2M, this stage's order */
    struct peer_stream *prev, *next;     /* pipeline neighbours, NULL at the ends */
    struct peer_conn ring_prev, ring_next;   /* the TCP ring's, unused under NCCL */
    struct peer_conn tie_prev, tie_next;     /* to and from as->tie_peer: a two-rank ring */
    float *tie_host;                     /* on a GPU: the tied matrix's gradient on the host, or NULL */
    struct nccl_group *nccl;             /* the stage's NCCL group, or NULL */
    size_t btc;                          /* floats in one micro-batch's hidden state */
    float *x, *y;                        /* (B,T,C): input received, output computed */
    const struct codec *link;            /* what crosses the stage links */
    size_t wire_bytes;                   /* one (B,T,C) tensor as the link sends it */
    int32_t *tokens, *targets;           /* (B,T) */
    double *loss;                        /* per micro-batch, last stage */
    double ring_prev_loss;               /* the step's mean loss of the previous replica (last stage:
                                            ring_pass_loss or nccl_pass_loss); NAN: not passed this step */
    struct sync_state sync;
    const struct assign_peer *failed_peer;   /* the neighbour that failed first, or NULL */
    /* the current step's parts, s: disjoint stretches of its iteration
     * (train.c, post_progress), and bytes sent */
    double compute_s, allreduce_s, send_s, recv_wait_s, bubble_s;
    uint64_t pipe_bytes, dp_bytes;       /* on stage links, in the data-parallel group */
    /* the current step's validation, last stage: mean loss over val_count micro-batches */
    double val_loss;
    int val_count;
    /* a checkpoint this node's disk refused (ckpt.h, CKPT_LOCAL_STORAGE): why, for the step's
       report ("": none since the last report), and whether it is the final one, still owed */
    char ckpt_fault[sizeof(((struct shoal_err *)0)->message)];
    int ckpt_owed;
};

/* The step's mean loss over this replica's micro-batches (last stage). */
double tasklet_loss_mean(const struct tasklet *k);

/* Notes which neighbour failed (the first one wins; one of k->as's) and
 * returns -1. */
int tasklet_peer_failed(struct tasklet *k, const struct assign_peer *peer);

/* A kernel error as the tasklet's error ("device_error"); returns -1. */
int tasklet_kern_failed(const struct kern_err *ke, struct shoal_err *err);

/* 1 when the tasklet should stop: its assignment changed, or the agent is
 * stopping. */
int tasklet_stopping(const struct tasklet *k);

/* tasklet_stopping as a peer wait's reason to give up (peer.h). */
struct peer_stop tasklet_peer_stop(struct tasklet *k);

/* The TCP ring of the stage's group (under NCCL its connections are
 * closed); its waits end within a slice once the tasklet is told to stop
 * (its job was re-planned). */
struct ring tasklet_ring(struct tasklet *k);

/* Sends a (B,T,C) tensor x, already in the stage link's format (the
 * stage packs it: kern_stage_forward), on stream s as frame (kind, t, m),
 * within --peer-timeout.  Returns 0, or -1 with err set and the peer
 * noted. */
int tasklet_send_tensor(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, int m,
                        const void *x, struct shoal_err *err);

/* Receives frame (kind, t, m) from stream s, which must carry (B,T,C)
 * values in the stage link's format (any other dtype or length fails the
 * stream), into x as they came (the stage unpacks them).  As
 * tasklet_send_tensor. */
int tasklet_recv_tensor(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, int m, void *x,
                        struct shoal_err *err);

/* A frame of opaque bytes (the global norm's doubles) to and from a
 * neighbour, within --peer-timeout. */
int tasklet_send_bytes(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, int m,
                       const void *payload, size_t len, struct shoal_err *err);
int tasklet_recv_bytes(struct tasklet *k, struct peer_stream *s, uint16_t kind, uint64_t t, int m, void *payload,
                       size_t len, struct shoal_err *err);

#endif
