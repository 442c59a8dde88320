/* kv_latent.h - the latent KV kind (KV_KIND_LATENT, kv_pool.h): one row a
 * token and layer, the compressed c_kv of multi-head latent attention
 * followed by its shared RoPE key, and no V plane.
 *
 * Rows are ggml rows of the pool's dtype (f32, f16, bf16, q8_0 or q4_0;
 * the blocks of 32 need a row length that is a multiple of 32) or OFP8
 * bytes (fp8_e5m2; fp8_e4m3 with one f32 scale a block and layer after
 * the block's rows, kv_codec.h's "E4M3 scales" with one head) or KIVI
 * codes (kivi4, kivi2: b-bit codes of each element, quantized per channel
 * over the block's tokens, the block's f16 scale and zero of every channel
 * after its rows; kernels/attention_mla.h draws the layout), token t of
 * a block at row t of the layer's K plane.
 *
 * KIVI per channel, the RoPE dims too: the latent row is every head's key
 * and (its first kv_lora_rank values) every head's value, so its channels
 * are keys' channels (KIVI quantizes keys per channel: outlier channels
 * keep their own range) and the value sum stays exact per channel (d x the
 * weighted code sum + m x the weight sum). The RoPE dims take the same
 * per-channel range as KIVI gives rotated keys; docs/kv-dtypes.md has the
 * measured cost.
 *
 * fp8_e4m3 and KIVI are staged as for K/V (kv_codec.h, kv_writer.h): the block
 * being filled lives in f16 in the sequence's stage (one plane a layer,
 * kv_stage.planes 1) and is sealed when full. For a batch,
 * per sequence and layer: kv_latent_stage_batch gathers the f16 rows of
 * the sequence's own blocks (stage rows before the batch, then the batch
 * rows rounded to f16) into a tail and seals every block the batch fills;
 * attention reads the sealed blocks in place and each token's own block
 * from the tail (kv_latent_view_staged, attn_mla_at); then
 * kv_latent_stage_commit leaves the rows of the last block in the stage.
 * So a token sees what token-by-token decoding sees, however the batch is
 * chunked. The writer encodes a batch's rows; the view
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

/* Bytes of one layer's plane of a block: the rows, and fp8_e4m3's scale. */
uint64_t kv_latent_plane_bytes(kv_dtype dtype, uint32_t head_dim, uint32_t block_size);

/* The type of the rows as the kernel reads them (DT_*, ATTN_KV_FP8_*). */
uint32_t kv_latent_row_type(kv_dtype dtype);

/* Writes layer's rows ([n_tokens][head_dim] floats, row t for batch token
 * t) into each token's block and slot; nothing for a staged dtype. */
void kv_latent_store(kv_pool *pool, const kv_batch *b, uint32_t layer, const float *rows);

/* Writes one row (head_dim floats) at slot of block b in layer; an unstaged
 * dtype only. */
void kv_latent_write_row(kv_pool *pool, uint32_t b, uint32_t layer, uint32_t slot, const float *row);

/* Staged dtype: seals block b's plane of layer from block_size f16 rows
 * ([T][head_dim], rounded by kv_codec_f16_row): e4m3 rows and their block
 * scale, or KIVI codes and channel parameters. */
void kv_latent_seal(kv_pool *pool, uint32_t b, uint32_t layer, const uint16_t *rows);

/* KIVI sealing of one latent plane: rows [0, n) of the f16 rows ([n][L],
 * rounded by kv_codec_f16_row) quantized per channel over those n rows to
 * b-bit codes, rows `stride` bytes apart, then the channel parameters after
 * T rows (attention_mla.h). n < T only for tests: a pool block seals full. */
void kv_latent_kivi_seal(uint8_t *plane, uint64_t stride, const uint16_t *rows, uint32_t n, uint32_t T, uint32_t L,
                         uint32_t bits);

/* Staged dtype (fp8_e4m3, KIVI), sequence seq of b, whose n batch tokens are
 * toks[0..n) (at consecutive slots from `from`, row toks[k] of rows):
 * fills tail ((block_size + n) x head_dim halves) with the f16 rows of
 * positions [tail0, from + n), tail0 = from / block_size x block_size,
 * and seals each block they fill. Returns tail0. The stage is only read. */
uint32_t kv_latent_stage_batch(kv_pool *pool, const kv_batch *b, int seq, uint32_t layer, const float *rows,
                               const int *toks, int n, uint16_t *tail);

/* After the layer's attention: the rows of the sequence's last block
 * (positions up to end - 1) from the tail into its stage. */
void kv_latent_stage_commit(const kv_pool *pool, const kv_batch *b, int seq, uint32_t layer, const uint16_t *tail,
                            uint32_t tail0, uint32_t end);

/* The sequence's rows of layer as the latent attention reads them in
 * place (rank: kv_lora_rank, the values' share of a row). */
attn_mla_kv kv_latent_view(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t rank);

/* The same with a staged dtype's tail (kv_latent_stage_batch); each
 * token takes attn_mla_at of it for its context. */
attn_mla_kv kv_latent_view_staged(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t rank,
                                  const uint16_t *tail, uint32_t tail0);

/* out[n][head_dim] = rows 0..n-1 of the sequence with block table blocks,
 * in layer (fp8_e4m3, KIVI: sealed blocks only). */
void kv_latent_read(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t n, float *out);
/* The same for rows j0..j1-1 only, into out + j0 x head_dim (so that
 * threads can share a read out). */
void kv_latent_read_range(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t j0, uint32_t j1,
                          float *out);

#endif
