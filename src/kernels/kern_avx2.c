/* kern_avx2.c - the AVX2 + FMA + F16C variant of the kernels.
 *
 * The build has no -march flags: every function here carries
 * target("avx2,fma,f16c") and is only called after kern_init() saw those
 * features (kern_cpu_has_avx2). On other architectures the file compiles to
 * a stub and kern_vt_avx2() returns NULL.
 *
 * Numerics, relative to kern_ref.c:
 * - Q8_0/Q4_0 GEMM tiles compute the same exact integer block sums and then the
 *   reference's own float operations, in the lane of the weight row: equal
 *   to the reference bit for bit (see "Q8_0 and Q4_0" below);
 * - K-quant dots compute the same exact integer sums, split over 8 lanes,
 *   and scale/sum them in float with FMA (only the float order differs);
 * - float dots (F32/F16/BF16) accumulate in float lanes instead of double;
 * - decode dot tiles (m <= KERN_DOT_MAX_M) are laid out like ggml's AVX2
 *   vec_dot for every type (float lanes accumulated across blocks, one
 *   horizontal sum at the end), within rounding of it, not bit for bit;
 * - every element of a GEMM tile follows one fixed sequence of float
 *   operations whatever the tile shape (kern_impl.h's invariant), so matmul
 *   rows do not depend on m, batching or threads;
 * - activation conversions produce exactly the reference's bytes (roundf is
 *   emulated, nearest-even is the FPU default);
 * - rmsnorm sums squares in double like the reference; softmax and swiglu
 *   use expf8 (below), within ~2 ulp of libm.
 *
 * Integer dot products use ggml's trick for int8 x int8 on AVX2: maddubs
 * multiplies unsigned by signed bytes, so the weight's sign is moved onto the
 * activation: |w| * sign(x, w). Pair sums stay below the int16 limit because
 * activations are never -128 (|q| <= 127 by construction). 4-bit and 6-bit
 * weights are unsigned before their offset, so they go straight into maddubs.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "tensor/blocks.h"
#include "tensor/half.h"

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

bool kern_cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

/* --------------------------------------------------------------- helpers */

