/* kern_avx512_exp.h - the AVX-512 expf and double sums shared by the row
 * kernels (kern_avx512_elem.c: softmax, swiglu, exp_row, rmsnorm) and the
 * attention's softmax (attention_avx512.c), so that both compute a
 * softmax with the very same operations. Static inline K5I functions,
 * empty where PL_HAVE_AVX512_CODE is not defined (arm64).
 */
#ifndef PL_KERNELS_KERN_AVX512_EXP_H
#define PL_KERNELS_KERN_AVX512_EXP_H

#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

/* Lanes 8..15 of v as a 256-bit vector (vextractf64x4: AVX512F only). */
K5I __m256 hi256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

/* The 8 double lanes of v summed as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)):
 * halves added, then kern_avx2.c's hsum_pd order on the 4 left. */
K5I double sum_pd8(__m512d v)
{
    const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1));
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

/* The 16 floats of v (already squared, or weights) added as doubles into
 * lo (lanes 0-7) and hi (lanes 8-15). */
K5I void acc16_pd(__m512 v, __m512d *lo, __m512d *hi)
{
    *lo = _mm512_add_pd(*lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    *hi = _mm512_add_pd(*hi, _mm512_cvtps_pd(hi256(v)));
}

/* expf on 16 lanes: kern_avx2.c's expf8 (Cody-Waite reduction, Cephes'
 * degree-6 polynomial, inputs clamped to [-104, 89], NaN kept by min/max
 * returning their second operand), with p x 2^n in one vscalefps, which
 * rounds once also for subnormal results (expf8 multiplies by two
 * exact halves of 2^n for the same effect). */
K5I __m512 expf16(__m512 x)
{
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

#endif /* PL_HAVE_AVX512_CODE */

#endif
