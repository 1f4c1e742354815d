/* test_router.c - server/http/router.h against a local table (not routes.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "../../server/http/router.h"

/* Handlers are never called by the router; NULL keeps the table self-contained. */
static const struct route test_routes[] = {
    /* 0 */ { "GET", "/v1/jobs", AUTH_ADMIN, NULL, LANE_DATABASE },
    /* 1 */ { "POST", "/v1/jobs", AUTH_ADMIN, NULL, LANE_DATABASE },
    /* 2 */ { "GET", "/v1/jobs/{id}", AUTH_ADMIN, NULL, LANE_DATABASE },
    /* 3 */ { "DELETE", "/v1/jobs/{id}", AUTH_ADMIN, NULL, LANE_DATABASE },
    /* 4 */ { "GET", "/v1/jobs/{id}/tasklets/{id}", AUTH_ADMIN, NULL, LANE_DATABASE },
    /* 5 */ { "GET", "/healthz", AUTH_OPEN, NULL, LANE_INLINE },
    /* 6 */ { "GET", "/", AUTH_OPEN, NULL, LANE_DATABASE },
    /* 7 */ { "PUT", "/links", AUTH_NODE, NULL, LANE_DATABASE },
    /* 8 */ { "GET", "/v1/jobs/{id}/checkpoints/{n}/stages/{n}", AUTH_ADMIN, NULL, LANE_DATABASE },
};
#define N_ROUTES (sizeof test_routes / sizeof test_routes[0])

struct router_case {
    const char *method;
    const char *path;
    int rc;           /* 0, 400, 404 or 405 */
    int index;        /* for rc 0; for rc 400, the route of the path's shape and method, or -1 */
    int n_ids;
    int64_t ids[ROUTE_MAX_IDS];
    const char *allow; /* for rc 405 */
};

static void run_cases(const struct router_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct router_case *c = &cases[i];
        struct route_match m;
        struct shoal_err err;
        memset(&m, 0x5a, sizeof m);
        err_clear(&err);
        int rc = router_match(test_routes, N_ROUTES, c->method, c->path, &m, &err);
        if (rc != c->rc)
            fail_msg("%s %s: rc %d, want %d", c->method, c->path, rc, c->rc);
        if (c->rc == 0) {
            if (m.index != c->index)
                fail_msg("%s %s: route %d, want %d", c->method, c->path, m.index, c->index);
            if (m.n_ids != c->n_ids)
                fail_msg("%s %s: %d ids, want %d", c->method, c->path, m.n_ids, c->n_ids);
            for (int k = 0; k < c->n_ids; k++)
                if (m.ids[k] != c->ids[k])
                    fail_msg("%s %s: id[%d] = %lld, want %lld", c->method, c->path, k,
                             (long long)m.ids[k], (long long)c->ids[k]);
            assert_string_equal(m.allow, "");
        } else if (c->rc == 400) {
            if (m.index != c->index)
                fail_msg("%s %s: index %d on rc 400, want %d", c->method, c->path, m.index, c->index);
        } else {
            if (m.index != -1)
                fail_msg("%s %s: index %d on rc %d, want -1", c->method, c->path, m.index, rc);
        }
        if (c->rc == 405 && strcmp(m.allow, c->allow) != 0)
            fail_msg("%s %s: allow \"%s\", want \"%s\"", c->method, c->path, m.allow, c->allow);
        if (c->rc == 400) {
            if (err.status != 400 || strcmp(err.code, "invalid_id") != 0 ||
                strcmp(err.field, "id") != 0)
                fail_msg("%s %s: err %d %s field \"%s\", want 400 invalid_id field \"id\"",
                         c->method, c->path, err.status, err.code, err.field);
        } else if (err.status != 0) {
            fail_msg("%s %s: err set (%d %s) on rc %d", c->method, c->path, err.status,
                     err.code, rc);
        }
    }
}

