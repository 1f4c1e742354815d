/* peer_probe.c - probing nodes' peer listeners (peer_probe.h). */
#include "peer_probe.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../common/hostport.h"
#include "../../common/wire.h"
#include "../../common/clock.h"

/* One probe's progress: connecting, then reading the greeting (a header
 * and its nonce), writing a PING header, reading the PONG header. */
enum probe_phase { PROBE_CONNECT, PROBE_GREETING, PROBE_PING, PROBE_PONG, PROBE_DONE };

struct probe {
    int fd;
    enum probe_phase phase;
    unsigned char buf[WIRE_HEADER_BYTES + WIRE_NONCE_BYTES];
    size_t have, want;          /* bytes of buf read or written in this phase, and needed */
};

/* Ends probe p with what it found (PEER_PROBE_*), and why when it did not
 * answer. */
static void finish(struct probe *p, int *ok, char *why, int found, const char *reason)
{
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    p->phase = PROBE_DONE;
    *ok = found;
    if (found != PEER_PROBE_ANSWERED)
        snprintf(why, PEER_PROBE_WHY_MAX, "%s", reason);
}

/* Ends probe p on a connect that failed with errno `e`. */
static void connect_failed(struct probe *p, int *ok, char *why, int e)
{
    char reason[PEER_PROBE_WHY_MAX];
    snprintf(reason, sizeof reason, "connect: %s", strerror(e));
    finish(p, ok, why, e == ECONNREFUSED ? PEER_PROBE_REFUSED : PEER_PROBE_SILENT, reason);
}

/* Starts a non-blocking connect to addr, resolved and checked now
 * (hostport_resolve: a name may resolve elsewhere than at registration). */
static void start(struct probe *p, const char *addr, int *ok, char *why)
{
    char reason[HOSTPORT_WHY_MAX];
    struct addrinfo *ai = NULL;
    p->fd = -1;
    enum hostport_verdict v = hostport_resolve(addr, &ai, reason, sizeof reason);
    if (v != HOSTPORT_OK) {
        finish(p, ok, why, PEER_PROBE_SILENT, v == HOSTPORT_REFUSED ? reason : "its peer address does not resolve");
        goto out;
    }
    p->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd < 0) {
        finish(p, ok, why, PEER_PROBE_SILENT, "no socket for the probe");
        goto out;
    }
    if (connect(p->fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
        connect_failed(p, ok, why, errno);
        goto out;
    }
    p->phase = PROBE_CONNECT;
out:
    if (ai)
        freeaddrinfo(ai);
}

/* The greeting must be a HELLO with a nonce; an agent of another wire
 * version answers too (the magic is enough to say it is alive). */
static int greeting_ok(const unsigned char *b)
{
    struct wire_frame f;
    char why[64];
    uint32_t magic = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if (wire_header_decode(b, WIRE_NONCE_BYTES, &f, why, sizeof why) != 0)
        return magic == WIRE_MAGIC;
    return f.kind == WIRE_HELLO;
}

/* Advances probe p on the events poll reported. */
static void step(struct probe *p, int *ok, char *why)
{
    if (p->phase == PROBE_CONNECT) {
        int e = 0;
        socklen_t len = sizeof e;
        if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0 || e != 0) {
            connect_failed(p, ok, why, e ? e : errno);
            return;
        }
        p->phase = PROBE_GREETING, p->have = 0, p->want = WIRE_HEADER_BYTES + WIRE_NONCE_BYTES;
        return;
    }
    if (p->phase == PROBE_PING) {
        ssize_t w = send(p->fd, p->buf + p->have, p->want - p->have, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
            finish(p, ok, why, PEER_PROBE_SILENT, "the connection broke sending the ping");
            return;
        }
        p->have += w > 0 ? (size_t)w : 0;
        if (p->have == p->want)
            p->phase = PROBE_PONG, p->have = 0, p->want = WIRE_HEADER_BYTES;
        return;
    }
    ssize_t r = recv(p->fd, p->buf + p->have, p->want - p->have, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        finish(p, ok, why, PEER_PROBE_SILENT, "the listener closed the connection without answering");
        return;
    }
    p->have += r > 0 ? (size_t)r : 0;
    if (p->have < p->want)
        return;
    if (p->phase == PROBE_GREETING) {
        if (!greeting_ok(p->buf)) {
            finish(p, ok, why, PEER_PROBE_SILENT, "it greets with something that is not a shoal peer hello");
            return;
        }
        /* A listener with no handshake slot for us greets and says "busy"
         * in the same breath (agent/net/peer_listener.c): alive, not absent. */
        unsigned char next[WIRE_HEADER_BYTES];
        struct wire_frame f;
        char bad[64];
        if (recv(p->fd, next, sizeof next, MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof next &&
            wire_header_decode(next, 4096, &f, bad, sizeof bad) == 0 && f.kind == WIRE_ERROR) {
            finish(p, ok, why, PEER_PROBE_ANSWERED, "it answered, busy (its handshake slots are taken)");
            return;
        }
        struct wire_frame ping = {.kind = WIRE_PING, .dtype = WIRE_BYTES};
        wire_header_encode(&ping, p->buf);
        p->phase = PROBE_PING, p->have = 0, p->want = WIRE_HEADER_BYTES;
        return;
    }
    struct wire_frame f;
    char bad[64];
    int pong = wire_header_decode(p->buf, 0, &f, bad, sizeof bad) == 0 && f.kind == WIRE_PONG;
    finish(p, ok, why, pong ? PEER_PROBE_ANSWERED : PEER_PROBE_SILENT, "it answered the ping with something else");
}

