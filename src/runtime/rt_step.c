/* rt_step.c - running tokens through the model: one batched forward pass
 * over several sequences (rt_step, the engine's step), and one sequence's
 * append in chunks of max_batch (rt_seq_append, rt_seq_append_all).
 *
 * A forward pass first reserves every item's KV slots (kv_seq_append:
 * copy-on-write where blocks are shared), all or nothing, then builds the
 * ragged batch (token ids, positions, sequence of each row, block tables)
 * and runs it; if it fails the slots are given back. The history
 * (rt_seq.tokens) is written before the pass and counted (n_tokens) after
 * it, so a failed append leaves the sequence as it was. An append without
 * a window fails before running anything past n_ctx; with one it runs in
 * pieces (rt_window.c).
 */
#include "runtime/rt_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* SWA's window and the absolute position of slot 0 (a kv_window's drops
 * compact positions: 0). */
fwd_seq rt_seq_fwd(const rt_ctx *c, const rt_seq *s, kv_stage *stage)
{
    return (fwd_seq){.kv = {s->kv.table, s->kv.n_blocks, stage}, .pos0 = c->p.swa ? (uint32_t)s->n_dropped : 0,
                     .window = c->p.swa};
}

/* Fills the batch scratch from the items; returns the rows that want logits. */
static int batch_build(rt_ctx *c, const rt_run_item *it, int n_items, int *n_rows)
{
    int t = 0, n_logits = 0;
    for (int i = 0; i < n_items; i++) {
        rt_seq *s = it[i].s;
        /* a staged sequence's stage holds the rows its next write continues (rt_stage.c) */
        assert(!s->stage.rows || it[i].from % c->p.block_size == 0 ||
               (s->stage_end >= it[i].from && (s->stage_end - 1) / c->p.block_size == it[i].from / c->p.block_size));
        c->b_fseq[i] = rt_seq_fwd(c, s, s->stage.rows ? &s->stage : NULL);
        c->b_fseq[i].pool = it[i].pool;
        c->b_fseq[i].pool_kind = it[i].pool_kind;
        for (uint32_t j = 0; j < it[i].n; j++, t++) {
            c->b_tok[t] = s->tokens[it[i].from + j];
            c->b_pos[t] = (int32_t)(it[i].from + j);
            c->b_seq[t] = i;
        }
        if (it[i].all)
            for (uint32_t j = 0; j < it[i].n; j++) c->b_lidx[n_logits++] = t - (int)it[i].n + (int)j;
        else if (it[i].logits)
            c->b_lidx[n_logits++] = t - 1;
    }
    assert(t <= (int)c->p.max_batch);
    *n_rows = t;
    return n_logits;
}

int rt_run(rt_ctx *c, const rt_run_item *it, int n_items)
{
    int rc = 0, k = 0;
    for (; k < n_items && !rc; k++) {
        assert(it[k].s->kv.n_tokens == it[k].from);
        rc = rt_groups_append(c, it[k].s, it[k].n);
    }
    if (rc) { /* undo the reservations that succeeded */
        for (int i = 0; i < k - 1; i++) kv_seq_truncate(&it[i].s->kv, it[i].from), rt_groups_cut(c, it[i].s, it[i].from);
        return rc;
    }
    int t;
    const int n_logits = batch_build(c, it, n_items, &t);
    fwd_batch b = {t, c->b_tok, c->b_pos, c->b_seq, c->b_fseq, n_items, c->b_lidx, n_logits,
                   rt_groups_batch(c, it, n_items)};
    /* a lone all-logits item takes its rows straight into the caller's buffer */
    const bool direct = n_items == 1 && it[0].all;
    if (!direct && (uint32_t)n_logits > c->b_logits_rows) { /* all-logits items beside others (prompt logprobs) */
        float *l = realloc(c->b_logits, (size_t)n_logits * c->m->cfg.n_vocab * sizeof *l);
        if (!l) rc = err_set(PL_ENOMEM, "out of memory for %d rows of logits", n_logits);
        else c->b_logits = l, c->b_logits_rows = (uint32_t)n_logits;
    }
    if (!rc) rc = model_forward(c->m, c->fs, &c->pool, &b, direct ? it[0].logits : c->b_logits);
    if (rc) {
        for (int i = 0; i < n_items; i++) kv_seq_truncate(&it[i].s->kv, it[i].from), rt_groups_cut(c, it[i].s, it[i].from);
        return rc;
    }
    for (int i = 0; i < n_items; i++) it[i].s->stage_end = it[i].from + it[i].n;
    const size_t nv = c->m->cfg.n_vocab;
    if (direct) return 0;
    for (int i = 0, l = 0; i < n_items; i++) {
        const uint32_t rows = it[i].all ? it[i].n : it[i].logits ? 1 : 0;
        if (rows) memcpy(it[i].logits, c->b_logits + (size_t)l * nv, rows * nv * sizeof(float));
        l += (int)rows;
    }
    return 0;
}

