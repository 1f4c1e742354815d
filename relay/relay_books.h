/* relay_books.h - what shoal-relay holds for each job and each client
 * address, and the limits on both (issue 45: a flood from one address, or
 * under one job, costs the others nothing).
 *
 * A job's entry counts its connections (waiting or paired; the job is the
 * one its ticket names, never one a request declares), its bytes and its
 * rate limit's bucket; while it has a metric series, /metrics shows its
 * bytes.  Series are bounded: at most max_job_series at once (a job past
 * the cap counts its bytes in the overflow series, and the first such job
 * each minute is logged), and a job's series goes job_series_ttl_s after
 * its last connection closed.  An address's entry counts the connections
 * it holds (reading, waiting, paired) and those waiting for a partner;
 * IPv6 addresses count by their /64, IPv4-mapped ones as IPv4.
 *
 * Not thread-safe: the relay calls every function under its one lock. */
#ifndef SHOAL_RELAY_BOOKS_H
#define SHOAL_RELAY_BOOKS_H

#include <stdint.h>
#include <sys/socket.h>

#include "../common/buf.h"
#include "../common/hostport.h"

#define BOOKS_ADDR_BUCKETS 1024

struct books_limits {
    long job_rate_mbit;            /* Mbit/s of one job's links together, both ways; 0: no limit */
    long max_job_series;           /* jobs /metrics shows at once */
    long job_series_ttl_s;         /* s a job's series stays after its last connection closed */
};

struct job_use {
    int64_t job_id;
    long conns;                    /* waiting or paired (a pair counts 2) */
    int series;                    /* 1: its bytes are a series of /metrics */
    uint64_t bytes;                /* forwarded, both ways (0 without a series) */
    double tokens, refilled_at;    /* rate bucket: bytes; mono_s */
    double quiet_since;            /* mono_s when conns last fell to 0 */
    struct job_use *next;
};

struct addr_use {
    unsigned char key[HOSTPORT_KEY_BYTES];         /* hostport_client_key */
    long held, waiting;            /* connections held; of them waiting for a partner */
    struct addr_use *next;
};

struct relay_books {
    struct books_limits lim;
    struct job_use *jobs;
    long series;                   /* jobs with a series now */
    uint64_t series_dropped;       /* jobs that got none: the cap was reached */
    uint64_t overflow_bytes;       /* bytes of jobs without a series */
    double overflow_logged_at;     /* mono_s */
    struct addr_use *addrs[BOOKS_ADDR_BUCKETS];
    long n_addrs;
};

void books_init(struct relay_books *b, const struct books_limits *lim);

/* Frees every entry (the relay has stopped). */
void books_free(struct relay_books *b);

/* The entry of job_id; create: made when missing (NULL: out of memory).
 * The caller changes its conns and calls books_job_quiet when they reach 0. */
struct job_use *books_job(struct relay_books *b, int64_t job_id, int create);

/* Notes that j's last connection closed (its series' time starts). */
void books_job_quiet(struct job_use *j);

/* Counts n bytes forwarded for job_id (its series, or the overflow) and
 * returns the seconds to wait before forwarding them under its rate limit
 * (0: none). */
double books_bytes(struct relay_books *b, int64_t job_id, uint64_t n);

/* Frees the entries of jobs with no connection whose series has expired
 * (all: every job with no connection). */
void books_expire(struct relay_books *b, int all);

/* The entry of an address key; create: made when missing (NULL: out of
 * memory).  books_addr_release when its held count falls to 0. */
struct addr_use *books_addr(struct relay_books *b, const unsigned char key[HOSTPORT_KEY_BYTES], int create);
void books_addr_release(struct relay_books *b, struct addr_use *a);

/* Appends the per-job series and the cap's overflow, Prometheus text. */
void books_metrics(const struct relay_books *b, struct buf *out);

#endif
