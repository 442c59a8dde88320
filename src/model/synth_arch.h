/* synth_arch.h - what synthetic gemma, gemma2, gemma3 and phi3 files add
 * to synth.c's llama files (metadata and tensors in llama.cpp's names),
 * and the RoPE scaling keys any synthetic file may carry.
 *
 *   gemma   no output.weight (tied), no other change of tensors
 *   gemma2  + post_attention_norm, post_ffw_norm; window 32 over the local
 *           layers (pattern 2) unless --sliding-window, soft-capping 50/30
 *   gemma3  + attn_q_norm, attn_k_norm; window 32 (pattern 6; 2 below 6 layers), local
 *           RoPE base 10000 beside the global base (1e6)
 *   phi3    attn_qkv and ffn_up fused; LongRoPE (--rope-scaling longrope):
 *           rope_factors_long/short, rope.scaling.attn_factor and
 *           original_context_length as the phi3 converter writes them
 * Norm weights are drawn around 1 (gemma files store 1 + w).
 */
#ifndef PL_MODEL_SYNTH_ARCH_H
#define PL_MODEL_SYNTH_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "pagellm.h"

typedef struct {
    const char *name;
    uint32_t dim, layers, heads, kv_heads, head_dim, ffn, vocab, ctx;
    float rope_base;
} synth_arch_shape;

/* One tensor of the plan: dims [ne0, ne1] (ne1 1: a vector), values
 * uniform with this std around mean (std 0: all `mean`). */
typedef void (*synth_add_fn)(void *ctx, const char *name, uint64_t ne0, uint64_t ne1, float std, float mean);

/* True for the architectures this file writes. */
bool synth_arch_handles(const char *arch);
/* The head dim of a named shape under arch (gemma3-1b: 256), else dim / heads. */
uint32_t synth_arch_head_dim(const char *shape, uint32_t dim, uint32_t heads);
/* Every <arch>.* key (general.* and tokenizer.* are synth.c's). */
int synth_arch_meta(gguf_writer *w, const char *arch, const synth_arch_shape *s, uint32_t n_vocab,
                    const pl_synth_params *p);
/* The tensors, in llama.cpp's names. */
void synth_arch_plan(const char *arch, const synth_arch_shape *s, uint32_t n_vocab, const pl_synth_params *p,
                     synth_add_fn add, void *ctx);
/* rope.scaling.* keys of p (any arch); checks the values. */
int synth_rope_meta(gguf_writer *w, const char *arch, uint32_t ctx, const pl_synth_params *p);

#endif
