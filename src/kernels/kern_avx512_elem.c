/* kern_avx512_elem.c - AVX-512 kernels for the row kernels (rmsnorm, rope, softmax, swiglu, ...).
 * Not written yet: the entries stay the AVX2 variant's. */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

void kern_avx512_fill_elem(kern_vtable *t) { (void)t; }

#else

void kern_avx512_fill_elem(kern_vtable *t) { (void)t; }

#endif
