/* moe.h - mixture-of-experts feed-forward: config, tensors, router, pass.
 *
 * A MoE layer replaces the dense SwiGLU FFN with n_expert small SwiGLU
 * FFNs ("experts") and a router. For each token (as llama.cpp's
 * build_moe_ffn computes it):
 *   p = softmax(xn Wr)                       Wr = ffn_gate_inp [dim -> E]
 *   sel = the k largest p (descending; equal values: lower expert first)
 *   w_j = p[sel_j], divided by sum_j w_j when norm_topk (mixtral, qwen3moe;
 *         the sum clamped below at 2^-14 as llama.cpp does)
 *   out = sum_j w_j * expert_{sel_j}(xn)     summed in rank order
 *   qwen2moe adds the shared expert: out += sigmoid(xn . g) * shexp(xn),
 *   its sigmoid written silu(z)/z as llama.cpp does.
 * deepseek2 (moe_config's gating, bias, groups, scale; arch_deepseek2.h):
 *   p = softmax or sigmoid(xn Wr); the choice is made on p + exp_probs_b
 *   (when the file has it), among the experts of the n_group_used groups
 *   whose two best choice values sum highest (when groups are set); the
 *   weights are p of the chosen, renormalised if expert_weights_norm, then
 *   x expert_weights_scale; the shared experts are added ungated; the
 *   first n_dense_lead layers have a dense FFN instead.
 *
 * Batched: the T x k (token, expert) pairs of a pass are grouped by expert,
 * the rows of each group gathered into one block, and each selected
 * expert's gate/up and down matrices multiply its block in one kern_matmul
 * each, so every expert's weights are read once per pass, and a decode
 * step reads only the k experts it chose.
 *
 * Tensors (GGUF names as llama.cpp writes them; E = n_expert):
 *   blk.N.ffn_gate_inp.weight   [dim, E]
 *   blk.N.ffn_{gate,up}_exps    [dim, ffn_exp, E]   expert e: rows e*ffn_exp..
 *   blk.N.ffn_down_exps         [ffn_exp, dim, E]
 *   qwen2moe: blk.N.ffn_gate_inp_shexp [dim], ffn_{gate,up}_shexp [dim, ffn_shexp],
 *             ffn_down_shexp [ffn_shexp, dim]
 * Each expert is a 2-D `weight` view into its 3-D tensor, so the loader's
 * repacking treats it like any other matrix.
 */
#ifndef PL_MODEL_MOE_H
#define PL_MODEL_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

#define MOE_EXPERTS_MAX 1024 /* llama.cpp's LLAMA_MAX_EXPERTS */

typedef struct moe_layer {
    weight gate_inp;           /* router [dim -> n_expert] */
    weight *gate, *up, *down;  /* [n_expert] views: [dim -> ffn_exp], [dim -> ffn_exp], [ffn_exp -> dim] */
    weight sh_gate_inp;        /* [dim -> 1] shared expert's gate logit (qwen2moe), else absent */
    weight sh_gate, sh_up;     /* [dim -> ffn_shexp] */
    weight sh_down;            /* [ffn_shexp -> dim] */
    weight exp_probs_b;        /* [n_expert] selection bias (deepseek2, optional), else absent */
} moe_layer;

/* Reads c->moe from <arch>.expert_count, expert_used_count,
 * expert_feed_forward_length, expert_shared_feed_forward_length (c's other
 * fields already read). Errors name the key. */
int moe_config_read(const gguf_file *f, model_config *c);

/* Binds layer l's MoE tensors (c->moe.n_expert > 0); errors name the
 * tensor and the expected shape. */
int moe_layer_bind(const gguf_file *f, const model_config *c, uint32_t l, moe_layer **out);
void moe_layer_free(moe_layer *m);

/* The layer's matrices (router, experts, shared expert) into out, or only
 * their count when out is NULL. */
int moe_layer_matrices(moe_layer *m, uint32_t n_expert, weight **out);

/* Bytes a decode step of n_tokens tokens reads of the layer: the router,
 * the shared expert, and the experts expected to be chosen by at least one
 * token if each token chose k of E at random, E (1 - (1 - k/E)^n) of
 * average size (k for one token): the decode roofline's bytes. */
uint64_t moe_step_bytes(const moe_layer *m, const moe_config *c, uint32_t n_tokens);
/* Bytes of all experts of the layer together. */
uint64_t moe_layer_expert_bytes(const moe_layer *m, uint32_t n_expert);

/* One token's routing: probs (n_expert router logits) becomes softmax in
 * place; sel[0..k) the chosen experts in descending probability (ties:
 * lower index first), w[0..k) their weights (renormalised if norm). */
void moe_route(float *probs, int n_expert, int k, bool norm, int32_t *sel, float *w);

/* The general routing of c (gating, groups, scale: deepseek2) with the
 * selection bias (NULL: none); sel_scratch holds n_expert floats. For the
 * softmax families without bias or groups it is moe_route. */
void moe_route_cfg(float *probs, const moe_config *c, const float *bias, float *sel_scratch, int32_t *sel, float *w);

typedef struct moe_state moe_state;

/* Scratch for passes of up to max_tokens tokens (NULL *out for a dense model). */
int moe_state_new(moe_state **out, const model_config *c, int max_tokens);
void moe_state_free(moe_state *s);

/* out[T][dim] = the layer's MoE FFN of xn[T][dim] (out may alias xn). */
void moe_ffn(moe_state *s, const model_config *c, const moe_layer *w, const float *xn, float *out, int T,
             threadpool *tp);

#endif
