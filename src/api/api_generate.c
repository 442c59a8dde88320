/* api_generate.c - pl_model, pl_ctx and sequences: the public face of
 * src/model and src/kv for one caller thread (the CLI's run and chat, and
 * later the engine thread).
 *
 * A pl_ctx owns one KV block pool sized at creation, a fixed table of
 * max_seqs sequence slots, and the forward pass's scratch. Appending tokens
 * to a sequence reserves its KV slots (copy-on-write where blocks are
 * shared), runs the tokens through the model in chunks of max_batch, and
 * keeps the token history (needed to recompute in no-cache mode and for
 * chat's common-prefix reuse).
 *
 * Invariant: for every live slot, kv.n_tokens == n_tokens, except in
 * no-cache mode where the cache is emptied after every step (kv.n_tokens == 0).
 *
 * Sliding window with sinks (pl_ctx_params.kv_window / kv_sinks): a
 * sequence holds at most limit = sink_blocks x T + kv_window tokens, where
 * sink_blocks = ceil(kv_sinks / T) (sinks are pinned in whole blocks). An
 * append that would pass the limit first drops the fewest whole blocks
 * right after the sinks (kv_seq_drop_range), re-rotates the keys of the
 * blocks that moved down by the tokens dropped (kv/kv_shift.h), and
 * drops the same tokens from the history; new tokens then continue at
 * position = tokens kept, so the forward pass sees ordinary positions.
 * Appends longer than what fits run in pieces: up to the limit, then one
 * block (T tokens) per drop, so every token attends to between
 * limit - 2T + 1 and limit earlier tokens once the window is full.
 * A shifted sequence no longer publishes blocks to the prefix cache, nor
 * takes hits (its blocks are not at the positions their keys name); its
 * sink blocks keep the keys they had. n_dropped counts the tokens gone.
 *
 * Sliding-window attention (pl_ctx_params.swa, the model's W; c->swa is the
 * W in force, 0 if none): every forward pass gets fwd_seq.window = W and
 * pos0 = n_dropped, so the token at cache slot j (absolute position
 * pos0 + j) attends to slots > j - W and is rotated at its absolute
 * position. When blocks are freed (c->swa and not swa_keep_blocks: "slides"
 * below), an append first drops from the FRONT of the table the full
 * blocks wholly before the window of its first new token (kv_seq_drop_front,
 * never the block of the last token held) and the same history; nothing is
 * rewritten, so the freed blocks keep their prefix keys and the kept ones
 * their content. Pieces are cut so that the kept tokens plus the piece fit
 * n_ctx slots (>= W + T, so at least 2 tokens a piece). A
 * sequence keeps publishing its full blocks to the prefix cache across its
 * drops (prefix_register_at: its cursor's chain runs from absolute position 0,
 * and every block is keyed after the step that fills it, before any drop
 * can take it); their K/V are those of absolute positions 0.. under the
 * same window, so a later sequence of this context that hits them (from
 * position 0, at most n_ctx tokens, the rest streams through its window)
 * computes the same, up to the float noise of another chunking, as any hit.
 * SWA and kv_window exclude each other (params_check).
 *
 * Staged KV dtypes (KIVI): each sequence also owns a kv_stage (kv_codec.h),
 * made with it, copied by a fork, freed with it. The stage must hold the f16
 * rows of positions [n / T x T, n) of the sequence's n KV tokens whenever a
 * forward pass appends; stage_end records the end of the last run written
 * (the stage holds the rows of its block up to it). A cut to n that lands
 * inside a block the stage no longer holds (a truncation into a sealed
 * block, or an append that failed after some of its chunks) rebuilds those
 * rows by recomputing positions [n / T x T, n) from the token history
 * (stage_rebuild): exact, and it needs no KV block.
 */
#include "pagellm.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "kv/kv_check.h"
#include "kv/kv_seq.h"
#include "kv/prefix_cache.h"
#include "kv/kv_shift.h"
#include "model/model.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"
#include "api/ctx_internal.h"

struct pl_model {
    model *m;
    pl_vocab *vocab;
    char *chat_template;
};

int pl_model_load(pl_model **out, const char *path)
{
    pl_model *pm = mem_calloc(1, sizeof *pm);
    if (!pm) return PL_ENOMEM;
    int rc = model_open(&pm->m, path);
    if (!rc) rc = tok_vocab_load(&pm->vocab, pm->m->file); /* the open file: no second mmap */
    if (!rc && (uint32_t)pl_vocab_size(pm->vocab) > pm->m->cfg.n_vocab)
        rc = err_set(PL_EFORMAT, "%s: tokenizer has %d tokens but the model's vocabulary is %u",
                     path, pl_vocab_size(pm->vocab), pm->m->cfg.n_vocab);
    gguf_str t;
    if (!rc && gguf_get_str(pm->m->file, "tokenizer.chat_template", &t) == 0) {
        pm->chat_template = strndup(t.ptr, t.len);
        if (!pm->chat_template) rc = err_set(PL_ENOMEM, "out of memory");
    }
    if (rc) {
        pl_model_free(pm);
        return rc;
    }
    *out = pm;
    return 0;
}

void pl_model_free(pl_model *pm)
{
    if (!pm) return;
    if (pm->vocab) pl_vocab_free(pm->vocab);
    if (pm->m) model_close(pm->m);
    free(pm->chat_template);
    free(pm);
}

const pl_vocab *pl_model_vocab(const pl_model *pm) { return pm->vocab; }
uint32_t pl_model_n_vocab(const pl_model *pm) { return pm->m->cfg.n_vocab; }
uint32_t pl_model_n_ctx_train(const pl_model *pm) { return pm->m->cfg.ctx_train; }
uint32_t pl_model_sliding_window(const pl_model *pm) { return pm->m->cfg.sliding_window; }
const char *pl_model_chat_template(const pl_model *pm) { return pm->chat_template; }

static uint64_t weight_bytes(const weight *w)
{
    return w->data ? dtype_row_bytes(w->type, w->n_in) * w->n_out : 0;
}

