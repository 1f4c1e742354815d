/* test_ring.c - agent/net/ring.h: rings of 1..5 ranks, one thread each, over
 * real loopback connections made through peer listeners.  Every rank must
 * end with the sum taken in the ring's fixed order (so exactly equal to a
 * reference summed the same way) and all ranks bit-identical, for sizes
 * that leave segments empty, uneven chunk counts, and more chunks than a
 * round can number, over plain and encrypted connections.  Wrong frames
 * fail with peer_protocol. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>

#include "../../agent/net/ring.h"
#include "../../common/log.h"
#include "../peer_keys.h"

#define RANKS_MAX 5
#define JOB 11
#define EPOCH 2
#define TIMEOUT_MS 10000

struct ring_set {
    int size;
    struct peer_listener *l[RANKS_MAX];
    struct peer_conn next[RANKS_MAX], prev[RANKS_MAX];
    struct ring r[RANKS_MAX];
};

/* Rank `rank` of a ring of `size`, with its links to both neighbours. */
static struct peer_auth auth_for(int rank, int size, int encrypt)
{
    struct peer_auth a = {.job_id = JOB, .epoch = EPOCH, .encrypt = encrypt};
    char peer[PEER_ROLE_MAX];
    snprintf(a.role, sizeof a.role, "rank=%d", rank);
    snprintf(peer, sizeof peer, "rank=%d", (rank + 1) % size);
    peer_keys_link(&a, "secret", peer);
    snprintf(peer, sizeof peer, "rank=%d", (rank + size - 1) % size);
    peer_keys_link(&a, "secret", peer);
    return a;
}

/* Rank k dials rank k+1's listener; k+1 takes that connection as prev.
 * encrypt: the dialers ask for encrypted connections. */
static void ring_form_opt(struct ring_set *rs, int size, size_t chunk_floats, int timeout_ms,
                          int encrypt)
{
    struct shoal_err err;
    unsigned port[RANKS_MAX];
    memset(rs, 0, sizeof *rs);
    rs->size = size;
    for (int k = 0; k < size; k++) {
        rs->next[k].fd = rs->prev[k].fd = -1;
        if (size == 1)
            continue;
        assert_int_equal(peer_listener_start("127.0.0.1:0", &rs->l[k], &port[k], &err), 0);
        struct peer_auth a = auth_for(k, size, 0);
        peer_listener_expect(rs->l[k], &a);
    }
    for (int k = 0; k < size && size > 1; k++) {
        int to = (k + 1) % size;
        char addr[32], want[PEER_ROLE_MAX];
        struct peer_auth a = auth_for(k, size, encrypt);
        snprintf(addr, sizeof addr, "127.0.0.1:%u", port[to]);
        snprintf(want, sizeof want, "rank=%d", to);
        if (peer_dial(addr, &a, want, TIMEOUT_MS, &rs->next[k], &err) != 0)
            fail_msg("dial: %s", err.message);
        if (peer_listener_take(rs->l[to], a.role, TIMEOUT_MS, &rs->prev[to], &err) != 0)
            fail_msg("take: %s", err.message);
        assert_true((rs->next[k].seal != NULL) == encrypt);
        assert_true((rs->prev[to].seal != NULL) == encrypt);
    }
    for (int k = 0; k < size; k++)
        rs->r[k] = (struct ring){.next = &rs->next[k], .prev = &rs->prev[k], .rank = k,
                                 .size = size, .chunk_floats = chunk_floats,
                                 .timeout_ms = timeout_ms};
}

static void ring_form(struct ring_set *rs, int size, size_t chunk_floats, int timeout_ms)
{
    ring_form_opt(rs, size, chunk_floats, timeout_ms, 0);
}

static void ring_free(struct ring_set *rs)
{
    for (int k = 0; k < rs->size; k++) {
        peer_close(&rs->next[k]);
        peer_close(&rs->prev[k]);
        peer_listener_stop(rs->l[k]);
    }
}

struct rank_job {
    struct ring *r;
    float *data;
    size_t n;
    uint64_t step;
    enum codec_id codec;   /* CODEC_F32 (0): ring_allreduce_sum */
    float *feedback;
    int rc;
    struct shoal_err err;
};

/* A rank that failed tells its neighbours now rather than after their
 * timeouts. */
