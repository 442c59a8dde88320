/* quant.h - reference (de)quantization of rows in the ggml block formats.
 *
 * Supported types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, the lattice i-quants
 * (IQ1_S ... IQ3_S), and the activation
 * formats the dot products use: Q8_0, Q8_1 (with Q4_1/Q5_1) and Q8_K (the
 * 256-element formats). A row of n elements must
 * have n a multiple of the type's block size (see dtype.h).
 *
 * Dequantization is exactly ggml's reference: the same float operations in
 * the same order, so that a weight means the same number here and there.
 * Quantization produces valid blocks with a bounded error; for Q8_0 and Q8_K
 * (the activation formats) it follows ggml's rounding so that dot products
 * see the same integers llama.cpp sees.
 *
 * The weight quantizers (all but Q8_0, Q8_1 and Q8_K) search for scales that lower the
 * squared error; they are deterministic but not byte-identical to ggml's
 * (nothing requires that: a file only has to decode the same everywhere).
 * Non-finite inputs give unspecified (but memory-safe) blocks.
 *
 * quant_quantize_row() and quant_dequant_row() are the generic doors; the
 * per-type functions below are the same code, for callers (kernels) that
 * already know the type.
 */
#ifndef PL_TENSOR_QUANT_H
#define PL_TENSOR_QUANT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tensor/blocks.h"
#include "tensor/dtype.h"

/* True if quant_dequant_row reads type. */
bool quant_supported(uint32_t type);

/* True if quant_quantize_row writes type too (today: every type read). */
bool quant_can_quantize(uint32_t type);

/* dst[0..n) = the values of the row src (n elements of type). */
void quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Encodes n floats into dtype_row_bytes(type, n) bytes at dst. */
void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);
/* The same with an importance per element (an importance matrix row: the
 * mean square activation of each input column), NULL for none. Only the
 * lattice searches take it; the other types quantize as without. */
void quant_quantize_row_w(uint32_t type, const float *src, void *dst, int64_t n, const float *qw);

/* ------------------------------------------------------ per-type rows */
/* n is the element count (a multiple of the block size). */

void quant_f16_dequant_row(const uint16_t *src, float *dst, int64_t n);
void quant_f16_quantize_row(const float *src, uint16_t *dst, int64_t n);
void quant_bf16_dequant_row(const uint16_t *src, float *dst, int64_t n);
void quant_bf16_quantize_row(const float *src, uint16_t *dst, int64_t n);

void quant_q8_0_dequant_row(const block_q8_0 *src, float *dst, int64_t n);
void quant_q8_0_quantize_row(const float *src, block_q8_0 *dst, int64_t n);  /* = ggml ref */
void quant_q4_0_dequant_row(const block_q4_0 *src, float *dst, int64_t n);
void quant_q4_0_quantize_row(const float *src, block_q4_0 *dst, int64_t n);  /* scale search */
/* ggml's quantize_row_q4_0_ref, byte for byte (d = max / -8, no search):
 * about 10x faster than the searching quantizer above and what llama.cpp
 * uses for a Q4_0 KV cache; for hot paths, not for weights. */
void quant_q4_0_quantize_row_ref(const float *src, block_q4_0 *dst, int64_t n);

void quant_q4_K_dequant_row(const block_q4_K *src, float *dst, int64_t n);
void quant_q4_K_quantize_row(const float *src, block_q4_K *dst, int64_t n);  /* scale/min search */
void quant_q6_K_dequant_row(const block_q6_K *src, float *dst, int64_t n);
void quant_q6_K_quantize_row(const float *src, block_q6_K *dst, int64_t n);  /* scale search */
void quant_q8_K_dequant_row(const block_q8_K *src, float *dst, int64_t n);
void quant_q8_K_quantize_row(const float *src, block_q8_K *dst, int64_t n);  /* = ggml ref */

