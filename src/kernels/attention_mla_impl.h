/* attention_mla_impl.h - what the variants of attention_mla.c share: the
 * address of a row and the two passes each variant provides.
 *
 * Scratch of one call of H heads, largest context N, row length L (floats;
 * Lp = L rounded up to 16, Np = N rounded up to 16):
 *   qr  [H][Lp]   the queries as the dot uses them (rounded for F16/BF16)
 *   sc  [H][Np]   scores, then the weights p
 *   row [Lp]      one row as floats (the reference), or the output of a
 *                 padded head (the SIMD tiles write their spare lanes there)
 */
#ifndef PL_KERNELS_ATTENTION_MLA_IMPL_H
#define PL_KERNELS_ATTENTION_MLA_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention.h"

#include "kernels/attention_mla.h"

static inline size_t attn_mla_round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Row j's bytes. A view without a block table (the tail's, made by
 * attention_mla.c) has flat rows from row tail0 at base. */
static inline const uint8_t *attn_mla_row(const attn_mla_kv *kv, int j)
{
    if (!kv->blocks) return kv->base + (size_t)(j - kv->tail0) * kv->row_bytes;
    return kv->base + (size_t)kv->blocks[(uint32_t)j / kv->block_size] * kv->block_bytes +
           (size_t)((uint32_t)j % kv->block_size) * kv->row_bytes;
}

/* 256 x the e4m3 scale of row j's block (what multiplies its half-trick
 * halves); 0 for the other types. */
static inline float attn_mla_row_scale(const attn_mla_kv *kv, int j)
{
    if (kv->type != ATTN_KV_FP8_E4M3) return 0;
    float s;
    memcpy(&s, kv->base + (size_t)kv->blocks[(uint32_t)j / kv->block_size] * kv->block_bytes + kv->scale_off, sizeof s);
    return s * 256.0f;
}

/* Row j's block's KIVI channel parameters (kernels/attention_mla.h: 32
 * scales then 32 zeros, 32 channels at a time); NULL for other types. */
static inline const uint16_t *attn_mla_row_kivi(const attn_mla_kv *kv, int j)
{
    if (!attn_mla_kivi_bits(kv->type)) return NULL;
    return (const uint16_t *)(kv->base + (size_t)kv->blocks[(uint32_t)j / kv->block_size] * kv->block_bytes +
                              kv->scale_off);
}

/* Channel i's scale and zero among a block's parameters kp. */
static inline const uint16_t *attn_mla_kivi_d(const uint16_t *kp, int i) { return kp + (size_t)(i / 32) * 64 + i % 32; }
static inline const uint16_t *attn_mla_kivi_m(const uint16_t *kp, int i) { return attn_mla_kivi_d(kp, i) + 32; }

/* Code i of a KIVI row of b bits. */
static inline uint32_t attn_mla_kivi_code(const uint8_t *r, uint32_t bits, int i)
{
    const uint32_t bit = (uint32_t)i * bits;
    return (r[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1);
}

/* sc[h x ld + j] = q[h] . row_j (unscaled), h < n_heads, j0 <= j < j1;
 * q[h] at q + h x q_stride. */
typedef void attn_mla_scores_fn(const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads, int j0, int j1,
                                float *sc, size_t ld);
/* out[h x out_stride + i] += sum_j p[h x ld + j] row_j[i], i0 <= i < i1
 * (multiples of 32 for the SIMD passes), j0 <= j < j1 ascending. spare:
 * rank floats the tiles may write for padded heads. */
typedef void attn_mla_values_fn(const attn_mla_kv *kv, const float *p, size_t ld, int n_heads, int j0, int j1, int i0,
                                int i1, float *out, size_t out_stride, float *spare);

attn_mla_scores_fn attn_mla_scores_avx2, attn_mla_scores_avx512;
attn_mla_values_fn attn_mla_values_avx2, attn_mla_values_avx512;
bool attn_mla_avx512_available(void);

#endif
