/* runtime.h - contexts and sequences: what src/api's pl_ctx / pl_seq_*
 * wrappers and the engine (src/engine) drive.
 *
 * A context (rt_ctx, the same object as the public pl_ctx) owns one KV
 * block pool sized at creation, the prefix cache over it (paged layout
 * with a KV cache only), a fixed table of max_seqs sequence slots, and the
 * forward pass's scratch. A sequence is a slot id: its block table, its
 * token history, its staging block (staged KV dtypes) and its window state.
 *
 *   rt_ctx.c     create / free, the pool, accounting
 *   rt_seq.c     sequence slots: new, free, truncate, fork
 *   rt_prefix.c  the prefix cache: attach a cached prefix, publish full blocks
 *                (and write them behind to the KV tiers; load tier hits)
 *   rt_step.c    one batched forward pass (rt_step) and one sequence's append
 *   rt_stage.c   staged KV dtypes: the stage across cuts
 *   rt_window.c  kv_window with sinks and sliding-window attention: drops,
 *                re-rotation, pieces, and the blocks an append will take
 *   rt_groups.c  layer groups (kv/kv_groups.h): the local groups' tables
 *                beside the global one, their batch, prefix hits across groups
 *
 * Invariant: for every live slot, kv.n_tokens == n_tokens (its history),
 * except in no-cache mode where the KV is emptied after every append.
 * One thread at a time (the caller's, or the engine thread).
 */
#ifndef PL_RUNTIME_RUNTIME_H
#define PL_RUNTIME_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_check.h"
#include "kv/kv_seq.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "store/store.h"

/* The most items (sequences) one rt_step carries. */
#define RT_STEP_MAX_ITEMS 4096

/* The same object as the public pl_ctx (as tok_vocab is pl_vocab). */
typedef struct pl_ctx rt_ctx;

/* A context's settings, resolved and checked by the caller (src/api's
 * pl_ctx_new names the flags in its errors); rt_ctx_new asserts the
 * relations below. */
typedef struct {
    uint32_t n_ctx;      /* KV slots (and history) of one sequence, >= 1 */
    uint32_t max_seqs;   /* sequence slots, 1..RT_STEP_MAX_ITEMS */
    uint32_t max_batch;  /* tokens per forward pass, >= 1 */
    uint32_t block_size; /* tokens per KV block, >= 1 */
    uint64_t kv_mem;     /* pool bytes; 0 = max_seqs x n_ctx tokens */
    int n_threads;       /* >= 1 */
    kv_dtype dtype;      /* one the model accepts (model_kv_dtype_check) */
    kv_seq_mode layout;  /* PAGED (prefix cache) or STATIC */
    bool no_kv_cache;    /* recompute every earlier token at every append */
    /* kv_window with sinks (rt_window.c): 0 = none; else window >= 2 x
     * block_size, sink blocks x block_size + window <= n_ctx, a KV cache,
     * a dtype whose keys re-rotate in place */
    uint32_t kv_window, kv_sinks;
    /* sliding-window attention in force (the model's W, 0 = none): never
     * with kv_window; when it frees blocks, n_ctx >= swa + block_size */
    uint32_t swa;
    bool swa_keep_blocks; /* apply the SWA mask, free nothing */
    /* layer groups (kv/kv_groups.h) where the model has local sliding-window
     * layers beside global ones, with the paged layout, a KV cache, an
     * unstaged dtype, no kv_window and no SWA; else one table */
    bool layer_groups;
} rt_params;

/* kv_window: the sinks in whole blocks (ceil(kv_sinks / block_size)), and
 * the most tokens a sequence holds (sink blocks x block_size + kv_window). */
uint32_t rt_window_sink_blocks(const rt_params *p);
uint32_t rt_window_limit(const rt_params *p);

