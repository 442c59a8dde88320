/* kern_ref_quants.c - reference dots and GEMM tiles of the block formats
 * beside Q8_0/Q4_0/Q4_K/Q6_K (kern_ref.c has those), and the Q8_1
 * activation conversion. kern_vt_ref lists them.
 *
 *   weight type                         dot type   per block, in float
 *   Q5_0, IQ4_NL                        Q8_0       (dw*dx) * isum
 *   Q4_1, Q5_1                          Q8_1       (dw*dx) * isum + m*s
 *   Q2_K, Q5_K                          Q8_K       dx*d*isum - dx*dmin*msum
 *   Q3_K, IQ4_XS, TQ1_0, TQ2_0          Q8_K       dx*d*isum
 *   IQ2_*, IQ3_*, IQ1_* (lattice)       Q8_K       (d*dx)*isum, d from
 *                                                  quant_lattice_unpack
 *
 * isum is the exact integer sum over the block of (sub-block scale code) x
 * (weight level . activation ints); msum the mins' codes against Q8_K's
 * bsums. So a block's contribution is exact up to the last float
 * operations, as in ggml, and every SIMD variant must compute the same
 * integers (they may only reorder the float sums over blocks).
 */
#include "kernels/kern_impl.h"

#include <string.h>

#include "tensor/blocks.h"
#include "tensor/half.h"
#include "tensor/quant.h"

/* ------------------------------------------------------ 32-element blocks */

/* Sum over a 32-block of q[j] * y[j], q given as the low nibbles (plus a
 * 5th bit) of the Q4/Q5 layout minus off. */
static int dot32_nib(const uint8_t *qs, const uint8_t *qh, int off, const int8_t *y)
{
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
        int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
        if (qh) {
            lo |= ((qh[j / 8] >> (j % 8)) & 1) << 4;
            hi |= ((qh[(j + 16) / 8] >> (j % 8)) & 1) << 4;
        }
        sumi += (lo - off) * y[j] + (hi - off) * y[j + 16];
    }
    return sumi;
}

static float dot1_q4_1(int n, const block_q4_1 *w, const block_q8_1 *x)
{
    float s = 0.0f;
    for (int b = 0; b < n / 32; b++) {
        const int sumi = dot32_nib(w[b].qs, NULL, 0, x[b].qs);
        s += (f16_to_f32(w[b].d) * f16_to_f32(x[b].d)) * (float)sumi + f16_to_f32(w[b].m) * f16_to_f32(x[b].s);
    }
    return s;
}

static float dot1_q5_0(int n, const block_q5_0 *w, const block_q8_0 *x)
{
    float s = 0.0f;
    for (int b = 0; b < n / 32; b++)
        s += (f16_to_f32(w[b].d) * f16_to_f32(x[b].d)) * (float)dot32_nib(w[b].qs, w[b].qh, 16, x[b].qs);
    return s;
}

static float dot1_q5_1(int n, const block_q5_1 *w, const block_q8_1 *x)
{
    float s = 0.0f;
    for (int b = 0; b < n / 32; b++) {
        const int sumi = dot32_nib(w[b].qs, w[b].qh, 0, x[b].qs);
        s += (f16_to_f32(w[b].d) * f16_to_f32(x[b].d)) * (float)sumi + f16_to_f32(w[b].m) * f16_to_f32(x[b].s);
    }
    return s;
}

static float dot1_iq4_nl(int n, const block_iq4_nl *w, const block_q8_0 *x)
{
    float s = 0.0f;
    for (int b = 0; b < n / 32; b++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += quant_iq4nl_values[w[b].qs[j] & 0xF] * x[b].qs[j] +
                    quant_iq4nl_values[w[b].qs[j] >> 4] * x[b].qs[j + 16];
        s += (f16_to_f32(w[b].d) * f16_to_f32(x[b].d)) * (float)sumi;
    }
    return s;
}

/* ---------------------------------------------------------- 256-element */

/* Sum over 256 elements of sc[e / g] * (q[e] . y[e]) for sub-blocks of g. */
static int dot256_scaled(const int8_t *q, const int *sc, int g, const int8_t *y)
{
    int isum = 0;
    for (int j = 0; j < QK_K / g; j++) {
        int dot = 0;
        for (int l = 0; l < g; l++) dot += q[g * j + l] * y[g * j + l];
        isum += sc[j] * dot;
    }
    return isum;
}

