/* test_relay_admission.c - what shoal-relay admits and how long it holds
 * it (issue 45), over real sockets on 127.0.0.1: no ticket, a forged or
 * expired one, another side's, an older protocol are refused with the
 * reason; another link's ticket is never paired; per-job limits count the
 * ticket's job; a waiting end whose client has gone is dropped at once, so
 * a flood of connect-send-close connections holds nothing; one address at
 * its limit leaves another served; an idle pair is closed; per-job metric
 * series expire and are capped, the overflow counted; a relay without the
 * server's secret does not start; addresses count by host, IPv6 by /64. */
#include "../relay_fixture.h"

#include "../../common/log.h"
#include "../../common/hostport.h"
#include "../../relay/relay_books.h"

static int setup_one_link(void **state)
{
    return start_with(state, (struct relay_config){.max_links_per_job = 1});
}

/* A long wait for partners and few waiting ends an address: an end kept
 * after its client went would show (and block the address) for 30 s. */
static int setup_long_wait(void **state)
{
    return start_with(state, (struct relay_config){.pair_wait_s = 30, .max_connections_per_address = 32,
                                                   .max_waiting_per_address = 8});
}

static int setup_per_address(void **state)
{
    return start_with(state, (struct relay_config){.max_connections_per_address = 24});
}

static int setup_idle(void **state)
{
    return start_with(state, (struct relay_config){.idle_timeout_s = 2});
}

static int setup_series(void **state)
{
    return start_with(state, (struct relay_config){.max_job_series = 1, .job_series_ttl_s = 1});
}

static int none_held(const struct relay_counts *k)
{
    return k->held == 0 && k->waiting == 0;
}

/* Every connection of test_flood_holds_nothing's flood dropped or
 * refused, and job 11's one pair counted, nothing held. */
static int flood_settled(const struct relay_counts *k)
{
    return k->gone_total + k->refused_total == 1200 && k->held == 0 && k->waiting == 0;
}

static int one_waiting(const struct relay_counts *k)
{
    return k->waiting == 1;
}

static int two_waiting(const struct relay_counts *k)
{
    return k->waiting == 2;
}

/* A waiting end whose client has gone (a dialer that retried) is dropped
 * at once, not when its wait is over: the listener's end waits for the
 * dialer's next try and is paired with it. */