/* Runs tokens[from, to) of s's history through the model in chunks of
 * max_batch; only the last chunk asks for logits. */
static int run_range(rt_ctx *c, rt_seq *s, uint32_t from, uint32_t to, float *logits)
{
    for (uint32_t at = from; at < to;) {
        uint32_t n = to - at < c->p.max_batch ? to - at : c->p.max_batch;
        rt_run_item it = {.s = s, .from = at, .n = n, .logits = at + n == to ? logits : NULL};
        int rc = rt_run(c, &it, 1);
        if (rc) return rc;
        at += n;
    }
    return 0;
}

int rt_tokens_check(const rt_ctx *c, const rt_seq *s, int32_t id, const int32_t *tokens, size_t n)
{
    if (!s) return err_set(PL_EINVAL, "sequence %d does not exist", id);
    if (n == 0) return err_set(PL_EINVAL, "append of 0 tokens");
    if (!rt_ctx_slides(c) && n > c->p.n_ctx - s->n_tokens) /* a window runs any length in pieces */
        return err_set(PL_ERANGE, "sequence of %u tokens + %zu new would exceed the context of %u tokens",
                       s->n_tokens, n, c->p.n_ctx);
    const uint32_t nv = c->m->cfg.n_vocab;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= nv)
            return err_set(PL_EINVAL, "token %zu: id %d out of range 0..%u", i, tokens[i], nv - 1);
    return 0;
}

int rt_step(rt_ctx *c, const rt_item *items, int n_items)
{
    rt_run_item it[RT_STEP_MAX_ITEMS];
    uint32_t total = 0;
    if (n_items <= 0 || n_items > RT_STEP_MAX_ITEMS || (uint32_t)n_items > c->p.max_seqs)
        return err_set(PL_EINVAL, "rt_step: %d items (1..%u)", n_items, c->p.max_seqs);
    if (c->p.no_kv_cache) return err_set(PL_EUNSUPPORTED, "rt_step: not available in no-kv-cache mode");
    const bool slides = rt_ctx_slides(c);
    for (int i = 0; i < n_items; i++) {
        rt_seq *s = rt_seq_get(c, items[i].seq);
        int rc = rt_tokens_check(c, s, items[i].seq, items[i].tokens, items[i].n);
        if (!rc && slides && items[i].n > rt_win_max_piece(c, s))
            rc = err_set(PL_ERANGE, "rt_step: %u tokens for sequence %d, at most %u fit its window now", items[i].n,
                         items[i].seq, rt_win_max_piece(c, s));
        if (rc) return rc;
        for (int j = 0; j < i; j++)
            if (items[j].seq == items[i].seq) return err_set(PL_EINVAL, "rt_step: sequence %d twice", items[i].seq);
        total += items[i].n;
        it[i] = (rt_run_item){.s = s, .from = s->n_tokens, .n = items[i].n, .logits = items[i].logits,
                              .all = items[i].all && items[i].logits, .pool = items[i].pool,
                              .pool_kind = items[i].pool_kind};
    }
    if (total > c->p.max_batch) return err_set(PL_EINVAL, "rt_step: %u tokens > max_batch %u", total, c->p.max_batch);
    /* A window drop is a complete change on its own (the sequence stays
     * valid and its logical length is kept in n_dropped), so drops done
     * before a failure are not undone. */
    for (int i = 0; slides && i < n_items; i++) {
        int rc = rt_win_room(c, it[i].s, it[i].n);
        if (rc) return rc;
        it[i].from = it[i].s->n_tokens;
    }
    for (int i = 0; i < n_items; i++)
        memcpy(it[i].s->tokens + it[i].from, items[i].tokens, items[i].n * sizeof(int32_t));
    int rc = rt_run(c, it, n_items);
    if (rc) return rc;
    for (int i = 0; i < n_items; i++) {
        it[i].s->n_tokens += it[i].n;
        rt_seq_publish(c, it[i].s);
    }
    return 0;
}

