/* mla.h - multi-head latent attention (deepseek2), as llama.cpp's
 * deepseek2 graph computes it in its absorbed ("MLA") form.
 *
 * For a token whose normalised residual row is xn (H heads; R =
 * kv_lora_rank, D = rope dims, N = qk_nope, V = v_head; config.h's
 * mla_config):
 *   q      = xn Wq, or rmsnorm(xn Wq_a) * q_a_norm  Wq_b    [H][N + D]
 *   kv     = xn Wkv_a                                       [R + D]
 *   c_kv   = rmsnorm(kv[0..R)) * kv_a_norm;  k_pe = rope(kv[R..R+D))
 *   q_pe   = rope(q[h][N..N+D));  q_abs[h] = Wk_b[h] q[h][0..N)  (N -> R)
 *   cache row (KV_KIND_LATENT) = [c_kv | k_pe], one row for all heads
 *   per head h, over the rows j of the token's context:
 *     s_j  = ([q_abs[h] | q_pe[h]] . row_j) * kq_scale,  p = softmax(s)
 *     o[h] = Wv_b[h] (sum_j p_j row_j[0..R))                (R -> V)
 *   out    = o Wo                                            [H*V -> dim]
 * RoPE is the normal (adjacent pairs) order with YaRN as configured. With
 * an f16 (bf16) cache the query and the weights p_j are rounded to f16
 * (bf16) before their products, as ggml's mul_mat converts them; f32 uses
 * them as they are; q8_0 rows are read as the floats they encode (not
 * ggml's int8 dot: close, not bit for bit).
 *
 * Tensors (GGUF dims):
 *   blk.N.attn_q_a [dim, q_lora], attn_q_a_norm [q_lora], attn_q_b
 *     [q_lora, H*(N+D)]  or  attn_q [dim, H*(N+D)]
 *   blk.N.attn_kv_a_mqa [dim, R + D], attn_kv_a_norm [R]
 *   blk.N.attn_k_b [N, R, H], attn_v_b [R, V, H]  (per-head 2-D views)
 *     or, in legacy files (no key_length_mla), attn_kv_b [R, H*(N+V)]:
 *     per head N rows of W_UK then V rows of W_UV; split at load (W_UV
 *     in place, W_UK transposed into f32 the layer owns)
 *   blk.N.attn_output [H*V, dim]  (bound as the layer's wo)
 */
#ifndef PL_MODEL_MLA_H
#define PL_MODEL_MLA_H

#include <stdint.h>

#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kv/kv_pool.h"
#include "kv/kv_writer.h"
#include "model/config.h"
#include "model/weights.h"

typedef struct mla_layer {
    weight wq;             /* plain q [dim -> H*(N+D)], or absent */
    weight wq_a, q_a_norm; /* q LoRA [dim -> q_lora], [q_lora] */
    weight wq_b;           /* [q_lora -> H*(N+D)] */
    weight wkv_a;          /* [dim -> R + D] */
    weight kv_a_norm;      /* [R] */
    weight *wk_b, *wv_b;   /* [H] views: [N -> R], [R -> V] */
    float *owned;          /* legacy attn_kv_b: the transposed W_UK matrices wk_b point into, or NULL */
} mla_layer;

/* Binds layer l's attention tensors; errors name the tensor and shape. */
int mla_layer_bind(const gguf_file *f, const model_config *c, uint32_t l, mla_layer **out);
void mla_layer_free(mla_layer *m);

/* The layer's matrices into out (NULL: only their count). */
int mla_layer_matrices(mla_layer *m, uint32_t n_heads, weight **out);

typedef struct mla_state mla_state;

/* Scratch for passes of up to max_tokens tokens over up to max_ctx
 * positions (NULL *out for a model without MLA); tail_rows: for a staged
 * latent dtype max_tokens + block_size (kv_latent.h's tail), else 0. */
int mla_state_new(mla_state **out, const model_config *c, int max_tokens, int max_ctx, int tail_rows, int n_threads);
void mla_state_free(mla_state *s);

/* Layer's attention of xn[T][dim] into out[T][H*V] (before Wo): writes
 * the batch's latent rows into the cache, then attends each token to its
 * sequence's slots 0..slot. rope_cs: [T][rope_dim] each token's table. */
void mla_attention(mla_state *s, const model_config *c, const mla_layer *w, const float *xn, float *out,
                   kv_pool *kv, const kv_batch *b, uint32_t layer, const float *rope_cs, threadpool *tp);

#endif
