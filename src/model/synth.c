/* synth.c - deterministic synthetic llama-architecture GGUF models.
 *
 * For speed work and tests we need models of real shapes (110M, TinyLlama
 * 1.1B, Llama-3.2 1B) without downloading weights. Weights are uniform random
 * with std 1/sqrt(fan_in) (norm weights 1), drawn from a counter-based
 * generator seeded by (seed, tensor index), so every tensor can be produced
 * independently, one at a time, and the same seed always gives the same
 * file. The output projection has std 2/sqrt(dim) so that greedy choices are
 * well separated (comparisons against llama.cpp need clear argmaxes).
 *
 * Weights are encoded directly in the requested type (F32 by default), so a
 * quantized 1B model never needs its 4 GB F32 form in memory or on disk.
 *
 * Architectures: llama, and its relatives qwen2 (adds q/k/v biases, NeoX
 * rope order) and qwen3 (adds per-head RMSNorm weights on q and k, NeoX), so
 * that each code path of the forward pass can be compared with llama.cpp.
 * Bias and q/k-norm values are drawn around 0 and 1 respectively.
 *
 * Mixture of experts: mixtral (general.architecture llama with experts),
 * qwen2moe (qwen2 attention, a shared expert with its sigmoid gate) and
 * qwen3moe (qwen3 attention, renormalised top-k) replace each layer's FFN
 * with a router and 3-D expert tensors (synth_moe below; model/moe.h).
 */
#include "pagellm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "gguf/gguf.h"
#include "model/synth_arch.h"
#include "model/synth_deepseek2.h"
#include "model/synth_vocab.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

typedef struct {
    const char *name;
    uint32_t dim, layers, heads, kv_heads, ffn, vocab, ctx;
    float rope_base;
} synth_shape;

static const synth_shape shapes[] = {
    {"tiny", 128, 4, 4, 2, 384, 512, 2048, 10000.0f},
    {"tiny256", 256, 12, 8, 2, 512, 512, 2048, 10000.0f}, /* rows fit 256-element super-blocks */
    {"tiny-gqa8", 512, 2, 32, 4, 512, 512, 2048, 10000.0f}, /* TinyLlama's heads (32 over 4 KV) at a tiny size */
    {"110m", 768, 12, 12, 12, 2048, 32000, 4096, 10000.0f},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 4096, 10000.0f},
    {"llama3.2-1b", 2048, 16, 32, 8, 8192, 128256, 8192, 500000.0f},
    {"qwen3moe-3b", 1024, 24, 16, 4, 3072, 151936, 4096, 1000000.0f},
    {"gemma3-1b", 1152, 26, 4, 1, 6912, 262144, 32768, 10000.0f}, /* head dim 256: synth_arch.c */
    {"phi3-mini", 3072, 32, 32, 32, 8192, 32064, 4096, 10000.0f},
    /* --arch deepseek2 only (synth_deepseek2.c has their MLA and expert dims) */
    {"tiny-v2", 256, 4, 8, 1, 512, 512, 2048, 10000.0f},
    {"mla-bench", 1024, 4, 16, 1, 2048, 2048, 8192, 10000.0f},
    {"deepseek2-lite", 2048, 27, 16, 1, 10944, 102400, 4096, 10000.0f},
};

/* The experts of a MoE architecture at a shape. Mixtral's are 8 of
 * feed_forward_length rows, top-2, at every shape (llama.cpp sizes a llama
 * expert by feed_forward_length). The Qwen MoEs at "tiny" have 8 experts
 * of 128 rows, top-4; at the other shapes 64 of 512 rows, top-8:
 * qwen3moe-3b has ~2.8B weights, ~0.5B of them read per token. */
typedef struct {
    const char *file_arch; /* general.architecture */
    uint32_t n_expert, n_used, ffn_exp, ffn_shexp; /* ffn_exp 0: the shape's ffn */
} synth_moe;

static bool synth_moe_of(const char *arch, const char *shape, synth_moe *m)
{
    const bool tiny = strcmp(shape, "tiny") == 0;
    if (strcmp(arch, "mixtral") == 0) {
        *m = (synth_moe){"llama", 8, 2, 0, 0};
        return true;
    }
    if (strcmp(arch, "qwen2moe") == 0) *m = (synth_moe){"qwen2moe", 8, 4, 128, 256};
    else if (strcmp(arch, "qwen3moe") == 0) *m = (synth_moe){"qwen3moe", 8, 4, 128, 0};
    else return false;
    if (!tiny) {
        m->n_expert = 64;
        m->n_used = 8;
        m->ffn_exp = 512;
        m->ffn_shexp = m->ffn_shexp ? 2048 : 0;
    }
    return true;
}
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

