/* peer_listener.c - the peer port: an accept thread, short-lived handshake
 * threads that greet every new socket, answer probe sessions and check job
 * hellos, and the parking lot where authenticated job connections wait for
 * peer_listener_take (protocol in peer.h). */
#include "peer.h"

#include "peer_admit.h"
#include "peer_internal.h"

#include "../../common/log.h"
#include "../../common/relay_proto.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HANDSHAKE_THREADS 32
/* Handshakes one client address may hold at once: a node's neighbours,
 * ring peers and probers dial from addresses of their own (behind one NAT,
 * a few at a time), so silent connections from one address cannot take
 * every slot. */
#define HANDSHAKES_PER_ADDRESS 16
/* Handshakes that addresses the listener does not expect (not the current
 * assignment's peers, not the server's) may hold at once, all together:
 * the other slots are kept for those it expects, so that strangers, from
 * however many addresses, cannot keep a tasklet's neighbours or the
 * server's probe out.  Probers (other nodes measuring their link to this
 * one) count as strangers. */
#define STRANGER_HANDSHAKES 16
/* ms a new connection has for its first frame after our greeting: a real
 * dialer answers it at once (a round trip and a MAC), a flood never. */
#define FIRST_FRAME_MS 3000
/* ms a probe session may wait for its next frame: the prober sends its
 * pings and bursts back to back. */
#define PROBE_NEXT_FRAME_MS 3000
#define PARKED_MAX 64             /* job connections waiting to be taken */
#define PING_PAYLOAD_MAX 64       /* bytes */
#define PROBE_SCRATCH (256u << 10) /* bytes; probe payloads are read through it and dropped */
#define REAP_MS 1000              /* the accept thread joins finished handshakes this often */

struct handshake {
    struct peer_listener *l;
    pthread_t thread;
    int used, done, started;      /* claimed; its thread has ended; its thread was started */
    int stranger;                 /* from an address the listener does not expect (admit) */
    int fd;
    char addr[64];
    unsigned char host[PEER_HOST_KEY];   /* the client's address without its port (hostport_client_key) */
    int relay_wait_ms;            /* > 0: a relayed connection we opened; wait this long for its pairing */
};

struct peer_listener {
    int fd;
    int wake_fd;                  /* eventfd: readable once stop begins */
    pthread_t accept_thread;
    pthread_mutex_t mu;
    pthread_cond_t parked_cv;     /* a connection was parked, or stop */
    int stop;
    int encrypt;                  /* every job connection is encrypted */
    int expecting;
    struct peer_auth expect;
    struct peer_hosts peers, server;   /* the hosts admission expects (peer_listener_expect_peers) */
    struct handshake hs[HANDSHAKE_THREADS];
    struct peer_conn parked[PARKED_MAX];
    int n_parked;
    uint64_t probe_sessions, refused;
};

static void count_refused(struct peer_listener *l)
{
    pthread_mutex_lock(&l->mu);
    l->refused++;
    pthread_mutex_unlock(&l->mu);
}

/* Removes parked[i], keeping the order (oldest first). */
static void parked_remove(struct peer_listener *l, int i)
{
    memmove(&l->parked[i], &l->parked[i + 1], (size_t)(l->n_parked - i - 1) * sizeof l->parked[0]);
    l->n_parked--;
}

/* Parks an authenticated connection, unless the expectation changed while
 * it shook hands. A newer connection from the same role on the same
 * channel replaces an older one (the peer reconnected). Takes ownership of
 * *c. */
