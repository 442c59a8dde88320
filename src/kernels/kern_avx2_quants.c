/* kern_avx2_quants.c - AVX2 dots of the block formats beside Q8_0, Q4_0,
 * Q4_K and Q6_K (kern_avx2.c has those): Q4_1, Q5_0, Q5_1, IQ4_NL (blocks
 * of 32) and Q2_K, Q3_K, Q5_K, IQ4_XS, TQ2_0 (super-blocks of 256). The
 * AVX2 table lists them (the AVX-512 tables have their own); TQ1_0 has
 * kern_avx2_tq1.c.
 *
 * One function per type computes one weight row against one activation
 * row; the GEMM tile and the decode dot tile call it for each pair, so an
 * element never depends on the tile, nx or the thread (kern_impl.h).
 *
 * - 256-element formats: the super-block's exact integer sums (the levels
 *   unpacked to bytes, maddubs against the Q8_K ints, madd with the
 *   sub-block scale codes) and then the reference's own float operations
 *   per super-block: the same bits as kern_ref_quants.c.
 * - 32-element formats: per block the exact integer sum in 8 int32 lanes,
 *   scaled by dw*dx into 8 float lanes across blocks (ggml's AVX2 order),
 *   one horizontal sum at the end; Q4_1/Q5_1's m*s terms in a scalar float.
 *   Within rounding of the reference (test_kernels).
 *
 * Signed levels use the sign trick: maddubs(|q|, sign(y, q)); |q| <= 127
 * and |y| <= 127 keep every int16 pair sum exact (2 * 127 * 127 < 32768).
 * Q3_K's levels go in unsigned (q + 4, 0..7) and 4 * sum sc * bsums comes
 * off once per super-block. Sub-block scales reach the madd as one permute
 * per pair of sub-blocks (scales_pair), not per-element broadcasts.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <string.h>

#include "kernels/kern_avx2_hsum.h"
#include "tensor/blocks.h"
#include "tensor/half.h"

/* f16 scales by kern_f16_lut (filled by kern_vt_avx2(), before any call):
 * a load, where the portable conversion costs more than a block's work. */
#define H2F(h) kern_f16_lut[(h)]

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* ----------------------------------------------------------- helpers */

KAI float hsum_f32(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* int16 pair sums of signed q times signed y (32 bytes each). */
KAI __m256i dot_s8_pairs(__m256i q, __m256i y)
{
    return _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high. */
KAI __m256i nibbles32(const uint8_t *qs)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* The 32 bits of qh (bit j: element j) as bytes 0x10 (set) or 0. */
KAI __m256i bits32_x10(const uint8_t *qh)
{
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

KAI __m256i iq4_table(void)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)quant_iq4nl_values);
    return _mm256_set_m128i(t, t);
}

/* ------------------------------------------------- 32-element blocks */

static KA float dot1_q5_0_avx2(int n, const block_q5_0 *w, const block_q8_0 *x)
{
    __m256 acc = _mm256_setzero_ps();
    const __m256i off = _mm256_set1_epi8(16);
    for (int b = 0; b < n / 32; b++) {
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(nibbles32(w[b].qs), bits32_x10(w[b].qh)), off);
        const __m256i y = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const __m256i s = _mm256_madd_epi16(dot_s8_pairs(q, y), _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(w[b].d) * H2F(x[b].d)), _mm256_cvtepi32_ps(s), acc);
    }
    return hsum_f32(acc);
}

static KA float dot1_iq4_nl_avx2(int n, const block_iq4_nl *w, const block_q8_0 *x)
{
    __m256 acc = _mm256_setzero_ps();
    const __m256i tab = iq4_table();
    for (int b = 0; b < n / 32; b++) {
        const __m256i q = _mm256_shuffle_epi8(tab, nibbles32(w[b].qs));
        const __m256i y = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const __m256i s = _mm256_madd_epi16(dot_s8_pairs(q, y), _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(w[b].d) * H2F(x[b].d)), _mm256_cvtepi32_ps(s), acc);
    }
    return hsum_f32(acc);
}

/* Q4_1 (qh NULL) and Q5_1: unsigned levels straight into maddubs. */
KAI float dot1_qx_1_avx2(int n, const uint8_t *w, size_t bs, size_t qh_at, size_t qs_at, const block_q8_1 *x)
{
    __m256 acc = _mm256_setzero_ps();
    float ms = 0.0f;
    for (int b = 0; b < n / 32; b++, w += bs) {
        uint16_t d, m;
        memcpy(&d, w, 2), memcpy(&m, w + 2, 2);
        __m256i q = nibbles32(w + qs_at);
        if (qh_at) q = _mm256_or_si256(q, bits32_x10(w + qh_at));
        const __m256i y = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(H2F(d) * H2F(x[b].d)), _mm256_cvtepi32_ps(s), acc);
        ms += H2F(m) * H2F(x[b].s);
    }
    return hsum_f32(acc) + ms;
}

