/* kern_ref.c - the reference kernels: plain C, ggml's numerics.
 *
 * These define what every SIMD variant must compute. They follow ggml's CPU
 * code operation for operation where the result depends on it:
 * - float dots (F32/F16/BF16): each product rounded to float, summed in
 *   double (ggml_float), as ggml_vec_dot_{f32,f16,bf16} without SIMD;
 * - quantized dots: exact integer sums per block (Q8_0/Q4_0) or per
 *   super-block (Q4_K/Q6_K), then scaled and summed in float;
 * - rmsnorm and softmax accumulate in double; rope builds its angles with
 *   ggml's float operations (see kernels.h).
 * SIMD variants may only reorder float additions.
 */
#include "kernels/kern_impl.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "tensor/blocks.h"
#include "tensor/half.h"
#include "tensor/quant.h"

/* ------------------------------------------------------------- float dots */

static float dot1_f32(int n, const float *w, const float *x)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)(w[i] * x[i]);
    return (float)s;
}

static float dot1_f16(int n, const uint16_t *w, const uint16_t *x)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)(f16_to_f32(w[i]) * f16_to_f32(x[i]));
    return (float)s;
}

static float dot1_bf16(int n, const uint16_t *w, const uint16_t *x)
{
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)(bf16_to_f32(w[i]) * bf16_to_f32(x[i]));
    return (float)s;
}

/* --------------------------------------------------------- Q8_0 and Q4_0 */

static float dot1_q8_0(int n, const block_q8_0 *w, const block_q8_0 *x)
{
    float s = 0.0f;
    for (int b = 0; b < n / QK8_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += w[b].qs[j] * x[b].qs[j];
        s += (float)sumi * (f16_to_f32(w[b].d) * f16_to_f32(x[b].d));
    }
    return s;
}

static float dot1_q4_0(int n, const block_q4_0 *w, const block_q8_0 *x)
{
    float s = 0.0f;
    for (int b = 0; b < n / QK4_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            sumi += ((w[b].qs[j] & 0x0F) - 8) * x[b].qs[j];
            sumi += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + QK4_0 / 2];
        }
        s += (float)sumi * f16_to_f32(w[b].d) * f16_to_f32(x[b].d);
    }
    return s;
}

/* ------------------------------------------------------------ K-quants */

/* x = d*sc*q - dmin*m per sub-block of 32:
 *   dot = d*y.d * sum_j sc_j*(q.y)_j  -  dmin*y.d * sum_j m_j*(sum of y)_j */
static float dot1_q4_K(int n, const block_q4_K *w, const block_q8_K *x)
{
    float s = 0.0f;
    for (int b = 0; b < n / QK_K; b++) {
        const uint8_t *q = w[b].qs;
        const int8_t *y = x[b].qs;
        int isum = 0, msum = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            block_q4_K_scale_min(j, w[b].scales, &sc, &m);
            const int shift = (j & 1) * 4; /* odd sub-blocks: high nibbles */
            const uint8_t *qg = q + (j / 2) * 32;
            int dot = 0;
            for (int l = 0; l < 32; l++) dot += ((qg[l] >> shift) & 0xF) * y[32 * j + l];
            isum += sc * dot;
            msum += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
        }
        s += f16_to_f32(w[b].d) * x[b].d * (float)isum;
        s -= f16_to_f32(w[b].dmin) * x[b].d * (float)msum;
    }
    return s;
}

/* Unpacks a Q6_K block's 256 values q - 32 (layout in blocks.h). */
static void q6_K_unpack(const block_q6_K *w, int8_t *q)
{
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const int lo = (w->ql[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
                const int hi = (w->qh[32 * h + l] >> (2 * k)) & 3;
                q[128 * h + 32 * k + l] = (int8_t)((lo | (hi << 4)) - 32);
            }
}

/* x = d*sc*(q-32) per sub-block of 16: dot = d*y.d * sum_j sc_j*((q-32).y)_j */
static float dot1_q6_K(int n, const block_q6_K *w, const block_q8_K *x)
{
    float s = 0.0f;
    int8_t q[QK_K];
    for (int b = 0; b < n / QK_K; b++) {
        q6_K_unpack(&w[b], q);
        int isum = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            int dot = 0;
            for (int l = 0; l < 16; l++) dot += q[16 * j + l] * x[b].qs[16 * j + l];
            isum += w[b].scales[j] * dot;
        }
        s += f16_to_f32(w[b].d) * x[b].d * (float)isum;
    }
    return s;
}

