/* test_peer_probe.c - server/jobs/peer_probe.h against real sockets: a real
 * agent peer listener answers; a closed port, a port whose owner never
 * answers (the kernel accepts for it, as for a frozen agent) and a port
 * that greets with something else do not, each with its reason; all of
 * them probed at once.  A relay's probe (peer_probe_relay): a real
 * shoal-relay answers its GET /healthz; stopped, its port refuses; a web
 * server that answers otherwise, and a mute port, do not. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../agent/net/peer.h"
#include "../../common/log.h"
#include "../../relay/relay.h"
#include "../../server/jobs/peer_probe.h"
#include "peer_fixture.h"

/* Accepts one connection and greets it with text, like a web server. */
static void *stranger_main(void *arg)
{
    int lfd = *(int *)arg, fd = accept(lfd, NULL, NULL);
    static const char hello[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
                                "padding to fill a frame header and a nonce.............................";
    if (fd >= 0) {
        (void)!write(fd, hello, sizeof hello - 1);
        char buf[256];
        while (read(fd, buf, sizeof buf) > 0)
            ;
        close(fd);
    }
    return NULL;
}

static void test_probe_tells_who_answers(void **state)
{
    (void)state;
    struct peer_listener *l;
    struct shoal_err err;
    unsigned agent_port, closed_port, mute_port, stranger_port;
    assert_int_equal(peer_listener_start("127.0.0.1:0", &l, &agent_port, &err), 0);
    int closed = bound_not_listening(&closed_port);
    int mute = listen_any(&mute_port);
    int stranger = listen_any(&stranger_port);
    pthread_t t;
    pthread_create(&t, NULL, stranger_main, &stranger);

    char a[7][64];
    snprintf(a[0], sizeof a[0], "127.0.0.1:%u", agent_port);
    snprintf(a[1], sizeof a[1], "127.0.0.1:%u", closed_port);
    snprintf(a[2], sizeof a[2], "127.0.0.1:%u", mute_port);
    snprintf(a[3], sizeof a[3], "127.0.0.1:%u", stranger_port);
    snprintf(a[4], sizeof a[4], "no port here");
    /* the agent's own port spelled as addresses never connected to (0.0.0.0
     * would reach it): refused before any connect, whatever the text */
    snprintf(a[5], sizeof a[5], "0x0:%u", agent_port);
    snprintf(a[6], sizeof a[6], "[::ffff:0.0.0.0]:%u", agent_port);
    const char *addrs[] = { a[0], a[1], a[2], a[3], a[4], a[5], a[6] };
    int ok[7];
    char why[7][PEER_PROBE_WHY_MAX];
    peer_probe_all(addrs, 7, 1000, ok, why);
    assert_int_equal(ok[0], PEER_PROBE_ANSWERED);
    const struct { int found; const char *why; } want[7] = {
        [1] = { PEER_PROBE_REFUSED, "refused" },                     /* closed port */
        [2] = { PEER_PROBE_SILENT, "no answer within 1000 ms" },     /* mute port */
        [3] = { PEER_PROBE_SILENT, "not a shoal peer hello" },       /* stranger */
        [4] = { PEER_PROBE_SILENT, "does not resolve" },             /* bad address */
        [5] = { PEER_PROBE_SILENT, "resolves to 0.0.0.0 (unspecified" },
        [6] = { PEER_PROBE_SILENT, "inside an IPv4-mapped IPv6 address" },
    };
    for (int i = 1; i < 7; i++) {
        assert_int_equal(ok[i], want[i].found);
        if (!strstr(why[i], want[i].why))
            fail_msg("%s: %s", addrs[i], why[i]);
    }

    /* the agent's listener took the probe as a probe session: it still
     * answers the next one */
    peer_probe_all(addrs, 1, 1000, ok, why);
    assert_int_equal(ok[0], 1);

    pthread_join(t, NULL);
    close(stranger);
    close(mute);
    close(closed);
    peer_listener_stop(l);
}

static void test_relay_probe(void **state)
{
    (void)state;
    struct relay_config cfg = { .max_connections = 16, .max_connections_per_address = 16,
                                .max_waiting_per_address = 16, .max_links_per_job = 8, .pair_wait_s = 2,
                                .idle_timeout_s = 60, .max_job_series = 10, .job_series_ttl_s = 60 };
    struct relay *r;
    struct shoal_err err;
    unsigned relay_port, mute_port, stranger_port;
    char why[PEER_PROBE_WHY_MAX], relay_addr[64], addr[64];
    snprintf(cfg.listen, sizeof cfg.listen, "127.0.0.1:0");
    assert_int_equal(relay_secret_set("test_relay_shared_secret_0123456789abcdef", &cfg.secret, &err), 0);
    if (relay_start(&cfg, &r, &relay_port, &err) != 0)
        fail_msg("relay_start: %s", err.message);
    snprintf(relay_addr, sizeof relay_addr, "127.0.0.1:%u", relay_port);
    assert_int_equal(peer_probe_relay(relay_addr, 1000, why), PEER_PROBE_ANSWERED);
    relay_stop(r);
    assert_int_equal(peer_probe_relay(relay_addr, 1000, why), PEER_PROBE_REFUSED);
    assert_non_null(strstr(why, "refused"));

    int mute = listen_any(&mute_port);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", mute_port);
    assert_int_equal(peer_probe_relay(addr, 300, why), PEER_PROBE_SILENT);
    assert_non_null(strstr(why, "no answer to GET /healthz"));
    int stranger = listen_any(&stranger_port);
    pthread_t t;
    pthread_create(&t, NULL, stranger_main, &stranger);
    snprintf(addr, sizeof addr, "127.0.0.1:%u", stranger_port);
    assert_int_equal(peer_probe_relay(addr, 1000, why), PEER_PROBE_SILENT);
    assert_non_null(strstr(why, "other than 200"));
    pthread_join(t, NULL);
    close(stranger);
    close(mute);
}

int main(void)
{
    log_threshold = LOG_LEVEL_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_tells_who_answers),
        cmocka_unit_test(test_relay_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
