/* forward.c - the llama-family forward pass over a ragged batch; see model.h.
 *
 * Per layer (x is the residual stream, one row per batch token):
 *   xn = rmsnorm(x) * attn_norm
 *   q, k, v = xn Wq, xn Wk, xn Wv (+ biases: qwen2; per-head norms: qwen3)
 *   rope(q, k) at each token's position (its cache slot + its seq's pos0)
 *   K, V rows -> the KV cache at (seq, slot), through kv/kv_writer.h
 *   att = softmax(q K^T / sqrt(hd)) V over slots 0..slot of the token's seq
 *         (with a sliding window W: slot - W + 1..slot, attn_row.lo)
 *   x += att Wo
 *   xn = rmsnorm(x) * ffn_norm;  x += (silu(xn Wg) * (xn Wu)) Wd
 *     (or, in a mixture-of-experts layer, x += moe_ffn(xn): model/moe.h)
 *   deepseek2: the attention is mla_attention (model/mla.h, the latent KV
 *   kind) in place of q/k/v, RoPE, kv_store and attention, then Wo.
 * then logits = rmsnorm(x) * output_norm  Wout  for the rows asked for.
 * Each "x += ...; xn = rmsnorm(x) * norm" pair (after Wo, and after Wd
 * with the next layer's attn_norm) is one kern_add_rmsnorm pass, bit for
 * bit the two steps. RoPE's cos/sin are computed once per token and pass
 * (kern_rope_table into s->rope_cs), and every layer rotates q and k with
 * them (kern_rope_apply): the same values kern_rope computes per call.
 *
 * Every buffer is sized in fwd_state_new for max_tokens, max_ctx and the KV
 * geometry: the pass itself allocates nothing.
 *
 * The cache is kv/'s: kv_writer_store takes each layer's K and V rows
 * (any KV dtype; kv_writer.h has the dtypes' write steps), kv_view_init
 * gives the attention kernel its view of one sequence's cache in one
 * layer, and kv_writer_commit closes the layer after attention. The batch
 * as the cache sees it (each token's sequence and slot, each sequence's
 * block table) is fwd_batch's, copied into s->kvb once per pass.
 *
 * PAGELLM_FWD_PROFILE=1: wall and calling-thread CPU time of each phase of
 * the pass (fwd_prof below), printed on stderr by fwd_state_free, per token
 * for one-token passes (decode), per step for decode steps of several
 * sequences (a token each) and per pass for other batches. Off, a phase
 * mark costs one predictable branch.
 */
#include "model/model.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/mem.h"
#include "kernels/attention.h"
#include "kernels/attention_chunks.h"
#include "kernels/kernels.h"
#include "kv/kv_view.h"
#include "kv/kv_writer.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/arch_gemma.h"
#include "model/rope_scaling.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

/* Phases of a pass, in order (FP_MARK closes the running phase). */
enum {
    FP_EMBED, FP_ATTN_NORM, FP_QKV, FP_ROPE, FP_KV_STORE, FP_ATTN, FP_WO, FP_RESID_NORM, FP_GATE_UP, FP_SWIGLU,
    FP_DOWN, FP_RESID, FP_OUT_NORM, FP_LOGITS, FP_N
};
static const char *const fp_names[FP_N] = {
    "embed+rope_table", "attn_norm", "matmul qkv", "rope", "kv_store", "attention", "matmul wo",
    "resid+ffn_norm", "matmul gate+up", "swiglu", "matmul down", "resid(+attn_norm)", "output_norm",
    "matmul output",
};

enum { FP_DECODE, FP_BATCH, FP_STEPS, FP_KINDS }; /* a pass's kind: one token, a batch, several sequences' step */
typedef struct {
    int64_t wall[FP_KINDS][FP_N], cpu[FP_KINDS][FP_N]; /* ns */
    uint64_t passes[FP_KINDS], tokens[FP_KINDS], runs[FP_KINDS];
    int k;                               /* the running pass's kind */
    int64_t t_wall, t_cpu;               /* the running phase's start */
    unsigned long long runs0;            /* tp_runs at the pass's start */
} fwd_prof;

static int64_t fp_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct fwd_state {
    int max_tokens, max_ctx;
    fwd_prof *prof;                           /* PAGELLM_FWD_PROFILE, else NULL */
    threadpool *tp;
    float *x, *xn, *q, *k, *v, *att, *g, *u; /* [max_tokens][width] */
    float *rope_cs;                           /* [max_tokens][rope_dim] each token's RoPE table (rope[0]) */
    float *rope_cs_local;                     /* the same for local layers (rope[1]), or NULL */
    rope_spec rope[2];                        /* global layers', local layers' RoPE */
    float *attn_scratch;                      /* [threads][attn_scratch_stride] */
    size_t attn_scratch_stride;               /* attn_work + attn_chunks_work_floats, rounded to 16 */
    float *attn_parts;                        /* flash-decoding's pieces (attn_split), attn_parts_floats */
    size_t attn_parts_floats;
    size_t attn_work;                         /* where the chunks' work starts in a thread's scratch:
                                                 kv_view_scratch_floats(kvg, a call's max keys) */
    int attn_rows;                            /* attn_rows_max(max_ctx): rows per attention call */
    kv_writer *kvw;                           /* writes the layers' K/V rows into the pool */
    kv_batch_seq *kv_seqs;                    /* [max_tokens] the pass's sequences, as kv sees them */
    kv_batch kvb;                             /* the pass's batch, as kv sees it */
    moe_state *moe;                           /* mixture-of-experts scratch, NULL for a dense FFN */
    mla_state *mla;                           /* latent attention scratch, NULL without MLA */
    float *mla_out;                           /* [max_tokens][n_heads x v_head] MLA output before Wo */
};

