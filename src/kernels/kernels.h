/* kernels.h - the numeric kernels of the forward pass.
 *
 * Each kernel has a plain C reference (*_ref, in kernels_ref.c) and SIMD
 * variants chosen once at start from the CPU's features (kern_init()). The
 * public entry points below call the chosen variant. Tests compare every
 * variant with _ref.
 *
 * Matrix products follow ggml's numerics so that logits agree with llama.cpp:
 * activations are converted to the weight type's "dot type" first
 *   F32 -> f32, F16 -> f16, BF16 -> bf16, Q8_0/Q4_0 -> Q8_0, Q4_K/Q6_K -> Q8_K,
 * and each dot product is computed between a weight row and that converted
 * activation row.
 */
#ifndef PL_KERNELS_H
#define PL_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"

/* Chooses SIMD variants from CPU features (idempotent). force_ref != 0 selects
 * the references everywhere (tests, debugging). */
void kern_init(int force_ref);
/* Name of the chosen variant set, e.g. "avx2" or "ref". */
const char *kern_variant(void);

/* y[m][n_out] = x[m][n_in] . W^T, where W is n_out rows of n_in elements in
 * ggml type wtype, row stride dtype_row_bytes(wtype, n_in). n_in must be a
 * multiple of the type's block size. Threads split the output columns; each
 * weight row is read once for all m rows of x. */
void kern_matmul(float *y, const float *x, const void *w, uint32_t wtype, int m, int n_in, int n_out,
                 threadpool *tp);

/* y = x / rms(x) * w (w may be NULL for no weight); y may alias x. */
void kern_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* Rotary embedding in place on x[n_heads][head_dim] at position pos.
 * The first rope_dim dims of each head rotate; theta_i = pos * freq_scale *
 * base^(-2i/rope_dim) / (freq_factors ? freq_factors[i] : 1).
 * neox=false: pairs (2i, 2i+1) (llama); neox=true: pairs (i, i+rope_dim/2). */
void kern_rope(float *x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base,
               float freq_scale, bool neox, const float *freq_factors);

/* In place softmax over n values. */
void kern_softmax(float *x, int n);

/* a[i] = silu(a[i]) * b[i]. */
void kern_swiglu(float *a, const float *b, int n);

/* Row conversions used by the dot types (exposed for tests and the KV cache). */
void kern_f32_to_f16_row(uint16_t *dst, const float *src, int n);
void kern_f16_to_f32_row(float *dst, const uint16_t *src, int n);

#endif
