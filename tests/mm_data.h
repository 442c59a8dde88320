/* mm_data.h - random matmul operands: weights in any weight type kern_matmul
 * takes, and activation rows; made for the kernel tests (test_kernels.c)
 * and timed as they are by the matmul micro-benchmarks
 * (bench/micro/bench_matmul*.c).
 *
 * Draws from rng.h's stream: seed it first. Weights hold any bit pattern
 * the format allows with finite scales of a realistic size; activations
 * span row scales from 1e-2 to 1e2 and hold one all-zero quantization
 * block. Both are malloc'd (free them); NULL when out of memory.
 * Header-only; -Itests finds it.
 */
#ifndef PL_TESTS_MM_DATA_H
#define PL_TESTS_MM_DATA_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "rng.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

/* n_out random rows of n_in elements of weight type t. */
/* IQ1_M's f16 d lives in the top nibbles of its 4 scale u16. */
static inline void mm_iq1_m_set_d(block_iq1_m *x, uint16_t d)
{
    for (int i = 0; i < 4; i++) x->scales[2 * i + 1] = (uint8_t)((x->scales[2 * i + 1] & 0x0F) | ((d >> (4 * i)) & 0xF) << 4);
}

static inline uint8_t *mm_weights_make(uint32_t t, int n_out, int n_in)
{
    const size_t row = dtype_row_bytes(t, (uint64_t)n_in), bytes = row * (size_t)n_out;
    uint8_t *w = malloc(bytes ? bytes : 1);
    if (!w) return NULL;
    rng_bytes(w, bytes);
    const int64_t n = (int64_t)n_in * n_out;
    switch (t) {
    case DT_F32:
        for (int64_t i = 0; i < n; i++) ((float *)w)[i] = rng_gauss();
        break;
    case DT_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)w)[i] = f32_to_f16(rng_gauss());
        break;
    case DT_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)w)[i] = f32_to_bf16(rng_gauss());
        break;
    case DT_Q8_0:
        for (int64_t b = 0; b < n / QK8_0; b++) ((block_q8_0 *)w)[b].d = rng_scale(1e-3f, 2e-2f, 1);
        break;
    case DT_Q4_0:
        for (int64_t b = 0; b < n / QK4_0; b++) ((block_q4_0 *)w)[b].d = rng_scale(1e-3f, 2e-2f, 1);
        break;
    case DT_Q4_K:
        for (int64_t b = 0; b < n / QK_K; b++) {
            ((block_q4_K *)w)[b].d = rng_scale(1e-4f, 2e-3f, 0);
            ((block_q4_K *)w)[b].dmin = rng_scale(1e-4f, 2e-3f, 0);
        }
        break;
    case DT_Q6_K:
        for (int64_t b = 0; b < n / QK_K; b++) ((block_q6_K *)w)[b].d = rng_scale(1e-4f, 2e-3f, 1);
        break;
    default: { /* the other block formats: d (and m, dmin) at their places */
        const size_t bs = dtype_get(t)->type_size, nb = bytes / bs;
        const int k = dtype_get(t)->blck_size == QK_K;
        for (size_t b = 0; b < nb; b++) {
            uint8_t *blk = w + b * bs;
            uint16_t *d = NULL, *m = NULL;
            switch (t) {
            case DT_Q4_1: d = &((block_q4_1 *)blk)->d, m = &((block_q4_1 *)blk)->m; break;
            case DT_Q5_1: d = &((block_q5_1 *)blk)->d, m = &((block_q5_1 *)blk)->m; break;
            case DT_Q5_0: d = &((block_q5_0 *)blk)->d; break;
            case DT_IQ4_NL: d = &((block_iq4_nl *)blk)->d; break;
            case DT_Q2_K: d = &((block_q2_K *)blk)->d, m = &((block_q2_K *)blk)->dmin; break;
            case DT_Q3_K: d = &((block_q3_K *)blk)->d; break;
            case DT_Q5_K: d = &((block_q5_K *)blk)->d, m = &((block_q5_K *)blk)->dmin; break;
            case DT_IQ4_XS: d = &((block_iq4_xs *)blk)->d; break;
            case DT_TQ1_0: d = &((block_tq1_0 *)blk)->d; break;
            case DT_TQ2_0: d = &((block_tq2_0 *)blk)->d; break;
            case DT_IQ2_XXS: case DT_IQ2_XS: case DT_IQ2_S: case DT_IQ3_XXS: case DT_IQ3_S: case DT_IQ1_S:
                d = (uint16_t *)blk; /* the lattice formats' d comes first */
                break;
            case DT_IQ1_M: mm_iq1_m_set_d((block_iq1_m *)blk, rng_scale(1e-4f, 2e-3f, 0)); break;
            }
            if (d) *d = k ? rng_scale(1e-4f, 2e-3f, t == DT_Q3_K || t == DT_IQ4_XS) : rng_scale(1e-3f, 2e-2f, 1);
            if (m) *m = k ? rng_scale(1e-4f, 2e-3f, 0) : rng_scale(1e-3f, 2e-1f, 1);
        }
        break;
    }
    }
    return w;
}

/* m rows of n_in activations: gaussian, row scales from 1e-2 to 1e2, and
 * row 3 zero over its first 256 elements (an all-zero quantization block). */
static inline float *mm_acts_make(int m, int n_in)
{
    float *x = malloc(sizeof(float) * (size_t)m * (size_t)n_in);
    if (!x) return NULL;
    for (int i = 0; i < m; i++) {
        const float scale = powf(10.0f, (float)(i % 5 - 2));
        for (int k = 0; k < n_in; k++) x[(size_t)i * n_in + k] = rng_gauss() * scale;
        if (i == 3)
            for (int k = 0; k < n_in && k < 256; k++) x[(size_t)i * n_in + k] = 0.0f;
    }
    return x;
}

#endif
