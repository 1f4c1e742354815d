/* bench_peer.c - peer transport speed on loopback, side by side:
 *   plain       one thread write()s N bytes in 4 MiB pieces, another read()s
 *               them (default socket options: the ceiling for one TCP stream)
 *   peer_send   the same bytes as F32 activation frames through peer_send /
 *               peer_recv on the caller's threads (header + CRC, no queues)
 *   stream      the same frames through peer_stream_send / peer_stream_recv
 *               (copy + CRC in, sender and receiver threads, copy out)
 *   send+enc    peer_send / peer_recv on an encrypted connection (AES-256-GCM
 *               sealed piece by piece on the way out, opened in place)
 *   stream+enc  streams on an encrypted connection (sealed into the slot)
 * then peer_send plain against encrypted for each of --sizes (the
 * activation frames of a tiny job, of bench_train.sh's 2x2 job, and the
 * default (B=8,T=256,C=1024)), and a ring all-reduce of a --ring-bytes
 * buffer over --ranks threads, plain and encrypted (algorithm bandwidth =
 * buffer bytes / seconds).  CPU seconds per GB say what encryption costs at
 * a given link rate.
 * Prints a table and one JSON line {"bench":"peer",...}. Not a test: it
 * asserts nothing about speed.
 *
 * usage: bench_peer [--bytes N] [--frame-bytes N] [--queue N] [--ring-bytes N]
 *                   [--ranks N] [--reps N] [--runs N] [--chunk-floats N]
 *                   [--sizes N,N,...] [--sweep-bytes N]
 *                   [--only plain|send|stream|send-enc|stream-enc|sizes|ring]
 * N may end in k, m or g (KiB, MiB, GiB).  Each transport path runs --runs
 * times, interleaved, and the best run is reported (loopback on a shared
 * machine is noisy); the ring reports the mean of --reps after a warm-up. */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../agent/net/peer.h"
#include "../../agent/net/ring.h"
#include "../../common/aead.h"
#include "../../common/log.h"
#include "../peer_keys.h"

#define PIECE (4u << 20)  /* bytes per write() in the plain run */
#define TIMEOUT_MS 60000
#define RANKS_MAX 16

#define SIZES_MAX 8

