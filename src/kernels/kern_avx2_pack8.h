/* kern_avx2_pack8.h - what the AVX2 tiles of weights packed 8 rows a group
 * (kern_avx2_iq4p.c, kern_avx2_q3kp.c, kern_avx2_q4kp.c) share: the
 * broadcast of 4 activation bytes to the 8 lanes, and the store of each
 * activation row's 8 results, the group's weight rows being the 8 float
 * lanes. A last group of fewer than KERN_PACK_ROWS rows writes only its nw
 * results. */
#ifndef PAGELLM_KERN_AVX2_PACK8_H
#define PAGELLM_KERN_AVX2_PACK8_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kern_impl.h"

static inline __attribute__((always_inline, target("avx2,fma,f16c"))) __m256i pack8_bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
pack8_store_rows(float *y, size_t ys, const __m256 *acc, int nx, int nw)
{
    for (int r = 0; r < nx; r++) {
        if (nw == KERN_PACK_ROWS) {
            _mm256_storeu_ps(y + (size_t)r * ys, acc[r]);
        } else {
            float o[8];
            _mm256_storeu_ps(o, acc[r]);
            memcpy(y + (size_t)r * ys, o, sizeof(float) * (size_t)nw);
        }
    }
}

#endif