/* Charges the time since the last mark to phase ph. */
static inline void fp_mark(fwd_state *s, int ph)
{
    fwd_prof *p = s->prof;
    if (__builtin_expect(!p, 1)) return;
    const int64_t w = fp_clock(CLOCK_MONOTONIC), c = fp_clock(CLOCK_THREAD_CPUTIME_ID);
    p->wall[p->k][ph] += w - p->t_wall;
    p->cpu[p->k][ph] += c - p->t_cpu;
    p->t_wall = w;
    p->t_cpu = c;
}

static void fp_begin(fwd_state *s, int n_tokens, int n_seqs)
{
    fwd_prof *p = s->prof;
    if (!p) return;
    p->k = n_tokens == 1 ? FP_DECODE : n_seqs == n_tokens ? FP_STEPS : FP_BATCH;
    p->passes[p->k]++;
    p->tokens[p->k] += (uint64_t)n_tokens;
    p->runs0 = tp_runs(s->tp);
    p->t_wall = fp_clock(CLOCK_MONOTONIC);
    p->t_cpu = fp_clock(CLOCK_THREAD_CPUTIME_ID);
}

static void fp_end(fwd_state *s)
{
    if (s->prof) s->prof->runs[s->prof->k] += tp_runs(s->tp) - s->prof->runs0;
}

static void fp_print(const fwd_prof *p)
{
    static const char *const kind[FP_KINDS] = {"decode (1-token passes)", "batches",
                                               "decode steps of several sequences (a token each)"};
    static const char *const unit[FP_KINDS] = {"token", "pass", "step"};
    for (int k = 0; k < FP_KINDS; k++) {
        if (!p->passes[k]) continue;
        const double per = k == FP_DECODE ? (double)p->tokens[k] : (double)p->passes[k];
        int64_t tw = 0, tc = 0;
        for (int i = 0; i < FP_N; i++) tw += p->wall[k][i], tc += p->cpu[k][i];
        fprintf(stderr, "pagellm forward profile, %s: %llu passes, %llu tokens, %.1f tp_run per %s; ms per %s "
                "(wall / calling-thread CPU):\n", kind[k], (unsigned long long)p->passes[k],
                (unsigned long long)p->tokens[k], p->runs[k] / per, unit[k], unit[k]);
        for (int i = 0; i < FP_N; i++)
            fprintf(stderr, "  %-16s %9.4f %9.4f  (%4.1f%% of wall)\n", fp_names[i], p->wall[k][i] / per / 1e6,
                    p->cpu[k][i] / per / 1e6, tw ? 100.0 * p->wall[k][i] / tw : 0.0);
        fprintf(stderr, "  %-16s %9.4f %9.4f\n", "total", tw / per / 1e6, tc / per / 1e6);
    }
}

void fwd_state_free(fwd_state *s)
{
    if (!s) return;
    if (s->prof) fp_print(s->prof);
    free(s->prof);
    float *bufs[] = {s->x,       s->xn,      s->q,       s->k,           s->v,        s->att,
                     s->g,       s->u,       s->rope_cs, s->rope_cs_local, s->attn_scratch, s->attn_parts};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(bufs[i]);
    kv_writer_free(s->kvw);
    moe_state_free(s->moe);
    mla_state_free(s->mla);
    mem_free(s->mla_out);
    free(s->kv_seqs);
    free(s);
}

/* Tiles of one flash-decoding pass at most (attn_split below; more: the
 * heads are shared out instead). */
#define ATTN_SPLIT_TILES_MAX 64
/* The pieces' buffer (attn_parts) holds the pieces of up to this many
 * decode tokens a thread (less one) at full context. What decides a pass
 * is whether its own pieces fit (attn_split_plan): more tokens of shorter
 * rows may still split keys; a step whose pieces do not fit shares out
 * heads (attn_head_tile), at least four sequences a thread. */
#define ATTN_SPLIT_TOKENS_PER_THREAD 4

/* KV heads a flash-decoding tile takes: as many as fill one attention call. */
static inline int attn_split_heads(const model_config *c)
{
    const int rep = (int)(c->n_heads / c->n_kv_heads), g = ATTN_ROWS_CAP / rep;
    return g < 1 ? 1 : g;
}

