/* starts.c - structured starting partitions for the search: chains of
 * nodes in which neighbours are close, dealt into groups two ways.  They
 * are starts, not answers: the search improves them like any other. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* A nearest-neighbour chain over the pipeline edge costs, from node 0
 * (next = the unvisited node with the cheapest edge, ties to the lower index). */
static void chain_nearest(const struct sched_ctx *cx, int *chain)
{
    int n = cx->n;
    char *used = calloc((size_t)n, 1);
    if (!used) {
        for (int k = 0; k < n; k++)
            chain[k] = k;
        return;
    }
    chain[0] = 0;
    used[0] = 1;
    for (int k = 1; k < n; k++) {
        int last = chain[k - 1], next = -1;
        for (int x = 0; x < n; x++)
            if (!used[x] && (next < 0 || cx->pp[last * n + x] < cx->pp[last * n + next]))
                next = x;
        chain[k] = next;
        used[next] = 1;
    }
    free(used);
}

/* Average-linkage agglomerative clustering over the pipeline edge costs,
 * by the nearest-neighbour chain algorithm (O(n^2) time and memory): the
 * leaves of the tree in order, each merge appending the second cluster's
 * members to the first's, so every cluster is a run of the chain.  Returns
 * 0, or -1 if memory is short (chain left untouched). */
static int chain_clustered(const struct sched_ctx *cx, int *chain)
{
    int n = cx->n, rc = -1;
    double *d = malloc(sizeof(double) * (size_t)n * (size_t)n);
    int *size = malloc(sizeof(int) * (size_t)n), *next = malloc(sizeof(int) * (size_t)n);
    int *tail = malloc(sizeof(int) * (size_t)n), *stack = malloc(sizeof(int) * (size_t)n);
    char *alive = malloc((size_t)n);
    if (n < 1 || !d || !size || !next || !tail || !stack || !alive)
        goto out;
    memcpy(d, cx->pp, sizeof(double) * (size_t)n * (size_t)n);
    for (int i = 0; i < n; i++) {
        size[i] = 1;
        next[i] = -1;
        tail[i] = i;
        alive[i] = 1;
    }
    int top = 0, clusters = n;
    while (clusters > 1) {
        if (top == 0) {
            int first = 0;
            while (!alive[first])
                first++;
            stack[top++] = first;
        }
        int a = stack[top - 1], b = -1;
        for (int x = 0; x < n; x++)   /* a's nearest, preferring the one below it on the stack */
            if (alive[x] && x != a && (b < 0 || d[a * n + x] < d[a * n + b] ||
                                       (top > 1 && x == stack[top - 2] && d[a * n + x] <= d[a * n + b])))
                b = x;
        if (top > 1 && b == stack[top - 2]) {
            top -= 2;   /* reciprocal nearest neighbours: merge b into a */
            for (int x = 0; x < n; x++) {
                if (!alive[x] || x == a || x == b)
                    continue;
                double v = (d[a * n + x] * size[a] + d[b * n + x] * size[b]) / (size[a] + size[b]);
                d[a * n + x] = d[x * n + a] = v;
            }
            next[tail[a]] = b;
            tail[a] = tail[b];
            size[a] += size[b];
            alive[b] = 0;
            clusters--;
        } else {
            stack[top++] = b;
        }
    }
    int root = 0;
    while (root < n - 1 && !alive[root])
        root++;
    for (int k = 0, x = root; k < n; k++, x = next[x])
        chain[k] = x;
    rc = 0;
out:
    free(d);
    free(size);
    free(next);
    free(tail);
    free(stack);
    free(alive);
    return rc;
}

int starts_count(void)
{
    return 4;
}

void cand_structured(const struct sched_ctx *cx, struct cand *c, int which)
{
    int n = cx->n, P = cx->P, D = cx->D, strided = which & 1;
    int *chain = c->member;   /* built in place, then dealt through pos */
    if (which < 2 || chain_clustered(cx, chain) != 0)
        chain_nearest(cx, chain);
    for (int k = 0; k < n; k++) {
        int slot = k;
        if (strided && k < P * D)
            slot = (k % P) * D + k / P;
        c->pos[chain[k]] = slot;
    }
    for (int x = 0; x < n; x++)
        c->member[c->pos[x]] = x;
}
