/* test_ticker.c - common/ticker.h: the job runs at once, then every
 * period; a wake runs it again at once, also one that comes while it runs
 * (none is lost); stopping ends a long job early through ticker_stopping
 * and joins the thread. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <time.h>

#include "../../common/clock.h"
#include "../../common/ticker.h"

#define LONG_PERIOD_S 60.0   /* no run in a test comes from the period unless it says so */
#define WAIT_S 10.0          /* the longest any expected run may take to come */

struct counter {
    atomic_int runs;
    atomic_int hold;          /* 1: the job waits until released or stopping */
    atomic_int stopped_early; /* the job saw ticker_stopping */
};

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

static void job(struct ticker *t, void *arg)
{
    struct counter *c = arg;
    atomic_fetch_add(&c->runs, 1);
    while (atomic_load(&c->hold)) {
        if (ticker_stopping(t)) {
            atomic_store(&c->stopped_early, 1);
            return;
        }
        sleep_s(0.005);
    }
}

/* Waits until c has run at least n times; 0, or -1 after WAIT_S. */
static int runs_reach(struct counter *c, int n)
{
    double until = mono_s() + WAIT_S;
    while (atomic_load(&c->runs) < n)
        if (mono_s() > until)
            return -1;
        else
            sleep_s(0.002);
    return 0;
}

/* A ticker of `period` s running job on c, c holding its runs when `hold`;
 * its first run has begun. */
static struct ticker *started(struct counter *c, double period, int hold)
{
    struct shoal_err e;
    atomic_store(&c->hold, hold);
    struct ticker *t = ticker_start("a test ticker", period, job, c, &e);
    assert_non_null(t);
    assert_int_equal(runs_reach(c, 1), 0);
    return t;
}

static void test_runs_at_once_and_when_woken(void **state)
{
    (void)state;
    struct counter c = { 0 };
    struct ticker *t = started(&c, LONG_PERIOD_S, 0);
    ticker_wake(t);
    assert_int_equal(runs_reach(&c, 2), 0);
    ticker_wake(t);
    assert_int_equal(runs_reach(&c, 3), 0);
    sleep_s(0.1);
    assert_int_equal(atomic_load(&c.runs), 3);   /* nothing more without a wake */
    ticker_stop(t);
}

static void test_wake_during_a_run_is_kept(void **state)
{
    (void)state;
    struct counter c = { 0 };
    struct ticker *t = started(&c, LONG_PERIOD_S, 1);   /* the first run holds */
    ticker_wake(t);
    atomic_store(&c.hold, 0);
    assert_int_equal(runs_reach(&c, 2), 0);   /* the wake it got while running */
    ticker_stop(t);
}

static void test_runs_every_period(void **state)
{
    (void)state;
    struct counter c = { 0 };
    struct ticker *t = started(&c, 0.02, 0);
    assert_int_equal(runs_reach(&c, 4), 0);
    ticker_stop(t);
}

static void test_stop_ends_a_long_job(void **state)
{
    (void)state;
    struct counter c = { 0 };
    struct ticker *t = started(&c, LONG_PERIOD_S, 1);
    ticker_stop(t);   /* returns: the job saw it and ended */
    assert_int_equal(atomic_load(&c.stopped_early), 1);
    assert_int_equal(atomic_load(&c.runs), 1);
    ticker_wake(NULL);
    ticker_stop(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_at_once_and_when_woken),
        cmocka_unit_test(test_wake_during_a_run_is_kept),
        cmocka_unit_test(test_runs_every_period),
        cmocka_unit_test(test_stop_ends_a_long_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
