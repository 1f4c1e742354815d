/* test_sched_input.c - server/sched/input.h: a scheduling problem's network
 * from the JSON of GET /v1/nodes and GET /v1/links. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <string.h>

#include <jansson.h>

#include "../../server/sched/input.h"
#include "../../server/sched/sched.h"

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    if (!doc)
        fail_msg("bad test JSON at line %d: %s", jerr.line, jerr.text);
    return doc;
}

/* Index of node `id` in the network, or -1. */
static int index_of(const struct scenario *net, int64_t id)
{
    for (int i = 0; i < net->n; i++)
        if (net->nodes[i].id == id)
            return i;
    return -1;
}

/* Three nodes with ids that are not 0-based, listed 42, 7, 1000. */
static const char *nodes_json =
    "{\"nodes\":["
    " {\"id\":42,\"region\":\"oregon\",\"hardware\":{\"tflops\":100.5,\"gpu_memory_bytes\":34359738368,\"ram_bytes\":1e11}},"
    " {\"id\":7,\"region\":\"tokyo\",\"hardware\":{\"tflops\":12,\"ram_bytes\":68719476736}},"
    " {\"id\":1000,\"hardware\":{\"tflops\":3.25}}"
    "]}";

/* The links document lists them 1000, 42, 7 (and a node 99 the nodes
 * document does not have, which is ignored).  Row = from, column = to:
 * latency from A to B is 10*rowpos + colpos + 1 ms in this document's order,
 * bandwidth 1 + rowpos + colpos/10 Gbit/s. */
static const char *links_json =
    "{\"nodes\":[1000,42,7,99],"
    " \"latency_ms\":[[null,2,3,4],[11,null,13,14],[21,22,null,24],[31,32,33,null]],"
    " \"bandwidth_gbps\":[[null,1.1,1.2,1.3],[2.0,null,2.2,2.3],[3.0,3.1,null,3.3],[4.0,4.1,4.2,null]]}";

static void test_input_maps_links_by_id(void **state)
{
    (void)state;
    json_t *nodes = parse(nodes_json), *links = parse(links_json);
    struct scenario net;
    struct shoal_err err;
    assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err), 0);
    assert_int_equal(net.n, 3);
    /* Nodes keep the nodes document's order. */
    assert_int_equal(net.nodes[0].id, 42);
    assert_int_equal(net.nodes[1].id, 7);
    assert_int_equal(net.nodes[2].id, 1000);
    assert_string_equal(net.nodes[0].region, "oregon");
    assert_string_equal(net.nodes[1].region, "tokyo");
    assert_string_equal(net.nodes[2].region, "");
    assert_true(net.nodes[0].tflops == 100.5);
    assert_true(net.nodes[1].tflops == 12);
    assert_true(net.nodes[2].tflops == 3.25);

    /* Links by id: positions in the links document are 1000:0, 42:1, 7:2. */
    static const struct { int64_t from, to; double lat, bw; } want[] = {
        { 1000, 42, 2, 1.1 }, { 1000, 7, 3, 1.2 },
        { 42, 1000, 11, 2.0 }, { 42, 7, 13, 2.2 },
        { 7, 1000, 21, 3.0 }, { 7, 42, 22, 3.1 },
    };
    int n = net.n;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int i = index_of(&net, want[k].from), j = index_of(&net, want[k].to);
        assert_true(i >= 0 && j >= 0);
        assert_true(net.latency_ms[i * n + j] == want[k].lat);
        assert_true(net.bandwidth_gbps[i * n + j] == want[k].bw);
    }
    /* The diagonal: no latency, a positive placeholder bandwidth. */
    for (int i = 0; i < n; i++) {
        assert_true(net.latency_ms[i * n + i] == 0);
        assert_true(net.bandwidth_gbps[i * n + i] > 0);
    }
    /* And the network is one the scheduler accepts. */
    struct sched_problem pb = { .n = n, .nodes = net.nodes, .latency_ms = net.latency_ms,
                                .bandwidth_gbps = net.bandwidth_gbps, .stages = 3, .replicas = 1,
                                .cost = SCHED_COST_DTFM, .c_dp_gb = 1, .c_pp_gb = 1 };
    assert_int_equal(sched_problem_check(&pb, &err), 0);
    scenario_free(&net);
    json_decref(nodes);
    json_decref(links);
}

