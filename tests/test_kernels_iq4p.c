/* test_kernels_iq4p.c - IQ4_XS weights packed at load (kern_pack_iq4.c):
 *
 * - packing puts every byte at its documented place (d as f32, the scales
 *   minus 32 as int8, the nibble vectors), with zero padding rows, on
 *   shapes with a last partial group;
 * - kern_matmul_mats on the packed matrix equals the reference variant's
 *   product of the ggml rows bit for bit, for m = 1..9 (the packed tile,
 *   every height and two sweeps) and m = 33, 40 (prefill: the kern_kgemm
 *   on groups converted by to_kpack), single-threaded and on 2 threads,
 *   in the chosen table, the portable one and every SIMD table;
 * - the same at the integer bounds (every nibble and scale at its extreme,
 *   activations +-127);
 * - every variant's to_kpack writes the portable one's bytes, and the
 *   portable one writes kern_kpack_group's bytes for the ggml rows' rows;
 * - kern_pack_supports packs IQ4_XS only where the variant has a tile.
 */
#include "test.h"
#include "packed8_check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "kernels/kern_impl.h"
#include "kernels/kernels.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

/* The layout restated (kern_pack_iq4.c): slab b of a group at 1120 b; d
 * (f32) of row c at 4 c, scale j at 32 + 8 j + c, then vector 4 j + t at
 * 96 + 32 (4 j + t), row c's 4 bytes at 4 c. */
static void unpack_row(const uint8_t *group, int b, int c, float *d, int8_t sc[8], uint8_t qs[128])
{
    const uint8_t *s = group + (size_t)b * 1120;
    memcpy(d, s + 4 * c, 4);
    for (int j = 0; j < 8; j++) {
        sc[j] = (int8_t)s[32 + 8 * j + c];
        for (int t = 0; t < 4; t++) memcpy(qs + 16 * j + 4 * t, s + 96 + 32 * (4 * j + t) + 4 * c, 4);
    }
}

TEST(iq4p_pack_round_trip)
{
    static const int shapes[][2] = {{256, 1}, {256, 9}, {768, 8}, {512, 13}, {2048, 3}};
    for (int si = 0; si < 5; si++) {
        const int n_in = shapes[si][0], n_out = shapes[si][1], nb = n_in / QK_K, ng = (n_out + 7) / 8;
        rng_seed(9100 + (uint64_t)si);
        uint8_t *w = mm_weights_make(DT_IQ4_XS, n_out, n_in);
        const size_t wr = dtype_row_bytes(DT_IQ4_XS, (uint64_t)n_in), bytes = kern_pack_bytes(DT_IQ4_XS, n_in, n_out);
        const size_t gb = (((size_t)nb * 1120 + 63) / 64) * 64;
        CHECK_MSG(bytes == (size_t)ng * gb, "n_in=%d n_out=%d: %zu bytes, want %zu", n_in, n_out, bytes, (size_t)ng * gb);
        uint8_t *p = aligned_alloc(64, bytes);
        memset(p, 0xA5, bytes); /* packing must write every byte it owns */
        kern_pack(p, w, DT_IQ4_XS, n_in, n_out);
        int bad = 0;
        for (int r = 0; r < ng * 8 && !bad; r++)
            for (int b = 0; b < nb && !bad; b++) {
                float d;
                int8_t sc[8], want_sc[8] = {0};
                uint8_t qs[128], want_qs[128] = {0};
                float want_d = 0.0f;
                unpack_row(p + (size_t)(r / 8) * gb, b, r % 8, &d, sc, qs);
                if (r < n_out) {
                    const block_iq4_xs *blk = (const block_iq4_xs *)(w + (size_t)r * wr) + b;
                    want_d = f16_to_f32(blk->d);
                    for (int j = 0; j < 8; j++) want_sc[j] = (int8_t)(block_iq4_xs_scale(j, blk) - 32);
                    memcpy(want_qs, blk->qs, 128);
                }
                if (memcmp(&d, &want_d, 4) || memcmp(sc, want_sc, 8) || memcmp(qs, want_qs, 128)) bad = r + 1;
            }
        CHECK_MSG(!bad, "n_in=%d n_out=%d: packed row %d differs from its ggml row", n_in, n_out, bad - 1);
        for (int g = 0; g < ng; g++) /* the group's tail past its slabs */
            for (size_t k = (size_t)nb * 1120; k < gb; k++) bad |= p[(size_t)g * gb + k] != 0;
        CHECK_MSG(!bad, "n_in=%d: a group's tail is not zero", n_in);
        free(w);
        free(p);
    }
}

