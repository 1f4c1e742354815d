#include "input.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

/* Index of node `id` among the n nodes, or -1. */
static int node_index(const struct scenario *net, json_int_t id)
{
    for (int i = 0; i < net->n; i++)
        if (net->nodes[i].id == id)
            return i;
    return -1;
}

static int input_nodes(const json_t *doc, struct scenario *net, struct shoal_err *err)
{
    json_t *arr = json_object_get(doc, "nodes");
    if (!json_is_array(arr))
        return err_set(err, 422, "invalid_field", "nodes", "the nodes document needs a \"nodes\" array");
    if (json_array_size(arr) > 20000)
        return err_set(err, 422, "invalid_field", "nodes", "at most 20000 nodes");
    if (scenario_alloc(net, (int)json_array_size(arr)) != 0)
        return err_set(err, 500, "internal", NULL, "out of memory");
    size_t i;
    json_t *nd;
    json_array_foreach(arr, i, nd) {
        json_t *id = json_object_get(nd, "id"), *hw = json_object_get(nd, "hardware");
        json_t *tflops = json_object_get(hw, "tflops");
        if (!json_is_integer(id) || !json_is_number(tflops))
            return err_set(err, 422, "invalid_field", "nodes", "node %zu needs an integer id and hardware.tflops", i);
        struct sched_node *s = &net->nodes[i];
        s->id = json_integer_value(id);
        s->tflops = json_number_value(tflops);
        double gpu = json_number_value(json_object_get(hw, "gpu_memory_bytes"));
        double ram = json_number_value(json_object_get(hw, "ram_bytes"));
        s->mem_bytes = gpu > 0 ? gpu : ram > 0 ? ram : DBL_MAX;
        const char *region = json_string_value(json_object_get(nd, "region"));
        snprintf(s->region, sizeof s->region, "%s", region ? region : "");
    }
    return 0;
}

int input_network(const json_t *nodes_doc, const json_t *links_doc, double fill_latency_ms,
                  double fill_bandwidth_gbps, struct scenario *net, struct shoal_err *err)
{
    char missing[256] = "";
    size_t used = 0;
    long n_missing = 0;
    memset(net, 0, sizeof *net);
    if (input_nodes(nodes_doc, net, err) != 0)
        goto fail;
    int n = net->n;
    for (size_t k = 0; k < (size_t)n * (size_t)n; k++)
        net->latency_ms[k] = net->bandwidth_gbps[k] = -1;   /* -1: not measured */
    json_t *ids = json_object_get(links_doc, "nodes");
    json_t *lat = json_object_get(links_doc, "latency_ms"), *bw = json_object_get(links_doc, "bandwidth_gbps");
    if (!json_is_array(ids) || !json_is_array(lat) || !json_is_array(bw)) {
        err_set(err, 422, "invalid_field", "links", "the links document needs nodes, latency_ms and bandwidth_gbps arrays");
        goto fail;
    }
    size_t m = json_array_size(ids);
    for (size_t a = 0; a < m; a++) {
        if (!json_is_integer(json_array_get(ids, a))) {
            err_set(err, 422, "invalid_field", "links", "the links document's node %zu is not an integer id", a);
            goto fail;
        }
    }
    for (size_t a = 0; a < m; a++) {
        int i = node_index(net, json_integer_value(json_array_get(ids, a)));
        if (i < 0)
            continue;   /* a node the nodes document does not list: not a candidate */
        json_t *lrow = json_array_get(lat, a), *brow = json_array_get(bw, a);
        for (size_t b = 0; b < m; b++) {
            int j = node_index(net, json_integer_value(json_array_get(ids, b)));
            json_t *l = json_array_get(lrow, b), *w = json_array_get(brow, b);
            if (j < 0 || i == j || !json_is_number(l) || !json_is_number(w))
                continue;
            net->latency_ms[i * n + j] = json_number_value(l);
            net->bandwidth_gbps[i * n + j] = json_number_value(w);
        }
    }
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            if (i == j) {
                net->latency_ms[i * n + j] = 0;
                net->bandwidth_gbps[i * n + j] = 1;
                continue;
            }
            if (net->bandwidth_gbps[i * n + j] > 0)
                continue;
            if (fill_latency_ms >= 0 && fill_bandwidth_gbps > 0) {
                net->latency_ms[i * n + j] = fill_latency_ms;
                net->bandwidth_gbps[i * n + j] = fill_bandwidth_gbps;
                continue;
            }
            if (n_missing++ < 12) {
                int w = snprintf(missing + used, sizeof missing - used, "%s%lld->%lld", used ? ", " : "",
                                 (long long)net->nodes[i].id, (long long)net->nodes[j].id);
                if (w > 0 && (size_t)w < sizeof missing - used)
                    used += (size_t)w;
            }
        }
    }
    if (n_missing > 0) {
        err_set(err, 422, "missing_links", "links",
                "%ld links are not measured (%s%s); measure them, or give fill values for them",
                n_missing, missing, n_missing > 12 ? ", ..." : "");
        goto fail;
    }
    return 0;
fail:
    scenario_free(net);
    return -1;
}
