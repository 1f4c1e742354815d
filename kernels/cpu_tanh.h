/* cpu_tanh.h - tanh in float for the CPU backend's GELU, written so that a
 * loop over it vectorises (no libm call, no branch): the scalar tanhf was
 * 43% of the demo model's time on one thread.
 *
 * tanh(u) = sign(u) (1 - e) / (1 + e) with e = exp(-2|u|) in (0, 1]:
 * -2|u| = k ln2 + r, |r| <= ln2/2, e = 2^k p(r) with p the degree-7 Taylor
 * polynomial of exp (relative error under 1e-8 on that interval), 2^k built
 * in the exponent bits.  Past |u| = 9, tanh is 1 to float precision.  The
 * error is absolute, 9e-8 at most against tanh in double (checked to 1.2e-7 over
 * [-20, 20] by test_kernels_layers); relative error grows as u -> 0, where
 * GELU uses 1 + tanh(u) and so needs the absolute error only.  The double
 * build of the layers keeps libm's tanh (cpu_layers.c). */
#ifndef SHOAL_KERNELS_CPU_TANH_H
#define SHOAL_KERNELS_CPU_TANH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float kern_tanh_f32(float u)
{
    const float ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-06f, log2e = 1.44269504f;
    float a = u < 0 ? -u : u;
    float x = -2.0f * (a < 9.0f ? a : 9.0f);              /* [-18, 0]; NaN: -18 */
    int32_t k = (int32_t)(x * log2e - 0.5f);              /* nearest: x * log2e <= 0 */
    float r = x - (float)k * ln2_hi - (float)k * ln2_lo;  /* |r| <= ln2/2 */
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720 + r * (1.0f / 5040)))))));
    int32_t bits = (k + 127) << 23;                       /* 2^k, k in [-26, 0] */
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    float e = p * two_k;
    float t = (1.0f - e) / (1.0f + e);
    t = a >= 9.0f ? 1.0f : t;
    return u != u ? u : copysignf(t, u);                  /* NaN stays NaN */
}

#endif
