/* kern_avx512_kquant.c - AVX-512 kernels for Q4_K and Q6_K weights against
 * Q8_K activations: GEMM tiles and decode dot tiles (VNNI).
 *
 * Integer part, per super-block (256 weights) and activation row, exact:
 * - 64 weights sit in one zmm as unsigned bytes (two 32-element chunks:
 *   Q4_K's low and high nibbles of 32 bytes, or two Q6_K chunks 0..63),
 *   against one 64-byte load of activations (contiguous in the Q8_K block
 *   in that order);
 * - VNNI's vpdpbusd (u8 x s8, sums of 4 into int32) gives per lane the
 *   dot of 4 consecutive elements, |.| <= 4 * 63 * 128 < 2^15 since a Q8_K
 *   value is never -128 (|q| <= 127), so it fits an int16;
 * - the scale changes every 16 (Q6_K) or 32 (Q4_K) weights and weight x
 *   scale does not fit a byte, so the scales are applied after that: two
 *   such vectors are packed to int16 (packs, no saturation) and multiplied
 *   by the sub-block scales with pairwise sums into int32 (vpdpwssd; not
 *   _mm512_madd_epi16, which SIMDe 0.7.4 aliases wrongly), the scales
 *   placed per int16 by vpermw. Per 64 weights and row that is one
 *   vpdpbusd and half a packs and a vpdpwssd, where AVX2 needs maddubs +
 *   madd + add;
 * - the 16 int32 lanes fold (high + low half) to 8 once per super-block;
 * - Q6_K's -32 offset: one vpdpwssd of the activation's bsums (sums of 16,
 *   |.| <= 2032) with -32 * sc (|.| <= 4096), as AVX2's 32 * sum sc * bsums.
 * Float part, as AVX2: per super-block one FMA of d * y.d (and for Q4_K
 * one FNMADD of dmin * y.d times the min term from bsums) into 8 float
 * lanes, one horizontal sum at the end.
 *
 * Numerics: the same exact integer sum per super-block as the reference and
 * AVX2, spread over the 8 lanes differently from AVX2's (a lane holds other
 * groups of 4 elements), so the float accumulation differs from AVX2's
 * within rounding (the tests' TOL_SIMD_VS_REF), not bit for bit. The
 * invariants of kern_impl.h hold: one code path per element whatever the
 * tile shape (the GEMM runs one weight row against nx <= 4 rows, every
 * row's operations the same for any nx), and the decode dots (nx = 1, 2)
 * likewise do not depend on nx. Q4_K's decode dot is the GEMM's tile;
 * Q6_K's is a 256-bit version (q6_K_tile_y: 8 int32 lanes, no fold), so
 * its float sums differ from the Q6_K GEMM's within rounding, as
 * kern_impl.h allows for decode dots.
 *
 * The GEMM tiles keep the AVX2 tiles' prefetch (KQ_PF_BYTES); the decode
 * dots (one weight row streamed from DRAM) take the CPU's stream prefetch
 * (kern_pf_stream, kern_impl.h), and where that is none (AMD before Zen 5) go without
 * one for rows of 2048 elements and more: on Zen 4 it only
 * took the stream from the L2 hardware prefetcher (shorter rows keep it:
 * dot_q6_K_x512). docs/speed.md has the measurements.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <string.h>

#include "tensor/blocks.h"


K5AI float kq_hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The GEMM tiles' (and short decode rows') prefetch, as kern_avx2.c: the
 * 2 KiB ahead of each block (measured there; docs/speed.md). */
#ifndef KQ_PF_BYTES
#define KQ_PF_BYTES 2048
#endif
#ifndef KQ_PF_HINT
#define KQ_PF_HINT _MM_HINT_T0
#endif
/* A tile's prefetch (kq_pf): none (dist 0), the GEMM tiles' (KQ_PF_GEMM)
 * or the CPU's stream prefetch (l2 true, dist kern_pf_stream). */
typedef struct {
    int dist;
    bool l2;
} kq_pf;
#define KQ_PF_GEMM ((kq_pf){KQ_PF_BYTES, false})
K5AI void kq_prefetch_pf(kq_pf pf, const void *block, size_t bytes)
{
    const uintptr_t a = (uintptr_t)block + (size_t)pf.dist;
    for (uintptr_t l = a & ~(uintptr_t)63; l < a + bytes; l += 64) {
        if (pf.l2) _mm_prefetch((const char *)l, _MM_HINT_T1);
        else _mm_prefetch((const char *)l, KQ_PF_HINT);
    }
}

