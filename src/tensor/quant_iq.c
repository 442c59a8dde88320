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
 * Quantizers: an IQ4 group of 32 weights its elements by x^2 (ggml's
 * choice without an importance matrix: the large weights move the outputs
 * most), tries 19 grids that put its largest element near either end of
 * the table, each scored by one pass (nearest levels through a lookup
 * table, least-squares scale), and refits the winner once. IQ4_XS codes
 * its sub-block scales in 6 bits against the largest, tries the
 * neighbouring codes and three super-scales, keeping the smallest plain
 * error. Both run at about the speed of the Q4_K quantizer. The ternary
 * formats use d = max |x| and round, as ggml's reference (x ~ -d, 0 or d).
 *
 * Invariant: n is a multiple of the block size (asserted).
 */
#include "tensor/quant.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
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

/* Nearest table level of v (v in table units) by lookup: every midpoint
 * between two levels is a multiple of 1/2, so the level is constant on
 * each [k/2, (k+1)/2), and a tie (v on a midpoint) goes to the upper level.
 * iq4_lut[k + 256] is the level of [k/2, (k+1)/2) for k in [-256, 256). */
static uint8_t iq4_lut[512];

static void iq4_lut_init(void)
{
    for (int k = -256; k < 256; k++) {
        const float v = 0.5f * (float)k;
        int lo = 0;
        while (lo < 15 && quant_iq4nl_values[lo + 1] <= v) lo++;
        const int hi = lo < 15 ? lo + 1 : 15;
        iq4_lut[k + 256] = (uint8_t)(v - quant_iq4nl_values[lo] < quant_iq4nl_values[hi] - v ? lo : hi);
    }
}

static inline int iq4_nearest(float v)
{
    if (!(v > -127.f)) return 0; /* NaN too */
    if (v >= 113.f) return 15;
    return iq4_lut[(int)(2.0f * v + 256.0f)]; /* > 0 here: truncation is floor */
}

/* Levels of x[0..32) at scale d into L; returns the weighted sums
 * sum w*x*q and sum w*q*q whose ratio is the best scale for these levels. */
static void iq4_assign(const float *x, const float *w, float d, uint8_t *L, float *sxq, float *sqq)
{
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    float a = 0, b = 0;
    for (int l = 0; l < 32; l++) {
        L[l] = (uint8_t)iq4_nearest(x[l] * id);
        const float q = quant_iq4nl_values[L[l]];
        a += w[l] * x[l] * q;
        b += w[l] * q * q;
    }
    *sxq = a;
    *sqq = b;
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

/* Best scale for a group of 32 (0 for an all-zero group): grids that put
 * the largest element at -127 +- 7 table units (ggml's search), and at the
 * other end (113); for each, levels by nearest and the least-squares
 * scale, scored by the error reduction sxq^2 / sqq (no second pass). The
 * winner's levels are then re-assigned and refitted once. */
static float iq4_fit(const float *x, const float *w)
{
    float amax = 0, max = 0;
    for (int l = 0; l < 32; l++)
        if (fabsf(x[l]) > amax) { amax = fabsf(x[l]); max = x[l]; }
    if (!(amax > 1e-30f) || !(amax < 1e30f)) return 0;
    float best_d = max / -127.f, best = -1, sxq, sqq;
    uint8_t L[32];
    for (int t = -7; t <= 11; t++) {
        /* t <= 7: largest at -(127 + t); t > 7: largest at 113 + 3 * (t - 9) */
        const float at = t <= 7 ? -(127.f + (float)t) : 113.f + 3.f * (float)(t - 9);
        iq4_assign(x, w, max / at, L, &sxq, &sqq);
        if (sqq > 0 && sxq * sxq > best * sqq) {
            best = sxq * sxq / sqq;
            best_d = sxq / sqq;
        }
    }
    iq4_assign(x, w, best_d, L, &sxq, &sqq);
    if (sqq > 0 && sxq * sxq > best * sqq) best_d = sxq / sqq;
    return best_d;
}

/* ggml's weights without an importance matrix: x^2, so that the large
 * weights, which move a model's outputs most, are kept best. */
static void iq4_weights(const float *x, float *w)
{
    for (int l = 0; l < 32; l++) w[l] = x[l] * x[l];
}

static void iq4_pack(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

static pthread_once_t iq4_once = PTHREAD_ONCE_INIT;

void quant_iq4_nl_quantize_row(const float *src, block_iq4_nl *dst, int64_t n)
{
    assert(n % QK4_NL == 0);
    pthread_once(&iq4_once, iq4_lut_init);
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

static const float iq4_ones[32] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                   1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/* The 6-bit codes of the eight sub-scales under super-scale d (inverse
 * iscale), each the nearest code or a neighbour, whichever gives the
 * smaller plain squared error; levels to L. Returns the block's error. */
static float iq4_xs_codes(const float *x, const float *scale, float iscale, float d, int *codes, uint8_t *L)
{
    float total = 0;
    uint8_t cand[32];
    for (int j = 0; j < 8; j++) {
        const int c0 = clamp_int(quant_round_nearest(iscale * scale[j]), -32, 31);
        codes[j] = c0;
        float best = iq4_err(x + 32 * j, iq4_ones, d * c0, L + 32 * j);
        for (int c = c0 - 1; c <= c0 + 1; c += 2) {
            if (c < -32 || c > 31) continue;
            const float e = iq4_err(x + 32 * j, iq4_ones, d * c, cand);
            if (e < best) { best = e; codes[j] = c; memcpy(L + 32 * j, cand, 32); }
        }
        total += best;
    }
    return total;
}

/* Sub-scales are fitted as IQ4_NL's (x^2-weighted); the super-scale d maps
 * the largest to code -32 (codes -32..31), or to -31 or -30 when the
 * coarser grid of the small sub-scales fits better: the candidate with the
 * smallest plain error over the 256 elements wins. */
void quant_iq4_xs_quantize_row(const float *src, block_iq4_xs *dst, int64_t n)
{
    assert(n % QK_K == 0);
    pthread_once(&iq4_once, iq4_lut_init);
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
        uint8_t L[QK_K], Lc[QK_K];
        memset(L, 8, sizeof L); /* kv[8] = 1: near zero, and d = 0 makes it exactly 0 */
        int codes[8] = {0}, cc[8];
        float best = INFINITY;
        for (int top = 32; top >= 30 && max_abs > 0; top--) {
            const float iscale = -(float)top / max_scale;
            const uint16_t d16 = f32_to_f16(1 / iscale);
            const float e = iq4_xs_codes(x, scale, iscale, f16_to_f32(d16), cc, Lc);
            if (e < best) {
                best = e;
                y->d = d16;
                memcpy(codes, cc, sizeof codes);
                memcpy(L, Lc, sizeof L);
            }
        }
        for (int j = 0; j < 8; j++) {
            const int ls = codes[j] + 32;
            y->scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
            y->scales_h |= (uint16_t)((ls >> 4) << (2 * j));
            iq4_pack(L + 32 * j, y->qs + 16 * j);
        }
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
