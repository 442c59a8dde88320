/* kern_avx512_elem.c - AVX-512 row kernels between the matrix products:
 * rmsnorm, add_rmsnorm, rope_apply, softmax, swiglu, exp_row and the f16
 * row conversions (the AVX2 variant's are kern_elem_avx2.c and the end of
 * kern_avx2.c). 16 float lanes, and the tail of a row (n % 16 elements) in
 * the same vector code under a mask instead of a scalar loop.
 *
 * Zen 4 runs a 512-bit operation as two 256-bit halves, so on data that is
 * already in L1/L2 the gain over AVX2 is in instruction count (half the
 * loop trips, masked tails, vscalefps for 2^n in expf, vpermps for RoPE's
 * duplication of cos/sin), and for the double sums of squares in latency
 * (four chains of 8 double lanes instead of two of 4).
 *
 * Numerics, relative to the reference (kern_ref.c, kernels.h):
 * - rope_apply: bit for bit kern_rope (as the AVX2 one): per pair x0*c -
 *   x1*s and x0*s + x1*c as separate multiplies and one add (computed as
 *   x0*c + x1*(-s) and x1*c + x0*s, the same values), no FMA (-std=c11
 *   keeps the compiler from contracting);
 * - rmsnorm: squares in float, summed in double in 4 accumulators of 8
 *   lanes (element i in accumulator (i / 8) % 4 while i < n - n % 32, then
 *   the last 16-block and the masked tail in accumulators 0/1), reduced
 *   by a fixed tree (sum_pd8); the reference sums in one double: the two
 *   agree within double rounding of the sum. add_rmsnorm is the add then
 *   the very same operations (one function), so the fused call equals the
 *   add followed by this rmsnorm bit for bit (test_kernels_elem);
 * - softmax, swiglu, exp_row: expf16 (kern_avx512_exp.h, shared with
 *   attention_avx512.c's softmax), the AVX2 variant's expf8
 *   polynomial (~1-2 ulp of libm) with the 2^n scaling done by vscalefps;
 *   every element (the tail too) goes through it, so unlike the AVX2
 *   variant no element takes libm's expf; softmax's sum in double as the
 *   reference, in two accumulators of 8 lanes;
 * - f32_to_f16 / f16_to_f32: the hardware conversion with round to nearest
 *   even: the same bits as half.h (NaN stays NaN).
 *
 * Everything is inside PL_HAVE_AVX512_CODE and carries K5 (avx512_intrin.h);
 * in the emulation build (tests/avx512.sh) the intrinsics SIMDe 0.7.4 lacks
 * are shimmed at the top of the file.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <math.h>
#include <stdint.h>


/* Lanes 0..r-1 of a 16-lane mask (0 <= r <= 16). */
K5I __mmask16 lanes16(int r) { return (__mmask16)((1u << r) - 1); }

#include "kernels/kern_avx512_exp.h"

/* ------------------------------------------------------------------ rope */

/* The heads are the inner loop: cos/sin of a block of pairs are loaded
 * (and for llama pairs duplicated) once for all heads (measured: per head,
 * the two vpermps made the pairs case slower than AVX2's). */

/* Pairs (2i, 2i+1): 8 pairs per vector, cos/sin duplicated per pair by
 * vpermps, sin negated in the even lanes; r (<= 8) pairs from pair i. */
K5I void rope_pairs8(float *x, int n_heads, int head_dim, int i, int r, int half, const float *cs)
{
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512 neg_even = _mm512_castsi512_ps(_mm512_set1_epi64((long long)0x0000000080000000ull));
    const __mmask16 kc = lanes16(r), kx = lanes16(2 * r);
    const __m512 c = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(kc, cs + i));
    const __m512 s = _mm512_xor_ps(_mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(kc, cs + half + i)), neg_even);
    for (int h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * head_dim + 2 * i;
        const __m512 v = r == 8 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(kx, p);
        const __m512 vs = _mm512_shuffle_ps(v, v, 0xB1); /* x1 x0 x3 x2 ... */
        const __m512 y = _mm512_add_ps(_mm512_mul_ps(v, c), _mm512_mul_ps(vs, s));
        if (r == 8) _mm512_storeu_ps(p, y);
        else _mm512_mask_storeu_ps(p, kx, y);
    }
}

/* Pairs (i, i + half) (NeoX): 16 pairs per vector; r (<= 16) from pair i. */
K5I void rope_neox16(float *x, int n_heads, int head_dim, int i, int r, int half, const float *cs)
{
    const __mmask16 k = lanes16(r);
    const __m512 c = _mm512_maskz_loadu_ps(k, cs + i), s = _mm512_maskz_loadu_ps(k, cs + half + i);
    for (int h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * head_dim + i;
        const __m512 x0 = _mm512_maskz_loadu_ps(k, p), x1 = _mm512_maskz_loadu_ps(k, p + half);
        _mm512_mask_storeu_ps(p, k, _mm512_sub_ps(_mm512_mul_ps(x0, c), _mm512_mul_ps(x1, s)));
        _mm512_mask_storeu_ps(p + half, k, _mm512_add_ps(_mm512_mul_ps(x0, s), _mm512_mul_ps(x1, c)));
    }
}

