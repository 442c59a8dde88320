/* attention.c - paged attention: sizing, dispatch and the reference variant;
 * see attention.h. The AVX2 variant is in attention_avx2.c. */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/kern_impl.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

int attn_rows_max(int max_ctx)
{
    const size_t ncp = attn_round8(max_ctx > 0 ? (size_t)max_ctx : 1);
    const size_t r = ATTN_SCORE_BUDGET / ncp;
    return r < 1 ? 1 : r > ATTN_ROWS_CAP ? ATTN_ROWS_CAP : (int)r;
}

size_t attn_scratch_floats(int max_ctx, int head_dim)
{
    const size_t n = max_ctx > 0 ? (size_t)max_ctx : 1;
    return attn_layout_floats((size_t)attn_rows_max(max_ctx), n, (size_t)head_dim) + 16;
}

/* ------------------------------------------------------------- reference */

static inline const uint8_t *kv_row(const uint8_t *base, const attn_kv *kv, int j, int g)
{
    return base + (size_t)kv->blocks[j / kv->block_size] * kv->block_bytes +
           (size_t)(j % kv->block_size) * kv->row_bytes + (size_t)g * kv->head_bytes;
}

/* q . k for one key row; qh is q pre-rounded to f16 when the cache is f16. */
static float dot_key(const attn_kv *kv, const uint8_t *k, const float *q, const uint16_t *qh, float *tmp)
{
    const int n = kv->head_dim;
    float s = 0;
    if (kv->kv_type == DT_F16) {
        const uint16_t *kh = (const uint16_t *)k;
        for (int i = 0; i < n; i++) s += f16_to_f32(kh[i]) * f16_to_f32(qh[i]);
    } else if (kv->kv_type == DT_F32) {
        const float *kf = (const float *)k;
        for (int i = 0; i < n; i++) s += kf[i] * q[i];
    } else {
        quant_dequant_row(kv->kv_type, k, tmp, n);
        for (int i = 0; i < n; i++) s += tmp[i] * q[i];
    }
    return s;
}

static void add_value(const attn_kv *kv, const uint8_t *v, float p, float *acc, float *tmp)
{
    const int n = kv->head_dim;
    if (kv->kv_type == DT_F16) {
        const uint16_t *vh = (const uint16_t *)v;
        const float ph = f16_to_f32(f32_to_f16(p));
        for (int i = 0; i < n; i++) acc[i] += ph * f16_to_f32(vh[i]);
    } else if (kv->kv_type == DT_F32) {
        const float *vf = (const float *)v;
        for (int i = 0; i < n; i++) acc[i] += p * vf[i];
    } else {
        quant_dequant_row(kv->kv_type, v, tmp, n);
        for (int i = 0; i < n; i++) acc[i] += p * tmp[i];
    }
}

/* One row, scalar, in the plainest order: the definition the SIMD variants
 * are tested against. */
static void ref_row(const attn_kv *kv, const attn_row *row, float scale, float *scratch)
{
    const int hd = kv->head_dim, n_ctx = row->n_ctx, g = row->g;
    const size_t hdp = attn_round8((size_t)hd);
    float *scores = scratch, *tmp = scratch + attn_round8((size_t)n_ctx), *acc = tmp + hdp;
    uint16_t *qh = (uint16_t *)(acc + hdp);
    const float *q = row->q;
    if (kv->kv_type == DT_F16)
        for (int i = 0; i < hd; i++) qh[i] = f32_to_f16(q[i]);
    float mx = -INFINITY;
    for (int j = 0; j < n_ctx; j++) {
        scores[j] = dot_key(kv, kv_row(kv->k_base, kv, j, g), q, qh, tmp) * scale;
        if (scores[j] > mx) mx = scores[j];
    }
    double sum = 0;
    for (int j = 0; j < n_ctx; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    const float inv = (float)(1.0 / sum);
    memset(acc, 0, sizeof(float) * (size_t)hd);
    for (int j = 0; j < n_ctx; j++) add_value(kv, kv_row(kv->v_base, kv, j, g), scores[j] * inv, acc, tmp);
    memcpy(row->out, acc, sizeof(float) * (size_t)hd);
}

void attn_paged_ref(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                    size_t scratch_floats)
{
    for (int r = 0; r < n_rows; r++) {
        assert(rows[r].n_ctx >= 1);
        assert(attn_round8((size_t)rows[r].n_ctx) + 3 * attn_round8((size_t)kv->head_dim) <= scratch_floats);
        (void)scratch_floats;
        ref_row(kv, &rows[r], scale, scratch);
    }
}

/* -------------------------------------------------------------- dispatch */

/* The AVX2 variant runs when the CPU has it and the kernel table is not the
 * forced reference (kern_init(1)), so that one switch selects the reference
 * everywhere. Head dims that are not a multiple of 8 take the reference
 * (always, whatever the call's rows, so row independence holds). */
void attn_paged(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                size_t scratch_floats)
{
    static const char ref_name[] = "ref";
    const bool simd = kv->head_dim % 8 == 0 && strcmp(kern_active()->name, ref_name) != 0 && attn_avx2_available();
    if (simd) attn_paged_avx2(kv, rows, n_rows, scale, scratch, scratch_floats);
    else attn_paged_ref(kv, rows, n_rows, scale, scratch, scratch_floats);
}
