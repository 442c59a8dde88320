/* blocks.h - the quantized block layouts of GGUF/ggml, bit for bit.
 *
 * Every struct here is the on-disk layout (little-endian, no padding) and is
 * pinned by a static_assert on its size. Scales are IEEE half (uint16_t) except
 * in Q8_K, whose d is f32 (it is an activation format, never stored in files).
 *
 *   Q8_0 (32 elems, 34 B):  d:f16 | qs[32]:i8                x = d*q
 *   Q4_0 (32 elems, 18 B):  d:f16 | qs[16]: lo nibble = elem j, hi = elem j+16
 *                                                            x = d*(q-8)
 *   Q4_K (256 elems, 144 B): d:f16 dmin:f16 | scales[12] (8 x 6-bit scale and
 *         6-bit min, packed) | qs[128] nibbles; 8 sub-blocks of 32:
 *         x = d*sc*q - dmin*m
 *   Q6_K (256 elems, 210 B): ql[128] low 4 bits | qh[64] high 2 bits |
 *         scales[16]:i8 | d:f16;  16 sub-blocks of 16: x = d*sc*(q-32)
 *   Q8_K (256 elems, 292 B): d:f32 | qs[256]:i8 | bsums[16]:i16 (sums of 16)
 */
#ifndef PL_TENSOR_BLOCKS_H
#define PL_TENSOR_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#define QK8_0 32
#define QK4_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef struct {
    uint16_t d;
    int8_t qs[QK8_0];
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

typedef struct {
    uint16_t d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

#endif
