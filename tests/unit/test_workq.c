/* test_workq.c - server/http/workq.h: queued items run on the workers in
 * arrival order; with every worker held, an item is handed out late once it
 * has waited the queue's limit (not when a worker frees); a full queue
 * refuses; stopping hands out what waits, late, and lets running items
 * finish. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "../../server/http/workq.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

/* An item: how it was run and when. */
struct item {
    double hold_s;          /* a worker running it holds it this long */
    atomic_int ran, late;
    double done_at;         /* monotonic s */
    int order;              /* the how-many-th item run */
};

static atomic_int runs;

static void run(void *arg, int late, void *ctx)
{
    struct item *it = arg;
    (void)ctx;
    if (!late && it->hold_s > 0)
        sleep_s(it->hold_s);
    it->order = atomic_fetch_add(&runs, 1);
    it->done_at = now_s();
    atomic_store(late ? &it->late : &it->ran, 1);
}

static void wait_done(struct item *it, double limit_s)
{
    double end = now_s() + limit_s;
    while (!atomic_load(&it->ran) && !atomic_load(&it->late) && now_s() < end)
        sleep_s(0.005);
}

static void test_runs_in_order(void **state)
{
    (void)state;
    struct shoal_err e;
    struct item items[20] = { { 0 } };
    atomic_store(&runs, 0);
    struct workq *q = workq_start("test", 1, 32, 10.0, run, NULL, &e);
    assert_non_null(q);
    for (int i = 0; i < 20; i++)
        assert_int_equal(workq_submit(q, &items[i]), 0);
    wait_done(&items[19], 5.0);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(atomic_load(&items[i].ran), 1);
        assert_int_equal(items[i].order, i);   /* one worker: arrival order */
    }
    workq_stop(q);
}

static void test_late_at_the_limit_while_workers_are_held(void **state)
{
    (void)state;
    struct shoal_err e;
    struct item held[2] = { { .hold_s = 1.5 }, { .hold_s = 1.5 } };
    struct item waiting = { 0 };
    struct workq *q = workq_start("test", 2, 8, 0.3, run, NULL, &e);
    assert_non_null(q);
    assert_int_equal(workq_submit(q, &held[0]), 0);
    assert_int_equal(workq_submit(q, &held[1]), 0);
    sleep_s(0.1);   /* both workers hold theirs */
    double t0 = now_s();
    assert_int_equal(workq_submit(q, &waiting), 0);
    struct workq_counts n;
    workq_counts(q, &n);
    assert_int_equal(n.waiting, 1);
    assert_int_equal(n.running, 2);
    wait_done(&waiting, 5.0);
    assert_int_equal(atomic_load(&waiting.late), 1);
    assert_int_equal(atomic_load(&waiting.ran), 0);
    double took = waiting.done_at - t0;
    assert_true(took >= 0.29);
    assert_true(took < 1.2);   /* at its limit, not when a worker freed (1.4 s) */
    workq_counts(q, &n);
    assert_int_equal(n.late, 1);
    workq_stop(q);
    assert_int_equal(atomic_load(&held[0].ran) + atomic_load(&held[1].ran), 2);   /* running ones finish */
}

static void test_full_refuses_and_stop_hands_out(void **state)
{
    (void)state;
    struct shoal_err e;
    struct item held = { .hold_s = 0.5 }, w[2] = { { 0 } }, extra = { 0 };
    struct workq *q = workq_start("test", 1, 2, 60.0, run, NULL, &e);
    assert_non_null(q);
    assert_int_equal(workq_submit(q, &held), 0);
    sleep_s(0.1);
    assert_int_equal(workq_submit(q, &w[0]), 0);
    assert_int_equal(workq_submit(q, &w[1]), 0);
    assert_int_equal(workq_submit(q, &extra), -1);   /* 2 waiting: full */
    struct workq_counts n;
    workq_counts(q, &n);
    assert_int_equal(n.refused, 1);
    workq_stop(q);
    assert_int_equal(atomic_load(&held.ran), 1);
    assert_int_equal(atomic_load(&w[0].late) + atomic_load(&w[1].late), 2);
    assert_int_equal(atomic_load(&extra.ran) + atomic_load(&extra.late), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_in_order),
        cmocka_unit_test(test_late_at_the_limit_while_workers_are_held),
        cmocka_unit_test(test_full_refuses_and_stop_hands_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
