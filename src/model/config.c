/* config.c - model hyper-parameters from GGUF metadata; see config.h. */
#include "model/config.h"

#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "model/moe.h"
#include "model/arch_gemma.h"
#include "model/arch_deepseek2.h"

static int get_u32(const gguf_file *f, const char *arch, const char *name, uint32_t *out, bool required)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    int rc = gguf_get_u32(f, key, out);
    if (rc == PL_ENOTFOUND && !required) return 0;
    if (rc) return err_prefix(rc, "%s", gguf_path(f));
    return 0;
}

static int get_f32(const gguf_file *f, const char *arch, const char *name, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    int rc = gguf_get_f32(f, key, out);
    if (rc == PL_ENOTFOUND) return 0;
    if (rc) return err_prefix(rc, "%s", gguf_path(f));
    return 0;
}

static int arch_parse(const gguf_file *f, model_config *c)
{
    gguf_str a;
    int rc = gguf_get_str(f, "general.architecture", &a);
    if (rc) return err_prefix(rc, "%s", gguf_path(f));
    static const struct { const char *name; model_arch arch; bool neox; } known[] = {
        {"llama", ARCH_LLAMA, false}, {"mistral", ARCH_MISTRAL, false},
        {"qwen2", ARCH_QWEN2, true}, {"qwen3", ARCH_QWEN3, true},
        {"qwen2moe", ARCH_QWEN2MOE, true}, {"qwen3moe", ARCH_QWEN3MOE, true},
        {"gemma", ARCH_GEMMA, true}, {"gemma2", ARCH_GEMMA2, true}, {"gemma3", ARCH_GEMMA3, true},
        {"phi3", ARCH_PHI3, true}, {"deepseek2", ARCH_DEEPSEEK2, false},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (!gguf_str_eq(a, known[i].name)) continue;
        c->arch = known[i].arch;
        c->rope_neox = known[i].neox;
        snprintf(c->arch_name, sizeof c->arch_name, "%s", known[i].name);
        return 0;
    }
    return err_set(PL_EUNSUPPORTED, "%s: general.architecture: unsupported architecture '%.*s' "
                   "(supported: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3, phi3, qwen2moe, qwen3moe, deepseek2)", gguf_path(f), (int)(a.len > 64 ? 64 : a.len), a.ptr);
}

static int vocab_size(const gguf_file *f, model_config *c)
{
    uint32_t n = 0;
    int rc = get_u32(f, c->arch_name, "vocab_size", &n, false);
    if (rc) return rc;
    if (n == 0) {
        const gguf_value *toks;
        if (gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks) == 0) n = (uint32_t)toks->v.arr.n;
    }
    if (n == 0) return err_set(PL_EFORMAT, "%s: %s.vocab_size: missing, and no tokenizer.ggml.tokens", gguf_path(f), c->arch_name);
    c->n_vocab = n;
    return 0;
}

static int config_check(const gguf_file *f, const model_config *c)
{
    const char *p = gguf_path(f), *a = c->arch_name;
    if (c->n_layers == 0 || c->n_layers > 1024) return err_set(PL_EFORMAT, "%s: %s.block_count: %u out of range 1..1024", p, a, c->n_layers);
    if (c->dim == 0 || c->dim > 65536) return err_set(PL_EFORMAT, "%s: %s.embedding_length: %u out of range", p, a, c->dim);
    if (c->n_heads == 0 || c->n_heads > 1024) return err_set(PL_EFORMAT, "%s: %s.attention.head_count: %u out of range", p, a, c->n_heads);
    if (c->n_kv_heads == 0 || c->n_heads % c->n_kv_heads)
        return err_set(PL_EFORMAT, "%s: %s.attention.head_count_kv: %u does not divide head_count %u", p, a, c->n_kv_heads, c->n_heads);
    if (c->head_dim == 0 || c->head_dim > 1024 || c->head_dim % 2)
        return err_set(PL_EFORMAT, "%s: %s.attention.key_length: head dim %u must be even and <= 1024", p, a, c->head_dim);
    if (c->rope_dim == 0 || c->rope_dim > c->head_dim || c->rope_dim % 2)
        return err_set(PL_EFORMAT, "%s: %s.rope.dimension_count: %u must be even and <= head dim %u", p, a, c->rope_dim, c->head_dim);
    if (c->ffn_dim == 0 || c->ffn_dim > 1 << 20) return err_set(PL_EFORMAT, "%s: %s.feed_forward_length: %u out of range", p, a, c->ffn_dim);
    if (c->ctx_train == 0) return err_set(PL_EFORMAT, "%s: %s.context_length: 0", p, a);
    if (!(c->rope_base > 0) || !(c->rope_scale > 0)) return err_set(PL_EFORMAT, "%s: %s.rope.freq_base/scale must be > 0", p, a);
    if (!(c->norm_eps > 0) || c->norm_eps > 1) return err_set(PL_EFORMAT, "%s: %s.attention.layer_norm_rms_epsilon: %g out of range", p, a, c->norm_eps);
    return 0;
}

