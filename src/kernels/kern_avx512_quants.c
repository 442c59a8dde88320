/* kern_avx512_quants.c - AVX-512 (VNNI) kernels of the block formats
 * beside Q8_0/Q4_0/Q4_K/Q6_K: Q5_K and IQ4_XS against Q8_K, GEMM tiles and
 * decode dots.
 * Q4_1, Q5_0, Q5_1 and IQ4_NL have theirs in kern_avx512_legacy.c; Q2_K,
 * Q3_K and TQ2_0 in kern_avx512_lowbit.c.
 *
 * Q5_K is Q4_K with a fifth bit per weight, so its tile is Q4_K's
 * (kern_avx512_kquant.c, whose header has the reasoning): 64 weights a zmm
 * as unsigned bytes (0..31; vpdpbusd sums of 4 stay below 4 * 31 * 127 <
 * 2^15, so packs to int16 is exact), the sub-block scales applied by
 * vpdpwssd after vpermw, the mins from the activation's bsums. qh[l] holds
 * bit 2k of element 64k + l and bit 2k + 1 of element 64k + 32 + l: one
 * broadcast of qh shifted per 256-bit half (srlv) gives both.
 *
 * Numerics: the reference's exact integer sum per super-block, spread over
 * 8 lanes; float accumulation in 8 lanes across super-blocks, one
 * horizontal sum (within rounding of the reference). One code path per
 * element whatever nx (kern_impl.h's invariants). IQ4_XS's decode dot is
 * a tile of its own (iq4_xs_dot_tile: levels + 128 in vpdpbusd), so its
 * rows differ from its GEMM's within rounding, as kern_impl.h allows for
 * decode dots.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <string.h>

#include "tensor/blocks.h"

K5AI float q5k_hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* int16 vector: lo in the low 256 bits, hi in the high 256 bits. */
K5AI __m512i q5k_halves_epi16(short lo, short hi)
{
    return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

/* The 8 six-bit scales and 8 mins of a Q4_K/Q5_K block as 16 bytes
 * sc[0..7] m[0..7] (blocks.h's packing). */
K5AI __m128i q5k_scales_mins(const uint8_t *s12)
{
    uint32_t a, b, c;
    memcpy(&a, s12, 4), memcpy(&b, s12 + 4, 4), memcpy(&c, s12 + 8, 4);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t sc03 = a & lo6, m03 = b & lo6;
    const uint32_t sc47 = (c & lo4) | (((a >> 6) & lo2) << 4);
    const uint32_t m47 = ((c >> 4) & lo4) | (((b >> 6) & lo2) << 4);
    return _mm_setr_epi32((int)sc03, (int)sc47, (int)m03, (int)m47);
}

/* One Q5_K weight row against NX Q8_K rows (x as bytes, xs apart). q[k]:
 * elements 64k..64k+63, sub-block 2k in the low 256 bits, 2k+1 in the
 * high ones; packs(d[2p], d[2p+1]) and the vpermw controls as Q4_K's. */
K5AI void q5_K_tile(int NX, int nb, float *s, size_t ss, const block_q5_K *w, const uint8_t *x, size_t xs)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m1 = _mm512_set1_epi8(1);
    const __m512i nib = q5k_halves_epi16(0, 4);
    __m512i pick[2];
    for (int p = 0; p < 2; p++) {
        short v[32];
        for (int i = 0; i < 32; i++) v[i] = (short)(4 * p + 2 * (i % 8 >= 4) + i / 16);
        pick[p] = _mm512_loadu_si512((const void *)v);
    }
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q5_K *wb = &w[b];
        const __m128i sm = q5k_scales_mins(wb->scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm));
        const __m128i mn8 = _mm_unpackhi_epi64(sm, sm);
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8)); /* m[j/2] for bsum j */
        const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)wb->qh));
        __m512i q[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i qb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k)));
            const __m512i hi = _mm512_and_si512(_mm512_srlv_epi16(hb, q5k_halves_epi16((short)(2 * k), (short)(2 * k + 1))), m1);
            q[k] = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(qb, nib), m4), _mm512_slli_epi16(hi, 4));
        }
        const __m512i scv0 = _mm512_permutexvar_epi16(pick[0], sc16), scv1 = _mm512_permutexvar_epi16(pick[1], sc16);
        const __m256 dw = _mm256_broadcast_ss(&kern_f16_lut[wb->d]), dm = _mm256_broadcast_ss(&kern_f16_lut[wb->dmin]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            __m512i d[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                d[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[k], _mm512_loadu_si512((const void *)(xb->qs + 64 * k)));
            __m512i isum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(d[0], d[1]), scv0);
            isum = _mm512_dpwssd_epi32(isum, _mm512_packs_epi32(d[2], d[3]), scv1);
            const __m256 xd = _mm256_broadcast_ss(&xb->d);
            const __m256i i8 = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
            const __m256i ms = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), mins16);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(i8), acc[r]);
            acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, xd), _mm256_cvtepi32_ps(ms), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = q5k_hsum_ps(acc[r]);
}