static void test_router_exact_and_prefix(void **state)
{
    (void)state;
    static const struct router_case cases[] = {
        { "GET", "/v1/jobs", 0, 0, 0, { 0 }, NULL },
        { "POST", "/v1/jobs", 0, 1, 0, { 0 }, NULL },
        /* "/v1" optional on the path ... */
        { "GET", "/jobs", 0, 0, 0, { 0 }, NULL },
        { "POST", "/jobs", 0, 1, 0, { 0 }, NULL },
        /* ... and on the pattern: "/healthz" and "/links" are written without it. */
        { "GET", "/healthz", 0, 5, 0, { 0 }, NULL },
        { "GET", "/v1/healthz", 0, 5, 0, { 0 }, NULL },
        { "PUT", "/v1/links", 0, 7, 0, { 0 }, NULL },
        { "PUT", "/links", 0, 7, 0, { 0 }, NULL },
        /* Root: "/v1" and "/v1/" are the root too. */
        { "GET", "/", 0, 6, 0, { 0 }, NULL },
        { "GET", "/v1", 0, 6, 0, { 0 }, NULL },
        { "GET", "/v1/", 0, 6, 0, { 0 }, NULL },
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_router_trailing_slash(void **state)
{
    (void)state;
    static const struct router_case cases[] = {
        { "GET", "/v1/jobs/", 0, 0, 0, { 0 }, NULL },
        { "GET", "/jobs/", 0, 0, 0, { 0 }, NULL },
        { "GET", "/healthz/", 0, 5, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/42/", 0, 2, 1, { 42, 0 }, NULL },
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_router_captures_ids(void **state)
{
    (void)state;
    static const struct router_case cases[] = {
        { "GET", "/v1/jobs/42", 0, 2, 1, { 42, 0 }, NULL },
        { "DELETE", "/jobs/7", 0, 3, 1, { 7, 0 }, NULL },
        { "GET", "/v1/jobs/1", 0, 2, 1, { 1, 0 }, NULL },
        { "GET", "/v1/jobs/007", 0, 2, 1, { 7, 0 }, NULL },
        { "GET", "/v1/jobs/999999999999999999", 0, 2, 1, { 999999999999999999LL, 0 }, NULL },
        { "GET", "/v1/jobs/12/tasklets/34", 0, 4, 2, { 12, 34 }, NULL },
        { "GET", "/jobs/5/tasklets/6/", 0, 4, 2, { 5, 6 }, NULL },
        { "GET", "/v1/jobs/5/checkpoints/0/stages/2147483647", 0, 8, 3, { 5, 0, 2147483647 }, NULL },
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_router_not_found(void **state)
{
    (void)state;
    static const struct router_case cases[] = {
        { "GET", "/v1/nope", 404, 0, 0, { 0 }, NULL },
        { "GET", "/v1/jobsx", 404, 0, 0, { 0 }, NULL },
        { "GET", "/v2/jobs", 404, 0, 0, { 0 }, NULL },
        { "GET", "/v1v1/jobs", 404, 0, 0, { 0 }, NULL },
        { "GET", "/v1/v1/jobs", 404, 0, 0, { 0 }, NULL },
        { "GET", "jobs", 404, 0, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/42/tasklets", 404, 0, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/42/tasklets/7/more", 404, 0, 0, { 0 }, NULL },
        /* A bad id followed by a segment no pattern has is a miss, not a bad id. */
        { "GET", "/v1/jobs/abc/extra", 404, 0, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/42/extra", 404, 0, 0, { 0 }, NULL },
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_router_method_not_allowed(void **state)
{
    (void)state;
    static const struct router_case cases[] = {
        { "PUT", "/v1/jobs/42", 405, 0, 0, { 0 }, "GET, DELETE" },
        { "POST", "/jobs/42/", 405, 0, 0, { 0 }, "GET, DELETE" },
        { "DELETE", "/v1/jobs", 405, 0, 0, { 0 }, "GET, POST" },
        { "POST", "/v1/healthz", 405, 0, 0, { 0 }, "GET" },
        { "GET", "/v1/links", 405, 0, 0, { 0 }, "PUT" },
        /* Methods are case-sensitive (RFC 9110). */
        { "get", "/v1/jobs", 405, 0, 0, { 0 }, "GET, POST" },
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_router_bad_id(void **state)
{
    (void)state;
    static const struct router_case cases[] = {
        /* The index names the route of that shape and method: metrics count the 400 there. */
        { "GET", "/v1/jobs/abc", 400, 2, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/0", 400, 2, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/000", 400, 2, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/-1", 400, 2, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/+1", 400, 2, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/1e3", 400, 2, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/1234567890123456789", 400, 2, 0, { 0 }, NULL },   /* 19 digits */
        { "GET", "/v1/jobs/99999999999999999999999", 400, 2, 0, { 0 }, NULL },
        { "DELETE", "/jobs/abc/", 400, 3, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/abc/tasklets/1", 400, 4, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/1/tasklets/0", 400, 4, 0, { 0 }, NULL },
        /* {n} is a step or a stage: the database keeps them as int */
        { "GET", "/v1/jobs/1/checkpoints/1/stages/2147483648", 400, 8, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/1/checkpoints/2147483648/stages/0", 400, 8, 0, { 0 }, NULL },
        /* The shape, but no route with this method: still a bad id, counted as unmatched. */
        { "PATCH", "/v1/jobs/abc", 400, -1, 0, { 0 }, NULL },
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_router_long_path_is_404(void **state)
{
    (void)state;
    static const size_t lens[] = { 511, 512, 513, 4096 };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        char path[4097];
        memcpy(path, "/v1/jobs/", 9);
        memset(path + 9, '1', lens[i] - 9);
        path[lens[i]] = '\0';
        struct route_match m;
        struct shoal_err err;
        err_clear(&err);
        int rc = router_match(test_routes, N_ROUTES, "GET", path, &m, &err);
        if (rc != 404 && rc != 400)
            fail_msg("path of %zu bytes: rc %d", lens[i], rc);
        if (lens[i] >= 512 && rc != 404)
            fail_msg("path of %zu bytes: rc %d, want 404", lens[i], rc);
        assert_int_equal(m.index, rc == 400 ? 2 : -1);   /* 400: too many digits for GET /v1/jobs/{id} */
    }
    /* Under the length cap, "/v1/jobs" then many slashes is still a miss. */
    char path[300];
    memcpy(path, "/v1/jobs", 8);
    memset(path + 8, '/', sizeof path - 9);
    path[sizeof path - 1] = '\0';
    struct route_match m;
    struct shoal_err err;
    assert_int_equal(router_match(test_routes, N_ROUTES, "GET", path, &m, &err), 404);
}

/* A path with the route's shape is a bad id (400), not a miss, even when
 * more than one of its ids is bad. */
static void test_router_two_bad_ids_is_400(void **state)
{
    (void)state;
    static const struct router_case cases[] = {
        { "GET", "/v1/jobs/abc/tasklets/xyz", 400, 4, 0, { 0 }, NULL },
        { "GET", "/v1/jobs/0/tasklets/0", 400, 4, 0, { 0 }, NULL },
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router_exact_and_prefix),
        cmocka_unit_test(test_router_trailing_slash),
        cmocka_unit_test(test_router_captures_ids),
        cmocka_unit_test(test_router_not_found),
        cmocka_unit_test(test_router_method_not_allowed),
        cmocka_unit_test(test_router_bad_id),
        cmocka_unit_test(test_router_long_path_is_404),
        cmocka_unit_test(test_router_two_bad_ids_is_400),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
