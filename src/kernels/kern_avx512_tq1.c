/* kern_avx512_tq1.c - AVX-512 (VNNI) GEMM tile and decode dot of TQ1_0
 * against Q8_K; kern_avx512.c's tables list them.
 *
 * The trit layout and the digit of a byte product are kern_avx2_tq1.c's
 * (digit i of byte b: ((uint8_t)(b * 3^i) * 3) >> 8, i.e. p >= 86 plus
 * p >= 171 for p = b * 3^i mod 256). Here 4 vectors of 64 digits, in
 * element order, built by one byte multiply each:
 *
 *   256-bit half / 128-bit lanes      multipliers       elements
 *   [qs[0..31]    | qs[0..31]]        [1 | 3]             0..63
 *   [qs[0..31]    | qs[0..31]]        [9 | 27]           64..127
 *   [qs[0..31]    | w | w]            [81 | 1 | 3]      128..191
 *   [w | w | w | qh x 4]              [9 | 27 | 81 | 1,3,9,27 a dword]  192..255
 *
 * with w = qs[32..47]. A byte product mod 256 is vpmullw on the low bytes
 * and again on the high bytes of the words (both bytes of a word share a
 * multiplier), merged by a byte blend; the digits come from two unsigned
 * compares into masks. vpdpbusd takes the digits (0..2) against the Q8_K
 * ints, the level's -1 is Q8_K's bsums (one 256-bit vpdpwssd by -1).
 *
 * Numerics: per block and row the exact integer sum, then the reference's
 * float operations in its order (s += isum * (d * dx)): the reference's
 * bits (kern_ref_quants.c), whatever the tile shape or nx.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <string.h>

#include "tensor/blocks.h"

/* Prefetch distances as kern_avx512_lowbit.c's tiles: the GEMM 2 KiB ahead
 * into L1, the decode dot kern_pf_stream into L2 (none where it is 0). */
#define TQ1_PF_GEMM 2048

K5AI void tq1x_prefetch(const uint8_t *block, int dist, bool l2)
{
    const uintptr_t a = (uintptr_t)block + (size_t)dist;
    for (uintptr_t l = a & ~(uintptr_t)63; l < a + sizeof(block_tq1_0); l += 64) {
        if (l2) _mm_prefetch((const char *)l, _MM_HINT_T1);
        else _mm_prefetch((const char *)l, _MM_HINT_T0);
    }
}

K5AI int tq1x_hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* Bytes of v times the multiplier of their 16-bit lane in m, mod 256. */
K5AI __m512i tq1x_mul_bytes(__m512i v, __m512i m)
{
    const __m512i lo = _mm512_mullo_epi16(v, m);
    const __m512i hi = _mm512_mullo_epi16(_mm512_and_si512(v, _mm512_set1_epi16((short)0xFF00)), m);
    return _mm512_mask_blend_epi8((__mmask64)0xAAAAAAAAAAAAAAAAull, lo, hi);
}

K5AI __m512i tq1x_digit(__m512i p)
{
    const __mmask64 ge86 = _mm512_cmpge_epu8_mask(p, _mm512_set1_epi8(86));
    const __mmask64 ge171 = _mm512_cmpge_epu8_mask(p, _mm512_set1_epi8((char)171));
    return _mm512_mask_blend_epi8(ge171, _mm512_maskz_mov_epi8(ge86, _mm512_set1_epi8(1)), _mm512_set1_epi8(2));
}

/* The int16 multipliers of the file header's four vectors, 8 a 128-bit
 * lane: static data, loaded once a tile. */
#define TQ1_LANE(k) k, k, k, k, k, k, k, k
static const short tq1x_mult[4][32] __attribute__((aligned(64))) = {
    {TQ1_LANE(1), TQ1_LANE(1), TQ1_LANE(3), TQ1_LANE(3)},
    {TQ1_LANE(9), TQ1_LANE(9), TQ1_LANE(27), TQ1_LANE(27)},
    {TQ1_LANE(81), TQ1_LANE(81), TQ1_LANE(1), TQ1_LANE(3)},
    {TQ1_LANE(9), TQ1_LANE(27), TQ1_LANE(81), 1, 1, 3, 3, 9, 9, 27, 27},
};
#undef TQ1_LANE