struct opts {
    uint64_t bytes, frame_bytes, ring_bytes, sweep_bytes;
    int queue, ranks, reps, runs;
    uint64_t chunk_floats; /* ring chunk; 0: the default */
    uint64_t sizes[SIZES_MAX]; /* frame bytes of the plain/encrypted sweep */
    int n_sizes;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds (user + system) of every thread of the process so far. */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static void die(const char *what, const struct shoal_err *err)
{
    fprintf(stderr, "bench_peer: %s: %s\n", what, err ? err->message : strerror(errno));
    exit(1);
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    int shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10, end++;
    else if (*end == 'm' || *end == 'M')
        shift = 20, end++;
    else if (*end == 'g' || *end == 'G')
        shift = 30, end++;
    if (*end || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* ---- plain TCP ---------------------------------------------------------- */

struct plain_writer {
    int fd;
    uint64_t bytes;
    const unsigned char *buf;
};

static void *plain_write_main(void *arg)
{
    struct plain_writer *w = arg;
    uint64_t left = w->bytes;
    while (left) {
        size_t n = left < PIECE ? (size_t)left : PIECE;
        ssize_t k = write(w->fd, w->buf, n);
        if (k <= 0)
            die("plain write", NULL);
        left -= (uint64_t)k;
    }
    return NULL;
}

static double bench_plain(uint64_t bytes, unsigned char *src, unsigned char *dst)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof sa;
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0 || cfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(lfd, 1) != 0 || getsockname(lfd, (struct sockaddr *)&sa, &len) != 0 ||
        connect(cfd, (struct sockaddr *)&sa, sizeof sa) != 0)
        die("plain socket", NULL);
    int afd = accept(lfd, NULL, NULL);
    if (afd < 0)
        die("plain accept", NULL);
    struct plain_writer w = {.fd = cfd, .bytes = bytes, .buf = src};
    pthread_t t;
    double t0 = now_s();
    pthread_create(&t, NULL, plain_write_main, &w);
    uint64_t got = 0;
    while (got < bytes) {
        ssize_t k = read(afd, dst, PIECE);
        if (k <= 0)
            die("plain read", NULL);
        got += (uint64_t)k;
    }
    double dt = now_s() - t0;
    pthread_join(t, NULL);
    close(afd);
    close(cfd);
    close(lfd);
    return dt;
}

/* ---- peer connections --------------------------------------------------- */

/* `role`, with its link to `peer`. */
static struct peer_auth auth_for(const char *role, const char *peer, int encrypt)
{
    struct peer_auth a = {.job_id = 1, .epoch = 1, .encrypt = encrypt};
    snprintf(a.role, sizeof a.role, "%s", role);
    peer_keys_link(&a, "bench", peer);
    return a;
}

/* A job connection through listener l; encrypt: the dialer asks for it. */
static void conn_pair(struct peer_listener *l, unsigned port, const char *dial_role,
                      const char *listen_role, int encrypt, struct peer_conn *a,
                      struct peer_conn *b)
{
    struct shoal_err err;
    char addr[32];
    struct peer_auth d = auth_for(dial_role, listen_role, encrypt);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    if (peer_dial(addr, &d, listen_role, TIMEOUT_MS, a, &err) != 0)
        die("dial", &err);
    if (peer_listener_take(l, dial_role, TIMEOUT_MS, b, &err) != 0)
        die("take", &err);
    if ((a->seal != NULL) != encrypt || (b->seal != NULL) != encrypt)
        die("the connection is not what was asked for", NULL);
}

static struct wire_frame act_frame(uint64_t frame_bytes, uint32_t mb)
{
    /* (B, T, C) with C=1024 and T=256 where the size allows, else flat */
    struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .step = 1,
                           .micro_batch = mb, .payload_len = frame_bytes};
    uint64_t floats = frame_bytes / 4;
    if (floats % (256 * 1024) == 0)
        f.ndim = 3, f.shape[0] = (uint32_t)(floats / (256 * 1024)), f.shape[1] = 256,
        f.shape[2] = 1024;
    else
        f.ndim = 1, f.shape[0] = (uint32_t)floats;
    return f;
}

struct frame_sender {
    struct peer_conn *c;
    struct peer_stream *s;
    uint64_t frames, frame_bytes;
    const unsigned char *buf;
};

static void *send_main(void *arg)
{
    struct frame_sender *w = arg;
    struct shoal_err err;
    for (uint64_t i = 0; i < w->frames; i++) {
        struct wire_frame f = act_frame(w->frame_bytes, (uint32_t)i);
        if (peer_send(w->c, &f, w->buf, TIMEOUT_MS, &err) != 0)
            die("peer_send", &err);
    }
    return NULL;
}

static double bench_send(struct peer_conn *a, struct peer_conn *b, uint64_t frames,
                         uint64_t frame_bytes, unsigned char *src, unsigned char *dst)
{
    struct frame_sender w = {.c = a, .frames = frames, .frame_bytes = frame_bytes, .buf = src};
    struct shoal_err err;
    struct wire_frame f;
    pthread_t t;
    double t0 = now_s();
    pthread_create(&t, NULL, send_main, &w);
    for (uint64_t i = 0; i < frames; i++)
        if (peer_recv(b, &f, dst, frame_bytes, TIMEOUT_MS, &err) != 0)
            die("peer_recv", &err);
    double dt = now_s() - t0;
    pthread_join(t, NULL);
    return dt;
}

static void *stream_send_main(void *arg)
{
    struct frame_sender *w = arg;
    struct shoal_err err;
    for (uint64_t i = 0; i < w->frames; i++) {
        struct wire_frame f = act_frame(w->frame_bytes, (uint32_t)i);
        if (peer_stream_send(w->s, &f, w->buf, TIMEOUT_MS, &err) != 0)
            die("peer_stream_send", &err);
    }
    if (peer_stream_flush(w->s, TIMEOUT_MS, &err) != 0)
        die("peer_stream_flush", &err);
    return NULL;
}

