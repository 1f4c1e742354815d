/* test_ring.c - agent/ring.h: rings of 1..5 ranks, one thread each, over
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

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../agent/ring.h"
#include "../../common/log.h"

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

static struct peer_auth auth_for(int rank, int encrypt)
{
    struct peer_auth a = {.job_id = JOB, .epoch = EPOCH, .secret_len = 6, .encrypt = encrypt};
    memcpy(a.secret, "secret", 6);
    snprintf(a.role, sizeof a.role, "rank=%d", rank);
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
        struct peer_auth a = auth_for(k, 0);
        peer_listener_expect(rs->l[k], &a);
    }
    for (int k = 0; k < size && size > 1; k++) {
        int to = (k + 1) % size;
        char addr[32], want[PEER_ROLE_MAX];
        struct peer_auth a = auth_for(k, encrypt);
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
    int rc;
    struct shoal_err err;
};

static void *rank_main(void *arg)
{
    struct rank_job *j = arg;
    j->rc = ring_allreduce_sum(j->r, j->data, j->n, j->step, &j->err);
    if (j->rc != 0) {
        /* Tell the neighbours now rather than after their timeouts. */
        if (j->r->next->fd >= 0)
            shutdown(j->r->next->fd, SHUT_RDWR);
        if (j->r->prev->fd >= 0)
            shutdown(j->r->prev->fd, SHUT_RDWR);
    }
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

int main(void)
{
    log_threshold = LOG_LEVEL_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_sizes),
        cmocka_unit_test(test_ring_many_chunks),
        cmocka_unit_test(test_ring_bytes),
        cmocka_unit_test(test_ring_wrong_step),
        cmocka_unit_test(test_ring_error_frame),
        cmocka_unit_test(test_ring_encrypted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
