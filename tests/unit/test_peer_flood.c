/* test_peer_flood.c - agent/net/peer.h's listener under a flood of silent
 * connections, over real sockets on loopback (127.0.0.x are all loopback
 * to Linux): one address holds at most HANDSHAKES_PER_ADDRESS handshakes
 * and addresses the listener does not expect STRANGER_HANDSHAKES of them
 * all together, the rest of their connections told "busy" at once; the
 * assignment's peers (peer_listener_expect_peers) and the server
 * (peer_listener_expect_server) still find a slot, and the job's own
 * connection completes; with every slot taken the server's probe
 * (server/jobs/peer_probe.h) hears a live, busy node, not an absent one;
 * silent connections are dropped after the first-frame deadline, and then
 * anyone is served. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>

#include "../../common/log.h"
#include "../../server/jobs/peer_probe.h"
#include "peer_fixture.h"

#define PER_ADDRESS 16       /* agent/net/peer_listener.c's HANDSHAKES_PER_ADDRESS */
#define STRANGERS 16         /* and STRANGER_HANDSHAKES */
#define SLOTS 32             /* and HANDSHAKE_THREADS */
#define FIRST_FRAME_S 3.0    /* and FIRST_FRAME_MS */

/* A silent connection to the listener from loopback address `from`. */
static int silent_from(const struct fixture *fx, const char *from)
{
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET,
                                                            .sin_port = htons((uint16_t)fx->port)};
    inet_pton(AF_INET, from, &src.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof src), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&dst, sizeof dst), 0);
    return fd;
}

/* What the listener said within `wait_s` (and 20 ms more once its greeting
 * is in): 1 "busy" (a greeting, an ERROR frame, then the close), 0 a
 * greeting and nothing more, -1 else. */
static int heard(int fd, double wait_s)
{
    unsigned char buf[512];
    size_t got = 0;
    double end = now_s() + wait_s;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (got >= WIRE_HEADER_BYTES + WIRE_NONCE_BYTES && end > now_s() + 0.02)
            end = now_s() + 0.02;
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t k = read(fd, buf + got, sizeof buf - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    struct wire_frame f;
    char why[64];
    if (got < WIRE_HEADER_BYTES + WIRE_NONCE_BYTES || wire_header_decode(buf, WIRE_NONCE_BYTES, &f, why, sizeof why) ||
        f.kind != WIRE_HELLO)
        return -1;
    if (got == WIRE_HEADER_BYTES + WIRE_NONCE_BYTES)
        return 0;
    const unsigned char *e = buf + WIRE_HEADER_BYTES + WIRE_NONCE_BYTES;
    return got >= (size_t)(e - buf) + WIRE_HEADER_BYTES && wire_header_decode(e, 256, &f, why, sizeof why) == 0 &&
                   f.kind == WIRE_ERROR && memmem(e + WIRE_HEADER_BYTES, f.payload_len, "busy", 4) != NULL
               ? 1 : -1;
}

/* Makes 127.0.0.1, where the fixture's dialer connects from, the
 * assignment's peer. */
static void expect_dialer(struct fixture *fx)
{
    struct shoal_err err;
    const char *peers[] = { "", "127.0.0.1:7000", "localhost:7001" };
    assert_int_equal(peer_listener_expect_peers(fx->l, peers, 3, &err), 0);
}

static void test_one_address_cannot_take_every_slot(void **state)
{
    struct fixture *fx = *state;
    int fds[PER_ADDRESS + 12], busy = 0, waiting = 0;
    expect_dialer(fx);
    for (int i = 0; i < PER_ADDRESS + 12; i++)
        fds[i] = silent_from(fx, "127.0.0.2");
    for (int i = 0; i < PER_ADDRESS + 12; i++) {
        int h = heard(fds[i], 0.3);
        busy += h == 1;
        waiting += h == 0;
    }
    assert_int_equal(waiting, PER_ADDRESS);
    assert_int_equal(busy, 12);
    /* the job's own connection, from its peer's address, completes meanwhile */
    struct peer_conn a, b;
    pair(fx, &a, &b);
    peer_close(&a);
    peer_close(&b);
    for (int i = 0; i < PER_ADDRESS + 12; i++)
        close(fds[i]);
}

static void test_strangers_take_only_their_share(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    const char *from[] = { "127.0.0.2", "127.0.0.3" };
    int fds[2 * PER_ADDRESS], busy = 0, waiting = 0;
    expect_dialer(fx);
    assert_int_equal(peer_listener_expect_server(fx->l, "https://127.0.0.5:8443/v1", &err), 0);
    for (int i = 0; i < 2 * PER_ADDRESS; i++)
        fds[i] = silent_from(fx, from[i / PER_ADDRESS]);
    for (int i = 0; i < 2 * PER_ADDRESS; i++) {
        int h = heard(fds[i], 0.2);
        busy += h == 1;
        waiting += h == 0;
    }
    assert_int_equal(waiting, STRANGERS);   /* two addresses used to take all 32 */
    assert_int_equal(busy, 2 * PER_ADDRESS - STRANGERS);
    /* the server finds a slot: greeted, not told busy */
    int server = silent_from(fx, "127.0.0.5");
    assert_int_equal(heard(server, 0.3), 0);
    /* and the assignment's peer completes its connection */
    struct peer_conn a, b;
    pair(fx, &a, &b);
    peer_close(&a);
    peer_close(&b);
    /* once the assignment ends its peers are strangers again */
    assert_int_equal(peer_listener_expect_peers(fx->l, NULL, 0, &err), 0);
    struct peer_auth d = auth_make(JOB, EPOCH, SECRET, ROLE_D, ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &d, ROLE_L, TIMEOUT_MS, &a, &err), -1);
    if (!strstr(err.message, "not expected"))
        fail_msg("dial: %s", err.message);
    const char *bad[] = { "no-port" };
    assert_int_equal(peer_listener_expect_peers(fx->l, bad, 1, &err), -1);
    assert_non_null(strstr(err.message, "no-port"));
    close(server);
    for (int i = 0; i < 2 * PER_ADDRESS; i++)
        close(fds[i]);
}

