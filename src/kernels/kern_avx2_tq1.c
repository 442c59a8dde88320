/* kern_avx2_tq1.c - AVX2 GEMM tile and decode dot tile of TQ1_0 (ternary,
 * 54 bytes a super-block of 256) against Q8_K; the AVX2 table lists them.
 *
 * Layout (blocks.h, ggml's): digit i (0..4, most significant first) of a
 * byte b is ((uint8_t)(b * 3^i) * 3) >> 8, and the level is digit - 1:
 *
 *   elements   32i + m         160 + 16i + m     240 + 4i + m
 *   byte       qs[m], m < 32   qs[32 + m], m<16  qh[m], m < 4
 *   digit      i = 0..4        i = 0..4          i = 0..3
 *
 * so 8 vectors of 32 digits in element order:
 *
 *   v0..v4   qs[0..31] * 3^i                 elements   0..159
 *   v5       [qs[32..47], * 3]               elements 160..191
 *   v6       [* 9, * 27]                     elements 192..223
 *   v7       [* 81, qh * (1, 3, 9, 27)]      elements 224..255
 *
 * The byte products mod 256: v1..v4 by adds (x3 each), v5..v7 by vpmullw
 * on the two bytes of a word apart (both bytes of a word share a
 * multiplier there). The digit of a
 * product p is (p >= 86) + (p >= 171): two signed compares on p ^ 0x80,
 * and that flip is made once on the loaded bytes, since (b ^ 0x80) * odd
 * = b * odd ^ 0x80 mod 256.
 *
 * Digits 0..2 go into maddubs against the Q8_K ints; the eight int16
 * vectors add up exactly (|.| <= 8 * 2 * 2 * 127) and the level's -1 comes
 * off as Q8_K's 16 bsums. Each block is unpacked once for the tile's NX
 * rows. Per block and row the exact integer sum, then the reference's
 * float operations in its order (s += isum * (d * dx)): the reference's
 * bits, on every tile shape.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "kernels/kern_avx2_hsum.h"
#include "tensor/blocks.h"

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

KAI __m256i tq1_times3(__m256i v) { return _mm256_add_epi8(v, _mm256_add_epi8(v, v)); }

/* Bytes of v times the multiplier of their 16-bit lane in m, mod 256. */
KAI __m256i tq1_mul_bytes(__m256i v, __m256i m)
{
    const __m256i lo = _mm256_and_si256(_mm256_mullo_epi16(v, m), _mm256_set1_epi16(0x00FF));
    return _mm256_or_si256(lo, _mm256_mullo_epi16(_mm256_and_si256(v, _mm256_set1_epi16((short)0xFF00)), m));
}

/* Digits 0..2 of the flipped products p ^ 0x80 (file header). */
KAI __m256i tq1_digit(__m256i f)
{
    const __m256i ge86 = _mm256_cmpgt_epi8(f, _mm256_set1_epi8(86 - 128 - 1));
    const __m256i ge171 = _mm256_cmpgt_epi8(f, _mm256_set1_epi8(171 - 128 - 1));
    return _mm256_abs_epi8(_mm256_add_epi8(ge86, ge171));
}

/* The 256 digits of block wb in element order, 32 a vector. */
KAI void tq1_unpack(const block_tq1_0 *wb, __m256i d[8])
{
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256i z = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)wb->qs), flip);
#pragma GCC unroll 5
    for (int i = 0; i < 5; i++) {
        d[i] = tq1_digit(z);
        if (i < 4) z = tq1_times3(z);
    }
    const __m128i w = _mm_loadu_si128((const __m128i *)(wb->qs + 32));
    uint32_t qh;
    memcpy(&qh, wb->qh, 4);
    const __m256i ww = _mm256_xor_si256(_mm256_set_m128i(w, w), flip);
    const __m256i wq = _mm256_xor_si256(_mm256_set_m128i(_mm_set1_epi32((int)qh), w), flip);
    d[5] = tq1_digit(tq1_mul_bytes(ww, _mm256_setr_m128i(_mm_set1_epi16(1), _mm_set1_epi16(3))));
    d[6] = tq1_digit(tq1_mul_bytes(ww, _mm256_setr_m128i(_mm_set1_epi16(9), _mm_set1_epi16(27))));
    d[7] = tq1_digit(tq1_mul_bytes(wq, _mm256_setr_m128i(_mm_set1_epi16(81), _mm_setr_epi16(1, 1, 3, 3, 9, 9, 27, 27))));
}

/* One weight row (nb blocks) against NX Q8_K rows xs bytes apart. */
KAI void tq1_tile(int NX, int nb, float *s, size_t ss, const block_tq1_0 *w, const uint8_t *x, size_t xs)
{
    float acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = 0.0f;
    for (int b = 0; b < nb; b++) {
        __m256i d[8];
        tq1_unpack(&w[b], d);
        const float dw = kern_f16_lut[w[b].d];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            __m256i p = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(d[k], _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * k))));
            p = _mm256_sub_epi16(p, _mm256_loadu_si256((const __m256i *)xb->bsums));
            const int isum = kavx2_hsum_i32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
            acc[r] += (float)isum * (dw * xb->d);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = acc[r];
}

/* GEMM tile ({1, 4}) and decode dot (nx <= KERN_DOT_NX_MAX). */
KA void kern_gemm_tq1_0_avx2(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs,
                             int nx)
{
    for (int c = 0; c < nw; c++) {
        const block_tq1_0 *wc = (const block_tq1_0 *)((const uint8_t *)w + (size_t)c * ws);
        switch (nx) {
        case 1: tq1_tile(1, n / QK_K, y + c, ys, wc, x, xs); break;
        case 2: tq1_tile(2, n / QK_K, y + c, ys, wc, x, xs); break;
        case 3: tq1_tile(3, n / QK_K, y + c, ys, wc, x, xs); break;
        default: tq1_tile(4, n / QK_K, y + c, ys, wc, x, xs); break;
        }
    }
}

KA void kern_dot_tq1_0_avx2(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx)
{
    if (nx == 1) tq1_tile(1, n / QK_K, s, ss, w, x, xs);
    else tq1_tile(2, n / QK_K, s, ss, w, x, xs);
}

#endif
