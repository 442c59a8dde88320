/* attention_kivi.c - attention over sealed KIVI blocks read in place
 * (kv_type ATTN_KV_KIVI4 / ATTN_KV_KIVI2, layout in attention.h): the
 * reference and the AVX2 variant, which compute the same bits except in
 * the softmax (the reference's scalar one, AVX2's kern_softmax). AVX2
 * needs head_dim % 8 == 0 (attn_paged's condition for SIMD).
 *
 * Keys are quantized per channel over a block: k_jd = m_d + s_d n_jd, so
 *   q . k_j = sum_d (q_d s_d) n_jd + sum_d q_d m_d.
 * Per block and row the scales are folded into the query once (qs = q x s,
 * elementwise) and the bias b = sum_d q_d m_d taken in 8 lanes (d mod 8,
 * fmaf chains) summed by AVX2's fixed tree; a score is then one fmaf chain
 * over d ascending of qs_d x n_jd (8 keys a vector in AVX2, the lanes being
 * keys), plus b, times scale.
 * Values are quantized per token in groups of 32 elements (s, m per group):
 *   sum_j p_j v_ji = sum_j (p_j s_j) n_ji + sum_j p_j m_j,
 * so each output element is one fmaf chain over j ascending of (p_j x s_j)
 * x n_ji, and each (row, group slice of the head) keeps a second chain
 * fmaf(p_j, m_j, .), added at the end. No f32 copy of a block: AVX2
 * converts a block's codes of one 32-element group into a small tile
 * shared by the rows of the call (ATTN_VB keys at a time). It prefetches
 * each segment's key columns and value groups KIVI_PF_BLOCKS blocks ahead.
 * attn_paged_avx512 runs attention_kivi_avx512.c (16 keys a vector, the
 * same chains: this variant's bits), which takes this one for head dims
 * not a multiple of 32.
 *
 * Softmax: exact two-pass over each row's scores lo..n_ctx-1 (max, expf,
 * sum in double, x (1 / sum)), as the reader path. Row independence
 * (attention.h): every score and output element is computed by operations
 * that depend only on its own row, the key and the cache.
 */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/attention_kivi_impl.h"
#include "kernels/kernels.h"
#include "tensor/half.h"

/* The block's key scales and mins of head g's channels, as floats. */
static void kivi_key_params(const kivi_geom *k, const uint8_t *kp, int g, int D, float *dk, float *mk)
{
    const uint8_t *d = kp + k->C * k->cb + (size_t)g * D * 2, *m = d + k->C * 2;
    for (int i = 0; i < D; i++) {
        dk[i] = ld_half(d + 2 * (size_t)i);
        mk[i] = ld_half(m + 2 * (size_t)i);
    }
}

/* The exact two-pass softmax of the reference: x[0..n) become weights;
 * returns the log-sum-exp. */
static float softmax_ref(float *x, int n)
{
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    double sum = 0;
    for (int j = 0; j < n; j++) {
        x[j] = expf(x[j] - mx);
        sum += x[j];
    }
    const float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) x[j] *= inv;
    return mx + (float)log(sum);
}

/* The slices of head g's elements [e0, e0 + D) by value group: slice s
 * covers elements [a_s, a_s + len_s) of the head, in group grp_s from its
 * element off_s. Returns the count. */
static int head_slices(int g, int D, int *a, int *len, int *grp, int *off)
{
    const int e0 = g * D;
    int n = 0;
    for (int e = e0; e < e0 + D;) {
        const int gr = e / KIVI_GROUP, end = (gr + 1) * KIVI_GROUP < e0 + D ? (gr + 1) * KIVI_GROUP : e0 + D;
        a[n] = e - e0, len[n] = end - e, grp[n] = gr, off[n] = e - gr * KIVI_GROUP;
        n++;
        e = end;
    }
    return n;
}

/* One row's V (any head dim): per key and group slice of the head,
 * out += (p s) n by fmaf chains, macc = fmaf(p, m, .); then out += macc.
 * w: the row's weights by position; out zeroed by the caller. */
