/* rt_groups.c - layer groups in a context (kv/kv_groups.h): the plan, a
 * sequence's local tables beside its global one (rt_seq.kv), the batch the
 * forward pass reads them from, and the prefix cache across groups.
 *
 * A prefix hit across groups. The global group's chain gives k full
 * blocks; a local group can use the hit only if it still holds the blocks
 * of the window before position kT (those behind it were dropped and may
 * have been evicted since). So k shrinks to the highest block some local
 * group misses, until all hold [d(k), k), d(k) the blocks the window no
 * longer needs at kT (kv_glocal_drop_count from an empty table). The hit
 * is whole blocks: a global tail copy would have no local partner.
 */
#include "runtime/rt_impl.h"

#include <string.h>

#include "base/err.h"

#include <xxhash.h>

void rt_groups_plan(rt_ctx *c)
{
    const model_config *mc = &c->m->cfg;
    const rt_params *p = &c->p;
    memset(&c->kg, 0, sizeof c->kg);
    if (!p->layer_groups || !mc->local_window || p->no_kv_cache || p->layout != KV_SEQ_PAGED || p->kv_window ||
        p->swa || kv_dtype_staged(p->dtype) || mc->mla.kv_lora_rank || mc->n_layers > KV_GROUPS_MAX_LAYERS)
        return;
    bool local[KV_GROUPS_MAX_LAYERS];
    for (uint32_t l = 0; l < mc->n_layers; l++) local[l] = model_config_layer_local(mc, l);
    kv_groups_plan(&c->kg, mc->n_layers, local, mc->local_window);
    /* a window that never binds frees nothing: one table is the same */
    if (c->kg.window >= p->n_ctx) memset(&c->kg, 0, sizeof c->kg);
}

static uint32_t groups_first_block(const rt_ctx *c, uint32_t n)
{
    return kv_groups_first_block(&c->kg, c->p.block_size, n);
}

const fwd_groups *rt_groups_batch(rt_ctx *c, const rt_run_item *it, int n)
{
    if (!rt_groups_on(c)) return NULL;
    const uint32_t T = c->p.block_size;
    int t = 0;
    for (int i = 0; i < n; i++) {
        const rt_seq *s = it[i].s;
        for (uint32_t g = 1; g < c->kg.n_groups; g++) {
            const kv_seq *k = &s->lg.t[g - 1];
            c->b_gseqs[(size_t)(g - 1) * (size_t)n + (size_t)i] = (kv_batch_seq){k->table, k->n_blocks, NULL};
        }
        for (uint32_t j = 0; j < it[i].n; j++) c->b_gslot[t++] = (int32_t)(it[i].from + j - s->lg.dropped * T);
    }
    c->b_groups = (fwd_groups){&c->kg, c->b_gseqs, c->b_gslot};
    return &c->b_groups;
}

int rt_groups_append(rt_ctx *c, rt_seq *s, uint32_t n)
{
    const uint32_t at = s->kv.n_tokens;
    if (!rt_groups_on(c)) return kv_seq_append(&s->kv, n);
    const int64_t need = (int64_t)kv_seq_append_cost(&s->kv, n) + kv_glocal_append_cost(&c->kg, &s->lg, at, n);
    if (need > (int64_t)kv_pool_available(&c->pool))
        return err_set(PL_EFULL, "KV pool full: %lld blocks needed over %u layer groups, %u available of %u",
                       (long long)need, c->kg.n_groups, kv_pool_available(&c->pool), c->pool.n_blocks);
    /* the local drop first: what it frees may serve the global append */
    int rc = kv_glocal_append(&s->lg, &c->kg, at, n);
    if (!rc) {
        rc = kv_seq_append(&s->kv, n);
        if (rc) kv_glocal_truncate(&s->lg, &c->kg, at);
    }
    return rc;
}

