/* kern_avx512_f16p.c - the packed F16 GEMM in AVX-512 (kern_packed for
 * DT_F16: decode, batched decode and prefill of F16 weights packed at load).
 *
 * Layout (kern_pack.c): a group is 16 weight rows as [n][16] f16, so one
 * 32-byte load converted by vcvtph2ps is element k of the 16 rows, one
 * zmm lane per row. The activations come re-laid by kern_matmul (kern_px.f:
 * element k of the tile's rows side by side, as f32), and each lane does
 *
 *   acc = fma(w[row][k], x[r][k], acc)       k in order, per KERN_PACKF_KB block
 *
 * i.e. THE PACKED F16 ORDER of kern_impl.h: no horizontal sums and no
 * dependence on the tile shape, the same bits as kern_pack.c's portable
 * version (fmaf) and the AVX2 tile.
 *
 * Tiles: G groups (16 G weight rows) by NX activation rows, G * NX zmm
 * accumulators, the per-block totals beside them (the register allocator
 * spills those, read once per KB elements). Per element k: G weight loads
 * and conversions, NX broadcasts, G * NX FMAs. G by NX:
 *   NX = 1: 1 (decode: one rising weight stream per thread, as the dot
 *   tiles of ggml rows read; its one FMA chain takes 32 bytes a 4-cycle
 *   latency, more than DRAM gives a thread; 4 or 8 groups side by side,
 *   4 or 8 streams, read DRAM no better and the engine slower. The AVX2
 *   tile is the other way round),
 *   NX = 2..4: 4, NX = 5..8: 2 (8-16 accumulators).
 * Rows as lanes read an activation once per 16-32 weight rows, where the
 * 4 x 4 dot-layout tile (kern_avx512_float.c) read it once per 4 and was
 * bound by L2 traffic: several times its GFLOP/s at m = 8.
 *
 * Every tile prefetches each group's stream once per 64-byte line: at
 * NX = 1 kern_pf_stream bytes ahead (kern_impl.h: the CPU's choice), from
 * NX = 2 on 8 KiB ahead as the packed Q8_0/Q4_0 tile does: the weights
 * come from DRAM with 8 sequences too, and without it the tiles waited on
 * their loads. docs/speed.md has the measurements (Emerald Rapids; Zen 4
 * is unmeasured for this tile).
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#define F16P_GMAX 4

/* Groups per tile for NX activation rows. */
#define F16P_G(NX) ((NX) == 1 ? 1 : (NX) <= 4 ? 4 : 2)

/* G groups of 16 rows (nw of them stored, the rest of the last group is
 * zero padding: not written) by NX rows of xf ([k][NX]). */
K5AI void f16p_tile(int G, int NX, int n, float *y, size_t ys, const uint16_t *wp, int nw, const float *xf,
                    int pfd)
{
    const size_t gs = (size_t)n * KERN_PACKF_ROWS;
    __m512 tot[F16P_GMAX][8];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
#pragma GCC unroll 8
        for (int r = 0; r < NX; r++) tot[g][r] = _mm512_setzero_ps();
    for (int k0 = 0; k0 < n; k0 += KERN_PACKF_KB) {
        const int k1 = n - k0 < KERN_PACKF_KB ? n : k0 + KERN_PACKF_KB;
        __m512 acc[F16P_GMAX][8];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 8
            for (int r = 0; r < NX; r++) acc[g][r] = _mm512_setzero_ps();
        /* two elements a step (n is a multiple of 32): one 64-byte line of
         * each group, prefetched once */
        for (int k = k0; k < k1; k += 2) {
            const uint16_t *wk = wp + (size_t)k * KERN_PACKF_ROWS;
            if (pfd) {
#pragma GCC unroll 8
                for (int g = 0; g < G; g++) _mm_prefetch((const char *)(wk + g * gs) + pfd, _MM_HINT_T1);
            }
#pragma GCC unroll 2
            for (int kk = 0; kk < 2; kk++) {
                __m512 wv[F16P_GMAX];
#pragma GCC unroll 8
                for (int g = 0; g < G; g++)
                    wv[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wk + g * gs + kk * KERN_PACKF_ROWS)));
#pragma GCC unroll 8
                for (int r = 0; r < NX; r++) {
                    const __m512 xv = _mm512_set1_ps(xf[(size_t)(k + kk) * NX + r]);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) acc[g][r] = _mm512_fmadd_ps(wv[g], xv, acc[g][r]);
                }
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 8
            for (int r = 0; r < NX; r++) tot[g][r] = _mm512_add_ps(tot[g][r], acc[g][r]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        const int left = nw - 16 * g;
        const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 8
        for (int r = 0; r < NX; r++) _mm512_mask_storeu_ps(y + r * ys + 16 * g, m, tot[g][r]);
    }
}

static K5 void gemmp_f16_x512(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                              const kern_px *px, int nx)
{
    (void)x, (void)xs;
    const size_t gs = (size_t)n * KERN_PACKF_ROWS;
    const float *xf = px->f;
    /* see the file's header; from nx = 2 on the packed Q8_0/Q4_0 tile's
     * rule (kern_avx512_q8.c): 8 KiB ahead on every CPU, Zen 4's hardware
     * prefetcher alone falling behind there */
    const int pfd = nx == 1 ? kern_pf_stream : 8192;
    switch (nx) {
    case 1: KERN_F16P_SWEEP(f16p_tile, F16P_G, 1); break;
    case 2: KERN_F16P_SWEEP(f16p_tile, F16P_G, 2); break;
    case 3: KERN_F16P_SWEEP(f16p_tile, F16P_G, 3); break;
    case 4: KERN_F16P_SWEEP(f16p_tile, F16P_G, 4); break;
    case 5: KERN_F16P_SWEEP(f16p_tile, F16P_G, 5); break;
    case 6: KERN_F16P_SWEEP(f16p_tile, F16P_G, 6); break;
    case 7: KERN_F16P_SWEEP(f16p_tile, F16P_G, 7); break;
    default: KERN_F16P_SWEEP(f16p_tile, F16P_G, 8); break;
    }
}

/* kern_packed.pxf_row: f16 row x as f32, element k at f[k * rows]. */
static K5 void pxf_row_x512(float *f, size_t rows, const void *x, int n)
{
    const uint16_t *h = x;
    for (int k = 0; k < n; k += 16) {
        float v[16];
        _mm512_storeu_ps(v, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + k))));
        for (int i = 0; i < 16; i++) f[(size_t)(k + i) * rows] = v[i];
    }
}

void kern_avx512_fill_f16p(kern_vtable *t)
{
    t->packed[DT_F16] = (kern_packed){8, NULL, gemmp_f16_x512, F16P_GMAX, pxf_row_x512, NULL};
}

#else

void kern_avx512_fill_f16p(kern_vtable *t) { (void)t; }

#endif
