/* kern_avx512.c - the AVX-512 variant: CPU check and its tables.
 *
 * The variant's kernels live in one file per family (kern_avx512_q8.c:
 * Q8_0/Q4_0; kern_avx512_kquant.c: Q4_K/Q6_K; kern_avx512_lowbit.c:
 * Q3_K/Q2_K/TQ2_0; kern_avx512_tq1.c: TQ1_0; kern_avx512_quants.c,
 * kern_avx512_legacy.c: the other block formats; kern_avx512_float.c: F32/F16/BF16; kern_avx512_elem.c:
 * the row kernels); each fills its
 * entries into the two tables built here, "avx512" (F, BW, VL, DQ, VNNI) and
 * "avx512-bf16" (the same plus AVX512_BF16). An entry left NULL falls back
 * to the AVX2 variant, which kern_init overlays first (an AVX-512 CPU
 * always has AVX2, FMA and F16C; the check below requires them too).
 *
 * In the PL_AVX512_EMU test build (tests/avx512.sh) this file reports every
 * feature as present: the kernels then run on SIMDe's emulation.
 */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

#include <pthread.h>

/* The features, detected once: attn_paged asks on every call. */
static unsigned avx512_features;
static pthread_once_t avx512_detect_once = PTHREAD_ONCE_INIT;

static void avx512_detect(void)
{
#ifdef PL_AVX512_EMU
    avx512_features = KERN_X512_BASE | KERN_X512_BF16;
#else
    /* libgcc's checks include the OS's XCR0 state for the ZMM registers */
    __builtin_cpu_init();
    if (!kern_cpu_has_avx2()) return;
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512vnni")))
        return;
    avx512_features = KERN_X512_BASE | (__builtin_cpu_supports("avx512bf16") ? KERN_X512_BF16 : 0);
#endif
}

unsigned kern_cpu_avx512(void)
{
    pthread_once(&avx512_detect_once, avx512_detect);
    return avx512_features;
}

static kern_vtable avx512_tables[2]; /* [1]: with BF16 */
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void avx512_tables_init(void)
{
    kern_f16_lut_init();
    for (int i = 0; i < 2; i++) {
        kern_vtable *t = &avx512_tables[i];
        t->name = i ? "avx512-bf16" : "avx512";
        kern_avx512_fill_q8(t);
        kern_avx512_fill_kquant(t);
        kern_avx512_fill_float(t, i == 1);
        kern_avx512_fill_elem(t);
        kern_avx512_fill_f16p(t);
        kern_avx512_fill_quants(t);
        kern_avx512_fill_kgemm(t);
        kern_avx512_fill_lowbit(t);
        kern_avx512_fill_tq1(t);
        kern_avx512_fill_iq4p(t);
        kern_avx512_fill_q3kp(t);
        kern_avx512_fill_q4kp(t);
    }
}

const kern_vtable *kern_vt_avx512(unsigned features)
{
    if (!(features & KERN_X512_BASE)) return NULL;
    pthread_once(&avx512_once, avx512_tables_init);
    return &avx512_tables[(features & KERN_X512_BF16) ? 1 : 0];
}

#else /* not x86 */

unsigned kern_cpu_avx512(void) { return 0; }
const kern_vtable *kern_vt_avx512(unsigned features)
{
    (void)features;
    return NULL;
}

#endif