static void v_row_any(const attn_kv *kv, const kivi_geom *k, const attn_row *row, const float *w,
                             float *macc)
{
    int a[16], len[16], grp[16], off[16];
    const int ns = head_slices(row->g, kv->head_dim, a, len, grp, off);
    assert(ns <= kivi_head_slices(kv->head_dim) && ns <= 16);
    for (int i = 0; i < ns; i++) macc[i] = 0;
    const uint32_t b_lo = (uint32_t)row->lo / k->T, b_hi = (uint32_t)(row->n_ctx - 1) / k->T;
    for (uint32_t blk = b_lo; blk <= b_hi; blk++) {
        const uint8_t *vp = kv->v_base + (size_t)kv->blocks[blk] * kv->v_block_bytes;
        uint32_t t0, t1;
        row_span(row, blk, k->T, &t0, &t1);
        for (uint32_t t = t0; t < t1; t++) {
            const float p = w[blk * k->T + t];
            for (int i = 0; i < ns; i++) {
                const uint8_t *gp = vp + (size_t)t * kv->row_bytes + (size_t)grp[i] * k->gb;
                const float pd = p * ld_half(gp);
                for (int e = 0; e < len[i]; e++)
                    row->out[a[i] + e] =
                        fmaf(pd, (float)kivi_code(gp + 4, k->bits, (size_t)(off[i] + e)), row->out[a[i] + e]);
                macc[i] = fmaf(p, ld_half(gp + 2), macc[i]);
            }
        }
    }
    for (int i = 0; i < ns; i++)
        for (int e = 0; e < len[i]; e++) row->out[a[i] + e] += macc[i];
}

/* The reference: rows one at a time, in the plainest order. */
void attn_kivi_ref(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch, size_t sf)
{
    const kivi_geom k = kivi_geom_of(kv);
    const int D = kv->head_dim;
    for (int r = 0; r < n_rows; r++) {
        const attn_row *row = &rows[r];
        assert(row->n_ctx >= 1 && row->lo >= 0 && row->lo < row->n_ctx);
        const kivi_scratch s = kivi_scratch_at(scratch, 1, row->n_ctx, D, false, sf);
        const uint32_t b_lo = (uint32_t)row->lo / k.T, b_hi = (uint32_t)(row->n_ctx - 1) / k.T;
        for (uint32_t blk = b_lo; blk <= b_hi; blk++) {
            const uint8_t *kp = kv->k_base + (size_t)kv->blocks[blk] * kv->block_bytes;
            kivi_key_params(&k, kp, row->g, D, s.dk, s.mk);
            const float bias = kivi_fold_ref(row->q, s.dk, s.mk, D, s.qs);
            uint32_t t0, t1;
            row_span(row, blk, k.T, &t0, &t1);
            for (uint32_t t = t0; t < t1; t++)
                s.sc[blk * k.T + t] = kivi_score1(&k, kp + (size_t)row->g * D * k.cb, s.qs, D, bias, t, scale);
        }
        float *x = s.sc + row->lo;
        const int n = row->n_ctx - row->lo;
        attn_softcap(x, n, kv->softcap);
        const float lse = softmax_ref(x, n);
        if (kv->lse) kv->lse[r] = lse;
        memset(row->out, 0, sizeof(float) * (size_t)D);
        v_row_any(kv, &k, row, s.sc, s.macc);
    }
}

/* ------------------------------------------------------------------ AVX2 */

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* 8 codes from a byte boundary (4 bytes at 4 bits, 2 at 2 bits) as floats. */
KAI __m256 unpack8(const uint8_t *p, uint32_t bits)
{
    if (bits == 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int32_t)w), sh),
                                                   _mm256_set1_epi32(0xF)));
    }
    uint16_t w;
    memcpy(&w, p, 2);
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    return _mm256_cvtepi32_ps(
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int32_t)w), sh), _mm256_set1_epi32(3)));
}

