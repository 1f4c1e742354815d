/* path.h - the pipeline order: the cheapest open path through all groups.
 *
 * Given symmetric edge costs between P groups, finds the order of stages
 * that minimises the sum of consecutive edges, any start (open-loop TSP).
 * Exact Held-Karp dynamic programming up to PATH_EXACT_MAX groups (it runs
 * on every candidate, and 2^P * P^2 steps stop paying above 12); above that,
 * nearest neighbour from every start, then 2-opt and Or-opt moves. */
#ifndef SHOAL_SCHED_PATH_H
#define SHOAL_SCHED_PATH_H

#define PATH_EXACT_MAX 12

struct path_work;

/* Allocates a workspace for up to `P` groups; NULL if memory is short. */
struct path_work *path_work_new(int P);
void path_work_free(struct path_work *pw);

/* `c` is P x P symmetric (c[g*P + h]).  Writes the order (order[s] = group
 * at stage s) and returns the path's cost. */
double path_open_best(const double *c, int P, int *order, struct path_work *pw);

/* Improves a given order in place by 2-opt and Or-opt moves (the
 * heuristic's last step, from one start only) and returns its cost. */
double path_improve_order(const double *c, int P, int *order, struct path_work *pw);

/* The cost of a given order: the sum of its consecutive edges. */
double path_cost(const double *c, int P, const int *order);

#endif
