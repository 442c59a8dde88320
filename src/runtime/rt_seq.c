/* rt_seq.c - sequence slots: a new sequence, its end, its length and
 * history, truncation and fork.
 *
 * A live slot owns its block table (kv), its history (tokens[n_ctx]), its
 * stage (staged dtypes) and its prefix cursor; a fork copies all four,
 * sharing the blocks (copy-on-write) and the staged rows of the partly
 * filled block. Every function that fails leaves the slot as it was.
 */
#include "runtime/rt_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"

/* A free slot's history and stage, or PL_ENOMEM with the slot untouched. */
static int slot_alloc(rt_ctx *c, rt_seq *s)
{
    s->tokens = mem_calloc(c->p.n_ctx, sizeof *s->tokens);
    if (!s->tokens) return PL_ENOMEM;
    int rc = kv_stage_init(&s->stage, &c->pool.g);
    if (rc) {
        free(s->tokens);
        s->tokens = NULL;
    }
    return rc;
}

static void slot_release(rt_seq *s)
{
    kv_stage_free(&s->stage);
    free(s->tokens);
    s->tokens = NULL;
}

/* The first free slot, or -1. */
static int32_t slot_free_find(const rt_ctx *c)
{
    for (uint32_t i = 0; i < c->p.max_seqs; i++)
        if (!c->seqs[i].alive) return (int32_t)i;
    return -1;
}

int rt_seq_new(rt_ctx *c, int32_t *out)
{
    const int32_t id = slot_free_find(c);
    if (id < 0) return err_set(PL_EFULL, "all %u sequence slots are in use", c->p.max_seqs);
    rt_seq *s = &c->seqs[id];
    int rc = slot_alloc(c, s);
    if (!rc) rc = kv_seq_init(&s->kv, &c->pool, c->p.n_ctx, c->p.layout);
    if (!rc && rt_groups_on(c)) {
        rc = kv_glocal_init(&s->lg, &c->kg, &c->pool, c->p.n_ctx);
        if (rc) kv_seq_free(&s->kv);
    }
    if (rc) {
        if (s->tokens) slot_release(s);
        return rc;
    }
    for (uint32_t g = 1; g < c->kg.n_groups; g++) { /* each local group's chain has its own root */
        uint64_t root[2];
        prefix_group_root(g, root);
        prefix_cursor_init_root(&s->lcur[g - 1], root);
    }
    s->stage_end = 0;
    s->alive = true;
    s->n_tokens = 0;
    s->n_dropped = 0;
    s->shifted = false;
    prefix_cursor_init(&s->pcur);
    *out = id;
    return 0;
}

void rt_seq_free(rt_ctx *c, int32_t id)
{
    rt_seq *s = rt_seq_get(c, id);
    if (!s) return;
    kv_seq_free(&s->kv);
    if (rt_groups_on(c)) kv_glocal_free(&s->lg, &c->kg);
    slot_release(s);
    memset(s, 0, sizeof *s);
}

uint32_t rt_seq_len(const rt_ctx *c, int32_t id)
{
    const rt_seq *s = rt_seq_get(c, id);
    return s ? s->n_tokens : 0;
}

const int32_t *rt_seq_tokens(const rt_ctx *c, int32_t id)
{
    const rt_seq *s = rt_seq_get(c, id);
    return s ? s->tokens : NULL;
}

const kv_seq *rt_seq_kv(const rt_ctx *c, int32_t id)
{
    const rt_seq *s = rt_seq_get(c, id);
    return s ? &s->kv : NULL;
}

const kv_glocal *rt_seq_kv_local(const rt_ctx *c, int32_t id)
{
    const rt_seq *s = rt_seq_get(c, id);
    return s && rt_groups_on(c) ? &s->lg : NULL;
}

/* Layer groups: a truncation to n whose window the local tables dropped
 * already is redone from the history (the prefix cache serves what it
 * still holds), so that every group holds what position n needs. */
static int truncate_recompute(rt_ctx *c, rt_seq *s, int32_t id, uint32_t n)
{
    int32_t *hist = mem_calloc(n ? n : 1, sizeof *hist);
    if (!hist) return err_set(PL_ENOMEM, "out of memory truncating sequence %d", id);
    memcpy(hist, s->tokens, (size_t)n * sizeof *hist);
    if (c->prefix_ok) prefix_cursor_truncate(&c->pc, &s->pcur, 0);
    rt_seq_kv_cut(c, s, 0);
    s->n_tokens = 0;
    int rc = n ? rt_seq_append(c, id, hist, n, NULL) : 0;
    free(hist);
    return rc;
}

uint64_t rt_seq_dropped(const rt_ctx *c, int32_t id)
{
    const rt_seq *s = rt_seq_get(c, id);
    return s ? s->n_dropped : 0;
}

int rt_seq_truncate(rt_ctx *c, int32_t id, uint32_t n)
{
    rt_seq *s = rt_seq_get(c, id);
    if (!s) return err_set(PL_EINVAL, "sequence %d does not exist", id);
    if (n > s->n_tokens) return err_set(PL_ERANGE, "truncate to %u > length %u", n, s->n_tokens);
    if (rt_groups_on(c) && !kv_glocal_holds_window(&c->kg, &s->lg, n)) return truncate_recompute(c, s, id, n);
    /* the cursor counts blocks from absolute position 0 (SWA's front drops included) */
    if (c->prefix_ok) prefix_cursor_truncate(&c->pc, &s->pcur, n + (c->p.swa ? (uint32_t)s->n_dropped : 0));
    if (!c->p.no_kv_cache) rt_seq_kv_cut(c, s, n);
    s->n_tokens = n;
    if (s->shifted && n <= rt_window_sink_blocks(&c->p) * c->p.block_size) {
        /* only sink tokens are left, at their original positions (SWA: none, positions restart) */
        s->shifted = false;
        s->n_dropped = 0;
        if (c->p.swa) prefix_cursor_init(&s->pcur);
    }
    return 0;
}

int rt_seq_fork(rt_ctx *c, int32_t parent, int32_t *child)
{
    const rt_seq *p = rt_seq_get(c, parent);
    if (!p) return err_set(PL_EINVAL, "sequence %d does not exist", parent);
    if (c->p.no_kv_cache) return err_set(PL_EUNSUPPORTED, "fork is not available in no-kv-cache mode");
    const int32_t id = slot_free_find(c);
    if (id < 0) return err_set(PL_EFULL, "all %u sequence slots are in use", c->p.max_seqs);
    rt_seq *s = &c->seqs[id];
    int rc = slot_alloc(c, s);
    if (rc) return rc;
    rc = kv_seq_fork(&s->kv, &p->kv);
    if (!rc && rt_groups_on(c)) {
        rc = kv_glocal_fork(&s->lg, &p->lg, &c->kg);
        if (rc) kv_seq_free(&s->kv);
    }
    if (rc) {
        slot_release(s);
        return rc;
    }
    memcpy(s->lcur, p->lcur, sizeof s->lcur);
    kv_stage_copy(&s->stage, &p->stage); /* the child's partly filled block is the parent's */
    s->stage_end = p->stage_end;
    memcpy(s->tokens, p->tokens, p->n_tokens * sizeof *s->tokens);
    s->n_tokens = p->n_tokens;
    s->pcur = p->pcur;
    s->n_dropped = p->n_dropped;
    s->shifted = p->shifted;
    s->alive = true;
    *child = id;
    return 0;
}
