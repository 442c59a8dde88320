/* kern_avx512_q8.c - AVX-512 kernels for Q8_0 and Q4_0 weights (VNNI).
 * Not written yet: the entries stay the AVX2 variant's. */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

void kern_avx512_fill_q8(kern_vtable *t) { (void)t; }

#else

void kern_avx512_fill_q8(kern_vtable *t) { (void)t; }

#endif
