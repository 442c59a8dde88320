/* quant_iq.c - the table formats IQ4_NL and IQ4_XS, and the ternary TQ1_0
 * and TQ2_0. Layouts are drawn in blocks.h.
 *
 *   IQ4_NL: blocks of 32, x = d * kv[q], q 0..15
 *   IQ4_XS: super-blocks of 256, 8 sub-blocks of 32, x = (d*(ls-32)) * kv[q]
 *   TQ1_0, TQ2_0: super-blocks of 256, x = (t-1) * d, t 0..2
 *
 * kv is the fixed non-linear 16-level table below (denser near 0, where
 * weights are). Dequantization repeats ggml's reference float operations in
 * the same order (bit-identical, test_tensor checks against ggml).
 *
 * Quantizers: IQ4 groups try grids whose extreme element lands on either
 * end of the table, stretched by up to 20%, assign each element its nearest
 * level and fit the scale by weighted least squares; the best fit wins.
 * IQ4_XS then codes its sub-block scales in 6 bits against the largest and
 * tries the neighbouring codes. The ternary formats use d = max |x| and
 * round, as ggml's reference (x ~ -d, 0 or d).
 *
 * Invariant: n is a multiple of the block size (asserted).
 */
#include "tensor/quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "tensor/half.h"

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---------------------------------------------------------------- IQ4_NL */

void quant_iq4_nl_dequant_row(const block_iq4_nl *src, float *dst, int64_t n)
{
    assert(n % QK4_NL == 0);
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        const float d = f16_to_f32(src[b].d);
        float *y = dst + b * QK4_NL;
        for (int j = 0; j < QK4_NL / 2; j++) {
            y[j] = d * quant_iq4nl_values[src[b].qs[j] & 0xF];
            y[j + QK4_NL / 2] = d * quant_iq4nl_values[src[b].qs[j] >> 4];
        }
    }
}

/* Index of the table level nearest to v (v in table units). */
static int iq4_nearest(float v)
{
    if (!(v > -127.f)) return 0; /* NaN too */
    if (v >= 113.f) return 15;
    int lo = 0, hi = 15; /* kv[lo] <= v < kv[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < quant_iq4nl_values[mid]) hi = mid;
        else lo = mid;
    }
    return v - quant_iq4nl_values[lo] < quant_iq4nl_values[hi] - v ? lo : hi;
}

/* Weighted squared error of x[0..32) at scale d (levels to L). */
static float iq4_err(const float *x, const float *w, float d, uint8_t *L)
{
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    float e = 0;
    for (int l = 0; l < 32; l++) {
        L[l] = (uint8_t)iq4_nearest(x[l] * id);
        const float diff = d * quant_iq4nl_values[L[l]] - x[l];
        e += w[l] * diff * diff;
    }
    return e;
}

/* Best scale for a group of 32 (0 for an all-zero group). */
static float iq4_fit(const float *x, const float *w)
{
    float amax = 0, max = 0;
    for (int l = 0; l < 32; l++)
        if (fabsf(x[l]) > amax) { amax = fabsf(x[l]); max = x[l]; }
    if (!(amax > 1e-30f) || !(amax < 1e30f)) return 0;
    float best_d = max / -127.f, best_e = INFINITY;
    uint8_t L[32];
    for (int end = 0; end < 2; end++)
        for (int s = -2; s <= 10; s++) {
            const float d0 = max / ((end ? 113.f : -127.f) * (1.0f + 0.02f * (float)s));
            iq4_err(x, w, d0, L);
            float sxv = 0, svv = 0;
            for (int l = 0; l < 32; l++) {
                const float v = quant_iq4nl_values[L[l]];
                sxv += w[l] * x[l] * v;
                svv += w[l] * v * v;
            }
            if (!(svv > 0)) continue;
            const float d = sxv / svv, e = iq4_err(x, w, d, L);
            if (e < best_e) { best_e = e; best_d = d; }
        }
    return best_d;
}

static void iq4_weights(const float *x, float *w)
{
    float sum_x2 = 0;
    for (int l = 0; l < 32; l++) sum_x2 += x[l] * x[l];
    const float rms = sqrtf(sum_x2 / 32);
    for (int l = 0; l < 32; l++) w[l] = rms + fabsf(x[l]);
}

static void iq4_pack(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

void quant_iq4_nl_quantize_row(const float *src, block_iq4_nl *dst, int64_t n)
{
    assert(n % QK4_NL == 0);
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        const float *x = src + b * QK4_NL;
        float w[32];
        uint8_t L[32];
        iq4_weights(x, w);
        dst[b].d = f32_to_f16(iq4_fit(x, w));
        iq4_err(x, w, f16_to_f32(dst[b].d), L);
        iq4_pack(L, dst[b].qs);
    }
}

/* ---------------------------------------------------------------- IQ4_XS */

void quant_iq4_xs_dequant_row(const block_iq4_xs *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    float *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(src[b].d);
        const uint8_t *qs = src[b].qs;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const float dl = d * (block_iq4_xs_scale(ib, &src[b]) - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * quant_iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * quant_iq4nl_values[qs[j] >> 4];
            }
            y += 32;
            qs += 16;
        }
    }
}

