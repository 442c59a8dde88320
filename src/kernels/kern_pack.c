/* kern_pack.c - the packed weight layouts of Q8_0, Q4_0 and F16 matrices:
 * packing (once at model load, kern_pack; or per call by kern_matmul for
 * Q8_0/Q4_0 weights that were not packed) and the portable GEMMs on them.
 * IQ4_XS's, Q3_K's and Q4_K's layouts (packed at load only) are
 * kern_pack_iq4.c's, kern_pack_q3k.c's and kern_pack_q4k.c's; the entry
 * points below hand them over.
 *
 * F16 (KERN_PACKF_ROWS = 16 rows a group, 32 n bytes):
 *
 *   group = [ element 0 of rows 0..15 ][ element 1 of rows 0..15 ] ...   (f16, 32 bytes each)
 *
 * so a tile converts one 32-byte load into 16 lanes, one per weight row,
 * and multiplies it by a broadcast activation: no horizontal sums, and an
 * activation value is loaded once per 16 (AVX-512: 32) weight rows where a
 * dot-layout tile loads it once per 4 (kern_avx512_f16p.c has the
 * figures). The portable GEMM below is THE PACKED F16 ORDER of kern_impl.h
 * in fmaf; it runs only where a test or the reference variant asks for it,
 * since kern_pack_supports packs F16 only for a variant with its own tile.
 *
 * Q8_0 and Q4_0:
 *
 * A packed matrix is a run of groups of KERN_PACK_ROWS = 8 weight rows
 * (the last group padded with zero rows), each group
 * kern_pack_group_bytes(type, n) bytes (a multiple of 64), 64-byte aligned.
 * A group's nb blocks go in runs of KERN_PACK_RUN = 4 (the last run may be
 * shorter), each run a line of scales and then its blocks' quants:
 *
 *   group = run 0, run 1, ...
 *   run   = [ scales: 64 bytes, block j's 8 f16 at 16j ][ quants: up to 4 blocks x QV vectors of 32 bytes ]
 *
 *   Q8_0 (QV = 8): vector k of block b, bytes 4c..4c+3 = row c's qs[4k..4k+3]
 *   Q4_0 (QV = 4): vector v of block b, bytes 4c..4c+3 = row c's qs[4v..4v+3],
 *                  i.e. low nibbles = row c's elements 4v..4v+3 and high
 *                  nibbles its elements 16+4v..16+4v+3 (ggml's nibble order)
 *   scales: block b, row c = row c's d (f16, as stored)
 *
 * So a 32-byte load gives 4 consecutive values of each of the 8 rows, and a
 * broadcast of the matching 4 activation bytes makes the 8 lanes the 8 rows'
 * partial sums with no horizontal work (kern_avx2.c). The bytes are the
 * ggml rows' own bytes, moved: Q8_0 takes 272 bytes per block of 8 rows and
 * Q4_0 144, as unpacked (a short last run pads its scale line), so decode
 * reads no more memory than before.
 *
 * Why the scales are interleaved, not after all the quants: decode streams
 * the weights from DRAM, and a tile consumes a group at strictly rising
 * addresses only this way. With the scales in a block of their own at the
 * group's end (the first layout), Zen 4's hardware prefetcher lost the
 * stream at every group and the tiles read well under half the bandwidth
 * (docs/speed.md, "Kernel choices"); build/bench/bench_matmul_stream
 * measures the real tiles against a plain read of the same bytes.
 */
#include "kernels/kern_impl.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

/* The types and row lengths the layout exists for (IQ4_XS: kern_pack_iq4.c,
 * Q3_K: kern_pack_q3k.c, Q4_K: kern_pack_q4k.c). */
static bool pack_layout(uint32_t wtype, int n_in)
{
    if (wtype == DT_IQ4_XS || wtype == DT_Q3_K || wtype == DT_Q4_K) return n_in > 0 && n_in % QK_K == 0;
    return (wtype == DT_Q8_0 || wtype == DT_Q4_0 || wtype == DT_F16) && n_in > 0 && n_in % 32 == 0;
}

bool kern_pack_supports(uint32_t wtype, int n_in)
{
    /* F16, IQ4_XS, Q3_K and Q4_K only where the variant has a packed tile: the
     * portable ones (fmaf chains; a table lookup or bit gathering per
     * value) would be slower than the variant's tiles on ggml rows (NEON
     * keeps those) */
    const bool own = wtype == DT_Q8_0 || wtype == DT_Q4_0;
    return pack_layout(wtype, n_in) && (own || kern_active()->packed[wtype].gemm != NULL);
}

