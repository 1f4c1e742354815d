/* test_sched_path.c - server/sched/path.h: the pipeline order.  Held-Karp
 * (P <= PATH_EXACT_MAX) against brute force over every permutation; the
 * heuristic (P > PATH_EXACT_MAX) for validity, for agreeing with path_cost,
 * and for being no worse than the identity and nearest-neighbour orders;
 * both on instances whose optimum is known by construction. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/sched/internal.h"   /* rng_next, rng_below */
#include "../../server/sched/path.h"

#define MAX_P 20

static double unit(uint64_t *rng)
{
    return (double)(rng_next(rng) >> 11) / 9007199254740992.0;
}

/* Random symmetric P x P costs, zero diagonal; `ties` draws from 4 values. */
static void random_symmetric(double *c, int P, int ties, uint64_t *rng)
{
    for (int g = 0; g < P; g++) {
        c[g * P + g] = 0;
        for (int h = g + 1; h < P; h++)
            c[g * P + h] = c[h * P + g] = ties ? (double)(1 + rng_below(rng, 4)) : 0.01 + 5.0 * unit(rng);
    }
}

/* Oracle: the cheapest open path over all P! orders (branch and bound on
 * the partial sum, valid because costs are >= 0). */
static void brute_rec(const double *c, int P, int depth, int last, char *used, double cur, double *best)
{
    if (cur >= *best)
        return;
    if (depth == P) {
        *best = cur;
        return;
    }
    for (int k = 0; k < P; k++) {
        if (used[k])
            continue;
        used[k] = 1;
        brute_rec(c, P, depth + 1, k, used, depth ? cur + c[last * P + k] : 0, best);
        used[k] = 0;
    }
}

static double brute_path(const double *c, int P)
{
    char used[MAX_P] = { 0 };
    double best = DBL_MAX;
    brute_rec(c, P, 0, -1, used, 0, &best);
    return best;
}

static void assert_permutation(const int *order, int P)
{
    char seen[MAX_P] = { 0 };
    for (int s = 0; s < P; s++) {
        assert_in_range(order[s], 0, P - 1);
        assert_int_equal(seen[order[s]], 0);
        seen[order[s]] = 1;
    }
}

static void assert_close(double got, double want)
{
    double tol = 1e-9 * (fabs(want) > 1 ? fabs(want) : 1);
    if (fabs(got - want) > tol)
        fail_msg("got %.17g, want %.17g", got, want);
}

/* Nearest neighbour from `start`, first index on ties (as path.c does). */
static double nearest_neighbour(const double *c, int P, int start, int *order)
{
    char used[MAX_P] = { 0 };
    order[0] = start;
    used[start] = 1;
    for (int s = 1; s < P; s++) {
        int prev = order[s - 1], next = -1;
        for (int k = 0; k < P; k++)
            if (!used[k] && (next < 0 || c[prev * P + k] < c[prev * P + next]))
                next = k;
        order[s] = next;
        used[next] = 1;
    }
    return path_cost(c, P, order);
}

static void check_exact(const double *c, int P, struct path_work *pw)
{
    int order[MAX_P];
    double got = path_open_best(c, P, order, pw);
    assert_permutation(order, P);
    assert_close(path_cost(c, P, order), got);
    assert_close(got, brute_path(c, P));
}

/* P = 1..9: the exact range against every permutation. */
static void test_path_exact_vs_brute_force(void **state)
{
    (void)state;
    double c[MAX_P * MAX_P];
    for (int P = 1; P <= 9; P++) {
        struct path_work *pw = path_work_new(P);
        assert_non_null(pw);
        int seeds = P <= 6 ? 200 : P <= 8 ? 40 : 12;
        for (int seed = 1; seed <= seeds; seed++) {
            uint64_t rng = (uint64_t)P * 1000003u + (uint64_t)seed;
            random_symmetric(c, P, seed & 1, &rng);
            check_exact(c, P, pw);
        }
        path_work_free(pw);
    }
}

/* One workspace sized for a larger P serves smaller problems too. */
static void test_path_workspace_larger_than_problem(void **state)
{
    (void)state;
    double c[MAX_P * MAX_P];
    struct path_work *pw = path_work_new(PATH_EXACT_MAX);
    assert_non_null(pw);
    for (int P = 1; P <= 8; P++) {
        uint64_t rng = 99u + (uint64_t)P;
        random_symmetric(c, P, 0, &rng);
        check_exact(c, P, pw);
    }
    path_work_free(pw);
}

/* Points on a line, shuffled: the optimum is max - min (visit in order). */
static double line_instance(double *c, int P, uint64_t *rng)
{
    double x[MAX_P], lo = DBL_MAX, hi = -DBL_MAX;
    for (int g = 0; g < P; g++) {
        x[g] = 100.0 * unit(rng);
        if (x[g] < lo) lo = x[g];
        if (x[g] > hi) hi = x[g];
    }
    for (int g = 0; g < P; g++)
        for (int h = 0; h < P; h++)
            c[g * P + h] = fabs(x[g] - x[h]);
    return hi - lo;
}

