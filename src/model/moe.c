/* moe.c - mixture-of-experts FFN: expert tensors, the router and the
 * grouped pass; see moe.h (the config keys: moe_config.c). */
#include "model/moe.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

/* ----------------------------------------------------------- tensors */

/* The 3-D tensor name [n_in, n_out, n_expert] as n_expert 2-D views. */
static int bind_experts(const gguf_file *f, const char *name, uint64_t n_in, uint64_t n_out, uint32_t n_expert,
                        weight *out)
{
    const gguf_tensor *t = gguf_tensor_find(f, name);
    if (!t) return err_set(PL_EFORMAT, "%s: tensor '%s' is missing", gguf_path(f), name);
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert || t->ne[3] != 1)
        return err_set(PL_EFORMAT, "%s: tensor '%s': shape [%llu, %llu, %llu, %llu], expected [%llu, %llu, %u]",
                       gguf_path(f), name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (unsigned long long)n_in,
                       (unsigned long long)n_out, n_expert);
    const dtype_traits *tr = dtype_get(t->type);
    if (!tr || !tr->computable || !quant_supported(t->type) || !kern_matmul_supports(t->type))
        return err_set(PL_EUNSUPPORTED, "%s: tensor '%s' (data at offset %llu): type %s is not supported",
                       gguf_path(f), name, (unsigned long long)(gguf_data_offset(f) + t->offset), tr ? tr->name : "?");
    const uint64_t bytes = dtype_row_bytes(t->type, n_in) * n_out;
    for (uint32_t e = 0; e < n_expert; e++)
        out[e] = (weight){.data = (const uint8_t *)t->data + e * bytes, .type = t->type, .n_in = n_in, .n_out = n_out};
    return 0;
}