static float dot1_q2_K(int n, const block_q2_K *w, const block_q8_K *x)
{
    float s = 0.0f;
    int8_t q[QK_K];
    int sc[16];
    for (int b = 0; b < n / QK_K; b++) {
        int msum = 0;
        for (int e = 0; e < QK_K; e++) q[e] = (int8_t)((w[b].qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3);
        for (int j = 0; j < 16; j++) {
            sc[j] = w[b].scales[j] & 0xF;
            msum += (w[b].scales[j] >> 4) * x[b].bsums[j];
        }
        const int isum = dot256_scaled(q, sc, 16, x[b].qs);
        s += x[b].d * f16_to_f32(w[b].d) * (float)isum - x[b].d * f16_to_f32(w[b].dmin) * (float)msum;
    }
    return s;
}

static float dot1_q3_K(int n, const block_q3_K *w, const block_q8_K *x)
{
    float s = 0.0f;
    int8_t q[QK_K];
    int sc[16];
    for (int b = 0; b < n / QK_K; b++) {
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, k = (e / 32) % 4, l = e % 32;
            const int lo = (w[b].qs[32 * h + l] >> (2 * k)) & 3, hb = (w[b].hmask[l] >> (4 * h + k)) & 1;
            q[e] = (int8_t)(lo - (hb ? 0 : 4));
        }
        for (int j = 0; j < 16; j++) sc[j] = block_q3_K_scale(j, w[b].scales) - 32;
        s += f16_to_f32(w[b].d) * x[b].d * (float)dot256_scaled(q, sc, 16, x[b].qs);
    }
    return s;
}

static float dot1_q5_K(int n, const block_q5_K *w, const block_q8_K *x)
{
    float s = 0.0f;
    int8_t q[QK_K];
    int sc[8];
    for (int b = 0; b < n / QK_K; b++) {
        int msum = 0;
        for (int e = 0; e < QK_K; e++) {
            const int g = e / 64, u = (e / 32) % 2, l = e % 32;
            q[e] = (int8_t)(((w[b].qs[32 * g + l] >> (4 * u)) & 0xF) | (((w[b].qh[l] >> (2 * g + u)) & 1) << 4));
        }
        for (int j = 0; j < 8; j++) {
            uint8_t a, m;
            block_q4_K_scale_min(j, w[b].scales, &a, &m);
            sc[j] = a;
            msum += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
        }
        const int isum = dot256_scaled(q, sc, 32, x[b].qs);
        s += f16_to_f32(w[b].d) * x[b].d * (float)isum;
        s -= f16_to_f32(w[b].dmin) * x[b].d * (float)msum;
    }
    return s;
}

static float dot1_iq4_xs(int n, const block_iq4_xs *w, const block_q8_K *x)
{
    float s = 0.0f;
    int8_t q[QK_K];
    int sc[8];
    for (int b = 0; b < n / QK_K; b++) {
        for (int j = 0; j < 8; j++) {
            sc[j] = block_iq4_xs_scale(j, &w[b]) - 32;
            for (int l = 0; l < 16; l++) {
                q[32 * j + l] = quant_iq4nl_values[w[b].qs[16 * j + l] & 0xF];
                q[32 * j + l + 16] = quant_iq4nl_values[w[b].qs[16 * j + l] >> 4];
            }
        }
        s += f16_to_f32(w[b].d) * x[b].d * (float)dot256_scaled(q, sc, 32, x[b].qs);
    }
    return s;
}

/* Ternary: sum (t-1)*y over the block with one scale. */
static float tq_block(const int8_t *t, float d, const block_q8_K *x)
{
    int isum = 0;
    for (int e = 0; e < QK_K; e++) isum += t[e] * x->qs[e];
    return (float)isum * (d * x->d);
}

static float dot1_tq2_0(int n, const block_tq2_0 *w, const block_q8_K *x)
{
    float s = 0.0f;
    int8_t t[QK_K];
    for (int b = 0; b < n / QK_K; b++) {
        for (int e = 0; e < QK_K; e++) t[e] = (int8_t)(((w[b].qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3) - 1);
        s += tq_block(t, f16_to_f32(w[b].d), &x[b]);
    }
    return s;
}

static int tq1_digit(uint8_t byte, int i)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return ((uint16_t)(uint8_t)(byte * pow3[i]) * 3) >> 8;
}

static float dot1_tq1_0(int n, const block_tq1_0 *w, const block_q8_K *x)
{
    float s = 0.0f;
    int8_t t[QK_K];
    for (int b = 0; b < n / QK_K; b++) {
        int e = 0;
        for (int i = 0; i < 5; i++)
            for (int m = 0; m < 32; m++) t[e++] = (int8_t)(tq1_digit(w[b].qs[m], i) - 1);
        for (int i = 0; i < 5; i++)
            for (int m = 0; m < 16; m++) t[e++] = (int8_t)(tq1_digit(w[b].qs[32 + m], i) - 1);
        for (int i = 0; i < 4; i++)
            for (int m = 0; m < 4; m++) t[e++] = (int8_t)(tq1_digit(w[b].qh[m], i) - 1);
        s += tq_block(t, f16_to_f32(w[b].d), &x[b]);
    }
    return s;
}

