/* workq.h - a fixed set of threads that run queued items in arrival order,
 * with a wait limit kept even while every thread is busy.
 *
 * The HTTP layer runs the routes that need the database here, so that a
 * slow or frozen database holds these threads, never the ones that accept
 * connections and answer /healthz (http.c).  An item that waits longer
 * than the queue's limit is handed out "late" by a keeper thread of its
 * own: its owner answers it at once without blocking. */
#ifndef SHOAL_WORKQ_H
#define SHOAL_WORKQ_H

#include "../../common/err.h"

struct workq;

/* Runs `item`: late 0 on a worker thread, late 1 (its wait ran out, or the
 * queue is stopping) on any thread, where it must not block. */
typedef void (*workq_fn)(void *item, int late, void *ctx);

/* Starts `threads` workers for at most `cap` queued items, each waiting at
 * most `max_wait_s` seconds.  Returns NULL with err set when threads or
 * memory are short. */
struct workq *workq_start(const char *name, int threads, int cap, double max_wait_s, workq_fn fn, void *ctx,
                          struct shoal_err *err);

/* Queues `item`.  Returns 0, or -1 when the queue is full or stopping
 * (the caller keeps the item). */
int workq_submit(struct workq *q, void *item);

/* What the queue holds now: items waiting, workers running one; and items
 * refused (full) and handed out late since the start. */
struct workq_counts {
    int waiting, running, threads;
    long refused, late;
};
void workq_counts(struct workq *q, struct workq_counts *out);

/* Stops taking items, hands every waiting one out late, waits for the
 * workers to finish theirs and frees the queue.  NULL is ignored. */
void workq_stop(struct workq *q);

#endif