static void tell_neighbours(struct ring *r)
{
    if (r->next->fd >= 0)
        shutdown(r->next->fd, SHUT_RDWR);
    if (r->prev->fd >= 0)
        shutdown(r->prev->fd, SHUT_RDWR);
}

static void *rank_main(void *arg)
{
    struct rank_job *j = arg;
    j->rc = j->codec == CODEC_F32 && !j->feedback
        ? ring_allreduce_sum(j->r, j->data, j->n, j->step, &j->err)
        : ring_allreduce_codec(j->r, j->data, j->n, j->step, j->codec, j->feedback, &j->err);
    if (j->rc != 0)
        tell_neighbours(j->r);
    return NULL;
}

/* Values of very different magnitudes, so that a different summation order
 * would give different bits. */
static float value(int rank, size_t i)
{
    uint64_t h = (uint64_t)rank * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    int mant = (int)(h % 2001) - 1000, exp = (int)((h >> 20) % 24) - 12;
    return (float)mant * (exp >= 0 ? (float)(1u << exp) : 1.0f / (float)(1u << -exp));
}

/* Runs one all-reduce on every rank at once and checks the result. */
static void check_allreduce(struct ring_set *rs, size_t n, uint64_t step)
{
    int p = rs->size;
    float *data[RANKS_MAX];
    struct rank_job jobs[RANKS_MAX];
    pthread_t t[RANKS_MAX];
    for (int k = 0; k < p; k++) {
        data[k] = malloc((n ? n : 1) * sizeof(float));
        assert_non_null(data[k]);
        for (size_t i = 0; i < n; i++)
            data[k][i] = value(k, i);
        jobs[k] = (struct rank_job){.r = &rs->r[k], .data = data[k], .n = n, .step = step};
        pthread_create(&t[k], NULL, rank_main, &jobs[k]);
    }
    for (int k = 0; k < p; k++)
        pthread_join(t[k], NULL);
    for (int k = 0; k < p; k++)
        if (jobs[k].rc != 0)
            fail_msg("size %d n %zu rank %d: %s", p, n, k, jobs[k].err.message);
    /* Segment s is summed x_s, then + x_{s+1}, ... around the ring. */
    for (int s = 0; s < p; s++) {
        size_t lo = n / (size_t)p * (size_t)s + n % (size_t)p * (size_t)s / (size_t)p;
        size_t hi = n / (size_t)p * (size_t)(s + 1) + n % (size_t)p * (size_t)(s + 1) / (size_t)p;
        for (size_t i = lo; i < hi; i++) {
            float acc = value(s, i);
            for (int j = 1; j < p; j++)
                acc = value((s + j) % p, i) + acc;
            if (memcmp(&acc, &data[0][i], sizeof acc) != 0)
                fail_msg("size %d n %zu: element %zu is %.9g, want %.9g", p, n, i, data[0][i],
                         acc);
        }
    }
    for (int k = 1; k < p; k++)
        assert_memory_equal(data[k], data[0], n * sizeof(float));
    for (int k = 0; k < p; k++)
        free(data[k]);
}

static void test_ring_sizes(void **state)
{
    (void)state;
    for (int p = 1; p <= RANKS_MAX; p++) {
        struct ring_set rs;
        ring_form(&rs, p, 0, TIMEOUT_MS);
        size_t ns[] = {0, 1, (size_t)p - 1, 1000, 1u << 20};
        uint64_t step = 1;
        for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++)
            check_allreduce(&rs, ns[c], step++);
        /* small chunks: several per segment, uneven counts (1001 over p) */
        for (int k = 0; k < p; k++)
            rs.r[k].chunk_floats = 7;
        check_allreduce(&rs, 1001, step++);
        check_allreduce(&rs, (size_t)p + 2, step++);
        for (int k = 0; k < p; k++)
            rs.r[k].chunk_floats = 1000;
        check_allreduce(&rs, 99999, step++);
        ring_free(&rs);
    }
}

static void test_ring_many_chunks(void **state)
{
    (void)state;
    /* 1-float chunks over 70000-float segments: more than 65536 chunks a
     * round, so both ends switch to 2-float chunks */
    struct ring_set rs;
    ring_form(&rs, 2, 1, TIMEOUT_MS);
    check_allreduce(&rs, 140000, 3);
    assert_int_equal(ring_bytes_per_rank(140000, 2, 1), 2 * (70000 * 4 + 35000 * 72));
    ring_free(&rs);
}

