/* input.h - a scheduling problem's network from the server's JSON.
 *
 * The nodes document is what GET /v1/nodes returns ({"nodes":[...]}), the
 * links document what GET /v1/links returns ({"nodes":[ids], "latency_ms":
 * [[...]], "bandwidth_gbps": [[...]]}); shoal-sched reads them from files
 * and the server builds them with the same queries, so both schedule the
 * same network from the same facts. */
#ifndef SHOAL_SCHED_INPUT_H
#define SHOAL_SCHED_INPUT_H

#include <jansson.h>

#include "scenario.h"

#define INPUT_NO_FILL (-1.0)

/* Fills `net` (allocated here; scenario_free it) with every node of
 * `nodes_doc` and the links between them from `links_doc`.  A pair with no
 * measurement is an error naming the missing pairs, unless fill_latency_ms
 * and fill_bandwidth_gbps are >= 0 / > 0, which are then used for it.
 * A node's memory is its GPU memory, else its RAM, else unlimited.
 * Returns 0, or -1 with `err` set (422 naming the field). */
int input_network(const json_t *nodes_doc, const json_t *links_doc, double fill_latency_ms,
                  double fill_bandwidth_gbps, struct scenario *net, struct shoal_err *err);

#endif