/* Memory: GPU memory, else RAM, else unlimited. */
static void test_input_memory_fallback(void **state)
{
    (void)state;
    json_t *nodes = parse(nodes_json), *links = parse(links_json);
    struct scenario net;
    struct shoal_err err;
    assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err), 0);
    assert_true(net.nodes[0].mem_bytes == 34359738368.0);   /* GPU memory wins over RAM */
    assert_true(net.nodes[1].mem_bytes == 68719476736.0);   /* no GPU memory: RAM */
    assert_true(net.nodes[2].mem_bytes == DBL_MAX);         /* neither: unlimited */
    scenario_free(&net);
    json_decref(nodes);

    /* null and 0 count as "not given". */
    nodes = parse("{\"nodes\":["
                  " {\"id\":42,\"hardware\":{\"tflops\":1,\"gpu_memory_bytes\":null,\"ram_bytes\":5000}},"
                  " {\"id\":7,\"hardware\":{\"tflops\":1,\"gpu_memory_bytes\":0,\"ram_bytes\":0}},"
                  " {\"id\":1000,\"hardware\":{\"tflops\":1,\"gpu_memory_bytes\":9000}}]}");
    assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err), 0);
    assert_true(net.nodes[0].mem_bytes == 5000);
    assert_true(net.nodes[1].mem_bytes == DBL_MAX);
    assert_true(net.nodes[2].mem_bytes == 9000);
    scenario_free(&net);
    json_decref(nodes);
    json_decref(links);
}

/* One link unmeasured (7 -> 42, null): 422 missing_links naming "7->42". */
static const char *links_missing_json =
    "{\"nodes\":[1000,42,7],"
    " \"latency_ms\":[[null,2,3],[11,null,13],[21,null,null]],"
    " \"bandwidth_gbps\":[[null,1.1,1.2],[2.0,null,2.2],[3.0,null,null]]}";

static void test_input_missing_link(void **state)
{
    (void)state;
    json_t *nodes = parse(nodes_json), *links = parse(links_missing_json);
    struct scenario net;
    struct shoal_err err;
    memset(&err, 0, sizeof err);
    assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err), -1);
    assert_int_equal(err.status, 422);
    assert_string_equal(err.code, "missing_links");
    assert_string_equal(err.field, "links");
    assert_non_null(strstr(err.message, "7->42"));
    assert_null(strstr(err.message, "42->7"));   /* that direction is measured */
    assert_non_null(strstr(err.message, "1 links"));
    assert_null(net.nodes);   /* nothing left allocated */

    /* A fill latency alone, or a zero fill bandwidth, is not enough. */
    assert_int_equal(input_network(nodes, links, 50, INPUT_NO_FILL, &net, &err), -1);
    assert_string_equal(err.code, "missing_links");
    assert_int_equal(input_network(nodes, links, 50, 0, &net, &err), -1);
    assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, 2.5, &net, &err), -1);

    /* With fill values the pair gets them and every other link is as measured. */
    assert_int_equal(input_network(nodes, links, 50, 2.5, &net, &err), 0);
    int n = net.n, i7 = index_of(&net, 7), i42 = index_of(&net, 42), i1000 = index_of(&net, 1000);
    assert_true(net.latency_ms[i7 * n + i42] == 50);
    assert_true(net.bandwidth_gbps[i7 * n + i42] == 2.5);
    assert_true(net.latency_ms[i42 * n + i7] == 13);
    assert_true(net.bandwidth_gbps[i42 * n + i7] == 2.2);
    assert_true(net.latency_ms[i7 * n + i1000] == 21);
    assert_true(net.bandwidth_gbps[i1000 * n + i42] == 1.1);
    scenario_free(&net);
    /* A fill latency of 0 ms is a valid fill. */
    assert_int_equal(input_network(nodes, links, 0, 1, &net, &err), 0);
    assert_true(net.latency_ms[i7 * n + i42] == 0);
    scenario_free(&net);
    json_decref(nodes);
    json_decref(links);
}

/* A node the links document never mentions: every pair with it is missing;
 * the message lists at most 12 and says how many. */
