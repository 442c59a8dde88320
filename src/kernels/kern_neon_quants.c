/* kern_neon_quants.c - NEON GEMM tiles and decode dot tiles of the block
 * formats beside Q8_0, Q4_0, Q4_K and Q6_K (kern_neon.c has those):
 * Q4_1, Q5_1 (against Q8_1), Q5_0, IQ4_NL (against Q8_0), and Q2_K, Q3_K,
 * Q5_K, IQ4_XS, TQ2_0, TQ1_0 (super-blocks of 256, against Q8_K).
 * kern_neon.c's table lists them. On other architectures the file is
 * empty.
 *
 * Tiles: one weight row against NX activation rows (GEMM tile {1, 4},
 * decode dot NX <= 2). Each weight block is unpacked once into int8
 * levels in element order, 16 a vector, and serves the NX rows.
 *
 * Numerics: every element equals the reference (kern_ref_quants.c) bit for
 * bit. Per block the exact integer sums (SDOT, or SMULL + SADALP without
 * the dot-product extension: kern_neon_intrin.h), then the reference's own
 * float operations in its order, with separate multiplies and adds (the
 * build's -std=c11 keeps GCC from contracting them into FMA):
 *
 *   Q5_0, IQ4_NL   s = s + (dw * dx) * isum
 *   Q4_1, Q5_1     s = s + ((dw * dx) * isum + mw * sx)
 *   Q2_K           s = s + ((dx * d) * isum - (dx * dmin) * msum)
 *   Q5_K           s = s + (d * dx) * isum;  s = s - (dmin * dx) * msum
 *   Q3_K, IQ4_XS   s = s + (d * dx) * isum
 *   TQ2_0, TQ1_0   s = s + isum * (d * dx)
 *
 * The 32-element formats take 4 blocks at a time: their 4 integer sums
 * land in the 4 lanes of one vector (two rounds of ADDP), the per-block
 * float products run lane-wise (the same IEEE operations as the scalar
 * ones), and the lanes go into s one by one in block order. So the result
 * depends on nothing but the row pair: not nx, the tile or the thread.
 *
 * Bounds: levels are within int8 (IQ4 -127..113, Q5 0..31 or -16..15,
 * Q3_K -4..3) and Q8_0/Q8_1/Q8_K ints within -127..127, so SMULL's int16
 * products are exact; a super-block's scaled sum stays below 2^28.
 */
#include "kernels/kern_impl.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "kernels/kern_neon_intrin.h"
#include "tensor/blocks.h"

/* ------------------------------------------------- 32-element blocks */

enum { LQ_Q4_1, LQ_Q5_0, LQ_Q5_1, LQ_IQ4_NL };

/* The 32 bits of qh (bit e: element e) as bytes 0x10 (set) or 0: elements
 * 0..15 in *h0, 16..31 in *h1. */
KNI void qh_bits_x10(const uint8_t *qh, uint8x16_t *h0, uint8x16_t *h1)
{
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vld1q_u8(bit), x10 = vdupq_n_u8(0x10);
    *h0 = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), b), x10);
    *h1 = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), b), x10);
}

/* Weight block b of a T row as 32 levels (q[0]: elements 0..15, q[1]:
 * 16..31), its scale *dw and (Q4_1, Q5_1) min *mw. */
