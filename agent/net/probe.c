/* probe.c - link measurement against a peer's probe session or a relay's echo (probe.h). */
#include "probe.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../common/relay_proto.h"
#include "../control/control.h"
#include "peer.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One echo; returns the round trip in seconds, or -1. */
static double ping(struct peer_conn *c, uint32_t seq, int timeout_ms, struct shoal_err *err)
{
    struct wire_frame f = { .kind = WIRE_PING, .dtype = WIRE_BYTES, .micro_batch = seq, .payload_len = 8 };
    uint64_t sent = seq, got = 0;
    double t0 = ctl_now();
    if (peer_send(c, &f, &sent, timeout_ms, err) != 0 || peer_recv(c, &f, &got, sizeof got, timeout_ms, err) != 0)
        return -1;
    if (f.kind != WIRE_PONG || f.payload_len != 8 || got != sent) {
        err_set(err, 502, "peer_protocol", NULL, "peer %s answered a ping with something else", c->addr);
        return -1;
    }
    return ctl_now() - t0;
}

/* Sends `bytes` of PROBE frames, the last marked, and waits for the PONG.
 * Returns the seconds it took, or -1. */
static double burst(struct peer_conn *c, const void *junk, uint64_t bytes, int timeout_ms, struct shoal_err *err)
{
    struct wire_frame f;
    char none[8];
    double t0 = ctl_now();
    for (uint64_t sent = 0; sent < bytes;) {
        uint64_t n = bytes - sent < PROBE_FRAME_BYTES ? bytes - sent : PROBE_FRAME_BYTES;
        sent += n;
        f = (struct wire_frame){ .kind = WIRE_PROBE, .dtype = WIRE_BYTES, .payload_len = n,
                                 .micro_batch = sent == bytes };
        if (peer_send(c, &f, junk, timeout_ms, err) != 0)
            return -1;
    }
    if (peer_recv(c, &f, none, sizeof none, timeout_ms, err) != 0)
        return -1;
    if (f.kind != WIRE_PONG) {
        err_set(err, 502, "peer_protocol", NULL, "peer %s answered a probe burst with something else", c->addr);
        return -1;
    }
    return ctl_now() - t0;
}

/* Sends `bytes` to the relay's echo while reading them back; returns the
 * seconds until the last came back, or -1. */
static double echo(int fd, char *buf, uint64_t bytes, int timeout_ms, const char *relay, struct shoal_err *err)
{
    uint64_t sent = 0, got = 0;
    double t0 = ctl_now(), end = t0 + timeout_ms / 1e3;
    while (got < bytes) {
        struct pollfd p = { .fd = fd, .events = POLLIN | (sent < bytes ? POLLOUT : 0) };
        double left = end - ctl_now();
        if (left <= 0)
            return err_set(err, 504, "peer_timeout", NULL, "relay %s echoed %llu of %llu bytes within %d ms", relay,
                           (unsigned long long)got, (unsigned long long)bytes, timeout_ms), -1;
        if (poll(&p, 1, (int)(left * 1e3) + 1) < 0 && errno != EINTR)
            return err_set(err, 502, "peer_io", NULL, "relay %s: poll: %s", relay, strerror(errno)), -1;
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t n = read(fd, buf, PROBE_FRAME_BYTES);
            if (n <= 0)
                return err_set(err, 502, "peer_io", NULL, "relay %s closed the probe after %llu bytes", relay,
                               (unsigned long long)got), -1;
            got += (uint64_t)n;
        }
        if (sent < bytes && (p.revents & POLLOUT)) {
            size_t want = bytes - sent < PROBE_FRAME_BYTES ? (size_t)(bytes - sent) : PROBE_FRAME_BYTES;
            ssize_t n = send(fd, buf, want, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno != EAGAIN && errno != EINTR)
                return err_set(err, 502, "peer_io", NULL, "relay %s: %s", relay, strerror(errno)), -1;
            sent += n > 0 ? (uint64_t)n : 0;
        }
    }
    return ctl_now() - t0;
}

/* A link being measured: a peer's probe session (c) or a relay's echo
 * (fd), with PROBE_FRAME_BYTES of filler. */
