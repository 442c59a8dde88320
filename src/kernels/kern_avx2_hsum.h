/* kern_avx2_hsum.h - the integer horizontal sum the AVX2 super-block tiles
 * (kern_avx2_quants.c, kern_avx2_tq1.c) end each block with. Exact, so the
 * order of the adds does not matter for the reference's bits. */
#ifndef PAGELLM_KERN_AVX2_HSUM_H
#define PAGELLM_KERN_AVX2_HSUM_H

#include <immintrin.h>

static inline __attribute__((always_inline, target("avx2,fma,f16c"))) int kavx2_hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

#endif
