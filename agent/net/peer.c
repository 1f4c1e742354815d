/* peer.c - peer connections: framed sends and receives with deadlines
 * (see peer.h), plain or sealed, and what the other peer files share.  The
 * dialer and its side of the hello live in peer_dial.c, the listener in
 * peer_listener.c, streams in peer_stream.c, encrypted connections' keys
 * in peer_seal.c; the engine below (peer_exchange) is shared by all of
 * them. */
#include "peer.h"

#include "peer_internal.h"

#include "../../common/crc32c.h"
#include "../../common/hostport.h"
#include "../../common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../common/clock.h"

int64_t peer_now_ms(void)
{
    return mono_ms();
}

int64_t peer_deadline(int timeout_ms)
{
    return timeout_ms < 0 ? PEER_NEVER : peer_now_ms() + timeout_ms;
}

struct peer_io peer_io_make(int timeout_ms, int cancel_fd)
{
    struct peer_io io = {.deadline_ms = timeout_ms < 0 ? -1 : peer_now_ms() + timeout_ms,
                         .timeout_ms = timeout_ms, .cancel_fd = cancel_fd};
    return io;
}

/* Socket buffers are left to the kernel on purpose: setting SO_SNDBUF or
 * SO_RCVBUF turns Linux's autotuning off and is capped by net.core.rmem_max
 * (208 KiB on a stock kernel), which would limit a 100 ms link to a few
 * tens of Mbit/s.  Autotuning grows them up to net.ipv4.tcp_rmem/tcp_wmem's
 * maximum (raise those on long, fast links). */
void peer_socket_tune(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void peer_format_addr(const void *sa, unsigned salen, char *out, size_t out_len)
{
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(sa, salen, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, out_len, "?");
        return;
    }
    if (strchr(host, ':'))
        snprintf(out, out_len, "[%s]:%s", host, serv);
    else
        snprintf(out, out_len, "%s:%s", host, serv);
}

