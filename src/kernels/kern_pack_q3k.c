/* kern_pack_q3k.c - the packed layout of Q3_K matrices (made once at model
 * load by kern_pack), its packing, the portable GEMM on it and its
 * conversion to kern_kpack.c's layout for the prefill GEMM.
 *
 * Why: on ggml rows the Q3_K decode dot is compute-bound (docs/speed.md):
 * per super-block and row it shifts the 2-bit planes apart, tests the
 * hmask bits into a byte mask, unpacks the 6-bit scales and permutes them,
 * and reduces to one float per row. Packed, the lanes are weight rows, a
 * value's three bits sit in one byte of the same lane (most of them), the
 * scales are bytes, and one broadcast of 4 activation bytes serves 8 rows.
 *
 * A group is KERN_PACK_ROWS = 8 weight rows (the last group padded with
 * zero rows), n / 256 slabs of KERN_Q3P_SLAB = 912 bytes, one per
 * super-block, then zero bytes up to a multiple of 64:
 *
 *   [0, 16)            d of rows 0..7, f16 as stored
 *   then 8 triples of KERN_Q3P_TRI = 112 bytes; triple i covers the
 *   values 32 i .. 32 i + 31 (sub-blocks 2 i and 2 i + 1):
 *     [0, 16)          row c's scales (sc_2i - 32, sc_2i+1 - 32) as int8 at 2 c
 *     [16, 112)        three vectors A, B, C of 32 bytes; byte 4 c + e of
 *                      each holds row c's u = q + 4 (0..7) of the values
 *                      v_o = 32 i + 4 o + e, o = 0..7:
 *                        A: u_0 bits 0-2, u_1 bits 3-5, u_6 bits 0-1 at 6-7
 *                        B: u_2 bits 0-2, u_3 bits 3-5, u_6 bit 2 at 6, u_7 bit 0 at 7
 *                        C: u_4 bits 0-2, u_5 bits 3-5, u_7 bits 1-2 at 6-7
 *
 * So six of the eight value vectors of a triple are one shift and one AND
 * away from vpdpbusd (u8 x s8) against a broadcast of the 4 matching
 * activation bytes, the last two a shift, an AND and an OR more; the
 * + 4 comes back as -4 sum sc_j bsums_j per row. 114 bytes a row and
 * super-block where ggml's rows take 110 (3.5625 bits a weight against
 * 3.4375): the scales as bytes cost 3.6%, read in the same rising stream.
 *
 * Every variant's GEMM (this file's, kern_avx2_q3kp.c, kern_avx512_q3kp.c)
 * computes each element with the reference's float operations
 * (kern_ref_quants.c: per super-block the exact integer sum, then
 * s += d * x.d * isum), so packed rows are the reference's bits for every
 * m, thread count and variant.
 *
 * At prefill (m >= the kern_kgemm's min_m) kern_matmul turns two groups
 * into one kern_kpack.c group per chunk (to_kpack: the u bytes as they are,
 * scales, pairs -4 sc, d as f32), what it would have made from ggml rows,
 * so the matrix is held once (the packed copy) and prefill keeps its GEMM.
 */
#include "kernels/kern_impl.h"

#include <string.h>

#include "tensor/blocks.h"
#include "tensor/half.h"

size_t kern_q3p_group_bytes(int n)
{
    return ((size_t)(n / QK_K) * KERN_Q3P_SLAB + 63) & ~(size_t)63;
}

/* Row c's u of value v (0..255) in slab s. */
static inline int q3p_u(const uint8_t *s, int c, int v)
{
    const uint8_t *t = s + KERN_Q3P_D_BYTES + (size_t)(v / 32) * KERN_Q3P_TRI + KERN_Q3P_SC_BYTES;
    const int o = (v / 4) % 8, p = 4 * c + v % 4;
    const int a = t[p], b = t[32 + p], cc = t[64 + p];
    switch (o) {
    case 0: return a & 7;
    case 1: return (a >> 3) & 7;
    case 2: return b & 7;
    case 3: return (b >> 3) & 7;
    case 4: return cc & 7;
    case 5: return (cc >> 3) & 7;
    case 6: return (a >> 6) | (((b >> 6) & 1) << 2);
    default: return (b >> 7) | ((cc >> 6) << 1);
    }
}

/* Row c's sub-block scale j (minus 32) in slab s. */
static inline int q3p_sc(const uint8_t *s, int c, int j)
{
    return (int8_t)s[KERN_Q3P_D_BYTES + (size_t)(j / 2) * KERN_Q3P_TRI + 2 * c + j % 2];
}

static inline uint16_t q3p_d(const uint8_t *s, int c)
{
    uint16_t d;
    memcpy(&d, s + 2 * c, 2);
    return d;
}

/* Row c's super-block w into slab s: u of the 256 values (loops of
 * constant length, which the compiler vectorizes), then each triple's three
 * bytes per value position straight from them; the scales, d. */
