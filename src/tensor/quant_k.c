/* quant_k.c - the K-quants: Q4_K and Q6_K (weights) and Q8_K (activations).
 *
 * A K-quant super-block holds 256 elements in sub-blocks, each with its own
 * scale (and min, for Q4_K); the sub-block scales are themselves quantized
 * against one f16 super-scale. Layouts are drawn in blocks.h.
 *
 *   Q4_K: 8 sub-blocks of 32, x = (d*sc)*q - (dmin*m), q in 0..15,
 *         sc and m 6-bit
 *   Q6_K: 16 sub-blocks of 16, x = (d*sc)*(q-32), q in 0..63, sc int8
 *   Q8_K: x = d*q, d f32, with bsums[i] = sum of q over elements 16i..16i+15
 *
 * Dequantization repeats ggml's reference float operations in the same
 * order (bit-identical results). Q8_K quantization is ggml's reference
 * rounding (it feeds integer dot products that must see llama.cpp's
 * integers). Q4_K and Q6_K quantization follow the approach of ggml's
 * reference quantizers, written here from the description: per sub-block,
 * sweep a few candidate grids, fit scale (and min) by weighted least squares
 * for each, keep the best; then quantize the sub-block scales to 6 / 8 bits
 * against the largest, try the neighbouring codes of each (the rounded code
 * is not always the best one once the super-scale is fixed) and round every
 * element to the nearest level of its final scale. On weight-like data this
 * is slightly more accurate than ggml's reference (test_tensor compares).
 *
 * Invariant: n is a multiple of QK_K (asserted).
 */
#include "tensor/quant.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "tensor/half.h"
#include "tensor/quant_fit.h"

/* Below this magnitude a group is treated as all zeros (as ggml does), so
 * that 1/scale never overflows. */
#define K_GROUP_EPS 1e-15f

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ------------------------------------------------------------------ Q4_K */

