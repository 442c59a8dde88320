/* arch_deepseek2.c - deepseek2's metadata; see arch_deepseek2.h. */
#include "model/arch_deepseek2.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "model/moe.h"

/* "deepseek2.<name>": 0, PL_ENOTFOUND (absent), or another error. */
static int key_u32(const gguf_file *f, const char *name, uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "deepseek2.%s", name);
    int rc = gguf_get_u32(f, key, out);
    if (rc && rc != PL_ENOTFOUND) return err_prefix(rc, "%s", gguf_path(f));
    return rc;
}

static int key_f32(const gguf_file *f, const char *name, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "deepseek2.%s", name);
    int rc = gguf_get_f32(f, key, out);
    if (rc && rc != PL_ENOTFOUND) return err_prefix(rc, "%s", gguf_path(f));
    return rc;
}

static int missing(const gguf_file *f, const char *name, const char *what)
{
    return err_set(PL_EFORMAT, "%s: deepseek2.%s: missing (%s)", gguf_path(f), name, what);
}

/* A required u32 key in 1..max. */
static int need_u32(const gguf_file *f, const char *name, uint32_t max, const char *what, uint32_t *out)
{
    int rc = key_u32(f, name, out);
    if (rc == PL_ENOTFOUND) return missing(f, name, what);
    if (rc) return rc;
    if (*out == 0 || *out > max)
        return err_set(PL_EFORMAT, "%s: deepseek2.%s: %u out of range 1..%u (%s)", gguf_path(f), name, *out, max, what);
    return 0;
}