/* kivi_fold_ref's bits: the same products and lanes, the same tree. */
KAI float fold8(const float *q, const float *dk, const float *mk, int D, float *qs)
{
    __m256 l = _mm256_setzero_ps();
    for (int i = 0; i < D; i += 8) {
        const __m256 vq = _mm256_loadu_ps(q + i);
        _mm256_storeu_ps(qs + i, _mm256_mul_ps(vq, _mm256_loadu_ps(dk + i)));
        l = _mm256_fmadd_ps(vq, _mm256_loadu_ps(mk + i), l);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1)); /* l0+l4 .. l3+l7 */
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));                                          /* (l0+l4)+(l2+l6), (l1+l5)+(l3+l7) */
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

KAI void key_params8(const kivi_geom *k, const uint8_t *kp, int g, int D, float *dk, float *mk)
{
    const uint8_t *d = kp + k->C * k->cb + (size_t)g * D * 2, *m = d + k->C * 2;
    for (int i = 0; i < D; i += 8) {
        _mm256_storeu_ps(dk + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(d + 2 * (size_t)i))));
        _mm256_storeu_ps(mk + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(m + 2 * (size_t)i))));
    }
}

/* Scores of keys [t, t + 8) of a block for R rows (R constant after
 * inlining): one accumulator a row, codes unpacked once a channel. */
KAI void scores8_r(const kivi_geom *k, const uint8_t *col, int D, const float *qs, const float *bias, int R,
                   uint32_t t, float scale, float *out, size_t ld)
{
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const size_t at = (size_t)t * k->bits / 8;
    for (int i = 0; i < D; i++) {
        const __m256 c = unpack8(col + (size_t)i * k->cb + at, k->bits);
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(qs + (size_t)r * D + i), c, acc[r]);
    }
    const __m256 vs = _mm256_set1_ps(scale);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        _mm256_storeu_ps(out + (size_t)r * ld, _mm256_mul_ps(_mm256_add_ps(acc[r], _mm256_set1_ps(bias[r])), vs));
}

KA static void scores8(const kivi_geom *k, const uint8_t *col, int D, const float *qs, const float *bias, int R,
                       uint32_t t, float scale, float *out, size_t ld)
{
    switch (R) {
    case 1: scores8_r(k, col, D, qs, bias, 1, t, scale, out, ld); break;
    case 2: scores8_r(k, col, D, qs, bias, 2, t, scale, out, ld); break;
    case 3: scores8_r(k, col, D, qs, bias, 3, t, scale, out, ld); break;
    case 4: scores8_r(k, col, D, qs, bias, 4, t, scale, out, ld); break;
    case 5: scores8_r(k, col, D, qs, bias, 5, t, scale, out, ld); break;
    case 6: scores8_r(k, col, D, qs, bias, 6, t, scale, out, ld); break;
    case 7: scores8_r(k, col, D, qs, bias, 7, t, scale, out, ld); break;
    default: scores8_r(k, col, D, qs, bias, 8, t, scale, out, ld); break;
    }
}

/* A segment's scores (rows [0, R) reading head g), block by block: keys
 * [0, n) of each block the segment sees, 8 at a time from byte-aligned
 * codes, the rest one at a time by the reference's chain (the same bits). */