int model_config_read(const gguf_file *f, model_config *out)
{
    model_config c;
    memset(&c, 0, sizeof c);
    int rc = arch_parse(f, &c);
    const char *a = c.arch_name;
    if (!rc) rc = get_u32(f, a, "block_count", &c.n_layers, true);
    if (!rc) rc = get_u32(f, a, "embedding_length", &c.dim, true);
    if (!rc) rc = get_u32(f, a, "attention.head_count", &c.n_heads, true);
    if (!rc) rc = get_u32(f, a, "feed_forward_length", &c.ffn_dim, true);
    if (!rc) rc = get_u32(f, a, "context_length", &c.ctx_train, true);
    if (rc) return rc;
    c.n_kv_heads = c.n_heads;
    c.head_dim = c.n_heads ? c.dim / c.n_heads : 0;
    c.rope_base = 10000.0f;
    c.rope_scale = 1.0f;
    c.norm_eps = 1e-5f;
    float linear = 0;
    rc = get_u32(f, a, "attention.head_count_kv", &c.n_kv_heads, false);
    if (!rc) rc = get_u32(f, a, "attention.key_length", &c.head_dim, false);
    c.rope_dim = c.head_dim;
    if (!rc) rc = get_u32(f, a, "rope.dimension_count", &c.rope_dim, false);
    if (!rc) rc = get_f32(f, a, "rope.freq_base", &c.rope_base);
    if (!rc) rc = rope_scaling_read(f, a, c.ctx_train, &c.rope_scaling);
    linear = c.rope_scaling.factor;
    if (!rc && linear == 0) rc = get_f32(f, a, "rope.scale_linear", &linear); /* the older key */
    if (!rc) rc = get_f32(f, a, "attention.layer_norm_rms_epsilon", &c.norm_eps);
    if (!rc) rc = get_u32(f, a, "attention.sliding_window", &c.sliding_window, false);
    c.pooling = MODEL_POOL_MEAN;
    if (!rc) rc = get_u32(f, a, "pooling_type", &c.pooling, false);
    if (!rc && c.pooling > MODEL_POOL_RANK)
        return err_set(PL_EFORMAT, "%s: %s.pooling_type: %u is not a pooling type (0..4)", gguf_path(f), a, c.pooling);
    if (!rc) rc = vocab_size(f, &c);
    if (rc) return rc;
    /* the factor divides positions (linear, yarn, longrope), as llama.cpp;
     * type none never scales */
    if (linear > 0 && c.rope_scaling.type != ROPE_SCALING_NONE) c.rope_scale = 1.0f / linear;
    c.rope_base_local = c.rope_base;
    c.rope_scale_local = c.rope_scale;
    rc = arch_gemma_config(f, &c);
    if (!rc) rc = config_check(f, &c);
    if (!rc) rc = moe_config_read(f, &c);
    if (!rc) rc = arch_deepseek2_config(f, &c);
    if (rc) return rc;
    *out = c;
    return 0;
}

bool model_config_layer_local(const model_config *c, uint32_t l)
{
    if (!c->local_window) return false;
    return c->local_pattern == 0 || l % c->local_pattern < c->local_pattern - 1;
}

uint32_t model_config_ctx_rope(const model_config *c)
{
    double n = c->ctx_train;
    if (c->rope_scaling.type != ROPE_SCALING_NONE && c->rope_scale > 0 && c->rope_scale < 1) {
        const double s = (double)c->rope_scaling.ctx_orig / c->rope_scale; /* rope_scale = 1 / factor */
        n = s > n ? s : n;
    }
    return n >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}
