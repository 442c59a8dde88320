/* attention_kivi_avx512.c - sealed KIVI blocks read in place, AVX-512
 * variant (attn_paged_avx512's route for ATTN_KV_KIVI4 / _KIVI2). The
 * products and chains are attention_kivi.c's (see there for the algebra),
 * so scores and V sums are the reference's bits; the softmax is
 * kern_softmax, as the AVX2 variant's.
 *
 * Scores: 16 keys a vector (lanes = keys), each lane one fmaf chain over
 * the dims in order of qs_d x code; the codes of a channel unpacked once
 * for up to 8 rows, the folded query broadcast from memory into the FMA.
 * V: a group of 32 elements is 2 vectors; the codes of a key's group are
 * unpacked once in registers for all rows of the segment that share the
 * block's span (up to 8 at once: 16 accumulators), no tile in memory.
 * Head dims not a multiple of 32 (groups across heads) and keys past the
 * last 16 of a block's span take the reference's chains (the same bits).
 */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/attention_kivi_impl.h"
#include "kernels/avx512_intrin.h"
#include "kernels/kernels.h"

#ifdef PL_HAVE_AVX512_CODE

/* 16 codes from a byte boundary (8 bytes at 4 bits, 4 at 2) as floats:
 * lane k = code k, shifted out of the 32-bit word that holds it. */
K5AI __m512 unpack16(const uint8_t *p, uint32_t bits)
{
    uint32_t w[2];
    if (bits == 4) {
        memcpy(w, p, 8);
        const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i v = _mm512_mask_blend_epi32((__mmask16)0xFF00, _mm512_set1_epi32((int32_t)w[0]),
                                                  _mm512_set1_epi32((int32_t)w[1]));
        return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(v, sh), _mm512_set1_epi32(0xF)));
    }
    memcpy(w, p, 4);
    const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int32_t)w[0]), sh), _mm512_set1_epi32(3)));
}

/* kivi_fold_ref's bits: the same products, the bias in 8 lanes reduced by
 * the same tree. */
K5AI float fold(const float *q, const float *dk, const float *mk, int D, float *qs)
{
    __m256 l = _mm256_setzero_ps();
    for (int i = 0; i < D; i += 8) {
        const __m256 vq = _mm256_loadu_ps(q + i);
        _mm256_storeu_ps(qs + i, _mm256_mul_ps(vq, _mm256_loadu_ps(dk + i)));
        l = _mm256_fmadd_ps(vq, _mm256_loadu_ps(mk + i), l);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The high 8 lanes (extractf64x4: what avx512_intrin.h's emulation has). */
K5AI __m256 hi8(__m512 x) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)); }

/* The lanes' sum of an 8-lane bias by fold's tree. */
K5AI float fold_sum(__m256 l)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(l), _mm256_extractf128_ps(l, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* fold of two rows at once, row a in the low half of each vector and row b
 * in the high half: each half does fold's operations on its row (the same
 * bits), for half the instructions (a block's fold for every row of a
 * prefill tile was ~9% of its attention). */
K5AI void fold2(const float *qa, const float *qb, const float *dk, const float *mk, int D, float *qsa, float *qsb,
                float *ba, float *bb)
{
    __m512 l = _mm512_setzero_ps();
    for (int i = 0; i < D; i += 8) {
        const __m512 vq = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(qa + i)), _mm256_loadu_ps(qb + i), 1);
        const __m512 vd = _mm512_broadcast_f32x8(_mm256_loadu_ps(dk + i)), vm = _mm512_broadcast_f32x8(_mm256_loadu_ps(mk + i));
        const __m512 x = _mm512_mul_ps(vq, vd);
        _mm256_storeu_ps(qsa + i, _mm512_castps512_ps256(x));
        _mm256_storeu_ps(qsb + i, hi8(x));
        l = _mm512_fmadd_ps(vq, vm, l);
    }
    *ba = fold_sum(_mm512_castps512_ps256(l));
    *bb = fold_sum(hi8(l));
}

/* The block's key scales and mins of head g's channels (D % 16 == 0). */
K5AI void key_params(const kivi_geom *k, const uint8_t *kp, int g, int D, float *dk, float *mk)
{
    const uint8_t *d = kp + k->C * k->cb + (size_t)g * D * 2, *m = d + k->C * 2;
    for (int i = 0; i < D; i += 16) {
        _mm512_storeu_ps(dk + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(d + 2 * (size_t)i))));
        _mm512_storeu_ps(mk + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(m + 2 * (size_t)i))));
    }
}