static int park(struct peer_listener *l, struct peer_conn *c)
{
    int rc = -1;
    pthread_mutex_lock(&l->mu);
    if (l->stop || !l->expecting || l->expect.job_id != c->job_id ||
        l->expect.epoch != c->epoch) {
        log_info("peer: dropping connection from %s (role '%s'): job %lld epoch %u no longer "
                 "expected", c->addr, c->role, (long long)c->job_id, c->epoch);
        goto out;
    }
    for (int i = 0; i < l->n_parked; i++) {
        if (strcmp(l->parked[i].role, c->role) == 0 && l->parked[i].channel == c->channel) {
            log_info("peer: %s (role '%s', channel %u) reconnected; closing its older connection from %s",
                     c->addr, c->role, c->channel, l->parked[i].addr);
            peer_close(&l->parked[i]);
            parked_remove(l, i);
            break;
        }
    }
    if (l->n_parked == PARKED_MAX) {
        log_warn("peer: refused %s (role '%s'): %d connections already wait to be taken",
                 c->addr, c->role, PARKED_MAX);
        l->refused++;
        goto out;
    }
    peer_conn_move(&l->parked[l->n_parked++], c);
    pthread_cond_broadcast(&l->parked_cv);
    rc = 0;
out:
    pthread_mutex_unlock(&l->mu);
    peer_close(c);
    return rc;
}

/* A dialer's HELLO (header f already read): check it against the current
 * expectation, prove our role, agree on encryption, park.  Returns 0 when
 * it was parked. */
static int hello_job(struct peer_listener *l, struct peer_conn *c, struct wire_frame *f,
                      const unsigned char lnonce[WIRE_NONCE_BYTES], const struct peer_io *io)
{
    unsigned char in[WIRE_HELLO_MAX], out[WIRE_HELLO_MAX], mac[WIRE_MAC_BYTES];
    struct wire_hello hello = {.role = ""}, answer = {.flags = 0};
    struct peer_auth a;
    const struct peer_link *link = NULL;
    struct peer_rx r;
    struct shoal_err err;
    const char *reason = NULL;
    char why[128];
    int expecting, encrypt, rc = -1;

    pthread_mutex_lock(&l->mu);
    expecting = l->expecting;
    encrypt = l->encrypt;
    a = l->expect;
    pthread_mutex_unlock(&l->mu);

    if (f->payload_len > sizeof in) {
        reason = "malformed hello: too long";
        goto out;
    }
    /* The header was read with the probe limit; the payload is small and
     * bounded now, so read it. */
    peer_rx_init(&r, c, f, NULL, f->payload_len, 0);
    r.stage = 1;
    r.header_only = 0;
    r.payload = in;
    if (peer_exchange(NULL, &r, io, &err) != 0) {
        log_warn("peer: dropped %s during its hello: %s", c->addr, err.message);
        goto out;
    }
    if (wire_hello_decode(in, f->payload_len, 1, &hello, why, sizeof why) != 0) {
        reason = why;
        goto out;
    }
    if (!expecting || f->job_id != a.job_id || f->epoch != a.epoch) {
        reason = "this node expects no connections for that job and epoch";
        goto out;
    }
    if (!(link = peer_auth_find(&a, hello.role))) {
        reason = "this node has no link to that role in that job and epoch";
        goto out;
    }
    wire_hello_mac(link->key, link->key_len, lnonce, a.job_id, a.epoch, hello.flags, hello.role,
                   mac);
    if (!wire_mac_equal(mac, hello.mac)) {
        reason = "hello MAC does not verify (not the key of our link to that role, or the hello "
                 "was altered)";
        goto out;
    }

    /* Either end asking is enough; the answer's MAC covers the decision. */
    if ((hello.flags & WIRE_HELLO_ENCRYPT) || a.encrypt || encrypt)
        answer.flags = WIRE_HELLO_ENCRYPT;
    snprintf(answer.role, sizeof answer.role, "%s", a.role);
    wire_hello_mac(link->key, link->key_len, hello.nonce, a.job_id, a.epoch, answer.flags,
                   answer.role, answer.mac);
    c->job_id = a.job_id;
    c->epoch = a.epoch;
    snprintf(c->role, sizeof c->role, "%s", hello.role);
    c->channel = WIRE_HELLO_CHANNEL_OF(hello.flags);
    struct wire_frame reply = {.kind = WIRE_HELLO, .dtype = WIRE_BYTES,
                               .payload_len = wire_hello_encode(&answer, 0, out)};
    if (peer_send_io(c, &reply, out, 0, io, &err) != 0) {
        log_warn("peer: dropped %s (role '%s') answering its hello: %s", c->addr, hello.role,
                 err.message);
        goto out;
    }
    /* From here on both ends seal (the dialer keys its side from the answer). */
    if ((answer.flags & WIRE_HELLO_ENCRYPT) &&
        peer_seal_start(c, &a, link, lnonce, hello.nonce, hello.role, a.role, 0, &err) != 0) {
        log_error("peer: dropped %s (role '%s'): %s", c->addr, hello.role, err.message);
        goto out;
    }
    log_debug("peer: accepted %s as '%s' channel %u for job %lld epoch %u%s", c->addr, hello.role, c->channel,
              (long long)a.job_id, a.epoch, c->seal ? ", encrypted" : "");
    rc = park(l, c);
out:
    if (reason) {
        log_warn("peer: refused %s (role '%s', job %lld epoch %u): %s", c->addr, hello.role,
                 (long long)f->job_id, f->epoch, reason);
        peer_send_error(c, reason, io);
    }
    if (c->fd >= 0)
        count_refused(l);
    OPENSSL_cleanse(&a, sizeof a); /* the link keys */
    return rc;
}

