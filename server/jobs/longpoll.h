/* longpoll.h - assignment long-polls that hold no thread and no database
 * connection while they wait.
 *
 * A waiting GET /v1/agent/assignment is suspended (request_suspend) and
 * kept in a list.  One thread per server owns one dedicated Postgres
 * connection that LISTENs on 'shoal_assignment', which the jobs trigger of
 * sql/002_agent.sql notifies (payload: the job id) whenever a job's state
 * or plan epoch changes, through any server on the database.  On a
 * notification the thread re-reads, in one query, the assignments of the
 * waiters it may concern (those that know of that job, and those that know
 * of none) and answers those whose (job, epoch, recovering) is no longer
 * what they knew.  Every LONGPOLL_TICK_S it answers the waiters whose time is up with
 * their current assignment.  If the connection drops it reconnects and
 * re-reads every waiter, since notifications may have been lost. */
#ifndef SHOAL_LONGPOLL_H
#define SHOAL_LONGPOLL_H

#include <stdint.h>

#include "../../common/err.h"
#include "../http/http.h"
#include "assignment.h"

#define LONGPOLL_TICK_S 0.5       /* s between deadline sweeps */
#define LONGPOLL_MAX_WAIT_S 60    /* s, the longest wait a request may ask for */
#define LONGPOLL_JITTER 0.2       /* a wait ends after (1 - up to this) of what was asked */

struct longpoll;

/* Starts the listener thread on its own connection to `conninfo`.  At most
 * `max_waiters` requests wait at once; their answers carry relay tickets
 * signed as `tickets` says (copied).  If the database cannot be reached
 * yet the thread keeps retrying; only a thread or memory failure is an
 * error.  Returns the long-poll set, or NULL with `err` set. */
struct longpoll *longpoll_start(const char *conninfo, long max_waiters, const struct assignment_tickets *tickets,
                                struct shoal_err *err);

/* The count of notifications seen so far.  A handler reads it before its
 * own query and passes it to longpoll_wait: if it moved in between, the
 * waiter is re-read at once (that notification would otherwise be lost). */
unsigned long longpoll_seq(struct longpoll *lp);

/* Parks `rq` (whose handler has filled its response with the node's
 * current assignment) until the node's assignment differs from (job_id,
 * epoch, recovering) (job_id 0: none; recovering: the job's state is) or
 * 80-100% of `wait_s` seconds pass (drawn per request, LONGPOLL_JITTER); it is then answered 200 with the assignment as it
 * is then.  Returns 0 if parked, or -1 when `max_waiters` are already
 * waiting or the server is stopping: the handler answers at once. */
int longpoll_wait(struct longpoll *lp, struct request *rq, int64_t node_id, int64_t job_id,
                  int64_t epoch, int recovering, double wait_s, unsigned long seq);

/* Requests waiting now, and 1 if the listener connection is up (/metrics). */
long longpoll_waiting(struct longpoll *lp);
int longpoll_listening(struct longpoll *lp);

/* Answers every waiter with its current assignment, refuses new waits and
 * stops the thread.  Call it while the HTTP daemon still runs, before
 * MHD_stop_daemon: suspended connections must all be resumed by then. */
void longpoll_stop(struct longpoll *lp);

/* Frees the set after longpoll_stop and MHD_stop_daemon.  NULL is ignored. */
void longpoll_free(struct longpoll *lp);

#endif
