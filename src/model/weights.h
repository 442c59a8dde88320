/* weights.h - the model's tensors, bound by name and checked for shape.
 *
 * Weights stay in the mapped GGUF file in their stored type; nothing is
 * dequantized whole. A 2-D weight W of GGUF dims [ne0 = in, ne1 = out] holds
 * `out` rows of `in` elements, i.e. y = W x multiplies each row with x.
 */
#ifndef PL_MODEL_WEIGHTS_H
#define PL_MODEL_WEIGHTS_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "model/config.h"

typedef struct {
    const void *data; /* NULL if the optional tensor is absent */
    uint32_t type;    /* ggml type id */
    uint64_t n_in;    /* ne0: row length */
    uint64_t n_out;   /* ne1: rows (1 for vectors) */
} weight;

typedef struct {
    weight attn_norm;         /* [dim] */
    weight wq, wk, wv, wo;    /* [dim -> n_heads*hd], [dim -> kv], [dim -> kv], [n_heads*hd -> dim] */
    weight bq, bk, bv;        /* qwen2 biases (optional) */
    weight q_norm, k_norm;    /* qwen3 per-head norms [hd] (optional) */
    weight ffn_norm;          /* [dim] */
    weight w_gate, w_up;      /* [dim -> ffn] */
    weight w_down;            /* [ffn -> dim] */
} layer_weights;

typedef struct {
    weight tok_embd;          /* [dim, n_vocab] */
    weight output_norm;       /* [dim] */
    weight output;            /* [dim -> n_vocab]; = tok_embd when tied */
    weight rope_freqs;        /* [rope_dim/2] optional */
    layer_weights *layers;    /* [n_layers] */
} model_weights;

/* Binds every tensor the config needs; errors name the tensor and the
 * expected and found shape or type. */
int model_weights_bind(const gguf_file *f, const model_config *c, model_weights *w);
void model_weights_free(model_weights *w);

#endif
