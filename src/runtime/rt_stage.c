/* rt_stage.c - staged KV dtypes (KIVI, fp8_e4m3: kv_codec.h) across cuts.
 *
 * Each sequence owns a kv_stage, made with it, copied by a fork, freed with
 * it. The stage must hold the f16 rows of positions [n / T x T, n) of the
 * sequence's n KV tokens whenever a forward pass appends; stage_end records
 * the end of the last run written (the stage holds the rows of its block
 * up to it). A cut to n that lands inside a block the stage no longer holds
 * (a truncation into a sealed block, or an append that failed after some of
 * its chunks) rebuilds those rows by recomputing positions [n / T x T, n)
 * from the token history: exact, and it needs no KV block.
 */
#include "runtime/rt_impl.h"

/* Recomputes the stage rows of positions [n / T x T, n) from the history,
 * the KV of the sequence holding (at least) n tokens and its blocks before
 * n / T being right. The forward pass writes no pool block for it (the
 * block is not filled), so it needs none. */
static void stage_rebuild(rt_ctx *c, rt_seq *s, uint32_t n)
{
    const uint32_t T = c->p.block_size;
    for (uint32_t at = n / T * T; at < n;) {
        const uint32_t k = n - at < c->p.max_batch ? n - at : c->p.max_batch;
        for (uint32_t j = 0; j < k; j++) {
            c->b_tok[j] = s->tokens[at + j];
            c->b_pos[j] = (int32_t)(at + j);
            c->b_seq[j] = 0;
        }
        c->b_fseq[0] = rt_seq_fwd(c, s, &s->stage);
        fwd_batch b = {(int)k, c->b_tok, c->b_pos, c->b_seq, c->b_fseq, 1, c->b_lidx, 0, NULL};
        int rc = model_forward(c->m, c->fs, &c->pool, &b, NULL);
        assert(rc == 0); /* it fails only for a dtype the context refused */
        (void)rc;
        at += k;
    }
    s->stage_end = n;
}

void rt_seq_kv_cut(rt_ctx *c, rt_seq *s, uint32_t n)
{
    const uint32_t T = c->p.block_size;
    kv_seq_truncate(&s->kv, n);
    rt_groups_cut(c, s, n);
    if (!s->stage.rows || n % T == 0) return;
    if (s->stage_end >= n && (s->stage_end - 1) / T == n / T) return; /* the stage still holds the block */
    stage_rebuild(c, s, n);
}
