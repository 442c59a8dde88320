/* avx512_intrin.h - intrinsics and function attributes of the AVX-512 files
 * (kern_avx512*.c, attention_avx512.c).
 *
 * Normal build: <immintrin.h>; every function carries K5 (target
 * avx512f/bw/vl/dq + vnni + avx2/fma/f16c) or K5_BF16 (the same plus
 * avx512bf16) and is only called after kern_cpu_avx512() reported those
 * features. The build has no -march flags, as for AVX2.
 *
 * PL_AVX512_EMU build (tests/avx512.sh only, never the library): the same
 * sources against SIMDe's portable implementations of the AVX-512
 * intrinsics (Debian's libsimde-dev, header only), with their native names
 * (SIMDE_ENABLE_NATIVE_ALIASES). So a machine without AVX-512 (CI may get
 * one) still runs every AVX-512 kernel against the reference: correctness
 * only, the emulation is slow. Below, the few intrinsics SIMDe 0.7.4 lacks,
 * written on SIMDe's own vector types; an AVX-512 file may use only
 * intrinsics that exist in both builds (tests/avx512.sh compiles it, so a
 * missing one fails `make test`).
 *
 * On Zen 4 512-bit operations run as two 256-bit halves, so width alone
 * gains little there (Intel and Zen 5 have full-width pipes); what AVX-512
 * brings on every CPU is new instructions (VNNI's vpdpbusd: u8 x s8 dot of 4 into int32 in one uop,
 * where AVX2 needs maddubs + madd + add; BF16's vdpbf16ps; masked loads
 * and stores for tails; two-source permutes). The kernels use 256-bit
 * (VL) forms where the data is laid out for 8 lanes.
 */
#ifndef PL_KERNELS_AVX512_INTRIN_H
#define PL_KERNELS_AVX512_INTRIN_H

#if defined(__x86_64__) || defined(PL_AVX512_EMU)
#define PL_HAVE_AVX512_CODE 1
#endif

#ifdef PL_AVX512_EMU

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define K5
#define K5_BF16
/* K5I plain inline here: forcing every helper inline into SIMDe's code
 * made attention_avx512.c take 135 s to compile. K5AI forces it where the
 * tiles need their constant shapes inlined (accumulator arrays become
 * registers; GCC's maybe-uninitialized analysis relies on it too). */
#define K5I static inline
#define K5AI static inline __attribute__((always_inline))

/* ---- what SIMDe 0.7.4 does not alias (emulation build only) */
#ifndef __mmask8
typedef simde__mmask8 pl_emu_mmask8;
typedef simde__mmask16 pl_emu_mmask16;
#define __mmask8 pl_emu_mmask8
#define __mmask16 pl_emu_mmask16
#endif

static inline float pl_emu_reduce_add_ps(simde__m512 v)
{
    float f[16];
    memcpy(f, &v, sizeof f);
    /* the tree order of GCC's _mm512_reduce_add_ps: halves added pairwise */
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) f[i] += f[i + w];
    return f[0];
}
#define _mm512_reduce_add_ps pl_emu_reduce_add_ps

static inline float pl_emu_reduce_max_ps(simde__m512 v)
{
    float f[16];
    memcpy(f, &v, sizeof f);
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) f[i] = f[i] > f[i + w] ? f[i] : f[i + w];
    return f[0];
}
#define _mm512_reduce_max_ps pl_emu_reduce_max_ps

static inline int pl_emu_reduce_add_epi32(simde__m512i v)
{
    int32_t x[16];
    memcpy(x, &v, sizeof x);
    uint32_t s = 0;
    for (int i = 0; i < 16; i++) s += (uint32_t)x[i];
    return (int)s;
}
#define _mm512_reduce_add_epi32 pl_emu_reduce_add_epi32