const char *const *pl_synth_shapes(void)
{
    static const char *names[N_SHAPES + 1];
    for (size_t i = 0; i < N_SHAPES; i++) names[i] = shapes[i].name;
    return names;
}

/* One tensor to write: its dims, the std of its values (0 = all ones). */
typedef struct {
    char name[64];
    uint64_t ne[3];
    uint32_t n_dims, type;
    float std;   /* 0: all ones */
    float mean;  /* added to every value (1 for q/k norm weights) */
} synth_tensor;

typedef struct {
    uint64_t seed;
    synth_tensor *t;
    float *row; /* scratch: one row of f32 */
} synth_fill_ctx;

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* xoshiro-style fast generator for the bulk of the values. */
static inline uint64_t rng_next(uint64_t s[2])
{
    uint64_t s0 = s[0], s1 = s[1], r = s0 + s1;
    s1 ^= s0;
    s[0] = ((s0 << 55) | (s0 >> 9)) ^ s1 ^ (s1 << 14);
    s[1] = (s1 << 36) | (s1 >> 28);
    return r;
}

static int synth_fill(void *user, uint64_t idx, void *dst, uint64_t nbytes)
{
    synth_fill_ctx *c = user;
    const synth_tensor *t = &c->t[idx];
    uint64_t sm = c->seed ^ (0xA5A5A5A5ull * (idx + 1)), st[2];
    st[0] = splitmix64(&sm);
    st[1] = splitmix64(&sm);
    const float a = t->std * sqrtf(3.0f); /* uniform [-a, a] has std a/sqrt(3) */
    const uint64_t row_bytes = dtype_row_bytes(t->type, t->ne[0]);
    for (uint64_t r = 0; r < t->ne[1] * t->ne[2]; r++) {
        for (uint64_t j = 0; j < t->ne[0]; j++) {
            if (t->std == 0) { c->row[j] = 1.0f; continue; }
            double u = (double)(rng_next(st) >> 11) * 0x1.0p-53; /* [0, 1) */
            c->row[j] = (float)((2.0 * u - 1.0) * a) + t->mean;
        }
        quant_quantize_row(t->type, c->row, (uint8_t *)dst + r * row_bytes, (int64_t)t->ne[0]);
    }
    (void)nbytes;
    return 0;
}

static const synth_shape *shape_find(const char *name)
{
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strcmp(shapes[i].name, name) == 0) return &shapes[i];
    return NULL;
}