void peer_quote(const void *p, size_t n, char *out, size_t out_len)
{
    const unsigned char *s = p;
    size_t o = 0;
    if (out_len < 8) {
        if (out_len)
            out[0] = '\0';
        return;
    }
    out[o++] = '\'';
    for (size_t i = 0; i < n; i++) {
        if (o + 5 >= out_len) { /* room for "...'" and the NUL */
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        out[o++] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
    }
    out[o++] = '\'';
    out[o] = '\0';
}

int peer_random(void *buf, size_t n, struct shoal_err *err)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t k = getrandom(p, n, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return err_set(err, 500, "peer_io", NULL, "getrandom failed: %s", strerror(errno));
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---- the frame engine -------------------------------------------------- */

/* Seals the next piece of t's payload into the scratch buffer and points
 * the iovecs at it (and at the tag after the last piece).  Only called when
 * every earlier iovec has gone out, so the scratch is free. */
static int tx_seal_piece(struct peer_tx *t, struct shoal_err *err)
{
    struct peer_seal *s = t->c->seal;
    uint64_t left = t->plain_len - t->plain_off;
    size_t k = left < PEER_SEAL_PIECE ? (size_t)left : PEER_SEAL_PIECE;
    int n = t->first + t->iovcnt;

    if (peer_seal_piece(t->c, s->scratch, t->plain + t->plain_off, k, err) != 0)
        return -1;
    t->plain_off += k;
    t->iov[n].iov_base = s->scratch;
    t->iov[n].iov_len = k;
    t->iovcnt++;
    if (t->plain_off == t->plain_len) {
        if (peer_seal_tag(t->c, t->tag, err) != 0)
            return -1;
        t->iov[n + 1].iov_base = t->tag;
        t->iov[n + 1].iov_len = WIRE_TAG_BYTES;
        t->iovcnt++;
        t->plain = NULL;
    }
    return 0;
}

int peer_tx_init(struct peer_tx *t, struct peer_conn *c, struct wire_frame *f,
                 const void *payload, int crc_done, struct shoal_err *err)
{
    f->job_id = c->job_id;
    f->epoch = c->epoch;
    t->c = c;
    t->first = 0;
    t->done = 0;
    t->plain = NULL;
    if (c->seal) {
        if (peer_seal_header(c, f, t->hdr, err) != 0)
            return -1;
        t->iov[0].iov_base = t->hdr;
        t->iov[0].iov_len = WIRE_SEALED_HEADER_BYTES;
        t->iovcnt = 1;
        t->plain = f->payload_len ? payload : NULL; /* no payload part when empty */
        t->plain_len = f->payload_len;
        t->plain_off = 0;
        return f->payload_len ? tx_seal_piece(t, err) : 0;
    }
    f->flags = 0;
    if (!crc_done)
        f->payload_crc = f->payload_len ? crc32c(0, payload, f->payload_len) : 0;
    wire_header_encode(f, t->hdr);
    t->iov[0].iov_base = t->hdr;
    t->iov[0].iov_len = WIRE_HEADER_BYTES;
    t->iov[1].iov_base = (void *)payload;
    t->iov[1].iov_len = f->payload_len;
    t->iovcnt = f->payload_len ? 2 : 1;
    return 0;
}

void peer_tx_init_sealed(struct peer_tx *t, struct peer_conn *c,
                         const unsigned char head[WIRE_SEALED_HEADER_BYTES],
                         const void *ciphertext, uint64_t len,
                         const unsigned char tag[WIRE_TAG_BYTES])
{
    t->c = c;
    t->first = 0;
    t->done = 0;
    t->plain = NULL;
    memcpy(t->hdr, head, WIRE_SEALED_HEADER_BYTES);
    memcpy(t->tag, tag, WIRE_TAG_BYTES);
    t->iov[0] = (struct iovec){.iov_base = t->hdr, .iov_len = WIRE_SEALED_HEADER_BYTES};
    t->iov[1] = (struct iovec){.iov_base = (void *)ciphertext, .iov_len = len};
    t->iov[2] = (struct iovec){.iov_base = t->tag, .iov_len = WIRE_TAG_BYTES};
    t->iovcnt = len ? 3 : 1;
}

void peer_rx_init(struct peer_rx *r, struct peer_conn *c, struct wire_frame *f, void *payload,
                  uint64_t payload_max, int check_binding)
{
    memset(r, 0, sizeof *r);
    r->c = c;
    r->f = f;
    r->sealed = c->seal != NULL;
    r->payload = payload;
    r->payload_max = payload_max;
    r->check_binding = check_binding;
}

void peer_rx_payload(struct peer_rx *r, void *payload)
{
    r->payload = payload;
    r->header_only = 0;
}

static int rx_done(const struct peer_rx *r)
{
    if (r->stage != 1)
        return r->stage == 2;
    return r->header_only ||
           (r->pause_at && r->got >= r->pause_at && r->got < r->f->payload_len);
}

static int closed_err(struct peer_conn *c, const char *when, struct shoal_err *err)
{
    return err_set(err, PEER_STATUS, "peer_closed", NULL, "peer %s closed the connection%s",
                   c->addr, when);
}

static int sock_err(struct peer_conn *c, const char *doing, int e, struct shoal_err *err)
{
    if (e == EPIPE || e == ECONNRESET || e == ECONNABORTED || e == ENOTCONN)
        return err_set(err, PEER_STATUS, "peer_closed", NULL,
                       "peer %s closed the connection while we were %s (%s)", c->addr, doing,
                       strerror(e));
    return err_set(err, PEER_STATUS, "peer_io", NULL, "peer %s: %s failed: %s", c->addr, doing,
                   strerror(e));
}

/* Writes as much of t as the socket takes now: 1 done, 0 would block, -1 error. */
static int tx_step(struct peer_tx *t, struct shoal_err *err)
{
    int first = t->first;
    for (;;) {
        if (t->iovcnt == 0 && !t->plain)
            break;
        if (t->iovcnt == 0) { /* the last piece is out: seal the next */
            t->first = first = 0;
            if (tx_seal_piece(t, err) != 0)
                return -1;
        }
        struct msghdr m = {.msg_iov = t->iov + first, .msg_iovlen = (size_t)t->iovcnt};
        ssize_t k = sendmsg(t->c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return sock_err(t->c, "sending", errno, err);
        }
        t->c->bytes_sent += (uint64_t)k;
        size_t left = (size_t)k;
        while (t->iovcnt > 0 && left >= t->iov[first].iov_len) {
            left -= t->iov[first].iov_len;
            first++;
            t->iovcnt--;
        }
        if (t->iovcnt > 0) {
            t->iov[first].iov_base = (char *)t->iov[first].iov_base + left;
            t->iov[first].iov_len -= left;
        }
        t->first = first;
    }
    t->done = 1;
    return 1;
}

/* Checks the header: its tag on an encrypted connection (and begins the
 * payload's decryption), its CRC and fields otherwise. */
static int rx_header_check(struct peer_rx *r, struct shoal_err *err)
{
    char why[128];
    struct wire_frame *f = r->f;
    if (r->sealed)
        return peer_open_header(r->c, r->hdr, r->payload_max, f, err);
    if (wire_header_decode(r->hdr, r->payload_max, f, why, sizeof why) != 0)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "peer %s sent a bad frame header: %s", r->c->addr, why);
    if (f->flags & WIRE_FLAG_SEALED)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "peer %s sent an encrypted frame on a connection that is not encrypted",
                       r->c->addr);
    return 0;
}

