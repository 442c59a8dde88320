/* kv_check.c - accounting (kv_stats_get) and the invariant walker
 * (kv_check); see kv_check.h.
 *
 * Both use pool->scratch (one uint32_t per block, allocated with the pool)
 * so that they can run at any moment without allocating. kv_check packs two
 * things into it: KV_SEEN (the block was met on a list) and, in the low
 * bits, how many table entries name the block.
 */
#include "kv/kv_check.h"

#include "base/err.h"
#include "base/mem.h"

#include <string.h>

#define KV_SEEN 0x80000000u

/* ------------------------------------------------------------ accounting */

/* Tokens of table entry i that hold positions < n_tokens. */
static uint32_t kv_entry_fill(const kv_seq *s, uint32_t i)
{
    uint64_t t = s->pool->g.s.block_size, first = (uint64_t)i * t;
    if (s->n_tokens <= first) return 0;
    return (uint32_t)(s->n_tokens - first < t ? s->n_tokens - first : t);
}

/* scratch[b] = 1 + the most tokens any holder has in block b (0: not held). */
static void kv_stats_mark(kv_pool *pool, kv_seq *const *seqs, size_t n_seqs, kv_stats *st)
{
    memset(pool->scratch, 0, (size_t)pool->n_blocks * sizeof *pool->scratch);
    for (size_t j = 0; j < n_seqs; j++) {
        const kv_seq *s = seqs[j];
        st->tokens += s->n_tokens;
        for (uint32_t i = 0; i < s->n_blocks; i++) {
            uint32_t b = s->table[i], fill = kv_entry_fill(s, i) + 1;
            if (pool->scratch[b] < fill) pool->scratch[b] = fill;
        }
    }
}

void kv_stats_get(kv_pool *pool, kv_seq *const *seqs, size_t n_seqs, kv_stats *out)
{
    const kv_geom *g = &pool->g;
    kv_stats st = {
        .blocks_total = pool->n_blocks, .blocks_used = pool->n_used, .blocks_cached = pool->lru.n,
        .blocks_free = pool->free_list.n, .block_bytes = g->block_bytes,
        .block_bytes_exact = g->block_bytes_exact, .pool_bytes = (uint64_t)pool->n_blocks * g->block_bytes,
        .bytes_per_token = g->bytes_per_token, .n_seqs = (uint32_t)n_seqs,
    };
    kv_stats_mark(pool, seqs, n_seqs, &st);
    for (uint32_t b = 0; b < pool->n_blocks; b++) {
        if (pool->scratch[b] == 0) continue;
        st.blocks_held++;
        st.tokens_stored += pool->scratch[b] - 1;
    }
    st.bytes_allocated = (uint64_t)st.blocks_held * g->block_bytes;
    uint64_t live;
    if (mul_u64(st.tokens_stored, g->block_bytes_exact, &live)) st.bytes_live = live / g->s.block_size;
    else st.bytes_live = (uint64_t)((double)st.tokens_stored * g->bytes_per_token);
    assert(st.bytes_live <= st.bytes_allocated);
    st.bytes_wasted = st.bytes_allocated - st.bytes_live;
    st.utilisation = st.bytes_allocated ? (double)st.bytes_live / (double)st.bytes_allocated : 1.0;
    *out = st;
}

/* ---------------------------------------------------------------- check */

#define KV_BAD(...) err_set(PL_EFORMAT, "kv_check: " __VA_ARGS__)

static int kv_check_list(kv_pool *pool, const kv_list *l, kv_block_state want, const char *what)
{
    uint32_t n = 0;
    int32_t prev = KV_NONE;
    for (int32_t b = l->head; b != KV_NONE; prev = b, b = pool->blocks[b].next, n++) {
        if (b < 0 || (uint32_t)b >= pool->n_blocks) return KV_BAD("%s list: link %d out of range", what, b);
        if (n >= pool->n_blocks) return KV_BAD("%s list: longer than the pool (a cycle)", what);
        const kv_block *k = &pool->blocks[b];
        if (pool->scratch[b] & KV_SEEN) return KV_BAD("block %d met twice on the lists", b);
        pool->scratch[b] |= KV_SEEN;
        const bool bit = (pool->free_bits[b / 64] >> (b % 64)) & 1;
        if (bit != (want == KV_BLOCK_FREE))
            return KV_BAD("block %d on the %s list has its free bit %s", b, what, bit ? "set" : "clear");
        if (k->state != want) return KV_BAD("block %d on the %s list has state %u", b, what, k->state);
        if (k->prev != prev) return KV_BAD("block %d: prev %d, expected %d (%s list)", b, k->prev, prev, what);
        if (k->refcount != 0) return KV_BAD("block %d on the %s list has refcount %u", b, what, k->refcount);
        bool hashed = (k->flags & KV_BLOCK_HASHED) != 0;
        if (hashed != (want == KV_BLOCK_CACHED))
            return KV_BAD("block %d on the %s list is %shashed", b, what, hashed ? "" : "not ");
    }
    if (l->tail != prev) return KV_BAD("%s list: tail %d, last block %d", what, l->tail, prev);
    if (l->n != n) return KV_BAD("%s list: count %u, walked %u", what, l->n, n);
    return 0;
}

