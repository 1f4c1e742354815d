/* peer_stream.c - a job connection driven by a sender and a receiver
 * thread, each behind a bounded queue of frame slots (see peer.h).
 *
 * Copies: peer_stream_send copies the caller's payload into a slot and CRCs
 * it in the same pass, piece by piece while the piece is in cache (on an
 * encrypted connection it seals the payload into the slot instead: the
 * encryption is the copy); the sender thread hands header and slot to the
 * kernel with one sendmsg.
 * The receiver thread reads each payload in pieces, CRC'd (or decrypted in
 * place) as they land.
 * When the owner is waiting in peer_stream_recv for exactly the frame being
 * read (and it is next in order), the receiver moves what it has into the
 * owner's buffer and reads the rest straight there (a "posted" receive: no
 * second copy); otherwise the frame waits in a slot and is copied out once.
 * Slot buffers are kept and only grow, so a steady stream allocates
 * nothing. */
#include "peer.h"

#include "peer_internal.h"

#include "../../common/crc32c.h"
#include "../../common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../common/clock.h"

#define COPY_PIECE (64u << 10)  /* bytes copied then CRC'd while still in L1/L2 */
#define POST_CHECK (1u << 20)   /* bytes received between looks for a posted receive */
#define QUEUE_FRAMES_MAX 1024

struct slot {
    struct wire_frame f;
    unsigned char *buf;
    size_t cap; /* bytes allocated */
    /* a frame to send on an encrypted connection, sealed when queued */
    unsigned char head[WIRE_SEALED_HEADER_BYTES];
    unsigned char tag[WIRE_TAG_BYTES];
};

/* A ring of slots: [head, head+count) are full, in order. The producer
 * fills the slot at head+count outside the lock; the consumer reads the slot
 * at head outside the lock; neither touches the other's slot. */
struct queue {
    struct slot *slots;
    int n, head, count;
};

/* The owner waiting in peer_stream_recv with its buffer. Only the receiver
 * thread sets claimed (it is reading a payload into buf) and filled. */
struct post {
    int active, claimed, filled;
    uint16_t kind, dtype;
    uint64_t step;
    uint32_t micro_batch;
    size_t len;               /* bytes */
    void *buf;
    int64_t deadline_ms;      /* the owner's; a claimed read gives up then */
    struct wire_frame f;      /* header of the frame read into buf */
};

struct peer_stream {
    struct peer_conn c;
    size_t payload_cap;
    int wake_fd;                /* eventfd, readable once stop begins */
    pthread_t tx_thread, rx_thread;
    int tx_started, rx_started;

    pthread_mutex_t mu;
    pthread_cond_t tx_cv;       /* the sender has something to do, or stop */
    pthread_cond_t tx_done_cv;  /* a queued frame was written, or failure */
    pthread_cond_t rx_cv;       /* the receiver has room, or stop */
    pthread_cond_t rx_ready_cv; /* a frame was received or a post filled/released, or failure */
    struct queue sq, rq;
    struct post post;
    int stop;
    int failed;
    struct shoal_err fail;
    /* The peer closed its side.  Not a failure of the stream by itself: a
     * neighbour that has finished the job closes while our last frames to it
     * are already written.  Only a receive that still expects a frame, or a
     * send that the closed socket refuses, fails. */
    int rx_closed;
    struct shoal_err rx_close;
    double send_wait_s, recv_wait_s;
    uint64_t queued_bytes;      /* headers, payloads and tags of every frame queued */
};

static struct timespec abs_ms(int64_t deadline_ms)
{
    struct timespec ts = {.tv_sec = deadline_ms / 1000,
                          .tv_nsec = (long)(deadline_ms % 1000) * 1000000L};
    return ts;
}

/* Holds mu. Keeps the first failure only: later ones are its echoes. */
static void fail_locked(struct peer_stream *s, const struct shoal_err *e)
{
    if (!s->failed) {
        s->failed = 1;
        s->fail = *e;
    }
    pthread_cond_broadcast(&s->tx_done_cv);
    pthread_cond_broadcast(&s->rx_ready_cv);
}

