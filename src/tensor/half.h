/* half.h - scalar IEEE half (f16) and bfloat16 conversions, bit-exact with
 * ggml's reference conversions (round to nearest even; NaN stays NaN). */
#ifndef PL_TENSOR_HALF_H
#define PL_TENSOR_HALF_H

#include <stdint.h>
#include <string.h>

static inline float half_f32_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t half_bits_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* f16 -> f32, exact. */
static inline float f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = half_f32_bits((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = half_f32_bits((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result = sign | (two_w < denormalized_cutoff ? half_bits_f32(denormalized)
                                                                : half_bits_f32(normalized));
    return half_f32_bits(result);
}

/* f32 -> f16, round to nearest even. */
static inline uint16_t f32_to_f16(float f)
{
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (f < 0 ? -f : f) * scale_to_inf;
    base *= scale_to_zero;
    const uint32_t w = half_bits_f32(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = half_f32_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = half_bits_f32(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float bf16_to_f32(uint16_t h) { return half_f32_bits((uint32_t)h << 16); }

/* f32 -> bf16, round to nearest even; NaN becomes a quiet NaN. */
static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = half_bits_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

#endif