static void test_input_node_without_links(void **state)
{
    (void)state;
    /* 8 nodes, ids 1..8; links only among 1..7. */
    json_t *nodes = json_pack("{s:[]}", "nodes"), *links = json_object();
    json_t *ids = json_array(), *lat = json_array(), *bw = json_array();
    for (int i = 1; i <= 8; i++)
        json_array_append_new(json_object_get(nodes, "nodes"),
                              json_pack("{s:i, s:{s:f}}", "id", i, "hardware", "tflops", 10.0));
    for (int i = 1; i <= 7; i++) {
        json_array_append_new(ids, json_integer(i));
        json_t *lr = json_array(), *br = json_array();
        for (int j = 1; j <= 7; j++) {
            json_array_append_new(lr, i == j ? json_null() : json_real(5));
            json_array_append_new(br, i == j ? json_null() : json_real(10));
        }
        json_array_append_new(lat, lr);
        json_array_append_new(bw, br);
    }
    json_object_set_new(links, "nodes", ids);
    json_object_set_new(links, "latency_ms", lat);
    json_object_set_new(links, "bandwidth_gbps", bw);
    struct scenario net;
    struct shoal_err err;
    assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err), -1);
    assert_string_equal(err.code, "missing_links");
    /* 7 pairs each way with node 8. */
    assert_non_null(strstr(err.message, "14 links"));
    assert_non_null(strstr(err.message, "1->8"));
    assert_non_null(strstr(err.message, "8->1"));
    assert_non_null(strstr(err.message, "..."));
    assert_int_equal(input_network(nodes, links, 20, 1, &net, &err), 0);
    assert_int_equal(net.n, 8);
    assert_true(net.latency_ms[7 * 8 + 0] == 20);
    assert_true(net.latency_ms[0 * 8 + 1] == 5);
    scenario_free(&net);
    json_decref(nodes);
    json_decref(links);
}

static void test_input_bad_documents(void **state)
{
    (void)state;
    json_t *links = parse(links_json);
    struct scenario net;
    struct shoal_err err;
    static const char *const bad_nodes[] = {
        "{}",                                                    /* no nodes array */
        "{\"nodes\":{}}",
        "{\"nodes\":[{\"id\":\"42\",\"hardware\":{\"tflops\":1}}]}",   /* id not an integer */
        "{\"nodes\":[{\"id\":42,\"hardware\":{}}]}",                    /* no tflops */
        "{\"nodes\":[{\"id\":42}]}",                                    /* no hardware */
    };
    for (size_t k = 0; k < sizeof bad_nodes / sizeof bad_nodes[0]; k++) {
        json_t *nodes = parse(bad_nodes[k]);
        memset(&err, 0, sizeof err);
        assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err), -1);
        assert_int_equal(err.status, 422);
        assert_string_equal(err.field, "nodes");
        assert_null(net.nodes);
        json_decref(nodes);
    }
    json_decref(links);

    json_t *nodes = parse(nodes_json);
    static const char *const bad_links[] = {
        "{}",
        "{\"nodes\":[1000,42,7],\"latency_ms\":[]}",
        "{\"nodes\":[1000,42,7],\"bandwidth_gbps\":[],\"latency_ms\":{}}",
    };
    for (size_t k = 0; k < sizeof bad_links / sizeof bad_links[0]; k++) {
        links = parse(bad_links[k]);
        memset(&err, 0, sizeof err);
        assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err), -1);
        assert_int_equal(err.status, 422);
        assert_string_equal(err.field, "links");
        assert_null(net.nodes);
        json_decref(links);
    }
    /* Short rows count as unmeasured, not as a crash. */
    links = parse("{\"nodes\":[1000,42,7],\"latency_ms\":[[0,1],[1]],\"bandwidth_gbps\":[[1,1]]}");
    assert_int_equal(input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err), -1);
    assert_string_equal(err.code, "missing_links");
    assert_int_equal(input_network(nodes, links, 1, 1, &net, &err), 0);
    scenario_free(&net);
    json_decref(links);
    json_decref(nodes);
}

/* An id in the links document that is not an integer is refused (422),
 * never read as node 0 over the real measurements. */
