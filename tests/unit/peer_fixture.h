/* peer_fixture.h - what the peer suites share: a real listener on
 * 127.0.0.1 expecting job JOB, epoch EPOCH (setup/teardown), a connected
 * pair of its connections, and small helpers.  Include after cmocka.h. */
#ifndef SHOAL_TEST_PEER_FIXTURE_H
#define SHOAL_TEST_PEER_FIXTURE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../agent/net/peer.h"
#include "../peer_keys.h"
#define JOB 7
#define EPOCH 3
#define SECRET "correct horse battery staple"
#define ROLE_L "stage=1 replica=0"
#define ROLE_D "stage=0 replica=0"
#define TIMEOUT_MS 5000

struct fixture {
    struct peer_listener *l;
    unsigned port;
    char addr[32];
};

/* A tasklet of job `job` in role `role` with one link, to `peer`, keyed
 * from `secret`. */
static __attribute__((unused)) struct peer_auth auth_make(int64_t job, uint32_t epoch, const char *secret,
                                                          const char *role, const char *peer)
{
    struct peer_auth a = {.job_id = job, .epoch = epoch};
    snprintf(a.role, sizeof a.role, "%s", role);
    peer_keys_link(&a, secret, peer);
    return a;
}

static __attribute__((unused)) double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static __attribute__((unused)) int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    struct shoal_err err;
    assert_non_null(fx);
    assert_int_equal(peer_listener_start("127.0.0.1:0", &fx->l, &fx->port, &err), 0);
    assert_true(fx->port > 0);
    snprintf(fx->addr, sizeof fx->addr, "127.0.0.1:%u", fx->port);
    struct peer_auth a = auth_make(JOB, EPOCH, SECRET, ROLE_L, ROLE_D);
    peer_listener_expect(fx->l, &a);
    *state = fx;
    return 0;
}

static __attribute__((unused)) int teardown(void **state)
{
    struct fixture *fx = *state;
    peer_listener_stop(fx->l);
    free(fx);
    return 0;
}

/* Waits up to 3 s for the listener's refused count to reach `want`. */
static __attribute__((unused)) uint64_t wait_refused(struct peer_listener *l, uint64_t want)
{
    uint64_t probes, refused = 0;
    for (int i = 0; i < 300; i++) {
        peer_listener_counts(l, &probes, &refused);
        if (refused >= want)
            break;
        usleep(10 * 1000);
    }
    return refused;
}

/* A job connection: a is the dialer's end, b the listener's. */
static __attribute__((unused)) void pair(struct fixture *fx, struct peer_conn *a, struct peer_conn *b)
{
    struct shoal_err err;
    struct peer_auth d = auth_make(JOB, EPOCH, SECRET, ROLE_D, ROLE_L);
    int rc = peer_dial(fx->addr, &d, ROLE_L, TIMEOUT_MS, a, &err);
    if (rc != 0)
        fail_msg("dial: %s", err.message);
    rc = peer_listener_take(fx->l, ROLE_D, TIMEOUT_MS, b, &err);
    if (rc != 0)
        fail_msg("take: %s", err.message);
}

/* A loopback port held bound but never listened on: connecting to it is
 * refused as to a closed port, and nothing running beside the test can
 * take the port meanwhile (as it can one bound and closed).  Its port in
 * *port. */
static __attribute__((unused)) int bound_not_listening(unsigned *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t len = sizeof sa;
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A plain listening socket on 127.0.0.1 (no agent behind it); its port in
 * *port. */
static __attribute__((unused)) int listen_any(unsigned *port)
{
    int fd = bound_not_listening(port);
    assert_int_equal(listen(fd, 4), 0);
    return fd;
}

static __attribute__((unused)) void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        assert_true(k > 0);
        c += k;
        n -= (size_t)k;
    }
}

#endif
