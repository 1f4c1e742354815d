/* test_bodies.c - server/api/bodies.h: the request bodies the API accepts,
 * parsed without a database: defaults, what each rejects and how it says
 * so, and what the parsers own. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/jsonv.h"
#include "../../server/api/bodies.h"
#include "../../server/sched/input.h"

static json_t *body(const char *text)
{
    struct shoal_err err;
    json_t *j = jv_parse_object(text, strlen(text), &err);
    if (!j)
        fail_msg("test body does not parse: %s: %s", text, err.message);
    return j;
}

/* Fails unless `err` is `status` `code` on `field`, with `says` in its message. */
static void expect_error(const struct shoal_err *err, int status, const char *code, const char *field,
                         const char *says)
{
    if (err->status != status || strcmp(err->code, code) != 0 || strcmp(err->field, field) != 0 ||
        !strstr(err->message, says))
        fail_msg("got %d %s on \"%s\": %s; want %d %s on \"%s\" saying \"%s\"", err->status, err->code,
                 err->field, err->message, status, code, field, says);
}

static void test_registration(void **state)
{
    (void)state;
    struct body_registration reg;
    struct shoal_err err;
    json_t *j = body("{\"name\":\"cpu-b\",\"peer_address\":\"[::1]:7001\",\"hardware\":{\"tflops\":0.5,\"cpu_cores\":8}}");
    assert_int_equal(body_registration_parse(j, &reg, &err), 0);
    assert_string_equal(reg.name, "cpu-b");
    assert_string_equal(reg.region, "");
    assert_int_equal(reg.gpu_count, 0);
    assert_int_equal(reg.ram_bytes, 0);
    assert_true(reg.tflops == 0.5);
    json_decref(j);
    j = body("{\"name\":\"x\",\"peer_address\":\"h:70000\",\"hardware\":{\"tflops\":1,\"cpu_cores\":8}}");
    assert_int_equal(body_registration_parse(j, &reg, &err), -1);
    expect_error(&err, 422, "invalid_field", "peer_address", "peer_address must be host:port with a port from 1 to 65535");
    json_decref(j);
    static const char *const bad_addresses[] = { "hostonly", ":80", "h:", "h:0", "h:1x", "a b:1", "[::1:80",
                                                 /* no peer listens there; the server would probe it */
                                                 "169.254.169.254:80", "0.0.0.0:7070", "224.0.0.1:7070",
                                                 "255.255.255.255:7070", "[fe80::1]:7070", "[::]:7070",
                                                 "[ff02::1]:7070",
                                                 /* the same, spelled otherwise: resolved, then checked */
                                                 "0:7070", "0x0:7070", "2852039166:7070", "0251.0376.0251.0376:7070",
                                                 "0xa9.0xfe.0xa9.0xfe:7070", "[::ffff:169.254.169.254]:7070",
                                                 "[::ffff:a9fe:a9fe]:7070", "[::ffff:0.0.0.0]:7070",
                                                 "[64:ff9b::a9fe:a9fe]:7070", "[fe80::1%lo]:7070", "3758096385:7070" };
    for (size_t i = 0; i < sizeof bad_addresses / sizeof bad_addresses[0]; i++)
        if (body_peer_address_valid(bad_addresses[i]))
            fail_msg("%s taken as a peer address", bad_addresses[i]);
    assert_true(body_peer_address_valid("[::1]:7000") && body_peer_address_valid("10.0.0.1:65535"));
    j = body("{\"name\":\"x\",\"peer_address\":\"0xa9.0xfe.0xa9.0xfe:80\",\"hardware\":{\"tflops\":1,\"cpu_cores\":8}}");
    assert_int_equal(body_registration_parse(j, &reg, &err), -1);
    expect_error(&err, 422, "invalid_field", "peer_address", "resolves to 169.254.169.254 (link-local");
    json_decref(j);
    assert_true(body_peer_address_valid("127.0.0.1:7070") && body_peer_address_valid("gpu-7.lab:7070") &&
                body_peer_address_valid("[2001:db8::5]:7070") && body_peer_address_valid("169.253.1.1:7070"));
}