KA static void seg_scores(const attn_kv *kv, const kivi_geom *k, const attn_row *rows, int R, int g,
                          const kivi_scratch *s, float scale)
{
    const int D = kv->head_dim;
    int nmax = 0, lomin = rows[0].lo;
    for (int r = 0; r < R; r++) {
        nmax = rows[r].n_ctx > nmax ? rows[r].n_ctx : nmax;
        lomin = rows[r].lo < lomin ? rows[r].lo : lomin;
    }
    const uint32_t b0 = (uint32_t)lomin / k->T, bend = ((uint32_t)nmax + k->T - 1) / k->T;
    for (uint32_t b = b0; b < b0 + KIVI_PF_BLOCKS; b++) kivi_prefetch_keys(kv, k, b, bend, g);
    for (uint32_t blk = b0; blk < bend; blk++) {
        kivi_prefetch_keys(kv, k, blk + KIVI_PF_BLOCKS, bend, g);
        const uint8_t *kp = kv->k_base + (size_t)kv->blocks[blk] * kv->block_bytes;
        const uint8_t *col = kp + (size_t)g * D * k->cb;
        key_params8(k, kp, g, D, s->dk, s->mk);
        for (int r = 0; r < R; r++) s->bias[r] = fold8(rows[r].q, s->dk, s->mk, D, s->qs + (size_t)r * D);
        const uint32_t n = (uint32_t)nmax - blk * k->T < k->T ? (uint32_t)nmax - blk * k->T : k->T;
        for (int r0 = 0; r0 < R; r0 += 8) {
            const int rn = R - r0 < 8 ? R - r0 : 8;
            uint32_t t = 0;
            for (; t + 8 <= n; t += 8)
                scores8(k, col, D, s->qs + (size_t)r0 * D, s->bias + r0, rn, t, scale,
                        s->sc + (size_t)r0 * s->ncp + blk * k->T + t, s->ncp);
            for (; t < n; t++)
                for (int r = r0; r < r0 + rn; r++)
                    s->sc[(size_t)r * s->ncp + blk * k->T + t] =
                        kivi_score1(k, col, s->qs + (size_t)r * D, D, s->bias[r], t, scale);
        }
    }
}

/* 32 codes of a value group (16 bytes at 4 bits, 8 at 2) into tile. */
KAI void unpack32(const uint8_t *p, uint32_t bits, float *tile)
{
    if (bits == 4) { /* nibbles split and interleaved back into code order, widened 8 at a time */
        const __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0F);
        const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
        _mm256_storeu_ps(tile, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c0)));
        _mm256_storeu_ps(tile + 8, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c0, 8))));
        _mm256_storeu_ps(tile + 16, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c1)));
        _mm256_storeu_ps(tile + 24, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c1, 8))));
        return;
    }
    for (int i = 0; i < 4; i++) _mm256_storeu_ps(tile + 8 * i, unpack8(p + (size_t)i * bits, bits));
}

/* Rows' V over keys [t0, t1) of the tile, NR rows (1 or 2, constant after
 * inlining) at once so that their chains interleave: out[r][0..32) +=
 * (p s) n by fmaf chains, macc[r] = fmaf(p, m, .). */
KAI void v_rows32(int NR, const float *tile, const float *td, const float *tm, const float *const *p, uint32_t t0,
                  uint32_t t1, float *const *out, float *const *macc)
{
    __m256 a[2][4];
    float m[2];
    _Pragma("GCC unroll 2") for (int r = 0; r < NR; r++) {
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) a[r][i] = _mm256_loadu_ps(out[r] + 8 * i);
        m[r] = *macc[r];
    }
    for (uint32_t t = t0; t < t1; t++) {
        const float *c = tile + (size_t)t * KIVI_GROUP;
        _Pragma("GCC unroll 2") for (int r = 0; r < NR; r++) {
            const __m256 pd = _mm256_set1_ps(p[r][t] * td[t]);
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) a[r][i] = _mm256_fmadd_ps(pd, _mm256_loadu_ps(c + 8 * i), a[r][i]);
            m[r] = fmaf(p[r][t], tm[t], m[r]);
        }
    }
    _Pragma("GCC unroll 2") for (int r = 0; r < NR; r++) {
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) _mm256_storeu_ps(out[r] + 8 * i, a[r][i]);
        *macc[r] = m[r];
    }
}

/* A segment's V (D a multiple of 32: whole groups), block by block, each
 * group's codes of up to ATTN_VB keys converted once for all rows. */
