/* stream_probe.h - the roofline a decode matmul is held to: threads reading
 * the same bytes as the kernel, with nothing to compute, just before each
 * timed pass (bench_matmul_stream.c, bench_matmul_layers.c).
 *
 * A shared host's memory bandwidth swings 2x within seconds, so a kernel's
 * GB/s alone compares nothing; its ratio to a read of the same bytes taken
 * a moment before does. Each thread reads one contiguous share (whole
 * 128-byte steps; AVX2 loads on x86-64, as `pagellm bench speed`'s probe),
 * once with plain loads and once with the lines 8 KiB ahead prefetched into
 * L2 (the faster on some CPUs, as fast on others: bench/bench_speed.c); the
 * probe is the faster of the two. The buffer must be 32-byte aligned.
 * Header-only.
 */
#ifndef PL_BENCH_STREAM_PROBE_H
#define PL_BENCH_STREAM_PROBE_H

#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/threadpool.h"
#include "kernels/kern_impl.h"
#include "micro.h"

typedef struct {
    const uint8_t *p; /* the bytes read, 32-byte aligned */
    size_t n;
    int pf;           /* prefetch distance, bytes into L2; 0 = plain loads */
    uint64_t sum[2];  /* two threads' sums, kept so that the loads stay */
} stream_probe;

/* Plain 8-byte loads (no prefetch): CPUs without AVX2. */
static inline void stream_probe_job_plain(void *arg, int ith, int nth)
{
    stream_probe *s = arg;
    const size_t per = s->n / (size_t)nth / 128 * 128;
    const uint64_t *p = (const uint64_t *)(s->p + per * (size_t)ith);
    uint64_t sum = 0;
    for (size_t i = 0; i < per / 8; i++) sum += p[i];
    if (ith < 2) s->sum[ith] = sum;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static inline void stream_probe_job_avx2(void *arg, int ith, int nth)
{
    stream_probe *s = arg;
    const size_t per = s->n / (size_t)nth / 128 * 128;
    const uint8_t *p = s->p + per * (size_t)ith;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < per; i += 128) {
        if (s->pf) {
            _mm_prefetch((const char *)p + i + s->pf, _MM_HINT_T1);
            _mm_prefetch((const char *)p + i + s->pf + 64, _MM_HINT_T1);
        }
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    if (ith < 2) s->sum[ith] = v[0] + v[1] + v[2] + v[3];
}
#endif

/* Seconds of the faster probe read of sp's bytes on tp's threads: plain
 * loads, then with the prefetch (the same twice without AVX2). */
static inline double stream_probe_seconds(threadpool *tp, stream_probe *sp)
{
    double best = 0;
    for (int k = 0; k < 2; k++) {
        sp->pf = k ? 8192 : 0;
        const double a = micro_wall_s();
#if defined(__x86_64__)
        tp_run(tp, kern_cpu_has_avx2() ? stream_probe_job_avx2 : stream_probe_job_plain, sp);
#else
        tp_run(tp, stream_probe_job_plain, sp);
#endif
        const double t = micro_wall_s() - a;
        best = k == 0 || t < best ? t : best;
    }
    return best;
}

#endif
