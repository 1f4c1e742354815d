/* pipeline.h - the order in which one stage runs the forward and backward
 * passes of a step's micro-batches: GPipe or 1F1B (PipeDream-flush).
 *
 * GPipe: every forward, then every backward, both in micro-batch order; a
 * stage keeps all M micro-batches' activations.  1F1B: stage s of P runs
 * min(P-1-s, M) forwards to fill the pipe, then alternates one forward and
 * one backward, then drains the backwards; it keeps at most min(P-s, M)
 * micro-batches.  Both run the backwards in micro-batch order, so gradients
 * accumulate in the same order and the two schedules give the same bits. */
#ifndef SHOAL_AGENT_PIPELINE_H
#define SHOAL_AGENT_PIPELINE_H

enum pipe_kind { PIPE_GPIPE, PIPE_1F1B };
enum pipe_op_kind { PIPE_FORWARD, PIPE_BACKWARD };

struct pipe_op {
    enum pipe_op_kind kind;
    int micro_batch;
};

/* Parses "gpipe" or "1f1b".  Returns 0, or -1 if unknown. */
int pipe_parse(const char *name, enum pipe_kind *out);

/* Fills ops[0 .. 2*micro_batches) for stage `stage` of `stages` and returns
 * the most micro-batches in flight at once (the in_flight a stage needs). */
int pipe_schedule(enum pipe_kind kind, int stage, int stages, int micro_batches, struct pipe_op *ops);

#endif
