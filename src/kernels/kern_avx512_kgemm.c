/* kern_avx512_kgemm.c - the AVX-512 (VNNI) GEMM on kern_kpack.c's packed
 * groups of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights against Q8_K activations
 * (kern_kgemm, kern_impl.h): the batched path of these formats.
 *
 * One tile is one group of 16 weight rows (the 16 int32 lanes) against
 * nx <= 8 activation rows. Per 64-byte weight vector (4 values of each
 * row) one vpdpbusd per activation row, its 4 activation bytes a
 * broadcast operand: 8 rows reuse one weight load, and no lane is ever
 * summed across. Per sub-block the lanes' int32 sums are scaled by the
 * rows' scales (vpmullo) into a per-super-block int32 sum; the offset or
 * min term is 8 vpdpwssd of the group's int16 pairs against the
 * activation's bsums (broadcast pairs). All of it exact, so the float
 * part is the reference's own operations per super-block, in its order
 * (kern_ref.c, kern_ref_quants.c):
 *
 *   s = s + (d * y.d) * (float)isum          (Q3_K, Q6_K, IQ4_XS: isum + pairs)
 *   s = s - (dmin * y.d) * (float)msum       (Q4_K, Q5_K: msum = pairs)
 *   s = s + ((d * y.d) * (float)isum - (dmin * y.d) * (float)msum)   (Q2_K)
 *
 * with no fused multiply-add (the build's -std=c11 contracts none, here
 * or there), and so the same bits as the reference tile.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <string.h>

#include "tensor/blocks.h"
#include "tensor/dtype.h"

/* The emulation build (tests/avx512.sh) runs one generic tile: the 24
 * unrolled instantiations on SIMDe's vectors took cc1 over 10 minutes and
 * 2.6 GB. */
#ifdef PL_AVX512_EMU
#define KG_TILE_FN static
#define KG_UNROLL _Pragma("GCC unroll 1")
#else
#define KG_TILE_FN K5AI
#define KG_UNROLL _Pragma("GCC unroll 8")
#endif

/* 4 bytes at p broadcast to the 16 lanes (a separate vpbroadcastd: GCC
 * does not fold _mm512_set1_epi32 from memory into the vpdpbusd). */
K5AI __m512i kg_bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc + the dot of u with the 4 bytes (dpbusd) or 2 words (dpwssd) at p
 * broadcast to the 16 lanes, the broadcast embedded in the instruction
 * ({1to16} memory operand): one uop fewer per vpdpbusd, which the 32-value
 * sub-block tiles (Q4_K, Q5_K, IQ4_XS) gain from; the 16-value ones (Q3_K,
 * Q6_K, Q2_K) measured slower with it and keep kg_bcast4 (docs/speed.md).
 * The emulation build has the intrinsics. */
#ifdef PL_AVX512_EMU
#define kg_dpbusd_b32(acc, u, p) _mm512_dpbusd_epi32(acc, u, kg_bcast4(p))
#define kg_dpwssd_b32(acc, u, p) _mm512_dpwssd_epi32(acc, u, kg_bcast4(p))
#else
typedef int32_t __attribute__((may_alias)) kg_i32_alias; /* the 4 bytes are int8 or int16 data */
K5AI __m512i kg_dpbusd_b32(__m512i acc, __m512i u, const void *p)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const kg_i32_alias *)p));
    return acc;
}

K5AI __m512i kg_dpwssd_b32(__m512i acc, __m512i u, const void *p)
{
    __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const kg_i32_alias *)p));
    return acc;
}
#endif

/* One group wp (nw rows stored) against NX rows of Q8_K x (xs bytes
 * apart): y[r * ys + c] for c < nw. SB: values per sub-block (32, or 16
 * for Q2_K, Q3_K, Q6_K); MIN: the pairs are a min term subtracted after
 * the scaled sum (1: Q4_K, Q5_K) or from it (2: Q2_K), else (0) added to
 * the integer sum. */
