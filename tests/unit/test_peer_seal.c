/* test_peer_seal.c - encrypted peer connections (agent/net/peer.h, wire.h
 * "Sealed connections") over real sockets on 127.0.0.1 with a real listener:
 * who asks and what is agreed, round trips of every size through peer_send,
 * peer_sendrecv and streams, and a man in the middle - a relay thread that
 * forwards whole frames between the dialer and the listener and alters,
 * drops, replays, reorders or slows one - that is always caught with a
 * "peer_auth" error naming the peer, while on a plain connection the same
 * relay (recomputing the CRCs) changes data unnoticed. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../agent/net/peer.h"
#include "../../common/crc32c.h"
#include "../../common/log.h"
#include "../peer_keys.h"

#define JOB 7
#define EPOCH 3
#define SECRET "correct horse battery staple"
#define ROLE_L "stage=1 replica=0"
#define ROLE_D "stage=0 replica=0"
#define TIMEOUT_MS 5000
#define RELAY_FRAME_MAX ((64u << 20) + 256) /* bytes of one frame the relay holds */

struct fixture {
    struct peer_listener *l;
    unsigned port;
    char addr[32];
};

/* ROLE_L or ROLE_D, with its link to the other. */
static struct peer_auth auth_make(const char *role, int encrypt)
{
    struct peer_auth a = {.job_id = JOB, .epoch = EPOCH, .encrypt = encrypt};
    snprintf(a.role, sizeof a.role, "%s", role);
    peer_keys_link(&a, SECRET, strcmp(role, ROLE_L) == 0 ? ROLE_D : ROLE_L);
    return a;
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    struct shoal_err err;
    assert_non_null(fx);
    assert_int_equal(peer_listener_start("127.0.0.1:0", &fx->l, &fx->port, &err), 0);
    snprintf(fx->addr, sizeof fx->addr, "127.0.0.1:%u", fx->port);
    struct peer_auth a = auth_make(ROLE_L, 0);
    peer_listener_expect(fx->l, &a);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    peer_listener_stop(fx->l);
    free(fx);
    return 0;
}

/* Dials `addr` (the listener, or a relay in front of it) as ROLE_D and
 * takes the listener's end. Returns 0, or -1 with err from the dial. */
static int pair_via(struct fixture *fx, const char *addr, int encrypt, struct peer_conn *a,
                    struct peer_conn *b, struct shoal_err *err)
{
    struct peer_auth d = auth_make(ROLE_D, encrypt);
    if (peer_dial(addr, &d, ROLE_L, TIMEOUT_MS, a, err) != 0)
        return -1;
    if (peer_listener_take(fx->l, ROLE_D, TIMEOUT_MS, b, err) != 0)
        fail_msg("take: %s", err->message);
    return 0;
}

static void pair(struct fixture *fx, int encrypt, struct peer_conn *a, struct peer_conn *b)
{
    struct shoal_err err;
    if (pair_via(fx, fx->addr, encrypt, a, b, &err) != 0)
        fail_msg("dial: %s", err.message);
}

static void fill_bytes(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131 + seed + i / 251);
}

/* ---- who asks, what is agreed ------------------------------------------- */