static void tensor_add(synth_tensor *t, int *n, const char *name, uint64_t ne0, uint64_t ne1,
                       uint32_t type, float std)
{
    synth_tensor *x = &t[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ne[0] = ne0;
    x->ne[1] = ne1;
    x->ne[2] = 1;
    x->n_dims = ne1 > 1 ? 2 : 1;
    x->type = ne1 > 1 ? type : DT_F32; /* norms stay f32, as llama.cpp keeps them */
    x->std = std;
    x->mean = 0;
}

/* A layer's MoE FFN: router, the 3-D expert tensors, the shared expert. */
static void moe_tensors_plan(const synth_shape *s, const synth_moe *m, uint32_t l, uint32_t type, synth_tensor *t,
                             int *n)
{
    const uint32_t fe = m->ffn_exp ? m->ffn_exp : s->ffn;
    const float sd = 1.0f / sqrtf((float)s->dim), sf = 1.0f / sqrtf((float)fe);
    char nm[64];
#define T(suffix, ne0, ne1, std) (snprintf(nm, sizeof nm, "blk.%u." suffix, l), tensor_add(t, n, nm, ne0, ne1, type, std))
    T("ffn_gate_inp.weight", s->dim, m->n_expert, sd);
    t[*n - 1].type = DT_F32; /* the router stays f32, as llama.cpp keeps it */
    T("ffn_gate_exps.weight", s->dim, fe, sd);
    t[*n - 1].ne[2] = m->n_expert;
    T("ffn_up_exps.weight", s->dim, fe, sd);
    t[*n - 1].ne[2] = m->n_expert;
    T("ffn_down_exps.weight", fe, s->dim, sf);
    t[*n - 1].ne[2] = m->n_expert;
    for (int i = 1; i <= 3; i++) t[*n - i].n_dims = 3;
    if (m->ffn_shexp) {
        T("ffn_gate_inp_shexp.weight", s->dim, 1, sd);
        T("ffn_gate_shexp.weight", s->dim, m->ffn_shexp, sd);
        T("ffn_up_shexp.weight", s->dim, m->ffn_shexp, sd);
        T("ffn_down_shexp.weight", m->ffn_shexp, s->dim, 1.0f / sqrtf((float)m->ffn_shexp));
    }
#undef T
}

/* Lays out the tensor list in llama.cpp's names and order. */
static int tensors_plan(const synth_shape *s, const char *arch, uint32_t n_vocab, uint32_t type, synth_tensor *t)
{
    synth_moe moe;
    const bool is_moe = synth_moe_of(arch, s->name, &moe);
    const bool biases = strcmp(arch, "qwen2") == 0 || strcmp(arch, "qwen2moe") == 0;
    const bool qk_norm = strcmp(arch, "qwen3") == 0 || strcmp(arch, "qwen3moe") == 0;
    int n = 0;
    const uint32_t hd = s->dim / s->heads, kv = hd * s->kv_heads;
    const float sd = 1.0f / sqrtf((float)s->dim), sf = 1.0f / sqrtf((float)s->ffn);
    tensor_add(t, &n, "token_embd.weight", s->dim, n_vocab, type, 1.0f);
    for (uint32_t l = 0; l < s->layers; l++) {
        char nm[64];
#define T(suffix, ne0, ne1, std) (snprintf(nm, sizeof nm, "blk.%u." suffix, l), tensor_add(t, &n, nm, ne0, ne1, type, std))
        T("attn_norm.weight", s->dim, 1, 0);
        T("attn_q.weight", s->dim, s->dim, sd);
        T("attn_k.weight", s->dim, kv, sd);
        T("attn_v.weight", s->dim, kv, sd);
        if (biases) {
            T("attn_q.bias", s->dim, 1, 0.2f);
            T("attn_k.bias", kv, 1, 0.2f);
            T("attn_v.bias", kv, 1, 0.2f);
        }
        if (qk_norm) {
            T("attn_q_norm.weight", hd, 1, 0.2f);
            t[n - 1].mean = 1.0f;
            T("attn_k_norm.weight", hd, 1, 0.2f);
            t[n - 1].mean = 1.0f;
        }
        T("attn_output.weight", s->dim, s->dim, sd);
        T("ffn_norm.weight", s->dim, 1, 0);
        if (is_moe) {
            moe_tensors_plan(s, &moe, l, type, t, &n);
            continue;
        }
        T("ffn_gate.weight", s->dim, s->ffn, sd);
        T("ffn_up.weight", s->dim, s->ffn, sd);
        T("ffn_down.weight", s->ffn, s->dim, sf);
#undef T
    }
    tensor_add(t, &n, "output_norm.weight", s->dim, 1, type, 0);
    tensor_add(t, &n, "output.weight", s->dim, n_vocab, type, 2.0f * sd);
    return n;
}

static int metadata_write(gguf_writer *w, const synth_shape *s, const char *arch, uint32_t n_vocab, uint32_t type,
                          uint64_t seed, uint32_t sliding_window)
{
    char key[96];
    synth_moe moe;
    const bool is_moe = synth_moe_of(arch, s->name, &moe);
    if (is_moe) arch = moe.file_arch;
#define K(name) (snprintf(key, sizeof key, "%s." name, arch), key)
    char name[96];
    snprintf(name, sizeof name, "pagellm-synth-%s-seed%llu", s->name, (unsigned long long)seed);
    /* llama.cpp's general.file_type (LLAMA_FTYPE_*) for the weight type */
    uint32_t ftype = type == DT_F32 ? 0 : type == DT_F16 ? 1 : type == DT_Q4_0 ? 2
                   : type == DT_Q8_0 ? 7 : type == DT_BF16 ? 32 : type == DT_Q4_K ? 15 : 0;
    int rc = gguf_writer_set_str(w, "general.architecture", arch);
    if (!rc) rc = gguf_writer_set_str(w, "general.name", name);
    if (!rc) rc = gguf_writer_set_u32(w, "general.file_type", ftype);
    if (!rc) rc = gguf_writer_set_u32(w, K("context_length"), s->ctx);
    if (!rc) rc = gguf_writer_set_u32(w, K("embedding_length"), s->dim);
    if (!rc) rc = gguf_writer_set_u32(w, K("block_count"), s->layers);
    if (!rc) rc = gguf_writer_set_u32(w, K("feed_forward_length"), s->ffn);
    if (!rc) rc = gguf_writer_set_u32(w, K("attention.head_count"), s->heads);
    if (!rc) rc = gguf_writer_set_u32(w, K("attention.head_count_kv"), s->kv_heads);
    if (!rc) rc = gguf_writer_set_u32(w, K("rope.dimension_count"), s->dim / s->heads);
    if (!rc) rc = gguf_writer_set_f32(w, K("rope.freq_base"), s->rope_base);
    if (!rc) rc = gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-5f);
    if (!rc) rc = gguf_writer_set_u32(w, K("vocab_size"), n_vocab);
    if (!rc && sliding_window) rc = gguf_writer_set_u32(w, K("attention.sliding_window"), sliding_window);
    if (!rc && is_moe) rc = gguf_writer_set_u32(w, K("expert_count"), moe.n_expert);
    if (!rc && is_moe) rc = gguf_writer_set_u32(w, K("expert_used_count"), moe.n_used);
    if (!rc && is_moe && moe.ffn_exp) rc = gguf_writer_set_u32(w, K("expert_feed_forward_length"), moe.ffn_exp);
    if (!rc && is_moe && moe.ffn_shexp)
        rc = gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), moe.ffn_shexp);
