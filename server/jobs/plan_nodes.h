/* plan_nodes.h - the nodes a plan may not take, for the planner
 * (planner.c): those excluded after failures, taken back when too few are
 * left and their peer ports answer, and the ones left out named in the
 * planner's messages with their reasons. */
#ifndef SHOAL_PLAN_NODES_H
#define SHOAL_PLAN_NODES_H

#include <stddef.h>

#include <jansson.h>

/* Too few nodes besides those excluded after failures: the excluded ones
 * whose peer port answers the server now (in `excluded`'s order, fewest
 * failed epochs first) are appended to `nodes` until `need` are there;
 * the others are named in out ("; excluded after failures: node 3 (a3),
 * ...", or ""). */
void readmit_excluded(json_t *nodes, const json_t *excluded, long long need, char *out, size_t len);

/* "; not allowed to read its data by their owners' --data-roots: node 3
 * (a3) beneath /srv/x, ..." of `nodes` ({id, name, data_roots}), or "". */
void name_unreadable(const json_t *nodes, char *out, size_t len);

#endif
