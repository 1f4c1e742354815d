/* lg_stats.c - per-kind counts and latency histograms (lg_stats.h). */
#include "lg_stats.h"

#include <math.h>
#include <string.h>

/* Bucket of a value in us. */
static int lg_hist_bucket(unsigned long long us)
{
    if (us < LG_HIST_LINEAR)
        return (int)us;
    int msb = 63 - __builtin_clzll(us);
    int shift = msb - 6;            /* us >> shift lies in [64, 128) */
    int idx = LG_HIST_LINEAR + (shift - 1) * LG_HIST_SUB + (int)((us >> shift) - LG_HIST_SUB);
    return idx < LG_HIST_BUCKETS ? idx : LG_HIST_BUCKETS - 1;
}

/* Largest value (us) that falls in bucket `idx`. */
static unsigned long long lg_hist_upper_us(int idx)
{
    if (idx < LG_HIST_LINEAR)
        return (unsigned long long)idx;
    int shift = (idx - LG_HIST_LINEAR) / LG_HIST_SUB + 1;
    unsigned long long sub = (unsigned long long)((idx - LG_HIST_LINEAR) % LG_HIST_SUB + LG_HIST_SUB);
    return ((sub + 1) << shift) - 1;
}

void lg_hist_add(struct lg_hist *h, double seconds)
{
    unsigned long long us = seconds > 0 ? (unsigned long long)llround(seconds * 1e6) : 0;
    h->buckets[lg_hist_bucket(us)]++;
    h->count++;
    h->sum_us += us;
    if (us > h->max_us)
        h->max_us = us;
}

double lg_hist_quantile_ms(const struct lg_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    long long rank = (long long)ceil(q * (double)h->count), seen = 0;
    if (rank < 1)
        rank = 1;
    for (int i = 0; i < LG_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            unsigned long long up = lg_hist_upper_us(i);
            return (double)(up < h->max_us ? up : h->max_us) / 1000.0;
        }
    }
    return (double)h->max_us / 1000.0;
}

static void lg_kind_note(struct lg_kind *k, const char *fmt_what, const char *detail)
{
    if (k->first_error[0])
        return;
    snprintf(k->first_error, sizeof k->first_error, "%s%s%.120s", fmt_what, detail ? ": " : "",
             detail ? detail : "");
    /* One line: answers may hold newlines. */
    for (char *p = k->first_error; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

void lg_kind_answer(struct lg_kind *k, int status, double seconds, const char *body)
{
    lg_hist_add(&k->latency, seconds);
    if (status >= 200 && status < 300) {
        k->ok++;
        return;
    }
    k->http_errors++;
    if (status >= 0 && status < 600)
        k->by_status[status]++;
    char what[32];
    snprintf(what, sizeof what, "HTTP %d", status);
    lg_kind_note(k, what, body);
}

void lg_kind_failure(struct lg_kind *k, int timed_out, const char *why)
{
    if (timed_out)
        k->timeouts++;
    else
        k->conn_failures++;
    lg_kind_note(k, timed_out ? "timeout" : "connection", why);
}

long long lg_kind_count(const struct lg_kind *k)
{
    return k->ok + k->http_errors + k->conn_failures + k->timeouts;
}

long long lg_kind_errors(const struct lg_kind *k)
{
    return k->http_errors + k->conn_failures + k->timeouts;
}

void lg_kind_header(FILE *out)
{
    fprintf(out, "%-11s %9s %9s %7s %9s %9s %9s %9s\n", "kind", "count", "req/s", "errors", "p50_ms", "p90_ms",
            "p99_ms", "max_ms");
}

void lg_kind_row(FILE *out, const struct lg_kind *k, double duration_s)
{
    const struct lg_hist *h = &k->latency;
    fprintf(out, "%-11s %9lld %9.1f %7lld %9.2f %9.2f %9.2f %9.2f\n", k->name, lg_kind_count(k),
            (double)lg_kind_count(k) / duration_s, lg_kind_errors(k), lg_hist_quantile_ms(h, 0.50),
            lg_hist_quantile_ms(h, 0.90), lg_hist_quantile_ms(h, 0.99), (double)h->max_us / 1000.0);
}

void lg_kind_json(FILE *out, const struct lg_kind *k, double duration_s)
{
    const struct lg_hist *h = &k->latency;
    fprintf(out, "\"%s\":{\"count\":%lld,\"ok\":%lld,\"errors\":%lld,\"rps\":%.2f,\"p50_ms\":%.3f,"
                 "\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"mean_ms\":%.3f,\"errors_by\":{",
            k->name, lg_kind_count(k), k->ok, lg_kind_errors(k), (double)lg_kind_count(k) / duration_s,
            lg_hist_quantile_ms(h, 0.50), lg_hist_quantile_ms(h, 0.90), lg_hist_quantile_ms(h, 0.99),
            (double)h->max_us / 1000.0, h->count ? (double)h->sum_us / (double)h->count / 1000.0 : 0.0);
    const char *sep = "";
    for (int s = 0; s < 600; s++) {
        if (k->by_status[s]) {
            fprintf(out, "%s\"%d\":%lld", sep, s, k->by_status[s]);
            sep = ",";
        }
    }
    if (k->conn_failures) {
        fprintf(out, "%s\"connection\":%lld", sep, k->conn_failures);
        sep = ",";
    }
    if (k->timeouts)
        fprintf(out, "%s\"timeout\":%lld", sep, k->timeouts);
    fprintf(out, "}}");
}
