/* recovery.h - jobs carry on when nodes are lost or a step fails.
 *
 * A thread of the server, once every RECOVERY_TICK_S:
 *   1. marks 'lost' every idle or busy node whose last heartbeat is older
 *      than --heartbeat-timeout (not in the first --heartbeat-timeout after
 *      start-up, nor after the database last failed this server: the
 *      agents' heartbeats could not be stored meanwhile, and their next
 *      ones are on the way; nor when the database is slow to tell its
 *      clock, from which the silence is measured);
 *   2. moves each scheduled or running job whose current plan holds a lost
 *      node to 'recovering' (or to 'failed' past --max-recoveries); a
 *      failure report does the same (h_progress.c) and wakes the thread;
 *   3. judges the failure reports of each recovering job (fault_judge.h:
 *      which node or link is at fault, found by probing the plan's peer
 *      ports), then re-plans it on the nodes still live and not excluded
 *      (planner.h): a new plan epoch that starts from the job's latest
 *      complete checkpoint.  Agents learn of it through their assignment
 *      long-polls.  With too few nodes the job stays recovering, and says
 *      what it waits for, until enough join or an operator cancels it.
 *
 * Every step is one conditional statement, so several servers on one
 * database may all run it: a second re-plan of the same job finds it no
 * longer recovering and stores nothing. */
#ifndef SHOAL_RECOVERY_H
#define SHOAL_RECOVERY_H

#include "../../common/err.h"

#define RECOVERY_TICK_S 1.0              /* s between sweeps */
#define DB_CLOCK_AT_ONCE_S 1.0           /* s within which the database must tell its clock */
#define RECOVERY_BUDGET_MS 500           /* search time of a re-plan */
/* A re-plan may need links nobody measured yet (a spare that joined while
 * the others trained, and busy nodes are not probed): they count as this
 * slow, so that measured links are preferred. */
#define RECOVERY_FILL_LATENCY_MS 100.0
#define RECOVERY_FILL_BANDWIDTH_GBPS 0.1

struct server;
struct recovery;

/* Starts the thread.  Returns it, or NULL with err set. */
struct recovery *recovery_start(struct server *srv, struct shoal_err *err);

/* Stops and joins the thread (a re-plan in progress finishes first); NULL
 * is ignored. */
void recovery_stop(struct recovery *r);

/* Sweeps now instead of at the next tick (a failure was reported); NULL
 * is ignored. */
void recovery_wake(struct recovery *r);

#endif
