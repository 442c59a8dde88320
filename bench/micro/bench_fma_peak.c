/* bench_fma_peak.c - the multiply-add peak of this CPU's vector units: the
 * rate no attention kernel's arithmetic can beat, from which
 * docs/long-context.md ("The compute floor at depth") bounds a decode step.
 *
 *   bench_fma_peak [THREADS]     (x86-64; THREADS 1..64, default 1)
 *
 * Each thread runs 12 independent chains of one instruction (more than an
 * FMA unit's latency times its throughput on any x86 CPU, so no chain
 * waits) for REPS iterations; a round's time is its wall clock, the best of
 * ROUNDS rounds is kept. One line a kind the CPU runs:
 *   KIND: G instr/s a thread, G multiply-adds/s a thread, G multiply-adds/s over THREADS threads
 * KIND: f32 fma zmm (16 multiply-adds), f32 fma ymm (8), int8 dpbusd zmm
 * (64: four u8 x s8 products summed into each of 16 dwords).
 */
#include <assert.h>
#include <stdbool.h>
#include <stdio.h>

#include "micro.h"

#if defined(__x86_64__)
#include <immintrin.h>

static const char *const prog = "bench_fma_peak";
static const char *const usage = "[THREADS]";

enum { CHAINS = 12, ITERS = 20000000, ROUNDS = 5 };

typedef enum { K_ZMM, K_YMM, K_DPBUSD } kind;

typedef struct {
    kind k;
    volatile float sink[64];
} job_arg;

__attribute__((target("avx512f"))) static float chains_zmm(void)
{
    const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a[CHAINS];
    for (int j = 0; j < CHAINS; j++) a[j] = _mm512_set1_ps(1.0f + (float)j);
    for (long i = 0; i < ITERS; i++) {
#pragma GCC unroll 12
        for (int j = 0; j < CHAINS; j++) a[j] = _mm512_fmadd_ps(a[j], m, c);
    }
    __m512 s = a[0];
    for (int j = 1; j < CHAINS; j++) s = _mm512_add_ps(s, a[j]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float chains_ymm(void)
{
    const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a[CHAINS];
    for (int j = 0; j < CHAINS; j++) a[j] = _mm256_set1_ps(1.0f + (float)j);
    for (long i = 0; i < ITERS; i++) {
#pragma GCC unroll 12
        for (int j = 0; j < CHAINS; j++) a[j] = _mm256_fmadd_ps(a[j], m, c);
    }
    __m256 s = a[0];
    for (int j = 1; j < CHAINS; j++) s = _mm256_add_ps(s, a[j]);
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[7];
}

/* One vpdpbusd on a named sum: the intrinsic makes GCC copy each sum out
 * and back, and an array of sums under asm lives in memory. */
#define DPBUSD(x) __asm__("vpdpbusd %2, %1, %0" : "+v"(x) : "v"(u), "v"(s8))

__attribute__((target("avx512f,avx512vnni"))) static float chains_dpbusd(void)
{
    const __m512i u = _mm512_set1_epi8(3), s8 = _mm512_set1_epi8(-2);
    __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0,
            a10 = a0, a11 = a0;
    static_assert(CHAINS == 12, "twelve named sums");
    for (long i = 0; i < ITERS; i++) {
        DPBUSD(a0); DPBUSD(a1); DPBUSD(a2); DPBUSD(a3); DPBUSD(a4); DPBUSD(a5);
        DPBUSD(a6); DPBUSD(a7); DPBUSD(a8); DPBUSD(a9); DPBUSD(a10); DPBUSD(a11);
    }
    const __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    const __m512i t = _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11));
    return (float)_mm512_reduce_add_epi32(_mm512_add_epi32(s, t));
}

static void job(void *arg, int ith, int nth)
{
    (void)nth;
    job_arg *a = arg;
    a->sink[ith % 64] = a->k == K_ZMM ? chains_zmm() : a->k == K_YMM ? chains_ymm() : chains_dpbusd();
}

/* Whether this CPU runs kind k. */
static bool runs(kind k)
{
    switch (k) {
    case K_ZMM: return __builtin_cpu_supports("avx512f");
    case K_YMM: return true; /* main checked AVX2 and FMA */
    case K_DPBUSD: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
    }
    return false;
}

/* Best wall seconds of ROUNDS rounds of every thread of tp running kind k. */
static double best_round(threadpool *tp, kind k)
{
    job_arg a = {.k = k};
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        const double t0 = micro_wall_s();
        tp_run(tp, job, &a);
        const double t = micro_wall_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"THREADS"};
    const int rc = micro_args_count(prog, usage, argc, argv, names, 0, 1);
    if (rc) return rc > 0 ? 0 : 2;
    int nth = 1;
    if (argc > 1 && micro_arg_int(prog, "THREADS", argv[1], 1, 64, &nth) != 0) return 2;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        fprintf(stderr, "%s: this CPU has no AVX2 with FMA\n", prog);
        return 2;
    }
    threadpool *one = micro_pool_new(prog, 1), *all = micro_pool_new(prog, nth);
    if (!one || !all) {
        tp_free(one), tp_free(all);
        return 1;
    }
    static const struct {
        kind k;
        const char *name;
        int macs;
    } kinds[] = {{K_ZMM, "f32 fma zmm", 16}, {K_YMM, "f32 fma ymm", 8}, {K_DPBUSD, "int8 dpbusd zmm", 64}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (!runs(kinds[i].k)) continue;
        const double instr = (double)ITERS * CHAINS;
        const double t1 = best_round(one, kinds[i].k), tn = best_round(all, kinds[i].k);
        printf("%s: %.2f G instr/s a thread, %.1f G multiply-adds/s a thread, %.1f G multiply-adds/s over %d threads\n",
               kinds[i].name, instr / t1 * 1e-9, instr * kinds[i].macs / t1 * 1e-9,
               instr * kinds[i].macs * nth / tn * 1e-9, nth);
    }
    tp_free(one), tp_free(all);
    return 0;
}

#else

int main(void)
{
    fprintf(stderr, "bench_fma_peak: x86-64 only\n");
    return 2;
}

#endif