KG_TILE_FN void kg_tile(int SB, int MIN, int NX, int nb, float *y, size_t ys, const uint8_t *wp, int nw,
                  const uint8_t *x, size_t xs)
{
    __m512 s[KERN_KPACK_NX];
KG_UNROLL
    for (int r = 0; r < NX; r++) s[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *sl = wp + (size_t)b * KPACK_SLAB;
        const block_q8_K *xb[KERN_KPACK_NX];
KG_UNROLL
        for (int r = 0; r < NX; r++) xb[r] = (const block_q8_K *)(x + r * xs) + b;
        __m512i isum[KERN_KPACK_NX];
KG_UNROLL
        for (int r = 0; r < NX; r++) isum[r] = _mm512_setzero_si512();
        for (int j = 0; j < QK_K / SB; j++) {
            __m512i acc[KERN_KPACK_NX];
KG_UNROLL
            for (int r = 0; r < NX; r++) acc[r] = _mm512_setzero_si512();
KG_UNROLL
            for (int v = j * SB / 4; v < (j + 1) * SB / 4; v++) {
                const __m512i wv = _mm512_load_si512((const void *)(sl + 64 * v));
KG_UNROLL
                for (int r = 0; r < NX; r++) acc[r] = SB == 32 ? kg_dpbusd_b32(acc[r], wv, xb[r]->qs + 4 * v)
                                          : _mm512_dpbusd_epi32(acc[r], wv, kg_bcast4(xb[r]->qs + 4 * v));
            }
            const __m512i scv = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(sl + KPACK_SC + 16 * j)));
KG_UNROLL
            for (int r = 0; r < NX; r++) isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(acc[r], scv));
        }
        __m512i ps[KERN_KPACK_NX];
KG_UNROLL
        for (int r = 0; r < NX; r++) ps[r] = _mm512_setzero_si512();
KG_UNROLL
        for (int i = 0; i < 8; i++) {
            const __m512i pv = _mm512_load_si512((const void *)(sl + KPACK_PAIRS + 64 * i));
KG_UNROLL
            for (int r = 0; r < NX; r++) ps[r] = SB == 32 ? kg_dpwssd_b32(ps[r], pv, xb[r]->bsums + 2 * i)
                                         : _mm512_dpwssd_epi32(ps[r], pv, kg_bcast4(xb[r]->bsums + 2 * i));
        }
        const __m512 dv = _mm512_load_ps((const float *)(sl + KPACK_D));
        const __m512 dmv = _mm512_load_ps((const float *)(sl + KPACK_DMIN));
KG_UNROLL
        for (int r = 0; r < NX; r++) {
            const __m512 xd = _mm512_set1_ps(xb[r]->d);
            if (MIN == 2) {
                const __m512 a = _mm512_mul_ps(_mm512_mul_ps(dv, xd), _mm512_cvtepi32_ps(isum[r]));
                s[r] = _mm512_add_ps(s[r], _mm512_sub_ps(a, _mm512_mul_ps(_mm512_mul_ps(dmv, xd), _mm512_cvtepi32_ps(ps[r]))));
            } else if (MIN) {
                s[r] = _mm512_add_ps(s[r], _mm512_mul_ps(_mm512_mul_ps(dv, xd), _mm512_cvtepi32_ps(isum[r])));
                s[r] = _mm512_sub_ps(s[r], _mm512_mul_ps(_mm512_mul_ps(dmv, xd), _mm512_cvtepi32_ps(ps[r])));
            } else {
                const __m512i t = _mm512_add_epi32(isum[r], ps[r]);
                s[r] = _mm512_add_ps(s[r], _mm512_mul_ps(_mm512_mul_ps(dv, xd), _mm512_cvtepi32_ps(t)));
            }
        }
    }
    const __mmask16 keep = nw >= KERN_KPACK_ROWS ? (__mmask16)0xFFFF : (__mmask16)((1u << nw) - 1);
KG_UNROLL
    for (int r = 0; r < NX; r++) _mm512_mask_storeu_ps(y + r * ys, keep, s[r]);
}

/* Every tile height its own instantiation (accumulators in registers). */
#define KG_DRIVER(name, SB, MIN)                                                                       \
    static K5 void name(int n, float *y, size_t ys, const uint8_t *wp, int nw, const void *x, size_t xs,\
                        int nx)                                                                        \
    {                                                                                                  \
        const int nb = n / QK_K;                                                                       \
        const uint8_t *xq = x;                                                                         \
        switch (nx) {                                                                                  \
        case 1: kg_tile(SB, MIN, 1, nb, y, ys, wp, nw, xq, xs); break;                                 \
        case 2: kg_tile(SB, MIN, 2, nb, y, ys, wp, nw, xq, xs); break;                                 \
        case 3: kg_tile(SB, MIN, 3, nb, y, ys, wp, nw, xq, xs); break;                                 \
        case 4: kg_tile(SB, MIN, 4, nb, y, ys, wp, nw, xq, xs); break;                                 \
        case 5: kg_tile(SB, MIN, 5, nb, y, ys, wp, nw, xq, xs); break;                                 \
        case 6: kg_tile(SB, MIN, 6, nb, y, ys, wp, nw, xq, xs); break;                                 \
        case 7: kg_tile(SB, MIN, 7, nb, y, ys, wp, nw, xq, xs); break;                                 \
        default: kg_tile(SB, MIN, 8, nb, y, ys, wp, nw, xq, xs); break;                                \
        }                                                                                              \
    }

