/* relay_fixture.h - what the relay's unit tests (test_relay.c,
 * test_relay_admission.c) share: a shoal-relay on 127.0.0.1 with a test
 * secret and a peer listener expecting ROLE_L's links; the server's
 * tickets for ROLE_D -> ROLE_L, signed as the server signs them; raw
 * requests and replies; the agents' relayed connection and a frame each
 * way over it. */
#ifndef SHOAL_TEST_RELAY_FIXTURE_H
#define SHOAL_TEST_RELAY_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../agent/net/peer.h"
#include "../common/clock.h"
#include "../common/relay_proto.h"
#include "../relay/relay.h"
#include "peer_keys.h"

#define JOB 11
#define EPOCH 2
#define SECRET "relay test secret"
#define RELAY_SECRET "test_relay_shared_secret_0123456789abcdef"
#define ROLE_L "stage=1 replica=0 node=2"
#define ROLE_D "stage=0 replica=0 node=1"
#define TIMEOUT_MS 5000

static const struct relay_end END_D = { 0, 0, 1 }, END_L = { 1, 0, 2 };   /* ROLE_D's and ROLE_L's tasklets */

struct fixture {
    struct relay *relay;
    unsigned relay_port;
    char relay_addr[32];
    struct peer_listener *l;
};

static inline struct peer_auth auth_make(const char *role, const char *secret, int encrypt)
{
    struct peer_auth a = {.job_id = JOB, .epoch = EPOCH, .encrypt = encrypt};
    snprintf(a.role, sizeof a.role, "%s", role);
    peer_keys_link(&a, secret, strcmp(role, ROLE_L) == 0 ? ROLE_D : ROLE_L);
    return a;
}

/* The server's ticket for `side` of job's link from `d` to `l` on
 * `channel`, expiring in `life_s` seconds, signed under `secret`. */
static inline struct relay_ticket ticket_of(const char *secret, int64_t job, int side, unsigned channel,
                                            struct relay_end d, struct relay_end l, int64_t life_s)
{
    struct relay_secret s;
    struct shoal_err err;
    struct relay_ticket t = {.side = side, .channel = channel, .epoch = job ? EPOCH : 0, .job_id = job,
                             .expires = (int64_t)time(NULL) + life_s, .dialer = d, .listener = l};
    if (relay_secret_set(secret, &s, &err) != 0)
        fail_msg("%s", err.message);
    relay_ticket_sign(&s, &t);
    return t;
}

/* Tickets for ROLE_D -> ROLE_L of `job`, as the server gives them. */
static inline struct relay_ticket ticket(int64_t job, int side, unsigned channel)
{
    return ticket_of(RELAY_SECRET, job, side, channel, END_D, END_L, 60);
}

/* A relay on 127.0.0.1 with the test's secret and `cfg`'s limits (0:
 * the defaults below), and a peer listener expecting ROLE_L's links. */
static inline int start_with(void **state, struct relay_config cfg)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    struct shoal_err err;
    unsigned port, lport;
    assert_non_null(fx);
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    assert_int_equal(relay_secret_set(RELAY_SECRET, &cfg.secret, &err), 0);
    cfg.max_connections = cfg.max_connections ? cfg.max_connections : 64;
    cfg.max_connections_per_address = cfg.max_connections_per_address ? cfg.max_connections_per_address : 64;
    cfg.max_waiting_per_address = cfg.max_waiting_per_address ? cfg.max_waiting_per_address : 64;
    cfg.max_links_per_job = cfg.max_links_per_job ? cfg.max_links_per_job : 8;
    cfg.pair_wait_s = cfg.pair_wait_s ? cfg.pair_wait_s : 2;
    cfg.idle_timeout_s = cfg.idle_timeout_s ? cfg.idle_timeout_s : 600;
    cfg.max_job_series = cfg.max_job_series ? cfg.max_job_series : 100;
    cfg.job_series_ttl_s = cfg.job_series_ttl_s ? cfg.job_series_ttl_s : 600;
    if (relay_start(&cfg, &fx->relay, &port, &err) != 0)
        fail_msg("relay_start: %s", err.message);
    fx->relay_port = port;
    snprintf(fx->relay_addr, sizeof fx->relay_addr, "127.0.0.1:%u", port);
    assert_int_equal(peer_listener_start("127.0.0.1:0", &fx->l, &lport, &err), 0);
    struct peer_auth a = auth_make(ROLE_L, SECRET, 0);
    peer_listener_expect(fx->l, &a);
    *state = fx;
    return 0;
}

static inline int setup(void **state)
{
    return start_with(state, (struct relay_config){0});
}

static inline int teardown(void **state)
{
    struct fixture *fx = *state;
    peer_listener_stop(fx->l);
    relay_stop(fx->relay);
    free(fx);
    return 0;
}

/* A plain TCP connection to the fixture's relay, from address `from`
 * (NULL: any). */
static inline int relay_socket_from(const struct fixture *fx, const char *from)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx->relay_port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_true(fd >= 0);
    if (from) {
        struct sockaddr_in me = {.sin_family = AF_INET};
        inet_pton(AF_INET, from, &me.sin_addr);
        assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof me), 0);
    }
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static inline int relay_socket(const struct fixture *fx)
{
    return relay_socket_from(fx, NULL);
}

