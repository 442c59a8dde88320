/* test_kernels_q3kp.c - Q3_K weights packed at load (kern_pack_q3k.c):
 *
 * - packing puts every value, scale and d at its documented place (three
 *   bits a value in the triple vectors, the scales minus 32 as int8, d as
 *   f16), with zero padding rows and group tails, on shapes with a last
 *   partial group and odd row counts;
 * - kern_matmul_mats on the packed matrix equals the reference variant's
 *   product of the ggml rows bit for bit, for m = 1..5, 8, 9 (the packed
 *   tile, every height and two sweeps) and m = 33, 40 (prefill: the
 *   kern_kgemm on groups converted by to_kpack), single-threaded and on
 *   2 threads, in the chosen table, the portable one and every SIMD table;
 * - the same at the integer bounds (every value at -4 or 3, every scale
 *   at -32 or 31, activations +-127);
 * - every variant's to_kpack writes the portable one's bytes, and the
 *   portable one writes kern_kpack_group's bytes for the ggml rows' rows;
 * - kern_pack_supports packs Q3_K only where the variant has a tile.
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

/* The layout restated (kern_pack_q3k.c): slab b of a group at 912 b; d
 * (f16) of row c at 2 c; triple i at 16 + 112 i: scale 2 i + s of row c at
 * 2 c + s, then vectors A, B, C at 16, 48, 80, row c's value 32 i + 4 o + e
 * (o = 0..7) in byte 4 c + e: o = 0..5 in bits 3 (o % 2) .. + 2 of vector
 * o / 2, o = 6 in A bits 6-7 and B bit 6, o = 7 in B bit 7 and C bits 6-7.
 * Returns q = u - 4. */
static int unpacked_value(const uint8_t *slab, int c, int v)
{
    const uint8_t *t = slab + 16 + 112 * (v / 32) + 16;
    const int o = (v % 32) / 4, p = 4 * c + v % 4;
    const int A = t[p], B = t[32 + p], C = t[64 + p];
    int u;
    if (o < 6) u = (t[32 * (o / 2) + p] >> (3 * (o % 2))) & 7;
    else if (o == 6) u = (A >> 6) | (((B >> 6) & 1) << 2);
    else u = (B >> 7) | ((C >> 6) << 1);
    return u - 4;
}

static void unpack_row(const uint8_t *group, int b, int c, uint16_t *d, int8_t sc[16], int8_t q[256])
{
    const uint8_t *s = group + (size_t)b * 912;
    memcpy(d, s + 2 * c, 2);
    for (int j = 0; j < 16; j++) sc[j] = (int8_t)s[16 + 112 * (j / 2) + 2 * c + j % 2];
    for (int v = 0; v < 256; v++) q[v] = (int8_t)unpacked_value(s, c, v);
}

/* ggml's row: q of element e = the 2 low bits minus 4 where hmask's bit is clear */
static void ggml_row(const block_q3_K *blk, uint16_t *d, int8_t sc[16], int8_t q[256])
{
    *d = blk->d;
    for (int j = 0; j < 16; j++) sc[j] = (int8_t)(block_q3_K_scale(j, blk->scales) - 32);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, k = (e / 32) % 4, l = e % 32;
        q[e] = (int8_t)(((blk->qs[32 * h + l] >> (2 * k)) & 3) - (((blk->hmask[l] >> (4 * h + k)) & 1) ? 0 : 4));
    }
}

