/* fma_peak.c - see fma_peak.h. */
#include "fma_peak.h"

#include <assert.h>
#include <pthread.h>
#include <time.h>

enum { CHAINS = 12, ITERS = 20000000, MAX_THREADS = 64 };

static const char *const kind_names[FMA_KIND_COUNT] = {"f32 fma zmm", "f32 fma ymm", "int8 dpbusd zmm",
                                                       "int8 maddubs ymm"};
static const int kind_macs[FMA_KIND_COUNT] = {16, 8, 64, 32};

const char *fma_kind_name(fma_kind k) { return k < FMA_KIND_COUNT ? kind_names[k] : "?"; }
int fma_kind_macs(fma_kind k) { return k < FMA_KIND_COUNT ? kind_macs[k] : 0; }

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
#include <immintrin.h>

bool fma_kind_runs(fma_kind k)
{
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    switch (k) {
    case FMA_F32_ZMM: return avx2 && __builtin_cpu_supports("avx512f");
    case FMA_F32_YMM: return avx2;
    case FMA_I8_DPBUSD: return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
    case FMA_I8_MADDUBS: return avx2;
    default: return false;
    }
}

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

/* The AVX2 int8 dot of the kernels, one triple on a named sum (asm for the
 * same reason as DPBUSD): 32 u8 x s8 products, pairs summed to int16, pairs
 * of those to int32, added to the sum. */
#define MADDUBS(x) \
    __asm__("vpmaddubsw %2, %1, %%ymm15\n\tvpmaddwd %3, %%ymm15, %%ymm15\n\tvpaddd %%ymm15, %0, %0" \
            : "+x"(x) : "x"(u), "x"(s8), "x"(one) : "xmm15")

__attribute__((target("avx2"))) static float chains_maddubs(void)
{
    const __m256i u = _mm256_set1_epi8(3), s8 = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0,
            a9 = a0, a10 = a0, a11 = a0;
    for (long i = 0; i < ITERS / 3; i++) {
        MADDUBS(a0); MADDUBS(a1); MADDUBS(a2); MADDUBS(a3); MADDUBS(a4); MADDUBS(a5);
        MADDUBS(a6); MADDUBS(a7); MADDUBS(a8); MADDUBS(a9); MADDUBS(a10); MADDUBS(a11);
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                       _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    const __m256i t = _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11));
    const __m256i r = _mm256_add_epi32(s, t);
    return (float)(_mm256_extract_epi32(r, 0) + _mm256_extract_epi32(r, 7));
}

/* Iterations of a kind's loop: the triple's loop runs a third as many. */
static long kind_iters(fma_kind k) { return k == FMA_I8_MADDUBS ? ITERS / 3 : ITERS; }

static float run_kind(fma_kind k)
{
    switch (k) {
    case FMA_F32_ZMM: return chains_zmm();
    case FMA_F32_YMM: return chains_ymm();
    case FMA_I8_DPBUSD: return chains_dpbusd();
    default: return chains_maddubs();
    }
}

#else

bool fma_kind_runs(fma_kind k)
{
    (void)k;
    return false;
}
static long kind_iters(fma_kind k)
{
    (void)k;
    return 0;
}
static float run_kind(fma_kind k)
{
    (void)k;
    return 0;
}

#endif

/* A round's threads wait for one start signal, so that they run together. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool go;
} start_gate;

typedef struct {
    fma_kind k;
    start_gate *gate;
    volatile float sink;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    pthread_mutex_lock(&w->gate->mu);
    while (!w->gate->go) pthread_cond_wait(&w->gate->cv, &w->gate->mu);
    pthread_mutex_unlock(&w->gate->mu);
    w->sink = run_kind(w->k);
    return NULL;
}

/* Wall seconds of one round: nth threads released together, until the last
 * is joined. -1 when a thread cannot start (those started still run and
 * are joined). */
static double round_s(fma_kind k, int nth)
{
    pthread_t tid[MAX_THREADS];
    worker w[MAX_THREADS];
    start_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    int started = 0;
    for (; started < nth; started++) {
        w[started] = (worker){.k = k, .gate = &gate};
        if (pthread_create(&tid[started], NULL, work, &w[started]) != 0) break;
    }
    const double t0 = wall_s();
    pthread_mutex_lock(&gate.mu);
    gate.go = true;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    const double t = wall_s() - t0;
    return started == nth ? t : -1;
}

int fma_peak_measure(fma_kind k, int nth, int rounds, double *instr_per_s_thread, double *macs_per_s)
{
    if (k >= FMA_KIND_COUNT || nth < 1 || nth > MAX_THREADS || rounds < 1 || !fma_kind_runs(k)) return -1;
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        const double t = round_s(k, nth);
        if (t <= 0) return -1;
        best = t < best ? t : best;
    }
    const double instr = (double)kind_iters(k) * CHAINS;
    if (instr_per_s_thread) *instr_per_s_thread = instr / best;
    if (macs_per_s) *macs_per_s = instr * kind_macs[k] * nth / best;
    return 0;
}

int fma_peak_kernels(int nth, double *f32_macs_per_s, double *i8_macs_per_s, fma_kind *f32_kind, fma_kind *i8_kind)
{
    const fma_kind f = fma_kind_runs(FMA_F32_ZMM) ? FMA_F32_ZMM : FMA_F32_YMM;
    const fma_kind i = fma_kind_runs(FMA_I8_DPBUSD) ? FMA_I8_DPBUSD : FMA_I8_MADDUBS;
    if (fma_peak_measure(f, nth, 3, NULL, f32_macs_per_s) != 0 || fma_peak_measure(i, nth, 3, NULL, i8_macs_per_s) != 0)
        return -1;
    if (f32_kind) *f32_kind = f;
    if (i8_kind) *i8_kind = i;
    return 0;
}
