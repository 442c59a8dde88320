/* forward.c - the llama-family forward pass over a ragged batch; see model.h.
 *
 * Per layer (x is the residual stream, one row per batch token):
 *   xn = rmsnorm(x) * attn_norm
 *   q, k, v = xn Wq, xn Wk, xn Wv (+ biases: qwen2; per-head norms: qwen3)
 *   rope(q, k) at each token's position
 *   K, V rows -> the KV cache (encoded in its dtype) at (seq, pos)
 *   att = softmax(q K^T / sqrt(hd)) V over positions 0..pos of the token's seq
 *   x += att Wo
 *   xn = rmsnorm(x) * ffn_norm;  x += (silu(xn Wg) * (xn Wu)) Wd
 * then logits = rmsnorm(x) * output_norm  Wout  for the rows asked for.
 *
 * Every buffer is sized in fwd_state_new for max_tokens and max_ctx: the pass
 * itself allocates nothing.
 */
#include "model/model.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

struct fwd_state {
    int max_tokens, max_ctx;
    threadpool *tp;
    float *x, *xn, *q, *k, *v, *att, *g, *u; /* [max_tokens][width] */
    float *attn_scratch;                      /* [threads][attn_scratch_stride] */
    size_t attn_scratch_stride;               /* attn_scratch_floats(max_ctx, head_dim), rounded to 16 */
    int attn_rows;                            /* attn_rows_max(max_ctx): rows per attention call */
};

void fwd_state_free(fwd_state *s)
{
    if (!s) return;
    float *bufs[] = {s->x, s->xn, s->q, s->k, s->v, s->att, s->g, s->u, s->attn_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) mem_free(bufs[i]);
    free(s);
}

int fwd_state_new(fwd_state **out, const model *m, int max_tokens, int max_ctx, threadpool *tp)
{
    const model_config *c = &m->cfg;
    fwd_state *s = mem_calloc(1, sizeof *s);
    if (!s) return PL_ENOMEM;
    s->max_tokens = max_tokens;
    s->max_ctx = max_ctx;
    s->tp = tp;
    const size_t T = (size_t)max_tokens, qd = (size_t)c->n_heads * c->head_dim;
    const size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
    const size_t wide = c->dim > qd ? c->dim : qd;
    s->x = mem_alloc_aligned(T * wide * sizeof(float), 64);
    s->xn = mem_alloc_aligned(T * wide * sizeof(float), 64);
    s->q = mem_alloc_aligned(T * qd * sizeof(float), 64);
    s->k = mem_alloc_aligned(T * kvd * sizeof(float), 64);
    s->v = mem_alloc_aligned(T * kvd * sizeof(float), 64);
    s->att = mem_alloc_aligned(T * qd * sizeof(float), 64);
    s->g = mem_alloc_aligned(T * c->ffn_dim * sizeof(float), 64);
    s->u = mem_alloc_aligned(T * c->ffn_dim * sizeof(float), 64);
    s->attn_rows = attn_rows_max(max_ctx);
    s->attn_scratch_stride = (attn_scratch_floats(max_ctx, (int)c->head_dim) + 15) & ~(size_t)15;
    s->attn_scratch = mem_alloc_aligned((size_t)tp_size(tp) * s->attn_scratch_stride * sizeof(float), 64);
    if (!s->x || !s->xn || !s->q || !s->k || !s->v || !s->att || !s->g || !s->u || !s->attn_scratch) {
        fwd_state_free(s);
        return PL_ENOMEM;
    }
    *out = s;
    return 0;
}

/* The ggml row type a KV dtype is stored in (per head). */
static uint32_t kv_row_type(kv_dtype t)
{
    switch (t) {
    case KV_F32: return DT_F32;
    case KV_F16: return DT_F16;
    case KV_BF16: return DT_BF16;
    case KV_Q8_0: return DT_Q8_0;
    case KV_Q4_0: return DT_Q4_0;
    default: return DT_COUNT;
    }
}

bool model_kv_dtype_ok(const model *m, kv_dtype t)
{
    uint32_t rt = kv_row_type(t);
    return rt != DT_COUNT && dtype_row_bytes(rt, m->cfg.head_dim) != 0;
}

static void matmul(float *y, const float *x, const weight *w, int m, fwd_state *s)
{
    kern_matmul(y, x, w->data, w->type, m, (int)w->n_in, (int)w->n_out, s->tp);
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
    }
}

/* Encodes one head's K or V row in the cache's row type. q4_0 uses ggml's
 * reference rounding (what llama.cpp's cache does), not the searching
 * weight quantizer, which is slower and would store different values. */