int moe_layer_bind(const gguf_file *f, const model_config *c, uint32_t l, moe_layer **out)
{
    const moe_config *mc = &c->moe;
    assert(mc->n_expert > 0 && mc->n_expert <= MOE_EXPERTS_MAX);
    moe_layer *m = mem_calloc(1, sizeof *m + 3 * (size_t)mc->n_expert * sizeof(weight));
    if (!m) return PL_ENOMEM;
    m->gate = (weight *)(m + 1);
    m->up = m->gate + mc->n_expert;
    m->down = m->up + mc->n_expert;
    const uint64_t d = c->dim;
    const bool shared = mc->ffn_shexp > 0;
    char n[96];
    int rc = 0;
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%u." suffix, l), n)
    rc = model_weight_bind(f, NAME("ffn_gate_inp.weight"), d, mc->n_expert, false, &m->gate_inp);
    if (!rc) rc = bind_experts(f, NAME("ffn_gate_exps.weight"), d, mc->ffn_exp, mc->n_expert, m->gate);
    if (!rc) rc = bind_experts(f, NAME("ffn_up_exps.weight"), d, mc->ffn_exp, mc->n_expert, m->up);
    if (!rc) rc = bind_experts(f, NAME("ffn_down_exps.weight"), mc->ffn_exp, d, mc->n_expert, m->down);
    if (!rc && shared && !mc->shared_ungated)
        rc = model_weight_bind(f, NAME("ffn_gate_inp_shexp.weight"), d, 0, false, &m->sh_gate_inp);
    if (!rc && c->arch == ARCH_DEEPSEEK2)
        rc = model_weight_bind(f, NAME("exp_probs_b.bias"), mc->n_expert, 0, true, &m->exp_probs_b);
    if (!rc && shared) rc = model_weight_bind(f, NAME("ffn_gate_shexp.weight"), d, mc->ffn_shexp, false, &m->sh_gate);
    if (!rc && shared) rc = model_weight_bind(f, NAME("ffn_up_shexp.weight"), d, mc->ffn_shexp, false, &m->sh_up);
    if (!rc && shared) rc = model_weight_bind(f, NAME("ffn_down_shexp.weight"), mc->ffn_shexp, d, false, &m->sh_down);
#undef NAME
    if (rc) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void moe_layer_free(moe_layer *m) { free(m); }

int moe_layer_matrices(moe_layer *m, uint32_t n_expert, weight **out)
{
    int n = 0;
#define ADD(w) do { if (out) out[n] = (w); n++; } while (0)
    ADD(&m->gate_inp);
    for (uint32_t e = 0; e < n_expert; e++) {
        ADD(&m->gate[e]);
        ADD(&m->up[e]);
        ADD(&m->down[e]);
    }
    ADD(&m->sh_gate_inp);
    ADD(&m->sh_gate);
    ADD(&m->sh_up);
    ADD(&m->sh_down);
#undef ADD
    return n;
}

static uint64_t weight_bytes(const weight *w)
{
    return w->data ? dtype_row_bytes(w->type, w->n_in) * w->n_out : 0;
}

uint64_t moe_layer_expert_bytes(const moe_layer *m, uint32_t n_expert)
{
    uint64_t b = 0;
    for (uint32_t e = 0; e < n_expert; e++)
        b += weight_bytes(&m->gate[e]) + weight_bytes(&m->up[e]) + weight_bytes(&m->down[e]);
    return b;
}

uint64_t moe_step_bytes(const moe_layer *m, const moe_config *c, uint32_t n_tokens)
{
    const double E = c->n_expert, k = c->n_used;
    const double touched = n_tokens <= 1 ? k : E * (1.0 - pow(1.0 - k / E, (double)n_tokens));
    const double per_expert = (double)moe_layer_expert_bytes(m, c->n_expert) / E;
    return weight_bytes(&m->gate_inp) + (uint64_t)(touched * per_expert + 0.5) + weight_bytes(&m->sh_gate_inp)
           + weight_bytes(&m->sh_gate) + weight_bytes(&m->sh_up) + weight_bytes(&m->sh_down);
}

/* ------------------------------------------------------------ router */

/* sel[0..k) = the k largest of v[0..n) in descending order (a later
 * index passes an earlier one only with a strictly larger value). */
static void top_k(const float *v, int n, int k, int32_t *sel)
{
    int m = 0;
    for (int e = 0; e < n; e++) {
        const float x = v[e];
        if (m == k && !(x > v[sel[k - 1]])) continue;
        int i = m < k ? m++ : k - 1;
        while (i > 0 && x > v[sel[i - 1]]) {
            sel[i] = sel[i - 1];
            i--;
        }
        sel[i] = e;
    }
}

/* Group-limited choice (DeepSeek-V3's, as llama.cpp's build_moe_ffn):
 * each group scores the sum of its two best values; the experts outside
 * the n_used best groups get -inf. */
static void mask_groups(float *v, int n_expert, uint32_t n_group, uint32_t n_used)
{
    const int per = n_expert / (int)n_group;
    float score[MOE_EXPERTS_MAX] = {0};
    int32_t best[MOE_EXPERTS_MAX], two[2];
    for (uint32_t g = 0; g < n_group; g++) {
        top_k(v + g * per, per, 2, two);
        score[g] = (float)((double)v[g * per + two[0]] + (double)v[g * per + two[1]]);
    }
    top_k(score, (int)n_group, (int)n_used, best);
    bool keep[MOE_EXPERTS_MAX] = {false};
    for (uint32_t i = 0; i < n_used; i++) keep[best[i]] = true;
    for (uint32_t g = 0; g < n_group; g++)
        if (!keep[g])
            for (int e = 0; e < per; e++) v[g * per + e] = -INFINITY;
}

static void route(float *probs, int n_expert, int k, bool norm, const moe_config *c, const float *bias,
                  float *selv, int32_t *sel, float *w)
{
    assert(k >= 1 && k <= n_expert);
    if (c && c->gating == MOE_GATING_SIGMOID)
        for (int e = 0; e < n_expert; e++) probs[e] = 1.0f / (1.0f + expf(-probs[e]));
    else
        kern_softmax(probs, n_expert);
    const float *v = probs;
    if (c && (bias || c->n_group > 1)) {
        for (int e = 0; e < n_expert; e++) selv[e] = bias ? probs[e] + bias[e] : probs[e];
        if (c->n_group > 1) mask_groups(selv, n_expert, c->n_group, c->n_group_used);
        v = selv;
    }
    top_k(v, n_expert, k, sel);
    for (int j = 0; j < k; j++) w[j] = probs[sel[j]];
    if (norm) {
        /* as ggml: sum_rows in double, clamped to f16's smallest normal, then a division */
        double sum = 0;
        for (int j = 0; j < k; j++) sum += (double)w[j];
        float s = (float)sum;
        if (!(s >= 6.103515625e-5f)) s = 6.103515625e-5f;
        for (int j = 0; j < k; j++) w[j] = w[j] / s;
    }
    if (c && c->w_scale != 0.0f && c->w_scale != 1.0f)
        for (int j = 0; j < k; j++) w[j] *= c->w_scale;
}

void moe_route(float *probs, int n_expert, int k, bool norm, int32_t *sel, float *w)
{
    route(probs, n_expert, k, norm, NULL, NULL, NULL, sel, w);
}

void moe_route_cfg(float *probs, const moe_config *c, const float *bias, float *sel_scratch, int32_t *sel, float *w)
{
    route(probs, (int)c->n_expert, (int)c->n_used, c->norm_topk, c, bias, sel_scratch, sel, w);
}

/* ------------------------------------------------------------- pass */

struct moe_state {
    int max_tokens;
    float *logits;     /* [T][n_expert] router logits, then probabilities */
    int32_t *sel;      /* [T][k] chosen experts, in rank order */
    float *wts;        /* [T][k] their weights */
    int32_t *start;    /* [n_expert + 1] first grouped row of each expert */
    int32_t *fill;     /* [n_expert] */
    int32_t *pair_row; /* [T][k] grouped row of (token, rank) */
    float *x;          /* [T*k][dim] the tokens' rows, grouped by expert */
    float *g, *u;      /* [T*k][ffn_exp] */
    float *d;          /* [T*k][dim] each pair's expert output */
    float *sg, *su;    /* [T][ffn_shexp] shared expert */
    float *sd;         /* [T][dim] */
    float *sl;         /* [T] shared gate logits */
    float *selv;       /* [n_expert] choice values (bias, groups) */
};

void moe_state_free(moe_state *s)
{
    if (!s) return;
    float *fb[] = {s->logits, s->wts, s->x, s->g, s->u, s->d, s->sg, s->su, s->sd, s->sl, s->selv};
    for (size_t i = 0; i < sizeof fb / sizeof fb[0]; i++) mem_free(fb[i]);
    free(s->sel);
    free(s->start);
    free(s->fill);
    free(s->pair_row);
    free(s);
}

int moe_state_new(moe_state **out, const model_config *c, int max_tokens)
{
    *out = NULL;
    const moe_config *mc = &c->moe;
    if (mc->n_expert == 0) return 0;
    moe_state *s = calloc(1, sizeof *s);
    if (!s) return PL_ENOMEM;
    const size_t T = (size_t)max_tokens, P = T * mc->n_used, sh = mc->ffn_shexp ? T : 0;
    s->max_tokens = max_tokens;
    s->logits = mem_alloc_aligned(T * mc->n_expert * sizeof(float), 64);
    s->wts = mem_alloc_aligned(P * sizeof(float), 64);
    s->sel = malloc(P * sizeof *s->sel);
    s->start = malloc((mc->n_expert + 1) * sizeof *s->start);
    s->fill = malloc(mc->n_expert * sizeof *s->fill);
    s->pair_row = malloc(P * sizeof *s->pair_row);
    s->x = mem_alloc_aligned(P * c->dim * sizeof(float), 64);
    s->g = mem_alloc_aligned(P * mc->ffn_exp * sizeof(float), 64);
    s->u = mem_alloc_aligned(P * mc->ffn_exp * sizeof(float), 64);
    s->d = mem_alloc_aligned(P * c->dim * sizeof(float), 64);
    s->selv = mem_alloc_aligned(mc->n_expert * sizeof(float), 64);
    bool ok = s->selv && s->logits && s->wts && s->sel && s->start && s->fill && s->pair_row && s->x && s->g && s->u && s->d;
    if (sh) {
        s->sg = mem_alloc_aligned(sh * mc->ffn_shexp * sizeof(float), 64);
        s->su = mem_alloc_aligned(sh * mc->ffn_shexp * sizeof(float), 64);
        s->sd = mem_alloc_aligned(sh * c->dim * sizeof(float), 64);
        s->sl = mem_alloc_aligned(sh * sizeof(float), 64);
        ok = ok && s->sg && s->su && s->sd && s->sl;
    }
    if (!ok) {
        moe_state_free(s);
        return PL_ENOMEM;
    }
    *out = s;
    return 0;
}

static kern_mat mat_of(const weight *w)
{
    return (kern_mat){w->packed ? NULL : w->data, w->packed, w->type, (int)w->n_in, (int)w->n_out};
}

/* y[i] = x . w[i]^T for the n (1 or 2) matrices, m rows, in one dispatch. */
static void matmul_n(int n, float *y0, float *y1, const float *x, const weight *w0, const weight *w1, int m,
                     threadpool *tp)
{
    const kern_mat a[2] = {mat_of(w0), mat_of(n > 1 ? w1 : w0)};
    const kern_mat *ap[2] = {&a[0], &a[1]};
    float *ys[2] = {y0, y1};
    kern_matmul_mats(n, ys, x, ap, m, tp);
}

/* y = x . w^T in calls of at most 4 rows: kern_matmul's decode path, whose
 * rows do not depend on the batch around them, also for the matrices that
 * are not packed (the f32 router and shared gate). A routing decision is a
 * discontinuity, so a token's routing must not change with its batch. */
static void matmul_rows4(float *y, const float *x, const weight *w, int T, threadpool *tp)
{
    for (int t = 0; t < T; t += 4)
        matmul_n(1, y + (size_t)t * w->n_out, NULL, x + (size_t)t * w->n_in, w, NULL, T - t < 4 ? T - t : 4, tp);
}

/* Groups the (token, rank) pairs by expert and gathers the rows. */
static void group_rows(moe_state *s, const model_config *c, const float *xn, int T)
{
    const int E = (int)c->moe.n_expert, k = (int)c->moe.n_used;
    memset(s->fill, 0, (size_t)E * sizeof *s->fill);
    for (int p = 0; p < T * k; p++) s->fill[s->sel[p]]++;
    s->start[0] = 0;
    for (int e = 0; e < E; e++) s->start[e + 1] = s->start[e] + s->fill[e];
    memset(s->fill, 0, (size_t)E * sizeof *s->fill);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            const int e = s->sel[t * k + j], r = s->start[e] + s->fill[e]++;
            s->pair_row[t * k + j] = r;
            memcpy(s->x + (size_t)r * c->dim, xn + (size_t)t * c->dim, c->dim * sizeof(float));
        }
}

