/* kern_pack_q4k.c - the packed layout of Q4_K matrices (made once at model
 * load by kern_pack), its packing, the portable GEMM on it and its
 * conversion to kern_kpack.c's layout for the prefill GEMM.
 *
 * Why: on ggml rows the Q4_K decode dot is compute-bound (docs/speed.md):
 * per super-block and row it unpacks the 6-bit scales and mins, gathers
 * the activations again for every row, and reduces to one float per row.
 * Packed, the lanes are weight rows: one broadcast of 4 activation bytes
 * serves 8 rows, scales and mins are bytes ready to widen, and a value is
 * one AND (low nibbles) or one shift and AND (high) from vpdpbusd.
 *
 * A group is KERN_PACK_ROWS = 8 weight rows (the last group padded with
 * zero rows), n / 256 slabs of KERN_Q4P_SLAB = 1184 bytes, one per
 * super-block, then zero bytes up to a multiple of 64:
 *
 *   [0, 16)           d of rows 0..7, f16 as stored
 *   [16, 32)          dmin of rows 0..7, f16 as stored
 *   then 4 quads of KERN_Q4P_QUAD = 288 bytes; quad g covers sub-blocks
 *   2 g (values 64 g .. + 31) and 2 g + 1 (64 g + 32 .. + 31):
 *     [0, 16)         scale (0..63) of sub-block 2 g + h of row c at 8 h + c
 *     [16, 32)        min of sub-block 2 g + h of row c at 16 + 8 h + c
 *     [32, 288)       8 vectors of 32 bytes: vector t holds row c's
 *                     qs[32 g + 4 t .. + 3] at bytes 4 c .. 4 c + 3, so its
 *                     low nibbles are row c's values 64 g + 4 t .. + 3 and
 *                     its high nibbles 64 g + 32 + 4 t .. + 3 (ggml's order)
 *
 * 148 bytes a row and super-block where ggml's rows take 144 (4.625 bits
 * a weight against 4.5): the scales and mins as bytes cost 2.8%, read in
 * the same rising stream.
 *
 * Every variant's GEMM (this file's, kern_avx2_q4kp.c, kern_avx512_q4kp.c)
 * computes each element with the reference's float operations (kern_ref.c:
 * per super-block the exact integer sums isum = sum sc_j (q.y)_j and msum =
 * sum m_j (bsums_2j + bsums_2j+1), then s += d * x.d * isum and
 * s -= dmin * x.d * msum), so packed rows are the reference's bits for
 * every m, thread count and variant.
 *
 * At prefill (m >= the kern_kgemm's min_m) kern_matmul turns two groups
 * into one kern_kpack.c group per chunk (to_kpack: the nibbles as bytes,
 * scales, pairs (m, m), d and dmin as f32), what it would have made from
 * ggml rows, so the matrix is held once (the packed copy) and prefill keeps
 * its GEMM.
 */
#include "kernels/kern_impl.h"

#include <string.h>

#include "tensor/blocks.h"
#include "tensor/half.h"

size_t kern_q4p_group_bytes(int n)
{
    return ((size_t)(n / QK_K) * KERN_Q4P_SLAB + 63) & ~(size_t)63;
}

/* Row c's value v (0..255) in slab s. */
static inline int q4p_q(const uint8_t *s, int c, int v)
{
    const int g = v / 64, hi = (v / 32) % 2, l = v % 32;
    const uint8_t q = s[KERN_Q4P_HEAD + (size_t)g * KERN_Q4P_QUAD + KERN_Q4P_Q + 32 * (l / 4) + 4 * c + l % 4];
    return hi ? q >> 4 : q & 0xF;
}

/* Row c's scale (at = KERN_Q4P_SC) or min (KERN_Q4P_MIN) of sub-block j in slab s. */
static inline int q4p_sm(const uint8_t *s, int at, int c, int j)
{
    return s[KERN_Q4P_HEAD + (size_t)(j / 2) * KERN_Q4P_QUAD + at + 8 * (j % 2) + c];
}

/* Row c's d (at = 0) or dmin (at = 16) in slab s. */
static inline uint16_t q4p_d(const uint8_t *s, int at, int c)
{
    uint16_t d;
    memcpy(&d, s + at + 2 * c, 2);
    return d;
}