/* The lattice i-quants through their integer view (quant_lattice_unpack):
 * scales per 16. */
static float dot1_lattice(uint32_t t, int n, const void *w, const block_q8_K *x)
{
    float s = 0.0f;
    quant_lattice_block u;
    for (int b = 0; b < n / QK_K; b++) {
        quant_lattice_unpack(t, w, b, &u);
        int isum = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += u.q[16 * j + l] * x[b].qs[16 * j + l];
            isum += u.sc[j] * dot;
        }
        s += u.d * x[b].d * (float)isum;
    }
    return s;
}

#define LATTICE_DOT1(name, T) \
    static float dot1_##name(int n, const void *w, const block_q8_K *x) { return dot1_lattice(T, n, w, x); }
LATTICE_DOT1(iq2_xxs, DT_IQ2_XXS)
LATTICE_DOT1(iq2_xs, DT_IQ2_XS)
LATTICE_DOT1(iq2_s, DT_IQ2_S)
LATTICE_DOT1(iq3_xxs, DT_IQ3_XXS)
LATTICE_DOT1(iq3_s, DT_IQ3_S)
LATTICE_DOT1(iq1_s, DT_IQ1_S)
LATTICE_DOT1(iq1_m, DT_IQ1_M)

/* ------------------------------------------------------------ GEMM tiles */

/* The single-row dot for every (row, column) pair of the tile, so an
 * element never depends on the tile. */
#define REFQ_TILE(name, wtype_c, xtype_c, dot1)                                                       \
    void name(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, \
              int nx)                                                                                 \
    {                                                                                                 \
        for (int r = 0; r < nx; r++)                                                                  \
            for (int c = 0; c < nw; c++)                                                              \
                y[r * ys + c] = dot1(n, (const wtype_c *)((const uint8_t *)w + c * ws),               \
                                     (const xtype_c *)((const uint8_t *)x + r * xs));                 \
    }

REFQ_TILE(kern_gemm_q4_1_ref, block_q4_1, block_q8_1, dot1_q4_1)
REFQ_TILE(kern_gemm_q5_0_ref, block_q5_0, block_q8_0, dot1_q5_0)
REFQ_TILE(kern_gemm_q5_1_ref, block_q5_1, block_q8_1, dot1_q5_1)
REFQ_TILE(kern_gemm_iq4_nl_ref, block_iq4_nl, block_q8_0, dot1_iq4_nl)
REFQ_TILE(kern_gemm_q2_K_ref, block_q2_K, block_q8_K, dot1_q2_K)
REFQ_TILE(kern_gemm_q3_K_ref, block_q3_K, block_q8_K, dot1_q3_K)
REFQ_TILE(kern_gemm_q5_K_ref, block_q5_K, block_q8_K, dot1_q5_K)
REFQ_TILE(kern_gemm_iq4_xs_ref, block_iq4_xs, block_q8_K, dot1_iq4_xs)
REFQ_TILE(kern_gemm_tq1_0_ref, block_tq1_0, block_q8_K, dot1_tq1_0)
REFQ_TILE(kern_gemm_tq2_0_ref, block_tq2_0, block_q8_K, dot1_tq2_0)
REFQ_TILE(kern_gemm_iq2_xxs_ref, uint8_t, block_q8_K, dot1_iq2_xxs)
REFQ_TILE(kern_gemm_iq2_xs_ref, uint8_t, block_q8_K, dot1_iq2_xs)
REFQ_TILE(kern_gemm_iq2_s_ref, uint8_t, block_q8_K, dot1_iq2_s)
REFQ_TILE(kern_gemm_iq3_xxs_ref, uint8_t, block_q8_K, dot1_iq3_xxs)
REFQ_TILE(kern_gemm_iq3_s_ref, uint8_t, block_q8_K, dot1_iq3_s)
REFQ_TILE(kern_gemm_iq1_s_ref, uint8_t, block_q8_K, dot1_iq1_s)
REFQ_TILE(kern_gemm_iq1_m_ref, uint8_t, block_q8_K, dot1_iq1_m)

/* quant.c's Q8_1: one implementation of ggml's rounding for the program. */
void kern_conv_q8_1_ref(void *dst, const float *src, int n) { quant_quantize_row(DT_Q8_1, src, dst, n); }
