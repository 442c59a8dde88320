/* kern_elem_avx2.c - AVX2 elementwise kernels of the forward pass that sit
 * between the matrix products: the RoPE rotation (kern_rope_apply) and the
 * residual add fused with RMSNorm (kern_add_rmsnorm), and RMSNorm itself, so
 * that the two share one scale-and-store. kern_avx2.c's table
 * lists them; like everything there they carry target("avx2,fma,f16c") and
 * run only after kern_init saw those features.
 *
 * Numerics: both are bit for bit what the reference operations give
 * (kernels.h), so that the forward pass keeps llama.cpp's bits:
 * - rope_apply: per pair x0*c - x1*s and x0*s + x1*c with separate
 *   multiplies and one add/subtract, no FMA (the build's -std=c11 keeps the
 *   compiler from contracting them, here and in the reference). The vector
 *   form computes x0*c + x1*(-s) (equal to x0*c - x1*s: negation is exact)
 *   and x1*c + x0*s (addition commutes);
 * - add_rmsnorm: the add, then exactly kern_rmsnorm_avx2's operations:
 *   squares summed in two double lanes of 4 over blocks of 8, those
 *   reduced as hsum_pd does, then the scalar tail, so the fused call equals
 *   the add followed by kern_rmsnorm in the avx2 variant bit for bit (the
 *   tests check it). The reference variant sums in another order (as ggml:
 *   one double accumulator); the two agree within double rounding of the sum.
 */
#include "kernels/kern_impl.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* As kern_avx2.c's hsum_pd (the same reduction order). */
KAI double elem_hsum_pd(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

/* One head, pairs (2i, 2i+1): 4 pairs per vector; c, s duplicated per pair,
 * s negated in the even lanes. */
KAI void rope_head_pairs(float *p, int half, const float *cs)
{
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256 neg_even = _mm256_setr_ps(-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f);
    int i = 0;
    for (; i + 4 <= half; i += 4) {
        const __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + i)), dup);
        const __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + half + i)), dup);
        const __m256 x = _mm256_loadu_ps(p + 2 * i);
        const __m256 xs = _mm256_permute_ps(x, 0xB1); /* x1 x0 x3 x2 ... */
        const __m256 r = _mm256_add_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(xs, _mm256_xor_ps(s, neg_even)));
        _mm256_storeu_ps(p + 2 * i, r);
    }
    for (; i < half; i++) {
        const float c = cs[i], sn = cs[half + i], x0 = p[2 * i], x1 = p[2 * i + 1];
        p[2 * i] = x0 * c - x1 * sn;
        p[2 * i + 1] = x0 * sn + x1 * c;
    }
}

/* One head, pairs (i, i + half) (NeoX): 8 pairs per vector. */
KAI void rope_head_neox(float *p, int half, const float *cs)
{
    int i = 0;
    for (; i + 8 <= half; i += 8) {
        const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(cs + half + i);
        const __m256 x0 = _mm256_loadu_ps(p + i), x1 = _mm256_loadu_ps(p + half + i);
        _mm256_storeu_ps(p + i, _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(p + half + i, _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c)));
    }
    for (; i < half; i++) {
        const float c = cs[i], sn = cs[half + i], x0 = p[i], x1 = p[half + i];
        p[i] = x0 * c - x1 * sn;
        p[half + i] = x0 * sn + x1 * c;
    }
}

KA void kern_rope_apply_avx2(float *x, int n_heads, int head_dim, int rope_dim, bool neox, const float *cs)
{
    const int half = rope_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * head_dim;
        if (neox) rope_head_neox(p, half, cs);
        else rope_head_pairs(p, half, cs);
    }
}

/* The second half of both RMSNorms: y = x / sqrt(sum / n + eps) (* w),
 * given the sum of squares in double. One copy, so that the fused and the
 * plain norm cannot drift apart. */
KAI void rms_scale_store(float *y, const float *x, const float *w, int n, float eps, double sum)
{
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) y[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

/* Squares of 8 floats added into two double lanes of 4. */
KAI void acc_sq_pd(__m256 v, __m256d *lo, __m256d *hi)
{
    const __m256 sq = _mm256_mul_ps(v, v);
    *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
}

KA void kern_rmsnorm_avx2(float *y, const float *x, const float *w, int n, float eps)
{
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc_sq_pd(_mm256_loadu_ps(x + i), &lo, &hi);
    double sum = elem_hsum_pd(_mm256_add_pd(lo, hi));
    for (; i < n; i++) sum += (double)(x[i] * x[i]);
    rms_scale_store(y, x, w, n, eps, sum);
}

KA void kern_add_rmsnorm_avx2(float *x, const float *d, float *y, const float *w, int n, float eps)
{
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(d + i));
        _mm256_storeu_ps(x + i, v);
        acc_sq_pd(v, &lo, &hi);
    }
    double sum = elem_hsum_pd(_mm256_add_pd(lo, hi));
    for (; i < n; i++) {
        x[i] += d[i];
        sum += (double)(x[i] * x[i]);
    }
    rms_scale_store(y, x, w, n, eps, sum);
}

#endif
