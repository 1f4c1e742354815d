/* sched_fixture.h - what the scheduler suites share: a relative
 * comparison that names both values.  Include after cmocka.h. */
#ifndef SHOAL_TEST_SCHED_FIXTURE_H
#define SHOAL_TEST_SCHED_FIXTURE_H

#include <math.h>

/* |got - want| within rel of max(|want|, 1). */
static __attribute__((unused)) void assert_near(double got, double want, double rel)
{
    double tol = rel * (fabs(want) > 1 ? fabs(want) : 1);
    if (!(fabs(got - want) <= tol))
        fail_msg("got %.12g, want %.12g (tolerance %.3g)", got, want, tol);
}

#endif
