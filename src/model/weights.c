/* weights.c - binding and checking the model's tensors; see weights.h. */
#include "model/weights.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "kernels/kernels.h"
#include "model/mla.h"
#include "model/moe.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

/* Binds name, expecting dims [n_in] (n_out == 0) or [n_in, n_out].
 * A vector must be F32 (norms and biases are added, not multiplied). */
static int bind(const gguf_file *f, const char *name, uint64_t n_in, uint64_t n_out, bool optional, weight *w)
{
    const gguf_tensor *t = gguf_tensor_find(f, name);
    if (!t) {
        if (optional) { memset(w, 0, sizeof *w); return 0; }
        return err_set(PL_EFORMAT, "%s: tensor '%s' is missing", gguf_path(f), name);
    }
    uint64_t want1 = n_out ? n_out : 1;
    if (t->ne[0] != n_in || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1)
        return err_set(PL_EFORMAT, "%s: tensor '%s': shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]",
                       gguf_path(f), name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                       (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (unsigned long long)n_in,
                       (unsigned long long)want1);
    const dtype_traits *tr = dtype_get(t->type);
    if (n_out == 0 && t->type != DT_F32)
        return err_set(PL_EUNSUPPORTED, "%s: tensor '%s': vector of type %s, expected f32", gguf_path(f), name, tr ? tr->name : "?");
    if (!tr || !tr->computable || !quant_supported(t->type))
        return err_set(PL_EUNSUPPORTED,
                       "%s: tensor '%s' (data at offset %llu): type %s is not supported (f32, f16, bf16, q8_0, q4_0, q4_1, "
                       "q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, tq1_0, tq2_0, iq3_s, iq3_xxs, iq2_s, "
                       "iq2_xs, iq2_xxs, iq1_s, iq1_m)",
                       gguf_tensor_path(f, t), name, (unsigned long long)gguf_tensor_file_offset(f, t), tr ? tr->name : "?");
    *w = (weight){.data = t->data, .type = t->type, .n_in = t->ne[0], .n_out = want1};
    return 0;
}

/* Rows [r0, r0 + n) of a bound matrix, as a matrix of its own (the parts
 * of a fused tensor: every output row is the same dot product either way). */
static weight rows_of(const weight *w, uint64_t r0, uint64_t n)
{
    weight p = *w;
    p.data = (const uint8_t *)w->data + r0 * dtype_row_bytes(w->type, w->n_in);
    p.n_out = n;
    return p;
}

/* phi3: fused attn_qkv (or separate q, k, v) and the fused ffn_up of
 * gate rows then up rows (llama.cpp's ggml_swiglu of the halves). */
static int bind_phi3(const gguf_file *f, const model_config *c, uint32_t l, layer_weights *lw)
{
    const uint64_t d = c->dim, q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
    char n[96];
    weight fused;
    snprintf(n, sizeof n, "blk.%u.attn_qkv.weight", l);
    int rc = bind(f, n, d, q + 2 * kv, true, &fused);
    if (!rc && fused.data) {
        lw->wq = rows_of(&fused, 0, q);
        lw->wk = rows_of(&fused, q, kv);
        lw->wv = rows_of(&fused, q + kv, kv);
    }
    snprintf(n, sizeof n, "blk.%u.ffn_up.weight", l);
    if (!rc) rc = bind(f, n, d, 2 * (uint64_t)c->ffn_dim, false, &fused);
    if (!rc) {
        lw->w_gate = rows_of(&fused, 0, c->ffn_dim);
        lw->w_up = rows_of(&fused, c->ffn_dim, c->ffn_dim);
    }
    return rc;
}

/* deepseek2: latent attention (mla.h); a dense FFN on the leading layers,
 * experts with shared experts on the others. */
static int bind_deepseek2(const gguf_file *f, const model_config *c, uint32_t l, layer_weights *lw)
{
    const uint64_t d = c->dim, o = (uint64_t)c->n_heads * c->mla.v_head;
    const bool dense = l < c->moe.n_dense_lead;
    char n[96];
    int rc = 0;
#define B(suffix, in, out, dst) \
    if (!rc) { snprintf(n, sizeof n, "blk.%u." suffix, l); rc = bind(f, n, in, out, false, dst); }
    B("attn_norm.weight", d, 0, &lw->attn_norm);
    B("attn_output.weight", o, d, &lw->wo);
    B("ffn_norm.weight", d, 0, &lw->ffn_norm);
    if (dense) {
        B("ffn_gate.weight", d, c->ffn_dim, &lw->w_gate);
        B("ffn_up.weight", d, c->ffn_dim, &lw->w_up);
        B("ffn_down.weight", c->ffn_dim, d, &lw->w_down);
    }
#undef B
    if (!rc) rc = mla_layer_bind(f, c, l, &lw->mla);
    if (!rc && !dense) rc = moe_layer_bind(f, c, l, &lw->moe);
    return rc;
}

static int bind_layer(const gguf_file *f, const model_config *c, uint32_t l, layer_weights *lw)
{
    if (c->arch == ARCH_DEEPSEEK2) return bind_deepseek2(f, c, l, lw);
    const uint64_t d = c->dim, q = (uint64_t)c->n_heads * c->head_dim, kv = (uint64_t)c->n_kv_heads * c->head_dim;
    const bool bias = c->arch == ARCH_QWEN2 || c->arch == ARCH_QWEN2MOE;
    const bool qk_norm = c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3MOE || c->arch == ARCH_GEMMA3;
    const bool phi3 = c->arch == ARCH_PHI3, moe = c->moe.n_expert > 0;
    char n[96];
    int rc = phi3 ? bind_phi3(f, c, l, lw) : 0;
    const bool sep_qkv = !lw->wq.data, sep_ffn = !lw->w_up.data;
#define B(suffix, in, out, opt, dst) \
    if (!rc) { snprintf(n, sizeof n, "blk.%u." suffix, l); rc = bind(f, n, in, out, opt, dst); }
    B("attn_norm.weight", d, 0, false, &lw->attn_norm);
    if (sep_qkv) {
        B("attn_q.weight", d, q, false, &lw->wq);
        B("attn_k.weight", d, kv, false, &lw->wk);
        B("attn_v.weight", d, kv, false, &lw->wv);
    }
    B("attn_output.weight", q, d, false, &lw->wo);
    B("attn_q.bias", q, 0, !bias, &lw->bq);
    B("attn_k.bias", kv, 0, !bias, &lw->bk);
    B("attn_v.bias", kv, 0, !bias, &lw->bv);
    B("attn_q_norm.weight", c->head_dim, 0, !qk_norm, &lw->q_norm);
    B("attn_k_norm.weight", c->head_dim, 0, !qk_norm, &lw->k_norm);
    B("post_attention_norm.weight", d, 0, !c->post_norms, &lw->post_attn_norm);
    B("ffn_norm.weight", d, 0, false, &lw->ffn_norm);
    B("post_ffw_norm.weight", d, 0, !c->post_norms, &lw->post_ffn_norm);
    if (sep_ffn) {
        B("ffn_gate.weight", d, c->ffn_dim, moe, &lw->w_gate);
        B("ffn_up.weight", d, c->ffn_dim, moe, &lw->w_up);
    }
    B("ffn_down.weight", c->ffn_dim, d, moe, &lw->w_down);
#undef B
    if (!rc && moe) rc = moe_layer_bind(f, c, l, &lw->moe);
    return rc;
}

int model_weights_bind(const gguf_file *f, const model_config *c, model_weights *out)
{
    model_weights w;
    memset(&w, 0, sizeof w);
    int rc = bind(f, "token_embd.weight", c->dim, c->n_vocab, false, &w.tok_embd);
    if (!rc) rc = bind(f, "output_norm.weight", c->dim, 0, false, &w.output_norm);
    /* gemma and gemma2 always tie the output to the embeddings (llama.cpp
     * reads no output.weight for them) */
    const bool tied = c->arch == ARCH_GEMMA || c->arch == ARCH_GEMMA2;
    if (!rc && !tied) rc = bind(f, "output.weight", c->dim, c->n_vocab, true, &w.output);
    if (!rc && !w.output.data) w.output = w.tok_embd; /* tied embeddings */
    if (!rc) rc = bind(f, "rope_freqs.weight", c->rope_dim / 2, 0, true, &w.rope_freqs);
    if (!rc) rc = bind(f, "rope_factors_long.weight", c->rope_dim / 2, 0, true, &w.rope_long);
    if (!rc) rc = bind(f, "rope_factors_short.weight", c->rope_dim / 2, 0, true, &w.rope_short);
    if (rc) return rc;
    w.layers = mem_calloc(c->n_layers, sizeof *w.layers);
    if (!w.layers) return PL_ENOMEM;
    w.n_layers = c->n_layers;
    w.n_expert = c->moe.n_expert;
    w.n_heads = c->n_heads;
    for (uint32_t l = 0; l < c->n_layers && !rc; l++) rc = bind_layer(f, c, l, &w.layers[l]);
    if (rc) {
        for (uint32_t l = 0; l < c->n_layers; l++) {
            moe_layer_free(w.layers[l].moe);
            mla_layer_free(w.layers[l].mla);
        }
        free(w.layers);
        return rc;
    }
    *out = w;
    return 0;
}

int model_weight_bind(const gguf_file *f, const char *name, uint64_t n_in, uint64_t n_out, bool optional, weight *w)
{
    return bind(f, name, n_in, n_out, optional, w);
}

/* The matrices the forward pass multiplies, in memory order of a layer
 * (out NULL: only their count). */
static int matmul_weights(model_weights *w, uint32_t n_layers, uint32_t n_expert, weight **out)
{
    int n = 0;
    for (uint32_t l = 0; l < n_layers; l++) {
        layer_weights *lw = &w->layers[l];
        weight *ws[] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w_gate, &lw->w_up, &lw->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++, n++)
            if (out) out[n] = ws[i];
        if (lw->moe) n += moe_layer_matrices(lw->moe, n_expert, out ? out + n : NULL);
        if (lw->mla) n += mla_layer_matrices(lw->mla, w->n_heads, out ? out + n : NULL);
    }
    if (out) out[n] = &w->output;
    return n + 1;
}

