/* attention.c - paged attention, reference version; see attention.h. */
#include "kernels/attention.h"

#include <math.h>
#include <string.h>

#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

size_t attn_scratch_floats(int n_ctx, int head_dim) { return (size_t)n_ctx + 4 * (size_t)head_dim + 16; }

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

void attn_paged_head(float *out, const float *q, int n_rep, const attn_kv *kv, int g, int n_ctx,
                     float scale, float *scratch)
{
    const int hd = kv->head_dim;
    float *scores = scratch, *tmp = scratch + n_ctx, *acc = tmp + hd;
    uint16_t *qh = (uint16_t *)(acc + hd);
    for (int r = 0; r < n_rep; r++) {
        const float *qr = q + (size_t)r * hd;
        if (kv->kv_type == DT_F16)
            for (int i = 0; i < hd; i++) qh[i] = f32_to_f16(qr[i]);
        float mx = -INFINITY;
        for (int j = 0; j < n_ctx; j++) {
            scores[j] = dot_key(kv, kv_row(kv->k_base, kv, j, g), qr, qh, tmp) * scale;
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
        memcpy(out + (size_t)r * hd, acc, sizeof(float) * (size_t)hd);
    }
}
