/* test_peer_stream.c - agent/net/peer.h's streams over real sockets on
 * 127.0.0.1 (peer_fixture.h): frames in order both ways, wrong frames,
 * error frames quoted, a peer that closes or stalls, a bad CRC, a timeout
 * in the middle of a frame. */
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
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "../../agent/net/peer.h"
#include "../../common/crc32c.h"
#include "../../common/log.h"
#include "peer_fixture.h"

/* ---- streams ------------------------------------------------------------ */

#define STREAM_FRAMES 200
#define STREAM_CAP (64u << 10)

static size_t frame_floats(int i)
{
    return (size_t)(i * 977) % (STREAM_CAP / 4) + (i % 3 == 0 ? 0 : 1);
}

static void fill(float *x, size_t n, int i)
{
    for (size_t k = 0; k < n; k++)
        x[k] = (float)(i * 100000 + (int)k);
}

static void streams(struct fixture *fx, struct peer_stream **sa, struct peer_stream **sb,
                    int queue)
{
    struct peer_conn a, b;
    struct shoal_err err;
    pair(fx, &a, &b);
    assert_int_equal(peer_stream_start(&a, STREAM_CAP, queue, sa, &err), 0);
    assert_int_equal(peer_stream_start(&b, STREAM_CAP, queue, sb, &err), 0);
    assert_int_equal(a.fd, -1);
}

struct stream_job {
    struct peer_stream *s;
    uint16_t kind;
    int failures;
};

static void *stream_send_main(void *arg)
{
    struct stream_job *j = arg;
    float *x = malloc(STREAM_CAP);
    struct shoal_err err;
    for (int i = 0; i < STREAM_FRAMES; i++) {
        size_t n = frame_floats(i);
        fill(x, n, i);
        struct wire_frame f = {.kind = j->kind, .dtype = WIRE_F32, .step = 1,
                               .micro_batch = (uint32_t)i, .ndim = 1, .shape = {(uint32_t)n},
                               .payload_len = n * 4};
        if (peer_stream_send(j->s, &f, x, TIMEOUT_MS, &err) != 0)
            j->failures++;
    }
    if (peer_stream_flush(j->s, TIMEOUT_MS, &err) != 0)
        j->failures++;
    free(x);
    return NULL;
}

static void *stream_recv_main(void *arg)
{
    struct stream_job *j = arg;
    float *x = malloc(STREAM_CAP), *want = malloc(STREAM_CAP);
    struct shoal_err err;
    for (int i = 0; i < STREAM_FRAMES; i++) {
        size_t n = frame_floats(i);
        fill(want, n, i);
        if (peer_stream_recv(j->s, j->kind, WIRE_F32, 1, (uint32_t)i, x, n * 4, TIMEOUT_MS, &err) != 0 ||
            memcmp(x, want, n * 4) != 0)
            j->failures++;
    }
    free(x);
    free(want);
    return NULL;
}

static void test_stream_in_order_both_ways(void **state)
{
    struct fixture *fx = *state;
    struct peer_stream *sa, *sb;
    streams(fx, &sa, &sb, 3);
    struct stream_job fwd_tx = {.s = sa, .kind = WIRE_ACTIVATION},
                      fwd_rx = {.s = sb, .kind = WIRE_ACTIVATION},
                      back_tx = {.s = sb, .kind = WIRE_ACTIVATION_GRAD},
                      back_rx = {.s = sa, .kind = WIRE_ACTIVATION_GRAD};
    pthread_t t[4];
    pthread_create(&t[0], NULL, stream_send_main, &fwd_tx);
    pthread_create(&t[1], NULL, stream_recv_main, &fwd_rx);
    pthread_create(&t[2], NULL, stream_send_main, &back_tx);
    pthread_create(&t[3], NULL, stream_recv_main, &back_rx);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(fwd_tx.failures + fwd_rx.failures + back_tx.failures + back_rx.failures, 0);
    assert_string_equal(peer_stream_addr(sb), peer_stream_addr(sb)); /* non-NULL, stable */
    assert_non_null(strstr(peer_stream_addr(sa), "127.0.0.1:"));
    peer_stream_stop(sa);
    peer_stream_stop(sb);
}

