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
 *
 * The other weight formats (element j of a 32-block: nibble lo of qs[j]
 * for j < 16, hi of qs[j-16] otherwise, as Q4_0):
 *
 *   Q4_1 (32, 20 B):  d:f16 m:f16 | qs[16]            x = d*q + m, q 0..15
 *   Q5_0 (32, 22 B):  d:f16 | qh[4] | qs[16]          x = d*(q-16), q 0..31,
 *         bit 4 of q(j) = bit j of qh (a little-endian uint32)
 *   Q5_1 (32, 24 B):  d:f16 m:f16 | qh[4] | qs[16]    x = d*q + m
 *   Q8_1 (32, 36 B):  d:f16 s:f16 | qs[32]:i8         x = d*q, s = d*sum(q)
 *         (activations of Q4_1/Q5_1: s carries the m term of the dot)
 *   IQ4_NL (32, 18 B): d:f16 | qs[16]                 x = d*kvalues_iq4nl[q]
 *
 *   Q2_K (256, 84 B): scales[16] (lo nibble scale, hi nibble min) |
 *         qs[64] | d:f16 dmin:f16;  16 sub-blocks of 16:
 *         x = d*sc*q - dmin*m, q 0..3
 *   Q3_K (256, 110 B): hmask[32] | qs[64] | scales[12] | d:f16;
 *         16 sub-blocks of 16: x = d*(sc-32)*(q - 4*!hbit), q 0..3, sc 6-bit
 *   Q5_K (256, 176 B): d:f16 dmin:f16 | scales[12] (as Q4_K) | qh[32] |
 *         qs[128]; 8 sub-blocks of 32: x = d*sc*q - dmin*m, q 0..31
 *   IQ4_XS (256, 136 B): d:f16 | scales_h:u16 | scales_l[4] | qs[128];
 *         8 sub-blocks of 32: x = d*(ls-32)*kvalues_iq4nl[q], ls 6-bit
 *         (lo 4 bits: nibble j&1 of scales_l[j/2]; hi 2: scales_h >> 2j)
 *   TQ1_0 (256, 54 B): qs[48] | qh[4] | d:f16   x = d*(t-1), t 0..2,
 *         5 (qs) or 4 (qh) base-3 digits a byte (below)
 *   TQ2_0 (256, 66 B): qs[64] | d:f16           x = d*(q-1), q 0..3
 *
 * Q2_K/Q3_K 2-bit q of element e = 128*h + 32*k + l (l 0..31):
 *   q = qs[32*h + l] >> (2*k) & 3, sub-block e / 16; Q3_K's hbit of e is
 *   hmask[l] >> (4*h + k) & 1. Q3_K's 6-bit scale j (0..15):
 *   lo 4 bits = scales[j % 8] >> (4*(j/8)) & 15,
 *   hi 2 bits = scales[8 + j % 4] >> (2*(j/4)) & 3.
 * Q5_K element e = 64*g + 32*u + l (sub-block 2g+u): lo 4 bits as Q4_K's
 *   qs, bit 4 = qh[l] >> (2*g + u) & 1.
 * TQ2_0 element e = 128*h + 32*k + l: q = qs[32*h + l] >> (2*k) & 3.
 * TQ1_0: a byte b holds the digits t_0..t_{n-1} (t_0 most significant) as
 *   b = ceil(256 * v * 3^(5-n) / 243), v = sum t_i 3^(n-1-i); digit i is
 *   (uint8_t)(b * 3^i) * 3 >> 8. Elements: qs[0..32) digits 0..4 give
 *   e = 32*i + l; qs[32..48) give 160 + 16*i + l; qh[0..4) digits 0..3
 *   give 240 + 4*i + l.
 */
#ifndef PL_TENSOR_BLOCKS_H
#define PL_TENSOR_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#define QK8_0 32
#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_1 32
#define QK4_NL 32
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

typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

