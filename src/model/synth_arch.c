/* synth_arch.c - synthetic gemma-family and phi3 files; see synth_arch.h. */
#include "model/synth_arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"

bool synth_arch_handles(const char *arch)
{
    return !strcmp(arch, "gemma") || !strcmp(arch, "gemma2") || !strcmp(arch, "gemma3") || !strcmp(arch, "phi3");
}

uint32_t synth_arch_head_dim(const char *shape, uint32_t dim, uint32_t heads)
{
    return !strcmp(shape, "gemma3-1b") ? 256 : dim / heads;
}

/* the window of the synthetic local layers: short, so that a test runs past it */
#define SYNTH_LOCAL_WINDOW 32

int synth_rope_meta(gguf_writer *w, const char *arch, uint32_t ctx, const pl_synth_params *p)
{
    const char *t = p->rope_scaling;
    if (!t || !*t) return 0;
    char key[96];
#define K(name) (snprintf(key, sizeof key, "%s." name, arch), key)
    const bool longrope = !strcmp(t, "longrope");
    if (strcmp(t, "linear") && strcmp(t, "yarn") && !longrope)
        return err_set(PL_EINVAL, "--rope-scaling '%s': expected linear, yarn or longrope", t);
    if (longrope && strcmp(arch, "phi3"))
        return err_set(PL_EINVAL, "--rope-scaling longrope is written for --arch phi3 only");
    const uint32_t orig = p->rope_orig_ctx ? p->rope_orig_ctx : ctx / 4;
    if (orig == 0 || orig > ctx)
        return err_set(PL_EINVAL, "--rope-orig-ctx %u must be in 1..%u (the context)", orig, ctx);
    int rc = gguf_writer_set_u32(w, K("rope.scaling.original_context_length"), orig);
    if (longrope) { /* as the phi3 converter: no type, the attention factor of the ratio */
        const double scale = (double)ctx / orig;
        const float af = scale > 1.0 ? (float)sqrt(1 + log(scale) / log((double)orig)) : 1.0f;
        if (!rc) rc = gguf_writer_set_f32(w, K("rope.scaling.attn_factor"), af);
        return rc;
    }
    const float factor = p->rope_factor > 0 ? p->rope_factor : 4.0f;
    if (!(factor >= 1.0f) || factor > 1024.0f) return err_set(PL_EINVAL, "--rope-factor %g out of range 1..1024", factor);
    if (!rc) rc = gguf_writer_set_str(w, K("rope.scaling.type"), t);
    if (!rc) rc = gguf_writer_set_f32(w, K("rope.scaling.factor"), factor);
#undef K
    return rc;
}

int synth_arch_meta(gguf_writer *w, const char *arch, const synth_arch_shape *s, uint32_t n_vocab,
                    const pl_synth_params *p)
{
    char key[96];
#define K(name) (snprintf(key, sizeof key, "%s." name, arch), key)
    const bool g2 = !strcmp(arch, "gemma2"), g3 = !strcmp(arch, "gemma3");
    int rc = gguf_writer_set_u32(w, K("context_length"), s->ctx);
    if (!rc) rc = gguf_writer_set_u32(w, K("embedding_length"), s->dim);
    if (!rc) rc = gguf_writer_set_u32(w, K("block_count"), s->layers);
    if (!rc) rc = gguf_writer_set_u32(w, K("feed_forward_length"), s->ffn);
    if (!rc) rc = gguf_writer_set_u32(w, K("attention.head_count"), s->heads);
    if (!rc) rc = gguf_writer_set_u32(w, K("attention.head_count_kv"), s->kv_heads);
    if (!rc) rc = gguf_writer_set_u32(w, K("attention.key_length"), s->head_dim);
    if (!rc) rc = gguf_writer_set_u32(w, K("attention.value_length"), s->head_dim);
    if (!rc) rc = gguf_writer_set_u32(w, K("rope.dimension_count"), s->head_dim);
    if (!rc) rc = gguf_writer_set_f32(w, K("rope.freq_base"), g3 ? 1000000.0f : s->rope_base);
    if (!rc) rc = gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f);
    if (!rc) rc = gguf_writer_set_u32(w, K("vocab_size"), n_vocab);
    if (!rc && (g2 || g3)) {
        rc = gguf_writer_set_u32(w, K("attention.sliding_window"), p->sliding_window ? p->sliding_window : SYNTH_LOCAL_WINDOW);
        if (!rc && g3) rc = gguf_writer_set_f32(w, K("rope.freq_base_swa"), 10000.0f);
        /* fewer layers than gemma3's period of 6: every other layer global, so both kinds run */
        if (!rc && g3 && s->layers < 6) rc = gguf_writer_set_u32(w, K("attention.sliding_window_pattern"), 2);
        if (!rc && g2) rc = gguf_writer_set_f32(w, K("attn_logit_softcapping"), 50.0f);
        if (!rc && g2) rc = gguf_writer_set_f32(w, K("final_logit_softcapping"), 30.0f);
    }
    if (!rc && !strcmp(arch, "phi3") && p->sliding_window) /* written, and ignored as llama.cpp ignores it */
        rc = gguf_writer_set_u32(w, K("attention.sliding_window"), p->sliding_window);