static int rx_header_done(struct peer_rx *r, struct shoal_err *err)
{
    struct wire_frame *f = r->f;
    if (rx_header_check(r, err) != 0)
        return -1;
    if (r->check_binding && (f->job_id != r->c->job_id || f->epoch != r->c->epoch))
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "peer %s sent a frame (kind %u) for job %lld epoch %u on a connection "
                       "of job %lld epoch %u",
                       r->c->addr, f->kind, (long long)f->job_id, f->epoch,
                       (long long)r->c->job_id, r->c->epoch);
    r->stage = 1;
    r->got = 0;
    r->crc = 0;
    return 0;
}

static int rx_payload_done(struct peer_rx *r, struct shoal_err *err)
{
    const struct wire_frame *f = r->f;
    if (r->sealed) {
        if (f->payload_len && peer_open_tag(r->c, r->tag, err) != 0)
            return -1;
    } else if (r->crc != f->payload_crc)
        return err_set(err, PEER_STATUS, "peer_protocol", NULL,
                       "peer %s: payload CRC mismatch on frame kind %u step %llu micro-batch "
                       "%u (%llu bytes: computed %08x, header says %08x)",
                       r->c->addr, f->kind, (unsigned long long)f->step, f->micro_batch,
                       (unsigned long long)f->payload_len, r->crc, f->payload_crc);
    r->stage = 2;
    return 0;
}

/* Reads what the socket has for r now: 1 done, 0 would block, -1 error. */
static int rx_step(struct peer_rx *r, struct shoal_err *err)
{
    size_t hdr_len = r->sealed ? WIRE_SEALED_HEADER_BYTES : WIRE_HEADER_BYTES;
    if (r->sealed && r->c->seal->rx_failed)
        return err_set(err, PEER_STATUS, "peer_auth", NULL,
                       "peer %s: the connection failed authentication earlier; nothing more is "
                       "read from it", r->c->addr);
    while (!rx_done(r)) {
        unsigned char *dst;
        size_t want;
        int tag = 0; /* reading the payload's tag */
        if (r->stage == 1 && r->got == r->f->payload_len) {
            if (r->sealed && r->f->payload_len && r->tag_got < WIRE_TAG_BYTES) {
                tag = 1;
            } else {
                if (rx_payload_done(r, err) != 0)
                    return -1;
                break;
            }
        }
        if (r->stage == 0) {
            dst = r->hdr + r->hdr_got;
            want = hdr_len - r->hdr_got;
        } else if (tag) {
            dst = r->tag + r->tag_got;
            want = WIRE_TAG_BYTES - r->tag_got;
        } else {
            uint64_t left = r->f->payload_len - r->got;
            if (r->pause_at > r->got && r->pause_at - r->got < left)
                left = r->pause_at - r->got;
            want = left < PEER_RX_PIECE ? (size_t)left : PEER_RX_PIECE;
            if (r->discard) {
                want = want < r->discard ? want : r->discard;
                dst = r->payload;
            } else {
                dst = (unsigned char *)r->payload + r->got;
            }
        }
        ssize_t k = recv(r->c->fd, dst, want, MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return sock_err(r->c, "receiving", errno, err);
        }
        if (k == 0)
            return closed_err(r->c, r->stage == 0 && r->hdr_got == 0 ? ""
                                                                     : " in the middle of a frame",
                              err);
        r->c->bytes_received += (uint64_t)k;
        if (r->stage == 0) {
            r->hdr_got += (size_t)k;
            if (r->hdr_got == hdr_len && rx_header_done(r, err) != 0)
                return -1;
        } else if (tag) {
            r->tag_got += (size_t)k;
        } else if (r->sealed) {
            /* decrypted in place; not trusted until the tag is checked */
            if (peer_open_piece(r->c, dst, (size_t)k, err) != 0)
                return -1;
            r->got += (uint64_t)k;
        } else {
            r->crc = crc32c(r->crc, dst, (size_t)k);
            r->got += (uint64_t)k;
        }
    }
    return 1;
}

