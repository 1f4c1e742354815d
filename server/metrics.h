/* metrics.h - request counters and latency histograms kept in memory.
 *
 * Counted per route (the pattern, so label sets stay bounded) and status.
 * Gauges that live in the database (nodes and jobs by state) are read at
 * scrape time by the /metrics handler instead. */
#ifndef SHOAL_METRICS_H
#define SHOAL_METRICS_H

#include <stddef.h>

#include "../common/buf.h"
#include "router.h"

struct metrics;

/* Allocates zeroed metrics for a table of up to `n_routes` routes; NULL if
 * memory is short.  Free with metrics_free. */
struct metrics *metrics_new(size_t n_routes);
void metrics_free(struct metrics *m);

/* Records one finished request; `route` is the table index or -1 for a
 * request that matched no route.  Thread-safe, lock-free. */
void metrics_observe(struct metrics *m, int route, int status, double seconds);

/* Writes shoal_http_requests_total and shoal_http_request_duration_seconds
 * for every route with traffic.  Returns 0, or -1 if `out` is full. */
int metrics_render(struct metrics *m, const struct route *table, struct buf *out);

#endif
