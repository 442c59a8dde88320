/* kv_groups.h - layer groups, a KV kind: a model whose layers differ in
 * what they attend over (gemma2/3: local sliding-window layers beside
 * global ones) keeps one block table per group, so that the local groups
 * free their blocks behind the window while the global group keeps every
 * token's (vLLM's hybrid KV cache manager).
 *
 * Blocks stay one size in one pool: a block holds `slots` layers, and
 * belongs to one group while a table names it. The global layers form
 * group 0 (slots = their count); the local layers are cut into groups of
 * `slots` (the last one padded), so that every block is a whole block of
 * some group and the pool, paging, the scheduler's block counts, fork,
 * copy-on-write and the prefix cache work on it unchanged:
 *
 *   gemma3, 12 layers, 5 local : 1 global, window W:
 *   group 0 (global)  layers 5 11            slots 0 1   table: every block
 *   group 1 (local)   layers 0 1             slots 0 1   table: blocks of the
 *   group 2 (local)   layers 2 3             slots 0 1     last W positions
 *   ...               ...                                  (and the batch)
 *   group 5 (local)   layers 9 10            slots 0 1
 *
 *   positions  |  0..T-1 | T..2T-1 | ... | (d-1)T..dT-1 | dT .. n-1    |
 *   group 0    |   [0]   |   [1]   | ... |    [d-1]     | [d] ...      |
 *   group g>0  |  freed  |  freed  | ... |    freed     | [0] ...      |
 *                                           local slot = position - d T
 *
 * The local tables drop their first blocks together (kv_glocal.dropped = d)
 * once no later token's window reaches them: before an append at position
 * p, every block wholly before p - W + 1 goes (W as HF's mask: p attends
 * to p - W + 1 .. p). The global table (rt_seq.kv, outside this struct)
 * keeps positions absolute.
 *
 * Prefix cache: each local group keys its blocks on its own chain
 * (prefix_group_root), so a block dropped behind the window stays CACHED
 * and a later prompt can take it back. A hit of k blocks is used only when
 * every local group still holds the blocks of the window before position
 * kT; else k shrinks to the highest missing block (rt_prefix.c).
 *
 * Invariants (kv_glocal_check): every local table holds the same number of
 * blocks and positions [dT, n) of the global table's n; the window of the
 * next token is held: d = 0 or dT + W <= n + 1.
 */
#ifndef PL_KV_KV_GROUPS_H
#define PL_KV_KV_GROUPS_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_seq.h"

#define KV_GROUPS_MAX 16          /* groups, the global one included */
#define KV_GROUPS_MAX_LAYERS 1024

typedef struct {
    uint32_t n_groups;  /* 0: off (one table for all layers) */
    uint32_t slots;     /* layers one block holds: the pool's n_layers */
    uint32_t window;    /* the local layers' window W, in positions */
    uint32_t n_layers;  /* the model's */
    uint32_t n_global, n_local;
    uint8_t group[KV_GROUPS_MAX_LAYERS]; /* [n_layers] 0 global, 1.. local */
    uint16_t slot[KV_GROUPS_MAX_LAYERS]; /* [n_layers] slot in its group's blocks */
} kv_groups;

/* Plans the groups of n_layers layers, local[l] marking the ones that
 * attend over the last window positions only. n_groups = 0 when groups
 * do not apply: no local or no global layer, window < 2, more local than
 * KV_GROUPS_MAX - 1 groups of the global count would need, or too many
 * layers. */
void kv_groups_plan(kv_groups *g, uint32_t n_layers, const bool *local, uint32_t window);

/* The local groups' tables of one sequence. */
typedef struct {
    kv_seq t[KV_GROUPS_MAX - 1]; /* group g's at t[g - 1] */
    uint32_t dropped;            /* d: leading blocks every local table freed */
} kv_glocal;

/* Empty paged tables on pool. PL_ENOMEM; nothing kept on failure. */
int kv_glocal_init(kv_glocal *x, const kv_groups *g, kv_pool *pool, uint32_t max_ctx);
void kv_glocal_free(kv_glocal *x, const kv_groups *g);

/* d(n): the leading blocks of block_size a local table does without when
 * the next token is at position n. */
uint32_t kv_groups_first_block(const kv_groups *g, uint32_t block_size, uint32_t n);

/* Leading blocks the local tables drop before appending at position n
 * (n = the global table's n_tokens). */
uint32_t kv_glocal_drop_count(const kv_groups *g, const kv_glocal *x, uint32_t n);

/* Blocks the local tables take from the pool for an append of m tokens at
 * position n (their drop first, net of what it frees; may be negative). */
int64_t kv_glocal_append_cost(const kv_groups *g, const kv_glocal *x, uint32_t n, uint32_t m);

/* Drops what the window no longer needs, then appends m positions to every
 * local table (copy-on-write as kv_seq_append). The caller checked the
 * cost against the pool (with the global table's); PL_EFULL otherwise,
 * the drop kept (it is a complete change). */
int kv_glocal_append(kv_glocal *x, const kv_groups *g, uint32_t n, uint32_t m);

/* Cuts the local tables to n positions (global count); dT <= n. */
void kv_glocal_truncate(kv_glocal *x, const kv_groups *g, uint32_t n);

/* True if the local tables still hold the window of a token at position n
 * (so that a sequence may be truncated to n). */
bool kv_glocal_holds_window(const kv_groups *g, const kv_glocal *x, uint32_t n);

/* child = parent's tables, blocks shared (refcount+1). PL_ENOMEM;
 * *child untouched on failure. */
int kv_glocal_fork(kv_glocal *child, const kv_glocal *parent, const kv_groups *g);

/* Bytes of the blocks the local tables hold (shared ones in full). */
uint64_t kv_glocal_bytes(const kv_glocal *x, const kv_groups *g);

/* Appends the local tables to out[] (for kv_check / kv_stats_get); returns
 * how many. */
uint32_t kv_glocal_tables(kv_glocal *x, const kv_groups *g, kv_seq **out);

/* The invariants above against the global table's n positions. 0, or
 * PL_EFORMAT naming the first violation. */
int kv_glocal_check(const kv_glocal *x, const kv_groups *g, uint32_t n);

/* A block belongs to one group at a time (its slots hold that group's
 * layers): no block is named by tables of two groups. group[i] is the
 * group of tables[i]. Uses pool->scratch (run it after kv_check, not
 * during). 0, or PL_EFORMAT naming the block. */
int kv_groups_check_owners(kv_pool *pool, kv_seq *const *tables, const uint8_t *group, size_t n);

#endif
