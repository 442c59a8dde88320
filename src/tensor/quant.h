/* quant.h - reference (de)quantization of rows in the ggml block formats.
 *
 * Supported types: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, and Q8_K (the
 * activation format that K-quant dot products use). A row of n elements must
 * have n a multiple of the type's block size (see dtype.h).
 *
 * Dequantization is exactly ggml's reference: the same float operations in
 * the same order, so that a weight means the same number here and there.
 * Quantization produces valid blocks with a bounded error; for Q8_0 and Q8_K
 * (the activation formats) it follows ggml's rounding so that dot products
 * see the same integers llama.cpp sees.
 */
#ifndef PL_TENSOR_QUANT_H
#define PL_TENSOR_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/blocks.h"
#include "tensor/dtype.h"

/* True if type has both functions below. */
bool quant_supported(uint32_t type);

/* dst[0..n) = the values of the row src (n elements of type). */
void quant_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Encodes n floats into dtype_row_bytes(type, n) bytes at dst. */
void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

#endif
