/* config.h - model hyper-parameters read from GGUF metadata.
 *
 * Supported architectures and what differs between them:
 *   llama   (Llama 2/3, TinyLlama, SmolLM, stories260K)  rope normal order
 *   mistral (llama + optional sliding window)            rope normal order
 *   qwen2   (q/k/v biases)                               rope NeoX order
 *   qwen3   (per-head RMSNorm on q and k)                rope NeoX order
 *   qwen2moe, qwen3moe: qwen2 / qwen3 attention with a mixture-of-experts
 *   FFN; llama with <arch>.expert_count > 0 is Mixtral (model/moe.h)
 * Keys are "<arch>.<name>", e.g. "llama.block_count". Every value is checked
 * (non-zero, divisibility, bounds) and an error names the key.
 */
#ifndef PL_MODEL_CONFIG_H
#define PL_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef enum { ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN2, ARCH_QWEN3,
    ARCH_QWEN2MOE, ARCH_QWEN3MOE } model_arch;

/* Mixture of experts (n_expert == 0: a dense FFN); model/moe.h. */
typedef struct {
    uint32_t n_expert;     /* <arch>.expert_count */
    uint32_t n_used;       /* <arch>.expert_used_count: experts per token (top-k) */
    uint32_t ffn_exp;      /* rows of one expert's gate/up */
    uint32_t ffn_shexp;    /* rows of the shared expert (qwen2moe), 0 = none */
    bool norm_topk;        /* the k chosen probabilities renormalised to sum 1 */
} moe_config;

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
    uint32_t sliding_window; /* 0 = none */
    moe_config moe;
} model_config;

/* Reads cfg from f; n_vocab comes from <arch>.vocab_size or the tokenizer. */
int model_config_read(const gguf_file *f, model_config *cfg);

#endif
