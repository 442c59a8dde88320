/* kern_avx512_q3kp.c - the AVX-512 (VNNI) GEMM on Q3_K weights packed at
 * load (kern_pack_q3k.c's layout: 8 rows a group, one lane per row).
 *
 * Per triple (two sub-blocks of 16 values), the three 32-byte vectors give
 * the eight vectors of u = q + 4 (0..7) by a shift and an AND each (the
 * two split ones: two shifts, a vpternlogd select and an AND); vpdpbusd
 * multiplies each by a broadcast of its 4 activation bytes, four into the
 * int32 lanes of sub-block 2i, four into 2i+1. Both sums fit in int16
 * (|.| <= 16 * 7 * 127), so one vpblendw makes them a pair per lane and
 * one vpdpwssd by the pair of scales (vpmovsxbw of 16 bytes) adds
 * sc_2i a_2i + sc_2i+1 a_2i+1 to the row's lane; a second vpdpwssd of the
 * scales by the bsums pair (one 4-byte broadcast) gathers sum sc_j bsums_j,
 * the + 4's correction, subtracted 4 times per super-block. Bounds: |isum|
 * <= 16 * 32 * 7 * 127 * 2 < 2^21. Per super-block the reference's float
 * step, acc += (d * x.d) * (float)isum in 8 lanes (d by vcvtph2ps, exact),
 * so the rows are the reference's bits.
 *
 * ymm, not zmm, for the reasons of kern_avx512_iq4p.c (Zen 4 halves a zmm
 * operation; one layout for this tile and the AVX2 one).
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE


#include "tensor/blocks.h"

/* (a & m) | (b & ~m), bit by bit */
#define Q3P_SELECT 0xE4

K5AI void q3p_tile(int NX, int n, float *y, size_t ys, const uint8_t *wp, int nw, const uint8_t *x, size_t xs)
{
    const int nb = n / QK_K;
    const __m256i m7 = _mm256_set1_epi8(7), m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    /* decode (NX = 1) streams the weights: the CPU's prefetch distance (kern_pf_stream) */
    const int pfd = NX == 1 ? kern_pf_stream : 0;
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *s = wp + (size_t)b * KERN_Q3P_SLAB;
        /* past the group or the matrix too: a prefetch neither faults nor changes a value */
        for (int l = 0; pfd && l < KERN_Q3P_SLAB / 64 + 1; l++) _mm_prefetch((const char *)s + pfd + 64 * l, _MM_HINT_T1);
        __m256i isum[KERN_NX_MAX], off[KERN_NX_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) isum[r] = off[r] = _mm256_setzero_si256();
        for (int i = 0; i < 8; i++) {
            const uint8_t *t = s + KERN_Q3P_D_BYTES + (size_t)i * KERN_Q3P_TRI;
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)t));
            const __m256i A = _mm256_loadu_si256((const __m256i *)(t + 16));
            const __m256i B = _mm256_loadu_si256((const __m256i *)(t + 48));
            const __m256i C = _mm256_loadu_si256((const __m256i *)(t + 80));
            __m256i u[8];
            u[0] = _mm256_and_si256(A, m7);
            u[1] = _mm256_and_si256(_mm256_srli_epi16(A, 3), m7);
            u[2] = _mm256_and_si256(B, m7);
            u[3] = _mm256_and_si256(_mm256_srli_epi16(B, 3), m7);
            u[4] = _mm256_and_si256(C, m7);
            u[5] = _mm256_and_si256(_mm256_srli_epi16(C, 3), m7);
            u[6] = _mm256_and_si256(_mm256_ternarylogic_epi32(_mm256_srli_epi16(A, 6), _mm256_srli_epi16(B, 4), m3, Q3P_SELECT), m7);
            u[7] = _mm256_and_si256(_mm256_ternarylogic_epi32(_mm256_srli_epi16(B, 7), _mm256_srli_epi16(C, 5), m1, Q3P_SELECT), m7);
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) {
                const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
                const int8_t *xq = xb->qs + 32 * i;
                __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int o = 0; o < 4; o++) {
                    a0 = _mm256_dpbusd_epi32(a0, u[o], k5_bcast4(xq + 4 * o));
                    a1 = _mm256_dpbusd_epi32(a1, u[4 + o], k5_bcast4(xq + 16 + 4 * o));
                }
                const __m256i pr = _mm256_blend_epi16(a0, _mm256_slli_epi32(a1, 16), 0xAA);
                isum[r] = _mm256_dpwssd_epi32(isum[r], pr, sc);
                off[r] = _mm256_dpwssd_epi32(off[r], sc, k5_bcast4(xb->bsums + 2 * i));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s));
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
            const __m256i tot = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(off[r], 2));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), _mm256_cvtepi32_ps(tot)));
        }
    }
    const __mmask8 keep = (__mmask8)((1u << nw) - 1);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) _mm256_mask_storeu_ps(y + (size_t)r * ys, keep, acc[r]);
}

static K5 void gemmp_q3_K_x512(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                               const kern_px *px, int nx)
{
    (void)px;
    switch (nx) {
    case 1: q3p_tile(1, n, y, ys, wp, nw, x, xs); break;
    case 2: q3p_tile(2, n, y, ys, wp, nw, x, xs); break;
    case 3: q3p_tile(3, n, y, ys, wp, nw, x, xs); break;
    default: q3p_tile(4, n, y, ys, wp, nw, x, xs); break;
    }
}

void kern_avx512_fill_q3kp(kern_vtable *t)
{
    /* to_kpack: the AVX2 one (the AVX-512 tables stack on AVX2's) */
    t->packed[DT_Q3_K] = (kern_packed){4, NULL, gemmp_q3_K_x512, 1, NULL, kern_q3p_to_kpack_avx2};
}

#else

void kern_avx512_fill_q3kp(kern_vtable *t) { (void)t; }

#endif