void quant_iq4_xs_quantize_row(const float *src, block_iq4_xs *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *x = src + b * QK_K;
        block_iq4_xs *y = &dst[b];
        float w[QK_K], scale[8], max_scale = 0, max_abs = 0;
        for (int j = 0; j < 8; j++) {
            iq4_weights(x + 32 * j, w + 32 * j);
            scale[j] = iq4_fit(x + 32 * j, w + 32 * j);
            if (fabsf(scale[j]) > max_abs) { max_abs = fabsf(scale[j]); max_scale = scale[j]; }
        }
        memset(y, 0, sizeof *y);
        uint8_t L[QK_K];
        memset(L, 8, sizeof L); /* kv[8] = 1: near zero, and d = 0 makes it exactly 0 */
        if (max_abs > 0) {
            /* the largest sub-scale maps to code -32 (values -32..31) */
            const float iscale = -32.f / max_scale;
            y->d = f32_to_f16(1 / iscale);
            const float d = f16_to_f32(y->d);
            for (int j = 0; j < 8; j++) {
                const int c0 = clamp_int(quant_round_nearest(iscale * scale[j]), -32, 31);
                int best_c = c0;
                float best = iq4_err(x + 32 * j, w + 32 * j, d * c0, L + 32 * j);
                uint8_t cand[32];
                for (int c = c0 - 1; c <= c0 + 1 && c0 != -32; c += 2) {
                    if (c < -32 || c > 31) continue;
                    const float e = iq4_err(x + 32 * j, w + 32 * j, d * c, cand);
                    if (e < best) { best = e; best_c = c; memcpy(L + 32 * j, cand, 32); }
                }
                const int ls = best_c + 32;
                y->scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
                y->scales_h |= (uint16_t)((ls >> 4) << (2 * j));
            }
        }
        for (int j = 0; j < 8; j++) iq4_pack(L + 32 * j, y->qs + 16 * j);
    }
}

/* --------------------------------------------------------- TQ1_0, TQ2_0 */

/* Digit t (0..2) of element x at inverse scale id. */
static int tq_digit(float x, float id)
{
    const float v = x * id;
    return v > 0.5f ? 2 : v < -0.5f ? 0 : 1; /* round, ties away from zero as lroundf */
}

static float tq_scale(const float *x, uint16_t *d16)
{
    float amax = 0;
    for (int j = 0; j < QK_K; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    if (!(amax <= 65504.f)) amax = 0; /* non-finite input */
    *d16 = f32_to_f16(amax);
    return amax != 0.0f ? 1.0f / amax : 0.0f;
}

void quant_tq2_0_dequant_row(const block_tq2_0 *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    float *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(src[b].d);
        for (int j = 0; j < QK_K / 4; j += 32)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) *y++ = (float)(((src[b].qs[j + m] >> (2 * l)) & 3) - 1) * d;
    }
}

void quant_tq2_0_quantize_row(const float *src, block_tq2_0 *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *x = src + b * QK_K;
        const float id = tq_scale(x, &dst[b].d);
        memset(dst[b].qs, 0, sizeof dst[b].qs);
        for (int e = 0; e < QK_K; e++)
            dst[b].qs[32 * (e / 128) + e % 32] |= (uint8_t)(tq_digit(x[e], id) << (2 * ((e / 32) % 4)));
    }
}

static const uint8_t tq_pow3[6] = {1, 3, 9, 27, 81, 243};

/* Digit i (0..4) of a TQ1_0 byte, 0..2. */
static inline int tq1_digit(uint8_t byte, int i)
{
    const uint8_t q = (uint8_t)(byte * tq_pow3[i]);
    return ((uint16_t)q * 3) >> 8;
}

void quant_tq1_0_dequant_row(const block_tq1_0 *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    float *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(src[b].d);
        for (int i = 0; i < 5; i++)
            for (int m = 0; m < 32; m++) *y++ = (float)(tq1_digit(src[b].qs[m], i) - 1) * d;
        for (int i = 0; i < 5; i++)
            for (int m = 0; m < 16; m++) *y++ = (float)(tq1_digit(src[b].qs[32 + m], i) - 1) * d;
        for (int i = 0; i < 4; i++)
            for (int m = 0; m < 4; m++) *y++ = (float)(tq1_digit(src[b].qh[m], i) - 1) * d;
    }
}

/* The byte holding nd digits t[0], t[stride], ... (first most significant). */
static uint8_t tq1_byte(const float *x, int stride, int nd, float id)
{
    int v = 0;
    for (int i = 0; i < nd; i++) v = v * 3 + tq_digit(x[i * stride], id);
    for (int i = nd; i < 5; i++) v *= 3;
    return (uint8_t)((v * 256 + 242) / 243);
}

void quant_tq1_0_quantize_row(const float *src, block_tq1_0 *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *x = src + b * QK_K;
        const float id = tq_scale(x, &dst[b].d);
        for (int m = 0; m < 32; m++) dst[b].qs[m] = tq1_byte(x + m, 32, 5, id);
        for (int m = 0; m < 16; m++) dst[b].qs[32 + m] = tq1_byte(x + 160 + m, 16, 5, id);
        for (int m = 0; m < 4; m++) dst[b].qh[m] = tq1_byte(x + 240 + m, 4, 4, id);
    }
}