/* IQ4_XS's 8 six-bit scales minus 32 as int32 (block_iq4_xs_scale's
 * layout: low 4 bits of scale j in scales_l[j / 2], nibble j % 2; high 2
 * bits at bit 2j of scales_h), in registers. */
K5AI __m256i iq4_xs_scales32(const block_iq4_xs *wb)
{
    uint32_t l;
    memcpy(&l, wb->scales_l, 4);
    const __m128i lv = _mm_cvtsi32_si128((int)l), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_unpacklo_epi8(_mm_and_si128(lv, m4), _mm_and_si128(_mm_srli_epi16(lv, 4), m4)); /* byte j */
    const __m256i h = _mm256_srlv_epi32(_mm256_set1_epi32(wb->scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(3)), 4);
    return _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(lo), hi), _mm256_set1_epi32(32));
}

/* IQ4_XS GEMM tile (nx <= 4 rows against one weight row): per pair of
 * sub-blocks (2p, 2p+1) one zmm of 64 table values
 * (128-bit lanes: low nibbles of sub-block 2p, its high nibbles, then
 * 2p+1's), signed, so the AVX2 sign trick with maddubs (|q| <= 127,
 * |y| <= 127: exact int16 pairs) and vpdpwssd with the two sub-block
 * scales (one per 256-bit half). The decode dot below has half the
 * vector operations per row, but its activations are gathered per row
 * (vpermt2q) and its scales go on by vpmulld: at nx = 4 (m = 16, 2048 x
 * 5632, one thread) it was 1.16x slower than this tile. */
K5AI void iq4_xs_gemm_tile(int NX, int nb, float *s, size_t ss, const block_iq4_xs *w, const uint8_t *x, size_t xs)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    const __m512i nib = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_setr_epi64x(0, 0, 4, 4)),
                                           _mm256_setr_epi64x(0, 0, 4, 4), 1); /* per 64-bit: shift 0 or 4 */
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_iq4_xs *wb = &w[b];
        __m512i q[4], sc[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(wb->qs + 32 * p)));
            const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(wb->qs + 32 * p + 16)));
            const __m512i d = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
            q[p] = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srlv_epi64(d, nib), m4));
            sc[p] = q5k_halves_epi16((short)(block_iq4_xs_scale(2 * p, wb) - 32), (short)(block_iq4_xs_scale(2 * p + 1, wb) - 32));
        }
        const __m256 dw = _mm256_broadcast_ss(&kern_f16_lut[wb->d]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                const __m512i y = _mm512_loadu_si512((const void *)(xb->qs + 64 * p));
                const __m512i sy = _mm512_mask_sub_epi8(y, _mm512_cmplt_epi8_mask(q[p], zero), zero, y);
                isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(_mm512_abs_epi8(q[p]), sy), sc[p]);
            }
            const __m256i i8 = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&xb->d)), _mm256_cvtepi32_ps(i8), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = q5k_hsum_ps(acc[r]);
}

/* IQ4_XS, per half j of a super-block (sub-blocks 4j..4j+3, whose 16
 * bytes each hold elements 0..15 in the low nibbles, 16..31 in the high):
 * one 64-byte load of the quants; its low nibbles give one zmm whose
 * 128-bit lane L is elements 0..15 of sub-block 4j + L, its high nibbles
 * another with elements 16..31, both looked up (vpshufb) as levels + 128,
 * unsigned bytes 1..241. The activations go against them gathered to the
 * same order (two vpermt2q a half and row), and vpdpbusd sums both into one
 * vector whose lane L holds sub-block 4j + L only. |.| <= 8 * 241 * 127
 * per int32, too large for int16 (the other tiles' vpdpwssd of scales),
 * so the two halves' vectors fold by unpacks into one whose int32 i of
 * lane L is sub-block L + 4 (i % 2), and one vpmulld a super-block and
 * row applies the scales (one per 64 weights cost a quarter of the tile).
 * The + 128 comes back from the activation's bsums (sums of 16) in one
 * vpdpwssd with -128 * (sc - 32) per bsum (|.| <= 4096). Exact: a
 * sub-block's sum is below 32 * 241 * 127 < 2^20, times |sc - 32| <= 32
 * and 8 sub-blocks, below 2^28. Against the GEMM tile above as the
 * decode dot: about half its vector operations per row, 1.22x faster at
 * m = 1 (2048 x 5632, one thread, in cache); the scales unpacked in
 * registers, not by 8 scalar extractions. */