KNI void lq_unpack(int T, const void *w, int b, int8x16_t q[2], float *dw, float *mw)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const uint8_t *qs, *qh = NULL;
    switch (T) {
    case LQ_Q4_1: {
        const block_q4_1 *wb = (const block_q4_1 *)w + b;
        qs = wb->qs, *dw = f16s(wb->d), *mw = f16s(wb->m);
        break;
    }
    case LQ_Q5_1: {
        const block_q5_1 *wb = (const block_q5_1 *)w + b;
        qs = wb->qs, qh = wb->qh, *dw = f16s(wb->d), *mw = f16s(wb->m);
        break;
    }
    case LQ_Q5_0: {
        const block_q5_0 *wb = (const block_q5_0 *)w + b;
        qs = wb->qs, qh = wb->qh, *dw = f16s(wb->d);
        break;
    }
    default: {
        const block_iq4_nl *wb = (const block_iq4_nl *)w + b;
        qs = wb->qs, *dw = f16s(wb->d);
        break;
    }
    }
    const uint8x16_t v = vld1q_u8(qs);
    uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
    if (T == LQ_IQ4_NL) {
        const int8x16_t tab = vld1q_s8(quant_iq4nl_values);
        q[0] = vqtbl1q_s8(tab, lo);
        q[1] = vqtbl1q_s8(tab, hi);
        return;
    }
    if (qh) {
        uint8x16_t h0, h1;
        qh_bits_x10(qh, &h0, &h1);
        lo = vorrq_u8(lo, h0), hi = vorrq_u8(hi, h1);
    }
    q[0] = vreinterpretq_s8_u8(lo), q[1] = vreinterpretq_s8_u8(hi);
    if (T == LQ_Q5_0) q[0] = vsubq_s8(q[0], vdupq_n_s8(16)), q[1] = vsubq_s8(q[1], vdupq_n_s8(16));
}

/* Activation block b of row x: its 32 ints, scale and (Q8_1) stored sum. */
KNI const int8_t *lq_xblock(int T, const uint8_t *x, int b, float *dx, float *sx)
{
    if (T == LQ_Q4_1 || T == LQ_Q5_1) {
        const block_q8_1 *xb = (const block_q8_1 *)x + b;
        *dx = f16s(xb->d), *sx = f16s(xb->s);
        return xb->qs;
    }
    const block_q8_0 *xb = (const block_q8_0 *)x + b;
    *dx = f16s(xb->d), *sx = 0.0f;
    return xb->qs;
}

/* One weight row against NX activation rows (file header). */
KNI void lq_tile(int T, int NX, int n, float *s, size_t ss, const void *w, const uint8_t *x, size_t xs)
{
    const bool has_min = T == LQ_Q4_1 || T == LQ_Q5_1;
    const int nb = n / 32;
    float acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = 0.0f;
    int b = 0;
    for (; b + 4 <= nb; b += 4) {
        int8x16_t q[4][2];
        float dw[4], mw[4] = {0};
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) lq_unpack(T, w, b + k, q[k], &dw[k], &mw[k]);
        const float32x4_t dwv = vld1q_f32(dw), mwv = vld1q_f32(mw);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            int32x4_t p[4];
            float dx[4], sx[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const int8_t *y = lq_xblock(T, x + r * xs, b + k, &dx[k], &sx[k]);
                p[k] = dot_i8x32(q[k][0], q[k][1], vld1q_s8(y), vld1q_s8(y + 16));
            }
            const float32x4_t isum = vcvtq_f32_s32(vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3])));
            float32x4_t t = vmulq_f32(vmulq_f32(dwv, vld1q_f32(dx)), isum);
            if (has_min) t = vaddq_f32(t, vmulq_f32(mwv, vld1q_f32(sx)));
            acc[r] = acc[r] + vgetq_lane_f32(t, 0);
            acc[r] = acc[r] + vgetq_lane_f32(t, 1);
            acc[r] = acc[r] + vgetq_lane_f32(t, 2);
            acc[r] = acc[r] + vgetq_lane_f32(t, 3);
        }
    }
    for (; b < nb; b++) {
        int8x16_t q[2];
        float dw, mw = 0.0f;
        lq_unpack(T, w, b, q, &dw, &mw);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            float dx, sx;
            const int8_t *y = lq_xblock(T, x + r * xs, b, &dx, &sx);
            const float isum = (float)vaddvq_s32(dot_i8x32(q[0], q[1], vld1q_s8(y), vld1q_s8(y + 16)));
            if (has_min) acc[r] = acc[r] + ((dw * dx) * isum + mw * sx);
            else acc[r] = acc[r] + (dw * dx) * isum;
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = acc[r];
}

/* ------------------------------------------------ 256-element blocks */

enum { KQ_Q2_K, KQ_Q3_K, KQ_Q5_K, KQ_IQ4_XS, KQ_TQ2_0, KQ_TQ1_0 };

