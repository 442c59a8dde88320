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
 * On Zen 4 (the machine this was written on) 512-bit operations run as two
 * 256-bit halves, so width alone gains little; what AVX-512 brings is new
 * instructions (VNNI's vpdpbusd: u8 x s8 dot of 4 into int32 in one uop,
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
#include <string.h>

#define K5
#define K5_BF16
#define K5I static inline

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

static inline simde__m512 pl_emu_cvtph_ps(simde__m256i h)
{
    return simde_mm512_insertf32x8(simde_mm512_castps256_ps512(simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(h))),
                                   simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(h, 1)), 1);
}
#define _mm512_cvtph_ps pl_emu_cvtph_ps

#else /* the real instructions */

#if defined(__x86_64__)
#include <immintrin.h>
#define K5_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"
#define K5 __attribute__((target(K5_TARGET)))
#define K5_BF16 __attribute__((target(K5_TARGET ",avx512bf16")))
#define K5I static inline __attribute__((always_inline, target(K5_TARGET)))
#endif

#endif
#endif