static inline simde__m512i pl_emu_srai_epi32(simde__m512i v, int n)
{
    int32_t x[16];
    memcpy(x, &v, sizeof x);
    for (int i = 0; i < 16; i++) x[i] >>= n; /* arithmetic on GCC, as the instruction */
    memcpy(&v, x, sizeof x);
    return v;
}
#define _mm512_srai_epi32 pl_emu_srai_epi32

static inline simde__m512 pl_emu_cvtph_ps(simde__m256i h)
{
    return simde_mm512_insertf32x8(simde_mm512_castps256_ps512(simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(h))),
                                   simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(h, 1)), 1);
}
#define _mm512_cvtph_ps pl_emu_cvtph_ps

/* Masked loads and stores, lane by lane. */
static inline __m512 pl_emu_maskz_loadu_ps(__mmask16 k, const void *p)
{
    float f[16] = {0};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&f[i], (const float *)p + i, 4);
    return _mm512_loadu_ps(f);
}
#define _mm512_maskz_loadu_ps pl_emu_maskz_loadu_ps

static inline __m512 pl_emu_mask_loadu_ps(__m512 src, __mmask16 k, const void *p)
{
    float f[16];
    _mm512_storeu_ps(f, src);
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&f[i], (const float *)p + i, 4);
    return _mm512_loadu_ps(f);
}
#define _mm512_mask_loadu_ps pl_emu_mask_loadu_ps

static inline void pl_emu_mask_storeu_ps(void *p, __mmask16 k, __m512 v)
{
    float f[16];
    _mm512_storeu_ps(f, v);
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy((float *)p + i, &f[i], 4);
}
#define _mm512_mask_storeu_ps pl_emu_mask_storeu_ps

static inline void pl_emu_mask_storeu_ps8(void *p, __mmask8 k, __m256 v)
{
    float f[8];
    _mm256_storeu_ps(f, v);
    for (int i = 0; i < 8; i++)
        if (k >> i & 1) memcpy((float *)p + i, &f[i], 4);
}
#define _mm256_mask_storeu_ps pl_emu_mask_storeu_ps8

static inline __m256i pl_emu_maskz_loadu_epi16(__mmask16 k, const void *p)
{
    uint16_t h[16] = {0};
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy(&h[i], (const uint16_t *)p + i, 2);
    return _mm256_loadu_si256((const __m256i *)h);
}
#define _mm256_maskz_loadu_epi16 pl_emu_maskz_loadu_epi16

static inline void pl_emu_mask_storeu_epi16(void *p, __mmask16 k, __m256i v)
{
    uint16_t h[16];
    _mm256_storeu_si256((__m256i *)h, v);
    for (int i = 0; i < 16; i++)
        if (k >> i & 1) memcpy((uint16_t *)p + i, &h[i], 2);
}
#define _mm256_mask_storeu_epi16 pl_emu_mask_storeu_epi16

/* Conversions. */
static inline __m512d pl_emu_cvtps_pd(__m256 v)
{
    float f[8];
    double d[8];
    _mm256_storeu_ps(f, v);
    for (int i = 0; i < 8; i++) d[i] = f[i];
    return _mm512_loadu_pd(d);
}
#define _mm512_cvtps_pd pl_emu_cvtps_pd

static inline __m256i pl_emu_cvtps_ph(__m512 v, int rounding)
{
    (void)rounding; /* the kernels only round to nearest even */
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return _mm256_set_m128i(_mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT), _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
}
#define _mm512_cvtps_ph pl_emu_cvtps_ph

static inline __m512i pl_emu_cvtepi8_epi32(__m128i v)
{
    int8_t b[16];
    int32_t d[16];
    _mm_storeu_si128((__m128i *)b, v);
    for (int i = 0; i < 16; i++) d[i] = b[i];
    return _mm512_loadu_si512(d);
}
#define _mm512_cvtepi8_epi32 pl_emu_cvtepi8_epi32

/* zero extension: the sign extension's low byte */
static inline __m512i pl_emu_cvtepu8_epi32(__m128i v) { return _mm512_and_si512(pl_emu_cvtepi8_epi32(v), _mm512_set1_epi32(0xFF)); }
#define _mm512_cvtepu8_epi32 pl_emu_cvtepu8_epi32