K5AI void iq4_xs_dot_tile(int NX, int nb, float *s, size_t ss, const block_iq4_xs *w, const uint8_t *x, size_t xs)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i tab = _mm512_add_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4nl_values)),
                                        _mm512_set1_epi8(-128)); /* level + 128 as u8 */
    /* vpermt2q controls over 128 activations (qwords 0..15): lane L gets
     * elements 32L + 0..15 (lo) or 32L + 16..31 (hi) */
    const __m512i ylo = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), yhi = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
    /* vpermd control: int32 i of lane L gets sc[L + 4 (i % 2)] */
    const __m512i pick = _mm512_setr_epi32(0, 4, 0, 4, 1, 5, 1, 5, 2, 6, 2, 6, 3, 7, 3, 7);
    /* vpermw control: int16 i (bsum i) gets sc[i / 2] (the low half of int32 i / 2) */
    const __m256i pick_bs = _mm256_setr_epi16(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_iq4_xs *wb = &w[b];
        const __m256i sc8 = iq4_xs_scales32(wb);
        const __m512i sc = _mm512_permutexvar_epi32(pick, _mm512_castsi256_si512(sc8));
        __m512i lo[2], hi[2];
#pragma GCC unroll 2
        for (int j = 0; j < 2; j++) {
            const __m512i v = _mm512_loadu_si512((const void *)(wb->qs + 64 * j));
            lo[j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(v, m4));
            hi[j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        }
        /* -128 (sc - 32) per bsum as int16 (the scales fit int16) */
        const __m256i off16 = _mm256_mullo_epi16(_mm256_permutexvar_epi16(pick_bs, sc8), _mm256_set1_epi16(-128));
        const __m256 dw = _mm256_broadcast_ss(&kern_f16_lut[wb->d]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            __m512i a[2];
#pragma GCC unroll 2
            for (int j = 0; j < 2; j++) {
                const __m512i y0 = _mm512_loadu_si512((const void *)(xb->qs + 128 * j));
                const __m512i y1 = _mm512_loadu_si512((const void *)(xb->qs + 128 * j + 64));
                a[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[j], _mm512_permutex2var_epi64(y0, ylo, y1));
                a[j] = _mm512_dpbusd_epi32(a[j], hi[j], _mm512_permutex2var_epi64(y0, yhi, y1));
            }
            const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
            const __m512i isum = _mm512_mullo_epi32(t, sc);
            __m256i i8 = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
            i8 = _mm256_dpwssd_epi32(i8, _mm256_loadu_si256((const __m256i *)xb->bsums), off16);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&xb->d)), _mm256_cvtepi32_ps(i8), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = q5k_hsum_ps(acc[r]);
}

KERN_KGEMM_DRIVER(gemm_iq4_xs_x512, K5, iq4_xs_gemm_tile, block_iq4_xs)
KERN_KDOT_DRIVER(dot_iq4_xs_x512, K5, iq4_xs_dot_tile, block_iq4_xs)
KERN_KGEMM_DRIVER(gemm_q5_K_x512, K5, q5_K_tile, block_q5_K)
KERN_KDOT_DRIVER(dot_q5_K_x512, K5, q5_K_tile, block_q5_K)

void kern_avx512_fill_quants(kern_vtable *t)
{
    t->gemm[DT_Q5_K] = (kern_gemm){gemm_q5_K_x512, 1, 4, NULL, 0};
    t->dot[DT_Q5_K] = dot_q5_K_x512;
    t->gemm[DT_IQ4_XS] = (kern_gemm){gemm_iq4_xs_x512, 1, 4, NULL, 0};
    t->dot[DT_IQ4_XS] = dot_iq4_xs_x512;
    kern_avx512_fill_legacy(t);
}

#else

void kern_avx512_fill_quants(kern_vtable *t) { kern_avx512_fill_legacy(t); }

#endif