/* A link-probe session, first header f already read (protocol in peer.h). */
static void probe_session(struct peer_listener *l, struct peer_conn *c, struct wire_frame *f,
                          const struct peer_io *hs_io)
{
    unsigned char ping[PING_PAYLOAD_MAX];
    unsigned char *scratch = malloc(PROBE_SCRATCH);
    int64_t start = peer_now_ms(), end = start + PEER_PROBE_MAX_S * 1000;
    uint64_t probe_bytes = 0, frames = 0;
    struct shoal_err err;
    struct peer_rx r;

    pthread_mutex_lock(&l->mu);
    l->probe_sessions++;
    pthread_mutex_unlock(&l->mu);
    if (!scratch)
        goto out;
    for (;;) {
        int64_t idle = peer_now_ms() + PEER_IDLE_S * 1000;
        struct peer_io io = {.deadline_ms = idle < end ? idle : end,
                             .timeout_ms = PEER_IDLE_S * 1000, .cancel_fd = hs_io->cancel_fd};
        if (f->job_id != 0 || f->epoch != 0 || (f->kind != WIRE_PING && f->kind != WIRE_PROBE)) {
            log_warn("peer: probe session from %s ended: unexpected frame kind %u job %lld",
                     c->addr, f->kind, (long long)f->job_id);
            goto out;
        }
        peer_rx_init(&r, c, f, NULL, f->payload_len, 0);
        r.stage = 1;
        if (f->kind == WIRE_PING) {
            if (f->payload_len > PING_PAYLOAD_MAX) {
                log_warn("peer: probe session from %s ended: PING of %llu bytes (limit %d)",
                         c->addr, (unsigned long long)f->payload_len, PING_PAYLOAD_MAX);
                goto out;
            }
            r.payload = ping;
        } else {
            probe_bytes += f->payload_len;
            if (probe_bytes > PEER_PROBE_MAX_BYTES) {
                log_warn("peer: probe session from %s ended: more than %u probe bytes", c->addr,
                         PEER_PROBE_MAX_BYTES);
                goto out;
            }
            r.payload = scratch;
            r.discard = PROBE_SCRATCH;
        }
        if (peer_exchange(NULL, &r, &io, &err) != 0) {
            log_warn("peer: probe session from %s ended: %s", c->addr, err.message);
            goto out;
        }
        frames++;
        if (f->kind == WIRE_PING || f->micro_batch == 1) {
            struct wire_frame pong = {.kind = WIRE_PONG, .dtype = WIRE_BYTES, .step = f->step,
                                      .micro_batch = f->micro_batch,
                                      .payload_len = f->kind == WIRE_PING ? f->payload_len : 0};
            if (peer_send_io(c, &pong, ping, 0, &io, &err) != 0) {
                log_warn("peer: probe session from %s ended: %s", c->addr, err.message);
                goto out;
            }
        }
        /* Next frame, at once (a session idling between frames only holds
         * a handshake slot); the dialer closing here is the normal end. */
        idle = peer_now_ms() + PROBE_NEXT_FRAME_MS;
        io.deadline_ms = idle < end ? idle : end;
        peer_rx_init(&r, c, f, NULL, PEER_PROBE_MAX_BYTES, 0);
        r.header_only = 1;
        if (peer_exchange(NULL, &r, &io, &err) != 0) {
            if (strcmp(err.code, "peer_closed") != 0 || r.hdr_got != 0)
                log_warn("peer: probe session from %s ended: %s", c->addr, err.message);
            goto out;
        }
    }
out:
    log_debug("peer: probe session from %s: %llu frames, %llu probe bytes, %lld ms", c->addr,
              (unsigned long long)frames, (unsigned long long)probe_bytes,
              (long long)(peer_now_ms() - start));
    free(scratch);
}