KAI float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KAI double hsum_pd(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

KAI float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* f16 -> f32 of one scalar (block scales) by table (kern_f16_lut,
 * kern_impl.h): a load is cheaper than F16C's vpinsrw + vcvtph2ps on the
 * per-block path (measured ~10% on Q4_0 and Q8_0 dots). */
float kern_f16_lut[65536];
static pthread_once_t f16_lut_once = PTHREAD_ONCE_INIT;

static void f16_lut_init(void)
{
    for (int i = 0; i < 65536; i++) kern_f16_lut[i] = f16_to_f32((uint16_t)i);
}

void kern_f16_lut_init(void) { pthread_once(&f16_lut_once, f16_lut_init); }

KAI float f16s(uint16_t h) { return kern_f16_lut[h]; }

/* Adds the 8 float products of v into double accumulators lo/hi. */
KAI void acc_pd(__m256 v, __m256d *lo, __m256d *hi)
{
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

/* 32 int8 weights (any sign) times 32 int8 activations, as 8 float lanes of
 * exact int32 sums of 4 products. aw = |w| (sign(w, w)). */
KAI __m256 dot_i8_ps(__m256i aw, __m256i w, __m256i x)
{
    const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* Packs 4 vectors of 8 int32 (elements 0..31 in order) into 32 int8. */
KAI __m256i pack_i32x32_i8(__m256i a, __m256i b, __m256i c, __m256i d)
{
    /* packs works per 128-bit lane; the permute puts the dwords back in order. */
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* roundf(): nearest, ties away from zero (v - trunc(v) is exact). */
KAI __m256 round_away_ps(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign));
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

/* expf on 8 lanes, ~1-2 ulp: e^x = 2^n * e^r, |r| <= ln2/2, with Cody-Waite
 * reduction and Cephes' degree-6 polynomial. 2^n is applied in two halves so
 * that n in [-150, 128] neither wraps the exponent field nor underflows
 * early; inputs are clamped to [-104, 89] (0 and +inf beyond); NaN stays NaN
 * (min/max return their second operand on NaN). */
KAI __m256 expf8(__m256 x)
{
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

/* ------------------------------------------------------------- float dots */

enum { FK_F32, FK_F16, FK_BF16 };

KAI __m256 fload8(int kind, const void *p, int i)
{
    if (kind == FK_F32) return _mm256_loadu_ps((const float *)p + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (kind == FK_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

KAI float fload1(int kind, const void *p, int i)
{
    if (kind == FK_F32) return ((const float *)p)[i];
    if (kind == FK_F16) return f16s(((const uint16_t *)p)[i]);
    return bf16_to_f32(((const uint16_t *)p)[i]);
}

/* ---- decode dot tiles (m <= KERN_DOT_MAX_M, kern_impl.h): one weight row
 * against nx rows, U accumulators per row whatever nx, so a row's value
 * does not depend on nx. */
/* NX activation rows, U independent accumulators per row (to hide FMA
 * latency when NX is small). pfd: prefetch the row pfd bytes ahead, into L1
 * (l2 false: the AVX2 table, 1 KiB, Zen 3's best) or L2 (l2 true: the
 * AVX-512 table, kern_pf_stream), or not at all (pfd 0). */
KAI void fdot_tile(int kind, int NX, int U, int pfd, bool l2, int n, float *s, size_t ss, const void *w,
                   const uint8_t *x, size_t xs)
{
    __m256 acc[KERN_NX_MAX][4];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++)
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) acc[r][u] = _mm256_setzero_ps();
    int i = 0;
    const int esz = kind == FK_F32 ? 4 : 2; /* bytes per weight */
    for (; i + 8 * U <= n; i += 8 * U) {
        /* the weight row ahead (into the next row at the end: ggml rows
         * are consecutive, so that is the order they are read in) */
        if (pfd) {
            const char *at = (const char *)w + (size_t)i * esz + pfd;
#pragma GCC unroll 4
            for (int l = 0; l < 8 * U * esz; l += 64) {
                if (l2) _mm_prefetch(at + l, _MM_HINT_T1);
                else _mm_prefetch(at + l, _MM_HINT_T0);
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            const __m256 wv = fload8(kind, w, i + 8 * u);
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++)
                acc[r][u] = _mm256_fmadd_ps(wv, fload8(kind, x + r * xs, i + 8 * u), acc[r][u]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 wv = fload8(kind, w, i);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) acc[r][0] = _mm256_fmadd_ps(wv, fload8(kind, x + r * xs, i), acc[r][0]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) {
#pragma GCC unroll 4
        for (int u = 1; u < U; u++) acc[r][0] = _mm256_add_ps(acc[r][0], acc[r][u]);
        float t = 0.0f;
        for (int k = i; k < n; k++) t += fload1(kind, w, k) * fload1(kind, x + r * xs, k);
        s[r * ss] = hsum_ps(acc[r][0]) + t;
    }
}

#define FDOT_AVX2(name, kind, PFD, L2)                                                                 \
    KA void name(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx)         \
    {                                                                                                  \
        const int pfd_ = (PFD);                                                                        \
        if (nx == 1) fdot_tile(kind, 1, 4, pfd_, L2, n, s, ss, w, x, xs);                              \
        else fdot_tile(kind, 2, 4, pfd_, L2, n, s, ss, w, x, xs);                                      \
    }

static FDOT_AVX2(dot_f32_avx2, FK_F32, 1024, false)
static FDOT_AVX2(dot_f16_avx2, FK_F16, 1024, false)
static FDOT_AVX2(dot_bf16_avx2, FK_BF16, 1024, false)
/* For the AVX-512 table (kern_impl.h): the same tiles with the CPU's
 * stream prefetch, kern_pf_stream bytes ahead into L2 (none on Zen 4, where
 * it only takes the stream from the L2 hardware prefetcher; wanted on
 * Intel and Zen 5). docs/speed.md has the measurements. */
FDOT_AVX2(kern_dot_f32_avx2_stream, FK_F32, kern_pf_stream, true)
FDOT_AVX2(kern_dot_f16_avx2_stream, FK_F16, kern_pf_stream, true)

/* GEMM tiles are instantiated for every (nw, nx) up to KERN_NW_MAX x
 * KERN_NX_MAX so that accumulators are registers; T(NW, NX) is the call. */
#define GEMM_NX(T, NW)                                                                                 \
    switch (nx) {                                                                                      \
    case 1: T(NW, 1); break;                                                                           \
    case 2: T(NW, 2); break;                                                                           \
    case 3: T(NW, 3); break;                                                                           \
    default: T(NW, 4); break;                                                                          \
    }
#define GEMM_DISPATCH(T)                                                                               \
    switch (nw) {                                                                                      \
    case 1: GEMM_NX(T, 1) break;                                                                       \
    case 2: GEMM_NX(T, 2) break;                                                                       \
    case 3: GEMM_NX(T, 3) break;                                                                       \
    default: GEMM_NX(T, 4) break;                                                                      \
    }

/* NW weight rows x NX activation rows. Each element: one 8-lane
 * accumulator, acc = fma(w[i..i+8), x[i..i+8), acc) for i = 0, 8, ...; a
 * scalar float tail t over the last n % 8 elements in order; result
 * hsum_ps(acc) + t. The independent accumulators of the tile hide the FMA
 * latency (even a 4 x 1 tile has four chains). */
KAI void fgemm_tile(int kind, int NW, int NX, int n, float *y, size_t ys, const uint8_t *w, size_t ws,
                    const uint8_t *x, size_t xs)
{
    __m256 acc[KERN_NW_MAX][KERN_NX_MAX];
#pragma GCC unroll 4
    for (int c = 0; c < NW; c++)
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) acc[c][r] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[KERN_NW_MAX];
#pragma GCC unroll 4
        for (int c = 0; c < NW; c++) wv[c] = fload8(kind, w + c * ws, i);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const __m256 xv = fload8(kind, x + r * xs, i);
#pragma GCC unroll 4
            for (int c = 0; c < NW; c++) acc[c][r] = _mm256_fmadd_ps(wv[c], xv, acc[c][r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NW; c++) {
            float t = 0.0f;
            for (int k = i; k < n; k++) t += fload1(kind, w + c * ws, k) * fload1(kind, x + r * xs, k);
            y[r * ys + c] = hsum_ps(acc[c][r]) + t;
        }
}

#ifndef FG_NW
#define FG_NW 3
#define FG_NX 4
#endif

#define FGEMM_AVX2(name, kind)                                                                         \
    static KA void name(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x,  \
                        size_t xs, int nx)                                                             \
    {                                                                                                  \
        const uint8_t *wb = w, *xb = x;                                                                \
        GEMM_DISPATCH(FGEMM_CALL)                                                                      \
    }
#define FGEMM_CALL_(kind, NW, NX) fgemm_tile(kind, NW, NX, n, y, ys, wb, ws, xb, xs)

#define FGEMM_CALL(NW, NX) FGEMM_CALL_(FK_F32, NW, NX)
FGEMM_AVX2(gemm_f32_avx2, FK_F32)
#undef FGEMM_CALL
#define FGEMM_CALL(NW, NX) FGEMM_CALL_(FK_F16, NW, NX)
FGEMM_AVX2(gemm_f16_avx2, FK_F16)
#undef FGEMM_CALL
#define FGEMM_CALL(NW, NX) FGEMM_CALL_(FK_BF16, NW, NX)
FGEMM_AVX2(gemm_bf16_avx2, FK_BF16)
#undef FGEMM_CALL

/* -------------------------------------------------------- Q8_0 and Q4_0 */

/* Block b of a Q4_0 row as 32 signed bytes (q - 8), in element order. */
KAI __m256i q4_0_load(const block_q4_0 *wb)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)wb->qs);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
}

/* Decode dot tiles: ggml's AVX2 layout (per block, the 8 lanes of int32
 * partial sums to float, fma'd with dw*dx into 8-lane accumulators; one
 * horizontal sum at the end), not the reference's order: no horizontal sum
 * per block. Two accumulators over alternating blocks (ggml has one: its
 * bits, but a dependent FMA chain, ~10% slower decode measured). */
/* One weight block (Q4_0 if is_q4, else Q8_0) against block b of NX rows. */
KAI void q8dot_block(bool is_q4, int NX, int b, __m256 *acc, size_t acc_stride, const void *w, const uint8_t *x,
                     size_t xs)
{
    __m256i wq;
    float dw;
    if (is_q4) {
        const block_q4_0 *w4 = (const block_q4_0 *)w + b;
        wq = q4_0_load(w4);
        dw = f16s(w4->d);
    } else {
        const block_q8_0 *w8 = (const block_q8_0 *)w + b;
        wq = _mm256_loadu_si256((const __m256i *)w8->qs);
        dw = f16s(w8->d);
    }
    const __m256i aw = _mm256_sign_epi8(wq, wq);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) {
        const block_q8_0 *xb = (const block_q8_0 *)(x + r * xs) + b;
        const __m256 p = dot_i8_ps(aw, wq, _mm256_loadu_si256((const __m256i *)xb->qs));
        acc[r * acc_stride] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16s(xb->d)), p, acc[r * acc_stride]);
    }
}

/* U accumulators per row over alternating blocks (the tiles use U = 2). */
KAI void q8dot_tile(bool is_q4, int NX, int U, int nb, float *s, size_t ss, const void *w, const uint8_t *x,
                    size_t xs)
{
    __m256 acc[KERN_NX_MAX][2];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    int b = 0;
    for (; b + U <= nb; b += U) {
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) q8dot_block(is_q4, NX, b + u, &acc[0][u], 2, w, x, xs);
    }
    for (; b < nb; b++) q8dot_block(is_q4, NX, b, &acc[0][0], 2, w, x, xs);
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = hsum_ps(_mm256_add_ps(acc[r][0], acc[r][1]));
}

