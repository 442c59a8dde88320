/* kern_kpack.c - the packed layout of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights
 * for the batched GEMM (kern_kgemm, kern_impl.h), and its packing.
 *
 * Why: a dot-layout tile (one weight row against 4 activation rows)
 * unpacks every super-block's nibbles, bit planes and 6-bit scales once per
 * 4 rows, and reduces 16 int32 lanes to one value per row and super-block;
 * at prefill that overhead, not the multiply, bounds these formats
 * (docs/speed.md). Packed per call, a super-block is unpacked once per
 * chunk of columns and a tile is only vpdpbusd of a 64-byte weight vector
 * (16 rows x 4 values) against 4 broadcast activation bytes, the lanes
 * being the weight rows: no horizontal sums.
 *
 * A group is KERN_KPACK_ROWS = 16 weight rows (the last group padded with
 * zero rows), n / 256 slabs of KPACK_SLAB bytes, one per super-block:
 *
 *   [0, 4096)      quants: vector v (64 bytes) = values 4v..4v+3 of rows 0..15
 *   KPACK_SC       int8 scale of sub-block j of row c at 16 j + c (j < 256 / SB)
 *   KPACK_PAIRS    8 vectors of int16 pairs: pair i of row c at 64 i + 4 c,
 *                  multiplied in the tile by the activation's bsums 2i, 2i+1
 *   KPACK_D        d of the 16 rows as f32
 *   KPACK_DMIN     dmin of the 16 rows as f32 (Q4_K, Q5_K)
 *
 * Values are unsigned bytes u with q = u - OFF, so that vpdpbusd (u8 x s8)
 * takes them, the offset coming back through the pairs:
 *
 *   type    SB  u               scale          pair i (bsums 2i, 2i+1)
 *   Q4_K    32  q (0..15)       sc (0..63)     (m_i, m_i): the min term, times dmin
 *   Q5_K    32  q (0..31)       sc (0..63)     (m_i, m_i): the min term, times dmin
 *   Q6_K    16  q (0..63)       sc (int8)      (-32 sc_2i, -32 sc_2i+1)
 *   Q2_K    16  q (0..3)        sc (0..15)     (m_2i, m_2i+1): the min term, times dmin
 *   Q3_K    16  q + 4 (0..7)    sc - 32        (-4 sc_2i, -4 sc_2i+1)
 *   IQ4_XS  32  value + 128     ls - 32        (-128 sc_i, -128 sc_i)
 *   IQ1-3   16  q + 128         sc (1..31)     (-128 sc_2i, -128 sc_2i+1)
 *
 * (IQ1-3: the lattice i-quants through quant_lattice_unpack, |q| <= 62.)
 *
 * so that per super-block sum_j sc_j (u.y)_j + sum_i pair_i . bsums_i is
 * the reference's exact integer sum (Q3_K, Q6_K, IQ4_XS), or the two sums are
 * the reference's isum and msum (Q2_K, Q4_K, Q5_K). The tile's bound: |u.y| over
 * a sub-block <= 32 * 241 * 127 < 2^20, times |sc| <= 128 and summed over
 * 16 sub-blocks < 2^31.
 *
 * Packing is plain C, paid once per chunk of columns per call (kern_matmul);
 * 8 bits a value where the rows hold 4.25-6.6 keeps the tile free of bit
 * work, at the price of ~2x the bytes the rows take, held in L2 by the
 * chunk size.
 */
#include "kernels/kern_impl.h"

#include <string.h>

#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

bool kern_kpack_layout(uint32_t t)
{
    return t == DT_Q2_K || t == DT_Q3_K || t == DT_Q4_K || t == DT_Q5_K || t == DT_Q6_K || t == DT_IQ4_XS ||
           quant_is_lattice(t);
}

size_t kern_kpack_group_bytes(int n) { return (size_t)(n / QK_K) * KPACK_SLAB; }

/* Q4_K's and Q5_K's scales, mins (as pairs), d and dmin. */
static void kp_scales_mins(kern_kpack_row *restrict o, const uint8_t *scales, uint16_t d, uint16_t dmin)
{
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        block_q4_K_scale_min(j, scales, &sc, &m);
        o->sc[j] = (int8_t)sc;
        o->pair[j][0] = o->pair[j][1] = m;
    }
    o->d = f16_to_f32(d), o->dmin = f16_to_f32(dmin);
}

static void kp_q4_K(kern_kpack_row *restrict o, const block_q4_K *restrict w)
{
    /* loops of constant length on bytes, so that the compiler vectorizes them */
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            o->u[64 * g + l] = w->qs[32 * g + l] & 0xF;
            o->u[64 * g + 32 + l] = w->qs[32 * g + l] >> 4;
        }
    kp_scales_mins(o, w->scales, w->d, w->dmin);
}

static void kp_q5_K(kern_kpack_row *restrict o, const block_q5_K *restrict w, bool values)
{
    for (int g = 0; values && g < 4; g++)
        for (int l = 0; l < 32; l++) {
            o->u[64 * g + l] = (uint8_t)((w->qs[32 * g + l] & 0xF) | (((w->qh[l] >> (2 * g)) & 1) << 4));
            o->u[64 * g + 32 + l] = (uint8_t)((w->qs[32 * g + l] >> 4) | (((w->qh[l] >> (2 * g + 1)) & 1) << 4));
        }
    kp_scales_mins(o, w->scales, w->d, w->dmin);
}

