/* test_report.c - agent/control/report.h: the progress queue's flush waits for the
 * queue to drain, but a raised stop flag (a new assignment) ends the wait
 * at once while the queue goes on; an unreachable server is said as such. */
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
#include <time.h>
#include <unistd.h>

#include "../../agent/control/report.h"

/* A loopback port nothing listens on: every call is refused. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t n = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static atomic_int raise_me;

static void *raise_later(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    atomic_store(&raise_me, 1);
    return NULL;
}

static void test_flush_stops_on_a_new_assignment(void **state)
{
    (void)state;
    struct ctl c = {0};
    snprintf(c.url, sizeof c.url, "http://127.0.0.1:%d", dead_port());
    snprintf(c.token, sizeof c.token, "shoal_node_test");
    struct reporter *r;
    struct shoal_err err;
    assert_int_equal(report_start(&c, 8, &r, &err), 0);
    report_post(r, "/v1/agent/progress", json_pack("{s:i}", "step", 1));
    /* nothing raised: the wait runs out, and says what is left */
    assert_int_equal(report_flush(r, 0.5, NULL, &err), -1);
    assert_int_equal(err.status, 503);
    assert_non_null(strstr(err.message, "1 progress reports and 0 checkpoint uploads could not be delivered"));
    /* raised while waiting: the wait ends at once, the post still queued */
    pthread_t t;
    atomic_store(&raise_me, 0);
    assert_int_equal(pthread_create(&t, NULL, raise_later, NULL), 0);
    double t0 = now_s();
    assert_int_equal(report_flush(r, 60, &raise_me, &err), -1);
    double waited = now_s() - t0;
    pthread_join(t, NULL);
    assert_string_equal(err.code, "stopped");
    assert_non_null(strstr(err.message, "1 progress reports and 0 checkpoint uploads not waited for"));
    if (waited > 30)
        fail_msg("the flush waited %.1f s after the flag was raised at 0.3 s", waited);
    /* already raised: no wait at all */
    assert_int_equal(report_flush(r, 60, &raise_me, &err), -1);
    assert_string_equal(err.code, "stopped");
    report_stop(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flush_stops_on_a_new_assignment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
