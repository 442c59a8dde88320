/* config.h - model hyper-parameters read from GGUF metadata.
 *
 * Supported architectures and what differs between them:
 *   llama   (Llama 2/3, TinyLlama, SmolLM, stories260K)  rope normal order
 *   mistral (llama + optional sliding window)            rope normal order
 *   qwen2   (q/k/v biases)                               rope NeoX order
 *   qwen3   (per-head RMSNorm on q and k)                rope NeoX order
 * Keys are "<arch>.<name>", e.g. "llama.block_count". Every value is checked
 * (non-zero, divisibility, bounds) and an error names the key.
 */
#ifndef PL_MODEL_CONFIG_H
#define PL_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef enum { ARCH_LLAMA, ARCH_MISTRAL, ARCH_QWEN2, ARCH_QWEN3 } model_arch;

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
    uint32_t pooling;    /* <arch>.pooling_type as llama.cpp numbers it: MODEL_POOL_* (absent: mean) */
} model_config;

/* Embedding pooling (llama.cpp's enum values; 0 "none" and 4 "rank" are not served). */
enum { MODEL_POOL_NONE = 0, MODEL_POOL_MEAN = 1, MODEL_POOL_CLS = 2, MODEL_POOL_LAST = 3, MODEL_POOL_RANK = 4 };

/* Reads cfg from f; n_vocab comes from <arch>.vocab_size or the tokenizer. */
int model_config_read(const gguf_file *f, model_config *cfg);

#endif
