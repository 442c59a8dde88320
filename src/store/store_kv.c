/* store_kv.c - publish and load full KV blocks; see store_kv.h. */
#include "store/store_kv.h"

#include <string.h>

void store_kv_publish(store *st, const kv_pool *pool, const kv_seq *seq, const int32_t *tokens, uint32_t base,
                      uint32_t from, uint32_t to, const uint64_t parent[2], uint8_t *scratch)
{
    const uint32_t t = pool->g.s.block_size;
    uint64_t par[2] = {parent[0], parent[1]};
    for (uint32_t i = from; i < to && i >= base && i - base < seq->n_blocks; i++) {
        uint32_t b = seq->table[i - base];
        const kv_block *k = &pool->blocks[b];
        if (!(k->flags & KV_BLOCK_HASHED)) return;
        kv_block_save(pool, b, scratch);
        store_put_block(st, k->hash, par, tokens + (size_t)(i - base) * t, scratch);
        par[0] = k->hash[0];
        par[1] = k->hash[1];
    }
}

void store_kv_publish_groups(store *st, const kv_pool *pool, const kv_seq *seq, const kv_glocal *lg,
                             uint32_t n_groups, const int32_t *tokens, uint32_t from, uint32_t to,
                             const uint64_t parent[2], uint8_t *scratch)
{
    const uint32_t t = pool->g.s.block_size;
    const size_t bb = pool->g.block_bytes;
    uint64_t par[2] = {parent[0], parent[1]};
    for (uint32_t i = from; i < to && i < seq->n_blocks; i++) {
        const uint32_t b = seq->table[i];
        const kv_block *k = &pool->blocks[b];
        if (!(k->flags & KV_BLOCK_HASHED)) return;
        bool held = i >= lg->dropped;
        for (uint32_t g = 1; held && g < n_groups; g++) held = i - lg->dropped < lg->t[g - 1].n_blocks;
        if (held) {
            kv_block_save(pool, b, scratch);
            for (uint32_t g = 1; g < n_groups; g++)
                kv_block_save(pool, lg->t[g - 1].table[i - lg->dropped], scratch + g * bb);
            store_put_block(st, k->hash, par, tokens + (size_t)i * t, scratch);
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
        if (kv_pool_alloc(pool, &b) != 0) break;
        kv_block_load(pool, b, blocks[done]);
        int rc = kv_seq_push_block(seq, b); /* takes a reference of its own */
        kv_pool_decref(pool, b);
        if (rc) break;
        done++;
    }
    if (done) prefix_register(pc, seq, tokens, cur);
    return done;
}