TEST(iq4p_matmul_equals_reference)
{
    static const int n_outs[] = {1, 7, 8, 9, 77, 1001};
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    char why[320] = "";
    for (int oi = 0; oi < 6 && !why[0]; oi++) {
        const int n_in = oi == 4 ? 2048 : 256 * (1 + oi % 3), n_out = n_outs[oi], M = 40;
        rng_seed(9200 + (uint64_t)oi);
        uint8_t *w = mm_weights_make(DT_IQ4_XS, n_out, n_in);
        float *x = mm_acts_make(M, n_in), *ref = malloc(sizeof(float) * (size_t)M * n_out);
        uint8_t *wp = aligned_alloc(64, kern_pack_bytes(DT_IQ4_XS, n_in, n_out));
        kern_pack(wp, w, DT_IQ4_XS, n_in, n_out);
        kern_init(1);
        kern_matmul(ref, x, w, DT_IQ4_XS, M, n_in, n_out, NULL);
        packed8_vs_ref(DT_IQ4_XS, "random", x, wp, ref, n_in, n_out, tp2, why, sizeof why);
        free(w), free(x), free(ref), free(wp);
    }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

/* The integer sums at their bounds: every qs byte 0xFF (the value 113) or
 * 0x00 (-127) or random, every scale 63 or 0 (sc - 32 = 31 or -32) or
 * random, against activations all +1 or all -1 (quantized to +-127) or
 * random signs. */
TEST(iq4p_matmul_extreme_values)
{
    const int n_in = 1024, n_out = 17, M = 40;
    threadpool *tp2 = tp_new(2);
    char why[320] = "";
    rng_seed(9300);
    for (int pat = 0; pat < 4 && !why[0]; pat++) {
        const size_t wr = dtype_row_bytes(DT_IQ4_XS, (uint64_t)n_in);
        uint8_t *w = malloc(wr * n_out);
        float *x = malloc(sizeof(float) * (size_t)M * n_in), *ref = malloc(sizeof(float) * (size_t)M * n_out);
        for (int j = 0; j < n_out; j++)
            for (int b = 0; b < n_in / QK_K; b++) {
                block_iq4_xs *blk = (block_iq4_xs *)(w + (size_t)j * wr) + b;
                const uint8_t fill = pat == 0 ? 0xFF : pat == 1 ? 0x00 : (uint8_t)rng_u32();
                memset(blk, fill, sizeof *blk);
                for (int k = 0; pat >= 2 && k < (int)sizeof *blk; k++) ((uint8_t *)blk)[k] = (uint8_t)rng_u32();
                blk->d = f32_to_f16(0.001f * (float)(1 + (j + b) % 7));
            }
        for (int k = 0; k < M * n_in; k++) {
            const uint32_t r = rng_u32();
            x[k] = pat == 0 ? 1.0f : pat == 1 ? -1.0f : (r & 2) ? 1.0f : -1.0f;
        }
        uint8_t *wp = aligned_alloc(64, kern_pack_bytes(DT_IQ4_XS, n_in, n_out));
        kern_pack(wp, w, DT_IQ4_XS, n_in, n_out);
        kern_init(1);
        kern_matmul(ref, x, w, DT_IQ4_XS, M, n_in, n_out, NULL);
        char what[32];
        snprintf(what, sizeof what, "pattern %d", pat);
        packed8_vs_ref(DT_IQ4_XS, what, x, wp, ref, n_in, n_out, tp2, why, sizeof why);
        free(w), free(x), free(ref), free(wp);
    }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

/* to_kpack: the portable conversion of two packed groups equals
 * kern_kpack_group of the same rows in every byte a kern_kgemm tile reads
 * for the stored rows (values, scales, pairs, d, dmin), and every
 * variant's to_kpack writes exactly the portable one's bytes. */
TEST(iq4p_to_kpack_bytes)
{
    char why[256] = "";
    packed8_check_to_kpack(DT_IQ4_XS, kern_iq4p_to_kpack_ref, 9400, why, sizeof why);
    CHECK_MSG(!why[0], "%s", why);
}

TEST(iq4p_pack_supports_follows_variant)
{
    CHECK(!kern_pack_supports(DT_IQ4_XS, 128) && kern_pack_bytes(DT_IQ4_XS, 128, 8) == 0);
    CHECK(kern_pack_supports(DT_IQ4_XS, 256) == (kern_vt.packed[DT_IQ4_XS].gemm != NULL));
    kern_init(1);
    CHECK(!kern_pack_supports(DT_IQ4_XS, 256)); /* the portable tile: the ggml rows stay */
    kern_init(0);
    if (kern_vt_avx2() && kern_cpu_has_avx2()) CHECK(kern_vt_avx2()->packed[DT_IQ4_XS].gemm != NULL);
}

int main(void)
{
    kern_init(0);
    printf("# kernel variant: %s\n", kern_variant());
    RUN(iq4p_pack_round_trip);
    RUN(iq4p_matmul_equals_reference);
    RUN(iq4p_matmul_extreme_values);
    RUN(iq4p_to_kpack_bytes);
    RUN(iq4p_pack_supports_follows_variant);
    kern_scratch_free();
    return test_summary();
}