/* int16 vector: value lo in the low 256 bits, hi in the high 256 bits. */
K5AI __m512i halves_epi16(short lo, short hi)
{
    return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

/* The 8 six-bit scales and 8 mins of a Q4_K block as 16 bytes sc[0..7]
 * m[0..7] (as kern_avx2.c). */
K5AI __m128i q4_K_scales_mins(const uint8_t *s12)
{
    uint32_t a, b, c;
    memcpy(&a, s12, 4);     /* sc[0..3] | top bits of sc[4..7] */
    memcpy(&b, s12 + 4, 4); /*  m[0..3] | top bits of  m[4..7] */
    memcpy(&c, s12 + 8, 4); /* low 4 bits of sc[4..7] | low 4 bits of m[4..7] << 4 */
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t sc03 = a & lo6, m03 = b & lo6;
    const uint32_t sc47 = (c & lo4) | (((a >> 6) & lo2) << 4);
    const uint32_t m47 = ((c >> 4) & lo4) | (((b >> 6) & lo2) << 4);
    return _mm_setr_epi32((int)sc03, (int)sc47, (int)m03, (int)m47);
}

/* Q4_K: dot = d*y.d * sum_j sc_j (q.y)_j - dmin*y.d * sum_j m_j (sum y)_j,
 * the min term from the activation's bsums (sums of 16) against each min
 * twice. One weight row against NX activation rows. q[k] holds elements
 * 64k..64k+63: sub-block 2k (low nibbles) in 128-bit lanes 0, 1 and 2k+1
 * (high nibbles) in lanes 2, 3. packs(d[2p], d[2p+1]) puts, per 128-bit
 * lane L, the 4 int32 of d[2p] lane L into int16 0..3 and those of
 * d[2p+1] into 4..7. */
K5AI void q4_K_tile_pf(kq_pf pf, int NX, int nb, float *s, size_t ss, const block_q4_K *w, const uint8_t *x,
                       size_t xs)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i nib = halves_epi16(0, 4); /* low half: low nibbles, high half: high nibbles */
    /* vpermw controls for pair p (k = 2p, 2p+1): int16 w of 128-bit lane L
     * gets sc[4p + 2 * (w % 8 >= 4) + L / 2] (see the packs below) */
    __m512i pick[2];
    for (int p = 0; p < 2; p++) {
        short v[32];
        for (int w = 0; w < 32; w++) v[w] = (short)(4 * p + 2 * (w % 8 >= 4) + w / 16);
        pick[p] = _mm512_loadu_si512((const void *)v);
    }
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q4_K *wb = &w[b];
        if (pf.dist) kq_prefetch_pf(pf, wb, sizeof *wb);
        const __m128i sm = q4_K_scales_mins(wb->scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm)); /* int16: sc[0..7] m[0..7] */
        const __m128i mn8 = _mm_unpackhi_epi64(sm, sm);
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8)); /* m[j/2] for bsum j */
        __m512i q[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m512i qb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k)));
            q[k] = _mm512_and_si512(_mm512_srlv_epi16(qb, nib), m4);
        }
        const __m512i scv0 = _mm512_permutexvar_epi16(pick[0], sc16), scv1 = _mm512_permutexvar_epi16(pick[1], sc16);
        __m512i isum[KERN_NX_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const int8_t *y = ((const block_q8_K *)(x + r * xs) + b)->qs;
            __m512i d[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                d[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[k], _mm512_loadu_si512((const void *)(y + 64 * k)));
            isum[r] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(d[0], d[1]), scv0);
            isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_packs_epi32(d[2], d[3]), scv1);
        }
        /* d * y.d as vector products of broadcasts (fewer operations per
         * row than scalar products and broadcasts) */
        const __m256 dw = _mm256_broadcast_ss(&kern_f16_lut[wb->d]), dm = _mm256_broadcast_ss(&kern_f16_lut[wb->dmin]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            const __m256 xd = _mm256_broadcast_ss(&xb->d);
            const __m256i i8 = _mm256_add_epi32(_mm512_castsi512_si256(isum[r]), _mm512_extracti64x4_epi64(isum[r], 1));
            const __m256i ms = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), mins16);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, xd), _mm256_cvtepi32_ps(i8), acc[r]);
            acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dm, xd), _mm256_cvtepi32_ps(ms), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = kq_hsum_ps(acc[r]);
}

/* Q6_K: dot = d*y.d * sum_j sc_j ((q-32).y)_j with q unsigned (0..63) in
 * vpdpbusd; the offset comes back as -32 * sum_j sc_j * bsums_j. Per half
 * h (128 elements) and pair kp, q[2h + kp] holds the 64 elements
 * 128h + 64kp + (0..63), whose 16-element sub-blocks (one per 128-bit
 * lane L) have scales sc[8h + 4kp + L]. Layout of ql/qh in blocks.h:
 * element 128h + 32k + i has the low 4 bits in ql[64h + 32(k&1) + i]
 * (high nibble if k >= 2) and the top 2 in bits 2k of qh[32h + i]. */
