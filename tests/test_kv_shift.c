/* test_kv_shift.c - re-rotation of cached keys after a window drop
 * (src/kv/kv_shift.h): a key computed at position p and rotated by
 * -delta must equal the key computed at p - delta, within float rounding
 * for an f32 cache and within the dtype's rounding for the others; values
 * and the rows past n_rows must not change. */
#include "test.h"

#include "base/err.h"
#include "kernels/kernels.h"
#include "kv/kv_codec.h"
#include "kv/kv_latent.h"
#include "kv/kv_pool.h"
#include "kv/kv_shift.h"
#include "tensor/half.h"

#include <stdint.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

typedef struct {
    kv_dtype dt;
    uint32_t head_dim, rope_dim;
    bool neox;
    float scale;       /* rope_scale (linear) */
    bool freqs;        /* with rope frequency factors */
    double tol;        /* on |got - want|, values in [-1, 1] */
} shift_case;

/* Fills block b's K rows [0, T) with RoPE(k_t, p0 + t) (encoded in the dtype)
 * and V with noise, shifts rows [0, n_rows) by delta, and compares each
 * shifted key with RoPE(k_t, p0 + t - delta) encoded the same way. */
static void check_case(const shift_case *k, uint32_t p0, uint32_t delta, uint32_t n_rows, double *worst)
{
    const uint32_t L = 2, H = 2, T = 4, D = k->head_dim, kvd = H * D;
    const kv_shape sh = {L, H, D, T, k->dt, KV_KIND_KV};
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &sh, 2), 0);
    kv_rope rope = {.rope_dim = k->rope_dim, .neox = k->neox, .base = 10000.0f, .scale = k->scale};
    float ff[64];
    for (uint32_t i = 0; i < k->rope_dim / 2; i++) ff[i] = 1.0f + (float)i * 0.25f;
    if (k->freqs) rope.freqs = ff;
    float raw[2][4][64], want[2][4][64], v0[2][4][64], row[64];
    float *scratch = malloc(kv_shift_scratch_floats(&pool) * sizeof(float));
    CHECK(scratch != NULL);
    const float *ffp = k->freqs ? ff : NULL;
    const bool staged = kv_dtype_staged(k->dt);
    kv_stage st;
    CHECK_EQ_INT(kv_stage_init(&st, &pool.g), 0);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t t = 0; t < T; t++) {
            for (uint32_t i = 0; i < kvd; i++) raw[l][t][i] = frand(), v0[l][t][i] = frand();
            memcpy(row, raw[l][t], kvd * sizeof(float));
            kern_rope(row, (int)H, (int)D, (int)k->rope_dim, (int)(p0 + t), 10000.0f, k->scale, k->neox, ffp);
            if (staged) /* through the stage: the write of slot T - 1 seals the block */
                kv_codec_put(&pool, &st, 1, l, t, row, v0[l][t]);
            else {
                kv_codec_write_row(&pool, 1, l, KV_PLANE_K, t, row);
                kv_codec_write_row(&pool, 1, l, KV_PLANE_V, t, v0[l][t]);
            }
            memcpy(want[l][t], raw[l][t], kvd * sizeof(float));
            kern_rope(want[l][t], (int)H, (int)D, (int)k->rope_dim, (int)(p0 + t - delta), 10000.0f, k->scale,
                      k->neox, ffp);
        }
    /* V planes and the unshifted rows, decoded before the shift */
    float before_v[2][4][64], before_k[2][4][64], tmp[256];
    for (uint32_t l = 0; l < L; l++) {
        kv_block_ref r = kv_codec_ref(&pool, 1, l);
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t h = 0; h < H; h++) {
                kv_codec_dequant(&r, KV_PLANE_V, h, t, 1, before_v[l][t] + h * D, tmp);
                kv_codec_dequant(&r, KV_PLANE_K, h, t, 1, before_k[l][t] + h * D, tmp);
            }
    }
    kv_shift_block(&rope, &pool, 1, n_rows, delta, scratch);
    for (uint32_t l = 0; l < L; l++) {
        kv_block_ref r = kv_codec_ref(&pool, 1, l);
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t h = 0; h < H; h++) {
                float got[64], gv[64];
                kv_codec_dequant(&r, KV_PLANE_K, h, t, 1, got, tmp);
                kv_codec_dequant(&r, KV_PLANE_V, h, t, 1, gv, tmp);
                for (uint32_t i = 0; i < D; i++) {
                    CHECK_MSG(gv[i] == before_v[l][t][h * D + i], "V changed at layer %u row %u", l, t);
                    if (t >= n_rows) {
                        CHECK_MSG(got[i] == before_k[l][t][h * D + i], "row %u past n_rows changed", t);
                        continue;
                    }
                    double e = fabs((double)got[i] - want[l][t][h * D + i]);
                    if (e > *worst) *worst = e;
                    CHECK_MSG(e <= k->tol, "%s layer %u row %u head %u dim %u: %.6g vs %.6g (p %u delta %u)",
                              kv_dtype_name(k->dt), l, t, h, i, got[i], want[l][t][h * D + i], p0 + t, delta);
                }
            }
    }
    free(scratch);
    kv_stage_free(&st);
    kv_pool_free(&pool);
}

