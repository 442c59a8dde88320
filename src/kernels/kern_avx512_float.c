/* kern_avx512_float.c - AVX-512 kernels for F32, F16 and BF16 weights.
 * Not written yet: the entries stay the AVX2 variant's. */
#include "kernels/kern_impl.h"
#include "kernels/avx512_intrin.h"

#ifdef PL_HAVE_AVX512_CODE

void kern_avx512_fill_float(kern_vtable *t, bool bf16) { (void)t, (void)bf16; }

#else

void kern_avx512_fill_float(kern_vtable *t, bool bf16) { (void)t, (void)bf16; }

#endif