static void test_ring_bytes(void **state)
{
    (void)state;
    assert_int_equal(ring_bytes_per_rank(1000, 1, 0), 0);
    assert_int_equal(ring_bytes_per_rank(0, 4, 0), 0);
    /* 4 ranks, 4000 floats: 6 rounds of 1000 floats in one frame each */
    assert_int_equal(ring_bytes_per_rank(4000, 4, 0), 6 * (4000 + 72));
    /* 1000-float chunks of 1500-float segments: two frames a round */
    assert_int_equal(ring_bytes_per_rank(3000, 2, 1000), 2 * (6000 + 2 * 72));
}

static void test_ring_wrong_step(void **state)
{
    (void)state;
    struct ring_set rs;
    ring_form(&rs, 3, 0, 3000);
    struct rank_job jobs[3];
    pthread_t t[3];
    float *data[3];
    for (int k = 0; k < 3; k++) {
        data[k] = calloc(3000, sizeof(float));
        jobs[k] = (struct rank_job){.r = &rs.r[k], .data = data[k], .n = 3000,
                                    .step = k == 1 ? 6 : 5};
        pthread_create(&t[k], NULL, rank_main, &jobs[k]);
    }
    for (int k = 0; k < 3; k++)
        pthread_join(t[k], NULL);
    /* rank 1 hears step 5 from rank 0, rank 2 hears step 6 from rank 1 */
    for (int k = 1; k < 3; k++) {
        assert_int_equal(jobs[k].rc, -1);
        assert_string_equal(jobs[k].err.code, "peer_protocol");
        assert_non_null(strstr(jobs[k].err.message, "step"));
        assert_non_null(strstr(jobs[k].err.message, "127.0.0.1:"));
    }
    assert_int_equal(jobs[0].rc, -1); /* its neighbours gave up */
    for (int k = 0; k < 3; k++)
        free(data[k]);
    ring_free(&rs);
}

static void test_ring_encrypted(void **state)
{
    (void)state;
    for (int p = 2; p <= 4; p++) {
        struct ring_set rs;
        ring_form_opt(&rs, p, 0, TIMEOUT_MS, 1);
        size_t ns[] = {1, (size_t)p - 1, 1000, 1u << 20};
        uint64_t step = 1;
        for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++)
            check_allreduce(&rs, ns[c], step++);
        for (int k = 0; k < p; k++)
            rs.r[k].chunk_floats = 7;
        check_allreduce(&rs, 1001, step++);
        ring_free(&rs);
    }
    /* an authentic frame for the wrong step is still a protocol error */
    struct ring_set rs;
    ring_form_opt(&rs, 2, 0, 3000, 1);
    struct rank_job jobs[2];
    pthread_t t[2];
    float *data[2];
    for (int k = 0; k < 2; k++) {
        data[k] = calloc(3000, sizeof(float));
        jobs[k] = (struct rank_job){.r = &rs.r[k], .data = data[k], .n = 3000, .step = 5 + k};
        pthread_create(&t[k], NULL, rank_main, &jobs[k]);
    }
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(jobs[k].rc, -1);
        free(data[k]);
    }
    assert_true(strcmp(jobs[0].err.code, "peer_protocol") == 0 ||
                strcmp(jobs[1].err.code, "peer_protocol") == 0);
    ring_free(&rs);
}

static void test_ring_error_frame(void **state)
{
    (void)state;
    struct ring_set rs;
    struct shoal_err err;
    ring_form(&rs, 2, 0, 3000);
    const char reason[] = "rank 1: gradient is NaN";
    struct wire_frame f = {.kind = WIRE_ERROR, .dtype = WIRE_BYTES,
                           .payload_len = sizeof reason - 1};
    assert_int_equal(peer_send(&rs.next[1], &f, reason, TIMEOUT_MS, &err), 0);
    float data[64] = {0};
    assert_int_equal(ring_allreduce_sum(&rs.r[0], data, 64, 1, &err), -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "'rank 1: gradient is NaN'"));
    ring_free(&rs);
}

