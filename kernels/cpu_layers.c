/* cpu_layers.c - compiles cpu_layers_impl.inc for float and for double. */
#include "cpu_layers.h"
#include "cpu_exp.h"
#include "cpu_tanh.h"

#include <cblas.h>
#include <tgmath.h>

#define KERN_REAL float
#define KERN_SFX(name) name##_f32
#define KERN_GEMM cblas_sgemm
#define KERN_TANH kern_tanh_f32 /* vectorises (cpu_tanh.h) */
#define KERN_EXP kern_exp_f32   /* vectorises, for x <= 0 (cpu_exp.h) */
#include "cpu_layers_impl.inc"
#undef KERN_REAL
#undef KERN_SFX
#undef KERN_GEMM
#undef KERN_TANH
#undef KERN_EXP

#define KERN_REAL double
#define KERN_SFX(name) name##_f64
#define KERN_GEMM cblas_dgemm
#define KERN_TANH tanh
#define KERN_EXP exp
#include "cpu_layers_impl.inc"
#undef KERN_REAL
#undef KERN_SFX
#undef KERN_GEMM
#undef KERN_TANH
#undef KERN_EXP
