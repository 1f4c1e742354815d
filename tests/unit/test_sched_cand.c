/* test_sched_cand.c - server/sched/cost.c's cached candidate costs (what
 * the search updates per moved group) against costing the plan they stand
 * for from scratch, on random networks, under both cost models. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/sched/internal.h"
#include "../../server/sched/sched.h"
#include "sched_fixture.h"
#include "sched_random_net.h"

static void random_cand(const struct sched_ctx *cx, struct cand *c, uint64_t *rng)
{
    rng_permutation(c->member, cx->n, rng);
    for (int i = 0; i < cx->n; i++)
        c->pos[c->member[i]] = i;
}

/* The cost the search ranks a candidate by equals the cost of the plan it
 * turns into (cand_to_plan -> cost_plan, what sched_evaluate computes). */
static void check_cand_matches_plan(int P, int D, int n, enum sched_cost cost, int symmetric, int trials)
{
    struct net w;
    uint64_t rng = 12345u + (uint64_t)(P * 100 + D * 10 + n) + (uint64_t)cost * 7u + (uint64_t)symmetric;
    int bad = 0;
    double worst_got = 0, worst_want = 0;
    for (int t = 0; t < trials; t++) {
        random_net(&w, n, &rng, symmetric);
        struct sched_problem pb = net_problem(&w, P, D, cost);
        struct sched_ctx cx;
        struct cand c;
        struct sched_plan plan;
        assert_int_equal(ctx_init(&cx, &pb), 0);
        assert_int_equal(cand_alloc(&c, &cx), 0);
        assert_int_equal(sched_plan_init(&plan, P, D), 0);
        random_cand(&cx, &c, &rng);
        cand_eval_full(&cx, &c);
        cand_to_plan(&cx, &c, &plan);
        if (fabs(plan.cost.total_s - c.cost) > 1e-9 * c.cost) {
            if (!bad) {
                worst_got = c.cost;
                worst_want = plan.cost.total_s;
            }
            bad++;
        }
        sched_plan_free(&plan);
        cand_free(&c);
        ctx_free(&cx);
    }
    if (bad)
        fail_msg("P=%d D=%d n=%d %s: %d of %d candidates cost differently from their plan "
                 "(first: candidate %.9g, plan %.9g)", P, D, n, cost == SCHED_COST_DTFM ? "dtfm" : "shoal",
                 bad, trials, worst_got, worst_want);
}

static void test_cost_cand_matches_plan_dtfm(void **state)
{
    (void)state;
    check_cand_matches_plan(2, 3, 6, SCHED_COST_DTFM, 0, 50);
    check_cand_matches_plan(3, 2, 7, SCHED_COST_DTFM, 0, 50);
    check_cand_matches_plan(3, 4, 12, SCHED_COST_DTFM, 0, 50);
    check_cand_matches_plan(4, 1, 5, SCHED_COST_DTFM, 0, 50);
}

static void test_cost_cand_matches_plan_shoal_d2(void **state)
{
    (void)state;
    check_cand_matches_plan(2, 2, 5, SCHED_COST_SHOAL, 0, 50);
    check_cand_matches_plan(4, 1, 5, SCHED_COST_SHOAL, 0, 50);
    check_cand_matches_plan(3, 2, 6, SCHED_COST_SHOAL, 1, 50);
}

/* The shoal model's all-reduce ring depends only on which nodes are in a
 * group (cost.c group_ring starts from the lowest node index), so the cost
 * the search ranks a candidate by is the cost of the plan it returns, even
 * for D >= 3 where member and replica order differ. */
static void test_cost_cand_matches_plan_shoal_d4(void **state)
{
    (void)state;
    check_cand_matches_plan(2, 4, 8, SCHED_COST_SHOAL, 1, 50);
    check_cand_matches_plan(3, 3, 9, SCHED_COST_SHOAL, 0, 50);
}

/* After a swap, recosting only the two groups touched (what the local
 * search does) gives what a full recost gives, spares included. */
