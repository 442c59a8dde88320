/* attention_mla_avx512.c - the latent attention's two passes with AVX-512
 * (attention_mla.h, attention_mla_impl.h).
 *
 * Scores: a tile of 4 heads x 4 rows, 16 accumulators of 16 lanes over the
 * row's elements; each row chunk is converted once in a register (f16 by
 * vcvtph2ps, bf16 by a shift, q8_0 and q4_0 as d x q, e5m2 and e4m3 as
 * halves, e4m3 times its block scale) and used by the 4 heads, each query
 * chunk by the 4 rows. Each (head, row) score is one FMA chain over
 * the chunks in order, then _mm512_reduce_add_ps: the same bits whatever
 * tile it falls in (short tiles repeat a real head or row).
 * Values: for 32 elements of the rank at a time, 8 heads x 2 vectors of
 * accumulators held in registers over a run of 16 rows, each row's 32
 * values converted once for the 8 heads; per output element one FMA chain
 * p_j x v_j, j ascending.
 */
#include "kernels/attention_mla_impl.h"

#include "kernels/attention.h"
#include "kernels/avx512_intrin.h"
#include "kernels/kern_impl.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#ifdef PL_HAVE_AVX512_CODE

/* attn_avx2_available also fills kern_f16_lut (the q8_0 scales). */
bool attn_mla_avx512_available(void) { return attn_avx2_available() && (kern_cpu_avx512() & KERN_X512_BASE) != 0; }

/* 16 e4m3 bytes as halves by the half trick (attention_impl.h; the x 256
 * is in the row scale), the NaN code S.1111.111 made a half NaN. */
K5AI __m256i e4m3_halves(__m128i x)
{
    const __m256i b = _mm256_cvtepi8_epi16(x);
    __m256i w = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16((short)0xBF80));
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7F80)), _mm256_set1_epi16(0x3F80));
    return _mm256_or_si256(w, _mm256_and_si256(nan, _mm256_set1_epi16(0x4000)));
}

/* 16 KIVI codes from the words w of the packed row: lane k takes word
 * idx[k] shifted down by sh[k], masked to the code's bits. */
K5AI __m512 kivi_codes(__m512i w, __m512i idx, __m512i sh, int mask)
{
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(idx, w), sh), _mm512_set1_epi32(mask)));
}

/* Elements i..i+31 of a row (i % 32 == 0) as two vectors of floats; rs:
 * attn_mla_row_scale (e4m3); kp: a KIVI row's block parameters. */
K5AI void ld32(uint32_t t, const uint8_t *r, int i, float rs, const uint16_t *kp, __m512 *v0, __m512 *v1)
{
    if (t == ATTN_MLA_KIVI4 || t == ATTN_MLA_KIVI2) { /* d x code + m, fused, 16 channels a vector */
        __m512 c0, c1;
        if (t == ATTN_MLA_KIVI4) { /* 16 bytes: words 0-1 hold elements 0..15, words 2-3 16..31 */
            const __m512i w = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r + i / 2)));
            const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
            c0 = kivi_codes(w, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), sh, 15);
            c1 = kivi_codes(w, _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), sh, 15);
        } else { /* 8 bytes: word 0 holds elements 0..15, word 1 16..31 */
            const __m512i w = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(r + i / 4)));
            const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            c0 = kivi_codes(w, _mm512_setzero_si512(), sh, 3);
            c1 = kivi_codes(w, _mm512_set1_epi32(1), sh, 3);
        }
        const uint16_t *d = attn_mla_kivi_d(kp, i), *m = attn_mla_kivi_m(kp, i);
        *v0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d)), c0,
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)m)));
        *v1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(d + 16))), c1,
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(m + 16))));
    } else if (t == ATTN_KV_FP8_E4M3) {
        const __m512 d = _mm512_set1_ps(rs);
        *v0 = _mm512_mul_ps(_mm512_cvtph_ps(e4m3_halves(_mm_loadu_si128((const __m128i *)(r + i)))), d);
        *v1 = _mm512_mul_ps(_mm512_cvtph_ps(e4m3_halves(_mm_loadu_si128((const __m128i *)(r + i + 16)))), d);
    } else if (t == ATTN_KV_FP8_E5M2) { /* the top byte of a half */
        *v0 = _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(r + i))), 8));
        *v1 = _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(r + i + 16))), 8));
    } else if (t == DT_F32) {
        *v0 = _mm512_loadu_ps((const float *)r + i);
        *v1 = _mm512_loadu_ps((const float *)r + i + 16);
    } else if (t == DT_F16) {
        const uint16_t *h = (const uint16_t *)r + i;
        *v0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
        *v1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + 16)));
    } else if (t == DT_BF16) {
        const uint16_t *h = (const uint16_t *)r + i;
        *v0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)h)), 16));
        *v1 = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + 16))), 16));
    } else if (t == DT_Q4_0) { /* low nibbles are elements 0..15, high ones 16..31, each q - 8 */
        const block_q4_0 *b = (const block_q4_0 *)r + i / 32;
        const __m512 d = _mm512_set1_ps(kern_f16_lut[b->d]);
        const __m128i x = _mm_loadu_si128((const __m128i *)b->qs), m = _mm_set1_epi8(0x0F), e = _mm_set1_epi8(8);
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(x, m), e), hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), m), e);
        *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d);
        *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d);
    } else {
        const block_q8_0 *b = (const block_q8_0 *)r + i / 32;
        const __m512 d = _mm512_set1_ps(kern_f16_lut[b->d]);
        *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->qs))), d);
        *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16)))), d);
    }
}

