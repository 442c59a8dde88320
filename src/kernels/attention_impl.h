/* attention_impl.h - internals shared by attention.c and attention_avx2.c:
 * the scratch layout and the tile constants (see attention.h).
 *
 * Scratch of one call with R rows whose largest n_ctx is N, in floats
 * (hdp = head_dim rounded up to 8, ncp = N rounded up to 8):
 *
 *   qf  [R][hdp]        the queries as the dot uses them (f16-rounded for F16)
 *   sc  [R][ncp]        scores, then softmax weights, of each row
 *   kt  [8][hdp]        8 keys converted to f32 (one score group)
 *   vt  [ATTN_VB][hdp]  ATTN_VB values converted to f32 (one V tile)
 *
 * The reference uses only the front: scores[ncp], tmp[hdp], acc[hdp] and the
 * f16 query (hdp halves), which always fits in the above.
 */
#ifndef PL_KERNELS_ATTENTION_IMPL_H
#define PL_KERNELS_ATTENTION_IMPL_H

#include <stddef.h>

/* Score floats of one call at most (1 MiB): long contexts get fewer rows. */
#define ATTN_SCORE_BUDGET (1u << 18)
/* Keys per V tile: 32 rows x 128 dims x 4 B = 16 KiB, within L1 with the
 * accumulators' output rows. */
#define ATTN_VB 32

static inline size_t attn_round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Floats of the layout above for R rows, largest context n, head dim hd. */
static inline size_t attn_layout_floats(size_t R, size_t n, size_t hd)
{
    const size_t hdp = attn_round8(hd), ncp = attn_round8(n);
    return R * (hdp + ncp) + (8 + ATTN_VB) * hdp;
}

#endif
