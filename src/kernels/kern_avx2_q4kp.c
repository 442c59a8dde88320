/* kern_avx2_q4kp.c - the AVX2 GEMM on Q4_K weights packed at load
 * (kern_pack_q4k.c's layout: 8 rows a group, one lane per row), and the
 * AVX2 conversion of packed groups to kern_kpack.c's (to_kpack).
 *
 * AVX2 has no u8 x s8 dot into int32: vpmaddubsw of the nibbles (0..15) by
 * the broadcast activation bytes gives int16 pairs (|.| <= 2 * 15 * 127),
 * the eight of a sub-block add up in int16 (|.| <= 30480), and one
 * vpmaddwd by the scale as the pair (sc, sc) sums the row's pair into its
 * int32 lane already scaled. The min term is one vpmaddwd of (m, m) by the
 * sub-block's two bsums. Per super-block the reference's float steps,
 * acc += (d * x.d) * (float)isum, acc -= (dmin * x.d) * (float)msum, so the
 * rows are the reference's bits.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "kernels/kern_avx2_pack8.h"
#include "tensor/blocks.h"

#define KI2 __attribute__((target("avx2,fma,f16c")))
#define KI2I static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* Bytes 8 h .. 8 h + 7 at p as the int16 pairs (v, v) of the 8 lanes. */
KI2I __m256i q4p2_pairs(const uint8_t *p, int h)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    return _mm256_cvtepu8_epi16(h ? _mm_unpackhi_epi8(v, v) : _mm_unpacklo_epi8(v, v));
}

KI2I void q4p2_tile(int NX, int n, float *y, size_t ys, const uint8_t *wp, int nw, const uint8_t *x, size_t xs)
{
    const int nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[KERN_NX_MAX];
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *s = wp + (size_t)b * KERN_Q4P_SLAB;
        __m256i isum[KERN_NX_MAX], msum[KERN_NX_MAX];
        for (int r = 0; r < NX; r++) isum[r] = msum[r] = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = s + KERN_Q4P_HEAD + (size_t)g * KERN_Q4P_QUAD;
            __m256i p0[KERN_NX_MAX], p1[KERN_NX_MAX];
            for (int r = 0; r < NX; r++) p0[r] = p1[r] = _mm256_setzero_si256();
            for (int t = 0; t < 8; t++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(q + KERN_Q4P_Q + 32 * t));
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                for (int r = 0; r < NX; r++) {
                    const int8_t *xq = ((const block_q8_K *)(x + (size_t)r * xs) + b)->qs + 64 * g + 4 * t;
                    p0[r] = _mm256_add_epi16(p0[r], _mm256_maddubs_epi16(lo, pack8_bcast4(xq)));
                    p1[r] = _mm256_add_epi16(p1[r], _mm256_maddubs_epi16(hi, pack8_bcast4(xq + 32)));
                }
            }
            const __m256i sc0 = q4p2_pairs(q + KERN_Q4P_SC, 0), sc1 = q4p2_pairs(q + KERN_Q4P_SC, 1);
            for (int r = 0; r < NX; r++)
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(p0[r], sc0), _mm256_madd_epi16(p1[r], sc1)));
        }
        /* the min terms after the values: fewer registers live in the loop above */
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = s + KERN_Q4P_HEAD + (size_t)g * KERN_Q4P_QUAD;
            const __m256i mn0 = q4p2_pairs(q + KERN_Q4P_MIN, 0), mn1 = q4p2_pairs(q + KERN_Q4P_MIN, 1);
            for (int r = 0; r < NX; r++) {
                const int16_t *bs = ((const block_q8_K *)(x + (size_t)r * xs) + b)->bsums + 4 * g;
                msum[r] = _mm256_add_epi32(msum[r], _mm256_add_epi32(_mm256_madd_epi16(mn0, pack8_bcast4(bs)),
                                                                     _mm256_madd_epi16(mn1, pack8_bcast4(bs + 2))));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 16)));
        for (int r = 0; r < NX; r++) {
            const __m256 xd = _mm256_set1_ps(((const block_q8_K *)(x + (size_t)r * xs) + b)->d);
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(isum[r])));
            acc[r] = _mm256_sub_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dm, xd), _mm256_cvtepi32_ps(msum[r])));
        }
    }
    pack8_store_rows(y, ys, acc, NX, nw);
}

KI2 void kern_gemmp_q4_K_avx2(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                              const kern_px *px, int nx)
{
    (void)px;
    switch (nx) {
    case 1: q4p2_tile(1, n, y, ys, wp, nw, x, xs); break;
    case 2: q4p2_tile(2, n, y, ys, wp, nw, x, xs); break;
    case 3: q4p2_tile(3, n, y, ys, wp, nw, x, xs); break;
    default: q4p2_tile(4, n, y, ys, wp, nw, x, xs); break;
    }
}

/* kern_q4p_to_kpack_ref's bytes: the low and the high nibbles of vector t
 * of quad g of each group are the halves (rows 0..7, 8..15) of kern_kpack.c's
 * vectors 16 g + t and 16 g + 8 + t; the tail is kern_q4p_kpack_tail. */
KI2 void kern_q4p_to_kpack_avx2(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n)
{
    const int nb = n / QK_K, ng = nw > KERN_PACK_ROWS ? 2 : 1;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int b = 0; b < nb; b++) {
        uint8_t *s = dst + (size_t)b * KPACK_SLAB;
        for (int h = 0; h < 2; h++) {
            const uint8_t *sl = wp + (size_t)h * gb + (size_t)b * KERN_Q4P_SLAB + KERN_Q4P_HEAD + KERN_Q4P_Q;
            for (int g = 0; g < 4; g++)
                for (int t = 0; t < 8; t++) {
                    __m256i lo = _mm256_setzero_si256(), hi = lo;
                    if (h < ng) {
                        const __m256i v = _mm256_load_si256((const __m256i *)(sl + (size_t)g * KERN_Q4P_QUAD + 32 * t));
                        lo = _mm256_and_si256(v, m4);
                        hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                    }
                    _mm256_store_si256((__m256i *)(s + 64 * (16 * g + t) + 32 * h), lo);
                    _mm256_store_si256((__m256i *)(s + 64 * (16 * g + 8 + t) + 32 * h), hi);
                }
        }
        kern_q4p_kpack_tail(s, wp, gb, ng, b);
    }
}

#endif