void rt_groups_cut(rt_ctx *c, rt_seq *s, uint32_t n)
{
    if (!rt_groups_on(c)) return;
    if (n == 0) { /* empty: the tables restart at position 0 */
        kv_glocal_truncate(&s->lg, &c->kg, s->lg.dropped * c->p.block_size);
        s->lg.dropped = 0;
    } else {
        assert(kv_glocal_holds_window(&c->kg, &s->lg, n));
        if (s->lg.t[0].n_tokens + s->lg.dropped * c->p.block_size > n) kv_glocal_truncate(&s->lg, &c->kg, n);
    }
    for (uint32_t g = 1; c->prefix_ok && g < c->kg.n_groups; g++) prefix_cursor_truncate(&c->pc, &s->lcur[g - 1], n);
}

/* The whole blocks of tokens[0, n) every group can serve (see the top). */
static uint32_t groups_hit_blocks(const rt_ctx *c, const int32_t *tokens, uint32_t n)
{
    const uint32_t T = c->p.block_size;
    uint32_t k = prefix_match_len(&c->pc, tokens, n) / T;
    for (uint32_t g = 1; g < c->kg.n_groups && k > 0;) {
        uint64_t root[2];
        prefix_group_root(g, root);
        const int64_t miss = prefix_range_missing(&c->pc, root, tokens, groups_first_block(c, k * T), k);
        if (miss < 0) {
            g++;
            continue;
        }
        k = (uint32_t)miss;
        g = 1; /* a shorter hit moves the window: every group again */
    }
    return k;
}

uint32_t rt_groups_peek(const rt_ctx *c, const int32_t *tokens, uint32_t n)
{
    return groups_hit_blocks(c, tokens, n) * c->p.block_size;
}

int rt_groups_attach(rt_ctx *c, rt_seq *s, const int32_t *tokens, uint32_t n, bool is_recompute)
{
    const uint32_t T = c->p.block_size, k = groups_hit_blocks(c, tokens, n);
    /* the global group's lookup capped at k blocks (no tail copy), counted
     * as a lookup of all n tokens */
    const uint32_t cap = n > k * T + 1 ? k * T + 1 : n;
    uint32_t hit = 0;
    int rc = prefix_attach(&c->pc, &s->kv, tokens, cap, is_recompute, &s->pcur, &hit);
    if (rc) return rc;
    if (n > cap) prefix_count_missed(&c->pc, n - cap, is_recompute);
    assert(hit == k * T); /* n - 1 <= k T: no tail copy */
    const uint32_t d = groups_first_block(c, hit);
    for (uint32_t g = 1; g < c->kg.n_groups && hit; g++)
        prefix_attach_range(&c->pc, &s->lg.t[g - 1], tokens, d, k, &s->lcur[g - 1]);
    s->lg.dropped = hit ? d : 0;
    return (int)hit;
}

void rt_groups_publish(rt_ctx *c, rt_seq *s)
{
    const uint32_t d = s->lg.dropped;
    for (uint32_t g = 1; g < c->kg.n_groups; g++)
        prefix_register_at(&c->pc, &s->lg.t[g - 1], s->tokens + (size_t)d * c->p.block_size, d, &s->lcur[g - 1]);
}

void rt_groups_fingerprint(const rt_ctx *c, uint64_t fp[2])
{
    const kv_groups *g = &c->kg;
    uint64_t buf[6 + 2 * KV_GROUPS_MAX_LAYERS / 4], *p = buf; /* a tag, fp, the geometry, then the layer map */
    *p++ = UINT64_C(0x67726f7570733031); /* "groups01" */
    *p++ = fp[0];
    *p++ = fp[1];
    *p++ = (uint64_t)g->n_groups << 32 | g->slots;
    *p++ = (uint64_t)g->window << 32 | g->n_layers;
    *p++ = (uint64_t)g->n_global << 32 | g->n_local;
    for (uint32_t l = 0; l < g->n_layers; l += 4) { /* 4 layers a word: group (8 bits), slot (8 of its 16) */
        uint64_t w = 0;
        for (uint32_t j = 0; j < 4 && l + j < g->n_layers; j++)
            w |= ((uint64_t)g->group[l + j] << 8 | (g->slot[l + j] & 0xffu)) << (16 * j);
        *p++ = w;
    }
    XXH128_hash_t h = XXH3_128bits(buf, (size_t)(p - buf) * sizeof *buf);
    fp[0] = h.low64;
    fp[1] = h.high64;
}

