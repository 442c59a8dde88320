/* kern_pack_iq4.c - the packed layout of IQ4_XS matrices (made once at
 * model load by kern_pack), its packing, the portable GEMM on it and its
 * conversion to kern_kpack.c's layout for the prefill GEMM.
 *
 * Why: decode reads every weight once per token, so its dot must keep up
 * with memory. On ggml rows the IQ4_XS dot is compute-bound (one weight
 * row at a time: its activations re-gathered per row, its 6-bit scales
 * unpacked per super-block, a horizontal sum per row). Packed, the lanes
 * are weight rows: one 4-byte broadcast of activations serves 8 rows, the
 * scales are bytes ready to widen, and nothing is permuted in the loop.
 *
 * A group is KERN_PACK_ROWS = 8 weight rows (the last group padded with
 * zero rows), n / 256 slabs of KERN_IQ4P_SLAB = 1120 bytes, one per
 * super-block, then zero bytes up to a multiple of 64:
 *
 *   [0, 32)      d of rows 0..7 as f32 (the f16 d converted, exact)
 *   [32, 96)     scale of sub-block j of row c, ls - 32 as int8, at 32 + 8 j + c
 *   [96, 1120)   32 vectors of 32 bytes: vector v = 4 j + t (sub-block j,
 *                t = 0..3) holds row c's qs[16 j + 4 t .. 16 j + 4 t + 3]
 *                at bytes 4 c .. 4 c + 3, so its low nibbles are row c's
 *                values 32 j + 4 t .. + 3 and its high nibbles values
 *                32 j + 16 + 4 t .. + 3 (ggml's order within a sub-block)
 *
 * So a 32-byte load is 4 values of each of 8 rows (low nibbles) and 4 more
 * (high), one lane per row, against one broadcast of 4 activation bytes
 * each. 140 bytes a row and super-block where ggml's rows take 136: the
 * scales as bytes and d as f32 cost 3%, read in the same rising stream.
 *
 * The dot of every variant (this file's, kern_avx2_iq4p.c,
 * kern_avx512_iq4p.c) computes each element with the reference's float
 * operations (kern_ref_quants.c: per super-block the exact integer sum,
 * then s += d * x.d * isum), so packed rows are the reference's bits for
 * every m, thread count and variant, as Q8_0/Q4_0's are.
 *
 * At prefill (m >= the kern_kgemm's min_m) kern_matmul turns two groups
 * into one kern_kpack.c group per chunk (to_kpack: values + 128 as bytes,
 * scales, pairs, d), which is what it would have made from ggml rows, so
 * the matrix is held once (the packed copy) and prefill keeps its GEMM.
 */
#include "kernels/kern_impl.h"

#include <string.h>

#include "tensor/blocks.h"
#include "tensor/half.h"

size_t kern_iq4p_group_bytes(int n)
{
    return ((size_t)(n / QK_K) * KERN_IQ4P_SLAB + 63) & ~(size_t)63;
}

void kern_iq4p_group(uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n)
{
    const int nb = n / QK_K;
    memset(dst, 0, kern_iq4p_group_bytes(n)); /* padding rows and the tail */
    for (int c = 0; c < nw; c++) {
        const block_iq4_xs *row = (const block_iq4_xs *)(w + (size_t)c * ws);
        for (int b = 0; b < nb; b++) {
            uint8_t *s = dst + (size_t)b * KERN_IQ4P_SLAB;
            const float d = f16_to_f32(row[b].d);
            memcpy(s + KERN_IQ4P_D + 4 * c, &d, 4);
            for (int j = 0; j < 8; j++) {
                s[KERN_IQ4P_SC + 8 * j + c] = (uint8_t)(int8_t)(block_iq4_xs_scale(j, &row[b]) - 32);
                for (int t = 0; t < 4; t++) memcpy(s + KERN_IQ4P_Q + 32 * (4 * j + t) + 4 * c, row[b].qs + 16 * j + 4 * t, 4);
            }
        }
    }
}

/* The reference's operations on the packed bytes: per super-block the
 * integer sum of scale x (value . activation) over the 8 sub-blocks, then
 * s += d * x.d * isum in float. */
void kern_gemmp_iq4_xs_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                           const kern_px *px, int nx)
{
    (void)px;
    const int nb = n / QK_K;
    for (int r = 0; r < nx; r++) {
        const block_q8_K *xb = (const block_q8_K *)((const uint8_t *)x + (size_t)r * xs);
        for (int c = 0; c < nw; c++) {
            float s = 0.0f;
            for (int b = 0; b < nb; b++) {
                const uint8_t *sl = (const uint8_t *)wp + (size_t)b * KERN_IQ4P_SLAB;
                int isum = 0;
                for (int j = 0; j < 8; j++) {
                    int sub = 0;
                    for (int t = 0; t < 4; t++)
                        for (int e = 0; e < 4; e++) {
                            const uint8_t q = sl[KERN_IQ4P_Q + 32 * (4 * j + t) + 4 * c + e];
                            sub += quant_iq4nl_values[q & 0xF] * xb[b].qs[32 * j + 4 * t + e];
                            sub += quant_iq4nl_values[q >> 4] * xb[b].qs[32 * j + 16 + 4 * t + e];
                        }
                    isum += (int8_t)sl[KERN_IQ4P_SC + 8 * j + c] * sub;
                }
                float d;
                memcpy(&d, sl + KERN_IQ4P_D + 4 * c, 4);
                s += d * xb[b].d * (float)isum;
            }
            y[(size_t)r * ys + (size_t)c] = s;
        }
    }
}

/* kern_kpack.c's group from packed groups. Rows of a group that is there
 * (padding rows included: their zero nibbles look up to -127 + 128 = 1,
 * with scale and d 0) are converted whole, a group past nw is zeros, so
 * every variant's to_kpack writes the same bytes. */
void kern_iq4p_to_kpack_ref(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n)
{
    const int nb = n / QK_K, ng = nw > KERN_PACK_ROWS ? 2 : 1;
    for (int b = 0; b < nb; b++) {
        uint8_t *s = dst + (size_t)b * KPACK_SLAB;
        kern_kpack_row rows[KERN_KPACK_ROWS];
        memset(s, 0, KPACK_SLAB);
        for (int c = 0; c < ng * KERN_PACK_ROWS; c++) {
            const uint8_t *sl = wp + (size_t)(c / KERN_PACK_ROWS) * gb + (size_t)b * KERN_IQ4P_SLAB;
            const int cc = c % KERN_PACK_ROWS;
            kern_kpack_row *o = &rows[c];
            memset(o->sc, 0, sizeof o->sc);
            for (int j = 0; j < 8; j++) {
                const int sc = (int8_t)sl[KERN_IQ4P_SC + 8 * j + cc];
                o->sc[j] = (int8_t)sc;
                o->pair[j][0] = o->pair[j][1] = (int16_t)(-128 * sc);
                for (int t = 0; t < 4; t++)
                    for (int e = 0; e < 4; e++) {
                        const uint8_t q = sl[KERN_IQ4P_Q + 32 * (4 * j + t) + 4 * cc + e];
                        s[64 * (8 * j + t) + 4 * c + e] = (uint8_t)(quant_iq4nl_values[q & 0xF] + 128);
                        s[64 * (8 * j + 4 + t) + 4 * c + e] = (uint8_t)(quant_iq4nl_values[q >> 4] + 128);
                    }
            }
            memcpy(&o->d, sl + KERN_IQ4P_D + 4 * cc, 4);
            o->dmin = 0.0f;
        }
        kern_kpack_slab_tail(s, rows, ng * KERN_PACK_ROWS);
    }
}
