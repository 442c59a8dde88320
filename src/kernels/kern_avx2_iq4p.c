/* kern_avx2_iq4p.c - the AVX2 GEMM on IQ4_XS weights packed at load
 * (kern_pack_iq4.c's layout: 8 rows a group, one lane per row), and the
 * AVX2 conversion of packed groups to kern_kpack.c's (to_kpack).
 *
 * AVX2 has no u8 x s8 dot into int32, and values + 128 (up to 241) times
 * an activation overflow maddubs' int16 pairs, so the tile takes the
 * signed values: maddubs(|v|, sign(y, v)) (|v|, |y| <= 127: a pair stays
 * below 2^15), then vpmaddwd by the sub-block's scales as int16 pairs
 * (sc, sc), which sums the pair into the row's int32 lane already scaled.
 * Per super-block the reference's float step, acc += (d * x.d) *
 * (float)isum, so the rows are the reference's bits.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "kernels/kern_avx2_pack8.h"
#include "tensor/blocks.h"

#define KI2 __attribute__((target("avx2,fma,f16c")))
#define KI2I static inline __attribute__((always_inline, target("avx2,fma,f16c")))

KI2I void iq4p2_tile(int NX, int n, float *y, size_t ys, const uint8_t *wp, int nw, const uint8_t *x, size_t xs)
{
    const int nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    __m256 acc[KERN_NX_MAX];
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *s = wp + (size_t)b * KERN_IQ4P_SLAB, *q = s + KERN_IQ4P_Q;
        __m256i isum[KERN_NX_MAX];
        for (int r = 0; r < NX; r++) isum[r] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m128i s8 = _mm_loadl_epi64((const __m128i *)(s + KERN_IQ4P_SC + 8 * j));
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8)); /* (sc, sc) per lane */
            for (int t = 0; t < 4; t++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(q + 32 * (4 * j + t)));
                const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                const __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
                for (int r = 0; r < NX; r++) {
                    const int8_t *xq = ((const block_q8_K *)(x + (size_t)r * xs) + b)->qs + 32 * j + 4 * t;
                    const __m256i plo = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(pack8_bcast4(xq), lo));
                    const __m256i phi = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(pack8_bcast4(xq + 16), hi));
                    /* each pair by itself: two pairs may reach 4 * 127 * 127 > 2^15 */
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(plo, sc), _mm256_madd_epi16(phi, sc)));
                }
            }
        }
        const __m256 dw = _mm256_load_ps((const float *)(s + KERN_IQ4P_D));
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), _mm256_cvtepi32_ps(isum[r])));
        }
    }
    pack8_store_rows(y, ys, acc, NX, nw);
}

KI2 void kern_gemmp_iq4_xs_avx2(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                                const kern_px *px, int nx)
{
    (void)px;
    switch (nx) {
    case 1: iq4p2_tile(1, n, y, ys, wp, nw, x, xs); break;
    case 2: iq4p2_tile(2, n, y, ys, wp, nw, x, xs); break;
    case 3: iq4p2_tile(3, n, y, ys, wp, nw, x, xs); break;
    default: iq4p2_tile(4, n, y, ys, wp, nw, x, xs); break;
    }
}

/* kern_iq4p_to_kpack_ref's bytes: per nibble vector of each group, its
 * low and its high nibbles looked up as values + 128 are the halves
 * (rows 0..7, 8..15) of two kern_kpack.c vectors; the tail (scales, pairs,
 * d) as there, in plain C. */
KI2 void kern_iq4p_to_kpack_avx2(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n)
{
    const int nb = n / QK_K, ng = nw > KERN_PACK_ROWS ? 2 : 1;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i tab = _mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values)),
                                        _mm256_set1_epi8(-128));
    for (int b = 0; b < nb; b++) {
        uint8_t *s = dst + (size_t)b * KPACK_SLAB;
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = wp + (size_t)h * gb + (size_t)b * KERN_IQ4P_SLAB + KERN_IQ4P_Q;
            for (int v = 0; v < 32; v++) {
                const int j = v / 4, t = v % 4;
                __m256i lo = _mm256_setzero_si256(), hi = lo;
                if (h < ng) {
                    const __m256i w = _mm256_load_si256((const __m256i *)(q + 32 * v));
                    lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(w, m4));
                    hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(w, 4), m4));
                }
                _mm256_store_si256((__m256i *)(s + 64 * (8 * j + t) + 32 * h), lo);
                _mm256_store_si256((__m256i *)(s + 64 * (8 * j + 4 + t) + 32 * h), hi);
            }
        }
        memset(s + KPACK_SC, 0, KPACK_SLAB - KPACK_SC);
        for (int c = 0; c < ng * KERN_PACK_ROWS; c++) {
            const uint8_t *sl = wp + (size_t)(c / KERN_PACK_ROWS) * gb + (size_t)b * KERN_IQ4P_SLAB;
            const int cc = c % KERN_PACK_ROWS;
            for (int j = 0; j < 8; j++) {
                const int8_t sc = (int8_t)sl[KERN_IQ4P_SC + 8 * j + cc];
                const int16_t pr = (int16_t)(-128 * sc);
                s[KPACK_SC + 16 * j + c] = (uint8_t)sc;
                memcpy(s + KPACK_PAIRS + 64 * j + 4 * c, &pr, 2);
                memcpy(s + KPACK_PAIRS + 64 * j + 4 * c + 2, &pr, 2);
            }
            memcpy(s + KPACK_D + 4 * c, sl + KERN_IQ4P_D + 4 * cc, 4);
        }
    }
}

#endif