/* One weight super-block unpacked: the 256 levels in element order, 16 a
 * vector; the scale code of each 16 elements (a 32-element sub-block's
 * twice); Q2_K's 16 mins, Q5_K's 8 (mn[0]); d and dmin as f32. */
typedef struct {
    int8x16_t q[16];
    int32_t sc[16];
    int16x8_t mn[2];
    float d, dmin;
} kq_block;

/* Q2_K and TQ2_0's 2-bit fields: element 128h + 32k + l is bits 2k of
 * qs[32h + l], so vector 8h + 2k + l0/16 comes from qs[32h + l0 ...]. */
KNI void kq_2bit(const uint8_t *qs, int8x16_t q[16], int8_t off)
{
    const uint8x16_t m3 = vdupq_n_u8(3);
    const int8x16_t o = vdupq_n_s8(off);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const int h = i / 2, l0 = 16 * (i % 2);
        const uint8x16_t v = vld1q_u8(qs + 32 * h + l0);
        int8x16_t *d = q + 8 * h + l0 / 16;
        d[0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, m3)), o);
        d[2] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v, 2), m3)), o);
        d[4] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v, 4), m3)), o);
        d[6] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 6)), o);
    }
}

/* Q3_K: the 2 low bits as Q2_K's, minus 4 where hmask[l]'s bit 4h + k is clear. */
KNI void kq_unpack_q3_K(const block_q3_K *wb, kq_block *u)
{
    kq_2bit(wb->qs, u->q, 0);
    const uint8x16_t four = vdupq_n_u8(4);
#pragma GCC unroll 2
    for (int l = 0; l < 2; l++) {
        const uint8x16_t hm = vld1q_u8(wb->hmask + 16 * l);
#pragma GCC unroll 8
        for (int hk = 0; hk < 8; hk++) {
            const uint8x16_t set = vtstq_u8(hm, vdupq_n_u8((uint8_t)(1u << hk)));
            int8x16_t *d = &u->q[8 * (hk / 4) + 2 * (hk % 4) + l];
            *d = vsubq_s8(*d, vreinterpretq_s8_u8(vbicq_u8(four, set)));
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) u->sc[j] = block_q3_K_scale(j, wb->scales) - 32;
}

/* Q5_K: sub-block j = 2g + u is the low (u = 0) or high nibbles of
 * qs[32g ...], plus bit j of qh[l] as 16. */
KNI void kq_unpack_q5_K(const block_q5_K *wb, kq_block *u)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F), x10 = vdupq_n_u8(0x10);
    const uint8x16_t qh[2] = {vld1q_u8(wb->qh), vld1q_u8(wb->qh + 16)};
    int16_t mn[8];
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
#pragma GCC unroll 2
        for (int l = 0; l < 2; l++) {
            const uint8x16_t v = vld1q_u8(wb->qs + 32 * g + 16 * l);
            const uint8x16_t h0 = vandq_u8(vtstq_u8(qh[l], vdupq_n_u8((uint8_t)(1u << (2 * g)))), x10);
            const uint8x16_t h1 = vandq_u8(vtstq_u8(qh[l], vdupq_n_u8((uint8_t)(2u << (2 * g)))), x10);
            u->q[4 * g + l] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(v, m4), h0));
            u->q[4 * g + 2 + l] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(v, 4), h1));
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        block_q4_K_scale_min(j, wb->scales, &sc, &m);
        u->sc[2 * j] = u->sc[2 * j + 1] = sc;
        mn[j] = m;
    }
    u->mn[0] = vld1q_s16(mn);
}

KNI void kq_unpack_iq4_xs(const block_iq4_xs *wb, kq_block *u)
{
    const int8x16_t tab = vld1q_s8(quant_iq4nl_values);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        const uint8x16_t v = vld1q_u8(wb->qs + 16 * j);
        u->q[2 * j] = vqtbl1q_s8(tab, vandq_u8(v, m4));
        u->q[2 * j + 1] = vqtbl1q_s8(tab, vshrq_n_u8(v, 4));
        u->sc[2 * j] = u->sc[2 * j + 1] = block_iq4_xs_scale(j, wb) - 32;
    }
}

