/* ctx_internal.h - what the engine (src/engine) may do with a pl_ctx beyond
 * the public API: one batched forward pass over several sequences. */
#ifndef PL_API_CTX_INTERNAL_H
#define PL_API_CTX_INTERNAL_H

#include "kv/kv_seq.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "pagellm.h"

#define CTX_STEP_MAX_ITEMS 4096

typedef struct {
    int32_t seq;            /* a live sequence of the context */
    const int32_t *tokens;  /* tokens to append */
    uint32_t n;
    float *logits;          /* n_vocab floats for the last token, or NULL */
} ctx_item;

/* Appends each item's tokens to its sequence and runs them all in ONE
 * forward pass (the weights are read once for every sequence). Total tokens
 * <= max_batch; a sequence at most once. All or nothing: on PL_EFULL (KV
 * pool exhausted) no sequence changes. */
int ctx_step(pl_ctx *c, const ctx_item *items, int n_items);

/* Prefix cache: gives an EMPTY sequence the longest cached prefix of
 * tokens[0..n) (never all n: the last token is always computed, so that
 * there are logits); the sequence then holds those k tokens (KV and
 * history) and the caller appends tokens[k..n) with ctx_step. Returns k
 * (>= 0) or a negative error. is_recompute: the sequence rebuilds a
 * preempted request (counted apart in the cache's stats, never as hits).
 * Serves nothing (0) with the static layout or without a KV cache. */
int ctx_seq_attach_prefix(pl_ctx *c, int32_t seq, const int32_t *tokens, uint32_t n, bool is_recompute);

/* What ctx_seq_attach_prefix would serve of tokens[0..n) (if a block is
 * free for the tail copy); takes nothing, counts nothing: for ordering
 * the waiting queue. */
uint32_t ctx_prefix_peek(const pl_ctx *c, const int32_t *tokens, uint32_t n);

/* The context's prefix cache (its stats), or NULL if it has none. */
const prefix_cache *ctx_prefix_cache(const pl_ctx *c);

/* Forks: *child = a new sequence sharing parent's blocks (copy-on-write)
 * and history. PL_EFULL if no slot or block. */
int ctx_seq_fork(pl_ctx *c, int32_t parent, int32_t *child);

/* The KV pool and the live sequences (for the engine's /v1/kv snapshot and
 * kv_check in tests). seqs[i] is NULL for a free slot. */
kv_pool *ctx_pool(pl_ctx *c);
uint32_t ctx_max_seqs(const pl_ctx *c);
const kv_seq *ctx_seq_kv(const pl_ctx *c, int32_t seq); /* NULL if not live */

/* Sliding window (pl_ctx_params.kv_window; api_generate.c's header):
 * whether the context has one; the tokens dropped from seq so far (its
 * logical length is pl_seq_len + this); the most tokens one ctx_step item
 * may carry for seq now (n_ctx - length without a window); and the blocks
 * ctx_step would take to append n tokens to seq counting the window's drop
 * (net of the blocks the drop frees, at least 0), or -1 when no drop is
 * needed (count as kv_seq_append does). */
bool ctx_window(const pl_ctx *c);
uint64_t ctx_seq_dropped(const pl_ctx *c, int32_t seq);
uint32_t ctx_seq_max_chunk(const pl_ctx *c, int32_t seq);
int64_t ctx_seq_window_blocks(const pl_ctx *c, int32_t seq, uint32_t n);

/* The model behind a public handle. */
const model *pl_model_internal(const pl_model *pm);

#endif
