/* attention_mla.c - latent attention: the call (queries rounded, scores,
 * softmax, values), the reference passes and the choice of variant; see
 * attention_mla.h. The SIMD passes are in attention_mla_avx2.c and
 * attention_mla_avx512.c. */
#include "kernels/attention_mla.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attention_mla_impl.h"
#include "kernels/kern_impl.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

size_t attn_mla_scratch_floats(int n_heads, int max_ctx, int row_len)
{
    const size_t lp = attn_mla_round16((size_t)row_len), np = attn_mla_round16(max_ctx > 0 ? (size_t)max_ctx : 1);
    return (size_t)n_heads * (lp + np) + lp;
}

/* ------------------------------------------------------------- reference */

/* Row j as floats: ggml rows by their dequantizer; e5m2 as the half it is
 * the top byte of; e4m3 as its half-trick half times attn_mla_row_scale
 * (the SIMD variants' product, kv_e4m3_to_f32(b) x scale exactly); KIVI
 * codes by the fused product of attention_mla.h, as the SIMD lanes form it. */
static void row_floats(const attn_mla_kv *kv, int j, float *row)
{
    const uint8_t *r = attn_mla_row(kv, j);
    const uint32_t bits = attn_mla_kivi_bits(kv->type);
    if (bits) {
        const uint16_t *kp = attn_mla_row_kivi(kv, j);
        for (int i = 0; i < kv->row_len; i++)
            row[i] = fmaf(f16_to_f32(*attn_mla_kivi_d(kp, i)), (float)attn_mla_kivi_code(r, bits, i),
                          f16_to_f32(*attn_mla_kivi_m(kp, i)));
    } else if (kv->type == ATTN_KV_FP8_E5M2) {
        for (int i = 0; i < kv->row_len; i++) row[i] = f16_to_f32((uint16_t)(r[i] << 8));
    } else if (kv->type == ATTN_KV_FP8_E4M3) {
        const float d = attn_mla_row_scale(kv, j);
        for (int i = 0; i < kv->row_len; i++) {
            const uint16_t h = (uint16_t)(((r[i] & 0x7F) << 7) | ((r[i] & 0x80) << 8));
            row[i] = ((r[i] & 0x7F) == 0x7F ? NAN : f16_to_f32(h)) * d;
        }
    } else {
        quant_dequant_row(kv->type, r, row, (size_t)kv->row_len);
    }
}

static void scores_ref(const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads, int j0, int j1, float *sc,
                       size_t ld, float *row)
{
    for (int j = j0; j < j1; j++) {
        row_floats(kv, j, row);
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + (size_t)h * q_stride;
            float s = 0;
            for (int i = 0; i < kv->row_len; i++) s += qh[i] * row[i];
            sc[(size_t)h * ld + j] = s;
        }
    }
}

static void values_ref(const attn_mla_kv *kv, const float *p, size_t ld, int n_heads, int j0, int j1, int i0, int i1,
                       float *out, size_t out_stride, float *row)
{
    for (int j = j0; j < j1; j++) {
        row_floats(kv, j, row);
        for (int h = 0; h < n_heads; h++) {
            const float w = p[(size_t)h * ld + j];
            float *o = out + (size_t)h * out_stride;
            for (int i = i0; i < i1; i++) o[i] += w * row[i];
        }
    }
}

/* -------------------------------------------------------------- the call */

/* The rounding ggml's mul_mat gives the f32 operand against rows of type t
 * (F16, BF16: to that type and back; others: none). */
static void round_to(uint32_t t, float *x, int n)
{
    if (t != DT_F16 && t != DT_BF16) return;
    uint16_t h[64];
    for (int i = 0; i < n; i += 64) {
        const int m = n - i < 64 ? n - i : 64;
        if (t == DT_F16) {
            kern_f32_to_f16_row(h, x + i, m);
            kern_f16_to_f32_row(x + i, h, m);
        } else {
            quant_quantize_row(t, x + i, h, (size_t)m);
            quant_dequant_row(t, h, x + i, (size_t)m);
        }
    }
}