/* The 256 digits of block wb in element order, 64 a vector. */
K5AI void tq1x_unpack(const block_tq1_0 *wb, const __m512i m[4], __m512i d[4])
{
    const __m512i z = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)wb->qs));
    const __m128i w = _mm_loadu_si128((const __m128i *)(wb->qs + 32));
    uint32_t qh;
    memcpy(&qh, wb->qh, 4);
    const __m512i zw = _mm512_inserti64x4(z, _mm256_broadcastsi128_si256(w), 1);
    const __m512i wq = _mm512_inserti32x4(_mm512_broadcast_i32x4(w), _mm_set1_epi32((int)qh), 3);
    d[0] = tq1x_digit(tq1x_mul_bytes(z, m[0]));
    d[1] = tq1x_digit(tq1x_mul_bytes(z, m[1]));
    d[2] = tq1x_digit(tq1x_mul_bytes(zw, m[2]));
    d[3] = tq1x_digit(tq1x_mul_bytes(wq, m[3]));
}

/* One weight row (nb blocks) against NX Q8_K rows xs bytes apart; prefetch
 * pf bytes ahead (0: none), into L2 if l2. */
K5AI void tq1x_tile(int NX, int pf, bool l2, int nb, float *s, size_t ss, const block_tq1_0 *w, const uint8_t *x,
                    size_t xs)
{
    __m512i m[4];
    for (int v = 0; v < 4; v++) m[v] = _mm512_load_si512((const void *)tq1x_mult[v]);
    float acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = 0.0f;
    for (int b = 0; b < nb; b++) {
        if (pf) tq1x_prefetch((const uint8_t *)&w[b], pf, l2);
        __m512i d[4];
        tq1x_unpack(&w[b], m, d);
        uint16_t dh;
        memcpy(&dh, &w[b].d, 2);
        const float dw = kern_f16_lut[dh];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) isum = _mm512_dpbusd_epi32(isum, d[k], _mm512_loadu_si512((const void *)(xb->qs + 64 * k)));
            __m256i i8 = _mm256_add_epi32(_mm512_castsi512_si256(isum), _mm512_extracti64x4_epi64(isum, 1));
            i8 = _mm256_dpwssd_epi32(i8, _mm256_loadu_si256((const __m256i *)xb->bsums), _mm256_set1_epi16(-1));
            acc[r] += (float)tq1x_hsum_i32(i8) * (dw * xb->d);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = acc[r];
}

/* GEMM tile (kern_gemm_fn, {1, 4}) and decode dot (nx <= KERN_DOT_NX_MAX). */
static K5 void gemm_tq1_0_x512(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs,
                               int nx)
{
    const int nb = n / QK_K;
    for (int c = 0; c < nw; c++) {
        const block_tq1_0 *wc = (const block_tq1_0 *)((const uint8_t *)w + (size_t)c * ws);
        switch (nx) {
        case 1: tq1x_tile(1, TQ1_PF_GEMM, false, nb, y + c, ys, wc, x, xs); break;
        case 2: tq1x_tile(2, TQ1_PF_GEMM, false, nb, y + c, ys, wc, x, xs); break;
        case 3: tq1x_tile(3, TQ1_PF_GEMM, false, nb, y + c, ys, wc, x, xs); break;
        default: tq1x_tile(4, TQ1_PF_GEMM, false, nb, y + c, ys, wc, x, xs); break;
        }
    }
}

static K5 void dot_tq1_0_x512(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx)
{
    const int pf = kern_pf_stream;
    if (nx == 1) tq1x_tile(1, pf, true, n / QK_K, s, ss, w, x, xs);
    else tq1x_tile(2, pf, true, n / QK_K, s, ss, w, x, xs);
}

void kern_avx512_fill_tq1(kern_vtable *t)
{
    t->gemm[DT_TQ1_0] = (kern_gemm){gemm_tq1_0_x512, 1, 4, NULL, 0};
    t->dot[DT_TQ1_0] = dot_tq1_0_x512;
}

#else

void kern_avx512_fill_tq1(kern_vtable *t) { (void)t; }

#endif
