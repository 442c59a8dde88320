/* moe_config.c - the mixture-of-experts keys of a GGUF's metadata, read and
 * checked into model_config.moe; see moe.h. Apart from moe.c so that the
 * config reader (and its fuzz target) need no kernels. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "model/moe.h"

/* <arch>.name as u32: 0, PL_ENOTFOUND (absent), or another error. */
static int key_u32(const gguf_file *f, const char *arch, const char *name, uint32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    int rc = gguf_get_u32(f, key, out);
    if (rc && rc != PL_ENOTFOUND) return err_prefix(rc, "%s", gguf_path(f));
    return rc;
}

int moe_config_read(const gguf_file *f, model_config *c)
{
    const char *p = gguf_path(f), *a = c->arch_name;
    const bool moe_arch = c->arch == ARCH_QWEN2MOE || c->arch == ARCH_QWEN3MOE;
    memset(&c->moe, 0, sizeof c->moe);
    /* llama.cpp routes over experts for these; other architectures ignore the key */
    if (!moe_arch && c->arch != ARCH_LLAMA) return 0;
    moe_config m = {0};
    int rc = key_u32(f, a, "expert_count", &m.n_expert);
    if (rc == PL_ENOTFOUND) {
        if (!moe_arch) return 0;
        return err_set(PL_EFORMAT, "%s: %s.expert_count: missing (a %s model's FFN is a mixture of experts)", p, a, a);
    }
    if (rc) return rc;
    if (m.n_expert == 0) {
        if (moe_arch) return err_set(PL_EFORMAT, "%s: %s.expert_count: 0 (a %s model needs experts)", p, a, a);
        return 0;
    }
    if (m.n_expert > MOE_EXPERTS_MAX)
        return err_set(PL_EFORMAT, "%s: %s.expert_count: %u, more than %u", p, a, m.n_expert, MOE_EXPERTS_MAX);
    rc = key_u32(f, a, "expert_used_count", &m.n_used);
    if (rc == PL_ENOTFOUND)
        return err_set(PL_EFORMAT, "%s: %s.expert_used_count: missing (experts per token)", p, a);
    if (rc) return rc;
    if (m.n_used == 0 || m.n_used > m.n_expert)
        return err_set(PL_EFORMAT, "%s: %s.expert_used_count: %u experts per token, expected 1..%s.expert_count (%u)",
                       p, a, m.n_used, a, m.n_expert);
    /* expert rows: Mixtral's are feed_forward_length; the Qwen MoEs name
     * theirs, else (as llama.cpp) feed_forward_length / experts per token */
    m.ffn_exp = c->ffn_dim;
    if (moe_arch) {
        m.ffn_exp = c->ffn_dim / m.n_used;
        rc = key_u32(f, a, "expert_feed_forward_length", &m.ffn_exp);
        if (rc && rc != PL_ENOTFOUND) return rc;
    }
    if (m.ffn_exp == 0 || m.ffn_exp > 1u << 20)
        return err_set(PL_EFORMAT, "%s: %s.expert_feed_forward_length: %u out of range 1..%u", p, a, m.ffn_exp, 1u << 20);
    if (c->arch == ARCH_QWEN2MOE) {
        m.ffn_shexp = c->ffn_dim;
        rc = key_u32(f, a, "expert_shared_feed_forward_length", &m.ffn_shexp);
        if (rc && rc != PL_ENOTFOUND) return rc;
        if (m.ffn_shexp == 0 || m.ffn_shexp > 1u << 20)
            return err_set(PL_EFORMAT, "%s: %s.expert_shared_feed_forward_length: %u out of range 1..%u", p, a,
                           m.ffn_shexp, 1u << 20);
    }
    /* llama.cpp renormalises the chosen probabilities for mixtral and
     * qwen3moe (norm_topk_prob is always true there), not for qwen2moe */
    m.norm_topk = c->arch != ARCH_QWEN2MOE;
    c->moe = m;
    return 0;
}