static bool simd_shape(const attn_mla_kv *kv)
{
    const uint32_t t = kv->type;
    return kv->rank % 32 == 0 && kv->row_len % 32 == 0 &&
           (t == DT_F32 || t == DT_F16 || t == DT_BF16 || t == DT_Q8_0 || t == DT_Q4_0 || t == ATTN_KV_FP8_E4M3 ||
            t == ATTN_KV_FP8_E5M2 || attn_mla_kivi_bits(t));
}

bool attn_mla_variant_available(attn_mla_variant v, const attn_mla_kv *kv)
{
    switch (v) {
    case ATTN_MLA_AUTO:
    case ATTN_MLA_REF: return true;
    case ATTN_MLA_AVX2: return simd_shape(kv) && attn_avx2_available();
    case ATTN_MLA_AVX512: return simd_shape(kv) && attn_mla_avx512_available();
    }
    return false;
}

/* The variant attn_mla runs: the reference when the kernel table is the
 * forced reference (one switch for all kernels), AVX-512 when the table is
 * an AVX-512 one (PAGELLM_KERNELS=avx2 caps it), else AVX2 where the CPU
 * has it; the shape decides too, never the call's heads or context. */
static attn_mla_variant choose(const attn_mla_kv *kv)
{
    const char *name = kern_active()->name;
    if (strcmp(name, "ref") == 0) return ATTN_MLA_REF;
    if (strncmp(name, "avx512", 6) == 0 && attn_mla_variant_available(ATTN_MLA_AVX512, kv)) return ATTN_MLA_AVX512;
    if (attn_mla_variant_available(ATTN_MLA_AVX2, kv)) return ATTN_MLA_AVX2;
    return ATTN_MLA_REF;
}

/* The phases, each for the variant v (never AUTO here). */
static void queries_v(const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads, float *qr)
{
    const size_t lp = attn_mla_qr_stride(kv);
    for (int h = 0; h < n_heads; h++) {
        memcpy(qr + (size_t)h * lp, q + (size_t)h * q_stride, (size_t)kv->row_len * sizeof(float));
        round_to(kv->type, qr + (size_t)h * lp, kv->row_len);
    }
}

/* The tail of a staged view as a view of its own: flat f16 rows. */
static attn_mla_kv tail_view(const attn_mla_kv *kv)
{
    return (attn_mla_kv){.base = (const uint8_t *)kv->tail, .row_bytes = (size_t)kv->row_len * sizeof(uint16_t),
                         .block_size = kv->block_size, .type = DT_F16, .rank = kv->rank, .row_len = kv->row_len,
                         .tail0 = kv->tail0};
}

/* Rows [j0, j1) of kv split where the sealed rows end: [j0, *m) from the
 * blocks, [*m, j1) from the tail (*tv). */
static int split_at(const attn_mla_kv *kv, int j0, int j1, attn_mla_kv *tv)
{
    if (!kv->tail) return j1;
    *tv = tail_view(kv);
    return kv->n_sealed < j0 ? j0 : kv->n_sealed > j1 ? j1 : kv->n_sealed;
}

static void scores_part(attn_mla_variant v, const attn_mla_kv *kv, const float *qr, int n_heads, int j0, int j1,
                        float *sc, size_t ld, float *row)
{
    if (j0 >= j1) return;
    const size_t lp = attn_mla_qr_stride(kv);
    if (v == ATTN_MLA_AVX512) attn_mla_scores_avx512(kv, qr, lp, n_heads, j0, j1, sc, ld);
    else if (v == ATTN_MLA_AVX2) attn_mla_scores_avx2(kv, qr, lp, n_heads, j0, j1, sc, ld);
    else scores_ref(kv, qr, lp, n_heads, j0, j1, sc, ld, row);
}

static void scores_v(attn_mla_variant v, const attn_mla_kv *kv, const float *qr, int n_heads, int j0, int j1, float *sc,
                     size_t ld, float *row)
{
    attn_mla_kv tv;
    const int m = split_at(kv, j0, j1, &tv);
    scores_part(v, kv, qr, n_heads, j0, m, sc, ld, row);
    if (m < j1) scores_part(v, &tv, qr, n_heads, m, j1, sc, ld, row);
}