static inline __m512i pl_emu_cvtepu16_epi32(__m256i v)
{
    uint16_t h[16];
    int32_t d[16];
    _mm256_storeu_si256((__m256i *)h, v);
    for (int i = 0; i < 16; i++) d[i] = h[i];
    return _mm512_loadu_si512(d);
}
#define _mm512_cvtepu16_epi32 pl_emu_cvtepu16_epi32

static inline __m512 pl_emu_cvtepi32_ps(__m512i v)
{
    int32_t d[16];
    float f[16];
    _mm512_storeu_si512(d, v);
    for (int i = 0; i < 16; i++) f[i] = (float)d[i];
    return _mm512_loadu_ps(f);
}
#define _mm512_cvtepi32_ps pl_emu_cvtepi32_ps

/* SIMDe's vscalefps forms 2^n as a float first, which overflows at n = 128
 * (an exp of x in (88.38, 88.72] gave inf); the instruction does not. */
static inline __m512 pl_emu_scalef_ps(__m512 a, __m512 b)
{
    float fa[16], fb[16];
    _mm512_storeu_ps(fa, a);
    _mm512_storeu_ps(fb, b);
    for (int i = 0; i < 16; i++)
        fa[i] = isnan(fb[i]) ? fb[i] : ldexpf(fa[i], (int)fmaxf(fminf(floorf(fb[i]), 1000.0f), -1000.0f));
    return _mm512_loadu_ps(fa);
}
#undef _mm512_scalef_ps
#define _mm512_scalef_ps pl_emu_scalef_ps

#else /* the real instructions */

#if defined(__x86_64__)
#include <immintrin.h>
#define K5_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"
#define K5 __attribute__((target(K5_TARGET)))
#define K5_BF16 __attribute__((target(K5_TARGET ",avx512bf16")))
#define K5I static inline __attribute__((always_inline, target(K5_TARGET)))
#define K5AI K5I
#endif

#endif

#ifdef PL_HAVE_AVX512_CODE
#include <stdint.h>
#include <string.h>

/* 4 bytes at p broadcast to the 8 int32 lanes of a ymm: the activation
 * operand of the tiles on weights packed 8 rows a group. */
K5AI __m256i k5_bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The key tiles' 16 x 8 transpose of dwords (attention's q8_0 and fp8
 * keys: lanes over 16 keys). z[p] holds key K5_TR_KEY(p) in its low 256
 * bits and key K5_TR_KEY(p) + 4 in its high ones, 8 dwords each (keys (p,
 * p + 4) for p < 4, (p + 4, p + 8) after: then one 128-bit lane shuffle
 * per output leaves the keys in order); t[j] lane kk = dword j of key kk.
 * z is overwritten. */
#define K5_TR_KEY(p) ((p) < 4 ? (p) : (p) + 4)
K5AI void k5_transpose16x8_epi32(__m512i *z, __m512i *t)
{
    __m512i u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* pairs of keys: dwords 4h, 4h+1 | 4h+2, 4h+3 */
        u[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
        u[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) { /* quads of keys: z[4h..4h+3]'s keys, dword j (lanes 0, 2) and j + 4 (lanes 1, 3) */
        z[4 * h] = _mm512_unpacklo_epi64(u[4 * h], u[4 * h + 2]);
        z[4 * h + 1] = _mm512_unpackhi_epi64(u[4 * h], u[4 * h + 2]);
        z[4 * h + 2] = _mm512_unpacklo_epi64(u[4 * h + 1], u[4 * h + 3]);
        z[4 * h + 3] = _mm512_unpackhi_epi64(u[4 * h + 1], u[4 * h + 3]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_i32x4(z[j], z[4 + j], 0x88);
        t[j + 4] = _mm512_shuffle_i32x4(z[j], z[4 + j], 0xDD);
    }
}
#endif
#endif