/* The owner's policy: checked, kept as compact JSON, nothing else taken. */
static void test_registration_policy(void **state)
{
    (void)state;
    struct body_registration reg;
    struct shoal_err err;
    static const char head[] = "{\"name\":\"x\",\"peer_address\":\"10.0.0.1:7070\",\"hardware\":{\"tflops\":1,"
                               "\"cpu_cores\":8},\"policy\":";
    char text[512];
    snprintf(text, sizeof text, "%s{\"threads\":2,\"data_roots\":[\"/srv/data\",\"/mnt/b\"],\"max_memory_bytes\":null}}",
             head);
    json_t *j = body(text);
    assert_int_equal(body_registration_parse(j, &reg, &err), 0);
    assert_string_equal(reg.policy, "{\"data_roots\":[\"/srv/data\",\"/mnt/b\"],\"max_memory_bytes\":null,\"threads\":2}");
    json_decref(j);
    snprintf(text, sizeof text, "%snull}", head);
    j = body(text);
    assert_int_equal(body_registration_parse(j, &reg, &err), 0);
    assert_string_equal(reg.policy, "");
    json_decref(j);
    static const struct { const char *policy; int status; const char *field; } bad[] = {
        { "{\"data_roots\":[\"srv/data\"]}", 422, "policy.data_roots" },
        { "{\"data_roots\":[]}", 422, "policy.data_roots" },
        { "{\"data_roots\":\"/srv\"}", 422, "policy.data_roots" },
        { "{\"data_roots\":[7]}", 422, "policy.data_roots" },
        { "{\"threads\":0}", 422, "policy.threads" },
        { "{\"max_memory_bytes\":-1}", 422, "policy.max_memory_bytes" },
        { "{\"gpus\":1}", 400, "policy.gpus" },
        { "[1]", 400, "policy" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s%s}", head, bad[i].policy);
        j = body(text);
        if (body_registration_parse(j, &reg, &err) != -1 || err.status != bad[i].status ||
            strcmp(err.field, bad[i].field) != 0)
            fail_msg("%s: got %d on %s (%s)", bad[i].policy, err.status, err.field, err.message);
        json_decref(j);
    }
}

static void test_heartbeat_and_progress_defaults(void **state)
{
    (void)state;
    struct body_heartbeat hb;
    struct body_progress p;
    struct shoal_err err;
    json_t *j = body("{\"state\":\"idle\",\"job_id\":null,\"step\":null}");
    assert_int_equal(body_heartbeat_parse(j, &hb, &err), 0);
    assert_int_equal(hb.job_id, 0);
    assert_int_equal(hb.step, -1);
    assert_string_equal(hb.peer_address, "");
    json_decref(j);
    j = body("{\"state\":\"idle\",\"peer_address\":\"nowhere\"}");
    assert_int_equal(body_heartbeat_parse(j, &hb, &err), -1);
    expect_error(&err, 422, "invalid_field", "peer_address", "host:port");
    json_decref(j);
    j = body("{\"job_id\":3,\"epoch\":1,\"step\":1,\"stage\":0,\"replica\":0,\"iteration_s\":1,\"compute_s\":1,"
             "\"send_s\":0,\"recv_wait_s\":0,\"allreduce_s\":0,\"bubble_s\":0,\"tokens\":1}");
    assert_int_equal(body_progress_parse(j, &p, &err), 0);
    assert_true(isnan(p.loss));
    assert_int_equal(p.tokens, 1);
    json_decref(j);
}