typedef struct {
    uint16_t d;
    uint16_t s;
    int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

typedef struct {
    uint16_t d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

typedef struct {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

/* Q3_K's 6-bit scale j (0..15), 0..63 (the value is this minus 32). */
static inline int block_q3_K_scale(int j, const uint8_t *scales)
{
    return ((scales[j % 8] >> (4 * (j / 8))) & 15) | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

/* IQ4_XS's 6-bit scale of sub-block j (0..7), 0..63 (the value is this minus 32). */
static inline int block_iq4_xs_scale(int j, const block_iq4_xs *b)
{
    return ((b->scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((b->scales_h >> (2 * j)) & 3) << 4);
}

typedef struct {
    uint8_t qs[48];
    uint8_t qh[4];
    uint16_t d;
} block_tq1_0;
static_assert(sizeof(block_tq1_0) == 54, "block_tq1_0 size");

typedef struct {
    uint8_t qs[QK_K / 4];
    uint16_t d;
} block_tq2_0;
static_assert(sizeof(block_tq2_0) == 66, "block_tq2_0 size");

/* The lattice i-quants (quant_lattice.c has the decoding; quant_grids.h the
 * codebooks). A "grid" index picks 8 (IQ2, IQ1) or 4 (IQ3) magnitudes at
 * once; signs come 8 at a time, as a byte or as 7 bits whose 8th is their
 * parity (an even count of minus signs). Scales are 4 bits (IQ2, IQ3) or 3
 * (IQ1), used as 2s+1.
 *   IQ2_XXS (256, 66 B): d | qs[32]:u16; per 32: 2 u32 = 4 index bytes |
 *         4 x 7 sign bits, scale in bits 28-31            x = d(2s+1)/8 g
 *   IQ2_XS (256, 74 B): d | qs[32]:u16 (9-bit index, 7 sign bits) |
 *         scales[8] (a nibble per 16)                     x = d(2s+1)/8 g
 *   IQ2_S (256, 82 B): d | qs[32] index lo 8 | signs[32] | qh[8] (2 index
 *         bits a group of 8) | scales[8]                  x = d(2s+1)/8 g
 *   IQ3_XXS (256, 98 B): d | qs[64] indices | 8 u32: 4 x 7 sign bits,
 *         scale in bits 28-31                             x = d(2s+1)/4 g
 *   IQ3_S (256, 110 B): d | qs[64] index lo 8 | qh[8] | signs[32] |
 *         scales[4] (a nibble per 32)                     x = d(2s+1) g
 *   IQ1_S (256, 50 B): d | qs[32] index lo 8 | qh[8]:u16 (3 index bits a
 *         group, scale in bits 12-14, delta sign 15)      x = d(2s+1)(g +- 1/8)
 *   IQ1_M (256, 56 B): qs[32] | qh[16] (3 index bits and a delta sign a
 *         group) | scales[8] (3-bit scales per 16; d's f16 bits are the 4
 *         top nibbles of the 4 u16)                       x = d(2s+1)(g +- 1/8) */
typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];
} block_iq2_xxs;
static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs size");

typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];
    uint8_t scales[QK_K / 32];
} block_iq2_xs;
static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs size");

typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t scales[QK_K / 32];
} block_iq2_s;
static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s size");

typedef struct {
    uint16_t d;
    uint8_t qs[3 * QK_K / 8];
} block_iq3_xxs;
static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs size");

typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
} block_iq3_s;
static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s size");

typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 8];
    uint16_t qh[QK_K / 32];
} block_iq1_s;
static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s size");

typedef struct {
    uint8_t qs[QK_K / 8];
    uint8_t qh[QK_K / 16];
    uint8_t scales[QK_K / 32];
} block_iq1_m;
static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m size");

/* The 16 levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl, recovered by
 * dequantizing crafted blocks; test_tensor checks them against ggml). */
extern const int8_t quant_iq4nl_values[16];

#endif
