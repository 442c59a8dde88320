/* kern_neon.c - the aarch64 Advanced SIMD (NEON) variant of the kernels.
 *
 * NEON is part of the aarch64 base ABI: on aarch64 kern_init() always
 * overlays this table; on other architectures the file compiles to a stub
 * and kern_vt_neon() returns NULL. Entries left NULL (rope; the decode dot
 * tiles of the float types, Q4_K and Q6_K, whose GEMM tiles then serve
 * every m) fall back to the reference (kern_impl.h). The other
 * block formats' tiles live in kern_neon_quants.c.
 *
 * Integer dots of 32 int8 pairs use SDOT when the compiler targets the
 * dot-product extension (__ARM_FEATURE_DOTPROD, e.g. -march=armv8.2-a+dotprod;
 * the table is then named "neon-dotprod"), else widening multiplies
 * (SMULL) with pairwise widening adds (SADALP). Both are exact, so the two
 * builds give the same bits everywhere.
 *
 * Numerics, relative to kern_ref.c:
 * - Q8_0/Q4_0 GEMM tiles: per block the exact integer sum of the 32
 *   products, then the reference's own float operations in the lane of the
 *   element's weight row,
 *     Q8_0: s = s + (float)isum * (dw * dx)
 *     Q4_0: s = s + ((float)isum * dw) * dx
 *   with separate multiplies and adds (the build's -std=c11 keeps GCC from
 *   contracting them into FMA): equal to the reference bit for bit;
 * - Q4_K/Q6_K GEMM tiles: the exact integer sums of each super-block, then
 *   the reference's scalar float operations: equal to it bit for bit;
 * - Q8_0/Q4_0 decode dot tiles (m <= KERN_DOT_MAX_M) are laid out like
 *   ggml's NEON vec_dot: per block the 4 lanes of int32 partial sums to
 *   float, multiplied by dw*dx and added into 4-lane accumulators, two
 *   accumulators over alternating blocks, one horizontal sum of each at the
 *   end; within rounding of the reference;
 * - float GEMM tiles (F32/F16/BF16): per element one 4-lane float FMA
 *   accumulator over i = 0, 4, 8, ..., a scalar float tail t over the last
 *   n % 4 elements in order, result vaddvq(acc) + t; the reference sums in
 *   double, so these agree within rounding. No decode dot tiles for them:
 *   the GEMM tiles serve every m;
 * - every element of a GEMM tile follows one fixed sequence of float
 *   operations whatever nw, nx or its position in the tile (THE INVARIANT of
 *   kern_impl.h), so matmul rows do not depend on m, batching or threads;
 * - conversions produce exactly the reference's bytes: Q8_0 rounds with
 *   FCVTAS (nearest, ties away: roundf), Q8_K with FCVTNS (nearest even),
 *   f16 with FCVTN under the default round-to-nearest-even FPCR, bf16 with
 *   half.h's integer rounding;
 * - rmsnorm sums squares in double like the reference; softmax, swiglu and
 *   exp_row use expf4 (below), within ~2 ulp of libm.
 */
#include "kernels/kern_impl.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels/kern_neon_intrin.h"
#include "tensor/blocks.h"
#include "tensor/half.h"

#ifdef __ARM_FEATURE_DOTPROD
#define KN_NAME "neon-dotprod"
#else
#define KN_NAME "neon"
#endif

/* --------------------------------------------------------------- helpers */

/* expf on 4 lanes, ~1-2 ulp: e^x = 2^n * e^r, |r| <= ln2/2, with Cody-Waite
 * reduction and Cephes' degree-6 polynomial (the same scheme as the AVX2
 * variant's expf8). 2^n is applied in two halves so that n in [-150, 128]
 * neither wraps the exponent field nor underflows early; inputs are clamped
 * to [-104, 89] (0 and +inf beyond). NaN stays NaN: FMIN/FMAX return NaN
 * when either operand is NaN. */
KNI float32x4_t expf4(float32x4_t x)
{
    x = vminq_f32(x, vdupq_n_f32(89.0f));
    x = vmaxq_f32(x, vdupq_n_f32(-104.0f));
    const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t ni = vcvtq_s32_f32(n); /* n is integral: truncation is exact */
    const int32x4_t n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    return vmulq_f32(vmulq_f32(p, s1), s2);
}