static KA float dot1_q4_1_avx2(int n, const block_q4_1 *w, const block_q8_1 *x)
{
    return dot1_qx_1_avx2(n, (const uint8_t *)w, sizeof *w, 0, offsetof(block_q4_1, qs), x);
}

static KA float dot1_q5_1_avx2(int n, const block_q5_1 *w, const block_q8_1 *x)
{
    return dot1_qx_1_avx2(n, (const uint8_t *)w, sizeof *w, offsetof(block_q5_1, qh), offsetof(block_q5_1, qs), x);
}

/* ------------------------------------------------ 256-element blocks */

/* 16 int16 sub-block scales s16 as two vectors of int32 lanes each holding
 * one scale twice: lo = s0..s3, s8..s11; hi = s4..s7, s12..s15. */
KAI void scales_dup(__m256i s16, __m256i *lo, __m256i *hi)
{
    *lo = _mm256_unpacklo_epi16(s16, s16);
    *hi = _mm256_unpackhi_epi16(s16, s16);
}

/* int16 scales for 32 elements of sub-blocks j (even) and j + 1: scale j
 * in the low 128-bit lane, j + 1 in the high one (one permute). */
KAI __m256i scales_pair(__m256i lo, __m256i hi, int j)
{
    const int i0 = j % 4 + 4 * (j / 8);
    return _mm256_permutevar8x32_epi32((j % 8) < 4 ? lo : hi, _mm256_setr_epi32(i0, i0, i0, i0, i0 + 1, i0 + 1, i0 + 1, i0 + 1));
}

static KA float dot1_q2_K_avx2(int n, const block_q2_K *w, const block_q8_K *x)
{
    float s = 0.0f;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int b = 0; b < n / QK_K; b++) {
        __m256i isum = _mm256_setzero_si256(), slo, shi;
        const __m256i sb = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)w[b].scales));
        scales_dup(_mm256_and_si256(sb, _mm256_set1_epi16(0xF)), &slo, &shi);
        const __m256i mins = _mm256_srli_epi16(sb, 4);
        const int msum = kavx2_hsum_i32(_mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)x[b].bsums)));
        #pragma GCC unroll 8
        for (int h = 0; h < 2; h++) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * h));
            #pragma GCC unroll 8
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                const __m256i y = _mm256_loadu_si256((const __m256i *)(x[b].qs + 128 * h + 32 * k));
                const __m256i sc = scales_pair(slo, shi, 8 * h + 2 * k);
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), sc));
            }
        }
        s += x[b].d * H2F(w[b].d) * (float)kavx2_hsum_i32(isum) - x[b].d * H2F(w[b].dmin) * (float)msum;
    }
    return s;
}

/* Q3_K's 16 six-bit scales minus 32 as int16 (block_q3_K_scale's layout):
 * low 4 bits of scale j in byte j % 8 (high nibble if j >= 8), high 2 bits
 * in byte 8 + j % 4 at bit 2 * (j / 4). Unpacked in registers: a stack
 * array here costs a failed store forwarding per super-block. */
KAI __m256i q3_K_scales16(const uint8_t *sc)
{
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i a = _mm_loadl_epi64((const __m128i *)sc);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(a, m4), _mm_and_si128(_mm_srli_epi16(a, 4), m4));
    uint32_t hw;
    memcpy(&hw, sc + 8, 4);
    /* 32-bit lane i = hw >> 2i: byte j = 4i + k holds scale j's high bits at bits 0-1 */
    const __m128i h = _mm_srlv_epi32(_mm_set1_epi32((int)hw), _mm_setr_epi32(0, 2, 4, 6));
    const __m128i hi = _mm_and_si128(_mm_slli_epi16(h, 4), _mm_set1_epi8(0x30));
    const __m256i v = _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
    return _mm256_sub_epi16(v, _mm256_set1_epi16(32));
}

static KA float dot1_q3_K_avx2(int n, const block_q3_K *w, const block_q8_K *x)
{
    float s = 0.0f;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    for (int b = 0; b < n / QK_K; b++) {
        __m256i isum = _mm256_setzero_si256(), slo, shi;
        const __m256i s16 = q3_K_scales16(w[b].scales);
        scales_dup(s16, &slo, &shi);
        /* the levels go in as q + 4: take 4 * sum_j sc_j * (sum of y over j) off */
        const __m256i off = _mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i *)x[b].bsums));
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 2));
        const __m256i hm = _mm256_loadu_si256((const __m256i *)w[b].hmask);
        #pragma GCC unroll 8
        for (int h = 0; h < 2; h++) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * h));
            #pragma GCC unroll 8
            for (int k = 0; k < 4; k++) {
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + k)));
                const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(set, four)); /* q + 4, 0..7 */
                const __m256i y = _mm256_loadu_si256((const __m256i *)(x[b].qs + 128 * h + 32 * k));
                const __m256i sc = scales_pair(slo, shi, 8 * h + 2 * k);
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), sc));
            }
        }
        s += H2F(w[b].d) * x[b].d * (float)kavx2_hsum_i32(isum);
    }
    return s;
}

