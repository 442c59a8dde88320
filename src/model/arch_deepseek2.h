/* arch_deepseek2.h - the deepseek2 architecture's settings (DeepSeek-V2,
 * V2-Lite, V3-style files as current llama.cpp writes them), read from
 * GGUF metadata into model_config.mla and model_config.moe.
 *
 * Attention is multi-head latent attention (model/mla.h); the FFN of the
 * first leading_dense_block_count layers is dense, the others a mixture of
 * experts with shared experts (model/moe.h). Keys ("deepseek2." prefix):
 *   attention.q_lora_rank      q LoRA rank, 0 = plain attn_q (required, as
 *                              llama.cpp, except for its "lite" shapes:
 *                              26 or 27 layers, or 48 with vocab 128256)
 *   attention.kv_lora_rank     latent width, > 0
 *   attention.key_length_mla   per-head q/k dims (nope + rope)
 *   attention.value_length_mla per-head v dims
 *   attention.key_length       if present: kv_lora_rank + rope dims (the
 *                              cached row), head_count_kv if present: 1
 *   rope.dimension_count       RoPE dims of q_pe and k_pe
 *   expert_count, expert_used_count, expert_feed_forward_length,
 *   expert_shared_count, leading_dense_block_count (default 0),
 *   expert_weights_scale (default none), expert_weights_norm (default
 *   false), expert_gating_func (1 softmax, 2 sigmoid; absent: softmax),
 *   expert_group_count / expert_group_used_count (default none),
 *   rope.scaling.yarn_log_multiplier (the converter's 0.1 x mscale_all_dim).
 * Files without the _mla keys are the legacy ones with an unsplit
 * attn_kv_b: refused with an error naming the key; so are multi-token
 * prediction layers (nextn_predict_layers > 0) and attention temperature
 * tuning (attention.temperature_scale), which llama.cpp reads.
 */
#ifndef PL_MODEL_ARCH_DEEPSEEK2_H
#define PL_MODEL_ARCH_DEEPSEEK2_H

#include "gguf/gguf.h"
#include "model/config.h"

/* Fills c->mla and c->moe (and the latent head_dim / n_kv_heads) for a
 * deepseek2 file; nothing for the other architectures. The generic keys
 * are already read. Errors name the key. */
int arch_deepseek2_config(const gguf_file *f, model_config *c);

#endif