/* Each expert with rows: gate and up in one dispatch, SwiGLU per row
 * (as the dense pass), down. */
static void run_experts(moe_state *s, const model_config *c, const moe_layer *w, threadpool *tp)
{
    const size_t F = c->moe.ffn_exp, D = c->dim;
    for (uint32_t e = 0; e < c->moe.n_expert; e++) {
        const int r0 = s->start[e], n = s->start[e + 1] - r0;
        if (n == 0) continue;
        float *g = s->g + r0 * F, *u = s->u + r0 * F;
        matmul_n(2, g, u, s->x + r0 * D, &w->gate[e], &w->up[e], n, tp);
        for (int r = 0; r < n; r++) kern_swiglu(g + r * F, u + r * F, (int)F);
        matmul_n(1, s->d + r0 * D, NULL, g, &w->down[e], NULL, n, tp);
    }
}

static void run_shared(moe_state *s, const model_config *c, const moe_layer *w, const float *xn, int T,
                       threadpool *tp)
{
    const size_t F = c->moe.ffn_shexp;
    matmul_n(2, s->sg, s->su, xn, &w->sh_gate, &w->sh_up, T, tp);
    for (int t = 0; t < T; t++) kern_swiglu(s->sg + t * F, s->su + t * F, (int)F);
    matmul_n(1, s->sd, NULL, s->sg, &w->sh_down, NULL, T, tp);
    if (w->sh_gate_inp.data) matmul_rows4(s->sl, xn, &w->sh_gate_inp, T, tp);
}

