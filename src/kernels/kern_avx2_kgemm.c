/* kern_avx2_kgemm.c - the AVX2 GEMM on kern_kpack.c's packed groups of
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights against Q8_K activations
 * (kern_kgemm, kern_impl.h): the batched path of these formats on CPUs
 * without AVX-512 VNNI. Same layout and packing as the AVX-512 GEMM.
 *
 * A 64-byte weight vector (4 values of 16 rows) is two 32-byte halves,
 * rows 0..7 and 8..15, each a tile of its own: per half and super-block,
 * up to KG2_NX activation rows at a time, one vpmaddubsw per half-vector
 * and activation row (the row's 4 activation bytes broadcast), its int16
 * pair sums added over a run of RUN vectors, then one vpmaddwd of the run
 * against the rows' sub-block scales (as int16 pairs) into the int32 sum.
 * The lanes stay the weight rows: no horizontal sums.
 *
 * int16 stays exact: activations are never -128 (kern_avx2.c), so a pair
 * sum is at most 2 * 127 * umax and RUN of them fit in 32767:
 *
 *   type    u (kern_kpack.c)  pair sum   RUN
 *   Q4_K    0..15               3810       8 (a sub-block of 32)
 *   Q5_K    0..31               7874       4
 *   Q6_K    0..63              16002       2
 *   Q3_K    0..7                1778       4 (a sub-block of 16)
 *   Q2_K    0..3                 762       4 (a sub-block of 16)
 *   IQ4_XS  1..241               -         1: signed values, see below
 *   IQ1-3   66..190          15748         2: signed values (|q| <= 62)
 *
 * IQ4_XS's u = value + 128 would overflow vpmaddubsw's pair sum, so the
 * tile multiplies the value itself (u ^ 0x80, |value| <= 127) by ggml's
 * sign trick, |w| * sign(x, w) (pair sum <= 2 * 127 * 127), and leaves out
 * the pairs, which only undo the offset of 128.
 *
 * The per-super-block integer sums are the reference's (see
 * kern_avx512_kgemm.c for the bound), and the float part is its own
 * operations in its order, without contraction:
 *
 *   s = s + (d * y.d) * (float)isum          (Q3_K, Q6_K, IQ4_XS)
 *   s = s - (dmin * y.d) * (float)msum       (Q4_K, Q5_K: msum = pairs)
 *   s = s + ((d * y.d) * (float)isum - (dmin * y.d) * (float)msum)   (Q2_K)
 *
 * so the same bits as the reference tile and the AVX-512 GEMM.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "tensor/blocks.h"

/* With UBSan at -O1 (the sanitized builds) GCC drops these two loops'
 * unroll annotations with an unconditional warning, an error under
 * -Werror: sanitized builds (ASan and UBSan always go together here) run
 * without them. */
#ifdef __SANITIZE_ADDRESS__
#define KG2_LOOP_PRAGMA(p)
#else
#define KG2_LOOP_PRAGMA(p) _Pragma(p)
#endif

#define KG2 __attribute__((target("avx2,fma,f16c")))
#define KG2I static inline __attribute__((always_inline, target("avx2,fma,f16c")))

#define KG2_HALF 8 /* weight rows of a half group: the 8 int32 lanes */
#define KG2_NX 4   /* activation rows per pass over a half slab (16 ymm registers) */

/* 4 bytes at p broadcast to the 8 lanes. */
KG2I __m256i kg2_bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* A barrier that keeps a run's int16 sum a chain in one register: GCC
 * otherwise reassociates it into a tree of temporaries and spills. */
KG2I void kg2_in_order(__m256i *v) { __asm__("" : "+x"(*v)); }

/* The 8 rows' int8 scales at p as int16 pairs (sc, sc), one per lane. */
KG2I __m256i kg2_scales(const uint8_t *p)
{
    const __m128i s = _mm_loadl_epi64((const __m128i *)p);
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s, s));
}

/* Half h (rows 8h..8h+7) of super-block slab sl against NX activation
 * blocks xb: adds each row's super-block term into s[r][8h..8h+7]. SB:
 * values per sub-block; RUN, SIGNED: see the header; MIN: the pairs are a
 * min term subtracted after the scaled sum (1: Q4_K, Q5_K) or from it
 * (2: Q2_K), else (0) added to the integer sum. */