K5AI void q6_K_tile(int NX, int nb, float *s, size_t ss, const block_q6_K *w, const uint8_t *x, size_t xs)
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* qh bits 2k to bits 4..5: k = 0, 1 (kp = 0) by shifts left 4, 2; k = 2, 3 by right 0, 2 */
    const __m512i shl = halves_epi16(4, 2), shr = halves_epi16(0, 2);
    /* vpermw controls for half h: int16 w of 128-bit lane L gets
     * sc[8h + 4 * (w % 8 >= 4) + L] (see the packs below) */
    __m512i pick[2];
    for (int h = 0; h < 2; h++) {
        short v[32];
        for (int w = 0; w < 32; w++) v[w] = (short)(8 * h + 4 * (w % 8 >= 4) + w / 8);
        pick[h] = _mm512_loadu_si512((const void *)v);
    }
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q6_K *wb = &w[b];
        kq_prefetch_pf(KQ_PF_GEMM, wb, sizeof *wb);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales));
        const __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i q[4], scv[2]; /* q[2h + kp] */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512((const void *)(wb->ql + 64 * h));
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h)));
#pragma GCC unroll 2
            for (int kp = 0; kp < 2; kp++) {
                const __m512i lo = kp ? _mm512_srli_epi16(ql, 4) : ql;
                const __m512i hi = _mm512_and_si512(kp ? _mm512_srlv_epi16(qh, shr) : _mm512_sllv_epi16(qh, shl), m30);
                q[2 * h + kp] = _mm512_ternarylogic_epi32(lo, hi, m4, 0xEC); /* (lo & m4) | hi */
            }
            scv[h] = _mm512_permutexvar_epi16(pick[h], sc512);
        }
        __m512i isum[KERN_NX_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const int8_t *y = ((const block_q8_K *)(x + r * xs) + b)->qs;
            __m512i d[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                d[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[k], _mm512_loadu_si512((const void *)(y + 64 * k)));
            isum[r] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(d[0], d[1]), scv[0]);
            isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_packs_epi32(d[2], d[3]), scv[1]);
        }
        const __m256i scm32 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)); /* -32 sc */
        const __m256 dw = _mm256_broadcast_ss(&kern_f16_lut[wb->d]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            __m256i i8 = _mm256_add_epi32(_mm512_castsi512_si256(isum[r]), _mm512_extracti64x4_epi64(isum[r], 1));
            i8 = _mm256_dpwssd_epi32(i8, _mm256_loadu_si256((const __m256i *)xb->bsums), scm32);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&xb->d)), _mm256_cvtepi32_ps(i8), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = kq_hsum_ps(acc[r]);
}

/* Q6_K decode dot tile: the same integer scheme in 256-bit vectors. The
 * 512-bit tile above is faster in cache, but streaming one weight row from
 * DRAM (m = 1: the output matrix at decode) it was slower than AVX2 in the
 * engine, while this one is as fast as AVX2 there (cause not found;
 * docs/speed.md lists what was tried) and still faster in cache and at
 * m = 4. Per 32-element chunk (h, k) of q6_K_load_y:
 * 128-bit lane L is sub-block 8h + 2k + L; packs(d[kk], d[kk+1]) puts per
 * lane L the chunk kk's int32 into int16 0..3 and chunk kk+1's into 4..7.
 * The unsigned q (0..63) of elements 128h + 32k + (0..31), as kern_avx2.c. */
K5AI __m256i q6_K_load_y(const block_q6_K *wb, int h, int k)
{
    __m256i lo = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h + 32 * (k & 1)));
    if (k >> 1) lo = _mm256_srli_epi16(lo, 4);
    lo = _mm256_and_si256(lo, _mm256_set1_epi8(0x0F));
    __m256i hi = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h));
    hi = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * k), _mm256_set1_epi8(0x03));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