static void test_gone_end_is_dropped_at_once(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    struct relay_counts k;
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    struct relay_ticket td = ticket(JOB, RELAY_SIDE_DIALER, WIRE_CHANNEL_STAGE);
    int fd = raw_request(fx, RELAY_SIDE_DIALER, &td);
    assert_true(counts_until(fx, one_waiting, TIMEOUT_MS, &k));
    close(fd);
    if (!counts_until(fx, none_held, TIMEOUT_MS, &k))   /* its wait is 30 s */
        fail_msg("a waiting end whose client closed is still held: %llu waiting", (unsigned long long)k.waiting);
    assert_int_equal(k.gone_total, 1);
    assert_int_equal(k.refused_total, 0);
    if (relayed(fx, fx->relay_addr, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("relayed after a dialer gave up: %s", err.message);
    talk(&a, &b, "the live dialer");
    peer_close(&a), peer_close(&b);
}

/* 1,200 connect-send-close connections from one address (127.0.0.2),
 * each with a valid ticket of job 12 (a member of that job flooding):
 * job 11's ends from another address are paired at once, and none of the
 * flood is held once its client has gone (their wait is 30 s), so job
 * 12's links are free again for its own ends. */
static void test_flood_holds_nothing(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    struct relay_counts k;
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    struct relay_ticket flood = ticket(12, RELAY_SIDE_DIALER, WIRE_CHANNEL_STAGE);
    double t0 = mono_s();
    for (int i = 0; i < 1200; i++)
        close(raw_request_from(fx, "127.0.0.2", RELAY_SIDE_DIALER, &flood));
    double sent_s = mono_s() - t0;
    if (relayed(fx, fx->relay_addr, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("job 11 right after the flood: %s", err.message);
    double paired_s = mono_s() - t0;
    talk(&a, &b, "paired at once after the flood");
    peer_close(&a), peer_close(&b);
    if (!counts_until(fx, flood_settled, 15000, &k))   /* their wait is 30 s */
        fail_msg("after the flood the relay holds %llu connections, %llu waiting (%llu dropped, %llu refused)",
                 (unsigned long long)k.held, (unsigned long long)k.waiting, (unsigned long long)k.gone_total,
                 (unsigned long long)k.refused_total);
    print_message("flood: 1200 connect-send-close in %.2f s; job 11 paired %.2f s after its start; %llu dropped "
                  "when their client went, %llu refused (the address's limits); nothing held %.2f s after the "
                  "start\n", sent_s, paired_s, (unsigned long long)k.gone_total,
                  (unsigned long long)k.refused_total, mono_s() - t0);
    assert_true(k.gone_total >= 8);
    if (relayed_job(fx, fx->relay_addr, 12, &d, WIRE_CHANNEL_SENDS, &a, &b, &err) != 0)
        fail_msg("job 12 after its flood: %s", err.message);
    peer_close(&a), peer_close(&b);
}

/* One address (127.0.0.2) opening as many connections as the relay holds
 * in all gets its own share (24) and is refused the rest, saying why;
 * the ends of a job from 127.0.0.1 are paired meanwhile. */
static void test_address_at_its_limit_leaves_others_served(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    struct relay_counts k;
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    int fds[64], answered[64] = {0}, refused = 0;
    char text[RELAY_REPLY_BYTES];
    for (int i = 0; i < 64; i++)
        fds[i] = relay_socket_from(fx, "127.0.0.2");   /* and say nothing */
    /* the refused are answered at once; the held, not before their request */
    for (int64_t until = mono_ms() + TIMEOUT_MS; refused < 40 && mono_ms() < until; usleep(10000))
        for (int i = 0; i < 64; i++) {
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            if (answered[i] || poll(&p, 1, 0) != 1)
                continue;
            answered[i] = 1;
            assert_int_equal(raw_reply(fds[i], text, sizeof text, TIMEOUT_MS), 'E');
            assert_non_null(strstr(text, "busy: your address holds 24 connections here"));
            refused++;
        }
    relay_counts(fx->relay, &k);
    assert_int_equal(refused, 40);
    assert_int_equal(k.held, 24);
    assert_int_equal(k.refused_total, 40);
    if (relayed(fx, fx->relay_addr, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("relayed beside an address at its limit: %s", err.message);
    talk(&a, &b, "another address is served");
    peer_close(&a), peer_close(&b);
    for (int i = 0; i < 64; i++)
        close(fds[i]);
}

/* No ticket, a forged one (another secret), an expired one, another
 * side's, a probe without one, and the version before tickets: each
 * refused at once with the reason, none waiting. */
static void test_bad_tickets_are_refused(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct relay_counts k;
    char text[RELAY_REPLY_BYTES];
    struct relay_ticket none = {0}, listener = ticket(JOB, RELAY_SIDE_LISTENER, WIRE_CHANNEL_STAGE);
    struct relay_ticket forged = ticket_of("another_secret_of_another_server_0123456", JOB, RELAY_SIDE_DIALER,
                                           WIRE_CHANNEL_STAGE, END_D, END_L, 60);
    struct relay_ticket expired = ticket_of(RELAY_SECRET, JOB, RELAY_SIDE_DIALER, WIRE_CHANNEL_STAGE, END_D, END_L, -5);
    struct { int side; const struct relay_ticket *t; const char *why; } cases[] = {
        { RELAY_SIDE_DIALER, &none, "bad ticket: job id or expiry out of range" },
        { RELAY_SIDE_DIALER, &forged, "bad ticket: not signed with this relay's secret" },
        { RELAY_SIDE_DIALER, &expired, "ticket expired" },
        { RELAY_SIDE_DIALER, &listener, "wrong side: the ticket admits the listener's end" },
        { RELAY_SIDE_PROBE, &listener, "wrong side: the ticket admits the listener's end, the request is the probe's" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = raw_request(fx, cases[i].side, cases[i].t);
        assert_int_equal(raw_reply(fd, text, sizeof text, TIMEOUT_MS), 'E');
        if (!strstr(text, cases[i].why))
            fail_msg("case %zu: '%s' does not say '%s'", i, text, cases[i].why);
        close(fd);
    }
    /* a version 1 request (56 bytes, no ticket): told at once */
    unsigned char v1[56] = { 'S', 'H', 'O', 'A', 'L', 'R', 'L', 'Y', 1, RELAY_SIDE_DIALER };
    int fd = relay_socket(fx);
    assert_int_equal(send(fd, v1, sizeof v1, 0), (ssize_t)sizeof v1);
    assert_int_equal(raw_reply(fd, text, sizeof text, TIMEOUT_MS), 'E');
    assert_non_null(strstr(text, "relay protocol version 1, this relay speaks 2"));
    close(fd);
    relay_counts(fx->relay, &k);
    assert_int_equal(k.bad_tickets_total, 5);
    assert_int_equal(k.refused_total, 6);
    assert_int_equal(k.pairs_total, 0);
    /* through the agent's own call: the relay's reason comes back */
    struct peer_conn a;
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    assert_int_equal(peer_dial_relayed(fx->relay_addr, &forged, &d, ROLE_L, WIRE_CHANNEL_STAGE, TIMEOUT_MS, &a, &err),
                     -1);
    assert_string_equal(err.code, "relay_refused");
    assert_non_null(strstr(err.message, "not signed with this relay's secret"));
}

/* A valid ticket of another link (another listener), or the right ticket
 * with another key's token: both wait, neither is paired with the
 * listener's end. */
static void test_other_link_is_never_paired(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct relay_counts k;
    struct relay_ticket tl = ticket(JOB, RELAY_SIDE_LISTENER, WIRE_CHANNEL_STAGE);
    struct relay_ticket other = ticket_of(RELAY_SECRET, JOB, RELAY_SIDE_DIALER, WIRE_CHANNEL_STAGE, END_D,
                                          (struct relay_end){ 1, 0, 3 }, 60);
    assert_int_equal(peer_listener_relay(fx->l, fx->relay_addr, &tl, ROLE_D, WIRE_CHANNEL_STAGE, TIMEOUT_MS,
                                         TIMEOUT_MS, &err), 0);
    assert_true(counts_until(fx, one_waiting, TIMEOUT_MS, &k));
    int fd = raw_request(fx, RELAY_SIDE_DIALER, &other);
    assert_true(counts_until(fx, two_waiting, TIMEOUT_MS, &k));
    assert_int_equal(k.pairs_total, 0);
    close(fd);
}

/* Per-job limits count the job the ticket names: job 11 at its one link
 * is refused a second, saying so; ends with forged tickets of job 11
 * count nothing; job 12 (a valid ticket) waits beside it. */
static void test_job_over_its_link_limit_is_refused(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b, c;
    struct relay_counts k;
    char text[RELAY_REPLY_BYTES];
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    struct relay_ticket forged = ticket_of("another_secret_of_another_server_0123456", JOB, RELAY_SIDE_DIALER,
                                           WIRE_CHANNEL_SENDS, END_D, END_L, 60);
    int fds[3];
    for (int i = 0; i < 3; i++) {   /* "job 11" from someone without its tickets */
        fds[i] = raw_request(fx, RELAY_SIDE_DIALER, &forged);
        assert_int_equal(raw_reply(fds[i], text, sizeof text, TIMEOUT_MS), 'E');
    }
    if (relayed(fx, fx->relay_addr, &d, WIRE_CHANNEL_SENDS, &a, &b, &err) != 0)
        fail_msg("first link: %s", err.message);
    struct relay_ticket td = ticket(JOB, RELAY_SIDE_DIALER, WIRE_CHANNEL_RECEIVES);
    assert_int_equal(peer_dial_relayed(fx->relay_addr, &td, &d, ROLE_L, WIRE_CHANNEL_RECEIVES, TIMEOUT_MS, &c, &err),
                     -1);
    assert_string_equal(err.code, "relay_refused");
    assert_non_null(strstr(err.message, "job 11 has 1 links here already"));
    struct relay_ticket t12 = ticket(12, RELAY_SIDE_DIALER, WIRE_CHANNEL_STAGE);
    int fd = raw_request(fx, RELAY_SIDE_DIALER, &t12);
    assert_true(counts_until(fx, one_waiting, TIMEOUT_MS, &k));   /* job 12's, not refused */
    talk(&a, &b, "the first link still works");
    peer_close(&a), peer_close(&b);
    close(fd);
    for (int i = 0; i < 3; i++)
        close(fds[i]);
}

/* A pair that carries bytes stays; one with no byte either way for
 * --idle-timeout (2 s here) is closed, and counted. */
static void test_idle_pair_is_closed(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    struct relay_counts k;
    char buf[16];
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    if (relayed(fx, fx->relay_addr, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("relayed: %s", err.message);
    for (int i = 0; i < 10; i++) {   /* 2.5 s in all, never more than a quarter of a second quiet */
        talk(&a, &b, "busy");
        usleep(250000);
    }
    relay_counts(fx->relay, &k);
    assert_int_equal(k.idle_closed_total, 0);
    struct wire_frame f;
    assert_int_equal(peer_recv(&b, &f, buf, sizeof buf, TIMEOUT_MS, &err), -1);
    assert_string_equal(err.code, "peer_closed");
    relay_counts(fx->relay, &k);
    assert_int_equal(k.idle_closed_total, 1);
    peer_close(&a), peer_close(&b);
}

/* At most one job's series here (--max-job-series 1): job 12's bytes,
 * past the cap, count in the overflow series and the dropped count; job
 * 11's series goes --job-series-ttl (1 s) after its link closed, and job
 * 13 gets one then. */
static void test_job_series_expire_and_are_capped(void **state)
{
    struct fixture *fx = *state;
    struct shoal_err err;
    struct peer_conn a, b;
    char text[8192];
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    if (relayed_job(fx, fx->relay_addr, 11, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("job 11: %s", err.message);
    talk(&a, &b, "job 11");
    peer_close(&a), peer_close(&b);
    if (relayed_job(fx, fx->relay_addr, 12, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("job 12: %s", err.message);
    talk(&a, &b, "job 12");
    metrics(fx, text, sizeof text);
    assert_non_null(strstr(text, "shoal_relay_job_bytes_total{job=\"11\"} "));
    assert_null(strstr(text, "{job=\"12\"}"));
    assert_non_null(strstr(text, "shoal_relay_job_series 1\n"));
    assert_non_null(strstr(text, "shoal_relay_job_series_dropped_total 1\n"));
    assert_null(strstr(text, "shoal_relay_job_overflow_bytes_total 0\n"));
    peer_close(&a), peer_close(&b);
    int64_t until = mono_ms() + TIMEOUT_MS;
    do {   /* 1 s after the link closed, and the next reap */
        usleep(100000);
        metrics(fx, text, sizeof text);
    } while (strstr(text, "{job=\"11\"}") && mono_ms() < until);
    assert_null(strstr(text, "{job=\"11\"}"));
    assert_non_null(strstr(text, "shoal_relay_job_series 0\n"));
    if (relayed_job(fx, fx->relay_addr, 13, &d, WIRE_CHANNEL_STAGE, &a, &b, &err) != 0)
        fail_msg("job 13: %s", err.message);
    talk(&a, &b, "job 13");
    metrics(fx, text, sizeof text);
    assert_non_null(strstr(text, "shoal_relay_job_bytes_total{job=\"13\"} "));
    peer_close(&a), peer_close(&b);
}

/* A relay without the server's secret does not start, saying what to do. */
static void test_no_secret_no_relay(void **state)
{
    (void)state;
    struct relay_config cfg = {.listen = "127.0.0.1:0", .max_connections = 8, .max_connections_per_address = 8,
                               .max_waiting_per_address = 8, .max_links_per_job = 8, .pair_wait_s = 1,
                               .idle_timeout_s = 60, .max_job_series = 8, .job_series_ttl_s = 60};
    struct relay *r = NULL;
    struct shoal_err err;
    unsigned port;
    assert_int_equal(relay_start(&cfg, &r, &port, &err), -1);
    assert_non_null(strstr(err.message, "give it the server's relay.secret (--secret-file)"));
    assert_null(r);
    assert_int_equal(relay_secret_set("too_short", &cfg.secret, &err), -1);
}

/* An address counts as its IPv4 address (an IPv4-mapped IPv6 one the
 * same), an IPv6 one as its /64: one site's hosts share one share. */
static void test_addresses_count_by_host_or_64(void **state)
{
    (void)state;
    struct sockaddr_storage a = {0}, b = {0};
    unsigned char ka[16], kb[16];
    struct sockaddr_in *v4 = (struct sockaddr_in *)&a;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&b;
    v4->sin_family = AF_INET;
    inet_pton(AF_INET, "192.0.2.7", &v4->sin_addr);
    v6->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::ffff:192.0.2.7", &v6->sin6_addr);
    assert_int_equal(hostport_client_key((const struct sockaddr *)&a, ka), 0);
    assert_int_equal(hostport_client_key((const struct sockaddr *)&b, kb), 0);
    assert_memory_equal(ka, kb, 16);
    inet_pton(AF_INET6, "2001:db8:1:2::1", &v6->sin6_addr);
    assert_int_equal(hostport_client_key((const struct sockaddr *)&b, ka), 0);
    inet_pton(AF_INET6, "2001:db8:1:2:ffff:ffff:ffff:ffff", &v6->sin6_addr);
    assert_int_equal(hostport_client_key((const struct sockaddr *)&b, kb), 0);
    assert_memory_equal(ka, kb, 16);   /* one /64 */
    inet_pton(AF_INET6, "2001:db8:1:3::1", &v6->sin6_addr);
    assert_int_equal(hostport_client_key((const struct sockaddr *)&b, kb), 0);
    assert_memory_not_equal(ka, kb, 16);   /* the next /64 */
}

int main(void)
{
    log_threshold = getenv("TEST_LOG") ? LOG_LEVEL_DEBUG : LOG_LEVEL_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gone_end_is_dropped_at_once, setup_long_wait, teardown),
        cmocka_unit_test_setup_teardown(test_flood_holds_nothing, setup_long_wait, teardown),
        cmocka_unit_test_setup_teardown(test_address_at_its_limit_leaves_others_served, setup_per_address, teardown),
        cmocka_unit_test_setup_teardown(test_bad_tickets_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_link_is_never_paired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_job_over_its_link_limit_is_refused, setup_one_link, teardown),
        cmocka_unit_test_setup_teardown(test_idle_pair_is_closed, setup_idle, teardown),
        cmocka_unit_test_setup_teardown(test_job_series_expire_and_are_capped, setup_series, teardown),
        cmocka_unit_test(test_no_secret_no_relay),
        cmocka_unit_test(test_addresses_count_by_host_or_64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
