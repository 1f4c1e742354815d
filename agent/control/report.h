/* report.h - what the agent tells the server without holding up training:
 * progress posts and checkpoint uploads.  Two threads send them, one the
 * posts and one the uploads, each queue in order, retrying while the
 * server is unreachable, so a server that restarts costs the data plane
 * nothing, and an upload that is slow or refused again and again (a full
 * checkpoint store) holds up no progress report.
 *
 * Each queue is bounded; a post into a full queue waits for room (training
 * slows down rather than losing a step's record).  A checkpoint upload is
 * a local file the queue owns and removes once sent; a newer checkpoint of
 * the same job and stage replaces the oldest one still waiting once
 * REPORT_WAITING_PER_KEY are (uploads that lag a little, on a slow link or
 * a loaded server, lose none; during an outage only the newest are worth
 * having, and the disk holds at most three per stage).  The server
 * treats a repeated post or upload as a duplicate, so a retry after a lost
 * answer is safe.  An answer below 500 that is not 2xx is final: the entry
 * is dropped, logged, and the error kept for report_flush. */
#ifndef SHOAL_AGENT_REPORT_H
#define SHOAL_AGENT_REPORT_H

#include <jansson.h>
#include <stdatomic.h>

#include "../../common/err.h"
#include "control.h"

#define REPORT_WAITING_PER_KEY 2   /* uploads of one job and stage that may wait behind the one being sent */

struct reporter;

/* Starts the sending thread, which uses a copy of `ctl`. */
int report_start(const struct ctl *ctl, int max_pending, struct reporter **out, struct shoal_err *err);

/* Queues POST `path` with `body` (stolen). */
void report_post(struct reporter *r, const char *path, json_t *body);

/* Queues PUT `path` of the local file `file` (taken over: removed once
 * sent, refused, replaced or abandoned) whose SHA-256 is `sha256`.
 * `supersede_key` names what a newer upload replaces ("job=J stage=S"). */
void report_put_file(struct reporter *r, const char *path, const char *file, const char *sha256,
                     const char *supersede_key);

/* Waits up to timeout_s until the queue is empty, or (`stop` non-NULL)
 * until *stop is raised: what is queued then goes on being sent in the
 * background.  Returns 0, or -1 with err set: the queue did not drain
 * (503), the wait was stopped (409 "stopped"), or a post was refused since
 * the last flush. */
int report_flush(struct reporter *r, double timeout_s, const atomic_int *stop, struct shoal_err *err);

/* Stops the thread, abandoning a post being retried; posts still queued
 * are dropped (flush first). */
void report_stop(struct reporter *r);

#endif