/* U as a parameter, not a constant inside the tile: GCC schedules the two
 * differently, and this is the code that was measured. */
#define Q8DOT_TILE2(is_q4, NX, nb, s, ss, w, x, xs) q8dot_tile(is_q4, NX, 2, nb, s, ss, w, x, xs)
KERN_Q8DOT_DRIVER(dot_q8_0_avx2, KA, Q8DOT_TILE2, false)
KERN_Q8DOT_DRIVER(dot_q4_0_avx2, KA, Q8DOT_TILE2, true)

/* Q8_0 and Q4_0 dots compute, for every element, exactly the reference's
 * float operations (kern_ref.c), so every path here equals the reference
 * bit for bit: per block in order, the exact integer sum of the 32 products
 * isum, then
 *   Q8_0: s = s + (float)isum * (dw * dx)
 *   Q4_0: s = s + ((float)isum * dw) * dx
 * with s starting at 0. Only the integer sums are computed differently
 * (exact whatever the order); the float chain runs in the lane that belongs
 * to the element's weight row. Two paths:
 * - direct (few activation rows): 4 weight rows from their ggml rows; the
 *   8-lane partial sums of each row are reduced with hadd into one 4-lane
 *   vector, lane c = row c;
 * - packed (kern_matmul with m > KERN_DOT_MAX_M): 8 weight rows repacked once per chunk
 *   (q8_pack) so that one 32-byte vector holds 4 consecutive values of each
 *   of the 8 rows; a broadcast of 4 activation bytes then makes the 8 lanes
 *   the 8 rows' partial sums directly, with no horizontal work. */

/* s = s + (float)isum * (dw * dx)  or  ((float)isum * dw) * dx, per lane. */
KAI __m128 q8_acc4(bool is_q4, __m128 s, __m128i isum, __m128 dw, float dx)
{
    const __m128 f = _mm_cvtepi32_ps(isum), vx = _mm_set1_ps(dx);
    return _mm_add_ps(s, is_q4 ? _mm_mul_ps(_mm_mul_ps(f, dw), vx) : _mm_mul_ps(f, _mm_mul_ps(dw, vx)));
}

KAI __m256 q8_acc8(bool is_q4, __m256 s, __m256i isum, __m256 dw, float dx)
{
    const __m256 f = _mm256_cvtepi32_ps(isum), vx = _mm256_set1_ps(dx);
    return _mm256_add_ps(s, is_q4 ? _mm256_mul_ps(_mm256_mul_ps(f, dw), vx) : _mm256_mul_ps(f, _mm256_mul_ps(dw, vx)));
}

/* 8 int32 partial sums of 32 int8 products, aw = |w|. */
KAI __m256i dot_i8_i32(__m256i aw, __m256i w, __m256i x)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

/* Direct path: 4 weight rows (rows >= nw repeat row 0 and are not stored)
 * by NX activation rows. */
