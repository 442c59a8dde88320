/* kern_avx512_kquant.c - AVX-512 kernels for Q4_K and Q6_K weights (VNNI).
 * Not written yet: the entries stay the AVX2 variant's. */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

void kern_avx512_fill_kquant(kern_vtable *t) { (void)t; }

#else

void kern_avx512_fill_kquant(kern_vtable *t) { (void)t; }

#endif