/* Adds the 4 float values of v into the double accumulators lo/hi. */
KNI void acc_f64(float32x4_t v, float64x2_t *lo, float64x2_t *hi)
{
    *lo = vaddq_f64(*lo, vcvt_f64_f32(vget_low_f32(v)));
    *hi = vaddq_f64(*hi, vcvt_high_f64_f32(v));
}

/* ------------------------------------------------------------- float dots */

enum { FK_F32, FK_F16, FK_BF16 };

KNI float32x4_t fload4(int kind, const void *p, int i)
{
    if (kind == FK_F32) return vld1q_f32((const float *)p + i);
    const uint16x4_t h = vld1_u16((const uint16_t *)p + i);
    if (kind == FK_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

KNI float fload1(int kind, const void *p, int i)
{
    if (kind == FK_F32) return ((const float *)p)[i];
    if (kind == FK_F16) return f16s(((const uint16_t *)p)[i]);
    return bf16_to_f32(((const uint16_t *)p)[i]);
}

/* NW weight rows x NX activation rows, every element in the order of the
 * file header (one accumulator, scalar tail, vaddvq + t). The 16
 * accumulators of a 4 x 4 tile plus 4 weight vectors and one activation
 * vector fit the 32 registers. */
KNI void fgemm_tile(int kind, int NW, int NX, int n, float *y, size_t ys, const uint8_t *w, size_t ws,
                    const uint8_t *x, size_t xs)
{
    float32x4_t acc[KERN_NW_MAX][KERN_NX_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NW; c++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) acc[c][r] = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t wv[KERN_NW_MAX];
#pragma GCC unroll 4
        for (int c = 0; c < NW; c++) wv[c] = fload4(kind, w + c * ws, i);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const float32x4_t xv = fload4(kind, x + r * xs, i);
#pragma GCC unroll 4
            for (int c = 0; c < NW; c++) acc[c][r] = vfmaq_f32(acc[c][r], wv[c], xv);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NW; c++) {
            float t = 0.0f;
            for (int k = i; k < n; k++) t += fload1(kind, w + c * ws, k) * fload1(kind, x + r * xs, k);
            y[r * ys + c] = vaddvq_f32(acc[c][r]) + t;
        }
}

/* Instantiates fgemm_tile for every (nw, nx) up to 4 x 4, so that the
 * accumulators are registers. */
#define KN_NX(kind, NW)                                                                                \
    switch (nx) {                                                                                      \
    case 1: fgemm_tile(kind, NW, 1, n, y, ys, wb, ws, xb, xs); break;                                  \
    case 2: fgemm_tile(kind, NW, 2, n, y, ys, wb, ws, xb, xs); break;                                  \
    case 3: fgemm_tile(kind, NW, 3, n, y, ys, wb, ws, xb, xs); break;                                  \
    default: fgemm_tile(kind, NW, 4, n, y, ys, wb, ws, xb, xs); break;                                 \
    }
#define KN_FGEMM(name, kind)                                                                           \
    static void name(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x,      \
                     size_t xs, int nx)                                                                \
    {                                                                                                  \
        const uint8_t *wb = w, *xb = x;                                                                \
        switch (nw) {                                                                                  \
        case 1: KN_NX(kind, 1) break;                                                                  \
        case 2: KN_NX(kind, 2) break;                                                                  \
        case 3: KN_NX(kind, 3) break;                                                                  \
        default: KN_NX(kind, 4) break;                                                                 \
        }                                                                                              \
    }

KN_FGEMM(gemm_f32_neon, FK_F32)
KN_FGEMM(gemm_f16_neon, FK_F16)
KN_FGEMM(gemm_bf16_neon, FK_BF16)

/* -------------------------------------------------------- Q8_0 and Q4_0 */

/* Weight block b as 32 signed values in element order (Q4_0: q - 8, low
 * nibbles are elements 0..15, high nibbles 16..31); returns its scale. */
KNI float wblock_load(bool is_q4, const void *w, int b, int8x16_t *w0, int8x16_t *w1)
{
    if (is_q4) {
        const block_q4_0 *wb = (const block_q4_0 *)w + b;
        const uint8x16_t q = vld1q_u8(wb->qs);
        *w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
        *w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
        return f16s(wb->d);
    }
    const block_q8_0 *wb = (const block_q8_0 *)w + b;
    *w0 = vld1q_s8(wb->qs);
    *w1 = vld1q_s8(wb->qs + 16);
    return f16s(wb->d);
}

/* Decode dot tiles: one weight block against block b of NX activation
 * rows, into accumulator u of each row. */
KNI void q8dot_block(bool is_q4, int NX, int b, int u, float32x4_t acc[][2], const void *w, const uint8_t *x,
                     size_t xs)
{
    int8x16_t w0, w1;
    const float dw = wblock_load(is_q4, w, b, &w0, &w1);
#pragma GCC unroll 2
    for (int r = 0; r < NX; r++) {
        const block_q8_0 *xb = (const block_q8_0 *)(x + r * xs) + b;
        const int32x4_t p = dot_i8x32(w0, w1, vld1q_s8(xb->qs), vld1q_s8(xb->qs + 16));
        acc[r][u] = vmlaq_n_f32(acc[r][u], vcvtq_f32_s32(p), dw * f16s(xb->d));
    }
}

/* One weight row against NX activation rows, two accumulators per row over
 * alternating blocks (even blocks into the first), whatever NX. */
KNI void q8dot_tile(bool is_q4, int NX, int nb, float *s, size_t ss, const void *w, const uint8_t *x, size_t xs)
{
    float32x4_t acc[KERN_DOT_NX_MAX][2];
#pragma GCC unroll 2
    for (int r = 0; r < NX; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        q8dot_block(is_q4, NX, b, 0, acc, w, x, xs);
        q8dot_block(is_q4, NX, b + 1, 1, acc, w, x, xs);
    }
    if (b < nb) q8dot_block(is_q4, NX, b, 0, acc, w, x, xs);
#pragma GCC unroll 2
    for (int r = 0; r < NX; r++) s[r * ss] = vaddvq_f32(acc[r][0]) + vaddvq_f32(acc[r][1]);
}

KERN_Q8DOT_DRIVER(dot_q8_0_neon, , q8dot_tile, false)
KERN_Q8DOT_DRIVER(dot_q4_0_neon, , q8dot_tile, true)

/* GEMM tile: 4 weight rows (rows >= nw repeat row 0 and are not stored) by
 * NX <= 2 activation rows. Per block, the 4 rows' partial sums are reduced
 * with two rounds of ADDP into one vector whose lane c is row c's exact
 * block sum; the float chain then runs in that lane (file header). */
KNI void q8gemm_tile(bool is_q4, int NX, int nw, int nb, float *y, size_t ys, const uint8_t *w, size_t ws,
                     const uint8_t *x, size_t xs)
{
    const uint8_t *wr[4];
    for (int c = 0; c < 4; c++) wr[c] = w + (c < nw ? c : 0) * ws;
    float32x4_t acc[2];
#pragma GCC unroll 2
    for (int r = 0; r < NX; r++) acc[r] = vdupq_n_f32(0.0f);
    for (int b = 0; b < nb; b++) {
        int8x16_t x0[2], x1[2];
        float dx[2];
#pragma GCC unroll 2
        for (int r = 0; r < NX; r++) {
            const block_q8_0 *xb = (const block_q8_0 *)(x + r * xs) + b;
            x0[r] = vld1q_s8(xb->qs);
            x1[r] = vld1q_s8(xb->qs + 16);
            dx[r] = f16s(xb->d);
        }
        int32x4_t p[4][2];
        float32x4_t dw = vdupq_n_f32(0.0f);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            int8x16_t w0, w1;
            dw = vsetq_lane_f32(wblock_load(is_q4, wr[c], b, &w0, &w1), dw, c);
#pragma GCC unroll 2
            for (int r = 0; r < NX; r++) p[c][r] = dot_i8x32(w0, w1, x0[r], x1[r]);
        }
#pragma GCC unroll 2
        for (int r = 0; r < NX; r++) {
            const float32x4_t f = vcvtq_f32_s32(vpaddq_s32(vpaddq_s32(p[0][r], p[1][r]), vpaddq_s32(p[2][r], p[3][r])));
            acc[r] = vaddq_f32(acc[r], is_q4 ? vmulq_n_f32(vmulq_f32(f, dw), dx[r]) : vmulq_f32(f, vmulq_n_f32(dw, dx[r])));
        }
    }
    float out[4];
#pragma GCC unroll 2
    for (int r = 0; r < NX; r++) {
        vst1q_f32(out, acc[r]);
        for (int c = 0; c < nw; c++) y[r * ys + c] = out[c];
    }
}

