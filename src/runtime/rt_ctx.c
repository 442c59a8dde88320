/* rt_ctx.c - a context's life: the KV pool (sized once, at creation), the
 * prefix cache over it, the sequence slots and the batch scratch; and the
 * accounting of what it holds.
 *
 * The pool holds kv_mem bytes of blocks, or by default room for max_seqs
 * sequences of n_ctx tokens. Nothing is allocated after rt_ctx_new but a
 * sequence's history, table and stage (rt_seq_new / rt_seq_fork).
 */
#include "runtime/rt_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "kernels/kernels.h"
#include "kv/kv_shift.h"

/* The settings rt_ctx_new relies on (runtime.h's rt_params). */
static inline bool params_ok(const rt_params *p)
{
    const uint64_t T = p->block_size;
    if (!p->n_ctx || !p->max_seqs || p->max_seqs > RT_STEP_MAX_ITEMS || !p->max_batch || !T || p->n_threads < 1)
        return false;
    if (p->kv_window && (p->kv_window < 2 * T || rt_window_limit(p) > p->n_ctx || p->no_kv_cache || p->swa))
        return false;
    if (p->swa && (p->n_ctx <= p->swa || (!p->swa_keep_blocks && !p->no_kv_cache && p->n_ctx < p->swa + T)))
        return false;
    return !p->kv_sinks || p->kv_window;
}

static int pool_make(rt_ctx *c)
{
    const model_config *mc = &c->m->cfg;
    /* layer groups: a block holds one group's layers (kv_groups.h) */
    const uint32_t n_layers = rt_groups_on(c) ? c->kg.slots : mc->n_layers;
    kv_shape sh = {n_layers, mc->n_kv_heads, mc->head_dim, c->p.block_size, c->p.dtype,
                   mc->mla.kv_lora_rank ? KV_KIND_LATENT : KV_KIND_KV};
    kv_geom g;
    int rc = kv_geom_init(&g, &sh);
    if (rc) return rc;
    uint64_t per_seq = (c->p.n_ctx + c->p.block_size - 1) / c->p.block_size;
    if (rt_groups_on(c)) { /* the global table's, and each local group's window plus a batch */
        const uint64_t local = (c->kg.window + c->p.block_size + c->p.max_batch) / c->p.block_size + 1;
        per_seq += (c->kg.n_groups - 1) * (local < per_seq ? local : per_seq);
    }
    uint64_t n_blocks = c->p.kv_mem ? kv_geom_blocks_for_bytes(&g, c->p.kv_mem) : per_seq * c->p.max_seqs;
    if (n_blocks == 0)
        return err_set(PL_EINVAL, "kv_mem %llu bytes holds no KV block (%llu bytes each)",
                       (unsigned long long)c->p.kv_mem, (unsigned long long)g.block_bytes);
    if (n_blocks > UINT32_MAX / 2)
        return err_set(PL_EINVAL, "KV pool of %llu blocks is too large", (unsigned long long)n_blocks);
    rc = kv_pool_init(&c->pool, &sh, (uint32_t)n_blocks);
    if (!rc) c->pool_ok = true;
    if (!rc && rt_groups_on(c)) kv_pool_set_layer_slots(&c->pool, c->kg.slot, mc->n_layers);
    return rc;
}

