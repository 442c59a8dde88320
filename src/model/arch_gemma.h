/* arch_gemma.h - what gemma, gemma2, gemma3 and phi3 add to the llama
 * forward pass, as llama.cpp computes them.
 *
 *   gemma   embeddings x sqrtf(dim); q x 1/sqrt(hd) after RoPE (attention
 *           scale 1); GeGLU (tanh gelu); output tied to the embeddings.
 *           RMSNorm weights are used as stored: the converter already
 *           wrote (1 + w).
 *   gemma2  + post_attention_norm and post_ffw_norm; attention logits
 *           soft-capped (attn_logit_softcapping, default 50) and final
 *           logits (final_logit_softcapping, default 30); local layers
 *           (l % sliding_window_pattern < pattern - 1, pattern default 2)
 *           attend over attention.sliding_window (default 4096) keys;
 *           q scale 1/sqrt(dim/heads) for the 46-layer (27B) shape, else
 *           1/sqrt(hd) (llama.cpp's reading of query_pre_attn_scalar).
 *   gemma3  + per-head q/k RMSNorm; local layers (pattern default 6) only
 *           when attention.sliding_window is set, with RoPE base
 *           rope.freq_base_swa (default 10000) and no RoPE scaling; final
 *           soft-capping only when the key is set; no attention capping;
 *           the 62-layer (27B) shape takes q scale 1/sqrt(dim/heads).
 *   phi3    fused attn_qkv and ffn_up (gate rows, then up rows: SwiGLU of
 *           the halves); LongRoPE factors rope_factors_long/short; q x
 *           1/sqrt(hd). Its attention.sliding_window is ignored, as
 *           llama.cpp ignores it (all layers attend over everything).
 * The local window is a mask over a full cache (the runtime's block
 * dropping stays off: cfg.sliding_window is 0 for these).
 */
#ifndef PL_MODEL_ARCH_GEMMA_H
#define PL_MODEL_ARCH_GEMMA_H

#include "gguf/gguf.h"
#include "model/config.h"

/* Fills c's gemma/phi3 fields from f (other architectures: nothing);
 * errors name the key. */
int arch_gemma_config(const gguf_file *f, model_config *c);

/* a[i] = gelu(a[i]) * b[i] with ggml's GeGLU numerics: gelu read from a
 * table of the f16 inputs (f16(gelu_tanh(x)) at f16(x)), 0 below -10, x
 * above 10. */
void gemma_geglu(float *a, const float *b, int n);

/* x[i] = cap x tanhf(x[i] x (1/cap)): final logit soft-capping. */
void gemma_softcap(float *x, size_t n, float cap);

#endif
