/* kern_avx512_float.c - AVX-512 kernels for F32, F16 and BF16 weights.
 *
 * Filled entries (the rest stay AVX2's; docs/speed.md has the A/B
 * measurements against AVX2):
 * - both tables: the F32 and F16 GEMM tiles, 4 x 4 in AVX-512's 32 vector
 *   registers, 16 lanes per element (fgemm_tile below: another summation
 *   order than AVX2's 8 lanes, within rounding), the F16 tile's activations
 *   handed over as f32 (kern_gemm.xconv) so that it converts only its
 *   weights. 16 lanes gain where the FMA ports take zmm whole (Intel, Zen
 *   5), not on Zen 4. The F32/F16 decode dots stay AVX2's (DRAM-bound at
 *   decode), with the CPU's stream prefetch (kern_dot_*_avx2_stream,
 *   kern_pf_stream in kern_impl.h).
 * - "avx512-bf16" (bf16 == true): the BF16 GEMM tiles and decode dots with
 *   vdpbf16ps, which multiplies bf16 pairs and adds them into float lanes
 *   in one instruction, where AVX2 widens both operands (vpmovzxwd + vpslld
 *   each) for every 8 products before an FMA. GEMM: 512-bit (32 products per
 *   instruction, 16 accumulators of a 4 x 4 tile); decode dots: 256-bit,
 *   as fast in cache and they stream rows from DRAM, where a 64-byte load
 *   off a 64-byte boundary (GGUF aligns tensors to 32) touches two lines
 *   every time.
 * The activation conversions stay AVX2's (bit-exact f32 -> f16/bf16, round
 * to nearest even, NaNs kept; vcvtneps2bf16 would flush subnormal inputs
 * to zero).
 *
 * Numerics of BF16, relative to the reference (products rounded to float,
 * summed in double): every bf16 x bf16 product is exact in float, but
 * vdpbf16ps adds the two products of a pair into a lane with float
 * roundings of its own (no FMA), treats subnormal inputs as zero and
 * flushes subnormal results to zero (it ignores MXCSR). So a BF16 dot
 * differs from the reference by the float accumulation over the lanes
 * (within the tests' TOL_SIMD_VS_REF of sum |w x|, as AVX2's 8-lane FMA
 * order is) plus the flushed subnormals (products below 2^-126, nothing
 * next to any model's sums). The invariants of kern_impl.h hold: a GEMM
 * element is one 16-lane accumulator vdpbf16ps'd over 32 elements at a
 * time in order, a scalar float tail over the last n % 32 elements in
 * order, then _mm512_reduce_add_ps + tail, whatever the tile shape; a
 * decode dot (4 8-lane accumulators over 64 elements at a time, then one
 * over 16, summed in order, hsum, scalar tail over n % 16) does not depend
 * on nx.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <string.h>

#include "tensor/half.h"

/* K5BI: K5AI with AVX512_BF16. */
#ifdef PL_AVX512_EMU
#define K5BI K5AI
/* SIMDe's __m512bh is not a GCC vector type: reinterpret by copy */
static inline __m512bh x512_bh(__m512i v)
{
    __m512bh r;
    memcpy(&r, &v, sizeof r);
    return r;
}
static inline __m256bh x256_bh(__m256i v)
{
    __m256bh r;
    memcpy(&r, &v, sizeof r);
    return r;
}
#else
#define K5BI static inline __attribute__((always_inline, target(K5_TARGET ",avx512bf16")))
#define x512_bh(v) ((__m512bh)(v))
#define x256_bh(v) ((__m256bh)(v))
#endif

/* Tuning: decode accumulators per row (hide vdpbf16ps's latency at
 * nx = 1), GEMM tile (4 x 4 = 16 zmm accumulators). */
#ifndef BD_U
#define BD_U 4
#endif
#ifndef BG_NW
#define BG_NW 4
#define BG_NXT 4
#endif

/* 32 bf16 of row p from element i. */
K5BI __m512bh bf16x32(const uint8_t *p, int i) { return x512_bh(_mm512_loadu_si512((const void *)(p + 2 * (size_t)i))); }

/* The scalar tail: elements i..n-1, products rounded to float, summed in
 * float in order. */
K5BI float bf16_tail(const uint8_t *w, const uint8_t *x, int i, int n)
{
    float t = 0.0f;
    for (int k = i; k < n; k++) t += bf16_to_f32(((const uint16_t *)w)[k]) * bf16_to_f32(((const uint16_t *)x)[k]);
    return t;
}

