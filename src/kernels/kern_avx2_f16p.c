/* kern_avx2_f16p.c - the packed F16 GEMM in AVX2 + FMA + F16C (the avx2
 * table's kern_packed for DT_F16; kern_avx512_f16p.c is the 16-lane one).
 *
 * A group (kern_pack.c: 16 weight rows as [n][16] f16) is two ymm of lanes,
 * rows 0-7 and 8-15; each lane does THE PACKED F16 ORDER of kern_impl.h
 * (one FMA chain per KERN_PACKF_KB block, the blocks summed in order), so
 * the results are the AVX-512 tile's and the portable one's bits.
 *
 * Tiles: G groups by NX activation rows in 16 ymm registers, 2 G NX
 * accumulators: NX = 1: G = 4 (8 chains; one group, as the AVX-512 tile
 * reads decode, streamed DRAM worse here: docs/speed.md), NX = 2: G = 2,
 * NX = 3, 4: G = 1 (6-8 accumulators, the per-block totals spilled). The tile height is 4,
 * so kern_matmul sweeps the weights once per 4 activation rows (m = 8:
 * twice, the second time from L2).
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

#define F16P2_GMAX 4
#define F16P2_G(NX) ((NX) == 1 ? 4 : (NX) == 2 ? 2 : 1)

KAI void f16p2_tile(int G, int NX, int n, float *y, size_t ys, const uint16_t *wp, int nw, const float *xf,
                    int pfd)
{
    const size_t gs = (size_t)n * KERN_PACKF_ROWS;
    __m256 tot[F16P2_GMAX][2][4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) tot[g][0][r] = tot[g][1][r] = _mm256_setzero_ps();
    for (int k0 = 0; k0 < n; k0 += KERN_PACKF_KB) {
        const int k1 = n - k0 < KERN_PACKF_KB ? n : k0 + KERN_PACKF_KB;
        __m256 acc[F16P2_GMAX][2][4];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) acc[g][0][r] = acc[g][1][r] = _mm256_setzero_ps();
        for (int k = k0; k < k1; k += 2) {
            const uint16_t *wk = wp + (size_t)k * KERN_PACKF_ROWS;
            if (pfd) {
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) _mm_prefetch((const char *)(wk + g * gs) + pfd, _MM_HINT_T0);
            }
#pragma GCC unroll 2
            for (int kk = 0; kk < 2; kk++) {
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) {
                    const uint16_t *p = wk + g * gs + kk * KERN_PACKF_ROWS;
                    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
                    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)));
#pragma GCC unroll 4
                    for (int r = 0; r < NX; r++) {
                        const __m256 xv = _mm256_broadcast_ss(xf + (size_t)(k + kk) * NX + r);
                        acc[g][0][r] = _mm256_fmadd_ps(lo, xv, acc[g][0][r]);
                        acc[g][1][r] = _mm256_fmadd_ps(hi, xv, acc[g][1][r]);
                    }
                }
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) {
                tot[g][0][r] = _mm256_add_ps(tot[g][0][r], acc[g][0][r]);
                tot[g][1][r] = _mm256_add_ps(tot[g][1][r], acc[g][1][r]);
            }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        const int left = nw - 16 * g;
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            float *yr = y + r * ys + 16 * g;
            if (left >= 16) {
                _mm256_storeu_ps(yr, tot[g][0][r]);
                _mm256_storeu_ps(yr + 8, tot[g][1][r]);
            } else {
                float v[16];
                _mm256_storeu_ps(v, tot[g][0][r]);
                _mm256_storeu_ps(v + 8, tot[g][1][r]);
                for (int i = 0; i < left; i++) yr[i] = v[i];
            }
        }
    }
}

KA void kern_gemmp_f16_avx2(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                              const kern_px *px, int nx)
{
    (void)x, (void)xs;
    const size_t gs = (size_t)n * KERN_PACKF_ROWS;
    const float *xf = px->f;
    /* the AVX2 table's fixed distance into L1 at decode (Zen 3's best for
     * the dot tiles, kern_avx2.c) */
    const int pfd = nx == 1 ? 1024 : 0;
    switch (nx) {
    case 1: KERN_F16P_SWEEP(f16p2_tile, F16P2_G, 1); break;
    case 2: KERN_F16P_SWEEP(f16p2_tile, F16P2_G, 2); break;
    case 3: KERN_F16P_SWEEP(f16p2_tile, F16P2_G, 3); break;
    default: KERN_F16P_SWEEP(f16p2_tile, F16P2_G, 4); break;
    }
}

/* kern_packed.pxf_row: f16 row x as f32, element k at f[k * rows]. */
KA void kern_pxf_row_f16_avx2(float *f, size_t rows, const void *x, int n)
{
    const uint16_t *h = x;
    for (int k = 0; k < n; k += 8) {
        float v[8];
        _mm256_storeu_ps(v, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + k))));
        for (int i = 0; i < 8; i++) f[(size_t)(k + i) * rows] = v[i];
    }
}

#endif
