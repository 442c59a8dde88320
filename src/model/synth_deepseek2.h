/* synth_deepseek2.h - synthetic deepseek2 files: multi-head latent
 * attention and experts with shared experts, metadata and tensors as
 * current llama.cpp's converter writes them (arch_deepseek2.h, mla.h).
 *
 *   tiny            dim 256, 4 layers (the first dense, ffn 512), 8 heads,
 *                   q LoRA rank 64, kv_lora_rank 64, nope 32, rope 32,
 *                   v head 32; 8 experts of 128 rows, top-2, 1 shared;
 *                   DeepSeek-V3-style routing: sigmoid, exp_probs_b, 4
 *                   groups of which 2 are used, renormalised, scale 2.5
 *   tiny-v2         tiny with V2-Lite's choices: plain q, softmax routing
 *                   without bias, groups or renormalisation, 2 shared
 *   mla-bench       V2-Lite's attention at dim 1024: 4 layers (the first
 *                   dense, ffn 2048), 16 heads, kv_lora_rank 512, rope
 *                   64, 8 experts of 512 rows, top-2, 1 shared; vocab
 *                   2048 (decode speed at depth beside llama.cpp)
 *   deepseek2-lite  DeepSeek-V2-Lite: dim 2048, 27 layers (the first dense,
 *                   ffn 10944), 16 heads, plain q, kv_lora_rank 512, nope
 *                   128, rope 64, v head 128; 64 experts of 1408 rows,
 *                   top-6, 2 shared; softmax, not renormalised, scale 1
 * --legacy-kv-b writes older converters' form: attn_kv_b in place of
 * attn_k_b + attn_v_b, key_length nope + rope, value_length v head,
 * head_count_kv = heads and no key_length_mla / value_length_mla.
 * --rope-scaling yarn adds rope.scaling.yarn_log_multiplier 0.0707 (V2's
 * mscale_all_dim 0.707, times 0.1 as the converter writes it).
 */
#ifndef PL_MODEL_SYNTH_DEEPSEEK2_H
#define PL_MODEL_SYNTH_DEEPSEEK2_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "pagellm.h"

/* One tensor: dims [ne0, ne1, ne2] (ne1 = ne2 = 1: an f32 vector), values
 * uniform with this std (0: all ones); f32 keeps it f32 whatever the type. */
typedef void (*synth_ds2_add_fn)(void *ctx, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2, float std,
                                 bool f32);

/* True if shape is one of the deepseek2 shapes. */
bool synth_deepseek2_shape(const char *shape);
/* Longest row (elements) of the shape's tensors. */
uint32_t synth_deepseek2_row_max(const char *shape);
/* The shape's vocabulary size (without --vocab). */
uint32_t synth_deepseek2_vocab(const char *shape);
/* Tensors of the shape (an upper bound, for the plan's array). */
uint32_t synth_deepseek2_n_tensors(const char *shape);
/* 0 if every quantized row of the shape is a multiple of blck elements. */
int synth_deepseek2_check_type(const char *shape, uint32_t blck, const char *type_name);
int synth_deepseek2_meta(gguf_writer *w, const char *shape, uint32_t n_vocab, const pl_synth_params *p);
/* legacy_kv_b: one attn_kv_b [kv_lora, heads x (nope + v)] a layer instead
 * of attn_k_b and attn_v_b (pl_synth_params.legacy_kv_b). */
void synth_deepseek2_plan(const char *shape, uint32_t n_vocab, bool legacy_kv_b, synth_ds2_add_fn add, void *ctx);

#endif