uint64_t pl_model_decode_bytes(const pl_model *pm)
{
    const model *m = pm->m;
    uint64_t b = weight_bytes(&m->w.output_norm) + weight_bytes(&m->w.output);
    for (uint32_t l = 0; l < m->cfg.n_layers; l++) {
        const layer_weights *w = &m->w.layers[l];
        const weight *all[] = {&w->attn_norm, &w->wq, &w->wk, &w->wv, &w->wo, &w->bq, &w->bk, &w->bv,
                               &w->q_norm, &w->k_norm, &w->ffn_norm, &w->w_gate, &w->w_up, &w->w_down};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) b += weight_bytes(all[i]);
    }
    return b;
}

/* The engine's view of a model, for other modules of the library. */
const model *pl_model_internal(const pl_model *pm) { return pm->m; }

/* ------------------------------------------------------------------ ctx */

typedef struct {
    bool alive;
    kv_seq kv;
    kv_stage stage;     /* staged KV dtypes only (else empty) */
    uint32_t stage_end; /* see the top */
    int32_t *tokens;   /* [n_ctx] history */
    uint32_t n_tokens;
    prefix_cursor pcur;    /* prefix cache: full blocks registered so far */
    uint64_t n_dropped; /* window: tokens dropped from the middle so far; SWA: from the front
                           (= the absolute position of slot 0) */
    bool shifted;       /* window: positions compacted; SWA: blocks dropped; no prefix-cache
                           publishing (file header) */
} ctx_seq;

struct pl_ctx {
    pl_model *pm;
    pl_ctx_params p;
    threadpool *tp;
    fwd_state *fs;
    kv_pool pool;
    bool pool_ok;
    prefix_cache pc;         /* over pool; paged layout with a KV cache only */
    bool prefix_ok;
    ctx_seq *seqs;           /* [max_seqs] */
    int32_t *b_tok, *b_pos, *b_seq; /* [max_batch] batch scratch */
    int32_t *b_lidx;                /* [max(max_seqs, max_batch)] rows that want logits */
    fwd_seq *b_fseq;                /* [max_seqs] block tables of the batch */
    float *b_logits;                /* [min(max_seqs, max_batch)][n_vocab] */
    float *shift_scratch;           /* window: kv_shift_scratch_floats(pool) */
    kv_rope rope;                   /* window: the model's RoPE, for kv_shift */
    uint32_t swa;                   /* sliding-window attention in force (file header), 0 = none */
};

/* Whether sequences run past n_ctx by dropping blocks: a kv_window, or SWA
 * that frees the blocks before the window. */
static bool ctx_slides(const pl_ctx *c)
{
    return c->p.kv_window || (c->swa && !c->p.swa_keep_blocks && !c->p.no_kv_cache);
}

void pl_ctx_params_default(pl_ctx_params *p)
{
    memset(p, 0, sizeof *p);
    p->max_seqs = 1;
    p->block_size = 16;
    p->kv_dtype = PL_KV_F16;
    p->layout = PL_KV_PAGED;
    p->max_batch = 512;
}

static uint32_t win_sink_blocks(const pl_ctx_params *p) { return (p->kv_sinks + p->block_size - 1) / p->block_size; }
static uint32_t win_limit(const pl_ctx_params *p) { return win_sink_blocks(p) * p->block_size + p->kv_window; }

/* The window's parameters (after block_size and n_ctx are known). */
static int window_check(const pl_ctx_params *p)
{
    if (!p->kv_window) {
        if (p->kv_sinks) return err_set(PL_EINVAL, "kv_sinks (--kv-sinks) %u needs kv_window (--kv-window)", p->kv_sinks);
        return 0;
    }
    if (p->kv_window < 2 * p->block_size)
        return err_set(PL_EINVAL, "kv_window (--kv-window) %u must be at least 2 x the KV block size %u = %u: "
                       "whole blocks are dropped", p->kv_window, p->block_size, 2 * p->block_size);
    if (win_limit(p) > p->n_ctx)
        return err_set(PL_EINVAL, "kv_sinks (--kv-sinks) %u (%u in whole blocks of %u) + kv_window (--kv-window) %u "
                       "= %u exceed the context n_ctx (--ctx) %u", p->kv_sinks, win_sink_blocks(p) * p->block_size,
                       p->block_size, p->kv_window, win_limit(p), p->n_ctx);
    if (p->no_kv_cache) return err_set(PL_EINVAL, "kv_window (--kv-window) needs a KV cache (not --no-kv-cache)");
    if (!kv_shift_supported((kv_dtype)p->kv_dtype))
        return err_set(PL_EUNSUPPORTED, "kv_window (--kv-window) is not supported with KV dtype %s yet (its keys "
                       "are quantized per channel over a block and cannot be re-rotated in place)",
                       pl_kv_dtype_name(p->kv_dtype));
    return 0;
}

/* The sliding-window attention that applies (*swa, 0 = none), after
 * filling the default n_ctx of an SWA context. */
static int swa_check(const model_config *c, pl_ctx_params *p, uint32_t *swa)
{
    const uint32_t w = c->sliding_window;
    *swa = 0;
    if (p->swa != PL_SWA_AUTO && p->swa != PL_SWA_ON && p->swa != PL_SWA_OFF)
        return err_set(PL_EINVAL, "swa (--swa) %d: expected auto, on or off", p->swa);
    if (p->swa == PL_SWA_ON && w == 0)
        return err_set(PL_EINVAL, "--swa on: the model declares no sliding window (%s.attention.sliding_window)",
                       c->arch_name);
    if (p->swa == PL_SWA_OFF || w == 0) return 0;
    if (p->kv_window)
        return err_set(PL_EINVAL, "--kv-window cannot be combined with the model's sliding-window attention "
                       "(sliding_window %u, --swa auto|on): SWA already keeps only the last %u tokens' KV; pass "
                       "--swa off to use --kv-window instead", w, w);
    if (p->n_ctx == 0 && p->block_size && p->max_batch) {
        const uint32_t piece = p->max_batch < 512 ? p->max_batch : 512;
        const uint64_t n = (uint64_t)w + p->block_size + piece;
        p->n_ctx = n > 1u << 20 ? 1u << 20 : (uint32_t)n;
    }
    if (p->n_ctx <= w) return 0; /* the window never binds: full attention is the same */
    if (!p->swa_keep_blocks && !p->no_kv_cache && p->n_ctx < w + p->block_size)
        return err_set(PL_EINVAL, "n_ctx (--ctx) %u with sliding-window attention %u: at least the window + one "
                       "KV block (%u), or at most the window (then it never slides); or --swa off",
                       p->n_ctx, w, w + p->block_size);
    *swa = w;
    return 0;
}