K5AI void q6_K_tile_y(kq_pf pf, int NX, int nb, float *s, size_t ss, const block_q6_K *w, const uint8_t *x, size_t xs)
{
    /* [2h + kk/2]: int16 wd of lane L gets sc[8h + 2kk + 2 * (wd % 8 >= 4) + L], as constants: built in a
     * loop they cost each call (a row of 8 blocks for the output matrix) ~70 instructions */
#define PICK(b) _mm256_setr_epi16(b, b, b, b, b + 2, b + 2, b + 2, b + 2, b + 1, b + 1, b + 1, b + 1, b + 3, b + 3, b + 3, b + 3)
    const __m256i pick[4] = {PICK(0), PICK(4), PICK(8), PICK(12)};
#undef PICK
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q6_K *wb = &w[b];
        if (pf.dist) kq_prefetch_pf(pf, wb, sizeof *wb);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales));
        __m256i isum[KERN_NX_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
            for (int kk = 0; kk < 4; kk += 2) {
                const __m256i q0 = q6_K_load_y(wb, h, kk), q1 = q6_K_load_y(wb, h, kk + 1);
                const __m256i scv = _mm256_permutexvar_epi16(pick[2 * h + kk / 2], sc16);
#pragma GCC unroll 4
                for (int r = 0; r < NX; r++) {
                    const int8_t *y = ((const block_q8_K *)(x + r * xs) + b)->qs + 128 * h + 32 * kk;
                    const __m256i d0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q0, _mm256_loadu_si256((const __m256i *)y));
                    const __m256i d1 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q1, _mm256_loadu_si256((const __m256i *)(y + 32)));
                    isum[r] = _mm256_dpwssd_epi32(isum[r], _mm256_packs_epi32(d0, d1), scv);
                }
            }
        const __m256i scm32 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)); /* -32 sc */
        const __m256 dw = _mm256_broadcast_ss(&kern_f16_lut[wb->d]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            const __m256i i8 = _mm256_dpwssd_epi32(isum[r], _mm256_loadu_si256((const __m256i *)xb->bsums), scm32);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&xb->d)), _mm256_cvtepi32_ps(i8), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = kq_hsum_ps(acc[r]);
}

/* GEMM: one weight row at a time against nx <= 4 rows (as AVX2: the tile
 * height only decides how often a weight block is unpacked); decode dots:
 * one weight row, nx = 1 or 2 (Q4_K: the GEMM's tile; Q6_K: the 256-bit
 * one). kern_impl.h's drivers. */
/* Q4_K's GEMM tile: its one tile with the prefetch. */
K5AI void q4_K_tile(int NX, int nb, float *s, size_t ss, const block_q4_K *w, const uint8_t *x, size_t xs)
{
    q4_K_tile_pf(KQ_PF_GEMM, NX, nb, s, ss, w, x, xs);
}

KERN_KGEMM_DRIVER(gemm_q4_K_x512, K5, q4_K_tile, block_q4_K)
KERN_KGEMM_DRIVER(gemm_q6_K_x512, K5, q6_K_tile, block_q6_K)

/* The decode dots' prefetch: the CPU's stream prefetch where it has one
 * (kern_pf_stream, kern_impl.h: not on AMD before Zen 5); else only for rows shorter
 * than KQ_DOT_PF_BELOW elements, the GEMM tiles' (see the header): on Zen 4
 * rows of 768 elements (the 110M shape's output matrix, 3 blocks a row)
 * were faster with it, rows of 2048 and more without it. Where the CPU has
 * a stream prefetch, it reads better than the GEMM's 2 KiB into L1
 * (docs/speed.md). */
#ifndef KQ_DOT_PF_BELOW
#define KQ_DOT_PF_BELOW 2048
#endif
K5AI kq_pf kq_dot_pf(int n)
{
    const int stream = kern_pf_stream;
    if (stream) return (kq_pf){stream, true};
    return (kq_pf){n < KQ_DOT_PF_BELOW ? KQ_PF_BYTES : 0, false};
}
static K5 void dot_q4_K_x512(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx)
{
    const kq_pf pf = kq_dot_pf(n);
    if (nx == 1) q4_K_tile_pf(pf, 1, n / QK_K, s, ss, w, x, xs);
    else q4_K_tile_pf(pf, 2, n / QK_K, s, ss, w, x, xs);
}
static K5 void dot_q6_K_x512(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx)
{
    const kq_pf pf = kq_dot_pf(n);
    if (nx == 1) q6_K_tile_y(pf, 1, n / QK_K, s, ss, w, x, xs);
    else q6_K_tile_y(pf, 2, n / QK_K, s, ss, w, x, xs);
}

void kern_avx512_fill_kquant(kern_vtable *t)
{
    t->gemm[DT_Q4_K] = (kern_gemm){gemm_q4_K_x512, 1, 4, NULL, 0};
    t->gemm[DT_Q6_K] = (kern_gemm){gemm_q6_K_x512, 1, 4, NULL, 0};
    t->dot[DT_Q4_K] = dot_q4_K_x512;
    t->dot[DT_Q6_K] = dot_q6_K_x512; /* the 256-bit tile, see q6_K_tile_y */
}

#else

void kern_avx512_fill_kquant(kern_vtable *t) { (void)t; }

#endif