KG_DRIVER(kgemm_min_x512, 32, 1)   /* Q4_K, Q5_K */
KG_DRIVER(kgemm_sb32_x512, 32, 0)  /* IQ4_XS */
KG_DRIVER(kgemm_sb16_x512, 16, 0)  /* Q3_K, Q6_K, the lattice i-quants */
KG_DRIVER(kgemm_q2_K_x512, 16, 2)  /* Q2_K */

/* IQ4_XS's values + 128 (kern_kpack.c's u) of one super-block: sub-block
 * j's 16 bytes hold its values l (low nibbles) and 16 + l (high). */
K5AI void kg_iq4_xs_values(uint8_t *u, const block_iq4_xs *w)
{
    const __m128i tab = _mm_add_epi8(_mm_loadu_si128((const __m128i *)quant_iq4nl_values), _mm_set1_epi8((char)0x80));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int j = 0; j < 8; j++) {
        const __m128i q = _mm_loadu_si128((const __m128i *)(w->qs + 16 * j));
        _mm_storeu_si128((__m128i *)(u + 32 * j), _mm_shuffle_epi8(tab, _mm_and_si128(q, m4)));
        _mm_storeu_si128((__m128i *)(u + 32 * j + 16), _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), m4)));
    }
}

/* Q5_K's values (kern_kpack.c's u) of one super-block: 32 bytes of
 * nibbles give values 64 g + l (low) and 64 g + 32 + l (high), their fifth
 * bits being bits 2g and 2g + 1 of qh[l]. 16-bit shifts on bytes: each
 * byte's bit s lands in its own bit 0 before the mask. */
K5AI void kg_q5_K_values(uint8_t *u, const block_q5_K *w)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i h = _mm256_loadu_si256((const __m256i *)w->qh);
    for (int g = 0; g < 4; g++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * g));
        const __m128i s0 = _mm_cvtsi32_si128(2 * g), s1 = _mm_cvtsi32_si128(2 * g + 1);
        const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        const __m256i b0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, s0), one), 4);
        const __m256i b1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, s1), one), 4);
        _mm256_store_si256((__m256i *)(u + 64 * g), _mm256_or_si256(lo, b0));
        _mm256_store_si256((__m256i *)(u + 64 * g + 32), _mm256_or_si256(hi, b1));
    }
}

/* Super-blocks a packing step unpacks per row (rows[KG_PACK_KB][16] on the
 * stack, 20 KiB). */
#define KG_PACK_KB 4

/* kern_kpack_group's bytes: the 16 rows' super-blocks unpacked
 * (kern_kpack_unpack; IQ4_XS's and Q5_K's values by the vector code above,
 * the compiler's own vectors serving Q4_K's and Q6_K's as well) KG_PACK_KB
 * at a time row by row, so the group's rows (one contiguous run) are read in address order with the next step's
 * lines prefetched: unpacking one super-block of each row in turn (16
 * streams 1-4 KiB apart) stalled on every load, 57 ns a row and
 * super-block. Then the values move into the slab's vectors by 16 x 16
 * transposes of 4-byte words in registers, not 64 scattered 4-byte stores
 * per row. */