/* Greets connection c and reads the header of its first frame into *f
 * within FIRST_FRAME_MS.  Returns 0, or -1 (logged). */
static int greet(struct peer_conn *c, unsigned char nonce[WIRE_NONCE_BYTES], struct wire_frame *f,
                 const struct peer_io *io)
{
    struct peer_rx r;
    struct shoal_err err;
    if (peer_random(nonce, WIRE_NONCE_BYTES, &err) != 0) {
        log_error("peer: %s", err.message);
        return -1;
    }
    *f = (struct wire_frame){.kind = WIRE_HELLO, .dtype = WIRE_BYTES, .payload_len = WIRE_NONCE_BYTES};
    if (peer_send_io(c, f, nonce, 0, io, &err) != 0) {
        log_warn("peer: dropped %s before its first frame: %s", c->addr, err.message);
        return -1;
    }
    /* The first header decides what the session is; job hellos and pings
     * are small, probes may announce up to the session's byte limit.  It
     * comes at once or the connection goes (FIRST_FRAME_MS). */
    peer_rx_init(&r, c, f, NULL, PEER_PROBE_MAX_BYTES, 0);
    r.header_only = 1;
    struct peer_io first = *io;
    int64_t soon = peer_now_ms() + FIRST_FRAME_MS;
    if (soon < first.deadline_ms)
        first.deadline_ms = soon;
    if (peer_exchange(NULL, &r, &first, &err) != 0) {
        log_warn("peer: refused %s: %s", c->addr, err.message);
        return -1;
    }
    return 0;
}

