/* cpu_tanh.h - tanh in float for the CPU backend's GELU, written so that a
 * loop over it vectorises (no libm call, no branch): the scalar tanhf was
 * 43% of the demo model's time on one thread.
 *
 * tanh(u) = sign(u) (1 - e) / (1 + e) with e = exp(-2|u|) in (0, 1]:
 * e from kern_exp_f32_core (cpu_exp.h: 2^k times a degree-7 polynomial).
 * Past |u| = 9, tanh is 1 to float precision.  The
 * error is absolute, 9e-8 at most against tanh in double (checked to 1.2e-7 over
 * [-20, 20] by test_kernels_layers); relative error grows as u -> 0, where
 * GELU uses 1 + tanh(u) and so needs the absolute error only.  The double
 * build of the layers keeps libm's tanh (cpu_layers.c). */
#ifndef SHOAL_KERNELS_CPU_TANH_H
#define SHOAL_KERNELS_CPU_TANH_H

#include <math.h>

#include "cpu_exp.h"

static inline float kern_tanh_f32(float u)
{
    float a = u < 0 ? -u : u;
    float x = -2.0f * (a < 9.0f ? a : 9.0f);              /* [-18, 0]; NaN: -18 */
    float e = kern_exp_f32_core(x);
    float t = (1.0f - e) / (1.0f + e);
    t = a >= 9.0f ? 1.0f : t;
    return u != u ? u : copysignf(t, u);                  /* NaN stays NaN */
}

#endif