KERN_Q8GEMM_DRIVER(gemm_q8_0_neon, , q8gemm_tile, false)
KERN_Q8GEMM_DRIVER(gemm_q4_0_neon, , q8gemm_tile, true)

/* ------------------------------------------------------------ K-quants */

/* Q4_K and Q6_K compute, per super-block, the reference's exact integer
 * sums (kern_ref.c: isum = sum_j sc_j * (q.y)_j, Q4_K also msum = sum_j m_j
 * * (sum of y)_j) with vector integer dots, then the reference's own scalar
 * float operations:
 *   Q4_K: s = s + (dw * yd) * (float)isum;  s = s - (dmin * yd) * (float)msum
 *   Q6_K: s = s + (dw * yd) * (float)isum
 * so every element equals the reference bit for bit, whatever the tile. The
 * integer sums fit int32 with room to spare (|isum| < 2^28). */

/* A Q4_K super-block's 256 values (0..15), 16 per vector in element order,
 * and its 8 sub-block scales and mins. Sub-blocks 2k and 2k+1 are the low
 * and high nibbles of the same 32 bytes (blocks.h). */
KNI void q4_K_unpack(const block_q4_K *wb, int8x16_t q[16], int32_t sc[8], int32_t mn[8])
{
    for (int k = 0; k < 4; k++) {
        const uint8x16_t v0 = vld1q_u8(wb->qs + 32 * k), v1 = vld1q_u8(wb->qs + 32 * k + 16);
        q[4 * k + 0] = vreinterpretq_s8_u8(vandq_u8(v0, vdupq_n_u8(0x0F)));
        q[4 * k + 1] = vreinterpretq_s8_u8(vandq_u8(v1, vdupq_n_u8(0x0F)));
        q[4 * k + 2] = vreinterpretq_s8_u8(vshrq_n_u8(v0, 4));
        q[4 * k + 3] = vreinterpretq_s8_u8(vshrq_n_u8(v1, 4));
    }
    for (int j = 0; j < 8; j++) {
        uint8_t a, m;
        block_q4_K_scale_min(j, wb->scales, &a, &m);
        sc[j] = a;
        mn[j] = m;
    }
}