/* One item of rt_step. */
typedef struct {
    int32_t seq;            /* a live sequence of the context */
    const int32_t *tokens;  /* tokens to append */
    uint32_t n;
    float *logits;          /* n_vocab floats for the last token, or NULL; with `all`, n rows:
                               one for every token of the item (prompt logprobs) */
    bool all;
    float *pool;            /* embeddings: [dim] the tokens' final hidden states pooled into it
                               (model.h fwd_seq.pool), or NULL */
    int pool_kind;          /* MODEL_POOL_MEAN / LAST / CLS */
} rt_item;

/* Pool accounting plus the staging blocks, which live outside the pool. */
typedef struct {
    kv_stats kv;                  /* over every table; tokens counts the global group's */
    uint32_t n_groups;            /* layer groups: 0 when off */
    uint64_t group_bytes[2];      /* ... bytes the [global], [local] groups' blocks hold */
    uint32_t group_blocks[KV_GROUPS_MAX]; /* ... each group's distinct blocks ([0] global) */
    uint64_t stage_bytes_per_seq; /* staged dtypes: one sequence's f16 staging block */
    uint64_t stage_bytes;         /* ... times the live sequences */
} rt_kv_stats;

/* ------------------------------------------------------------ context */

/* A context over model m (which must outlive it). PL_ENOMEM, or a pool /
 * forward-state error; *out untouched on failure. */
int rt_ctx_new(rt_ctx **out, const model *m, const rt_params *p);
void rt_ctx_free(rt_ctx *c);
const rt_params *rt_ctx_params(const rt_ctx *c);
uint32_t rt_ctx_n_vocab(const rt_ctx *c); /* floats in one row of logits */
/* Whether sequences run past n_ctx by dropping blocks: a kv_window, or SWA
 * that frees the blocks before the window. */
bool rt_ctx_slides(const rt_ctx *c);
/* model_key_cost of the context's model: a token attending to k keys costs
 * about 1 + k x this depth-0 tokens (the scheduler's estimate). */
double rt_ctx_key_cost(const rt_ctx *c);
/* The KV pool (for snapshots and kv_check). */
kv_pool *rt_ctx_pool(rt_ctx *c);
/* The layer groups in force, or NULL (one table for all layers). */
const kv_groups *rt_ctx_groups(const rt_ctx *c);
/* kv_check over the pool and every table of every live sequence, with the
 * layer groups' invariants (kv_glocal_check). For tests. */
int rt_ctx_check(rt_ctx *c);
void rt_ctx_kv_stats(rt_ctx *c, rt_kv_stats *out);

/* ---------------------------------------------------------- sequences */

/* A new empty sequence in a free slot. PL_EFULL if every slot is live or
 * (static layout) the pool cannot reserve n_ctx tokens. */
int rt_seq_new(rt_ctx *c, int32_t *out);
void rt_seq_free(rt_ctx *c, int32_t seq);    /* no-op if not live */
uint32_t rt_seq_len(const rt_ctx *c, int32_t seq);         /* tokens held; 0 if not live */
const int32_t *rt_seq_tokens(const rt_ctx *c, int32_t seq); /* their ids; NULL if not live */
const kv_seq *rt_seq_kv(const rt_ctx *c, int32_t seq);     /* NULL if not live; the global group's */
/* Layer groups: the local groups' tables of seq (NULL if not live or off). */
const kv_glocal *rt_seq_kv_local(const rt_ctx *c, int32_t seq);
/* Window: tokens dropped so far (the logical length is rt_seq_len + this). */
uint64_t rt_seq_dropped(const rt_ctx *c, int32_t seq);
/* Keeps the first n tokens (PL_EINVAL not live, PL_ERANGE n > length). */
int rt_seq_truncate(rt_ctx *c, int32_t seq, uint32_t n);
/* *child = a new sequence sharing parent's blocks (copy-on-write) and
 * history. PL_EFULL if no slot or block. */
int rt_seq_fork(rt_ctx *c, int32_t parent, int32_t *child);

/* ------------------------------------------------------- prefix cache */