TEST(f32_shift_equals_rope_at_new_position)
{
    kern_init(0);
    const shift_case cases[] = {
        {KV_F32, 8, 8, false, 1.0f, false, 2e-4},
        {KV_F32, 16, 8, true, 1.0f, false, 2e-4},  /* NeoX, partial rotation */
        {KV_F32, 8, 8, false, 0.25f, true, 2e-4},  /* linear scaling + freq factors */
    };
    double worst = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        check_case(&cases[c], 100, 37, 4, &worst);
        if (test_failed_now) return;
        check_case(&cases[c], 1000, 512, 3, &worst);
        if (test_failed_now) return;
    }
    /* an exact rotation would be identical; float rounding is all that is allowed */
    CHECK_MSG(worst > 0 && worst < 2e-4, "worst f32 error %g", worst);
}

TEST(f16_shift_within_f16_rounding)
{
    kern_init(0);
    /* stored value rounded once before and once after the shift: 2 ulps of
     * f16 at |x| <= 1 (2^-10 each) bound it, plus the f32 angle error */
    const shift_case c16 = {KV_F16, 8, 8, false, 1.0f, false, 2.0 / 1024 + 2e-4};
    const shift_case cbf = {KV_BF16, 8, 8, true, 1.0f, false, 2.0 / 128 + 2e-4};
    double w16 = 0, wbf = 0;
    check_case(&c16, 100, 37, 4, &w16);
    if (test_failed_now) return;
    check_case(&c16, 1000, 512, 2, &w16);
    if (test_failed_now) return;
    check_case(&cbf, 300, 64, 4, &wbf);
    if (test_failed_now) return;
    CHECK_MSG(w16 > 0 && w16 > 1e-5, "f16 error %g: the dtype must have rounded something", w16);
}

TEST(quantized_and_fp8_shift)
{
    kern_init(0);
    /* q8_0: groups of 32, step amax/127; fp8 e4m3: 3 mantissa bits (<= 1/16
     * relative) with block scales re-derived when the sealed block is
     * re-encoded whole */
    const shift_case q8 = {KV_Q8_0, 32, 32, false, 1.0f, false, 2.0 / 127 + 2e-4};
    const shift_case e4 = {KV_FP8_E4M3, 8, 8, false, 1.0f, false, 2.0 / 16};
    double w = 0;
    check_case(&q8, 200, 48, 4, &w);
    if (test_failed_now) return;
    check_case(&e4, 200, 48, 4, &w);
}

/* A staged sequence's partly filled block lives in its f16 stage: rows
 * [0, n) rotated by -delta equal RoPE at the new position within 2 f16
 * roundings; rows past n are untouched, and so are the values. */