/* ms on the monotonic clock since `t0` (0: since its origin). */
static double now_ms_since(double t0)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6 - t0;
}

static int stop_after(void *arg)
{
    return now_ms_since(*(double *)arg) >= 300;
}

/* A rank whose peer never sends gives up soon after its stop says so, not
 * at the 20 s timeout, saying why. */
static void test_ring_stop(void **state)
{
    (void)state;
    struct ring_set rs;
    struct shoal_err err;
    ring_form(&rs, 2, 0, 20000);
    double t0 = now_ms_since(0);
    rs.r[0].stop = (struct peer_stop){ stop_after, &t0 };
    float data[64] = {0};
    assert_int_equal(ring_allreduce_sum(&rs.r[0], data, 64, 1, &err), -1);
    double took = now_ms_since(t0);
    assert_string_equal(err.code, "peer_io");
    assert_non_null(strstr(err.message, "the assignment changed"));
    if (took < 300 || took > 300 + 2 * PEER_STOP_SLICE_MS + 500)
        fail_msg("stopped after %.0f ms, want 300-%d", took, 300 + 2 * PEER_STOP_SLICE_MS + 500);
    ring_free(&rs);
}

/* Gentle values for the packed sums: rank k's in [-1, 1) times 2^(k%3-1). */
static float gentle(int rank, size_t i)
{
    uint64_t h = ((uint64_t)rank + 1) * 0x9e3779b97f4a7c15ull ^ (i + 7) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 32;
    return ((float)(h % 20001) / 10000.0f - 1.0f) * (float)(1 << (rank % 3)) / 2.0f;
}

/* Runs `calls` packed all-reduces of the same inputs on every rank at once,
 * with or without error feedback; every rank must end each call with the
 * same bits, and (with feedback) the delivered sum plus every rank's
 * feedback must be the exact sum.  Returns the worst error of the
 * delivered sums added up over the calls against calls x the exact sum. */
static double packed_allreduce(struct ring_set *rs, size_t n, enum codec_id codec, int with_feedback, int calls)
{
    int p = rs->size;
    float *data[RANKS_MAX], *fb[RANKS_MAX];
    double *cum = calloc(n, sizeof *cum), worst = 0;
    struct rank_job jobs[RANKS_MAX];
    pthread_t t[RANKS_MAX];
    assert_non_null(cum);
    for (int k = 0; k < p; k++) {
        data[k] = malloc(n * sizeof(float));
        fb[k] = calloc(n, sizeof(float));
        assert_true(data[k] && fb[k]);
    }
    for (int c = 0; c < calls; c++) {
        for (int k = 0; k < p; k++) {
            for (size_t i = 0; i < n; i++)
                data[k][i] = gentle(k, i);
            jobs[k] = (struct rank_job){.r = &rs->r[k], .data = data[k], .n = n, .step = (uint64_t)c + 1,
                                        .codec = codec, .feedback = with_feedback ? fb[k] : NULL};
            pthread_create(&t[k], NULL, rank_main, &jobs[k]);
        }
        for (int k = 0; k < p; k++)
            pthread_join(t[k], NULL);
        for (int k = 0; k < p; k++)
            if (jobs[k].rc != 0)
                fail_msg("%s size %d n %zu rank %d: %s", codec_get(codec)->name, p, n, k, jobs[k].err.message);
        for (int k = 1; k < p; k++)
            assert_memory_equal(data[k], data[0], n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            double exact = 0, kept = 0;
            for (int k = 0; k < p; k++) {
                exact += gentle(k, i);
                kept += fb[k][i];
            }
            cum[i] += data[0][i];
            /* the delivered sum and what the ranks kept back make the exact
             * sum of this call's inputs and the feedback they started with */
            if (with_feedback && c == 0 && fabs(data[0][i] + kept - exact) > 1e-5)
                fail_msg("%s size %d element %zu: delivered %.9g + kept %.9g != exact %.9g", codec_get(codec)->name,
                         p, i, data[0][i], kept, exact);
            if (c == calls - 1 && fabs(cum[i] - calls * exact) > worst)
                worst = fabs(cum[i] - calls * exact);
        }
    }
    for (int k = 0; k < p; k++) {
        free(data[k]);
        free(fb[k]);
    }
    free(cum);
    return worst;
}