/* A matrix's multiply-adds for one token in f32 FMA units: a quantized
 * matrix is dotted in int8 (four multiply-adds a 32-bit lane where f32 has
 * one), a float one in f32. */
static double matmul_cost(const weight *w)
{
    if (!w->data) return 0;
    const bool flt = w->type == DT_F32 || w->type == DT_F16 || w->type == DT_BF16;
    return (double)w->n_in * (double)w->n_out / (flt ? 1.0 : 4.0);
}

double model_weights_token_cost(model_weights *w, uint32_t n_layers, uint32_t n_expert, uint32_t n_used)
{
    const int n = matmul_weights(w, n_layers, n_expert, NULL);
    weight **all = malloc((size_t)n * sizeof *all);
    if (!all) return 0;
    matmul_weights(w, n_layers, n_expert, all);
    double cost = 0;
    for (int i = 0; i < n; i++)
        if (all[i] != &w->output) cost += matmul_cost(all[i]); /* a prompt token computes no logits */
    free(all);
    /* a token runs n_used of a MoE layer's n_expert experts */
    const double unused = n_expert ? 1.0 - (double)(n_used < n_expert ? n_used : n_expert) / n_expert : 0;
    for (uint32_t l = 0; l < n_layers; l++) {
        const moe_layer *e = w->layers[l].moe;
        for (uint32_t x = 0; e && x < n_expert; x++)
            cost -= unused * (matmul_cost(&e->gate[x]) + matmul_cost(&e->up[x]) + matmul_cost(&e->down[x]));
    }
    return cost;
}

