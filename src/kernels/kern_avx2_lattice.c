/* kern_avx2_lattice.c - AVX2 dots of the lattice i-quants (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) against Q8_K. The AVX2 table lists
 * them; the AVX-512 tables keep these.
 *
 * Per 32-element sub-block: the codebook entries are looked up (4 u64 or 8
 * u32 loads, quant_grids), the 32 signs become a byte mask (4 u64 loads of
 * quant_grids.signs7, or a byte shuffle of 4 sign bytes), and the signed
 * levels (quant_lattice_unpack's q, |q| <= 62) meet the activation ints in
 * maddubs (sign trick) and a madd with the scale codes of the two halves.
 * The super-block's integer sum is exact, and its float step is the
 * reference's (kern_ref_quants.c: d * dx * isum, d from the same powers of
 * two), so the bits are the reference's.
 *
 * A tile unpacks a weight sub-block once for its nx <= 4 activation rows.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "kernels/kern_avx2_hsum.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"
#include "tensor/quant_grids.h"

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

static inline uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* bit j of bits (element j negative) as byte j: 0xFF or 0. */
KAI __m256i sign_mask(uint32_t bits)
{
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

KAI __m256i with_signs(__m256i g, uint32_t bits)
{
    const __m256i m = sign_mask(bits);
    return _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
}

/* g with the signs of four 7-bit fields a..d (elements 0-7, ..., 24-31). */
KAI __m256i with_signs7(__m256i g, unsigned a, unsigned b, unsigned c, unsigned d)
{
    const uint64_t *S = quant_grids.signs7;
    const __m256i m = _mm256_set_epi64x((long long)S[d], (long long)S[c], (long long)S[b], (long long)S[a]);
    return _mm256_sub_epi8(_mm256_xor_si256(g, m), m);
}

/* Sub-block s of super-block b as 32 signed levels; *lo, *hi: the scale
 * codes of its elements 0..15 and 16..31. */
KAI __m256i unpack32(int T, const void *row, int b, int s, int *lo, int *hi)
{
    switch (T) {
    case DT_IQ2_XXS: {
        const block_iq2_xxs *x = (const block_iq2_xxs *)row + b;
        const uint32_t idx = ld32(x->qs + 4 * s), sg = ld32(x->qs + 4 * s + 2);
        const uint64_t *G = quant_grids.iq2xxs;
        *lo = *hi = (int)(2 * (sg >> 28) + 1);
        const __m256i g = _mm256_set_epi64x((long long)G[idx >> 24], (long long)G[(idx >> 16) & 255],
                                            (long long)G[(idx >> 8) & 255], (long long)G[idx & 255]);
        return with_signs7(g, sg & 127, sg >> 7 & 127, sg >> 14 & 127, sg >> 21 & 127);
    }
    case DT_IQ2_XS: {
        const block_iq2_xs *x = (const block_iq2_xs *)row + b;
        const uint16_t *q = x->qs + 4 * s;
        const uint64_t *G = quant_grids.iq2xs;
        *lo = 2 * (x->scales[s] & 0xF) + 1, *hi = 2 * (x->scales[s] >> 4) + 1;
        const __m256i g = _mm256_set_epi64x((long long)G[q[3] & 511], (long long)G[q[2] & 511],
                                            (long long)G[q[1] & 511], (long long)G[q[0] & 511]);
        return with_signs7(g, q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9);
    }
    case DT_IQ2_S: {
        const block_iq2_s *x = (const block_iq2_s *)row + b;
        const uint8_t *q = x->qs + 4 * s;
        const unsigned h = x->qh[s];
        const uint64_t *G = quant_grids.iq2s;
        *lo = 2 * (x->scales[s] & 0xF) + 1, *hi = 2 * (x->scales[s] >> 4) + 1;
        const __m256i g = _mm256_set_epi64x((long long)G[q[3] | (h << 2 & 0x300)], (long long)G[q[2] | (h << 4 & 0x300)],
                                            (long long)G[q[1] | (h << 6 & 0x300)], (long long)G[q[0] | (h << 8 & 0x300)]);
        return with_signs(g, ld32(x->qs + QK_K / 8 + 4 * s));
    }
    case DT_IQ3_XXS: {
        const block_iq3_xxs *x = (const block_iq3_xxs *)row + b;
        const uint8_t *q = x->qs + 8 * s;
        const uint32_t sg = ld32(x->qs + QK_K / 4 + 4 * s), *G = quant_grids.iq3xxs;
        *lo = *hi = (int)(2 * (sg >> 28) + 1);
        const __m256i g = _mm256_set_epi32((int)G[q[7]], (int)G[q[6]], (int)G[q[5]], (int)G[q[4]], (int)G[q[3]],
                                           (int)G[q[2]], (int)G[q[1]], (int)G[q[0]]);
        return with_signs7(g, sg & 127, sg >> 7 & 127, sg >> 14 & 127, sg >> 21 & 127);
    }
    case DT_IQ3_S: {
        const block_iq3_s *x = (const block_iq3_s *)row + b;
        const uint8_t *q = x->qs + 8 * s;
        const unsigned h = x->qh[s];
        const uint32_t *G = quant_grids.iq3s;
        *lo = *hi = 1 + 2 * ((x->scales[s / 2] >> (4 * (s & 1))) & 0xF);
#define I3(i) (int)G[q[i] | ((h >> (i)) & 1) << 8]
        const __m256i g = _mm256_set_epi32(I3(7), I3(6), I3(5), I3(4), I3(3), I3(2), I3(1), I3(0));
#undef I3
        return with_signs(g, ld32(x->signs + 4 * s));
    }
    case DT_IQ1_S: {
        const block_iq1_s *x = (const block_iq1_s *)row + b;
        const uint8_t *q = x->qs + 4 * s;
        const unsigned h = x->qh[s];
        const uint64_t *G = quant_grids.iq1s;
        *lo = *hi = (int)(2 * ((h >> 12) & 7) + 1);
        const __m256i g = _mm256_set_epi64x((long long)G[q[3] | (h >> 9 & 7) << 8], (long long)G[q[2] | (h >> 6 & 7) << 8],
                                            (long long)G[q[1] | (h >> 3 & 7) << 8], (long long)G[q[0] | (h & 7) << 8]);
        const __m256i g2 = _mm256_add_epi8(g, g), g4 = _mm256_add_epi8(g2, g2);
        return _mm256_add_epi8(_mm256_add_epi8(g4, g4), _mm256_set1_epi8(h & 0x8000 ? -1 : 1));
    }
    default: { /* DT_IQ1_M */
        const block_iq1_m *x = (const block_iq1_m *)row + b;
        const uint8_t *q = x->qs + 4 * s, h0 = x->qh[2 * s], h1 = x->qh[2 * s + 1];
        uint16_t sc[4];
        memcpy(sc, x->scales, 8);
        const uint64_t *G = quant_grids.iq1s;
        *lo = 2 * ((sc[s / 2] >> (6 * (s % 2))) & 7) + 1;
        *hi = 2 * ((sc[s / 2] >> (6 * (s % 2) + 3)) & 7) + 1;
        const __m256i g = _mm256_set_epi64x((long long)G[q[3] | (h1 << 4 & 0x700)], (long long)G[q[2] | (h1 << 8 & 0x700)],
                                            (long long)G[q[1] | (h0 << 4 & 0x700)], (long long)G[q[0] | (h0 << 8 & 0x700)]);
        const long long m = -1, p = 0x0101010101010101LL;
        const __m256i delta = _mm256_set_epi64x(h1 & 0x80 ? m : p, h1 & 0x08 ? m : p, h0 & 0x80 ? m : p, h0 & 0x08 ? m : p);
        const __m256i g2 = _mm256_add_epi8(g, g), g4 = _mm256_add_epi8(g2, g2);
        return _mm256_add_epi8(_mm256_add_epi8(g4, g4), delta);
    }
    }
}

/* One weight row against NX activation rows (Q8_K, x + r * xs). */
KAI void lat_tile(int T, int NX, int n, float *s, size_t ss, const void *w, const uint8_t *x, size_t xs)
{
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int b = 0; b < n / QK_K; b++) {
        __m256i isum[4];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) isum[r] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            int lo, hi;
            const __m256i q = unpack32(T, w, b, j, &lo, &hi);
            const __m256i sc = _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
            const __m256i aq = _mm256_sign_epi8(q, q);
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) {
                const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
                const __m256i y = _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * j));
                isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(y, q)), sc));
            }
        }
        const float d = quant_lattice_d((uint32_t)T, w, b);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
            acc[r] += d * xb->d * (float)kavx2_hsum_i32(isum[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = acc[r];
}

#define LAT_TILES(name, T) KERN_ROW_TILES(KA, kern_gemm_##name##_avx2, kern_dot_##name##_avx2, lat_tile, T)

LAT_TILES(iq2_xxs, DT_IQ2_XXS)
LAT_TILES(iq2_xs, DT_IQ2_XS)
LAT_TILES(iq2_s, DT_IQ2_S)
LAT_TILES(iq3_xxs, DT_IQ3_XXS)
LAT_TILES(iq3_s, DT_IQ3_S)
LAT_TILES(iq1_s, DT_IQ1_S)
LAT_TILES(iq1_m, DT_IQ1_M)

#endif