int rt_seq_append(rt_ctx *c, int32_t id, const int32_t *tokens, uint32_t n, float *logits)
{
    rt_seq *s = rt_seq_get(c, id);
    int rc = rt_tokens_check(c, s, id, tokens, n);
    if (rc) return rc;
    if (rt_ctx_slides(c)) return rt_win_append(c, s, id, tokens, n, logits, false);
    const uint32_t old = s->n_tokens;
    memcpy(s->tokens + old, tokens, n * sizeof *tokens);
    if (c->p.no_kv_cache) {
        /* the baseline: every append recomputes K and V of every earlier token */
        kv_seq_truncate(&s->kv, 0);
        rc = run_range(c, s, 0, old + n, logits);
        kv_seq_truncate(&s->kv, 0);
    } else {
        /* An empty sequence first takes what the prefix cache holds of its
         * tokens (never the last one, which must produce logits). */
        uint32_t from = old;
        if (old == 0 && c->prefix_ok) {
            int hit = rt_seq_attach_prefix(c, id, tokens, n, false);
            if (hit < 0) return hit;
            from = (uint32_t)hit;
        }
        rc = run_range(c, s, from, old + n, logits);
        if (rc && rt_groups_on(c) && !kv_glocal_holds_window(&c->kg, &s->lg, old)) {
            /* the local groups dropped old's window: the pieces that ran stay, as a window's do */
            s->n_tokens = s->kv.n_tokens;
            rt_seq_publish(c, s);
            return rc;
        }
        if (rc) {
            if (c->prefix_ok) prefix_cursor_truncate(&c->pc, &s->pcur, old);
            rt_seq_kv_cut(c, s, old);
        }
    }
    if (rc) return rc;
    s->n_tokens = old + n;
    if (!c->p.no_kv_cache) rt_seq_publish(c, s);
    return 0;
}

int rt_seq_append_all(rt_ctx *c, int32_t id, const int32_t *tokens, uint32_t n, float *logits)
{
    rt_seq *s = rt_seq_get(c, id);
    int rc = rt_tokens_check(c, s, id, tokens, n);
    if (rc) return rc;
    if (c->p.no_kv_cache) return err_set(PL_EUNSUPPORTED, "pl_seq_append_all: not available without a KV cache");
    if (rt_ctx_slides(c)) return rt_win_append(c, s, id, tokens, n, logits, true);
    const uint32_t old = s->n_tokens;
    const size_t nv = c->m->cfg.n_vocab;
    memcpy(s->tokens + old, tokens, n * sizeof *tokens);
    for (uint32_t at = old; at < old + n && !rc;) {
        uint32_t k = old + n - at < c->p.max_batch ? old + n - at : c->p.max_batch;
        rt_run_item it = {.s = s, .from = at, .n = k, .logits = logits + (size_t)(at - old) * nv, .all = true};
        rc = rt_run(c, &it, 1);
        at += k;
    }
    if (rc && rt_groups_on(c) && !kv_glocal_holds_window(&c->kg, &s->lg, old)) {
        s->n_tokens = s->kv.n_tokens; /* as rt_seq_append: the pieces that ran stay */
        rt_seq_publish(c, s);
        return rc;
    }
    if (rc) {
        if (c->prefix_ok) prefix_cursor_truncate(&c->pc, &s->pcur, old);
        rt_seq_kv_cut(c, s, old);
        return rc;
    }
    s->n_tokens = old + n;
    rt_seq_publish(c, s);
    return 0;
}