KAI void q8gemm_tile(bool is_q4, int NX, int nw, int nb, float *y, size_t ys, const uint8_t *w, size_t ws,
                     const uint8_t *x, size_t xs)
{
    const uint8_t *wr[4];
    for (int c = 0; c < 4; c++) wr[c] = w + (c < nw ? c : 0) * ws;
    __m128 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i p[4][KERN_NX_MAX];
        float dwf[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i wq;
            if (is_q4) {
                const block_q4_0 *w4 = (const block_q4_0 *)wr[c] + b;
                wq = q4_0_load(w4);
                dwf[c] = f16s(w4->d);
            } else {
                const block_q8_0 *w8 = (const block_q8_0 *)wr[c] + b;
                wq = _mm256_loadu_si256((const __m256i *)w8->qs);
                dwf[c] = f16s(w8->d);
            }
            const __m256i aw = _mm256_sign_epi8(wq, wq);
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++)
                p[c][r] = dot_i8_i32(aw, wq, _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)(x + r * xs) + b)->qs));
        }
        /* from registers: four scalar stores then a vector load of them
         * would stall on store forwarding every block */
        const __m128 dw = _mm_setr_ps(dwf[0], dwf[1], dwf[2], dwf[3]);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            /* lanes of h: row c's sums over lanes {0,1},{2,3} (low half) and {4,5},{6,7} (high) */
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0][r], p[1][r]), _mm256_hadd_epi32(p[2][r], p[3][r]));
            const __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            acc[r] = q8_acc4(is_q4, acc[r], isum, dw, f16s(((const block_q8_0 *)(x + r * xs) + b)->d));
        }
    }
    float out[4];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) {
        _mm_storeu_ps(out, acc[r]);
        for (int c = 0; c < nw; c++) y[r * ys + c] = out[c];
    }
}

KERN_Q8GEMM_DRIVER(gemm_q8_0_avx2, KA, q8gemm_tile, false)
KERN_Q8GEMM_DRIVER(gemm_q4_0_avx2, KA, q8gemm_tile, true)

/* Packed GEMM on kern_pack.c's layout: a group of 8 weight rows, per block
 * QV vectors of 32 bytes (4 consecutive values of each row), the f16 scales
 * of the 8 rows after all the quants. A broadcast of 4 activation values
 * against one vector makes the 8 lanes the 8 rows' partial sums, so the
 * whole tile stays in row lanes and the reference's float chain runs per
 * lane. Loads are aligned (groups are 64-byte aligned, vectors 32). The
 * activations come re-laid by kern_matmul (kern_px): block b of the tile's
 * NX rows at one pointer with constant offsets, the scale as a float and
 * the Q4_0 offset term precomputed, so a row costs no address arithmetic
 * and no conversion per block. Every tile height 1..8 has its own
 * instantiation (accumulators in registers), so m = 8 sweeps the weights
 * once.
 *
 * Q4_0 (packed as its ggml nibbles) goes into maddubs as the unsigned
 * operand, q in 0..15: sum (q - 8) x = sum q x - 8 sum x. The int16
 * accumulator of a row starts at the -8 sum x term of its two word lanes
 * (kern_xblk.q4off), so no subtraction is left per block: every partial
 * sum, in any order the compiler picks, is a sum over some of the word's 16
 * values of either (q - 8) x or -8 x, or of q x alone (<= 16 * 15 * 127),
 * so int16 never overflows (|x| <= 127 by construction of Q8_0).
 *
 * Q8_0: ggml's sign trick, maddubs(|w|, sign(x, w)), widened by madd per
 * vector (pairs reach 2 * 128 * 127, two would overflow int16). Measured on
 * Zen 3, the alternatives cost more: int16 weights against pre-widened
 * activations (2 madd, 2 adds, 2 broadcasts per vector and row: bound by
 * loads, 0.7-0.95x), or nibble-split weights (twice the maddubs). */
/* Software prefetch (m = 1 streams every byte from DRAM): the group's
 * lines Q8P_PREFETCH bytes ahead (the layout is read at rising addresses,
 * kern_pack.c), into L1: Zen 3's best distance (docs/speed.md); 0 = no
 * prefetch. */
#ifndef Q8P_PREFETCH
#define Q8P_PREFETCH 1024
#endif

/* Pins v in a register at this point: GCC cannot reassociate an
 * accumulation across it. Unrolled, GCC otherwise turns the chain of adds
 * into a tree over all the products of a block and spills them. */
#define PIN(v) __asm__("" : "+x"(v))