KA static void seg_values(const attn_kv *kv, const kivi_geom *k, const attn_row *rows, int R, int g,
                          const kivi_scratch *s)
{
    const int D = kv->head_dim, ng = D / KIVI_GROUP, gr0 = g * D / KIVI_GROUP;
    int nmax = 0, lomin = rows[0].lo;
    for (int r = 0; r < R; r++) {
        nmax = rows[r].n_ctx > nmax ? rows[r].n_ctx : nmax;
        lomin = rows[r].lo < lomin ? rows[r].lo : lomin;
        memset(rows[r].out, 0, sizeof(float) * (size_t)D);
        for (int i = 0; i < ng; i++) s->macc[(size_t)r * s->slices + i] = 0;
    }
    const uint32_t b0 = (uint32_t)lomin / k->T, bend = ((uint32_t)nmax + k->T - 1) / k->T;
    for (uint32_t b = b0; b < b0 + KIVI_PF_BLOCKS; b++) kivi_prefetch_values(kv, k, b, bend, g);
    for (uint32_t blk = b0; blk < bend; blk++) {
        kivi_prefetch_values(kv, k, blk + KIVI_PF_BLOCKS, bend, g);
        const uint8_t *vp = kv->v_base + (size_t)kv->blocks[blk] * kv->v_block_bytes;
        uint32_t u0 = k->T, u1 = 0; /* the union of the rows' spans */
        for (int r = 0; r < R; r++) {
            uint32_t t0, t1;
            row_span(&rows[r], blk, k->T, &t0, &t1);
            if (t0 < t1) u0 = t0 < u0 ? t0 : u0, u1 = t1 > u1 ? t1 : u1;
        }
        for (uint32_t tb = u0; tb < u1; tb += ATTN_VB) {
            const uint32_t te = u1 - tb < ATTN_VB ? u1 : tb + ATTN_VB;
            for (int i = 0; i < ng; i++) {
                for (uint32_t t = tb; t < te; t++) {
                    const uint8_t *gp = vp + (size_t)t * kv->row_bytes + (size_t)(gr0 + i) * k->gb;
                    unpack32(gp + 4, k->bits, s->tile + (size_t)(t - tb) * KIVI_GROUP);
                    uint16_t h[2];
                    memcpy(h, gp, 4);
                    s->td[t - tb] = _cvtsh_ss(h[0]);
                    s->tm[t - tb] = _cvtsh_ss(h[1]);
                }
                for (int r = 0; r < R;) {
                    uint32_t t0[2], t1[2];
                    int nr = 0;
                    const float *p[2];
                    float *o[2], *mc[2];
                    for (; nr < 2 && r < R; r++) { /* pairs of rows over the same keys */
                        uint32_t a0, a1;
                        row_span(&rows[r], blk, k->T, &a0, &a1);
                        a0 = a0 > tb ? a0 : tb;
                        a1 = a1 < te ? a1 : te;
                        if (a0 >= a1) continue;
                        if (nr == 1 && (a0 != t0[0] || a1 != t1[0])) break;
                        t0[nr] = a0, t1[nr] = a1;
                        p[nr] = s->sc + (size_t)r * s->ncp + blk * k->T + tb;
                        o[nr] = rows[r].out + i * KIVI_GROUP;
                        mc[nr++] = &s->macc[(size_t)r * s->slices + i];
                    }
                    if (nr == 2) v_rows32(2, s->tile, s->td, s->tm, p, t0[0] - tb, t1[0] - tb, o, mc);
                    else if (nr == 1) v_rows32(1, s->tile, s->td, s->tm, p, t0[0] - tb, t1[0] - tb, o, mc);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < ng; i++)
            for (int e = 0; e < KIVI_GROUP; e++) rows[r].out[i * KIVI_GROUP + e] += s->macc[(size_t)r * s->slices + i];
}

/* v_row_any's operations for head dims that are a multiple of 8 but not of
 * 32 (a group spans heads; its slices then start and end at multiples of
 * 8): 8 elements a vector from the codes in place. */
KA static void v_row8(const attn_kv *kv, const kivi_geom *k, const attn_row *row, const float *w, float *macc)
{
    int a[16], len[16], grp[16], off[16];
    const int ns = head_slices(row->g, kv->head_dim, a, len, grp, off);
    for (int i = 0; i < ns; i++) macc[i] = 0;
    const uint32_t b_lo = (uint32_t)row->lo / k->T, b_hi = (uint32_t)(row->n_ctx - 1) / k->T;
    for (uint32_t blk = b_lo; blk <= b_hi; blk++) {
        const uint8_t *vp = kv->v_base + (size_t)kv->blocks[blk] * kv->v_block_bytes;
        uint32_t t0, t1;
        row_span(row, blk, k->T, &t0, &t1);
        for (uint32_t t = t0; t < t1; t++) {
            const float p = w[blk * k->T + t];
            for (int i = 0; i < ns; i++) {
                const uint8_t *gp = vp + (size_t)t * kv->row_bytes + (size_t)grp[i] * k->gb;
                uint16_t h[2];
                memcpy(h, gp, 4);
                const __m256 pd = _mm256_set1_ps(p * _cvtsh_ss(h[0]));
                for (int e = 0; e < len[i]; e += 8) {
                    float *o = row->out + a[i] + e;
                    _mm256_storeu_ps(o, _mm256_fmadd_ps(pd, unpack8(gp + 4 + (size_t)(off[i] + e) * k->bits / 8, k->bits),
                                                        _mm256_loadu_ps(o)));
                }
                macc[i] = fmaf(p, _cvtsh_ss(h[1]), macc[i]);
            }
        }
    }
    for (int i = 0; i < ns; i++)
        for (int e = 0; e < len[i]; e++) row->out[a[i] + e] += macc[i];
}

KA void attn_kivi_avx2(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch, size_t sf)
{
    const kivi_geom k = kivi_geom_of(kv);
    int nmax = 0;
    for (int r = 0; r < n_rows; r++) {
        assert(rows[r].n_ctx >= 1 && rows[r].lo >= 0 && rows[r].lo < rows[r].n_ctx);
        nmax = rows[r].n_ctx > nmax ? rows[r].n_ctx : nmax;
    }
    assert(n_rows <= ATTN_ROWS_CAP);
    const kivi_scratch s = kivi_scratch_at(scratch, n_rows, nmax, kv->head_dim, kv->head_dim % KIVI_GROUP == 0, sf);
    for (int r0 = 0, r1; r0 < n_rows; r0 = r1) {
        for (r1 = r0 + 1; r1 < n_rows && rows[r1].g == rows[r0].g;) r1++;
        kivi_scratch ss = s;
        ss.sc += (size_t)r0 * s.ncp;
        ss.macc += (size_t)r0 * s.slices;
        seg_scores(kv, &k, rows + r0, r1 - r0, rows[r0].g, &ss, scale);
        for (int r = r0; r < r1; r++) {
            float *x = ss.sc + (size_t)(r - r0) * s.ncp + rows[r].lo;
            const int n = rows[r].n_ctx - rows[r].lo;
            attn_softcap(x, n, kv->softcap);
            const float lse = kern_softmax(x, n);
            if (kv->lse) kv->lse[r] = lse;
        }
        if (kv->head_dim % KIVI_GROUP == 0) seg_values(kv, &k, rows + r0, r1 - r0, rows[r0].g, &ss);
        else /* groups cross heads: row by row, the reference's operations */
            for (int r = r0; r < r1; r++) {
                memset(rows[r].out, 0, sizeof(float) * (size_t)kv->head_dim);
                v_row8(kv, &k, &rows[r], ss.sc + (size_t)(r - r0) * s.ncp, ss.macc + (size_t)(r - r0) * s.slices);
            }
    }
}

#else

void attn_kivi_avx2(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch, size_t sf)
{
    attn_kivi_ref(kv, rows, n_rows, scale, scratch, sf);
}

#endif
