/* live_resume.h - a re-plan that goes on from the survivors' memory.
 *
 * When a job of sync every_step fails, its surviving agents keep their
 * stages (agent/train/live.h) and say in their next, immediate, heartbeat what
 * they hold: {job, layers, step}.  The recovery thread waits for them (at
 * most LIVE_WAIT_S after the job went to recovery), then offers the
 * planner a repair of the failed plan: the same layers, the surviving
 * nodes in place (as many per stage as the re-plan's replicas, which are
 * fewer when nodes are short, planner.h; those holding the step first),
 * the places left filled with spares (each the one that makes the
 * predicted step cheapest), starting at the latest step s such that every
 * stage has a survivor holding s and step s-1 is whole (every tasklet of
 * the epoch that trained it reported it, so each step's losses are whole)
 * or can be made whole: trained by the failed epoch, with every last-stage
 * loss reported or carried by the next replica's report (ring_prev_loss).
 * The tasklets that finished s-1's all-reduce and died before reporting
 * it then get stand-in rows when the plan is stored (planner.c).  A
 * stage whose replicas do not all hold s gets a root: the lowest replica
 * that holds it, which hands it to the others over the stage's TCP ring or
 * its NCCL group, whichever the stage sums over (agent/train/live.h).  The
 * planner stores it instead of its search's plan when that is quicker over
 * the rest of the job (planner_offer_repair).  s may be the job's last
 * step (total_steps): a trained job that lost part of its final checkpoint
 * with a node re-plans to store it again, training nothing (planner.c,
 * agent/train/train.c).
 *
 * No offer, and so a checkpoint resume as before, when: the job syncs by
 * diloco (replicas differ between outer steps); some stage has no
 * survivor at any common step (every replica of it is gone: a checkpoint
 * is needed); or the latest such step is no later than the checkpoint.
 * A common step whose step before is not whole yet waits too, within
 * LIVE_WAIT_S: the survivors' progress reports travel apart from the
 * heartbeats that say what they hold; so does a failure that went through
 * the server's relay while the relay does not answer (planner_relay_down):
 * once it does, the links it broke are priced as measured in the repair
 * (planner_repair_problem), and a relay that restarts costs no step. */
#ifndef SHOAL_LIVE_RESUME_H
#define SHOAL_LIVE_RESUME_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "planner.h"

#define LIVE_WAIT_S 10.0  /* how long a re-plan waits for the survivors to say what they hold */

struct server;

/* Surveys job `job`'s failed plan and offers w a repair when one can go
 * on from the survivors.  Returns 0 (offered or not: the reason is
 * logged), 1 to wait (*waiting says for what), or -1 with e set. */
int live_resume_offer(struct server *srv, int64_t job, struct plan_work *w, char *waiting, size_t len,
                      struct shoal_err *e);

#endif