/* ---- BF16 decode dot tiles: one weight row against NX rows, U
 * accumulators per row whatever NX; 256-bit (see the header). */
K5BI __m256bh bf16x16(const uint8_t *p, int i)
{
    return x256_bh(_mm256_loadu_si256((const __m256i *)(p + 2 * (size_t)i)));
}

K5BI float hsum8_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

K5BI void bdot_tile(int NX, int U, int pfd, int n, float *s, size_t ss, const uint8_t *w, const uint8_t *x, size_t xs)
{
    __m256 acc[KERN_DOT_NX_MAX][4];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++)
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) acc[r][u] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 * U <= n; i += 16 * U) {
        /* the CPU's stream prefetch (kern_pf_stream), as the F32/F16 tiles
         * (kern_avx2.c; none on Zen 4, where it slowed the stream) */
        if (pfd) {
            const char *at = (const char *)w + 2 * (size_t)i + pfd;
#pragma GCC unroll 4
            for (int l = 0; l < 32 * U; l += 64) _mm_prefetch(at + l, _MM_HINT_T1);
        }
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const __m256bh wv = bf16x16(w, i + 16 * u);
#pragma GCC unroll 2
            for (int r = 0; r < NX; r++) acc[r][u] = _mm256_dpbf16_ps(acc[r][u], wv, bf16x16(x + r * xs, i + 16 * u));
        }
    }
    for (; i + 16 <= n; i += 16) {
        const __m256bh wv = bf16x16(w, i);
#pragma GCC unroll 2
        for (int r = 0; r < NX; r++) acc[r][0] = _mm256_dpbf16_ps(acc[r][0], wv, bf16x16(x + r * xs, i));
    }
#pragma GCC unroll 2
    for (int r = 0; r < NX; r++) {
#pragma GCC unroll 4
        for (int u = 1; u < U; u++) acc[r][0] = _mm256_add_ps(acc[r][0], acc[r][u]);
        s[r * ss] = hsum8_ps(acc[r][0]) + bf16_tail(w, x + r * xs, i, n);
    }
}

static K5_BF16 void dot_bf16_x512(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx)
{
    const int pfd = kern_pf_stream;
    if (nx == 1) bdot_tile(1, BD_U, pfd, n, s, ss, w, x, xs);
    else bdot_tile(2, BD_U, pfd, n, s, ss, w, x, xs);
}

/* ---- BF16 GEMM tiles: NW weight rows x NX activation rows, each element one
 * 16-lane accumulator (see the header for its sequence). */
K5BI void bgemm_tile(int NW, int NX, int n, float *y, size_t ys, const uint8_t *w, size_t ws, const uint8_t *x,
                     size_t xs)
{
    __m512 acc[KERN_NW_MAX][KERN_NX_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NW; c++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) acc[c][r] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh wv[KERN_NW_MAX];
#pragma GCC unroll 4
        for (int c = 0; c < NW; c++) wv[c] = bf16x32(w + c * ws, i);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const __m512bh xv = bf16x32(x + r * xs, i);
#pragma GCC unroll 4
            for (int c = 0; c < NW; c++) acc[c][r] = _mm512_dpbf16_ps(acc[c][r], wv[c], xv);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NW; c++) y[r * ys + c] = _mm512_reduce_add_ps(acc[c][r]) + bf16_tail(w + c * ws, x + r * xs, i, n);
}

/* every (nw, nx) its own instantiation, accumulators in registers */
#define BG_NX(NW)                                                                                      \
    switch (nx) {                                                                                      \
    case 1: bgemm_tile(NW, 1, n, y, ys, w, ws, x, xs); break;                                          \
    case 2: bgemm_tile(NW, 2, n, y, ys, w, ws, x, xs); break;                                          \
    case 3: bgemm_tile(NW, 3, n, y, ys, w, ws, x, xs); break;                                          \
    default: bgemm_tile(NW, 4, n, y, ys, w, ws, x, xs); break;                                         \
    }

static K5_BF16 void gemm_bf16_x512(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x,
                                   size_t xs, int nx)
{
    switch (nw) {
    case 1: BG_NX(1) break;
    case 2: BG_NX(2) break;
    case 3: BG_NX(3) break;
    default: BG_NX(4) break;
    }
}

