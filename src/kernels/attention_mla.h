/* attention_mla.h - multi-head latent attention over the paged latent
 * cache, read in place: reference, AVX2 and AVX-512.
 *
 * Every head of a token attends over the same cached rows (model/mla.h):
 * row j = [c_kv (rank values) | k_pe (the rest)], row_len elements of
 * one type (F32, F16, BF16, Q8_0, Q4_0, or the OFP8 rows of attention.h:
 * ATTN_KV_FP8_E5M2, ATTN_KV_FP8_E4M3 times the f32 scale of the row's
 * block at scale_off in its block). The whole row is the key of
 * every head, its first rank values are the value of every head. For the
 * absorbed queries q[h] (row_len floats each) of n_heads heads:
 *   s[h][j] = (q[h] . row_j) * scale                 j in 0..n_ctx-1
 *   p[h]    = softmax(s[h])       (kern_softmax: exact two-pass, sum in double)
 *   out[h]  = sum_j p[h][j] row_j[0..rank)           j ascending
 * With an F16 (BF16) cache q and p are rounded to F16 (BF16) before their
 * products, as ggml's mul_mat converts the f32 operand; F32, Q8_0 and Q4_0
 * rows are read as the floats they encode (d x q, not ggml's int8 dot);
 * an e4m3 element is its half-trick half times 256 x the block scale, one
 * product, which is kv_e4m3_to_f32(b) x scale exactly.
 *
 * KIVI rows (ATTN_MLA_KIVI4, ATTN_MLA_KIVI2; kv/kv_latent.h) are b-bit codes
 * quantized per channel over a block: row j's element i is
 *   x = fmaf(d_i, code_ji, m_i)        (d_i, m_i: f16, of row j's block)
 * with the codes packed LSB first along the row (b = 4: byte k holds
 * elements 2k (low nibble) and 2k + 1; b = 2: elements 4k .. 4k + 3) and
 * the block's parameters at scale_off, 32 channels at a time:
 *   | d[0..31] | m[0..31] | d[32..63] | m[32..63] | ...   (f16 each)
 * As a key the row gives q . x over dequantized elements; as a value the
 * weighted sum sum_j p_j x_ji = d_i sum_j p_j code_ji + m_i sum_j p_j is the
 * same per channel, so no head needs more than the row's own parameters.
 * Every variant forms x by that one fused product (bits the same).
 *
 * Staged caches (fp8_e4m3, KIVI; kv/kv_latent.h): a token's own block is not
 * sealed yet and its rows are f16 in `tail` (rows tail0, tail0 + 1, ...).
 * attn_mla_at(kv, n_ctx) gives the view of a token that attends over
 * n_ctx rows: rows [0, n_sealed) from the blocks, the rest from the tail
 * (read as F16 rows, the query not rounded). Without a tail every row is
 * in the blocks.
 *
 * Row j lives at base + blocks[j / block_size] x block_bytes
 * + (j % block_size) x row_bytes (the kv pool's K plane of one layer).
 * Rows are converted to floats in registers, never copied: the SIMD
 * variants take a few rows at a time and use each for all heads of the
 * call (scores: a heads x keys tile; values: each converted chunk of a
 * row feeds the accumulators of several heads).
 *
 * INVARIANT (row independence): the result of head h depends only on
 * q[h], n_ctx and the cache, never on the other heads of the call, their
 * number, nor the thread; each variant computes it by one fixed sequence
 * of float operations. Which variant runs depends only on the active
 * kernel table and the shape (rank and row_len multiples of 32 for SIMD),
 * so prefill, batching and thread counts give the same bits.
 */
#ifndef PL_KERNELS_ATTENTION_MLA_H
#define PL_KERNELS_ATTENTION_MLA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* KIVI latent rows (see the top); apart from attention.h's OFP8 codes. */
#define ATTN_MLA_KIVI4 0x10020u
#define ATTN_MLA_KIVI2 0x10021u

/* Code bits of a KIVI row type, 0 for the others. */
static inline uint32_t attn_mla_kivi_bits(uint32_t type)
{
    return type == ATTN_MLA_KIVI4 ? 4 : type == ATTN_MLA_KIVI2 ? 2 : 0;
}

