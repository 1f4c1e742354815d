/* ticker.h - the one periodic worker thread: runs a job at once, then
 * every period and whenever woken, until stopped.  The server's recovery
 * sweep, its embedded Postgres supervisor and its request-head deadline
 * are tickers.
 *
 * The job runs without the ticker's lock held; a wake that comes while it
 * runs makes it run again at once (nothing asked for is missed).  A long
 * job may ask ticker_stopping between pieces of its work. */
#ifndef SHOAL_TICKER_H
#define SHOAL_TICKER_H

#include "err.h"

struct ticker;

/* Starts a thread that calls job(t, arg) now and then every period_s
 * seconds (> 0) or when woken.  `name` says what it is in errors.  Returns the
 * ticker, or NULL with err set. */
struct ticker *ticker_start(const char *name, double period_s, void (*job)(struct ticker *t, void *arg), void *arg,
                            struct shoal_err *err);

/* Runs the job again as soon as it is free; NULL is ignored. */
void ticker_wake(struct ticker *t);

/* 1 once ticker_stop was called: a long job may end early. */
int ticker_stopping(struct ticker *t);

/* Stops the thread (a job in progress finishes first), joins it and frees
 * the ticker; NULL is ignored. */
void ticker_stop(struct ticker *t);

#endif