static void kv_encode(uint32_t rt, const float *src, uint8_t *dst, int n)
{
    if (rt == DT_Q4_0) quant_q4_0_quantize_row_ref(src, (block_q4_0 *)dst, n);
    else quant_quantize_row(rt, src, dst, n);
}

/* Writes the batch's K and V rows of layer l into the cache. */
static void kv_store(const model *m, fwd_state *s, kv_pool *kv, const fwd_batch *b, uint32_t l)
{
    const model_config *c = &m->cfg;
    const uint32_t rt = kv_row_type(kv->g.s.dtype), bs = kv->g.s.block_size;
    const uint64_t head_bytes = dtype_row_bytes(rt, c->head_dim);
    const size_t kvd = (size_t)c->n_kv_heads * c->head_dim;
    for (int t = 0; t < b->n_tokens; t++) {
        const fwd_seq *sq = &b->seqs[b->seq[t]];
        const uint32_t p = (uint32_t)b->pos[t];
        assert(p / bs < sq->n_blocks);
        const uint32_t blk = sq->blocks[p / bs];
        uint8_t *kr = kv_block_k(kv, blk, l) + (p % bs) * kv_row_stride(kv, KV_PLANE_K);
        uint8_t *vr = kv_block_v(kv, blk, l) + (p % bs) * kv_row_stride(kv, KV_PLANE_V);
        for (uint32_t h = 0; h < c->n_kv_heads; h++) {
            kv_encode(rt, s->k + t * kvd + h * c->head_dim, kr + h * head_bytes, (int)c->head_dim);
            kv_encode(rt, s->v + t * kvd + h * c->head_dim, vr + h * head_bytes, (int)c->head_dim);
        }
    }
}

