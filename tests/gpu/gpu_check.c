/* gpu_check.c - what the GPU test's files share: result lines and counts,
 * and a seeded random number generator (splitmix64). */
#include "gpu_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static int n_passed, n_failed;


void check(const char *scope, const char *what, int ok, const char *fmt, ...)
{
    char detail[512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    if (ok) {
        n_passed++;
        printf("ok - %s %s%s%s%s\n", scope, what, *detail ? " (" : "", detail,
               *detail ? ")" : "");
    } else {
        n_failed++;
        printf("not ok - %s %s: %s\n", scope, what, *detail ? detail : "failed");
    }
    fflush(stdout);
}

/* ---- random numbers (splitmix64) ---------------------------------------- */

uint64_t rng_u64(struct rng *r)
{
    uint64_t x = (r->state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in (0,1), never 0. */
double rng_unit(struct rng *r)
{
    return ((double)(rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

float rng_normal(struct rng *r)
{
    double u1 = rng_unit(r), u2 = rng_unit(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

int check_summary(void)
{
    printf("# %d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