/* Bytes of a KIVI block's channel parameters for rows of row_len elements
 * (row_len a multiple of 32): an f16 scale and an f16 zero a channel. */
static inline size_t attn_mla_kivi_param_bytes(int row_len) { return (size_t)row_len * 4; }

typedef struct attn_mla_kv {
    const uint32_t *blocks; /* the sequence's block table */
    const uint8_t *base;    /* the layer's rows in physical block 0 */
    size_t block_bytes;     /* from one physical block to the next */
    size_t row_bytes;       /* from one token slot to the next */
    uint32_t block_size;    /* tokens per block */
    uint32_t type;          /* DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, ATTN_KV_FP8_E4M3 or _E5M2,
                               ATTN_MLA_KIVI4 or _KIVI2 */
    int rank;               /* values: elements 0..rank-1 of a row */
    int row_len;            /* keys: all row_len elements */
    size_t scale_off;       /* ATTN_KV_FP8_E4M3: the block's f32 scale at this offset in the block;
                               KIVI: the block's channel parameters there */
    const uint16_t *tail;   /* staged: f16 rows from row tail0 on, row_len halves each; NULL: none */
    int tail0;
    int n_sealed;           /* with a tail: rows [0, n_sealed) are in the blocks (attn_mla_at) */
} attn_mla_kv;

/* The rows a token attending over n_ctx rows reads: with a tail, the
 * blocks before its own (sealed) and its own block from the tail. */
static inline attn_mla_kv attn_mla_at(const attn_mla_kv *kv, int n_ctx)
{
    attn_mla_kv v = *kv;
    if (v.tail) v.n_sealed = (int)((uint32_t)(n_ctx - 1) / v.block_size * v.block_size);
    return v;
}

/* Floats of scratch a call of up to n_heads heads over up to max_ctx rows
 * needs (queries, scores, one row). */
size_t attn_mla_scratch_floats(int n_heads, int max_ctx, int row_len);

/* out[h x out_stride .. + rank) = attention of head h (q at q + h x
 * q_stride) over rows 0..n_ctx-1 (see the top). scratch: floats as
 * attn_mla_scratch_floats says, owned by the calling thread. */
void attn_mla(const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads, int n_ctx, float scale,
              float *out, size_t out_stride, float *scratch);

/* The same call in phases, for callers that share one token's heads out
 * over threads by keys and by value elements instead of by heads (each
 * thread then reads its part of every row once for all heads). Each
 * phase gives exactly attn_mla's bits for its part:
 *   attn_mla_queries  qr[h x attn_mla_qr_stride(kv)] = q[h] rounded
 *   attn_mla_scores   sc[h x ld + j] for j0 <= j < j1 (unscaled)
 *   attn_mla_weights  sc[h x ld + 0..n_ctx) scaled, softmax, rounded
 *   attn_mla_values   out[h x out_stride + i] for i0 <= i < i1,
 *                     multiples of 32 (or 0 and rank)
 * spare: a row's worth of floats (attn_mla_qr_stride) of the caller's. */
size_t attn_mla_qr_stride(const attn_mla_kv *kv);
void attn_mla_queries(const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads, float *qr);
void attn_mla_scores(const attn_mla_kv *kv, const float *qr, int n_heads, int j0, int j1, float *sc, size_t ld,
                     float *spare);
void attn_mla_weights(const attn_mla_kv *kv, float *sc, size_t ld, int n_heads, int n_ctx, float scale);
void attn_mla_values(const attn_mla_kv *kv, const float *p, size_t ld, int n_heads, int n_ctx, int i0, int i1,
                     float *out, size_t out_stride, float *spare);

/* The variants, for tests: ATTN_MLA_AUTO is what attn_mla runs. A SIMD
 * variant may only be asked for when attn_mla_variant_available says so
 * (CPU and shape). */
typedef enum { ATTN_MLA_AUTO, ATTN_MLA_REF, ATTN_MLA_AVX2, ATTN_MLA_AVX512 } attn_mla_variant;
bool attn_mla_variant_available(attn_mla_variant v, const attn_mla_kv *kv);
void attn_mla_with(attn_mla_variant v, const attn_mla_kv *kv, const float *q, size_t q_stride, int n_heads,
                   int n_ctx, float scale, float *out, size_t out_stride, float *scratch);

#endif
