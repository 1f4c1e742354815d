/* sync.h - how a stage's data-parallel group keeps its replicas together:
 * the one table of sync modes (sync.c), chosen by the job's
 * communication.sync.
 *
 *   mode        each step                        every inner_steps (H) steps, and the last
 *   every_step  sum the gradients (the ring,     -
 *               or NCCL on GPUs), f32
 *   diloco      nothing: each replica takes      average the pseudo-gradients outer - local
 *               AdamW steps on its own batch     over the ring in the sync dtype (error
 *                                                feedback), outer Nesterov step, every
 *                                                replica continues from the new outer weights
 *
 * Bytes a rank sends per step, n floats of a stage, D replicas (the
 * scheduler's `shoal` model prices the same): every_step 2(D-1)/D * 4n;
 * diloco 2(D-1)/D * codec_bytes(sync dtype, n) / H.
 * What each replica back-propagates per micro-batch (d(objective)/d(loss)):
 * 1/(M*D) under every_step, where the sum over the group makes the mean;
 * 1/M under diloco, where each replica's gradient is its own batch's mean. */
#ifndef SHOAL_AGENT_SYNC_H
#define SHOAL_AGENT_SYNC_H

#include <stdint.h>

#include "../../common/err.h"
#include "assign.h"

struct tasklet;

/* DiLoCo's state of one tasklet: the outer weights and a work buffer on
 * the host; the outer momentum and the error feedback live with the stage
 * (kern_stage_extra), so that checkpoints carry them. */
struct sync_state {
    float *outer;           /* the weights of the last outer step, n floats */
    float *delta;           /* the pseudo-gradient being averaged, n floats */
    float *momentum;        /* outer Nesterov momentum (the stage's), n floats */
    float *feedback;        /* what the sync dtype lost so far (the stage's), n floats, or NULL for f32 */
};

/* Joins the group's NCCL communicator when the plan puts it on NCCL, and
 * sets up the mode's state from the stage as loaded (the outer weights are
 * the stage's weights at the start: a checkpoint is always an outer step).
 * Returns 0, or -1 with err set. */
int sync_open(struct tasklet *k, struct shoal_err *err);
void sync_close(struct tasklet *k);

/* d(objective)/d(loss) of one micro-batch's mean loss under the mode. */
float sync_loss_scale(const struct assignment *as);

/* After the step's backwards: every_step sums the gradients. */
int sync_gradients(struct tasklet *k, uint64_t t, struct shoal_err *err);

/* After the step's AdamW: diloco's outer step when step t ends a phase. */
int sync_weights(struct tasklet *k, uint64_t t, struct shoal_err *err);

/* 1 when the replicas hold the same weights after step t (0-based): every
 * step under every_step; under diloco after an outer step, i.e. when t+1
 * is a multiple of inner_steps or t is the last step. */
int sync_shared_after(const struct assignment *as, int64_t t);

#endif
