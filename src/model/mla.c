/* mla.c - multi-head latent attention; see mla.h. */
#include "model/mla.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "kernels/attention_mla.h"
#include "kernels/kernels.h"
#include "kv/kv_latent.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

/* ----------------------------------------------------------- tensors */

/* The 3-D tensor name [n_in, n_out, n] as n 2-D views. */
static int bind_heads(const gguf_file *f, const char *name, uint64_t n_in, uint64_t n_out, uint32_t n, weight *out)
{
    const gguf_tensor *t = gguf_tensor_find(f, name);
    if (!t) return err_set(PL_EFORMAT, "%s: tensor '%s' is missing", gguf_path(f), name);
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n || t->ne[3] != 1)
        return err_set(PL_EFORMAT, "%s: tensor '%s': shape [%llu, %llu, %llu, %llu], expected [%llu, %llu, %u]",
                       gguf_path(f), name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (unsigned long long)n_in,
                       (unsigned long long)n_out, n);
    const dtype_traits *tr = dtype_get(t->type);
    if (!tr || !tr->computable || !quant_supported(t->type) || !kern_matmul_supports(t->type) ||
        n_in % tr->blck_size)
        return err_set(PL_EUNSUPPORTED, "%s: tensor '%s': type %s is not supported here", gguf_path(f), name,
                       tr ? tr->name : "?");
    const uint64_t bytes = dtype_row_bytes(t->type, n_in) * n_out;
    for (uint32_t h = 0; h < n; h++)
        out[h] = (weight){.data = (const uint8_t *)t->data + h * bytes, .type = t->type, .n_in = n_in, .n_out = n_out};
    return 0;
}

/* The legacy form's attn_kv_b [R, H x (N + V)]: per head h, N rows of W_UK
 * then V rows of W_UV, each R long (the non-absorbed decompression
 * c_kv -> k_nope, v). W_UV^h is bound in place; the absorbed query needs
 * W_UK^h transposed ([N -> R], attn_k_b's form), which is dequantized and
 * transposed into f32 matrices the layer owns (exact values, at H x N x R
 * x 4 bytes a layer: 4 MiB for V2-Lite's 16 x 128 x 512). */
