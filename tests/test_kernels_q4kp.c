/* test_kernels_q4kp.c - Q4_K weights packed at load (kern_pack_q4k.c):
 *
 * - packing puts every value, scale, min, d and dmin at its documented
 *   place, with zero padding rows and group tails, on shapes with a last
 *   partial group and odd row counts;
 * - kern_matmul_mats on the packed matrix equals the reference variant's
 *   product of the ggml rows bit for bit, for m = 1..5, 8, 9 (the packed
 *   tile, every height and two sweeps) and m = 33, 40 (prefill: the
 *   kern_kgemm on groups converted by to_kpack), single-threaded and on
 *   2 threads, in the chosen table, the portable one and every SIMD table;
 * - the same at the integer bounds (every value 15, every scale and min
 *   63, activations +-127; values 0 with random scales);
 * - every variant's to_kpack writes the portable one's bytes, and the
 *   portable one writes kern_kpack_group's bytes for the ggml rows' rows;
 * - kern_pack_supports packs Q4_K only where the variant has a tile.
 */
#include "test.h"
#include "packed8_check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/blocks.h"
#include "tensor/half.h"

/* The layout restated (kern_pack_q4k.c): slab b of a group at 1184 b; d
 * (f16) of row c at 2 c, dmin at 16 + 2 c; quad g at 32 + 288 g: scale of
 * sub-block 2 g + h of row c at 8 h + c, min at 16 + 8 h + c, then
 * vectors t = 0..7 at 32 + 32 t, row c's qs[32 g + 4 t + e] in byte 4 c + e. */
static void unpack_row(const uint8_t *group, int b, int c, uint16_t dd[2], uint8_t sc[8], uint8_t mn[8], uint8_t q[256])
{
    const uint8_t *s = group + (size_t)b * 1184;
    memcpy(&dd[0], s + 2 * c, 2);
    memcpy(&dd[1], s + 16 + 2 * c, 2);
    for (int j = 0; j < 8; j++) {
        const uint8_t *quad = s + 32 + 288 * (j / 2);
        sc[j] = quad[8 * (j % 2) + c];
        mn[j] = quad[16 + 8 * (j % 2) + c];
    }
    for (int v = 0; v < 256; v++) {
        const uint8_t byte = s[32 + 288 * (v / 64) + 32 + 32 * ((v % 32) / 4) + 4 * c + v % 4];
        q[v] = (v / 32) % 2 ? byte >> 4 : byte & 0xF;
    }
}

/* ggml's row: value v of sub-block j = v / 32 in the low (even j) or high
 * (odd j) nibbles of qs[32 (j / 2) .. + 31] */
static void ggml_row(const block_q4_K *blk, uint16_t dd[2], uint8_t sc[8], uint8_t mn[8], uint8_t q[256])
{
    dd[0] = blk->d, dd[1] = blk->dmin;
    for (int j = 0; j < 8; j++) block_q4_K_scale_min(j, blk->scales, &sc[j], &mn[j]);
    for (int v = 0; v < 256; v++) {
        const uint8_t byte = blk->qs[32 * (v / 64) + v % 32];
        q[v] = (v / 32) % 2 ? byte >> 4 : byte & 0xF;
    }
}

TEST(q4kp_pack_round_trip)
{
    static const int shapes[][2] = {{256, 1}, {256, 9}, {768, 8}, {512, 13}, {2048, 3}, {1280, 23}};
    for (int si = 0; si < 6; si++) {
        const int n_in = shapes[si][0], n_out = shapes[si][1], nb = n_in / QK_K, ng = (n_out + 7) / 8;
        rng_seed(9900 + (uint64_t)si);
        uint8_t *w = mm_weights_make(DT_Q4_K, n_out, n_in);
        const size_t wr = dtype_row_bytes(DT_Q4_K, (uint64_t)n_in), bytes = kern_pack_bytes(DT_Q4_K, n_in, n_out);
        const size_t gb = (((size_t)nb * 1184 + 63) / 64) * 64;
        CHECK_MSG(bytes == (size_t)ng * gb, "n_in=%d n_out=%d: %zu bytes, want %zu", n_in, n_out, bytes, (size_t)ng * gb);
        uint8_t *p = aligned_alloc(64, bytes);
        memset(p, 0xA5, bytes); /* packing must write every byte it owns */
        kern_pack(p, w, DT_Q4_K, n_in, n_out);
        int bad = 0;
        for (int r = 0; r < ng * 8 && !bad; r++)
            for (int b = 0; b < nb && !bad; b++) {
                uint16_t dd[2], want_dd[2] = {0, 0};
                uint8_t sc[8], want_sc[8] = {0}, mn[8], want_mn[8] = {0}, q[256], want_q[256] = {0};
                unpack_row(p + (size_t)(r / 8) * gb, b, r % 8, dd, sc, mn, q);
                /* padding rows: all zero */
                if (r < n_out) ggml_row((const block_q4_K *)(w + (size_t)r * wr) + b, want_dd, want_sc, want_mn, want_q);
                if (memcmp(dd, want_dd, 4) || memcmp(sc, want_sc, 8) || memcmp(mn, want_mn, 8) || memcmp(q, want_q, 256))
                    bad = r + 1;
            }
        CHECK_MSG(!bad, "n_in=%d n_out=%d: packed row %d differs from its ggml row", n_in, n_out, bad - 1);
        for (int g = 0; g < ng; g++) /* the group's tail past its slabs */
            for (size_t k = (size_t)nb * 1184; k < gb; k++) bad |= p[(size_t)g * gb + k] != 0;
        CHECK_MSG(!bad, "n_in=%d: a group's tail is not zero", n_in);
        free(w);
        free(p);
    }
}