int fwd_state_new(fwd_state **out, const model *m, int max_tokens, int max_ctx, const kv_geom *kvg, threadpool *tp)
{
    const model_config *c = &m->cfg;
    fwd_state *s = mem_calloc(1, sizeof *s);
    if (!s) return PL_ENOMEM;
    s->max_tokens = max_tokens;
    s->max_ctx = max_ctx;
    s->tp = tp;
    const char *pe = getenv("PAGELLM_FWD_PROFILE");
    if (pe && strcmp(pe, "0") != 0) s->prof = calloc(1, sizeof *s->prof); /* NULL: no profile, no error */
    const size_t T = (size_t)max_tokens, qd = (size_t)c->n_heads * c->head_dim;
    const size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
    const size_t wide = c->dim > qd ? c->dim : qd;
    /* latent attention keeps its q, rows and output in mla_state: these stay token-sized stubs */
    const size_t qb = c->mla.kv_lora_rank ? 1 : qd, kvb = c->mla.kv_lora_rank ? 1 : kvd;
    s->x = mem_alloc_aligned(T * wide * sizeof(float), 64);
    s->xn = mem_alloc_aligned(T * wide * sizeof(float), 64);
    s->q = mem_alloc_aligned(T * qb * sizeof(float), 64);
    s->k = mem_alloc_aligned(T * kvb * sizeof(float), 64);
    s->v = mem_alloc_aligned(T * kvb * sizeof(float), 64);
    s->att = mem_alloc_aligned(T * qb * sizeof(float), 64);
    s->g = mem_alloc_aligned(T * c->ffn_dim * sizeof(float), 64);
    s->u = mem_alloc_aligned(T * c->ffn_dim * sizeof(float), 64);
    s->rope_cs = mem_alloc_aligned(T * c->rope_dim * sizeof(float), 64);
    if (c->local_window) s->rope_cs_local = mem_alloc_aligned(T * c->rope_dim * sizeof(float), 64);
    /* LongRoPE: the long factors when the context exceeds the original
     * one, as llama.cpp chooses them by its context per sequence */
    const float *ff = m->w.rope_freqs.data;
    if (!ff) ff = (uint32_t)max_ctx > c->rope_scaling.ctx_orig && m->w.rope_long.data ? m->w.rope_long.data
                                                                                  : m->w.rope_short.data;
    s->rope[0] = rope_spec_make(&c->rope_scaling, c->rope_dim, c->rope_base, c->rope_scale, c->rope_scale, ff);
    s->rope[1] = rope_spec_make(&c->rope_scaling, c->rope_dim, c->rope_base_local, c->rope_scale_local, c->rope_scale, ff);
    /* attention calls never see more keys than a chunk pair (attention_chunks.h) */
    const uint32_t call_max = attn_chunk_call_max(kvg->s.block_size);
    const int call_ctx = (uint32_t)max_ctx < call_max ? max_ctx : (int)call_max;
    s->attn_rows = attn_rows_max(call_ctx);
    assert(kvg->s.head_dim == c->head_dim && kvg->s.n_kv_heads == c->n_kv_heads &&
           kvg->s.n_layers <= c->n_layers); /* fewer: slots of layer groups (kv_groups.h) */
    assert((kvg->s.kind == KV_KIND_LATENT) == (c->mla.kv_lora_rank > 0));
    if (c->mla.kv_lora_rank) s->rope[0].mscale = c->mla.rope_mscale; /* deepseek2's YaRN factor (arch_deepseek2.c) */
    s->attn_work = (kv_view_scratch_floats(kvg, call_ctx) + 15) & ~(size_t)15;
    s->attn_scratch_stride = s->attn_work + ((attn_chunks_work_floats((int)c->head_dim) + 15) & ~(size_t)15);
    s->attn_scratch = mem_alloc_aligned((size_t)tp_size(tp) * s->attn_scratch_stride * sizeof(float), 64);
    /* up to ATTN_SPLIT_TOKENS_PER_THREAD tokens a thread, each in tiles of up to ATTN_ROWS_CAP rows with at most
     * max_ctx / chunk + 2 pieces (attn_split) */
    size_t split_tiles = (size_t)(tp_size(tp) > 1 ? ATTN_SPLIT_TOKENS_PER_THREAD * tp_size(tp) - 1 : 1) *
                         ((c->n_kv_heads + attn_split_heads(c) - 1) / attn_split_heads(c));
    if (split_tiles > ATTN_SPLIT_TILES_MAX) split_tiles = ATTN_SPLIT_TILES_MAX;
    s->attn_parts_floats = split_tiles * ((size_t)max_ctx / attn_chunk_keys(kvg->s.block_size) + 2) *
                           attn_chunks_piece_floats(ATTN_ROWS_CAP, (int)c->head_dim);
    s->attn_parts = mem_alloc_aligned(s->attn_parts_floats * sizeof(float), 64);
    s->kv_seqs = mem_calloc(T, sizeof *s->kv_seqs);
    int wrc = kv_writer_new(&s->kvw, kvg, max_tokens);
    if (!wrc) wrc = moe_state_new(&s->moe, c, max_tokens);
    const int tail_rows = kv_dtype_staged(kvg->s.dtype) ? max_tokens + (int)kvg->s.block_size : 0;
    if (!wrc) wrc = mla_state_new(&s->mla, c, max_tokens, max_ctx, tail_rows, tp_size(tp));
    if (!wrc && c->mla.kv_lora_rank) {
        s->mla_out = mem_alloc_aligned(T * c->n_heads * c->mla.v_head * sizeof(float), 64);
        if (!s->mla_out) wrc = PL_ENOMEM;
    }
    if (!s->x || !s->xn || !s->q || !s->k || !s->v || !s->att || !s->g || !s->u || !s->rope_cs || !s->attn_scratch ||
        !s->attn_parts ||
        !s->kv_seqs || wrc || (c->local_window && !s->rope_cs_local)) {
        fwd_state_free(s);
        return err_set(PL_ENOMEM, "out of memory for the forward pass's scratch (%d tokens a pass)", max_tokens);
    }
    *out = s;
    return 0;
}

static kern_mat mat_of(const weight *w)
{
    return (kern_mat){w->packed ? NULL : w->data, w->packed, w->type, (int)w->n_in, (int)w->n_out};
}

static void matmul(float *y, const float *x, const weight *w, int m, fwd_state *s)
{
    const kern_mat a = mat_of(w), *ap = &a;
    kern_matmul_mats(1, &y, x, &ap, m, s->tp);
}

/* Products of one input by two or three matrices (q, k, v; gate, up) in
 * one dispatch: one thread-pool barrier instead of one per matrix. */
static void matmul3(float *y0, float *y1, float *y2, const float *x, const weight *w0, const weight *w1,
                    const weight *w2, int m, fwd_state *s)
{
    const kern_mat a[3] = {mat_of(w0), mat_of(w1), w2 ? mat_of(w2) : mat_of(w1)};
    const kern_mat *ap[3] = {&a[0], &a[1], &a[2]};
    float *ys[3] = {y0, y1, y2};
    kern_matmul_mats(w2 ? 3 : 2, ys, x, ap, m, s->tp);
}

static void add_bias(float *y, const weight *b, int rows, int n)
{
    if (!b->data) return;
    const float *bv = b->data;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * n + i] += bv[i];
}

static void rmsnorm_rows(float *y, const float *x, const weight *w, int rows, int n, float eps)
{
    for (int r = 0; r < rows; r++) kern_rmsnorm(y + (size_t)r * n, x + (size_t)r * n, w->data, n, eps);
}

/* x += d, then d = rmsnorm(x) * w, row by row (bit for bit the add and
 * rmsnorm_rows: kern_add_rmsnorm). */
static void add_rmsnorm_rows(float *x, float *d, const weight *w, int rows, int n, float eps)
{
    for (int r = 0; r < rows; r++)
        kern_add_rmsnorm(x + (size_t)r * n, d + (size_t)r * n, d + (size_t)r * n, w->data, n, eps);
}