#undef K
    return rc;
}

/* general.* keys, then synth_arch.c's (gemma family, phi3) */
static int arch_metadata_write(gguf_writer *w, const synth_shape *s, const char *arch, uint32_t n_vocab,
                               uint32_t type, const pl_synth_params *p)
{
    /* llama.cpp gives a vocab whose general.name holds "phi3" the strip
     * attributes of Phi-3's "</s>", which the built-in vocab lacks: the
     * phi3-mini shape is named "phi 3-mini" there */
    char name[96];
    snprintf(name, sizeof name, "pagellm-synth-%s%s-seed%llu", strncmp(s->name, "phi3", 4) ? "" : "phi 3",
             strncmp(s->name, "phi3", 4) ? s->name : s->name + 4, (unsigned long long)p->seed);
    uint32_t ftype = type == DT_F32 ? 0 : type == DT_F16 ? 1 : type == DT_Q4_0 ? 2
                   : type == DT_Q8_0 ? 7 : type == DT_BF16 ? 32 : type == DT_Q4_K ? 15 : 0;
    int rc = gguf_writer_set_str(w, "general.architecture", arch);
    if (!rc) rc = gguf_writer_set_str(w, "general.name", name);
    if (!rc) rc = gguf_writer_set_u32(w, "general.file_type", ftype);
    const synth_arch_shape as = {s->name, s->dim, s->layers, s->heads, s->kv_heads,
                                 synth_arch_head_dim(s->name, s->dim, s->heads), s->ffn, s->vocab, s->ctx, s->rope_base};
    if (!rc) rc = synth_arch_meta(w, arch, &as, n_vocab, p);
    return rc;
}

typedef struct {
    synth_tensor *t;
    int n;
    uint32_t type;
} plan_ctx;

static void plan_add(void *ctx, const char *name, uint64_t ne0, uint64_t ne1, float std, float mean)
{
    plan_ctx *c = ctx;
    tensor_add(c->t, &c->n, name, ne0, ne1, c->type, std);
    c->t[c->n - 1].mean = mean;
}

/* Copies every tokenizer.* key of a vocab GGUF; returns its token count. */
static int vocab_copy(gguf_writer *w, const char *path, uint32_t *n_vocab)
{
    gguf_file *f;
    int rc = gguf_open(&f, path);
    if (rc) return rc;
    const gguf_value *toks;
    rc = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks);
    if (rc) { gguf_close(f); return err_prefix(rc, "vocab %s", path); }
    *n_vocab = (uint32_t)toks->v.arr.n;
    for (uint64_t i = 0; i < gguf_meta_count(f) && !rc; i++) {
        const gguf_meta *kv = gguf_meta_at(f, i);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10) != 0) continue;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        rc = gguf_writer_set_value(w, key, &kv->value);
    }
    gguf_close(f);
    return rc;
}

