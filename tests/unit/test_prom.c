/* test_prom.c - server/http/prom.h (text format 0.0.4) and server/http/metrics.h. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../server/http/metrics.h"
#include "../../server/http/prom.h"

static void test_prom_family_lines(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 4096);
    assert_int_equal(prom_family(&b, "shoal_up", "gauge", "Whether the server is up."), 0);
    assert_string_equal(b.data, "# HELP shoal_up Whether the server is up.\n"
                                "# TYPE shoal_up gauge\n");
    /* HELP escapes backslash and newline but not double quotes (0.0.4). */
    assert_int_equal(prom_family(&b, "x_total", "counter", "a\\b \"q\"\nnext"), 0);
    assert_string_equal(b.data, "# HELP shoal_up Whether the server is up.\n"
                                "# TYPE shoal_up gauge\n"
                                "# HELP x_total a\\\\b \"q\"\\nnext\n"
                                "# TYPE x_total counter\n");
    buf_free(&b);
}

static void test_prom_sample_lines(void **state)
{
    (void)state;
    static const char *const one[] = { "route", "/v1/jobs", NULL };
    static const char *const two[] = { "route", "/v1/jobs/{id}", "status", "200", NULL };
    static const char *const none[] = { NULL };
    /* Label values: backslash -> \\, double quote -> \", newline -> \n. */
    static const char *const esc[] = { "path", "C:\\dir \"x\"\nend", NULL };
    static const char *const empty_val[] = { "k", "", NULL };
    const struct {
        const char *name;
        const char *const *labels;
        double value;
        const char *want;
    } cases[] = {
        { "up", NULL, 1, "up 1\n" },
        { "up", none, 0, "up 0\n" },
        { "reqs", one, 3, "reqs{route=\"/v1/jobs\"} 3\n" },
        { "reqs", two, 12345, "reqs{route=\"/v1/jobs/{id}\",status=\"200\"} 12345\n" },
        { "esc", esc, 2, "esc{path=\"C:\\\\dir \\\"x\\\"\\nend\"} 2\n" },
        { "e", empty_val, 1, "e{k=\"\"} 1\n" },
        { "half", NULL, 0.5, "half 0.5\n" },
        { "neg", NULL, -2, "neg -2\n" },
        { "big", NULL, 1e20, "big 1e+20\n" },
        { "inf", one, INFINITY, "inf{route=\"/v1/jobs\"} +Inf\n" },
        { "ninf", NULL, -INFINITY, "ninf -Inf\n" },
        { "nan", NULL, NAN, "nan NaN\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct buf b;
        buf_init(&b, 4096);
        assert_int_equal(prom_sample(&b, cases[i].name, cases[i].labels, cases[i].value), 0);
        if (strcmp(b.data, cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, b.data, cases[i].want);
        buf_free(&b);
    }
}

/* Every cap short of the full line fails with -1; the exact size succeeds. */
static void test_prom_buffer_cap(void **state)
{
    (void)state;
    static const char *const labels[] = { "a", "x\"y", "b", "2", NULL };
    const char *sample = "m{a=\"x\\\"y\",b=\"2\"} +Inf\n";
    const char *family = "# HELP m h\\\\i\n# TYPE m counter\n";
    for (size_t limit = 0; limit <= strlen(sample); limit++) {
        struct buf b;
        buf_init(&b, limit);
        int rc = prom_sample(&b, "m", labels, INFINITY);
        if (limit < strlen(sample) && rc != -1)
            fail_msg("prom_sample under limit %zu: rc %d, want -1", limit, rc);
        if (limit == strlen(sample)) {
            assert_int_equal(rc, 0);
            assert_string_equal(b.data, sample);
        }
        assert_true(b.len <= limit);
        buf_free(&b);
    }
    for (size_t limit = 0; limit <= strlen(family); limit++) {
        struct buf b;
        buf_init(&b, limit);
        int rc = prom_family(&b, "m", "counter", "h\\i");
        if (limit < strlen(family) && rc != -1)
            fail_msg("prom_family under limit %zu: rc %d, want -1", limit, rc);
        if (limit == strlen(family)) {
            assert_int_equal(rc, 0);
            assert_string_equal(b.data, family);
        }
        assert_true(b.len <= limit);
        buf_free(&b);
    }
}

/* ---- metrics ---- */

static const struct route metric_routes[] = {
    { "GET", "/v1/jobs", AUTH_ADMIN, NULL, LANE_DATABASE },
    { "DELETE", "/v1/jobs/{id}", AUTH_ADMIN, NULL, LANE_DATABASE },
};

/* Finds the sample line whose series (name and labels) is exactly `series`
 * and parses its value.  Returns 1 if found, 0 if not; fails on duplicates. */
static int sample_value(const char *text, const char *series, double *value)
{
    size_t n = strlen(series);
    int found = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        assert_non_null(end);
        if ((size_t)(end - line) > n && strncmp(line, series, n) == 0 && line[n] == ' ') {
            if (found)
                fail_msg("series %s appears twice", series);
            char *stop;
            *value = strtod(line + n + 1, &stop);
            assert_ptr_equal(stop, end);
            found = 1;
        }
        line = end + 1;
    }
    return found;
}

static double must_value(const char *text, const char *series)
{
    double v = 0;
    if (!sample_value(text, series, &v))
        fail_msg("series %s missing from:\n%s", series, text);
    return v;
}

static void test_metrics_render_counts_by_status(void **state)
{
    (void)state;
    struct metrics *m = metrics_new(2);
    assert_non_null(m);
    for (int i = 0; i < 3; i++)
        metrics_observe(m, 0, "GET", 200, 0.002);
    metrics_observe(m, 0, "GET", 404, 0.002);
    metrics_observe(m, -1, "GET", 404, 0.002);
    metrics_observe(m, 7, "DELETE", 405, 0.002);   /* out of the table: also "unmatched" */
    /* Unmatched requests keep their method if HTTP has it, else "other". */
    metrics_observe(m, -1, "BREW", 404, 0.002);
    metrics_observe(m, -1, "get", 404, 0.002);
    metrics_observe(m, -1, NULL, 404, 0.002);

    struct buf out;
    buf_init(&out, 1 << 20);
    assert_int_equal(metrics_render(m, metric_routes, &out), 0);
    const char *t = out.data;
    assert_non_null(strstr(t, "# HELP shoal_http_requests_total HTTP requests answered, "
                              "by route pattern, method and status.\n"
                              "# TYPE shoal_http_requests_total counter\n"));
    assert_non_null(strstr(t, "# TYPE shoal_http_request_duration_seconds histogram\n"));
    assert_true(must_value(t, "shoal_http_requests_total{route=\"/v1/jobs\",method=\"GET\","
                              "status=\"200\"}") == 3);
    assert_true(must_value(t, "shoal_http_requests_total{route=\"/v1/jobs\",method=\"GET\","
                              "status=\"404\"}") == 1);
    assert_true(must_value(t, "shoal_http_requests_total{route=\"unmatched\",method=\"GET\","
                              "status=\"404\"}") == 1);
    assert_true(must_value(t, "shoal_http_requests_total{route=\"unmatched\",method=\"DELETE\","
                              "status=\"405\"}") == 1);
    assert_true(must_value(t, "shoal_http_requests_total{route=\"unmatched\",method=\"other\","
                              "status=\"404\"}") == 3);
    assert_null(strstr(t, "method=\"\""));
    assert_null(strstr(t, "BREW"));
    /* No traffic, no series; and no status that was never seen. */
    assert_null(strstr(t, "route=\"/v1/jobs/{id}\""));
    assert_null(strstr(t, "status=\"500\""));
    double v;
    assert_false(sample_value(t, "shoal_http_requests_total{route=\"/v1/jobs\",method=\"GET\","
                                 "status=\"201\"}", &v));
    buf_free(&out);
    metrics_free(m);
}

static void test_metrics_histogram_cumulative(void **state)
{
    (void)state;
    static const char *const les[] = { "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                                       "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30",
                                       "60", "+Inf" };
    /* Observations and the cumulative count each bucket must show. */
    static const double secs[] = { 0.0005, 0.001 /* le is inclusive */, 0.003, 0.02,
                                   0.2, 0.2, 7, 100 /* only +Inf */ };
    static const double want[] = { 2, 2, 3, 3, 4, 4, 4, 6, 6, 6, 6, 6, 7, 7, 7, 8 };
    const size_t n_les = sizeof les / sizeof les[0];

    struct metrics *m = metrics_new(2);
    assert_non_null(m);
    double sum = 0;
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
        metrics_observe(m, 1, "DELETE", 200, secs[i]);
        sum += secs[i];
    }
    metrics_observe(m, -1, "POST", 404, 0.05);

    struct buf out;
    buf_init(&out, 1 << 20);
    assert_int_equal(metrics_render(m, metric_routes, &out), 0);
    const char *t = out.data;
    double prev = 0;
    for (size_t b = 0; b < n_les; b++) {
        char series[256];
        snprintf(series, sizeof series,
                 "shoal_http_request_duration_seconds_bucket{route=\"/v1/jobs/{id}\","
                 "method=\"DELETE\",le=\"%s\"}", les[b]);
        double v = must_value(t, series);
        if (v != want[b])
            fail_msg("bucket le=%s: %g, want %g", les[b], v, want[b]);
        assert_true(v >= prev);
        prev = v;
    }
    double count = must_value(t, "shoal_http_request_duration_seconds_count"
                                 "{route=\"/v1/jobs/{id}\",method=\"DELETE\"}");
    assert_true(count == 8);
    assert_true(count == prev);   /* +Inf bucket == _count */
    double got_sum = must_value(t, "shoal_http_request_duration_seconds_sum"
                                   "{route=\"/v1/jobs/{id}\",method=\"DELETE\"}");
    assert_true(fabs(got_sum - sum) < 1e-6);

    /* The unmatched slot has its own histogram, labelled route="unmatched". */
    assert_true(must_value(t, "shoal_http_request_duration_seconds_bucket{route=\"unmatched\","
                              "method=\"POST\",le=\"0.025\"}") == 0);
    assert_true(must_value(t, "shoal_http_request_duration_seconds_bucket{route=\"unmatched\","
                              "method=\"POST\",le=\"0.05\"}") == 1);
    assert_true(must_value(t, "shoal_http_request_duration_seconds_bucket{route=\"unmatched\","
                              "method=\"POST\",le=\"+Inf\"}") ==
                must_value(t, "shoal_http_request_duration_seconds_count{route=\"unmatched\","
                              "method=\"POST\"}"));
    /* A route without traffic has no histogram. */
    assert_null(strstr(t, "route=\"/v1/jobs\""));
    buf_free(&out);
    metrics_free(m);
}

