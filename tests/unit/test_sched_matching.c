/* test_sched_matching.c - server/sched/matching.h: match_bottleneck against
 * brute force over every permutation (the oracle), on random instances with
 * continuous costs, with many ties, and with all costs equal. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../server/sched/internal.h"   /* rng_next, rng_below */
#include "../../server/sched/matching.h"

#define MAX_D 7

enum kind { KIND_REAL, KIND_TIES, KIND_EQUAL, KIND_DUPROWS };

/* The smallest maximum over all D! permutations: the oracle. */
static void brute_rec(const double *w, int D, int i, char *used, double cur, double *best)
{
    if (i == D) {
        if (cur < *best)
            *best = cur;
        return;
    }
    for (int j = 0; j < D; j++) {
        if (used[j])
            continue;
        used[j] = 1;
        double v = w[i * D + j] > cur ? w[i * D + j] : cur;
        brute_rec(w, D, i + 1, used, v, best);
        used[j] = 0;
    }
}

static double brute_bottleneck(const double *w, int D)
{
    char used[MAX_D] = { 0 };
    double best = DBL_MAX;
    brute_rec(w, D, 0, used, -DBL_MAX, &best);
    return best;
}

static void fill(double *w, int D, enum kind k, uint64_t *rng)
{
    for (int i = 0; i < D * D; i++) {
        switch (k) {
        case KIND_REAL:   /* latency-like seconds, all distinct in practice */
            w[i] = (double)(rng_next(rng) >> 11) / 9007199254740992.0 * 3.0;
            break;
        case KIND_TIES:   /* four values: many equal costs */
            w[i] = 0.25 * rng_below(rng, 4);
            break;
        case KIND_EQUAL:
            w[i] = 1.5;
            break;
        case KIND_DUPROWS: /* identical rows: every column costs the same for all */
            w[i] = i < D ? 0.5 * rng_below(rng, 6) : w[i % D];
            break;
        }
    }
}

/* Checks one instance: value = oracle, pair is a permutation attaining it. */
static void check_instance(const double *w, int D, struct match_work *ws)
{
    int pair[MAX_D];
    for (int i = 0; i < D; i++)
        pair[i] = -7;
    double got = match_bottleneck(w, D, pair, ws);
    double want = brute_bottleneck(w, D);
    assert_true(got == want);   /* both are one of the entries of w: exact */
    char used[MAX_D] = { 0 };
    double worst = -DBL_MAX;
    for (int i = 0; i < D; i++) {
        assert_in_range(pair[i], 0, D - 1);
        assert_int_equal(used[pair[i]], 0);
        used[pair[i]] = 1;
        if (w[i * D + pair[i]] > worst)
            worst = w[i * D + pair[i]];
    }
    assert_true(worst == got);
    /* pair may be NULL, and the value does not depend on it. */
    assert_true(match_bottleneck(w, D, NULL, ws) == want);
}

static void run_kind(enum kind k, int seeds)
{
    struct match_work *ws = calloc(1, sizeof *ws);
    assert_non_null(ws);
    double w[MAX_D * MAX_D];
    for (int D = 1; D <= MAX_D; D++) {
        for (int seed = 1; seed <= seeds; seed++) {
            uint64_t rng = (uint64_t)seed * 1000003u + (uint64_t)D * 7919u + (uint64_t)k;
            fill(w, D, k, &rng);
            check_instance(w, D, ws);
        }
    }
    free(ws);
}

static void test_match_random_real_costs(void **state)
{
    (void)state;
    run_kind(KIND_REAL, 300);
}

static void test_match_random_with_ties(void **state)
{
    (void)state;
    run_kind(KIND_TIES, 300);
}

static void test_match_duplicate_rows(void **state)
{
    (void)state;
    run_kind(KIND_DUPROWS, 100);
}

static void test_match_all_equal(void **state)
{
    (void)state;
    run_kind(KIND_EQUAL, 1);
}

/* Hand cases: the row/column lower bound is attained, and one where it is
 * not (the cheap edges all share a column). */
