/* rt_impl.h - inside src/runtime: the context and sequence structs and the
 * functions the rt_*.c files share. Nothing outside src/runtime includes it.
 *
 *   struct pl_ctx
 *   |  p (rt_params)       m (the model, not owned)
 *   |  pool --- pc (prefix cache over the pool; prefix_ok)
 *   |  seqs[max_seqs]: rt_seq { kv (block table), stage, tokens[n_ctx], ... }
 *   |  b_* (one batch's scratch), fs (the forward pass's scratch)
 *
 * A sequence slot is live iff alive; a free slot is all zero.
 */
#ifndef PL_RUNTIME_RT_IMPL_H
#define PL_RUNTIME_RT_IMPL_H

#include "base/threadpool.h"
#include "kv/kv_codec.h"
#include "kv/kv_shift.h"
#include "runtime/runtime.h"

typedef struct {
    bool alive;
    kv_seq kv;
    kv_stage stage;      /* staged KV dtypes only (else empty); rt_stage.c */
    uint32_t stage_end;  /* end of the last run written; rt_stage.c */
    int32_t *tokens;     /* [n_ctx] history */
    uint32_t n_tokens;
    prefix_cursor pcur;  /* prefix cache: full blocks registered so far */
    uint64_t n_dropped;  /* window: tokens dropped from the middle so far; SWA: from the front
                            (= the absolute position of slot 0) */
    bool shifted;        /* window: positions compacted; SWA: blocks dropped (rt_window.c) */
} rt_seq;

struct pl_ctx {
    const model *m;
    rt_params p;
    threadpool *tp;
    fwd_state *fs;
    kv_pool pool;
    bool pool_ok;
    prefix_cache pc;                /* over pool; paged layout with a KV cache only */
    bool prefix_ok;
    store *st;                      /* the tiers below the prefix cache, or NULL (not owned) */
    rt_seq *seqs;                   /* [max_seqs] */
    int32_t *b_tok, *b_pos, *b_seq; /* [max_batch] batch scratch */
    int32_t *b_lidx;                /* [max(max_seqs, max_batch)] rows that want logits */
    fwd_seq *b_fseq;                /* [max_seqs] block tables of the batch */
    float *b_logits;                /* [b_logits_rows][n_vocab] */
    uint32_t b_logits_rows;         /* min(max_seqs, max_batch); grown (rt_run) for all-logits items */
    float *shift_scratch;           /* kv_window: kv_shift_scratch_floats(pool) */
    kv_rope rope;                   /* kv_window: the model's RoPE, for kv_shift */
};

/* The live sequence id, or NULL. */
static inline rt_seq *rt_seq_get(const rt_ctx *c, int32_t id)
{
    if (id < 0 || (uint32_t)id >= c->p.max_seqs || !c->seqs[id].alive) return NULL;
    return &c->seqs[id];
}

/* One item of a forward pass: history tokens [from, from + n) of s, whose
 * KV holds exactly `from` tokens. */
typedef struct {
    rt_seq *s;
    uint32_t from, n;
    float *logits;  /* the last token's row, or NULL */
    bool all;       /* logits gets a row for every token, written in place */
    float *pool;    /* embeddings: fwd_seq.pool (NULL: none) */
    int pool_kind;
} rt_run_item;

/* rt_step.c: reserves the items' KV slots (all or nothing), runs one
 * forward pass, gives the slots back if it fails. The caller moves
 * n_tokens on after success. */
int rt_run(rt_ctx *c, const rt_run_item *it, int n_items);
/* rt_step.c: s exists, n >= 1 tokens in the vocabulary that fit n_ctx
 * (any length with a window: it runs in pieces). */
int rt_tokens_check(const rt_ctx *c, const rt_seq *s, int32_t id, const int32_t *tokens, size_t n);
/* rt_step.c: the forward pass's view of s (its table, stage, SWA offset). */
fwd_seq rt_seq_fwd(const rt_ctx *c, const rt_seq *s, kv_stage *stage);

/* rt_prefix.c: makes s's newly full blocks findable by later prompts; only
 * after a forward pass has written them. */
void rt_seq_publish(rt_ctx *c, rt_seq *s);

/* rt_stage.c: cuts s's KV to n tokens (n <= kv.n_tokens), keeping the
 * stage right. */
void rt_seq_kv_cut(rt_ctx *c, rt_seq *s, uint32_t n);

/* rt_window.c */
/* Drops what s must drop so that n more tokens fit (and then fit n_ctx). */
int rt_win_room(rt_ctx *c, rt_seq *s, uint32_t n);
/* The most tokens one forward pass may append to s now. */
uint32_t rt_win_max_piece(const rt_ctx *c, const rt_seq *s);
/* An append of tokens[0, n) in pieces that fit the window. */
int rt_win_append(rt_ctx *c, rt_seq *s, int32_t id, const int32_t *tokens, uint32_t n, float *logits, bool all);

#endif