static void *handshake_main(void *arg)
{
    struct handshake *h = arg;
    struct peer_listener *l = h->l;
    struct peer_conn c = {.fd = h->fd};
    unsigned char nonce[WIRE_NONCE_BYTES];
    struct wire_frame f;
    struct shoal_err err;
    int refuse = 1;

    snprintf(c.addr, sizeof c.addr, "%s", h->addr);
    if (h->relay_wait_ms > 0 && relay_wait_paired(c.fd, h->addr, h->relay_wait_ms, l->wake_fd, &err) != 0) {
        log_warn("peer: %s", err.message);
        goto out;
    }
    struct peer_io io = peer_io_make(PEER_HANDSHAKE_MS, l->wake_fd);
    if (greet(&c, nonce, &f, &io) != 0)
        goto out;
    refuse = 0;
    switch (f.kind) {
    case WIRE_HELLO:
        (void)hello_job(l, &c, &f, nonce, &io);
        break;
    case WIRE_PING:
    case WIRE_PROBE:
        if (h->relay_wait_ms > 0) {   /* a relay carries job connections only */
            log_warn("peer: refused %s: a probe session through a relay", c.addr);
            refuse = 1;
            break;
        }
        probe_session(l, &c, &f, &io);
        break;
    default:
        log_warn("peer: refused %s: first frame is kind %u, neither a hello nor a probe", c.addr,
                 f.kind);
        refuse = 1;
    }
out:
    if (refuse)
        count_refused(l);
    peer_close(&c);
    pthread_mutex_lock(&l->mu);
    h->done = 1;
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Joins finished handshake threads so their slots can be reused. */
static void reap(struct peer_listener *l, int all)
{
    for (int i = 0; i < HANDSHAKE_THREADS; i++) {
        struct handshake *h = &l->hs[i];
        pthread_mutex_lock(&l->mu);
        int ready = h->used && h->started && (h->done || all);
        pthread_mutex_unlock(&l->mu);
        if (!ready)
            continue;
        pthread_join(h->thread, NULL);
        pthread_mutex_lock(&l->mu);
        h->used = 0;
        h->done = 0;
        h->started = 0;
        pthread_mutex_unlock(&l->mu);
    }
}

/* Claims a free handshake slot (NULL: none), counting in *mine the
 * running handshakes from `host`. */
static struct handshake *claim(struct peer_listener *l, const unsigned char host[16], int *mine)
{
    struct handshake *h = NULL;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < HANDSHAKE_THREADS; i++) {
        if (!l->hs[i].used)
            h = h ? h : &l->hs[i];
        else if (!l->hs[i].done && memcmp(l->hs[i].host, host, 16) == 0)
            (*mine)++;
    }
    if (h) {
        h->used = 1;
        h->done = 0;
        h->started = 0;
        h->stranger = 0;
        memcpy(h->host, host, 16);
    }
    pthread_mutex_unlock(&l->mu);
    return h;
}

/* Gives a claimed slot back unused (NULL is ignored). */
static void unclaim(struct peer_listener *l, struct handshake *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&l->mu);
    h->used = 0;
    pthread_mutex_unlock(&l->mu);
}

/* Claims a free handshake slot for a connection from `host` (NULL: none
 * for it, with the reason in `why`): at most HANDSHAKES_PER_ADDRESS from
 * one host, and STRANGER_HANDSHAKES from hosts not expected, all together.
 * Only the accept thread admits; the slots a relay claims are never a
 * stranger's. */
static struct handshake *admit(struct peer_listener *l, const unsigned char host[PEER_HOST_KEY], char *why,
                               size_t why_len)
{
    int mine = 0, strangers = 0;
    pthread_mutex_lock(&l->mu);
    int stranger = !peer_admit_has(&l->peers, host) && !peer_admit_has(&l->server, host);
    for (int i = 0; i < HANDSHAKE_THREADS; i++)
        strangers += l->hs[i].used && !l->hs[i].done && l->hs[i].stranger;
    pthread_mutex_unlock(&l->mu);
    struct handshake *h = claim(l, host, &mine);
    if (h && mine < HANDSHAKES_PER_ADDRESS && !(stranger && strangers >= STRANGER_HANDSHAKES)) {
        pthread_mutex_lock(&l->mu);
        h->stranger = stranger;
        pthread_mutex_unlock(&l->mu);
        return h;
    }
    if (!h)
        snprintf(why, why_len, "busy: all %d handshake slots are taken", HANDSHAKE_THREADS);
    else if (mine >= HANDSHAKES_PER_ADDRESS)
        snprintf(why, why_len, "busy: %d handshakes from your address already (at most %d)", mine,
                 HANDSHAKES_PER_ADDRESS);
    else
        snprintf(why, why_len, "busy: the %d handshake slots for addresses not expected are taken", strangers);
    unclaim(l, h);
    return NULL;
}