static void values_part(attn_mla_variant v, const attn_mla_kv *kv, const float *p, size_t ld, int n_heads, int j0,
                        int j1, int i0, int i1, float *out, size_t out_stride, float *spare)
{
    if (j0 >= j1) return;
    if (v == ATTN_MLA_AVX512) attn_mla_values_avx512(kv, p, ld, n_heads, j0, j1, i0, i1, out, out_stride, spare);
    else if (v == ATTN_MLA_AVX2) attn_mla_values_avx2(kv, p, ld, n_heads, j0, j1, i0, i1, out, out_stride, spare);
    else values_ref(kv, p, ld, n_heads, j0, j1, i0, i1, out, out_stride, spare);
}

/* The sealed rows, then the tail's: one accumulation per element, rows
 * ascending, as without a tail. */
static void values_v(attn_mla_variant v, const attn_mla_kv *kv, const float *p, size_t ld, int n_heads, int n_ctx,
                     int i0, int i1, float *out, size_t out_stride, float *spare)
{
    for (int h = 0; h < n_heads; h++) memset(out + (size_t)h * out_stride + i0, 0, (size_t)(i1 - i0) * sizeof(float));
    attn_mla_kv tv;
    const int m = split_at(kv, 0, n_ctx, &tv);
    values_part(v, kv, p, ld, n_heads, 0, m, i0, i1, out, out_stride, spare);
    if (m < n_ctx) values_part(v, &tv, p, ld, n_heads, m, n_ctx, i0, i1, out, out_stride, spare);
}

size_t attn_mla_qr_stride(const attn_mla_kv *kv) { return attn_mla_round16((size_t)kv->row_len); }

void attn_mla_queries(const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads, float *qr)
{
    queries_v(kv, q, q_stride, n_heads, qr);
}

void attn_mla_scores(const attn_mla_kv *kv, const float *qr, int n_heads, int j0, int j1, float *sc, size_t ld,
                     float *spare)
{
    scores_v(choose(kv), kv, qr, n_heads, j0, j1, sc, ld, spare);
}

void attn_mla_weights(const attn_mla_kv *kv, float *sc, size_t ld, int n_heads, int n_ctx, float scale)
{
    for (int h = 0; h < n_heads; h++) {
        float *x = sc + (size_t)h * ld;
        for (int j = 0; j < n_ctx; j++) x[j] *= scale;
        kern_softmax(x, n_ctx);
        round_to(kv->type, x, n_ctx);
    }
}

void attn_mla_values(const attn_mla_kv *kv, const float *p, size_t ld, int n_heads, int n_ctx, int i0, int i1,
                     float *out, size_t out_stride, float *spare)
{
    values_v(choose(kv), kv, p, ld, n_heads, n_ctx, i0, i1, out, out_stride, spare);
}

void attn_mla_with(attn_mla_variant v, const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads,
                   int n_ctx, float scale, float *out, size_t out_stride, float *scratch)
{
    assert(n_heads >= 1 && n_ctx >= 1 && kv->rank <= kv->row_len);
    if (v == ATTN_MLA_AUTO) v = choose(kv);
    assert(attn_mla_variant_available(v, kv));
    const size_t lp = attn_mla_qr_stride(kv), np = attn_mla_round16((size_t)n_ctx);
    float *qr = scratch, *sc = qr + (size_t)n_heads * lp, *row = sc + (size_t)n_heads * np;
    queries_v(kv, q, q_stride, n_heads, qr);
    scores_v(v, kv, qr, n_heads, 0, n_ctx, sc, np, row);
    attn_mla_weights(kv, sc, np, n_heads, n_ctx, scale);
    values_v(v, kv, sc, np, n_heads, n_ctx, 0, kv->rank, out, out_stride, row);
}

void attn_mla(const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads, int n_ctx, float scale,
              float *out, size_t out_stride, float *scratch)
{
    attn_mla_with(ATTN_MLA_AUTO, kv, q, q_stride, n_heads, n_ctx, scale, out, out_stride, scratch);
}