static int attention_config(const gguf_file *f, model_config *c)
{
    const char *p = gguf_path(f);
    mla_config m = {0};
    /* llama.cpp's "lite" shapes have no q LoRA and need no key */
    const bool lite = c->n_layers == 27 || c->n_layers == 26 || (c->n_layers == 48 && c->n_vocab == 128256);
    int rc = key_u32(f, "attention.q_lora_rank", &m.q_lora_rank);
    if (rc == PL_ENOTFOUND && !lite) return missing(f, "attention.q_lora_rank", "0 for a plain attn_q");
    if (rc && rc != PL_ENOTFOUND) return rc;
    if (m.q_lora_rank > 65536)
        return err_set(PL_EFORMAT, "%s: deepseek2.attention.q_lora_rank: %u out of range 0..65536", p, m.q_lora_rank);
    rc = need_u32(f, "attention.kv_lora_rank", 65536, "the latent width", &m.kv_lora_rank);
    uint32_t k_mla = 0, v_mla = 0;
    if (!rc) rc = key_u32(f, "attention.key_length_mla", &k_mla);
    /* without key_length_mla the file is the legacy form, as llama.cpp reads it: per-head
     * key_length / value_length and head_count_kv = head_count (MHA), one attn_kv_b a layer */
    m.legacy_kv_b = rc == PL_ENOTFOUND;
    if (m.legacy_kv_b) {
        rc = key_u32(f, "attention.key_length", &k_mla);
        if (rc == PL_ENOTFOUND)
            return missing(f, "attention.key_length_mla", "nor attention.key_length of the legacy attn_kv_b form");
        if (!rc) rc = key_u32(f, "attention.value_length", &v_mla);
        if (rc == PL_ENOTFOUND)
            return missing(f, "attention.value_length", "the value head dims of the legacy attn_kv_b form, which has no "
                           "key_length_mla");
    } else if (!rc) {
        rc = key_u32(f, "attention.value_length_mla", &v_mla);
        if (rc == PL_ENOTFOUND) return missing(f, "attention.value_length_mla", "the value head dims");
    }
    if (rc) return rc;
    uint32_t rope = 0;
    rc = need_u32(f, "rope.dimension_count", 1024, "the RoPE dims of q_pe and k_pe", &rope);
    if (rc) return rc;
    if (m.legacy_kv_b) {
        uint32_t nkv = c->n_heads;
        rc = key_u32(f, "attention.head_count_kv", &nkv);
        if (rc && rc != PL_ENOTFOUND) return rc;
        if (nkv != c->n_heads)
            return err_set(PL_EFORMAT, "%s: deepseek2.attention.key_length_mla: missing, and head_count_kv is %u, not "
                           "head_count (%u) as in the legacy attn_kv_b form", p, nkv, c->n_heads);
    }
    if (rope % 2) return err_set(PL_EFORMAT, "%s: deepseek2.rope.dimension_count: %u is odd", p, rope);
    if (k_mla <= rope || k_mla > 4096)
        return err_set(PL_EFORMAT, "%s: deepseek2.attention.key_length_mla: %u, expected more than "
                       "rope.dimension_count (%u) and at most 4096", p, k_mla, rope);
    if (v_mla == 0 || v_mla > 4096)
        return err_set(PL_EFORMAT, "%s: deepseek2.attention.value_length_mla: %u out of range 1..4096", p, v_mla);
    m.qk_nope = k_mla - rope;
    m.v_head = v_mla;
    /* the cached row: c_kv then k_pe, one "head" for all query heads */
    const uint32_t row = m.kv_lora_rank + rope;
    uint32_t kl = 0, nkv = 0;
    rc = m.legacy_kv_b ? PL_ENOTFOUND : key_u32(f, "attention.key_length", &kl); /* legacy: checked above */
    if (!rc && kl != row)
        return err_set(PL_EFORMAT, "%s: deepseek2.attention.key_length: %u, expected kv_lora_rank + "
                       "rope.dimension_count = %u", p, kl, row);
    if (rc && rc != PL_ENOTFOUND) return rc;
    rc = m.legacy_kv_b ? PL_ENOTFOUND : key_u32(f, "attention.head_count_kv", &nkv);
    if (!rc && nkv != 1)
        return err_set(PL_EFORMAT, "%s: deepseek2.attention.head_count_kv: %u, expected 1 (the latent cache)", p, nkv);
    if (rc && rc != PL_ENOTFOUND) return rc;
    if (row > 65536) return err_set(PL_EFORMAT, "%s: deepseek2.attention.kv_lora_rank: %u too large", p, m.kv_lora_rank);
    c->head_dim = row;
    c->n_kv_heads = 1;
    c->sliding_window = 0; /* llama.cpp's deepseek2 reads no window: every layer attends over everything */
    c->rope_dim = rope;
    c->rope_neox = false;
    /* YaRN as llama.cpp scales it for deepseek2: the converter writes 0.1
     * x mscale_all_dim as the log multiplier; llama_context's attention
     * factor for the rope is get_mscale(f, mscale) / get_mscale(f,
     * mscale_all_dim) (mscale = mscale_all_dim here, so 1) over YaRN's own
     * 1 + 0.1 ln f, and the graph pre-scales kq_scale by the original
     * factor times 1 + 0.1 log_mul ln(1 / freq_scale), squared */
    float log_mul = 0;
    rc = key_f32(f, "rope.scaling.yarn_log_multiplier", &log_mul);
    if (rc && rc != PL_ENOTFOUND) return rc;
    if (!rc) log_mul /= 0.1f;
    const bool yarn = c->rope_scaling.type == ROPE_SCALING_YARN && c->rope_scaling.factor > 0;
    const float freq_scale = c->rope_scale;
    float attn_factor = 1.0f;
    if (yarn) {
        const float factor = 1.0f / freq_scale;
        if (log_mul != 0.0f) {
            const float ms = log_mul != 1.0f ? log_mul : 1.0f;
            const float a = factor <= 1.0f ? 1.0f : 0.1f * ms * logf(factor) + 1.0f;
            const float b = factor <= 1.0f ? 1.0f : 0.1f * log_mul * logf(factor) + 1.0f;
            attn_factor = a / b;
        } else {
            attn_factor = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
        }
        attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    attn_factor *= c->rope_scaling.attn_factor > 0 ? c->rope_scaling.attn_factor : 1.0f;
    m.rope_mscale = attn_factor;
    const float org = attn_factor * (1.0f + 0.1f * logf(1.0f / freq_scale));
    const float mscale = org * (1.0f + 0.1f * log_mul * logf(1.0f / freq_scale));
    m.kq_scale = 1.0f * mscale * mscale / sqrtf((float)k_mla);
    if (!(m.kq_scale > 0) || !isfinite(m.kq_scale))
        return err_set(PL_EFORMAT, "%s: deepseek2.rope.scaling.yarn_log_multiplier: attention scale %g", p, m.kq_scale);
    c->mla = m;
    return 0;
}

static int moe_keys(const gguf_file *f, model_config *c)
{
    const char *p = gguf_path(f);
    moe_config m = {0};
    uint32_t n_shared = 0, gating = 0;
    int rc = need_u32(f, "expert_count", MOE_EXPERTS_MAX, "a deepseek2 model's FFN is a mixture of experts", &m.n_expert);
    if (!rc) rc = need_u32(f, "expert_used_count", m.n_expert, "experts per token, at most expert_count", &m.n_used);
    if (!rc) rc = need_u32(f, "expert_feed_forward_length", 1u << 20, "rows of one expert", &m.ffn_exp);
    if (!rc) rc = need_u32(f, "expert_shared_count", 64, "shared experts", &n_shared);
    if (rc) return rc;
    m.ffn_shexp = m.ffn_exp * n_shared;
    if (m.ffn_shexp > 1u << 20)
        return err_set(PL_EFORMAT, "%s: deepseek2.expert_shared_count: %u shared experts of %u rows, more than %u rows",
                       p, n_shared, m.ffn_exp, 1u << 20);
    m.shared_ungated = true;
    rc = key_u32(f, "leading_dense_block_count", &m.n_dense_lead);
    if (rc && rc != PL_ENOTFOUND) return rc;
    if (m.n_dense_lead > c->n_layers)
        return err_set(PL_EFORMAT, "%s: deepseek2.leading_dense_block_count: %u, more than block_count (%u)", p,
                       m.n_dense_lead, c->n_layers);
    rc = key_f32(f, "expert_weights_scale", &m.w_scale);
    if (rc && rc != PL_ENOTFOUND) return rc;
    if (!isfinite(m.w_scale) || m.w_scale < 0)
        return err_set(PL_EFORMAT, "%s: deepseek2.expert_weights_scale: %g is not a scale", p, m.w_scale);
    char key[64];
    snprintf(key, sizeof key, "deepseek2.expert_weights_norm");
    rc = gguf_get_bool(f, key, &m.norm_topk);
    if (rc && rc != PL_ENOTFOUND) return err_prefix(rc, "%s", p);
    rc = key_u32(f, "expert_gating_func", &gating);
    if (rc && rc != PL_ENOTFOUND) return rc;
    /* llama.cpp: 0 (absent) is softmax for the V2 files that predate the
     * key, but sigmoid for GLM-4.7-Lite's shape (47 or 48 layers, vocab 154880) */
    if (gating == 0 && (c->n_layers == 47 || c->n_layers == 48) && c->n_vocab == 154880) gating = 2;
    if (gating > 2)
        return err_set(PL_EUNSUPPORTED, "%s: deepseek2.expert_gating_func: %u not supported (1 softmax, 2 sigmoid)", p,
                       gating);
    m.gating = gating == 2 ? MOE_GATING_SIGMOID : MOE_GATING_SOFTMAX;
    rc = key_u32(f, "expert_group_count", &m.n_group);
    if (rc && rc != PL_ENOTFOUND) return rc;
    rc = key_u32(f, "expert_group_used_count", &m.n_group_used);
    if (rc && rc != PL_ENOTFOUND) return rc;
    if (m.n_group > 1) {
        if (m.n_group >= m.n_expert || m.n_expert % m.n_group)
            return err_set(PL_EFORMAT, "%s: deepseek2.expert_group_count: %u does not divide expert_count %u", p,
                           m.n_group, m.n_expert);
        if (m.n_expert / m.n_group < 2)
            return err_set(PL_EFORMAT, "%s: deepseek2.expert_group_count: %u groups of fewer than 2 experts", p, m.n_group);
        if (m.n_group_used == 0 || m.n_group_used >= m.n_group)
            return err_set(PL_EFORMAT, "%s: deepseek2.expert_group_used_count: %u, expected 1..expert_group_count - 1 (%u)",
                           p, m.n_group_used, m.n_group - 1);
        if (m.n_group_used * (m.n_expert / m.n_group) < m.n_used)
            return err_set(PL_EFORMAT, "%s: deepseek2.expert_group_used_count: %u groups hold fewer than "
                           "expert_used_count (%u) experts", p, m.n_group_used, m.n_used);
    }
    c->moe = m;
    return 0;
}

/* What llama.cpp reads for some deepseek2 files and pagellm does not
 * compute yet: refused by key rather than run wrongly. */
static int unsupported_keys(const gguf_file *f)
{
    uint32_t n = 0;
    int rc = key_u32(f, "nextn_predict_layers", &n);
    if (rc && rc != PL_ENOTFOUND) return rc;
    if (!rc && n > 0)
        return err_set(PL_EUNSUPPORTED, "%s: deepseek2.nextn_predict_layers: %u multi-token-prediction layers are not "
                       "supported", gguf_path(f), n);
    float t = 0;
    rc = key_f32(f, "attention.temperature_scale", &t);
    if (rc && rc != PL_ENOTFOUND) return rc;
    if (!rc && t != 0.0f)
        return err_set(PL_EUNSUPPORTED, "%s: deepseek2.attention.temperature_scale: attention temperature tuning "
                       "is not supported", gguf_path(f));
    return 0;
}

int arch_deepseek2_config(const gguf_file *f, model_config *c)
{
    if (c->arch != ARCH_DEEPSEEK2) return 0;
    int rc = unsupported_keys(f);
    if (!rc) rc = attention_config(f, c);
    if (!rc) rc = moe_keys(f, c);
    return rc;
}