/* The batch scratch: token ids, positions, sequence of each row, logits rows. */
static int scratch_make(rt_ctx *c)
{
    const rt_params *p = &c->p;
    const uint32_t rows = p->max_seqs < p->max_batch ? p->max_seqs : p->max_batch;
    c->seqs = mem_calloc(p->max_seqs, sizeof *c->seqs);
    c->b_tok = mem_calloc(p->max_batch, sizeof *c->b_tok);
    c->b_pos = mem_calloc(p->max_batch, sizeof *c->b_pos);
    c->b_seq = mem_calloc(p->max_batch, sizeof *c->b_seq);
    c->b_lidx = mem_calloc(p->max_seqs > p->max_batch ? p->max_seqs : p->max_batch, sizeof *c->b_lidx);
    c->b_fseq = mem_calloc(p->max_seqs, sizeof *c->b_fseq);
    c->b_logits = mem_calloc((size_t)rows * c->m->cfg.n_vocab, sizeof *c->b_logits);
    c->b_logits_rows = rows;
    c->n_tables = (size_t)p->max_seqs * (rt_groups_on(c) ? c->kg.n_groups : 1);
    c->b_tables = mem_calloc(c->n_tables, sizeof *c->b_tables);
    if (!c->b_tables) return err_set(PL_ENOMEM, "out of memory creating a context");
    if (rt_groups_on(c)) {
        c->b_gseqs = mem_calloc((size_t)(c->kg.n_groups - 1) * p->max_seqs, sizeof *c->b_gseqs);
        c->b_gslot = mem_calloc(p->max_batch, sizeof *c->b_gslot);
        if (!c->b_gseqs || !c->b_gslot) return err_set(PL_ENOMEM, "out of memory creating a context");
    }
    if (!c->seqs || !c->b_tok || !c->b_pos || !c->b_seq || !c->b_lidx || !c->b_fseq || !c->b_logits)
        return err_set(PL_ENOMEM, "out of memory creating a context");
    return 0;
}

