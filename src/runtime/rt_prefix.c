/* rt_prefix.c - the context's prefix cache (src/kv/prefix_cache.h): an
 * empty sequence takes the longest cached prefix of its prompt, and every
 * block a forward pass fills is published for later prompts.
 *
 * The cache exists with the paged layout and a KV cache only (prefix_ok).
 * A kv_window sequence that has dropped blocks (shifted) publishes nothing:
 * its blocks are not at the positions their keys name. An SWA sequence
 * keeps publishing across its front drops (positions stay absolute: its
 * cursor's chain runs from position 0; rt_window.c). A prefix never
 * exceeds what a sequence holds at once: n_ctx, or the window's limit.
 */
#include "runtime/rt_impl.h"

#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "store/store_kv.h"

/* What a prefix may cover of an n-token prompt: the rest streams through
 * the window (kv_window, or SWA's n_ctx slots). */
static uint32_t rt_prefix_cap(const rt_ctx *c, uint32_t n)
{
    if (c->p.kv_window && n > rt_window_limit(&c->p)) n = rt_window_limit(&c->p);
    return n > c->p.n_ctx ? c->p.n_ctx : n;
}

int rt_seq_attach_prefix(rt_ctx *c, int32_t id, const int32_t *tokens, uint32_t n, bool is_recompute)
{
    rt_seq *s = rt_seq_get(c, id);
    if (!s) return err_set(PL_EINVAL, "sequence %d does not exist", id);
    if (s->n_tokens != 0) return err_set(PL_EINVAL, "prefix attach to a non-empty sequence %d", id);
    if (!c->prefix_ok) return 0; /* static layout or no-kv-cache mode: nothing is cached */
    n = rt_prefix_cap(c, n);
    if (rt_groups_on(c)) {
        int hit = rt_groups_attach(c, s, tokens, n, is_recompute);
        if (hit < 0) return hit;
        memcpy(s->tokens, tokens, (size_t)hit * sizeof *tokens);
        s->n_tokens = (uint32_t)hit;
        return hit;
    }
    uint32_t hit = 0;
    int rc = prefix_attach(&c->pc, &s->kv, tokens, n, is_recompute, &s->pcur, &hit);
    if (rc) return rc;
    /* The hit tokens equal tokens that some sequence ran, so they are valid ids. */
    memcpy(s->tokens, tokens, hit * sizeof *tokens);
    s->n_tokens = hit;
    return (int)hit;
}

uint32_t rt_prefix_peek(const rt_ctx *c, const int32_t *tokens, uint32_t n)
{
    if (c->prefix_ok && rt_groups_on(c)) return rt_groups_peek(c, tokens, n);
    return c->prefix_ok ? prefix_match_len(&c->pc, tokens, n) : 0;
}

const prefix_cache *rt_ctx_prefix_cache(const rt_ctx *c) { return c->prefix_ok ? &c->pc : NULL; }

void rt_seq_publish(rt_ctx *c, rt_seq *s)
{
    if (!c->prefix_ok) return;
    const prefix_cursor before = s->pcur;
    uint32_t base = 0;
    if (c->p.swa) { /* positions are absolute: the chain goes on past the front drops */
        base = (uint32_t)(s->n_dropped / c->p.block_size);
        prefix_register_at(&c->pc, &s->kv, s->tokens, base, &s->pcur);
    } else if (!s->shifted) {
        prefix_register(&c->pc, &s->kv, s->tokens, &s->pcur);
    }
    if (rt_groups_on(c)) rt_groups_publish(c, s);
    /* write-behind of what the cursor newly covers (a restarted cursor re-walks: the store skips repeats) */
    if (!c->st || s->pcur.n_blocks <= before.n_blocks) return;
    if (rt_groups_on(c)) /* no SWA nor window with groups: base 0 */
        store_kv_publish_groups(c->st, &c->pool, &s->kv, &s->lg, c->kg.n_groups, s->tokens, before.n_blocks,
                                s->pcur.n_blocks, before.hash);
    else
        store_kv_publish(c->st, &c->pool, &s->kv, s->tokens, base, before.n_blocks, s->pcur.n_blocks, before.hash);
}

void rt_ctx_set_store(rt_ctx *c, store *st) { c->st = c->prefix_ok ? st : NULL; }

uint64_t rt_ctx_tier_block_bytes(const rt_ctx *c)
{
    return c->pool.g.block_bytes * (rt_groups_on(c) ? c->kg.n_groups : 1);
}

uint32_t rt_prefix_chain(const rt_ctx *c, const int32_t *tokens, uint32_t n, uint64_t (*keys)[2], uint32_t *in_ram)
{
    *in_ram = 0;
    n = c->prefix_ok ? rt_prefix_cap(c, n) : 0;
    if (n <= 1) return 0;
    uint32_t nb = (n - 1) / c->p.block_size;
    *in_ram = prefix_chain_keys(&c->pc, tokens, nb, keys);
    if (rt_groups_on(c)) { /* what every group serves from RAM: the local windows may lack blocks */
        const uint32_t k = rt_groups_peek(c, tokens, n) / c->p.block_size;
        if (k < *in_ram) *in_ram = k;
    }
    return nb;
}

int rt_seq_attach_tiered(rt_ctx *c, int32_t id, const int32_t *tokens, uint32_t n, bool is_recompute, uint32_t first,
                         const uint8_t *const *blocks, uint32_t n_blocks, uint32_t reserve, uint32_t *n_loaded)
{
    *n_loaded = 0;
    int hit = rt_seq_attach_prefix(c, id, tokens, n, is_recompute);
    if (hit < 0 || !c->prefix_ok) return hit;
    rt_seq *s = rt_seq_get(c, id);
    const uint32_t T = c->p.block_size, k = (uint32_t)hit / T;
    /* the RAM may have lost blocks since the lookup began (a gap: unusable), or gained them all */
    if (k < first || k >= first + n_blocks) return hit;
    if ((uint32_t)hit % T) { /* a tail copy: whole tier blocks serve more */
        rt_seq_kv_cut(c, s, k * T);
        s->n_tokens = k * T;
    }
    const uint32_t skip = k - first;
    const uint32_t got = rt_groups_on(c) ? rt_groups_load(c, s, tokens, blocks + skip, n_blocks - skip, reserve)
                                         : store_kv_load(&c->pc, &s->kv, &s->pcur, tokens, blocks + skip,
                                                         n_blocks - skip, reserve);
    if (got == 0 && (uint32_t)hit % T) return (int)(k * T);
    s->n_tokens = s->kv.n_tokens;
    memcpy(s->tokens, tokens, s->n_tokens * sizeof *tokens);
    *n_loaded = got;
    return (int)s->n_tokens;
}