static int params_check(const pl_model *pm, pl_ctx_params *p, uint32_t *swa)
{
    const model_config *c = &pm->m->cfg;
    int src = swa_check(c, p, swa);
    if (src) return src;
    if (p->kv_window > 1u << 20 || p->kv_sinks > 1u << 20)
        return err_set(PL_EINVAL, "kv_window (--kv-window) %u / kv_sinks (--kv-sinks) %u too large (at most %u)",
                       p->kv_window, p->kv_sinks, 1u << 20);
    if (p->n_ctx == 0 && p->kv_window && p->block_size) p->n_ctx = win_limit(p); /* the window is the context */
    if (p->n_ctx == 0) p->n_ctx = c->ctx_train < 4096 ? c->ctx_train : 4096;
    if (p->n_threads <= 0) p->n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (p->n_threads <= 0) p->n_threads = 1;
    if (p->max_seqs == 0 || p->max_seqs > 4096) return err_set(PL_EINVAL, "max_seqs %u out of range 1..4096", p->max_seqs);
    if (p->block_size == 0 || p->block_size > 4096) return err_set(PL_EINVAL, "block_size %u out of range 1..4096", p->block_size);
    if (p->max_batch == 0 || p->max_batch > 65536) return err_set(PL_EINVAL, "max_batch %u out of range 1..65536", p->max_batch);
    if (p->n_ctx > 1u << 20) return err_set(PL_EINVAL, "n_ctx %u too large", p->n_ctx);
    if (p->n_threads > 256) return err_set(PL_EINVAL, "threads %d out of range 1..256", p->n_threads);
    if ((unsigned)p->kv_dtype >= PL_KV_DTYPE_COUNT) return err_set(PL_EINVAL, "unknown KV dtype %d", (int)p->kv_dtype);
    int rc = model_kv_dtype_check(pm->m, (kv_dtype)p->kv_dtype);
    return rc ? rc : window_check(p);
}

static int pool_make(pl_ctx *c)
{
    const model_config *mc = &c->pm->m->cfg;
    kv_shape sh = {mc->n_layers, mc->n_kv_heads, mc->head_dim, c->p.block_size, (kv_dtype)c->p.kv_dtype};
    kv_geom g;
    int rc = kv_geom_init(&g, &sh);
    if (rc) return rc;
    uint64_t per_seq = (c->p.n_ctx + c->p.block_size - 1) / c->p.block_size;
    uint64_t n_blocks = c->p.kv_mem ? kv_geom_blocks_for_bytes(&g, c->p.kv_mem) : per_seq * c->p.max_seqs;
    if (n_blocks == 0)
        return err_set(PL_EINVAL, "kv_mem %llu bytes holds no KV block (%llu bytes each)",
                       (unsigned long long)c->p.kv_mem, (unsigned long long)g.block_bytes);
    if (n_blocks > UINT32_MAX / 2) return err_set(PL_EINVAL, "KV pool of %llu blocks is too large", (unsigned long long)n_blocks);
    rc = kv_pool_init(&c->pool, &sh, (uint32_t)n_blocks);
    if (!rc) c->pool_ok = true;
    return rc;
}

int pl_ctx_new(pl_ctx **out, pl_model *pm, const pl_ctx_params *params)
{
    pl_ctx *c = mem_calloc(1, sizeof *c);
    if (!c) return PL_ENOMEM;
    c->pm = pm;
    c->p = *params;
    int rc = params_check(pm, &c->p, &c->swa);
    if (rc) { free(c); return rc; }
    kern_init(0);
    c->tp = tp_new(c->p.n_threads);
    c->seqs = mem_calloc(c->p.max_seqs, sizeof *c->seqs);
    const uint32_t rows = c->p.max_seqs < c->p.max_batch ? c->p.max_seqs : c->p.max_batch;
    c->b_tok = mem_calloc(c->p.max_batch, sizeof *c->b_tok);
    c->b_pos = mem_calloc(c->p.max_batch, sizeof *c->b_pos);
    c->b_seq = mem_calloc(c->p.max_batch, sizeof *c->b_seq);
    c->b_lidx = mem_calloc(c->p.max_seqs > c->p.max_batch ? c->p.max_seqs : c->p.max_batch, sizeof *c->b_lidx);
    c->b_fseq = mem_calloc(c->p.max_seqs, sizeof *c->b_fseq);
    c->b_logits = mem_calloc((size_t)rows * pm->m->cfg.n_vocab, sizeof *c->b_logits);
    if (!c->tp || !c->seqs || !c->b_tok || !c->b_pos || !c->b_seq || !c->b_lidx || !c->b_fseq || !c->b_logits) rc = err_set(PL_ENOMEM, "out of memory creating a context");
    if (!rc) rc = pool_make(c);
    if (!rc && !c->p.no_kv_cache && c->p.layout == PL_KV_PAGED) {
        rc = prefix_init(&c->pc, &c->pool, pm->m->fingerprint);
        c->prefix_ok = rc == 0;
    }
    if (!rc) rc = fwd_state_new(&c->fs, pm->m, (int)c->p.max_batch, (int)c->p.n_ctx, &c->pool.g, c->tp);
    if (!rc && c->p.kv_window) {
        c->shift_scratch = mem_calloc(kv_shift_scratch_floats(&c->pool), sizeof(float));
        c->rope = model_kv_rope(pm->m);
        if (!c->shift_scratch) rc = err_set(PL_ENOMEM, "out of memory for the window's shift scratch");
    }
    if (rc) { pl_ctx_free(c); return rc; }
    *out = c;
    return 0;
}

void pl_ctx_free(pl_ctx *c)
{
    if (!c) return;
    for (uint32_t i = 0; c->seqs && i < c->p.max_seqs; i++)
        if (c->seqs[i].alive) pl_seq_free(c, (int32_t)i);
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
    free(c->shift_scratch);
    free(c);
}