/* The blocks a load of j more blocks after k0 takes: j global ones, and in
 * each local group those of [max(d(k0 + j), k0), k0 + j) (the drop of the
 * front frees some too; not counted). */
static uint64_t groups_load_cost(const rt_ctx *c, uint32_t k0, uint32_t j)
{
    const uint32_t k1 = k0 + j, d1 = groups_first_block(c, k1 * c->p.block_size), from = d1 > k0 ? d1 : k0;
    return j + (uint64_t)(c->kg.n_groups - 1) * (k1 - from);
}

/* Pushes a fresh pool block holding `bytes` onto t. */
static int groups_push_copy(kv_pool *pool, kv_seq *t, const uint8_t *bytes)
{
    uint32_t b;
    int rc = kv_pool_alloc_next(pool, kv_seq_last_block(t), &b);
    if (rc) return rc;
    kv_block_load(pool, b, bytes);
    rc = kv_seq_push_block(t, b); /* takes a reference of its own */
    kv_pool_decref(pool, b);
    return rc;
}

uint32_t rt_groups_load(rt_ctx *c, rt_seq *s, const int32_t *tokens, const uint8_t *const *blocks, uint32_t n,
                        uint32_t reserve)
{
    kv_pool *pool = &c->pool;
    const uint32_t T = c->p.block_size, ng = c->kg.n_groups, k0 = s->kv.n_blocks, d0 = s->lg.dropped;
    const size_t bb = pool->g.block_bytes;
    if (s->kv.mode != KV_SEQ_PAGED || s->kv.n_tokens != k0 * T || s->lg.t[0].n_tokens != (k0 - d0) * T) return 0;
    uint32_t j = n;
    if ((uint64_t)(k0 + j) * T > s->kv.max_ctx) j = s->kv.max_ctx / T - k0;
    const uint64_t avail = kv_pool_available(pool), keep = (uint64_t)reserve * ng;
    while (j > 0 && groups_load_cost(c, k0, j) + keep > avail) j--;
    if (j == 0) return 0;
    const uint32_t k1 = k0 + j, d1 = groups_first_block(c, k1 * T), from = d1 > k0 ? d1 : k0;
    int rc = 0;
    for (uint32_t i = k0; i < k1 && !rc; i++) {
        const uint8_t *e = blocks[i - k0];
        rc = groups_push_copy(pool, &s->kv, e);
        for (uint32_t g = 1; g < ng && !rc && i >= from; g++) rc = groups_push_copy(pool, &s->lg.t[g - 1], e + g * bb);
    }
    if (rc) { /* not expected (the cost was checked): back to what s held */
        kv_seq_truncate(&s->kv, k0 * T);
        for (uint32_t g = 1; g < ng; g++) kv_seq_truncate(&s->lg.t[g - 1], (k0 - d0) * T);
        return 0;
    }
    /* the local front the window no longer needs at k1 T: [d0, min(d1, k0)) */
    const uint32_t drop = (d1 < k0 ? d1 : k0) - d0;
    for (uint32_t g = 1; g < ng && drop; g++) {
        rc = kv_seq_drop_front(&s->lg.t[g - 1], drop);
        assert(rc == 0);
    }
    s->lg.dropped = d1;
    prefix_register(&c->pc, &s->kv, tokens, &s->pcur);
    for (uint32_t g = 1; g < ng; g++) {
        prefix_cursor_advance(&c->pc, &s->lcur[g - 1], tokens, d1);
        prefix_register_at(&c->pc, &s->lg.t[g - 1], tokens + (size_t)d1 * T, d1, &s->lcur[g - 1]);
    }
    return j;
}