KAI __m256i bcast32(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

KAI void q8p_store(int NX, int nw, float *y, size_t ys, const __m256 *acc)
{
#pragma GCC unroll 8
    for (int r = 0; r < NX; r++) {
        if (nw == 8) {
            _mm256_storeu_ps(y + r * ys, acc[r]);
        } else {
            float out[8];
            _mm256_storeu_ps(out, acc[r]);
            for (int c = 0; c < nw; c++) y[r * ys + c] = out[c];
        }
    }
}

/* One packed tile: NX rows against a group of Q4_0 (is_q4) or Q8_0 rows.
 * Per block, each row's integer sums in 8 row lanes (Q4_0: int16 pairs
 * from its q4off start, widened at the end; Q8_0: widened per vector), then
 * the reference's float step per lane. */
KAI void q8p_tile(bool is_q4, int NX, int nw, int nb, float *y, size_t ys, const uint8_t *wp, const kern_px *px)
{
    const size_t gq = is_q4 ? 128 : 256; /* bytes of one block's quants in a group */
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    const size_t rows = px->rows;
    const int8_t *xq = px->q;
    const kern_xblk *xa = px->a;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++, xq += rows * 32, xa += rows) {
        const uint8_t *g = kern_pack_quants(wp, gq, b);
        if (Q8P_PREFETCH) KERN_PACK_PREFETCH(g, gq, b, Q8P_PREFETCH, _MM_HINT_T0);
        __m256i is[8];
        if (is_q4) {
            /* Q4_0 nibbles unsigned into maddubs, int16 accumulation (see above) */
#pragma GCC unroll 8
            for (int r = 0; r < NX; r++) is[r] = _mm256_set1_epi32(xa[r].q4off);
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                __m256i pv = _mm256_load_si256((const __m256i *)(g + 32 * v));
                PIN(pv); /* one load: GCC would fold it into the and and load again for the shift */
                const __m256i lo = _mm256_and_si256(pv, m4), hi = _mm256_and_si256(_mm256_srli_epi16(pv, 4), m4);
#pragma GCC unroll 8
                for (int r = 0; r < NX; r++) {
                    is[r] = _mm256_add_epi16(is[r], _mm256_maddubs_epi16(lo, bcast32(xq + 32 * r + 4 * v)));
                    PIN(is[r]);
                    is[r] = _mm256_add_epi16(is[r], _mm256_maddubs_epi16(hi, bcast32(xq + 32 * r + 16 + 4 * v)));
                    PIN(is[r]);
                }
            }
        } else {
            /* Q8_0: ggml's sign trick, maddubs(|w|, sign(x, w)); pairs reach
             * 2 * 128 * 127, so each product vector is widened at once (madd). */
#pragma GCC unroll 8
            for (int r = 0; r < NX; r++) is[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i wv = _mm256_load_si256((const __m256i *)(g + 32 * k));
                const __m256i aw = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 8
                for (int r = 0; r < NX; r++) {
                    const __m256i pr = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast32(xq + 32 * r + 4 * k), wv));
                    is[r] = _mm256_add_epi32(is[r], _mm256_madd_epi16(pr, ones));
                    PIN(is[r]);
                }
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)kern_pack_scales(wp, gq, b)));
#pragma GCC unroll 8
        for (int r = 0; r < NX; r++) /* Q4_0's int16 pairs widened here */
            acc[r] = q8_acc8(is_q4, acc[r], is_q4 ? _mm256_madd_epi16(is[r], ones) : is[r], dw, xa[r].d);
    }
    q8p_store(NX, nw, y, ys, acc);
}

#ifndef Q8P_NX
#define Q8P_NX 8
#endif

/* kern_packed.px_row: the 32 values copied, their sums over indices 0, 1
 * and 2, 3 mod 4 (the int16 pairs of maddubs against ones, reduced as
 * int16 pairs: |sum| <= 16 * 127) times -8, and d as f32. */
static KA void px_row_avx2(int8_t *q, kern_xblk *a, size_t rows, const void *x, int n)
{
    const block_q8_0 *xb = x;
    const __m256i ones = _mm256_set1_epi8(1);
    for (int b = 0; b < n / 32; b++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)xb[b].qs);
        _mm256_storeu_si256((__m256i *)(q + (size_t)b * rows * 32), v);
        const __m256i s = _mm256_maddubs_epi16(ones, v); /* word 2i: x[4i] + x[4i+1], 2i+1: x[4i+2] + x[4i+3] */
        __m128i t = _mm_add_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        t = _mm_add_epi16(t, _mm_shuffle_epi32(t, 0x4E));
        t = _mm_add_epi16(t, _mm_shuffle_epi32(t, 0xB1));
        t = _mm_mullo_epi16(t, _mm_set1_epi16(-8));
        a[(size_t)b * rows] = (kern_xblk){_mm_cvtsi128_si32(t), f16s(xb[b].d)};
    }
}

KERN_GEMMP_DRIVER(gemmp_q4_0_avx2, KA, q8p_tile, true)
KERN_GEMMP_DRIVER(gemmp_q8_0_avx2, KA, q8p_tile, false)

/* ------------------------------------------------------------------ Q4_K */

/* The 8 six-bit scales and 8 mins of a Q4_K block (layout in blocks.h) as
 * 16 bytes sc[0..7] m[0..7], unpacked 4 at a time with 32-bit operations. */
KAI __m128i q4_K_scales_mins(const uint8_t *s12)
{
    uint32_t a, b, c;
    memcpy(&a, s12, 4);     /* sc[0..3] | top bits of sc[4..7] */
    memcpy(&b, s12 + 4, 4); /*  m[0..3] | top bits of  m[4..7] */
    memcpy(&c, s12 + 8, 4); /* low 4 bits of sc[4..7] | low 4 bits of m[4..7] << 4 */
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t sc03 = a & lo6, m03 = b & lo6;
    const uint32_t sc47 = (c & lo4) | (((a >> 6) & lo2) << 4);
    const uint32_t m47 = ((c >> 4) & lo4) | (((b >> 6) & lo2) << 4);
    return _mm_setr_epi32((int)sc03, (int)sc47, (int)m03, (int)m47);
}

/* K-quant weights stay ggml rows (not packed), read block after block and
 * row after row, so one stream per thread: each block prefetches the lines
 * of the bytes KQ_PF_BYTES further on (into the next rows at a row's end;
 * a prefetch never faults). Decode reads every byte from DRAM, and the
 * tiles' unpacking left the hardware prefetcher behind (Q6_K is the output
 * matrix of our q4_0 and llama.cpp's Q4_K_M files; docs/speed.md). */
#define KQ_PF_BYTES 2048
KAI void kq_prefetch(const void *block, size_t bytes)
{
    const uintptr_t a = (uintptr_t)block + KQ_PF_BYTES;
    for (uintptr_t l = a & ~(uintptr_t)63; l < a + bytes; l += 64) _mm_prefetch((const char *)l, _MM_HINT_T0);
}

/* dot = d*y.d * sum_j sc_j (q.y)_j - dmin*y.d * sum_j m_j (sum y)_j, where the
 * min term uses the activation's bsums (sums of 16) against each min twice. */