TEST(q4kp_matmul_equals_reference)
{
    static const int n_outs[] = {1, 7, 8, 9, 77, 1001};
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    char why[320] = "";
    for (int oi = 0; oi < 6 && !why[0]; oi++) {
        const int n_in = oi == 4 ? 2048 : 256 * (1 + oi % 3), n_out = n_outs[oi];
        rng_seed(9910 + (uint64_t)oi);
        uint8_t *w = mm_weights_make(DT_Q4_K, n_out, n_in);
        float *x = mm_acts_make(PACKED8_M_MAX, n_in);
        packed8_check_matmul(DT_Q4_K, "random", w, x, n_in, n_out, tp2, why, sizeof why);
        free(w), free(x);
    }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

/* The integer sums at their bounds: every byte 0xFF (every value 15, every
 * scale and min 63) against activations all +1 or all -1 (quantized to
 * +-127); random bytes against random signs; values 15 with random scales
 * and mins; values 0 with random scales and mins. */
TEST(q4kp_matmul_extreme_values)
{
    const int n_in = 1024, n_out = 17, M = PACKED8_M_MAX;
    threadpool *tp2 = tp_new(2);
    char why[320] = "";
    rng_seed(9920);
    for (int pat = 0; pat < 5 && !why[0]; pat++) {
        const size_t wr = dtype_row_bytes(DT_Q4_K, (uint64_t)n_in);
        uint8_t *w = malloc(wr * n_out);
        float *x = malloc(sizeof(float) * (size_t)M * n_in);
        for (int j = 0; j < n_out; j++)
            for (int b = 0; b < n_in / QK_K; b++) {
                block_q4_K *blk = (block_q4_K *)(w + (size_t)j * wr) + b;
                memset(blk, 0xFF, sizeof *blk);
                for (int k = 0; pat >= 2 && k < (int)sizeof *blk; k++) ((uint8_t *)blk)[k] = (uint8_t)rng_u32();
                if (pat == 3) memset(blk->qs, 0xFF, sizeof blk->qs);
                if (pat == 4) memset(blk->qs, 0x00, sizeof blk->qs);
                blk->d = f32_to_f16(0.001f * (float)(1 + (j + b) % 7));
                blk->dmin = f32_to_f16(0.0007f * (float)(1 + (j + 2 * b) % 5));
            }
        for (int k = 0; k < M * n_in; k++) {
            const uint32_t r = rng_u32();
            x[k] = pat == 0 ? 1.0f : pat == 1 ? -1.0f : (r & 2) ? 1.0f : -1.0f;
        }
        char what[32];
        snprintf(what, sizeof what, "pattern %d", pat);
        packed8_check_matmul(DT_Q4_K, what, w, x, n_in, n_out, tp2, why, sizeof why);
        free(w), free(x);
    }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

TEST(q4kp_to_kpack_bytes)
{
    char why[256] = "";
    packed8_check_to_kpack(DT_Q4_K, kern_q4p_to_kpack_ref, 9930, why, sizeof why);
    CHECK_MSG(!why[0], "%s", why);
}

TEST(q4kp_pack_supports_follows_variant)
{
    CHECK(!kern_pack_supports(DT_Q4_K, 128) && kern_pack_bytes(DT_Q4_K, 128, 8) == 0);
    CHECK(kern_pack_supports(DT_Q4_K, 256) == (kern_vt.packed[DT_Q4_K].gemm != NULL));
    kern_init(1);
    CHECK(!kern_pack_supports(DT_Q4_K, 256)); /* the portable tile: the ggml rows stay */
    kern_init(0);
    if (kern_vt_avx2() && kern_cpu_has_avx2()) CHECK(kern_vt_avx2()->packed[DT_Q4_K].gemm != NULL);
}

int main(void)
{
    kern_init(0);
    printf("# kernel variant: %s\n", kern_variant());
    RUN(q4kp_pack_round_trip);
    RUN(q4kp_matmul_equals_reference);
    RUN(q4kp_matmul_extreme_values);
    RUN(q4kp_to_kpack_bytes);
    RUN(q4kp_pack_supports_follows_variant);
    kern_scratch_free();
    return test_summary();
}
