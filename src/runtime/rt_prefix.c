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

int rt_seq_attach_prefix(rt_ctx *c, int32_t id, const int32_t *tokens, uint32_t n, bool is_recompute)
{
    rt_seq *s = rt_seq_get(c, id);
    if (!s) return err_set(PL_EINVAL, "sequence %d does not exist", id);
    if (s->n_tokens != 0) return err_set(PL_EINVAL, "prefix attach to a non-empty sequence %d", id);
    if (!c->prefix_ok) return 0; /* static layout or no-kv-cache mode: nothing is cached */
    /* the rest streams through the window (kv_window, or SWA's n_ctx slots) */
    if (c->p.kv_window && n > rt_window_limit(&c->p)) n = rt_window_limit(&c->p);
    if (n > c->p.n_ctx) n = c->p.n_ctx;
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
    return c->prefix_ok ? prefix_match_len(&c->pc, tokens, n) : 0;
}

const prefix_cache *rt_ctx_prefix_cache(const rt_ctx *c) { return c->prefix_ok ? &c->pc : NULL; }

void rt_seq_publish(rt_ctx *c, rt_seq *s)
{
    if (!c->prefix_ok) return;
    if (c->p.swa) /* positions are absolute: the chain goes on past the front drops */
        prefix_register_at(&c->pc, &s->kv, s->tokens, (uint32_t)(s->n_dropped / c->p.block_size), &s->pcur);
    else if (!s->shifted)
        prefix_register(&c->pc, &s->kv, s->tokens, &s->pcur);
}
