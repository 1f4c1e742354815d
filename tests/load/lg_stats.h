/* lg_stats.h - what the load generator records per request kind: counts,
 * errors by cause, and a latency histogram (log-linear: exact below
 * 128 us, then 64 buckets per power of two, so a quantile is within 1/64
 * of the true value). */
#ifndef LG_STATS_H
#define LG_STATS_H

#include <stdio.h>

#define LG_HIST_LINEAR 128                        /* us recorded exactly */
#define LG_HIST_SUB 64                            /* buckets per power of two above that */
#define LG_HIST_POWERS 40                         /* up to 2^46 us: far past any run */
#define LG_HIST_BUCKETS (LG_HIST_LINEAR + LG_HIST_SUB * LG_HIST_POWERS)

struct lg_hist {
    long long count;
    unsigned long long max_us, sum_us;
    long long buckets[LG_HIST_BUCKETS];
};

/* One request kind (heartbeat, long-poll, ...). */
struct lg_kind {
    const char *name;
    long long ok;                 /* 2xx answers */
    long long http_errors;        /* other answers; by_status says which */
    long long by_status[600];
    long long conn_failures;      /* connect/send/recv failed, or the server closed mid-request */
    long long timeouts;           /* no answer within the request's deadline */
    char first_error[160];        /* the first failure, for the reader */
    struct lg_hist latency;       /* every answered request, ok or not */
};

void lg_hist_add(struct lg_hist *h, double seconds);

/* The q-quantile (0 < q <= 1) in ms: the upper edge of its bucket, at most
 * the largest value seen; 0 when nothing was recorded. */
double lg_hist_quantile_ms(const struct lg_hist *h, double q);

/* An answer with HTTP `status` after `seconds`: 2xx counts as ok, any
 * other status as an error (the long-poll's timeout answer is a 200 with
 * the assignment as it is, so nothing else is expected).  `body` (may be
 * NULL) gives the first error's text. */
void lg_kind_answer(struct lg_kind *k, int status, double seconds, const char *body);

/* A request that got no answer: `timed_out` or a connection failure. */
void lg_kind_failure(struct lg_kind *k, int timed_out, const char *why);

long long lg_kind_count(const struct lg_kind *k);
long long lg_kind_errors(const struct lg_kind *k);

/* One table row: kind, count, req/s, errors, p50, p90, p99, max (ms). */
void lg_kind_row(FILE *out, const struct lg_kind *k, double duration_s);
void lg_kind_header(FILE *out);

/* One JSON member: "name":{...}, without a separator. */
void lg_kind_json(FILE *out, const struct lg_kind *k, double duration_s);

#endif