/* Gives an EMPTY sequence the longest cached prefix of tokens[0..n) (never
 * all n: the last token is always computed, so that there are logits); the
 * sequence then holds those k tokens (KV and history) and the caller
 * appends tokens[k..n). Returns k (>= 0) or a negative error. is_recompute:
 * the sequence rebuilds a preempted request (counted apart in the cache's
 * stats, never as hits). Serves nothing (0) with the static layout or
 * without a KV cache. */
int rt_seq_attach_prefix(rt_ctx *c, int32_t seq, const int32_t *tokens, uint32_t n, bool is_recompute);
/* What rt_seq_attach_prefix would serve of tokens[0..n) (if a block is
 * free for the tail copy); takes nothing, counts nothing. */
uint32_t rt_prefix_peek(const rt_ctx *c, const int32_t *tokens, uint32_t n);
/* The context's prefix cache (its stats), or NULL if it has none. */
const prefix_cache *rt_ctx_prefix_cache(const rt_ctx *c);

/* ------------------------------------------------------------- tiers */

/* The KV tiers below the prefix cache (src/store): every block the prefix
 * cache keys from now on is also written behind to st. NULL: none. The
 * store must outlive its use (not owned). */
void rt_ctx_set_store(rt_ctx *c, store *st);
/* The payload of one tier entry: a pool block, or with layer groups one
 * block of every group (store_kv.h). */
uint64_t rt_ctx_tier_block_bytes(const rt_ctx *c);
/* The full blocks a prefix attach of tokens[0..n) may serve (within n - 1
 * tokens and what a sequence holds at once): their chain keys go to keys[]
 * (room for n / block_size), the count is returned; *in_ram = how many
 * leading ones the prefix cache holds. 0 without a prefix cache. */
uint32_t rt_prefix_chain(const rt_ctx *c, const int32_t *tokens, uint32_t n, uint64_t (*keys)[2], uint32_t *in_ram);
/* rt_seq_attach_prefix, then the blocks a tier lookup found: blocks[j]
 * holds chain block first + j (verified by the store). Used only if the
 * cache served exactly `first` full blocks or more (a tail copy is dropped
 * for them); loaded while the pool keeps `reserve` blocks available.
 * Returns the tokens the sequence holds; *n_loaded = blocks from the tiers. */
int rt_seq_attach_tiered(rt_ctx *c, int32_t seq, const int32_t *tokens, uint32_t n, bool is_recompute, uint32_t first,
                         const uint8_t *const *blocks, uint32_t n_blocks, uint32_t reserve, uint32_t *n_loaded);

/* ------------------------------------------------------------ running */

/* Appends each item's tokens to its sequence and runs them all in ONE
 * forward pass (the weights are read once for every sequence). Total tokens
 * <= max_batch; a sequence at most once; with a window, each item at most
 * rt_seq_max_chunk tokens. Not in no-cache mode. All or nothing: on
 * PL_EFULL (KV pool exhausted) no sequence changes, but for a window's
 * drops done to make room (each a complete change). */
int rt_step(rt_ctx *c, const rt_item *items, int n_items);

/* Appends n tokens to one sequence, runs them in chunks of max_batch (an
 * empty sequence first takes its cached prefix) and writes the last
 * token's n_vocab logits to logits (if not NULL). Nothing appended on
 * failure, but for the pieces a window already ran. */
int rt_seq_append(rt_ctx *c, int32_t seq, const int32_t *tokens, uint32_t n, float *logits);
/* The same with a row of logits for every token (n x n_vocab floats),
 * taking no prefix hits. Not in no-cache mode. */
int rt_seq_append_all(rt_ctx *c, int32_t seq, const int32_t *tokens, uint32_t n, float *logits);

/* The most tokens one rt_step item may carry for seq now (n_ctx - length
 * without a window; 0 if not live). */
uint32_t rt_seq_max_chunk(const rt_ctx *c, int32_t seq);
/* Blocks an rt_step item of n tokens for seq takes from the pool now,
 * counting a window's drop net of the blocks it frees (at least 0). */
uint32_t rt_seq_append_cost(const rt_ctx *c, int32_t seq, uint32_t n);

#endif