/* ------------------------------------------------------------ GEMM tiles */

/* One ref tile per weight type: the single-row dot for every (row, column)
 * pair of the tile, so an element never depends on the tile. */
#define REF_TILE(name, wtype_c, xtype_c, dot1)                                                        \
    static void name(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x,    \
                     size_t xs, int nx)                                                               \
    {                                                                                                 \
        for (int r = 0; r < nx; r++)                                                                  \
            for (int c = 0; c < nw; c++)                                                              \
                y[r * ys + c] = dot1(n, (const wtype_c *)((const uint8_t *)w + c * ws),               \
                                     (const xtype_c *)((const uint8_t *)x + r * xs));                 \
    }

REF_TILE(gemm_f32_ref, float, float, dot1_f32)
REF_TILE(gemm_f16_ref, uint16_t, uint16_t, dot1_f16)
REF_TILE(gemm_bf16_ref, uint16_t, uint16_t, dot1_bf16)
REF_TILE(gemm_q8_0_ref, block_q8_0, block_q8_0, dot1_q8_0)
REF_TILE(gemm_q4_0_ref, block_q4_0, block_q8_0, dot1_q4_0)
REF_TILE(gemm_q4_K_ref, block_q4_K, block_q8_K, dot1_q4_K)
REF_TILE(gemm_q6_K_ref, block_q6_K, block_q8_K, dot1_q6_K)

/* ------------------------------------------------------------ conversions */

static void f32_to_f16_ref(uint16_t *dst, const float *src, int n)
{
    for (int i = 0; i < n; i++) dst[i] = f32_to_f16(src[i]);
}

static void f16_to_f32_ref(float *dst, const uint16_t *src, int n)
{
    for (int i = 0; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

static void conv_f16_ref(void *dst, const float *src, int n) { f32_to_f16_ref(dst, src, n); }

static void conv_bf16_ref(void *dst, const float *src, int n)
{
    uint16_t *d = dst;
    for (int i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
}

/* The activation quantizers are quant.c's: one implementation of ggml's
 * rounding for the whole program. */
static void conv_q8_0_ref(void *dst, const float *src, int n) { quant_quantize_row(DT_Q8_0, src, dst, n); }
static void conv_q8_K_ref(void *dst, const float *src, int n) { quant_quantize_row(DT_Q8_K, src, dst, n); }

/* ------------------------------------------------------- row kernels */

static void rmsnorm_ref(float *y, const float *x, const float *w, int n, float eps)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale;
    if (w)
        for (int i = 0; i < n; i++) y[i] = y[i] * w[i];
}

static void rope_ref(float *x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base,
                     float freq_scale, bool neox, const float *freq_factors)
{
    assert(rope_dim % 2 == 0 && rope_dim <= head_dim);
    const float theta_scale = powf(freq_base, -2.0f / (float)rope_dim);
    float theta = (float)pos;
    for (int i0 = 0; i0 < rope_dim; i0 += 2) {
        const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
        const float angle = freq_scale * (theta / ff);
        const float c = cosf(angle), sn = sinf(angle);
        const int a = neox ? i0 / 2 : i0;
        const int b = neox ? i0 / 2 + rope_dim / 2 : i0 + 1;
        for (int h = 0; h < n_heads; h++) {
            float *p = x + (size_t)h * head_dim;
            const float x0 = p[a], x1 = p[b];
            p[a] = x0 * c - x1 * sn;
            p[b] = x0 * sn + x1 * c;
        }
        theta *= theta_scale;
    }
}

/* The same angle and cos/sin expressions as rope_ref, so the same bits. */
void kern_rope_table(float *cs, int rope_dim, int pos, float freq_base, float freq_scale,
                     const float *freq_factors)
{
    assert(rope_dim % 2 == 0);
    const int half = rope_dim / 2;
    const float theta_scale = powf(freq_base, -2.0f / (float)rope_dim);
    float theta = (float)pos;
    for (int i = 0; i < half; i++) {
        const float ff = freq_factors ? freq_factors[i] : 1.0f;
        const float angle = freq_scale * (theta / ff);
        cs[i] = cosf(angle);
        cs[half + i] = sinf(angle);
        theta *= theta_scale;
    }
}

static void rope_apply_ref(float *x, int n_heads, int head_dim, int rope_dim, bool neox, const float *cs)
{
    assert(rope_dim % 2 == 0 && rope_dim <= head_dim);
    const int half = rope_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            const float c = cs[i], sn = cs[half + i];
            const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            const float x0 = p[a], x1 = p[b];
            p[a] = x0 * c - x1 * sn;
            p[b] = x0 * sn + x1 * c;
        }
    }
}