/* Scores of keys [t, t + 16) of a block for R rows (R constant after
 * inlining): one accumulator a row, codes unpacked once a channel. */
K5AI void scores16_r(const kivi_geom *k, const uint8_t *col, int D, const float *qs, const float *bias, int R,
                     uint32_t t, float scale, float *out, size_t ld)
{
    __m512 acc[8];
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const size_t at = (size_t)t * k->bits / 8;
    for (int i = 0; i < D; i++) {
        const __m512 c = unpack16(col + (size_t)i * k->cb + at, k->bits);
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(qs[(size_t)r * D + i]), c, acc[r]);
    }
    const __m512 vs = _mm512_set1_ps(scale);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
        _mm512_storeu_ps(out + (size_t)r * ld, _mm512_mul_ps(_mm512_add_ps(acc[r], _mm512_set1_ps(bias[r])), vs));
}

static K5 void scores16(const kivi_geom *k, const uint8_t *col, int D, const float *qs, const float *bias, int R,
                        uint32_t t, float scale, float *out, size_t ld)
{
    switch (R) {
    case 1: scores16_r(k, col, D, qs, bias, 1, t, scale, out, ld); break;
    case 2: scores16_r(k, col, D, qs, bias, 2, t, scale, out, ld); break;
    case 3: scores16_r(k, col, D, qs, bias, 3, t, scale, out, ld); break;
    case 4: scores16_r(k, col, D, qs, bias, 4, t, scale, out, ld); break;
    case 5: scores16_r(k, col, D, qs, bias, 5, t, scale, out, ld); break;
    case 6: scores16_r(k, col, D, qs, bias, 6, t, scale, out, ld); break;
    case 7: scores16_r(k, col, D, qs, bias, 7, t, scale, out, ld); break;
    default: scores16_r(k, col, D, qs, bias, 8, t, scale, out, ld); break;
    }
}

/* A segment's scores (rows [0, R) reading head g), block by block: keys
 * [0, n) of each block the segment sees, 16 at a time, the rest one at a
 * time by the reference's chain. */
static K5 void seg_scores(const attn_kv *kv, const kivi_geom *k, const attn_row *rows, int R, int g,
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
        key_params(k, kp, g, D, s->dk, s->mk);
        int r = 0;
        for (; r + 2 <= R; r += 2)
            fold2(rows[r].q, rows[r + 1].q, s->dk, s->mk, D, s->qs + (size_t)r * D, s->qs + (size_t)(r + 1) * D,
                  &s->bias[r], &s->bias[r + 1]);
        for (; r < R; r++) s->bias[r] = fold(rows[r].q, s->dk, s->mk, D, s->qs + (size_t)r * D);
        const uint32_t n = (uint32_t)nmax - blk * k->T < k->T ? (uint32_t)nmax - blk * k->T : k->T;
        for (int r0 = 0; r0 < R; r0 += 8) {
            const int rn = R - r0 < 8 ? R - r0 : 8;
            uint32_t t = 0;
            for (; t + 16 <= n; t += 16)
                scores16(k, col, D, s->qs + (size_t)r0 * D, s->bias + r0, rn, t, scale,
                         s->sc + (size_t)r0 * s->ncp + blk * k->T + t, s->ncp);
            for (; t < n; t++)
                for (int r = r0; r < r0 + rn; r++)
                    s->sc[(size_t)r * s->ncp + blk * k->T + t] =
                        kivi_score1(k, col, s->qs + (size_t)r * D, D, s->bias[r], t, scale);
        }
    }
}

/* NR rows' V over keys [t0, t1) of one value group of a block (NR constant
 * after inlining): out[r][0..32) += (p s) n by fmaf chains, macc[r] =
 * fmaf(p, m, .), t ascending. gp: the group of key 0; stride: row_bytes. */