/* qwen3: RMSNorm over each head of each row. */
static void head_norm(float *x, const weight *w, int rows, int heads, int hd, float eps)
{
    if (!w->data) return;
    for (int i = 0; i < rows * heads; i++) kern_rmsnorm(x + (size_t)i * hd, x + (size_t)i * hd, w->data, hd, eps);
}

static void embed(const model *m, fwd_state *s, const fwd_batch *b)
{
    const weight *e = &m->w.tok_embd;
    const uint64_t rb = dtype_row_bytes(e->type, e->n_in);
    for (int t = 0; t < b->n_tokens; t++) {
        assert(b->tokens[t] >= 0 && (uint32_t)b->tokens[t] < m->cfg.n_vocab);
        quant_dequant_row(e->type, (const uint8_t *)e->data + (uint64_t)b->tokens[t] * rb,
                          s->x + (size_t)t * m->cfg.dim, (int64_t)m->cfg.dim);
        if (m->cfg.embd_scale > 0) /* gemma */
            for (uint32_t i = 0; i < m->cfg.dim; i++) s->x[(size_t)t * m->cfg.dim + i] *= m->cfg.embd_scale;
    }
}

typedef struct attn_split attn_split;
typedef struct {
    const model *m;
    fwd_state *s;
    const kv_pool *kv;
    const fwd_batch *b;
    uint32_t layer;
    const attn_split *split; /* this pass splits keys so (planned once by the caller), or NULL: heads */
    int tile;                /* split by heads: rows a tile at most (attn_head_tile) */
    int64_t total;           /* split by heads: the cost of every row (attn_tile_cost) */
} attn_job;

/* The attention work of a batch is cut into calls ("tiles") of up to
 * `tile` query vectors of one sequence: a run of consecutive batch tokens of
 * one sequence has vectors (KV head g, token t, head r of g's group) in that
 * order, and a tile is a slice of them. So a prefill tile holds one KV head
 * over several tokens (each K/V row it fetches serves them all) and a decode
 * tile several KV heads of one token (each cache row's heads are read
 * together). Every thread walks the same plan and takes the tiles whose
 * cost midpoint falls in its share of the total cost, so the split is
 * balanced by work (a row costs its n_ctx plus a fixed overhead; later
 * positions attend more) and needs no shared state. A row's result does not
 * depend on its tile (attention.h), so neither the tiling nor the thread
 * count changes any bit. */
typedef struct {
    int t0, t1; /* the run: batch tokens [t0, t1) of one sequence */
    int v0, nv; /* vectors [v0, v0 + nv) of the run (see attn_vector) */
} attn_tile;

/* Vector v of a run of len tokens: KV head, token offset, query head. */
static inline void attn_vector(int v, int len, int rep, int *g, int *dt, int *h)
{
    const int per_g = len * rep, rem = v % per_g;
    *g = v / per_g;
    *dt = rem / rep;
    *h = *g * rep + rem % rep;
}

/* Advances *it to the next tile of the plan (start from attn_plan_begin);
 * false at the end. */
static bool attn_plan_next(const fwd_batch *b, int n_heads, int tile, attn_tile *it)
{
    if (it->v0 + it->nv < (it->t1 - it->t0) * n_heads) {
        it->v0 += it->nv;
    } else {
        if (it->t1 >= b->n_tokens) return false;
        it->t0 = it->t1;
        it->t1 = it->t0 + 1;
        while (it->t1 < b->n_tokens && b->seq[it->t1] == b->seq[it->t0]) it->t1++;
        it->v0 = 0;
    }
    const int left = (it->t1 - it->t0) * n_heads - it->v0;
    it->nv = left < tile ? left : tile;
    return true;
}

static void attn_plan_begin(attn_tile *it) { *it = (attn_tile){0, 0, 0, 0}; }

/* Token t's attention context in cache slots: n_ctx (its slot + 1) and the
 * sliding window's lower bound lo. The window holds in absolute positions
 * (p attends to p - W + 1..p, HF transformers' sliding_window_overlay:
 * kv_idx > q_idx - W); slots are positions minus the same pos0, so the
 * bound is the same in slots. */
static inline int attn_ctx(const fwd_batch *b, int t) { return b->pos[t] + 1; }
static inline int attn_lo(const fwd_batch *b, int t, uint32_t layer_window)
{
    uint32_t w = b->seqs[b->seq[t]].window;
    if (layer_window && (!w || layer_window < w)) w = layer_window; /* gemma's local layers */
    return w && (uint32_t)b->pos[t] + 1 > w ? (int)((uint32_t)b->pos[t] + 1 - w) : 0;
}

/* Cost of a tile: sum over its rows of n_ctx + a per-row overhead (query
 * conversion, softmax set-up, output), in "key" units. */
static int64_t attn_tile_cost(const fwd_batch *b, int rep, const attn_tile *it, uint32_t lw)
{
    int64_t c = 0;
    for (int v = it->v0; v < it->v0 + it->nv; v++) {
        int g, dt, h;
        attn_vector(v, it->t1 - it->t0, rep, &g, &dt, &h);
        c += attn_ctx(b, it->t0 + dt) - attn_lo(b, it->t0 + dt, lw) + 16;
    }
    return c;
}

