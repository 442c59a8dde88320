/* quant_legacy.c - the 32-element formats beside Q4_0/Q8_0: Q4_1, Q5_0,
 * Q5_1 (weights) and Q8_1 (the activations Q4_1/Q5_1 are multiplied with).
 * Layouts are drawn in blocks.h.
 *
 * Dequantization repeats ggml's reference float operations in the same
 * order (Q4_1: q*d + m; Q5_0: (q-16)*d), so a weight means the same number
 * here and in llama.cpp (test_tensor checks bit for bit against ggml).
 * Q8_1 quantization is ggml's reference rounding (roundf; s = sum(q) * d
 * with the f32 d) so that dot products see llama.cpp's integers.
 *
 * The weight quantizers fit scale (and min) by weighted least squares over
 * a few stretched grids (quant_fit.h), then round every element to the
 * nearest level of the stored f16 scale and min: not ggml's bytes, a
 * smaller error on weight-like data.
 *
 * Invariant: n is a multiple of 32 (asserted).
 */
#include "tensor/quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "tensor/half.h"
#include "tensor/quant_fit.h"

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The 5th bit of element j of a Q5 block (qh as a little-endian uint32). */
static inline int q5_hbit(const uint8_t *qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

/* ------------------------------------------------------------------ Q4_1 */

void quant_q4_1_dequant_row(const block_q4_1 *src, float *dst, int64_t n)
{
    assert(n % QK4_1 == 0);
    for (int64_t b = 0; b < n / QK4_1; b++) {
        const float d = f16_to_f32(src[b].d), m = f16_to_f32(src[b].m);
        float *y = dst + b * QK4_1;
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = (src[b].qs[j] & 0x0F) * d + m;
            y[j + QK4_1 / 2] = (src[b].qs[j] >> 4) * d + m;
        }
    }
}

/* Affine fit of one 32-block: levels 0..nmax, weights |x| + rms as in the
 * K-quants; d and m stored as f16, levels rounded against the stored ones. */
static void affine_block_fit(const float *x, int nmax, uint16_t *d16, uint16_t *m16, uint8_t *L)
{
    float w[32], sum_x2 = 0, neg_min;
    for (int l = 0; l < 32; l++) sum_x2 += x[l] * x[l];
    const float rms = sqrtf(sum_x2 / 32);
    for (int l = 0; l < 32; l++) w[l] = rms + fabsf(x[l]);
    float scale = quant_fit_scale_min(x, w, 32, nmax, &neg_min);
    if (!(scale >= 0)) scale = 0; /* NaN input */
    if (!(neg_min >= -65504.f && neg_min <= 65504.f)) neg_min = 0;
    *d16 = f32_to_f16(scale);
    *m16 = f32_to_f16(-neg_min);
    const float d = f16_to_f32(*d16), m = f16_to_f32(*m16), id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int l = 0; l < 32; l++) L[l] = (uint8_t)clamp_int(quant_round_nearest((x[l] - m) * id), 0, nmax);
}

void quant_q4_1_quantize_row(const float *src, block_q4_1 *dst, int64_t n)
{
    assert(n % QK4_1 == 0);
    for (int64_t b = 0; b < n / QK4_1; b++) {
        uint8_t L[32];
        affine_block_fit(src + b * QK4_1, 15, &dst[b].d, &dst[b].m, L);
        for (int j = 0; j < 16; j++) dst[b].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

/* ------------------------------------------------------------------ Q5_0 */

void quant_q5_0_dequant_row(const block_q5_0 *src, float *dst, int64_t n)
{
    assert(n % QK5_0 == 0);
    for (int64_t b = 0; b < n / QK5_0; b++) {
        const float d = f16_to_f32(src[b].d);
        float *y = dst + b * QK5_0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int x0 = ((src[b].qs[j] & 0x0F) | (q5_hbit(src[b].qh, j) << 4)) - 16;
            const int x1 = ((src[b].qs[j] >> 4) | (q5_hbit(src[b].qh, j + 16) << 4)) - 16;
            y[j] = x0 * d;
            y[j + QK5_0 / 2] = x1 * d;
        }
    }
}

/* Packs 32 5-bit levels into qs (low nibbles) and qh (5th bits). */
static void q5_pack(const uint8_t *L, uint8_t *qs, uint8_t *qh)
{
    memset(qh, 0, 4);
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((L[j] & 15) | ((L[j + 16] & 15) << 4));
    for (int j = 0; j < 32; j++) qh[j / 8] |= (uint8_t)((L[j] >> 4) << (j % 8));
}

void quant_q5_0_quantize_row(const float *src, block_q5_0 *dst, int64_t n)
{
    assert(n % QK5_0 == 0);
    for (int64_t b = 0; b < n / QK5_0; b++) {
        const float *x = src + b * QK5_0;
        float scale = quant_fit_scale_sym(x, 32, 16);
        if (!(fabsf(scale) <= 65504.f)) scale = 0;
        dst[b].d = f32_to_f16(scale);
        const float d = f16_to_f32(dst[b].d), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t L[32];
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)(clamp_int(quant_round_nearest(x[j] * id), -16, 15) + 16);
        q5_pack(L, dst[b].qs, dst[b].qh);
    }
}

/* ------------------------------------------------------------------ Q5_1 */

void quant_q5_1_dequant_row(const block_q5_1 *src, float *dst, int64_t n)
{
    assert(n % QK5_1 == 0);
    for (int64_t b = 0; b < n / QK5_1; b++) {
        const float d = f16_to_f32(src[b].d), m = f16_to_f32(src[b].m);
        float *y = dst + b * QK5_1;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int x0 = (src[b].qs[j] & 0x0F) | (q5_hbit(src[b].qh, j) << 4);
            const int x1 = (src[b].qs[j] >> 4) | (q5_hbit(src[b].qh, j + 16) << 4);
            y[j] = x0 * d + m;
            y[j + QK5_1 / 2] = x1 * d + m;
        }
    }
}

void quant_q5_1_quantize_row(const float *src, block_q5_1 *dst, int64_t n)
{
    assert(n % QK5_1 == 0);
    for (int64_t b = 0; b < n / QK5_1; b++) {
        uint8_t L[32];
        affine_block_fit(src + b * QK5_1, 31, &dst[b].d, &dst[b].m, L);
        q5_pack(L, dst[b].qs, dst[b].qh);
    }
}

/* ------------------------------------------------------------------ Q8_1 */

void quant_q8_1_dequant_row(const block_q8_1 *src, float *dst, int64_t n)
{
    assert(n % QK8_1 == 0);
    for (int64_t b = 0; b < n / QK8_1; b++) {
        const float d = f16_to_f32(src[b].d);
        for (int j = 0; j < QK8_1; j++) dst[b * QK8_1 + j] = src[b].qs[j] * d;
    }
}

/* ggml's quantize_row_q8_1_ref: as Q8_0 (d = amax/127, roundf), plus
 * s = sum(q) * d with the f32 d, stored as f16. */
void quant_q8_1_quantize_row(const float *src, block_q8_1 *dst, int64_t n)
{
    assert(n % QK8_1 == 0);
    for (int64_t b = 0; b < n / QK8_1; b++) {
        const float *x = src + b * QK8_1;
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            float v = roundf(x[j] * id);
            if (!(v >= -128.0f && v <= 127.0f)) v = 0.0f; /* non-finite input only */
            dst[b].qs[j] = (int8_t)v;
            sum += dst[b].qs[j];
        }
        dst[b].s = f32_to_f16((float)sum * d);
    }
}
