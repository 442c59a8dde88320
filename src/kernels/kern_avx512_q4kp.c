/* kern_avx512_q4kp.c - the AVX-512 (VNNI) GEMM on Q4_K weights packed at
 * load (kern_pack_q4k.c's layout: 8 rows a group, one lane per row).
 *
 * Per quad (sub-blocks 2g, 2g + 1), each of the 8 vectors gives its low
 * nibbles by one AND and its high ones by a shift and an AND; vpdpbusd
 * multiplies each by a broadcast of its 4 activation bytes, into the int32
 * lanes of sub-block 2g (low) and 2g + 1 (high). A sub-block's sum may
 * pass int16 (32 * 15 * 127), so each is scaled by vpmulld with the
 * sub-block's scales widened to int32 (|isum| <= 8 * 63 * 60960 < 2^25).
 * The min term is one vpdpwssd per sub-block of the pairs (m, m) by its
 * two bsums (one 4-byte broadcast). Per super-block the reference's float
 * steps, acc += (d * x.d) * (float)isum, acc -= (dmin * x.d) *
 * (float)msum in 8 lanes (d and dmin by vcvtph2ps, exact), so the rows are
 * the reference's bits.
 *
 * ymm, not zmm, for the reasons of kern_avx512_iq4p.c (Zen 4 halves a zmm
 * operation; one layout for this tile and the AVX2 one).
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <string.h>

#include "tensor/blocks.h"

/* Bytes 8 h .. 8 h + 7 at p as the int16 pairs (v, v) of the 8 lanes. */
K5AI __m256i q4p5_pairs(const uint8_t *p, int h)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    return _mm256_cvtepu8_epi16(h ? _mm_unpackhi_epi8(v, v) : _mm_unpacklo_epi8(v, v));
}

K5AI void q4p5_tile(int NX, int n, float *y, size_t ys, const uint8_t *wp, int nw, const uint8_t *x, size_t xs)
{
    const int nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    /* decode (NX = 1) streams the weights: the CPU's prefetch distance (kern_pf_stream) */
    const int pfd = NX == 1 ? kern_pf_stream : 0;
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *s = wp + (size_t)b * KERN_Q4P_SLAB;
        /* past the group or the matrix too: a prefetch neither faults nor changes a value */
        for (int l = 0; pfd && l < KERN_Q4P_SLAB / 64 + 1; l++) _mm_prefetch((const char *)s + pfd + 64 * l, _MM_HINT_T1);
        __m256i isum[KERN_NX_MAX], msum[KERN_NX_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) isum[r] = msum[r] = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const uint8_t *q = s + KERN_Q4P_HEAD + (size_t)g * KERN_Q4P_QUAD;
            __m256i a0[KERN_NX_MAX], a1[KERN_NX_MAX];
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) a0[r] = a1[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int t = 0; t < 8; t++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(q + KERN_Q4P_Q + 32 * t));
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
                for (int r = 0; r < NX; r++) {
                    const int8_t *xq = ((const block_q8_K *)(x + (size_t)r * xs) + b)->qs + 64 * g + 4 * t;
                    a0[r] = _mm256_dpbusd_epi32(a0[r], lo, k5_bcast4(xq));
                    a1[r] = _mm256_dpbusd_epi32(a1[r], hi, k5_bcast4(xq + 32));
                }
            }
            const __m256i sc0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + KERN_Q4P_SC)));
            const __m256i sc1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + KERN_Q4P_SC + 8)));
            const __m256i mn0 = q4p5_pairs(q + KERN_Q4P_MIN, 0), mn1 = q4p5_pairs(q + KERN_Q4P_MIN, 1);
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) {
                const int16_t *bs = ((const block_q8_K *)(x + (size_t)r * xs) + b)->bsums + 4 * g;
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_mullo_epi32(a0[r], sc0), _mm256_mullo_epi32(a1[r], sc1)));
                msum[r] = _mm256_dpwssd_epi32(msum[r], mn0, k5_bcast4(bs));
                msum[r] = _mm256_dpwssd_epi32(msum[r], mn1, k5_bcast4(bs + 2));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 16)));
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const __m256 xd = _mm256_set1_ps(((const block_q8_K *)(x + (size_t)r * xs) + b)->d);
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(isum[r])));
            acc[r] = _mm256_sub_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dm, xd), _mm256_cvtepi32_ps(msum[r])));
        }
    }
    const __mmask8 keep = (__mmask8)((1u << nw) - 1);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) _mm256_mask_storeu_ps(y + (size_t)r * ys, keep, acc[r]);
}

static K5 void gemmp_q4_K_x512(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                               const kern_px *px, int nx)
{
    (void)px;
    switch (nx) {
    case 1: q4p5_tile(1, n, y, ys, wp, nw, x, xs); break;
    case 2: q4p5_tile(2, n, y, ys, wp, nw, x, xs); break;
    case 3: q4p5_tile(3, n, y, ys, wp, nw, x, xs); break;
    default: q4p5_tile(4, n, y, ys, wp, nw, x, xs); break;
    }
}

void kern_avx512_fill_q4kp(kern_vtable *t)
{
    /* to_kpack: the AVX2 one (the AVX-512 tables stack on AVX2's) */
    t->packed[DT_Q4_K] = (kern_packed){4, NULL, gemmp_q4_K_x512, 1, NULL, kern_q4p_to_kpack_avx2};
}

#else

void kern_avx512_fill_q4kp(kern_vtable *t) { (void)t; }

#endif