static void test_either_end_asking_encrypts(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct {
        int dialer, listener, expectation, sealed;
    } cases[] = {{0, 0, 0, 0}, {1, 0, 0, 1}, {0, 1, 0, 1}, {1, 1, 0, 1}, {0, 0, 1, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        peer_listener_set_encryption(fx->l, cases[i].listener);
        assert_int_equal(peer_listener_encryption(fx->l), cases[i].listener);
        struct peer_auth e = auth_make(ROLE_L, cases[i].expectation);
        peer_listener_expect(fx->l, &e);
        pair(fx, cases[i].dialer, &a, &b);
        if ((a.seal != NULL) != cases[i].sealed || (b.seal != NULL) != cases[i].sealed)
            fail_msg("case %zu: dialer %s, listener %s", i, a.seal ? "sealed" : "plain",
                     b.seal ? "sealed" : "plain");
        /* and they talk: a frame each way */
        unsigned char x[5] = "hello", y[5];
        struct wire_frame f = {.kind = WIRE_PROBE, .dtype = WIRE_BYTES, .payload_len = 5};
        struct shoal_err err;
        assert_int_equal(peer_send(&a, &f, x, TIMEOUT_MS, &err), 0);
        assert_int_equal(peer_recv(&b, &f, y, sizeof y, TIMEOUT_MS, &err), 0);
        assert_int_equal(f.flags, cases[i].sealed ? WIRE_FLAG_SEALED : 0);
        assert_memory_equal(x, y, 5);
        assert_int_equal(peer_send(&b, &f, y, TIMEOUT_MS, &err), 0);
        assert_int_equal(peer_recv(&a, &f, x, sizeof x, TIMEOUT_MS, &err), 0);
        peer_close(&a);
        peer_close(&b);
        assert_null(a.seal);
    }
}

/* ---- round trips ---------------------------------------------------------- */

struct sender {
    struct peer_conn *c;
    struct wire_frame f;
    const void *payload;
    int count, rc;
    struct shoal_err err;
};

static void *sender_main(void *arg)
{
    struct sender *s = arg;
    for (int i = 0; i < s->count && s->rc == 0; i++) {
        struct wire_frame f = s->f;
        f.micro_batch = (uint32_t)i;
        s->rc = peer_send(s->c, &f, s->payload, TIMEOUT_MS, &s->err);
    }
    return NULL;
}

static void test_round_trips_every_size(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct shoal_err err;
    pair(fx, 1, &a, &b);
    size_t sizes[] = {0, 1, 3, 17, 4097, (256u << 10) - 1, 256u << 10, (256u << 10) + 1,
                      (3u << 20) + 5, 8u << 20};
    size_t max = 8u << 20;
    unsigned char *x = malloc(max), *y = malloc(max);
    assert_true(x && y);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        fill_bytes(x, n, (unsigned)i);
        memset(y, 0xee, n);
        uint64_t sent0 = a.bytes_sent, got0 = b.bytes_received;
        /* three frames of the size: the counters advance */
        struct sender s = {.c = &a, .payload = x, .count = 3,
                           .f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_BYTES, .step = i,
                                 .payload_len = n}};
        if (n == (8u << 20))
            s.f = (struct wire_frame){.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .step = i,
                                      .ndim = 3, .shape = {8, 256, 1024}, .payload_len = n};
        pthread_t t;
        pthread_create(&t, NULL, sender_main, &s);
        for (int k = 0; k < 3; k++) {
            struct wire_frame f;
            if (peer_recv(&b, &f, y, max, TIMEOUT_MS, &err) != 0)
                fail_msg("%zu bytes, frame %d: %s", n, k, err.message);
            assert_int_equal(f.payload_len, n);
            assert_int_equal(f.micro_batch, k);
            assert_int_equal(f.step, i);
            assert_int_equal(f.job_id, JOB);
            assert_memory_equal(x, y, n);
        }
        pthread_join(t, NULL);
        assert_int_equal(s.rc, 0);
        uint64_t wire = 3 * (WIRE_HEADER_BYTES + n + WIRE_SEAL_OVERHEAD(n));
        assert_int_equal(a.bytes_sent - sent0, wire);
        assert_int_equal(b.bytes_received - got0, wire);
        /* the caller's payload is left as it was (sealed into a buffer of ours) */
        unsigned char *check = malloc(n ? n : 1);
        fill_bytes(check, n, (unsigned)i);
        assert_memory_equal(x, check, n);
        free(check);
    }
    free(x);
    free(y);
    peer_close(&a);
    peer_close(&b);
}

struct exchanger {
    struct peer_conn *c;
    const unsigned char *out;
    unsigned char *in;
    size_t bytes;
    int rc;
    struct shoal_err err;
};

static void *exchanger_main(void *arg)
{
    struct exchanger *x = arg;
    for (int round = 0; round < 2 && x->rc == 0; round++) {
        struct wire_frame sf = {.kind = WIRE_ALLREDUCE, .dtype = WIRE_BYTES, .step = 1,
                                .micro_batch = (uint32_t)round, .payload_len = x->bytes};
        struct wire_frame rf;
        x->rc = peer_sendrecv(x->c, &sf, x->out, x->c, &rf, x->in, x->bytes, 20000, &x->err);
        if (x->rc == 0 && (rf.micro_batch != (uint32_t)round || rf.payload_len != x->bytes))
            x->rc = -2;
    }
    return NULL;
}

