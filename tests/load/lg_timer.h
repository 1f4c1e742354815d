/* lg_timer.h - the load generator's timers: a binary heap on the due time.
 * Nothing is ever removed early: an owner that changes its mind bumps a
 * generation, and a timer whose `gen` no longer matches is ignored when it
 * fires. */
#ifndef LG_TIMER_H
#define LG_TIMER_H

#include <stddef.h>

struct lg_timer {
    double due;             /* monotonic s */
    void *ptr;              /* what it is about (an agent, a connection) */
    int what;               /* the owner's kind of timer */
    unsigned long gen;      /* the owner's generation when it was set */
};

struct lg_timers {
    struct lg_timer *heap;
    size_t n, cap;
};

/* Adds a timer.  Returns 0, or -1 when out of memory. */
int lg_timer_add(struct lg_timers *t, struct lg_timer timer);

/* The earliest timer, if it is due at `now` (monotonic s): 1 and *out
 * set, taken off the heap; else 0. */
int lg_timer_pop_due(struct lg_timers *t, double now, struct lg_timer *out);

/* The earliest due time, or `otherwise` when there is no timer. */
double lg_timer_next(const struct lg_timers *t, double otherwise);

void lg_timer_free(struct lg_timers *t);

#endif
