/* train.h - running one tasklet of a job: connect to the neighbours, then
 * for every step run the stage's forwards and backwards in the pipeline
 * schedule's order, all-reduce the gradients with the other replicas of the
 * stage, clip by the global norm, take an AdamW step, checkpoint every K
 * steps and report progress.
 *
 * Connections: a stage dials the next stage of its replica and the next
 * replica of its stage (ring order); it takes the connections of the
 * previous stage and the previous replica from its listener.  Every
 * connection is bound to the job and plan epoch by the hello.
 *
 * Numerics: the last stage back-propagates d(objective)/d(loss) = 1/(M*D)
 * for each micro-batch, so after the ring's sum every replica holds the
 * gradient of the mean loss over the global batch, bit-identical across
 * replicas.  The global squared norm is summed stage by stage along each
 * replica's pipeline (in double) and sent back, so every stage clips with
 * the same factor.  Learning rate: linear warm-up to the peak over
 * warmup_steps, then cosine decay to TRAIN_LR_FLOOR of the peak at the last
 * step. */
#ifndef SHOAL_AGENT_TRAIN_H
#define SHOAL_AGENT_TRAIN_H

#include <stdatomic.h>

#include "../../common/err.h"
#include "../../kernels/kernels.h"
#include "assign.h"
#include "../control/control.h"
#include "../net/peer.h"
#include "../control/report.h"

#define TRAIN_LR_FLOOR 0.1        /* the cosine ends at this fraction of the peak */
#define TRAIN_ADAM_BETA1 0.9
#define TRAIN_ADAM_BETA2 0.95
#define TRAIN_ADAM_EPS 1e-8

struct live_held;
struct data_roots;

struct train_env {
    const struct ctl *ctl;
    struct reporter *reporter;
    struct peer_listener *listener;
    struct kern_device dev;
    const char *data_dir;          /* temporary checkpoint files */
    const struct data_roots *roots;   /* where a job's data may be read (roots.h) */
    int64_t max_memory_bytes;      /* --max-memory: a stage's state must fit; 0: no cap */
    int peer_timeout_ms;           /* a neighbour silent this long fails the step */
    int connect_timeout_ms;        /* every neighbour must connect within this */
    const atomic_int *abort;       /* non-zero: the assignment changed; stop at the next step */
    atomic_llong *step;            /* the step in progress, for heartbeats */
    struct live_held *held;        /* the stage an unfinished tasklet leaves (live.h) */
};

enum train_result { TRAIN_DONE = 0, TRAIN_FAILED = -1, TRAIN_ABORTED = -2 };

/* Runs the tasklet to the job's last step.  TRAIN_FAILED comes with err set
 * (its message says what went wrong and with which peer) and the neighbour
 * that failed in failed_peer (addr "" if no peer was involved). */
enum train_result train_run(const struct train_env *env, const struct assignment *as,
                            struct assign_peer *failed_peer, struct shoal_err *err);

/* The learning rate of step t (0-based) of the schedule above. */
double train_lr(const struct assignment *as, int64_t t);

#endif
