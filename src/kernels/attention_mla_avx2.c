/* attention_mla_avx2.c - the latent attention's two passes with AVX2
 * (attention_mla.h, attention_mla_impl.h); the AVX-512 file's tiles at 8
 * lanes and 16 registers.
 *
 * Scores: 4 heads x 2 rows, 8 accumulators over the row's elements, each
 * row chunk converted once in a register for the 4 heads; one FMA chain
 * per (head, row) over the chunks in order, then a fixed sum of the 8
 * lanes. Values: 8 elements of the rank at a time, 8 heads' accumulators
 * in registers over a run of 16 rows; per output element one FMA chain
 * p_j x v_j, j ascending.
 */
#include "kernels/attention_mla_impl.h"

#include <string.h>

#include "kernels/attention.h"
#include "kernels/kern_impl.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Elements i..i+7 of a row (i % 8 == 0); d: the q8_0 / q4_0 block's scale,
 * or 256 x the e4m3 block scale; kp: a KIVI row's block parameters. */
KAI __m256 ld8(uint32_t t, const uint8_t *r, int i, __m256 d, const uint16_t *kp)
{
    if (t == ATTN_MLA_KIVI4 || t == ATTN_MLA_KIVI2) { /* each lane shifts its code down: d x code + m, fused */
        uint32_t w = 0;
        memcpy(&w, r + (size_t)i * attn_mla_kivi_bits(t) / 8, attn_mla_kivi_bits(t));
        const __m256i c = t == ATTN_MLA_KIVI4
                              ? _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w),
                                                                   _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                                 _mm256_set1_epi32(15))
                              : _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w),
                                                                   _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                                 _mm256_set1_epi32(3));
        const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)attn_mla_kivi_d(kp, i)));
        const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)attn_mla_kivi_m(kp, i)));
        return _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(c), mv);
    }
    if (t == DT_F32) return _mm256_loadu_ps((const float *)r + i);
    if (t == ATTN_KV_FP8_E5M2) /* the top byte of a half */
        return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(r + i))), 8));
    if (t == ATTN_KV_FP8_E4M3) { /* the half trick (attention_impl.h); d carries the x 256 */
        const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(r + i)));
        __m128i w = _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16((short)0xBF80)); /* sign, 7 bits at 13..7 */
        const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7F80)), _mm_set1_epi16(0x3F80));
        w = _mm_or_si128(w, _mm_and_si128(nan, _mm_set1_epi16(0x4000))); /* S.1111.111 -> a half NaN */
        return _mm256_mul_ps(_mm256_cvtph_ps(w), d);
    }
    if (t == DT_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)r + i)));
    if (t == DT_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)r + i))), 16));
    if (t == DT_Q4_0) { /* elements 0..15 in the low nibbles, 16..31 in the high ones, each q - 8 */
        const block_q4_0 *b = (const block_q4_0 *)r + i / 32;
        const int k = i % 32;
        __m128i x = _mm_loadl_epi64((const __m128i *)(b->qs + k % 16));
        if (k >= 16) x = _mm_srli_epi16(x, 4);
        x = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), d);
    }
    const block_q8_0 *b = (const block_q8_0 *)r + i / 32;
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + i % 32)))), d);
}

/* The scale of the q8_0 / q4_0 block holding element i, rs for e4m3
 * (attn_mla_row_scale; unused for other types). */
KAI __m256 scale8(uint32_t t, const uint8_t *r, int i, float rs)
{
    if (t == ATTN_KV_FP8_E4M3) return _mm256_set1_ps(rs);
    if (t == DT_Q8_0) return _mm256_set1_ps(kern_f16_lut[((const block_q8_0 *)r + i / 32)->d]);
    if (t == DT_Q4_0) return _mm256_set1_ps(kern_f16_lut[((const block_q4_0 *)r + i / 32)->d]);
    return _mm256_setzero_ps();
}

