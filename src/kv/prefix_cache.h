/* prefix_cache.h - the prefix cache: full KV blocks found again by content.
 *
 * Model-free: it sees token ids, the block pool (kv_pool.h) and block
 * tables (kv_seq.h), never the model. A sequence that starts with a prompt
 * whose leading blocks some earlier sequence computed (a shared system
 * prompt, the previous turns of a chat, the prompt of a preempted request)
 * takes those blocks instead of recomputing them.
 *
 * Keys. A full block's key is a 128-bit hash (XXH3-128) of
 *
 *   | salt (16 B) | parent key (16 B) | token ids (T x 4 B, little endian) |
 *
 * where the parent key is the key of the block before it in the sequence
 * (PREFIX_ROOT = {0, 0} for the first block), so a key names the whole token
 * prefix up to the block's end, not only its own T tokens (chained, as in
 * vLLM and LMCache). The salt is XXH3-128 of the caller's model fingerprint
 * and the pool's shape (layers, KV heads, head dim, block size, KV dtype):
 * KV computed by another model, at another dtype or block size is never
 * found.
 *
 *   tokens  | a b c d | e f g h | i j k l | m n
 *   keys      K0=H(R,abcd) K1=H(K0,efgh) K2=H(K1,ijkl)   (partly filled: no key)
 *
 * Index. Two open-addressing tables (linear probing, at most half full,
 * backward-shift deletion so there are no tombstones), both sized once
 * from the pool:
 *   keys:  key -> block               (the chain walk; keys are unique)
 *   kids:  (parent key, first token) -> head of a list of cached blocks
 *          with that parent key and first token, linked through
 *          sib_prev/sib_next (the token-granular tail match below)
 * Each keyed block's token ids and parent key are kept in arrays allocated
 * with the cache ([n_blocks][T] int32 and [n_blocks][2] uint64), so that a
 * hit is verified against the tokens and nothing allocates after prefix_init.
 * The cache links blocks by parent KEY, never by parent block id: a key is
 * content, so a link cannot dangle when the parent block is evicted, and a
 * child whose parent was evicted is found again once the parent's content
 * is registered again. (kv_block.parent is therefore left KV_NONE.)
 *
 * Lookup (prefix_attach). Walks the chain from the root: computes the next
 * block's key from the prompt, finds it, verifies that the block's stored
 * tokens and parent key equal the prompt's (a hash collision is a miss,
 * counted), pushes the block onto the sequence (kv_seq_push_block, which
 * revives a CACHED block), and stops at the first miss. At most n - 1 of n
 * tokens are served: the last prompt token is always computed so that
 * there are logits. Then, beyond vLLM, the tail is matched token by token:
 * among the cached children of the last matched key whose first token is
 * the next prompt token, the one sharing the longest prefix (m tokens) with
 * the rest of the prompt is copied into a fresh block (all layers; the rows
 * past m are overwritten by the caller's next writes) and the sequence
 * holds k x T + m tokens. The copy needs a free or evictable block beyond
 * the source; without one the tail match is skipped (not an error). It is
 * made only for dtypes whose planes are token rows (a block quantized per
 * channel cannot be cut at a token). The candidates are one kids list,
 * scanned up to PREFIX_PARTIAL_SCAN_MAX blocks.
 *
 * What verification proves: a hit block's own tokens and its parent KEY
 * equal the prompt's; its ancestors were verified the same way one step
 * earlier. A collision between two different ancestors' keys (odds about
 * 2^-128 per pair) would go unseen; catching it would need the whole
 * prefix stored per block.
 *
 * Registering (prefix_register). After each forward step the caller registers
 * the sequence's newly full blocks. A per-sequence prefix_cursor remembers how
 * many leading blocks are done and the last one's key, so the call costs
 * O(new blocks). Keys stay unique: when a block's key is already cached
 * (two sequences computed the same prefix independently) and the stored
 * tokens agree, the sequence is switched to the cached block and its own
 * copy is released (deduped: memory saved, and the prefix stays cached
 * while either sequence holds it); if they disagree (a collision) the
 * sequence keeps its block, unkeyed.
 *
 * Eviction. A keyed block whose refcount falls to 0 stays CACHED on the
 * pool's LRU list (kv_pool.h). The pool calls back (kv_pool_set_evict)
 * before a key is wiped: a CACHED block taken for reuse (an eviction), or a
 * private keyed block about to be rewritten (kv_seq_prepare_write: an
 * invalidation). A shared keyed block that a sequence copies on write keeps
 * its key: its content did not change, only the writer's copy does.
 *
 * Invariants (prefix_check): a block is in the keys table iff it is keyed in
 * the pool (KV_BLOCK_HASHED), under its pool key, once; the key recomputes
 * from the stored parent key and tokens; every keyed block is on exactly
 * one kids list, the one of its (parent key, first token); keys are unique;
 * stats.cached_blocks counts the keyed blocks.
 *
 * One thread owns the cache, its pool and its sequences (DESIGN.md 2).
 */