static int grow(struct slot *sl, size_t need)
{
    if (sl->cap >= need)
        return 0;
    unsigned char *p = malloc(need ? need : 1);
    if (!p)
        return -1;
    free(sl->buf);
    sl->buf = p;
    sl->cap = need;
    return 0;
}

/* memcpy that returns the CRC32C of what it copied, computed piece by
 * piece on the destination while the piece is still in cache. */
static uint32_t copy_crc(void *dst, const void *src, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    uint32_t crc = 0;
    for (size_t off = 0; off < n; off += COPY_PIECE) {
        size_t k = n - off < COPY_PIECE ? n - off : COPY_PIECE;
        memcpy(d + off, s + off, k);
        crc = crc32c(crc, d + off, k);
    }
    return crc;
}

/* Seals frame f (job and epoch stamped) into slot sl, copying the
 * payload by encrypting it piece by piece.  The owner's thread is the only
 * one that seals on this connection, so the frame numbers follow the queue. */
static int seal_into(struct peer_stream *s, struct slot *sl, const struct wire_frame *f,
                     const void *payload, struct shoal_err *err)
{
    sl->f = *f;
    sl->f.job_id = s->c.job_id;
    sl->f.epoch = s->c.epoch;
    return peer_seal_frame(&s->c, &sl->f, payload, sl->head, sl->buf, sl->tag, err);
}

static void *tx_main(void *arg)
{
    struct peer_stream *s = arg;
    struct shoal_err err;
    struct peer_io io = peer_io_make(-1, s->wake_fd); /* the owner's calls time out, not us */

    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && !s->failed && s->sq.count == 0)
            pthread_cond_wait(&s->tx_cv, &s->mu);
        if (s->stop || s->failed)
            break;
        struct slot *sl = &s->sq.slots[s->sq.head];
        pthread_mutex_unlock(&s->mu);
        int rc;
        if (s->c.seal) {
            struct peer_tx t;
            peer_tx_init_sealed(&t, &s->c, sl->head, sl->buf, sl->f.payload_len, sl->tag);
            rc = peer_exchange(&t, NULL, &io, &err);
        } else {
            rc = peer_send_io(&s->c, &sl->f, sl->buf, 1, &io, &err);
        }
        pthread_mutex_lock(&s->mu);
        if (rc != 0) {
            if (!s->stop)
                fail_locked(s, &err);
            break;
        }
        s->sq.head = (s->sq.head + 1) % s->sq.n;
        s->sq.count--;
        pthread_cond_broadcast(&s->tx_done_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Receiver thread, holding mu: 1 if the owner waits for exactly frame f and
 * it is next in order, so the payload may go straight to its buffer. */
static int claim_post(struct peer_stream *s, const struct wire_frame *f)
{
    struct post *p = &s->post;
    int ok = p->active && !p->claimed && !p->filled && s->rq.count == 0 &&
             f->kind == p->kind && f->dtype == p->dtype && f->step == p->step &&
             f->micro_batch == p->micro_batch && f->payload_len == p->len;
    if (ok)
        p->claimed = 1;
    return ok;
}

/* Receiver thread, holding mu: gives the post back to the owner, filled or
 * (deadline, error) not; a post given back unfilled is not claimed again. */
static void release_post(struct peer_stream *s, const struct wire_frame *filled)
{
    s->post.claimed = 0;
    if (filled) {
        s->post.f = *filled;
        s->post.filled = 1;
    } else {
        s->post.active = 0;
    }
    pthread_cond_broadcast(&s->rx_ready_cv);
}

/* Reads the payload of the frame whose header r holds into slot sl, or into
 * the owner's buffer once a matching receive is posted. Returns 1 when it
 * went to the owner (the post is filled), 0 when it is in the slot, -1 on
 * error (the post, if claimed, released). */
static int rx_payload(struct peer_stream *s, struct peer_rx *r, struct slot *sl,
                      struct shoal_err *err)
{
    struct peer_io forever = peer_io_make(-1, s->wake_fd);
    struct peer_io owner = {.deadline_ms = -1, .cancel_fd = s->wake_fd};
    uint64_t len = sl->f.payload_len;
    int posted = 0;

    if (grow(sl, (size_t)len) != 0)
        return err_set(err, 500, "peer_io", NULL,
                       "out of memory for a %llu-byte frame from peer %s",
                       (unsigned long long)len, s->c.addr);
    peer_rx_payload(r, sl->buf);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (!posted && claim_post(s, &sl->f)) {
            posted = 1;
            owner.deadline_ms = s->post.deadline_ms;
            if (r->got)
                memcpy(s->post.buf, sl->buf, (size_t)r->got);
            r->payload = s->post.buf;
        }
        pthread_mutex_unlock(&s->mu);
        /* Posted: read to the end, but only until the owner's deadline. */
        r->pause_at = posted ? 0 : r->got + POST_CHECK;
        int rc = peer_exchange(NULL, r, posted ? &owner : &forever, err);
        if (rc == 0 && r->stage == 2) {
            if (posted) {
                pthread_mutex_lock(&s->mu);
                release_post(s, &sl->f);
                pthread_mutex_unlock(&s->mu);
            }
            return posted;
        }
        if (rc != 0 && (!posted || strcmp(err->code, "peer_timeout") != 0)) {
            if (posted) {
                pthread_mutex_lock(&s->mu);
                release_post(s, NULL);
                pthread_mutex_unlock(&s->mu);
            }
            return -1;
        }
        if (rc != 0) {
            /* The owner gave up on this frame for now: keep it in the slot
             * for its next call. */
            if (r->got)
                memcpy(sl->buf, s->post.buf, (size_t)r->got);
            r->payload = sl->buf;
            pthread_mutex_lock(&s->mu);
            release_post(s, NULL);
            pthread_mutex_unlock(&s->mu);
            posted = 0;
        }
    }
}

