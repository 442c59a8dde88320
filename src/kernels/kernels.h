/* kernels.h - the numeric kernels of the forward pass.
 *
 * Each kernel has a plain C reference (kern_ref.c) and SIMD variants
 * (kern_avx2.c, ...) collected in one table per variant (kern_impl.h); the
 * table is chosen once at start from the CPU's features (kern_init(), or
 * lazily on first use). The public entry points below call the chosen
 * variant. Tests compare every variant with the reference.
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

/* Chooses SIMD variants from CPU features (idempotent): AVX-512 (with VNNI;
 * "avx512" or "avx512-bf16") over AVX2 over the reference, or NEON on
 * aarch64. force_ref != 0 selects the references everywhere (tests,
 * debugging); the environment variable PAGELLM_KERNELS = ref | avx2 |
 * avx512 caps the choice (A/B runs of one binary). */
void kern_init(int force_ref);
/* Name of the chosen variant set, e.g. "avx512-bf16", "avx2" or "ref". */
const char *kern_variant(void);

/* True if kern_matmul accepts weights of ggml type wtype (F32, F16, BF16,
 * Q8_0, Q4_0, Q4_K, Q6_K). Loaders check this; kern_matmul asserts it. */
bool kern_matmul_supports(uint32_t wtype);

/* y[m][n_out] = x[m][n_in] . W^T, where W is n_out rows of n_in elements in
 * ggml type wtype, row stride dtype_row_bytes(wtype, n_in). n_in must be a
 * multiple of the type's block size. Threads split the output columns; a
 * GEMM reads each weight block once per group of activation rows (for Q8_0
 * and Q4_0 weights with m > 4, and F16 where kern_pack_supports it,
 * repacked per call; see kern_pack below for packing once). y must not
 * overlap x or w. Row i of y depends only on row i of x, on W and on
 * whether m <= 4 (decode: ggml-like AVX2 dot tiles, float lanes across
 * blocks) or m > 4 (GEMM: the reference's order, or the packed F16
 * order): within each it is the same bit for bit whatever m, the other
 * rows, or tp's size; the two agree within rounding (kern_matmul.c). */
void kern_matmul(float *y, const float *x, const void *w, uint32_t wtype, int m, int n_in, int n_out,
                 threadpool *tp);

/* Weights packed once (at model load) for kern_matmul: Q8_0, Q4_0 and F16
 * with n_in % 32 == 0, IQ4_XS, Q3_K and Q4_K with n_in % 256 == 0.
 * kern_pack_supports says whether packing pays here (Q8_0/Q4_0 always;
 * F16, IQ4_XS, Q3_K and Q4_K where the chosen variant has a packed tile:
 * AVX2, AVX-512). kern_pack_bytes is the size of the packed copy (0 if
 * there is no layout): as many bytes as the ggml rows (IQ4_XS: 140 a row
 * and super-block for 136; Q3_K: 114 for 110; Q4_K: 148 for 144), plus
 * padding to whole groups (8 rows; F16 16 rows). dst must be 64-byte
 * aligned. With packed weights every m takes the packed GEMM (IQ4_XS, Q3_K
 * and Q4_K from the kern_kgemm's min_m its packed-per-call GEMM, made from
 * the packed groups), so rows are the same bit for bit whatever m (1
 * included), batching, threads or variant: Q8_0/Q4_0/IQ4_XS/Q3_K/Q4_K in
 * the reference's float order (equal to the reference variant's), F16 in
 * the packed F16 order (kern_impl.h; within rounding of the reference's
 * double sums). */
bool kern_pack_supports(uint32_t wtype, int n_in);
size_t kern_pack_bytes(uint32_t wtype, int n_in, int n_out);
void kern_pack(void *dst, const void *w, uint32_t wtype, int n_in, int n_out);

/* A weight matrix as kern_matmul_mats takes it: its ggml rows (data) and/or
 * its packed copy (packed, used when non-NULL). */
typedef struct {
    const void *data;   /* [n_out] ggml rows of type `type`, or NULL when packed is set */
    const void *packed; /* kern_pack layout, or NULL */
    uint32_t type;
    int n_in, n_out;
} kern_mat;