static void test_metrics_render_full_buffer(void **state)
{
    (void)state;
    struct metrics *m = metrics_new(2);
    assert_non_null(m);
    metrics_observe(m, 0, "GET", 200, 0.01);
    struct buf full;
    buf_init(&full, 1 << 20);
    assert_int_equal(metrics_render(m, metric_routes, &full), 0);
    /* Any cap below the full size fails; the full size itself fits. */
    static const size_t cuts[] = { 0, 1, 50, 200, 1000 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        if (cuts[i] >= full.len)
            continue;
        struct buf b;
        buf_init(&b, cuts[i]);
        assert_int_equal(metrics_render(m, metric_routes, &b), -1);
        buf_free(&b);
    }
    struct buf b;
    buf_init(&b, full.len - 1);
    assert_int_equal(metrics_render(m, metric_routes, &b), -1);
    buf_free(&b);
    buf_init(&b, full.len);
    assert_int_equal(metrics_render(m, metric_routes, &b), 0);
    assert_string_equal(b.data, full.data);
    buf_free(&b);
    buf_free(&full);
    metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prom_family_lines),
        cmocka_unit_test(test_prom_sample_lines),
        cmocka_unit_test(test_prom_buffer_cap),
        cmocka_unit_test(test_metrics_render_counts_by_status),
        cmocka_unit_test(test_metrics_histogram_cumulative),
        cmocka_unit_test(test_metrics_render_full_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