static void test_input_non_integer_link_id(void **state)
{
    (void)state;
    json_t *nodes = parse("{\"nodes\":[{\"id\":0,\"hardware\":{\"tflops\":1}},{\"id\":5,\"hardware\":{\"tflops\":1}}]}");
    json_t *links = parse("{\"nodes\":[0,5,\"x\"],"
                          " \"latency_ms\":[[null,10,null],[10,null,999],[null,999,null]],"
                          " \"bandwidth_gbps\":[[null,1,null],[1,null,0.001],[null,0.001,null]]}");
    struct scenario net;
    struct shoal_err err;
    int rc = input_network(nodes, links, INPUT_NO_FILL, INPUT_NO_FILL, &net, &err);
    double l05 = 10, l50 = 10;
    if (rc == 0) {
        l05 = net.latency_ms[0 * 2 + 1];
        l50 = net.latency_ms[1 * 2 + 0];
        scenario_free(&net);
    }
    json_decref(nodes);
    json_decref(links);
    if (l05 != 10 || l50 != 10)
        fail_msg("link 0<->5 measured at 10 ms read as %g / %g ms (from the row of id \"x\")", l05, l50);
}

/* Numbers the cost models divide by are held to the API's ranges: a node
 * of 1e-320 TFLOP/s made every stage's time infinite, and the shoal
 * model's layer split then wrote before its array (found by
 * tests/fuzz/fuzz_sched_files; its input is in regress/). */
static void test_input_out_of_range_values(void **state)
{
    (void)state;
    static const struct {
        const char *why, *nodes, *links, *says;
    } bad[] = {
        {"a denormal speed", "{\"nodes\":[{\"id\":1,\"hardware\":{\"tflops\":1e-320}},{\"id\":2,\"hardware\":{\"tflops\":1}}]}",
         "{\"nodes\":[1,2],\"latency_ms\":[[null,1],[1,null]],\"bandwidth_gbps\":[[null,1],[1,null]]}",
         "node 1's hardware.tflops"},
        {"a speed past the API's", "{\"nodes\":[{\"id\":1,\"hardware\":{\"tflops\":1e6}},{\"id\":2,\"hardware\":{\"tflops\":1}}]}",
         "{\"nodes\":[1,2],\"latency_ms\":[[null,1],[1,null]],\"bandwidth_gbps\":[[null,1],[1,null]]}",
         "node 1's hardware.tflops"},
        {"a negative latency", "{\"nodes\":[{\"id\":1,\"hardware\":{\"tflops\":1}},{\"id\":2,\"hardware\":{\"tflops\":1}}]}",
         "{\"nodes\":[1,2],\"latency_ms\":[[null,1],[-1,null]],\"bandwidth_gbps\":[[null,1],[1,null]]}",
         "link 2->1"},
        {"a denormal bandwidth", "{\"nodes\":[{\"id\":1,\"hardware\":{\"tflops\":1}},{\"id\":2,\"hardware\":{\"tflops\":1}}]}",
         "{\"nodes\":[1,2],\"latency_ms\":[[null,1],[1,null]],\"bandwidth_gbps\":[[null,1e-310],[1,null]]}",
         "link 1->2"},
        {"a node twice", "{\"nodes\":[{\"id\":1,\"hardware\":{\"tflops\":1}},{\"id\":1,\"hardware\":{\"tflops\":1}}]}",
         "{\"nodes\":[1],\"latency_ms\":[[null]],\"bandwidth_gbps\":[[null]]}",
         "lists node 1 twice"},
        {"a links row twice", "{\"nodes\":[{\"id\":1,\"hardware\":{\"tflops\":1}},{\"id\":2,\"hardware\":{\"tflops\":1}}]}",
         "{\"nodes\":[1,2,1],\"latency_ms\":[[null,1,null],[1,null,1],[null,1,null]],"
         "\"bandwidth_gbps\":[[null,1,null],[1,null,1],[null,1,null]]}",
         "lists node 1 twice"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        json_t *nodes = parse(bad[k].nodes), *links = parse(bad[k].links);
        struct scenario net;
        struct shoal_err err;
        memset(&err, 0, sizeof err);
        if (input_network(nodes, links, 5, 1, &net, &err) != -1 || err.status != 422 ||
            !strstr(err.message, bad[k].says))
            fail_msg("%s: got %d '%s', want 422 naming '%s'", bad[k].why, err.status, err.message, bad[k].says);
        assert_null(net.nodes);
        json_decref(nodes);
        json_decref(links);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_maps_links_by_id),
        cmocka_unit_test(test_input_memory_fallback),
        cmocka_unit_test(test_input_missing_link),
        cmocka_unit_test(test_input_node_without_links),
        cmocka_unit_test(test_input_bad_documents),
        cmocka_unit_test(test_input_non_integer_link_id),
        cmocka_unit_test(test_input_out_of_range_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
