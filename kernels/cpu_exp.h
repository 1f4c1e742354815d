/* cpu_exp.h - exp in float for x <= 0, written so that a loop over it
 * vectorises (no libm call, no branch): the softmaxes' exp (the loss's
 * over the vocabulary, attention's over the positions) was the largest
 * cost after the matrix products, one glibc expf call an element.
 *
 * x = k ln2 + r, |r| <= ln2/2 (k the nearest integer to x log2e, ln2 in
 * two parts), exp(x) = 2^k p(r) with p the degree-7 Taylor polynomial of
 * exp (relative error under 1e-8 on that interval), 2^k built in the
 * exponent bits.  Below -87 (where 2^k would leave the normal floats) the
 * result is 0, where expf gives a subnormal under 1.7e-38; NaN stays NaN.
 * Relative error 9.7e-8 at most against exp in double over [-87, 0]
 * (test_kernels_layers).  The double build of the layers keeps libm's exp
 * (cpu_layers.c), as for tanh (cpu_tanh.h, which uses this). */
#ifndef SHOAL_KERNELS_CPU_EXP_H
#define SHOAL_KERNELS_CPU_EXP_H

#include <stdint.h>
#include <string.h>

#define KERN_EXP_F32_MIN (-87.0f) /* below: 0 */

/* exp(x) for x in [KERN_EXP_F32_MIN, 0]; the caller keeps x there. */
static inline float kern_exp_f32_core(float x)
{
    const float ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-06f, log2e = 1.44269504f;
    int32_t k = (int32_t)(x * log2e - 0.5f);              /* nearest: x * log2e <= 0 */
    float r = x - (float)k * ln2_hi - (float)k * ln2_lo;  /* |r| <= ln2/2 */
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720 + r * (1.0f / 5040)))))));
    int32_t bits = (k + 127) << 23;                       /* 2^k, k in [-126, 0] */
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k);
    return p * two_k;
}

/* exp(x) for x <= 0 (a softmax's z - max); x > 0 is taken as 0. */
static inline float kern_exp_f32(float x)
{
    float c = x < KERN_EXP_F32_MIN ? KERN_EXP_F32_MIN : x < 0 ? x : 0;   /* NaN: 0 */
    float e = kern_exp_f32_core(c);
    e = x < KERN_EXP_F32_MIN ? 0.0f : e;
    return x != x ? x : e;                                /* NaN stays NaN */
}

#endif
