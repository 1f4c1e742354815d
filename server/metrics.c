#include "metrics.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "prom.h"

/* Upper bounds of the latency buckets, seconds; long-polls land in the top ones. */
static const double bucket_le[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                    0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
#define N_BUCKETS (sizeof bucket_le / sizeof bucket_le[0])
#define N_STATUS 500   /* statuses 100..599, one slot each */

struct route_stats {
    atomic_uint_fast64_t by_status[N_STATUS];
    atomic_uint_fast64_t bucket[N_BUCKETS + 1];   /* last slot: above every bound */
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_ns;
};

struct metrics {
    size_t n_routes;
    struct route_stats *routes;   /* n_routes + 1; the last is "unmatched" */
};

struct metrics *metrics_new(size_t n_routes)
{
    struct metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->routes = calloc(n_routes + 1, sizeof *m->routes);
    if (!m->routes) {
        free(m);
        return NULL;
    }
    m->n_routes = n_routes;
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    free(m->routes);
    free(m);
}

void metrics_observe(struct metrics *m, int route, int status, double seconds)
{
    size_t slot = route >= 0 && (size_t)route < m->n_routes ? (size_t)route : m->n_routes;
    struct route_stats *s = &m->routes[slot];
    if (status >= 100 && status < 100 + N_STATUS)
        atomic_fetch_add(&s->by_status[status - 100], 1);
    size_t b = 0;
    while (b < N_BUCKETS && seconds > bucket_le[b])
        b++;
    atomic_fetch_add(&s->bucket[b], 1);
    atomic_fetch_add(&s->count, 1);
    atomic_fetch_add(&s->sum_ns, seconds > 0 ? (uint_fast64_t)(seconds * 1e9) : 0);
}

/* The route's labels: its method and pattern, or "unmatched". */
static void metrics_route_labels(const struct route *table, size_t slot, size_t n_routes,
                                 const char **method, const char **pattern)
{
    *method = slot < n_routes ? table[slot].method : "";
    *pattern = slot < n_routes ? table[slot].pattern : "unmatched";
}

int metrics_render(struct metrics *m, const struct route *table, struct buf *out)
{
    const char *method, *pattern;
    if (prom_family(out, "shoal_http_requests_total", "counter",
                    "HTTP requests answered, by route pattern, method and status.") != 0)
        return -1;
    for (size_t r = 0; r <= m->n_routes; r++) {
        metrics_route_labels(table, r, m->n_routes, &method, &pattern);
        for (int st = 0; st < N_STATUS; st++) {
            uint_fast64_t v = atomic_load(&m->routes[r].by_status[st]);
            if (!v)
                continue;
            char status[8];
            snprintf(status, sizeof status, "%d", st + 100);
            const char *labels[] = { "route", pattern, "method", method, "status", status, NULL };
            if (prom_sample(out, "shoal_http_requests_total", labels, (double)v) != 0)
                return -1;
        }
    }
    if (prom_family(out, "shoal_http_request_duration_seconds", "histogram",
                    "Time from the first byte of a request to the end of its response, seconds.") != 0)
        return -1;
    for (size_t r = 0; r <= m->n_routes; r++) {
        struct route_stats *s = &m->routes[r];
        uint_fast64_t count = atomic_load(&s->count);
        if (!count)
            continue;
        metrics_route_labels(table, r, m->n_routes, &method, &pattern);
        uint_fast64_t cumulative = 0;
        for (size_t b = 0; b <= N_BUCKETS; b++) {
            char le[32];
            cumulative += atomic_load(&s->bucket[b]);
            if (b < N_BUCKETS)
                snprintf(le, sizeof le, "%g", bucket_le[b]);
            else
                snprintf(le, sizeof le, "+Inf");
            const char *labels[] = { "route", pattern, "method", method, "le", le, NULL };
            if (prom_sample(out, "shoal_http_request_duration_seconds_bucket", labels,
                            (double)cumulative) != 0)
                return -1;
        }
        const char *labels[] = { "route", pattern, "method", method, NULL };
        if (prom_sample(out, "shoal_http_request_duration_seconds_sum", labels,
                        (double)atomic_load(&s->sum_ns) / 1e9) != 0 ||
            prom_sample(out, "shoal_http_request_duration_seconds_count", labels, (double)count) != 0)
            return -1;
    }
    return 0;
}
