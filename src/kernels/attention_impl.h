/* attention_impl.h - internals shared by attention.c, attention_avx2.c and
 * attention_avx512.c: the scratch layout and the tile constants (see
 * attention.h).
 *
 * Scratch of one call with R rows whose largest n_ctx is N, in floats
 * (hdp = head_dim rounded up to 8, ncp = N rounded up to 8):
 *
 *   qf  [R][hdp]        the queries as the dot uses them (f16-rounded for F16)
 *   sc  [R][ncp]        scores, then softmax weights, of each row
 *   kt  [8][hdp]        one score group's keys (AVX2: q8_0 / q4_0 as int8)
 *   vt  [ATTN_VB][hdp]  room for one V tile of f32 (the variants convert V
 *                       in registers; AVX2's column scores use kt and vt
 *                       together, below)
 *
 * The reference uses only the front: scores[ncp], tmp[hdp], acc[hdp], the
 * f16 query (hdp halves) and a key gathered from its columns (hdp halves,
 * k_cols), which always fits in the above. The AVX2 variant's column
 * scores use kt and vt as one tile of 4 x 8 x hd halves (short key groups'
 * copies). The AVX-512 variant converts K and V in registers; for f16 key
 * columns it keeps the queries interleaved (R x hd floats) in kt and vt.
 */
#ifndef PL_KERNELS_ATTENTION_IMPL_H
#define PL_KERNELS_ATTENTION_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention.h"
#include "tensor/blocks.h"
#include "tensor/half.h"

/* Score floats of one call at most (1 MiB): long contexts get fewer rows. */
#define ATTN_SCORE_BUDGET (1u << 18)
/* Keys per V tile: 32 rows x 128 dims x 4 B = 16 KiB, within L1 with the
 * accumulators' output rows. */
#define ATTN_VB 32

static inline size_t attn_round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Floats of the layout above for R rows, largest context n, head dim hd. */
static inline size_t attn_layout_floats(size_t R, size_t n, size_t hd)
{
    const size_t hdp = attn_round8(hd), ncp = attn_round8(n);
    return R * (hdp + ncp) + (8 + ATTN_VB) * hdp;
}

/* Logit soft-capping (attn_kv.softcap) of scores x[0..n), in ggml's
 * operations: x x (1/cap), tanhf, x cap. */
static inline void attn_softcap(float *x, int n, float cap)
{
    if (!(cap > 0)) return;
    const float inv = 1.0f / cap;
    for (int j = 0; j < n; j++) x[j] = tanhf(x[j] * inv) * cap;
}

static inline bool attn_is_fp8(uint32_t t) { return t == ATTN_KV_FP8_E4M3 || t == ATTN_KV_FP8_E5M2; }

/* An OFP8 byte as f32, before any scale (kv_codec.h's encoding). E4M3 by the
 * half trick: its 7 magnitude bits shifted left by 7 are a half with the same
 * fields and a bias 8 larger, so that half x 256 is the value (subnormals
 * too); the AVX2 variant folds the 256 into the block scale (exact, both
 * powers of two). S.1111.111 is NaN. E5M2 is the top byte of a half. */
static inline float attn_fp8_to_f32(uint32_t t, uint8_t b)
{
    if (t == ATTN_KV_FP8_E5M2) return f16_to_f32((uint16_t)(b << 8));
    if ((b & 0x7F) == 0x7F) return (b & 0x80) ? -NAN : NAN;
    return f16_to_f32((uint16_t)(((b & 0x7F) << 7) | ((b & 0x80) << 8))) * 256.0f;
}

static inline bool attn_is_kivi(uint32_t t) { return t == ATTN_KV_KIVI4 || t == ATTN_KV_KIVI2; }
static inline uint32_t attn_kivi_bits(uint32_t t) { return t == ATTN_KV_KIVI2 ? 2 : 4; }

/* attention_avx2.c (x86 with AVX2 only): query row q (hd a multiple of 32)
 * as q8_0 blocks, the bytes of quant_q8_0_quantize_row; sums (or NULL):
 * offset x each block's sum of quants. */
void attn_query_q8(const float *q, block_q8_0 *dst, int hd, int32_t offset, int32_t *sums);

/* Sealed KIVI blocks read in place (attention_kivi.c): the reference and
 * the AVX2 variant (the reference's bits but for the softmax; head dims not
 * a multiple of 32 take the reference). */
void attn_kivi_ref(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                   size_t scratch_floats);
void attn_kivi_avx2(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                    size_t scratch_floats);
/* attention_kivi_avx512.c: the same products and chains, 16 keys a vector
 * (head dims not a multiple of 32 run attn_kivi_avx2). */
void attn_kivi_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                      size_t scratch_floats);

/* attention_fp8_avx512.c: fp8 caches read in place, lanes over 16 keys
 * for the scores, 16 dims for the values. */
void attn_fp8_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                     size_t scratch_floats);
/* attention_avx512.c's softmax of a call's rows over their scores (row r
 * at sc + r ncp): weights rounded to f16 with f16, or with inv the
 * exponentials left and row r's 1 / sum in inv[r]; softcap, and the
 * log-sum-exps in kv_lse (or NULL). AVX-512 CPUs only. */
void attn_softmax_rows_avx512(const attn_row *rows, int n_rows, float *sc, size_t ncp, bool f16, float softcap,
                              float *kv_lse, float *inv);

/* The e4m3 scale of head g in physical block pb of a plane (1 for e5m2). */
static inline float attn_fp8_scale(const attn_kv *kv, const uint8_t *plane, uint32_t pb, int g)
{
    if (kv->kv_type != ATTN_KV_FP8_E4M3) return 1.0f;
    float s;
    memcpy(&s, plane + (size_t)pb * attn_plane_step(kv, plane) + kv->scale_off + 4 * (size_t)g, 4);
    return s;
}

#endif