void quant_q4_K_dequant_row(const block_q4_K *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    float *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *q = src[b].qs;
        const float d = f16_to_f32(src[b].d);
        const float dmin = f16_to_f32(src[b].dmin);
        for (int j = 0; j < QK_K / 64; j++) {
            uint8_t sc, m;
            block_q4_K_scale_min(2 * j, src[b].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            block_q4_K_scale_min(2 * j + 1, src[b].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
        }
    }
}

/* Sums for a weighted least-squares fit x ~ scale*l + min. The first three
 * depend on x only; the others on the levels l assigned. */
typedef struct { float sw, swx, swxx, swl, swll, swlx; } lsq_sums;

/* Solves the 2x2 normal equations of lsq_sums for (scale, min), with min
 * kept <= 0 (Q4_K stores -min as a non-negative m). False if singular. */
static bool lsq_solve(const lsq_sums *s, float *scale, float *min)
{
    const float det = s->sw * s->swll - s->swl * s->swl;
    if (!(det > 0)) return false;
    *scale = (s->sw * s->swlx - s->swx * s->swl) / det;
    *min = (s->swll * s->swx - s->swl * s->swlx) / det;
    if (*min > 0) { *min = 0; *scale = s->swlx / s->swll; }
    return true;
}

/* sum w*(scale*l + min - x)^2 expanded over the sums, so that trying a grid
 * costs one pass over x instead of two. In double: the terms are much larger
 * than their sum. */
static double lsq_err(const lsq_sums *s, float scale, float min)
{
    const double a = scale, b = min;
    return a * a * s->swll + 2 * a * b * s->swl - 2 * a * s->swlx + b * b * s->sw - 2 * b * s->swx
           + s->swxx;
}

/* Assigns every x its nearest level l = round((x - min) * iscale) in
 * 0..nmax and accumulates the level sums of s for that assignment. This is
 * the inner loop of the Q4_K search: four partial sums per quantity break
 * the chain of dependent float adds (n is a multiple of 4). */
static void k_assign(const float *x, const float *w, int n, int nmax, float iscale, float min,
                     lsq_sums *s)
{
    float swl[4] = {0}, swll[4] = {0}, swlx[4] = {0};
    assert(n % 4 == 0);
    for (int i = 0; i < n; i += 4)
        for (int k = 0; k < 4; k++) {
            const float l = (float)clamp_int(quant_round_nearest(iscale * (x[i + k] - min)), 0, nmax);
            const float wl = w[i + k] * l;
            swl[k] += wl;
            swll[k] += wl * l;
            swlx[k] += wl * x[i + k];
        }
    s->swl = (swl[0] + swl[1]) + (swl[2] + swl[3]);
    s->swll = (swll[0] + swll[1]) + (swll[2] + swll[3]);
    s->swlx = (swlx[0] + swlx[1]) + (swlx[2] + swlx[3]);
}

/* Fits x[0..n) ~ scale*l + min with l in 0..nmax and min <= 0, minimizing
 * sum w*(error)^2. Starts from the plain [min(x), max(x)] grid; then, as
 * ggml does, sweeps grids stretched by -1 .. +1 levels (21 steps) anchored
 * at the best min found so far, refitting scale and min by least squares for
 * each; finally alternates re-assignment and refit while the error falls.
 * Returns scale; *neg_min = -min (>= 0). */
float quant_fit_scale_min(const float *x, const float *w, int n, int nmax, float *neg_min)
{
    float lo = x[0], hi = x[0];
    lsq_sums s = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        s.sw += w[i]; s.swx += w[i] * x[i]; s.swxx += w[i] * x[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (!(hi > lo)) { *neg_min = -lo; return 0; }
    float best_scale = (hi - lo) / nmax, best_min = lo;
    k_assign(x, w, n, nmax, nmax / (hi - lo), lo, &s);
    double best_err = lsq_err(&s, best_scale, best_min);
    for (int step = 0; step <= 20 + 4; step++) {
        /* steps 0..20: the sweep; then up to 4 refinements of the best fit */
        if (step > 20 && !(best_scale > 0)) break;
        const float iscale = step <= 20 ? ((float)nmax - 1.0f + 0.1f * (float)step) / (hi - best_min)
                                        : 1.0f / best_scale;
        float scale, min;
        k_assign(x, w, n, nmax, iscale, best_min, &s);
        if (!lsq_solve(&s, &scale, &min)) continue;
        const double err = lsq_err(&s, scale, min);
        if (err < best_err) {
            best_err = err; best_scale = scale; best_min = min;
        } else if (step > 20) {
            break;
        }
    }
    *neg_min = -best_min;
    return best_scale;
}

void quant_k_scale_min_put(uint8_t *scales, int j, int sc, int m)
{
    if (j < 4) {
        scales[j] = (uint8_t)((scales[j] & 0xC0) | sc);
        scales[j + 4] = (uint8_t)((scales[j + 4] & 0xC0) | m);
    } else {
        scales[j + 4] = (uint8_t)((sc & 0xF) | ((m & 0xF) << 4));
        scales[j - 4] = (uint8_t)((scales[j - 4] & 0x3F) | ((sc >> 4) << 6));
        scales[j] = (uint8_t)((scales[j] & 0x3F) | ((m >> 4) << 6));
    }
}

/* Weighted squared error of sub-block xs[0..32) decoded with scale code sc
 * and min code m (each element at its nearest level); levels go to L. */
static float q4_K_sub_err(const float *xs, const float *w, float d, float dmin, int sc, int m,
                          uint8_t *L)
{
    const float ds = d * sc, dm = dmin * m, ids = ds != 0.0f ? 1.0f / ds : 0.0f;
    float e[4] = {0};
    for (int l = 0; l < 32; l += 4)
        for (int k = 0; k < 4; k++) {
            const int q = clamp_int(quant_round_nearest((xs[l + k] + dm) * ids), 0, 15);
            L[l + k] = (uint8_t)q;
            const float diff = ds * q - dm - xs[l + k];
            e[k] += w[l + k] * diff * diff;
        }
    return (e[0] + e[1]) + (e[2] + e[3]);
}

/* The 6-bit codes of sub-block j are first rounded from its fitted scale and
 * min; the rounding can be off by one either way from the best pair for the
 * stored d and dmin, so try the 3 x 3 neighbours and keep the best. */
static void q4_K_codes_refine(const float *xs, const float *w, float d, float dmin, int *sc, int *m,
                              uint8_t *L)
{
    const int sc0 = *sc, m0 = *m;
    float best = q4_K_sub_err(xs, w, d, dmin, sc0, m0, L);
    uint8_t cand[32];
    for (int a = sc0 - 1; a <= sc0 + 1; a++)
        for (int b = m0 - 1; b <= m0 + 1; b++) {
            if (a < 0 || a > 63 || b < 0 || b > 63 || (a == sc0 && b == m0)) continue;
            if ((sc0 == 63 && a != 63) || (m0 == 63 && b != 63)) continue; /* keep the anchors */
            const float e = q4_K_sub_err(xs, w, d, dmin, a, b, cand);
            if (e < best) { best = e; *sc = a; *m = b; memcpy(L, cand, 32); }
        }
}

/* Quantizes the 8 sub-block scales and mins against their maxima (6 bits
 * each), refines the codes, fills d, dmin, scales[] and the levels L. */
static void q4_K_scales_encode(block_q4_K *y, const float *x, const float *w, const float *scale,
                               const float *neg_min, uint8_t *L)
{
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        if (scale[j] > max_scale) max_scale = scale[j];
        if (neg_min[j] > max_min) max_min = neg_min[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    y->d = f32_to_f16(max_scale / 63.f);
    y->dmin = f32_to_f16(max_min / 63.f);
    const float d = f16_to_f32(y->d), dmin = f16_to_f32(y->dmin);
    memset(y->scales, 0, sizeof y->scales);
    for (int j = 0; j < 8; j++) {
        int ls = clamp_int(quant_round_nearest(inv_scale * scale[j]), 0, 63);
        int lm = clamp_int(quant_round_nearest(inv_min * neg_min[j]), 0, 63);
        q4_K_codes_refine(x + 32 * j, w + 32 * j, d, dmin, &ls, &lm, L + 32 * j);
        quant_k_scale_min_put(y->scales, j, ls, lm);
    }
}

static void q4_K_block_quantize(const float *x, block_q4_K *y)
{
    uint8_t L[QK_K];
    float w[QK_K], scale[8], neg_min[8];
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        /* ggml's weighting: errors on large elements cost more, on top of a
         * floor of the sub-block's rms so small elements still count. */
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float rms = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[32 * j + l] = rms + fabsf(xs[l]);
        scale[j] = quant_fit_scale_min(xs, w + 32 * j, 32, 15, &neg_min[j]);
        if (!(scale[j] >= 0)) scale[j] = 0; /* NaN input */
    }
    q4_K_scales_encode(y, x, w, scale, neg_min, L);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
            y->qs[32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
}

void quant_q4_K_quantize_row(const float *src, block_q4_K *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) q4_K_block_quantize(src + b * QK_K, &dst[b]);
}

/* ------------------------------------------------------------------ Q6_K */

void quant_q6_K_dequant_row(const block_q6_K *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    float *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d = f16_to_f32(src[b].d);
        const uint8_t *ql = src[b].ql, *qh = src[b].qh;
        const int8_t *sc = src[b].scales;
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128; ql += 64; qh += 32; sc += 8;
        }
    }
}

