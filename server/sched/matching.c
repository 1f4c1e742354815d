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

/* 1 if the edges no dearer than t hold a perfect matching (left in match_right). */
static int match_perfect(const double *w, int D, double t, struct match_work *ws)
{
    for (int j = 0; j < D; j++)
        ws->match_right[j] = -1;
    for (int i = 0; i < D; i++) {
        if (ws->stamp == INT_MAX) {   /* about to wrap: reset the marks */
            for (int j = 0; j < MATCH_MAX_D; j++)
                ws->seen[j] = 0;
            ws->stamp = 0;
        }
        ws->stamp++;
        if (!match_augment(w, D, t, i, ws))
            return 0;
    }
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double match_bottleneck(const double *w, int D, int *pair, struct match_work *ws)
{
    /* Lower bound: every row and every column needs one edge. */
    double lb = -DBL_MAX;
    for (int i = 0; i < D; i++) {
        double rmin = w[i * D], cmin = w[i];
        for (int j = 1; j < D; j++) {
            if (w[i * D + j] < rmin) rmin = w[i * D + j];
            if (w[j * D + i] < cmin) cmin = w[j * D + i];
        }
        if (rmin > lb) lb = rmin;
        if (cmin > lb) lb = cmin;
    }
    double best = lb;
    if (!match_perfect(w, D, lb, ws)) {
        /* Binary search over the distinct costs above the bound. */
        int n = 0;
        for (int k = 0; k < D * D; k++)
            if (w[k] > lb)
                ws->sorted[n++] = w[k];
        qsort(ws->sorted, (size_t)n, sizeof ws->sorted[0], cmp_double);
        int lo = 0, hi = n - 1;   /* the largest cost always admits a perfect matching */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (match_perfect(w, D, ws->sorted[mid], ws))
                hi = mid;
            else
                lo = mid + 1;
        }
        best = ws->sorted[lo];
        match_perfect(w, D, best, ws);
    }
    if (pair)
        for (int j = 0; j < D; j++)
            pair[ws->match_right[j]] = j;
    return best;
}
