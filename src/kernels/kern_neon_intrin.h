/* kern_neon_intrin.h - the small NEON helpers the NEON kernel files share
 * (kern_neon.c, kern_neon_quants.c). aarch64 only: include it inside the
 * files' `#if defined(__aarch64__)`.
 *
 * Integer dots use SDOT when the compiler targets the dot-product
 * extension (__ARM_FEATURE_DOTPROD), else widening multiplies (SMULL, exact
 * for int8 x int8) with pairwise widening adds (SADALP). Both give the
 * exact int32 sums, so the two builds give the same bits everywhere.
 */
#ifndef PL_KERNELS_KERN_NEON_INTRIN_H
#define PL_KERNELS_KERN_NEON_INTRIN_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#define KNI static inline __attribute__((always_inline))

/* f16 -> f32 of one scalar (block scales) with the FCVT instruction: exact. */
KNI float f16s(uint16_t h)
{
    float16_t f;
    memcpy(&f, &h, sizeof f);
    return (float)f;
}

/* 16 int8 x 16 int8 as 4 lanes of exact int32 partial sums. */
KNI int32x4_t dot_i8x16(int8x16_t w, int8x16_t x)
{
#ifdef __ARM_FEATURE_DOTPROD
    return vdotq_s32(vdupq_n_s32(0), w, x);
#else
    return vpadalq_s16(vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x))), vmull_high_s8(w, x));
#endif
}

/* 32 int8 weights times 32 int8 activations (w0/x0 elements 0..15, w1/x1
 * 16..31) as 4 lanes of exact int32 partial sums. */
KNI int32x4_t dot_i8x32(int8x16_t w0, int8x16_t w1, int8x16_t x0, int8x16_t x1)
{
#ifdef __ARM_FEATURE_DOTPROD
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, x0), w1, x1);
#else
    int32x4_t a = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
    a = vpadalq_s16(a, vmull_high_s8(w0, x0));
    a = vpadalq_s16(a, vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
    return vpadalq_s16(a, vmull_high_s8(w1, x1));
#endif
}

#endif