static bool repack_wanted(const weight *w)
{
    return w->data && w->n_out <= INT32_MAX && w->n_in <= INT32_MAX && kern_pack_supports(w->type, (int)w->n_in);
}

/* Bytes a matrix takes in the region (64-byte multiples): its packed
 * layout (Q8_0, Q4_0; F16 where the kernels have a packed F16 tile), or a
 * copy of its rows for the other quantized types (the Q6_K output matrix
 * of q4_0 files, K-quant models). F32 and BF16 matrices (and F16 without
 * a packed tile) stay in the file: copied, TinyLlama f16 decoded slower
 * (Zen 3, before F16 was packed: 16.5 -> 14.1 tok/s, medians of 4
 * alternating runs) and took 3.4 s longer to load. */
static size_t region_bytes(const weight *w)
{
    if (!w->data || w->packed) return 0;
    if (repack_wanted(w)) return kern_pack_bytes(w->type, (int)w->n_in, (int)w->n_out);
    if (w->type == DT_F32 || w->type == DT_F16 || w->type == DT_BF16) return 0;
    return ((size_t)dtype_row_bytes(w->type, w->n_in) * w->n_out + 63) & ~(size_t)63;
}

/* Drops the whole pages inside [p, p + n) of a read-only file mapping from
 * memory (they are clean: a later read faults them back in from the file).
 * Pages shared with a neighbouring tensor are kept. */