size_t kern_pack_group_bytes(uint32_t t, int n)
{
    if (t == DT_F16) return (size_t)n * 2 * KERN_PACKF_ROWS;
    if (t == DT_IQ4_XS) return kern_iq4p_group_bytes(n);
    if (t == DT_Q3_K) return kern_q3p_group_bytes(n);
    if (t == DT_Q4_K) return kern_q4p_group_bytes(n);
    const size_t nb = (size_t)(n / 32), runs = (nb + KERN_PACK_RUN - 1) / KERN_PACK_RUN;
    return runs * 64 + nb * kern_pack_block_quant_bytes(t);
}

size_t kern_pack_bytes(uint32_t wtype, int n_in, int n_out)
{
    if (!pack_layout(wtype, n_in) || n_out <= 0) return 0;
    const int rows = kern_pack_rows(wtype);
    return (size_t)((n_out + rows - 1) / rows) * kern_pack_group_bytes(wtype, n_in);
}

/* F16: row c's element k at [k][c] of the group (16 rows), 16 elements
 * of every row at a time so that the writes stay in 512 bytes (L1). */
static void pack_group_f16(uint16_t *dst, const uint8_t *w, size_t ws, int nw, int n)
{
    for (int k0 = 0; k0 < n; k0 += 16)
        for (int c = 0; c < nw; c++) {
            const uint16_t *row = (const uint16_t *)(w + (size_t)c * ws) + k0;
            uint16_t *d = dst + (size_t)k0 * KERN_PACKF_ROWS + c;
            for (int k = 0; k < 16; k++) d[k * KERN_PACKF_ROWS] = row[k];
        }
}

void kern_pack_group(uint32_t t, uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n)
{
    if (t == DT_F16) {
        if (nw < KERN_PACKF_ROWS) memset(dst, 0, kern_pack_group_bytes(t, n)); /* the padding rows */
        pack_group_f16((uint16_t *)dst, w, ws, nw, n);
        return;
    }
    if (t == DT_IQ4_XS) {
        kern_iq4p_group(dst, w, ws, nw, n);
        return;
    }
    if (t == DT_Q3_K) {
        kern_q3p_group(dst, w, ws, nw, n);
        return;
    }
    if (t == DT_Q4_K) {
        kern_q4p_group(dst, w, ws, nw, n);
        return;
    }
    const int nb = n / 32, qv = t == DT_Q8_0 ? 8 : 4;
    const size_t gq = kern_pack_block_quant_bytes(t);
    /* zero rows past nw and the unused scales of a short last run */
    memset(dst, 0, kern_pack_group_bytes(t, n));
    for (int c = 0; c < nw; c++) {
        const uint8_t *row = w + (size_t)c * ws;
        for (int b = 0; b < nb; b++) {
            const uint8_t *qs;
            uint16_t d;
            if (t == DT_Q8_0) {
                const block_q8_0 *blk = (const block_q8_0 *)row + b;
                qs = (const uint8_t *)blk->qs;
                d = blk->d;
            } else {
                const block_q4_0 *blk = (const block_q4_0 *)row + b;
                qs = blk->qs;
                d = blk->d;
            }
            uint8_t *g = (uint8_t *)kern_pack_quants(dst, gq, b) + 4 * c;
            for (int k = 0; k < qv; k++) memcpy(g + 32 * k, qs + 4 * k, 4);
            ((uint16_t *)kern_pack_scales(dst, gq, b))[c] = d;
        }
    }
}

void kern_pack(void *dst, const void *w, uint32_t wtype, int n_in, int n_out)
{
    const size_t gb = kern_pack_group_bytes(wtype, n_in), ws = (size_t)dtype_row_bytes(wtype, (uint64_t)n_in);
    const int rows = kern_pack_rows(wtype);
    for (int c = 0; c < n_out; c += rows)
        kern_pack_group(wtype, (uint8_t *)dst + (size_t)(c / rows) * gb, (const uint8_t *)w + (size_t)c * ws, ws,
                        n_out - c < rows ? n_out - c : rows, n_in);
}

/* ------------------------------------------------ the reference GEMM */

/* Row c's 32 quants of block b of a packed group, as signed values. */
static void pack_row_block(uint32_t t, const uint8_t *wp, int b, int c, int8_t q[32])
{
    const uint8_t *g = kern_pack_quants(wp, kern_pack_block_quant_bytes(t), b) + 4 * c;
    if (t == DT_Q8_0) {
        for (int j = 0; j < 32; j++) q[j] = (int8_t)g[32 * (j / 4) + j % 4];
    } else {
        for (int j = 0; j < 16; j++) {
            const uint8_t v = g[32 * (j / 4) + j % 4];
            q[j] = (int8_t)((v & 0x0F) - 8);
            q[j + 16] = (int8_t)((v >> 4) - 8);
        }
    }
}

