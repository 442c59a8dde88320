/* kv_shift.h - re-rotating cached keys when a sliding window drops blocks.
 *
 * Design (StreamingLLM-style window with attention sinks, positions kept
 * coherent the way llama.cpp's context shift does): the cache stores keys
 * AFTER RoPE. When the window drops whole blocks from the middle of a
 * sequence (kv_seq_drop_range), every kept token after the dropped range
 * moves delta = (tokens dropped) positions down, so its key is rotated by
 * RoPE at position -delta:
 *
 *   K_stored(p) = R(p) k   ->   R(-delta) R(p) k = R(p - delta) k
 *
 * (RoPE rotations of one pair compose by adding angles), and new tokens
 * continue at position = the number of kept tokens. Queries, keys of the
 * sinks (before the range) and values are untouched, and the forward pass
 * needs no change: positions in a batch are cache positions. For the window
 * alone (no sinks) this keeps every query-key distance exactly what it was,
 * i.e. it is sliding-window attention over whole blocks.
 *
 * Numerics: each kept key row is decoded (kv_codec_dequant), rotated in f32
 * by kern_rope with the model's RoPE (kv_rope: rope_dim, NeoX order, base,
 * linear scale, frequency factors; kv knows no model, the caller fills it
 * once from the model's config), and encoded again (kv_codec_write_row). For an f32
 * cache this is exact up to float rounding (the angles delta x theta_i are
 * rounded as kern_rope rounds them); f16, bf16, q8_0, q4_0 and fp8 re-round
 * the key once per shift it takes part in (a key may be shifted many times
 * over a long generation: every block_size tokens while the window is
 * full; the error is then a sum of independent roundings of the dtype's
 * size, not a drift of the angle). fp8_e4m3 re-derives its block scales:
 * a sealed block is re-encoded whole (kv_codec_reseal_plane); the block
 * it is filling lives in the sequence's f16 stage and is rotated there
 * (kv_shift_stage; one f16 rounding). KIVI dtypes quantize keys per channel
 * over a block: shifting them is refused (kv_shift_supported) for now.
 *
 * The latent kind (kv_latent.h: one row a token, c_kv then the RoPE key
 * k_pe; deepseek2) turns only k_pe, the row's last rope_dim elements, the
 * way llama.cpp's context shift turns deepseek2's k_pe; the queries' RoPE
 * half is rotated at the new positions by the forward pass as for K/V.
 * Every latent dtype shifts, KIVI too: its rows are token rows of codes
 * with per-channel parameters a block, so a sealed block is decoded,
 * turned and sealed anew as fp8_e4m3's is (kv_shift_latent_supported).
 */
#ifndef PL_KV_KV_SHIFT_H
#define PL_KV_KV_SHIFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_codec.h"
#include "kv/kv_pool.h"

/* The RoPE the cached keys were rotated with: kern_rope's arguments, apart
 * from the rows, their heads and the position. */
typedef struct {
    uint32_t rope_dim;  /* rotated dims of each head, from dim 0 (even, <= head_dim) */
    bool neox;          /* NeoX order: pairs (i, i + rope_dim/2); else adjacent pairs (2i, 2i+1) */
    float base;         /* theta_i = pos x scale x base^(-2i/rope_dim) (x freqs[i]) */
    float scale;        /* linear position scale */
    const float *freqs; /* [rope_dim/2] frequency factors, or NULL; read while shifting */
} kv_rope;

/* True if keys of dtype t can be re-rotated in place (row-major keys). */
bool kv_shift_supported(kv_dtype t);

/* The same for the latent kind: every dtype it holds. */
bool kv_shift_latent_supported(kv_dtype t);

/* Floats of scratch kv_shift_block needs for pool. */
size_t kv_shift_scratch_floats(const kv_pool *pool);

/* Rotates the keys of rows [0, n_rows) of pool block b, every layer and
 * KV head, by RoPE at position -delta (delta >= 0: the rows moved delta
 * positions down). b must be private to the caller (kv_seq_drop_range made
 * it so); the dtype must be kv_shift_supported (asserted). */
void kv_shift_block(const kv_rope *r, kv_pool *pool, uint32_t b, uint32_t n_rows, uint32_t delta, float *scratch);

/* Staged dtypes (fp8_e4m3, and KIVI for the latent kind): a block of those holds keys only once sealed
 * (full: kv_shift_block with n_rows = block_size); the partly filled block
 * lives in the sequence's stage: this rotates its key rows [0, n_rows) of
 * every layer by RoPE at -delta, in f16. pool gives the heads (the stage
 * is the sequence's of that pool). scratch: kv_dim floats. */
void kv_shift_stage(const kv_rope *r, const kv_pool *pool, kv_stage *st, uint32_t n_rows, uint32_t delta,
                    float *scratch);

#endif