/* TQ1_0's level of byte product p = b * 3^i mod 256 (digit i of b):
 * (p >= 86) + (p >= 171) - 1, as ~(the two compares' sum of -1s). */
KNI int8x16_t kq_trit(uint8x16_t p)
{
    const uint8x16_t ge86 = vcgeq_u8(p, vdupq_n_u8(86)), ge171 = vcgeq_u8(p, vdupq_n_u8(171));
    return vreinterpretq_s8_u8(vmvnq_u8(vaddq_u8(ge86, ge171)));
}

/* TQ1_0 (kern_avx2_tq1.c has the layout): element 32i + m is digit i of
 * qs[m] (m < 32), 160 + 16i + m of qs[32 + m], 240 + 4i + m of qh[m]. */
KNI void kq_unpack_tq1_0(const block_tq1_0 *wb, kq_block *u)
{
    static const uint8_t pow3_dword[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    const uint8x16_t three = vdupq_n_u8(3);
    uint8x16_t a = vld1q_u8(wb->qs), b = vld1q_u8(wb->qs + 16), c = vld1q_u8(wb->qs + 32);
#pragma GCC unroll 5
    for (int i = 0; i < 5; i++) {
        u->q[2 * i] = kq_trit(a), u->q[2 * i + 1] = kq_trit(b), u->q[10 + i] = kq_trit(c);
        a = vmulq_u8(a, three), b = vmulq_u8(b, three), c = vmulq_u8(c, three);
    }
    uint32_t qh;
    memcpy(&qh, wb->qh, 4);
    u->q[15] = kq_trit(vmulq_u8(vreinterpretq_u8_u32(vdupq_n_u32(qh)), vld1q_u8(pow3_dword)));
}

KNI void kq_unpack(int T, const void *w, int b, kq_block *u)
{
    switch (T) {
    case KQ_Q2_K: {
        const block_q2_K *wb = (const block_q2_K *)w + b;
        kq_2bit(wb->qs, u->q, 0);
        const uint8x16_t sv = vld1q_u8(wb->scales);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) u->sc[j] = wb->scales[j] & 0xF;
        const uint8x16_t mv = vshrq_n_u8(sv, 4);
        u->mn[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mv)));
        u->mn[1] = vreinterpretq_s16_u16(vmovl_high_u8(mv));
        u->d = f16s(wb->d), u->dmin = f16s(wb->dmin);
        break;
    }
    case KQ_Q3_K: {
        const block_q3_K *wb = (const block_q3_K *)w + b;
        kq_unpack_q3_K(wb, u);
        u->d = f16s(wb->d);
        break;
    }
    case KQ_Q5_K: {
        const block_q5_K *wb = (const block_q5_K *)w + b;
        kq_unpack_q5_K(wb, u);
        u->d = f16s(wb->d), u->dmin = f16s(wb->dmin);
        break;
    }
    case KQ_IQ4_XS: {
        const block_iq4_xs *wb = (const block_iq4_xs *)w + b;
        kq_unpack_iq4_xs(wb, u);
        u->d = f16s(wb->d);
        break;
    }
    case KQ_TQ1_0: {
        const block_tq1_0 *wb = (const block_tq1_0 *)w + b;
        kq_unpack_tq1_0(wb, u);
        u->d = f16s(wb->d);
        break;
    }
    default: {
        const block_tq2_0 *wb = (const block_tq2_0 *)w + b;
        kq_2bit(wb->qs, u->q, 1);
        u->d = f16s(wb->d);
        break;
    }
    }
}

/* The exact sum over the super-block of (scale code) x (level . y); TQ2_0
 * and TQ1_0 have no scales. */
