/* relay_books.c - each job's and each address's share of shoal-relay
 * (relay_books.h). */
#include "relay_books.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/log.h"

#define FORWARD_BURST (256u << 10)     /* bytes a job's bucket holds at least: one read */
#define OVERFLOW_LOG_S 60.0            /* s between two logs of jobs past the series cap */

void books_init(struct relay_books *b, const struct books_limits *lim)
{
    memset(b, 0, sizeof *b);
    b->lim = *lim;
    b->overflow_logged_at = -OVERFLOW_LOG_S;
}

void books_free(struct relay_books *b)
{
    while (b->jobs) {
        struct job_use *j = b->jobs;
        b->jobs = j->next;
        free(j);
    }
    for (int i = 0; i < BOOKS_ADDR_BUCKETS; i++)
        while (b->addrs[i]) {
            struct addr_use *a = b->addrs[i];
            b->addrs[i] = a->next;
            free(a);
        }
    b->series = b->n_addrs = 0;
}

struct job_use *books_job(struct relay_books *b, int64_t job_id, int create)
{
    for (struct job_use *j = b->jobs; j; j = j->next)
        if (j->job_id == job_id)
            return j;
    if (!create)
        return NULL;
    struct job_use *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->job_id = job_id;
    j->refilled_at = j->quiet_since = mono_s();
    if (b->series < b->lim.max_job_series) {
        j->series = 1;
        b->series++;
    } else {
        /* never silent: counted, and said once a minute */
        b->series_dropped++;
        if (j->refilled_at - b->overflow_logged_at >= OVERFLOW_LOG_S) {
            b->overflow_logged_at = j->refilled_at;
            log_warn("relay: job %lld gets no series in /metrics: %ld jobs have one (--max-job-series); its bytes "
                     "count in shoal_relay_job_overflow_bytes_total (%llu jobs so far)", (long long)job_id,
                     b->lim.max_job_series, (unsigned long long)b->series_dropped);
        }
    }
    j->next = b->jobs;
    b->jobs = j;
    return j;
}

void books_job_quiet(struct job_use *j)
{
    j->quiet_since = mono_s();
}

double books_bytes(struct relay_books *b, int64_t job_id, uint64_t n)
{
    double rate = (double)b->lim.job_rate_mbit * 125000.0;   /* bytes/s */
    struct job_use *j = books_job(b, job_id, 0);
    if (!j)
        return 0;
    if (j->series)
        j->bytes += n;
    else
        b->overflow_bytes += n;
    if (rate <= 0)
        return 0;
    double now = mono_s(), burst = rate * 0.1 > FORWARD_BURST ? rate * 0.1 : FORWARD_BURST;
    j->tokens += (now - j->refilled_at) * rate;
    j->refilled_at = now;
    if (j->tokens > burst)
        j->tokens = burst;
    j->tokens -= (double)n;
    return j->tokens < 0 ? -j->tokens / rate : 0;
}

void books_expire(struct relay_books *b, int all)
{
    double now = mono_s();
    for (struct job_use **jp = &b->jobs; *jp;) {
        struct job_use *j = *jp;
        if (j->conns <= 0 && (all || !j->series || now - j->quiet_since >= (double)b->lim.job_series_ttl_s)) {
            *jp = j->next;
            b->series -= j->series;
            free(j);
        } else {
            jp = &j->next;
        }
    }
}

static unsigned addr_bucket(const unsigned char key[HOSTPORT_KEY_BYTES])
{
    uint32_t h = 2166136261u;   /* FNV-1a */
    for (int i = 0; i < HOSTPORT_KEY_BYTES; i++)
        h = (h ^ key[i]) * 16777619u;
    return h % BOOKS_ADDR_BUCKETS;
}

struct addr_use *books_addr(struct relay_books *b, const unsigned char key[HOSTPORT_KEY_BYTES], int create)
{
    unsigned i = addr_bucket(key);
    for (struct addr_use *a = b->addrs[i]; a; a = a->next)
        if (memcmp(a->key, key, HOSTPORT_KEY_BYTES) == 0)
            return a;
    if (!create)
        return NULL;
    struct addr_use *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    memcpy(a->key, key, HOSTPORT_KEY_BYTES);
    a->next = b->addrs[i];
    b->addrs[i] = a;
    b->n_addrs++;
    return a;
}

void books_addr_release(struct relay_books *b, struct addr_use *a)
{
    if (a->held > 0)
        return;
    for (struct addr_use **ap = &b->addrs[addr_bucket(a->key)]; *ap; ap = &(*ap)->next)
        if (*ap == a) {
            *ap = a->next;
            b->n_addrs--;
            free(a);
            return;
        }
}

void books_metrics(const struct relay_books *b, struct buf *out)
{
    buf_printf(out, "# HELP shoal_relay_job_bytes_total Bytes forwarded for each job with links here (a job's series "
                    "goes --job-series-ttl after its last link closed).\n"
                    "# TYPE shoal_relay_job_bytes_total counter\n");
    for (const struct job_use *j = b->jobs; j; j = j->next)
        if (j->series)
            buf_printf(out, "shoal_relay_job_bytes_total{job=\"%lld\"} %llu\n", (long long)j->job_id,
                       (unsigned long long)j->bytes);
    buf_printf(out, "# HELP shoal_relay_job_series Jobs with a series in shoal_relay_job_bytes_total now.\n"
                    "# TYPE shoal_relay_job_series gauge\nshoal_relay_job_series %ld\n"
                    "# HELP shoal_relay_job_series_dropped_total Jobs that got no series: --max-job-series were "
                    "shown then.\n"
                    "# TYPE shoal_relay_job_series_dropped_total counter\nshoal_relay_job_series_dropped_total %llu\n"
                    "# HELP shoal_relay_job_overflow_bytes_total Bytes forwarded for jobs without a series.\n"
                    "# TYPE shoal_relay_job_overflow_bytes_total counter\nshoal_relay_job_overflow_bytes_total %llu\n"
                    "# HELP shoal_relay_addresses Client addresses (IPv6: /64s) holding connections now.\n"
                    "# TYPE shoal_relay_addresses gauge\nshoal_relay_addresses %ld\n",
               b->series, (unsigned long long)b->series_dropped, (unsigned long long)b->overflow_bytes, b->n_addrs);
}
