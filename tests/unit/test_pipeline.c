/* test_pipeline.c - agent/train/pipeline.h: every micro-batch runs forward once
 * and then backward once, the in-flight bound holds, backwards come in
 * micro-batch order, and a whole pipeline of stages following their orders
 * finishes (no stage waits forever) in the textbook number of time slots. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "../../agent/train/pipeline.h"

#define MAXP 8
#define MAXM 16

static void check_one_stage(enum pipe_kind kind, int s, int P, int M)
{
    struct pipe_op ops[2 * MAXM];
    int seen_f[MAXM] = {0}, seen_b[MAXM] = {0}, live = 0, most = 0, next_b = 0;
    int in_flight = pipe_schedule(kind, s, P, M, ops);
    for (int i = 0; i < 2 * M; i++) {
        int m = ops[i].micro_batch;
        assert_true(m >= 0 && m < M);
        if (ops[i].kind == PIPE_FORWARD) {
            assert_int_equal(seen_f[m]++, 0);
            live++;
        } else {
            assert_int_equal(seen_f[m], 1);
            assert_int_equal(seen_b[m]++, 0);
            assert_int_equal(m, next_b++);
            live--;
        }
        most = live > most ? live : most;
    }
    assert_int_equal(live, 0);
    assert_int_equal(most, in_flight);
    if (kind == PIPE_GPIPE)
        assert_int_equal(in_flight, M);
    else
        assert_int_equal(in_flight, (P - s) < M ? P - s : M);
}

/* Runs all stages in unit-time slots: F(s,m) needs F(s-1,m) finished in an
 * earlier slot; B(s,m) needs B(s+1,m) (or, on the last stage, F(s,m)).
 * Returns the number of slots, or -1 on a deadlock. */
static int simulate(enum pipe_kind kind, int P, int M)
{
    struct pipe_op ops[MAXP][2 * MAXM];
    int pos[MAXP] = {0}, f_done[MAXP][MAXM], b_done[MAXP][MAXM];
    memset(f_done, -1, sizeof f_done);
    memset(b_done, -1, sizeof b_done);
    for (int s = 0; s < P; s++)
        pipe_schedule(kind, s, P, M, ops[s]);
    for (int t = 0; t < 10 * (M + P) * 2; t++) {
        int all = 1;
        for (int s = 0; s < P; s++) {
            if (pos[s] == 2 * M)
                continue;
            all = 0;
            struct pipe_op op = ops[s][pos[s]];
            int m = op.micro_batch, ready;
            if (op.kind == PIPE_FORWARD)
                ready = s == 0 || (f_done[s - 1][m] >= 0 && f_done[s - 1][m] < t);
            else
                ready = s == P - 1 ? (f_done[s][m] >= 0 && f_done[s][m] < t)
                                   : (b_done[s + 1][m] >= 0 && b_done[s + 1][m] < t);
            if (ready) {
                (op.kind == PIPE_FORWARD ? f_done : b_done)[s][m] = t;
                pos[s]++;
            }
        }
        if (all)
            return t;
    }
    return -1;
}

static void test_orders(void **state)
{
    (void)state;
    for (int P = 1; P <= MAXP; P++)
        for (int M = 1; M <= MAXM; M++)
            for (int s = 0; s < P; s++) {
                check_one_stage(PIPE_GPIPE, s, P, M);
                check_one_stage(PIPE_1F1B, s, P, M);
            }
}

static void test_pipelines_finish(void **state)
{
    (void)state;
    for (int P = 1; P <= MAXP; P++)
        for (int M = 1; M <= MAXM; M++) {
            /* GPipe with unit forward and backward: 2(M + P - 1) slots. */
            assert_int_equal(simulate(PIPE_GPIPE, P, M), 2 * (M + P - 1));
            /* 1F1B has the same bubble as GPipe, only less memory. */
            assert_int_equal(simulate(PIPE_1F1B, P, M), 2 * (M + P - 1));
        }
}

static void test_parse(void **state)
{
    (void)state;
    enum pipe_kind k;
    assert_int_equal(pipe_parse("gpipe", &k), 0);
    assert_int_equal(k, PIPE_GPIPE);
    assert_int_equal(pipe_parse("1f1b", &k), 0);
    assert_int_equal(k, PIPE_1F1B);
    assert_int_equal(pipe_parse("zb", &k), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_pipelines_finish),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