static void test_sendrecv_both_ways(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    pair(fx, 1, &a, &b);
    size_t n = (32u << 20) + 3; /* far over the socket buffers, odd */
    unsigned char *ao = malloc(n), *ai = malloc(n), *bo = malloc(n), *bi = malloc(n);
    assert_true(ao && ai && bo && bi);
    fill_bytes(ao, n, 1);
    fill_bytes(bo, n, 2);
    struct exchanger xa = {.c = &a, .out = ao, .in = ai, .bytes = n};
    struct exchanger xb = {.c = &b, .out = bo, .in = bi, .bytes = n};
    pthread_t t;
    pthread_create(&t, NULL, exchanger_main, &xb);
    exchanger_main(&xa);
    pthread_join(t, NULL);
    if (xa.rc || xb.rc)
        fail_msg("sendrecv: %s / %s", xa.err.message, xb.err.message);
    assert_memory_equal(ai, bo, n);
    assert_memory_equal(bi, ao, n);
    free(ao);
    free(ai);
    free(bo);
    free(bi);
    peer_close(&a);
    peer_close(&b);
}

#define STREAM_FRAMES 120
#define STREAM_CAP (1u << 20)

static size_t frame_bytes(int i)
{
    return i % 5 == 0 ? 0 : (size_t)(i * 7919) % STREAM_CAP + (size_t)(i % 2);
}

struct stream_job {
    struct peer_stream *s;
    uint16_t kind;
    int failures;
    struct shoal_err err;
};

static void *stream_send_main(void *arg)
{
    struct stream_job *j = arg;
    unsigned char *x = malloc(STREAM_CAP);
    for (int i = 0; i < STREAM_FRAMES; i++) {
        size_t n = frame_bytes(i);
        fill_bytes(x, n, (unsigned)i + j->kind);
        struct wire_frame f = {.kind = j->kind, .dtype = WIRE_BYTES, .step = 1,
                               .micro_batch = (uint32_t)i, .payload_len = n};
        if (peer_stream_send(j->s, &f, x, TIMEOUT_MS, &j->err) != 0)
            j->failures++;
    }
    if (peer_stream_flush(j->s, TIMEOUT_MS, &j->err) != 0)
        j->failures++;
    free(x);
    return NULL;
}

static void *stream_recv_main(void *arg)
{
    struct stream_job *j = arg;
    unsigned char *x = malloc(STREAM_CAP), *want = malloc(STREAM_CAP);
    for (int i = 0; i < STREAM_FRAMES; i++) {
        size_t n = frame_bytes(i);
        fill_bytes(want, n, (unsigned)i + j->kind);
        if (peer_stream_recv(j->s, j->kind, WIRE_BYTES, 1, (uint32_t)i, x, n, TIMEOUT_MS, &j->err) != 0 ||
            memcmp(x, want, n) != 0)
            j->failures++;
        /* now and then the owner is late, so frames wait in slots */
        if (i % 17 == 3)
            usleep(2000);
    }
    free(x);
    free(want);
    return NULL;
}

static void test_streams_both_ways(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct peer_stream *sa, *sb;
    struct shoal_err err;
    pair(fx, 1, &a, &b);
    assert_int_equal(peer_stream_start(&a, STREAM_CAP, 3, &sa, &err), 0);
    assert_int_equal(peer_stream_start(&b, STREAM_CAP, 3, &sb, &err), 0);
    assert_null(a.seal); /* moved into the stream */
    struct stream_job jobs[4] = {{.s = sa, .kind = WIRE_ACTIVATION},
                                 {.s = sb, .kind = WIRE_ACTIVATION},
                                 {.s = sb, .kind = WIRE_ACTIVATION_GRAD},
                                 {.s = sa, .kind = WIRE_ACTIVATION_GRAD}};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, i % 2 ? stream_recv_main : stream_send_main, &jobs[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++)
        if (jobs[i].failures)
            fail_msg("stream job %d: %d failures, last: %s", i, jobs[i].failures,
                     jobs[i].err.message);

    /* an error frame's text arrives sealed and is quoted */
    const char reason[] = "stage 2 ran out of memory";
    struct wire_frame f = {.kind = WIRE_ERROR, .dtype = WIRE_BYTES,
                           .payload_len = sizeof reason - 1};
    assert_int_equal(peer_stream_send(sa, &f, reason, TIMEOUT_MS, &err), 0);
    unsigned char y[4];
    assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_BYTES, 2, 0, y, sizeof y, TIMEOUT_MS, &err),
                     -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "'stage 2 ran out of memory'"));
    peer_stream_stop(sa);
    peer_stream_stop(sb);
}