/* The reference's float operations (kern_ref.c) on the packed bytes. */
static void gemmp_ref(uint32_t t, int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xst,
                      int nx)
{
    const int nb = n / 32;
    for (int r = 0; r < nx; r++) {
        const block_q8_0 *xb = (const block_q8_0 *)((const uint8_t *)x + (size_t)r * xst);
        for (int c = 0; c < nw; c++) {
            float s = 0.0f;
            for (int b = 0; b < nb; b++) {
                int8_t q[32];
                pack_row_block(t, wp, b, c, q);
                int sumi = 0;
                for (int j = 0; j < 32; j++) sumi += q[j] * xb[b].qs[j];
                const float dw = f16_to_f32(kern_pack_scales(wp, kern_pack_block_quant_bytes(t), b)[c]), dx = f16_to_f32(xb[b].d);
                if (t == DT_Q8_0) s += (float)sumi * (dw * dx);
                else s += (float)sumi * dw * dx;
            }
            y[(size_t)r * ys + c] = s;
        }
    }
}

static void gemmp_q8_0_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xst,
                           const kern_px *px, int nx)
{
    (void)px;
    gemmp_ref(DT_Q8_0, n, y, ys, wp, nw, x, xst, nx);
}

static void gemmp_q4_0_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xst,
                           const kern_px *px, int nx)
{
    (void)px;
    gemmp_ref(DT_Q4_0, n, y, ys, wp, nw, x, xst, nx);
}

/* F16 in THE PACKED F16 ORDER (kern_impl.h), fmaf being the fused
 * multiply-add of the SIMD tiles: the same bits. */
static void gemmp_f16_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xst,
                          const kern_px *px, int nx)
{
    (void)x, (void)xst;
    const size_t gb = kern_pack_group_bytes(DT_F16, n);
    for (int c = 0; c < nw; c++) {
        const uint16_t *g = (const uint16_t *)((const uint8_t *)wp + (size_t)(c / KERN_PACKF_ROWS) * gb);
        const int lane = c % KERN_PACKF_ROWS;
        for (int r = 0; r < nx; r++) {
            float tot = 0.0f;
            for (int k0 = 0; k0 < n; k0 += KERN_PACKF_KB) {
                const int k1 = n - k0 < KERN_PACKF_KB ? n : k0 + KERN_PACKF_KB;
                float acc = 0.0f;
                for (int k = k0; k < k1; k++)
                    acc = fmaf(f16_to_f32(g[(size_t)k * KERN_PACKF_ROWS + lane]), px->f[(size_t)k * px->rows + (size_t)r], acc);
                tot = tot + acc;
            }
            y[(size_t)r * ys + (size_t)c] = tot;
        }
    }
}

static void pxf_row_ref(float *f, size_t rows, const void *x, int n)
{
    const uint16_t *h = x;
    for (int k = 0; k < n; k++) f[(size_t)k * rows] = f16_to_f32(h[k]);
}

static const kern_packed packed_ref[6] = {
    {4, NULL, gemmp_q8_0_ref, 1, NULL, NULL},
    {4, NULL, gemmp_q4_0_ref, 1, NULL, NULL},
    {4, NULL, gemmp_f16_ref, 8, pxf_row_ref, NULL},
    {4, NULL, kern_gemmp_iq4_xs_ref, 1, NULL, kern_iq4p_to_kpack_ref}, /* kern_pack_iq4.c */
    {4, NULL, kern_gemmp_q3_K_ref, 1, NULL, kern_q3p_to_kpack_ref},    /* kern_pack_q3k.c */
    {4, NULL, kern_gemmp_q4_K_ref, 1, NULL, kern_q4p_to_kpack_ref},    /* kern_pack_q4k.c */
};

const kern_packed *kern_packed_for(const kern_vtable *vt, uint32_t t)
{
    static const uint32_t types[6] = {DT_Q8_0, DT_Q4_0, DT_F16, DT_IQ4_XS, DT_Q3_K, DT_Q4_K};
    for (int i = 0; i < 6; i++)
        if (t == types[i]) return vt->packed[t].gemm ? &vt->packed[t] : &packed_ref[i];
    return NULL;
}
