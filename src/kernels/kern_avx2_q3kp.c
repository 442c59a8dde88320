/* kern_avx2_q3kp.c - the AVX2 GEMM on Q3_K weights packed at load
 * (kern_pack_q3k.c's layout: 8 rows a group, one lane per row), and the
 * AVX2 conversion of packed groups to kern_kpack.c's (to_kpack).
 *
 * AVX2 has no u8 x s8 dot into int32: vpmaddubsw of u = q + 4 (0..7) by
 * the broadcast activation bytes gives int16 pairs (|.| <= 2 * 7 * 127),
 * the four of a sub-block add up in int16 (|.| <= 7112), and one vpmaddwd
 * by the scale as the pair (sc, sc) sums the row's pair into its int32
 * lane already scaled. sum sc_j bsums_j (the + 4's correction) is one
 * vpmaddwd of the scale pair by the bsums pair per triple. Per super-block
 * the reference's float step, acc += (d * x.d) * (float)isum, so the rows
 * are the reference's bits.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "kernels/kern_avx2_pack8.h"
#include "tensor/blocks.h"
#include "tensor/half.h"

#define KI2 __attribute__((target("avx2,fma,f16c")))
#define KI2I static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* The eight u vectors of the triple whose value vectors start at t. */
KI2I void q3p2_values(const uint8_t *t, __m256i u[8])
{
    const __m256i m7 = _mm256_set1_epi8(7), m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    const __m256i m4 = _mm256_set1_epi8(4), m6 = _mm256_set1_epi8(6);
    const __m256i A = _mm256_loadu_si256((const __m256i *)t);
    const __m256i B = _mm256_loadu_si256((const __m256i *)(t + 32));
    const __m256i C = _mm256_loadu_si256((const __m256i *)(t + 64));
    u[0] = _mm256_and_si256(A, m7);
    u[1] = _mm256_and_si256(_mm256_srli_epi16(A, 3), m7);
    u[2] = _mm256_and_si256(B, m7);
    u[3] = _mm256_and_si256(_mm256_srli_epi16(B, 3), m7);
    u[4] = _mm256_and_si256(C, m7);
    u[5] = _mm256_and_si256(_mm256_srli_epi16(C, 3), m7);
    u[6] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 6), m3), _mm256_and_si256(_mm256_srli_epi16(B, 4), m4));
    u[7] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 7), m1), _mm256_and_si256(_mm256_srli_epi16(C, 5), m6));
}

KI2I void q3p2_tile(int NX, int n, float *y, size_t ys, const uint8_t *wp, int nw, const uint8_t *x, size_t xs)
{
    const int nb = n / QK_K;
    /* int16 0 of each int32 lane to both halves, and int16 1 (vpshufb's
     * indices count from the 128-bit lane's first byte) */
    const __m256i dup0 = _mm256_add_epi32(_mm256_set1_epi32(0x01000100), _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0, 0x04040404, 0x08080808, 0x0C0C0C0C));
    const __m256i dup1 = _mm256_add_epi32(dup0, _mm256_set1_epi32(0x02020202));
    __m256 acc[KERN_NX_MAX];
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *s = wp + (size_t)b * KERN_Q3P_SLAB;
        __m256i isum[KERN_NX_MAX], off[KERN_NX_MAX];
        for (int r = 0; r < NX; r++) isum[r] = off[r] = _mm256_setzero_si256();
        for (int i = 0; i < 8; i++) {
            const uint8_t *t = s + KERN_Q3P_D_BYTES + (size_t)i * KERN_Q3P_TRI;
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)t));
            const __m256i sc0 = _mm256_shuffle_epi8(sc, dup0), sc1 = _mm256_shuffle_epi8(sc, dup1);
            __m256i u[8];
            q3p2_values(t + KERN_Q3P_SC_BYTES, u);
            for (int r = 0; r < NX; r++) {
                const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
                const int8_t *xq = xb->qs + 32 * i;
                __m256i p0 = _mm256_maddubs_epi16(u[0], pack8_bcast4(xq));
                __m256i p1 = _mm256_maddubs_epi16(u[4], pack8_bcast4(xq + 16));
                for (int o = 1; o < 4; o++) {
                    p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(u[o], pack8_bcast4(xq + 4 * o)));
                    p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(u[4 + o], pack8_bcast4(xq + 16 + 4 * o)));
                }
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(p0, sc0), _mm256_madd_epi16(p1, sc1)));
                off[r] = _mm256_add_epi32(off[r], _mm256_madd_epi16(sc, pack8_bcast4(xb->bsums + 2 * i)));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s));
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
            const __m256i tot = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(off[r], 2));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), _mm256_cvtepi32_ps(tot)));
        }
    }
    pack8_store_rows(y, ys, acc, NX, nw);
}

KI2 void kern_gemmp_q3_K_avx2(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                              const kern_px *px, int nx)
{
    (void)px;
    switch (nx) {
    case 1: q3p2_tile(1, n, y, ys, wp, nw, x, xs); break;
    case 2: q3p2_tile(2, n, y, ys, wp, nw, x, xs); break;
    case 3: q3p2_tile(3, n, y, ys, wp, nw, x, xs); break;
    default: q3p2_tile(4, n, y, ys, wp, nw, x, xs); break;
    }
}

/* kern_q3p_to_kpack_ref's bytes: the u vectors of triple i of each group
 * are the halves (rows 0..7, 8..15) of kern_kpack.c's vectors 8 i .. 8 i
 * + 7; the tail (scales, pairs, d) as there, in plain C. */
KI2 void kern_q3p_to_kpack_avx2(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n)
{
    const int nb = n / QK_K, ng = nw > KERN_PACK_ROWS ? 2 : 1;
    for (int b = 0; b < nb; b++) {
        uint8_t *s = dst + (size_t)b * KPACK_SLAB;
        for (int h = 0; h < 2; h++) {
            const uint8_t *sl = wp + (size_t)h * gb + (size_t)b * KERN_Q3P_SLAB;
            for (int i = 0; i < 8; i++) {
                __m256i u[8];
                if (h < ng) q3p2_values(sl + KERN_Q3P_D_BYTES + (size_t)i * KERN_Q3P_TRI + KERN_Q3P_SC_BYTES, u);
                else
                    for (int o = 0; o < 8; o++) u[o] = _mm256_setzero_si256();
                for (int o = 0; o < 8; o++) _mm256_store_si256((__m256i *)(s + 64 * (8 * i + o) + 32 * h), u[o]);
            }
        }
        memset(s + KPACK_SC, 0, KPACK_SLAB - KPACK_SC);
        for (int c = 0; c < ng * KERN_PACK_ROWS; c++) {
            const uint8_t *sl = wp + (size_t)(c / KERN_PACK_ROWS) * gb + (size_t)b * KERN_Q3P_SLAB;
            const int cc = c % KERN_PACK_ROWS;
            for (int j = 0; j < 16; j++) {
                const int8_t sc = (int8_t)sl[KERN_Q3P_D_BYTES + (size_t)(j / 2) * KERN_Q3P_TRI + 2 * cc + j % 2];
                const int16_t pr = (int16_t)(-4 * sc);
                s[KPACK_SC + 16 * j + c] = (uint8_t)sc;
                memcpy(s + KPACK_PAIRS + 64 * (j / 2) + 4 * c + 2 * (j % 2), &pr, 2);
            }
            uint16_t dh;
            memcpy(&dh, sl + 2 * cc, 2);
            const float d = f16_to_f32(dh);
            memcpy(s + KPACK_D + 4 * c, &d, 4);
        }
    }
}

#endif
