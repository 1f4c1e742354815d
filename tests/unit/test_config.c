/* test_config.c - server/base/config.h against common/patience.h: the
 * server's defaults answer inside the agents' patience (a frozen
 * database's 503 reaches an agent before its own timeout), the agent's
 * defaults are the ones the relation assumes, and options that break it
 * (or contradict each other) are each said in one warning, while the
 * defaults say none. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "../../agent/config.h"
#include "../../common/patience.h"
#include "../../server/base/config.h"

/* Loads the server's config from argv alone (no SHOAL_* of the caller's). */
static void load(struct config *cfg, int argc, char **argv)
{
    struct shoal_err e;
    const char *env[] = { "SHOAL_DB_TIMEOUT", "SHOAL_HEARTBEAT_TIMEOUT", "SHOAL_MAX_CONNECTIONS",
                          "SHOAL_MAX_LONG_POLLS", "SHOAL_HEARTBEAT_INTERVAL" };
    for (size_t i = 0; i < sizeof env / sizeof *env; i++)
        unsetenv(env[i]);
    assert_int_equal(config_load(cfg, argc, argv, &e), 0);
}

/* The warnings for `argv`; *n gets their count. */
static void warnings_of(int argc, char **argv, char w[CONFIG_WARNINGS_MAX][CONFIG_WARNING_MAX], int *n)
{
    struct config cfg;
    load(&cfg, argc, argv);
    *n = config_contradictions(&cfg, w);
}

static void test_defaults_answer_inside_the_agents_patience(void **state)
{
    (void)state;
    struct config cfg;
    char *argv[] = { "shoal-server" };
    load(&cfg, 1, argv);
    assert_int_equal(cfg.db_timeout_s, PATIENCE_DB_TIMEOUT_S);
    assert_int_equal(cfg.heartbeat_timeout, PATIENCE_HEARTBEAT_TIMEOUT_S);
    long answer = PATIENCE_SERVER_ANSWER_S(cfg.db_timeout_s);   /* s: the slowest 503 */
    /* the defect: 10 s of --db-timeout + 2 s against an agent's 10 s */
    assert_true(answer + PATIENCE_MARGIN_S <= PATIENCE_AGENT_CALL_S);
    assert_true(PATIENCE_POLL_WAIT_S + 2 * answer + PATIENCE_MARGIN_S <= PATIENCE_AGENT_POLL_S);
    assert_true(answer + PATIENCE_HEARTBEAT_INTERVAL_S < cfg.heartbeat_timeout);
}

static void test_agent_defaults_are_the_relations(void **state)
{
    (void)state;
    struct agent_config a;
    struct shoal_err e;
    char *argv[] = { "shoal-agent" };
    unsetenv("SHOAL_HEARTBEAT_INTERVAL");
    assert_int_equal(agent_config_load(&a, 1, argv, 1, &e), 0);
    assert_int_equal(a.heartbeat_interval, PATIENCE_HEARTBEAT_INTERVAL_S);
}

static void test_defaults_contradict_nothing(void **state)
{
    (void)state;
    char w[CONFIG_WARNINGS_MAX][CONFIG_WARNING_MAX];
    int n;
    char *argv[] = { "shoal-server" };
    warnings_of(1, argv, w, &n);
    assert_int_equal(n, 0);
    char *largest[] = { "shoal-server", "--db-timeout", "10", "--heartbeat-timeout", "15" };
    warnings_of(5, largest, w, &n);
    assert_int_equal(n, 0);
}

static void test_a_db_timeout_past_the_agents_patience_is_said(void **state)
{
    (void)state;
    char w[CONFIG_WARNINGS_MAX][CONFIG_WARNING_MAX];
    int n;
    char *argv[] = { "shoal-server", "--db-timeout", "11", "--heartbeat-timeout", "60" };
    warnings_of(5, argv, w, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(w[0], "--db-timeout 11 s"));
    assert_non_null(strstr(w[0], "agents wait 15 s"));
    assert_non_null(strstr(w[0], "give --db-timeout 10 or less"));
}

static void test_a_heartbeat_timeout_a_slow_answer_overruns_is_said(void **state)
{
    (void)state;
    char w[CONFIG_WARNINGS_MAX][CONFIG_WARNING_MAX];
    int n;
    /* 5 s + 2 s + 2 s = 9 s: a timeout of 9 contradicts, 10 does not */
    char *argv[] = { "shoal-server", "--heartbeat-timeout", "9" };
    warnings_of(3, argv, w, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(w[0], "--heartbeat-timeout 9 s is not above"));
    assert_non_null(strstr(w[0], "give --heartbeat-timeout 10 or more"));
    /* the old defaults: both relations broken */
    char *old[] = { "shoal-server", "--db-timeout", "11", "--heartbeat-timeout", "10" };
    warnings_of(5, old, w, &n);
    assert_int_equal(n, 2);
}

static void test_long_polls_that_can_fill_the_connections_are_said(void **state)
{
    (void)state;
    char w[CONFIG_WARNINGS_MAX][CONFIG_WARNING_MAX];
    int n;
    char *argv[] = { "shoal-server", "--max-connections", "100", "--max-long-polls", "100" };
    warnings_of(5, argv, w, &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(w[0], "--max-connections 100 is not above --max-long-polls 100"));
    char *fine[] = { "shoal-server", "--max-connections", "101", "--max-long-polls", "100" };
    warnings_of(5, fine, w, &n);
    assert_int_equal(n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_answer_inside_the_agents_patience),
        cmocka_unit_test(test_agent_defaults_are_the_relations),
        cmocka_unit_test(test_defaults_contradict_nothing),
        cmocka_unit_test(test_a_db_timeout_past_the_agents_patience_is_said),
        cmocka_unit_test(test_a_heartbeat_timeout_a_slow_answer_overruns_is_said),
        cmocka_unit_test(test_long_polls_that_can_fill_the_connections_are_said),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
