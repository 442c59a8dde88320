/* kern_avx512_legacy.c - AVX-512 (VNNI) tiles of the 32-element formats
 * beside Q8_0/Q4_0: Q4_1, Q5_1 (against Q8_1) and Q5_0, IQ4_NL (against
 * Q8_0), GEMM tiles and decode dots.
 *
 * Per block, the weight row's 32 levels are unpacked once into bytes and
 * serve every activation row of the tile (the AVX2 kernels unpack per
 * pair); vpdpbusd takes them against the activation's bytes, 4 products a
 * lane, into 8 int32 lanes. Q4_1/Q5_1's levels are unsigned (0..31) and go
 * in as they are; Q5_0's (-16..15) and IQ4_NL's (-127..113) are signed, so
 * |q| goes in unsigned and the activation takes q's sign (Q8_0 values are
 * in -127..127, so negating one is exact).
 *
 * Numerics as the AVX2 kernels': per block the exact integer sum in 8
 * lanes, scaled by dw*dx into 8 float lanes across blocks, one horizontal
 * sum at the end; Q4_1/Q5_1's m*s terms in a scalar float. Within rounding
 * of the reference (test_kernels). Each (weight row, activation row) pair
 * takes the same operations whatever the tile (kern_impl.h's invariants).
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <string.h>

#include "tensor/blocks.h"

K5AI float lg_hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high. */
K5AI __m256i lg_nibbles(const uint8_t *qs)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* The 32 bits of qh (bit j: element j) as bytes 0x10 (set) or 0. */
K5AI __m256i lg_bits_x10(const uint8_t *qh)
{
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Activation row r of the tile. */
#define LG_ROW(T, x, xs, r) ((const T *)((const uint8_t *)(x) + (size_t)(r) * (xs)))

/* Q5_0 and IQ4_NL (signed levels) against Q8_0. */
K5AI void signed_tile(int NX, int n, float *s, size_t ss, const uint8_t *w, size_t bs, bool iq4, const void *x,
                      size_t xs)
{
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < n / 32; b++, w += bs) {
        uint16_t dh;
        memcpy(&dh, w, 2);
        __m256i q;
        if (iq4) q = _mm256_shuffle_epi8(tab, lg_nibbles(w + offsetof(block_iq4_nl, qs)));
        else q = _mm256_sub_epi8(_mm256_or_si256(lg_nibbles(w + offsetof(block_q5_0, qs)),
                                                 lg_bits_x10(w + offsetof(block_q5_0, qh))),
                                 _mm256_set1_epi8(16));
        const __m256i aq = _mm256_sign_epi8(q, q);
        const float dw = kern_f16_lut[dh];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_0 *xb = LG_ROW(block_q8_0, x, xs, r) + b;
            const __m256i y = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)xb->qs), q);
            const __m256i i8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aq, y);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * kern_f16_lut[xb->d]), _mm256_cvtepi32_ps(i8), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = lg_hsum_ps(acc[r]);
}

/* Q4_1 (no qh) and Q5_1 (unsigned levels, a min) against Q8_1. */
K5AI void unsigned_tile(int NX, int n, float *s, size_t ss, const uint8_t *w, size_t bs, size_t qh_at,
                        size_t qs_at, const void *x, size_t xs)
{
    __m256 acc[KERN_NX_MAX];
    float ms[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps(), ms[r] = 0.0f;
    for (int b = 0; b < n / 32; b++, w += bs) {
        uint16_t dh, mh;
        memcpy(&dh, w, 2), memcpy(&mh, w + 2, 2);
        __m256i q = lg_nibbles(w + qs_at);
        if (qh_at) q = _mm256_or_si256(q, lg_bits_x10(w + qh_at));
        const float dw = kern_f16_lut[dh], mw = kern_f16_lut[mh];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_1 *xb = LG_ROW(block_q8_1, x, xs, r) + b;
            const __m256i y = _mm256_loadu_si256((const __m256i *)xb->qs);
            const __m256i i8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, y);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * kern_f16_lut[xb->d]), _mm256_cvtepi32_ps(i8), acc[r]);
            ms[r] += mw * kern_f16_lut[xb->s];
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = lg_hsum_ps(acc[r]) + ms[r];
}

K5AI void q5_0_tile(int NX, int n, float *s, size_t ss, const void *w, const void *x, size_t xs)
{
    signed_tile(NX, n, s, ss, w, sizeof(block_q5_0), false, x, xs);
}
K5AI void iq4_nl_tile(int NX, int n, float *s, size_t ss, const void *w, const void *x, size_t xs)
{
    signed_tile(NX, n, s, ss, w, sizeof(block_iq4_nl), true, x, xs);
}
K5AI void q4_1_tile(int NX, int n, float *s, size_t ss, const void *w, const void *x, size_t xs)
{
    unsigned_tile(NX, n, s, ss, w, sizeof(block_q4_1), 0, offsetof(block_q4_1, qs), x, xs);
}
K5AI void q5_1_tile(int NX, int n, float *s, size_t ss, const void *w, const void *x, size_t xs)
{
    unsigned_tile(NX, n, s, ss, w, sizeof(block_q5_1), offsetof(block_q5_1, qh), offsetof(block_q5_1, qs), x, xs);
}

/* GEMM tile (kern_gemm_fn) and decode dot (kern_dot_fn) of one type. */
#define LG_DRIVERS(T)                                                                                       \
    static K5 void gemm_##T##_x512(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, \
                                   size_t xs, int nx)                                                      \
    {                                                                                                      \
        for (int c = 0; c < nw; c++) {                                                                     \
            const void *wc = (const uint8_t *)w + (size_t)c * ws;                                          \
            switch (nx) {                                                                                  \
            case 1: T##_tile(1, n, y + c, ys, wc, x, xs); break;                                           \
            case 2: T##_tile(2, n, y + c, ys, wc, x, xs); break;                                           \
            case 3: T##_tile(3, n, y + c, ys, wc, x, xs); break;                                           \
            default: T##_tile(4, n, y + c, ys, wc, x, xs); break;                                          \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
    static K5 void dot_##T##_x512(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx) \
    {                                                                                                      \
        if (nx == 1) T##_tile(1, n, s, ss, w, x, xs);                                                      \
        else T##_tile(2, n, s, ss, w, x, xs);                                                              \
    }

LG_DRIVERS(q5_0)
LG_DRIVERS(iq4_nl)
LG_DRIVERS(q4_1)
LG_DRIVERS(q5_1)

void kern_avx512_fill_legacy(kern_vtable *t)
{
    t->gemm[DT_Q5_0] = (kern_gemm){gemm_q5_0_x512, 1, 4, NULL, 0};
    t->dot[DT_Q5_0] = dot_q5_0_x512;
    t->gemm[DT_IQ4_NL] = (kern_gemm){gemm_iq4_nl_x512, 1, 4, NULL, 0};
    t->dot[DT_IQ4_NL] = dot_iq4_nl_x512;
    t->gemm[DT_Q4_1] = (kern_gemm){gemm_q4_1_x512, 1, 4, NULL, 0};
    t->dot[DT_Q4_1] = dot_q4_1_x512;
    t->gemm[DT_Q5_1] = (kern_gemm){gemm_q5_1_x512, 1, 4, NULL, 0};
    t->dot[DT_Q5_1] = dot_q5_1_x512;
}

#else

void kern_avx512_fill_legacy(kern_vtable *t) { (void)t; }

#endif
