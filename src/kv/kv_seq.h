/* kv_seq.h - block tables: a sequence's logical blocks mapped onto the pool,
 * fork with copy-on-write, the static baseline (accounting and the
 * invariant walk: kv_check.h).
 *
 *   positions  0 .. T-1 | T .. 2T-1 | 2T .. n_tokens-1 ....|
 *   table[]    [0] = 7  | [1] = 2   | [2] = 9 (partly filled; the rest of
 *                                     its rows is the "tail" waste)
 *   pool       block 7 holds positions 0..T-1 in every layer (kv_pool.h)
 *
 * Modes:
 *   KV_SEQ_PAGED   blocks are taken as tokens are reserved and returned when
 *                  the sequence ends: n_blocks == ceil(n_tokens / T).
 *   KV_SEQ_STATIC  the baseline that paging is measured against: all
 *                  ceil(max_ctx / T) blocks are taken at kv_seq_init
 *                  (contiguous ids when the pool has such a run), so
 *                  n_blocks == cap always.
 *
 * The table is allocated once, at kv_seq_init / kv_seq_fork, with room for
 * max_ctx tokens: reserving, writing and truncating never call malloc.
 *
 * Sharing: kv_seq_fork gives the child the parent's blocks (refcount+1).
 * Before a token's K/V is written, kv_seq_prepare_write(pos) makes the block
 * holding pos private: if it is shared it is copied to a new block (all
 * layers, K and V), the table points at the copy and the old block loses one
 * reference. A private block that carries a prefix-cache key loses the key
 * (the pool's evict callback is told), since its content is about to change.
 * kv_seq_append does reserve + prepare_write of every block the new
 * positions fall in, so the caller may write them all straight away.
 *
 * Every function that can fail leaves the sequence and the pool unchanged.
 * Invariants (kv_check): n_tokens <= max_ctx; n_blocks <= cap; the mode's
 * n_blocks rule above; every table entry names a USED block; each USED
 * block's refcount equals the number of table entries naming it over all
 * live sequences.
 */
#ifndef PL_KV_SEQ_H
#define PL_KV_SEQ_H

#include <stddef.h>
#include <stdint.h>

#include "kv/kv_pool.h"

typedef enum { KV_SEQ_PAGED = 0, KV_SEQ_STATIC = 1 } kv_seq_mode;

typedef struct {
    kv_pool *pool;
    kv_seq_mode mode;
    uint32_t *table;   /* [cap] logical block -> block id; [0, n_blocks) valid */
    uint32_t n_blocks; /* entries in use */
    uint32_t cap;      /* ceil(max_ctx / block_size) */
    uint32_t n_tokens; /* token slots reserved: positions [0, n_tokens) */
    uint32_t max_ctx;
} kv_seq;

/* An empty sequence of at most max_ctx tokens. STATIC takes all its blocks
 * now (PL_EFULL if the pool cannot); PL_EINVAL if max_ctx is 0. */
int kv_seq_init(kv_seq *seq, kv_pool *pool, uint32_t max_ctx, kv_seq_mode mode);

/* Returns every block (refcount-1) and the table; *seq is zeroed. */
void kv_seq_free(kv_seq *seq);

/* Slots for n more tokens: positions [n_tokens, n_tokens + n). PL_EFULL
 * (pool) or PL_ERANGE (past max_ctx), nothing changed then. */
int kv_seq_reserve(kv_seq *seq, uint32_t n);

/* Makes the block holding pos (< n_tokens) private before it is written:
 * copy-on-write if shared. PL_EFULL if no block for the copy. */
int kv_seq_prepare_write(kv_seq *seq, uint32_t pos);

/* The table's last block, KV_NONE if it has none: what a block taken for
 * the table's end follows (kv_pool_alloc_next). */
static inline int64_t kv_seq_last_block(const kv_seq *seq)
{
    return seq->n_blocks ? (int64_t)seq->table[seq->n_blocks - 1] : KV_NONE;
}

/* Appends block b, which already holds block_size tokens' K/V (a prefix-
 * cache hit), as the next logical block: n_tokens += block_size. Paged
 * sequences at a block boundary only (PL_EINVAL), within max_ctx
 * (PL_ERANGE). b is acquired whatever its state (kv_pool_acquire). */
int kv_seq_push_block(kv_seq *seq, uint32_t b);

/* reserve(n) + prepare_write of every new position, all or nothing
 * (PL_EFULL counts the new blocks and the copies together). */
int kv_seq_append(kv_seq *seq, uint32_t n);