TEST(q3kp_pack_round_trip)
{
    static const int shapes[][2] = {{256, 1}, {256, 9}, {768, 8}, {512, 13}, {2048, 3}, {1280, 23}};
    for (int si = 0; si < 6; si++) {
        const int n_in = shapes[si][0], n_out = shapes[si][1], nb = n_in / QK_K, ng = (n_out + 7) / 8;
        rng_seed(9500 + (uint64_t)si);
        uint8_t *w = mm_weights_make(DT_Q3_K, n_out, n_in);
        const size_t wr = dtype_row_bytes(DT_Q3_K, (uint64_t)n_in), bytes = kern_pack_bytes(DT_Q3_K, n_in, n_out);
        const size_t gb = (((size_t)nb * 912 + 63) / 64) * 64;
        CHECK_MSG(bytes == (size_t)ng * gb, "n_in=%d n_out=%d: %zu bytes, want %zu", n_in, n_out, bytes, (size_t)ng * gb);
        uint8_t *p = aligned_alloc(64, bytes);
        memset(p, 0xA5, bytes); /* packing must write every byte it owns */
        kern_pack(p, w, DT_Q3_K, n_in, n_out);
        int bad = 0;
        for (int r = 0; r < ng * 8 && !bad; r++)
            for (int b = 0; b < nb && !bad; b++) {
                uint16_t d, want_d = 0;
                int8_t sc[16], want_sc[16] = {0}, q[256], want_q[256];
                unpack_row(p + (size_t)(r / 8) * gb, b, r % 8, &d, sc, q);
                if (r < n_out) ggml_row((const block_q3_K *)(w + (size_t)r * wr) + b, &want_d, want_sc, want_q);
                else memset(want_q, -4, sizeof want_q); /* padding rows: zero bytes, u = 0 */
                if (d != want_d || memcmp(sc, want_sc, 16) || memcmp(q, want_q, 256)) bad = r + 1;
            }
        CHECK_MSG(!bad, "n_in=%d n_out=%d: packed row %d differs from its ggml row", n_in, n_out, bad - 1);
        for (int g = 0; g < ng; g++) /* the group's tail past its slabs */
            for (size_t k = (size_t)nb * 912; k < gb; k++) bad |= p[(size_t)g * gb + k] != 0;
        CHECK_MSG(!bad, "n_in=%d: a group's tail is not zero", n_in);
        for (int g = 0; g < ng && n_out % 8; g++) /* padding rows' bytes are zero (u = 0, scale 0, d 0) */
            for (int c = n_out - 8 * (ng - 1); g == ng - 1 && c < 8; c++)
                for (int b = 0; b < nb; b++) {
                    const uint8_t *s = p + (size_t)g * gb + (size_t)b * 912;
                    bad |= s[2 * c] | s[2 * c + 1];
                    for (int i = 0; i < 8; i++) {
                        bad |= s[16 + 112 * i + 2 * c] | s[16 + 112 * i + 2 * c + 1];
                        for (int v = 0; v < 3; v++)
                            for (int e = 0; e < 4; e++) bad |= s[16 + 112 * i + 16 + 32 * v + 4 * c + e];
                    }
                }
        CHECK_MSG(!bad, "n_in=%d n_out=%d: a padding row is not zero", n_in, n_out);
        free(w);
        free(p);
    }
}