/* ---- the man in the middle ------------------------------------------------ */

enum tamper {
    T_NONE,
    T_FLIP,       /* xor 0x01 into byte `offset` of the frame */
    T_DROP,       /* do not forward the frame */
    T_REPLAY,     /* forward it twice */
    T_SWAP,       /* forward the next frame first */
    T_CLEAR_FIX,  /* clear bit 0 of byte `offset` (a hello's encryption flag) and
                   * recompute the CRCs, as an attacker on a plain connection would */
    T_SLOW,       /* forward in three parts, 400 ms apart */
};

/* One direction of the relay: reads whole frames from `from`, forwards
 * them to `to`, and does `what` to frame number `frame` (0: the first in
 * this direction). Notes what it saw on the wire. */
struct relay_dir {
    int from, to;
    enum tamper what;
    int frame;
    size_t offset;
    int frames, sealed_frames;
    const unsigned char *needle; /* plaintext that must never be seen */
    size_t needle_len;
    int needle_seen;
};

struct relay {
    struct fixture *fx;
    int lfd;
    char addr[32];
    pthread_t thread;
    struct relay_dir d2l, l2d;
};

static int read_full(int fd, unsigned char *p, size_t n)
{
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const unsigned char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads one frame as the wire carries it (header, header tag, payload,
 * payload tag); returns its length or 0 at the end. */
static size_t read_frame(int fd, unsigned char *buf)
{
    uint64_t len;
    uint32_t flags;
    if (read_full(fd, buf, WIRE_HEADER_BYTES) != 0)
        return 0;
    memcpy(&len, buf + 52, 8);
    memcpy(&flags, buf + 64, 4);
    size_t total = WIRE_HEADER_BYTES + (size_t)len +
                   ((flags & WIRE_FLAG_SEALED) ? WIRE_SEAL_OVERHEAD(len) : 0);
    if (total > RELAY_FRAME_MAX ||
        read_full(fd, buf + WIRE_HEADER_BYTES, total - WIRE_HEADER_BYTES) != 0)
        return 0;
    return total;
}

/* What an attacker on a plain connection does after changing a payload:
 * recompute its CRC and the header's. */
static void fix_crcs(unsigned char *frame, size_t n)
{
    uint32_t crc = crc32c(0, frame + WIRE_HEADER_BYTES, n - WIRE_HEADER_BYTES);
    memcpy(frame + 60, &crc, 4);
    crc = crc32c(0, frame, 68);
    memcpy(frame + 68, &crc, 4);
}

static void relay_note(struct relay_dir *d, const unsigned char *frame, size_t n)
{
    uint32_t flags;
    memcpy(&flags, frame + 64, 4);
    d->frames++;
    d->sealed_frames += (flags & WIRE_FLAG_SEALED) != 0;
    if (d->needle && n >= d->needle_len && memmem(frame, n, d->needle, d->needle_len))
        d->needle_seen = 1;
}

static void *relay_dir_main(void *arg)
{
    struct relay_dir *d = arg;
    unsigned char *buf = malloc(RELAY_FRAME_MAX), *held = malloc(RELAY_FRAME_MAX);
    size_t n, held_n = 0;
    for (int i = 0; buf && held && (n = read_frame(d->from, buf)) > 0; i++) {
        relay_note(d, buf, n);
        if (held_n) { /* T_SWAP: this one first, then the held one */
            if (write_full(d->to, buf, n) != 0 || write_full(d->to, held, held_n) != 0)
                break;
            held_n = 0;
            continue;
        }
        if (i == d->frame) {
            if (d->what == T_DROP)
                continue;
            if (d->what == T_SWAP) {
                memcpy(held, buf, n);
                held_n = n;
                continue;
            }
            if (d->what == T_FLIP && d->offset < n)
                buf[d->offset] ^= 0x01;
            if (d->what == T_CLEAR_FIX) {
                buf[d->offset] &= (unsigned char)~WIRE_HELLO_ENCRYPT;
                fix_crcs(buf, n);
            }
            if (d->what == T_REPLAY && write_full(d->to, buf, n) != 0)
                break;
            if (d->what == T_SLOW) {
                size_t cut1 = n / 3, cut2 = n / 2;
                if (write_full(d->to, buf, cut1) != 0)
                    break;
                usleep(400 * 1000);
                if (write_full(d->to, buf + cut1, cut2 - cut1) != 0)
                    break;
                usleep(400 * 1000);
                if (write_full(d->to, buf + cut2, n - cut2) != 0)
                    break;
                continue;
            }
        }
        if (write_full(d->to, buf, n) != 0)
            break;
    }
    shutdown(d->to, SHUT_WR);
    shutdown(d->from, SHUT_RD);
    free(buf);
    free(held);
    return NULL;
}

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    int dialer = accept(r->lfd, NULL, NULL);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->fx->port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (dialer < 0 || listener < 0 || connect(listener, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (dialer >= 0)
            close(dialer);
        if (listener >= 0)
            close(listener);
        return NULL;
    }
    r->d2l.from = r->l2d.to = dialer;
    r->d2l.to = r->l2d.from = listener;
    pthread_t t;
    pthread_create(&t, NULL, relay_dir_main, &r->d2l);
    relay_dir_main(&r->l2d);
    pthread_join(t, NULL);
    close(dialer);
    close(listener);
    return NULL;
}

/* Starts a relay for one connection in front of fx's listener; tamper
 * settings go into r->d2l / r->l2d before the dial. */
static void relay_start(struct fixture *fx, struct relay *r)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof sa;
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    r->fx = fx;
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(r->lfd >= 0);
    assert_int_equal(bind(r->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(r->lfd, 1), 0);
    assert_int_equal(getsockname(r->lfd, (struct sockaddr *)&sa, &len), 0);
    snprintf(r->addr, sizeof r->addr, "127.0.0.1:%u", ntohs(sa.sin_port));
    pthread_create(&r->thread, NULL, relay_main, r);
}

/* Call after both ends are closed (the relay's reads then end). */
static void relay_stop(struct relay *r)
{
    pthread_join(r->thread, NULL);
    close(r->lfd);
}

/* Frames the dialer sends: 0 its hello, then data.  The listener sends its
 * greeting (0), its answer (1), then data. */
#define DATA0 1
#define HELLO_FLAGS_AT (WIRE_HEADER_BYTES + WIRE_MAC_BYTES + WIRE_NONCE_BYTES) /* dialer's */
#define ANSWER_FLAGS_AT (WIRE_HEADER_BYTES + WIRE_MAC_BYTES)                    /* listener's */

/* Sends `count` 4096-byte frames a -> b through a relay doing `what` to the
 * dialer's frame `frame` at `offset`; returns the first failing receive's
 * error in *err (code "" when all arrived) and how many arrived intact. */
static int through_relay(struct fixture *fx, int encrypt, enum tamper what, int frame,
                         size_t offset, int count, struct shoal_err *err)
{
    struct relay r = {.d2l = {.what = what, .frame = frame, .offset = offset}};
    struct peer_conn a, b;
    unsigned char x[4096], y[4096];
    int intact = 0;
    relay_start(fx, &r);
    if (pair_via(fx, r.addr, encrypt, &a, &b, err) != 0)
        fail_msg("dial through the relay: %s", err->message);
    assert_true((a.seal != NULL) == encrypt);
    memset(err, 0, sizeof *err);
    for (int i = 0; i < count; i++) {
        struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_BYTES, .step = 5,
                               .micro_batch = (uint32_t)i, .payload_len = sizeof x};
        fill_bytes(x, sizeof x, (unsigned)i);
        assert_int_equal(peer_send(&a, &f, x, TIMEOUT_MS, err), 0);
    }
    for (int i = 0; i < count; i++) {
        struct wire_frame f;
        if (peer_recv(&b, &f, y, sizeof y, TIMEOUT_MS, err) != 0)
            break;
        fill_bytes(x, sizeof x, f.micro_batch);
        intact += f.micro_batch == (uint32_t)i && memcmp(x, y, sizeof x) == 0;
        memset(err, 0, sizeof *err);
    }
    if (err->code[0] && strcmp(err->code, "peer_auth") == 0) {
        /* the connection is dead: nothing more is read from it */
        struct shoal_err again;
        struct wire_frame f;
        assert_int_equal(peer_recv(&b, &f, y, sizeof y, 100, &again), -1);
        assert_string_equal(again.code, "peer_auth");
        assert_non_null(strstr(err->message, b.addr)); /* names the peer */
    }
    peer_close(&a);
    peer_close(&b);
    relay_stop(&r);
    return intact;
}