uint32_t pl_ctx_n_ctx(const pl_ctx *c) { return c->p.n_ctx; }
uint32_t pl_ctx_kv_window(const pl_ctx *c) { return c->p.kv_window; }
uint32_t pl_ctx_swa(const pl_ctx *c) { return c->swa; }
bool pl_ctx_unbounded(const pl_ctx *c) { return ctx_slides(c); }

static ctx_seq *seq_get(const pl_ctx *c, int32_t id)
{
    if (id < 0 || (uint32_t)id >= c->p.max_seqs || !c->seqs[id].alive) return NULL;
    return &c->seqs[id];
}

int pl_seq_new(pl_ctx *c, int32_t *out)
{
    for (uint32_t i = 0; i < c->p.max_seqs; i++) {
        ctx_seq *s = &c->seqs[i];
        if (s->alive) continue;
        s->tokens = mem_calloc(c->p.n_ctx, sizeof *s->tokens);
        if (!s->tokens) return PL_ENOMEM;
        kv_seq_mode mode = c->p.layout == PL_KV_STATIC ? KV_SEQ_STATIC : KV_SEQ_PAGED;
        int rc = kv_stage_init(&s->stage, &c->pool.g);
        if (rc) { free(s->tokens); s->tokens = NULL; return rc; }
        rc = kv_seq_init(&s->kv, &c->pool, c->p.n_ctx, mode);
        if (rc) { kv_stage_free(&s->stage); free(s->tokens); s->tokens = NULL; return rc; }
        s->stage_end = 0;
        s->alive = true;
        s->n_tokens = 0;
        s->n_dropped = 0;
        s->shifted = false;
        prefix_cursor_init(&s->pcur);
        *out = (int32_t)i;
        return 0;
    }
    return err_set(PL_EFULL, "all %u sequence slots are in use", c->p.max_seqs);
}

void pl_seq_free(pl_ctx *c, int32_t id)
{
    ctx_seq *s = seq_get(c, id);
    if (!s) return;
    kv_seq_free(&s->kv);
    kv_stage_free(&s->stage);
    free(s->tokens);
    memset(s, 0, sizeof *s);
}

uint32_t pl_seq_len(const pl_ctx *c, int32_t id)
{
    const ctx_seq *s = seq_get(c, id);
    return s ? s->n_tokens : 0;
}

const int32_t *pl_seq_tokens(const pl_ctx *c, int32_t id)
{
    const ctx_seq *s = seq_get(c, id);
    return s ? s->tokens : NULL;
}

/* One forward pass over items: item i runs history tokens [from, from + n)
 * of its sequence, whose KV holds exactly `from` tokens. KV slots are
 * reserved for all items first, all or nothing. Logits of each item's last
 * token go to its logits pointer (if any). */
typedef struct {
    ctx_seq *s;
    uint32_t from, n;
    float *logits;
    bool all;       /* logits gets a row for every token, written in place */
} core_item;

/* The forward pass's view of s: its table, stage, and SWA's window and
 * absolute position of slot 0 (a kv_window's drops compact positions: 0). */
static fwd_seq seq_fwd(const pl_ctx *c, const ctx_seq *s, kv_stage *stage)
{
    return (fwd_seq){{s->kv.table, s->kv.n_blocks, stage}, c->swa ? (uint32_t)s->n_dropped : 0, c->swa};
}

static int step_core(pl_ctx *c, const core_item *it, int n_items)
{
    int rc = 0, k = 0, n_logits = 0;
    for (; k < n_items && !rc; k++) {
        assert(it[k].s->kv.n_tokens == it[k].from);
        rc = kv_seq_append(&it[k].s->kv, it[k].n);
    }
    if (rc) { /* undo the reservations that succeeded */
        for (int i = 0; i < k - 1; i++) kv_seq_truncate(&it[i].s->kv, it[i].from);
        return rc;
    }
    int t = 0;
    for (int i = 0; i < n_items; i++) {
        ctx_seq *s = it[i].s;
        /* a staged sequence's stage holds the rows its next write continues (see the top) */
        assert(!s->stage.rows || it[i].from % c->p.block_size == 0 ||
               (s->stage_end >= it[i].from && (s->stage_end - 1) / c->p.block_size == it[i].from / c->p.block_size));
        c->b_fseq[i] = seq_fwd(c, s, s->stage.rows ? &s->stage : NULL);
        for (uint32_t j = 0; j < it[i].n; j++, t++) {
            c->b_tok[t] = it[i].s->tokens[it[i].from + j];
            c->b_pos[t] = (int32_t)(it[i].from + j);
            c->b_seq[t] = i;
        }
        if (it[i].all)
            for (uint32_t j = 0; j < it[i].n; j++) c->b_lidx[n_logits++] = t - (int)it[i].n + (int)j;
        else if (it[i].logits)
            c->b_lidx[n_logits++] = t - 1;
    }
    assert(t <= (int)c->p.max_batch);
    fwd_batch b = {t, c->b_tok, c->b_pos, c->b_seq, c->b_fseq, n_items, c->b_lidx, n_logits};
    /* a lone all-logits item takes its rows straight into the caller's buffer */
    const bool direct = n_items == 1 && it[0].all;
    rc = model_forward(c->pm->m, c->fs, &c->pool, &b, direct ? it[0].logits : c->b_logits);
    if (rc) {
        for (int i = 0; i < n_items; i++) kv_seq_truncate(&it[i].s->kv, it[i].from);
        return rc;
    }
    for (int i = 0; i < n_items; i++) it[i].s->stage_end = it[i].from + it[i].n;
    const size_t nv = c->pm->m->cfg.n_vocab;
    if (direct) return 0;
    for (int i = 0, l = 0; i < n_items; i++)
        if (it[i].logits) memcpy(it[i].logits, c->b_logits + (size_t)l++ * nv, nv * sizeof(float));
    return 0;
}

/* Staged dtypes: recomputes the stage rows of positions [n / T x T, n)
 * from the history, the KV of the sequence holding (at least) n tokens and
 * its blocks before n / T being right. The forward pass writes no pool
 * block for it (the block is not filled), so it needs none. */