/* Symmetric fit x ~ scale*L, L in -nmax..nmax-1, minimizing sum x^2 *
 * (error)^2 (large elements matter most, as in ggml's Q6_K). The grids put
 * the element of largest magnitude at -(nmax + 0.1k), k = -9..9; each gets
 * its least-squares scale. Returns scale (sign included). */
float quant_fit_scale_sym(const float *x, int n, int nmax)
{
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (!(amax >= K_GROUP_EPS)) return 0;
    float best_scale = 0, best_score = -1;
    for (int k = 0; k <= 18; k++) {
        const int step = k == 0 ? 0 : k <= 9 ? -k : k - 9; /* 0 first: the plain grid */
        const float iscale = -((float)nmax + 0.1f * (float)step) / max;
        float slx = 0, sll = 0;
        for (int i = 0; i < n; i++) {
            const int l = clamp_int(quant_round_nearest(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            slx += w * x[i] * l;
            sll += w * (float)(l * l);
        }
        if (!(sll > 0)) continue;
        const float score = slx * slx / sll; /* error reduction of the fitted scale */
        if (score > best_score) { best_score = score; best_scale = slx / sll; }
    }
    return best_scale;
}


/* Packs 256 6-bit values (0..63) into ql/qh (layout in blocks.h). */
static void q6_K_pack(block_q6_K *y, const uint8_t *L)
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *Lh = L + 128 * h;
        uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
            ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
            qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4)
                              | ((Lh[l + 96] >> 4) << 6));
        }
    }
}