static void check_incremental(int P, int D, int n, enum sched_cost cost)
{
    struct net w;
    uint64_t rng = 777u + (uint64_t)(P * 100 + D * 10 + n) + (uint64_t)cost;
    random_net(&w, n, &rng, 0);
    struct sched_problem pb = net_problem(&w, P, D, cost);
    struct sched_ctx cx;
    struct cand c, full, bounded;
    struct sched_plan plan;
    assert_int_equal(ctx_init(&cx, &pb), 0);
    assert_int_equal(cand_alloc(&c, &cx), 0);
    assert_int_equal(cand_alloc(&full, &cx), 0);
    assert_int_equal(cand_alloc(&bounded, &cx), 0);
    assert_int_equal(sched_plan_init(&plan, P, D), 0);
    random_cand(&cx, &c, &rng);
    cand_eval_full(&cx, &c);
    int rejected = 0;
    for (int it = 0; it < 300; it++) {
        int x = rng_below(&rng, n), y = rng_below(&rng, n);
        int gx = c.pos[x] / D < P ? c.pos[x] / D : P, gy = c.pos[y] / D < P ? c.pos[y] / D : P;
        if (gx == gy)
            continue;
        int px = c.pos[x], py = c.pos[y];
        c.member[px] = y; c.member[py] = x;
        c.pos[x] = py; c.pos[y] = px;
        double before = c.cost;
        cand_copy(&bounded, &c, &cx);
        cand_eval_groups(&cx, &c, gx, gy, DBL_MAX);
        int whole = cand_eval_groups(&cx, &bounded, gx, gy, before);
        cand_copy(&full, &c, &cx);
        cand_eval_full(&cx, &full);
        /* shoal keeps the old order where it costs less than the path's */
        if (cost == SCHED_COST_DTFM) {
            assert_near(c.cost, full.cost, 1e-12);
            assert_near(c.tie, full.tie, 1e-12);
        } else {
            assert_true(c.cost <= full.cost + 1e-12 * full.cost);
        }
        cand_to_plan(&cx, &c, &plan);
        assert_near(plan.cost.total_s, c.cost, 1e-12);
        for (int g = 0; g < P; g++)
            for (int h = 0; h < P; h++)
                assert_true(c.edge[g * P + h] == full.edge[g * P + h]);
        /* With a bound: under dtfm a move that beats it in the best order
         * gets that order's cost, one that does not may keep the old order
         * (never below the full evaluation: the path is exact); under
         * shoal a move that does not beat it in the old order keeps that
         * order.  Either way the cost is that of the plan its order
         * describes. */
        if (!whole) {   /* rejected by lower bounds: rightly */
            assert_int_equal(cost, SCHED_COST_DTFM);
            assert_true(full.cost > before);
            rejected++;
            continue;
        }
        if (cost == SCHED_COST_DTFM) {
            if (full.cost < before - 1e-9)
                assert_near(bounded.cost, full.cost, 1e-12);
            assert_true(bounded.cost >= full.cost - 1e-12 * full.cost);
        }
        cand_to_plan(&cx, &bounded, &plan);
        assert_near(plan.cost.total_s, bounded.cost, 1e-12);
    }
    if (cost == SCHED_COST_DTFM)   /* the bounds do reject moves */
        assert_true(rejected > 0);
    cand_free(&c);
    cand_free(&full);
    cand_free(&bounded);
    sched_plan_free(&plan);
    ctx_free(&cx);
}

static void test_cost_incremental_matches_full(void **state)
{
    (void)state;
    check_incremental(3, 2, 6, SCHED_COST_DTFM);
    check_incremental(3, 2, 8, SCHED_COST_DTFM);   /* two spares */
    check_incremental(2, 3, 7, SCHED_COST_SHOAL);
    check_incremental(4, 2, 10, SCHED_COST_SHOAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cost_cand_matches_plan_dtfm),
        cmocka_unit_test(test_cost_cand_matches_plan_shoal_d2),
        cmocka_unit_test(test_cost_cand_matches_plan_shoal_d4),
        cmocka_unit_test(test_cost_incremental_matches_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