TEST(stage_shift_equals_rope_at_new_position)
{
    kern_init(0);
    const uint32_t L = 2, H = 2, T = 4, D = 8, kvd = H * D, n = 3, p0 = 300, delta = 64;
    const kv_shape sh = {L, H, D, T, KV_FP8_E4M3, KV_KIND_KV};
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &sh, 1), 0);
    kv_stage st;
    CHECK_EQ_INT(kv_stage_init(&st, &pool.g), 0);
    CHECK(st.rows != NULL);
    const kv_rope rope = {.rope_dim = D, .neox = false, .base = 10000.0f, .scale = 1.0f};
    float want[2][4][16], row[16], v[16], scratch[16];
    uint16_t before[2][2][4][16];
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t t = 0; t < T; t++) {
            for (uint32_t i = 0; i < kvd; i++) row[i] = frand(), v[i] = frand();
            memcpy(want[l][t], row, sizeof row);
            kern_rope(row, (int)H, (int)D, (int)D, (int)(p0 + t), 10000.0f, 1.0f, false, NULL);
            kern_rope(want[l][t], (int)H, (int)D, (int)D, (int)(p0 + t - delta), 10000.0f, 1.0f, false, NULL);
            kv_codec_stage_row(&st, l, KV_PLANE_K, t, row);
            kv_codec_stage_row(&st, l, KV_PLANE_V, t, v);
            for (int p = 0; p < 2; p++) memcpy(before[l][p][t], kv_stage_plane(&st, l, (kv_plane)p) + t * kvd, 32);
        }
    kv_shift_stage(&rope, &pool, &st, n, delta, scratch);
    double worst = 0;
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t t = 0; t < T; t++) {
            const uint16_t *k = kv_stage_plane(&st, l, KV_PLANE_K) + t * kvd;
            CHECK(memcmp(kv_stage_plane(&st, l, KV_PLANE_V) + t * kvd, before[l][1][t], 32) == 0);
            if (t >= n) {
                CHECK_MSG(memcmp(k, before[l][0][t], 32) == 0, "row %u past n changed", t);
                continue;
            }
            for (uint32_t i = 0; i < kvd; i++) {
                const double e = fabs((double)f16_to_f32(k[i]) - want[l][t][i]);
                worst = e > worst ? e : worst;
                CHECK_MSG(e <= 2.0 / 1024 + 2e-4, "layer %u row %u dim %u: %g vs %g", l, t, i,
                          (double)f16_to_f32(k[i]), (double)want[l][t][i]);
            }
        }
    CHECK(worst > 0);
    kv_stage_free(&st);
    kv_pool_free(&pool);
}

/* The latent kind: rows of c_kv (64) then k_pe (32) rotated at p0 + t,
 * in every dtype the kind holds (staged ones sealed from f16 rows). After
 * a shift by delta, k_pe is RoPE at p0 + t - delta within the dtype's
 * rounding (KIVI: its per-channel step, once before and once after), and
 * c_kv reads as before (bit for bit where re-encoding a decoded row gives
 * it back; KIVI within the f16 rounding its re-seal goes through). */
static void latent_case(kv_dtype dt, double tol, double tol_ckv, uint32_t delta)
{
    const uint32_t NL = 2, R = 64, D = 32, L = R + D, T = 4, p0 = 200;
    const kv_shape sh = {NL, 1, L, T, dt, KV_KIND_LATENT};
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &sh, 2), 0);
    const kv_rope rope = {.rope_dim = D, .neox = false, .base = 10000.0f, .scale = 1.0f};
    float *scratch = malloc(kv_shift_scratch_floats(&pool) * sizeof(float));
    float want[2][4][96], before[4 * 96], after[4 * 96], row[96];
    uint16_t half[4 * 96];
    const uint32_t table[1] = {1};
    for (uint32_t l = 0; l < NL; l++) {
        for (uint32_t t = 0; t < T; t++) {
            for (uint32_t i = 0; i < L; i++) row[i] = frand();
            memcpy(want[l][t], row, sizeof row);
            kern_rope(row + R, 1, (int)D, (int)D, (int)(p0 + t), 10000.0f, 1.0f, false, NULL);
            kern_rope(want[l][t] + R, 1, (int)D, (int)D, (int)(p0 + t - delta), 10000.0f, 1.0f, false, NULL);
            if (kv_dtype_staged(dt)) kv_codec_f16_row(row, half + t * L, L);
            else kv_latent_write_row(&pool, 1, l, t, row);
        }
        if (kv_dtype_staged(dt)) kv_latent_seal(&pool, 1, l, half);
    }
    double worst = 0;
    for (uint32_t l = 0; l < NL; l++) {
        kv_latent_read(&pool, table, l, T, before);
        if (l == 0) kv_shift_block(&rope, &pool, 1, T, delta, scratch); /* every layer at once */
        kv_latent_read(&pool, table, l, T, after);
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t i = 0; i < L; i++) {
                const float got = after[t * L + i];
                const double e = i < R ? fabs((double)got - before[t * L + i]) : fabs((double)got - want[l][t][i]);
                if (i >= R) worst = e > worst ? e : worst;
                CHECK_MSG(e <= (i < R ? tol_ckv : tol), "%s layer %u row %u dim %u: %.6g (c_kv before %.6g, want %.6g)",
                          kv_dtype_name(dt), l, t, i, got, before[t * L + i], want[l][t][i]);
            }
    }
    CHECK_MSG(worst > 0, "%s: k_pe came out exact: nothing was rounded", kv_dtype_name(dt));
    free(scratch);
    kv_pool_free(&pool);
}

