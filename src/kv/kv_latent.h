/* kv_latent.h - the latent KV kind (KV_KIND_LATENT, kv_pool.h): one row a
 * token and layer, the compressed c_kv of multi-head latent attention
 * followed by its shared RoPE key, and no V plane.
 *
 * Rows are ggml rows of the pool's dtype (f32, f16, bf16, q8_0 or q4_0;
 * the blocks of 32 need a row length that is a multiple of 32), token t of a block at row
 * t of the layer's K plane. The writer encodes a batch's rows; the view
 * hands the attention kernel (kernels/attention_mla.h) a sequence's rows
 * to read in place, keys the whole rows and values their first
 * kv_lora_rank elements; the reader decodes rows to floats (tests).
 */
#ifndef PL_KV_KV_LATENT_H
#define PL_KV_KV_LATENT_H

#include <stdint.h>

#include "kernels/attention_mla.h"
#include "kv/kv_dtype.h"
#include "kv/kv_pool.h"
#include "kv/kv_writer.h"

/* 0 if dtype can hold latent rows of head_dim elements, n_kv_heads 1;
 * else PL_EUNSUPPORTED / PL_EINVAL naming the dtype or field. */
int kv_latent_check(kv_dtype dtype, uint32_t n_kv_heads, uint32_t head_dim);

/* Bytes of one row (0 for a dtype that cannot hold one). */
uint64_t kv_latent_row_bytes(kv_dtype dtype, uint32_t head_dim);

/* The ggml type of the rows (DT_*). */
uint32_t kv_latent_row_type(kv_dtype dtype);

/* Writes layer's rows ([n_tokens][head_dim] floats, row t for batch token
 * t) into each token's block and slot. */
void kv_latent_store(kv_pool *pool, const kv_batch *b, uint32_t layer, const float *rows);

/* The sequence's rows of layer as the latent attention reads them in
 * place (rank: kv_lora_rank, the values' share of a row). */
attn_mla_kv kv_latent_view(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t rank);

/* out[n][head_dim] = rows 0..n-1 of the sequence with block table blocks,
 * in layer. */
void kv_latent_read(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t n, float *out);
/* The same for rows j0..j1-1 only, into out + j0 x head_dim (so that
 * threads can share a read out). */
void kv_latent_read_range(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t j0, uint32_t j1,
                          float *out);

#endif
