/* clock.h - the one monotonic clock: for timeouts, deadlines, rates and
 * durations (CLOCK_MONOTONIC: never steps with the wall clock), in seconds
 * or milliseconds since an arbitrary start. */
#ifndef SHOAL_CLOCK_H
#define SHOAL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
