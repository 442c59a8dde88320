/* kv_check.h - the pool's accounting (kv_stats_get) and the invariant walk
 * over the pool and its live sequences (kv_check). Both run at any moment
 * without allocating (they use pool->scratch). Layer groups pass every
 * group's tables here, and add their own invariants (kv_groups.h:
 * kv_glocal_check, kv_groups_check_owners); the runtime's rt_ctx_check runs
 * them all. */
#ifndef PL_KV_CHECK_H
#define PL_KV_CHECK_H

#include "kv/kv_seq.h"

typedef struct {
    uint32_t blocks_total, blocks_used, blocks_cached, blocks_free;
    uint64_t block_bytes;        /* one block as laid out (plane padding included) */
    uint64_t block_bytes_exact;  /* one block by the formula */
    uint64_t pool_bytes;         /* blocks_total x block_bytes */
    double bytes_per_token;      /* the formula */
    /* Over the sequences passed in; a block shared by several counts once. */
    uint32_t n_seqs;
    uint64_t tokens;             /* sum of n_tokens (what the sequences see) */
    uint64_t tokens_stored;      /* distinct token rows held: per block, the most filled by any holder */
    uint32_t blocks_held;        /* distinct blocks held by the sequences */
    uint64_t bytes_allocated;    /* blocks_held x block_bytes */
    uint64_t bytes_live;         /* tokens_stored x the formula */
    uint64_t bytes_wasted;       /* bytes_allocated - bytes_live: unfilled tails, padding */
    double utilisation;          /* bytes_live / bytes_allocated (1 when nothing is allocated) */
} kv_stats;

/* Fills *out from the pool and the given live sequences. */
void kv_stats_get(kv_pool *pool, kv_seq *const *seqs, size_t n_seqs, kv_stats *out);

/* Walks every invariant of kv_pool.h and of this file over the pool and ALL
 * its live sequences. 0, or PL_EFORMAT with the first violation in the
 * error text. For tests and debug builds. */
int kv_check(kv_pool *pool, kv_seq *const *seqs, size_t n_seqs);

#endif
