/* rope_scaling.h - RoPE context scaling as llama.cpp computes it: linear,
 * YaRN (with its attention factor) and LongRoPE (per-pair frequency factors
 * for short and long contexts, with an attention factor).
 *
 * GGUF keys (<arch>.rope.scaling.*): type (none | linear | yarn |
 * longrope; absent = linear, as llama.cpp), factor, attn_factor,
 * original_context_length. The per-pair cos/sin of position p follow
 * ggml's rope cache exactly:
 *   t_0 = p, t_{i+1} = t_i x base^(-2/rope_dim)           (floats)
 *   extrap = t_i / ff_i, interp = freq_scale x extrap
 *   theta  = interp                                      (no YaRN)
 *          = interp (1 - r_i) + extrap r_i                (YaRN, r_i the ramp
 *                                                         between the corr dims)
 *   cos = cosf(theta) x m, sin = sinf(theta) x m,  m = attn_factor
 *         (YaRN: x (1 + 0.1 ln(1/freq_scale)))
 * When m is 1 and there is no YaRN ramp, this is kern_rope_table's table,
 * bit for bit (the same float operations; tested).
 */
#ifndef PL_MODEL_ROPE_SCALING_H
#define PL_MODEL_ROPE_SCALING_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef enum { ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN, ROPE_SCALING_LONGROPE } rope_scaling_type;

/* What the metadata says (config.h holds one). */
typedef struct {
    rope_scaling_type type;
    float factor;          /* rope.scaling.factor (0: absent) */
    float attn_factor;     /* rope.scaling.attn_factor, default 1 */
    uint32_t ctx_orig;     /* rope.scaling.original_context_length, default context_length */
    /* YaRN's knobs, set only by the caller (llama.cpp's context parameters
     * of the same names; files of our architectures carry none). Zero keeps
     * llama.cpp's default. */
    bool ext_set;          /* ext_factor given: the ramp's mix, else 1 for yarn and 0 otherwise */
    float ext_factor;
    float yarn_attn;       /* cos/sin multiplier when no ramp is mixed in (default 1; a mix sets its own) */
    float beta_fast;       /* the ramp's corners, in rotations over the original context (default */
    float beta_slow;       /*   ROPE_BETA_FAST, ROPE_BETA_SLOW) */
} rope_scaling;

/* llama.cpp's YaRN corners */
#define ROPE_BETA_FAST 32.0f
#define ROPE_BETA_SLOW 1.0f

/* Reads arch's rope.scaling.* keys; an unknown type or a bad value is an
 * error naming the key. ctx_train is the default of ctx_orig. */
int rope_scaling_read(const gguf_file *f, const char *arch, uint32_t ctx_train, rope_scaling *out);

/* The inputs of one layer kind's cos/sin table. */
typedef struct {
    uint32_t rope_dim;
    float base;           /* freq_base of these layers */
    float freq_scale;     /* 1 / factor (linear, yarn), else 1 */
    float ext_factor;     /* 1 for YaRN, else 0 */
    float mscale;         /* the cos/sin multiplier before YaRN's own (llama.cpp's attn_factor) */
    float corr[2];        /* YaRN's correction dims */
    const float *ff;      /* [rope_dim/2] frequency factors, or NULL */
} rope_spec;

/* The spec of layers with freq_base base and frequency scale freq_scale
 * under scaling rs, as llama_context resolves it: a mix (YaRN's ramp) when
 * its ext factor is not 0, its corners from beta_fast / beta_slow.
 * model_scale is the model's (global layers') frequency scale: llama.cpp
 * derives YaRN's attention factor from it once for all layers. */
rope_spec rope_spec_make(const rope_scaling *rs, uint32_t rope_dim, float base, float freq_scale, float model_scale,
                         const float *ff);

/* True when the spec is plain RoPE (kern_rope_table's, also what kv_shift
 * re-rotates with). */
bool rope_spec_plain(const rope_spec *r);

/* cs[rope_dim]: cos of pair i at cs[i], sin at cs[rope_dim/2 + i], at pos. */
void rope_spec_table(const rope_spec *r, float *cs, int pos);

#endif
