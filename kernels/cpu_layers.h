/* cpu_layers.h - the CPU backend's layers, each one forward and one backward
 * function with its shapes in the signature. Every layer exists in fp32
 * (_f32, what the backend runs) and fp64 (_f64, what the tests check against
 * finite differences): one source compiled twice, so the code tested in
 * double is the code that runs in float.
 *
 *   encoder    inp (B,T) ids, wte (V,C), wpe (T_ctx,C) or NULL -> out (B,T,C)
 *   layernorm  inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
 *   matmul     inp (N,IC), weight (OC,IC), bias (OC) or NULL -> out (N,OC)
 *   attention  qkv (B,T,C+2KV) -> out (B,T,C), att (B,NH,T,T) causal softmax;
 *              KV = KVH * hs: q of NH heads, k and v of KVH heads (grouped-
 *              query attention; gpt2: KVH = NH, qkv (B,T,3C)); here (and in
 *              rope) C is q's width NH hs, d_model or not; window > 0:
 *              row t sees positions (t - window, t] only (sliding window),
 *              0: all of [0, t]; backward
 *              needs datt (B,NH,T,T) as scratch
 *   rmsnorm    inp (N,C), weight (C) -> out (N,C), rstd (N)
 *   qknorm     inp (N,Q+2KV) -> out (N,Q+2KV): q's Q channels RMS-normalised
 *              in segments of sq by wq (sq), k's KV in segments of sk by wk
 *              (sk), v copied; rstd (N, Q/sq + KV/sk).  sq = sk = hs: each
 *              head (Qwen3); sq = Q, sk = KV: the whole width (OLMo-2)
 *   rope       qkv (B,T,C+2KV) in place: q and k heads rotated by position,
 *              cos and sin tables (T_ctx, hs/2); backward rotates back
 *   swiglu     gu (N,2F) = [gate | up] -> out (N,F) = silu(gate) * up
 *   gelu       inp (n) -> out (n), tanh approximation
 *   residual   a (n), b (n) -> out (n)
 *   crossentropy logits (N,V), targets (N) -> probs (N,V), losses (N);
 *              backward: dlogits (N,V) = (probs - onehot) * dloss, overwritten
 */
#ifndef SHOAL_KERNELS_CPU_LAYERS_H
#define SHOAL_KERNELS_CPU_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#define KERN_REAL float
#define KERN_SFX(name) name##_f32
#include "cpu_layers_proto.inc"
#undef KERN_REAL
#undef KERN_SFX

#define KERN_REAL double
#define KERN_SFX(name) name##_f64
#include "cpu_layers_proto.inc"
#undef KERN_REAL
#undef KERN_SFX

#endif