TEST(q3kp_matmul_equals_reference)
{
    static const int n_outs[] = {1, 7, 8, 9, 77, 1001};
    threadpool *tp2 = tp_new(2);
    CHECK(tp2 != NULL);
    char why[320] = "";
    for (int oi = 0; oi < 6 && !why[0]; oi++) {
        const int n_in = oi == 4 ? 2048 : 256 * (1 + oi % 3), n_out = n_outs[oi], M = 40;
        rng_seed(9700 + (uint64_t)oi);
        uint8_t *w = mm_weights_make(DT_Q3_K, n_out, n_in);
        float *x = mm_acts_make(M, n_in), *ref = malloc(sizeof(float) * (size_t)M * n_out);
        uint8_t *wp = aligned_alloc(64, kern_pack_bytes(DT_Q3_K, n_in, n_out));
        kern_pack(wp, w, DT_Q3_K, n_in, n_out);
        kern_init(1);
        kern_matmul(ref, x, w, DT_Q3_K, M, n_in, n_out, NULL);
        packed8_vs_ref(DT_Q3_K, "random", x, wp, ref, n_in, n_out, tp2, why, sizeof why);
        free(w), free(x), free(ref), free(wp);
    }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

/* The integer sums at their bounds: every byte 0xFF (every value 3, every
 * scale 63, i.e. 31 after the - 32) or 0x00 (every value -4, every scale
 * -32), or random; pattern 4 has every value -4 and random scales; against
 * activations all +1 or all -1 (quantized to +-127) or random signs. */
TEST(q3kp_matmul_extreme_values)
{
    const int n_in = 1024, n_out = 17, M = 40;
    threadpool *tp2 = tp_new(2);
    char why[320] = "";
    rng_seed(9600);
    for (int pat = 0; pat < 5 && !why[0]; pat++) {
        const size_t wr = dtype_row_bytes(DT_Q3_K, (uint64_t)n_in);
        uint8_t *w = malloc(wr * n_out);
        float *x = malloc(sizeof(float) * (size_t)M * n_in), *ref = malloc(sizeof(float) * (size_t)M * n_out);
        for (int j = 0; j < n_out; j++)
            for (int b = 0; b < n_in / QK_K; b++) {
                block_q3_K *blk = (block_q3_K *)(w + (size_t)j * wr) + b;
                memset(blk, pat == 0 ? 0xFF : 0x00, sizeof *blk);
                for (int k = 0; pat >= 2 && k < (int)sizeof *blk; k++) ((uint8_t *)blk)[k] = (uint8_t)rng_u32();
                if (pat == 4) memset(blk->hmask, 0, sizeof blk->hmask), memset(blk->qs, 0, sizeof blk->qs);
                blk->d = f32_to_f16(0.001f * (float)(1 + (j + b) % 7));
            }
        for (int k = 0; k < M * n_in; k++) {
            const uint32_t r = rng_u32();
            x[k] = pat == 0 ? 1.0f : pat == 1 ? -1.0f : (r & 2) ? 1.0f : -1.0f;
        }
        uint8_t *wp = aligned_alloc(64, kern_pack_bytes(DT_Q3_K, n_in, n_out));
        kern_pack(wp, w, DT_Q3_K, n_in, n_out);
        kern_init(1);
        kern_matmul(ref, x, w, DT_Q3_K, M, n_in, n_out, NULL);
        char what[32];
        snprintf(what, sizeof what, "pattern %d", pat);
        packed8_vs_ref(DT_Q3_K, what, x, wp, ref, n_in, n_out, tp2, why, sizeof why);
        free(w), free(x), free(ref), free(wp);
    }
    tp_free(tp2);
    CHECK_MSG(!why[0], "%s", why);
}

/* to_kpack: the portable conversion of two packed groups equals
 * kern_kpack_group of the same rows in every byte a kern_kgemm tile reads
 * for the stored rows (values, scales, pairs, d, dmin), and every
 * variant's to_kpack writes exactly the portable one's bytes. */
TEST(q3kp_to_kpack_bytes)
{
    char why[256] = "";
    packed8_check_to_kpack(DT_Q3_K, kern_q3p_to_kpack_ref, 9800, why, sizeof why);
    CHECK_MSG(!why[0], "%s", why);
}

TEST(q3kp_pack_supports_follows_variant)
{
    CHECK(!kern_pack_supports(DT_Q3_K, 128) && kern_pack_bytes(DT_Q3_K, 128, 8) == 0);
    CHECK(kern_pack_supports(DT_Q3_K, 256) == (kern_vt.packed[DT_Q3_K].gemm != NULL));
    kern_init(1);
    CHECK(!kern_pack_supports(DT_Q3_K, 256)); /* the portable tile: the ggml rows stay */
    kern_init(0);
    if (kern_vt_avx2() && kern_cpu_has_avx2()) CHECK(kern_vt_avx2()->packed[DT_Q3_K].gemm != NULL);
}

int main(void)
{
    kern_init(0);
    printf("# kernel variant: %s\n", kern_variant());
    RUN(q3kp_pack_round_trip);
    RUN(q3kp_matmul_equals_reference);
    RUN(q3kp_matmul_extreme_values);
    RUN(q3kp_to_kpack_bytes);
    RUN(q3kp_pack_supports_follows_variant);
    kern_scratch_free();
    return test_summary();
}