/* A Q6_K super-block's 256 values q - 32, 16 per vector in element order:
 * vector v is sub-block v (scale scales[v]). Layout as kern_ref.c's
 * q6_K_unpack: element 128h + 32k + l takes 4 low bits from
 * ql[64h + l + 32(k & 1)] (low nibble for k < 2, high for k >= 2) and 2
 * high bits from qh[32h + l] >> 2k. */
KNI void q6_K_unpack_neon(const block_q6_K *wb, int8x16_t q[16])
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x03);
    const int8x16_t off = vdupq_n_s8(32);
    for (int h = 0; h < 2; h++)
        for (int l0 = 0; l0 < 32; l0 += 16) {
            const uint8x16_t a = vld1q_u8(wb->ql + 64 * h + l0), b = vld1q_u8(wb->ql + 64 * h + 32 + l0);
            const uint8x16_t hb = vld1q_u8(wb->qh + 32 * h + l0);
            const uint8x16_t v[4] = {
                vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(hb, m2), 4)),
                vorrq_u8(vandq_u8(b, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m2), 4)),
                vorrq_u8(vshrq_n_u8(a, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m2), 4)),
                vorrq_u8(vshrq_n_u8(b, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4)),
            };
            for (int k = 0; k < 4; k++) q[8 * h + 2 * k + l0 / 16] = vsubq_s8(vreinterpretq_s8_u8(v[k]), off);
        }
}

/* Both K-quant tiles: each weight super-block is unpacked once for the nx
 * activation rows; y's elements accumulate in s[][] in super-block order. */