/* ---- F32 and F16 GEMM tiles: 16 lanes. Per element one 16-lane
 * accumulator, fma over 16 elements at a time in order, the last n % 16
 * elements as one masked step (the masked lanes add fma(0, 0, acc) = acc),
 * then _mm512_reduce_add_ps: the same sequence whatever the tile shape
 * (kern_impl.h's invariant), another order than AVX2's 8 lanes (within
 * rounding: test_kernels). A 4 x 4 tile: 16 accumulators + 4 weight
 * vectors + 1 activation vector of the 32 registers.
 * 16 lanes pay where the two FMA ports take zmm whole (Intel, Zen 5; Zen 4
 * runs a zmm operation as two halves), and handing the F16 tile its
 * activations as f32 saves a vcvtph2ps (2 uops on the FMA ports) per
 * vector. What bounds the tile then is the L2: a 4 x 4 tile over n = 2048
 * holds 32 KiB of f32 activations and streams 16 KiB of weights through a
 * 48 KiB L1. F16 weights are packed at load and take kern_avx512_f16p.c's
 * tiles (rows as lanes, faster); this tile is left for F16 rows not packed
 * (PAGELLM_NO_REPACK=1). docs/speed.md has the measurements. */
enum { FK_F32, FK_F16 };

K5AI __m512 fload16(int kind, const uint8_t *p, int i, __mmask16 m)
{
    if (kind == FK_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
}

/* kind: the weights' (F32 or F16); the activations are f32 either way
 * (for F16 weights the f16-rounded values, conv_f16_as_f32). */
K5AI void fgemm_tile(int kind, int NW, int NX, int n, float *y, size_t ys, const uint8_t *w, size_t ws,
                    const uint8_t *x, size_t xs)
{
    __m512 acc[KERN_NW_MAX][KERN_NX_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NW; c++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) acc[c][r] = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 wv[KERN_NW_MAX];
#pragma GCC unroll 4
        for (int c = 0; c < NW; c++) wv[c] = fload16(kind, w + c * ws, i, m);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const __m512 xv = fload16(FK_F32, x + r * xs, i, m);
#pragma GCC unroll 4
            for (int c = 0; c < NW; c++) acc[c][r] = _mm512_fmadd_ps(wv[c], xv, acc[c][r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NW; c++) y[r * ys + c] = _mm512_reduce_add_ps(acc[c][r]);
}

/* The F16 tile's activations (kern_gemm.xconv): each value rounded to f16
 * (nearest even, as conv[DT_F16]) and widened back, so the tile converts
 * only its weights. */
static K5 void conv_f16_as_f32(void *dst, const float *src, int n)
{
    float *d = dst;
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        _mm512_mask_storeu_ps(d + i, m, _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
}

#define FG_NX(kind, NW)                                                                                \
    switch (nx) {                                                                                      \
    case 1: fgemm_tile(kind, NW, 1, n, y, ys, w, ws, x, xs); break;                                    \
    case 2: fgemm_tile(kind, NW, 2, n, y, ys, w, ws, x, xs); break;                                    \
    case 3: fgemm_tile(kind, NW, 3, n, y, ys, w, ws, x, xs); break;                                    \
    default: fgemm_tile(kind, NW, 4, n, y, ys, w, ws, x, xs); break;                                   \
    }
#define FGEMM_X512(name, kind)                                                                         \
    static K5 void name(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x,  \
                        size_t xs, int nx)                                                             \
    {                                                                                                  \
        switch (nw) {                                                                                  \
        case 1: FG_NX(kind, 1) break;                                                                  \
        case 2: FG_NX(kind, 2) break;                                                                  \
        case 3: FG_NX(kind, 3) break;                                                                  \
        default: FG_NX(kind, 4) break;                                                                 \
        }                                                                                              \
    }

FGEMM_X512(gemm_f32_x512, FK_F32)
FGEMM_X512(gemm_f16_x512, FK_F16)

void kern_avx512_fill_float(kern_vtable *t, bool bf16)
{
    t->gemm[DT_F32] = (kern_gemm){gemm_f32_x512, 4, 4, NULL, 0};
    t->gemm[DT_F16] = (kern_gemm){gemm_f16_x512, 4, 4, conv_f16_as_f32, (int)sizeof(float)};
    /* AVX2's f32/f16 decode tiles with the CPU's stream prefetch (kern_avx2.c) */
    t->dot[DT_F32] = kern_dot_f32_avx2_stream;
    t->dot[DT_F16] = kern_dot_f16_avx2_stream;
    if (!bf16) return;
    t->gemm[DT_BF16] = (kern_gemm){gemm_bf16_x512, BG_NW, BG_NXT, NULL, 0};
    t->dot[DT_BF16] = dot_bf16_x512;
}

#else

void kern_avx512_fill_float(kern_vtable *t, bool bf16) { (void)t, (void)bf16; }

#endif