#ifndef PL_KV_PREFIX_CACHE_H
#define PL_KV_PREFIX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_pool.h"
#include "kv/kv_seq.h"

/* Candidates looked at by one tail match, at most (a bound on the worst
 * case: thousands of cached blocks under one parent and first token). */
#define PREFIX_PARTIAL_SCAN_MAX 1024

/* Counters, exact. Tokens recomputed after a preemption (prefix_attach with
 * is_recompute) are counted only in the recompute_* fields. */
typedef struct {
    uint64_t lookups;          /* prefix_attach calls (not recomputes) */
    uint64_t lookups_hit;      /* ... that served at least one token */
    uint64_t query_tokens;     /* prompt tokens looked up (n of each call) */
    uint64_t hit_tokens;       /* tokens served: full blocks + tail copies */
    uint64_t miss_tokens;      /* query_tokens - hit_tokens: tokens to compute */
    uint64_t block_hits;       /* full blocks served */
    uint64_t partial_hits;     /* tail copies made */
    uint64_t partial_tokens;   /* tokens served by tail copies */
    uint64_t recompute_lookups, recompute_tokens, recompute_hit_tokens;
    uint64_t collisions;       /* key found but tokens or parent differ (lookup or register) */
    uint64_t registered;       /* blocks given a key */
    uint64_t deduped;          /* full blocks replaced by the cached block of the same key */
    uint64_t evictions;        /* CACHED keyed blocks taken for reuse */
    uint64_t invalidations;    /* private keyed blocks rewritten */
    uint32_t cached_blocks;    /* keyed blocks now (in use or CACHED) */
} prefix_stats;

/* out = 128-bit hash of data[0, len). */
typedef void (*prefix_hash_fn)(uint64_t out[2], const void *data, size_t len);

/* Where prefix_register resumes in one sequence: its leading n_blocks full
 * blocks are done, the last of them has key hash (PREFIX_ROOT if none). The
 * caller keeps one beside each sequence: set by prefix_attach (or
 * prefix_cursor_init for a sequence made without it), copied on fork, passed
 * to prefix_cursor_truncate when the sequence is truncated. */
typedef struct {
    uint32_t n_blocks;
    uint64_t hash[2];
    uint64_t root[2]; /* the chain's parent of block 0: PREFIX_ROOT, or a layer group's root */
} prefix_cursor;

typedef struct prefix_cache {
    kv_pool *pool;
    uint32_t block_size;          /* T, the pool's */
    uint64_t salt[2];
    prefix_hash_fn hash;              /* XXH3-128; tests plant collisions with a weaker one */
    bool partial_ok;              /* the dtype stores token rows: tail copies allowed */
    int32_t *keys;                /* [keys_mask + 1] block id or KV_NONE */
    int32_t *kids;                /* [keys_mask + 1] head block id or KV_NONE */
    uint32_t keys_mask;           /* table size - 1 (a power of two >= 2 x n_blocks) */
    int32_t *tok;                 /* [n_blocks][T] token ids of each keyed block */
    uint64_t (*parent)[2];        /* [n_blocks] parent key of each keyed block */
    int32_t *sib_prev, *sib_next; /* [n_blocks] kids-list links; KV_NONE at the ends */
    uint8_t *hbuf;                /* [32 + 4 T] the bytes hashed for one key */
    uint8_t *mark;                /* [n_blocks] prefix_check's scratch */
    prefix_stats st;
} prefix_cache;

extern const uint64_t PREFIX_ROOT[2];

/* salt = XXH3-128 of (a version tag, model_fp, shape's layers, KV heads,
 * head dim, block size, dtype). model_fp names the weights (e.g. a hash of
 * the GGUF file); any 16 bytes the caller keeps stable. */
void prefix_salt_make(uint64_t salt[2], const uint64_t model_fp[2], const kv_shape *shape);

/* A cache over pool (which must have no keyed block and no evict callback:
 * PL_EINVAL), salted with model_fp and the pool's shape. Installs the
 * pool's evict callback with pc as its argument: *pc must not move until
 * prefix_free. PL_ENOMEM / PL_ERANGE; *pc untouched on failure. */
int prefix_init(prefix_cache *pc, kv_pool *pool, const uint64_t model_fp[2]);

/* Removes the callback and frees the index. The pool keeps its CACHED
 * blocks (evicted silently later), so a new cache cannot be made on it. */
void prefix_free(prefix_cache *pc);

/* Gives the EMPTY paged sequence seq the longest cached prefix of
 * tokens[0, n): full blocks, then a tail copy (see the top). *n_hit = the
 * tokens seq now holds (<= n - 1; 0 when n <= 1). *cur is set for
 * prefix_register. is_recompute: seq is a preempted request being rebuilt;
 * counted apart, never as hits. PL_EINVAL (seq not empty, not paged, not
 * on this pool), PL_ERANGE (n > max_ctx); nothing changes then. */