static void test_ring_packed(void **state)
{
    (void)state;
    for (int p = 2; p <= RANKS_MAX; p++) {
        struct ring_set rs;
        ring_form(&rs, p, 0, TIMEOUT_MS);
        for (int k = 0; k < p; k++)
            rs.r[k].chunk_floats = 1000;   /* several chunks a segment, partial int8 rows */
        for (enum codec_id c = CODEC_BF16; c <= CODEC_INT8; c++) {
            /* one sum: within the codec's error of the exact sum, on every rank alike */
            double one = packed_allreduce(&rs, 5003, c, 0, 1);
            /* each of p packings loses at most 2^-8 (bf16) or 1/254 (int8)
             * of a partial sum of at most k values of magnitude <= 2 */
            double bound = p * (p + 1) / 254.0;
            if (one > bound)
                fail_msg("%s size %d: one sum is off by %g (bound %g)", codec_get(c)->name, p, one, bound);
            /* twenty sums of the same inputs: with error feedback the total
             * stays within about one sum's error; without, it drifts */
            double with = packed_allreduce(&rs, 5003, c, 1, 20);
            double without = packed_allreduce(&rs, 5003, c, 0, 20);
            if (!(with <= 2 * bound && without > 4 * with))
                fail_msg("%s size %d: error after 20 sums %g with feedback, %g without", codec_get(c)->name, p,
                         with, without);
        }
        ring_free(&rs);
    }
}

/* Two ends that disagree on the sync dtype: the frame is refused. */
static void test_ring_packed_mismatch(void **state)
{
    (void)state;
    struct ring_set rs;
    ring_form(&rs, 2, 0, 3000);
    struct rank_job jobs[2];
    pthread_t t[2];
    float *data[2];
    for (int k = 0; k < 2; k++) {
        data[k] = calloc(3000, sizeof(float));
        jobs[k] = (struct rank_job){.r = &rs.r[k], .data = data[k], .n = 3000, .step = 4,
                                    .codec = k ? CODEC_INT8 : CODEC_BF16};
        pthread_create(&t[k], NULL, rank_main, &jobs[k]);
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(t[k], NULL);
        assert_int_equal(jobs[k].rc, -1);
        free(data[k]);
    }
    assert_true(strstr(jobs[0].err.message, "dtype") || strstr(jobs[1].err.message, "dtype"));
    ring_free(&rs);
}

/* ring_broadcast: every root of rings of 1..4 ranks; lengths of one byte,
 * of chunks exactly, and over several chunks; every rank ends with the
 * root's bytes.  A length over the receivers' limit is refused. */
struct bcast_job {
    struct ring *r;
    int root;
    unsigned char *data;
    size_t len, len_max;
    int rc;
    struct shoal_err err;
};

static void *bcast_main(void *arg)
{
    struct bcast_job *j = arg;
    j->rc = ring_broadcast(j->r, j->root, &j->data, &j->len, j->len_max, 7, &j->err);
    if (j->rc != 0)
        tell_neighbours(j->r);
    return NULL;
}

static int bcast_run(struct ring_set *rs, int root, unsigned char *src, size_t len, size_t len_max,
                     struct bcast_job *jobs)
{
    pthread_t t[RANKS_MAX];
    int failed = 0;
    for (int k = 0; k < rs->size; k++) {
        jobs[k] = (struct bcast_job){ .r = &rs->r[k], .root = root, .len_max = len_max };
        if (k == root)
            jobs[k].data = src, jobs[k].len = len;
        pthread_create(&t[k], NULL, bcast_main, &jobs[k]);
    }
    for (int k = 0; k < rs->size; k++) {
        pthread_join(t[k], NULL);
        failed |= jobs[k].rc != 0;
    }
    return failed;
}