static int split_kv_b(const gguf_file *f, const char *name, const mla_config *a, uint32_t H, mla_layer *m)
{
    const uint64_t R = a->kv_lora_rank, N = a->qk_nope, V = a->v_head;
    const gguf_tensor *t = gguf_tensor_find(f, name);
    if (!t)
        return err_set(PL_EFORMAT, "%s: tensor '%s' is missing (the legacy form, no key_length_mla: one attn_kv_b a "
                       "layer in place of attn_k_b and attn_v_b)", gguf_path(f), name);
    if (t->ne[0] != R || t->ne[1] != H * (N + V) || t->ne[2] != 1 || t->ne[3] != 1)
        return err_set(PL_EFORMAT, "%s: tensor '%s': shape [%llu, %llu, %llu, %llu], expected [%llu, %llu] (kv_lora_rank, "
                       "heads x (qk_nope + v_head))", gguf_path(f), name, (unsigned long long)t->ne[0],
                       (unsigned long long)t->ne[1], (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                       (unsigned long long)R, (unsigned long long)(H * (N + V)));
    const dtype_traits *tr = dtype_get(t->type);
    if (!tr || !tr->computable || !quant_supported(t->type) || !kern_matmul_supports(t->type) || R % tr->blck_size)
        return err_set(PL_EUNSUPPORTED, "%s: tensor '%s': type %s is not supported here", gguf_path(f), name,
                       tr ? tr->name : "?");
    const uint64_t rb = dtype_row_bytes(t->type, R);
    float *uk = mem_alloc_aligned((size_t)(H * N * R) * sizeof(float), 64), *row = malloc((size_t)R * sizeof(float));
    if (!uk || !row) {
        mem_free(uk);
        free(row);
        return PL_ENOMEM;
    }
    for (uint32_t h = 0; h < H; h++) {
        const uint8_t *head = (const uint8_t *)t->data + (uint64_t)h * (N + V) * rb;
        float *k = uk + (size_t)h * N * R; /* [R][N]: row r is W_UK^h's column r */
        for (uint64_t n = 0; n < N; n++) {
            quant_dequant_row(t->type, head + n * rb, row, (size_t)R);
            for (uint64_t r = 0; r < R; r++) k[r * N + n] = row[r];
        }
        m->wk_b[h] = (weight){.data = (const uint8_t *)k, .type = DT_F32, .n_in = N, .n_out = R};
        m->wv_b[h] = (weight){.data = head + N * rb, .type = t->type, .n_in = R, .n_out = V};
    }
    free(row);
    m->owned = uk;
    return 0;
}

int mla_layer_bind(const gguf_file *f, const model_config *c, uint32_t l, mla_layer **out)
{
    const mla_config *a = &c->mla;
    const uint32_t H = c->n_heads, R = a->kv_lora_rank, D = c->rope_dim;
    const uint64_t d = c->dim, qd = (uint64_t)H * (a->qk_nope + D);
    mla_layer *m = mem_calloc(1, sizeof *m + 2 * (size_t)H * sizeof(weight));
    if (!m) return PL_ENOMEM;
    m->wk_b = (weight *)(m + 1);
    m->wv_b = m->wk_b + H;
    char n[96];
    int rc = 0;
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%u." suffix, l), n)
    if (a->q_lora_rank) {
        rc = model_weight_bind(f, NAME("attn_q_a.weight"), d, a->q_lora_rank, false, &m->wq_a);
        if (!rc) rc = model_weight_bind(f, NAME("attn_q_a_norm.weight"), a->q_lora_rank, 0, false, &m->q_a_norm);
        if (!rc) rc = model_weight_bind(f, NAME("attn_q_b.weight"), a->q_lora_rank, qd, false, &m->wq_b);
    } else {
        rc = model_weight_bind(f, NAME("attn_q.weight"), d, qd, false, &m->wq);
    }
    if (!rc) rc = model_weight_bind(f, NAME("attn_kv_a_mqa.weight"), d, (uint64_t)R + D, false, &m->wkv_a);
    if (!rc) rc = model_weight_bind(f, NAME("attn_kv_a_norm.weight"), R, 0, false, &m->kv_a_norm);
    if (!rc && a->legacy_kv_b) {
        rc = split_kv_b(f, NAME("attn_kv_b.weight"), a, H, m);
    } else if (!rc) {
        rc = bind_heads(f, NAME("attn_k_b.weight"), a->qk_nope, R, H, m->wk_b);
        if (!rc) rc = bind_heads(f, NAME("attn_v_b.weight"), R, a->v_head, H, m->wv_b);
    }
#undef NAME
    if (rc) {
        mla_layer_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void mla_layer_free(mla_layer *m)
{
    if (!m) return;
    mem_free(m->owned);
    free(m);
}

int mla_layer_matrices(mla_layer *m, uint32_t n_heads, weight **out)
{
    int n = 0;
#define ADD(w) do { if (out) out[n] = (w); n++; } while (0)
    ADD(&m->wq);
    ADD(&m->wq_a);
    ADD(&m->wq_b);
    ADD(&m->wkv_a);
    for (uint32_t h = 0; h < n_heads; h++) ADD(&m->wk_b[h]);
    for (uint32_t h = 0; h < n_heads; h++) ADD(&m->wv_b[h]);
#undef ADD
    return n;
}

/* ------------------------------------------------------------- pass */

struct mla_state {
    int max_tokens, max_ctx, n_threads;
    float *q;        /* [T][H*(N+D)] */
    float *qa;       /* [T][q_lora] */
    float *kv;       /* [T][R+D] the latent rows */
    float *qc;       /* [T][H][R+D] absorbed queries */
    float *gin;      /* [threads][T][max(N, R)] one head's rows, gathered */
    float *gout;     /* [threads][T][max(R, V)] */
    size_t gin_stride, gout_stride; /* floats per thread */
    float *att;      /* [T][H][R] attention in the latent space */
    float *scratch;  /* [threads][attn_mla_scratch_floats(H, max_ctx, R+D)]; split
                        decode: token k's queries and scores in region k */
    size_t scratch_stride;
    float *spare;    /* [threads][spare_stride] the kernel's spare row */
    size_t spare_stride;
    int32_t *toks;   /* [T] the batch tokens of the sequence being attended */
    uint16_t *tail;  /* staged latent dtype: [tail_rows][R+D] f16, the sequence's own blocks
                        (kv_latent_stage_batch); NULL otherwise */
    int tail_rows;
};

void mla_state_free(mla_state *s)
{
    if (!s) return;
    float *fb[] = {s->q, s->qa, s->kv, s->qc, s->gin, s->gout, s->att, s->scratch, s->spare};
    for (size_t i = 0; i < sizeof fb / sizeof fb[0]; i++) mem_free(fb[i]);
    mem_free(s->tail);
    free(s->toks);
    free(s);
}

int mla_state_new(mla_state **out, const model_config *c, int max_tokens, int max_ctx, int tail_rows, int n_threads)
{
    *out = NULL;
    const mla_config *a = &c->mla;
    if (!a->kv_lora_rank) return 0;
    mla_state *s = calloc(1, sizeof *s);
    if (!s) return PL_ENOMEM;
    const size_t T = (size_t)max_tokens, H = c->n_heads, R = a->kv_lora_rank, D = c->rope_dim, N = a->qk_nope;
    const size_t row = R + D, gi = N > R ? N : R, go = R > a->v_head ? R : a->v_head;
    s->max_tokens = max_tokens;
    s->max_ctx = max_ctx;
    s->n_threads = n_threads;
    s->scratch_stride = (attn_mla_scratch_floats((int)H, max_ctx, (int)row) + 15) & ~(size_t)15;
    s->q = mem_alloc_aligned(T * H * (N + D) * sizeof(float), 64);
    s->qa = mem_alloc_aligned(T * (a->q_lora_rank ? a->q_lora_rank : 1) * sizeof(float), 64);
    s->kv = mem_alloc_aligned(T * row * sizeof(float), 64);
    s->qc = mem_alloc_aligned(T * H * row * sizeof(float), 64);
    s->gin_stride = (T * gi + 15) & ~(size_t)15;
    s->gout_stride = (T * go + 15) & ~(size_t)15;
    s->gin = mem_alloc_aligned((size_t)n_threads * s->gin_stride * sizeof(float), 64);
    s->gout = mem_alloc_aligned((size_t)n_threads * s->gout_stride * sizeof(float), 64);
    s->att = mem_alloc_aligned(T * H * R * sizeof(float), 64);
    s->scratch = mem_alloc_aligned((size_t)n_threads * s->scratch_stride * sizeof(float), 64);
    s->spare_stride = (row + 15) & ~(size_t)15;
    s->spare = mem_alloc_aligned((size_t)n_threads * s->spare_stride * sizeof(float), 64);
    s->toks = malloc(T * sizeof *s->toks);
    s->tail_rows = tail_rows;
    if (tail_rows) {
        s->tail = mem_alloc_aligned((size_t)tail_rows * row * sizeof *s->tail, 64);
        if (!s->tail) {
            mla_state_free(s);
            return PL_ENOMEM;
        }
    }
    if (!s->q || !s->qa || !s->kv || !s->qc || !s->gin || !s->gout || !s->att || !s->scratch || !s->spare || !s->toks) {
        mla_state_free(s);
        return PL_ENOMEM;
    }
    *out = s;
    return 0;
}

static kern_mat mat_of(const weight *w)
{
    return (kern_mat){w->packed ? NULL : w->data, w->packed, w->type, (int)w->n_in, (int)w->n_out};
}

static void matmul(float *y, const float *x, const weight *w, int m, threadpool *tp)
{
    const kern_mat a = mat_of(w), *ap = &a;
    kern_matmul_mats(1, &y, x, &ap, m, tp);
}

/* One matrix per head over the batch's rows, the heads shared out over the
 * threads (one dispatch instead of one per head; kern_matmul's rows do not
 * depend on the thread count): out[t][h] = in[t][h] W[h]^T, where in[t][h]
 * is at in + t x in_ts + h x in_hs (n_in floats), out[t][h] likewise. */
typedef struct {
    mla_state *s;
    const weight *w;
    const float *in;
    float *out;
    size_t in_ts, in_hs, out_ts, out_hs;
    int n_heads, T;
} heads_job;

static void heads_worker(void *arg, int ith, int nth)
{
    const heads_job *j = arg;
    float *gin = j->s->gin + (size_t)ith * j->s->gin_stride, *gout = j->s->gout + (size_t)ith * j->s->gout_stride;
    for (int h = ith; h < j->n_heads; h += nth) {
        const weight *w = &j->w[h];
        const size_t ni = w->n_in, no = w->n_out;
        for (int t = 0; t < j->T; t++)
            memcpy(gin + (size_t)t * ni, j->in + (size_t)t * j->in_ts + (size_t)h * j->in_hs, ni * sizeof(float));
        matmul(gout, gin, w, j->T, NULL);
        for (int t = 0; t < j->T; t++)
            memcpy(j->out + (size_t)t * j->out_ts + (size_t)h * j->out_hs, gout + (size_t)t * no, no * sizeof(float));
    }
}

typedef struct {
    mla_state *s;
    const model_config *c;
    const kv_batch *b;
    attn_mla_kv view; /* the sequence's latent rows */
    int n_toks;       /* s->toks[0..n_toks): the sequence's tokens in the batch */
} attn_job;

/* A sequence with at least as many tokens as threads (prefill): its tokens
 * shared out over the threads, all heads of a token in one call, so that
 * each row the kernel reads serves every head. */
static void attn_worker(void *arg, int ith, int nth)
{
    const attn_job *j = arg;
    mla_state *s = j->s;
    const int H = (int)j->c->n_heads, R = (int)j->c->mla.kv_lora_rank, row = R + (int)j->c->rope_dim;
    float *sc = s->scratch + (size_t)ith * s->scratch_stride;
    for (int u = ith; u < j->n_toks; u += nth) {
        const int t = s->toks[u];
        const attn_mla_kv v = attn_mla_at(&j->view, j->b->slot[t] + 1);
        attn_mla(&v, s->qc + (size_t)t * H * row, (size_t)row, H, j->b->slot[t] + 1, j->c->mla.kq_scale,
                 s->att + (size_t)t * H * R, (size_t)R, sc);
    }
}

/* A sequence with fewer tokens than threads (decode): each token's heads
 * stay together and the threads share out its keys (scores) and then its
 * value elements, so that each thread reads its part of every cached row
 * once for all heads; every result keeps attn_mla's bits (attention_mla.h),
 * whatever the thread count. Token k's queries and scores live in scratch
 * region k. */
static float *split_qr(const attn_job *j, int k) { return j->s->scratch + (size_t)k * j->s->scratch_stride; }
static float *split_sc(const attn_job *j, int k)
{
    return split_qr(j, k) + (size_t)j->c->n_heads * attn_mla_qr_stride(&j->view);
}
static size_t split_ld(const attn_job *j) { return ((size_t)j->s->max_ctx + 15) & ~(size_t)15; }

/* The share [cut(i), cut(i + 1)) of n over nth threads, cuts multiples of m. */
static int split_cut(int n, int i, int nth, int m)
{
    return i >= nth ? n : (int)((int64_t)n * i / nth) / m * m;
}

static void split_scores_worker(void *arg, int ith, int nth)
{
    const attn_job *j = arg;
    for (int k = 0; k < j->n_toks; k++) {
        const int n = j->b->slot[j->s->toks[k]] + 1, j0 = split_cut(n, ith, nth, 4), j1 = split_cut(n, ith + 1, nth, 4);
        const attn_mla_kv v = attn_mla_at(&j->view, n);
        if (j0 < j1)
            attn_mla_scores(&v, split_qr(j, k), (int)j->c->n_heads, j0, j1, split_sc(j, k), split_ld(j),
                            j->s->spare + (size_t)ith * j->s->spare_stride);
    }
}

static void split_weights_worker(void *arg, int ith, int nth)
{
    const attn_job *j = arg;
    const int H = (int)j->c->n_heads;
    for (int u = ith; u < j->n_toks * H; u += nth) {
        const int k = u / H, h = u % H;
        attn_mla_weights(&j->view, split_sc(j, k) + (size_t)h * split_ld(j), split_ld(j), 1,
                         j->b->slot[j->s->toks[k]] + 1, j->c->mla.kq_scale);
    }
}

static void split_values_worker(void *arg, int ith, int nth)
{
    const attn_job *j = arg;
    const int H = (int)j->c->n_heads, R = (int)j->c->mla.kv_lora_rank;
    const int m = R % 32 ? R : 32, i0 = split_cut(R, ith, nth, m), i1 = split_cut(R, ith + 1, nth, m);
    if (i0 >= i1) return;
    for (int k = 0; k < j->n_toks; k++) {
        const int t = j->s->toks[k];
        const attn_mla_kv v = attn_mla_at(&j->view, j->b->slot[t] + 1);
        attn_mla_values(&v, split_sc(j, k), split_ld(j), H, j->b->slot[t] + 1, i0, i1,
                        j->s->att + (size_t)t * H * R, (size_t)R, j->s->spare + (size_t)ith * j->s->spare_stride);
    }
}

static void split_attention(attn_job *j, threadpool *tp)
{
    const int H = (int)j->c->n_heads;
    for (int k = 0; k < j->n_toks; k++)
        attn_mla_queries(&j->view, j->s->qc + (size_t)j->s->toks[k] * H * j->view.row_len, (size_t)j->view.row_len, H,
                         split_qr(j, k));
    tp_run(tp, split_scores_worker, j);
    tp_run(tp, split_weights_worker, j);
    tp_run(tp, split_values_worker, j);
}

void mla_attention(mla_state *s, const model_config *c, const mla_layer *w, const float *xn, float *out,
                   kv_pool *kv, const kv_batch *b, uint32_t layer, const float *rope_cs, threadpool *tp)
{
    const mla_config *a = &c->mla;
    const int T = b->n_tokens, H = (int)c->n_heads, R = (int)a->kv_lora_rank, D = (int)c->rope_dim;
    const int N = (int)a->qk_nope, V = (int)a->v_head, qh = N + D, row = R + D;
    assert(s && T > 0 && T <= s->max_tokens && kv->g.s.kind == KV_KIND_LATENT && kv->g.s.head_dim == (uint32_t)row);
    /* queries */
    if (w->wq.data) {
        matmul(s->q, xn, &w->wq, T, tp);
    } else {
        matmul(s->qa, xn, &w->wq_a, T, tp);
        for (int t = 0; t < T; t++)
            kern_rmsnorm(s->qa + (size_t)t * a->q_lora_rank, s->qa + (size_t)t * a->q_lora_rank, w->q_a_norm.data,
                         (int)a->q_lora_rank, c->norm_eps);
        matmul(s->q, s->qa, &w->wq_b, T, tp);
    }
    /* the latent rows: normed c_kv, rotated k_pe */
    matmul(s->kv, xn, &w->wkv_a, T, tp);
    for (int t = 0; t < T; t++) {
        float *r = s->kv + (size_t)t * row;
        const float *cs = rope_cs + (size_t)t * D;
        kern_rmsnorm(r, r, w->kv_a_norm.data, R, c->norm_eps);
        kern_rope_apply(r + R, 1, D, D, false, cs);
        for (int h = 0; h < H; h++) {
            float *qp = s->q + ((size_t)t * H + h) * qh + N;
            kern_rope_apply(qp, 1, D, D, false, cs);
            memcpy(s->qc + ((size_t)t * H + h) * row + R, qp, (size_t)D * sizeof(float));
        }
    }
    kv_latent_store(kv, b, layer, s->kv);
    /* q_nope through W_UK, head by head, into the latent space */
    heads_job hk = {s, w->wk_b, s->q, s->qc, (size_t)H * qh, (size_t)qh, (size_t)H * row, (size_t)row, H, T};
    tp_run(tp, heads_worker, &hk);
    /* attention, one sequence at a time, reading its rows in place */
    attn_job job = {s, c, b, {0}, 0};
    const int nth = tp_size(tp) > 0 ? tp_size(tp) : 1;
    const bool staged = kv_dtype_staged(kv->g.s.dtype);
    for (int q = 0; q < b->n_seqs; q++) {
        int n = 0, last = -1;
        for (int t = 0; t < T; t++)
            if (b->seq[t] == q) {
                s->toks[n++] = t;
                if (b->slot[t] > last) last = b->slot[t];
            }
        if (!n) continue;
        assert(last < s->max_ctx);
        uint32_t tail0 = 0;
        if (staged) {
            assert(n + (int)kv->g.s.block_size <= s->tail_rows);
            tail0 = kv_latent_stage_batch(kv, b, q, layer, s->kv, s->toks, n, s->tail);
            job.view = kv_latent_view_staged(kv, b->seqs[q].blocks, layer, (uint32_t)R, s->tail, tail0);
        } else {
            job.view = kv_latent_view(kv, b->seqs[q].blocks, layer, (uint32_t)R);
        }
        job.n_toks = n;
        if (n >= nth) {
            tp_run(tp, attn_worker, &job);
        } else {
            assert(nth <= s->n_threads);
            split_attention(&job, tp);
        }
        if (staged) kv_latent_stage_commit(kv, b, q, layer, s->tail, tail0, (uint32_t)last + 1);
    }
    /* W_UV per head, into out[T][H*V] */
    heads_job hv = {s, w->wv_b, s->att, out, (size_t)H * R, (size_t)R, (size_t)H * V, (size_t)V, H, T};
    tp_run(tp, heads_worker, &hv);
}