static K5 void kpack_x512(uint32_t t, uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n)
{
    const int nb = n / QK_K;
    const size_t wb = dtype_row_bytes(t, QK_K);
    kern_kpack_row rows[KG_PACK_KB][KERN_KPACK_ROWS];
    if (nw < KERN_KPACK_ROWS) {
        memset(dst, 0, kern_kpack_group_bytes(n)); /* the padding rows' scales */
        memset(rows, 0, sizeof rows);              /* and values */
    }
    for (int b0 = 0; b0 < nb; b0 += KG_PACK_KB) {
        const int kb = nb - b0 < KG_PACK_KB ? nb - b0 : KG_PACK_KB;
        for (int c = 0; c < nw; c++) {
            const uint8_t *row = w + (size_t)c * ws + (size_t)b0 * wb;
            for (size_t l = 0; b0 + kb < nb && l < KG_PACK_KB * wb; l += 64)
                _mm_prefetch((const char *)(row + kb * wb + l), _MM_HINT_T0);
            for (int i = 0; i < kb; i++) {
                const void *blk = row + (size_t)i * wb;
                kern_kpack_unpack(t, &rows[i][c], blk, false);
                if (t == DT_IQ4_XS) kg_iq4_xs_values(rows[i][c].u, blk);
                else if (t == DT_Q5_K) kg_q5_K_values(rows[i][c].u, blk);
            }
        }
        for (int i = 0; i < kb; i++) {
            uint8_t *s = dst + (size_t)(b0 + i) * KPACK_SLAB;
            for (int k = 0; k < QK_K / 64; k++) {
                __m512i r[16], tt[16], u[16];
                for (int c = 0; c < 16; c++) r[c] = _mm512_load_si512((const void *)(rows[i][c].u + 64 * k));
                for (int c = 0; c < 16; c += 2) {
                    tt[c] = _mm512_unpacklo_epi32(r[c], r[c + 1]);
                    tt[c + 1] = _mm512_unpackhi_epi32(r[c], r[c + 1]);
                }
                /* u[4g + e], 128-bit lane L: element 4L + e of rows 4g..4g+3 */
                for (int g = 0; g < 4; g++) {
                    u[4 * g + 0] = _mm512_unpacklo_epi64(tt[4 * g], tt[4 * g + 2]);
                    u[4 * g + 1] = _mm512_unpackhi_epi64(tt[4 * g], tt[4 * g + 2]);
                    u[4 * g + 2] = _mm512_unpacklo_epi64(tt[4 * g + 1], tt[4 * g + 3]);
                    u[4 * g + 3] = _mm512_unpackhi_epi64(tt[4 * g + 1], tt[4 * g + 3]);
                }
                /* vector 16k + 4L + e: lane L of u[e], u[4 + e], u[8 + e], u[12 + e] */
                uint8_t *q = s + 64 * 16 * k;
                for (int e = 0; e < 4; e++) {
                    const __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x88);
                    const __m512i v1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xDD);
                    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x88);
                    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xDD);
                    _mm512_store_si512((void *)(q + 64 * (0 + e)), _mm512_shuffle_i32x4(v0, v2, 0x88));
                    _mm512_store_si512((void *)(q + 64 * (8 + e)), _mm512_shuffle_i32x4(v0, v2, 0xDD));
                    _mm512_store_si512((void *)(q + 64 * (4 + e)), _mm512_shuffle_i32x4(v1, v3, 0x88));
                    _mm512_store_si512((void *)(q + 64 * (12 + e)), _mm512_shuffle_i32x4(v1, v3, 0xDD));
                }
            }
            kern_kpack_slab_tail(s, rows[i], nw);
        }
    }
}

void kern_avx512_fill_kgemm(kern_vtable *t)
{
    /* Q6_K from 64 rows: its packing (6-bit values from two planes, 16
     * scales) costs ~45 rows of the product, 1.16x the GEMM tiles' time
     * at m = 32 (docs/speed.md) */
    t->kgemm[DT_Q2_K] = (kern_kgemm){kgemm_q2_K_x512, kpack_x512, KERN_KPACK_MIN_M};
    t->kgemm[DT_Q3_K] = (kern_kgemm){kgemm_sb16_x512, kpack_x512, KERN_KPACK_MIN_M};
    t->kgemm[DT_Q4_K] = (kern_kgemm){kgemm_min_x512, kpack_x512, KERN_KPACK_MIN_M};
    t->kgemm[DT_Q5_K] = (kern_kgemm){kgemm_min_x512, kpack_x512, KERN_KPACK_MIN_M};
    t->kgemm[DT_Q6_K] = (kern_kgemm){kgemm_sb16_x512, kpack_x512, 2 * KERN_KPACK_MIN_M};
    static const uint32_t lattice[] = {DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S, DT_IQ3_XXS, DT_IQ3_S, DT_IQ1_S, DT_IQ1_M};
    for (size_t i = 0; i < sizeof lattice / sizeof lattice[0]; i++)
        t->kgemm[lattice[i]] = (kern_kgemm){kgemm_sb16_x512, kpack_x512, KERN_KPACK_MIN_M};
    t->kgemm[DT_IQ4_XS] = (kern_kgemm){kgemm_sb32_x512, kpack_x512, KERN_KPACK_MIN_M};
}

#else

void kern_avx512_fill_kgemm(kern_vtable *t) { (void)t; }

#endif