static int kv_check_seq(kv_pool *pool, const kv_seq *s, size_t j)
{
    if (s->pool != pool) return KV_BAD("sequence %zu belongs to another pool", j);
    if (s->n_tokens > s->max_ctx) return KV_BAD("sequence %zu: %u tokens > max_ctx %u", j, s->n_tokens, s->max_ctx);
    uint64_t t = pool->g.s.block_size, cap = (s->max_ctx + t - 1) / t, want = (s->n_tokens + t - 1) / t;
    if (s->cap != cap) return KV_BAD("sequence %zu: cap %u, expected %llu", j, s->cap, (unsigned long long)cap);
    if (s->mode == KV_SEQ_STATIC) want = cap;
    if (s->n_blocks != want)
        return KV_BAD("sequence %zu: %u blocks for %u tokens, expected %llu", j, s->n_blocks, s->n_tokens,
                      (unsigned long long)want);
    for (uint32_t i = 0; i < s->n_blocks; i++) {
        uint32_t b = s->table[i];
        if (b >= pool->n_blocks) return KV_BAD("sequence %zu: entry %u = %u out of range", j, i, b);
        if (pool->blocks[b].state != KV_BLOCK_USED)
            return KV_BAD("sequence %zu: entry %u names block %u in state %u", j, i, b, pool->blocks[b].state);
        pool->scratch[b]++;
    }
    return 0;
}

static int kv_check_block(const kv_pool *pool, uint32_t b, uint32_t *n_used)
{
    const kv_block *k = &pool->blocks[b];
    uint32_t refs = pool->scratch[b] & ~KV_SEEN;
    bool seen = (pool->scratch[b] & KV_SEEN) != 0;
    if (k->state > KV_BLOCK_CACHED) return KV_BAD("block %u: bad state %u", b, k->state);
    if (k->state != KV_BLOCK_USED) {
        if (!seen) return KV_BAD("block %u is %s but on no list", b, k->state ? "cached" : "free");
        if (refs) return KV_BAD("block %u is not in use but %u table entries name it", b, refs);
        return 0;
    }
    if (seen) return KV_BAD("block %u is in use but on a list", b);
    if (k->prev != KV_NONE || k->next != KV_NONE) return KV_BAD("block %u is in use but linked", b);
    if (refs == 0) return KV_BAD("block %u is in use (refcount %u) but no table names it: a leak", b, k->refcount);
    if (k->refcount != refs) return KV_BAD("block %u: refcount %u, %u table references", b, k->refcount, refs);
    (*n_used)++;
    return 0;
}

int kv_check(kv_pool *pool, kv_seq *const *seqs, size_t n_seqs)
{
    int rc;
    memset(pool->scratch, 0, (size_t)pool->n_blocks * sizeof *pool->scratch);
    if ((rc = kv_check_list(pool, &pool->free_list, KV_BLOCK_FREE, "free"))) return rc;
    if ((rc = kv_check_list(pool, &pool->lru, KV_BLOCK_CACHED, "LRU"))) return rc;
    uint64_t bits = 0; /* each free-list block's bit is set (above): no other may be */
    for (uint32_t w = 0; w < (pool->n_blocks + 63) / 64; w++) bits += (uint64_t)__builtin_popcountll(pool->free_bits[w]);
    if (bits != pool->free_list.n) return KV_BAD("%llu free bits for %u free blocks", (unsigned long long)bits, pool->free_list.n);
    for (size_t j = 0; j < n_seqs; j++)
        if ((rc = kv_check_seq(pool, seqs[j], j))) return rc;
    uint32_t n_used = 0;
    for (uint32_t b = 0; b < pool->n_blocks; b++)
        if ((rc = kv_check_block(pool, b, &n_used))) return rc;
    if (n_used != pool->n_used) return KV_BAD("n_used %u, counted %u", pool->n_used, n_used);
    if ((uint64_t)pool->free_list.n + pool->lru.n + n_used != pool->n_blocks)
        return KV_BAD("free %u + cached %u + used %u != %u blocks", pool->free_list.n, pool->lru.n, n_used,
                      pool->n_blocks);
    return 0;
}