KG2I void kg2_half(int SB, int RUN, bool SIGNED, int MIN, int NX, float (*s)[KERN_KPACK_ROWS],
                   const uint8_t *sl, int h, const block_q8_K *const *xb)
{
    __m256i isum[KG2_NX], ps[KG2_NX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) isum[r] = ps[r] = _mm256_setzero_si256();
KG2_LOOP_PRAGMA("GCC unroll 1") /* unrolled, the broadcasts are hoisted and spilled */
    for (int j = 0; j < QK_K / SB; j++) {
        const __m256i sc = kg2_scales(sl + KPACK_SC + 16 * j + KG2_HALF * h);
        /* the sub-block's first vector and activations: constant offsets from here */
        const uint8_t *wj = sl + (size_t)(16 * SB) * j + 32 * h;
        const int8_t *xj[KG2_NX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) xj[r] = xb[r]->qs + SB * j;
KG2_LOOP_PRAGMA("GCC unroll 8")
        for (int q = 0; q < SB / 4 / RUN; q++) {
            __m256i part[KG2_NX];
#pragma GCC unroll 8
            for (int k = 0; k < RUN; k++) {
                const int v = q * RUN + k; /* within the sub-block */
                const __m256i u = _mm256_load_si256((const __m256i *)(wj + 64 * v));
                const __m256i w = SIGNED ? _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80)) : u;
                const __m256i aw = SIGNED ? _mm256_abs_epi8(w) : u;
#pragma GCC unroll 4
                for (int r = 0; r < NX; r++) {
                    const __m256i xv = kg2_bcast4(xj[r] + 4 * v);
                    const __m256i p = _mm256_maddubs_epi16(aw, SIGNED ? _mm256_sign_epi8(xv, w) : xv);
                    part[r] = k == 0 ? p : _mm256_add_epi16(part[r], p);
                    kg2_in_order(&part[r]);
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(part[r], sc));
        }
    }
    if (!SIGNED) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const __m256i pv = _mm256_load_si256((const __m256i *)(sl + KPACK_PAIRS + 64 * i + 32 * h));
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++)
                ps[r] = _mm256_add_epi32(ps[r], _mm256_madd_epi16(pv, kg2_bcast4(xb[r]->bsums + 2 * i)));
        }
    }
    const __m256 dv = _mm256_load_ps((const float *)(sl + KPACK_D + 32 * h));
    const __m256 dmv = _mm256_load_ps((const float *)(sl + KPACK_DMIN + 32 * h));
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) {
        const __m256 xd = _mm256_set1_ps(xb[r]->d);
        __m256 acc = _mm256_loadu_ps(s[r] + KG2_HALF * h);
        if (MIN == 2) {
            const __m256 a = _mm256_mul_ps(_mm256_mul_ps(dv, xd), _mm256_cvtepi32_ps(isum[r]));
            acc = _mm256_add_ps(acc, _mm256_sub_ps(a, _mm256_mul_ps(_mm256_mul_ps(dmv, xd), _mm256_cvtepi32_ps(ps[r]))));
        } else if (MIN) {
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dv, xd), _mm256_cvtepi32_ps(isum[r])));
            acc = _mm256_sub_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dmv, xd), _mm256_cvtepi32_ps(ps[r])));
        } else {
            const __m256i t = _mm256_add_epi32(isum[r], ps[r]);
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dv, xd), _mm256_cvtepi32_ps(t)));
        }
        _mm256_storeu_ps(s[r] + KG2_HALF * h, acc);
    }
}

/* kern_kgemm.gemm of one type: per super-block (its slab stays in L1),
 * per half group that holds stored rows, passes of up to KG2_NX
 * activation rows; the rows' sums in s until the end. */
#define KG2_DRIVER(name, SB, RUN, SIGNED, MIN)                                                          \
    KG2 void name(int n, float *y, size_t ys, const uint8_t *wp, int nw, const void *x, size_t xs, \
                         int nx)                                                                        \
    {                                                                                                   \
        float s[KERN_KPACK_NX][KERN_KPACK_ROWS];                                                        \
        memset(s, 0, sizeof s);                                                                         \
        const int halves = nw > KG2_HALF ? 2 : 1;                                                       \
        for (int b = 0; b < n / QK_K; b++) {                                                            \
            const uint8_t *sl = wp + (size_t)b * KPACK_SLAB;                                            \
            const block_q8_K *xb[KERN_KPACK_NX];                                                        \
            for (int r = 0; r < nx; r++) xb[r] = (const block_q8_K *)((const uint8_t *)x + r * xs) + b; \
            for (int h = 0; h < halves; h++)                                                            \
                for (int r0 = 0; r0 < nx; r0 += KG2_NX) {                                               \
                    switch (nx - r0) {                                                                  \
                    case 1: kg2_half(SB, RUN, SIGNED, MIN, 1, s + r0, sl, h, xb + r0); break;           \
                    case 2: kg2_half(SB, RUN, SIGNED, MIN, 2, s + r0, sl, h, xb + r0); break;           \
                    case 3: kg2_half(SB, RUN, SIGNED, MIN, 3, s + r0, sl, h, xb + r0); break;           \
                    default: kg2_half(SB, RUN, SIGNED, MIN, 4, s + r0, sl, h, xb + r0); break;          \
                    }                                                                                   \
                }                                                                                       \
        }                                                                                               \
        for (int r = 0; r < nx; r++) memcpy(y + r * ys, s[r], sizeof(float) * (size_t)nw);             \
    }

KG2_DRIVER(kern_kgemm_q4_K_avx2, 32, 8, false, 1)
KG2_DRIVER(kern_kgemm_q5_K_avx2, 32, 4, false, 1)
KG2_DRIVER(kern_kgemm_q6_K_avx2, 16, 2, false, 0)
KG2_DRIVER(kern_kgemm_q3_K_avx2, 16, 4, false, 0)
KG2_DRIVER(kern_kgemm_q2_K_avx2, 16, 4, false, 2)
KG2_DRIVER(kern_kgemm_iq4_xs_avx2, 32, 1, true, 0)
KG2_DRIVER(kern_kgemm_lattice_avx2, 16, 2, true, 0) /* every lattice i-quant */

#endif