static int timeout_err(const struct peer_tx *t, const struct peer_rx *r, const struct peer_io *io,
                       struct shoal_err *err)
{
    if (r && !rx_done(r)) {
        if (r->stage == 0 && r->hdr_got == 0)
            return err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                           "peer %s sent no frame within %d ms", r->c->addr, io->timeout_ms);
        if (r->stage == 0)
            return err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                           "peer %s stalled in the middle of a frame header (%zu of %d bytes "
                           "after %d ms)",
                           r->c->addr, r->hdr_got,
                           r->sealed ? WIRE_SEALED_HEADER_BYTES : WIRE_HEADER_BYTES,
                           io->timeout_ms);
        return err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                       "peer %s stalled in the middle of a frame (%llu of %llu payload bytes "
                       "after %d ms)",
                       r->c->addr, (unsigned long long)r->got,
                       (unsigned long long)r->f->payload_len, io->timeout_ms);
    }
    return err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                   "could not send to peer %s within %d ms (it is not reading)", t->c->addr,
                   io->timeout_ms);
}

int peer_exchange(struct peer_tx *t, struct peer_rx *r, const struct peer_io *io,
                  struct shoal_err *err)
{
    for (;;) {
        int tdone = !t || t->done, rdone = !r || rx_done(r);
        if (!tdone) {
            int rc = tx_step(t, err);
            if (rc < 0)
                return -1;
            tdone = rc;
        }
        if (!rdone) {
            int rc = rx_step(r, err);
            if (rc < 0)
                return -1;
            rdone = rc;
        }
        if (tdone && rdone)
            return 0;

        struct pollfd p[3];
        int n = 0, wait_ms = -1;
        if (!tdone)
            p[n++] = (struct pollfd){.fd = t->c->fd, .events = POLLOUT};
        if (!rdone) {
            if (n && p[0].fd == r->c->fd)
                p[0].events |= POLLIN;
            else
                p[n++] = (struct pollfd){.fd = r->c->fd, .events = POLLIN};
        }
        int cancel = n;
        if (io->cancel_fd >= 0)
            p[n++] = (struct pollfd){.fd = io->cancel_fd, .events = POLLIN};
        if (io->deadline_ms >= 0) {
            int64_t left = io->deadline_ms - peer_now_ms();
            if (left <= 0)
                return timeout_err(tdone ? NULL : t, rdone ? NULL : r, io, err);
            wait_ms = left > INT_MAX ? INT_MAX : (int)left;
        }
        int rc = poll(p, (nfds_t)n, wait_ms);
        if (rc < 0 && errno != EINTR)
            return err_set(err, 500, "peer_io", NULL, "poll failed: %s", strerror(errno));
        if (rc > 0 && io->cancel_fd >= 0 && (p[cancel].revents & POLLIN))
            return err_set(err, PEER_STATUS, "peer_io", NULL, "connection to peer %s stopped",
                           (t ? t->c : r->c)->addr);
        /* On timeout the loop tries once more, then reports it above. */
    }
}

int peer_send_io(struct peer_conn *c, struct wire_frame *f, const void *payload, int crc_done,
                 const struct peer_io *io, struct shoal_err *err)
{
    struct peer_tx t;
    if (peer_tx_init(&t, c, f, payload, crc_done, err) != 0)
        return -1;
    return peer_exchange(&t, NULL, io, err);
}

int peer_recv_io(struct peer_conn *c, struct wire_frame *f, void *payload, size_t cap,
                 int check_binding, const struct peer_io *io, struct shoal_err *err)
{
    struct peer_rx r;
    peer_rx_init(&r, c, f, payload, cap, check_binding);
    return peer_exchange(NULL, &r, io, err);
}

void peer_send_error(struct peer_conn *c, const char *reason, const struct peer_io *io)
{
    struct wire_frame f = {.kind = WIRE_ERROR, .dtype = WIRE_BYTES,
                           .payload_len = strnlen(reason, ERROR_TEXT_MAX)};
    struct shoal_err ignored;
    (void)peer_send_io(c, &f, reason, 0, io, &ignored);
}

