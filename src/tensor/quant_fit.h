/* quant_fit.h - the scale searches the weight quantizers share (defined in
 * quant_k.c, used by every file that quantizes weights: quant_k.c,
 * quant_k_ext.c, quant_legacy.c).
 *
 * The fits return the fitted scale of one group; neither writes outside its
 * arguments. Inputs are finite (non-finite ones give a finite garbage fit).
 */
#ifndef PL_TENSOR_QUANT_FIT_H
#define PL_TENSOR_QUANT_FIT_H

#include <stdint.h>

/* Fits x[0..n) ~ scale*l + min, l in 0..nmax, min <= 0, minimizing
 * sum w*(error)^2 (n a multiple of 4). Returns scale (>= 0); *neg_min = -min. */
float quant_fit_scale_min(const float *x, const float *w, int n, int nmax, float *neg_min);

/* Symmetric fit x ~ scale*l, l in -nmax..nmax-1, weighted by x^2. Returns
 * scale with its sign (the element of largest magnitude lands near -nmax);
 * 0 for an all-(near-)zero group. */
float quant_fit_scale_sym(const float *x, int n, int nmax);

/* Packs sub-block j's 6-bit scale and min into the 12 scale bytes that
 * Q4_K and Q5_K share (layout in blocks.h). Defined in quant_k.c. */
void quant_k_scale_min_put(uint8_t *scales, int j, int sc, int m);

#endif