static void test_mitm_alters_plain_frames_unnoticed(void **state)
{
    /* Why encryption: the relay flips a payload byte and fixes the CRCs. */
    struct fixture *fx = *state;
    struct relay r = {.d2l = {.what = T_CLEAR_FIX, .frame = DATA0,
                              .offset = WIRE_HEADER_BYTES + 100}};
    struct peer_conn a, b;
    struct shoal_err err;
    unsigned char x[4096], y[4096];
    relay_start(fx, &r);
    assert_int_equal(pair_via(fx, r.addr, 0, &a, &b, &err), 0);
    fill_bytes(x, sizeof x, 0);
    x[100] |= WIRE_HELLO_ENCRYPT; /* so clearing the bit changes it */
    struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_BYTES, .payload_len = sizeof x};
    assert_int_equal(peer_send(&a, &f, x, TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_recv(&b, &f, y, sizeof y, TIMEOUT_MS, &err), 0);
    assert_int_equal(y[100], x[100] & ~WIRE_HELLO_ENCRYPT);
    peer_close(&a);
    peer_close(&b);
    relay_stop(&r);
}

static void test_mitm_tampering_fails(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    size_t payload = WIRE_SEALED_HEADER_BYTES; /* first payload byte of a sealed frame */
    size_t frame_len = WIRE_SEALED_HEADER_BYTES + 4096 + WIRE_TAG_BYTES;
    struct {
        const char *name;
        enum tamper what;
        int frame;
        size_t offset;
        int intact; /* frames b receives before the failure */
        const char *says;
    } cases[] = {
        {"payload byte", T_FLIP, DATA0, payload + 1000, 0, "payload failed authentication"},
        {"last payload byte", T_FLIP, DATA0, payload + 4095, 0, "payload"},
        {"payload tag", T_FLIP, DATA0, frame_len - 1, 0, "payload"},
        {"header step", T_FLIP, DATA0, 24, 0, "header failed authentication"},
        {"header micro-batch", T_FLIP, DATA0 + 1, 20, 1, "header"},
        {"header CRC", T_FLIP, DATA0, 68, 0, "header"},
        {"header tag", T_FLIP, DATA0, WIRE_HEADER_BYTES + 3, 0, "header"},
        {"replayed frame", T_REPLAY, DATA0, 0, 1, "replayed"},
        {"reordered frames", T_SWAP, DATA0, 0, 0, "reordered"},
        {"dropped frame", T_DROP, DATA0 + 1, 0, 1, "header"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int intact = through_relay(fx, 1, cases[i].what, cases[i].frame, cases[i].offset, 3, &err);
        if (strcmp(err.code, "peer_auth") != 0 || !strstr(err.message, cases[i].says) ||
            intact != cases[i].intact)
            fail_msg("%s: %d intact, then '%s': %s", cases[i].name, intact, err.code,
                     err.message);
    }
    /* the untouched relay passes everything */
    assert_int_equal(through_relay(fx, 1, T_NONE, 0, 0, 3, &err), 3);
    assert_string_equal(err.code, "");
}

static void test_mitm_downgrade_fails(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct shoal_err err;
    uint64_t refused0 = 0, refused = 0;

    /* the dialer asks; the relay clears the ask in its hello: the listener's
     * MAC check fails and it refuses */
    peer_listener_counts(fx->l, NULL, &refused0);
    struct relay r = {.d2l = {.what = T_CLEAR_FIX, .frame = 0, .offset = HELLO_FLAGS_AT}};
    relay_start(fx, &r);
    assert_int_equal(pair_via(fx, r.addr, 1, &a, &b, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_non_null(strstr(err.message, "MAC"));
    relay_stop(&r);
    for (int i = 0; i < 300 && refused == refused0; i++) {
        usleep(10 * 1000);
        peer_listener_counts(fx->l, NULL, &refused);
    }
    assert_int_equal(refused, refused0 + 1);

    /* the listener grants it (its own policy); the relay clears the grant in
     * its answer: the dialer's MAC check fails */
    peer_listener_set_encryption(fx->l, 1);
    struct relay r2 = {.l2d = {.what = T_CLEAR_FIX, .frame = 1, .offset = ANSWER_FLAGS_AT}};
    relay_start(fx, &r2);
    assert_int_equal(pair_via(fx, r2.addr, 0, &a, &b, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_non_null(strstr(err.message, "altered"));
    /* the listener believed it and parked its end; the dialer is gone */
    assert_int_equal(peer_listener_take(fx->l, ROLE_D, TIMEOUT_MS, &b, &err), 0);
    struct wire_frame f;
    assert_int_equal(peer_recv(&b, &f, NULL, 0, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_closed");
    peer_close(&b);
    relay_stop(&r2);
}

static void test_mixed_ends_are_encrypted_on_the_wire(void **state)
{
    struct fixture *fx = *state;
    unsigned char x[4096], y[4096];
    fill_bytes(x, sizeof x, 42);
    for (int dialer_asks = 0; dialer_asks <= 1; dialer_asks++) {
        peer_listener_set_encryption(fx->l, !dialer_asks);
        struct relay r = {.d2l = {.needle = x + 1000, .needle_len = 64},
                          .l2d = {.needle = x + 1000, .needle_len = 64}};
        struct peer_conn a, b;
        struct shoal_err err;
        relay_start(fx, &r);
        assert_int_equal(pair_via(fx, r.addr, dialer_asks, &a, &b, &err), 0);
        assert_non_null(a.seal);
        assert_non_null(b.seal);
        struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_BYTES,
                               .payload_len = sizeof x};
        for (int i = 0; i < 4; i++) {
            struct peer_conn *from = i % 2 ? &b : &a, *to = i % 2 ? &a : &b;
            assert_int_equal(peer_send(from, &f, x, TIMEOUT_MS, &err), 0);
            assert_int_equal(peer_recv(to, &f, y, sizeof y, TIMEOUT_MS, &err), 0);
            assert_memory_equal(x, y, sizeof x);
        }
        peer_close(&a);
        peer_close(&b);
        relay_stop(&r);
        /* hello + 2 data frames one way, greeting + answer + 2 the other */
        assert_int_equal(r.d2l.frames, 3);
        assert_int_equal(r.l2d.frames, 4);
        assert_int_equal(r.d2l.sealed_frames, 2);
        assert_int_equal(r.l2d.sealed_frames, 2);
        assert_false(r.d2l.needle_seen);
        assert_false(r.l2d.needle_seen);
    }
}

static void test_stream_tampered_and_slow(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    size_t n = 4u << 20;
    unsigned char *x = malloc(n), *y = malloc(n);
    assert_true(x && y);
    fill_bytes(x, n, 9);
    for (int tamper = 0; tamper <= 1; tamper++) {
        /* frame 1 (the first data frame) flipped mid-payload, or slowed so
         * that the owner's posted receive times out in the middle of it and
         * the next call gets it whole, decrypted across the move */
        struct relay r = {.d2l = {.what = tamper ? T_FLIP : T_SLOW, .frame = DATA0,
                                  .offset = WIRE_SEALED_HEADER_BYTES + n / 2}};
        struct peer_conn a, b;
        struct peer_stream *sa, *sb;
        relay_start(fx, &r);
        assert_int_equal(pair_via(fx, r.addr, 1, &a, &b, &err), 0);
        assert_int_equal(peer_stream_start(&a, n, 2, &sa, &err), 0);
        assert_int_equal(peer_stream_start(&b, n, 2, &sb, &err), 0);
        struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_BYTES, .step = 2,
                               .payload_len = n};
        assert_int_equal(peer_stream_send(sa, &f, x, TIMEOUT_MS, &err), 0);
        memset(y, 0, n);
        if (tamper) {
            assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_BYTES, 2, 0, y, n, TIMEOUT_MS, &err),
                             -1);
            assert_string_equal(err.code, "peer_auth");
            assert_non_null(strstr(err.message, peer_stream_addr(sb)));
        } else {
            assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_BYTES, 2, 0, y, n, 250, &err), -1);
            assert_string_equal(err.code, "peer_timeout");
            memset(y, 0, n);
            if (peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_BYTES, 2, 0, y, n, TIMEOUT_MS, &err) != 0)
                fail_msg("slow frame: %s", err.message);
            assert_memory_equal(x, y, n);
        }
        peer_stream_stop(sa);
        peer_stream_stop(sb);
        relay_stop(&r);
    }
    free(x);
    free(y);
}

int main(void)
{
    log_threshold = LOG_LEVEL_ERROR; /* refusals are expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_either_end_asking_encrypts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trips_every_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sendrecv_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_streams_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mitm_alters_plain_frames_unnoticed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_mitm_tampering_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mitm_downgrade_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixed_ends_are_encrypted_on_the_wire, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stream_tampered_and_slow, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
