/* metrics.h - counters and latency histograms kept in memory.
 *
 * HTTP requests are counted per route (the pattern, so label sets stay
 * bounded), method and status, their durations per route and method;
 * scheduler runs per cost model and result.  Gauges that live in the
 * database (the fleet, jobs, links) are read at scrape time by the
 * /metrics handler instead (h_metrics.c). */
#ifndef SHOAL_METRICS_H
#define SHOAL_METRICS_H

#include <stddef.h>

#include "../../common/buf.h"
#include "router.h"
#include "../sched/sched.h"

struct metrics;

/* How one scheduler run ended: its `result` label. */
enum metrics_schedule_result {
    METRICS_SCHEDULE_STORED,    /* the plan became the job's next epoch */
    METRICS_SCHEDULE_DRY_RUN,   /* the plan was only shown */
    METRICS_SCHEDULE_ERROR,     /* no plan: search failed, the job moved on, memory */
    METRICS_SCHEDULE_RESULTS    /* count, not a result */
};

/* Allocates zeroed metrics for a table of up to `n_routes` routes; NULL if
 * memory is short.  Free with metrics_free. */
struct metrics *metrics_new(size_t n_routes);
void metrics_free(struct metrics *m);

/* Records one finished request; `route` is the table index (a request
 * whose path has the route's shape and method but a bad id included), or
 * -1 for a request that matched no route, counted as route "unmatched"
 * under its `method` (one of HTTP's, else "other").  Thread-safe,
 * lock-free. */
void metrics_observe(struct metrics *m, int route, const char *method, int status, double seconds);

/* Records one scheduler run with cost model `cost` that took `seconds` on
 * its thread (search, baselines and storing the plan).  Thread-safe,
 * lock-free: runs finish on threads of their own. */
void metrics_schedule_observe(struct metrics *m, enum sched_cost cost,
                              enum metrics_schedule_result result, double seconds);

/* Writes shoal_http_requests_total and shoal_http_request_duration_seconds
 * for every route with traffic, and shoal_scheduler_runs_total and
 * shoal_scheduler_duration_seconds for every cost model and result (zeros
 * included, so rate() sees the first run).  Returns 0, or -1 if `out` is
 * full (it may then hold part of a family). */
int metrics_render(struct metrics *m, const struct route *table, struct buf *out);

#endif