static void q3p_pack_block(uint8_t *restrict s, int c, const block_q3_K *restrict w)
{
    uint8_t u[QK_K];
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++)
                u[128 * h + 32 * k + l] =
                    (uint8_t)(((w->qs[32 * h + l] >> (2 * k)) & 3) | (((w->hmask[l] >> (4 * h + k)) & 1) << 2));
    memcpy(s + 2 * c, &w->d, 2);
    for (int i = 0; i < 8; i++) {
        uint8_t *t = s + KERN_Q3P_D_BYTES + (size_t)i * KERN_Q3P_TRI;
        const uint8_t *v = u + 32 * i; /* v[4 o + e]: u_o of lane byte e */
        for (int e = 0; e < 4; e++) {
            const int p = KERN_Q3P_SC_BYTES + 4 * c + e;
            t[p] = (uint8_t)(v[e] | v[4 + e] << 3 | (v[24 + e] & 3) << 6);
            t[32 + p] = (uint8_t)(v[8 + e] | v[12 + e] << 3 | (v[24 + e] >> 2) << 6 | (v[28 + e] & 1) << 7);
            t[64 + p] = (uint8_t)(v[16 + e] | v[20 + e] << 3 | (v[28 + e] >> 1) << 6);
        }
        t[2 * c] = (uint8_t)(int8_t)(block_q3_K_scale(2 * i, w->scales) - 32);
        t[2 * c + 1] = (uint8_t)(int8_t)(block_q3_K_scale(2 * i + 1, w->scales) - 32);
    }
}

void kern_q3p_group(uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n)
{
    const int nb = n / QK_K;
    memset(dst, 0, kern_q3p_group_bytes(n)); /* padding rows and the tail */
    for (int c = 0; c < nw; c++) {
        const block_q3_K *row = (const block_q3_K *)(w + (size_t)c * ws);
        for (int b = 0; b < nb; b++) q3p_pack_block(dst + (size_t)b * KERN_Q3P_SLAB, c, &row[b]);
    }
}

/* The reference's operations on the packed bytes: per super-block the
 * integer sum of scale x (q . activation) over the 16 sub-blocks, then
 * s += d * x.d * isum in float. */
void kern_gemmp_q3_K_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                         const kern_px *px, int nx)
{
    (void)px;
    const int nb = n / QK_K;
    for (int r = 0; r < nx; r++) {
        const block_q8_K *xb = (const block_q8_K *)((const uint8_t *)x + (size_t)r * xs);
        for (int c = 0; c < nw; c++) {
            float s = 0.0f;
            for (int b = 0; b < nb; b++) {
                const uint8_t *sl = (const uint8_t *)wp + (size_t)b * KERN_Q3P_SLAB;
                int isum = 0;
                for (int j = 0; j < 16; j++) {
                    int sub = 0;
                    for (int e = 16 * j; e < 16 * j + 16; e++) sub += (q3p_u(sl, c, e) - 4) * xb[b].qs[e];
                    isum += q3p_sc(sl, c, j) * sub;
                }
                s += f16_to_f32(q3p_d(sl, c)) * xb[b].d * (float)isum;
            }
            y[(size_t)r * ys + (size_t)c] = s;
        }
    }
}

/* kern_kpack.c's group from packed groups: u as it is, the scales, the
 * pairs (-4 sc_2i, -4 sc_2i+1), d as f32, dmin 0. Padding rows are zero
 * bytes in both layouts; a group past nw is zeros, so every variant's
 * to_kpack writes the same bytes. */
void kern_q3p_to_kpack_ref(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n)
{
    const int nb = n / QK_K, ng = nw > KERN_PACK_ROWS ? 2 : 1;
    for (int b = 0; b < nb; b++) {
        uint8_t *s = dst + (size_t)b * KPACK_SLAB;
        kern_kpack_row rows[KERN_KPACK_ROWS];
        memset(s, 0, KPACK_SLAB);
        for (int c = 0; c < ng * KERN_PACK_ROWS; c++) {
            const uint8_t *sl = wp + (size_t)(c / KERN_PACK_ROWS) * gb + (size_t)b * KERN_Q3P_SLAB;
            const int cc = c % KERN_PACK_ROWS;
            kern_kpack_row *o = &rows[c];
            for (int v = 0; v < QK_K; v++) s[64 * (v / 4) + 4 * c + v % 4] = (uint8_t)q3p_u(sl, cc, v);
            for (int j = 0; j < 16; j++) {
                const int sc = q3p_sc(sl, cc, j);
                o->sc[j] = (int8_t)sc;
                o->pair[j / 2][j % 2] = (int16_t)(-4 * sc);
            }
            o->d = f16_to_f32(q3p_d(sl, cc));
            o->dmin = 0.0f;
        }
        kern_kpack_slab_tail(s, rows, ng * KERN_PACK_ROWS);
    }
}