/* Several products of one input in one dispatch (one thread-pool barrier):
 * y[i][m][w[i]->n_out] = x[m][n_in] . w[i]^T for i < n_mats (<=
 * KERN_MATS_MAX), every w[i] with the same n_in; x is converted once per
 * dot type. Each y[i] is exactly what kern_matmul (or, packed, the packed
 * path) gives for w[i] alone. */
#define KERN_MATS_MAX 4
void kern_matmul_mats(int n_mats, float *const *y, const float *x, const kern_mat *const *w, int m, threadpool *tp);

/* kern_matmul converts x into a scratch buffer owned by the calling thread
 * (grown on demand, never shrunk, freed when the thread exits or by
 * kern_scratch_free). Reserving the largest (m, n_in) up front keeps
 * allocation off the hot path and turns out-of-memory into an error here
 * (kern_matmul itself aborts if a needed allocation fails). 0 or PL_ENOMEM. */
int kern_matmul_reserve(int m, int n_in);
void kern_scratch_free(void);

/* y = x / rms(x) * w (w may be NULL for no weight); y may alias x.
 * As ggml: sum of float squares accumulated in double, mean rounded to float,
 * scale = 1/sqrtf(mean + eps), y = (x * scale) * w. */
void kern_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* Rotary embedding in place on x[n_heads][head_dim] at position pos.
 * The first rope_dim dims of each head rotate; theta_i = pos * freq_scale *
 * base^(-2i/rope_dim) / (freq_factors ? freq_factors[i] : 1).
 * neox=false: pairs (2i, 2i+1) (llama); neox=true: pairs (i, i+rope_dim/2).
 * Float ops as ggml's rope cache, so angles agree bit for bit: t_0 = (float)pos,
 * t_{i+1} = t_i * powf(base, -2.0f/rope_dim), angle_i = freq_scale * (t_i / ff_i),
 * then x0*cos - x1*sin, x0*sin + x1*cos. rope_dim is even and <= head_dim. */
void kern_rope(float *x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base,
               float freq_scale, bool neox, const float *freq_factors);

/* RoPE in two steps, for callers that rotate many rows at one position (the
 * forward pass: every layer's q and k): kern_rope_table computes the
 * position's cos/sin once, kern_rope_apply rotates n_heads heads with them.
 * cs[rope_dim]: cos of pair i at cs[i], its sin at cs[rope_dim/2 + i]
 * (i < rope_dim/2). The angles and cosf/sinf are kern_rope's own
 * expressions, and the rotation its float operations (no FMA), so
 * table + apply equals kern_rope bit for bit in every variant. */
void kern_rope_table(float *cs, int rope_dim, int pos, float freq_base, float freq_scale,
                     const float *freq_factors);
void kern_rope_apply(float *x, int n_heads, int head_dim, int rope_dim, bool neox, const float *cs);

/* The residual add fused with the next RMSNorm: x[i] += d[i], then
 * y = rmsnorm(x) * w as kern_rmsnorm. Bit for bit the two calls it
 * replaces (same variant), in one pass less over x. y may alias d (d is
 * read before y is written), not x. */
void kern_add_rmsnorm(float *x, const float *d, float *y, const float *w, int n, float eps);

/* In place softmax over n values (n >= 1, at least one finite): as ggml,
 * exp(x - max), sum in double, multiply by (float)(1/sum). SIMD variants use
 * a vector expf within ~2 ulp of libm's. Returns the log-sum-exp of the
 * input, max + log(sum), for merging softmaxes over parts of a row. */
float kern_softmax(float *x, int n);

/* a[i] = silu(a[i]) * b[i], silu(x) = x / (1 + expf(-x)). SIMD variants use
 * a vector expf for whole vectors and libm's for the tail, so call it per
 * row when results must not depend on how rows are batched. */
void kern_swiglu(float *a, const float *b, int n);

/* Row conversions used by the dot types (exposed for tests and the KV cache).
 * Bit-exact with half.h (round to nearest even); NaN stays NaN. */
void kern_f32_to_f16_row(uint16_t *dst, const float *src, int n);
void kern_f16_to_f32_row(float *dst, const uint16_t *src, int n);

/* Attention (Q.K over the paged KV cache, softmax, .V) lives in attention.h
 * with its reference, AVX2 and AVX-512 variants. Its softmax is exact two-pass per
 * row, not flash-style online rescaling, because llama.cpp rounds the final
 * normalized weights to f16 before they weight V; see attention.h. */

#endif
