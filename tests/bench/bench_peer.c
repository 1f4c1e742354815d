/* bench_peer.c - peer transport speed on loopback, side by side:
 *   plain      one thread write()s N bytes in 4 MiB pieces, another read()s
 *              them (default socket options: the ceiling for one TCP stream)
 *   peer_send  the same bytes as F32 activation frames through peer_send /
 *              peer_recv on the caller's threads (header + CRC, no queues)
 *   stream     the same frames through peer_stream_send / peer_stream_recv
 *              (copy + CRC in, sender and receiver threads, copy out)
 * then a ring all-reduce of a --ring-bytes buffer over --ranks threads
 * (algorithm bandwidth = buffer bytes / seconds).
 * Prints a table and one JSON line {"bench":"peer",...}. Not a test: it
 * asserts nothing about speed.
 *
 * usage: bench_peer [--bytes N] [--frame-bytes N] [--queue N] [--ring-bytes N]
 *                   [--ranks N] [--reps N] [--runs N] [--chunk-floats N]
 *                   [--only plain|send|stream|ring]
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

#include "../../agent/peer.h"
#include "../../agent/ring.h"
#include "../../common/log.h"

#define PIECE (4u << 20)  /* bytes per write() in the plain run */
#define TIMEOUT_MS 60000
#define RANKS_MAX 16

