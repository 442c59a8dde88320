/* synth_deepseek2.c - synthetic deepseek2 files; see synth_deepseek2.h. */
#include "model/synth_deepseek2.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "model/synth_arch.h"

typedef struct {
    const char *name;
    uint32_t dim, layers, heads, ffn, vocab, ctx;
    uint32_t q_lora, kv_lora, nope, rope, v_head;
    uint32_t n_expert, n_used, ffn_exp, n_shared, n_dense;
    uint32_t gating; /* 1 softmax, 2 sigmoid */
    bool norm, bias;
    float scale;
    uint32_t n_group, n_group_used;
} ds2_shape;

static const ds2_shape ds2_shapes[] = {
    {"tiny", 256, 4, 8, 512, 512, 2048, 64, 64, 32, 32, 32, 8, 2, 128, 1, 1, 2, true, true, 2.5f, 4, 2},
    {"tiny-v2", 256, 4, 8, 512, 512, 2048, 0, 64, 32, 32, 32, 8, 2, 128, 2, 1, 1, false, false, 1.0f, 0, 0},
    /* V2-Lite's attention (16 heads, kv_lora_rank 512, rope 64) at dim 1024 over 4 layers and 8 small
     * experts: the latent attention's speed at depth without 16B weights; vocab 2048 holds the ids
     * llama.cpp's peer-bench fills its depth and prompt with (100..1099) */
    {"mla-bench", 1024, 4, 16, 2048, 2048, 8192, 0, 512, 128, 64, 128, 8, 2, 512, 1, 1, 1, false, false, 1.0f, 0, 0},
    {"deepseek2-lite", 2048, 27, 16, 10944, 102400, 4096, 0, 512, 128, 64, 128, 64, 6, 1408, 2, 1, 1, false, false,
     1.0f, 0, 0},
};

static const ds2_shape *find(const char *name)
{
    for (size_t i = 0; i < sizeof ds2_shapes / sizeof ds2_shapes[0]; i++)
        if (strcmp(ds2_shapes[i].name, name) == 0) return &ds2_shapes[i];
    return NULL;
}

bool synth_deepseek2_shape(const char *shape) { return find(shape) != NULL; }

uint32_t synth_deepseek2_row_max(const char *shape)
{
    const ds2_shape *s = find(shape);
    uint32_t m = s->ffn > s->dim ? s->ffn : s->dim;
    const uint32_t o = s->heads * (s->nope + s->rope);
    return m > o ? m : o;
}

uint32_t synth_deepseek2_n_tensors(const char *shape) { return find(shape)->layers * 24 + 5; }

uint32_t synth_deepseek2_vocab(const char *shape) { return find(shape)->vocab; }

int synth_deepseek2_check_type(const char *shape, uint32_t blck, const char *type_name)
{
    const ds2_shape *s = find(shape);
    const uint32_t rows[] = {s->dim, s->ffn, s->ffn_exp, s->ffn_exp * s->n_shared, s->nope, s->kv_lora,
                             s->heads * s->v_head, s->q_lora ? s->q_lora : s->dim};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i] % blck)
            return err_set(PL_EINVAL, "--type %s: deepseek2 shape %s has rows of %u, not a multiple of %u",
                           type_name, s->name, rows[i], blck);
    return 0;
}

int synth_deepseek2_meta(gguf_writer *w, const char *shape, uint32_t n_vocab, const pl_synth_params *p)
{
    const ds2_shape *s = find(shape);
    int rc = 0;
#define U(k, v) if (!rc) rc = gguf_writer_set_u32(w, "deepseek2." k, v)
#define F(k, v) if (!rc) rc = gguf_writer_set_f32(w, "deepseek2." k, v)
    U("context_length", s->ctx);
    U("embedding_length", s->dim);
    U("block_count", s->layers);
    U("feed_forward_length", s->ffn);
    U("attention.head_count", s->heads);
    U("attention.head_count_kv", p->legacy_kv_b ? s->heads : 1);
    F("rope.freq_base", 10000.0f);
    F("attention.layer_norm_rms_epsilon", 1e-6f);
    U("vocab_size", n_vocab);
    U("expert_used_count", s->n_used);
    U("expert_count", s->n_expert);
    U("leading_dense_block_count", s->n_dense);
    /* llama.cpp reads no q_lora_rank for its 27-layer "lite" shape */
    if (s->q_lora || s->layers != 27) U("attention.q_lora_rank", s->q_lora);
    U("attention.kv_lora_rank", s->kv_lora);
    if (p->legacy_kv_b) { /* the per-head MHA dims; no *_mla keys */
        U("attention.key_length", s->nope + s->rope);
        U("attention.value_length", s->v_head);
    } else {
        U("attention.key_length", s->kv_lora + s->rope);
        U("attention.value_length", s->kv_lora);
        U("attention.key_length_mla", s->nope + s->rope);
        U("attention.value_length_mla", s->v_head);
    }
    U("expert_feed_forward_length", s->ffn_exp);
    U("expert_shared_count", s->n_shared);
    F("expert_weights_scale", s->scale);
    if (!rc) rc = gguf_writer_set_bool(w, "deepseek2.expert_weights_norm", s->norm);
    U("expert_gating_func", s->gating);
    if (s->n_group) {
        U("expert_group_count", s->n_group);
        U("expert_group_used_count", s->n_group_used);
    }
    U("rope.dimension_count", s->rope);
#undef U
    if (!rc) rc = synth_rope_meta(w, "deepseek2", s->ctx, p);
    if (!rc && p->rope_scaling && !strcmp(p->rope_scaling, "yarn"))
        F("rope.scaling.yarn_log_multiplier", 0.1f * 0.707f);
#undef F
    return rc;
}

