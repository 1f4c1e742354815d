/* cuda_bf16.h - bfloat16 for the host emulation (tests/gpu/host): the top 16
 * bits of an IEEE float, converted from float rounding to nearest even as
 * __float2bfloat16 does on a device; NaN stays NaN. */
#ifndef SHOAL_TESTS_GPU_HOST_CUDA_BF16_H
#define SHOAL_TESTS_GPU_HOST_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

typedef struct __nv_bfloat16 {
    uint16_t bits;
} __nv_bfloat16;

static inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u;
    __nv_bfloat16 b;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet and a NaN */
        b.bits = (uint16_t)((u >> 16) | 0x0040u);
    else
        b.bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
}

static inline float __bfloat162float(__nv_bfloat16 b)
{
    uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