/* Starts claimed slot h's thread on fd (taken: closed on failure, and the
 * slot given back).  Returns 0 or -1. */
static int start_handshake(struct peer_listener *l, struct handshake *h, int fd, const char *addr, int relay_wait_ms)
{
    h->l = l;
    h->fd = fd;
    h->relay_wait_ms = relay_wait_ms;
    snprintf(h->addr, sizeof h->addr, "%s", addr);
    if (pthread_create(&h->thread, NULL, handshake_main, h) != 0) {
        close(fd);
        unclaim(l, h);
        return -1;
    }
    pthread_mutex_lock(&l->mu);
    h->started = 1;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

static void accept_one(struct peer_listener *l)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char addr[64];
    int fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
            log_warn("peer: accept failed: %s", strerror(errno));
        if (errno == EMFILE || errno == ENFILE)
            usleep(100 * 1000); /* let handshakes finish and free descriptors */
        return;
    }
    peer_format_addr(&ss, len, addr, sizeof addr);
    peer_socket_tune(fd);
    unsigned char host[PEER_HOST_KEY];
    char why[96] = "";
    hostport_client_key((const struct sockaddr *)&ss, host);
    struct handshake *h = admit(l, host, why, sizeof why);
    if (!h) {
        log_warn("peer: refused %s: %s", addr, why);
        count_refused(l);
        peer_admit_busy(fd, why);
        return;
    }
    if (start_handshake(l, h, fd, addr, 0) != 0) {
        log_warn("peer: refused %s: cannot start a handshake thread", addr);
        count_refused(l);
    }
}

int peer_listener_relay(struct peer_listener *l, const char *relay, const struct relay_ticket *ticket,
                        const char *dialer_role, unsigned channel, int timeout_ms, int wait_ms, struct shoal_err *err)
{
    unsigned char token[WIRE_MAC_BYTES], none[16] = { 0 };
    char addr[64];
    int mine = 0, rc = -1;
    int64_t job = 0;
    if (ticket->side != RELAY_SIDE_LISTENER || ticket->channel != channel)
        return err_set(err, 500, "bad_assignment", NULL, "cannot wait for '%s' at relay %s: the ticket is a %s's on "
                       "channel %u, not a listener's on %u", dialer_role, relay, relay_side_name(ticket->side),
                       ticket->channel, channel);
    pthread_mutex_lock(&l->mu);
    const struct peer_link *link = l->expecting ? peer_auth_find(&l->expect, dialer_role) : NULL;
    if (link) {
        job = l->expect.job_id;
        wire_relay_token(link->key, link->key_len, job, l->expect.epoch, channel, dialer_role, l->expect.role,
                         token);
    }
    pthread_mutex_unlock(&l->mu);
    if (!link)
        return err_set(err, 500, "peer_auth", NULL, "cannot wait for '%s' at relay %s: no link to that role is "
                       "expected", dialer_role, relay);
    struct handshake *h = claim(l, none, &mine);
    if (!h)
        return err_set(err, 503, "peer_io", NULL, "cannot wait for '%s' at relay %s: all %d handshake slots are "
                       "taken", dialer_role, relay, HANDSHAKE_THREADS);
    int fd = peer_relay_open(relay, ticket, token, timeout_ms, err);
    snprintf(addr, sizeof addr, "relay %s", relay);
    if (fd < 0 || start_handshake(l, h, fd, addr, wait_ms) != 0) {
        if (fd >= 0)
            err_set(err, 500, "peer_io", NULL, "cannot start a handshake thread for relay %s", relay);
        unclaim(l, h);
        goto out;
    }
    rc = 0;
out:
    OPENSSL_cleanse(token, sizeof token);
    return rc;
}