TEST(latent_shift_turns_k_pe_only)
{
    kern_init(0);
    latent_case(KV_F32, 2e-4, 0, 37);
    latent_case(KV_F16, 2.0 / 1024 + 2e-4, 0, 37);
    latent_case(KV_Q8_0, 2.0 / 127 + 2e-4, 0, 48);
    latent_case(KV_FP8_E4M3, 2.0 / 16, 2.0 / 16, 48);
    /* KIVI: half a step of a range up to 2 before (carried through the rotation's pairs) and after */
    latent_case(KV_INT4, 2 * 1.5 * 2.0 / 15 / 2 + 2e-3, 2.0 / 1024, 48);
    latent_case(KV_INT2, 2 * 1.5 * 2.0 / 3 / 2 + 2e-3, 2.0 / 1024, 48);
}

/* A latent stage's rows: only the last rope_dim halves of a row turn. */
TEST(latent_stage_shift_turns_k_pe_only)
{
    kern_init(0);
    const uint32_t R = 64, D = 32, L = R + D, T = 4, n = 3, p0 = 300, delta = 64;
    const kv_shape sh = {1, 1, L, T, KV_INT4, KV_KIND_LATENT};
    kv_pool pool;
    CHECK_EQ_INT(kv_pool_init(&pool, &sh, 1), 0);
    kv_stage st;
    CHECK_EQ_INT(kv_stage_init(&st, &pool.g), 0);
    const kv_rope rope = {.rope_dim = D, .neox = false, .base = 10000.0f, .scale = 1.0f};
    float want[4][96], row[96], scratch[96];
    uint16_t before[4][96];
    for (uint32_t t = 0; t < T; t++) {
        for (uint32_t i = 0; i < L; i++) row[i] = frand();
        memcpy(want[t], row, sizeof row);
        kern_rope(row + R, 1, (int)D, (int)D, (int)(p0 + t), 10000.0f, 1.0f, false, NULL);
        kern_rope(want[t] + R, 1, (int)D, (int)D, (int)(p0 + t - delta), 10000.0f, 1.0f, false, NULL);
        kv_codec_stage_row(&st, 0, KV_PLANE_K, t, row);
        memcpy(before[t], kv_stage_plane(&st, 0, KV_PLANE_K) + t * L, sizeof before[t]);
    }
    kv_shift_stage(&rope, &pool, &st, n, delta, scratch);
    for (uint32_t t = 0; t < T; t++) {
        const uint16_t *k = kv_stage_plane(&st, 0, KV_PLANE_K) + t * L;
        CHECK_MSG(memcmp(k, before[t], t < n ? R * 2 : sizeof before[t]) == 0, "row %u: c_kv or a row past n changed", t);
        for (uint32_t i = R; i < L && t < n; i++)
            CHECK_MSG(fabs((double)f16_to_f32(k[i]) - want[t][i]) <= 2.0 / 1024 + 2e-4, "row %u dim %u: %g vs %g", t, i,
                      (double)f16_to_f32(k[i]), (double)want[t][i]);
    }
    kv_stage_free(&st);
    kv_pool_free(&pool);
}

TEST(supported_dtypes)
{
    for (int t = 0; t < KV_DTYPE_COUNT; t++) CHECK(kv_shift_latent_supported((kv_dtype)t));
    CHECK(!kv_shift_latent_supported(KV_DTYPE_COUNT));
    CHECK(kv_shift_supported(KV_F32) && kv_shift_supported(KV_F16) && kv_shift_supported(KV_Q4_0));
    CHECK(kv_shift_supported(KV_FP8_E4M3) && kv_shift_supported(KV_FP8_E5M2));
    CHECK(!kv_shift_supported(KV_INT4) && !kv_shift_supported(KV_INT2));
}

int main(void)
{
    RUN(f32_shift_equals_rope_at_new_position);
    RUN(f16_shift_within_f16_rounding);
    RUN(quantized_and_fp8_shift);
    RUN(stage_shift_equals_rope_at_new_position);
    RUN(latent_shift_turns_k_pe_only);
    RUN(latent_stage_shift_turns_k_pe_only);
    RUN(supported_dtypes);
    return test_summary();
}
