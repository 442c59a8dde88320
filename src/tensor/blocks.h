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
 *
 * Q4_K's 12 scale bytes hold 8 six-bit scales sc[j] and 8 six-bit mins m[j]:
 *
 *   byte   0..3 : sc[0..3] in bits 0-5 | bits 4-5 of sc[4..7] in bits 6-7
 *   byte   4..7 :  m[0..3] in bits 0-5 | bits 4-5 of  m[4..7] in bits 6-7
 *   byte  8..11 : low 4 bits of sc[4..7] | low 4 bits of m[4..7] << 4
 *
 * Q4_K's qs: 4 groups of 32 bytes; group g holds sub-block 2g in the low
 * nibbles and sub-block 2g+1 in the high nibbles.
 *
 * Q6_K's 6-bit q (0..63, value q-32) of element e = 128*h + 32*k + l
 * (h half, k 0..3, l 0..31):
 *   low 4 bits  = ql[64*h + l + 32*(k&1)] >> (4*(k>>1)) & 15
 *   high 2 bits = qh[32*h + l] >> (2*k) & 3
 * and its scale is scales[e / 16].
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

/* Sub-block j's (0..7) 6-bit scale and min from a Q4_K scales[12] (above). */
static inline void block_q4_K_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

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
