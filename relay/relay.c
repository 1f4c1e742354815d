/* relay.c - shoal-relay's connections: pairing and forwarding (relay.h). */
#include "relay.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/clock.h"
#include "../common/hostport.h"
#include "../common/log.h"
#include "../common/relay_proto.h"

#define REQUEST_MS 10000           /* a new connection has this long for its request */
#define FORWARD_BYTES (256u << 10) /* read at once per connection */
#define REAP_MS 500
#define HTTP_HEAD_MAX 4096

enum conn_state { CONN_READING, CONN_WAITING, CONN_JOINED, CONN_DONE };

struct conn {
    struct relay *r;
    pthread_t thread;
    int fd;
    enum conn_state state;
    struct relay_request rq;
    struct conn *partner;          /* once joined; never freed before this one */
    char addr[96];                 /* host:port, for logs */
    struct conn *next;
};

/* What one job uses: its links (waiting or joined connections, by twos)
 * and its bytes, and its rate limit's bucket. */
struct job_use {
    int64_t job_id;
    long conns;
    uint64_t bytes;
    double tokens, refilled_at;    /* bytes; mono_s */
    struct job_use *next;
};

struct relay {
    struct relay_config cfg;
    int fd, wake_fd;
    pthread_t accept_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* a pairing, or stop */
    int stop;
    struct conn *conns;
    long n_conns;
    struct job_use *jobs;
    struct relay_counts counts;
};

static struct job_use *job_find(struct relay *r, int64_t job_id, int create)
{
    for (struct job_use *j = r->jobs; j; j = j->next)
        if (j->job_id == job_id)
            return j;
    if (!create)
        return NULL;
    struct job_use *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->job_id = job_id;
    j->refilled_at = mono_s();
    j->next = r->jobs;
    r->jobs = j;
    return j;
}