static void *accept_main(void *arg)
{
    struct peer_listener *l = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = l->fd, .events = POLLIN},
                              {.fd = l->wake_fd, .events = POLLIN}};
        int n = poll(p, 2, REAP_MS);
        if (n < 0 && errno != EINTR) {
            log_error("peer: listener poll failed: %s", strerror(errno));
            break;
        }
        if (n > 0 && (p[1].revents & POLLIN))
            break;
        reap(l, 0);
        if (n > 0 && (p[0].revents & POLLIN))
            accept_one(l);
    }
    return NULL;
}

int peer_listener_start(const char *bind_addr, struct peer_listener **out, unsigned *bound_port,
                        struct shoal_err *err)
{
    struct addrinfo *res = NULL;
    struct peer_listener *l = NULL;
    int rc = -1, one = 1, mutex_ok = 0;

    *out = NULL;
    if (peer_resolve(bind_addr, 1, &res, err) != 0)
        goto out;
    l = calloc(1, sizeof *l);
    if (!l) {
        err_set(err, 500, "peer_io", NULL, "out of memory");
        goto out;
    }
    l->fd = -1;
    l->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->wake_fd < 0) {
        err_set(err, 500, "peer_io", NULL, "eventfd: %s", strerror(errno));
        goto out;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines come from peer_now_ms */
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->parked_cv, &ca);
    pthread_condattr_destroy(&ca);
    mutex_ok = 1;
    l->fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->fd < 0) {
        err_set(err, 500, "peer_io", NULL, "cannot listen on %s: socket: %s", bind_addr,
                strerror(errno));
        goto out;
    }
    (void)setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    peer_socket_tune(l->fd); /* accepted sockets inherit the buffer sizes */
    if (bind(l->fd, res->ai_addr, res->ai_addrlen) != 0 || listen(l->fd, 128) != 0) {
        err_set(err, 500, "peer_io", NULL, "cannot listen on %s: %s", bind_addr,
                strerror(errno));
        goto out;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(l->fd, (struct sockaddr *)&ss, &len) != 0) {
        err_set(err, 500, "peer_io", NULL, "getsockname: %s", strerror(errno));
        goto out;
    }
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        err_set(err, 500, "peer_io", NULL, "getnameinfo failed on %s", bind_addr);
        goto out;
    }
    if (bound_port)
        *bound_port = (unsigned)strtoul(serv, NULL, 10);
    if (pthread_create(&l->accept_thread, NULL, accept_main, l) != 0) {
        err_set(err, 500, "peer_io", NULL, "cannot start the listener thread");
        goto out;
    }
    log_info("peer: listening on %s port %s", bind_addr, serv);
    *out = l;
    l = NULL;
    rc = 0;
out:
    if (l) {
        if (l->fd >= 0)
            close(l->fd);
        if (l->wake_fd >= 0)
            close(l->wake_fd);
        if (mutex_ok) {
            pthread_mutex_destroy(&l->mu);
            pthread_cond_destroy(&l->parked_cv);
        }
        free(l);
    }
    if (res)
        freeaddrinfo(res);
    return rc;
}

void peer_listener_stop(struct peer_listener *l)
{
    uint64_t one = 1;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->parked_cv);
    pthread_mutex_unlock(&l->mu);
    /* Every poll in the accept and handshake threads watches wake_fd. */
    if (write(l->wake_fd, &one, sizeof one) != sizeof one)
        log_error("peer: cannot wake the listener threads: %s", strerror(errno));
    pthread_join(l->accept_thread, NULL);
    reap(l, 1);
    for (int i = 0; i < l->n_parked; i++)
        peer_close(&l->parked[i]);
    close(l->fd);
    close(l->wake_fd);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->parked_cv);
    memset(&l->expect, 0, sizeof l->expect);
    free(l);
}