K5AI void v_group_r(int NR, uint32_t bits, const uint8_t *gp, size_t stride, const float *const *p, uint32_t t0,
                    uint32_t t1, float *const *out, float *const *macc)
{
    __m512 a[8][2];
    float m[8];
    _Pragma("GCC unroll 8") for (int r = 0; r < NR; r++) {
        a[r][0] = _mm512_loadu_ps(out[r]);
        a[r][1] = _mm512_loadu_ps(out[r] + 16);
        m[r] = *macc[r];
    }
    for (uint32_t t = t0; t < t1; t++) {
        const uint8_t *g = gp + (size_t)t * stride;
        int32_t sw;
        memcpy(&sw, g, 4);
        const __m128 sm = _mm_cvtph_ps(_mm_cvtsi32_si128(sw));
        const float d = _mm_cvtss_f32(sm), mn = _mm_cvtss_f32(_mm_movehdup_ps(sm));
        const __m512 c0 = unpack16(g + 4, bits), c1 = unpack16(g + 4 + 2 * bits, bits);
        _Pragma("GCC unroll 8") for (int r = 0; r < NR; r++) {
            const float pr = p[r][t];
            const __m512 pd = _mm512_set1_ps(pr * d);
            a[r][0] = _mm512_fmadd_ps(pd, c0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(pd, c1, a[r][1]);
            m[r] = fmaf(pr, mn, m[r]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < NR; r++) {
        _mm512_storeu_ps(out[r], a[r][0]);
        _mm512_storeu_ps(out[r] + 16, a[r][1]);
        *macc[r] = m[r];
    }
}

static K5 void v_group(int NR, uint32_t bits, const uint8_t *gp, size_t stride, const float *const *p, uint32_t t0,
                       uint32_t t1, float *const *out, float *const *macc)
{
    switch (NR) {
    case 1: v_group_r(1, bits, gp, stride, p, t0, t1, out, macc); break;
    case 2: v_group_r(2, bits, gp, stride, p, t0, t1, out, macc); break;
    case 3: v_group_r(3, bits, gp, stride, p, t0, t1, out, macc); break;
    case 4: v_group_r(4, bits, gp, stride, p, t0, t1, out, macc); break;
    case 5: v_group_r(5, bits, gp, stride, p, t0, t1, out, macc); break;
    case 6: v_group_r(6, bits, gp, stride, p, t0, t1, out, macc); break;
    case 7: v_group_r(7, bits, gp, stride, p, t0, t1, out, macc); break;
    default: v_group_r(8, bits, gp, stride, p, t0, t1, out, macc); break;
    }
}

/* A segment's V (D a multiple of 32), block by block: per value group,
 * runs of up to 8 consecutive rows with the same span in the block at once. */
static K5 void seg_values(const attn_kv *kv, const kivi_geom *k, const attn_row *rows, int R, int g,
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
        for (int r = 0; r < R;) {
            uint32_t t0, t1;
            row_span(&rows[r], blk, k->T, &t0, &t1);
            if (t0 >= t1) {
                r++;
                continue;
            }
            int nr = 1;
            for (; nr < 8 && r + nr < R; nr++) {
                uint32_t a0, a1;
                row_span(&rows[r + nr], blk, k->T, &a0, &a1);
                if (a0 != t0 || a1 != t1) break;
            }
            for (int i = 0; i < ng; i++) {
                const float *p[8];
                float *o[8], *mc[8];
                for (int j = 0; j < nr; j++) {
                    p[j] = s->sc + (size_t)(r + j) * s->ncp + blk * k->T;
                    o[j] = rows[r + j].out + i * KIVI_GROUP;
                    mc[j] = &s->macc[(size_t)(r + j) * s->slices + i];
                }
                v_group(nr, k->bits, vp + (size_t)(gr0 + i) * k->gb, kv->row_bytes, p, t0, t1, o, mc);
            }
            r += nr;
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < ng; i++)
            for (int e = 0; e < KIVI_GROUP; e++) rows[r].out[i * KIVI_GROUP + e] += s->macc[(size_t)r * s->slices + i];
}

K5 void attn_kivi_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                         size_t sf)
{
    if (kv->head_dim % KIVI_GROUP != 0) { /* groups cross heads: AVX2's row-by-row walk */
        attn_kivi_avx2(kv, rows, n_rows, scale, scratch, sf);
        return;
    }
    const kivi_geom k = kivi_geom_of(kv);
    int nmax = 0;
    for (int r = 0; r < n_rows; r++) {
        assert(rows[r].n_ctx >= 1 && rows[r].lo >= 0 && rows[r].lo < rows[r].n_ctx);
        nmax = rows[r].n_ctx > nmax ? rows[r].n_ctx : nmax;
    }
    assert(n_rows <= ATTN_ROWS_CAP);
    const kivi_scratch s = kivi_scratch_at(scratch, n_rows, nmax, kv->head_dim, false, sf);
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
        seg_values(kv, &k, rows + r0, r1 - r0, rows[r0].g, &ss);
    }
}

#else

void attn_kivi_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch, size_t sf)
{
    attn_kivi_ref(kv, rows, n_rows, scale, scratch, sf);
}

#endif
