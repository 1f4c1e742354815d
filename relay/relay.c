/* relay.c - shoal-relay's connections: admission, pairing and forwarding
 * (relay.h); what each job and address holds is in relay_books.c. */
#include "relay.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
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
#include "relay_books.h"

#define REQUEST_MS 10000           /* a new connection has this long for its request */
#define FORWARD_BYTES (256u << 10) /* read at once per connection */
#define REAP_MS 500
#define HTTP_HEAD_MAX 4096
#define WAIT_SLICE_MS 1000         /* a waiting end looks at the clock at least this often */
/* TCP keepalive on every connection: a host that vanished (no FIN, no
 * RST) is found within about KEEPALIVE_IDLE_S + KEEPALIVE_COUNT *
 * KEEPALIVE_INTERVAL_S, and a NAT keeps a quiet link's mapping. */
#define KEEPALIVE_IDLE_S 60
#define KEEPALIVE_INTERVAL_S 15
#define KEEPALIVE_COUNT 4
#define LOG_BURST 20.0             /* refusals logged at once; then one a second, the rest counted */

enum conn_state { CONN_READING, CONN_WAITING, CONN_JOINED, CONN_DONE };

struct conn {
    struct relay *r;
    pthread_t thread;
    int fd;
    int wake_fd;                   /* eventfd while waiting: written when it is paired; else -1 */
    enum conn_state state;
    struct relay_request rq;       /* its ticket verified once read */
    struct conn *partner;          /* once joined; never freed before this one */
    struct addr_use *from;         /* its address's share (relay_books.h) */
    _Atomic int64_t last_ms;       /* mono_ms of the last byte it read or sent on, once joined */
    int idle_closed;               /* its pair was closed for idleness */
    int joined_thread;             /* its thread was joined (by reap at stop) */
    char addr[96];                 /* host:port, for logs */
    struct conn *next;
};

struct relay {
    struct relay_config cfg;
    int fd, wake_fd;
    pthread_t accept_thread;
    pthread_mutex_t mu;
    int stop;
    struct conn *conns;
    long n_conns;
    struct relay_books books;
    struct relay_counts counts;
    double log_budget, log_refilled_at;   /* refusal lines; mono_s */
    uint64_t unlogged;                    /* refusals not logged since the last line */
};

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