static void kp_q6_K(kern_kpack_row *restrict o, const block_q6_K *restrict w)
{
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t a = w->ql[64 * h + l], b = w->ql[64 * h + 32 + l], q = w->qh[32 * h + l];
            o->u[128 * h + l] = (uint8_t)((a & 15) | ((q & 3) << 4));
            o->u[128 * h + 32 + l] = (uint8_t)((b & 15) | (((q >> 2) & 3) << 4));
            o->u[128 * h + 64 + l] = (uint8_t)((a >> 4) | (((q >> 4) & 3) << 4));
            o->u[128 * h + 96 + l] = (uint8_t)((b >> 4) | ((q >> 6) << 4));
        }
    for (int j = 0; j < 16; j++) {
        o->sc[j] = w->scales[j];
        o->pair[j / 2][j % 2] = (int16_t)(-32 * w->scales[j]);
    }
    o->d = f16_to_f32(w->d), o->dmin = 0.0f;
}

static void kp_q3_K(kern_kpack_row *restrict o, const block_q3_K *restrict w)
{
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++)
                o->u[128 * h + 32 * k + l] =
                    (uint8_t)(((w->qs[32 * h + l] >> (2 * k)) & 3) | (((w->hmask[l] >> (4 * h + k)) & 1) << 2));
    for (int j = 0; j < 16; j++) {
        const int sc = block_q3_K_scale(j, w->scales) - 32;
        o->sc[j] = (int8_t)sc;
        o->pair[j / 2][j % 2] = (int16_t)(-4 * sc);
    }
    o->d = f16_to_f32(w->d), o->dmin = 0.0f;
}

static void kp_q2_K(kern_kpack_row *restrict o, const block_q2_K *restrict w)
{
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) o->u[128 * h + 32 * k + l] = (w->qs[32 * h + l] >> (2 * k)) & 3;
    for (int j = 0; j < 16; j++) {
        o->sc[j] = (int8_t)(w->scales[j] & 0xF);
        o->pair[j / 2][j % 2] = (int16_t)(w->scales[j] >> 4);
    }
    o->d = f16_to_f32(w->d), o->dmin = f16_to_f32(w->dmin);
}

static void kp_iq4_xs(kern_kpack_row *restrict o, const block_iq4_xs *restrict w, bool values)
{
    for (int j = 0; j < 8; j++) {
        for (int l = 0; values && l < 16; l++) {
            o->u[32 * j + l] = (uint8_t)(quant_iq4nl_values[w->qs[16 * j + l] & 0xF] + 128);
            o->u[32 * j + l + 16] = (uint8_t)(quant_iq4nl_values[w->qs[16 * j + l] >> 4] + 128);
        }
        const int sc = block_iq4_xs_scale(j, w) - 32;
        o->sc[j] = (int8_t)sc;
        o->pair[j][0] = o->pair[j][1] = (int16_t)(-128 * sc);
    }
    o->d = f16_to_f32(w->d), o->dmin = 0.0f;
}

/* A lattice i-quant's super-block (values whatever `values` says: no
 * variant has a faster way to them). */
static void kp_lattice(kern_kpack_row *restrict o, uint32_t t, const void *blk)
{
    quant_lattice_block u;
    quant_lattice_unpack(t, blk, 0, &u);
    for (int i = 0; i < QK_K; i++) o->u[i] = (uint8_t)(u.q[i] + 128);
    for (int j = 0; j < 16; j++) o->sc[j] = u.sc[j];
    for (int i = 0; i < 8; i++) {
        o->pair[i][0] = (int16_t)(-128 * u.sc[2 * i]);
        o->pair[i][1] = (int16_t)(-128 * u.sc[2 * i + 1]);
    }
    o->d = u.d, o->dmin = 0.0f;
}

void kern_kpack_unpack(uint32_t t, kern_kpack_row *o, const void *blk, bool values)
{
    if (quant_is_lattice(t)) {
        kp_lattice(o, t, blk);
        return;
    }
    memset(o->sc, 0, sizeof o->sc);
    if (t == DT_Q4_K) kp_q4_K(o, blk);
    else if (t == DT_Q5_K) kp_q5_K(o, blk, values);
    else if (t == DT_Q6_K) kp_q6_K(o, blk);
    else if (t == DT_Q3_K) kp_q3_K(o, blk);
    else if (t == DT_Q2_K) kp_q2_K(o, blk);
    else kp_iq4_xs(o, blk, values);
}

void kern_kpack_slab_tail(uint8_t *s, const kern_kpack_row *rows, int nw)
{
    for (int c = 0; c < nw; c++) {
        for (int j = 0; j < 16; j++) s[KPACK_SC + 16 * j + c] = (uint8_t)rows[c].sc[j];
        for (int i = 0; i < 8; i++) memcpy(s + KPACK_PAIRS + 64 * i + 4 * c, rows[c].pair[i], 4);
        memcpy(s + KPACK_D + 4 * c, &rows[c].d, 4);
        memcpy(s + KPACK_DMIN + 4 * c, &rows[c].dmin, 4);
    }
}

void kern_kpack_group(uint32_t t, uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n)
{
    const int nb = n / QK_K;
    const size_t wb = dtype_row_bytes(t, QK_K);
    if (nw < KERN_KPACK_ROWS) memset(dst, 0, kern_kpack_group_bytes(n)); /* the padding rows */
    kern_kpack_row o[KERN_KPACK_ROWS];
    for (int b = 0; b < nb; b++) {
        uint8_t *s = dst + (size_t)b * KPACK_SLAB;
        for (int c = 0; c < nw; c++) {
            kern_kpack_unpack(t, &o[c], w + (size_t)c * ws + (size_t)b * wb, true);
            for (int v = 0; v < QK_K / 4; v++) memcpy(s + 64 * v + 4 * c, o[c].u + 4 * v, 4);
        }
        kern_kpack_slab_tail(s, o, nw);
    }
}
