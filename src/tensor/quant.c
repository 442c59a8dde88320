/* quant.c - row (de)quantization for F32, F16, BF16, Q8_0 and Q4_0, and the
 * type dispatch of quant.h. The K-quants live in quant_k.c (Q4_K, Q6_K,
 * Q8_K) and quant_k_ext.c (Q2_K, Q3_K, Q5_K); Q4_1, Q5_0, Q5_1, Q8_1 in
 * quant_legacy.c; IQ4_NL, IQ4_XS, TQ1_0, TQ2_0 in quant_iq.c.
 *
 * Dequantizers repeat ggml's reference float operations in the same order
 * (e.g. Q4_0: (float)(q - 8) * d), so results are bit-identical with ggml;
 * -std=c11 keeps the compiler from contracting a*b+c into an fma, which
 * would change the last bit.
 *
 * Block layouts are drawn in blocks.h. Invariant of every function here:
 * n is a multiple of the type's block size (callers validate shapes from
 * files before they get here; inside, it is asserted).
 */
#include "tensor/quant.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>

#include "tensor/half.h"

/* ------------------------------------------------------------ F16 / BF16 */

void quant_f16_dequant_row(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

void quant_f16_quantize_row(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = f32_to_f16(src[i]);
}

void quant_bf16_dequant_row(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

void quant_bf16_quantize_row(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

/* ------------------------------------------------------------------ Q8_0 */

void quant_q8_0_dequant_row(const block_q8_0 *src, float *dst, int64_t n)
{
    assert(n % QK8_0 == 0);
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float d = f16_to_f32(src[b].d);
        for (int j = 0; j < QK8_0; j++) dst[b * QK8_0 + j] = src[b].qs[j] * d;
    }
}

/* ggml's quantize_row_q8_0_ref: d = amax/127 (rounded to f16 only for
 * storage), q = roundf(x * (1/d)), ties away from zero. The products are
 * those of the f32 d, not the stored f16 one, exactly as ggml does. */
void quant_q8_0_quantize_row(const float *src, block_q8_0 *dst, int64_t n)
{
    assert(n % QK8_0 == 0);
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const float *x = src + b * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) {
            float v = roundf(x[j] * id);
            /* Only non-finite input can leave [-127, 127]; converting such a
             * float to int8 would be undefined behaviour. */
            if (!(v >= -128.0f && v <= 127.0f)) v = 0.0f;
            dst[b].qs[j] = (int8_t)v;
        }
    }
}

/* ------------------------------------------------------------------ Q4_0 */

void quant_q4_0_dequant_row(const block_q4_0 *src, float *dst, int64_t n)
{
    assert(n % QK4_0 == 0);
    for (int64_t b = 0; b < n / QK4_0; b++) {
        const float d = f16_to_f32(src[b].d);
        float *y = dst + b * QK4_0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int x0 = (src[b].qs[j] & 0x0F) - 8;
            const int x1 = (src[b].qs[j] >> 4) - 8;
            y[j] = x0 * d;
            y[j + QK4_0 / 2] = x1 * d;
        }
    }
}

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Least-squares quality of the grid picked by iscale: with q = round(x *
 * iscale) clamped to [-8, 7], the best scale for those q is sxq/sqq and the
 * squared error falls by sxq^2/sqq. Returns that reduction; *scale gets sxq/sqq. */
static float q4_0_grid_score(const float *x, float iscale, float *scale)
{
    /* four partial sums each: independent adds pipeline (and vectorize) */
    float a[4] = {0}, b[4] = {0};
    for (int j = 0; j < QK4_0; j += 4)
        for (int k = 0; k < 4; k++) {
            const float q = (float)clamp_int(quant_round_nearest(x[j + k] * iscale), -8, 7);
            a[k] += x[j + k] * q;
            b[k] += q * q;
        }
    const float sxq = (a[0] + a[1]) + (a[2] + a[3]), sqq = (b[0] + b[1]) + (b[2] + b[3]);
    if (sqq <= 0) { *scale = 0; return 0; }
    *scale = sxq / sqq;
    return sxq * sxq / sqq;
}