static K5 void rope_apply_avx512(float *x, int n_heads, int head_dim, int rope_dim, bool neox, const float *cs)
{
    const int half = rope_dim / 2;
    if (neox) {
        for (int i = 0; i < half; i += 16) rope_neox16(x, n_heads, head_dim, i, half - i < 16 ? half - i : 16, half, cs);
    } else {
        int i = 0;
        for (; i + 8 <= half; i += 8) rope_pairs8(x, n_heads, head_dim, i, 8, half, cs);
        if (i < half) rope_pairs8(x, n_heads, head_dim, i, half - i, half, cs);
    }
}

/* --------------------------------------------------------------- rmsnorm */

/* Squares of v into double accumulators a (lanes 0-7) and b (8-15). */
K5I void acc_sq(__m512 v, __m512d *a, __m512d *b) { acc16_pd(_mm512_mul_ps(v, v), a, b); }

/* The sum of squares of both norms, as doubles (the order in the header);
 * with d, first x[i] += d[i] (stored), the squares of the sums. One
 * function for both, so that the fused norm cannot drift from the plain. */
K5I double sumsq(float *xw, const float *x, const float *d, int n)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        if (d) {
            v0 = _mm512_add_ps(v0, _mm512_loadu_ps(d + i));
            v1 = _mm512_add_ps(v1, _mm512_loadu_ps(d + i + 16));
            _mm512_storeu_ps(xw + i, v0);
            _mm512_storeu_ps(xw + i + 16, v1);
        }
        acc_sq(v0, &a0, &a1);
        acc_sq(v1, &a2, &a3);
    }
    for (; i < n; i += 16) { /* zero lanes past n add +0: no change */
        const __mmask16 k = lanes16(n - i < 16 ? n - i : 16);
        __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        if (d) {
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, d + i));
            _mm512_mask_storeu_ps(xw + i, k, v);
        }
        acc_sq(v, &a0, &a1);
    }
    return sum_pd8(_mm512_add_pd(_mm512_add_pd(a0, a2), _mm512_add_pd(a1, a3)));
}

/* y = x / sqrt(sum / n + eps) (* w): the reference's (x * scale) * w. */
K5I void rms_scale_store(float *y, const float *x, const float *w, int n, float eps, double sum)
{
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m512 vs = _mm512_set1_ps(scale);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
        if (w) v = _mm512_mul_ps(v, _mm512_loadu_ps(w + i));
        _mm512_storeu_ps(y + i, v);
    }
    if (i < n) {
        const __mmask16 k = lanes16(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vs);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + i));
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

static K5 void rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps)
{
    rms_scale_store(y, x, w, n, eps, sumsq(NULL, x, NULL, n));
}

static K5 void add_rmsnorm_avx512(float *x, const float *d, float *y, const float *w, int n, float eps)
{
    rms_scale_store(y, x, w, n, eps, sumsq(x, x, d, n));
}

/* ---------------------------------------------- softmax, swiglu, exp_row */

static K5 float softmax_avx512(float *x, int n)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vm = ninf;
    int i = 0;
    for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + i));
    if (i < n) vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(ninf, lanes16(n - i), x + i));
    const float max = _mm512_reduce_max_ps(vm);
    vm = _mm512_set1_ps(max);
    __m512d lo = _mm512_setzero_pd(), hi = lo;
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512 e = expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(x + i, e);
        acc16_pd(e, &lo, &hi);
    }
    if (i < n) {
        const __mmask16 k = lanes16(n - i);
        const __m512 e = _mm512_maskz_mov_ps(k, expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
        _mm512_mask_storeu_ps(x + i, k, e);
        acc16_pd(e, &lo, &hi);
    }
    const double sum = sum_pd8(_mm512_add_pd(lo, hi));
    const __m512 vi = _mm512_set1_ps((float)(1.0 / sum));
    for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vi));
    if (i < n) {
        const __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vi));
    }
    return kern_softmax_lse(max, sum);
}

/* a / (1 + e^-a) * b on 16 lanes (the reference's operations, expf16). */
K5I __m512 swiglu16(__m512 a, __m512 b)
{
    const __m512 e = expf16(_mm512_xor_ps(a, _mm512_set1_ps(-0.0f)));
    return _mm512_mul_ps(_mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), b);
}

static K5 void swiglu_avx512(float *a, const float *b, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(a + i, swiglu16(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    if (i < n) {
        const __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(a + i, k, swiglu16(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i)));
    }
}

static K5 void exp_row_avx512(float *y, const float *x, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, expf16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(y + i, k, expf16(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

/* ------------------------------------------------------------- f16 rows */

static K5 void f32_to_f16_avx512(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        const __mmask16 k = lanes16(n - i);
        _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

static K5 void f16_to_f32_avx512(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n) {
        const __mmask16 k = lanes16(n - i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src + i)));
    }
}

void kern_avx512_fill_elem(kern_vtable *t)
{
    t->rmsnorm = rmsnorm_avx512;
    t->add_rmsnorm = add_rmsnorm_avx512;
    t->rope_apply = rope_apply_avx512;
    t->softmax = softmax_avx512;
    t->swiglu = swiglu_avx512;
    t->exp_row = exp_row_avx512;
    t->f32_to_f16 = f32_to_f16_avx512;
    t->f16_to_f32 = f16_to_f32_avx512;
}

#else

void kern_avx512_fill_elem(kern_vtable *t) { (void)t; }

#endif
