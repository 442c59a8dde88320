/* kern_neon_lattice.c - NEON dots of the lattice i-quants (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) against Q8_K. A weight super-block
 * is unpacked once (quant_lattice_unpack: signed levels, scale codes per
 * 16) for the tile's nx <= 4 activation rows; per 16 elements an exact
 * integer dot, scaled by its code; the super-block's float step is the
 * reference's (d * dx * isum), so the bits are the reference's.
 */
#include "kernels/kern_impl.h"

#if defined(__aarch64__)

#include <arm_neon.h>
#include <string.h>

#include "kernels/kern_neon_intrin.h"
#include "tensor/quant.h"

KNI void lat_tile(uint32_t T, int NX, int n, float *s, size_t ss, const void *w, const uint8_t *x, size_t xs)
{
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    quant_lattice_block u;
    for (int b = 0; b < n / QK_K; b++) {
        quant_lattice_unpack(T, w, b, &u);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + (size_t)r * xs) + b;
            int32x4_t iv = vdupq_n_s32(0);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++)
                iv = vmlaq_n_s32(iv, dot_i8x16(vld1q_s8(u.q + 16 * j), vld1q_s8(xb->qs + 16 * j)), u.sc[j]);
            acc[r] += u.d * xb->d * (float)vaddvq_s32(iv);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = acc[r];
}

#define LAT_TILES(name, T) KERN_ROW_TILES(, kern_gemm_##name##_neon, kern_dot_##name##_neon, lat_tile, T)

LAT_TILES(iq2_xxs, DT_IQ2_XXS)
LAT_TILES(iq2_xs, DT_IQ2_XS)
LAT_TILES(iq2_s, DT_IQ2_S)
LAT_TILES(iq3_xxs, DT_IQ3_XXS)
LAT_TILES(iq3_s, DT_IQ3_S)
LAT_TILES(iq1_s, DT_IQ1_S)
LAT_TILES(iq1_m, DT_IQ1_M)

#endif