KAI void q4_K_tile(int NX, int nb, float *s, size_t ss, const block_q4_K *w, const uint8_t *x, size_t xs)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    /* shuffle control broadcasting int16 #j of a 128-bit lane to all 16 */
    __m256i pick[8];
    for (int j = 0; j < 8; j++) pick[j] = _mm256_set1_epi16((short)((2 * j) | ((2 * j + 1) << 8)));
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q4_K *wb = &w[b];
        kq_prefetch(wb, sizeof *wb);
        const __m128i sm = q4_K_scales_mins(wb->scales);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const __m128i mn8 = _mm_unpackhi_epi64(sm, sm);
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8)); /* m[j/2] for bsum j */
        __m256i isum[KERN_NX_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) { /* 64 elements: sub-blocks 2k (low nibbles) and 2k+1 (high) */
            const __m256i q = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * k));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i sl = _mm256_shuffle_epi8(sc16, pick[2 * k]);
            const __m256i sh = _mm256_shuffle_epi8(sc16, pick[2 * k + 1]);
#pragma GCC unroll 4
            for (int r = 0; r < NX; r++) {
                const int8_t *y = ((const block_q8_K *)(x + r * xs) + b)->qs + 64 * k;
                const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)y)), sl);
                const __m256i ph =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 32))), sh);
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(pl, ph));
            }
        }
        const float dw = f16s(wb->d), dm = f16s(wb->dmin);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            const __m256i ms = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), mins16);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
            acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dm * xb->d), _mm256_cvtepi32_ps(ms), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = hsum_ps(acc[r]);
}

/* ------------------------------------------------------------------ Q6_K */

/* The unsigned 6-bit q (0..63) of elements 128h + 32k + (0..31); see the
 * layout in blocks.h. */
KAI __m256i q6_K_load(const block_q6_K *wb, int h, int k)
{
    __m256i lo = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h + 32 * (k & 1)));
    if (k >> 1) lo = _mm256_srli_epi16(lo, 4);
    lo = _mm256_and_si256(lo, _mm256_set1_epi8(0x0F));
    __m256i hi = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h));
    hi = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * k), _mm256_set1_epi8(0x03));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
}

/* dot = d*y.d * sum_j sc_j ((q-32).y)_j; q is used unsigned in maddubs and
 * the offset comes back as 32 * sum_j sc_j * bsums_j. */
KAI void q6_K_tile(int NX, int nb, float *s, size_t ss, const block_q6_K *w, const uint8_t *x, size_t xs)
{
    /* shuffle controls: low lane broadcasts int16 #2k, high lane #2k+1 */
    __m256i pick[4];
    for (int k = 0; k < 4; k++)
        pick[k] = _mm256_setr_m128i(_mm_set1_epi16((short)((4 * k) | ((4 * k + 1) << 8))),
                                    _mm_set1_epi16((short)((4 * k + 2) | ((4 * k + 3) << 8))));
    __m256 acc[KERN_NX_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q6_K *wb = &w[b];
        kq_prefetch(wb, sizeof *wb);
        __m256i isum[KERN_NX_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i sc = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(wb->scales + 8 * h))));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i q = q6_K_load(wb, h, k);
                const __m256i scv = _mm256_shuffle_epi8(sc, pick[k]);
#pragma GCC unroll 4
                for (int r = 0; r < NX; r++) {
                    const int8_t *y = ((const block_q8_K *)(x + r * xs) + b)->qs + 128 * h + 32 * k;
                    const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, scv));
                }
            }
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales));
        const float dw = f16s(wb->d);
#pragma GCC unroll 4
        for (int r = 0; r < NX; r++) {
            const block_q8_K *xb = (const block_q8_K *)(x + r * xs) + b;
            const __m256i corr = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), sc16);
            isum[r] = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(corr, 5));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NX; r++) s[r * ss] = hsum_ps(acc[r]);
}

/* The K-quant entries: one weight row at a time (kern_impl.h's drivers);
 * an element's operations do not depend on NX. */
KERN_KGEMM_DRIVER(gemm_q4_K_avx2, KA, q4_K_tile, block_q4_K)
KERN_KGEMM_DRIVER(gemm_q6_K_avx2, KA, q6_K_tile, block_q6_K)
KERN_KDOT_DRIVER(dot_q4_K_avx2, KA, q4_K_tile, block_q4_K)
KERN_KDOT_DRIVER(dot_q6_K_avx2, KA, q6_K_tile, block_q6_K)

/* ------------------------------------------------- activation conversions */

/* One block's values times id, rounded as roundf, packed to int8. */
KAI void q8_0_block_q(int8_t *qs, const float *x, float id)
{
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvttps_epi32(round_away_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), _mm256_set1_ps(id))));
    _mm256_storeu_si256((__m256i *)qs, pack_i32x32_i8(q[0], q[1], q[2], q[3]));
}

/* Lane i = the largest of the 8 lanes of m[i] (a transposing max tree). */
KAI __m256 hmax8_ps(const __m256 *m)
{
    __m256 t[4], u[2];
    for (int i = 0; i < 4; i++) /* lanes: a02 b02 a13 b13 | a46 b46 a57 b57 for a = m[2i], b = m[2i+1] */
        t[i] = _mm256_max_ps(_mm256_unpacklo_ps(m[2 * i], m[2 * i + 1]), _mm256_unpackhi_ps(m[2 * i], m[2 * i + 1]));
    for (int i = 0; i < 2; i++) /* a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7 */
        u[i] = _mm256_max_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44), _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
    return _mm256_max_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
}

/* Same bytes as quant_q8_0_quantize_row for finite input. Eight blocks at
 * a time share the scalar steps (max, d = amax / 127, id = 1 / d, f16 of d)
 * as vector operations, which round exactly as the scalar ones; F16C
 * rounds d to the same bits as half.h's f32_to_f16 for finite d >= 0 (both
 * nearest even, subnormals included; checked over every 7th float below
 * +inf). */