static void gemm_q4_K_neon(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs,
                           int nx)
{
    float s[KERN_NX_MAX][KERN_NW_MAX] = {{0}};
    for (int c = 0; c < nw; c++) {
        const block_q4_K *wr = (const block_q4_K *)((const uint8_t *)w + c * ws);
        for (int b = 0; b < n / QK_K; b++) {
            int8x16_t q[16];
            int32_t sc[8], mn[8];
            q4_K_unpack(&wr[b], q, sc, mn);
            const float dw = f16s(wr[b].d), dmin = f16s(wr[b].dmin);
            for (int r = 0; r < nx; r++) {
                const block_q8_K *xb = (const block_q8_K *)((const uint8_t *)x + r * xs) + b;
                int32x4_t iv = vdupq_n_s32(0);
                int32_t msum = 0;
                for (int j = 0; j < 8; j++) {
                    const int32x4_t p = vaddq_s32(dot_i8x16(q[2 * j], vld1q_s8(xb->qs + 32 * j)),
                                                  dot_i8x16(q[2 * j + 1], vld1q_s8(xb->qs + 32 * j + 16)));
                    iv = vmlaq_n_s32(iv, p, sc[j]);
                    msum += mn[j] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
                }
                const int32_t isum = vaddvq_s32(iv);
                s[r][c] = s[r][c] + dw * xb->d * (float)isum;
                s[r][c] = s[r][c] - dmin * xb->d * (float)msum;
            }
        }
    }
    for (int r = 0; r < nx; r++)
        for (int c = 0; c < nw; c++) y[r * ys + c] = s[r][c];
}

static void gemm_q6_K_neon(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs,
                           int nx)
{
    float s[KERN_NX_MAX][KERN_NW_MAX] = {{0}};
    for (int c = 0; c < nw; c++) {
        const block_q6_K *wr = (const block_q6_K *)((const uint8_t *)w + c * ws);
        for (int b = 0; b < n / QK_K; b++) {
            int8x16_t q[16];
            q6_K_unpack_neon(&wr[b], q);
            const float dw = f16s(wr[b].d);
            for (int r = 0; r < nx; r++) {
                const block_q8_K *xb = (const block_q8_K *)((const uint8_t *)x + r * xs) + b;
                int32x4_t iv = vdupq_n_s32(0);
                for (int j = 0; j < 16; j++)
                    iv = vmlaq_n_s32(iv, dot_i8x16(q[j], vld1q_s8(xb->qs + 16 * j)), wr[b].scales[j]);
                s[r][c] = s[r][c] + dw * xb->d * (float)vaddvq_s32(iv);
            }
        }
    }
    for (int r = 0; r < nx; r++)
        for (int c = 0; c < nw; c++) y[r * ys + c] = s[r][c];
}

/* ------------------------------------------------- activation conversions */

/* One block of 32 as quant_q8_0_quantize_row quantizes it, for finite
 * input: d = amax/127 (returned), q = roundf(x * (1/d)) into qs; FCVTAS
 * rounds to nearest with ties away from zero, as roundf, and never leaves
 * [-127, 127] here (|x / d| <= 127 up to rounding), so the saturating
 * narrows do not clip. */
static inline float q8_block_neon(const float *x, int8_t *qs)
{
    float32x4_t v[8], m = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        m = vmaxq_f32(m, vabsq_f32(v[k]));
    }
    const float amax = vmaxvq_f32(m);
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int h = 0; h < 2; h++) {
        int16x8_t q[2];
        for (int k = 0; k < 2; k++) {
            const int32x4_t a = vcvtaq_s32_f32(vmulq_n_f32(v[4 * h + 2 * k], id));
            const int32x4_t c = vcvtaq_s32_f32(vmulq_n_f32(v[4 * h + 2 * k + 1], id));
            q[k] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(c));
        }
        vst1q_s8(qs + 16 * h, vcombine_s8(vqmovn_s16(q[0]), vqmovn_s16(q[1])));
    }
    return d;
}

/* Same bytes as quant_q8_0_quantize_row for finite input. */
static void conv_q8_0_neon(void *dst, const float *src, int n)
{
    block_q8_0 *y = dst;
    for (int b = 0; b < n / QK8_0; b++) y[b].d = f32_to_f16(q8_block_neon(src + (size_t)b * QK8_0, y[b].qs));
}

/* Same bytes as quant_q8_1_quantize_row for finite input (the activations
 * of Q4_1 and Q5_1): Q8_0's block, plus s = sum(q) * d as f16. */
static void conv_q8_1_neon(void *dst, const float *src, int n)
{
    block_q8_1 *y = dst;
    for (int b = 0; b < n / QK8_1; b++) {
        const float d = q8_block_neon(src + (size_t)b * QK8_1, y[b].qs);
        const int sum = vaddlvq_s8(vld1q_s8(y[b].qs)) + vaddlvq_s8(vld1q_s8(y[b].qs + 16));
        y[b].d = f32_to_f16(d);
        y[b].s = f32_to_f16((float)sum * d);
    }
}

/* Same bytes as quant_q8_K_quantize_row for finite input: the scale from
 * the first element of largest magnitude, q = nearest-even(-127/max * x)
 * (FCVTNS; quant_round_nearest's magic-number rounding is nearest-even too
 * at these magnitudes), saturated to int8 like its clamp. */
