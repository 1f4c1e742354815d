/* test_peer.c - agent/net/peer.h over real sockets on 127.0.0.1 with a real
 * listener: the hello handshake and its refusals, probe sessions, framed
 * sends and receives with every kind of bad frame, sendrecv without
 * deadlock, another wire version refused.  Streams: test_peer_stream.c. */
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

static void test_handshake_proves_roles(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b, c;
    struct shoal_err err;
    pair(fx, &a, &b);
    assert_string_equal(a.role, ROLE_L); /* the listener proved its role to us */
    assert_string_equal(b.role, ROLE_D); /* and we ours to it */
    assert_int_equal(a.job_id, JOB);
    assert_int_equal(b.epoch, EPOCH);
    assert_true(strstr(b.addr, "127.0.0.1:") != NULL);

    /* Dialing a node that proves another role than the one we meant: our
     * link to "stage=2 replica=0" keyed with the listener's key for its
     * link to us (keys are per link: only a misconfigured or lying node
     * does that). */
    struct peer_auth l = auth_make(JOB, EPOCH, SECRET, ROLE_L, ROLE_D);
    struct peer_auth d = {.job_id = JOB, .epoch = EPOCH, .role = ROLE_D};
    assert_int_equal(peer_auth_link(&d, "stage=2 replica=0", l.links[0].key, l.links[0].key_len), 0);
    assert_int_equal(peer_dial(fx->addr, &d, "stage=2 replica=0", TIMEOUT_MS, &c, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_non_null(strstr(err.message, fx->addr));
    assert_non_null(strstr(err.message, "stage=2 replica=0"));
    assert_int_equal(c.fd, -1);
    peer_close(&a);
    peer_close(&b);
}

static void test_wrong_secret_refused(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct shoal_err err;
    struct peer_auth d = auth_make(JOB, EPOCH, "wrong secret", ROLE_D, ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &d, ROLE_L, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_non_null(strstr(err.message, fx->addr));
    assert_non_null(strstr(err.message, "MAC"));
    assert_int_equal(wait_refused(fx->l, 1), 1);
    /* nothing was parked for that role */
    assert_int_equal(peer_listener_take(fx->l, ROLE_D, 100, &b, &err), -1);
    assert_string_equal(err.code, "peer_timeout");
}

/* Every link has its own key, given only to its two ends: a member of the
 * job cannot pose as another member (with one job secret for all, it
 * could), and a tasklet the listener has no link to is refused. */
static void test_member_cannot_pose(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct shoal_err err;
    const char *role_x = "stage=1 replica=1 node=9";   /* the listener's ring neighbour */
    struct peer_auth l = auth_make(JOB, EPOCH, SECRET, ROLE_L, ROLE_D);
    peer_keys_link(&l, SECRET, role_x);
    peer_listener_expect(fx->l, &l);

    /* x as itself */
    struct peer_auth x = auth_make(JOB, EPOCH, SECRET, role_x, ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &x, ROLE_L, TIMEOUT_MS, &a, &err), 0);
    assert_int_equal(peer_listener_take(fx->l, role_x, TIMEOUT_MS, &b, &err), 0);
    peer_close(&a);
    peer_close(&b);

    /* x claiming to be the listener's previous stage, with the only key of
     * a link to the listener it has */
    struct peer_auth posing = {.job_id = JOB, .epoch = EPOCH, .role = ROLE_D};
    assert_int_equal(peer_auth_link(&posing, ROLE_L, x.links[0].key, x.links[0].key_len), 0);
    assert_int_equal(peer_dial(fx->addr, &posing, ROLE_L, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_non_null(strstr(err.message, "MAC"));
    assert_int_equal(wait_refused(fx->l, 1), 1);
    assert_int_equal(peer_listener_take(fx->l, ROLE_D, 100, &b, &err), -1);
    assert_string_equal(err.code, "peer_timeout");

    /* a tasklet of the job that is not the listener's neighbour, even
     * with a key derived from the job secret */
    struct peer_auth y = auth_make(JOB, EPOCH, SECRET, "stage=3 replica=0 node=4", ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &y, ROLE_L, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_non_null(strstr(err.message, "no link to that role"));
    assert_int_equal(wait_refused(fx->l, 2), 2);

    /* and a dialer with no link to the role it dials does not send a hello */
    assert_int_equal(peer_dial(fx->addr, &y, ROLE_D, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_non_null(strstr(err.message, "no link to that role"));
    assert_int_equal(a.fd, -1);
}

static void test_wrong_job_or_epoch_refused(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a;
    struct shoal_err err;
    struct peer_auth d = auth_make(JOB, EPOCH + 1, SECRET, ROLE_D, ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &d, ROLE_L, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    d = auth_make(JOB + 1, EPOCH, SECRET, ROLE_D, ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &d, ROLE_L, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_int_equal(wait_refused(fx->l, 2), 2);

    /* expecting nothing: every job connection is refused */
    peer_listener_expect(fx->l, NULL);
    d = auth_make(JOB, EPOCH, SECRET, ROLE_D, ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &d, ROLE_L, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    assert_int_equal(wait_refused(fx->l, 3), 3);
}

static void test_expect_closes_parked(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct shoal_err err;
    struct peer_auth d = auth_make(JOB, EPOCH, SECRET, ROLE_D, ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &d, ROLE_L, TIMEOUT_MS, &a, &err), 0);
    /* a new epoch: the parked connection of the old one is closed */
    struct peer_auth next = auth_make(JOB, EPOCH + 1, SECRET, ROLE_L, ROLE_D);
    /* (if its hello is still being answered, parking checks the new expectation) */
    peer_listener_expect(fx->l, &next);
    assert_int_equal(peer_listener_take(fx->l, ROLE_D, 100, &b, &err), -1);
    struct wire_frame f;
    assert_int_equal(peer_recv(&a, &f, NULL, 0, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_closed");
    peer_close(&a);
}

static void test_garbage_dialer_dropped(void **state)
{
    struct fixture *fx = *state;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx->port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    char junk[WIRE_HEADER_BYTES]; /* exactly one header's worth, so the close is a FIN */
    memset(junk, 'x', sizeof junk);
    memcpy(junk, "GET / HTTP/1.1\r\n", 16);
    write_all(fd, junk, sizeof junk);
    assert_int_equal(wait_refused(fx->l, 1), 1);
    /* the listener closed it after its greeting */
    char buf[512];
    ssize_t k, total = 0;
    while ((k = read(fd, buf, sizeof buf)) > 0)
        total += k;
    assert_int_equal(total, WIRE_HEADER_BYTES + WIRE_NONCE_BYTES);
    close(fd);

    /* and keeps serving */
    struct peer_conn a, b;
    pair(fx, &a, &b);
    peer_close(&a);
    peer_close(&b);
}

static void test_probe_session(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn c;
    struct shoal_err err;
    struct wire_frame f;
    unsigned char pong[64];
    assert_int_equal(peer_dial(fx->addr, NULL, NULL, TIMEOUT_MS, &c, &err), 0);
    assert_string_equal(c.role, "");

    const char ping[] = "ping 0123456789";
    f = (struct wire_frame){.kind = WIRE_PING, .dtype = WIRE_BYTES, .step = 42,
                            .payload_len = sizeof ping};
    assert_int_equal(peer_send(&c, &f, ping, TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_recv(&c, &f, pong, sizeof pong, TIMEOUT_MS, &err), 0);
    assert_int_equal(f.kind, WIRE_PONG);
    assert_int_equal(f.step, 42);
    assert_int_equal(f.payload_len, sizeof ping);
    assert_memory_equal(pong, ping, sizeof ping);

    /* a burst: three 1 MiB probe frames, the last with micro_batch 1 */
    size_t n = 1u << 20;
    unsigned char *probe = calloc(1, n);
    assert_non_null(probe);
    for (int i = 0; i < 3; i++) {
        f = (struct wire_frame){.kind = WIRE_PROBE, .dtype = WIRE_BYTES, .step = 7,
                                .micro_batch = i == 2, .payload_len = n};
        assert_int_equal(peer_send(&c, &f, probe, TIMEOUT_MS, &err), 0);
    }
    assert_int_equal(peer_recv(&c, &f, pong, sizeof pong, TIMEOUT_MS, &err), 0);
    assert_int_equal(f.kind, WIRE_PONG);
    assert_int_equal(f.payload_len, 0);
    assert_int_equal(f.step, 7);

    /* a PING over 64 bytes ends the session */
    f = (struct wire_frame){.kind = WIRE_PING, .dtype = WIRE_BYTES, .payload_len = 65};
    assert_int_equal(peer_send(&c, &f, probe, TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_recv(&c, &f, pong, sizeof pong, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_closed");
    free(probe);
    peer_close(&c);

    uint64_t sessions, refused;
    peer_listener_counts(fx->l, &sessions, &refused);
    assert_int_equal(sessions, 1);
    assert_int_equal(refused, 0);
}

struct sender {
    struct peer_conn *c;
    struct wire_frame f;
    const void *payload;
    int rc;
    struct shoal_err err;
};

static void *sender_main(void *arg)
{
    struct sender *s = arg;
    s->rc = peer_send(s->c, &s->f, s->payload, TIMEOUT_MS, &s->err);
    return NULL;
}

static void test_send_recv_big_frame(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct shoal_err err;
    pair(fx, &a, &b);
    size_t floats = 8 * 256 * 1024; /* (B=8, T=256, C=1024): 8 MiB */
    float *x = malloc(floats * 4), *y = malloc(floats * 4);
    assert_non_null(x);
    assert_non_null(y);
    for (size_t i = 0; i < floats; i++)
        x[i] = (float)i * 0.5f;
    uint64_t sent0 = a.bytes_sent, received0 = b.bytes_received; /* after the hello */
    struct sender s = {.c = &a, .payload = x,
                       .f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .step = 9,
                             .micro_batch = 2, .ndim = 3, .shape = {8, 256, 1024},
                             .payload_len = floats * 4}};
    pthread_t t;
    pthread_create(&t, NULL, sender_main, &s);
    struct wire_frame f;
    int rc = peer_recv(&b, &f, y, floats * 4, TIMEOUT_MS, &err);
    pthread_join(t, NULL);
    assert_int_equal(s.rc, 0);
    assert_int_equal(rc, 0);
    assert_int_equal(f.kind, WIRE_ACTIVATION);
    assert_int_equal(f.step, 9);
    assert_int_equal(f.micro_batch, 2);
    assert_int_equal(f.job_id, JOB);
    assert_int_equal(f.shape[2], 1024);
    assert_int_equal(f.payload_crc, crc32c(0, x, floats * 4));
    assert_memory_equal(x, y, floats * 4);
    assert_int_equal(a.bytes_sent - sent0, WIRE_HEADER_BYTES + floats * 4);
    assert_int_equal(b.bytes_received - received0, WIRE_HEADER_BYTES + floats * 4);

    /* a payload over the receiver's cap is refused from the header */
    pthread_create(&t, NULL, sender_main, &s);
    rc = peer_recv(&b, &f, y, floats * 4 - 4, TIMEOUT_MS, &err);
    peer_close(&b); /* unblocks the sender */
    pthread_join(t, NULL);
    assert_int_equal(rc, -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "limit"));
    free(x);
    free(y);
    peer_close(&a);
}

static void test_bad_payload_crc(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct shoal_err err;
    pair(fx, &a, &b);
    float payload[16] = {1, 2, 3};
    struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .job_id = JOB,
                           .epoch = EPOCH, .ndim = 1, .shape = {16}, .payload_len = sizeof payload};
    f.payload_crc = crc32c(0, payload, sizeof payload) ^ 1;
    unsigned char hdr[WIRE_HEADER_BYTES];
    wire_header_encode(&f, hdr);
    write_all(a.fd, hdr, sizeof hdr);
    write_all(a.fd, payload, sizeof payload);
    float got[16];
    assert_int_equal(peer_recv(&b, &f, got, sizeof got, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "CRC"));
    assert_non_null(strstr(err.message, "127.0.0.1:"));

    /* a corrupted header is refused before its payload is read */
    wire_header_encode(&f, hdr);
    hdr[30] ^= 0x40;
    write_all(a.fd, hdr, sizeof hdr);
    assert_int_equal(peer_recv(&b, &f, got, sizeof got, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "header CRC"));
    peer_close(&a);
    peer_close(&b);
}

static void test_frame_for_other_job_or_epoch(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    struct shoal_err err;
    struct wire_frame f = {.kind = WIRE_ACTIVATION, .dtype = WIRE_F32, .ndim = 1};
    pair(fx, &a, &b);
    /* Empty payloads, so the stream stays in step after each refusal. */
    a.job_id = JOB + 1;
    assert_int_equal(peer_send(&a, &f, NULL, TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_recv(&b, &f, NULL, 0, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "job 8"));
    a.job_id = JOB;
    a.epoch = EPOCH + 1;
    assert_int_equal(peer_send(&a, &f, NULL, TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_recv(&b, &f, NULL, 0, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_protocol");
    assert_non_null(strstr(err.message, "epoch 4"));
    a.epoch = EPOCH;
    assert_int_equal(peer_send(&a, &f, NULL, TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_recv(&b, &f, NULL, 0, TIMEOUT_MS, &err), 0);
    peer_close(&a);
    peer_close(&b);
}

/* ---- sendrecv ----------------------------------------------------------- */

struct exchanger {
    struct peer_conn *c;
    const float *out;
    float *in;
    size_t floats;
    int rc;
    struct shoal_err err;
};

static void *exchanger_main(void *arg)
{
    struct exchanger *x = arg;
    struct wire_frame sf = {.kind = WIRE_ALLREDUCE, .dtype = WIRE_F32, .step = 1, .ndim = 1,
                            .shape = {(uint32_t)x->floats}, .payload_len = x->floats * 4};
    struct wire_frame rf;
    x->rc = peer_sendrecv(x->c, &sf, x->out, x->c, &rf, x->in, x->floats * 4, 20000, &x->err);
    if (x->rc == 0 && (rf.kind != WIRE_ALLREDUCE || rf.payload_len != x->floats * 4))
        x->rc = -2;
    return NULL;
}

static void test_sendrecv_both_ways_no_deadlock(void **state)
{
    struct fixture *fx = *state;
    struct peer_conn a, b;
    pair(fx, &a, &b);
    size_t floats = 8u << 20; /* 32 MiB each way, far over the socket buffers */
    float *ao = malloc(floats * 4), *ai = malloc(floats * 4);
    float *bo = malloc(floats * 4), *bi = malloc(floats * 4);
    assert_true(ao && ai && bo && bi);
    for (size_t i = 0; i < floats; i++) {
        ao[i] = (float)i;
        bo[i] = -(float)i;
    }
    struct exchanger xa = {.c = &a, .out = ao, .in = ai, .floats = floats};
    struct exchanger xb = {.c = &b, .out = bo, .in = bi, .floats = floats};
    pthread_t t;
    pthread_create(&t, NULL, exchanger_main, &xb);
    exchanger_main(&xa);
    pthread_join(t, NULL);
    if (xa.rc || xb.rc)
        fail_msg("sendrecv: %s / %s", xa.err.message, xb.err.message);
    assert_memory_equal(ai, bo, floats * 4);
    assert_memory_equal(bi, ao, floats * 4);
    free(ao);
    free(ai);
    free(bo);
    free(bi);
    peer_close(&a);
    peer_close(&b);
}

/* A header of another wire version, re-signed so that only the version is
 * wrong. */
static void old_hello(unsigned char h[WIRE_HEADER_BYTES], uint64_t payload_len)
{
    struct wire_frame f = {.kind = WIRE_HELLO, .dtype = WIRE_BYTES, .payload_len = payload_len};
    uint16_t v2 = 2;
    wire_header_encode(&f, h);
    memcpy(h + 4, &v2, 2);
    uint32_t c = crc32c(0, h, 68);
    memcpy(h + 68, &c, 4);
}

/* A listener of wire version 2: greets every dialer with its old hello. */
static void *old_listener_main(void *arg)
{
    int lfd = *(int *)arg, fd = accept(lfd, NULL, NULL);
    unsigned char h[WIRE_HEADER_BYTES + WIRE_NONCE_BYTES];
    old_hello(h, WIRE_NONCE_BYTES);
    memset(h + WIRE_HEADER_BYTES, 0x42, WIRE_NONCE_BYTES);
    if (fd >= 0) {
        write_all(fd, h, sizeof h);
        char buf[256];
        while (read(fd, buf, sizeof buf) > 0)
            ;
        close(fd);
    }
    return NULL;
}

/* Agents of different wire versions refuse each other, saying so: a dialer
 * meeting an older listener names both versions; an older dialer's hello
 * is refused by the listener. */
static void test_other_wire_version_refused(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn c;
    unsigned port;
    int lfd = listen_any(&port);
    pthread_t t;
    pthread_create(&t, NULL, old_listener_main, &lfd);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    struct peer_auth a = auth_make(JOB, EPOCH, SECRET, ROLE_D, ROLE_L);
    assert_int_equal(peer_dial(addr, &a, ROLE_L, TIMEOUT_MS, &c, &err), -1);
    char want[64];
    snprintf(want, sizeof want, "wire version 2, this agent %d", WIRE_VERSION);
    if (!strstr(err.message, want))
        fail_msg("dialing an older listener said: %s", err.message);
    pthread_join(t, NULL);
    close(lfd);

    /* an older dialer's hello, after our listener's greeting */
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx->port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    unsigned char greeting[WIRE_HEADER_BYTES + WIRE_NONCE_BYTES], h[WIRE_HEADER_BYTES];
    size_t got = 0;
    while (got < sizeof greeting) {
        ssize_t k = read(fd, greeting + got, sizeof greeting - got);
        assert_true(k > 0);
        got += (size_t)k;
    }
    old_hello(h, 0);
    write_all(fd, h, sizeof h);
    assert_int_equal(wait_refused(fx->l, 1), 1);
    close(fd);
}

static void test_dial_errors(void **state)
{
    (void)state;
    struct peer_conn c;
    struct shoal_err err;
    assert_int_equal(peer_dial("no-port", NULL, NULL, 1000, &c, &err), -1);
    assert_string_equal(err.code, "peer_io");
    assert_int_equal(peer_dial("127.0.0.1:99999", NULL, NULL, 1000, &c, &err), -1);
    /* a port nobody listens on */
    unsigned port;
    int fd = bound_not_listening(&port);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
    assert_int_equal(peer_dial(addr, NULL, NULL, 1000, &c, &err), -1);
    assert_string_equal(err.code, "peer_io");
    assert_non_null(strstr(err.message, addr));
    assert_int_equal(c.fd, -1);
    close(fd);
}

int main(void)
{
    log_threshold = LOG_LEVEL_ERROR; /* refusals are expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_handshake_proves_roles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_secret_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_cannot_pose, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_job_or_epoch_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expect_closes_parked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_dialer_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_session, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_recv_big_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_payload_crc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frame_for_other_job_or_epoch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sendrecv_both_ways_no_deadlock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_wire_version_refused, setup, teardown),
        cmocka_unit_test(test_dial_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