static void stage_rebuild(pl_ctx *c, ctx_seq *s, uint32_t n)
{
    const uint32_t T = c->p.block_size;
    for (uint32_t at = n / T * T; at < n;) {
        const uint32_t k = n - at < c->p.max_batch ? n - at : c->p.max_batch;
        for (uint32_t j = 0; j < k; j++) {
            c->b_tok[j] = s->tokens[at + j];
            c->b_pos[j] = (int32_t)(at + j);
            c->b_seq[j] = 0;
        }
        c->b_fseq[0] = seq_fwd(c, s, &s->stage);
        fwd_batch b = {(int)k, c->b_tok, c->b_pos, c->b_seq, c->b_fseq, 1, c->b_lidx, 0};
        int rc = model_forward(c->pm->m, c->fs, &c->pool, &b, NULL);
        assert(rc == 0); /* it fails only for a dtype pl_ctx_new refused */
        (void)rc;
        at += k;
    }
    s->stage_end = n;
}

/* Cuts s's KV to n tokens (n <= kv.n_tokens), keeping the stage right. */
static void seq_kv_cut(pl_ctx *c, ctx_seq *s, uint32_t n)
{
    const uint32_t T = c->p.block_size;
    kv_seq_truncate(&s->kv, n);
    if (!s->stage.rows || n % T == 0) return;
    if (s->stage_end >= n && (s->stage_end - 1) / T == n / T) return; /* the stage still holds the block */
    stage_rebuild(c, s, n);
}

/* Runs tokens[from, to) of s's history through the model in chunks of
 * max_batch; only the last chunk asks for logits. */
static int run_range(pl_ctx *c, ctx_seq *s, uint32_t from, uint32_t to, float *logits)
{
    for (uint32_t at = from; at < to;) {
        uint32_t n = to - at < c->p.max_batch ? to - at : c->p.max_batch;
        core_item it = {s, at, n, at + n == to ? logits : NULL, false};
        int rc = step_core(c, &it, 1);
        if (rc) return rc;
        at += n;
    }
    return 0;
}

static int tokens_check(const pl_ctx *c, const ctx_seq *s, int32_t id, const int32_t *tokens, size_t n)
{
    if (!s) return err_set(PL_EINVAL, "sequence %d does not exist", id);
    if (n == 0) return err_set(PL_EINVAL, "append of 0 tokens");
    if (!ctx_slides(c) && n > c->p.n_ctx - s->n_tokens) /* a window runs any length in pieces */
        return err_set(PL_ERANGE, "sequence of %u tokens + %zu new would exceed the context of %u tokens",
                       s->n_tokens, n, c->p.n_ctx);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= c->pm->m->cfg.n_vocab)
            return err_set(PL_EINVAL, "token %zu: id %d out of range 0..%u", i, tokens[i], c->pm->m->cfg.n_vocab - 1);
    return 0;
}

/* Makes s's newly full blocks findable by later prompts; only after a
 * forward pass has written them. */
static void seq_register(pl_ctx *c, ctx_seq *s)
{
    if (!c->prefix_ok) return;
    if (c->swa) /* positions are absolute: the chain goes on past the front drops (file header) */
        prefix_register_at(&c->pc, &s->kv, s->tokens, (uint32_t)(s->n_dropped / c->p.block_size), &s->pcur);
    else if (!s->shifted)
        prefix_register(&c->pc, &s->kv, s->tokens, &s->pcur);
}


/* ---------------------------------------------------------------- window */

/* SWA: front blocks of s that lie wholly before the window of its next
 * token (slot h = tokens held attends to slots > h - W), but never the block
 * of its last token (so slots stay aligned with blocks). */
static uint32_t swa_drop_blocks(const pl_ctx *c, const ctx_seq *s)
{
    const uint32_t h = s->kv.n_tokens, t = c->p.block_size;
    if (h == 0 || h + 1 <= c->swa) return 0;
    const uint32_t k = (h + 1 - c->swa) / t, last = (h - 1) / t;
    return k < last ? k : last;
}

/* SWA's drop before an append of n tokens: frees the front blocks, moves the
 * history down; positions stay absolute (pos0 = n_dropped grows). PL_ERANGE
 * if the kept tokens and n do not fit n_ctx slots. */
static int seq_swa_room(pl_ctx *c, ctx_seq *s, uint32_t n)
{
    const uint32_t k = swa_drop_blocks(c, s), gone = k * c->p.block_size;
    if (s->kv.n_tokens - gone + (uint64_t)n > c->p.n_ctx)
        return err_set(PL_ERANGE, "sliding window: %u tokens at once do not fit the %u KV slots of a sequence "
                       "(%u kept for the window of %u)", n, c->p.n_ctx, s->kv.n_tokens - gone, c->swa);
    if (k == 0) return 0;
    int rc = kv_seq_drop_front(&s->kv, k);
    if (rc) return rc;
    s->stage_end = s->stage_end > gone ? s->stage_end - gone : 0; /* its block is kept: slots move down */
    memmove(s->tokens, s->tokens + gone, (size_t)(s->n_tokens - gone) * sizeof *s->tokens);
    s->n_tokens -= gone;
    s->n_dropped += gone;
    s->shifted = true;
    assert(s->n_tokens == s->kv.n_tokens);
    return 0;
}

/* Blocks to drop after the sinks so that n more tokens fit s's window
 * (0 if they fit already). */
static uint32_t win_drop_blocks(const pl_ctx *c, const ctx_seq *s, uint32_t n)
{
    const uint32_t lim = win_limit(&c->p), t = c->p.block_size;
    if (s->kv.n_tokens + n <= lim) return 0;
    return (s->kv.n_tokens + n - lim + t - 1) / t;
}

/* Makes room for n more tokens in s's window: drops whole blocks after the
 * sinks, re-rotates the keys that moved, drops the same history. PL_ERANGE
 * if n cannot fit even with every block after the sinks dropped. */
