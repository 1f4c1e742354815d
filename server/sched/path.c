#include "path.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

struct path_work {
    int P;
    double *dp;     /* Held-Karp: [mask * P + last], P <= PATH_EXACT_MAX */
    int *tmp;       /* heuristic: a candidate order */
};

struct path_work *path_work_new(int P)
{
    struct path_work *pw = calloc(1, sizeof *pw);
    if (!pw)
        return NULL;
    pw->P = P;
    if (P <= PATH_EXACT_MAX)
        pw->dp = malloc(sizeof(double) * ((size_t)1 << P) * (size_t)P);
    pw->tmp = malloc(sizeof(int) * (size_t)P);
    if ((P <= PATH_EXACT_MAX && !pw->dp) || !pw->tmp) {
        path_work_free(pw);
        return NULL;
    }
    return pw;
}

void path_work_free(struct path_work *pw)
{
    if (!pw)
        return;
    free(pw->dp);
    free(pw->tmp);
    free(pw);
}

/* Held-Karp over subsets: dp[S][j] = cheapest path visiting S, ending at j. */
static double path_exact(const double *c, int P, int *order, struct path_work *pw)
{
    size_t full = ((size_t)1 << P) - 1;
    double *dp = pw->dp;
    for (size_t s = 0; s <= full; s++)
        for (int j = 0; j < P; j++)
            dp[s * (size_t)P + (size_t)j] = DBL_MAX;
    for (int j = 0; j < P; j++)
        dp[((size_t)1 << j) * (size_t)P + (size_t)j] = 0;
    for (size_t s = 1; s <= full; s++) {
        for (size_t in = s; in; in &= in - 1) {   /* j over the set bits of s */
            int j = __builtin_ctzll((unsigned long long)in);
            double here = dp[s * (size_t)P + (size_t)j];
            if (here == DBL_MAX)
                continue;
            const double *cj = c + j * P;
            for (size_t out = full & ~s; out; out &= out - 1) {   /* k over the others */
                int k = __builtin_ctzll((unsigned long long)out);
                double *to = &dp[(s | ((size_t)1 << k)) * (size_t)P + (size_t)k];
                double v = here + cj[k];
                if (v < *to)
                    *to = v;
            }
        }
    }
    int last = 0;
    for (int j = 1; j < P; j++)
        if (dp[full * (size_t)P + (size_t)j] < dp[full * (size_t)P + (size_t)last])
            last = j;
    double best = dp[full * (size_t)P + (size_t)last];
    /* Walk back: find the predecessor whose value plus the edge gives ours. */
    size_t s = full;
    for (int pos = P - 1; pos >= 0; pos--) {
        order[pos] = last;
        size_t prev_s = s & ~((size_t)1 << last);
        if (!prev_s)
            break;
        int prev = -1;
        double want = dp[s * (size_t)P + (size_t)last];
        for (int k = 0; k < P; k++) {
            if (!(prev_s >> k & 1))
                continue;
            double v = dp[prev_s * (size_t)P + (size_t)k];
            if (v != DBL_MAX && v + c[k * P + last] == want) {
                prev = k;
                break;
            }
        }
        s = prev_s;
        last = prev;
    }
    return best;
}

double path_cost(const double *c, int P, const int *order)
{
    double sum = 0;
    for (int s = 0; s + 1 < P; s++)
        sum += c[order[s] * P + order[s + 1]];
    return sum;
}

/* Cost of the edge between stages holding groups a and b; -1 is "no stage"
 * (before the first or after the last), which costs nothing. */
static double path_edge(const double *c, int P, int a, int b)
{
    return a < 0 || b < 0 ? 0 : c[a * P + b];
}

/* Improves `order` in place with 2-opt (reverse a segment) and Or-opt (move
 * a segment of 1-3 stages between two others) until no move helps.  Each
 * move is priced by the edges it changes only, so a pass is O(P^2). */
static void path_improve(const double *c, int P, int *order, int *tmp)
{
    int improved = 1;
    while (improved) {
        improved = 0;
        for (int i = 0; i < P - 1; i++) {
            for (int k = i + 1; k < P; k++) {
                int before = i > 0 ? order[i - 1] : -1, after = k + 1 < P ? order[k + 1] : -1;
                double delta = path_edge(c, P, before, order[k]) + path_edge(c, P, order[i], after)
                             - path_edge(c, P, before, order[i]) - path_edge(c, P, order[k], after);
                if (delta < -1e-12) {
                    for (int a = i, b = k; a < b; a++, b--) {
                        int x = order[a]; order[a] = order[b]; order[b] = x;
                    }
                    improved = 1;
                }
            }
        }
        for (int len = 1; len <= 3 && len < P; len++) {
            for (int i = 0; i + len <= P; i++) {
                int first = order[i], last = order[i + len - 1];
                int before = i > 0 ? order[i - 1] : -1, after = i + len < P ? order[i + len] : -1;
                double removed = path_edge(c, P, before, first) + path_edge(c, P, last, after)
                               - path_edge(c, P, before, after);
                /* Insert between positions j and j+1 of the original order,
                 * both outside the segment; j = -1 means at the front. */
                for (int j = -1; j < P; j++) {
                    if (j >= i - 1 && j < i + len)
                        continue;
                    int left = j >= 0 ? order[j] : -1, right = j + 1 < P ? order[j + 1] : -1;
                    double added = path_edge(c, P, left, first) + path_edge(c, P, last, right)
                                 - path_edge(c, P, left, right);
                    if (added - removed >= -1e-12)
                        continue;
                    int m = 0;
                    if (j == -1)
                        for (int a = 0; a < len; a++) tmp[m++] = order[i + a];
                    for (int a = 0; a < P; a++) {
                        if (a >= i && a < i + len)
                            continue;
                        tmp[m++] = order[a];
                        if (a == j)
                            for (int b = 0; b < len; b++) tmp[m++] = order[i + b];
                    }
                    memcpy(order, tmp, sizeof(int) * (size_t)P);
                    improved = 1;
                    break;
                }
                if (improved)
                    break;
            }
            if (improved)
                break;
        }
    }
}

/* Nearest neighbour from each start, each improved; keeps the best. */
static double path_heuristic(const double *c, int P, int *order, struct path_work *pw)
{
    double best = DBL_MAX;
    int cand[P], used[P];
    for (int start = 0; start < P; start++) {
        memset(used, 0, sizeof used);
        cand[0] = start;
        used[start] = 1;
        for (int s = 1; s < P; s++) {
            int prev = cand[s - 1], next = -1;
            for (int k = 0; k < P; k++)
                if (!used[k] && (next < 0 || c[prev * P + k] < c[prev * P + next]))
                    next = k;
            cand[s] = next;
            used[next] = 1;
        }
        path_improve(c, P, cand, pw->tmp);
        double v = path_cost(c, P, cand);
        if (v < best) {
            best = v;
            memcpy(order, cand, sizeof cand);
        }
    }
    return best;
}

double path_open_best(const double *c, int P, int *order, struct path_work *pw)
{
    if (P == 1) {
        order[0] = 0;
        return 0;
    }
    if (P <= PATH_EXACT_MAX)
        return path_exact(c, P, order, pw);
    return path_heuristic(c, P, order, pw);
}

double path_improve_order(const double *c, int P, int *order, struct path_work *pw)
{
    if (P > 1)
        path_improve(c, P, order, pw->tmp);
    return path_cost(c, P, order);
}
