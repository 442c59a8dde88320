/* kv_writer.h - writing a batch's K and V rows into the cache, any KV dtype.
 *
 * The forward pass computes, per layer, one K and one V row (kv_dim =
 * n_kv_heads x head_dim floats, after RoPE) for each token of a ragged
 * batch, and hands them to kv_writer_store; it names no KV encoding. Per
 * dtype the writer:
 *   f32 f16 bf16 q8_0 q4_0  encodes each head's row as a ggml row
 *       (kv_dtype_head_type) into the token's block and slot: what the
 *       attention kernel reads directly, bit for bit what llama.cpp
 *       computes (f16: keys in columns, values grouped by head, kv_dtype.h);
 *   fp8_e5m2  kv_codec_put per token, in position order;
 *   fp8_e4m3 kivi4 kivi2  ("staged": the block being filled lives in the
 *       sequence's f16 kv_stage, kv_codec.h) in the three steps below.
 *
 * Staged dtypes and batches. A token at position p attends to the blocks
 * before its own as stored (sealed, quantized) and to its own block p / T
 * in f16, positions up to p: the "residual" window of KIVI, and what
 * one-token-at-a-time decoding sees (the write of a block's last slot seals
 * it, but the stage still holds its f16 rows). For a batch to give every
 * row that same view, whatever the chunking, a layer runs as:
 *   1. kv_writer_store: the batch's K/V rows rounded to f16 (the writer's
 *      kh, vh); every block the batch fills is sealed from [stage rows
 *      before the batch | batch rows] assembled in its seal buffer; the
 *      stage is not touched yet.
 *   2. attention through kv_view (kv_view.h): a row's own block is read
 *      from the stage (positions before the batch, still intact) and the
 *      writer's kh/vh (positions in it); earlier blocks from the pool.
 *   3. kv_writer_commit: the batch rows of each sequence's last block go
 *      into its stage, which then holds exactly what token-by-token writes
 *      leave.
 * This needs each sequence's batch tokens to be adjacent in the batch and
 * at consecutive slots (kv_writer_begin asserts it). For the other dtypes
 * steps 1 and 2 are the whole story and kv_writer_commit does nothing.
 *
 * All buffers are sized by kv_writer_new for max_tokens tokens: writing
 * allocates nothing.
 */
#ifndef PL_KV_KV_WRITER_H
#define PL_KV_KV_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_codec.h"
#include "kv/kv_pool.h"

/* One sequence of a batch, as the cache sees it. */
typedef struct {
    const uint32_t *blocks; /* the sequence's block table */
    uint32_t n_blocks;      /* covers every slot written in this batch */
    kv_stage *stage;        /* staged dtypes: the sequence's stage, holding the f16 rows of slots
                               [from / T x T, from) where from is its first slot in the batch;
                               the writer leaves it holding its last block's rows. NULL for the
                               other dtypes. */
} kv_batch_seq;

/* A ragged batch: which sequence and slot each token writes. A sequence's
 * tokens are at consecutive slots, in order; with a staged dtype they are
 * also adjacent in the batch. */
typedef struct {
    int n_tokens;
    const int32_t *slot;      /* [n_tokens] cache slot in its sequence */
    const int32_t *seq;       /* [n_tokens] index into seqs */
    const kv_batch_seq *seqs; /* [n_seqs] */
    int n_seqs;
} kv_batch;

typedef struct kv_writer kv_writer;

/* A writer for pools of geometry g and batches of up to max_tokens tokens
 * (and sequences). PL_ENOMEM; *out untouched on failure. */
int kv_writer_new(kv_writer **out, const kv_geom *g, int max_tokens);
void kv_writer_free(kv_writer *w);

/* Starts batch b (once, before its first layer's store): staged dtypes
 * note where each sequence's run of tokens starts. b stays unchanged until
 * the batch's last kv_writer_commit. */
void kv_writer_begin(kv_writer *w, const kv_batch *b);

/* Step 1: writes the K and V rows of layer ([n_tokens][kv_dim] floats
 * each, row t for batch token t) into the cache. */
void kv_writer_store(kv_writer *w, kv_pool *pool, const kv_batch *b, uint32_t layer, const float *k,
                     const float *v);

/* Step 3 (after attention read the layer): staged dtypes move the batch
 * rows of each sequence's last block into its stage; else nothing. */
void kv_writer_commit(kv_writer *w, const kv_batch *b, uint32_t layer);

/* Staged dtypes, between a layer's store and commit: sequence seq's batch
 * rows in f16 (row 0 = its first batch token, at slot *from, kv_dim halves
 * a row). false, and nothing set, for the other dtypes. */
bool kv_writer_rows(const kv_writer *w, int seq, uint32_t *from, const uint16_t **kh, const uint16_t **vh);

#endif
