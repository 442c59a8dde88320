/* kern_avx512_lowbit.c - AVX-512 (VNNI) tiles of the 2- and 3-bit
 * super-block formats against Q8_K: Q3_K, Q2_K and TQ2_0, GEMM tiles and
 * decode dots (Q3_K from KERN_KPACK_MIN_M rows takes kern_avx512_kgemm.c).
 *
 * The three share one layout of the 2-bit levels (blocks.h): element
 * e = 128h + 32k + l has q = qs[32h + l] >> 2k & 3, and Q3_K's high bit is
 * hmask[l] bit 4h + k. One zmm holds the 64 elements 128h + 64p + (0..63):
 * the 32 bytes qs[32h..] broadcast to both 256-bit halves, shifted right by
 * 4p (low half: k = 2p) and 4p + 2 (high half: k = 2p + 1), and 3:
 *
 *   128-bit lane  0          1          2          3
 *   elements      +0..15     +16..31    +32..47    +48..63
 *   sub-block     8h+4p      8h+4p+1    8h+4p+2    8h+4p+3   (16 elements each)
 *
 * in the order of the Q8_K activations, so one 64-byte load of y goes
 * against it.
 * - The levels go in unsigned: Q3_K's as q + 4 (0..7: the hmask bit adds
 *   4 under a byte mask from vptestmb), Q2_K's and TQ2_0's as they are
 *   (0..3). vpdpbusd (u8 x s8) sums 4 products per int32 lane,
 *   |.| <= 4 * 7 * 127 < 2^15 (a Q8_K value is never -128).
 * - Q3_K/Q2_K: two such vectors packed to int16 (exact) and multiplied by
 *   the sub-block scales, placed per int16 by vpermw, with pairwise sums
 *   (vpdpwssd), as Q6_K's tile in kern_avx512_kquant.c. TQ2_0 has one
 *   scale per super-block: vpdpbusd accumulates.
 * - The offsets come from the activation's bsums (sums of 16,
 *   |.| <= 2032) in one 256-bit vpdpwssd: Q3_K's -4 * sc (the + 4 above),
 *   TQ2_0's -1 (levels q - 1). Q2_K's mins stay apart, scaled by dmin
 *   (the reference's d * isum - dmin * msum).
 *
 * Numerics as the other AVX-512 K-quant tiles: the reference's exact
 * integer sums per super-block, spread over 8 int32 lanes, then 8 float
 * lanes across super-blocks and one horizontal sum: within rounding of the
 * reference (test_kernels' TOL_SIMD_VS_REF), not its bits. The GEMM tile
 * and the decode dot are one function whose operations per element do not
 * depend on nx (kern_impl.h's invariants).
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <string.h>

#include "tensor/blocks.h"

enum { LB_Q2_K, LB_Q3_K, LB_TQ2_0 };

/* The GEMM tiles prefetch 2 KiB ahead into L1 (as kern_avx512_kquant.c);
 * the decode dots the CPU's stream distance into L2 (kern_pf_stream; none
 * where it is 0). */
#define LB_PF_GEMM 2048

K5AI float lb_hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

K5AI __m512i lb_halves_epi16(short lo, short hi)
{
    return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

K5AI __m512i lb_halves_epi8(char lo, char hi)
{
    return _mm512_inserti64x4(_mm512_set1_epi8(lo), _mm256_set1_epi8(hi), 1);
}

K5AI void lb_prefetch(const uint8_t *block, size_t bytes, int dist, bool l2)
{
    const uintptr_t a = (uintptr_t)block + (size_t)dist;
    for (uintptr_t l = a & ~(uintptr_t)63; l < a + bytes; l += 64) {
        if (l2) _mm_prefetch((const char *)l, _MM_HINT_T1);
        else _mm_prefetch((const char *)l, _MM_HINT_T0);
    }
}

/* Q3_K's 16 six-bit scales minus 32 as int16 (block_q3_K_scale's layout):
 * low 4 bits of scale j in byte j % 8 (high nibble if j >= 8), high 2
 * bits in byte 8 + j % 4 at bit 2 * (j / 4). In registers: a round trip
 * through memory costs a failed store forwarding per super-block. */
K5AI __m256i lb_q3_K_scales16(const uint8_t *sc)
{
    const __m128i a = _mm_loadl_epi64((const __m128i *)sc);
    uint32_t hw;
    memcpy(&hw, sc + 8, 4);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m256i lo = _mm256_cvtepu8_epi16(_mm_unpacklo_epi64(_mm_and_si128(a, m4), _mm_and_si128(_mm_srli_epi16(a, 4), m4)));
    const __m256i hb = _mm256_cvtepu8_epi16(_mm_set1_epi32((int)hw)); /* byte j % 4 at int16 j */
    const __m256i sh = _mm256_setr_epi16(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srlv_epi16(hb, sh), _mm256_set1_epi16(3)), 4);
    return _mm256_sub_epi16(_mm256_or_si256(lo, hi), _mm256_set1_epi16(32));
}