/* quant_legacy.c */
void quant_q4_1_dequant_row(const block_q4_1 *src, float *dst, int64_t n);
void quant_q4_1_quantize_row(const float *src, block_q4_1 *dst, int64_t n);  /* scale/min fit */
void quant_q5_0_dequant_row(const block_q5_0 *src, float *dst, int64_t n);
void quant_q5_0_quantize_row(const float *src, block_q5_0 *dst, int64_t n);  /* scale fit */
void quant_q5_1_dequant_row(const block_q5_1 *src, float *dst, int64_t n);
void quant_q5_1_quantize_row(const float *src, block_q5_1 *dst, int64_t n);  /* scale/min fit */
void quant_q8_1_dequant_row(const block_q8_1 *src, float *dst, int64_t n);
void quant_q8_1_quantize_row(const float *src, block_q8_1 *dst, int64_t n);  /* = ggml ref */
/* quant_k_ext.c */
void quant_q2_K_dequant_row(const block_q2_K *src, float *dst, int64_t n);
void quant_q2_K_quantize_row(const float *src, block_q2_K *dst, int64_t n);
void quant_q3_K_dequant_row(const block_q3_K *src, float *dst, int64_t n);
void quant_q3_K_quantize_row(const float *src, block_q3_K *dst, int64_t n);
void quant_q5_K_dequant_row(const block_q5_K *src, float *dst, int64_t n);
void quant_q5_K_quantize_row(const float *src, block_q5_K *dst, int64_t n);
/* quant_iq.c */
void quant_iq4_nl_dequant_row(const block_iq4_nl *src, float *dst, int64_t n);
void quant_iq4_nl_quantize_row(const float *src, block_iq4_nl *dst, int64_t n);
void quant_iq4_xs_dequant_row(const block_iq4_xs *src, float *dst, int64_t n);
void quant_iq4_xs_quantize_row(const float *src, block_iq4_xs *dst, int64_t n);
void quant_tq1_0_dequant_row(const block_tq1_0 *src, float *dst, int64_t n);
void quant_tq1_0_quantize_row(const float *src, block_tq1_0 *dst, int64_t n);
void quant_tq2_0_dequant_row(const block_tq2_0 *src, float *dst, int64_t n);
void quant_tq2_0_quantize_row(const float *src, block_tq2_0 *dst, int64_t n);
/* quant_lattice.c (dequantization) and quant_lattice_enc.c (a codebook
 * search per super-block, no importance matrix) */
void quant_iq2_xxs_dequant_row(const block_iq2_xxs *src, float *dst, int64_t n);
void quant_iq2_xs_dequant_row(const block_iq2_xs *src, float *dst, int64_t n);
void quant_iq2_s_dequant_row(const block_iq2_s *src, float *dst, int64_t n);
void quant_iq3_xxs_dequant_row(const block_iq3_xxs *src, float *dst, int64_t n);
void quant_iq3_s_dequant_row(const block_iq3_s *src, float *dst, int64_t n);
void quant_iq1_s_dequant_row(const block_iq1_s *src, float *dst, int64_t n);
void quant_iq1_m_dequant_row(const block_iq1_m *src, float *dst, int64_t n);
void quant_lattice_quantize_row(uint32_t type, const float *src, void *dst, int64_t n, const float *qw);

/* A lattice super-block as integers, for the dot kernels:
 * x[i] = d * sc[i / 16] * q[i] exactly (|q| <= 62, 1 <= sc <= 31; d is the
 * block's f16 scale times the format's power of two). */
typedef struct {
    int8_t q[QK_K];
    int8_t sc[QK_K / 16];
    float d;
} quant_lattice_block;

bool quant_is_lattice(uint32_t type);
/* Super-block b of a row of lattice type t: its d (as the view's), and the
 * whole view. */
float quant_lattice_d(uint32_t t, const void *row, int64_t b);
void quant_lattice_unpack(uint32_t t, const void *row, int64_t b, quant_lattice_block *u);

/* Round to the nearest integer, ties to even, as ggml's nearest_int(): adding
 * 1.5*2^23 leaves the rounded value in the low mantissa bits. Valid for
 * |x| <= 2^22 (callers keep x in range; outside it the result is garbage,
 * never undefined behaviour). */
static inline int quant_round_nearest(float x)
{
    float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

#endif
