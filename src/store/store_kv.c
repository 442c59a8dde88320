/* store_kv.c - publish and load full KV blocks; see store_kv.h. */
#include "store/store_kv.h"

#include <assert.h>
#include <string.h>

/* One entry's blocks: the position's block of every group (one without). */
typedef struct {
    const kv_pool *pool;
    uint32_t n;
    uint32_t b[KV_GROUPS_MAX];
} entry_blocks;

/* store_fill_fn: gathers each block's layers into the entry's payload. */
static void fill_blocks(const void *user, uint8_t *payload, size_t len)
{
    const entry_blocks *e = user;
    const size_t bb = e->pool->g.block_bytes;
    assert(len == e->n * bb);
    (void)len;
    for (uint32_t g = 0; g < e->n; g++) kv_block_save(e->pool, e->b[g], payload + g * bb);
}

void store_kv_publish(store *st, const kv_pool *pool, const kv_seq *seq, const int32_t *tokens, uint32_t base,
                      uint32_t from, uint32_t to, const uint64_t parent[2])
{
    const uint32_t t = pool->g.s.block_size;
    uint64_t par[2] = {parent[0], parent[1]};
    for (uint32_t i = from; i < to && i >= base && i - base < seq->n_blocks; i++) {
        uint32_t b = seq->table[i - base];
        const kv_block *k = &pool->blocks[b];
        if (!(k->flags & KV_BLOCK_HASHED)) return;
        const entry_blocks e = {.pool = pool, .n = 1, .b = {b}};
        store_put_block_fill(st, k->hash, par, tokens + (size_t)(i - base) * t, fill_blocks, &e);
        par[0] = k->hash[0];
        par[1] = k->hash[1];
    }
}

void store_kv_publish_groups(store *st, const kv_pool *pool, const kv_seq *seq, const kv_glocal *lg,
                             uint32_t n_groups, const int32_t *tokens, uint32_t from, uint32_t to,
                             const uint64_t parent[2])
{
    const uint32_t t = pool->g.s.block_size;
    assert(n_groups >= 1 && n_groups <= KV_GROUPS_MAX);
    uint64_t par[2] = {parent[0], parent[1]};
    for (uint32_t i = from; i < to && i < seq->n_blocks; i++) {
        const uint32_t b = seq->table[i];
        const kv_block *k = &pool->blocks[b];
        if (!(k->flags & KV_BLOCK_HASHED)) return;
        bool held = i >= lg->dropped;
        for (uint32_t g = 1; held && g < n_groups; g++) held = i - lg->dropped < lg->t[g - 1].n_blocks;
        if (held) {
            entry_blocks e = {.pool = pool, .n = n_groups, .b = {b}};
            for (uint32_t g = 1; g < n_groups; g++) e.b[g] = lg->t[g - 1].table[i - lg->dropped];
            store_put_block_fill(st, k->hash, par, tokens + (size_t)i * t, fill_blocks, &e);
        }
        par[0] = k->hash[0];
        par[1] = k->hash[1];
    }
}

uint32_t store_kv_load(prefix_cache *pc, kv_seq *seq, prefix_cursor *cur, const int32_t *tokens,
                       const uint8_t *const *blocks, uint32_t n, uint32_t reserve)
{
    kv_pool *pool = pc->pool;
    const uint32_t t = pool->g.s.block_size;
    uint32_t done = 0;
    if (seq->mode != KV_SEQ_PAGED || seq->n_tokens != cur->n_blocks * t) return 0;
    while (done < n && kv_pool_available(pool) > reserve && seq->n_tokens + t <= seq->max_ctx) {
        uint32_t b;
        if (kv_pool_alloc_next(pool, kv_seq_last_block(seq), &b) != 0) break;
        kv_block_load(pool, b, blocks[done]);
        int rc = kv_seq_push_block(seq, b); /* takes a reference of its own */
        kv_pool_decref(pool, b);
        if (rc) break;
        done++;
    }
    if (done) prefix_register(pc, seq, tokens, cur);
    return done;
}