int prefix_attach(prefix_cache *pc, kv_seq *seq, const int32_t *tokens, uint32_t n, bool is_recompute,
              prefix_cursor *cur, uint32_t *n_hit);

/* What prefix_attach would serve of tokens[0, n) if blocks were available for
 * a tail copy; changes nothing, counts nothing (for scheduling). */
uint32_t prefix_match_len(const prefix_cache *pc, const int32_t *tokens, uint32_t n);

/* The chain keys of the first n_blocks full blocks of tokens (keys[i] names
 * tokens[0, (i + 1) T)); returns how many leading ones the cache holds,
 * verified (what prefix_attach would serve in full blocks). For the tiers
 * below RAM (src/store), which look up the rest. Counts nothing. */
uint32_t prefix_chain_keys(const prefix_cache *pc, const int32_t *tokens, uint32_t n_blocks, uint64_t (*keys)[2]);

/* Keys every full block of seq from cur->n_blocks on: tokens[0,
 * seq->n_tokens) are seq's token ids, whose K/V have been WRITTEN (call it
 * after the forward step, never before: a key makes a block findable).
 * A block whose key is cached already is replaced in seq->table by the
 * cached one (see the top), so call it between steps, not while a forward
 * pass reads the table. Returns the blocks newly keyed. Cannot fail. A
 * no-op for static sequences (the baseline is measured without reuse). */
uint32_t prefix_register(prefix_cache *pc, kv_seq *seq, const int32_t *tokens, prefix_cursor *cur);

/* prefix_register for a sequence whose first `base` blocks were dropped from the
 * front of its table (sliding-window attention: positions stay absolute):
 * seq->table[0] and tokens[0] are those of block `base`. Blocks are keyed
 * by their absolute chain as before; when the cursor is behind base (its
 * next block is gone) nothing more can be keyed and it returns 0. */
uint32_t prefix_register_at(prefix_cache *pc, kv_seq *seq, const int32_t *tokens, uint32_t base, prefix_cursor *cur);

/* A cursor at the start of a sequence (nothing registered yet). */
void prefix_cursor_init(prefix_cursor *cur);

/* Layer groups (kv_groups.h): each local group's blocks form a chain of
 * their own, rooted at prefix_group_root(g) instead of PREFIX_ROOT, so
 * that its keys never meet another group's (the same tokens, other layers).
 * A cursor made with prefix_cursor_init_root keeps its root across resets. */
void prefix_group_root(uint32_t group, uint64_t root[2]);
void prefix_cursor_init_root(prefix_cursor *cur, const uint64_t root[2]);

/* The highest chain block in [first, k) of tokens, chain rooted at root,
 * that the cache does not hold verified; -1 when it holds them all.
 * Counts nothing. */
int64_t prefix_range_missing(const prefix_cache *pc, const uint64_t root[2], const int32_t *tokens, uint32_t first,
                             uint32_t k);

/* Pushes the cached blocks of chain blocks [first, k) (root as above; all
 * held: prefix_range_missing said -1) onto the EMPTY paged seq, whose slot
 * 0 is then position first x T, and sets *cur (made with the root) to k
 * blocks. Counts nothing: the group 0 lookup counts the hit. */
void prefix_attach_range(prefix_cache *pc, kv_seq *seq, const int32_t *tokens, uint32_t first, uint32_t k,
                         prefix_cursor *cur);

/* Moves *cur over chain blocks [cur->n_blocks, n_blocks) of tokens (chain
 * block 0 at tokens[0]) without keying them: for a local group whose table
 * starts past its cursor (a tier load dropped the blocks behind the
 * window), so that prefix_register_at can key what follows. Counts
 * nothing; no-op if the cursor is there already. */
void prefix_cursor_advance(const prefix_cache *pc, prefix_cursor *cur, const int32_t *tokens, uint32_t n_blocks);

/* Adds n query tokens that were not looked up (and so missed) to the
 * stats: prefix_attach of a capped prompt counts the rest with this. */
void prefix_count_missed(prefix_cache *pc, uint32_t n, bool is_recompute);

/* To call when a sequence is truncated to n_tokens: if blocks the cursor
 * covers are gone, it restarts from the root (the next prefix_register
 * re-walks the kept blocks: keyed ones are recognised, O(blocks) hashing). */
void prefix_cursor_truncate(const prefix_cache *pc, prefix_cursor *cur, uint32_t n_tokens);

void prefix_stats_get(const prefix_cache *pc, prefix_stats *out);

/* Walks every invariant above against the pool. 0, or PL_EFORMAT with the
 * first violation in the error text. O(n_blocks x T). For tests. */
int prefix_check(const prefix_cache *pc);

#endif