int rt_ctx_new(rt_ctx **out, const model *m, const rt_params *p)
{
    assert(params_ok(p));
    rt_ctx *c = mem_calloc(1, sizeof *c);
    if (!c) return PL_ENOMEM;
    c->m = m;
    c->p = *p;
    kern_init(0);
    rt_groups_plan(c);
    c->tp = tp_new(p->n_threads);
    int rc = c->tp ? scratch_make(c) : err_set(PL_ENOMEM, "out of memory creating a context");
    if (!rc) rc = pool_make(c);
    if (!rc && !p->no_kv_cache && p->layout == KV_SEQ_PAGED) {
        /* Sliding-window attention changes every layer's K/V past the window: its W is part of
         * what a cached block means (the disk tier keeps blocks across runs with other settings). */
        uint64_t fp[2] = {m->fingerprint[0], m->fingerprint[1]};
        if (p->swa) fp[0] ^= (uint64_t)p->swa * UINT64_C(0x9e3779b97f4a7c15), fp[1] ^= UINT64_C(0x5357412d77696e64);
        if (rt_groups_on(c)) rt_groups_fingerprint(c, fp); /* likewise a block's layers and their window */
        rc = prefix_init(&c->pc, &c->pool, fp);
        c->prefix_ok = rc == 0;
    }
    if (!rc) rc = fwd_state_new(&c->fs, m, (int)p->max_batch, (int)p->n_ctx, &c->pool.g, c->tp);
    if (!rc && p->kv_window) {
        c->shift_scratch = mem_calloc(kv_shift_scratch_floats(&c->pool), sizeof(float));
        c->rope = model_kv_rope(m);
        if (!c->shift_scratch) rc = err_set(PL_ENOMEM, "out of memory for the window's shift scratch");
    }
    if (rc) {
        rt_ctx_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void rt_ctx_free(rt_ctx *c)
{
    if (!c) return;
    for (uint32_t i = 0; c->seqs && i < c->p.max_seqs; i++)
        if (c->seqs[i].alive) rt_seq_free(c, (int32_t)i);
    fwd_state_free(c->fs);
    if (c->prefix_ok) prefix_free(&c->pc);
    if (c->pool_ok) kv_pool_free(&c->pool);
    tp_free(c->tp);
    free(c->seqs);
    free(c->b_tok);
    free(c->b_pos);
    free(c->b_seq);
    free(c->b_lidx);
    free(c->b_fseq);
    free(c->b_logits);
    free(c->b_gseqs);
    free(c->b_tables);
    free(c->b_gslot);
    free(c->shift_scratch);
    free(c);
}

const rt_params *rt_ctx_params(const rt_ctx *c) { return &c->p; }
uint32_t rt_ctx_n_vocab(const rt_ctx *c) { return c->m->cfg.n_vocab; }

double rt_ctx_key_cost(const rt_ctx *c) { return model_key_cost(c->m); }

bool rt_ctx_slides(const rt_ctx *c)
{
    return c->p.kv_window || (c->p.swa && !c->p.swa_keep_blocks && !c->p.no_kv_cache);
}

kv_pool *rt_ctx_pool(rt_ctx *c) { return &c->pool; }

/* Every table of the live sequences into live[] (the global group's first
 * per sequence); returns how many, and the global ones' count in *n_glob. */
static size_t ctx_tables(rt_ctx *c, kv_seq **live, size_t cap, size_t *n_glob)
{
    size_t n = 0;
    for (uint32_t i = 0; i < c->p.max_seqs && n < cap; i++)
        if (c->seqs[i].alive) live[n++] = &c->seqs[i].kv;
    *n_glob = n;
    for (uint32_t i = 0; rt_groups_on(c) && i < c->p.max_seqs; i++)
        if (c->seqs[i].alive && n + c->kg.n_groups - 1 <= cap) n += kv_glocal_tables(&c->seqs[i].lg, &c->kg, live + n);
    return n;
}

/* Each group's distinct blocks over the live sequences (a block is in one
 * group's tables at a time: kv_groups_check_owners). Uses pool->scratch. */
static void ctx_group_blocks(rt_ctx *c, uint32_t *out)
{
    kv_pool *pool = &c->pool;
    memset(pool->scratch, 0, (size_t)pool->n_blocks * sizeof *pool->scratch);
    for (uint32_t i = 0; i < c->p.max_seqs; i++) {
        const rt_seq *s = &c->seqs[i];
        for (uint32_t g = 0; s->alive && g < c->kg.n_groups; g++) {
            const kv_seq *t = g ? &s->lg.t[g - 1] : &s->kv;
            for (uint32_t j = 0; j < t->n_blocks; j++)
                if (!pool->scratch[t->table[j]]) pool->scratch[t->table[j]] = 1, out[g]++;
        }
    }
}

void rt_ctx_kv_stats(rt_ctx *c, rt_kv_stats *out)
{
    kv_seq **live = c->b_tables;
    size_t n_glob, n = ctx_tables(c, live, c->n_tables, &n_glob);
    *out = (rt_kv_stats){.n_groups = rt_groups_on(c) ? c->kg.n_groups : 0};
    if (rt_groups_on(c)) { /* each group's distinct blocks, then all of them */
        kv_stats_get(&c->pool, live + n_glob, n - n_glob, &out->kv);
        out->group_bytes[1] = out->kv.bytes_allocated;
        kv_stats_get(&c->pool, live, n_glob, &out->kv);
        out->group_bytes[0] = out->kv.bytes_allocated;
        ctx_group_blocks(c, out->group_blocks);
    }
    kv_stats_get(&c->pool, live, n, &out->kv);
    uint64_t tokens = 0;
    for (size_t i = 0; i < n_glob; i++) tokens += live[i]->n_tokens;
    out->kv.tokens = tokens;
    out->kv.n_seqs = (uint32_t)n_glob;
    out->stage_bytes_per_seq = kv_stage_bytes(&c->pool.g);
    out->stage_bytes = out->stage_bytes_per_seq * n_glob;
}

const kv_groups *rt_ctx_groups(const rt_ctx *c) { return rt_groups_on(c) ? &c->kg : NULL; }

int rt_ctx_check(rt_ctx *c)
{
    kv_seq **live = c->b_tables;
    size_t n_glob, n = ctx_tables(c, live, c->n_tables, &n_glob);
    int rc = kv_check(&c->pool, live, n);
    for (uint32_t i = 0; !rc && rt_groups_on(c) && i < c->p.max_seqs; i++)
        if (c->seqs[i].alive) rc = kv_glocal_check(&c->seqs[i].lg, &c->kg, c->seqs[i].kv.n_tokens);
    if (!rc && rt_groups_on(c)) { /* ctx_tables' order: the global tables, then each sequence's local ones */
        uint8_t *group = mem_calloc(n ? n : 1, 1);
        if (!group) return PL_ENOMEM;
        for (size_t i = n_glob; i < n; i++) group[i] = (uint8_t)(1 + (i - n_glob) % (c->kg.n_groups - 1));
        rc = kv_groups_check_owners(&c->pool, live, group, n);
        free(group);
    }
    if (!rc && c->prefix_ok) rc = prefix_check(&c->pc);
    return rc;
}