/* Blocks kv_seq_append(seq, n) takes from the pool now (it fails with
 * PL_EFULL exactly when this exceeds kv_pool_available): PAGED, the new
 * table entries; both modes, a copy of every shared block the new
 * positions fall in (a fork's partly filled tail; in a STATIC table any
 * block a fork shares after a truncate or a drop). 0 for n == 0. Counts
 * blocks only: past max_ctx the append fails with PL_ERANGE whatever the
 * count. For schedulers that plan a step before taking anything. */
uint32_t kv_seq_append_cost(const kv_seq *seq, uint32_t n);

/* child = a new sequence sharing all of parent's blocks (refcount+1), same
 * n_tokens, mode and max_ctx. A STATIC child shares the blocks that hold
 * tokens and takes fresh blocks for the rest. *child untouched on failure. */
int kv_seq_fork(kv_seq *child, const kv_seq *parent);

/* Forgets tokens from n_tokens on (n <= n_tokens); PAGED returns the blocks
 * no longer needed. */
void kv_seq_truncate(kv_seq *seq, uint32_t n_tokens);

/* Drops logical blocks [first, first + n) from the middle (or the end) of
 * the sequence, for a sliding window: they must hold tokens (first + n <=
 * ceil(n_tokens / T)); the table is compacted (later entries move down by
 * n) and n_tokens falls by the tokens the dropped blocks held (n x T, or
 * fewer when the range takes the partly filled last block). PAGED: each
 * dropped block loses one reference (FREE, or CACHED if keyed). STATIC: the
 * dropped blocks stay the sequence's, moved to the end of the table, so
 * n_blocks == cap still holds.
 * The blocks that move down and hold tokens now sit at other positions, so
 * their caller rewrites them (kv_shift re-rotates their keys): they are
 * made private and unkeyed first (copy-on-write if shared, the prefix
 * cache told), as kv_seq_prepare_write does. Blocks before the range (the
 * sinks) are untouched and keep their keys.
 * PL_EINVAL (bad range), PL_EFULL (no block for the copies, counting those
 * the drop frees); nothing changes then. */
int kv_seq_drop_range(kv_seq *seq, uint32_t first, uint32_t n);

/* Drops the first n logical blocks, which must be full (n x T <= n_tokens),
 * for sliding-window attention: unlike kv_seq_drop_range nothing is
 * rewritten (positions stay absolute; the caller keeps the offset), so the
 * blocks that move down keep their content, sharing and prefix keys. The
 * table moves down by n and n_tokens falls by n x T. PAGED: each dropped
 * block loses one reference (FREE, or CACHED if keyed). STATIC: the
 * dropped blocks move to the end of the table, still owned. Cannot fail
 * but for a bad n (PL_EINVAL, nothing changed). */
int kv_seq_drop_front(kv_seq *seq, uint32_t n);

/* Blocks kv_seq_drop_range(seq, first, n) takes from the pool minus those
 * it gives back (negative when it frees more than it copies); the range
 * must be valid. For schedulers that count blocks before a step. */
int64_t kv_seq_drop_balance(const kv_seq *seq, uint32_t first, uint32_t n);

/* Blocks a window's drop followed by kv_seq_append(seq, n) takes from the
 * pool, net of those the drop gives back (negative when it frees more):
 * kv_seq_drop_range(seq, first, k), whose range must be valid (k >= 1), or
 * kv_seq_drop_front(seq, k), k x T <= n_tokens. The pair succeeds exactly
 * when this is <= kv_pool_available (then the pool's available count falls
 * by it). */
int64_t kv_seq_drop_range_append_cost(const kv_seq *seq, uint32_t first, uint32_t k, uint32_t n);
int64_t kv_seq_drop_front_append_cost(const kv_seq *seq, uint32_t k, uint32_t n);

/* Block id holding pos (< n_tokens, asserted). */
static inline uint32_t kv_seq_block(const kv_seq *seq, uint32_t pos)
{
    assert(pos < seq->n_tokens);
    return seq->table[pos / seq->pool->g.s.block_size];
}

/* Address of pos's row in layer's K / V plane (rows layout). */
static inline uint8_t *kv_seq_row(const kv_seq *seq, uint32_t layer, kv_plane p, uint32_t pos)
{
    const kv_pool *pool = seq->pool;
    return kv_block_plane(pool, kv_seq_block(seq, pos), layer, p) +
           (uint64_t)(pos % pool->g.s.block_size) * kv_row_stride(pool, p);
}

/* Bytes of the blocks this sequence holds (shared ones counted in full). */
uint64_t kv_seq_bytes_held(const kv_seq *seq);

#endif