static double bench_stream(struct peer_stream *sa, struct peer_stream *sb, uint64_t frames,
                           uint64_t frame_bytes, unsigned char *src, unsigned char *dst,
                           double *send_wait, double *recv_wait)
{
    struct frame_sender w = {.s = sa, .frames = frames, .frame_bytes = frame_bytes, .buf = src};
    struct shoal_err err;
    pthread_t t;
    peer_stream_take_waits(sa, NULL, NULL);
    peer_stream_take_waits(sb, NULL, NULL);
    double t0 = now_s();
    pthread_create(&t, NULL, stream_send_main, &w);
    for (uint64_t i = 0; i < frames; i++)
        if (peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_F32, 1, (uint32_t)i, dst, frame_bytes, TIMEOUT_MS,
                             &err) != 0)
            die("peer_stream_recv", &err);
    double dt = now_s() - t0;
    pthread_join(t, NULL);
    peer_stream_take_waits(sa, send_wait, NULL);
    peer_stream_take_waits(sb, NULL, recv_wait);
    return dt;
}

/* ---- ring --------------------------------------------------------------- */

struct rank_run {
    struct ring r;
    float *data;
    size_t n;
    int reps;
    double seconds; /* of the timed repetitions, after one warm-up */
};

static void *rank_main(void *arg)
{
    struct rank_run *k = arg;
    struct shoal_err err;
    double t0 = 0;
    for (int i = 0; i <= k->reps; i++) {
        if (i == 1)
            t0 = now_s();
        if (ring_allreduce_sum(&k->r, k->data, k->n, (uint64_t)i, &err) != 0)
            die("ring_allreduce_sum", &err);
    }
    k->seconds = now_s() - t0;
    return NULL;
}

static double bench_ring(int p, uint64_t bytes, int reps, size_t chunk_floats, int encrypt)
{
    struct peer_listener *l[RANKS_MAX];
    unsigned port[RANKS_MAX];
    struct peer_conn next[RANKS_MAX], prev[RANKS_MAX];
    struct rank_run run[RANKS_MAX];
    pthread_t t[RANKS_MAX];
    struct shoal_err err;
    char role[RANKS_MAX][PEER_ROLE_MAX];
    size_t n = (size_t)(bytes / 4);

    for (int k = 0; k < p; k++)
        snprintf(role[k], sizeof role[k], "rank=%d", k);
    for (int k = 0; k < p; k++) {
        if (peer_listener_start("127.0.0.1:0", &l[k], &port[k], &err) != 0)
            die("listen", &err);
        struct peer_auth a = auth_for(role[k], role[(k + p - 1) % p], 0);
        peer_listener_expect(l[k], &a);
    }
    for (int k = 0; k < p; k++)
        conn_pair(l[(k + 1) % p], port[(k + 1) % p], role[k], role[(k + 1) % p], encrypt,
                  &next[k], &prev[(k + 1) % p]);
    for (int k = 0; k < p; k++) {
        run[k] = (struct rank_run){.r = {.next = &next[k], .prev = &prev[k], .rank = k,
                                         .size = p, .chunk_floats = chunk_floats,
                                         .timeout_ms = TIMEOUT_MS},
                                   .data = malloc(n * sizeof(float)), .n = n, .reps = reps};
        if (!run[k].data)
            die("malloc", NULL);
        for (size_t i = 0; i < n; i++)
            run[k].data[i] = 1e-3f * (float)(i % 1000);
    }
    for (int k = 0; k < p; k++)
        pthread_create(&t[k], NULL, rank_main, &run[k]);
    double worst = 0;
    for (int k = 0; k < p; k++) {
        pthread_join(t[k], NULL);
        worst = run[k].seconds > worst ? run[k].seconds : worst;
    }
    for (int k = 0; k < p; k++) {
        free(run[k].data);
        peer_close(&next[k]);
        peer_close(&prev[k]);
        peer_listener_stop(l[k]);
    }
    return worst / reps;
}

/* ---- the run ------------------------------------------------------------- */

enum path { P_PLAIN, P_SEND, P_STREAM, P_SEND_ENC, P_STREAM_ENC, P_N };
static const char *const path_name[P_N] = {"plain", "peer_send", "stream", "send+enc",
                                           "stream+enc"};
static const char *const path_key[P_N] = {"plain", "send", "stream", "send_enc", "stream_enc"};

/* Best run of a path: wall seconds and the process's CPU seconds; 0 where
 * it did not run. */
struct row {
    double s, cpu;
};

