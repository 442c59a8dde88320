/* quant_k_ext.c - the K-quants beside Q4_K/Q6_K: Q2_K, Q3_K and Q5_K.
 *
 *   Q2_K: 16 sub-blocks of 16, x = (d*sc)*q - (dmin*m), q 0..3, sc, m 4-bit
 *   Q3_K: 16 sub-blocks of 16, x = (d*(sc-32))*(q-4), q 0..7 (2 bits in qs,
 *         the 3rd in hmask), sc 6-bit
 *   Q5_K: 8 sub-blocks of 32, x = (d*sc)*q - (dmin*m), q 0..31, sc, m
 *         6-bit packed as Q4_K's
 *
 * Layouts are drawn in blocks.h. Dequantization repeats ggml's reference
 * float operations in the same order (bit-identical, test_tensor checks).
 * Quantization is quant_k.c's approach: fit each sub-block (quant_fit.h),
 * quantize the sub-block scales against the largest, try the neighbouring
 * codes of each once the super-scale is fixed, round every element to its
 * final grid.
 *
 * Invariant: n is a multiple of QK_K (asserted).
 */
#include "tensor/quant.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "tensor/half.h"
#include "tensor/quant_fit.h"

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ggml's weighting for the affine fits: rms of the group plus |x|. */
static void k_weights(const float *x, int n, float *w)
{
    float sum_x2 = 0;
    for (int l = 0; l < n; l++) sum_x2 += x[l] * x[l];
    const float rms = sqrtf(sum_x2 / (float)n);
    for (int l = 0; l < n; l++) w[l] = rms + fabsf(x[l]);
}

/* Weighted squared error of group x[0..n) at levels 0..nmax with step ds and
 * offset -dm (each element at its nearest level); levels go to L. */
static float affine_err(const float *x, const float *w, int n, int nmax, float ds, float dm, uint8_t *L)
{
    const float ids = ds != 0.0f ? 1.0f / ds : 0.0f;
    float e = 0;
    for (int l = 0; l < n; l++) {
        const int q = clamp_int(quant_round_nearest((x[l] + dm) * ids), 0, nmax);
        L[l] = (uint8_t)q;
        const float diff = ds * q - dm - x[l];
        e += w[l] * diff * diff;
    }
    return e;
}

/* The codes (sc, m) of one affine group, rounded from its fit, and their
 * neighbours (the codes at the top of the range anchor d and dmin: kept). */
static void affine_codes_refine(const float *x, const float *w, int n, int nmax, int cmax, float d, float dmin,
                                int *sc, int *m, uint8_t *L)
{
    const int sc0 = *sc, m0 = *m;
    float best = affine_err(x, w, n, nmax, d * sc0, dmin * m0, L);
    uint8_t cand[32];
    for (int a = sc0 - 1; a <= sc0 + 1; a++)
        for (int b = m0 - 1; b <= m0 + 1; b++) {
            if (a < 0 || a > cmax || b < 0 || b > cmax || (a == sc0 && b == m0)) continue;
            if ((sc0 == cmax && a != cmax) || (m0 == cmax && b != cmax)) continue;
            const float e = affine_err(x, w, n, nmax, d * a, dmin * b, cand);
            if (e < best) { best = e; *sc = a; *m = b; memcpy(L, cand, (size_t)n); }
        }
}

/* Fits ng groups of gs elements of x (levels 0..nmax), quantizes their
 * scales and mins to codes 0..cmax against the largest: stores d, dmin (f16)
 * and the codes sc[], m[]; the levels go to L. */
static void affine_super_fit(const float *x, int ng, int gs, int nmax, int cmax, uint16_t *d16, uint16_t *dmin16,
                             int *sc, int *m, uint8_t *L)
{
    float w[QK_K], scale[16], neg_min[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < ng; j++) {
        k_weights(x + gs * j, gs, w + gs * j);
        scale[j] = quant_fit_scale_min(x + gs * j, w + gs * j, gs, nmax, &neg_min[j]);
        if (!(scale[j] >= 0 && scale[j] <= 1e30f)) scale[j] = 0; /* NaN input */
        if (!(neg_min[j] >= 0 && neg_min[j] <= 1e30f)) neg_min[j] = 0;
        if (scale[j] > max_scale) max_scale = scale[j];
        if (neg_min[j] > max_min) max_min = neg_min[j];
    }
    const float inv_scale = max_scale > 0 ? (float)cmax / max_scale : 0.f;
    const float inv_min = max_min > 0 ? (float)cmax / max_min : 0.f;
    *d16 = f32_to_f16(max_scale / (float)cmax);
    *dmin16 = f32_to_f16(max_min / (float)cmax);
    const float d = f16_to_f32(*d16), dmin = f16_to_f32(*dmin16);
    for (int j = 0; j < ng; j++) {
        sc[j] = clamp_int(quant_round_nearest(inv_scale * scale[j]), 0, cmax);
        m[j] = clamp_int(quant_round_nearest(inv_min * neg_min[j]), 0, cmax);
        affine_codes_refine(x + gs * j, w + gs * j, gs, nmax, cmax, d, dmin, &sc[j], &m[j], L + gs * j);
    }
}

/* ------------------------------------------------------------------ Q2_K */

void quant_q2_K_dequant_row(const block_q2_K *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    float *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(src[b].d), min = f16_to_f32(src[b].dmin);
        const uint8_t *q = src[b].qs;
        int is = 0;
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 4; k++) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = src[b].scales[is++];
                    const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[16 * half + l] >> (2 * k)) & 3) - ml;
                }
            }
            q += 32;
        }
    }
}