static void *rx_main(void *arg)
{
    struct peer_stream *s = arg;
    struct shoal_err err;
    struct peer_io io = peer_io_make(-1, s->wake_fd); /* the owner's calls time out, not us */
    struct peer_rx r;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* A full queue leaves the bytes in the socket: TCP slows the peer. */
        while (!s->stop && !s->failed && s->rq.count == s->rq.n)
            pthread_cond_wait(&s->rx_cv, &s->mu);
        if (s->stop || s->failed)
            break;
        struct slot *sl = &s->rq.slots[(s->rq.head + s->rq.count) % s->rq.n];
        pthread_mutex_unlock(&s->mu);

        peer_rx_init(&r, &s->c, &sl->f, NULL, s->payload_cap, 1);
        r.header_only = 1;
        int rc = peer_exchange(NULL, &r, &io, &err);
        if (rc == 0)
            rc = rx_payload(s, &r, sl, &err);

        pthread_mutex_lock(&s->mu);
        if (rc < 0 && strcmp(err.code, "peer_closed") == 0 && !s->stop) {
            s->rx_closed = 1;
            s->rx_close = err;
            pthread_cond_broadcast(&s->rx_ready_cv);
            break;
        }
        if (rc < 0) {
            if (!s->stop)
                fail_locked(s, &err);
            break;
        }
        if (rc == 0) { /* in the slot; 1: it went to the owner, the slot stays free */
            s->rq.count++;
            pthread_cond_broadcast(&s->rx_ready_cv);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void queue_free(struct queue *q)
{
    if (!q->slots)
        return;
    for (int i = 0; i < q->n; i++)
        free(q->slots[i].buf);
    free(q->slots);
    q->slots = NULL;
}

void peer_stream_stop(struct peer_stream *s)
{
    uint64_t one = 1;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->tx_cv);
    pthread_cond_broadcast(&s->rx_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof one) != sizeof one)
        log_error("peer: cannot wake the stream threads of %s: %s", s->c.addr, strerror(errno));
    if (s->tx_started)
        pthread_join(s->tx_thread, NULL);
    if (s->rx_started)
        pthread_join(s->rx_thread, NULL);
    peer_close(&s->c);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    queue_free(&s->sq);
    queue_free(&s->rq);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->tx_cv);
    pthread_cond_destroy(&s->tx_done_cv);
    pthread_cond_destroy(&s->rx_cv);
    pthread_cond_destroy(&s->rx_ready_cv);
    free(s);
}