void moe_ffn(moe_state *s, const model_config *c, const moe_layer *w, const float *xn, float *out, int T,
             threadpool *tp)
{
    const int E = (int)c->moe.n_expert, k = (int)c->moe.n_used, D = (int)c->dim;
    assert(s && T > 0 && T <= s->max_tokens);
    matmul_rows4(s->logits, xn, &w->gate_inp, T, tp);
    for (int t = 0; t < T; t++)
        moe_route_cfg(s->logits + (size_t)t * E, &c->moe, w->exp_probs_b.data, s->selv, s->sel + t * k, s->wts + t * k);
    group_rows(s, c, xn, T);
    run_experts(s, c, w, tp);
    const bool shared = w->sh_down.data != NULL;
    if (shared) run_shared(s, c, w, xn, T, tp);
    /* every read of xn is done: out may be xn. Sums as ggml's graph: the
     * weighted expert outputs added in rank order, then the gated shared
     * expert (sigmoid as silu(z)/z) */
    for (int t = 0; t < T; t++) {
        const float *wt = s->wts + (size_t)t * k;
        float *o = out + (size_t)t * D;
        for (int j = 0; j < k; j++) {
            const float *dj = s->d + (size_t)s->pair_row[t * k + j] * D, wj = wt[j];
            if (j == 0)
                for (int i = 0; i < D; i++) o[i] = dj[i] * wj;
            else
                for (int i = 0; i < D; i++) o[i] += dj[i] * wj;
        }
        if (!shared) continue;
        const float *sd = s->sd + (size_t)t * D;
        if (!w->sh_gate_inp.data) { /* deepseek2: shared experts added as they are */
            for (int i = 0; i < D; i++) o[i] += sd[i];
            continue;
        }
        const float z = s->sl[t], gate = (z / (1.0f + expf(-z))) / z;
        for (int i = 0; i < D; i++) o[i] += sd[i] * gate;
    }
}
