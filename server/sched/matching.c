#include "matching.h"

#include <float.h>
#include <limits.h>
#include <stdlib.h>

/* Kuhn's augmenting path from left vertex i using edges with cost <= t. */
static int match_augment(const double *w, int D, double t, int i, struct match_work *ws)
{
    for (int j = 0; j < D; j++) {
        if (w[i * D + j] > t || ws->seen[j] == ws->stamp)
            continue;
        ws->seen[j] = ws->stamp;
        if (ws->match_right[j] < 0 || match_augment(w, D, t, ws->match_right[j], ws)) {
            ws->match_right[j] = i;
            return 1;
        }
    }
    return 0;
}

double match_bottleneck(const double *w, int D, int *pair, struct match_work *ws)
{
    return match_bottleneck_hint(w, D, pair, NULL, ws);
}

double match_bottleneck_hint(const double *w, int D, int *pair, const int *hint, struct match_work *ws)
{
    /* Lower bound: every row and every column needs one edge. */
    double t = -DBL_MAX;
    for (int i = 0; i < D; i++) {
        double rmin = w[i * D], cmin = w[i];
        for (int j = 1; j < D; j++) {
            if (w[i * D + j] < rmin) rmin = w[i * D + j];
            if (w[j * D + i] < cmin) cmin = w[j * D + i];
        }
        if (rmin > t) t = rmin;
        if (cmin > t) t = cmin;
    }
    return match_bottleneck_bound(w, D, t, pair, hint, ws);
}

double match_bottleneck_bound(const double *w, int D, double t, int *pair, const int *hint, struct match_work *ws)
{
    /* Match the left vertices in turn at threshold t.  When vertex i finds
     * no augmenting path, the vertices its search reached cannot all be
     * matched at t, and any augmenting path must leave them by an edge
     * from a reached left vertex to an unreached right one: raise t to the
     * cheapest such edge (a lower bound of the optimum) and search again,
     * keeping the matching (still valid at a higher t). */
    for (int j = 0; j < D; j++)
        ws->match_right[j] = -1;
    for (int i = 0; hint && i < D; i++) {   /* the hint's pairs that are valid at the bound */
        int j = hint[i];
        if (j >= 0 && j < D && ws->match_right[j] < 0 && w[i * D + j] <= t)
            ws->match_right[j] = i;
    }
    for (int i = 0; i < D; i++) {
        int matched = 0;   /* by the hint (an augmenting path may have moved it since) */
        for (int j = 0; hint && j < D && !matched; j++)
            matched = ws->match_right[j] == i;
        if (matched)
            continue;
        for (;;) {
            if (ws->stamp == INT_MAX) {   /* about to wrap: reset the marks */
                for (int j = 0; j < MATCH_MAX_D; j++)
                    ws->seen[j] = 0;
                ws->stamp = 0;
            }
            ws->stamp++;
            if (match_augment(w, D, t, i, ws))
                break;
            double next = DBL_MAX;
            for (int l = -1; l < D; l++) {
                int left = l < 0 ? i : (ws->seen[l] == ws->stamp ? ws->match_right[l] : -1);
                if (left < 0)
                    continue;
                for (int j = 0; j < D; j++)
                    if (ws->seen[j] != ws->stamp && w[left * D + j] < next)
                        next = w[left * D + j];
            }
            t = next;
        }
    }
    if (pair)
        for (int j = 0; j < D; j++)
            pair[ws->match_right[j]] = j;
    return t;
}