/* A hidden path of cost-1 edges, every other edge 10: the optimum is P - 1. */
static double planted_instance(double *c, int P, uint64_t *rng)
{
    int perm[MAX_P];
    for (int g = 0; g < P; g++)
        perm[g] = g;
    for (int g = P - 1; g > 0; g--) {
        int j = rng_below(rng, g + 1);
        int t = perm[g]; perm[g] = perm[j]; perm[j] = t;
    }
    for (int g = 0; g < P; g++)
        for (int h = 0; h < P; h++)
            c[g * P + h] = g == h ? 0 : 10;
    for (int s = 0; s + 1 < P; s++)
        c[perm[s] * P + perm[s + 1]] = c[perm[s + 1] * P + perm[s]] = 1;
    return P - 1;
}

/* Known optima across the exact range's top (10..16) and the heuristic's
 * range (17..20). */
static void test_path_known_optimum(void **state)
{
    (void)state;
    double c[MAX_P * MAX_P];
    int order[MAX_P];
    for (int P = 10; P <= MAX_P; P++) {
        struct path_work *pw = path_work_new(P);
        assert_non_null(pw);
        uint64_t rng = 7u + (uint64_t)P;
        double want = line_instance(c, P, &rng);
        double got = path_open_best(c, P, order, pw);
        assert_permutation(order, P);
        assert_close(got, want);
        assert_close(path_cost(c, P, order), got);

        want = planted_instance(c, P, &rng);
        got = path_open_best(c, P, order, pw);
        assert_permutation(order, P);
        assert_close(got, want);
        assert_close(path_cost(c, P, order), got);
        path_work_free(pw);
    }
}

/* Exact at P = 10, 11 against branch and bound (still every permutation). */
static void test_path_exact_p10_p11(void **state)
{
    (void)state;
    double c[MAX_P * MAX_P];
    for (int P = 10; P <= 11; P++) {
        struct path_work *pw = path_work_new(P);
        assert_non_null(pw);
        for (int seed = 1; seed <= 2; seed++) {
            uint64_t rng = (uint64_t)seed * 31u + (uint64_t)P;
            random_symmetric(c, P, seed & 1, &rng);
            check_exact(c, P, pw);
        }
        path_work_free(pw);
    }
}

/* P = 17..20 (heuristic): a valid order whose path_cost is the returned
 * value, no worse than the identity order or any nearest-neighbour order. */
static void test_path_heuristic_quality(void **state)
{
    (void)state;
    double c[MAX_P * MAX_P];
    int order[MAX_P], nn[MAX_P], ident[MAX_P];
    for (int P = PATH_EXACT_MAX + 1; P <= MAX_P; P++) {
        struct path_work *pw = path_work_new(P);
        assert_non_null(pw);
        for (int g = 0; g < P; g++)
            ident[g] = g;
        for (int seed = 1; seed <= 10; seed++) {
            uint64_t rng = (uint64_t)seed * 65537u + (uint64_t)P;
            random_symmetric(c, P, seed % 3 == 0, &rng);
            double got = path_open_best(c, P, order, pw);
            assert_permutation(order, P);
            assert_true(path_cost(c, P, order) == got);
            assert_true(got <= path_cost(c, P, ident) + 1e-12);
            for (int start = 0; start < P; start++)
                assert_true(got <= nearest_neighbour(c, P, start, nn) + 1e-12);
        }
        path_work_free(pw);
    }
}

/* path_cost: the sum of consecutive edges in the given order only. */
static void test_path_cost_by_hand(void **state)
{
    (void)state;
    /* 4 groups; c[g][h] = 10*min + max for distinct readability. */
    const double c[16] = {
        0,  1,  2,  3,
        1,  0, 12, 13,
        2, 12,  0, 23,
        3, 13, 23,  0,
    };
    const int a[4] = { 0, 1, 2, 3 }, b[4] = { 3, 0, 1, 2 }, r[4] = { 3, 2, 1, 0 };
    assert_true(path_cost(c, 4, a) == 1 + 12 + 23);
    assert_true(path_cost(c, 4, b) == 3 + 1 + 12);
    assert_true(path_cost(c, 4, r) == path_cost(c, 4, a));   /* symmetric: reverse costs the same */
    assert_true(path_cost(c, 1, a) == 0);
    /* Best: 2-0-1-3 = 2 + 1 + 13 = 16, or 3-0-1-2... = 3 + 1 + 12 = 16. */
    struct path_work *pw = path_work_new(4);
    assert_non_null(pw);
    int order[4];
    assert_true(path_open_best(c, 4, order, pw) == 16);
    assert_true(path_cost(c, 4, order) == 16);
    path_work_free(pw);

    /* P = 1: one stage, no edges. */
    pw = path_work_new(1);
    assert_non_null(pw);
    const double one[1] = { 0 };
    order[0] = -1;
    assert_true(path_open_best(one, 1, order, pw) == 0);
    assert_int_equal(order[0], 0);
    path_work_free(pw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_exact_vs_brute_force),
        cmocka_unit_test(test_path_workspace_larger_than_problem),
        cmocka_unit_test(test_path_exact_p10_p11),
        cmocka_unit_test(test_path_known_optimum),
        cmocka_unit_test(test_path_heuristic_quality),
        cmocka_unit_test(test_path_cost_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
