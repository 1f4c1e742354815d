#include "metrics.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"

/* Upper bounds of the request latency buckets, seconds; long-polls land in the top ones. */
static const double bucket_le[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                    0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
#define N_BUCKETS (sizeof bucket_le / sizeof bucket_le[0])
#define N_STATUS 500   /* statuses 100..599, one slot each */

/* Upper bounds of the scheduler run buckets, seconds: a search's budget is
 * 10 ms to 120 s (2 s by default), and baselines and storing come on top. */
static const double schedule_le[] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                      5, 10, 30, 60, 120, 300 };
#define N_SCHEDULE_BUCKETS (sizeof schedule_le / sizeof schedule_le[0])

/* The method label of a request that matched no route: its method if it
 * is one of HTTP's (RFC 9110, and PATCH), else "other", so a client
 * sending made-up methods cannot grow the label set. */
static const char *const http_methods[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT",
                                            "OPTIONS", "TRACE", "PATCH", "other" };
#define N_METHODS (sizeof http_methods / sizeof http_methods[0])

/* The label values; indexed by enum sched_cost and enum metrics_schedule_result. */
static const char *const cost_model_names[] = { [SCHED_COST_DTFM] = "dtfm", [SCHED_COST_SHOAL] = "shoal" };
#define N_COST_MODELS (sizeof cost_model_names / sizeof cost_model_names[0])
static const char *const schedule_result_names[METRICS_SCHEDULE_RESULTS] = {
    [METRICS_SCHEDULE_STORED] = "stored", [METRICS_SCHEDULE_DRY_RUN] = "dry_run",
    [METRICS_SCHEDULE_ERROR] = "error",
};

/* One histogram's counts.  `bucket` has one slot per bound plus one above
 * every bound; each observation lands in exactly one slot (rendering makes
 * them cumulative). */
struct histogram {
    atomic_uint_fast64_t *bucket;
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_ns;
};

struct route_stats {
    atomic_uint_fast64_t by_status[N_STATUS];
    atomic_uint_fast64_t slots[N_BUCKETS + 1];
    struct histogram duration;   /* its buckets are `slots` */
};

struct schedule_stats {
    atomic_uint_fast64_t runs[METRICS_SCHEDULE_RESULTS];
    atomic_uint_fast64_t slots[N_SCHEDULE_BUCKETS + 1];
    struct histogram duration;   /* its buckets are `slots` */
};

struct metrics {
    size_t n_routes;
    struct route_stats *routes;   /* n_routes + N_METHODS: the table's, then "unmatched" per method */
    struct schedule_stats schedule[N_COST_MODELS];
};

struct metrics *metrics_new(size_t n_routes)
{
    struct metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->routes = calloc(n_routes + N_METHODS, sizeof *m->routes);
    if (!m->routes) {
        free(m);
        return NULL;
    }
    m->n_routes = n_routes;
    for (size_t r = 0; r < n_routes + N_METHODS; r++)
        m->routes[r].duration.bucket = m->routes[r].slots;
    for (size_t c = 0; c < N_COST_MODELS; c++)
        m->schedule[c].duration.bucket = m->schedule[c].slots;
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    free(m->routes);
    free(m);
}

/* Counts one observation of `seconds` in `h`, whose bounds are `le`. */
static void histogram_observe(struct histogram *h, const double *le, size_t n_le, double seconds)
{
    size_t b = 0;
    while (b < n_le && seconds > le[b])
        b++;
    atomic_fetch_add(&h->bucket[b], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_ns, seconds > 0 ? (uint_fast64_t)(seconds * 1e9) : 0);
}

/* The "unmatched" slot of `method`: its index in http_methods, the last
 * ("other") if it has none. */
static size_t metrics_method_slot(const char *method)
{
    for (size_t i = 0; i + 1 < N_METHODS; i++)
        if (method && strcmp(method, http_methods[i]) == 0)
            return i;
    return N_METHODS - 1;
}

void metrics_observe(struct metrics *m, int route, const char *method, int status, double seconds)
{
    size_t slot = route >= 0 && (size_t)route < m->n_routes ? (size_t)route
                                                           : m->n_routes + metrics_method_slot(method);
    struct route_stats *s = &m->routes[slot];
    if (status >= 100 && status < 100 + N_STATUS)
        atomic_fetch_add(&s->by_status[status - 100], 1);
    histogram_observe(&s->duration, bucket_le, N_BUCKETS, seconds);
}

void metrics_schedule_observe(struct metrics *m, enum sched_cost cost,
                              enum metrics_schedule_result result, double seconds)
{
    if ((size_t)cost >= N_COST_MODELS || (unsigned)result >= METRICS_SCHEDULE_RESULTS)
        return;
    struct schedule_stats *s = &m->schedule[cost];
    atomic_fetch_add(&s->runs[result], 1);
    histogram_observe(&s->duration, schedule_le, N_SCHEDULE_BUCKETS, seconds);
}