static void conv_q8_K_neon(void *dst, const float *src, int n)
{
    block_q8_K *y = dst;
    for (int b = 0; b < n / QK_K; b++) {
        const float *x = src + (size_t)b * QK_K;
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int k = 0; k < QK_K / 4; k++) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + 4 * k)));
        const float amax = vmaxvq_f32(m);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        int j = 0;
        while (j < QK_K - 1 && fabsf(x[j]) != amax) j++;
        const float iscale = -127.f / x[j];
        for (int g = 0; g < QK_K / 16; g++) {
            int16x8_t h[2];
            for (int k = 0; k < 2; k++) {
                const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * g + 8 * k), iscale));
                const int32x4_t c = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * g + 8 * k + 4), iscale));
                h[k] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(c));
            }
            const int8x16_t q = vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1]));
            vst1q_s8(y[b].qs + 16 * g, q);
            y[b].bsums[g] = vaddlvq_s8(q);
        }
        y[b].d = 1 / iscale;
    }
}

static void f32_to_f16_neon(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    for (; i < n; i++) dst[i] = f32_to_f16(src[i]);
}

static void f16_to_f32_neon(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
    for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

static void conv_f16_neon(void *dst, const float *src, int n) { f32_to_f16_neon(dst, src, n); }

/* f32 -> bf16 as half.h: round to nearest even on the bits, NaN -> quiet. */
KNI uint16x4_t bf16_round4(float32x4_t v)
{
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), lsb)), 16);
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    const uint32x4_t qnan = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(64));
    return vmovn_u32(vbslq_u32(nan, qnan, r));
}

static void conv_bf16_neon(void *dst, const float *src, int n)
{
    uint16_t *d = dst;
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(d + i, bf16_round4(vld1q_f32(src + i)));
    for (; i < n; i++) d[i] = f32_to_bf16(src[i]);
}

/* ------------------------------------------------------------ row kernels */

static void rmsnorm_neon(float *y, const float *x, const float *w, int n, float eps)
{
    float64x2_t lo = vdupq_n_f64(0.0), hi = vdupq_n_f64(0.0);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        acc_f64(vmulq_f32(v, v), &lo, &hi);
    }
    double sum = vaddvq_f64(vaddq_f64(lo, hi));
    for (; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t v = vmulq_n_f32(vld1q_f32(x + i), scale);
        if (w) v = vmulq_f32(v, vld1q_f32(w + i));
        vst1q_f32(y + i, v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

static float softmax_neon(float *x, int n)
{
    float32x4_t vm = vdupq_n_f32(-INFINITY);
    int i = 0;
    for (; i + 4 <= n; i += 4) vm = vmaxq_f32(vm, vld1q_f32(x + i));
    const float max = kern_softmax_max_tail(x, i, n, vmaxvq_f32(vm));
    vm = vdupq_n_f32(max);
    float64x2_t lo = vdupq_n_f64(0.0), hi = vdupq_n_f64(0.0);
    for (i = 0; i + 4 <= n; i += 4) {
        const float32x4_t e = expf4(vsubq_f32(vld1q_f32(x + i), vm));
        vst1q_f32(x + i, e);
        acc_f64(e, &lo, &hi);
    }
    const double sum = kern_softmax_exp_tail(x, i, n, max, vaddvq_f64(vaddq_f64(lo, hi)));
    const float inv = (float)(1.0 / sum);
    for (i = 0; i + 4 <= n; i += 4) vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), inv));
    for (; i < n; i++) x[i] *= inv;
    return kern_softmax_lse(max, sum);
}

static void swiglu_neon(float *a, const float *b, int n)
{
    const float32x4_t one = vdupq_n_f32(1.0f);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(a + i);
        const float32x4_t e = expf4(vnegq_f32(v));
        vst1q_f32(a + i, vmulq_f32(vdivq_f32(v, vaddq_f32(one, e)), vld1q_f32(b + i)));
    }
    for (; i < n; i++) a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
}

static void exp_row_neon(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, expf4(vld1q_f32(x + i)));
    for (; i < n; i++) y[i] = expf(x[i]);
}

