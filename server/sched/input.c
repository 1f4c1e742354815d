#include "input.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the API takes (server/api/bodies.c); a file for shoal-sched may say
 * anything, and the cost models divide by these. */
#define INPUT_MAX_NODES 20000
#define INPUT_MIN_TFLOPS 1e-6
#define INPUT_MAX_TFLOPS 1e5
#define INPUT_MAX_LATENCY_MS 600000.0
#define INPUT_MIN_BANDWIDTH_GBPS 1e-9
#define INPUT_MAX_BANDWIDTH_GBPS 1e5

/* A node id and its index in the network, sorted by id for lookups. */
struct id_index {
    json_int_t id;
    int index;
};

static int id_index_cmp(const void *a, const void *b)
{
    json_int_t x = ((const struct id_index *)a)->id, y = ((const struct id_index *)b)->id;
    return (x > y) - (x < y);
}

/* Index of node `id` in the network, or -1. */
static int node_index(const struct id_index *sorted, int n, json_int_t id)
{
    struct id_index key = { .id = id };
    const struct id_index *hit = bsearch(&key, sorted, (size_t)n, sizeof *sorted, id_index_cmp);
    return hit ? hit->index : -1;
}

/* The network's ids sorted into `sorted` (n entries); -1 with `err` set
 * when an id comes twice. */
static int input_sort_ids(const struct scenario *net, struct id_index *sorted, struct shoal_err *err)
{
    for (int i = 0; i < net->n; i++)
        sorted[i] = (struct id_index){ .id = net->nodes[i].id, .index = i };
    qsort(sorted, (size_t)net->n, sizeof *sorted, id_index_cmp);
    for (int i = 1; i < net->n; i++)
        if (sorted[i].id == sorted[i - 1].id)
            return err_set(err, 422, "invalid_field", "nodes", "the nodes document lists node %lld twice",
                           (long long)sorted[i].id);
    return 0;
}

static int input_nodes(const json_t *doc, struct scenario *net, struct shoal_err *err)
{
    json_t *arr = json_object_get(doc, "nodes");
    if (!json_is_array(arr))
        return err_set(err, 422, "invalid_field", "nodes", "the nodes document needs a \"nodes\" array");
    if (json_array_size(arr) > INPUT_MAX_NODES)
        return err_set(err, 422, "invalid_field", "nodes", "at most %d nodes", INPUT_MAX_NODES);
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
        if (!(s->tflops >= INPUT_MIN_TFLOPS && s->tflops <= INPUT_MAX_TFLOPS))
            return err_set(err, 422, "invalid_field", "nodes", "node %lld's hardware.tflops must be between %g and %g",
                           (long long)s->id, INPUT_MIN_TFLOPS, INPUT_MAX_TFLOPS);
        double gpu = json_number_value(json_object_get(hw, "gpu_memory_bytes"));
        double ram = json_number_value(json_object_get(hw, "ram_bytes"));
        s->mem_bytes = gpu > 0 ? gpu : ram > 0 ? ram : DBL_MAX;
        const char *region = json_string_value(json_object_get(nd, "region"));
        snprintf(s->region, sizeof s->region, "%s", region ? region : "");
    }
    return 0;
}

/* Where each of the links document's ids is in the network (-1: not a
 * node of it), into col[m]; `seen` is n zeroed flags. */
static int input_link_ids(const json_t *ids, const struct id_index *sorted, int n, int *col, char *seen,
                          struct shoal_err *err)
{
    size_t m = json_array_size(ids);
    for (size_t a = 0; a < m; a++) {
        json_t *id = json_array_get(ids, a);
        if (!json_is_integer(id))
            return err_set(err, 422, "invalid_field", "links", "the links document's node %zu is not an integer id", a);
        col[a] = node_index(sorted, n, json_integer_value(id));
        if (col[a] >= 0 && seen[col[a]]++)
            return err_set(err, 422, "invalid_field", "links", "the links document lists node %lld twice",
                           (long long)json_integer_value(id));
    }
    return 0;
}

/* Copies the measured links between nodes of the network; a value out of
 * the API's range is refused (a null or a missing entry is not measured). */
static int input_links(const json_t *lat, const json_t *bw, const int *col, size_t m, struct scenario *net,
                       struct shoal_err *err)
{
    int n = net->n;
    for (size_t a = 0; a < m; a++) {
        int i = col[a];
        if (i < 0)
            continue;   /* a node the nodes document does not list: not a candidate */
        json_t *lrow = json_array_get(lat, a), *brow = json_array_get(bw, a);
        for (size_t b = 0; b < m; b++) {
            int j = col[b];
            json_t *l = json_array_get(lrow, b), *w = json_array_get(brow, b);
            if (j < 0 || i == j || !json_is_number(l) || !json_is_number(w))
                continue;
            double lv = json_number_value(l), wv = json_number_value(w);
            if (!(lv >= 0 && lv <= INPUT_MAX_LATENCY_MS && wv >= INPUT_MIN_BANDWIDTH_GBPS &&
                  wv <= INPUT_MAX_BANDWIDTH_GBPS))
                return err_set(err, 422, "invalid_field", "links", "link %lld->%lld: latency_ms must be between 0 "
                               "and %g, bandwidth_gbps between %g and %g", (long long)net->nodes[i].id,
                               (long long)net->nodes[j].id, INPUT_MAX_LATENCY_MS, INPUT_MIN_BANDWIDTH_GBPS,
                               INPUT_MAX_BANDWIDTH_GBPS);
            net->latency_ms[i * n + j] = lv;
            net->bandwidth_gbps[i * n + j] = wv;
        }
    }
    return 0;
}

int input_network(const json_t *nodes_doc, const json_t *links_doc, double fill_latency_ms,
                  double fill_bandwidth_gbps, struct scenario *net, struct shoal_err *err)
{
    char missing[256] = "";
    size_t used = 0;
    long n_missing = 0;
    struct id_index *sorted = NULL;
    int *col = NULL;
    char *seen = NULL;
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
    sorted = malloc(sizeof *sorted * (size_t)(n > 0 ? n : 1));
    col = malloc(sizeof *col * (m > 0 ? m : 1));
    seen = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!sorted || !col || !seen) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto fail;
    }
    if (input_sort_ids(net, sorted, err) != 0 || input_link_ids(ids, sorted, n, col, seen, err) != 0 ||
        input_links(lat, bw, col, m, net, err) != 0)
        goto fail;
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
    free(sorted);
    free(col);
    free(seen);
    return 0;
fail:
    free(sorted);
    free(col);
    free(seen);
    scenario_free(net);
    return -1;
}
