/* live.h - a live resume: after a failure, the job goes on from the state
 * its surviving tasklets hold in memory instead of from a checkpoint, so
 * only the step in flight is trained again.
 *
 * When a tasklet stops (it failed, its job was re-planned, or it finished:
 * a trained job may still lose the node that was to store part of its
 * final checkpoint), the agent keeps its stage (weights, AdamW moments and
 * step count; under sync every_step every replica of a stage holds the
 * same bits) until its job is over, and says so in its heartbeats:
 * {job_id, layer_start, layer_end, step}.  The server's re-plan (server/jobs/live_resume.c) may then start the
 * next epoch at that step: each tasklet's assignment carries "live":
 * {step, root}.  A tasklet whose stage every replica holds takes its own;
 * otherwise the root replica, which holds it, sends it to the replicas
 * that do not (a spare that took a dead node's place, a replica one step
 * behind): round the stage's TCP ring (ring_broadcast), or by NCCL
 * broadcasts where the stage syncs over NCCL (nccl_broadcast_bytes). */
#ifndef SHOAL_AGENT_LIVE_H
#define SHOAL_AGENT_LIVE_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../../models/checkpoint.h"
#include "assign.h"

struct tasklet;

/* The stage the agent's last tasklet left.  The heartbeat
 * thread reads the summary under mu; the work thread changes it. */
struct live_held {
    pthread_mutex_t mu;
    struct kern_stage *st;      /* NULL: none */
    int64_t job;
    int layer_start, layer_end;
    uint64_t step;              /* AdamW steps taken: the step a resume starts at */
};

void live_init(struct live_held *h);
/* Frees the stage held, if any. */
void live_drop(struct live_held *h);
void live_destroy(struct live_held *h);

/* At the end of a tasklet under sync every_step: takes *st
 * (its micro-batches in flight dropped) and keeps it, in place of any
 * stage held before; *st is then NULL.  Otherwise does nothing. */
void live_keep(struct live_held *h, const struct assignment *as, struct kern_stage **st);

/* What the heartbeat says: {job_id, layer_start, layer_end, step}, or NULL. */
json_t *live_held_json(struct live_held *h);

/* The stage a tasklet starts with.  Under a live resume a replica that
 * must bring its own state (the root, or every replica when there is no
 * root) takes the held stage, which must be of this job and layers at the
 * resume step (else 409 "live_state_gone"); a stage built otherwise takes
 * its tensors from it.  Everything else drops what is held first, then
 * builds a new stage. */
int live_stage(struct live_held *h, const struct kern_device *dev, const struct assignment *as,
               const struct kern_stage_spec *sp, struct kern_stage **out, struct shoal_err *err);

/* Under a live resume with a root: the root's stage file to every other
 * replica (round the ring, or over the group's NCCL communicator, which
 * sync_open opened before), which loads it.  Otherwise nothing. */
int live_share(struct tasklet *k, struct shoal_err *err);

#endif