void peer_listener_expect(struct peer_listener *l, const struct peer_auth *auth)
{
    pthread_mutex_lock(&l->mu);
    l->expecting = auth != NULL;
    if (auth)
        l->expect = *auth;
    else
        memset(&l->expect, 0, sizeof l->expect);
    for (int i = 0; i < l->n_parked;) {
        struct peer_conn *c = &l->parked[i];
        if (auth && c->job_id == auth->job_id && c->epoch == auth->epoch) {
            i++;
            continue;
        }
        log_info("peer: closing parked connection from %s (role '%s', job %lld epoch %u): no "
                 "longer expected", c->addr, c->role, (long long)c->job_id, c->epoch);
        peer_close(c);
        parked_remove(l, i);
    }
    pthread_mutex_unlock(&l->mu);
}

int peer_listener_expect_peers(struct peer_listener *l, const char *const *addrs, int n, struct shoal_err *err)
{
    struct peer_hosts hosts = { .n = 0 };
    int rc = peer_admit_add_peers(&hosts, addrs, n, err);   /* outside the lock: names may wait for DNS */
    pthread_mutex_lock(&l->mu);
    l->peers = hosts;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int peer_listener_expect_server(struct peer_listener *l, const char *url, struct shoal_err *err)
{
    struct peer_hosts hosts = { .n = 0 };
    int rc = peer_admit_add_url(&hosts, url, err);
    pthread_mutex_lock(&l->mu);
    l->server = hosts;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int peer_listener_take(struct peer_listener *l, const char *role, int timeout_ms,
                       struct peer_conn *out, struct shoal_err *err)
{
    return peer_listener_take_stop(l, role, WIRE_CHANNEL_STAGE, timeout_ms, NULL, out, err);
}

int peer_listener_take_stop(struct peer_listener *l, const char *role, unsigned channel, int timeout_ms,
                            const struct peer_stop *stop, struct peer_conn *out, struct shoal_err *err)
{
    int64_t deadline = peer_deadline(timeout_ms);
    int rc = -1;

    memset(out, 0, sizeof *out);
    out->fd = -1;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        for (int i = 0; i < l->n_parked; i++) {
            if (strcmp(l->parked[i].role, role) == 0 && l->parked[i].channel == channel) {
                peer_conn_move(out, &l->parked[i]);
                parked_remove(l, i);
                rc = 0;
                goto out;
            }
        }
        if (l->stop) {
            err_set(err, 503, "peer_io", NULL, "peer listener stopped while waiting for '%s'",
                    role);
            goto out;
        }
        int64_t now = peer_now_ms();
        if (now >= deadline) {
            err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                    "no peer connected as '%s' within %d ms", role, timeout_ms);
            goto out;
        }
        if (stop && stop->stop && stop->stop(stop->arg)) {
            err_set(err, PEER_STATUS, "peer_io", NULL, "stopped waiting for the peer '%s': %s", role,
                    "the assignment changed");
            goto out;
        }
        /* With a stop, wake at least every slice to ask it. */
        int64_t until = stop && stop->stop && now + PEER_STOP_SLICE_MS < deadline ? now + PEER_STOP_SLICE_MS
                                                                                 : deadline;
        struct timespec ts = {.tv_sec = until / 1000, .tv_nsec = (until % 1000) * 1000000};
        pthread_cond_timedwait(&l->parked_cv, &l->mu, &ts);
    }
out:
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void peer_listener_set_encryption(struct peer_listener *l, int on)
{
    pthread_mutex_lock(&l->mu);
    l->encrypt = on ? 1 : 0;
    pthread_mutex_unlock(&l->mu);
}

int peer_listener_encryption(struct peer_listener *l)
{
    pthread_mutex_lock(&l->mu);
    int on = l->encrypt;
    pthread_mutex_unlock(&l->mu);
    return on;
}

void peer_listener_counts(struct peer_listener *l, uint64_t *probe_sessions, uint64_t *refused)
{
    pthread_mutex_lock(&l->mu);
    if (probe_sessions)
        *probe_sessions = l->probe_sessions;
    if (refused)
        *refused = l->refused;
    pthread_mutex_unlock(&l->mu);
}
