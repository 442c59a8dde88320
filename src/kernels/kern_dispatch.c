/* kern_dispatch.c - chooses the kernel variant and forwards the public entry
 * points (kernels.h) to it.
 *
 * kern_vt starts as a copy of the reference table; kern_init overlays the
 * non-NULL entries of the best supported SIMD variant. The entry points
 * initialize lazily (pthread_once) so that callers who never call kern_init
 * still get the best variant. kern_init itself is meant for program start or
 * tests: it rewrites the table and must not race with kernel calls.
 */
#include "kernels/kernels.h"
#include "kernels/kern_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>

kern_vtable kern_vt;
int kern_pf_stream; /* kern_impl.h */
int kern_attn_bcast_embedded; /* kern_impl.h */
static _Atomic int kern_ready;
static pthread_once_t kern_once = PTHREAD_ONCE_INIT;

void kern_vt_overlay(kern_vtable *dst, const kern_vtable *v)
{
    for (int t = 0; t < DT_COUNT; t++) {
        if (v->gemm[t].fn) dst->gemm[t] = v->gemm[t];
        if (v->dot[t]) dst->dot[t] = v->dot[t];
        if (v->packed[t].gemm) dst->packed[t] = v->packed[t];
        if (v->kgemm[t].gemm) dst->kgemm[t] = v->kgemm[t];
        if (v->conv[t]) dst->conv[t] = v->conv[t];
    }
#define KERN_TAKE(f) if (v->f) dst->f = v->f
    KERN_TAKE(rmsnorm);
    KERN_TAKE(rope);
    KERN_TAKE(rope_apply);
    KERN_TAKE(add_rmsnorm);
    KERN_TAKE(softmax);
    KERN_TAKE(swiglu);
    KERN_TAKE(exp_row);
    KERN_TAKE(f32_to_f16);
    KERN_TAKE(f16_to_f32);
#undef KERN_TAKE
    dst->name = v->name;
}

/* PAGELLM_KERNELS caps the variant: "ref", "avx2" or "avx512" (the best
 * the CPU has up to that one; unset or "auto": the best). For A/B runs of
 * one binary; an unknown value is reported and ignored. Returns the cap as
 * 0 = ref, 1 = avx2 (or neon), 2 = avx512. */
static int kern_cap_from_env(void)
{
    const char *e = getenv("PAGELLM_KERNELS");
    if (!e || !*e || !strcmp(e, "auto")) return 2;
    if (!strcmp(e, "ref")) return 0;
    if (!strcmp(e, "avx2") || !strcmp(e, "neon")) return 1;
    if (!strcmp(e, "avx512")) return 2;
    fprintf(stderr, "pagellm: PAGELLM_KERNELS=%s is not one of auto, ref, avx2, neon, avx512: ignored\n", e);
    return 2;
}

/* The CPU family (CPUID leaf 1: base family, plus the extended one when
 * the base is 15) of an AMD CPU (CPUID's vendor string), 0 for any other
 * vendor. Zen 4 is 0x19: its hardware prefetcher streams decode's weights
 * best alone (kern_impl.h) and it runs a 512-bit operation as two 256-bit
 * halves. Zen 5 is 0x1A: full 512-bit pipes, and its decode tiles want a
 * software prefetch 16 KiB ahead (kern_impl.h). */
#define KERN_AMD_ZEN5 0x1A
static unsigned kern_cpu_amd_family(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
    char v[13];
    memcpy(v, &b, 4), memcpy(v + 4, &d, 4), memcpy(v + 8, &c, 4);
    v[12] = 0;
    if (strcmp(v, "AuthenticAMD") != 0) return 0;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    const unsigned base = (a >> 8) & 0xF;
    return base == 0xF ? base + ((a >> 20) & 0xFF) : base;
#else
    return 0;
#endif
}

/* The decode tiles' distance on Zen 5 (kern_impl.h). */
#define KERN_PF_STREAM_ZEN5 16384

/* cpu (this CPU's distance, kern_impl.h), or PAGELLM_PREFETCH's: "auto"
 * (or unset), "none", or bytes ahead 0..65536; anything else is reported
 * (once) and ignored. */
static int kern_pf_stream_choice(int cpu)
{
    const char *e = getenv("PAGELLM_PREFETCH");
    if (!e || !*e || !strcmp(e, "auto")) return cpu;
    if (!strcmp(e, "none")) return 0;
    char *end;
    const long v = strtol(e, &end, 10);
    if (*end || end == e || v < 0 || v > 65536) {
        static _Atomic int told;
        if (!atomic_exchange(&told, 1))
            fprintf(stderr, "pagellm: PAGELLM_PREFETCH=%s is not auto, none or a distance in bytes 0..65536: ignored\n", e);
        return cpu;
    }
    return (int)v;
}

/* cpu (this CPU's form, kern_impl.h), or PAGELLM_ATTN_BCAST's: "auto"
 * (or unset), "embedded" or "loaded"; anything else is reported (once) and
 * ignored. */
