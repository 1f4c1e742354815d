/* test_relay.c - shoal-relay (relay/relay.h) and the agents' relayed
 * connections (peer_dial_relayed, peer_listener_relay), over real sockets
 * on 127.0.0.1: a relay pairs the two ends of a link the server's tickets
 * admit and forwards frames both ways, always sealed; the two connections
 * of one pair of tasklets are told apart by their channel; an end with
 * another key is never paired; /metrics counts what was carried; a relay
 * that stops fails the connection; an agent measures its link to the relay
 * through its echo (with the server's probe ticket, not without); and a
 * relay of this test's own that flips one bit is caught with "peer_auth",
 * in the hello and in a sealed frame.  What the relay admits and how long
 * it holds it: test_relay_admission.c. */
#include "../relay_fixture.h"

#include <pthread.h>

#include "../../agent/net/probe.h"
#include "../../common/log.h"

static void test_relay_pairs_and_forwards(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    for (int encrypt = 0; encrypt <= 1; encrypt++) {
        struct peer_auth d = auth_make(ROLE_D, SECRET, encrypt);
        if (relayed(fx, fx->relay_addr, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
            fail_msg("relayed (encrypt %d): %s", encrypt, err.message);
        assert_string_equal(a.role, ROLE_L);
        assert_string_equal(b.role, ROLE_D);
        /* sealed whatever the ends asked for */
        assert_non_null(a.seal);
        assert_non_null(b.seal);
        talk(&a, &b, encrypt ? "asked to seal, through the relay" : "not asked to, through the relay");
        peer_close(&a);
        peer_close(&b);
    }
    struct relay_counts k;
    relay_counts(fx->relay, &k);
    assert_int_equal(k.pairs_total, 2);
    assert_true(k.bytes_total > 2 * 2 * WIRE_HEADER_BYTES);
    assert_int_equal(k.refused_total, 0);
}

/* Both connections of one pair of tasklets (a ring of two: an edge each
 * way, here both dialled by the same end) are paired and taken by channel,
 * whichever the relay joins first. */
static void test_channels_keep_connections_apart(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a1, b1, a2, b2;
    struct peer_auth d = auth_make(ROLE_D, SECRET, 1);
    struct relay_ticket ls = ticket(JOB, RELAY_SIDE_LISTENER, WIRE_CHANNEL_SENDS);
    struct relay_ticket lr = ticket(JOB, RELAY_SIDE_LISTENER, WIRE_CHANNEL_RECEIVES);
    struct relay_ticket ds = ticket(JOB, RELAY_SIDE_DIALER, WIRE_CHANNEL_SENDS);
    struct relay_ticket dr = ticket(JOB, RELAY_SIDE_DIALER, WIRE_CHANNEL_RECEIVES);
    assert_int_equal(peer_listener_relay(fx->l, fx->relay_addr, &ls, ROLE_D, WIRE_CHANNEL_SENDS, TIMEOUT_MS,
                                         TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_listener_relay(fx->l, fx->relay_addr, &lr, ROLE_D, WIRE_CHANNEL_RECEIVES, TIMEOUT_MS,
                                         TIMEOUT_MS, &err), 0);
    if (peer_dial_relayed(fx->relay_addr, &dr, &d, ROLE_L, WIRE_CHANNEL_RECEIVES, TIMEOUT_MS, &a2, &err) != 0 ||
        peer_dial_relayed(fx->relay_addr, &ds, &d, ROLE_L, WIRE_CHANNEL_SENDS, TIMEOUT_MS, &a1, &err) != 0)
        fail_msg("dial: %s", err.message);
    assert_int_equal(peer_listener_take_stop(fx->l, ROLE_D, WIRE_CHANNEL_SENDS, TIMEOUT_MS, NULL, &b1, &err), 0);
    assert_int_equal(peer_listener_take_stop(fx->l, ROLE_D, WIRE_CHANNEL_RECEIVES, TIMEOUT_MS, NULL, &b2, &err), 0);
    assert_int_equal(b1.channel, WIRE_CHANNEL_SENDS);
    assert_int_equal(b2.channel, WIRE_CHANNEL_RECEIVES);
    talk(&a1, &b1, "channel one");
    talk(&a2, &b2, "channel two");
    peer_close(&a1), peer_close(&b1), peer_close(&a2), peer_close(&b2);
}

/* Direct connections too: two from one role on two channels are both
 * parked, each taken by its own channel. */
static void test_channels_direct(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a1, b1, a2, b2;
    unsigned lport;
    struct peer_listener *l;
    char addr[32];
    assert_int_equal(peer_listener_start("127.0.0.1:0", &l, &lport, &err), 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", lport);
    struct peer_auth e = auth_make(ROLE_L, SECRET, 0), d = auth_make(ROLE_D, SECRET, 0);
    peer_listener_expect(l, &e);
    assert_int_equal(peer_dial_channel(addr, &d, ROLE_L, WIRE_CHANNEL_SENDS, TIMEOUT_MS, &a1, &err), 0);
    assert_int_equal(peer_dial_channel(addr, &d, ROLE_L, WIRE_CHANNEL_RECEIVES, TIMEOUT_MS, &a2, &err), 0);
    assert_int_equal(peer_listener_take_stop(l, ROLE_D, WIRE_CHANNEL_RECEIVES, TIMEOUT_MS, NULL, &b2, &err), 0);
    assert_int_equal(peer_listener_take_stop(l, ROLE_D, WIRE_CHANNEL_SENDS, TIMEOUT_MS, NULL, &b1, &err), 0);
    talk(&a1, &b1, "one");
    talk(&a2, &b2, "two");
    /* a channel nobody dialled is not handed out */
    assert_int_equal(peer_listener_take_stop(l, ROLE_D, WIRE_CHANNEL_STAGE, 200, NULL, &b1, &err), -1);
    peer_close(&a1), peer_close(&b1), peer_close(&a2), peer_close(&b2);
    peer_listener_stop(l);
    (void)fx;
}

/* An end with another key makes another token: the relay never pairs it,
 * and says so when its wait is over. */
static void test_other_key_is_never_paired(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a;
    struct peer_auth d = auth_make(ROLE_D, "another secret", 0);
    struct relay_ticket tl = ticket(JOB, RELAY_SIDE_LISTENER, WIRE_CHANNEL_STAGE);
    struct relay_ticket td = ticket(JOB, RELAY_SIDE_DIALER, WIRE_CHANNEL_STAGE);
    assert_int_equal(peer_listener_relay(fx->l, fx->relay_addr, &tl, ROLE_D, WIRE_CHANNEL_STAGE, TIMEOUT_MS,
                                         TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_dial_relayed(fx->relay_addr, &td, &d, ROLE_L, WIRE_CHANNEL_STAGE, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "relay_refused");
    assert_non_null(strstr(err.message, "no partner came within 2 s"));
    struct relay_counts k;
    relay_counts(fx->relay, &k);
    assert_int_equal(k.pairs_total, 0);
}

/* GET /metrics on the relay's port: Prometheus text with the job's bytes. */
static void test_metrics(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    char text[8192];
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    if (relayed(fx, fx->relay_addr, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("relayed: %s", err.message);
    talk(&a, &b, "counted");
    metrics(fx, text, sizeof text);
    assert_non_null(strstr(text, "shoal_relay_pairs_total 1\n"));
    assert_non_null(strstr(text, "shoal_relay_links 1\n"));
    assert_non_null(strstr(text, "shoal_relay_job_bytes_total{job=\"11\"} "));
    peer_close(&a), peer_close(&b);
}

/* A relay that stops takes its links with it: the next receive fails. */
static void test_relay_stop_fails_the_link(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    char buf[16];
    struct peer_auth d = auth_make(ROLE_D, SECRET, 1);
    if (relayed(fx, fx->relay_addr, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("relayed: %s", err.message);
    talk(&a, &b, "before");
    relay_stop(fx->relay);
    struct relay_config cfg = {.listen = "127.0.0.1:0", .max_connections = 8, .max_connections_per_address = 8,
                               .max_waiting_per_address = 8, .max_links_per_job = 8, .pair_wait_s = 1,
                               .idle_timeout_s = 60, .max_job_series = 8, .job_series_ttl_s = 60};
    unsigned port;
    assert_int_equal(relay_secret_set(RELAY_SECRET, &cfg.secret, &err), 0);
    assert_int_equal(relay_start(&cfg, &fx->relay, &port, &err), 0);   /* for teardown */
    struct wire_frame f;
    assert_int_equal(peer_recv(&b, &f, buf, sizeof buf, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_closed");
    peer_close(&a), peer_close(&b);
}

/* An agent measures its link to the relay through the relay's echo, with
 * the server's probe ticket: a latency and a bandwidth, no pair joined.
 * Without a ticket: refused. */
static void test_probe_relay(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct probe_result r;
    struct relay_ticket probe = ticket_of(RELAY_SECRET, 0, RELAY_SIDE_PROBE, 0, (struct relay_end){ 0, 0, 5 },
                                          (struct relay_end){ 0, 0, 0 }, 60);
    struct relay_ticket forged = ticket_of("another_secret_of_another_server_0123456", 0, RELAY_SIDE_PROBE, 0,
                                           (struct relay_end){ 0, 0, 5 }, (struct relay_end){ 0, 0, 0 }, 60);
    if (probe_relay(fx->relay_addr, &probe, TIMEOUT_MS, &r, &err) != 0)
        fail_msg("probe_relay: %s", err.message);
    assert_true(r.connected);
    assert_true(r.latency_ms > 0 && r.latency_ms < 1000);
    assert_true(r.bandwidth_gbps > 0);
    assert_true(r.bytes >= 2 * PROBE_BURST_MIN);
    struct relay_counts k;
    relay_counts(fx->relay, &k);
    assert_int_equal(k.pairs_total, 0);
    assert_int_equal(k.refused_total, 0);
    assert_int_equal(probe_relay(fx->relay_addr, &forged, TIMEOUT_MS, &r, &err), -1);
    assert_string_equal(err.code, "relay_refused");
    assert_non_null(strstr(err.message, "bad ticket"));
    /* nothing listens there: not connected */
    assert_int_equal(probe_relay("127.0.0.1:1", &probe, 1000, &r, &err), -1);
    assert_false(r.connected);
}

/* ---- a relay of the test's own that flips one bit ----------------------- */

struct flipper {
    int fd;                 /* listening */
    char addr[32];
    long flip_at;           /* byte of the dialer-to-listener stream whose low bit is flipped */
    pthread_t thread;
};

static int read_n(int fd, void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)p + got, n - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Pairs the first two connections whatever their tokens, then forwards,
 * flipping one bit from the dialer's side. */
static void *flipper_main(void *arg)
{
    struct flipper *fl = arg;
    int fds[2], side[2];
    unsigned char rq[RELAY_REQUEST_BYTES], ok[RELAY_REPLY_BYTES];
    struct relay_request r;
    char why[64];
    for (int i = 0; i < 2; i++) {
        fds[i] = accept(fl->fd, NULL, NULL);
        if (fds[i] < 0 || read_n(fds[i], rq, sizeof rq) != 0 || relay_request_decode(rq, &r, why, sizeof why) != 0)
            return NULL;
        side[i] = r.side;
    }
    relay_reply_encode('P', "paired", ok);
    for (int i = 0; i < 2; i++)
        if (send(fds[i], ok, sizeof ok, MSG_NOSIGNAL) != (ssize_t)sizeof ok)
            return NULL;
    int dialer = side[0] == RELAY_SIDE_DIALER ? fds[0] : fds[1], listener = dialer == fds[0] ? fds[1] : fds[0];
    long at = 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = dialer, .events = POLLIN}, {.fd = listener, .events = POLLIN}};
        if (poll(p, 2, TIMEOUT_MS) <= 0)
            break;
        unsigned char buf[4096];
        int from = (p[0].revents & (POLLIN | POLLHUP)) ? 0 : 1;
        ssize_t n = read(from == 0 ? dialer : listener, buf, sizeof buf);
        if (n <= 0)
            break;
        if (from == 0) {
            if (fl->flip_at >= at && fl->flip_at < at + n)
                buf[fl->flip_at - at] ^= 1;
            at += n;
        }
        if (send(from == 0 ? listener : dialer, buf, (size_t)n, MSG_NOSIGNAL) != n)
            break;
    }
    close(dialer);
    close(listener);
    return NULL;
}

static void flipper_start(struct flipper *fl, long flip_at)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof sa;
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    fl->flip_at = flip_at;
    fl->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(bind(fl->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fl->fd, 4), 0);
    assert_int_equal(getsockname(fl->fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(fl->addr, sizeof fl->addr, "127.0.0.1:%u", ntohs(sa.sin_port));
    assert_int_equal(pthread_create(&fl->thread, NULL, flipper_main, fl), 0);
}

static void flipper_stop(struct flipper *fl)
{
    shutdown(fl->fd, SHUT_RDWR);
    pthread_join(fl->thread, NULL);
    close(fl->fd);
}

/* A bit of the dialer's hello (its role, under the MAC): the listener
 * refuses it, and the dialer hears that its hello was refused. */
static void test_flipped_hello_is_peer_auth(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a;
    struct flipper fl;
    struct peer_auth d = auth_make(ROLE_D, SECRET, 1);
    struct relay_ticket tl = ticket(JOB, RELAY_SIDE_LISTENER, WIRE_CHANNEL_STAGE);
    struct relay_ticket td = ticket(JOB, RELAY_SIDE_DIALER, WIRE_CHANNEL_STAGE);
    flipper_start(&fl, WIRE_HEADER_BYTES + WIRE_MAC_BYTES + WIRE_NONCE_BYTES + 1 + 3);
    assert_int_equal(peer_listener_relay(fx->l, fl.addr, &tl, ROLE_D, WIRE_CHANNEL_STAGE, TIMEOUT_MS, TIMEOUT_MS,
                                         &err), 0);
    assert_int_equal(peer_dial_relayed(fl.addr, &td, &d, ROLE_L, WIRE_CHANNEL_STAGE, TIMEOUT_MS, &a, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    flipper_stop(&fl);
}

/* A bit of a sealed frame's payload, after the handshake: the receiver's
 * tag check fails with peer_auth, naming the peer. */
static void test_flipped_sealed_frame_is_peer_auth(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    struct flipper fl;
    char got[64];
    struct peer_auth d = auth_make(ROLE_D, SECRET, 1);
    /* the dialer's hello frame, then the first sealed frame's header and its tag, then its payload */
    long hello = WIRE_HEADER_BYTES + WIRE_MAC_BYTES + WIRE_NONCE_BYTES + 1 + (long)strlen(ROLE_D);
    flipper_start(&fl, hello + WIRE_SEALED_HEADER_BYTES + 2);
    if (relayed(fx, fl.addr, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("relayed: %s", err.message);
    struct wire_frame f = {.kind = WIRE_PROBE, .dtype = WIRE_BYTES, .payload_len = 10};
    assert_int_equal(peer_send(&a, &f, "0123456789", TIMEOUT_MS, &err), 0);
    assert_int_equal(peer_recv(&b, &f, got, sizeof got, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_auth");
    peer_close(&a), peer_close(&b);
    flipper_stop(&fl);
}

int main(void)
{
    log_threshold = getenv("TEST_LOG") ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_relay_pairs_and_forwards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_channels_keep_connections_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_channels_direct, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_key_is_never_paired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relay_stop_fails_the_link, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_relay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_hello_is_peer_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flipped_sealed_frame_is_peer_auth, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