void kern_q4p_group(uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n)
{
    const int nb = n / QK_K;
    memset(dst, 0, kern_q4p_group_bytes(n)); /* padding rows and the tail */
    for (int c = 0; c < nw; c++) {
        const block_q4_K *row = (const block_q4_K *)(w + (size_t)c * ws);
        for (int b = 0; b < nb; b++) {
            uint8_t *s = dst + (size_t)b * KERN_Q4P_SLAB;
            memcpy(s + 2 * c, &row[b].d, 2);
            memcpy(s + 16 + 2 * c, &row[b].dmin, 2);
            for (int g = 0; g < 4; g++) {
                uint8_t *q = s + KERN_Q4P_HEAD + (size_t)g * KERN_Q4P_QUAD;
                for (int h = 0; h < 2; h++) block_q4_K_scale_min(2 * g + h, row[b].scales, &q[KERN_Q4P_SC + 8 * h + c], &q[KERN_Q4P_MIN + 8 * h + c]);
                for (int t = 0; t < 8; t++) memcpy(q + KERN_Q4P_Q + 32 * t + 4 * c, row[b].qs + 32 * g + 4 * t, 4);
            }
        }
    }
}

/* The reference's operations on the packed bytes (kern_ref.c's dot1_q4_K). */
void kern_gemmp_q4_K_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                         const kern_px *px, int nx)
{
    (void)px;
    const int nb = n / QK_K;
    for (int r = 0; r < nx; r++) {
        const block_q8_K *xb = (const block_q8_K *)((const uint8_t *)x + (size_t)r * xs);
        for (int c = 0; c < nw; c++) {
            float s = 0.0f;
            for (int b = 0; b < nb; b++) {
                const uint8_t *sl = (const uint8_t *)wp + (size_t)b * KERN_Q4P_SLAB;
                int isum = 0, msum = 0;
                for (int j = 0; j < 8; j++) {
                    int dot = 0;
                    for (int v = 32 * j; v < 32 * j + 32; v++) dot += q4p_q(sl, c, v) * xb[b].qs[v];
                    isum += q4p_sm(sl, KERN_Q4P_SC, c, j) * dot;
                    msum += q4p_sm(sl, KERN_Q4P_MIN, c, j) * (xb[b].bsums[2 * j] + xb[b].bsums[2 * j + 1]);
                }
                s += f16_to_f32(q4p_d(sl, 0, c)) * xb[b].d * (float)isum;
                s -= f16_to_f32(q4p_d(sl, 16, c)) * xb[b].d * (float)msum;
            }
            y[(size_t)r * ys + (size_t)c] = s;
        }
    }
}

/* Slab b of kern_kpack.c's group past the values: the scales, the pairs
 * (m_j, m_j), d and dmin as f32 of the ng groups' rows at wp (gb bytes
 * apart); the rest zero. */
void kern_q4p_kpack_tail(uint8_t *s, const uint8_t *wp, size_t gb, int ng, int b)
{
    kern_kpack_row rows[KERN_KPACK_ROWS];
    memset(s + KPACK_SC, 0, KPACK_SLAB - KPACK_SC);
    for (int c = 0; c < ng * KERN_PACK_ROWS; c++) {
        const uint8_t *sl = wp + (size_t)(c / KERN_PACK_ROWS) * gb + (size_t)b * KERN_Q4P_SLAB;
        const int cc = c % KERN_PACK_ROWS;
        kern_kpack_row *o = &rows[c];
        memset(o->sc, 0, sizeof o->sc);
        for (int j = 0; j < 8; j++) {
            o->sc[j] = (int8_t)q4p_sm(sl, KERN_Q4P_SC, cc, j);
            o->pair[j][0] = o->pair[j][1] = (int16_t)q4p_sm(sl, KERN_Q4P_MIN, cc, j);
        }
        o->d = f16_to_f32(q4p_d(sl, 0, cc));
        o->dmin = f16_to_f32(q4p_d(sl, 16, cc));
    }
    kern_kpack_slab_tail(s, rows, ng * KERN_PACK_ROWS);
}

/* kern_kpack.c's group from packed groups: the values as bytes, then the
 * tail above. Padding rows are zero bytes in both layouts; a group past nw
 * is zeros, so every variant's to_kpack writes the same bytes. */
void kern_q4p_to_kpack_ref(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n)
{
    const int nb = n / QK_K, ng = nw > KERN_PACK_ROWS ? 2 : 1;
    for (int b = 0; b < nb; b++) {
        uint8_t *s = dst + (size_t)b * KPACK_SLAB;
        memset(s, 0, KPACK_SC);
        for (int c = 0; c < ng * KERN_PACK_ROWS; c++) {
            const uint8_t *sl = wp + (size_t)(c / KERN_PACK_ROWS) * gb + (size_t)b * KERN_Q4P_SLAB;
            for (int v = 0; v < QK_K; v++) s[64 * (v / 4) + 4 * c + v % 4] = (uint8_t)q4p_q(sl, c % KERN_PACK_ROWS, v);
        }
        kern_q4p_kpack_tail(s, wp, gb, ng, b);
    }
}