static KA void conv_q8_0_avx2(void *dst, const float *src, int n)
{
    block_q8_0 *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const int nb = n / QK8_0;
    int b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256 m[8];
        for (int i = 0; i < 8; i++) {
            const float *x = src + (size_t)(b + i) * QK8_0;
            m[i] = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
            for (int k = 1; k < 4; k++) m[i] = _mm256_max_ps(m[i], _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        }
        const __m256 d = _mm256_div_ps(hmax8_ps(m), _mm256_set1_ps(127.0f));
        const __m256 id = _mm256_and_ps(_mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_OQ),
                                        _mm256_div_ps(_mm256_set1_ps(1.0f), d));
        uint16_t dh[8];
        float idf[8];
        _mm_storeu_si128((__m128i *)dh, _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
        _mm256_storeu_ps(idf, id);
        for (int i = 0; i < 8; i++) {
            y[b + i].d = dh[i];
            q8_0_block_q(y[b + i].qs, src + (size_t)(b + i) * QK8_0, idf[i]);
        }
    }
    for (; b < nb; b++) {
        const float *x = src + (size_t)b * QK8_0;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        const float d = hmax_ps(m) / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(d), _MM_FROUND_TO_NEAREST_INT), 0);
        q8_0_block_q(y[b].qs, x, id);
    }
}

/* Same bytes as quant_q8_K_quantize_row for finite input: scale from the
 * first element of largest magnitude, q = nearest-even(-127/max * x). */
static KA void conv_q8_K_avx2(void *dst, const float *src, int n)
{
    block_q8_K *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < n / QK_K; b++) {
        const float *x = src + (size_t)b * QK_K;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K / 8; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax_ps(m);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        int j = 0;
        while (j < QK_K - 1 && fabsf(x[j]) != amax) j++;
        const float iscale = -127.f / x[j];
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int g = 0; g < QK_K / 32; g++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), vs));
            _mm256_storeu_si256((__m256i *)(y[b].qs + 32 * g), pack_i32x32_i8(q[0], q[1], q[2], q[3]));
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[b].qs[16 * g + i];
            y[b].bsums[g] = (int16_t)sum;
        }
        y[b].d = 1 / iscale;
    }
}

static KA void f32_to_f16_avx2(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = f32_to_f16(src[i]);
}

static KA void f16_to_f32_avx2(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

static KA void conv_f16_avx2(void *dst, const float *src, int n) { f32_to_f16_avx2(dst, src, n); }

/* f32 -> bf16 bits in the low half of each int32 lane (as half.h). */
KAI __m256i bf16_round(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    return _mm256_blendv_epi8(r, qnan, nan);
}

static KA void conv_bf16_avx2(void *dst, const float *src, int n)
{
    uint16_t *d = dst;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i a = bf16_round(_mm256_loadu_ps(src + i)), b = bf16_round(_mm256_loadu_ps(src + i + 8));
        /* packus interleaves the lanes (a0-3 b0-3 | a4-7 b4-7); the permute restores order */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(d + i), p);
    }
    for (; i < n; i++) d[i] = f32_to_bf16(src[i]);
}

/* ------------------------------------------------------------ row kernels */

static KA float softmax_avx2(float *x, int n)
{
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    const float max = kern_softmax_max_tail(x, i, n, hmax_ps(vm));
    vm = _mm256_set1_ps(max);
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        acc_pd(e, &lo, &hi);
    }
    const double sum = kern_softmax_exp_tail(x, i, n, max, hsum_pd(_mm256_add_pd(lo, hi)));
    const float inv = (float)(1.0 / sum);
    const __m256 vi = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
    for (; i < n; i++) x[i] *= inv;
    return kern_softmax_lse(max, sum);
}

static KA void swiglu_avx2(float *a, const float *b, int n)
{
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(a + i);
        const __m256 e = expf8(_mm256_xor_ps(v, sign));
        _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_div_ps(v, _mm256_add_ps(one, e)), _mm256_loadu_ps(b + i)));
    }
    for (; i < n; i++) a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
}

static KA void exp_row_avx2(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = expf(x[i]);
}