#undef K
    if (!rc) rc = synth_rope_meta(w, arch, s->ctx, p);
    return rc;
}

void synth_arch_plan(const char *arch, const synth_arch_shape *s, uint32_t n_vocab, const pl_synth_params *p,
                     synth_add_fn add, void *ctx)
{
    const bool phi3 = !strcmp(arch, "phi3"), post = !strcmp(arch, "gemma2") || !strcmp(arch, "gemma3");
    const bool qk_norm = !strcmp(arch, "gemma3");
    const uint64_t hd = s->head_dim, q = hd * s->heads, kv = hd * s->kv_heads;
    const float sd = 1.0f / sqrtf((float)s->dim), sq = 1.0f / sqrtf((float)q), sf = 1.0f / sqrtf((float)s->ffn);
    /* gemma scales the embeddings by sqrt(dim): rows of std 1/sqrt(dim) keep the stream at 1 */
    add(ctx, "token_embd.weight", s->dim, n_vocab, phi3 ? 1.0f : 0.1f * sd, 0); /* gemma: also the output */
    if (phi3 && p->rope_scaling && !strcmp(p->rope_scaling, "longrope")) {
        add(ctx, "rope_factors_long.weight", hd / 2, 1, 0.866f, 2.5f);  /* uniform in [1, 4] */
        add(ctx, "rope_factors_short.weight", hd / 2, 1, 0.144f, 1.25f); /* uniform in [1, 1.5] */
    }
    for (uint32_t l = 0; l < s->layers; l++) {
        char nm[64];
#define T(suffix, ne0, ne1, std, mean) (snprintf(nm, sizeof nm, "blk.%u." suffix, l), add(ctx, nm, ne0, ne1, std, mean))
        T("attn_norm.weight", s->dim, 1, 0.2f, 1.0f);
        if (phi3) {
            T("attn_qkv.weight", s->dim, q + 2 * kv, sd, 0);
        } else {
            T("attn_q.weight", s->dim, q, sd, 0);
            T("attn_k.weight", s->dim, kv, sd, 0);
            T("attn_v.weight", s->dim, kv, sd, 0);
        }
        if (qk_norm) {
            T("attn_q_norm.weight", hd, 1, 0.2f, 1.0f);
            T("attn_k_norm.weight", hd, 1, 0.2f, 1.0f);
        }
        T("attn_output.weight", q, s->dim, sq, 0);
        if (post) T("post_attention_norm.weight", s->dim, 1, 0.2f, 1.0f);
        T("ffn_norm.weight", s->dim, 1, 0.2f, 1.0f);
        if (phi3) {
            T("ffn_up.weight", s->dim, 2 * (uint64_t)s->ffn, sd, 0);
        } else {
            T("ffn_gate.weight", s->dim, s->ffn, sd, 0);
            T("ffn_up.weight", s->dim, s->ffn, sd, 0);
        }
        T("ffn_down.weight", s->ffn, s->dim, sf, 0);
        if (post) T("post_ffw_norm.weight", s->dim, 1, 0.2f, 1.0f);
#undef T
    }
    add(ctx, "output_norm.weight", s->dim, 1, 0.2f, 1.0f);
    if (phi3) add(ctx, "output.weight", s->dim, n_vocab, 2.0f * sd, 0);
}