struct probed_link {
    struct peer_conn *c;      /* NULL: the relay's echo */
    int fd;
    const char *relay;
    void *buf;
    int timeout_ms;
};

/* Ping number i (bytes 0), or a timed burst of `bytes`: seconds, or -1. */
static double timed(struct probed_link *l, uint32_t i, uint64_t bytes, struct shoal_err *err)
{
    if (l->c)
        return bytes ? burst(l->c, l->buf, bytes, l->timeout_ms, err) : ping(l->c, i, l->timeout_ms, err);
    return echo(l->fd, l->buf, bytes ? bytes : 64, l->timeout_ms, l->relay, err);
}

/* The pings, then a warm-up burst that opens TCP's window and sizes the
 * PROBE_BURSTS bursts (about PROBE_BURST_TARGET_S each), into out. */
static int measure(struct probed_link *l, double start, struct probe_result *out, struct shoal_err *err)
{
    double rtt[PROBE_PINGS], bw[PROBE_BURSTS];
    int rc = -1;
    if (!(l->buf = calloc(1, PROBE_FRAME_BYTES)))
        return err_set(err, 500, "internal", NULL, "out of memory");
    for (int i = 0; i < PROBE_PINGS; i++)
        if ((rtt[i] = timed(l, (uint32_t)i, 0, err)) < 0)
            goto out;
    double round_trip = median(rtt, PROBE_PINGS);
    double t = timed(l, 0, PROBE_BURST_MIN, err);
    if (t < 0)
        goto out;
    out->bytes = PROBE_BURST_MIN;
    double want = PROBE_BURST_MIN / (t > round_trip ? t - round_trip : t) * PROBE_BURST_TARGET_S;   /* bytes */
    uint64_t size = want < PROBE_BURST_MIN ? PROBE_BURST_MIN : want > PROBE_BURST_MAX ? PROBE_BURST_MAX
                                                                                     : (uint64_t)want;
    for (int i = 0; i < PROBE_BURSTS; i++) {
        if ((t = timed(l, 0, size, err)) < 0)
            goto out;
        out->bytes += size;
        /* The answer's way back is in t; a burst so short that the round
         * trip dominates falls back to the plain time. */
        double wire = t > 1.5 * round_trip ? t - round_trip : t;
        bw[i] = (double)size * 8.0 / wire / 1e9;
    }
    out->latency_ms = round_trip / 2.0 * 1e3;
    out->bandwidth_gbps = median(bw, PROBE_BURSTS);
    out->seconds = ctl_now() - start;
    rc = 0;
out:
    free(l->buf);
    l->buf = NULL;
    return rc;
}

int probe_link(const char *addr, int timeout_ms, struct probe_result *out, struct shoal_err *err)
{
    struct peer_conn c = { .fd = -1 };
    struct probed_link l = { .c = &c, .timeout_ms = timeout_ms };
    double start = ctl_now();
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (peer_dial(addr, NULL, NULL, timeout_ms, &c, err) == 0) {
        out->connected = 1;
        rc = measure(&l, start, out, err);
    }
    peer_close(&c);
    return rc;
}

int probe_relay(const char *relay, const struct relay_ticket *ticket, int timeout_ms, struct probe_result *out,
                struct shoal_err *err)
{
    unsigned char token[RELAY_TOKEN_BYTES] = { 0 };
    struct probed_link l = { .fd = -1, .relay = relay, .timeout_ms = timeout_ms };
    double start = ctl_now();
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (ticket->side != RELAY_SIDE_PROBE)
        return err_set(err, 500, "bad_answer", NULL, "cannot probe relay %s: the ticket is a %s's, not a probe's",
                       relay, relay_side_name(ticket->side));
    l.fd = peer_relay_open(relay, ticket, token, timeout_ms, err);
    if (l.fd >= 0 && relay_wait_paired(l.fd, relay, timeout_ms, -1, err) == 0) {
        out->connected = 1;
        rc = measure(&l, start, out, err);
    }
    if (l.fd >= 0)
        close(l.fd);
    return rc;
}
