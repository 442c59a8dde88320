/* weights.h - the model's tensors, bound by name and checked for shape.
 *
 * Weights stay in their stored type; nothing is dequantized whole. A 2-D
 * weight W of GGUF dims [ne0 = in, ne1 = out] holds `out` rows of `in`
 * elements, i.e. y = W x multiplies each row with x. `data` points at the
 * tensor in the mapped GGUF file, except for the matmul matrices of other
 * quantized types than Q8_0/Q4_0 (K-quants) once model_weights_repack
 * ran (F32/BF16 matrices stay in the file): those are copied, as
 * they are, into one anonymous region on huge pages and `data` points at
 * the copy. The Q8_0, Q4_0 and (where kern_pack_supports it) F16, IQ4_XS,
 * Q3_K and Q4_K matrices the matmuls read are repacked into the same region in kern_pack's
 * layout (`packed`); their `data` stays on the file. The file pages of both are dropped from memory: a read of the
 * file's copy faults the page back in, which the embedding lookup of
 * token_embd relies on when the output matrix is tied to it (the output's
 * copy and token_embd's file rows are then two copies, the second read
 * only a row a token).
 */
#ifndef PL_MODEL_WEIGHTS_H
#define PL_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/config.h"

typedef struct {
    const void *data; /* NULL if the optional tensor is absent */
    const void *packed; /* kern_pack layout of a repacked matrix, else NULL */
    uint32_t type;    /* ggml type id */
    uint64_t n_in;    /* ne0: row length */
    uint64_t n_out;   /* ne1: rows (1 for vectors) */
} weight;

typedef struct {
    weight attn_norm;         /* [dim] */
    weight wq, wk, wv, wo;    /* [dim -> n_heads*hd], [dim -> kv], [dim -> kv], [n_heads*hd -> dim];
                                 phi3: wq, wk, wv are row ranges of its fused attn_qkv */
    weight bq, bk, bv;        /* qwen2 biases (optional) */
    weight q_norm, k_norm;    /* qwen3 per-head norms [hd] (optional) */
    weight post_attn_norm;    /* gemma2/3: [dim] on the attention output (optional) */
    weight ffn_norm;          /* [dim] */
    weight post_ffn_norm;     /* gemma2/3: [dim] on the FFN output (optional) */
    weight w_gate, w_up;      /* [dim -> ffn]; phi3: the two halves of its fused ffn_up */
    weight w_down;            /* [ffn -> dim] */
    struct moe_layer *moe;    /* mixture-of-experts FFN (model/moe.h) in place of w_gate/w_up/w_down, or NULL */
    struct mla_layer *mla;    /* latent attention (model/mla.h) in place of wq/wk/wv (wo stays), or NULL */
} layer_weights;

typedef struct {
    weight tok_embd;          /* [dim, n_vocab] */
    weight output_norm;       /* [dim] */
    weight output;            /* [dim -> n_vocab]; = tok_embd when tied */
    weight rope_freqs;        /* [rope_dim/2] optional */
    weight rope_long, rope_short; /* phi3 LongRoPE factors [rope_dim/2] (optional) */
    layer_weights *layers;    /* [n_layers] */
    uint32_t n_layers;        /* of layers */
    uint32_t n_expert;        /* experts per MoE layer (config's moe.n_expert), 0 = dense */
    uint32_t n_heads;         /* query heads (the per-head matrices of MLA layers) */
    void *pack_mem;           /* the packed or copied matmul matrices (anonymous mapping), or NULL */
    size_t pack_len;          /* its length in bytes */
} model_weights;

/* Binds every tensor the config needs; errors name the tensor and the
 * expected and found shape or type. */
int model_weights_bind(const gguf_file *f, const model_config *c, model_weights *w);
/* One tensor of dims [n_in] (n_out 0: an f32 vector) or [n_in, n_out];
 * optional: absent leaves w zeroed. Errors as model_weights_bind's. */
int model_weight_bind(const gguf_file *f, const char *name, uint64_t n_in, uint64_t n_out, bool optional, weight *w);
/* Repacks every matmul weight kern_pack supports (Q8_0, Q4_0, F16, IQ4_XS, Q3_K) and copies
 * the other quantized matmul weights into one anonymous region, unless the
 * environment sets PAGELLM_NO_REPACK=1 or the region cannot be had (then
 * the weights stay as they are: not an error). release_src: the tensors
 * sit in a read-only file mapping whose pages may be dropped (madvise
 * MADV_DONTNEED) once moved, so that peak memory stays about one copy of
 * the model. The matrices move on one thread per CPU (at most 8): the
 * kernel zeroes each new page on its first write, which took most of a
 * load (TinyLlama f16 to its first token: 1.9 s on one thread, 0.8 on 2).
 * Returns the number of matrices packed. */
int model_weights_repack(model_weights *w, uint32_t n_layers, bool release_src);
/* One prompt token's matmuls in f32 multiply-adds (a quantized matrix's
 * count divided by 4: its int8 dots do four a lane), n_used of a MoE
 * layer's n_expert experts, the output matrix left out (a prompt chunk
 * computes logits for its last token only): the unit of model_key_cost.
 * 0 without memory. */
double model_weights_token_cost(model_weights *w, uint32_t n_layers, uint32_t n_expert, uint32_t n_used);
void model_weights_free(model_weights *w);

#endif