/* Squared error of sub-block xs[0..16) decoded with scale code sc (each
 * element at its nearest level); levels (+32) go to L. */
static float q6_K_sub_err(const float *xs, float d, int sc, uint8_t *L)
{
    const float ds = d * sc;
    float e = 0;
    for (int i = 0; i < 16; i++) {
        const int q = ds != 0.0f ? clamp_int(quant_round_nearest(xs[i] / ds), -32, 31) : 0;
        L[i] = (uint8_t)(q + 32);
        const float diff = ds * q - xs[i];
        e += diff * diff;
    }
    return e;
}

/* The int8 scale code is rounded from the fitted scale; its neighbours may
 * fit better once d is fixed, so try them too. */
static void q6_K_code_refine(const float *xs, float d, int *sc, uint8_t *L)
{
    const int sc0 = *sc;
    float best = q6_K_sub_err(xs, d, sc0, L);
    if (sc0 == -128) return; /* the anchor of d: moving it would shift every grid */
    uint8_t cand[16];
    for (int a = sc0 - 1; a <= sc0 + 1; a += 2) {
        if (a < -128 || a > 127) continue;
        const float e = q6_K_sub_err(xs, d, a, cand);
        if (e < best) { best = e; *sc = a; memcpy(L, cand, 16); }
    }
}

static void q6_K_block_quantize(const float *x, block_q6_K *y)
{
    uint8_t L[QK_K];
    float scale[16], max_scale = 0, max_abs = 0;
    for (int s = 0; s < 16; s++) {
        scale[s] = quant_fit_scale_sym(x + 16 * s, 16, 32);
        if (fabsf(scale[s]) > max_abs) { max_abs = fabsf(scale[s]); max_scale = scale[s]; }
    }
    if (!(max_abs >= K_GROUP_EPS)) {
        memset(y, 0, sizeof *y); /* all-zero q (value -32) with d = 0 decodes to 0 */
        return;
    }
    /* The largest sub-scale maps to -128 so that int8 scales use their range. */
    const float iscale = -128.f / max_scale;
    y->d = f32_to_f16(1 / iscale);
    for (int s = 0; s < 16; s++)
        y->scales[s] = (int8_t)clamp_int(quant_round_nearest(iscale * scale[s]), -128, 127);
    const float d = f16_to_f32(y->d);
    for (int s = 0; s < 16; s++) {
        int sc = y->scales[s];
        q6_K_code_refine(x + 16 * s, d, &sc, L + 16 * s);
        y->scales[s] = (int8_t)sc;
    }
    q6_K_pack(y, L);
}

void quant_q6_K_quantize_row(const float *src, block_q6_K *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) q6_K_block_quantize(src + b * QK_K, &dst[b]);
}

/* ------------------------------------------------------------------ Q8_K */

void quant_q8_K_dequant_row(const block_q8_K *src, float *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++)
        for (int j = 0; j < QK_K; j++) dst[b * QK_K + j] = src[b].d * src[b].qs[j];
}

/* ggml's quantize_row_q8_K_ref: the element of largest magnitude maps to
 * -127 (iscale = -127/max), q = nearest_int (ties to even) capped at 127,
 * d = 1/iscale in f32. */
void quant_q8_K_quantize_row(const float *src, block_q8_K *dst, int64_t n)
{
    assert(n % QK_K == 0);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float *x = src + b * QK_K;
        block_q8_K *y = &dst[b];
        float amax = 0, max = 0;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        if (amax == 0) {
            memset(y, 0, sizeof *y);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = quant_round_nearest(iscale * x[j]);
            y->qs[j] = (int8_t)clamp_int(v, -128, 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y->qs[16 * g + i];
            y->bsums[g] = (int16_t)sum;
        }
        y->d = 1 / iscale;
    }
}
