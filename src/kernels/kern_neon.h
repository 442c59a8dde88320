/* kern_neon.h - the aarch64 NEON kernel variant (kern_neon.c).
 *
 * Kept apart from kern_impl.h (the variant tables' header) so that adding
 * the variant touched no shared header; it may move there.
 */
#ifndef PL_KERNELS_KERN_NEON_H
#define PL_KERNELS_KERN_NEON_H

#include "kernels/kern_impl.h"

/* The NEON variant, or NULL when not compiled for aarch64. Advanced SIMD is
 * part of the aarch64 base ABI, so no run-time check is needed; its name
 * says whether the Q8_0/Q4_0 dots use the dot-product instructions
 * ("neon-dotprod", chosen at compile time from __ARM_FEATURE_DOTPROD, e.g.
 * -march=armv8.2-a+dotprod) or the widening multiplies ("neon"). */
const kern_vtable *kern_vt_neon(void);

#endif