static const kern_vtable kern_vt_neon_table = {
    .name = KN_NAME,
    .gemm = {
        [DT_F32] = {gemm_f32_neon, 4, 4},
        [DT_F16] = {gemm_f16_neon, 4, 4},
        [DT_BF16] = {gemm_bf16_neon, 4, 4},
        [DT_Q8_0] = {gemm_q8_0_neon, 4, 2},
        [DT_Q4_0] = {gemm_q4_0_neon, 4, 2},
        [DT_Q4_K] = {gemm_q4_K_neon, 4, 4},
        [DT_Q6_K] = {gemm_q6_K_neon, 4, 4},
        /* kern_neon_quants.c */
        [DT_Q4_1] = {kern_gemm_q4_1_neon, 1, 4},
        [DT_Q5_0] = {kern_gemm_q5_0_neon, 1, 4},
        [DT_Q5_1] = {kern_gemm_q5_1_neon, 1, 4},
        [DT_IQ4_NL] = {kern_gemm_iq4_nl_neon, 1, 4},
        [DT_Q2_K] = {kern_gemm_q2_K_neon, 1, 4},
        [DT_Q3_K] = {kern_gemm_q3_K_neon, 1, 4},
        [DT_Q5_K] = {kern_gemm_q5_K_neon, 1, 4},
        [DT_IQ4_XS] = {kern_gemm_iq4_xs_neon, 1, 4},
        [DT_TQ2_0] = {kern_gemm_tq2_0_neon, 1, 4},
        [DT_IQ2_XXS] = {kern_gemm_iq2_xxs_neon, 1, 4}, /* kern_neon_lattice.c */
        [DT_IQ2_XS] = {kern_gemm_iq2_xs_neon, 1, 4},
        [DT_IQ2_S] = {kern_gemm_iq2_s_neon, 1, 4},
        [DT_IQ3_XXS] = {kern_gemm_iq3_xxs_neon, 1, 4},
        [DT_IQ3_S] = {kern_gemm_iq3_s_neon, 1, 4},
        [DT_IQ1_S] = {kern_gemm_iq1_s_neon, 1, 4},
        [DT_IQ1_M] = {kern_gemm_iq1_m_neon, 1, 4},
        [DT_TQ1_0] = {kern_gemm_tq1_0_neon, 1, 4},
    },
    .dot = {
        [DT_Q8_0] = dot_q8_0_neon,
        [DT_Q4_0] = dot_q4_0_neon,
        [DT_Q4_1] = kern_dot_q4_1_neon,
        [DT_Q5_0] = kern_dot_q5_0_neon,
        [DT_Q5_1] = kern_dot_q5_1_neon,
        [DT_IQ4_NL] = kern_dot_iq4_nl_neon,
        [DT_Q2_K] = kern_dot_q2_K_neon,
        [DT_Q3_K] = kern_dot_q3_K_neon,
        [DT_Q5_K] = kern_dot_q5_K_neon,
        [DT_IQ4_XS] = kern_dot_iq4_xs_neon,
        [DT_TQ2_0] = kern_dot_tq2_0_neon,
        [DT_IQ2_XXS] = kern_dot_iq2_xxs_neon,
        [DT_IQ2_XS] = kern_dot_iq2_xs_neon,
        [DT_IQ2_S] = kern_dot_iq2_s_neon,
        [DT_IQ3_XXS] = kern_dot_iq3_xxs_neon,
        [DT_IQ3_S] = kern_dot_iq3_s_neon,
        [DT_IQ1_S] = kern_dot_iq1_s_neon,
        [DT_IQ1_M] = kern_dot_iq1_m_neon,
        [DT_TQ1_0] = kern_dot_tq1_0_neon,
    },
    .conv = {
        [DT_F16] = conv_f16_neon,
        [DT_BF16] = conv_bf16_neon,
        [DT_Q8_0] = conv_q8_0_neon,
        [DT_Q8_1] = conv_q8_1_neon,
        [DT_Q8_K] = conv_q8_K_neon,
    },
    .rmsnorm = rmsnorm_neon,
    .softmax = softmax_neon,
    .swiglu = swiglu_neon,
    .exp_row = exp_row_neon,
    .f32_to_f16 = f32_to_f16_neon,
    .f16_to_f32 = f16_to_f32_neon,
    /* rope: the reference (scalar cosf/sinf per pair dominate, shared by all heads) */
};

const kern_vtable *kern_vt_neon(void) { return &kern_vt_neon_table; }

#else /* not aarch64 */

const kern_vtable *kern_vt_neon(void) { return NULL; }

#endif