/* Sends a reply (small: never blocks for long on a fresh socket). */
static void reply(int fd, char status, const char *text)
{
    unsigned char out[RELAY_REPLY_BYTES];
    relay_reply_encode(status, text, out);
    (void)send(fd, out, sizeof out, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Reads exactly n bytes within deadline_ms (mono_ms), or -1. */
static int read_full(struct relay *r, int fd, void *buf, size_t n, int64_t deadline_ms)
{
    size_t got = 0;
    while (got < n) {
        int64_t left = deadline_ms - mono_ms();
        struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = r->wake_fd, .events = POLLIN } };
        if (left <= 0 || poll(p, 2, (int)left) <= 0 || (p[1].revents & POLLIN))
            return -1;
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Waits, rate-limited, before forwarding n more bytes of the job's. */
static void throttle(struct relay *r, int64_t job_id, size_t n)
{
    double rate = (double)r->cfg.job_rate_mbit * 125000.0, wait = 0;   /* bytes/s */
    pthread_mutex_lock(&r->mu);
    struct job_use *j = job_find(r, job_id, 0);
    if (j) {
        j->bytes += n;
        if (rate > 0) {
            double now = mono_s(), burst = rate * 0.1 > FORWARD_BYTES ? rate * 0.1 : FORWARD_BYTES;
            j->tokens += (now - j->refilled_at) * rate;
            j->refilled_at = now;
            if (j->tokens > burst)
                j->tokens = burst;
            j->tokens -= (double)n;
            wait = j->tokens < 0 ? -j->tokens / rate : 0;
        }
    }
    r->counts.bytes_total += n;
    pthread_mutex_unlock(&r->mu);
    if (wait > 0) {
        struct timespec ts = { .tv_sec = (time_t)wait, .tv_nsec = (long)((wait - (double)(time_t)wait) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

/* Forwards what c's socket receives to its partner's until either end
 * closes or fails; then shuts both down, which ends the partner's loop. */
static void forward(struct conn *c)
{
    struct relay *r = c->r;
    char *buf = malloc(FORWARD_BYTES);
    while (buf) {
        ssize_t n = read(c->fd, buf, FORWARD_BYTES);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        throttle(r, c->rq.job_id, (size_t)n);
        ssize_t off = 0;
        while (off < n) {
            ssize_t w = send(c->partner->fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                goto out;
            off += w;
        }
    }
out:
    free(buf);
    shutdown(c->fd, SHUT_RDWR);
    shutdown(c->partner->fd, SHUT_RDWR);
}

/* A probe: every byte back, up to RELAY_PROBE_MAX_BYTES within
 * RELAY_PROBE_MAX_S (the agent times its echoes). */
static void echo(struct conn *c)
{
    char *buf = malloc(FORWARD_BYTES);
    uint64_t total = 0;
    int64_t end = mono_ms() + RELAY_PROBE_MAX_S * 1000;
    reply(c->fd, 'P', "probe");
    while (buf && total < RELAY_PROBE_MAX_BYTES) {
        struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = c->r->wake_fd, .events = POLLIN } };
        int64_t left = end - mono_ms();
        if (left <= 0 || poll(p, 2, (int)left) <= 0 || (p[1].revents & POLLIN))
            break;
        ssize_t n = read(c->fd, buf, FORWARD_BYTES);
        if (n <= 0 || send(c->fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
            break;
        total += (uint64_t)n;
    }
    free(buf);
}

/* The connection's request: pairs it with a waiting partner, or waits for
 * one.  Returns 0 when joined (both replies sent), else -1 (refused, the
 * reason sent). */
static int pair(struct conn *c)
{
    struct relay *r = c->r;
    char why[96] = "";
    int rc = -1;
    pthread_mutex_lock(&r->mu);
    struct job_use *j = job_find(r, c->rq.job_id, 1);
    if (!j) {
        snprintf(why, sizeof why, "out of memory");
        goto out;
    }
    if (j->conns >= 2 * r->cfg.max_links_per_job) {
        snprintf(why, sizeof why, "job %lld has %ld links here already (--max-links-per-job)",
                 (long long)c->rq.job_id, r->cfg.max_links_per_job);
        goto out;
    }
    for (struct conn *o = r->conns; o; o = o->next) {
        if (o->state != CONN_WAITING || o->rq.side == c->rq.side || o->rq.job_id != c->rq.job_id ||
            memcmp(o->rq.token, c->rq.token, RELAY_TOKEN_BYTES) != 0)
            continue;
        /* one whose end gave up (a dialer that retried) waits out its
         * time unpaired; a newer one of the same link is on the list */
        struct pollfd hup = { .fd = o->fd, .events = POLLRDHUP };
        if (poll(&hup, 1, 0) > 0 && (hup.revents & (POLLRDHUP | POLLHUP | POLLERR)))
            continue;
        o->partner = c, c->partner = o;
        o->state = c->state = CONN_JOINED;
        r->counts.waiting--;
        r->counts.joined++;
        r->counts.pairs_total++;
        j->conns++;
        reply(o->fd, 'P', "paired");
        reply(c->fd, 'P', "paired");
        pthread_cond_broadcast(&r->cv);
        rc = 0;
        goto out;
    }
    /* none yet: wait for it */
    c->state = CONN_WAITING;
    r->counts.waiting++;
    j->conns++;
    double until = mono_s() + (double)r->cfg.pair_wait_s;
    while (c->state == CONN_WAITING && !r->stop && mono_s() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    if (c->state == CONN_JOINED) {
        rc = 0;
        goto out;
    }
    c->state = CONN_READING;
    r->counts.waiting--;
    j->conns--;
    snprintf(why, sizeof why, r->stop ? "the relay is stopping" : "no partner came within %ld s", r->cfg.pair_wait_s);
out:
    if (rc != 0) {
        r->counts.refused_total++;
        reply(c->fd, 'E', why);
        log_info("relay: refused %s (job %lld): %s", c->addr, (long long)c->rq.job_id, why);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* Prometheus text of the counters and each job's bytes. */
static void metrics_text(struct relay *r, struct buf *b)
{
    pthread_mutex_lock(&r->mu);
    struct relay_counts k = r->counts;
    buf_printf(b, "# HELP shoal_relay_waiting Connections waiting for their partner.\n"
                  "# TYPE shoal_relay_waiting gauge\nshoal_relay_waiting %llu\n"
                  "# HELP shoal_relay_links Pairs of connections being forwarded now.\n"
                  "# TYPE shoal_relay_links gauge\nshoal_relay_links %llu\n"
                  "# HELP shoal_relay_pairs_total Pairs joined since the relay started.\n"
                  "# TYPE shoal_relay_pairs_total counter\nshoal_relay_pairs_total %llu\n"
                  "# HELP shoal_relay_refused_total Connections refused: malformed, over a limit, or no partner in time.\n"
                  "# TYPE shoal_relay_refused_total counter\nshoal_relay_refused_total %llu\n"
                  "# HELP shoal_relay_bytes_total Bytes forwarded, both ways.\n"
                  "# TYPE shoal_relay_bytes_total counter\nshoal_relay_bytes_total %llu\n"
                  "# HELP shoal_relay_job_bytes_total Bytes forwarded for each job with links here.\n"
                  "# TYPE shoal_relay_job_bytes_total counter\n",
               (unsigned long long)k.waiting, (unsigned long long)k.joined, (unsigned long long)k.pairs_total,
               (unsigned long long)k.refused_total, (unsigned long long)k.bytes_total);
    for (struct job_use *j = r->jobs; j; j = j->next)
        buf_printf(b, "shoal_relay_job_bytes_total{job=\"%lld\"} %llu\n", (long long)j->job_id,
                   (unsigned long long)j->bytes);
    pthread_mutex_unlock(&r->mu);
}

/* A connection that opened with "GET ": /metrics or /healthz. */
static void http(struct conn *c, const unsigned char *first, size_t n)
{
    char head[HTTP_HEAD_MAX + 1];
    struct buf body;
    size_t got = n;
    memcpy(head, first, n);
    int64_t deadline = mono_ms() + REQUEST_MS;
    while (got < HTTP_HEAD_MAX) {
        head[got] = '\0';
        if (strstr(head, "\r\n\r\n") || strstr(head, "\n\n"))
            break;
        if (read_full(c->r, c->fd, head + got, 1, deadline) != 0)
            return;
        got++;
    }
    head[got] = '\0';
    buf_init(&body, 1u << 20);
    const char *status = "200 OK";
    if (strncmp(head, "GET /metrics ", 13) == 0)
        metrics_text(c->r, &body);
    else if (strncmp(head, "GET /healthz ", 13) == 0)
        buf_printf(&body, "ok\n");
    else
        status = "404 Not Found", buf_printf(&body, "this relay serves GET /metrics and GET /healthz\n");
    char hdr[200];
    int h = snprintf(hdr, sizeof hdr, "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, body.len);
    if (send(c->fd, hdr, (size_t)h, MSG_NOSIGNAL) == h && body.len)
        (void)send(c->fd, body.data, body.len, MSG_NOSIGNAL);
    buf_free(&body);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct relay *r = c->r;
    unsigned char in[RELAY_REQUEST_BYTES];
    char why[96];
    int64_t deadline = mono_ms() + REQUEST_MS;
    if (read_full(r, c->fd, in, 4, deadline) != 0)
        goto out;
    if (memcmp(in, "GET ", 4) == 0) {
        http(c, in, 4);
        goto out;
    }
    if (read_full(r, c->fd, in + 4, sizeof in - 4, deadline) != 0)
        goto out;
    if (relay_request_decode(in, &c->rq, why, sizeof why) != 0) {
        pthread_mutex_lock(&r->mu);
        r->counts.refused_total++;
        pthread_mutex_unlock(&r->mu);
        log_info("relay: refused %s: %s", c->addr, why);
        reply(c->fd, 'E', why);
        goto out;
    }
    if (c->rq.side == RELAY_SIDE_PROBE)
        echo(c);
    else if (pair(c) == 0)
        forward(c);
out:
    pthread_mutex_lock(&r->mu);
    if (c->state == CONN_JOINED) {
        /* the pair ends when its first side does */
        if (c->partner->state == CONN_JOINED) {
            r->counts.joined--;
            struct job_use *j = job_find(r, c->rq.job_id, 0);
            if (j)
                j->conns -= 2;
        }
    }
    c->state = CONN_DONE;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Joins finished connections (a joined one with its partner, whose thread
 * writes to its socket), closes and frees them; drops jobs with no links
 * left.  all: wait for every thread (stop). */
static void reap(struct relay *r, int all)
{
    pthread_mutex_lock(&r->mu);
    struct conn **pp = &r->conns;
    while (*pp) {
        struct conn *c = *pp;
        int done = c->state == CONN_DONE && (!c->partner || c->partner->state == CONN_DONE);
        if (!done && !all) {
            pp = &c->next;
            continue;
        }
        if (!done) {   /* stop: wait for it without the lock */
            pthread_mutex_unlock(&r->mu);
            pthread_join(c->thread, NULL);
            pthread_mutex_lock(&r->mu);
            c->state = CONN_DONE;
            pp = &r->conns;   /* the list may have changed */
            continue;
        }
        *pp = c->next;
        if (c->partner)
            c->partner->partner = NULL;   /* done too: nothing reads it any more */
        pthread_join(c->thread, NULL);
        close(c->fd);
        r->n_conns--;
        free(c);
    }
    for (struct job_use **jp = &r->jobs; *jp;) {
        struct job_use *j = *jp;
        if (j->conns <= 0 && (all || j->bytes == 0)) {
            *jp = j->next;
            free(j);
        } else {
            jp = &j->next;
        }
    }
    pthread_mutex_unlock(&r->mu);
}

static void accept_one(struct relay *r)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[64], port[16];
    int fd = accept4(r->fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE)
            usleep(100 * 1000);
        return;
    }
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct conn *c = calloc(1, sizeof *c);
    pthread_mutex_lock(&r->mu);
    int full = r->n_conns >= r->cfg.max_connections;
    if (full || !c)
        r->counts.refused_total++;
    pthread_mutex_unlock(&r->mu);
    if (full || !c) {
        reply(fd, 'E', full ? "busy: the relay holds --max-connections" : "out of memory");
        close(fd);
        free(c);
        return;
    }
    if (getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(host, sizeof host, "?"), snprintf(port, sizeof port, "?");
    snprintf(c->addr, sizeof c->addr, "%s:%s", host, port);
    c->r = r;
    c->fd = fd;
    pthread_mutex_lock(&r->mu);
    if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
        pthread_mutex_unlock(&r->mu);
        close(fd);
        free(c);
        return;
    }
    c->next = r->conns;
    r->conns = c;
    r->n_conns++;
    pthread_mutex_unlock(&r->mu);
}

static void *accept_main(void *arg)
{
    struct relay *r = arg;
    for (;;) {
        struct pollfd p[2] = { { .fd = r->fd, .events = POLLIN }, { .fd = r->wake_fd, .events = POLLIN } };
        int n = poll(p, 2, REAP_MS);
        if (n > 0 && (p[1].revents & POLLIN))
            break;
        reap(r, 0);
        if (n > 0 && (p[0].revents & POLLIN))
            accept_one(r);
    }
    return NULL;
}

int relay_start(const struct relay_config *cfg, struct relay **out, unsigned *bound_port, struct shoal_err *err)
{
    char host[256], port[16];
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res = NULL;
    struct relay *r = calloc(1, sizeof *r);
    int one = 1, rc = -1, locks = 0;
    *out = NULL;
    if (!r)
        return err_set(err, 500, "internal", NULL, "out of memory");
    r->cfg = *cfg;
    r->fd = r->wake_fd = -1;
    if (hostport_split(cfg->listen, host, sizeof host, port, sizeof port) != 0) {
        err_set(err, 400, "bad_config", "listen", "--listen '%s' is not host:port", cfg->listen);
        goto out;
    }
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (gai != 0) {
        err_set(err, 400, "bad_config", "listen", "cannot resolve %s: %s", cfg->listen, gai_strerror(gai));
        goto out;
    }
    r->fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->fd < 0 || setsockopt(r->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(r->fd, res->ai_addr, res->ai_addrlen) != 0 || listen(r->fd, 512) != 0) {
        err_set(err, 500, "listen_failed", "listen", "cannot listen on %s: %s", cfg->listen, strerror(errno));
        goto out;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(r->fd, (struct sockaddr *)&ss, &len) != 0 ||
        (r->wake_fd = eventfd(0, EFD_CLOEXEC)) < 0) {
        err_set(err, 500, "listen_failed", "listen", "cannot start the relay: %s", strerror(errno));
        goto out;
    }
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                  : ((struct sockaddr_in *)&ss)->sin_port);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    locks = 1;
    if (pthread_create(&r->accept_thread, NULL, accept_main, r) != 0) {
        err_set(err, 500, "internal", NULL, "cannot start the accept thread");
        goto out;
    }
    *out = r;
    rc = 0;
out:
    if (res)
        freeaddrinfo(res);
    if (rc != 0) {
        if (r->fd >= 0)
            close(r->fd);
        if (r->wake_fd >= 0)
            close(r->wake_fd);
        if (locks) {
            pthread_mutex_destroy(&r->mu);
            pthread_cond_destroy(&r->cv);
        }
        free(r);
    }
    return rc;
}

void relay_stop(struct relay *r)
{
    uint64_t one = 1;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    for (struct conn *c = r->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);   /* ends every read and send */
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (write(r->wake_fd, &one, sizeof one) != (ssize_t)sizeof one)
        log_warn("relay: cannot wake the accept thread: %s", strerror(errno));
    pthread_join(r->accept_thread, NULL);
    reap(r, 1);
    close(r->fd);
    close(r->wake_fd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void relay_counts(struct relay *r, struct relay_counts *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->counts;
    pthread_mutex_unlock(&r->mu);
}
