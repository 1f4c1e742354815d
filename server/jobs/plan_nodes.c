/* plan_nodes.c - the nodes a plan leaves out, taken back or named (plan_nodes.h). */
#include "plan_nodes.h"

#include <stdio.h>
#include <stdlib.h>

#include "../../common/log.h"
#include "peer_probe.h"

/* Appends " node ID (NAME)EXTRA" of `node` ({id, name}) to the list at
 * out[*at], after `first` when the list is empty and "," after that.
 * Returns 0, or -1 (the list cut back to its last whole entry) when it
 * does not fit in len. */
static int name_node(char *out, size_t len, size_t *at, const char *first, const json_t *node, const char *extra)
{
    int w = snprintf(out + *at, len - *at, "%s node %lld (%s)%s", *at ? "," : first,
                     (long long)json_integer_value(json_object_get(node, "id")),
                     json_string_value(json_object_get(node, "name")), extra);
    if (w < 0 || (size_t)w >= len - *at) {
        out[*at] = '\0';
        return -1;
    }
    *at += (size_t)w;
    return 0;
}

/* Too few nodes besides those excluded after failures: the excluded ones
 * whose peer port answers the server now (an agent restarted, a link
 * mended; LIVE_NODES_SQL's order, fewest failed epochs first) are taken
 * back into `nodes` until `need` are there; the others are named in
 * `left_out` ("; excluded after failures: node 3 (a3), ...", or ""). */
void readmit_excluded(json_t *nodes, const json_t *excluded, long long need, char *out, size_t len)
{
    size_t n = json_array_size(excluded), i, at = 0;
    const char **addr = calloc(n + 1, sizeof *addr);
    int *ok = calloc(n + 1, sizeof *ok);
    char (*why)[PEER_PROBE_WHY_MAX] = calloc(n + 1, sizeof *why);
    out[0] = '\0';
    if (!addr || !ok || !why)
        goto out;
    for (i = 0; i < n; i++) {
        const char *a = json_string_value(json_object_get(json_array_get(excluded, i), "peer_address"));
        addr[i] = a ? a : "";
    }
    if ((long long)json_array_size(nodes) < need)
        peer_probe_all(addr, (int)n, PEER_PROBE_TIMEOUT_MS, ok, why);
    for (i = 0; i < n; i++) {
        json_t *node = json_array_get(excluded, i);
        if (ok[i] == PEER_PROBE_ANSWERED && (long long)json_array_size(nodes) < need) {
            json_array_append(nodes, node);
            log_warn("planner: node %lld (%s), excluded after failures, is taken back: too few nodes without it "
                     "and its peer port answers", (long long)json_integer_value(json_object_get(node, "id")),
                     json_string_value(json_object_get(node, "name")));
            continue;
        }
        if (name_node(out, len, &at, "; excluded after failures:", node, "") != 0)
            break;
    }
out:
    free(addr);
    free(ok);
    free(why);
}

/* "; not allowed to read the job's data (their owners' --data-roots): node
 * 3 (a3) beneath /srv/x, ..." of `nodes` (LIVE_NODES_SQL's unreadable), or "". */
void name_unreadable(const json_t *nodes, char *out, size_t len)
{
    size_t i, at = 0;
    json_t *node;
    out[0] = '\0';
    json_array_foreach(nodes, i, node) {
        const char *root = json_string_value(json_array_get(json_object_get(node, "data_roots"), 0));
        char beneath[300];
        snprintf(beneath, sizeof beneath, " beneath %s", root ? root : "?");
        if (name_node(out, len, &at, "; not allowed to read its data by their owners' --data-roots:", node,
                      beneath) != 0)
            break;
    }
}