static KA float dot1_q5_K_avx2(int n, const block_q5_K *w, const block_q8_K *x)
{
    float s = 0.0f;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int b = 0; b < n / QK_K; b++) {
        __m256i isum = _mm256_setzero_si256();
        int msum = 0;
        const __m256i qh = _mm256_loadu_si256((const __m256i *)w[b].qh);
        #pragma GCC unroll 8
        for (int g = 0; g < 4; g++) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * g));
            #pragma GCC unroll 8
            for (int u = 0; u < 2; u++) {
                const int j = 2 * g + u;
                uint8_t sc, m;
                block_q4_K_scale_min(j, w[b].scales, &sc, &m);
                msum += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, j), one);
                const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4 * u), m4), _mm256_slli_epi16(hb, 4));
                const __m256i y = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * j));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(sc)));
            }
        }
        s += H2F(w[b].d) * x[b].d * (float)kavx2_hsum_i32(isum);
        s -= H2F(w[b].dmin) * x[b].d * (float)msum;
    }
    return s;
}

static KA float dot1_iq4_xs_avx2(int n, const block_iq4_xs *w, const block_q8_K *x)
{
    float s = 0.0f;
    const __m256i tab = iq4_table();
    for (int b = 0; b < n / QK_K; b++) {
        __m256i isum = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m256i q = _mm256_shuffle_epi8(tab, nibbles32(w[b].qs + 16 * j));
            const __m256i y = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * j));
            const __m256i sc = _mm256_set1_epi16((short)(block_iq4_xs_scale(j, &w[b]) - 32));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(dot_s8_pairs(q, y), sc));
        }
        s += H2F(w[b].d) * x[b].d * (float)kavx2_hsum_i32(isum);
    }
    return s;
}

/* sum (q-1)*y = sum q*y - sum y, the latter from Q8_K's bsums. */
static KA float dot1_tq2_0_avx2(int n, const block_tq2_0 *w, const block_q8_K *x)
{
    float s = 0.0f;
    const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    for (int b = 0; b < n / QK_K; b++) {
        __m256i isum = _mm256_setzero_si256();
        int ysum = 0;
        for (int j = 0; j < 16; j++) ysum += x[b].bsums[j];
        #pragma GCC unroll 8
        for (int h = 0; h < 2; h++) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * h));
            #pragma GCC unroll 8
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
                const __m256i y = _mm256_loadu_si256((const __m256i *)(x[b].qs + 128 * h + 32 * k));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), ones));
            }
        }
        s += (float)(kavx2_hsum_i32(isum) - ysum) * (H2F(w[b].d) * x[b].d);
    }
    return s;
}

/* ---------------------------------------------------------- the tiles */

#define AVX2Q_TILES(T, WT, XT)                                                                         \
    void kern_gemm_##T##_avx2(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, \
                              size_t xs, int nx)                                                        \
    {                                                                                                   \
        for (int r = 0; r < nx; r++)                                                                    \
            for (int c = 0; c < nw; c++)                                                                \
                y[r * ys + c] = dot1_##T##_avx2(n, (const WT *)((const uint8_t *)w + c * ws),           \
                                                (const XT *)((const uint8_t *)x + r * xs));             \
    }                                                                                                   \
    void kern_dot_##T##_avx2(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx) \
    {                                                                                                   \
        for (int r = 0; r < nx; r++) s[r * ss] = dot1_##T##_avx2(n, w, (const XT *)((const uint8_t *)x + r * xs)); \
    }

AVX2Q_TILES(q4_1, block_q4_1, block_q8_1)
AVX2Q_TILES(q5_0, block_q5_0, block_q8_0)
AVX2Q_TILES(q5_1, block_q5_1, block_q8_1)
AVX2Q_TILES(iq4_nl, block_iq4_nl, block_q8_0)
AVX2Q_TILES(q2_K, block_q2_K, block_q8_K)
AVX2Q_TILES(q3_K, block_q3_K, block_q8_K)
AVX2Q_TILES(q5_K, block_q5_K, block_q8_K)
AVX2Q_TILES(iq4_xs, block_iq4_xs, block_q8_K)
AVX2Q_TILES(tq2_0, block_tq2_0, block_q8_K)

#endif