static void test_ring_broadcast(void **state)
{
    (void)state;
    const size_t lens[] = { 1, RING_STATE_CHUNK_BYTES, 2 * RING_STATE_CHUNK_BYTES + 3 };
    for (int size = 1; size <= 4; size++) {
        struct ring_set rs;
        ring_form(&rs, size, 0, TIMEOUT_MS);
        for (int root = 0; root < size; root++) {
            for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                size_t len = lens[li];
                unsigned char *src = malloc(len);
                struct bcast_job jobs[RANKS_MAX];
                assert_non_null(src);
                for (size_t i = 0; i < len; i++)
                    src[i] = (unsigned char)(i * 131 + (size_t)root * 7 + li);
                if (bcast_run(&rs, root, src, len, len, jobs) != 0)
                    fail_msg("size %d root %d len %zu failed", size, root, len);
                for (int k = 0; k < size; k++) {
                    if (k == root || size == 1)
                        continue;
                    assert_int_equal(jobs[k].len, len);
                    assert_memory_equal(jobs[k].data, src, len);
                    free(jobs[k].data);
                }
                free(src);
            }
        }
        ring_free(&rs);
    }
    /* more than a receiver accepts: refused, named */
    struct ring_set rs;
    struct bcast_job jobs[RANKS_MAX];
    unsigned char big[64] = { 0 };
    ring_form(&rs, 3, 0, TIMEOUT_MS);
    assert_int_not_equal(bcast_run(&rs, 1, big, sizeof big, 16, jobs), 0);
    assert_string_equal(jobs[2].err.code, "peer_protocol");
    assert_non_null(strstr(jobs[2].err.message, "64 bytes, expected 1 to 16"));
    ring_free(&rs);
}

/* ring_pass_loss: on rings of 2..4 ranks every rank gets its previous
 * rank's double, bit for bit (a NaN payload and a tiny value too); a
 * rank on another step is refused, naming the step. */
struct loss_job {
    struct ring *r;
    double mine, got;
    uint64_t step;
    int rc;
    struct shoal_err err;
};

static void *loss_main(void *arg)
{
    struct loss_job *j = arg;
    j->rc = ring_pass_loss(j->r, j->mine, &j->got, j->step, &j->err);
    if (j->rc != 0)
        tell_neighbours(j->r);
    return NULL;
}

static void loss_run(struct ring_set *rs, const double *mine, const uint64_t *steps, struct loss_job *jobs)
{
    pthread_t t[RANKS_MAX];
    for (int k = 0; k < rs->size; k++) {
        jobs[k] = (struct loss_job){ .r = &rs->r[k], .mine = mine[k], .step = steps[k], .got = -1 };
        pthread_create(&t[k], NULL, loss_main, &jobs[k]);
    }
    for (int k = 0; k < rs->size; k++)
        pthread_join(t[k], NULL);
}

static void test_ring_pass_loss(void **state)
{
    (void)state;
    const double values[RANKS_MAX] = { 3.2461, 1e-300, NAN, -0.0 };
    const uint64_t same[RANKS_MAX] = { 9, 9, 9, 9 };
    struct loss_job jobs[RANKS_MAX];
    for (int size = 2; size <= 4; size++) {
        struct ring_set rs;
        ring_form(&rs, size, 0, TIMEOUT_MS);
        loss_run(&rs, values, same, jobs);
        for (int k = 0; k < size; k++) {
            assert_int_equal(jobs[k].rc, 0);
            double want = values[(k + size - 1) % size];
            assert_memory_equal(&jobs[k].got, &want, sizeof want);
        }
        ring_free(&rs);
    }
    struct ring_set rs;
    const uint64_t steps[RANKS_MAX] = { 9, 10, 9 };
    ring_form(&rs, 3, 0, TIMEOUT_MS);
    loss_run(&rs, values, steps, jobs);
    assert_int_not_equal(jobs[2].rc, 0);
    assert_string_equal(jobs[2].err.code, "peer_protocol");
    assert_non_null(strstr(jobs[2].err.message, "expected the loss of step 9"));
    ring_free(&rs);
}

int main(void)
{
    log_threshold = LOG_LEVEL_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_sizes),
        cmocka_unit_test(test_ring_many_chunks),
        cmocka_unit_test(test_ring_bytes),
        cmocka_unit_test(test_ring_wrong_step),
        cmocka_unit_test(test_ring_error_frame),
        cmocka_unit_test(test_ring_stop),
        cmocka_unit_test(test_ring_encrypted),
        cmocka_unit_test(test_ring_packed),
        cmocka_unit_test(test_ring_packed_mismatch),
        cmocka_unit_test(test_ring_broadcast),
        cmocka_unit_test(test_ring_pass_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