static int seq_window_room(pl_ctx *c, ctx_seq *s, uint32_t n)
{
    if (c->swa) return seq_swa_room(c, s, n);
    const uint32_t k = win_drop_blocks(c, s, n), t = c->p.block_size, sb = win_sink_blocks(&c->p);
    if (k == 0) return 0;
    const uint32_t held = (s->kv.n_tokens + t - 1) / t;
    if (sb + k > held)
        return err_set(PL_ERANGE, "window: %u tokens at once do not fit a window of %u tokens after %u sink tokens",
                       n, c->p.kv_window, sb * t);
    const uint32_t from = sb * t, end = (sb + k) * t < s->kv.n_tokens ? (sb + k) * t : s->kv.n_tokens;
    const uint32_t gone = end - from;
    int rc = kv_seq_drop_range(&s->kv, sb, k);
    if (rc) return rc;
    /* every block that moved down (now sb .. held - k - 1) holds keys rotated for gone more positions;
     * a staged sequence's partly filled block is in its stage, and so may be the last full one's rows */
    for (uint32_t i = sb; i < held - k; i++) {
        const uint32_t rows = (i + 1) * t <= s->kv.n_tokens ? t : s->kv.n_tokens - i * t;
        if (!s->stage.rows || rows == t) kv_shift_block(&c->rope, &c->pool, s->kv.table[i], rows, gone, c->shift_scratch);
    }
    if (s->stage.rows && s->stage_end > from) {
        if (s->stage_end <= end) s->stage_end = from; /* its block was dropped */
        else {
            s->stage_end -= gone;
            kv_shift_stage(&c->rope, &c->pool, &s->stage, (s->stage_end - 1) % t + 1, gone, c->shift_scratch);
        }
    }
    memmove(s->tokens + from, s->tokens + end, (size_t)(s->n_tokens - end) * sizeof *s->tokens);
    s->n_tokens -= gone;
    s->n_dropped += gone;
    s->shifted = true;
    assert(s->n_tokens == s->kv.n_tokens);
    return 0;
}

/* The most tokens one forward pass may append to s in window mode: up to
 * the limit, then one block per drop (see the file header). */
static uint32_t win_max_piece(const pl_ctx *c, const ctx_seq *s)
{
    if (c->swa) return c->p.n_ctx - (s->kv.n_tokens - swa_drop_blocks(c, s) * c->p.block_size);
    const uint32_t lim = win_limit(&c->p);
    return s->n_tokens < lim ? lim - s->n_tokens : c->p.block_size;
}

/* Window mode's append: tokens[0, n) in pieces that fit the window, with
 * logits for the last token (all = false) or a row per token (all). An
 * empty, unshifted sequence first takes its cached prefix (not with all:
 * every position is computed then). */
static int seq_append_window(pl_ctx *c, ctx_seq *s, int32_t id, const int32_t *tokens, uint32_t n, float *logits,
                             bool all)
{
    const size_t nv = c->pm->m->cfg.n_vocab;
    uint32_t done = 0;
    if (s->n_tokens == 0 && c->prefix_ok && !all) {
        const uint32_t lim = c->swa ? c->p.n_ctx : win_limit(&c->p);
        int hit = ctx_seq_attach_prefix(c, id, tokens, n < lim ? n : lim, false);
        if (hit < 0) return hit;
        done = (uint32_t)hit;
    }
    while (done < n) {
        uint32_t piece = win_max_piece(c, s);
        if (piece > n - done) piece = n - done;
        if (piece > c->p.max_batch) piece = c->p.max_batch;
        int rc = seq_window_room(c, s, piece);
        if (rc) return rc;
        memcpy(s->tokens + s->n_tokens, tokens + done, piece * sizeof *tokens);
        const bool last = done + piece == n;
        core_item it = {s, s->n_tokens, piece, all ? logits + (size_t)done * nv : last ? logits : NULL, all};
        rc = step_core(c, &it, 1);
        if (rc) return rc; /* step_core gave back the piece's KV slots */
        s->n_tokens += piece;
        seq_register(c, s);
        done += piece;
    }
    return 0;
}

bool ctx_window(const pl_ctx *c) { return ctx_slides(c); }

uint64_t ctx_seq_dropped(const pl_ctx *c, int32_t id)
{
    const ctx_seq *s = seq_get(c, id);
    return s ? s->n_dropped : 0;
}

uint64_t pl_seq_n_dropped(const pl_ctx *c, int32_t id) { return ctx_seq_dropped(c, id); }

uint32_t ctx_seq_max_chunk(const pl_ctx *c, int32_t id)
{
    const ctx_seq *s = seq_get(c, id);
    if (!s) return 0;
    return ctx_slides(c) ? win_max_piece(c, s) : c->p.n_ctx - s->n_tokens;
}

/* SWA: ctx_seq_window_blocks after the front drop (nothing is copied by
 * it; the dropped blocks held only by s come back). */
static int64_t swa_blocks(const pl_ctx *c, const ctx_seq *s, uint32_t n)
{
    const uint32_t k = swa_drop_blocks(c, s), t = c->p.block_size;
    if (k == 0) return -1;
    const kv_seq *kv = &s->kv;
    const kv_block *bl = kv->pool->blocks;
    int64_t need = 0;
    for (uint32_t i = 0; i < k; i++) need -= kv->mode == KV_SEQ_PAGED && bl[kv->table[i]].refcount == 1;
    const uint32_t kept = kv->n_tokens - k * t, nb = kv->n_blocks - k;
    if (kv->mode == KV_SEQ_PAGED) need += (int64_t)((kept + n + t - 1) / t) - (int64_t)nb;
    /* copy-on-write of the blocks the new tokens fall in that the table has (kv_seq_append) */
    const uint32_t first = kept / t, end = (uint32_t)(((uint64_t)kept + n - 1) / t) + 1, have = end < nb ? end : nb;
    for (uint32_t i = first; n && i < have; i++) need += bl[kv->table[k + i]].refcount > 1;
    return need > 0 ? need : 0;
}

int64_t ctx_seq_window_blocks(const pl_ctx *c, int32_t id, uint32_t n)
{
    const ctx_seq *s = seq_get(c, id);
    if (!s || !ctx_slides(c)) return -1;
    if (c->swa) return swa_blocks(c, s, n);
    const uint32_t k = win_drop_blocks(c, s, n), t = c->p.block_size, sb = win_sink_blocks(&c->p);
    const uint32_t held = (s->kv.n_tokens + t - 1) / t;
    if (k == 0 || sb + k > held) return -1;
    const uint32_t end = (sb + k) * t < s->kv.n_tokens ? (sb + k) * t : s->kv.n_tokens;
    const uint32_t kept = s->kv.n_tokens - (end - sb * t);
    int64_t need = kv_seq_drop_balance(&s->kv, sb, k);
    if (s->kv.mode == KV_SEQ_PAGED) need += (int64_t)((kept + n + t - 1) / t) - (int64_t)(s->kv.n_blocks - k);
    return need > 0 ? need : 0;
}