/* Connections for the frame paths: one per path, so that they interleave. */
struct conns {
    struct peer_listener *l;
    struct peer_conn send[2], send_enc[2];
    struct peer_stream *stream[2], *stream_enc[2];
};

static void conns_open(struct conns *c, const struct opts *o)
{
    unsigned port;
    struct shoal_err err;
    struct peer_conn x, y;
    if (peer_listener_start("127.0.0.1:0", &c->l, &port, &err) != 0)
        die("listen", &err);
    struct peer_auth la = auth_for("stage=1", "stage=0", 0);
    for (const char *const *r = (const char *const[]){ "stage=0 enc", "stage=0 stream", "stage=0 stream enc", NULL };
         *r; r++)
        peer_keys_link(&la, "bench", *r);
    peer_listener_expect(c->l, &la);
    conn_pair(c->l, port, "stage=0", "stage=1", 0, &c->send[0], &c->send[1]);
    conn_pair(c->l, port, "stage=0 enc", "stage=1", 1, &c->send_enc[0], &c->send_enc[1]);
    for (int enc = 0; enc <= 1; enc++) {
        struct peer_stream **s = enc ? c->stream_enc : c->stream;
        conn_pair(c->l, port, enc ? "stage=0 stream enc" : "stage=0 stream", "stage=1", enc, &x,
                  &y);
        if (peer_stream_start(&x, o->frame_bytes, o->queue, &s[0], &err) != 0 ||
            peer_stream_start(&y, o->frame_bytes, o->queue, &s[1], &err) != 0)
            die("stream", &err);
    }
}

static void conns_close(struct conns *c)
{
    for (int i = 0; i < 2; i++) {
        peer_close(&c->send[i]);
        peer_close(&c->send_enc[i]);
        peer_stream_stop(c->stream[i]);
        peer_stream_stop(c->stream_enc[i]);
    }
    peer_listener_stop(c->l);
}

/* One run of path p over `frames` frames of frame_bytes; returns seconds. */
static double run_path(enum path p, struct conns *c, uint64_t frames, uint64_t frame_bytes,
                       unsigned char *src, unsigned char *dst, double *sw, double *rw)
{
    switch (p) {
    case P_PLAIN: return bench_plain(frames * frame_bytes, src, dst);
    case P_SEND: return bench_send(&c->send[0], &c->send[1], frames, frame_bytes, src, dst);
    case P_SEND_ENC:
        return bench_send(&c->send_enc[0], &c->send_enc[1], frames, frame_bytes, src, dst);
    case P_STREAM:
        return bench_stream(c->stream[0], c->stream[1], frames, frame_bytes, src, dst, sw, rw);
    default:
        return bench_stream(c->stream_enc[0], c->stream_enc[1], frames, frame_bytes, src, dst, sw,
                            rw);
    }
}

/* Best of `runs` interleaved runs of every path `want` says. */
static void run_paths(struct conns *c, const int want[P_N], int runs, uint64_t frames,
                      uint64_t frame_bytes, unsigned char *src, unsigned char *dst, size_t buf_len,
                      struct row rows[P_N], double *send_wait, double *recv_wait)
{
    memset(rows, 0, P_N * sizeof rows[0]);
    for (int run = 0; run < runs; run++) {
        for (int p = 0; p < P_N; p++) {
            double sw = 0, rw = 0, c0 = cpu_s();
            if (!want[p])
                continue;
            double t = run_path((enum path)p, c, frames, frame_bytes, src, dst, &sw, &rw);
            /* every frame carries src; the plain run's reads do not line up with it */
            if (p != P_PLAIN && memcmp(src, dst, (size_t)frame_bytes) != 0) {
                fprintf(stderr, "bench_peer: %s delivered other bytes than were sent\n",
                        path_name[p]);
                exit(1);
            }
            memset(dst, 0, buf_len);
            if (rows[p].s == 0 || t < rows[p].s) {
                rows[p].s = t;
                rows[p].cpu = cpu_s() - c0;
                if (p == P_STREAM && send_wait)
                    *send_wait = sw, *recv_wait = rw;
            }
        }
    }
}