static void release_pages(const void *p, size_t n)
{
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), e = ((uintptr_t)p + n) & ~(pg - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

/* The moves of model_weights_repack, matrix i on thread i % nth. */
#define REPACK_THREADS_MAX 8
typedef struct {
    weight **ws;
    const size_t *at; /* place of matrix i in mem, SIZE_MAX: not moved */
    uint8_t *mem;
    int n;
    bool release_src;
    int nth;
} repack_job;

typedef struct {
    const repack_job *job;
    int ith;
    int packed; /* out: matrices this thread packed */
} repack_part;

static void *repack_run(void *arg)
{
    repack_part *p = arg;
    const repack_job *j = p->job;
    for (int i = p->ith; i < j->n; i += j->nth) {
        if (j->at[i] == SIZE_MAX) continue;
        weight *t = j->ws[i];
        uint8_t *dst = j->mem + j->at[i];
        const size_t rows = (size_t)dtype_row_bytes(t->type, t->n_in) * t->n_out;
        const void *src = t->data;
        if (repack_wanted(t)) {
            kern_pack(dst, t->data, t->type, (int)t->n_in, (int)t->n_out);
            t->packed = dst;
            p->packed++;
        } else {
            memcpy(dst, t->data, rows);
            t->data = dst;
        }
        if (j->release_src) release_pages(src, rows);
    }
    return NULL;
}

int model_weights_repack(model_weights *w, uint32_t n_layers, bool release_src)
{
    const char *env = getenv("PAGELLM_NO_REPACK");
    if (env && env[0] && strcmp(env, "0") != 0) return 0;
    weight **ws = malloc((size_t)matmul_weights(w, n_layers, w->n_expert, NULL) * sizeof *ws);
    if (!ws) return 0;
    const int n = matmul_weights(w, n_layers, w->n_expert, ws);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += region_bytes(ws[i]);
    if (total == 0) {
        free(ws);
        return 0;
    }
    /* huge pages where the kernel allows them: decode streams every byte
     * of it once per token, and 2 MiB pages spare the TLB walks and let the
     * hardware prefetcher run on past 4 KiB edges (a read of a file mapping
     * paired with one of huge pages: 0.91-0.97 of its speed; the matrices
     * that were left in the file, copied here: TinyLlama Q4_K_M decode
     * 42.7 -> 45.6 tok/s, q4_0 (its Q6_K output) 51.4 -> 54.5, medians of 5
     * alternating runs) */
    const size_t huge = (size_t)2 << 20, len = (total + huge - 1) & ~(huge - 1);
    uint8_t *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        free(ws);
        return 0;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(mem, len, MADV_HUGEPAGE);
#endif
    /* each matrix's place, then the moves on several threads: the first
     * write of each new page has the kernel zero it, the larger part of a
     * load (TinyLlama f16, 2.2 GB: ~75% of the time in clear_page) */
    size_t *at = malloc((size_t)n * sizeof *at);
    if (!at) {
        munmap(mem, len);
        free(ws);
        return 0;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false; /* a matrix listed twice moves once */
        for (int k = 0; k < i && !seen; k++) seen = ws[k] == ws[i];
        const size_t bytes = seen ? 0 : region_bytes(ws[i]);
        at[i] = bytes ? off : SIZE_MAX;
        off += bytes;
    }
    repack_job job = {ws, at, mem, n, release_src, 1};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    job.nth = ncpu < 1 ? 1 : ncpu > REPACK_THREADS_MAX ? REPACK_THREADS_MAX : (int)ncpu;
    pthread_t th[REPACK_THREADS_MAX];
    repack_part part[REPACK_THREADS_MAX];
    int started = 0;
    for (int t = 1; t < job.nth; t++) {
        part[t] = (repack_part){&job, t, 0};
        if (pthread_create(&th[t], NULL, repack_run, &part[t]) != 0) break;
        started = t;
    }
    /* matrices of threads that could not start are the caller's too */
    part[0] = (repack_part){&job, 0, 0};
    repack_run(&part[0]);
    int packed = part[0].packed;
    for (int t = 1; t <= started; t++) {
        pthread_join(th[t], NULL);
        packed += part[t].packed;
    }
    for (int t = started + 1; t < job.nth; t++) {
        part[t] = (repack_part){&job, t, 0};
        repack_run(&part[t]);
        packed += part[t].packed;
    }
    free(at);
    free(ws);
    w->pack_mem = mem;
    w->pack_len = len;
    return packed;
}

void model_weights_free(model_weights *w)
{
    for (uint32_t l = 0; w->layers && l < w->n_layers; l++) {
        moe_layer_free(w->layers[l].moe);
        mla_layer_free(w->layers[l].mla);
    }
    free(w->layers);
    w->layers = NULL;
    if (w->pack_mem) munmap(w->pack_mem, w->pack_len);
    w->pack_mem = NULL;
}