KAI float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* s[a][b] = q[a] . r[b] over L elements. */
KAI void score_tile(uint32_t t, int L, const uint8_t *const r[2], const float rs[2], const uint16_t *const kp[2],
                    const float *const q[4], float s[4][2])
{
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
    for (int i0 = 0; i0 < L; i0 += 32) {
        const __m256 d0 = scale8(t, r[0], i0, rs[0]), d1 = scale8(t, r[1], i0, rs[1]);
#pragma GCC unroll 4
        for (int i = i0; i < i0 + 32; i += 8) {
            const __m256 k0 = ld8(t, r[0], i, d0, kp[0]), k1 = ld8(t, r[1], i, d1, kp[1]);
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++) {
                const __m256 x = _mm256_loadu_ps(q[a] + i);
                acc[a][0] = _mm256_fmadd_ps(x, k0, acc[a][0]);
                acc[a][1] = _mm256_fmadd_ps(x, k1, acc[a][1]);
            }
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
        s[a][0] = hsum8(acc[a][0]);
        s[a][1] = hsum8(acc[a][1]);
    }
}

KAI void scores_t(uint32_t t, const attn_mla_kv *kv, const float *q, size_t qs, int nh, int j_begin, int j_end, float *sc,
                  size_t ld)
{
    for (int j0 = j_begin; j0 < j_end; j0 += 2) {
        const int nk = j_end - j0 < 2 ? j_end - j0 : 2;
        const uint8_t *r[2] = {attn_mla_row(kv, j0), attn_mla_row(kv, j0 + nk - 1)};
        const float rs[2] = {attn_mla_row_scale(kv, j0), attn_mla_row_scale(kv, j0 + nk - 1)};
        const bool kivi = attn_mla_kivi_bits(t) != 0; /* t is the function's constant */
        const uint16_t *kp[2] = {kivi ? attn_mla_row_kivi(kv, j0) : NULL, kivi ? attn_mla_row_kivi(kv, j0 + nk - 1) : NULL};
        for (int h0 = 0; h0 < nh; h0 += 4) {
            const int na = nh - h0 < 4 ? nh - h0 : 4;
            const float *qq[4];
            for (int a = 0; a < 4; a++) qq[a] = q + (size_t)(h0 + (a < na ? a : na - 1)) * qs;
            float s[4][2];
            score_tile(t, kv->row_len, r, rs, kp, qq, s);
            for (int a = 0; a < na; a++)
                for (int b = 0; b < nk; b++) sc[(size_t)(h0 + a) * ld + j0 + b] = s[a][b];
        }
    }
}

/* o[h][i..i+8) += sum_b p[h][b] r[b][i..i+8) for each 8 of the rank. */
KAI void values_tile(uint32_t t, int i0, int i1, const uint8_t *const *r, const float *rs, const uint16_t *const *kp,
                     int nk, const float *const p[8], float *const o[8])
{
    for (int i = i0; i < i1; i += 8) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int h = 0; h < 8; h++) acc[h] = _mm256_loadu_ps(o[h] + i);
        for (int b = 0; b < nk; b++) {
            const __m256 v = ld8(t, r[b], i, scale8(t, r[b], i, rs[b]), kp[b]);
#pragma GCC unroll 8
            for (int h = 0; h < 8; h++) acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(p[h][b]), v, acc[h]);
        }
#pragma GCC unroll 8
        for (int h = 0; h < 8; h++) _mm256_storeu_ps(o[h] + i, acc[h]);
    }
}

#define MLA_DRV_INLINE KAI
#define MLA_DRV_FN KA
#define MLA_DRV_NAME(x) x##avx2
#include "kernels/attention_mla_driver.h"

#else /* not x86: attn_avx2_available() is false, so these are never called */

void attn_mla_scores_avx2(const attn_mla_kv *kv, const float *q, size_t qs, int nh, int j0, int j1, float *sc,
                            size_t ld)
{
    (void)kv, (void)q, (void)qs, (void)nh, (void)j0, (void)j1, (void)sc, (void)ld;
}

void attn_mla_values_avx2(const attn_mla_kv *kv, const float *p, size_t ld, int nh, int j0, int j1, int i0, int i1,
                          float *out, size_t os, float *spare)
{
    (void)kv, (void)p, (void)ld, (void)nh, (void)j0, (void)j1, (void)i0, (void)i1, (void)out, (void)os, (void)spare;
}

#endif