static void test_failure_and_nccl(void **state)
{
    (void)state;
    struct body_failure f;
    struct body_nccl_put n;
    struct shoal_err err;
    json_t *j = body("{\"job_id\":7,\"epoch\":2,\"stage\":1,\"replica\":0,\"reason\":\"reset\",\"peer\":\"nowhere\"}");
    assert_int_equal(body_failure_parse(j, &f, &err), -1);
    expect_error(&err, 422, "invalid_field", "peer", "peer must be host:port with a port from 1 to 65535, or null");
    json_decref(j);
    /* the neighbour by node id: optional, a positive id */
    j = body("{\"job_id\":7,\"epoch\":2,\"stage\":1,\"replica\":0,\"reason\":\"reset\",\"peer\":\"h:1\","
             "\"peer_node\":12}");
    assert_int_equal(body_failure_parse(j, &f, &err), 0);
    assert_int_equal(f.peer_node, 12);
    json_decref(j);
    j = body("{\"job_id\":7,\"epoch\":2,\"stage\":1,\"replica\":0,\"reason\":\"reset\",\"peer_node\":0}");
    assert_int_equal(body_failure_parse(j, &f, &err), -1);
    assert_string_equal(err.field, "peer_node");
    json_decref(j);
    j = body("{\"job_id\":7,\"epoch\":2,\"stage\":1,\"replica\":0,\"reason\":\"reset\",\"peer_node\":null}");
    assert_int_equal(body_failure_parse(j, &f, &err), 0);
    assert_int_equal(f.peer_node, 0);
    json_decref(j);
    char text[400], hex[BODY_NCCL_ID_HEX + 1];
    for (int i = 0; i < BODY_NCCL_ID_HEX; i++)
        hex[i] = "0123456789ABCDEF"[i % 16];
    hex[BODY_NCCL_ID_HEX] = '\0';
    snprintf(text, sizeof text, "{\"job_id\":7,\"epoch\":1,\"stage\":0,\"unique_id\":\"%s\"}", hex);
    j = body(text);
    assert_int_equal(body_nccl_put_parse(j, &n, &err), 0);
    assert_int_equal(strspn(n.unique_id, "0123456789abcdef"), BODY_NCCL_ID_HEX);
    json_decref(j);
    hex[10] = 'g';
    snprintf(text, sizeof text, "{\"job_id\":7,\"epoch\":1,\"stage\":0,\"unique_id\":\"%s\"}", hex);
    j = body(text);
    assert_int_equal(body_nccl_put_parse(j, &n, &err), -1);
    expect_error(&err, 422, "invalid_field", "unique_id", "unique_id must be 256 hex digits");
    json_decref(j);
}

static void test_links(void **state)
{
    (void)state;
    struct body_links l;
    struct shoal_err err;
    json_t *j = body("{\"from\":7,\"report_id\":\"r-1.a_b\",\"samples\":[{\"to\":2,\"latency_ms\":42.5,\"bandwidth_gbps\":0.8},"
                     "{\"to\":3,\"latency_ms\":1,\"bandwidth_gbps\":10}]}");
    assert_int_equal(body_links_parse(j, 7, &l, &err), 0);
    assert_string_equal(l.report_id, "r-1.a_b");
    assert_string_equal(l.to.data, "{2,3}");
    assert_string_equal(l.latency_ms.data, "{42.5,1}");
    assert_string_equal(l.bandwidth_gbps.data, "{0.80000000000000004,10}");
    body_links_free(&l);
    assert_int_equal(body_links_parse(j, 8, &l, &err), -1);
    expect_error(&err, 403, "forbidden", "from", "a node may only report its own links (from = 8)");
    body_links_free(&l);
    json_decref(j);
    /* A report id with a NUL in it would be cut short at the NUL: refused,
     * as jv_object refuses such strings (jv_parse_object refuses "\u0000"
     * already; this holds for any caller). */
    json_error_t je;
    j = json_loads("{\"report_id\":\"ab\\u0000cd\",\"samples\":[{\"to\":2,\"latency_ms\":1,\"bandwidth_gbps\":1}]}",
                   JSON_ALLOW_NUL, &je);
    assert_non_null(j);
    assert_int_equal(body_links_parse(j, 7, &l, &err), -1);
    expect_error(&err, 422, "invalid_field", "report_id", "report_id must be 1 to 128");
    body_links_free(&l);
    json_decref(j);
    j = body("{\"samples\":[{\"to\":7,\"latency_ms\":1,\"bandwidth_gbps\":1}]}");
    assert_int_equal(body_links_parse(j, 7, &l, &err), -1);
    expect_error(&err, 422, "invalid_field", "samples[0]", "samples[0].to is the reporting node itself");
    body_links_free(&l);
    json_decref(j);
}

/* An unknown member's name goes back cut to 100 bytes at a character
 * boundary, so the answer stays UTF-8 however long the name is. */
static void test_unknown_member_named_in_utf8(void **state)
{
    (void)state;
    struct body_links l;
    struct plan_request req;
    struct plan_force f;
    struct shoal_err err;
    char key[302], text[420];
    for (int i = 0; i < 150; i++)
        memcpy(key + 2 * i, "\xc3\xa9", 2);
    key[300] = '\0';
    snprintf(text, sizeof text, "{\"%s\":1}", key);
    json_t *j = body(text);
    assert_int_equal(body_links_parse(j, 7, &l, &err), -1);
    body_links_free(&l);
    assert_string_equal(err.code, "unknown_field");
    assert_true(strlen(err.field) <= 100);
    json_t *s = json_string(err.field), *m = json_string(err.message);
    assert_non_null(s);
    assert_non_null(m);
    json_decref(s), json_decref(m);
    json_decref(j);
    snprintf(text, sizeof text, "{\"stages\":[{\"nodes\":[1],\"%s\":1}]}", key);
    j = body(text);
    assert_int_equal(body_plan_parse(j, &req, &f, &err), -1);
    body_plan_free(&f);
    expect_error(&err, 400, "unknown_field", "stages[0]", "unknown field stages[0].");
    m = json_string(err.message);
    assert_non_null(m);
    json_decref(m);
    json_decref(j);
}