static int synth_check_type(const synth_shape *s, const char *arch, uint32_t n_vocab, int type)
{
    if (type < 0 || !quant_can_quantize((uint32_t)type) || type == DT_Q8_K)
        return err_set(PL_EINVAL, "--type: unsupported weight type");
    const dtype_traits *tr = dtype_get((uint32_t)type);
    if (s->dim % tr->blck_size || s->ffn % tr->blck_size)
        return err_set(PL_EINVAL, "--type %s: shape %s has rows (dim %u, ffn %u) not a multiple of %u",
                       tr->name, s->name, s->dim, s->ffn, tr->blck_size);
    synth_moe m;
    if (synth_moe_of(arch, s->name, &m) && (m.ffn_exp % tr->blck_size || m.ffn_shexp % tr->blck_size))
        return err_set(PL_EINVAL, "--type %s: the experts' rows (%u, shared %u) are not a multiple of %u",
                       tr->name, m.ffn_exp, m.ffn_shexp, tr->blck_size);
    (void)n_vocab;
    return 0;
}

/* OUT.gguf as n shards OUT-0000i-of-0000n.gguf (llama.cpp's naming). */
static int synth_write_split(gguf_writer *w, const char *out, uint32_t n, synth_fill_ctx *fc)
{
    const size_t len = strlen(out);
    char *prefix = strndup(out, len > 5 && strcmp(out + len - 5, ".gguf") == 0 ? len - 5 : len);
    if (!prefix) return err_set(PL_ENOMEM, "out of memory");
    int rc = gguf_writer_write_split(w, prefix, n, synth_fill, fc);
    free(prefix);
    return rc;
}

int pl_synth(const pl_synth_params *p)
{
    return pl_synth_split(p, 1);
}

static void ds2_add(void *ctx, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2, float std, bool f32)
{
    plan_ctx *c = ctx;
    tensor_add(c->t, &c->n, name, ne0, ne1, f32 ? DT_F32 : c->type, std);
    synth_tensor *x = &c->t[c->n - 1];
    x->ne[2] = ne2;
    if (ne2 > 1) x->n_dims = 3;
    if (f32) x->type = DT_F32;
}

/* --arch deepseek2: its own shapes, keys and tensors (synth_deepseek2.c). */
static int synth_deepseek2(const pl_synth_params *p, uint32_t n_split)
{
    if (!synth_deepseek2_shape(p->shape))
        return err_set(PL_EINVAL, "--arch deepseek2: shape '%s' (tiny, tiny-v2, mla-bench, deepseek2-lite)", p->shape);
    if (!p->out_path) return err_set(PL_EINVAL, "no output path");
    const int type = dtype_from_name(p->type ? p->type : "f32");
    if (type < 0 || !quant_can_quantize((uint32_t)type) || type == DT_Q8_K)
        return err_set(PL_EINVAL, "--type: unsupported weight type");
    const dtype_traits *tr = dtype_get((uint32_t)type);
    int rc = synth_deepseek2_check_type(p->shape, tr->blck_size, tr->name);
    if (rc) return rc;
    gguf_writer *w = gguf_writer_new();
    if (!w) return PL_ENOMEM;
    uint32_t n_vocab = synth_deepseek2_vocab(p->shape);
    rc = p->vocab_path ? vocab_copy(w, p->vocab_path, &n_vocab) : synth_vocab_write(w, n_vocab);
    char name[96];
    snprintf(name, sizeof name, "pagellm-synth-deepseek2-%s-seed%llu", p->shape, (unsigned long long)p->seed);
    const uint32_t ftype = type == DT_F32 ? 0 : type == DT_F16 ? 1 : type == DT_Q4_0 ? 2 : type == DT_Q8_0 ? 7
                         : type == DT_BF16 ? 32 : type == DT_Q4_K ? 15 : 0;
    if (!rc) rc = gguf_writer_set_str(w, "general.architecture", "deepseek2");
    if (!rc) rc = gguf_writer_set_str(w, "general.name", name);
    if (!rc) rc = gguf_writer_set_u32(w, "general.file_type", ftype);
    if (!rc) rc = synth_deepseek2_meta(w, p->shape, n_vocab, p);
    synth_tensor *t = mem_calloc(synth_deepseek2_n_tensors(p->shape), sizeof *t);
    synth_fill_ctx fc = {p->seed, t, mem_calloc(synth_deepseek2_row_max(p->shape), sizeof(float))};
    if (!t || !fc.row) rc = PL_ENOMEM;
    plan_ctx pc = {t, 0, (uint32_t)type};
    if (!rc) synth_deepseek2_plan(p->shape, n_vocab, p->legacy_kv_b, ds2_add, &pc);
    for (int i = 0; i < pc.n && !rc; i++) {
        int idx = gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, NULL);
        if (idx < 0) rc = idx;
    }
    if (!rc && n_split > 1) rc = synth_write_split(w, p->out_path, n_split, &fc);
    else if (!rc) rc = gguf_writer_write(w, p->out_path, synth_fill, &fc);
    free(fc.row);
    free(t);
    gguf_writer_free(w);
    return rc;
}

