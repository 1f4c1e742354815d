/* matching.h - bottleneck perfect matching between two groups of D nodes.
 *
 * Pairs every node of one data-parallel group with one node of the next
 * stage's group so that the worst pair's cost is as small as possible: the
 * smallest threshold at which the bipartite graph of pairs no dearer than it
 * has a perfect matching.  Kuhn's augmenting paths from a lower bound, the
 * threshold raised to the cheapest edge leaving a failed search's reach
 * (each raise is still a lower bound).  Exact. */
#ifndef SHOAL_SCHED_MATCHING_H
#define SHOAL_SCHED_MATCHING_H

#define MATCH_MAX_D 256   /* largest group the workspace is sized for */

struct match_work {
    int match_right[MATCH_MAX_D];   /* right vertex -> left vertex, -1 free */
    int seen[MATCH_MAX_D];
    int stamp;
};

/* `w` is D x D row-major: w[i*D + j] = cost of pairing left i with right j.
 * Returns the bottleneck value and writes pair[i] = j for a matching that
 * attains it (pair may be NULL).  D must be 1..MATCH_MAX_D. */
double match_bottleneck(const double *w, int D, int *pair, struct match_work *ws);

/* The same, starting from the pairs of `hint` (hint[i] = j, a matching of
 * the same two groups before one node changed) that cost no more than the
 * lower bound: fewer augmenting paths, the same exact value.  `hint` may
 * be `pair` itself. */
double match_bottleneck_hint(const double *w, int D, int *pair, const int *hint, struct match_work *ws);

/* The same, with the lower bound `lb` (the largest row or column minimum)
 * computed by the caller. */
double match_bottleneck_bound(const double *w, int D, double lb, int *pair, const int *hint,
                              struct match_work *ws);

#endif