/* Flash-decoding: a batch of fewer tokens than threads, or a decode step of
 * several sequences (one token each), with rows long enough to be chunked,
 * splits the keys across the threads instead of the query heads. Split by
 * heads, a thread's smallest unit is a GQA group's whole row (attn_head_tile
 * halves tiles down to one group, no further), so a long row cannot be
 * balanced where a model has fewer KV heads than threads. Each thread then
 * reads every KV head of its share of the positions, once: split by heads, a
 * thread with fewer heads than a KV head's group would read that head's keys
 * beside another thread, and even with whole groups (TinyLlama's 4 KV heads
 * on 2 threads) each thread reads its part of every cache row, which
 * measured ~5-10% more attention time a decode step at depth 8192, and ~11%
 * at 32768 beside 512 against halved head tiles (docs/long-context.md,
 * "Flash-decoding across threads"). A tile is a token's run of KV heads, up
 * to ATTN_ROWS_CAP query rows (one attention call: two GQA groups a call
 * cost less per key than one); a unit is one piece (chunk) of one tile.
 * Units go out piece by piece (every tile's piece p, then p + 1), each to
 * the thread where the midpoint of its cost (its keys) falls, so a thread's
 * units are a run of positions of all of a token's heads; each unit writes
 * its rows' partial outputs and log-sum-exps into s->attn_parts, and the
 * calling thread folds them per tile in piece order after the pass
 * (attn_chunks_fold): the bits of attn_chunks_run whatever the thread count. */
struct attn_split {
    int n_tiles, max_np;
    int t[ATTN_SPLIT_TILES_MAX], g0[ATTN_SPLIT_TILES_MAX], ng[ATTN_SPLIT_TILES_MAX]; /* token t, KV heads g0.. */
    int np[ATTN_SPLIT_TILES_MAX];                                                     /* pieces of tile i */
    int n_ctx[ATTN_SPLIT_TILES_MAX], lo[ATTN_SPLIT_TILES_MAX];                         /* its rows' keys */
    uint32_t chunk_keys, block_size;
    bool own;                                                                         /* a last own-block piece */
    uint32_t c0[ATTN_SPLIT_TILES_MAX];                                                /* its first chunk */
    size_t off[ATTN_SPLIT_TILES_MAX];                                                 /* its pieces in attn_parts */
};

static inline float attn_scale_of(const model_config *c)
{
    /* q is pre-scaled where llama.cpp scales it (gemma, phi3: attention scale 1) */
    return c->q_scale > 0 ? 1.0f : 1.0f / sqrtf((float)c->head_dim);
}

/* The view of tile ti's sequence and its rows (the rep query heads of each
 * of its KV heads, in head order); returns the number of rows. */
static int split_rows(const attn_job *j, const attn_split *sp, int ti, kv_view *view, attn_row *rows)
{
    const model_config *c = &j->m->cfg;
    const fwd_batch *b = j->b;
    const int rep = (int)(c->n_heads / c->n_kv_heads), hd = (int)c->head_dim, t = sp->t[ti];
    const uint32_t lw = model_config_layer_local(c, j->layer) ? c->local_window : 0;
    kv_view_init(view, j->kv, j->s->kvw, &j->s->kvb, b->seq[t], j->layer);
    view->kv.softcap = c->attn_softcap;
    int n = 0;
    for (int g = sp->g0[ti]; g < sp->g0[ti] + sp->ng[ti]; g++)
        for (int r = 0; r < rep; r++, n++) {
            const size_t off = (size_t)t * c->n_heads * hd + (size_t)(g * rep + r) * hd;
            rows[n] = (attn_row){j->s->q + off, j->s->att + off, attn_ctx(b, t), g, attn_lo(b, t, lw)};
        }
    assert(n >= 1 && n <= ATTN_ROWS_CAP);
    return n;
}

/* Whether this pass splits keys across nth threads, and how (see above). */
static bool attn_split_plan(const attn_job *j, int nth, attn_split *sp)
{
    const model_config *c = &j->m->cfg;
    const int n_kv = (int)c->n_kv_heads, rep = (int)(c->n_heads / c->n_kv_heads), T = j->b->n_tokens;
    const int gpt = attn_split_heads(c), tpt = (n_kv + gpt - 1) / gpt;
    if (nth < 2 || rep > ATTN_ROWS_CAP || T * tpt > ATTN_SPLIT_TILES_MAX) return false;
    for (int t = 1; t < T && T >= nth; t++)
        if (j->b->seq[t] == j->b->seq[t - 1]) return false; /* a prompt's tokens: heads, chunks walked once a run */
    size_t off = 0;
    sp->n_tiles = sp->max_np = 0;
    for (int t = 0; t < T; t++)
        for (int g0 = 0; g0 < n_kv; g0 += gpt) {
            const int i = sp->n_tiles++;
            sp->t[i] = t;
            sp->g0[i] = g0;
            sp->ng[i] = n_kv - g0 < gpt ? n_kv - g0 : gpt;
            kv_view view;
            attn_row rows[ATTN_ROWS_CAP];
            const int n = split_rows(j, sp, i, &view, rows);
            sp->np[i] = attn_chunks_n_pieces(&view.kv, rows, n, &sp->c0[i]); /* 0: rows of one call */
            sp->n_ctx[i] = rows[0].n_ctx; /* a token's rows share their range */
            sp->lo[i] = rows[0].lo;
            sp->block_size = view.kv.block_size;
            sp->chunk_keys = attn_chunk_keys(view.kv.block_size);
            sp->own = view.kv.reader && view.kv.sealed;
            sp->max_np = sp->np[i] > sp->max_np ? sp->np[i] : sp->max_np;
            sp->off[i] = off;
            off += (size_t)sp->np[i] * attn_chunks_piece_floats(n, (int)c->head_dim);
        }
    return sp->max_np >= 2 && off <= j->s->attn_parts_floats; /* else no row is long: heads */
}

/* Units of tile ti: its pieces, or, for rows that take one call (a short
 * sequence beside long ones), that call. */
static inline int split_units(const attn_split *sp, int ti) { return sp->np[ti] ? sp->np[ti] : 1; }

/* The cost of piece p of tile ti: the keys it reads (chunk c0 + p's part
 * of the rows' range, or a block for the own-block pass) and a call's
 * overhead, in keys. A decode row's last chunk is often a few keys: by
 * count alone, units would load one thread with a chunk more. */