void peer_probe_all(const char *const *addrs, int n, int timeout_ms, int *ok, char (*why)[PEER_PROBE_WHY_MAX])
{
    peer_probe_all_until(addrs, n, timeout_ms, ok, why, NULL, NULL);
}

void peer_probe_all_until(const char *const *addrs, int n, int timeout_ms, int *ok, char (*why)[PEER_PROBE_WHY_MAX],
                          int (*stop)(void *arg), void *arg)
{
    struct probe *ps = calloc((size_t)(n > 0 ? n : 1), sizeof *ps);
    struct pollfd *fds = calloc((size_t)(n > 0 ? n : 1), sizeof *fds);
    int64_t deadline = mono_ms() + timeout_ms;
    if (!ps || !fds) {
        for (int i = 0; i < n; i++)
            ok[i] = PEER_PROBE_SILENT, snprintf(why[i], PEER_PROBE_WHY_MAX, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        start(&ps[i], addrs[i], &ok[i], why[i]);
    for (;;) {
        int waiting = 0;
        for (int i = 0; i < n; i++) {
            int live = ps[i].phase != PROBE_DONE;
            fds[i] = (struct pollfd){ .fd = live ? ps[i].fd : -1,
                                      .events = (short)(ps[i].phase == PROBE_CONNECT || ps[i].phase == PROBE_PING
                                                            ? POLLOUT : POLLIN) };
            waiting += live;
        }
        int64_t left = deadline - mono_ms();
        if (!waiting || left <= 0 || (stop && stop(arg)))
            break;
        if (stop && left > PEER_PROBE_STOP_SLICE_MS)
            left = PEER_PROBE_STOP_SLICE_MS;
        if (poll(fds, (nfds_t)n, (int)left) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++)
            if (fds[i].fd >= 0 && fds[i].revents)
                step(&ps[i], &ok[i], why[i]);
    }
    for (int i = 0; i < n; i++) {
        if (ps[i].phase == PROBE_DONE)
            continue;
        char reason[PEER_PROBE_WHY_MAX];
        snprintf(reason, sizeof reason, "no answer within %d ms (%s)", timeout_ms,
                 ps[i].phase == PROBE_CONNECT ? "connecting" : "after connecting");
        finish(&ps[i], &ok[i], why[i], PEER_PROBE_SILENT, reason);
    }
out:
    free(ps);
    free(fds);
}

/* Waits up to the deadline for `events` on fd; 1 when they came, 0 not. */
static int wait_for_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = { .fd = fd, .events = events };
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return 0;
    }
}

int peer_probe_relay(const char *addr, int timeout_ms, char why[PEER_PROBE_WHY_MAX])
{
    static const char ask[] = "GET /healthz HTTP/1.0\r\n\r\n";
    struct probe p = { .fd = -1 };
    int ok = PEER_PROBE_SILENT, e = 0;
    int64_t deadline = mono_ms() + timeout_ms;
    char head[16];
    size_t have = 0;
    socklen_t len = sizeof e;
    start(&p, addr, &ok, why);
    if (p.phase == PROBE_DONE)
        return ok;
    if (!wait_for_fd(p.fd, POLLOUT, deadline)) {
        finish(&p, &ok, why, PEER_PROBE_SILENT, "no answer within the probe's time (connecting)");
        return ok;
    }
    if (getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0 || e != 0) {
        connect_failed(&p, &ok, why, e ? e : errno);
        return ok;
    }
    if (send(p.fd, ask, sizeof ask - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof ask - 1)) {
        finish(&p, &ok, why, PEER_PROBE_SILENT, "the connection broke sending GET /healthz");
        return ok;
    }
    /* "HTTP/1.x 200": the first 12 bytes of the answer */
    while (have < 12) {
        if (!wait_for_fd(p.fd, POLLIN, deadline)) {
            finish(&p, &ok, why, PEER_PROBE_SILENT, "no answer to GET /healthz within the probe's time");
            return ok;
        }
        ssize_t r = recv(p.fd, head + have, 12 - have, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            finish(&p, &ok, why, PEER_PROBE_SILENT, "it closed the connection without answering GET /healthz");
            return ok;
        }
        have += r > 0 ? (size_t)r : 0;
    }
    int healthy = memcmp(head, "HTTP/1.", 7) == 0 && memcmp(head + 9, "200", 3) == 0;
    finish(&p, &ok, why, healthy ? PEER_PROBE_ANSWERED : PEER_PROBE_SILENT,
           "it answered GET /healthz with something other than 200");
    return ok;
}