/* noinline: once pl_seq_step calls it in this file, GCC splits it and then
 * warns, falsely, that `it` may be read uninitialized (-Werror in CI). */
__attribute__((noinline)) int ctx_step(pl_ctx *c, const ctx_item *items, int n_items)
{
    core_item it[CTX_STEP_MAX_ITEMS];
    uint32_t total = 0;
    if (n_items <= 0 || n_items > CTX_STEP_MAX_ITEMS || (uint32_t)n_items > c->p.max_seqs)
        return err_set(PL_EINVAL, "ctx_step: %d items (1..%u)", n_items, c->p.max_seqs);
    if (c->p.no_kv_cache) return err_set(PL_EUNSUPPORTED, "ctx_step: not available in no-kv-cache mode");
    for (int i = 0; i < n_items; i++) {
        ctx_seq *s = seq_get(c, items[i].seq);
        int rc = tokens_check(c, s, items[i].seq, items[i].tokens, items[i].n);
        if (!rc && ctx_slides(c) && items[i].n > win_max_piece(c, s))
            rc = err_set(PL_ERANGE, "ctx_step: %u tokens for sequence %d, at most %u fit its window now", items[i].n,
                         items[i].seq, win_max_piece(c, s));
        if (rc) return rc;
        for (int j = 0; j < i; j++)
            if (items[j].seq == items[i].seq) return err_set(PL_EINVAL, "ctx_step: sequence %d twice", items[i].seq);
        total += items[i].n;
        it[i] = (core_item){s, s->n_tokens, items[i].n, items[i].logits, false};
    }
    if (total > c->p.max_batch) return err_set(PL_EINVAL, "ctx_step: %u tokens > max_batch %u", total, c->p.max_batch);
    /* A window drop is a complete change on its own (the sequence stays
     * valid and its logical length is kept in n_dropped), so drops done
     * before a failure are not undone. */
    for (int i = 0; ctx_slides(c) && i < n_items; i++) {
        int rc = seq_window_room(c, it[i].s, it[i].n);
        if (rc) return rc;
        it[i].from = it[i].s->n_tokens;
    }
    for (int i = 0; i < n_items; i++) memcpy(it[i].s->tokens + it[i].from, items[i].tokens, items[i].n * sizeof(int32_t));
    int rc = step_core(c, it, n_items);
    if (rc) return rc;
    for (int i = 0; i < n_items; i++) {
        it[i].s->n_tokens += it[i].n;
        seq_register(c, it[i].s);
    }
    return 0;
}

int pl_seq_step(pl_ctx *c, const int32_t *seqs, const int32_t *tokens, size_t n, float *logits)
{
    if (n == 0 || n > c->p.max_seqs || n > CTX_STEP_MAX_ITEMS)
        return err_set(PL_EINVAL, "pl_seq_step: %zu sequences (1..%u)", n, c->p.max_seqs);
    ctx_item *items = malloc(n * sizeof *items);
    if (!items) return err_set(PL_ENOMEM, "out of memory");
    const size_t nv = c->pm->m->cfg.n_vocab;
    for (size_t i = 0; i < n; i++) items[i] = (ctx_item){seqs[i], &tokens[i], 1, logits ? logits + i * nv : NULL};
    int rc = ctx_step(c, items, (int)n);
    free(items);
    return rc;
}

int pl_seq_append(pl_ctx *c, int32_t id, const int32_t *tokens, size_t n, float *logits)
{
    ctx_seq *s = seq_get(c, id);
    int rc = tokens_check(c, s, id, tokens, n);
    if (rc) return rc;
    if (ctx_slides(c)) return seq_append_window(c, s, id, tokens, (uint32_t)n, logits, false);
    const uint32_t old = s->n_tokens;
    memcpy(s->tokens + old, tokens, n * sizeof *tokens);
    if (c->p.no_kv_cache) {
        /* the baseline: every step recomputes K and V of every earlier token */
        kv_seq_truncate(&s->kv, 0);
        rc = run_range(c, s, 0, old + (uint32_t)n, logits);
        kv_seq_truncate(&s->kv, 0);
    } else {
        /* An empty sequence first takes what the prefix cache holds of its
         * tokens (never the last one, which must produce logits). */
        uint32_t from = old;
        if (old == 0 && c->prefix_ok) {
            int hit = ctx_seq_attach_prefix(c, id, tokens, (uint32_t)n, false);
            if (hit < 0) return hit;
            from = (uint32_t)hit;
        }
        rc = run_range(c, s, from, old + (uint32_t)n, logits);
        if (rc) {
            if (c->prefix_ok) prefix_cursor_truncate(&c->pc, &s->pcur, old);
            seq_kv_cut(c, s, old);
        }
    }
    if (rc) return rc;
    s->n_tokens = old + (uint32_t)n;
    if (!c->p.no_kv_cache) seq_register(c, s);
    return 0;
}

int pl_seq_append_all(pl_ctx *c, int32_t id, const int32_t *tokens, size_t n, float *logits)
{
    ctx_seq *s = seq_get(c, id);
    int rc = tokens_check(c, s, id, tokens, n);
    if (rc) return rc;
    if (c->p.no_kv_cache) return err_set(PL_EUNSUPPORTED, "pl_seq_append_all: not available without a KV cache");
    if (ctx_slides(c)) return seq_append_window(c, s, id, tokens, (uint32_t)n, logits, true);
    const uint32_t old = s->n_tokens;
    const size_t nv = c->pm->m->cfg.n_vocab;
    memcpy(s->tokens + old, tokens, n * sizeof *tokens);
    for (uint32_t at = old; at < old + n && !rc;) {
        uint32_t k = old + (uint32_t)n - at < c->p.max_batch ? old + (uint32_t)n - at : c->p.max_batch;
        core_item it = {s, at, k, logits + (size_t)(at - old) * nv, true};
        rc = step_core(c, &it, 1);
        at += k;
    }
    if (rc) {
        if (c->prefix_ok) prefix_cursor_truncate(&c->pc, &s->pcur, old);
        seq_kv_cut(c, s, old);
        return rc;
    }
    s->n_tokens = old + (uint32_t)n;
    seq_register(c, s);
    return 0;
}