static void test_stream_wrong_frame(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    float x[16] = {0}, y[16];
    /* expected: ACTIVATION F32 step 5 micro-batch 2, 64 bytes; each case
     * changes one thing about what is waited for (a receiver that expects
     * bf16 or int8 from its assignment refuses an f32 frame, and so on) */
    struct {
        uint16_t kind, dtype;
        uint64_t step;
        uint32_t mb;
        size_t len;
    } cases[] = {{WIRE_ACTIVATION_GRAD, WIRE_F32, 5, 2, 64}, {WIRE_ACTIVATION, WIRE_F32, 6, 2, 64},
                 {WIRE_ACTIVATION, WIRE_F32, 5, 3, 64}, {WIRE_ACTIVATION, WIRE_F32, 5, 2, 60},
                 {WIRE_ACTIVATION, WIRE_BF16, 5, 2, 64}, {WIRE_ACTIVATION, WIRE_Q8, 5, 2, 64}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct peer_stream *sa, *sb;
        streams(fx, &sa, &sb, 2);
        struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .step = 5,
                               .micro_batch = 2, .ndim = 2, .shape = {4, 4}, .payload_len = 64};
        assert_int_equal(peer_stream_send(sa, &f, x, TIMEOUT_MS, &err), 0);
        assert_int_equal(peer_stream_recv(sb, cases[i].kind, cases[i].dtype, cases[i].step,
                                          cases[i].mb, y, cases[i].len, TIMEOUT_MS, &err), -1);
        assert_string_equal(err.code, "peer_protocol");
        assert_non_null(strstr(err.message, "127.0.0.1:"));
        /* the stream stays failed */
        assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_F32, 5, 2, y, 64, 100, &err), -1);
        assert_string_equal(err.code, "peer_protocol");
        assert_int_equal(peer_stream_send(sb, &f, x, 100, &err), -1);
        peer_stream_stop(sa);
        peer_stream_stop(sb);
    }
}

static void test_stream_error_frame_quoted(void **state)
{
    struct fixture *fx = *state;
    struct peer_stream *sa, *sb;
    struct shoal_err err;
    streams(fx, &sa, &sb, 2);
    const char reason[] = "stage 2 ran out of memory";
    struct wire_frame f = {.kind = WIRE_ERROR, .dtype = WIRE_BYTES,
                           .payload_len = sizeof reason - 1};
    assert_int_equal(peer_stream_send(sa, &f, reason, TIMEOUT_MS, &err), 0);
    float y[4];
    assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_F32, 1, 0, y, sizeof y, TIMEOUT_MS, &err),
                     -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "'stage 2 ran out of memory'"));
    peer_stream_stop(sa);
    peer_stream_stop(sb);
}

static void test_stream_peer_closes(void **state)
{
    struct fixture *fx = *state;
    struct peer_stream *sa, *sb;
    struct shoal_err err;
    streams(fx, &sa, &sb, 2);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .step = 3, .ndim = 1,
                           .shape = {8}, .payload_len = sizeof x};
    assert_int_equal(peer_stream_send(sa, &f, x, TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_stream_flush(sa, TIMEOUT_MS, &err), 0);
    peer_stream_stop(sa);
    /* the frame sent before the close still arrives, then the close */
    assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_F32, 3, 0, y, sizeof y, TIMEOUT_MS, &err),
                     0);
    assert_memory_equal(x, y, sizeof x);
    /* no deadline (-1): the close ends the wait */
    assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_F32, 3, 1, y, sizeof y, -1, &err), -1);
    assert_string_equal(err.code, "peer_closed");
    assert_non_null(strstr(err.message, peer_stream_addr(sb)));
    /* a neighbour that finished closes: nothing of ours was left to send */
    assert_int_equal(peer_stream_flush(sb, TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_stream_send(sb, &f, x, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_closed");
    peer_stream_stop(sb);
}

static void test_stream_stall_times_out(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct peer_stream *sb;
    struct shoal_err err;
    pair(fx, &a, &b);
    assert_int_equal(peer_stream_start(&b, STREAM_CAP, 2, &sb, &err), 0);
    float y[4];
    double t0 = now_s();
    assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_F32, 1, 0, y, sizeof y, 300, &err), -1);
    double dt = now_s() - t0;
    assert_string_equal(err.code, "peer_timeout");
    assert_true(dt >= 0.29 && dt < 2.0);
    double sw, rw;
    peer_stream_take_waits(sb, &sw, &rw);
    assert_true(sw == 0.0);
    assert_true(rw >= 0.29 && rw < 2.0);
    peer_stream_take_waits(sb, &sw, &rw);
    assert_true(rw == 0.0);

    /* sending to a peer that does not read: the queue fills, then times out */
    size_t n = 4u << 20;
    unsigned char *big = calloc(1, n);
    struct wire_frame f = {.kind = WIRE_PROBE, .dtype = WIRE_BYTES, .payload_len = n};
    int rc = 0, sent = 0;
    for (; sent < 64 && rc == 0; sent++)
        rc = peer_stream_send(sb, &f, big, 200, &err);
    assert_int_equal(rc, -1);
    assert_string_equal(err.code, "peer_timeout");
    assert_true(sent > 2);
    peer_stream_take_waits(sb, &sw, &rw);
    assert_true(sw >= 0.19);
    free(big);
    peer_stream_stop(sb);
    peer_close(&a);
}

