/* quant_mix.h - which type each tensor of a model gets under a quantization
 * preset (q4_k_m, q3_k_s, iq4_xs...): llama.cpp's llama_tensor_get_type
 * rules, so that `pagellm quantize M q5_k_m` and llama.cpp's quantizer give
 * the same per-tensor mix for the same input.
 *
 * The rules see only names, shapes, input types and a few hyper-parameters
 * (architecture, layers, heads, KV heads, experts); they read no weights.
 * Tensors are visited in llama.cpp's order (by layer, then by name), because
 * its per-layer bumps count attn_v / ffn_down tensors in that order.
 */
#ifndef PL_MODEL_QUANT_MIX_H
#define PL_MODEL_QUANT_MIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name; /* as the user types it: "q4_k_m" */
    uint32_t ftype;   /* llama.cpp's llama_ftype, stored in general.file_type */
    uint32_t type;    /* the mix's default tensor type (dtype id) */
} quant_preset;

/* The preset called name (case-insensitive), or NULL. */
const quant_preset *quant_preset_find(const char *name);

/* NULL-terminated list of the preset names, in a stable order. */
const char *const *quant_preset_names(void);

/* What the rules know of the model (0 where the file does not say). */
typedef struct {
    const char *arch;   /* general.architecture ("" if absent) */
    uint32_t n_layer;   /* <arch>.block_count */
    uint32_t n_head;    /* <arch>.attention.head_count */
    uint32_t n_head_kv; /* <arch>.attention.head_count_kv (0: = n_head) */
    uint32_t n_expert;  /* <arch>.expert_count */
    bool has_imatrix;   /* an importance matrix is given (a few rules change) */
} quant_model;

typedef struct {
    const char *name;   /* NUL-terminated tensor name */
    uint32_t type;      /* its type in the input */
    uint32_t n_dims;
    uint64_t ne[4];     /* ne[0] = row length */
} quant_mix_tensor;

/* out[i] = the type tensor ts[i] gets under preset p: its input type for
 * tensors that are not quantized (norms, 1-D, embeddings of positions...),
 * else the preset's choice after llama.cpp's fallbacks for rows its block
 * does not divide. Fails (error text names the tensor) only for an MoE
 * tensor whose layer cannot be read from its name. */
int quant_mix_types(const quant_preset *p, const quant_model *m, const quant_mix_tensor *ts, size_t n,
                    uint32_t *out);

#endif