void synth_deepseek2_plan(const char *shape, uint32_t n_vocab, bool legacy_kv_b, synth_ds2_add_fn add, void *ctx)
{
    const ds2_shape *s = find(shape);
    const float sd = 1.0f / sqrtf((float)s->dim);
    add(ctx, "token_embd.weight", s->dim, n_vocab, 1, 1.0f, false);
    char n[96];
    for (uint32_t l = 0; l < s->layers; l++) {
#define T(suffix, a, b, c, std, f32) (snprintf(n, sizeof n, "blk.%u." suffix, l), add(ctx, n, a, b, c, std, f32))
        const uint32_t qd = s->heads * (s->nope + s->rope);
        T("attn_norm.weight", s->dim, 1, 1, 0, true);
        if (s->q_lora) {
            T("attn_q_a.weight", s->dim, s->q_lora, 1, sd, false);
            T("attn_q_a_norm.weight", s->q_lora, 1, 1, 0, true);
            T("attn_q_b.weight", s->q_lora, qd, 1, 1.0f / sqrtf((float)s->q_lora), false);
        } else {
            T("attn_q.weight", s->dim, qd, 1, sd, false);
        }
        T("attn_kv_a_mqa.weight", s->dim, s->kv_lora + s->rope, 1, sd, false);
        T("attn_kv_a_norm.weight", s->kv_lora, 1, 1, 0, true);
        if (legacy_kv_b) { /* per head: nope rows of W_UK then v_head rows of W_UV, each kv_lora long */
            T("attn_kv_b.weight", s->kv_lora, s->heads * (s->nope + s->v_head), 1, 1.0f / sqrtf((float)s->kv_lora), false);
        } else {
            T("attn_k_b.weight", s->nope, s->kv_lora, s->heads, 1.0f / sqrtf((float)s->nope), false);
            T("attn_v_b.weight", s->kv_lora, s->v_head, s->heads, 1.0f / sqrtf((float)s->kv_lora), false);
        }
        T("attn_output.weight", s->heads * s->v_head, s->dim, 1, 1.0f / sqrtf((float)(s->heads * s->v_head)), false);
        T("ffn_norm.weight", s->dim, 1, 1, 0, true);
        if (l < s->n_dense) {
            T("ffn_gate.weight", s->dim, s->ffn, 1, sd, false);
            T("ffn_up.weight", s->dim, s->ffn, 1, sd, false);
            T("ffn_down.weight", s->ffn, s->dim, 1, 1.0f / sqrtf((float)s->ffn), false);
            continue;
        }
        const uint32_t fs = s->ffn_exp * s->n_shared;
        T("ffn_gate_inp.weight", s->dim, s->n_expert, 1, sd, true);
        if (s->bias) T("exp_probs_b.bias", s->n_expert, 1, 1, 0.05f, true);
        T("ffn_gate_exps.weight", s->dim, s->ffn_exp, s->n_expert, sd, false);
        T("ffn_up_exps.weight", s->dim, s->ffn_exp, s->n_expert, sd, false);
        T("ffn_down_exps.weight", s->ffn_exp, s->dim, s->n_expert, 1.0f / sqrtf((float)s->ffn_exp), false);
        T("ffn_gate_shexp.weight", s->dim, fs, 1, sd, false);
        T("ffn_up_shexp.weight", s->dim, fs, 1, sd, false);
        T("ffn_down_shexp.weight", fs, s->dim, 1, 1.0f / sqrtf((float)fs), false);
#undef T
    }
    add(ctx, "output_norm.weight", s->dim, 1, 1, 0, true);
    add(ctx, "output.weight", s->dim, n_vocab, 1, 2.0f * sd, false);
}