static void test_stream_bad_crc(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct peer_stream *sb;
    struct shoal_err err;
    pair(fx, &a, &b);
    assert_int_equal(peer_stream_start(&b, STREAM_CAP, 2, &sb, &err), 0);
    float x[64] = {1};
    struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .job_id = JOB,
                           .epoch = EPOCH, .step = 1, .ndim = 1, .shape = {64},
                           .payload_len = sizeof x};
    f.payload_crc = crc32c(0, x, sizeof x) + 1;
    unsigned char hdr[WIRE_HEADER_BYTES];
    wire_header_encode(&f, hdr);
    write_all(a.fd, hdr, sizeof hdr);
    write_all(a.fd, x, sizeof x);
    float y[64];
    assert_int_equal(peer_stream_recv(sb, WIRE_ACTIVATION, WIRE_F32, 1, 0, y, sizeof y, TIMEOUT_MS, &err),
                     -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "CRC"));
    peer_stream_stop(sb);
    peer_close(&a);
}

/* Writes one frame on a raw fd in three parts with pauses between them. */
struct slow_writer {
    int fd;
    const unsigned char *frame;
    size_t cut1, cut2, len;
    int pause1_ms, pause2_ms;
};

static void *slow_writer_main(void *arg)
{
    struct slow_writer *w = arg;
    usleep((useconds_t)w->pause1_ms * 1000);
    write_all(w->fd, w->frame, w->cut1);
    usleep((useconds_t)w->pause2_ms * 1000);
    write_all(w->fd, w->frame + w->cut1, w->cut2 - w->cut1);
    usleep((useconds_t)w->pause2_ms * 1000);
    write_all(w->fd, w->frame + w->cut2, w->len - w->cut2);
    return NULL;
}

static void test_stream_timeout_mid_frame_keeps_frame(void **state)
{
    /* The owner waits (its buffer posted), the frame starts arriving into
     * it, the owner's deadline passes mid-payload: the call fails with a
     * timeout, the bytes so far move to a slot, and the next call gets the
     * whole frame intact. */
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct peer_stream *sb;
    struct shoal_err err;
    pair(fx, &a, &b);
    size_t n = 4u << 20;
    assert_int_equal(peer_stream_start(&b, n, 2, &sb, &err), 0);
    unsigned char *frame = malloc(WIRE_HEADER_BYTES + n), *y = malloc(n);
    assert_non_null(frame);
    assert_non_null(y);
    for (size_t i = 0; i < n; i++)
        frame[WIRE_HEADER_BYTES + i] = (unsigned char)(i * 7 + i / 4096);
    struct wire_frame f = {.kind = WIRE_PROBE, .dtype = WIRE_BYTES, .job_id = JOB,
                           .epoch = EPOCH, .step = 2, .micro_batch = 1, .payload_len = n};
    f.payload_crc = crc32c(0, frame + WIRE_HEADER_BYTES, n);
    wire_header_encode(&f, frame);
    struct slow_writer w = {.fd = a.fd, .frame = frame, .cut1 = WIRE_HEADER_BYTES + n / 3,
                            .cut2 = WIRE_HEADER_BYTES + n / 2, .len = WIRE_HEADER_BYTES + n,
                            .pause1_ms = 50, .pause2_ms = 400};
    pthread_t t;
    pthread_create(&t, NULL, slow_writer_main, &w);
    assert_int_equal(peer_stream_recv(sb, WIRE_PROBE, WIRE_BYTES, 2, 1, y, n, 250, &err), -1);
    assert_string_equal(err.code, "peer_timeout");
    memset(y, 0, n);
    assert_int_equal(peer_stream_recv(sb, WIRE_PROBE, WIRE_BYTES, 2, 1, y, n, TIMEOUT_MS, &err), 0);
    assert_memory_equal(y, frame + WIRE_HEADER_BYTES, n);
    pthread_join(t, NULL);
    free(frame);
    free(y);
    peer_stream_stop(sb);
    peer_close(&a);
}


int main(void)
{
    log_threshold = LOG_LEVEL_ERROR; /* refusals are expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stream_in_order_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_wrong_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_error_frame_quoted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_peer_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_stall_times_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_bad_crc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_timeout_mid_frame_keeps_frame, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
