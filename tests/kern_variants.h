/* kern_variants.h - the SIMD kernel tables this CPU runs, for the kernel
 * tests (test_kernels.c, test_kernels_elem.c). */
#ifndef PL_TESTS_KERN_VARIANTS_H
#define PL_TESTS_KERN_VARIANTS_H

#include "kernels/kern_impl.h"

/* Fills out (room for 4) with the SIMD variants this CPU can run, the
 * reference not among them: AVX2; the AVX-512 tables as kern_init stacks
 * them (over AVX2: they hold only what they improve), both when the CPU
 * (or tests/avx512.sh's emulation) has BF16 too; NEON. */
static inline int kern_simd_variants(const kern_vtable **out)
{
    int n = 0;
    if (kern_vt_avx2() && kern_cpu_has_avx2()) out[n++] = kern_vt_avx2();
    static kern_vtable x512_stacked[2];
    const unsigned x512 = kern_cpu_has_avx2() ? kern_cpu_avx512() : 0;
    for (int bf = 0; bf <= 1 && (x512 & KERN_X512_BASE); bf++) {
        if (bf && !(x512 & KERN_X512_BF16)) break;
        x512_stacked[bf] = *kern_vt_avx2();
        kern_vt_overlay(&x512_stacked[bf], kern_vt_avx512(bf ? x512 : x512 & ~(unsigned)KERN_X512_BF16));
        out[n++] = &x512_stacked[bf];
    }
    if (kern_vt_neon()) out[n++] = kern_vt_neon();
    return n;
}

#endif