int peer_stream_start(struct peer_conn *c, size_t payload_cap, int queue_frames,
                      struct peer_stream **out, struct shoal_err *err)
{
    struct peer_stream *s = NULL;
    pthread_condattr_t ca;
    int rc = -1;

    *out = NULL;
    if (!c || c->fd < 0 || queue_frames < 1 || queue_frames > QUEUE_FRAMES_MAX) {
        err_set(err, 500, "peer_io", NULL,
                "peer stream needs an open connection and 1..%d queued frames",
                QUEUE_FRAMES_MAX);
        goto out;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        err_set(err, 500, "peer_io", NULL, "out of memory");
        goto out;
    }
    peer_conn_move(&s->c, c);
    s->payload_cap = payload_cap;
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines come from peer_now_ms */
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->tx_cv, &ca);
    pthread_cond_init(&s->tx_done_cv, &ca);
    pthread_cond_init(&s->rx_cv, &ca);
    pthread_cond_init(&s->rx_ready_cv, &ca);
    pthread_condattr_destroy(&ca);
    s->sq.n = s->rq.n = queue_frames;
    s->sq.slots = calloc((size_t)queue_frames, sizeof *s->sq.slots);
    s->rq.slots = calloc((size_t)queue_frames, sizeof *s->rq.slots);
    if (s->wake_fd < 0 || !s->sq.slots || !s->rq.slots) {
        err_set(err, 500, "peer_io", NULL, "cannot set up a stream to peer %s: %s", s->c.addr,
                s->wake_fd < 0 ? strerror(errno) : "out of memory");
        goto out;
    }
    if (pthread_create(&s->tx_thread, NULL, tx_main, s) != 0) {
        err_set(err, 500, "peer_io", NULL, "cannot start the sender thread for peer %s",
                s->c.addr);
        goto out;
    }
    s->tx_started = 1;
    if (pthread_create(&s->rx_thread, NULL, rx_main, s) != 0) {
        err_set(err, 500, "peer_io", NULL, "cannot start the receiver thread for peer %s",
                s->c.addr);
        goto out;
    }
    s->rx_started = 1;
    *out = s;
    s = NULL;
    rc = 0;
out:
    if (s)
        peer_stream_stop(s);
    return rc;
}

/* Holds mu; returns -1 with err a copy of the stream's failure. */
static int failed_err(struct peer_stream *s, struct shoal_err *err)
{
    if (err)
        *err = s->fail;
    return -1;
}

