/* eval.h - validation loss: after every validation.eval_interval-th step
 * (and the last), the job's fixed validation sequences (data.h,
 * data_eval_batch) run forward through the pipeline with the weights the
 * replicas share, no backward and no weight update.
 *
 * The sequences are taken in micro-batches of B; micro-batch v goes to
 * replica v mod D, so every layout evaluates the same sequences.  Frames
 * are WIRE_EVAL (the step's number, micro_batch v) in the stage link's
 * codec.  The last stage of each replica reports the mean of its
 * micro-batches' losses and how many it ran (val_loss, val_micro_batches
 * in its progress report); the server weighs them into the job's mean over
 * every sequence. */
#ifndef SHOAL_AGENT_EVAL_H
#define SHOAL_AGENT_EVAL_H

#include <stdint.h>

#include "../../common/err.h"
#include "assign.h"

struct tasklet;

/* 1 when the job evaluates after step t (0-based). */
int eval_due(const struct assignment *as, int64_t t);

/* Runs this tasklet's part of the evaluation after step t; on the last
 * stage sets k->val_loss and k->val_count.  Returns 0, or -1 with err set
 * (a neighbour failed, as in a step). */
int eval_run(struct tasklet *k, uint64_t t, struct shoal_err *err);

#endif