static const kern_vtable kern_vt_avx2_table = {
    .name = "avx2",
    .gemm = {
        [DT_F32] = {gemm_f32_avx2, FG_NW, FG_NX},
        [DT_F16] = {gemm_f16_avx2, FG_NW, FG_NX},
        [DT_BF16] = {gemm_bf16_avx2, FG_NW, FG_NX},
        [DT_Q8_0] = {gemm_q8_0_avx2, 4, 2},
        [DT_Q4_0] = {gemm_q4_0_avx2, 4, 2},
        [DT_Q4_K] = {gemm_q4_K_avx2, 1, 4},
        [DT_Q6_K] = {gemm_q6_K_avx2, 1, 4},
        /* kern_avx2_quants.c */
        [DT_Q4_1] = {kern_gemm_q4_1_avx2, 1, 4},
        [DT_Q5_0] = {kern_gemm_q5_0_avx2, 1, 4},
        [DT_Q5_1] = {kern_gemm_q5_1_avx2, 1, 4},
        [DT_IQ4_NL] = {kern_gemm_iq4_nl_avx2, 1, 4},
        [DT_Q2_K] = {kern_gemm_q2_K_avx2, 1, 4},
        [DT_Q3_K] = {kern_gemm_q3_K_avx2, 1, 4},
        [DT_Q5_K] = {kern_gemm_q5_K_avx2, 1, 4},
        [DT_IQ4_XS] = {kern_gemm_iq4_xs_avx2, 1, 4},
        [DT_TQ2_0] = {kern_gemm_tq2_0_avx2, 1, 4},
        [DT_TQ1_0] = {kern_gemm_tq1_0_avx2, 1, 4}, /* kern_avx2_tq1.c */
        [DT_IQ2_XXS] = {kern_gemm_iq2_xxs_avx2, 1, 4}, /* kern_avx2_lattice.c */
        [DT_IQ2_XS] = {kern_gemm_iq2_xs_avx2, 1, 4},
        [DT_IQ2_S] = {kern_gemm_iq2_s_avx2, 1, 4},
        [DT_IQ3_XXS] = {kern_gemm_iq3_xxs_avx2, 1, 4},
        [DT_IQ3_S] = {kern_gemm_iq3_s_avx2, 1, 4},
        [DT_IQ1_S] = {kern_gemm_iq1_s_avx2, 1, 4},
        [DT_IQ1_M] = {kern_gemm_iq1_m_avx2, 1, 4},
    },
    .dot = {
        [DT_F32] = dot_f32_avx2,
        [DT_F16] = dot_f16_avx2,
        [DT_BF16] = dot_bf16_avx2,
        [DT_Q8_0] = dot_q8_0_avx2,
        [DT_Q4_0] = dot_q4_0_avx2,
        [DT_Q4_K] = dot_q4_K_avx2,
        [DT_Q6_K] = dot_q6_K_avx2,
        [DT_Q4_1] = kern_dot_q4_1_avx2,
        [DT_Q5_0] = kern_dot_q5_0_avx2,
        [DT_Q5_1] = kern_dot_q5_1_avx2,
        [DT_IQ4_NL] = kern_dot_iq4_nl_avx2,
        [DT_Q2_K] = kern_dot_q2_K_avx2,
        [DT_Q3_K] = kern_dot_q3_K_avx2,
        [DT_Q5_K] = kern_dot_q5_K_avx2,
        [DT_IQ4_XS] = kern_dot_iq4_xs_avx2,
        [DT_TQ2_0] = kern_dot_tq2_0_avx2,
        [DT_TQ1_0] = kern_dot_tq1_0_avx2,
        [DT_IQ2_XXS] = kern_dot_iq2_xxs_avx2,
        [DT_IQ2_XS] = kern_dot_iq2_xs_avx2,
        [DT_IQ2_S] = kern_dot_iq2_s_avx2,
        [DT_IQ3_XXS] = kern_dot_iq3_xxs_avx2,
        [DT_IQ3_S] = kern_dot_iq3_s_avx2,
        [DT_IQ1_S] = kern_dot_iq1_s_avx2,
        [DT_IQ1_M] = kern_dot_iq1_m_avx2,
    },
    .packed = {
        [DT_Q8_0] = {Q8P_NX, px_row_avx2, gemmp_q8_0_avx2, 1, NULL},
        [DT_Q4_0] = {Q8P_NX, px_row_avx2, gemmp_q4_0_avx2, 1, NULL},
        [DT_F16] = {4, NULL, kern_gemmp_f16_avx2, 4, kern_pxf_row_f16_avx2}, /* kern_avx2_f16p.c */
        [DT_IQ4_XS] = {4, NULL, kern_gemmp_iq4_xs_avx2, 1, NULL, kern_iq4p_to_kpack_avx2}, /* kern_avx2_iq4p.c */
        [DT_Q3_K] = {4, NULL, kern_gemmp_q3_K_avx2, 1, NULL, kern_q3p_to_kpack_avx2},    /* kern_avx2_q3kp.c */
        [DT_Q4_K] = {2, NULL, kern_gemmp_q4_K_avx2, 1, NULL, kern_q4p_to_kpack_avx2},    /* kern_avx2_q4kp.c: 2 rows a sweep (4 spill) */
    },
    /* kern_avx2_kgemm.c; Q6_K from 64 rows as in the AVX-512 table (its packing's cost) */
    .kgemm = {
        [DT_Q2_K] = {kern_kgemm_q2_K_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_Q3_K] = {kern_kgemm_q3_K_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_Q4_K] = {kern_kgemm_q4_K_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_Q5_K] = {kern_kgemm_q5_K_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_Q6_K] = {kern_kgemm_q6_K_avx2, NULL, 2 * KERN_KPACK_MIN_M},
        [DT_IQ4_XS] = {kern_kgemm_iq4_xs_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_IQ2_XXS] = {kern_kgemm_lattice_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_IQ2_XS] = {kern_kgemm_lattice_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_IQ2_S] = {kern_kgemm_lattice_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_IQ3_XXS] = {kern_kgemm_lattice_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_IQ3_S] = {kern_kgemm_lattice_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_IQ1_S] = {kern_kgemm_lattice_avx2, NULL, KERN_KPACK_MIN_M},
        [DT_IQ1_M] = {kern_kgemm_lattice_avx2, NULL, KERN_KPACK_MIN_M},
    },
    .conv = {
        [DT_F16] = conv_f16_avx2,
        [DT_BF16] = conv_bf16_avx2,
        [DT_Q8_0] = conv_q8_0_avx2,
        [DT_Q8_K] = conv_q8_K_avx2,
    },
    .rmsnorm = kern_rmsnorm_avx2,         /* kern_elem_avx2.c */
    .rope_apply = kern_rope_apply_avx2,   /* kern_elem_avx2.c */
    .add_rmsnorm = kern_add_rmsnorm_avx2, /* kern_elem_avx2.c */
    .softmax = softmax_avx2,
    .swiglu = swiglu_avx2,
    .exp_row = exp_row_avx2,
    .f32_to_f16 = f32_to_f16_avx2,
    .f16_to_f32 = f16_to_f32_avx2,
    /* rope: the reference (kv_shift only; the forward pass uses kern_rope_table + rope_apply) */
};

const kern_vtable *kern_vt_avx2(void)
{
    kern_f16_lut_init();
    return &kern_vt_avx2_table;
}

#else /* not x86 */

bool kern_cpu_has_avx2(void) { return false; }
const kern_vtable *kern_vt_avx2(void) { return NULL; }

#endif
