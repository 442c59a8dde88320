/* rt_impl.h - inside src/runtime: the context and sequence structs and the
 * functions the rt_*.c files share. Nothing outside src/runtime includes it.
 *
 *   struct pl_ctx
 *   |  p (rt_params)       m (the model, not owned)
 *   |  pool --- pc (prefix cache over the pool; prefix_ok)
 *   |  seqs[max_seqs]: rt_seq { kv (block table), stage, tokens[n_ctx], lg (the local
 *   |                  groups' tables with layer groups), ... }
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
    kv_glocal lg;        /* layer groups: the local groups' tables (kv is the global group's) */
    prefix_cursor lcur[KV_GROUPS_MAX - 1]; /* ... and their prefix cursors, on their own chains */
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
    kv_groups kg;                   /* layer groups (n_groups 0: one table); rt_groups.c */
    kv_batch_seq *b_gseqs;          /* [n_groups - 1][max_seqs] the local groups' tables of a batch */
    int32_t *b_gslot;               /* [max_batch] the tokens' slots in the local tables */
    fwd_groups b_groups;            /* what the forward pass is given of the two above */
    kv_seq **b_tables;              /* [n_tables] every live table, for accounting and checks */
    size_t n_tables;                /* max_seqs x groups (1 without) */
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

/* rt_groups.c: layer groups (kv/kv_groups.h) */
static inline bool rt_groups_on(const rt_ctx *c) { return c->kg.n_groups > 1; }
/* Plans the groups for the context's model and settings (c->kg). */
void rt_groups_plan(rt_ctx *c);
/* The batch's local tables and slots for items it[0, n) (after their
 * append); the pass's fwd_groups. */
const fwd_groups *rt_groups_batch(rt_ctx *c, const rt_run_item *it, int n);
/* Reserves n positions at s's end in every table, all or nothing
 * (PL_EFULL; the local groups' drop behind the window is kept). */
int rt_groups_append(rt_ctx *c, rt_seq *s, uint32_t n);
/* Cuts every table of s to n positions; the local groups must hold n's
 * window (kv_glocal_holds_window). */
void rt_groups_cut(rt_ctx *c, rt_seq *s, uint32_t n);
/* Prefix attach for an empty s: the largest whole-block hit every group
 * can serve, taken. Returns the tokens held. */
int rt_groups_attach(rt_ctx *c, rt_seq *s, const int32_t *tokens, uint32_t n, bool is_recompute);
/* What rt_groups_attach would serve of tokens[0, n). */
uint32_t rt_groups_peek(const rt_ctx *c, const int32_t *tokens, uint32_t n);
/* Keys the local groups' newly full blocks (after a forward pass). */
void rt_groups_publish(rt_ctx *c, rt_seq *s);
/* Folds the group geometry into the prefix cache's model fingerprint, so
 * that keys (RAM and tiers) of a one-table context never name a groups
 * context's blocks, nor one geometry's another's. */
void rt_groups_fingerprint(const rt_ctx *c, uint64_t fp[2]);
/* Loads tier entries (store_kv.h: n_groups blocks each) after s's whole-
 * block prefix: blocks[j] holds chain block s->kv.n_blocks + j. The global
 * table takes every loaded block, each local table only those its window
 * needs at the new length (the front it no longer needs is dropped);
 * loads the most blocks that leave `reserve` blocks per group available.
 * Keys them in the prefix cache. Returns the blocks loaded (0: s as it was). */
uint32_t rt_groups_load(rt_ctx *c, rt_seq *s, const int32_t *tokens, const uint8_t *const *blocks, uint32_t n,
                        uint32_t reserve);

/* rt_window.c */
/* Drops what s must drop so that n more tokens fit (and then fit n_ctx). */
int rt_win_room(rt_ctx *c, rt_seq *s, uint32_t n);
/* The most tokens one forward pass may append to s now. */
uint32_t rt_win_max_piece(const rt_ctx *c, const rt_seq *s);
/* An append of tokens[0, n) in pieces that fit the window. */
int rt_win_append(rt_ctx *c, rt_seq *s, int32_t id, const int32_t *tokens, uint32_t n, float *logits, bool all);

#endif