int pl_synth_split(const pl_synth_params *p, uint32_t n_split)
{
    if (p->arch && strcmp(p->arch, "deepseek2") == 0) return synth_deepseek2(p, n_split);
    const synth_shape *s = p->shape ? shape_find(p->shape) : NULL;
    const bool ds2_only = s && synth_deepseek2_shape(s->name) && strcmp(s->name, "tiny") != 0;
    if (!s || ds2_only)
        return err_set(PL_EINVAL, "unknown shape '%s'%s", p->shape ? p->shape : "(none)",
                       s ? " (it is written with --arch deepseek2)" : "");
    /* a MoE shape is a qwen3moe model unless another architecture is asked for */
    const char *arch = p->arch ? p->arch : strncmp(s->name, "qwen3moe", 8) == 0 ? "qwen3moe" : "llama";
    const bool own = synth_arch_handles(arch); /* gemma family, phi3: synth_arch.c */
    synth_moe moe;
    if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "qwen3") && !own && !synth_moe_of(arch, s->name, &moe))
        return err_set(PL_EINVAL, "unknown architecture '%s' (llama, qwen2, qwen3, gemma, gemma2, gemma3, phi3, "
                       "mixtral, qwen2moe, qwen3moe, deepseek2)", arch);
    if (!p->out_path) return err_set(PL_EINVAL, "no output path");
    int type = dtype_from_name(p->type ? p->type : "f32");
    gguf_writer *w = gguf_writer_new();
    if (!w) return PL_ENOMEM;
    uint32_t n_vocab = s->vocab;
    int rc = p->vocab_path ? vocab_copy(w, p->vocab_path, &n_vocab) : synth_vocab_write(w, n_vocab);
    if (!rc) rc = synth_check_type(s, arch, n_vocab, type);
    if (!rc && own) rc = arch_metadata_write(w, s, arch, n_vocab, (uint32_t)type, p);
    if (!rc && !own) rc = metadata_write(w, s, arch, n_vocab, (uint32_t)type, p->seed, p->sliding_window);
    if (!rc && !own) rc = synth_rope_meta(w, arch, s->ctx, p);
    synth_tensor *t = mem_calloc(s->layers * 20 + 5, sizeof *t);
    /* a row is at most ffn, dim, or heads x head dim (<= 256: attn_output of synth_arch.c's shapes) long */
    const size_t row_max = (s->ffn > s->dim ? s->ffn : s->dim) + (size_t)s->heads * 256;
    synth_fill_ctx fc = {p->seed, t, mem_calloc(row_max, sizeof(float))};
    if (!t || !fc.row) rc = PL_ENOMEM;
    int n = rc || own ? 0 : tensors_plan(s, arch, n_vocab, (uint32_t)type, t);
    if (!rc && own) {
        plan_ctx pc = {t, 0, (uint32_t)type};
        const synth_arch_shape as = {s->name, s->dim, s->layers, s->heads, s->kv_heads,
                                     synth_arch_head_dim(s->name, s->dim, s->heads), s->ffn, s->vocab, s->ctx, s->rope_base};
        synth_arch_plan(arch, &as, n_vocab, p, plan_add, &pc);
        n = pc.n;
    }
    for (int i = 0; i < n && !rc; i++) {
        int idx = gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, NULL);
        if (idx < 0) rc = idx;
    }
    if (!rc && n_split > 1) rc = synth_write_split(w, p->out_path, n_split, &fc);
    else if (!rc) rc = gguf_writer_write(w, p->out_path, synth_fill, &fc);
    free(fc.row);
    free(t);
    gguf_writer_free(w);
    return rc;
}