/* Packs 256 2-bit levels (element e = 128h + 32k + l at bits 2k of qs[32h + l]). */
static void k_pack2(const uint8_t *L, uint8_t *qs)
{
    memset(qs, 0, QK_K / 4);
    for (int e = 0; e < QK_K; e++) qs[32 * (e / 128) + e % 32] |= (uint8_t)((L[e] & 3) << (2 * ((e / 32) % 4)));
}

void quant_q2_K_quantize_row(const float *src, block_q2_K *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        uint8_t L[QK_K];
        int sc[16], m[16];
        affine_super_fit(src + b * QK_K, 16, 16, 3, 15, &dst[b].d, &dst[b].dmin, sc, m, L);
        for (int j = 0; j < 16; j++) dst[b].scales[j] = (uint8_t)(sc[j] | (m[j] << 4));
        k_pack2(L, dst[b].qs);
    }
}

/* ------------------------------------------------------------------ Q3_K */

void quant_q3_K_dequant_row(const block_q3_K *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    float *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d_all = f16_to_f32(src[b].d);
        const uint8_t *q = src[b].qs, *hm = src[b].hmask;
        int is = 0;
        uint8_t m = 1;
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 4; k++) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * (block_q3_K_scale(is++, src[b].scales) - 32);
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (((q[l] >> (2 * k)) & 3) - ((hm[l] & m) ? 0 : 4));
                }
                m = (uint8_t)(m << 1);
            }
            q += 32;
        }
    }
}

/* Squared error of group x[0..16) at step ds,
 * levels -4..3; levels + 4 go to L. */
static float q3_K_sub_err(const float *x, float ds, uint8_t *L)
{
    const float ids = ds != 0.0f ? 1.0f / ds : 0.0f;
    float e = 0;
    for (int l = 0; l < 16; l++) {
        const int q = clamp_int(quant_round_nearest(x[l] * ids), -4, 3);
        L[l] = (uint8_t)(q + 4);
        const float diff = ds * q - x[l];
        e += diff * diff;
    }
    return e;
}

void quant_q3_K_quantize_row(const float *src, block_q3_K *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *x = src + b * QK_K;
        block_q3_K *y = &dst[b];
        float scale[16], max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scale[j] = quant_fit_scale_sym(x + 16 * j, 16, 4);
            if (!(fabsf(scale[j]) <= 1e30f)) scale[j] = 0;
            if (fabsf(scale[j]) > max_abs) { max_abs = fabsf(scale[j]); max_scale = scale[j]; }
        }
        memset(y, 0, sizeof *y);
        uint8_t L[QK_K];
        memset(L, 4, sizeof L); /* level 0 */
        if (max_abs > 0) {
            /* the largest sub-scale maps to code -32 (value range -32..31) */
            const float iscale = -32.f / max_scale;
            y->d = f32_to_f16(1 / iscale);
            const float d = f16_to_f32(y->d);
            for (int j = 0; j < 16; j++) {
                const int c0 = clamp_int(quant_round_nearest(iscale * scale[j]), -32, 31);
                int best_c = c0;
                float best = q3_K_sub_err(x + 16 * j, d * c0, L + 16 * j);
                uint8_t cand[16];
                for (int c = c0 - 1; c <= c0 + 1 && c0 != -32; c += 2) {
                    if (c < -32 || c > 31) continue;
                    const float e = q3_K_sub_err(x + 16 * j, d * c, cand);
                    if (e < best) { best = e; best_c = c; memcpy(L + 16 * j, cand, 16); }
                }
                const int sc = best_c + 32; /* 6-bit code, block_q3_K_scale's layout */
                y->scales[j % 8] |= (uint8_t)((sc & 15) << (4 * (j / 8)));
                y->scales[8 + j % 4] |= (uint8_t)((sc >> 4) << (2 * (j / 4)));
            }
        }
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e / 32) % 4, l = e % 32;
            y->qs[32 * h + l] |= (uint8_t)((L[e] & 3) << (2 * k));
            if (L[e] >> 2) y->hmask[l] |= (uint8_t)(1 << (4 * h + k));
        }
    }
}

/* ------------------------------------------------------------------ Q5_K */

void quant_q5_K_dequant_row(const block_q5_K *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    float *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *ql = src[b].qs, *qh = src[b].qh;
        const float d = f16_to_f32(src[b].d), min = f16_to_f32(src[b].dmin);
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K / 64; j++) {
            uint8_t sc, m;
            block_q4_K_scale_min(2 * j, src[b].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            block_q4_K_scale_min(2 * j + 1, src[b].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

void quant_q5_K_quantize_row(const float *src, block_q5_K *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        block_q5_K *y = &dst[b];
        uint8_t L[QK_K];
        int sc[8], m[8];
        affine_super_fit(src + b * QK_K, 8, 32, 31, 63, &y->d, &y->dmin, sc, m, L);
        memset(y->scales, 0, sizeof y->scales);
        memset(y->qh, 0, sizeof y->qh);
        for (int j = 0; j < 8; j++) quant_k_scale_min_put(y->scales, j, sc[j], m[j]);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                const uint8_t a = L[64 * g + l], c = L[64 * g + 32 + l];
                y->qs[32 * g + l] = (uint8_t)((a & 15) | ((c & 15) << 4));
                y->qh[l] |= (uint8_t)(((a >> 4) << (2 * g)) | ((c >> 4) << (2 * g + 1)));
            }
    }
}