struct opts {
    uint64_t bytes, frame_bytes, ring_bytes;
    int queue, ranks, reps, runs;
    uint64_t chunk_floats; /* ring chunk; 0: the default */
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

static struct peer_auth auth_for(const char *role)
{
    struct peer_auth a = {.job_id = 1, .epoch = 1, .secret_len = 5};
    memcpy(a.secret, "bench", 5);
    snprintf(a.role, sizeof a.role, "%s", role);
    return a;
}

static void conn_pair(struct peer_listener *l, unsigned port, const char *dial_role,
                      const char *listen_role, struct peer_conn *a, struct peer_conn *b)
{
    struct shoal_err err;
    char addr[32];
    struct peer_auth d = auth_for(dial_role);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    if (peer_dial(addr, &d, listen_role, TIMEOUT_MS, a, &err) != 0)
        die("dial", &err);
    if (peer_listener_take(l, dial_role, TIMEOUT_MS, b, &err) != 0)
        die("take", &err);
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
        if (peer_stream_recv(sb, WIRE_ACTIVATION, 1, (uint32_t)i, dst, frame_bytes, TIMEOUT_MS,
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

static double bench_ring(int p, uint64_t bytes, int reps, size_t chunk_floats)
{
    struct peer_listener *l[RANKS_MAX];
    unsigned port[RANKS_MAX];
    struct peer_conn next[RANKS_MAX], prev[RANKS_MAX];
    struct rank_run run[RANKS_MAX];
    pthread_t t[RANKS_MAX];
    struct shoal_err err;
    char role[RANKS_MAX][PEER_ROLE_MAX];
    size_t n = (size_t)(bytes / 4);

    for (int k = 0; k < p; k++) {
        snprintf(role[k], sizeof role[k], "rank=%d", k);
        if (peer_listener_start("127.0.0.1:0", &l[k], &port[k], &err) != 0)
            die("listen", &err);
        struct peer_auth a = auth_for(role[k]);
        peer_listener_expect(l[k], &a);
    }
    for (int k = 0; k < p; k++)
        conn_pair(l[(k + 1) % p], port[(k + 1) % p], role[k], role[(k + 1) % p], &next[k],
                  &prev[(k + 1) % p]);
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

int main(int argc, char **argv)
{
    struct opts o = {.bytes = 2ull << 30, .frame_bytes = 8u << 20, .ring_bytes = 64u << 20,
                     .queue = 4, .ranks = 4, .reps = 3, .runs = 3};
    const char *only = NULL; /* plain, send, stream or ring: run just that (for profiling) */
    for (int i = 1; i < argc; i++) {
        uint64_t v = 0;
        if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
            continue;
        }
        if (i + 1 >= argc || parse_size(argv[i + 1], &v) != 0) {
            fprintf(stderr, "usage: bench_peer [--bytes N] [--frame-bytes N] [--queue N] "
                            "[--ring-bytes N] [--ranks N] [--reps N] [--runs N] "
                            "[--chunk-floats N] [--only plain|send|stream|ring]\n");
            return 2;
        }
        if (strcmp(argv[i], "--bytes") == 0)
            o.bytes = v;
        else if (strcmp(argv[i], "--frame-bytes") == 0)
            o.frame_bytes = v;
        else if (strcmp(argv[i], "--ring-bytes") == 0)
            o.ring_bytes = v;
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
    unsigned char *src = malloc(buf_len), *dst = malloc(buf_len);
    if (!src || !dst)
        die("malloc", NULL);
    for (size_t i = 0; i < buf_len; i++)
        src[i] = (unsigned char)(i * 131 + 7);
    memset(dst, 0, buf_len);

    struct peer_listener *l;
    unsigned port;
    struct shoal_err err;
    struct peer_conn a, b, c, d;
    struct peer_stream *sa, *sb;
    if (peer_listener_start("127.0.0.1:0", &l, &port, &err) != 0)
        die("listen", &err);
    struct peer_auth la = auth_for("stage=1");
    peer_listener_expect(l, &la);
    conn_pair(l, port, "stage=0", "stage=1", &a, &b);
    /* The streams get connections of their own, so the paths interleave. */
    conn_pair(l, port, "stage=0 stream", "stage=1", &c, &d);
    if (peer_stream_start(&c, o.frame_bytes, o.queue, &sa, &err) != 0 ||
        peer_stream_start(&d, o.frame_bytes, o.queue, &sb, &err) != 0)
        die("stream", &err);

    /* Best run of each path: wall seconds and the process's CPU seconds;
     * 0 where a path did not run. */
    struct row {
        const char *name;
        double s, cpu;
    } rows[3] = {{"plain", 0, 0}, {"peer_send", 0, 0}, {"stream", 0, 0}};
    double send_wait = 0, recv_wait = 0;
    for (int run = 0; run < o.runs; run++) {
        for (int p = 0; p < 3; p++) {
            double sw = 0, rw = 0, t, c0 = cpu_s();
            if (only && strcmp(only, p == 0 ? "plain" : p == 1 ? "send" : "stream") != 0)
                continue;
            if (p == 0)
                t = bench_plain(bytes, src, dst);
            else if (p == 1)
                t = bench_send(&a, &b, frames, o.frame_bytes, src, dst);
            else
                t = bench_stream(sa, sb, frames, o.frame_bytes, src, dst, &sw, &rw);
            /* every frame carries src; the plain run's reads do not line up with it */
            if (p > 0 && memcmp(src, dst, (size_t)o.frame_bytes) != 0) {
                fprintf(stderr, "bench_peer: %s delivered other bytes than were sent\n",
                        rows[p].name);
                return 1;
            }
            memset(dst, 0, buf_len);
            if (rows[p].s == 0 || t < rows[p].s) {
                rows[p].s = t;
                rows[p].cpu = cpu_s() - c0;
                if (p == 2)
                    send_wait = sw, recv_wait = rw;
            }
        }
    }
    peer_close(&a);
    peer_close(&b);
    peer_stream_stop(sa);
    peer_stream_stop(sb);
    peer_listener_stop(l);

    double ring_s = 0;
    if (!only || strcmp(only, "ring") == 0)
        ring_s = bench_ring(o.ranks, o.ring_bytes, o.reps, (size_t)o.chunk_floats);

    double gb = (double)bytes / 1e9, plain_s = rows[0].s;
    printf("peer transport on loopback: %llu bytes, %llu frames of %llu bytes, queue %d, "
           "best of %d runs\n",
           (unsigned long long)bytes, (unsigned long long)frames,
           (unsigned long long)o.frame_bytes, o.queue, o.runs);
    printf("%-10s %14s %9s %8s %12s %8s\n", "path", "bytes", "seconds", "GB/s", "ratio/plain",
           "cpu s");
    for (int p = 0; p < 3; p++) {
        if (rows[p].s == 0)
            continue;
        printf("%-10s %14llu %9.3f %8.2f ", rows[p].name, (unsigned long long)bytes, rows[p].s,
               gb / rows[p].s);
        if (plain_s > 0)
            printf("%12.3f", plain_s / rows[p].s);
        else
            printf("%12s", "-");
        printf(" %8.3f\n", rows[p].cpu);
    }
    if (rows[2].s > 0)
        printf("stream waits: sender blocked %.3f s, receiver blocked %.3f s\n", send_wait,
               recv_wait);
    double ring_algbw = ring_s > 0 ? (double)o.ring_bytes / 1e9 / ring_s : 0;
    if (ring_s > 0)
        printf("ring all-reduce: %d ranks, %llu bytes, %.4f s per all-reduce, algbw %.2f GB/s, "
               "busbw %.2f GB/s, %llu bytes sent per rank\n",
               o.ranks, (unsigned long long)o.ring_bytes, ring_s, ring_algbw,
               ring_algbw * 2.0 * (o.ranks - 1) / o.ranks,
               (unsigned long long)ring_bytes_per_rank((size_t)(o.ring_bytes / 4), o.ranks,
                                                       (size_t)o.chunk_floats));
    /* JSON: seconds and GB/s per path (null where it did not run) */
    printf("{\"bench\":\"peer\",\"bytes\":%llu,\"frame_bytes\":%llu,\"queue\":%d,\"runs\":%d",
           (unsigned long long)bytes, (unsigned long long)o.frame_bytes, o.queue, o.runs);
    const char *key[3] = {"plain", "send", "stream"};
    for (int p = 0; p < 3; p++) {
        if (rows[p].s > 0)
            printf(",\"%s_s\":%.6f,\"%s_gbps\":%.3f,\"%s_cpu_s\":%.3f", key[p], rows[p].s, key[p],
                   gb / rows[p].s, key[p], rows[p].cpu);
        else
            printf(",\"%s_s\":null,\"%s_gbps\":null,\"%s_cpu_s\":null", key[p], key[p], key[p]);
    }
    if (plain_s > 0 && rows[2].s > 0)
        printf(",\"stream_ratio\":%.4f", plain_s / rows[2].s);
    else
        printf(",\"stream_ratio\":null");
    if (ring_s > 0)
        printf(",\"ring_ranks\":%d,\"ring_bytes\":%llu,\"ring_s\":%.6f,\"ring_algbw_gbps\":%.3f",
               o.ranks, (unsigned long long)o.ring_bytes, ring_s, ring_algbw);
    printf("}\n");
    free(src);
    free(dst);
    return 0;
}
