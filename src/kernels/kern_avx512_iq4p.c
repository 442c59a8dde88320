/* kern_avx512_iq4p.c - the AVX-512 (VNNI) GEMM on IQ4_XS weights packed at
 * load (kern_pack_iq4.c's layout: 8 rows a group, one lane per row).
 *
 * Per sub-block and activation row, the 8 rows' int32 lanes start at
 * -128 times the sub-block's activation sum (bsums 2j, 2j+1), then each of
 * the 4 nibble vectors gives two vectors of values + 128 (vpshufb, as
 * unsigned bytes 1..241) that vpdpbusd multiplies by a broadcast of the
 * 4 matching activation bytes; one vpmulld by the sub-block's scales
 * (vpmovsxbd of 8 bytes) and an add finish it. So sum (v + 128) y -
 * 128 sum y = sum v y exactly, no horizontal sum, no permute. Bounds:
 * |lane| <= 32 * 241 * 127 + 128 * 32 * 127 < 2^21 a sub-block, times
 * |sc| <= 32 and 8 sub-blocks < 2^29. Per super-block the float step is
 * the reference's, acc += (d * x.d) * (float)isum in 8 lanes, so the
 * rows are the reference's bits.
 *
 * ymm, not zmm: Zen 4 runs a zmm operation as two halves (the Q4_0 packed
 * tile was measured best with 8 rows there too, kern_dispatch.c), and 8
 * rows keep one layout for this tile and the AVX2 one.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE


#include "tensor/blocks.h"

K5AI void iq4p_tile(int NX, int n, float *y, size_t ys, const uint8_t *wp, int nw, const uint8_t *x, size_t xs)
{
    const int nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i tab = _mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values)),
                                        _mm256_set1_epi8(-128)); /* value + 128 as u8 */
    /* decode (NX = 1) streams the weights: the CPU's prefetch distance (kern_pf_stream) */
    const int pfd = NX == 1 ? kern_pf_stream : 0;
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *s = wp + (size_t)b * KERN_IQ4P_SLAB, *q = s + KERN_IQ4P_Q;
        /* past the group or the matrix too: a prefetch neither faults nor changes a value */
        for (int l = 0; pfd && l < KERN_IQ4P_SLAB / 64 + 1; l++) _mm_prefetch((const char *)s + pfd + 64 * l, _MM_HINT_T1);
        __m256i isum[KERN_NX_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) isum[r] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + KERN_IQ4P_SC + 8 * j)));
            __m256i a[KERN_NX_MAX];
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) {
                const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
                a[r] = _mm256_set1_epi32(-128 * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]));
            }
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(q + 32 * (4 * j + t)));
                const __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
#pragma GCC unroll 4
                for (int r = 0; r < NX; r++) {
                    const int8_t *xq = ((const block_q8_K *)(x + (size_t)r * xs) + b)->qs + 32 * j + 4 * t;
                    a[r] = _mm256_dpbusd_epi32(a[r], lo, k5_bcast4(xq));
                    a[r] = _mm256_dpbusd_epi32(a[r], hi, k5_bcast4(xq + 16));
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(a[r], sc));
        }
        const __m256 dw = _mm256_load_ps((const float *)(s + KERN_IQ4P_D));
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), _mm256_cvtepi32_ps(isum[r])));
        }
    }
    const __mmask8 keep = (__mmask8)((1u << nw) - 1);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) _mm256_mask_storeu_ps(y + (size_t)r * ys, keep, acc[r]);
}

static K5 void gemmp_iq4_xs_x512(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                                 const kern_px *px, int nx)
{
    (void)px;
    switch (nx) {
    case 1: iq4p_tile(1, n, y, ys, wp, nw, x, xs); break;
    case 2: iq4p_tile(2, n, y, ys, wp, nw, x, xs); break;
    case 3: iq4p_tile(3, n, y, ys, wp, nw, x, xs); break;
    default: iq4p_tile(4, n, y, ys, wp, nw, x, xs); break;
    }
}

void kern_avx512_fill_iq4p(kern_vtable *t)
{
    /* to_kpack: the AVX2 one (byte shuffles; the AVX-512 tables stack on AVX2's) */
    t->packed[DT_IQ4_XS] = (kern_packed){4, NULL, gemmp_iq4_xs_x512, 1, NULL, kern_iq4p_to_kpack_avx2};
}

#else

void kern_avx512_fill_iq4p(kern_vtable *t) { (void)t; }

#endif
