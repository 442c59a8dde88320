/* packed8_check.h - the checks every test of a type packed at load 8 rows
 * a group shares (test_kernels_iq4p.c, test_kernels_q3kp.c,
 * test_kernels_q4kp.c): the packed product against the reference bit for
 * bit in every table, and to_kpack's bytes against kern_kpack_group's.
 * Header-only; -Itests finds it.
 */
#ifndef PL_TESTS_PACKED8_CHECK_H
#define PL_TESTS_PACKED8_CHECK_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kern_variants.h"
#include "mm_data.h"

#include "base/threadpool.h"
#include "kernels/kern_impl.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

/* Every activation-row count of the check below: the packed tile's
 * heights, two sweeps, and the prefill path (kern_kgemm on groups
 * converted by to_kpack). */
static const int packed8_ms[] = {1, 2, 3, 4, 5, 8, 9, 33, 40};
#define PACKED8_N_MS (int)(sizeof packed8_ms / sizeof packed8_ms[0])
#define PACKED8_M_MAX 40

/* y of the packed matrix wp (type t) against x (PACKED8_M_MAX rows, the
 * first m taken) equals ref bit for bit in every table (chosen, portable,
 * each SIMD one), on 1 and 2 threads; the first difference into why. */
static inline void packed8_vs_ref(uint32_t t, const char *what, const float *x, const uint8_t *wp, const float *ref, int n_in,
                           int n_out, threadpool *tp2, char *why, size_t wn)
{
    const kern_vtable *vs[4] = {0};
    const int nv = kern_simd_variants(vs);
    const kern_mat pm = {NULL, wp, t, n_in, n_out}, *pmp = &pm;
    float *y = malloc(sizeof(float) * PACKED8_M_MAX * (size_t)n_out);
    for (int v = -2; v < nv && !why[0]; v++) {
        if (v < 0) kern_init(v == -1);
        else kern_vt = *vs[v];
        for (int mi = 0; mi < PACKED8_N_MS && !why[0]; mi++)
            for (int th = 0; th < 2 && !why[0]; th++) {
                const int m = packed8_ms[mi];
                for (size_t k = 0; k < (size_t)m * n_out; k++) y[k] = NAN;
                kern_matmul_mats(1, &y, x, &pmp, m, th ? tp2 : NULL);
                for (size_t k = 0; k < (size_t)m * n_out && !why[0]; k++)
                    if (memcmp(&y[k], &ref[k], 4) != 0)
                        snprintf(why, wn, "%s %s n_in=%d n_out=%d m=%d threads=%d: y[%zu][%zu] = %.9g, ref %.9g", what,
                                 kern_variant(), n_in, n_out, m, th + 1, k / n_out, k % n_out, y[k], ref[k]);
            }
    }
    kern_init(0);
    free(y);
}

/* The packed product of w (n_out ggml rows of type t) against x equals the
 * reference variant's product of the ggml rows (packed8_vs_ref). */
static inline void packed8_check_matmul(uint32_t t, const char *what, const uint8_t *w, const float *x, int n_in, int n_out,
                                 threadpool *tp2, char *why, size_t wn)
{
    float *ref = malloc(sizeof(float) * PACKED8_M_MAX * (size_t)n_out);
    uint8_t *wp = aligned_alloc(64, kern_pack_bytes(t, n_in, n_out));
    kern_pack(wp, w, t, n_in, n_out);
    kern_init(1);
    kern_matmul(ref, x, w, t, PACKED8_M_MAX, n_in, n_out, NULL);
    packed8_vs_ref(t, what, x, wp, ref, n_in, n_out, tp2, why, wn);
    free(ref), free(wp);
}

/* to_kpack: the portable conversion (to_kpack_ref) of two packed groups of
 * nw random rows equals kern_kpack_group of the same rows in every byte a
 * kern_kgemm tile reads for the stored rows (values, scales, pairs, d,
 * dmin), and every variant's to_kpack writes exactly the portable one's
 * bytes; for n = 256, 768 and nw = 1, 5, 8, 9, 16. */
static inline void packed8_check_to_kpack(uint32_t t, void (*to_kpack_ref)(uint8_t *, const uint8_t *, size_t, int, int),
                                   uint64_t seed, char *why, size_t wn)
{
    static const int ns[] = {256, 768}, nws[] = {1, 5, 8, 9, 16};
    const kern_vtable *vs[4] = {0};
    const int nv = kern_simd_variants(vs);
    for (int q = 0; q < 2 && !why[0]; q++)
        for (int wi = 0; wi < 5 && !why[0]; wi++) {
            const int n = ns[q], nw = nws[wi];
            rng_seed(seed + (uint64_t)(q * 8 + wi));
            uint8_t *w = mm_weights_make(t, nw, n);
            const size_t wr = dtype_row_bytes(t, (uint64_t)n), kb = kern_kpack_group_bytes(n);
            const size_t pb = kern_pack_bytes(t, n, 16), gb = kern_pack_group_bytes(t, n);
            uint8_t *wp = aligned_alloc(64, pb), *want = aligned_alloc(64, kb), *got = aligned_alloc(64, kb);
            uint8_t *alt = aligned_alloc(64, kb);
            memset(wp, 0x3C, pb); /* a second group past nw is not read */
            kern_pack(wp, w, t, n, nw);
            kern_kpack_group(t, want, w, wr, nw, n);
            memset(got, 0x5A, kb);
            to_kpack_ref(got, wp, gb, nw, n);
            for (int b = 0; b < n / QK_K && !why[0]; b++) {
                const uint8_t *sw = want + (size_t)b * KPACK_SLAB, *sg = got + (size_t)b * KPACK_SLAB;
                for (int c = 0; c < nw && !why[0]; c++) {
                    bool same = true;
                    for (int v = 0; v < 64; v++) same &= memcmp(sw + 64 * v + 4 * c, sg + 64 * v + 4 * c, 4) == 0;
                    for (int j = 0; j < 16; j++) same &= sw[KPACK_SC + 16 * j + c] == sg[KPACK_SC + 16 * j + c];
                    for (int i = 0; i < 8; i++) same &= memcmp(sw + KPACK_PAIRS + 64 * i + 4 * c, sg + KPACK_PAIRS + 64 * i + 4 * c, 4) == 0;
                    same &= memcmp(sw + KPACK_D + 4 * c, sg + KPACK_D + 4 * c, 4) == 0;
                    same &= memcmp(sw + KPACK_DMIN + 4 * c, sg + KPACK_DMIN + 4 * c, 4) == 0;
                    if (!same) snprintf(why, wn, "portable n=%d nw=%d: super-block %d row %d differs from kern_kpack_group", n, nw, b, c);
                }
            }
            for (int v = 0; v < nv && !why[0]; v++) {
                const kern_packed *pk = &vs[v]->packed[t];
                if (!pk->gemm || !pk->to_kpack) continue;
                memset(alt, 0xA5, kb);
                pk->to_kpack(alt, wp, gb, nw, n);
                if (memcmp(alt, got, kb) != 0)
                    snprintf(why, wn, "%s n=%d nw=%d: to_kpack differs from the portable one", vs[v]->name, n, nw);
            }
            free(w), free(wp), free(want), free(got), free(alt);
        }
}

#endif