static void test_every_slot_taken_is_busy_not_absent(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    const char *peers[] = { "127.0.0.4:7000" };
    const char *from[] = { "127.0.0.2", "127.0.0.4" };   /* a stranger's share, then an expected peer's */
    int fds[SLOTS];
    assert_int_equal(peer_listener_expect_peers(fx->l, peers, 1, &err), 0);
    for (int i = 0; i < SLOTS; i++)
        fds[i] = silent_from(fx, from[i / PER_ADDRESS]);
    double t0 = now_s();
    for (int i = 0; i < SLOTS; i++)
        assert_int_equal(heard(fds[i], 0.2), 0);   /* each holds a slot */
    /* the server's probe hears a live node that is busy */
    const char *addrs[] = { fx->addr };
    int ok = PEER_PROBE_SILENT;
    char why[1][PEER_PROBE_WHY_MAX];
    peer_probe_all(addrs, 1, PEER_PROBE_TIMEOUT_MS, &ok, why);
    assert_int_equal(ok, PEER_PROBE_ANSWERED);
    /* a dialer is told why */
    struct peer_conn a, b;
    struct peer_auth d = auth_make(JOB, EPOCH, SECRET, ROLE_D, ROLE_L);
    assert_int_equal(peer_dial(fx->addr, &d, ROLE_L, TIMEOUT_MS, &a, &err), -1);
    if (!strstr(err.message, "busy"))
        fail_msg("dial: %s", err.message);
    /* the silent ones go at the first-frame deadline, and then anyone is served */
    for (int i = 0; i < SLOTS; i++) {
        char c;
        struct pollfd p = {.fd = fds[i], .events = POLLIN};
        assert_int_equal(poll(&p, 1, (int)(FIRST_FRAME_S * 1000) + 3000), 1);
        assert_true(read(fds[i], &c, 1) <= 0);
        close(fds[i]);
    }
    double took = now_s() - t0;
    assert_true(took >= FIRST_FRAME_S - 0.5);
    usleep(1200 * 1000);   /* the accept thread reaps finished handshakes every second */
    pair(fx, &a, &b);
    peer_close(&a);
    peer_close(&b);
}

int main(void)
{
    log_threshold = LOG_LEVEL_ERROR; /* refusals are expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_address_cannot_take_every_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_strangers_take_only_their_share, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_slot_taken_is_busy_not_absent, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