/* One weight row of format F (nb super-blocks at w) against NX Q8_K rows
 * (x as bytes, xs apart); prefetch pf bytes ahead (0: none), into L2 if l2. */
K5AI void lowbit_tile(int F, int pf, bool l2, int NX, int nb, float *s, size_t ss, const uint8_t *w,
                      const uint8_t *x, size_t xs)
{
    const size_t bs = F == LB_Q2_K ? sizeof(block_q2_K) : F == LB_Q3_K ? sizeof(block_q3_K) : sizeof(block_tq2_0);
    const size_t qs_at = F == LB_Q2_K   ? offsetof(block_q2_K, qs)
                         : F == LB_Q3_K ? offsetof(block_q3_K, qs)
                                        : offsetof(block_tq2_0, qs);
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    /* vpermw controls for half h: int16 i of 128-bit lane L gets
     * sc[8h + 4 * (i % 8 >= 4) + L] (packs(d[2h], d[2h + 1]) below) */
    __m512i pick[2];
    for (int h = 0; h < 2; h++) {
        short v[32];
        for (int i = 0; i < 32; i++) v[i] = (short)(8 * h + 4 * (i % 8 >= 4) + i / 8);
        pick[h] = _mm512_loadu_si512((const void *)v);
    }
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * bs;
        if (pf) lb_prefetch(wb, bs, pf, l2);
        __m512i q[4]; /* q[2h + p]: elements 128h + 64p + (0..63) */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i qb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb + qs_at + 32 * h)));
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++)
                q[2 * h + p] = _mm512_and_si512(_mm512_srlv_epi16(qb, lb_halves_epi16((short)(4 * p), (short)(4 * p + 2))), m3);
        }
        if (F == LB_Q3_K) {
            const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const block_q3_K *)wb)->hmask));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) { /* k = 2h + p: hmask bits 4h + 2p (low half), 4h + 2p + 1 (high) */
                const int bit = 4 * (k / 2) + 2 * (k % 2);
                const __mmask64 set = _mm512_test_epi8_mask(hm, lb_halves_epi8((char)(1 << bit), (char)(1 << (bit + 1))));
                q[k] = _mm512_mask_add_epi8(q[k], set, q[k], four);
            }
        }
        __m256i sc16 = _mm256_setzero_si256(), off16 = _mm256_setzero_si256(); /* scales, bsums' factors */
        if (F == LB_Q3_K) {
            sc16 = lb_q3_K_scales16(((const block_q3_K *)wb)->scales);
            off16 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 2)); /* -4 sc */
        } else if (F == LB_Q2_K) {
            const __m256i sb = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)((const block_q2_K *)wb)->scales));
            sc16 = _mm256_and_si256(sb, _mm256_set1_epi16(0xF));
            off16 = _mm256_srli_epi16(sb, 4); /* the mins */
        } else {
            off16 = _mm256_set1_epi16(-1);
        }
        __m512i scv[2];
        if (F != LB_TQ2_0) {
            const __m512i sc512 = _mm512_castsi256_si512(sc16);
            scv[0] = _mm512_permutexvar_epi16(pick[0], sc512);
            scv[1] = _mm512_permutexvar_epi16(pick[1], sc512);
        }
        uint16_t dh, mh = 0;
        memcpy(&dh, wb + (F == LB_Q2_K ? offsetof(block_q2_K, d) : F == LB_Q3_K ? offsetof(block_q3_K, d) : offsetof(block_tq2_0, d)), 2);
        if (F == LB_Q2_K) memcpy(&mh, wb + offsetof(block_q2_K, dmin), 2);
        const __m256 dw = _mm256_broadcast_ss(&kern_f16_lut[dh]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            __m512i isum = _mm512_setzero_si512();
            if (F == LB_TQ2_0) {
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++)
                    isum = _mm512_dpbusd_epi32(isum, q[k], _mm512_loadu_si512((const void *)(xb->qs + 64 * k)));
            } else {
                __m512i d[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++)
                    d[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[k], _mm512_loadu_si512((const void *)(xb->qs + 64 * k)));
                isum = _mm512_dpwssd_epi32(isum, _mm512_packs_epi32(d[0], d[1]), scv[0]);
                isum = _mm512_dpwssd_epi32(isum, _mm512_packs_epi32(d[2], d[3]), scv[1]);
            }
            __m256i i8 = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
            const __m256i bsums = _mm256_loadu_si256((const __m256i *)xb->bsums);
            const __m256 xd = _mm256_broadcast_ss(&xb->d);
            if (F == LB_Q2_K) {
                const __m256i ms = _mm256_madd_epi16(bsums, off16);
                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(i8), acc[r]);
                acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(&kern_f16_lut[mh]), xd),
                                          _mm256_cvtepi32_ps(ms), acc[r]);
            } else {
                i8 = _mm256_dpwssd_epi32(i8, bsums, off16);
                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(i8), acc[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = lb_hsum_ps(acc[r]);
}

/* GEMM tile (kern_gemm_fn, {1, 4}: one weight row against nx <= 4 rows)
 * and decode dot (kern_dot_fn) of format F, named T. */
#define LB_DRIVERS(T, F)                                                                                    \
    static K5 void gemm_##T##_x512(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, \
                                   size_t xs, int nx)                                                      \
    {                                                                                                      \
        const int nb = n / QK_K;                                                                           \
        for (int c = 0; c < nw; c++) {                                                                     \
            const uint8_t *wc = (const uint8_t *)w + (size_t)c * ws;                                       \
            switch (nx) {                                                                                  \
            case 1: lowbit_tile(F, LB_PF_GEMM, false, 1, nb, y + c, ys, wc, x, xs); break;                 \
            case 2: lowbit_tile(F, LB_PF_GEMM, false, 2, nb, y + c, ys, wc, x, xs); break;                 \
            case 3: lowbit_tile(F, LB_PF_GEMM, false, 3, nb, y + c, ys, wc, x, xs); break;                 \
            default: lowbit_tile(F, LB_PF_GEMM, false, 4, nb, y + c, ys, wc, x, xs); break;                \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
    static K5 void dot_##T##_x512(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx) \
    {                                                                                                      \
        const int pf = kern_pf_stream;                                                                     \
        if (nx == 1) lowbit_tile(F, pf, true, 1, n / QK_K, s, ss, w, x, xs);                               \
        else lowbit_tile(F, pf, true, 2, n / QK_K, s, ss, w, x, xs);                                       \
    }

LB_DRIVERS(q3_K, LB_Q3_K)
LB_DRIVERS(q2_K, LB_Q2_K)
LB_DRIVERS(tq2_0, LB_TQ2_0)

void kern_avx512_fill_lowbit(kern_vtable *t)
{
    t->gemm[DT_Q3_K] = (kern_gemm){gemm_q3_K_x512, 1, 4, NULL, 0};
    t->dot[DT_Q3_K] = dot_q3_K_x512;
    t->gemm[DT_Q2_K] = (kern_gemm){gemm_q2_K_x512, 1, 4, NULL, 0};
    t->dot[DT_Q2_K] = dot_q2_K_x512;
    t->gemm[DT_TQ2_0] = (kern_gemm){gemm_tq2_0_x512, 1, 4, NULL, 0};
    t->dot[DT_TQ2_0] = dot_tq2_0_x512;
}

#else

void kern_avx512_fill_lowbit(kern_vtable *t) { (void)t; }

#endif