static void test_schedule_defaults(void **state)
{
    (void)state;
    struct plan_request req;
    struct shoal_err err;
    assert_int_equal(body_schedule_parse(NULL, &req, &err), 0);
    assert_string_equal(req.cost_model, "shoal");
    assert_int_equal(req.seed, 1);
    assert_int_equal(req.budget_ms, 2000);
    assert_int_equal(req.dry_run, 0);
    assert_true(req.fill_latency_ms == INPUT_NO_FILL && req.fill_bandwidth_gbps == INPUT_NO_FILL);
    json_t *j = body("{\"cost_model\":\"dtfm\",\"fill_missing_links\":{\"latency_ms\":1,\"bandwidth_gbps\":2}}");
    assert_int_equal(body_schedule_parse(j, &req, &err), 0);
    assert_string_equal(req.cost_model, "dtfm");
    assert_true(req.fill_latency_ms == 1 && req.fill_bandwidth_gbps == 2);
    json_decref(j);
    j = body("{\"budget_ms\":5}");
    assert_int_equal(body_schedule_parse(j, &req, &err), -1);
    expect_error(&err, 422, "invalid_field", "budget_ms", "between 10 and 120000");
    json_decref(j);
}

static void test_plan(void **state)
{
    (void)state;
    struct plan_request req;
    struct plan_force f;
    struct shoal_err err;
    json_t *j = body("{\"stages\":[{\"stage\":0,\"nodes\":[1,2],\"layer_start\":0,\"layer_end\":3},"
                     "{\"nodes\":[3,4],\"layer_start\":3,\"layer_end\":8}],\"dry_run\":true}");
    assert_int_equal(body_plan_parse(j, &req, &f, &err), 0);
    assert_int_equal(f.stages, 2);
    assert_int_equal(f.replicas, 2);
    assert_int_equal(f.node_ids[3], 4);
    assert_int_equal(f.layer_end[1], 8);
    assert_int_equal(req.dry_run, 1);
    assert_string_equal(req.cost_model, "shoal");
    body_plan_free(&f);
    json_decref(j);
    static const struct {
        const char *body, *field, *says;
        int status;
    } bad[] = {
        {"{\"stages\":[{\"nodes\":[1,2]},{\"nodes\":[3]}]}", "stages[1]", "as many nodes", 422},
        {"{\"stages\":[{\"nodes\":[1],\"layer_start\":0,\"layer_end\":4},{\"nodes\":[2]}]}", "stages[1]",
         "give layer_start and layer_end with every stage or with none", 422},
        {"{\"stages\":[{\"stage\":1,\"nodes\":[1]}]}", "stages[0]", "stages are listed in order", 422},
        {"{\"stages\":[{\"nodes\":[\"1\"]}]}", "stages[0]", "stages[0].nodes[0] must be a node id", 400},
        {"{\"dry_run\":true}", "stages", "stages must be an array", 400},
        {"{\"stages\":[{\"nodes\":[1]}],\"budget_ms\":10}", "budget_ms", "unknown field budget_ms", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = body(bad[i].body);
        assert_int_equal(body_plan_parse(j, &req, &f, &err), -1);
        body_plan_free(&f);   /* what a failed parse allocated: ASan's leak check */
        expect_error(&err, bad[i].status, bad[i].status == 400 && strstr(bad[i].says, "unknown") ? "unknown_field"
                     : strcmp(bad[i].field, "stages") == 0 ? "missing_field" : "invalid_field",
                     bad[i].field, bad[i].says);
        json_decref(j);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registration),
        cmocka_unit_test(test_registration_policy),
        cmocka_unit_test(test_heartbeat_and_progress_defaults),
        cmocka_unit_test(test_failure_and_nccl),
        cmocka_unit_test(test_links),
        cmocka_unit_test(test_unknown_member_named_in_utf8),
        cmocka_unit_test(test_schedule_defaults),
        cmocka_unit_test(test_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