/* Counts n bytes of the job's and waits as its rate limit says. */
static void throttle(struct relay *r, int64_t job_id, size_t n)
{
    pthread_mutex_lock(&r->mu);
    double wait = books_bytes(&r->books, job_id, n);
    r->counts.bytes_total += n;
    pthread_mutex_unlock(&r->mu);
    if (wait > 0) {
        struct timespec ts = { .tv_sec = (time_t)wait, .tv_nsec = (long)((wait - (double)(time_t)wait) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

/* Closes c's pair for idleness (once, counted and logged). */
static void idle_close(struct conn *c)
{
    struct relay *r = c->r;
    pthread_mutex_lock(&r->mu);
    if (!c->idle_closed && !c->partner->idle_closed) {
        c->idle_closed = 1;
        r->counts.idle_closed_total++;
        log_info("relay: closed the idle link of job %lld (%s and %s): no byte either way for %ld s "
                 "(--idle-timeout)", (long long)c->rq.ticket.job_id, c->addr, c->partner->addr,
                 r->cfg.idle_timeout_s);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Sends n bytes to fd, noting each write in c's clock; -1 when it fails. */
static int send_all(struct conn *c, int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        atomic_store(&c->last_ms, mono_ms());
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* Forwards what c's socket receives to its partner's until either end
 * closes or fails, or neither has carried a byte for --idle-timeout; then
 * shuts both down, which ends the partner's loop. */
static void forward(struct conn *c)
{
    struct relay *r = c->r;
    struct conn *p = c->partner;
    int64_t idle_ms = r->cfg.idle_timeout_s * 1000;
    char *buf = malloc(FORWARD_BYTES);
    while (buf) {
        int64_t mine = atomic_load(&c->last_ms), theirs = atomic_load(&p->last_ms);
        int64_t left = (mine > theirs ? mine : theirs) + idle_ms - mono_ms();
        if (left <= 0) {
            idle_close(c);
            break;
        }
        struct pollfd pf = { .fd = c->fd, .events = POLLIN };
        int n = poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (n == 0 || (n < 0 && errno == EINTR))
            continue;   /* the clocks again */
        if (n < 0)
            break;
        ssize_t k = read(c->fd, buf, FORWARD_BYTES);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        atomic_store(&c->last_ms, mono_ms());
        throttle(r, c->rq.ticket.job_id, (size_t)k);
        if (send_all(c, p->fd, buf, (size_t)k) != 0)
            break;
    }
    free(buf);
    shutdown(c->fd, SHUT_RDWR);
    shutdown(p->fd, SHUT_RDWR);
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

/* Refuses c with `why` (its reply, the counters, a log line while the
 * log's budget lasts: a flood of refusals costs a line a second). */
static void refuse(struct conn *c, const char *why, int bad_ticket)
{
    struct relay *r = c->r;
    double now = mono_s();
    pthread_mutex_lock(&r->mu);
    r->counts.refused_total++;
    r->counts.bad_tickets_total += bad_ticket != 0;
    r->log_budget += now - r->log_refilled_at;
    r->log_refilled_at = now;
    if (r->log_budget > LOG_BURST)
        r->log_budget = LOG_BURST;
    int say = r->log_budget >= 1;
    uint64_t unsaid = r->unlogged;
    if (say) {
        r->log_budget -= 1;
        r->unlogged = 0;
    } else {
        r->unlogged++;
    }
    pthread_mutex_unlock(&r->mu);
    if (say && unsaid)
        log_info("relay: refused %s: %s (and %llu refusals before it, not logged)", c->addr, why,
                 (unsigned long long)unsaid);
    else if (say)
        log_info("relay: refused %s: %s", c->addr, why);
    reply(c->fd, 'E', why);
}

/* 1 when c's client has closed or reset its end (its request read). */
static int gone(const struct conn *c)
{
    struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Joins waiting o with c (both replies sent, o woken); under r->mu. */
static void join(struct relay *r, struct job_use *j, struct conn *o, struct conn *c)
{
    uint64_t one = 1;
    o->partner = c, c->partner = o;
    o->state = c->state = CONN_JOINED;
    atomic_store(&o->last_ms, mono_ms());
    atomic_store(&c->last_ms, mono_ms());
    r->counts.waiting--;
    r->counts.joined++;
    r->counts.pairs_total++;
    o->from->waiting--;
    j->conns++;
    reply(o->fd, 'P', "paired");
    reply(c->fd, 'P', "paired");
    if (write(o->wake_fd, &one, sizeof one) != (ssize_t)sizeof one)
        log_warn("relay: cannot wake a waiting connection: %s", strerror(errno));
}

/* Waits, under r->mu (released while it polls), until c is joined, its
 * client goes, it speaks out of turn, its wait is over or the relay stops.
 * Returns 0 when joined, else -1 with the reason in why ("" when the client
 * has gone: nobody to tell). */
static int wait_partner(struct conn *c, char *why, size_t why_len)
{
    struct relay *r = c->r;
    int64_t until = mono_ms() + r->cfg.pair_wait_s * 1000;
    int outcome = 0;   /* 1 gone, 2 spoke */
    while (c->state == CONN_WAITING && !r->stop && !outcome) {
        int64_t left = until - mono_ms();
        if (left <= 0)
            break;
        struct pollfd p[3] = { { .fd = c->fd, .events = POLLIN | POLLRDHUP }, { .fd = c->wake_fd, .events = POLLIN },
                               { .fd = r->wake_fd, .events = POLLIN } };
        pthread_mutex_unlock(&r->mu);
        int n = poll(p, 3, left > WAIT_SLICE_MS ? WAIT_SLICE_MS : (int)left);
        pthread_mutex_lock(&r->mu);
        if (n <= 0 || c->state != CONN_WAITING)
            continue;
        if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
            outcome = 1;
        else if (p[0].revents & POLLIN)
            outcome = 2;   /* no end speaks before its 'P' */
    }
    if (c->state == CONN_JOINED)
        return 0;
    if (outcome == 1)
        why[0] = '\0';
    else if (outcome == 2)
        snprintf(why, why_len, "sent bytes before it was paired");
    else if (r->stop)
        snprintf(why, why_len, "the relay is stopping");
    else
        snprintf(why, why_len, "no partner came within %ld s", r->cfg.pair_wait_s);
    return -1;
}

/* The connection's request (its ticket verified): pairs it with the
 * waiting end of the same link, or waits for that end.  Returns 0 when
 * joined (both replies sent), else -1 (refused, the reason sent, or its
 * client gone). */
static int pair(struct conn *c)
{
    struct relay *r = c->r;
    const struct relay_ticket *t = &c->rq.ticket;
    char why[160] = "";
    int rc = -1, waited = 0;
    pthread_mutex_lock(&r->mu);
    struct job_use *j = books_job(&r->books, t->job_id, 1);
    if (!j) {
        snprintf(why, sizeof why, "out of memory");
        goto out;
    }
    if (j->conns >= 2 * r->cfg.max_links_per_job) {
        snprintf(why, sizeof why, "job %lld has %ld links here already (--max-links-per-job)", (long long)t->job_id,
                 r->cfg.max_links_per_job);
        goto out;
    }
    for (struct conn *o = r->conns; o; o = o->next) {
        if (o->state != CONN_WAITING || o->rq.side == c->rq.side || !relay_ticket_same_link(&o->rq.ticket, t) ||
            memcmp(o->rq.token, c->rq.token, RELAY_TOKEN_BYTES) != 0 || gone(o))
            continue;   /* one whose client has gone: its own thread drops it */
        join(r, j, o, c);
        rc = 0;
        goto out;
    }
    /* none yet: wait for it */
    if (c->from->waiting >= r->cfg.max_waiting_per_address) {
        snprintf(why, sizeof why, "busy: %ld connections from your address wait for their partner already "
                 "(--max-waiting-per-address)", c->from->waiting);
        goto out;
    }
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->wake_fd < 0) {
        snprintf(why, sizeof why, "cannot wait: %s", strerror(errno));
        goto out;
    }
    c->state = CONN_WAITING;
    r->counts.waiting++;
    c->from->waiting++;
    j->conns++;
    waited = 1;
    rc = wait_partner(c, why, sizeof why);
    close(c->wake_fd);   /* nobody writes it once it is not waiting: both under r->mu */
    c->wake_fd = -1;
    if (rc != 0) {
        c->state = CONN_READING;
        r->counts.waiting--;
        c->from->waiting--;
        if (--j->conns == 0)
            books_job_quiet(j);
    }
out:
    if (rc != 0 && waited && !why[0])
        r->counts.gone_total++;
    pthread_mutex_unlock(&r->mu);
    if (rc != 0 && why[0])
        refuse(c, why, 0);
    return rc;
}

/* Prometheus text of the counters, then the books' series. */
static void metrics_text(struct relay *r, struct buf *b)
{
    pthread_mutex_lock(&r->mu);
    struct relay_counts k = r->counts;
    buf_printf(b, "# HELP shoal_relay_waiting Connections waiting for their partner.\n"
                  "# TYPE shoal_relay_waiting gauge\nshoal_relay_waiting %llu\n"
                  "# HELP shoal_relay_links Pairs of connections being forwarded now.\n"
                  "# TYPE shoal_relay_links gauge\nshoal_relay_links %llu\n"
                  "# HELP shoal_relay_connections Connections held now: being read, waiting or forwarded.\n"
                  "# TYPE shoal_relay_connections gauge\nshoal_relay_connections %ld\n"
                  "# HELP shoal_relay_pairs_total Pairs joined since the relay started.\n"
                  "# TYPE shoal_relay_pairs_total counter\nshoal_relay_pairs_total %llu\n"
                  "# HELP shoal_relay_refused_total Connections refused: malformed, a bad ticket, over a limit, or "
                  "no partner in time.\n"
                  "# TYPE shoal_relay_refused_total counter\nshoal_relay_refused_total %llu\n"
                  "# HELP shoal_relay_bad_tickets_total Connections refused for their ticket: forged, another "
                  "secret's, expired, or another side's.\n"
                  "# TYPE shoal_relay_bad_tickets_total counter\nshoal_relay_bad_tickets_total %llu\n"
                  "# HELP shoal_relay_gone_total Waiting connections dropped because their client closed.\n"
                  "# TYPE shoal_relay_gone_total counter\nshoal_relay_gone_total %llu\n"
                  "# HELP shoal_relay_idle_closed_total Pairs closed after --idle-timeout without a byte.\n"
                  "# TYPE shoal_relay_idle_closed_total counter\nshoal_relay_idle_closed_total %llu\n"
                  "# HELP shoal_relay_bytes_total Bytes forwarded, both ways.\n"
                  "# TYPE shoal_relay_bytes_total counter\nshoal_relay_bytes_total %llu\n",
               (unsigned long long)k.waiting, (unsigned long long)k.joined, r->n_conns,
               (unsigned long long)k.pairs_total, (unsigned long long)k.refused_total,
               (unsigned long long)k.bad_tickets_total, (unsigned long long)k.gone_total,
               (unsigned long long)k.idle_closed_total, (unsigned long long)k.bytes_total);
    books_metrics(&r->books, b);
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

/* Reads c's request and checks its ticket: 0, or -1 (refused, or its
 * client gone or too slow). */
static int admit(struct conn *c, unsigned char in[RELAY_REQUEST_BYTES], int64_t deadline)
{
    struct relay *r = c->r;
    char why[200];
    if (relay_request_header(in, why, sizeof why) != 0) {
        refuse(c, why, 0);
        return -1;
    }
    if (read_full(r, c->fd, in + RELAY_HEADER_BYTES, RELAY_REQUEST_BYTES - RELAY_HEADER_BYTES, deadline) != 0)
        return -1;
    if (relay_request_decode(in, &c->rq, why, sizeof why) != 0 ||
        relay_ticket_verify(&r->cfg.secret, &c->rq.ticket, (int64_t)time(NULL), why, sizeof why) != 0) {
        refuse(c, why, 1);
        return -1;
    }
    return 0;
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct relay *r = c->r;
    unsigned char in[RELAY_REQUEST_BYTES];
    int64_t deadline = mono_ms() + REQUEST_MS;
    if (read_full(r, c->fd, in, 4, deadline) != 0)
        goto out;
    if (memcmp(in, "GET ", 4) == 0) {
        http(c, in, 4);
        goto out;
    }
    if (read_full(r, c->fd, in + 4, RELAY_HEADER_BYTES - 4, deadline) != 0 || admit(c, in, deadline) != 0)
        goto out;
    if (c->rq.side == RELAY_SIDE_PROBE)
        echo(c);
    else if (pair(c) == 0)
        forward(c);
out:
    pthread_mutex_lock(&r->mu);
    if (c->state == CONN_JOINED && c->partner->state == CONN_JOINED) {
        /* the pair ends when its first side does */
        r->counts.joined--;
        struct job_use *j = books_job(&r->books, c->rq.ticket.job_id, 0);
        if (j && (j->conns -= 2) <= 0)
            books_job_quiet(j);
    }
    c->state = CONN_DONE;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Joins finished connections (a joined one with its partner, whose thread
 * writes to its socket), closes and frees them, gives back their
 * addresses' shares; drops jobs whose series have expired.  all: wait for
 * every thread (stop). */
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
        if (!done) {   /* stop: wait for the partner's thread without the lock */
            struct conn *w = c->state == CONN_DONE ? c->partner : c;
            pthread_mutex_unlock(&r->mu);
            pthread_join(w->thread, NULL);
            pthread_mutex_lock(&r->mu);
            w->joined_thread = 1;
            w->state = CONN_DONE;
            pp = &r->conns;   /* the list may have changed */
            continue;
        }
        *pp = c->next;
        if (c->partner)
            c->partner->partner = NULL;   /* done too: nothing reads it any more */
        if (!c->joined_thread)
            pthread_join(c->thread, NULL);
        close(c->fd);
        r->n_conns--;
        c->from->held--;
        books_addr_release(&r->books, c->from);
        free(c);
    }
    books_expire(&r->books, all);
    pthread_mutex_unlock(&r->mu);
}

/* Sets what every relay connection gets: no Nagle, TCP keepalive. */
static void tune(int fd)
{
    int one = 1, idle = KEEPALIVE_IDLE_S, interval = KEEPALIVE_INTERVAL_S, count = KEEPALIVE_COUNT;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

/* Takes one connection, within the limits in all and of its address. */
static void accept_one(struct relay *r)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    unsigned char key[HOSTPORT_KEY_BYTES];
    char host[64], port[16], busy[160] = "";
    int fd = accept4(r->fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE)
            usleep(100 * 1000);
        return;
    }
    tune(fd);
    (void)hostport_client_key((const struct sockaddr *)&ss, key);   /* another family: all count as one */
    struct conn *c = calloc(1, sizeof *c);
    pthread_mutex_lock(&r->mu);
    struct addr_use *a = books_addr(&r->books, key, 1);
    if (r->n_conns >= r->cfg.max_connections)
        snprintf(busy, sizeof busy, "busy: the relay holds --max-connections");
    else if (!c || !a)
        snprintf(busy, sizeof busy, "out of memory");
    else if (a->held >= r->cfg.max_connections_per_address)
        snprintf(busy, sizeof busy, "busy: your address holds %ld connections here (--max-connections-per-address)",
                 a->held);
    if (!busy[0]) {
        a->held++;
        r->n_conns++;   /* counted now: the limits hold for the next accept */
    } else {
        r->counts.refused_total++;
        if (a)
            books_addr_release(&r->books, a);
    }
    pthread_mutex_unlock(&r->mu);
    if (busy[0]) {
        reply(fd, 'E', busy);
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
    c->wake_fd = -1;
    c->from = a;
    pthread_mutex_lock(&r->mu);
    if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
        r->n_conns--;
        a->held--;
        books_addr_release(&r->books, a);
        pthread_mutex_unlock(&r->mu);
        log_warn("relay: cannot start a thread for %s", c->addr);
        close(fd);
        free(c);
        return;
    }
    c->next = r->conns;
    r->conns = c;
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
    books_init(&r->books, &(struct books_limits){ .job_rate_mbit = cfg->job_rate_mbit,
                                                  .max_job_series = cfg->max_job_series,
                                                  .job_series_ttl_s = cfg->job_series_ttl_s });
    r->log_budget = LOG_BURST;
    r->log_refilled_at = mono_s();
    if (cfg->secret.len < RELAY_SECRET_MIN) {
        err_set(err, 400, "bad_config", "secret_file", "the relay has no secret: give it the server's relay.secret "
                "(--secret-file), so that it pairs only the links the server planned");
        goto out;
    }
    if (cfg->max_connections < 2 || cfg->max_connections_per_address < 1 || cfg->max_waiting_per_address < 1 ||
        cfg->max_links_per_job < 1 || cfg->pair_wait_s < 1 || cfg->idle_timeout_s < 1 || cfg->job_rate_mbit < 0 ||
        cfg->max_job_series < 0 || cfg->job_series_ttl_s < 0) {
        err_set(err, 400, "bad_config", NULL, "a relay limit is out of range");
        goto out;
    }
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
        if (locks)
            pthread_mutex_destroy(&r->mu);
        OPENSSL_cleanse(&r->cfg.secret, sizeof r->cfg.secret);
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
        shutdown(c->fd, SHUT_RDWR);   /* ends every read, send and wait */
    pthread_mutex_unlock(&r->mu);
    if (write(r->wake_fd, &one, sizeof one) != (ssize_t)sizeof one)
        log_warn("relay: cannot wake the accept thread: %s", strerror(errno));
    pthread_join(r->accept_thread, NULL);
    reap(r, 1);
    close(r->fd);
    close(r->wake_fd);
    books_free(&r->books);
    pthread_mutex_destroy(&r->mu);
    OPENSSL_cleanse(&r->cfg.secret, sizeof r->cfg.secret);
    free(r);
}

void relay_counts(struct relay *r, struct relay_counts *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->counts;
    out->held = (uint64_t)r->n_conns;
    pthread_mutex_unlock(&r->mu);
}