/* ---- public API --------------------------------------------------------- */

static int check_conn(struct peer_conn *c, struct shoal_err *err)
{
    if (!c || c->fd < 0)
        return err_set(err, 500, "peer_io", NULL, "peer connection %s is closed",
                       c ? c->addr : "(null)");
    return 0;
}

int peer_send(struct peer_conn *c, struct wire_frame *f, const void *payload, int timeout_ms,
              struct shoal_err *err)
{
    if (check_conn(c, err) != 0)
        return -1;
    struct peer_io io = peer_io_make(timeout_ms, -1);
    return peer_send_io(c, f, payload, 0, &io, err);
}

int peer_recv(struct peer_conn *c, struct wire_frame *f, void *payload, size_t payload_cap,
              int timeout_ms, struct shoal_err *err)
{
    if (check_conn(c, err) != 0)
        return -1;
    struct peer_io io = peer_io_make(timeout_ms, -1);
    return peer_recv_io(c, f, payload, payload_cap, 1, &io, err);
}

int peer_sendrecv(struct peer_conn *to, struct wire_frame *sf, const void *spayload,
                  struct peer_conn *from, struct wire_frame *rf, void *rpayload, size_t rcap,
                  int timeout_ms, struct shoal_err *err)
{
    return peer_sendrecv_stop(to, sf, spayload, from, rf, rpayload, rcap, timeout_ms, NULL, err);
}

int peer_sendrecv_stop(struct peer_conn *to, struct wire_frame *sf, const void *spayload,
                       struct peer_conn *from, struct wire_frame *rf, void *rpayload, size_t rcap,
                       int timeout_ms, const struct peer_stop *stop, struct shoal_err *err)
{
    struct peer_tx t;
    struct peer_rx r;
    if ((sf && check_conn(to, err) != 0) || (rf && check_conn(from, err) != 0))
        return -1;
    struct peer_io io = peer_io_make(timeout_ms, -1);
    int64_t deadline = io.deadline_ms;
    if (sf && peer_tx_init(&t, to, sf, spayload, 0, err) != 0)
        return -1;
    if (rf)
        peer_rx_init(&r, from, rf, rpayload, rcap, 1);
    for (;;) {
        /* In slices when a stop may come: the exchange's state carries over. */
        if (stop && stop->stop) {
            int64_t slice = peer_now_ms() + PEER_STOP_SLICE_MS;
            io.deadline_ms = deadline < 0 || slice < deadline ? slice : deadline;
        }
        if (peer_exchange(sf ? &t : NULL, rf ? &r : NULL, &io, err) == 0)
            return 0;
        if (!stop || !stop->stop || strcmp(err->code, "peer_timeout") != 0 ||
            (deadline >= 0 && peer_now_ms() >= deadline))
            return -1;
        if (stop->stop(stop->arg))
            return err_set(err, PEER_STATUS, "peer_io", NULL, "stopped waiting for peer %s: %s",
                           (rf ? from : to)->addr, "the assignment changed");
    }
}

void peer_close(struct peer_conn *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    peer_seal_free(c->seal);
    c->seal = NULL;
}

int peer_resolve(const char *addr, int passive, struct addrinfo **out, struct shoal_err *err)
{
    *out = NULL;
    char host[256], port[8], why[HOSTPORT_WHY_MAX];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
    if (!passive) {   /* someone else's word: every address it resolves to is checked (hostport.h) */
        enum hostport_verdict v = hostport_resolve(addr, out, why, sizeof why);
        if (v == HOSTPORT_REFUSED)
            return err_set(err, 422, "address_refused", NULL, "will not connect to peer: %s", why);
        if (v != HOSTPORT_OK)
            return err_set(err, v == HOSTPORT_MALFORMED ? 400 : PEER_STATUS, "peer_io", NULL,
                           "cannot connect to peer: %s", why);
        return 0;
    }
    if (hostport_split(addr, host, sizeof host, port, sizeof port) != 0)
        return err_set(err, 400, "peer_io", NULL,
                       "bad peer address '%s': expected host:port with a numeric port", addr);
    int rc = getaddrinfo(host[0] && strcmp(host, "*") ? host : NULL, port, &hints, out);
    if (rc != 0)
        return err_set(err, PEER_STATUS, "peer_io", NULL, "cannot resolve peer address '%s': %s",
                       addr, gai_strerror(rc));
    return 0;
}