static int64_t split_piece_cost(const attn_split *sp, int ti, int p)
{
    if (!sp->np[ti]) return (int64_t)sp->n_ctx[ti] - sp->lo[ti] + 64;
    if (sp->own && p == sp->np[ti] - 1) return (int64_t)sp->block_size + 64;
    const int64_t a = (int64_t)(sp->c0[ti] + (uint32_t)p) * sp->chunk_keys, b = a + sp->chunk_keys;
    const int64_t lo = a > sp->lo[ti] ? a : sp->lo[ti], hi = b < sp->n_ctx[ti] ? b : sp->n_ctx[ti];
    return (hi > lo ? hi - lo : 0) + 64;
}

/* The thread a unit of work goes to, of nth sharing work of total cost
 * in order: the one its cost's midpoint falls to, done being the cost of
 * the units before it. Owners rise in that order. */
static inline int work_owner(int64_t done, int64_t cost, int64_t total, int nth)
{
    const int64_t owner = (done + cost / 2) * nth / total;
    return owner < nth ? (int)owner : nth - 1;
}

/* This thread's units of a split pass: units (piece, tile) in piece order,
 * a unit to the thread its cost's midpoint falls to. */
static void attn_split_work(const attn_job *j, const attn_split *sp, int ith, int nth, float *scratch)
{
    const model_config *c = &j->m->cfg;
    int64_t total = 0, done = 0;
    for (int ti = 0; ti < sp->n_tiles; ti++)
        for (int p = 0; p < split_units(sp, ti); p++) total += split_piece_cost(sp, ti, p);
    for (int p = 0; p < sp->max_np; p++)
        for (int ti = 0; ti < sp->n_tiles; ti++) {
            if (p >= split_units(sp, ti)) continue;
            const int64_t cost = split_piece_cost(sp, ti, p);
            const int owner = work_owner(done, cost, total, nth);
            done += cost;
            if (owner != ith) continue;
            kv_view view;
            attn_row rows[ATTN_ROWS_CAP];
            const int n = split_rows(j, sp, ti, &view, rows);
            if (!sp->np[ti]) { /* one call, straight into the rows' outputs */
                const attn_row *tile = rows;
                attn_chunks_run(&view.kv, &tile, &n, 1, attn_scale_of(c), scratch, j->s->attn_work,
                                scratch + j->s->attn_work);
                continue;
            }
            float *parts = j->s->attn_parts + sp->off[ti] + (size_t)p * attn_chunks_piece_floats(n, (int)c->head_dim);
            attn_chunks_piece(&view.kv, rows, n, p, sp->c0[ti], attn_scale_of(c), scratch, j->s->attn_work,
                              scratch + j->s->attn_work, parts);
        }
}

/* After a split pass: each tile's pieces folded into its rows' outputs. */
static void attn_split_fold(const attn_job *j, const attn_split *sp)
{
    for (int ti = 0; ti < sp->n_tiles; ti++) {
        if (!sp->np[ti]) continue; /* written by its one call */
        kv_view view;
        attn_row rows[ATTN_ROWS_CAP];
        const int n = split_rows(j, sp, ti, &view, rows);
        attn_chunks_fold(rows, n, (int)j->m->cfg.head_dim, j->s->attn_parts + sp->off[ti], sp->np[ti]);
    }
}

/* The most rows a tile of the head split may take on nth threads. Tiles
 * as large as the scratch allows serve more rows with each K/V row fetched
 * (a call of 32 rows reads each cache row whole), but small enough that
 * every thread gets work when the batch is small (one decode token: its
 * heads are shared out), and the tiles go out by cost whole: three
 * conversations of one token each on 2 threads, a tile a token, gave one
 * thread two of them (attention 14.1 ms a step against 15.4 for four).
 * So while the most loaded thread is more than 1/8 above its share, the
 * tile is halved (down to a GQA group), and a smaller tile is taken when it
 * lightens that thread by more than 1/8: fewer rows a call cost more a key
 * (at depth 16384, 16 rows a call instead of 32 cost q8_0 and q4_0 up to a
 * quarter more), which a small gain would not pay for. */
static int attn_head_tile(const attn_job *j, int nth, int64_t *total_out)
{
    const model_config *c = &j->m->cfg;
    const fwd_batch *b = j->b;
    const int n_heads = (int)c->n_heads, rep = (int)(c->n_heads / c->n_kv_heads);
    const uint32_t lw = model_config_layer_local(c, j->layer) ? c->local_window : 0;
    const int per_thread = (b->n_tokens * n_heads + nth - 1) / nth;
    int tile = per_thread < j->s->attn_rows ? per_thread : j->s->attn_rows, best = tile;
    attn_tile it;
    int64_t total = 0, best_max = 0; /* every row's cost, whatever the tiles */
    attn_plan_begin(&it);
    while (attn_plan_next(b, n_heads, tile, &it)) total += attn_tile_cost(b, rep, &it, lw);
    *total_out = total;
    if (nth < 2) return tile;
    for (;;) {
        /* the loads attn_worker's hand-out gives */
        int64_t done = 0, load = 0, max = 0;
        int owner_at = 0;
        attn_plan_begin(&it);
        while (attn_plan_next(b, n_heads, tile, &it)) {
            const int64_t cost = attn_tile_cost(b, rep, &it, lw);
            const int owner = work_owner(done, cost, total, nth);
            if (owner != owner_at) load = 0, owner_at = owner;
            load += cost;
            done += cost;
            max = load > max ? load : max;
        }
        if (!best_max || max * 8 < best_max * 7) best_max = max, best = tile;
        if (best_max * nth * 8 <= total * 9 || tile / 2 < (rep < tile ? rep : tile)) return best;
        tile /= 2;
    }
}