static void test_match_hand_cases(void **state)
{
    (void)state;
    struct match_work *ws = calloc(1, sizeof *ws);
    assert_non_null(ws);
    int pair[3];

    /* Diagonal cheap: bound = 1 = answer, identity pairing. */
    const double diag[9] = { 1, 9, 9,  9, 1, 9,  9, 9, 1 };
    assert_true(match_bottleneck(diag, 3, pair, ws) == 1);
    assert_int_equal(pair[0], 0);
    assert_int_equal(pair[1], 1);
    assert_int_equal(pair[2], 2);

    /* Every row's cheapest is column 0 (bound 1 from rows and columns), but
     * only one row can have it: the answer is the second-cheapest level. */
    const double col[9] = { 1, 5, 7,  1, 6, 5,  1, 8, 8 };
    /* row 2 must take column 0 (others cost 8), rows 0 and 1 then take
     * columns 1 and 2: max(5, 5) = 5 via 0->1, 1->2. */
    assert_true(match_bottleneck(col, 3, pair, ws) == 5);
    assert_int_equal(pair[0], 1);
    assert_int_equal(pair[1], 2);
    assert_int_equal(pair[2], 0);

    /* D = 1: the single cost. */
    const double one[1] = { 2.5 };
    assert_true(match_bottleneck(one, 1, pair, ws) == 2.5);
    assert_int_equal(pair[0], 0);
    free(ws);
}

/* The same workspace used for many calls (as a search does) gives the same
 * answers as a fresh one: the visit stamps are reset correctly. */
static void test_match_workspace_reuse(void **state)
{
    (void)state;
    struct match_work *ws = calloc(1, sizeof *ws), *fresh = malloc(sizeof *fresh);
    assert_non_null(ws);
    assert_non_null(fresh);
    uint64_t rng = 42;
    double w[MAX_D * MAX_D];
    for (int it = 0; it < 3000; it++) {
        int D = 1 + rng_below(&rng, MAX_D);
        fill(w, D, it & 1 ? KIND_TIES : KIND_REAL, &rng);
        memset(fresh, 0, sizeof *fresh);
        assert_true(match_bottleneck(w, D, NULL, ws) == match_bottleneck(w, D, NULL, fresh));
    }
    free(ws);
    free(fresh);
}

/* A hint (the matching before one row changed, or any permutation, or
 * junk) changes how the matching is found, never its value, and the pairs
 * returned attain it. */
static void test_match_hint_same_value(void **state)
{
    (void)state;
    struct match_work *ws = calloc(1, sizeof *ws);
    assert_non_null(ws);
    uint64_t rng = 4242;
    double w[MAX_D * MAX_D];
    int pair[MAX_D], hint[MAX_D];
    for (int it = 0; it < 3000; it++) {
        int D = 1 + rng_below(&rng, MAX_D);
        fill(w, D, it & 1 ? KIND_TIES : KIND_REAL, &rng);
        double want = match_bottleneck(w, D, hint, ws);
        int changed = rng_below(&rng, D);   /* one node replaced: its row redrawn */
        for (int j = 0; j < D; j++)
            w[changed * D + j] = (double)rng_below(&rng, 100);
        want = match_bottleneck(w, D, NULL, ws);
        if (it % 3 == 1)
            rng_permutation(hint, D, &rng);
        if (it % 3 == 2)
            for (int i = 0; i < D; i++)
                hint[i] = rng_below(&rng, D + 3) - 1;   /* duplicates, -1 and past the end */
        memcpy(pair, hint, sizeof(int) * (size_t)D);
        double got = match_bottleneck_hint(w, D, pair, pair, ws);
        assert_true(got == want);
        double worst = -1;
        for (int i = 0; i < D; i++)
            if (w[i * D + pair[i]] > worst)
                worst = w[i * D + pair[i]];
        assert_true(worst == want);
    }
    free(ws);
}

/* match_work.stamp is reset before it would overflow, so a long search
 * never reaches signed overflow (UBSan would abort).  Run in a child so an
 * abort fails this test only. */
static void test_match_stamp_near_int_max(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct match_work *ws = calloc(1, sizeof *ws);
        if (!ws)
            _exit(2);
        ws->stamp = INT_MAX - 1;
        /* Cheap edges share column 0, so the bound fails and the binary
         * search runs more feasibility tests: many stamp increments. */
        const double w[9] = { 1, 5, 7,  1, 6, 5,  1, 8, 8 };
        int pair[3];
        double v = match_bottleneck(w, 3, pair, ws);
        _exit(v == 5 && pair[0] == 1 && pair[1] == 2 && pair[2] == 0 ? 0 : 3);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_random_real_costs),
        cmocka_unit_test(test_match_hint_same_value),
        cmocka_unit_test(test_match_random_with_ties),
        cmocka_unit_test(test_match_duplicate_rows),
        cmocka_unit_test(test_match_all_equal),
        cmocka_unit_test(test_match_hand_cases),
        cmocka_unit_test(test_match_workspace_reuse),
        cmocka_unit_test(test_match_stamp_near_int_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
