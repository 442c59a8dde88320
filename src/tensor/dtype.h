/* dtype.h - element types of GGUF/ggml tensors and their block geometry.
 *
 * The ids are ggml's (they are stored in GGUF files, so they never change).
 * A row of n elements of type t occupies n / blck_size * type_size bytes and n
 * must be a multiple of blck_size. The table knows the geometry of every
 * ggml type we can name, so that the GGUF reader can validate and `inspect`
 * can describe files whose types we cannot compute with; `computable` says
 * which ones the kernels support.
 *
 * The GGUF reader depends on this file (not the other way round): the type
 * geometry is a property of the file format that both share.
 */
#ifndef PL_TENSOR_DTYPE_H
#define PL_TENSOR_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    DT_F32 = 0,
    DT_F16 = 1,
    DT_Q4_0 = 2,
    DT_Q4_1 = 3,
    DT_Q5_0 = 6,
    DT_Q5_1 = 7,
    DT_Q8_0 = 8,
    DT_Q8_1 = 9,
    DT_Q2_K = 10,
    DT_Q3_K = 11,
    DT_Q4_K = 12,
    DT_Q5_K = 13,
    DT_Q6_K = 14,
    DT_Q8_K = 15,
    DT_IQ2_XXS = 16,
    DT_IQ2_XS = 17,
    DT_IQ3_XXS = 18,
    DT_IQ1_S = 19,
    DT_IQ4_NL = 20,
    DT_IQ3_S = 21,
    DT_IQ2_S = 22,
    DT_IQ4_XS = 23,
    DT_I8 = 24,
    DT_I16 = 25,
    DT_I32 = 26,
    DT_I64 = 27,
    DT_F64 = 28,
    DT_IQ1_M = 29,
    DT_BF16 = 30,
    DT_TQ1_0 = 34,
    DT_TQ2_0 = 35,
    DT_MXFP4 = 39,
    DT_COUNT = 40, /* one past the largest id */
} dtype;

typedef struct {
    const char *name;    /* ggml's name, e.g. "q4_K"; NULL if id unused */
    uint32_t blck_size;  /* elements per block */
    uint32_t type_size;  /* bytes per block */
    bool computable;     /* pagellm can dequantize and multiply it */
} dtype_traits;

/* Traits of id t, or NULL if t is not a ggml type id we know. */
const dtype_traits *dtype_get(uint32_t t);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
uint64_t dtype_row_bytes(uint32_t t, uint64_t n);

/* Type id by name (case-insensitive: "q4_0", "Q4_K", "f16"); -1 if none. */
int dtype_from_name(const char *name);

#endif
