/* logprobs.c - log-softmax figures for logprobs; see sample.h.
 *
 * The engine asks for them once per sampled token of every request that
 * wants logprobs, on its one thread between two forward passes, so the
 * O(n_vocab) exp sum must be cheap: with libm's exp it took ~0.5 ms per
 * token at 32000 ids (7% of a 110M model's decode step). The AVX2 path
 * evaluates exp(x), x <= 0, as 2^k * e^r with k = round(x / ln 2) and
 * |r| <= ln(2) / 2, e^r by its Taylor series to r^7 (truncation below
 * 1e-8 relative), and adds the terms in double. Greedy's argmax shares
 * the vector max.
 */
#include "sample/sample.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SAMPLE_X86 1
#endif

/* Below this, exp(x) < 2e-38 against a sum >= 1: clamping keeps 2^k normal. */
#define SAMPLE_EXP_MIN (-87.0f)

#ifdef SAMPLE_X86
__attribute__((target("avx2,fma"))) static float max_avx2(const float *l, uint32_t n)
{
    __m256 m = _mm256_set1_ps(l[0]);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(l + i));
    float v[8], mx = l[0];
    _mm256_storeu_ps(v, m);
    for (int j = 0; j < 8; j++) mx = v[j] > mx ? v[j] : mx;
    for (; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    return mx;
}

__attribute__((target("avx2,fma"))) static double sum_exp_avx2(const float *l, uint32_t n, float mx)
{
    const __m256 vmx = _mm256_set1_ps(mx), lo = _mm256_set1_ps(SAMPLE_EXP_MIN);
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    const float inv_fact[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_max_ps(_mm256_sub_ps(_mm256_loadu_ps(l + i), vmx), lo);
        __m256 k = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(k, ln2_hi, x); /* ln2_hi has 9 bits: k * ln2_hi is exact */
        r = _mm256_fnmadd_ps(k, ln2_lo, r);
        __m256 p = _mm256_set1_ps(inv_fact[0]);
        for (int j = 1; j < 8; j++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(inv_fact[j]));
        __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
        __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
    }
    double s[4];
    _mm256_storeu_pd(s, _mm256_add_pd(acc0, acc1));
    double sum = (s[0] + s[1]) + (s[2] + s[3]);
    for (; i < n; i++) sum += expf(l[i] - mx);
    return sum;
}

/* The first i >= from with l[i] == v, or n. */
__attribute__((target("avx2,fma"))) static uint32_t find_avx2(const float *l, uint32_t n, float v)
{
    const __m256 vv = _mm256_set1_ps(v);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), vv, _CMP_EQ_OQ));
        if (m) return i + (uint32_t)__builtin_ctz((unsigned)m);
    }
    for (; i < n; i++)
        if (l[i] == v) return i;
    return n;
}

static bool have_avx2(void)
{
    static _Atomic int have = -1; /* the same answer whoever writes it first */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}
#endif

int32_t sample_argmax(const float *l, uint32_t n)
{
#ifdef SAMPLE_X86
    if (have_avx2()) {
        /* the max, then its first place: two vector passes (no NaN in
         * logits; if there were, the scalar scan below decides) */
        uint32_t i = find_avx2(l, n, max_avx2(l, n));
        if (i < n) return (int32_t)i;
    }
#endif
    uint32_t best = 0;
    float bv = l[0];
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > bv) { bv = l[i]; best = i; }
    return (int32_t)best;
}

double sample_logsumexp(const float *l, uint32_t n)
{
#ifdef SAMPLE_X86
    if (have_avx2()) {
        const float mx = max_avx2(l, n);
        return (double)mx + log(sum_exp_avx2(l, n, mx));
    }
#endif
    float mx = l[0];
    for (uint32_t i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += expf(l[i] - mx);
    return (double)mx + log(sum);
}

void sample_logprobs(const float *logits, uint32_t n, int32_t tok, int32_t k, float *lp, int32_t *top_ids,
                     float *top_lp, int32_t *n_top)
{
    const double lse = sample_logsumexp(logits, n);
    *lp = (float)(logits[tok] - lse);
    if (k > (int32_t)n) k = (int32_t)n;
    /* insertion into the k best so far; a newcomer must beat the last */
    int32_t m = 0;
    for (uint32_t i = 0; i < n && k > 0; i++) {
        const float l = logits[i];
        if (m == k && l <= logits[top_ids[m - 1]]) continue;
        int32_t j = m < k ? m++ : m - 1;
        while (j > 0 && logits[top_ids[j - 1]] < l) {
            top_ids[j] = top_ids[j - 1];
            j--;
        }
        top_ids[j] = (int32_t)i;
    }
    *n_top = m;
    for (int32_t i = 0; i < m; i++) top_lp[i] = (float)(logits[top_ids[i]] - lse);
}