/* Where the element of largest magnitude may land on the grid, in levels
 * (negative: d has the opposite sign of that element). ggml's reference uses
 * only -8. The fractional ones stretch the grid a little; the integer ones
 * make sure that data already on a Q4_0 grid (a re-quantized Q4_0 model,
 * whose extreme sits at any level from -8 to 7) finds its own grid again. */
static const float q4_0_extreme_levels[] = {
    -8.0f, -7.0f, -6.0f, -5.0f, 5.0f, 6.0f, 7.0f,
    -8.4f, -8.3f, -8.2f, -8.1f, -7.9f, -7.8f, -7.7f, -7.6f,
    6.6f, 6.7f, 6.8f, 6.9f, 7.1f, 7.2f, 7.3f, 7.4f,
};

/* Q4_0 block: try each grid above, fit the scale by least squares for the
 * levels it assigns, keep the grid with the least squared error, and finally
 * round every element to the nearest level of the stored f16 scale. */
static void q4_0_block_quantize(const float *x, block_q4_0 *y)
{
    float amax = 0, max = 0;
    for (int j = 0; j < QK4_0; j++)
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    float best_scale = amax > 0 ? max / -8 : 0.0f, best_score = -1;
    if (amax > 0) {
        const int nc = (int)(sizeof q4_0_extreme_levels / sizeof q4_0_extreme_levels[0]);
        for (int k = 0; k < nc; k++) {
            float scale;
            const float score = q4_0_grid_score(x, q4_0_extreme_levels[k] / max, &scale);
            if (score > best_score) { best_score = score; best_scale = scale; }
        }
    }
    y->d = f32_to_f16(best_scale);
    const float d = f16_to_f32(y->d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK4_0 / 2; j++) {
        const int q0 = clamp_int(quant_round_nearest(x[j] * id), -8, 7) + 8;
        const int q1 = clamp_int(quant_round_nearest(x[j + QK4_0 / 2] * id), -8, 7) + 8;
        y->qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
}

void quant_q4_0_quantize_row(const float *src, block_q4_0 *dst, int64_t n)
{
    assert(n % QK4_0 == 0);
    for (int64_t b = 0; b < n / QK4_0; b++) q4_0_block_quantize(src + b * QK4_0, &dst[b]);
}

void quant_q4_0_quantize_row_ref(const float *src, block_q4_0 *dst, int64_t n)
{
    assert(n % QK4_0 == 0);
    for (int64_t b = 0; b < n / QK4_0; b++) {
        const float *x = src + b * QK4_0;
        float amax = 0, max = 0;
        for (int j = 0; j < QK4_0; j++)
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[b].d = f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            /* ggml truncates x*id + 8.5 (in [0.5, 16.5] for finite x) and
             * caps at 15; the range test keeps NaN from an undefined cast */
            const float v0 = x[j] * id + 8.5f, v1 = x[j + QK4_0 / 2] * id + 8.5f;
            const int q0 = v0 >= 0.0f && v0 < 15.0f ? (int)v0 : v0 >= 15.0f ? 15 : 0;
            const int q1 = v1 >= 0.0f && v1 < 15.0f ? (int)v1 : v1 >= 15.0f ? 15 : 0;
            dst[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* -------------------------------------------------------------- dispatch */

bool quant_supported(uint32_t type)
{
    switch (type) {
    case DT_F32: case DT_F16: case DT_BF16: case DT_Q8_0: case DT_Q4_0:
    case DT_Q4_1: case DT_Q5_0: case DT_Q5_1: case DT_Q8_1:
    case DT_Q2_K: case DT_Q3_K: case DT_Q4_K: case DT_Q5_K: case DT_Q6_K: case DT_Q8_K:
    case DT_IQ4_NL: case DT_IQ4_XS: case DT_TQ1_0: case DT_TQ2_0:
        return true;
    default:
        return quant_is_lattice(type);
    }
}

bool quant_can_quantize(uint32_t type) { return quant_supported(type); }

void quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    switch (type) {
    case DT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case DT_F16: quant_f16_dequant_row(src, dst, n); break;
    case DT_BF16: quant_bf16_dequant_row(src, dst, n); break;
    case DT_Q8_0: quant_q8_0_dequant_row(src, dst, n); break;
    case DT_Q4_0: quant_q4_0_dequant_row(src, dst, n); break;
    case DT_Q4_K: quant_q4_K_dequant_row(src, dst, n); break;
    case DT_Q6_K: quant_q6_K_dequant_row(src, dst, n); break;
    case DT_Q8_K: quant_q8_K_dequant_row(src, dst, n); break;
    case DT_Q4_1: quant_q4_1_dequant_row(src, dst, n); break;
    case DT_Q5_0: quant_q5_0_dequant_row(src, dst, n); break;
    case DT_Q5_1: quant_q5_1_dequant_row(src, dst, n); break;
    case DT_Q8_1: quant_q8_1_dequant_row(src, dst, n); break;
    case DT_Q2_K: quant_q2_K_dequant_row(src, dst, n); break;
    case DT_Q3_K: quant_q3_K_dequant_row(src, dst, n); break;
    case DT_Q5_K: quant_q5_K_dequant_row(src, dst, n); break;
    case DT_IQ4_NL: quant_iq4_nl_dequant_row(src, dst, n); break;
    case DT_IQ4_XS: quant_iq4_xs_dequant_row(src, dst, n); break;
    case DT_TQ1_0: quant_tq1_0_dequant_row(src, dst, n); break;
    case DT_TQ2_0: quant_tq2_0_dequant_row(src, dst, n); break;
    case DT_IQ2_XXS: quant_iq2_xxs_dequant_row(src, dst, n); break;
    case DT_IQ2_XS: quant_iq2_xs_dequant_row(src, dst, n); break;
    case DT_IQ2_S: quant_iq2_s_dequant_row(src, dst, n); break;
    case DT_IQ3_XXS: quant_iq3_xxs_dequant_row(src, dst, n); break;
    case DT_IQ3_S: quant_iq3_s_dequant_row(src, dst, n); break;
    case DT_IQ1_S: quant_iq1_s_dequant_row(src, dst, n); break;
    case DT_IQ1_M: quant_iq1_m_dequant_row(src, dst, n); break;
    default: assert(!"quant_dequant_row: unsupported type"); break;
    }
}

void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n)
{
    switch (type) {
    case DT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case DT_F16: quant_f16_quantize_row(src, dst, n); break;
    case DT_BF16: quant_bf16_quantize_row(src, dst, n); break;
    case DT_Q8_0: quant_q8_0_quantize_row(src, dst, n); break;
    case DT_Q4_0: quant_q4_0_quantize_row(src, dst, n); break;
    case DT_Q4_K: quant_q4_K_quantize_row(src, dst, n); break;
    case DT_Q6_K: quant_q6_K_quantize_row(src, dst, n); break;
    case DT_Q8_K: quant_q8_K_quantize_row(src, dst, n); break;
    case DT_Q4_1: quant_q4_1_quantize_row(src, dst, n); break;
    case DT_Q5_0: quant_q5_0_quantize_row(src, dst, n); break;
    case DT_Q5_1: quant_q5_1_quantize_row(src, dst, n); break;
    case DT_Q8_1: quant_q8_1_quantize_row(src, dst, n); break;
    case DT_Q2_K: quant_q2_K_quantize_row(src, dst, n); break;
    case DT_Q3_K: quant_q3_K_quantize_row(src, dst, n); break;
    case DT_Q5_K: quant_q5_K_quantize_row(src, dst, n); break;
    case DT_IQ4_NL: quant_iq4_nl_quantize_row(src, dst, n); break;
    case DT_IQ4_XS: quant_iq4_xs_quantize_row(src, dst, n); break;
    case DT_TQ1_0: quant_tq1_0_quantize_row(src, dst, n); break;
    case DT_TQ2_0: quant_tq2_0_quantize_row(src, dst, n); break;
    default:
        assert(quant_is_lattice(type) && "quant_quantize_row: unsupported type");
        quant_lattice_quantize_row(type, src, dst, n, NULL);
        break;
    }
}

void quant_quantize_row_w(uint32_t type, const float *src, void *dst, int64_t n, const float *qw)
{
    if (qw && quant_is_lattice(type)) quant_lattice_quantize_row(type, src, dst, n, qw);
    else quant_quantize_row(type, src, dst, n);
}
