/* rng.h - the deterministic random numbers of the kernel and attention
 * tests, and of the micro-benchmarks that time the same data
 * (bench/micro/bench_matmul*.c, bench_attn_*.c).
 *
 * xorshift64, one stream per program (the state is file-static). Every case
 * calls rng_seed first, so that its data depends on its seed alone and not
 * on which cases ran before it. Header-only; -Itests finds it.
 */
#ifndef PL_TESTS_RNG_H
#define PL_TESTS_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/half.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static inline void rng_seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ull + 1; }

static inline uint32_t rng_u32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static inline float rng_unit(void) { return (float)(rng_u32() & 0xFFFFFF) / 16777216.0f; } /* [0,1) */
static inline float rng_sym(void) { return 2.0f * rng_unit() - 1.0f; }                       /* [-1,1) */
static inline float rng_gauss(void) { return rng_sym() + rng_sym() + rng_sym(); }

/* Fisher-Yates over a[0, n): the blocks of a fake pool, a read order. */
static inline void rng_shuffle_u32(uint32_t *a, size_t n)
{
    for (size_t i = n; i-- > 1;) {
        const size_t k = rng_u32() % (uint32_t)(i + 1);
        const uint32_t x = a[i];
        a[i] = a[k];
        a[k] = x;
    }
}

static inline void rng_bytes(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rng_u32();
}

/* A random f16 scale with magnitude in [lo, hi), random sign if signed_. */
static inline uint16_t rng_scale(float lo, float hi, int signed_)
{
    float v = lo + (hi - lo) * rng_unit();
    if (signed_ && (rng_u32() & 1)) v = -v;
    return f32_to_f16(v);
}

#endif