int peer_stream_send(struct peer_stream *s, const struct wire_frame *f, const void *payload,
                     int timeout_ms, struct shoal_err *err)
{
    int64_t deadline = peer_deadline(timeout_ms);
    struct timespec ts = abs_ms(deadline);
    double waited_from = 0;
    int rc = -1;

    /* A frame the peer would refuse is our bug: say so here, not there. */
    unsigned char hdr[WIRE_HEADER_BYTES];
    struct wire_frame check;
    char why[128];
    wire_header_encode(f, hdr);
    if (wire_header_decode(hdr, (uint64_t)(SIZE_MAX / 2), &check, why, sizeof why) != 0)
        return err_set(err, 500, "peer_protocol", NULL,
                       "refusing to send a bad frame (kind %u) to peer %s: %s", f->kind,
                       s->c.addr, why);
    pthread_mutex_lock(&s->mu);
    while (!s->failed && s->sq.count == s->sq.n) {
        if (!waited_from)
            waited_from = mono_s();
        if (peer_now_ms() >= deadline)
            break;
        pthread_cond_timedwait(&s->tx_done_cv, &s->mu, &ts);
    }
    if (waited_from)
        s->send_wait_s += mono_s() - waited_from;
    if (s->failed) {
        failed_err(s, err);
        goto out;
    }
    if (s->rx_closed) {   /* nobody will read it */
        if (err)
            *err = s->rx_close;
        goto out;
    }
    if (s->sq.count == s->sq.n) {
        err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                "send queue to peer %s stayed full for %d ms (the peer is not reading)",
                s->c.addr, timeout_ms);
        goto out;
    }
    struct slot *sl = &s->sq.slots[(s->sq.head + s->sq.count) % s->sq.n];
    pthread_mutex_unlock(&s->mu);

    size_t len = (size_t)f->payload_len;
    if (grow(sl, len) != 0) {
        pthread_mutex_lock(&s->mu);
        err_set(err, 500, "peer_io", NULL, "out of memory for a %zu-byte frame to peer %s", len,
                s->c.addr);
        goto out;
    }
    if (s->c.seal) {
        struct shoal_err se;
        if (seal_into(s, sl, f, payload, &se) != 0) {
            pthread_mutex_lock(&s->mu);
            fail_locked(s, &se); /* a frame number is spent: the peer would refuse the next */
            failed_err(s, err);
            goto out;
        }
    } else {
        sl->f = *f;
        sl->f.payload_crc = copy_crc(sl->buf, payload, len);
    }

    pthread_mutex_lock(&s->mu);
    s->sq.count++;
    s->queued_bytes += WIRE_HEADER_BYTES + len + (s->c.seal ? WIRE_SEAL_OVERHEAD(len) : 0);
    pthread_cond_signal(&s->tx_cv);
    rc = 0;
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Checks a received (and CRC-checked) frame against what the owner waits
 * for; on a match copies it out when it is in a slot. Returns 0 or -1 with
 * *bad set. */
static int frame_check(struct peer_stream *s, const struct wire_frame *f, const void *buf,
                       uint16_t kind, uint16_t dtype, uint64_t step, uint32_t micro_batch,
                       void *payload, size_t payload_len, struct shoal_err *bad)
{
    char quoted[200];
    if (f->kind == WIRE_ERROR) {
        peer_quote(buf, (size_t)f->payload_len, quoted, sizeof quoted);
        return err_set(bad, PEER_STATUS, "peer_protocol", NULL,
                       "peer %s reported an error instead of frame kind %u step %llu "
                       "micro-batch %u: %s",
                       s->c.addr, kind, (unsigned long long)step, micro_batch, quoted);
    }
    if (f->kind != kind || f->dtype != dtype || f->step != step ||
        f->micro_batch != micro_batch || f->payload_len != payload_len)
        return err_set(bad, PEER_STATUS, "peer_protocol", NULL,
                       "peer %s sent frame kind %u dtype %u step %llu micro-batch %u with %llu "
                       "bytes; expected kind %u dtype %u step %llu micro-batch %u with %zu bytes",
                       s->c.addr, f->kind, f->dtype, (unsigned long long)f->step,
                       f->micro_batch, (unsigned long long)f->payload_len, kind, dtype,
                       (unsigned long long)step, micro_batch, payload_len);
    if (buf != payload && payload_len)
        memcpy(payload, buf, payload_len);
    return 0;
}

int peer_stream_recv(struct peer_stream *s, uint16_t kind, uint16_t dtype, uint64_t step,
                     uint32_t micro_batch, void *payload, size_t payload_len, int timeout_ms,
                     struct shoal_err *err)
{
    int64_t deadline = peer_deadline(timeout_ms);
    struct timespec ts = abs_ms(deadline);
    struct post *p = &s->post;
    double waited_from = 0;
    struct shoal_err bad;
    struct wire_frame f;
    struct slot *sl = NULL;
    int rc = -1, check;