/* The add, then rmsnorm_ref's operations on the sums. */
static void add_rmsnorm_ref(float *x, const float *d, float *y, const float *w, int n, float eps)
{
    for (int i = 0; i < n; i++) x[i] += d[i];
    rmsnorm_ref(y, x, w, n, eps);
}

static float softmax_ref(float *x, int n)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
    return kern_softmax_lse(max, sum);
}

static void swiglu_ref(float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++) a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
}

static void exp_row_ref(float *y, const float *x, int n)
{
    for (int i = 0; i < n; i++) y[i] = expf(x[i]);
}

const kern_vtable kern_vt_ref = {
    .name = "ref",
    .gemm = {
        [DT_F32] = {gemm_f32_ref, KERN_NW_MAX, 4},
        [DT_F16] = {gemm_f16_ref, KERN_NW_MAX, 4},
        [DT_BF16] = {gemm_bf16_ref, KERN_NW_MAX, 4},
        [DT_Q8_0] = {gemm_q8_0_ref, KERN_NW_MAX, 4},
        [DT_Q4_0] = {gemm_q4_0_ref, KERN_NW_MAX, 4},
        [DT_Q4_K] = {gemm_q4_K_ref, KERN_NW_MAX, 4},
        [DT_Q6_K] = {gemm_q6_K_ref, KERN_NW_MAX, 4},
        [DT_Q4_1] = {kern_gemm_q4_1_ref, KERN_NW_MAX, 4},
        [DT_Q5_0] = {kern_gemm_q5_0_ref, KERN_NW_MAX, 4},
        [DT_Q5_1] = {kern_gemm_q5_1_ref, KERN_NW_MAX, 4},
        [DT_IQ4_NL] = {kern_gemm_iq4_nl_ref, KERN_NW_MAX, 4},
        [DT_Q2_K] = {kern_gemm_q2_K_ref, KERN_NW_MAX, 4},
        [DT_Q3_K] = {kern_gemm_q3_K_ref, KERN_NW_MAX, 4},
        [DT_Q5_K] = {kern_gemm_q5_K_ref, KERN_NW_MAX, 4},
        [DT_IQ4_XS] = {kern_gemm_iq4_xs_ref, KERN_NW_MAX, 4},
        [DT_TQ1_0] = {kern_gemm_tq1_0_ref, KERN_NW_MAX, 4},
        [DT_TQ2_0] = {kern_gemm_tq2_0_ref, KERN_NW_MAX, 4},
        [DT_IQ2_XXS] = {kern_gemm_iq2_xxs_ref, KERN_NW_MAX, 4},
        [DT_IQ2_XS] = {kern_gemm_iq2_xs_ref, KERN_NW_MAX, 4},
        [DT_IQ2_S] = {kern_gemm_iq2_s_ref, KERN_NW_MAX, 4},
        [DT_IQ3_XXS] = {kern_gemm_iq3_xxs_ref, KERN_NW_MAX, 4},
        [DT_IQ3_S] = {kern_gemm_iq3_s_ref, KERN_NW_MAX, 4},
        [DT_IQ1_S] = {kern_gemm_iq1_s_ref, KERN_NW_MAX, 4},
        [DT_IQ1_M] = {kern_gemm_iq1_m_ref, KERN_NW_MAX, 4},
    },
    .conv = {
        [DT_F16] = conv_f16_ref,
        [DT_BF16] = conv_bf16_ref,
        [DT_Q8_0] = conv_q8_0_ref,
        [DT_Q8_K] = conv_q8_K_ref,
        [DT_Q8_1] = kern_conv_q8_1_ref,
    },
    .rmsnorm = rmsnorm_ref,
    .rope = rope_ref,
    .rope_apply = rope_apply_ref,
    .add_rmsnorm = add_rmsnorm_ref,
    .softmax = softmax_ref,
    .swiglu = swiglu_ref,
    .exp_row = exp_row_ref,
    .f32_to_f16 = f32_to_f16_ref,
    .f16_to_f32 = f16_to_f32_ref,
};
