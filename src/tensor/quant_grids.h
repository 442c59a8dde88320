/* quant_grids.h - the codebooks ("grids") of the lattice i-quants.
 *
 * The tables in quant_grids.c are what ggml decodes, read back from its
 * dequantizer by scripts/lattice_grids.c (test_tensor checks them against
 * ggml on every run): a uint16 an entry, value j being level
 * (e >> (2j)) & 3 (IQ2: 8, 25, 43; IQ1: -1, 0, 1) or (e >> (3j)) & 7 (IQ3_XXS:
 * 4, 12, ..., 52, 62; IQ3_S: 1, 3, ..., 15).
 *
 * quant_grids holds them expanded, one value a byte (entry e's values in
 * bytes 0.., so a kernel loads an entry as one integer); it is filled
 * before main by a constructor in quant_lattice.c.
 */
#ifndef PL_TENSOR_QUANT_GRIDS_H
#define PL_TENSOR_QUANT_GRIDS_H

#include <stdint.h>

extern const uint16_t quant_grid_iq2xxs[256];
extern const uint16_t quant_grid_iq2xs[512];
extern const uint16_t quant_grid_iq2s[1024];
extern const uint16_t quant_grid_iq3xxs[256];
extern const uint16_t quant_grid_iq3s[512];
extern const uint16_t quant_grid_iq1s[2048];

typedef struct {
    uint64_t iq2xxs[256], iq2xs[512], iq2s[1024]; /* magnitudes 8, 25, 43 */
    uint64_t iq1s[2048];                          /* int8 -1, 0, 1 */
    uint32_t iq3xxs[256], iq3s[512];              /* magnitudes */
    uint64_t signs7[128]; /* a 7-bit sign field as 8 byte masks (0xFF: minus), parity bit included */
} quant_grid_tables;

extern quant_grid_tables quant_grids;

/* The 8 signs of a 7-bit field: bit 7 makes the count of set bits even. */
static inline uint8_t quant_signs7(uint32_t s7)
{
    return (uint8_t)(s7 | (uint32_t)__builtin_parity(s7) << 7);
}

#endif