/* Sends a request for `side` with ticket t (and the token of ROLE_D's link
 * to ROLE_L on t's channel) on a new connection from address `from` (NULL:
 * any); returns it. */
static inline int raw_request_from(const struct fixture *fx, const char *from, int side, const struct relay_ticket *t)
{
    struct peer_auth d = auth_make(ROLE_D, SECRET, 0);
    const struct peer_link *link = peer_auth_find(&d, ROLE_L);
    struct relay_request rq = {.side = side, .ticket = *t};
    unsigned char out[RELAY_REQUEST_BYTES];
    wire_relay_token(link->key, link->key_len, JOB, EPOCH, t->channel, ROLE_D, ROLE_L, rq.token);
    relay_request_encode(&rq, out);
    int fd = relay_socket_from(fx, from);
    assert_int_equal(send(fd, out, sizeof out, 0), (ssize_t)sizeof out);
    return fd;
}

static inline int raw_request(const struct fixture *fx, int side, const struct relay_ticket *t)
{
    return raw_request_from(fx, NULL, side, t);
}

/* The relay's reply on fd within timeout_ms: its status ('P', 'E'), the
 * text into text; 0 when none came. */
static inline char raw_reply(int fd, char *text, size_t len, int timeout_ms)
{
    unsigned char in[RELAY_REPLY_BYTES];
    size_t got = 0;
    int64_t until = mono_ms() + timeout_ms;
    text[0] = '\0';
    while (got < sizeof in) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int64_t left = until - mono_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return 0;
        ssize_t n = read(fd, in + got, sizeof in - got);
        if (n <= 0)
            return 0;
        got += (size_t)n;
    }
    in[sizeof in - 1] = '\0';
    snprintf(text, len, "%s", (const char *)in + 1);
    return (char)in[0];
}

/* Waits up to timeout_ms for the relay's counts to satisfy `ok`. */
static inline int counts_until(struct fixture *fx, int (*ok)(const struct relay_counts *), int timeout_ms,
                               struct relay_counts *k)
{
    int64_t until = mono_ms() + timeout_ms;
    for (;;) {
        relay_counts(fx->relay, k);
        if (ok(k))
            return 1;
        if (mono_ms() > until)
            return 0;
        usleep(10000);
    }
}

/* GET /metrics on the relay's port, into text. */
static inline void metrics(struct fixture *fx, char *text, size_t len)
{
    int fd = relay_socket(fx);
    const char *req = "GET /metrics HTTP/1.1\r\nHost: relay\r\n\r\n";
    size_t got = 0;
    ssize_t n;
    assert_int_equal(send(fd, req, strlen(req), 0), (ssize_t)strlen(req));
    while (got < len - 1 && (n = read(fd, text + got, len - 1 - got)) > 0)
        got += (size_t)n;
    text[got] = '\0';
    close(fd);
    assert_non_null(strstr(text, "HTTP/1.1 200 OK"));
}

/* A frame from a to b and one back, checked byte for byte. */
static inline void talk(struct peer_conn *a, struct peer_conn *b, const char *text)
{
    struct shoal_err err;
    char got[64] = "";
    size_t n = strlen(text);
    struct wire_frame f = {.kind = WIRE_PROBE, .dtype = WIRE_BYTES, .payload_len = n};
    if (peer_send(a, &f, text, TIMEOUT_MS, &err) != 0 || peer_recv(b, &f, got, sizeof got, TIMEOUT_MS, &err) != 0)
        fail_msg("a to b: %s", err.message);
    assert_memory_equal(got, text, n);
    f = (struct wire_frame){.kind = WIRE_PROBE, .dtype = WIRE_BYTES, .payload_len = n};
    if (peer_send(b, &f, got, TIMEOUT_MS, &err) != 0 || peer_recv(a, &f, got, sizeof got, TIMEOUT_MS, &err) != 0)
        fail_msg("b to a: %s", err.message);
    assert_memory_equal(got, text, n);
}

/* The listener's end asked at the relay, the dialer's dialled through it,
 * the listener's taken; job's tickets. */
static inline int relayed_job(struct fixture *fx, const char *relay, int64_t job, const struct peer_auth *d,
                              unsigned channel, struct peer_conn *a, struct peer_conn *b, struct shoal_err *err)
{
    struct relay_ticket tl = ticket(job, RELAY_SIDE_LISTENER, channel), td = ticket(job, RELAY_SIDE_DIALER, channel);
    if (peer_listener_relay(fx->l, relay, &tl, ROLE_D, channel, TIMEOUT_MS, TIMEOUT_MS, err) != 0)
        return -1;
    if (peer_dial_relayed(relay, &td, d, ROLE_L, channel, TIMEOUT_MS, a, err) != 0)
        return -1;
    return peer_listener_take_stop(fx->l, ROLE_D, channel, TIMEOUT_MS, NULL, b, err);
}

static inline int relayed(struct fixture *fx, const char *relay, const struct peer_auth *d, unsigned channel,
                          struct peer_conn *a, struct peer_conn *b, struct shoal_err *err)
{
    return relayed_job(fx, relay, JOB, d, channel, a, b, err);
}

#endif