static int parse_sizes(const char *s, struct opts *o)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    o->n_sizes = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (o->n_sizes == SIZES_MAX || parse_size(t, &v) != 0 || v < 4 || v % 4 ||
            v > (256u << 20))
            return -1;
        o->sizes[o->n_sizes++] = v;
    }
    return o->n_sizes ? 0 : -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_peer [--bytes N] [--frame-bytes N] [--queue N] "
                    "[--ring-bytes N] [--ranks N] [--reps N] [--runs N] [--chunk-floats N] "
                    "[--sizes N,N,...] [--sweep-bytes N] "
                    "[--only plain|send|stream|send-enc|stream-enc|sizes|ring]\n");
}

/* Link rates a person compares against, Gbit/s. */
static const double link_gbit[] = {1, 10, 25};

int main(int argc, char **argv)
{
    struct opts o = {.bytes = 2ull << 30, .frame_bytes = 8u << 20, .ring_bytes = 64u << 20,
                     .sweep_bytes = 512u << 20, .queue = 4, .ranks = 4, .reps = 3, .runs = 3};
    const char *only = NULL; /* run just that (for profiling) */
    parse_sizes("8k,512k,8m", &o);
    for (int i = 1; i < argc; i++) {
        uint64_t v = 0;
        if (i + 1 < argc && strcmp(argv[i], "--only") == 0) {
            only = argv[++i];
            continue;
        }
        if (i + 1 < argc && strcmp(argv[i], "--sizes") == 0) {
            if (parse_sizes(argv[++i], &o) != 0) {
                fprintf(stderr, "bench_peer: --sizes takes up to %d multiples of 4 (at most "
                                "256 MiB), comma-separated\n", SIZES_MAX);
                return 2;
            }
            continue;
        }
        if (i + 1 >= argc || parse_size(argv[i + 1], &v) != 0) {
            usage();
            return 2;
        }
        if (strcmp(argv[i], "--bytes") == 0)
            o.bytes = v;
        else if (strcmp(argv[i], "--frame-bytes") == 0)
            o.frame_bytes = v;
        else if (strcmp(argv[i], "--ring-bytes") == 0)
            o.ring_bytes = v;
        else if (strcmp(argv[i], "--sweep-bytes") == 0 && v > 0)
            o.sweep_bytes = v;
        else if (strcmp(argv[i], "--queue") == 0 && v >= 1 && v <= 1024)
            o.queue = (int)v;
        else if (strcmp(argv[i], "--ranks") == 0 && v >= 1 && v <= RANKS_MAX)
            o.ranks = (int)v;
        else if (strcmp(argv[i], "--reps") == 0 && v >= 1 && v <= 1000)
            o.reps = (int)v;
        else if (strcmp(argv[i], "--runs") == 0 && v >= 1 && v <= 100)
            o.runs = (int)v;
        else if (strcmp(argv[i], "--chunk-floats") == 0 && v <= (1u << 28))
            o.chunk_floats = v;
        else {
            fprintf(stderr, "bench_peer: bad option %s %s\n", argv[i], argv[i + 1]);
            return 2;
        }
        i++;
    }
    if (o.frame_bytes < 4 || o.frame_bytes % 4 || o.frame_bytes > (1ull << 32) ||
        o.bytes < o.frame_bytes || o.ring_bytes % 4) {
        fprintf(stderr, "bench_peer: --frame-bytes must be a multiple of 4 (at most 4 GiB) and "
                        "--bytes at least one frame\n");
        return 2;
    }
    log_threshold = LOG_LEVEL_WARN;
    uint64_t frames = o.bytes / o.frame_bytes, bytes = frames * o.frame_bytes;
    size_t buf_len = o.frame_bytes > PIECE ? (size_t)o.frame_bytes : PIECE;
    for (int i = 0; i < o.n_sizes; i++)
        buf_len = o.sizes[i] > buf_len ? (size_t)o.sizes[i] : buf_len;
    unsigned char *src = malloc(buf_len), *dst = malloc(buf_len);
    if (!src || !dst)
        die("malloc", NULL);
    for (size_t i = 0; i < buf_len; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    memset(dst, 0, buf_len);

    static const char *const only_key[P_N] = {"plain", "send", "stream", "send-enc",
                                              "stream-enc"};
    int want[P_N];
    for (int p = 0; p < P_N; p++)
        want[p] = !only || strcmp(only, only_key[p]) == 0;
    struct conns c;
    struct row rows[P_N], sweep[SIZES_MAX][P_N];
    double send_wait = 0, recv_wait = 0;
    conns_open(&c, &o);
    run_paths(&c, want, o.runs, frames, o.frame_bytes, src, dst, buf_len, rows, &send_wait,
              &recv_wait);
    /* plain against encrypted peer_send for each size */
    int sweep_want[P_N] = {[P_SEND] = 1, [P_SEND_ENC] = 1};
    int do_sweep = !only || strcmp(only, "sizes") == 0;
    for (int i = 0; do_sweep && i < o.n_sizes; i++) {
        uint64_t n = o.sweep_bytes / o.sizes[i] ? o.sweep_bytes / o.sizes[i] : 1;
        run_paths(&c, sweep_want, o.runs, n, o.sizes[i], src, dst, buf_len, sweep[i], NULL,
                  NULL);
    }
    conns_close(&c);

    double ring_s = 0, ring_enc_s = 0;
    if (!only || strcmp(only, "ring") == 0) {
        ring_s = bench_ring(o.ranks, o.ring_bytes, o.reps, (size_t)o.chunk_floats, 0);
        ring_enc_s = bench_ring(o.ranks, o.ring_bytes, o.reps, (size_t)o.chunk_floats, 1);
    }

    double gb = (double)bytes / 1e9, plain_s = rows[P_PLAIN].s;
    printf("peer transport on loopback: %llu bytes, %llu frames of %llu bytes, queue %d, "
           "best of %d runs; encryption %s\n",
           (unsigned long long)bytes, (unsigned long long)frames,
           (unsigned long long)o.frame_bytes, o.queue, o.runs, aead_name());
    printf("%-11s %14s %9s %8s %12s %8s %9s\n", "path", "bytes", "seconds", "GB/s", "ratio/plain",
           "cpu s", "cpu s/GB");
    for (int p = 0; p < P_N; p++) {
        if (rows[p].s == 0)
            continue;
        printf("%-11s %14llu %9.3f %8.2f ", path_name[p], (unsigned long long)bytes, rows[p].s,
               gb / rows[p].s);
        if (plain_s > 0)
            printf("%12.3f", plain_s / rows[p].s);
        else
            printf("%12s", "-");
        printf(" %8.3f %9.3f\n", rows[p].cpu, rows[p].cpu / gb);
    }
    if (rows[P_STREAM].s > 0)
        printf("stream waits: sender blocked %.3f s, receiver blocked %.3f s\n", send_wait,
               recv_wait);
    /* What encryption costs on a real link: the extra CPU per byte (both
     * ends together) at the link's rate, as a share of one core. */
    for (int pair = 0; pair < 2; pair++) {
        const struct row *pl = &rows[pair ? P_STREAM : P_SEND], *en = &rows[pair ? P_STREAM_ENC :
                                                                                    P_SEND_ENC];
        if (pl->s == 0 || en->s == 0)
            continue;
        double extra = (en->cpu - pl->cpu) / gb; /* cpu s per GB */
        printf("%s: encrypted/plain throughput %.3f, +%.3f cpu s per GB (both ends);",
               pair ? "stream" : "peer_send", pl->s / en->s, extra);
        for (size_t k = 0; k < sizeof link_gbit / sizeof link_gbit[0]; k++)
            printf(" at %g Gbit/s %.0f%% of a core", link_gbit[k], 100 * extra * link_gbit[k] / 8);
        printf("; loopback encrypted = %.1fx a 10 Gbit/s link\n", gb / en->s / 1.25);
    }
    if (do_sweep) {
        printf("peer_send plain vs encrypted by frame size (%llu bytes each, best of %d):\n",
               (unsigned long long)o.sweep_bytes, o.runs);
        printf("%12s %10s %10s %8s %14s\n", "frame bytes", "plain GB/s", "enc GB/s", "ratio",
               "+cpu s per GB");
        for (int i = 0; i < o.n_sizes; i++) {
            uint64_t n = o.sweep_bytes / o.sizes[i] ? o.sweep_bytes / o.sizes[i] : 1;
            double sgb = (double)(n * o.sizes[i]) / 1e9;
            const struct row *pl = &sweep[i][P_SEND], *en = &sweep[i][P_SEND_ENC];
            printf("%12llu %10.2f %10.2f %8.3f %14.3f\n", (unsigned long long)o.sizes[i],
                   sgb / pl->s, sgb / en->s, pl->s / en->s, (en->cpu - pl->cpu) / sgb);
        }
    }
    double ring_algbw = ring_s > 0 ? (double)o.ring_bytes / 1e9 / ring_s : 0;
    double ring_enc_algbw = ring_enc_s > 0 ? (double)o.ring_bytes / 1e9 / ring_enc_s : 0;
    for (int enc = 0; enc <= 1 && ring_s > 0; enc++) {
        double algbw = enc ? ring_enc_algbw : ring_algbw;
        printf("ring all-reduce%s: %d ranks, %llu bytes, %.4f s per all-reduce, algbw %.2f GB/s, "
               "busbw %.2f GB/s, %llu bytes sent per rank%s\n",
               enc ? " (encrypted)" : "", o.ranks, (unsigned long long)o.ring_bytes,
               enc ? ring_enc_s : ring_s, algbw, algbw * 2.0 * (o.ranks - 1) / o.ranks,
               (unsigned long long)ring_bytes_per_rank((size_t)(o.ring_bytes / 4), o.ranks,
                                                       (size_t)o.chunk_floats),
               enc ? " + 32 a frame" : "");
    }
    if (ring_s > 0)
        printf("ring all-reduce: encrypted/plain %.3f\n", ring_s / ring_enc_s);
    /* JSON: seconds and GB/s per path (null where it did not run) */
    printf("{\"bench\":\"peer\",\"aead\":\"%s\",\"bytes\":%llu,\"frame_bytes\":%llu,\"queue\":%d,"
           "\"runs\":%d",
           aead_name(), (unsigned long long)bytes, (unsigned long long)o.frame_bytes, o.queue,
           o.runs);
    for (int p = 0; p < P_N; p++) {
        if (rows[p].s > 0)
            printf(",\"%s_s\":%.6f,\"%s_gbps\":%.3f,\"%s_cpu_s\":%.3f", path_key[p], rows[p].s,
                   path_key[p], gb / rows[p].s, path_key[p], rows[p].cpu);
        else
            printf(",\"%s_s\":null,\"%s_gbps\":null,\"%s_cpu_s\":null", path_key[p],
                   path_key[p], path_key[p]);
    }
    if (plain_s > 0 && rows[P_STREAM].s > 0)
        printf(",\"stream_ratio\":%.4f", plain_s / rows[P_STREAM].s);
    else
        printf(",\"stream_ratio\":null");
    if (rows[P_SEND].s > 0 && rows[P_SEND_ENC].s > 0)
        printf(",\"send_enc_ratio\":%.4f", rows[P_SEND].s / rows[P_SEND_ENC].s);
    if (rows[P_STREAM].s > 0 && rows[P_STREAM_ENC].s > 0)
        printf(",\"stream_enc_ratio\":%.4f", rows[P_STREAM].s / rows[P_STREAM_ENC].s);
    if (do_sweep) {
        printf(",\"sizes\":[");
        for (int i = 0; i < o.n_sizes; i++) {
            uint64_t n = o.sweep_bytes / o.sizes[i] ? o.sweep_bytes / o.sizes[i] : 1;
            double sgb = (double)(n * o.sizes[i]) / 1e9;
            printf("%s{\"frame_bytes\":%llu,\"plain_gbps\":%.3f,\"enc_gbps\":%.3f}",
                   i ? "," : "", (unsigned long long)o.sizes[i], sgb / sweep[i][P_SEND].s,
                   sgb / sweep[i][P_SEND_ENC].s);
        }
        printf("]");
    }
    if (ring_s > 0)
        printf(",\"ring_ranks\":%d,\"ring_bytes\":%llu,\"ring_s\":%.6f,\"ring_algbw_gbps\":%.3f,"
               "\"ring_enc_s\":%.6f,\"ring_enc_algbw_gbps\":%.3f",
               o.ranks, (unsigned long long)o.ring_bytes, ring_s, ring_algbw, ring_enc_s,
               ring_enc_algbw);
    printf("}\n");
    free(src);
    free(dst);
    return 0;
}
