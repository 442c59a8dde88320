/* config.h - model hyper-parameters read from GGUF metadata.
 *
 * Supported architectures and what differs between them:
 *   llama   (Llama 2/3, TinyLlama, SmolLM, stories260K)  rope normal order
 *   mistral (llama + optional sliding window)            rope normal order
 *   qwen2   (q/k/v biases)                               rope NeoX order
 *   qwen3   (per-head RMSNorm on q and k)                rope NeoX order
 *   qwen2moe, qwen3moe: qwen2 / qwen3 attention with a mixture-of-experts
 *   FFN; llama with <arch>.expert_count > 0 is Mixtral (model/moe.h)
 *   gemma, gemma2, gemma3, phi3: see arch_gemma.h        rope NeoX order
 *   deepseek2 (multi-head latent attention, MoE): arch_deepseek2.h, rope normal order
 * Keys are "<arch>.<name>", e.g. "llama.block_count". Every value is checked
 * (non-zero, divisibility, bounds) and an error names the key.
 */
#ifndef PL_MODEL_CONFIG_H
#define PL_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/rope_scaling.h"

typedef enum { ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN2, ARCH_QWEN3,
    ARCH_QWEN2MOE, ARCH_QWEN3MOE, ARCH_GEMMA, ARCH_GEMMA2, ARCH_GEMMA3, ARCH_PHI3,
    ARCH_DEEPSEEK2 } model_arch;

/* Mixture of experts (n_expert == 0: a dense FFN); model/moe.h. */
typedef struct {
    uint32_t n_expert;     /* <arch>.expert_count */
    uint32_t n_used;       /* <arch>.expert_used_count: experts per token (top-k) */
    uint32_t ffn_exp;      /* rows of one expert's gate/up */
    uint32_t ffn_shexp;    /* rows of the shared expert (qwen2moe), 0 = none */
    bool norm_topk;        /* the k chosen probabilities renormalised to sum 1 */
    /* deepseek2 (zero for the other families) */
    uint8_t gating;        /* MOE_GATING_SOFTMAX (0) or MOE_GATING_SIGMOID: probabilities of the logits */
    bool shared_ungated;   /* the shared expert is added as it is (no sigmoid gate) */
    float w_scale;         /* the chosen weights x this (0 or 1: none) */
    uint32_t n_group;      /* expert groups (<= 1: none); only n_group_used groups are chosen from */
    uint32_t n_group_used;
    uint32_t n_dense_lead; /* layers 0..n_dense_lead-1 have a dense FFN */
} moe_config;

enum { MOE_GATING_SOFTMAX = 0, MOE_GATING_SIGMOID = 1 };

/* Multi-head latent attention (deepseek2); all zero for other families.
 * The model's head_dim is then the latent KV row, kv_lora_rank + rope_dim,
 * and n_kv_heads 1: what the cache holds per token and layer. */
typedef struct {
    uint32_t q_lora_rank;  /* 0: plain q projection */
    uint32_t kv_lora_rank; /* latent width (c_kv) */
    uint32_t qk_nope;      /* per-head query/key dims without RoPE */
    uint32_t v_head;       /* per-head value dims after W_UV */
    bool legacy_kv_b;      /* the file has one attn_kv_b a layer (older converters), split at load */
    float kq_scale;        /* the attention scale: mscale^2 / sqrt(qk_nope + rope_dim) */
    float rope_mscale;     /* cos/sin multiplier before YaRN's own (llama.cpp's attn_factor); 0: default */
} mla_config;

typedef struct {
    model_arch arch;
    char arch_name[32];
    uint32_t n_layers;
    uint32_t dim;        /* embedding length */
    uint32_t n_heads, n_kv_heads;
    uint32_t head_dim;   /* key/value length per head */
    uint32_t ffn_dim;
    uint32_t n_vocab;
    uint32_t ctx_train;
    uint32_t rope_dim;   /* rotated dims per head (<= head_dim) */
    float rope_base, rope_scale; /* theta = pos * rope_scale * base^(-2i/rope_dim) */
    bool rope_neox;
    float norm_eps;
    uint32_t sliding_window; /* 0 = none; a window on every layer, which the runtime may
                                apply by dropping blocks (mistral) */
    rope_scaling rope_scaling; /* rope.scaling.*: type, factor, attn_factor, original ctx */
    /* gemma family (arch_gemma.c); zero for the others */
    float embd_scale;        /* embeddings x this (sqrtf(dim)), 0 = none */
    float q_scale;           /* q x this after RoPE, attention scale 1 (0: scale 1/sqrt(hd)
                                in the attention) */
    float attn_softcap;      /* attention logit soft-capping, 0 = none */
    float final_softcap;     /* output logit soft-capping, 0 = none */
    bool gelu;               /* GeGLU (tanh gelu, ggml's f16 table) instead of SwiGLU */
    bool post_norms;         /* post_attention_norm and post_ffw_norm on each layer */
    uint32_t local_window;   /* local layers' sliding window (attention mask), 0 = none */
    uint32_t local_pattern;  /* layer l is local iff l % pattern < pattern - 1 (0: all) */
    float rope_base_local, rope_scale_local; /* local layers' RoPE */
    moe_config moe;
    mla_config mla;          /* deepseek2 */
    uint32_t pooling;    /* <arch>.pooling_type as llama.cpp numbers it: MODEL_POOL_* (absent: mean) */
} model_config;

/* True if layer l attends over cfg->local_window only (gemma2/3). */
bool model_config_layer_local(const model_config *c, uint32_t l);

/* Embedding pooling (llama.cpp's enum values; 0 "none" and 4 "rank" are not served). */
enum { MODEL_POOL_NONE = 0, MODEL_POOL_MEAN = 1, MODEL_POOL_CLS = 2, MODEL_POOL_LAST = 3, MODEL_POOL_RANK = 4 };

/* Reads cfg from f; n_vocab comes from <arch>.vocab_size or the tokenizer. */
int model_config_read(const gguf_file *f, model_config *cfg);

/* The positions RoPE was trained or scaled for: the trained context, or
 * the original context times a linear / YaRN factor when that is more.
 * Past it RoPE extrapolates. */
uint32_t model_config_ctx_rope(const model_config *c);

/* The caller's RoPE scaling in place of the file's (rope_override.c).
 * Zero fields keep the file's (or llama.cpp's default). */
typedef struct {
    int type;           /* -1 keeps the file's, else a rope_scaling_type up to YARN */
    float factor, base; /* context factor, global layers' frequency base */
    uint32_t orig;      /* YaRN's original context */
    bool ext_set;       /* ext_factor given (0 turns the ramp off) */
    float ext_factor;   /* YaRN's ramp mix, 0..1 */
    float yarn_attn;    /* cos/sin multiplier when no ramp is mixed in */
    float beta_fast, beta_slow; /* the ramp's corners (beta_fast > beta_slow) */
} rope_override;

/* True when o asks for nothing (every field keeps the file's). */
bool rope_override_empty(const rope_override *o);

/* Applies o to c; path names the file in errors. */
int model_config_rope_override(model_config *c, const char *path, const rope_override *o);

#endif