typedef struct {
    const model *m;
    fwd_state *s;
    const kv_pool *kv;
    const fwd_batch *b;
    uint32_t layer;
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

/* Cost of a tile: sum over its rows of n_ctx + a per-row overhead (query
 * conversion, softmax set-up, output), in "key" units. */
static int64_t attn_tile_cost(const fwd_batch *b, int rep, const attn_tile *it)
{
    int64_t c = 0;
    for (int v = it->v0; v < it->v0 + it->nv; v++) {
        int g, dt, h;
        attn_vector(v, it->t1 - it->t0, rep, &g, &dt, &h);
        c += b->pos[it->t0 + dt] + 1 + 16;
    }
    return c;
}

static void attn_worker(void *arg, int ith, int nth)
{
    const attn_job *j = arg;
    const model_config *c = &j->m->cfg;
    const fwd_batch *b = j->b;
    const int n_heads = (int)c->n_heads, rep = (int)(c->n_heads / c->n_kv_heads), hd = (int)c->head_dim;
    const uint32_t rt = kv_row_type(j->kv->g.s.dtype);
    const size_t qd = (size_t)n_heads * hd;
    float *scratch = j->s->attn_scratch + (size_t)ith * j->s->attn_scratch_stride;
    const float scale = 1.0f / sqrtf((float)hd);
    /* Tiles as large as the scratch allows (each K/V row fetched serves
     * more rows), but small enough that every thread gets work when the
     * batch is small (one decode token: its heads are shared out). */
    const int per_thread = (b->n_tokens * n_heads + nth - 1) / nth;
    const int tile = per_thread < j->s->attn_rows ? per_thread : j->s->attn_rows;
    attn_tile it;
    int64_t total = 0, done = 0;
    attn_plan_begin(&it);
    while (attn_plan_next(b, n_heads, tile, &it)) total += attn_tile_cost(b, rep, &it);
    attn_plan_begin(&it);
    while (attn_plan_next(b, n_heads, tile, &it)) {
        const int64_t cost = attn_tile_cost(b, rep, &it);
        int64_t owner = (done + cost / 2) * nth / total;
        done += cost;
        if (owner > nth - 1) owner = nth - 1;
        if (owner < ith) continue;
        if (owner > ith) break; /* tiles are handed out in plan order */
        const fwd_seq *sq = &b->seqs[b->seq[it.t0]];
        const attn_kv akv = {
            .blocks = sq->blocks,
            .k_base = kv_block_k(j->kv, 0, j->layer),
            .v_base = kv_block_v(j->kv, 0, j->layer),
            .block_bytes = j->kv->g.block_bytes,
            .block_size = j->kv->g.s.block_size,
            .row_bytes = kv_row_stride(j->kv, KV_PLANE_K),
            .head_bytes = dtype_row_bytes(rt, (uint64_t)hd),
            .kv_type = rt,
            .head_dim = hd,
        };
        attn_row rows[ATTN_ROWS_CAP];
        for (int v = 0; v < it.nv; v++) {
            int g, dt, h;
            attn_vector(it.v0 + v, it.t1 - it.t0, rep, &g, &dt, &h);
            const int t = it.t0 + dt;
            const size_t off = (size_t)t * qd + (size_t)h * hd;
            rows[v] = (attn_row){j->s->q + off, j->s->att + off, b->pos[t] + 1, g};
        }
        attn_paged(&akv, rows, it.nv, scale, scratch, j->s->attn_scratch_stride);
    }
}

static void layer_forward(const model *m, fwd_state *s, kv_pool *kv, const fwd_batch *b, uint32_t l)
{
    const model_config *c = &m->cfg;
    const layer_weights *w = &m->w.layers[l];
    const int T = b->n_tokens, hd = (int)c->head_dim;
    const int qd = (int)c->n_heads * hd, kvd = (int)c->n_kv_heads * hd;
    rmsnorm_rows(s->xn, s->x, &w->attn_norm, T, (int)c->dim, c->norm_eps);
    matmul(s->q, s->xn, &w->wq, T, s);
    matmul(s->k, s->xn, &w->wk, T, s);
    matmul(s->v, s->xn, &w->wv, T, s);
    add_bias(s->q, &w->bq, T, qd);
    add_bias(s->k, &w->bk, T, kvd);
    add_bias(s->v, &w->bv, T, kvd);
    head_norm(s->q, &w->q_norm, T, (int)c->n_heads, hd, c->norm_eps);
    head_norm(s->k, &w->k_norm, T, (int)c->n_kv_heads, hd, c->norm_eps);
    const float *ff = m->w.rope_freqs.data;
    for (int t = 0; t < T; t++) {
        kern_rope(s->q + (size_t)t * qd, (int)c->n_heads, hd, (int)c->rope_dim, b->pos[t], c->rope_base,
                  c->rope_scale, c->rope_neox, ff);
        kern_rope(s->k + (size_t)t * kvd, (int)c->n_kv_heads, hd, (int)c->rope_dim, b->pos[t], c->rope_base,
                  c->rope_scale, c->rope_neox, ff);
    }
    kv_store(m, s, kv, b, l);
    attn_job job = {m, s, kv, b, l};
    tp_run(s->tp, attn_worker, &job);
    matmul(s->xn, s->att, &w->wo, T, s);
    for (size_t i = 0; i < (size_t)T * c->dim; i++) s->x[i] += s->xn[i];
    rmsnorm_rows(s->xn, s->x, &w->ffn_norm, T, (int)c->dim, c->norm_eps);
    matmul(s->g, s->xn, &w->w_gate, T, s);
    matmul(s->u, s->xn, &w->w_up, T, s);
    /* per row: over the flattened batch, where a row's tail falls (SIMD
     * body or scalar tail) would depend on T, and the two expf differ */
    for (int t = 0; t < T; t++)
        kern_swiglu(s->g + (size_t)t * c->ffn_dim, s->u + (size_t)t * c->ffn_dim, (int)c->ffn_dim);
    matmul(s->xn, s->g, &w->w_down, T, s);
    for (size_t i = 0; i < (size_t)T * c->dim; i++) s->x[i] += s->xn[i];
}

int model_forward(const model *m, fwd_state *s, kv_pool *kv, const fwd_batch *b, float *logits)
{
    const model_config *c = &m->cfg;
    assert(b->n_tokens > 0 && b->n_tokens <= s->max_tokens);
    assert(b->n_logits >= 0 && b->n_logits <= b->n_tokens);
    if (kv_row_type(kv->g.s.dtype) == DT_COUNT)
        return err_set(PL_EUNSUPPORTED, "forward: KV dtype %s is not supported by the forward pass yet",
                       kv_dtype_name(kv->g.s.dtype));
    for (int t = 0; t < b->n_tokens; t++) assert(b->pos[t] < s->max_ctx);
    embed(m, s, b);
    for (uint32_t l = 0; l < c->n_layers; l++) layer_forward(m, s, kv, b, l);
    if (b->n_logits == 0) return 0;
    /* gather the rows that want logits, normalise, project */
    for (int i = 0; i < b->n_logits; i++)
        kern_rmsnorm(s->xn + (size_t)i * c->dim, s->x + (size_t)b->logit_idx[i] * c->dim, m->w.output_norm.data,
                     (int)c->dim, c->norm_eps);
    matmul(logits, s->xn, &m->w.output, b->n_logits, s);
    return 0;
}