    pthread_mutex_lock(&s->mu);
    /* Frames that arrived before a failure are still delivered. */
    if (!s->failed && !s->rx_closed && s->rq.count == 0) {
        *p = (struct post){.active = 1, .kind = kind, .dtype = dtype, .step = step,
                           .micro_batch = micro_batch,
                           .len = payload_len, .buf = payload, .deadline_ms = deadline};
        waited_from = mono_s();
    }
    for (;;) {
        int due = peer_now_ms() >= deadline;
        /* While the receiver writes into our buffer we may not return: it
         * gives up at the same deadline and releases the post. */
        if (p->claimed && due)
            pthread_cond_wait(&s->rx_ready_cv, &s->mu);
        else if (!p->claimed && (s->failed || s->rx_closed || s->rq.count > 0 || p->filled || due))
            break;
        else
            pthread_cond_timedwait(&s->rx_ready_cv, &s->mu, &ts);
    }
    p->active = 0;
    if (waited_from)
        s->recv_wait_s += mono_s() - waited_from;
    if (p->filled) {
        p->filled = 0;
        f = p->f;
    } else if (s->rq.count > 0) {
        sl = &s->rq.slots[s->rq.head];
        f = sl->f;
    } else {
        if (s->failed)
            failed_err(s, err);
        else if (s->rx_closed && err)
            *err = s->rx_close;
        else
            err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                    "peer %s sent no frame (kind %u, step %llu, micro-batch %u) within %d ms",
                    s->c.addr, kind, (unsigned long long)step, micro_batch, timeout_ms);
        goto out;
    }
    pthread_mutex_unlock(&s->mu);

    check = frame_check(s, &f, sl ? sl->buf : payload, kind, dtype, step, micro_batch, payload,
                        payload_len, &bad);

    pthread_mutex_lock(&s->mu);
    if (sl) {
        s->rq.head = (s->rq.head + 1) % s->rq.n;
        s->rq.count--;
        pthread_cond_signal(&s->rx_cv);
    }
    if (check != 0) {
        /* The two sides disagree about the schedule (or the bytes): nothing
         * after this frame can be trusted either. */
        fail_locked(s, &bad);
        failed_err(s, err);
        goto out;
    }
    rc = 0;
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int peer_stream_flush(struct peer_stream *s, int timeout_ms, struct shoal_err *err)
{
    int64_t deadline = peer_deadline(timeout_ms);
    struct timespec ts = abs_ms(deadline);
    int rc = -1;

    pthread_mutex_lock(&s->mu);
    while (!s->failed && s->sq.count > 0 && peer_now_ms() < deadline)
        pthread_cond_timedwait(&s->tx_done_cv, &s->mu, &ts);
    if (s->failed) {
        failed_err(s, err);
        goto out;
    }
    if (s->sq.count > 0) {
        err_set(err, PEER_STATUS_TIMEOUT, "peer_timeout", NULL,
                "%d frames to peer %s still unsent after %d ms", s->sq.count, s->c.addr,
                timeout_ms);
        goto out;
    }
    rc = 0;
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void peer_stream_take_waits(struct peer_stream *s, double *send_wait_s, double *recv_wait_s)
{
    pthread_mutex_lock(&s->mu);
    if (send_wait_s)
        *send_wait_s = s->send_wait_s;
    if (recv_wait_s)
        *recv_wait_s = s->recv_wait_s;
    s->send_wait_s = s->recv_wait_s = 0;
    pthread_mutex_unlock(&s->mu);
}

uint64_t peer_stream_queued_bytes(struct peer_stream *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->queued_bytes;
    pthread_mutex_unlock(&s->mu);
    return n;
}

const char *peer_stream_addr(const struct peer_stream *s)
{
    return s->c.addr;
}

int peer_stream_encrypted(const struct peer_stream *s)
{
    return s->c.seal != NULL;
}