/* s[a][b] = q[a] . r[b] over L elements. */
K5AI void score_tile(uint32_t t, int L, const uint8_t *const r[4], const float rs[4], const uint16_t *const kp[4],
                     const float *const q[4], float s[4][4])
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) acc[a][b] = _mm512_setzero_ps();
    for (int i = 0; i < L; i += 32) {
        __m512 k0[4], k1[4];
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) ld32(t, r[b], i, rs[b], kp[b], &k0[b], &k1[b]);
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            const __m512 x = _mm512_loadu_ps(q[a] + i);
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) acc[a][b] = _mm512_fmadd_ps(x, k0[b], acc[a][b]);
        }
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            const __m512 x = _mm512_loadu_ps(q[a] + i + 16);
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) acc[a][b] = _mm512_fmadd_ps(x, k1[b], acc[a][b]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) s[a][b] = _mm512_reduce_add_ps(acc[a][b]);
}

K5AI void scores_t(uint32_t t, const attn_mla_kv *kv, const float *q, size_t qs, int nh, int j_begin, int j_end, float *sc,
                   size_t ld)
{
    for (int j0 = j_begin; j0 < j_end; j0 += 4) {
        const int nk = j_end - j0 < 4 ? j_end - j0 : 4;
        const uint8_t *r[4];
        float rs[4];
        const uint16_t *kp[4];
        for (int b = 0; b < 4; b++) {
            r[b] = attn_mla_row(kv, j0 + (b < nk ? b : nk - 1));
            rs[b] = attn_mla_row_scale(kv, j0 + (b < nk ? b : nk - 1));
            kp[b] = attn_mla_kivi_bits(t) ? attn_mla_row_kivi(kv, j0 + (b < nk ? b : nk - 1)) : NULL;
        }
        for (int h0 = 0; h0 < nh; h0 += 4) {
            const int na = nh - h0 < 4 ? nh - h0 : 4;
            const float *qq[4];
            for (int a = 0; a < 4; a++) qq[a] = q + (size_t)(h0 + (a < na ? a : na - 1)) * qs;
            float s[4][4];
            score_tile(t, kv->row_len, r, rs, kp, qq, s);
            for (int a = 0; a < na; a++)
                for (int b = 0; b < nk; b++) sc[(size_t)(h0 + a) * ld + j0 + b] = s[a][b];
        }
    }
}

/* Rows per values run: 16 rows of 512 f16 values are 16 KiB, within L1
 * while every head group passes over them. */
/* o[h][i..) += sum_b p[h][b] r[b][i..), 32 elements at a time, 8 heads. */
K5AI void values_tile(uint32_t t, int i0, int i1, const uint8_t *const *r, const float *rs, const uint16_t *const *kp,
                      int nk, const float *const p[8], float *const o[8])
{
    for (int i = i0; i < i1; i += 32) {
        __m512 acc[8][2];
#pragma GCC unroll 8
        for (int h = 0; h < 8; h++) {
            acc[h][0] = _mm512_loadu_ps(o[h] + i);
            acc[h][1] = _mm512_loadu_ps(o[h] + i + 16);
        }
        for (int b = 0; b < nk; b++) {
            __m512 v0, v1;
            ld32(t, r[b], i, rs[b], kp[b], &v0, &v1);
#pragma GCC unroll 8
            for (int h = 0; h < 8; h++) {
                const __m512 w = _mm512_set1_ps(p[h][b]);
                acc[h][0] = _mm512_fmadd_ps(w, v0, acc[h][0]);
                acc[h][1] = _mm512_fmadd_ps(w, v1, acc[h][1]);
            }
        }
#pragma GCC unroll 8
        for (int h = 0; h < 8; h++) {
            _mm512_storeu_ps(o[h] + i, acc[h][0]);
            _mm512_storeu_ps(o[h] + i + 16, acc[h][1]);
        }
    }
}

#define MLA_DRV_INLINE K5AI
#define MLA_DRV_FN K5
#define MLA_DRV_NAME(x) x##avx512
#include "kernels/attention_mla_driver.h"

#else /* not x86 */

bool attn_mla_avx512_available(void) { return false; }

void attn_mla_scores_avx512(const attn_mla_kv *kv, const float *q, size_t qs, int nh, int j0, int j1, float *sc,
                            size_t ld)
{
    (void)kv, (void)q, (void)qs, (void)nh, (void)j0, (void)j1, (void)sc, (void)ld;
}

void attn_mla_values_avx512(const attn_mla_kv *kv, const float *p, size_t ld, int nh, int j0, int j1, int i0, int i1,
                            float *out, size_t os, float *spare)
{
    (void)kv, (void)p, (void)ld, (void)nh, (void)j0, (void)j1, (void)i0, (void)i1, (void)out, (void)os, (void)spare;
}

#endif