static void attn_worker(void *arg, int ith, int nth)
{
    const attn_job *j = arg;
    const model_config *c = &j->m->cfg;
    const fwd_batch *b = j->b;
    const int n_heads = (int)c->n_heads, rep = (int)(c->n_heads / c->n_kv_heads), hd = (int)c->head_dim;
    const size_t qd = (size_t)n_heads * hd;
    float *scratch = j->s->attn_scratch + (size_t)ith * j->s->attn_scratch_stride;
    if (j->split) {
        attn_split_work(j, j->split, ith, nth, scratch);
        return;
    }
    const float scale = attn_scale_of(c);
    const uint32_t lw = model_config_layer_local(c, j->layer) ? c->local_window : 0;
    const int tile = j->tile;
    assert(tile >= 1 && tile <= j->s->attn_rows);
    attn_tile it;
    const int64_t total = j->total;
    int64_t done = 0;
    /* this thread's tiles, in groups of one sequence's run (attn_chunks_run
     * walks a long context's chunks once for the whole group) */
    attn_row rows[ATTN_TILES_CAP][ATTN_ROWS_CAP];
    const attn_row *tiles[ATTN_TILES_CAP];
    int n_rows[ATTN_TILES_CAP], n_tiles = 0, run_t0 = -1;
    attn_plan_begin(&it);
    for (bool more = true; more;) {
        more = attn_plan_next(b, n_heads, tile, &it);
        bool mine = false;
        if (more) {
            const int64_t cost = attn_tile_cost(b, rep, &it, lw);
            const int owner = work_owner(done, cost, total, nth);
            done += cost;
            mine = owner == ith;
            if (owner > ith) more = false; /* tiles are handed out in plan order */
        }
        if (n_tiles && (!mine || it.t0 != run_t0 || n_tiles == ATTN_TILES_CAP)) { /* the group ends */
            kv_view view; /* this sequence's cache in this layer, as the kernel reads it */
            kv_view_init(&view, j->kv, j->s->kvw, &j->s->kvb, b->seq[run_t0], j->layer);
            view.kv.softcap = c->attn_softcap;
            attn_chunks_run(&view.kv, tiles, n_rows, n_tiles, scale, scratch, j->s->attn_work,
                            scratch + j->s->attn_work);
            n_tiles = 0;
        }
        if (!mine) continue;
        run_t0 = it.t0;
        for (int v = 0; v < it.nv; v++) {
            int g, dt, h;
            attn_vector(it.v0 + v, it.t1 - it.t0, rep, &g, &dt, &h);
            const int t = it.t0 + dt;
            const size_t off = (size_t)t * qd + (size_t)h * hd;
            rows[n_tiles][v] = (attn_row){j->s->q + off, j->s->att + off, attn_ctx(b, t), g, attn_lo(b, t, lw)};
        }
        tiles[n_tiles] = rows[n_tiles];
        n_rows[n_tiles++] = it.nv;
    }
}

/* Layer l. On entry s->xn holds rmsnorm(x) * attn_norm of layer l; on exit
 * x holds the layer's output and, if next_norm, xn holds rmsnorm(x) *
 * next_norm (the residual add fused with the next layer's norm). */
static void layer_forward(const model *m, fwd_state *s, kv_pool *kv, const fwd_batch *b, uint32_t l,
                          const weight *next_norm)
{
    const model_config *c = &m->cfg;
    const layer_weights *w = &m->w.layers[l];
    const int T = b->n_tokens, hd = (int)c->head_dim;
    const int qd = (int)c->n_heads * hd, kvd = (int)c->n_kv_heads * hd;
    assert(!w->mla == !c->mla.kv_lora_rank); /* q/k/v/att are stubs for MLA models (fwd_state_new) */
    if (w->mla) {
        mla_attention(s->mla, c, w->mla, s->xn, s->mla_out, kv, &s->kvb, l, s->rope_cs, s->tp);
        fp_mark(s, FP_ATTN);
        matmul(s->xn, s->mla_out, &w->wo, T, s);
        fp_mark(s, FP_WO);
    } else {
        matmul3(s->q, s->k, s->v, s->xn, &w->wq, &w->wk, &w->wv, T, s);
        add_bias(s->q, &w->bq, T, qd);
        add_bias(s->k, &w->bk, T, kvd);
        add_bias(s->v, &w->bv, T, kvd);
        head_norm(s->q, &w->q_norm, T, (int)c->n_heads, hd, c->norm_eps);
        head_norm(s->k, &w->k_norm, T, (int)c->n_kv_heads, hd, c->norm_eps);
        fp_mark(s, FP_QKV);
        const float *tab = model_config_layer_local(c, l) ? s->rope_cs_local : s->rope_cs;
        for (int t = 0; t < T; t++) { /* with the tables model_forward made for this pass */
            const float *cs = tab + (size_t)t * c->rope_dim;
            kern_rope_apply(s->q + (size_t)t * qd, (int)c->n_heads, hd, (int)c->rope_dim, c->rope_neox, cs);
            kern_rope_apply(s->k + (size_t)t * kvd, (int)c->n_kv_heads, hd, (int)c->rope_dim, c->rope_neox, cs);
        }
        if (c->q_scale > 0)
            for (size_t i = 0; i < (size_t)T * qd; i++) s->q[i] *= c->q_scale;
        fp_mark(s, FP_ROPE);
        kv_writer_store(s->kvw, kv, &s->kvb, l, s->k, s->v);
        fp_mark(s, FP_KV_STORE);
        attn_job job = {m, s, kv, b, l, NULL, 0, 0};
        attn_split sp;
        if (attn_split_plan(&job, tp_size(s->tp), &sp)) job.split = &sp;
        else job.tile = attn_head_tile(&job, tp_size(s->tp), &job.total);
        tp_run(s->tp, attn_worker, &job);
        if (job.split) attn_split_fold(&job, job.split);
        kv_writer_commit(s->kvw, &s->kvb, l);
        fp_mark(s, FP_ATTN);
        matmul(s->xn, s->att, &w->wo, T, s);
        fp_mark(s, FP_WO);
    }
    if (w->post_attn_norm.data) rmsnorm_rows(s->xn, s->xn, &w->post_attn_norm, T, (int)c->dim, c->norm_eps);
    add_rmsnorm_rows(s->x, s->xn, &w->ffn_norm, T, (int)c->dim, c->norm_eps);
    fp_mark(s, FP_RESID_NORM);
    if (w->moe) {
        moe_ffn(s->moe, c, w->moe, s->xn, s->xn, T, s->tp);
        fp_mark(s, FP_DOWN);
    } else {
        matmul3(s->g, s->u, NULL, s->xn, &w->w_gate, &w->w_up, NULL, T, s);
        fp_mark(s, FP_GATE_UP);
        /* per row: over the flattened batch, where a row's tail falls (SIMD
         * body or scalar tail) would depend on T, and the two expf differ */
        for (int t = 0; t < T; t++)
            if (c->gelu) gemma_geglu(s->g + (size_t)t * c->ffn_dim, s->u + (size_t)t * c->ffn_dim, (int)c->ffn_dim);
            else kern_swiglu(s->g + (size_t)t * c->ffn_dim, s->u + (size_t)t * c->ffn_dim, (int)c->ffn_dim);
        fp_mark(s, FP_SWIGLU);
        matmul(s->xn, s->g, &w->w_down, T, s);
        fp_mark(s, FP_DOWN);
    }
    if (w->post_ffn_norm.data) rmsnorm_rows(s->xn, s->xn, &w->post_ffn_norm, T, (int)c->dim, c->norm_eps);
    if (next_norm) add_rmsnorm_rows(s->x, s->xn, next_norm, T, (int)c->dim, c->norm_eps);
    else
        for (size_t i = 0; i < (size_t)T * c->dim; i++) s->x[i] += s->xn[i];
    fp_mark(s, FP_RESID);
}