static int kern_attn_bcast_choice(int cpu)
{
    const char *e = getenv("PAGELLM_ATTN_BCAST");
    if (!e || !*e || !strcmp(e, "auto")) return cpu;
    if (!strcmp(e, "embedded")) return 1;
    if (!strcmp(e, "loaded")) return 0;
    static _Atomic int told;
    if (!atomic_exchange(&told, 1))
        fprintf(stderr, "pagellm: PAGELLM_ATTN_BCAST=%s is not one of auto, embedded, loaded: ignored\n", e);
    return cpu;
}

void kern_init(int force_ref)
{
    const unsigned amd = kern_cpu_amd_family();
    kern_pf_stream = kern_pf_stream_choice(!amd ? KERN_PF_STREAM_BYTES : amd >= KERN_AMD_ZEN5 ? KERN_PF_STREAM_ZEN5 : 0);
    kern_attn_bcast_embedded = kern_attn_bcast_choice(amd && amd < KERN_AMD_ZEN5);
    const int cap = force_ref ? 0 : kern_cap_from_env();
    kern_vt = kern_vt_ref;
    const kern_vtable *avx2 = kern_vt_avx2();
    const bool has_avx2 = avx2 && kern_cpu_has_avx2();
    if (cap >= 1 && has_avx2) kern_vt_overlay(&kern_vt, avx2);
    /* the AVX-512 tables hold only what they improve: over AVX2 */
    const kern_vtable *avx512 = has_avx2 ? kern_vt_avx512(kern_cpu_avx512()) : NULL;
    if (cap >= 2 && avx512) kern_vt_overlay(&kern_vt, avx512);
    /* The AVX-512 Q8_0/Q4_0 GEMM's pair tile (two weight groups in 512-bit
     * lanes, kern_avx512_q8.c) doubles the products per vpdpbusd where the
     * pipes are 512 bits wide (Intel, Zen 5; docs/speed.md has the
     * figures). Zen 4 runs a zmm operation as two halves, where its 8-row
     * ymm tile was measured best: it keeps that (one group a call). */
    if (cap >= 2 && avx512 && amd && amd < KERN_AMD_ZEN5) kern_vt.packed[DT_Q8_0].gw = kern_vt.packed[DT_Q4_0].gw = 1;
    const kern_vtable *neon = kern_vt_neon(); /* non-NULL on aarch64 only, where NEON is baseline */
    if (cap >= 1 && neon) kern_vt_overlay(&kern_vt, neon);
    atomic_store_explicit(&kern_ready, 1, memory_order_release);
}

static void kern_init_default(void)
{
    if (!atomic_load_explicit(&kern_ready, memory_order_acquire)) kern_init(0);
}

const kern_vtable *kern_active(void)
{
    if (__builtin_expect(!atomic_load_explicit(&kern_ready, memory_order_acquire), 0))
        pthread_once(&kern_once, kern_init_default);
    return &kern_vt;
}

const char *kern_variant(void) { return kern_active()->name; }

int kern_dot_type(uint32_t wtype)
{
    switch (wtype) {
    case DT_F32: return DT_F32;
    case DT_F16: return DT_F16;
    case DT_BF16: return DT_BF16;
    case DT_Q8_0:
    case DT_Q4_0:
    case DT_Q5_0:
    case DT_IQ4_NL: return DT_Q8_0;
    case DT_Q4_1:
    case DT_Q5_1: return DT_Q8_1;
    case DT_Q2_K:
    case DT_Q3_K:
    case DT_Q4_K:
    case DT_Q5_K:
    case DT_Q6_K:
    case DT_IQ4_XS:
    case DT_TQ1_0:
    case DT_TQ2_0:
    case DT_IQ2_XXS:
    case DT_IQ2_XS:
    case DT_IQ2_S:
    case DT_IQ3_XXS:
    case DT_IQ3_S:
    case DT_IQ1_S:
    case DT_IQ1_M: return DT_Q8_K;
    default: return -1;
    }
}

bool kern_matmul_supports(uint32_t wtype) { return kern_dot_type(wtype) >= 0; }

void kern_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    kern_active()->rmsnorm(y, x, w, n, eps);
}

void kern_rope(float *x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base,
               float freq_scale, bool neox, const float *freq_factors)
{
    kern_active()->rope(x, n_heads, head_dim, rope_dim, pos, freq_base, freq_scale, neox, freq_factors);
}

void kern_rope_apply(float *x, int n_heads, int head_dim, int rope_dim, bool neox, const float *cs)
{
    kern_active()->rope_apply(x, n_heads, head_dim, rope_dim, neox, cs);
}

void kern_add_rmsnorm(float *x, const float *d, float *y, const float *w, int n, float eps)
{
    kern_active()->add_rmsnorm(x, d, y, w, n, eps);
}

float kern_softmax(float *x, int n) { return kern_active()->softmax(x, n); }

void kern_swiglu(float *a, const float *b, int n) { kern_active()->swiglu(a, b, n); }

void kern_f32_to_f16_row(uint16_t *dst, const float *src, int n) { kern_active()->f32_to_f16(dst, src, n); }

void kern_f16_to_f32_row(float *dst, const uint16_t *src, int n) { kern_active()->f16_to_f32(dst, src, n); }