/* Writes the _bucket, _sum and _count samples of histogram `name` for one
 * series.  `labels` holds the series' key,value pairs, then two free slots
 * (le goes there) and a NULL.  A reading taken while observations land may
 * be a few counts apart between buckets and _count; each stays monotonic.
 * Returns 0, or -1 if `out` is full. */
static int histogram_render(struct buf *out, const char *name, const char **labels, size_t n_pairs,
                            struct histogram *h, const double *le, size_t n_le)
{
    char series[96], bound[32];
    uint_fast64_t cumulative = 0;
    snprintf(series, sizeof series, "%s_bucket", name);
    labels[2 * n_pairs] = "le";
    labels[2 * n_pairs + 1] = bound;
    for (size_t b = 0; b <= n_le; b++) {
        cumulative += atomic_load(&h->bucket[b]);
        if (b < n_le)
            snprintf(bound, sizeof bound, "%g", le[b]);
        else
            snprintf(bound, sizeof bound, "+Inf");
        if (prom_sample(out, series, labels, (double)cumulative) != 0)
            return -1;
    }
    labels[2 * n_pairs] = NULL;
    snprintf(series, sizeof series, "%s_sum", name);
    if (prom_sample(out, series, labels, (double)atomic_load(&h->sum_ns) / 1e9) != 0)
        return -1;
    snprintf(series, sizeof series, "%s_count", name);
    return prom_sample(out, series, labels, (double)atomic_load(&h->count));
}

/* The slot's labels: its route's method and pattern, or "unmatched" and
 * the request's method. */
static void metrics_route_labels(const struct route *table, size_t slot, size_t n_routes,
                                 const char **method, const char **pattern)
{
    *method = slot < n_routes ? table[slot].method : http_methods[slot - n_routes];
    *pattern = slot < n_routes ? table[slot].pattern : "unmatched";
}

/* The HTTP families.  Returns 0, or -1 if `out` is full. */
static int metrics_render_http(struct metrics *m, const struct route *table, struct buf *out)
{
    const char *method, *pattern;
    if (prom_family(out, "shoal_http_requests_total", "counter",
                    "HTTP requests answered, by route pattern, method and status.") != 0)
        return -1;
    for (size_t r = 0; r < m->n_routes + N_METHODS; r++) {
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
    for (size_t r = 0; r < m->n_routes + N_METHODS; r++) {
        struct route_stats *s = &m->routes[r];
        if (!atomic_load(&s->duration.count))
            continue;
        metrics_route_labels(table, r, m->n_routes, &method, &pattern);
        const char *labels[] = { "route", pattern, "method", method, NULL, NULL, NULL };
        if (histogram_render(out, "shoal_http_request_duration_seconds", labels, 2, &s->duration,
                             bucket_le, N_BUCKETS) != 0)
            return -1;
    }
    return 0;
}

/* The scheduler families, every cost model and result even at zero (both
 * sets are fixed and small).  Returns 0, or -1 if `out` is full. */
static int metrics_render_schedule(struct metrics *m, struct buf *out)
{
    if (prom_family(out, "shoal_scheduler_runs_total", "counter",
                    "Scheduler runs this server finished, by cost model and result "
                    "(stored: a new plan epoch; dry_run: shown only; error: no plan).") != 0)
        return -1;
    for (size_t c = 0; c < N_COST_MODELS; c++) {
        for (int r = 0; r < METRICS_SCHEDULE_RESULTS; r++) {
            const char *labels[] = { "cost_model", cost_model_names[c], "result", schedule_result_names[r], NULL };
            if (prom_sample(out, "shoal_scheduler_runs_total", labels,
                            (double)atomic_load(&m->schedule[c].runs[r])) != 0)
                return -1;
        }
    }
    if (prom_family(out, "shoal_scheduler_duration_seconds", "histogram",
                    "Time of one scheduler run on its thread (search, baselines, storing the plan), "
                    "by cost model, seconds.") != 0)
        return -1;
    for (size_t c = 0; c < N_COST_MODELS; c++) {
        const char *labels[] = { "cost_model", cost_model_names[c], NULL, NULL, NULL };
        if (histogram_render(out, "shoal_scheduler_duration_seconds", labels, 1, &m->schedule[c].duration,
                             schedule_le, N_SCHEDULE_BUCKETS) != 0)
            return -1;
    }
    return 0;
}

int metrics_render(struct metrics *m, const struct route *table, struct buf *out)
{
    if (metrics_render_http(m, table, out) != 0)
        return -1;
    return metrics_render_schedule(m, out);
}