int pl_seq_truncate(pl_ctx *c, int32_t id, uint32_t n)
{
    ctx_seq *s = seq_get(c, id);
    if (!s) return err_set(PL_EINVAL, "sequence %d does not exist", id);
    if (n > s->n_tokens) return err_set(PL_ERANGE, "truncate to %u > length %u", n, s->n_tokens);
    /* the cursor counts blocks from absolute position 0 (SWA's front drops included) */
    if (c->prefix_ok) prefix_cursor_truncate(&c->pc, &s->pcur, n + (c->swa ? (uint32_t)s->n_dropped : 0));
    if (!c->p.no_kv_cache) seq_kv_cut(c, s, n);
    s->n_tokens = n;
    if (s->shifted && n <= win_sink_blocks(&c->p) * c->p.block_size) {
        /* only sink tokens are left, at their original positions (SWA: none, positions restart) */
        s->shifted = false;
        s->n_dropped = 0;
        if (c->swa) prefix_cursor_init(&s->pcur);
    }
    return 0;
}

void pl_ctx_kv_stats(pl_ctx *c, pl_kv_stats *out)
{
    kv_seq *live[4096];
    size_t n = 0;
    for (uint32_t i = 0; i < c->p.max_seqs && n < 4096; i++)
        if (c->seqs[i].alive) live[n++] = &c->seqs[i].kv;
    kv_stats st;
    kv_stats_get(&c->pool, live, n, &st);
    *out = (pl_kv_stats){
        .block_size = c->p.block_size,
        .blocks_total = st.blocks_total,
        .blocks_used = st.blocks_used,
        .blocks_cached = st.blocks_cached,
        .blocks_free = st.blocks_free,
        .bytes_per_token = st.bytes_per_token,
        .block_bytes = st.block_bytes,
        .pool_bytes = st.pool_bytes,
        .tokens = st.tokens,
        .bytes_allocated = st.bytes_allocated,
        .bytes_live = st.bytes_live,
        .bytes_wasted = st.bytes_wasted,
        .utilisation = st.utilisation,
    };
    const kv_shape *sh = &c->pool.g.s;
    out->stage_bytes_per_seq = kv_dtype_stage_bytes(sh->dtype, sh->n_layers, sh->n_kv_heads, sh->head_dim, sh->block_size);
    out->stage_bytes = out->stage_bytes_per_seq * n;
}

uint64_t pl_seq_kv_bytes(const pl_ctx *c, int32_t id)
{
    const ctx_seq *s = seq_get(c, id);
    return s ? kv_seq_bytes_held(&s->kv) : 0;
}

int ctx_seq_attach_prefix(pl_ctx *c, int32_t id, const int32_t *tokens, uint32_t n, bool is_recompute)
{
    ctx_seq *s = seq_get(c, id);
    if (!s) return err_set(PL_EINVAL, "sequence %d does not exist", id);
    if (s->n_tokens != 0) return err_set(PL_EINVAL, "prefix attach to a non-empty sequence %d", id);
    if (!c->prefix_ok) return 0; /* static layout or no-kv-cache mode: nothing is cached */
    if (c->p.kv_window && n > win_limit(&c->p)) n = win_limit(&c->p); /* the rest streams through the window */
    if (n > c->p.n_ctx) n = c->p.n_ctx; /* SWA: the rest streams through the window */
    uint32_t hit = 0;
    int rc = prefix_attach(&c->pc, &s->kv, tokens, n, is_recompute, &s->pcur, &hit);
    if (rc) return rc;
    /* The hit tokens equal tokens that some sequence ran, so they are valid ids. */
    memcpy(s->tokens, tokens, hit * sizeof *tokens);
    s->n_tokens = hit;
    return (int)hit;
}

uint32_t ctx_prefix_peek(const pl_ctx *c, const int32_t *tokens, uint32_t n)
{
    return c->prefix_ok ? prefix_match_len(&c->pc, tokens, n) : 0;
}

const prefix_cache *ctx_prefix_cache(const pl_ctx *c) { return c->prefix_ok ? &c->pc : NULL; }

int ctx_seq_fork(pl_ctx *c, int32_t parent, int32_t *child)
{
    ctx_seq *p = seq_get(c, parent);
    if (!p) return err_set(PL_EINVAL, "sequence %d does not exist", parent);
    if (c->p.no_kv_cache) return err_set(PL_EUNSUPPORTED, "fork is not available in no-kv-cache mode");
    for (uint32_t i = 0; i < c->p.max_seqs; i++) {
        ctx_seq *s = &c->seqs[i];
        if (s->alive) continue;
        s->tokens = mem_calloc(c->p.n_ctx, sizeof *s->tokens);
        if (!s->tokens) return PL_ENOMEM;
        int rc = kv_stage_init(&s->stage, &c->pool.g);
        if (rc) { free(s->tokens); s->tokens = NULL; return rc; }
        rc = kv_seq_fork(&s->kv, &p->kv);
        if (rc) { kv_stage_free(&s->stage); free(s->tokens); s->tokens = NULL; return rc; }
        kv_stage_copy(&s->stage, &p->stage); /* the child's partly filled block is the parent's */
        s->stage_end = p->stage_end;
        memcpy(s->tokens, p->tokens, p->n_tokens * sizeof *s->tokens);
        s->n_tokens = p->n_tokens;
        s->pcur = p->pcur;
        s->n_dropped = p->n_dropped;
        s->shifted = p->shifted;
        s->alive = true;
        *child = (int32_t)i;
        return 0;
    }
    return err_set(PL_EFULL, "all %u sequence slots are in use", c->p.max_seqs);
}

kv_pool *ctx_pool(pl_ctx *c) { return &c->pool; }

uint32_t ctx_max_seqs(const pl_ctx *c) { return c->p.max_seqs; }

const kv_seq *ctx_seq_kv(const pl_ctx *c, int32_t id)
{
    const ctx_seq *s = seq_get(c, id);
    return s ? &s->kv : NULL;
}
