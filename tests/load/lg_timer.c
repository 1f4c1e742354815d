/* lg_timer.c - a binary heap of timers (lg_timer.h). */
#include "lg_timer.h"

#include <stdlib.h>

#define LG_TIMER_FIRST_CAP 4096   /* timers; the heap doubles from there */

int lg_timer_add(struct lg_timers *t, struct lg_timer timer)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : LG_TIMER_FIRST_CAP;
        struct lg_timer *heap = realloc(t->heap, cap * sizeof *heap);
        if (!heap)
            return -1;
        t->heap = heap;
        t->cap = cap;
    }
    size_t i = t->n++;
    while (i > 0 && t->heap[(i - 1) / 2].due > timer.due) {   /* sift up */
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = timer;
    return 0;
}

int lg_timer_pop_due(struct lg_timers *t, double now, struct lg_timer *out)
{
    if (t->n == 0 || t->heap[0].due > now)
        return 0;
    *out = t->heap[0];
    struct lg_timer last = t->heap[--t->n];
    size_t i = 0, n = t->n;
    for (;;) {   /* sift the last one down from the top */
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && t->heap[c + 1].due < t->heap[c].due)
            c++;
        if (t->heap[c].due >= last.due)
            break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n)
        t->heap[i] = last;
    return 1;
}

double lg_timer_next(const struct lg_timers *t, double otherwise)
{
    return t->n ? t->heap[0].due : otherwise;
}

void lg_timer_free(struct lg_timers *t)
{
    free(t->heap);
    t->heap = NULL;
    t->n = t->cap = 0;
}
