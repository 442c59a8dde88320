/* attention.h - attention over a paged KV cache (reference version).
 *
 * The kernel never sees the pool itself: the caller passes, for one layer
 * of one sequence, the block table and the address arithmetic of the pool.
 * Token j of the sequence lives in physical block blocks[j / block_size] at
 * row j % block_size:
 *   K row of token j, head g = k_base + blocks[j/bs] * block_bytes
 *                              + (j % bs) * row_bytes + g * head_bytes
 * (the same for V from v_base). Rows are ggml rows of head_dim elements of kv_type (F32, F16,
 * BF16, Q8_0, Q4_0), so any quantized KV row is read by dequantizing on the
 * fly and the cache is never expanded.
 *
 * Numerics follow llama.cpp's non-flash path: with an f16 cache the query is
 * rounded to f16 before Q.K and the softmax weights are rounded to f16 before
 * they weight V, as ggml's mul_mat does when it converts the f32 operand to
 * the cache's dot type.
 */
#ifndef PL_KERNELS_ATTENTION_H
#define PL_KERNELS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint32_t *blocks;         /* the sequence's block table */
    const uint8_t *k_base, *v_base; /* K / V plane of this layer in block 0 */
    size_t block_bytes;             /* distance between consecutive blocks */
    uint32_t block_size;            /* tokens per block */
    size_t row_bytes;               /* bytes of one token's K (or V) row, all heads */
    size_t head_bytes;              /* bytes of one head's slice of a row */
    uint32_t kv_type;               /* ggml type of the rows */
    int head_dim;
} attn_kv;

/* out[r][:] = softmax(scale * q[r] . K[0..n_ctx)) . V, for the n_rep query
 * heads r that share KV head g. scratch holds >= n_ctx + 2*head_dim floats
 * plus head_dim*2 bytes (caller-owned, per thread). */
void attn_paged_head(float *out, const float *q, int n_rep, const attn_kv *kv, int g, int n_ctx,
                     float scale, float *scratch);

/* Floats of scratch attn_paged_head needs for n_ctx tokens. */
size_t attn_scratch_floats(int n_ctx, int head_dim);

#endif