/* Layer l of a local group (kv/kv_groups.h): the same layer over that
 * group's tables, whose slots start at the first block the window keeps
 * (the window bound holds in slots as in positions; RoPE was taken from
 * the absolute positions already). */
static void layer_forward_local(const model *m, fwd_state *s, kv_pool *kv, const fwd_batch *b, uint32_t l,
                                const weight *next_norm)
{
    const fwd_groups *gr = b->groups;
    const kv_batch glob = s->kvb;
    fwd_batch bl = *b;
    bl.pos = gr->slot;
    s->kvb.slot = gr->slot;
    s->kvb.seqs = gr->seqs + (size_t)(gr->kg->group[l] - 1) * (size_t)b->n_seqs;
    layer_forward(m, s, kv, &bl, l, next_norm);
    s->kvb = glob;
}

/* Embeddings: the output-normed rows of the sequences that pool, into
 * their fwd_seq.pool (s->xn's first row is scratch; the logits reuse it). */
static void pool_rows(const model *m, fwd_state *s, const fwd_batch *b)
{
    const uint32_t dim = m->cfg.dim;
    for (int t = 0; t < b->n_tokens; t++) {
        const fwd_seq *q = &b->seqs[b->seq[t]];
        if (!q->pool || (q->pool_kind == MODEL_POOL_CLS && b->pos[t] != 0)) continue;
        kern_rmsnorm(s->xn, s->x + (size_t)t * dim, m->w.output_norm.data, (int)dim, m->cfg.norm_eps);
        if (q->pool_kind == MODEL_POOL_MEAN)
            for (uint32_t i = 0; i < dim; i++) q->pool[i] += s->xn[i];
        else
            memcpy(q->pool, s->xn, dim * sizeof(float));
    }
}

int model_forward(const model *m, fwd_state *s, kv_pool *kv, const fwd_batch *b, float *logits)
{
    const model_config *c = &m->cfg;
    assert(b->n_tokens > 0 && b->n_tokens <= s->max_tokens);
    assert(b->n_logits >= 0 && b->n_logits <= b->n_tokens);
    for (int t = 0; t < b->n_tokens; t++) assert(b->pos[t] < s->max_ctx);
    assert(b->n_seqs <= s->max_tokens);
    for (int i = 0; i < b->n_seqs; i++) s->kv_seqs[i] = b->seqs[i].kv;
    s->kvb = (kv_batch){b->n_tokens, b->pos, b->seq, s->kv_seqs, b->n_seqs};
    kv_writer_begin(s->kvw, &s->kvb);
    fp_begin(s, b->n_tokens, b->n_seqs);
    embed(m, s, b);
    /* RoPE's cos/sin per token, once for all layers and heads */
    for (int t = 0; t < b->n_tokens; t++) {
        const int p = (int)((uint32_t)b->pos[t] + b->seqs[b->seq[t]].pos0);
        rope_spec_table(&s->rope[0], s->rope_cs + (size_t)t * c->rope_dim, p);
        if (s->rope_cs_local) rope_spec_table(&s->rope[1], s->rope_cs_local + (size_t)t * c->rope_dim, p);
    }
    fp_mark(s, FP_EMBED);
    rmsnorm_rows(s->xn, s->x, &m->w.layers[0].attn_norm, b->n_tokens, (int)c->dim, c->norm_eps);
    fp_mark(s, FP_ATTN_NORM);
    for (uint32_t l = 0; l < c->n_layers; l++) {
        const weight *next = l + 1 < c->n_layers ? &m->w.layers[l + 1].attn_norm : NULL;
        if (b->groups && b->groups->kg->group[l]) layer_forward_local(m, s, kv, b, l, next);
        else layer_forward(m, s, kv, b, l, next);
    }
    pool_rows(m, s, b);
    if (b->n_logits == 0) {
        fp_end(s);
        return 0;
    }
    /* gather the rows that want logits, normalise, project */
    for (int i = 0; i < b->n_logits; i++)
        kern_rmsnorm(s->xn + (size_t)i * c->dim, s->x + (size_t)b->logit_idx[i] * c->dim, m->w.output_norm.data,
                     (int)c->dim, c->norm_eps);
    fp_mark(s, FP_OUT_NORM);
    matmul(logits, s->xn, &m->w.output, b->n_logits, s);
    if (c->final_softcap > 0) gemma_softcap(logits, (size_t)b->n_logits * c->n_vocab, c->final_softcap);
    fp_mark(s, FP_LOGITS);
    fp_end(s);
    return 0;
}