KNI int32_t kq_isum(int T, const kq_block *u, const int8_t *y)
{
    int32x4_t iv = vdupq_n_s32(0);
    if (T == KQ_TQ2_0 || T == KQ_TQ1_0) {
#pragma GCC unroll 8
        for (int j = 0; j < 16; j += 2)
            iv = vaddq_s32(iv, dot_i8x32(u->q[j], u->q[j + 1], vld1q_s8(y + 16 * j), vld1q_s8(y + 16 * j + 16)));
    } else if (T == KQ_Q5_K || T == KQ_IQ4_XS) { /* 32-element sub-blocks */
#pragma GCC unroll 8
        for (int j = 0; j < 16; j += 2)
            iv = vmlaq_n_s32(iv, dot_i8x32(u->q[j], u->q[j + 1], vld1q_s8(y + 16 * j), vld1q_s8(y + 16 * j + 16)),
                             u->sc[j]);
    } else {
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) iv = vmlaq_n_s32(iv, dot_i8x16(u->q[j], vld1q_s8(y + 16 * j)), u->sc[j]);
    }
    return vaddvq_s32(iv);
}

/* The mins against Q8_K's block sums (Q2_K: one per 16 elements; Q5_K:
 * one per 32, the sums paired), exact. */
KNI int32_t kq_msum(int T, const kq_block *u, const block_q8_K *xb)
{
    const int16x8_t b0 = vld1q_s16(xb->bsums), b1 = vld1q_s16(xb->bsums + 8);
    if (T == KQ_Q5_K) {
        const int16x8_t bp = vpaddq_s16(b0, b1); /* |.| <= 2 * 16 * 127 */
        return vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(u->mn[0]), vget_low_s16(bp)), u->mn[0], bp));
    }
    int32x4_t a = vmull_s16(vget_low_s16(u->mn[0]), vget_low_s16(b0));
    a = vmlal_high_s16(a, u->mn[0], b0);
    a = vmlal_s16(a, vget_low_s16(u->mn[1]), vget_low_s16(b1));
    return vaddvq_s32(vmlal_high_s16(a, u->mn[1], b1));
}

/* One super-block's contribution to s, in the reference's float operations. */
KNI float kq_accumulate(int T, float s, const kq_block *u, const block_q8_K *xb)
{
    const int32_t isum = kq_isum(T, u, xb->qs);
    switch (T) {
    case KQ_Q2_K:
        return s + (xb->d * u->d * (float)isum - xb->d * u->dmin * (float)kq_msum(T, u, xb));
    case KQ_Q5_K:
        s = s + u->d * xb->d * (float)isum;
        return s - u->dmin * xb->d * (float)kq_msum(T, u, xb);
    case KQ_TQ2_0:
    case KQ_TQ1_0:
        return s + (float)isum * (u->d * xb->d);
    default:
        return s + u->d * xb->d * (float)isum;
    }
}

KNI void kq_tile(int T, int NX, int n, float *s, size_t ss, const void *w, const uint8_t *x, size_t xs)
{
    float acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = 0.0f;
    for (int b = 0; b < n / QK_K; b++) {
        kq_block u;
        kq_unpack(T, w, b, &u);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) acc[r] = kq_accumulate(T, acc[r], &u, (const block_q8_K *)(x + r * xs) + b);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = acc[r];
}

/* ---------------------------------------------------------- the tiles */

/* GEMM tile (kern_gemm_fn, {1, 4}: weight rows one at a time against nx
 * <= 4 rows) and decode dot tile (kern_dot_fn, nx <= 2) of type T, every
 * height its own instantiation. */
#define NEONQ_TILES(name, TILE, T) KERN_ROW_TILES(, kern_gemm_##name##_neon, kern_dot_##name##_neon, TILE, T)

NEONQ_TILES(q4_1, lq_tile, LQ_Q4_1)
NEONQ_TILES(q5_0, lq_tile, LQ_Q5_0)
NEONQ_TILES(q5_1, lq_tile, LQ_Q5_1)
NEONQ_TILES(iq4_nl, lq_tile, LQ_IQ4_NL)
NEONQ_TILES(q2_K, kq_tile, KQ_Q2_K)
NEONQ_TILES(q3_K, kq_tile, KQ_Q3_K)
NEONQ_TILES(q5_K, kq_tile, KQ_Q5_K)
NEONQ_TILES(iq4_xs, kq_tile, KQ_IQ4_XS)
NEONQ_TILES(tq2_0, kq_tile, KQ_TQ2_0)
NEONQ_TILES(tq1_0, kq_tile, KQ_TQ1_0)

#endif
