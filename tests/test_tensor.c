/* test_tensor.c - block formats and row (de)quantization (src/tensor).
 *
 * Five kinds of checks:
 *  - layout: struct sizes agree with the dtype table (the static_asserts in
 *    blocks.h pin them at compile time);
 *  - hand-built blocks whose expected floats were worked out by hand from
 *    the format description (Q4_K's packed 6-bit scales, Q6_K's ql/qh split);
 *  - quantizers on random data: error bounds, and stability where it must
 *    hold (q8_0 re-quantizes its own output to the same bytes, q4_0 to the
 *    same values);
 *  - ggml itself as the oracle: the llama.cpp peer ships libggml-base.so,
 *    which exports ggml's reference (de)quantizers. If it is present we
 *    dlopen it and demand bit-identical dequantization, bit-identical Q8_0 /
 *    Q8_K quantization and f16/bf16 conversion, and weight quantizers at
 *    least as accurate as ggml's. Absent, those tests SKIP;
 *  - pl_quantize on stories260K and on a synthetic 16-layer model built to
 *    hit every rule of the mixes (llama.cpp's Q4_K_M choices, tied
 *    embeddings, fallbacks, tensors that must stay as they are), and its
 *    errors.
 */
#include "test.h"

#include <assert.h>
#include <dlfcn.h>
#include <stddef.h>
#include <float.h>
#include <stdint.h>
#include <unistd.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "pagellm.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"
#include "model/imatrix.h"
#include "model/quant_mix.h"

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Tests that draw data reseed first, so that their data (and their margins
 * against the bounds) do not depend on which tests ran before them. */
static void rng_seed(uint64_t seed) { rng_state = 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull); }

static float rng_unit(void) { return (float)((rng_next() >> 40) + 0.5) / 16777216.0f; }

static float rng_gauss(void)
{
    const float u = rng_unit(), v = rng_unit();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

/* Weight-like data: gaussian, with the scale varying from one group of 32 to
 * the next and a few outliers, as real weight rows have. */
static void fill_weights(float *x, int64_t n)
{
    float s = 1;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) s = expf(0.5f * rng_gauss());
        x[i] = s * rng_gauss();
        if (rng_next() % 512 == 0) x[i] *= 6;
    }
}

static double rel_rms_err(const float *x, const float *y, int64_t n)
{
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return sqrt(e / s);
}

/* Scratch rows shared by the tests (static so a failing CHECK leaks nothing). */
#define NMAX (256 * 256)
static float gx[NMAX], gy[NMAX], gz[NMAX];
static uint8_t gq[NMAX * 4], gq2[NMAX * 4];

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* The formats beside the first ones (blocks.h): every list of types below
 * covers them too. */
#define NEW_TYPES DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_1, DT_Q2_K, DT_Q3_K, DT_Q5_K, DT_IQ4_NL, DT_IQ4_XS, DT_TQ1_0, DT_TQ2_0
#define LATTICE_TYPES DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S, DT_IQ3_XXS, DT_IQ3_S, DT_IQ1_S, DT_IQ1_M

/* quantize then dequantize n floats through type; returns rel rms error. */
static double roundtrip_err(uint32_t type, const float *x, float *y, int64_t n)
{
    assert(n <= NMAX);
    quant_quantize_row(type, x, gq, n);
    quant_dequant_row(type, gq, y, n);
    return rel_rms_err(x, y, n);
}

/* -------------------------------------------------------------- layout */

TEST(block_sizes_match_dtype_table)
{
    CHECK_EQ_INT(sizeof(block_q8_0), dtype_get(DT_Q8_0)->type_size);
    CHECK_EQ_INT(sizeof(block_q4_0), dtype_get(DT_Q4_0)->type_size);
    CHECK_EQ_INT(sizeof(block_q4_K), dtype_get(DT_Q4_K)->type_size);
    CHECK_EQ_INT(sizeof(block_q6_K), dtype_get(DT_Q6_K)->type_size);
    CHECK_EQ_INT(sizeof(block_q8_K), dtype_get(DT_Q8_K)->type_size);
    CHECK_EQ_INT(QK8_0, dtype_get(DT_Q8_0)->blck_size);
    CHECK_EQ_INT(QK4_0, dtype_get(DT_Q4_0)->blck_size);
    CHECK_EQ_INT(QK_K, dtype_get(DT_Q4_K)->blck_size);
    CHECK_EQ_INT(QK_K, dtype_get(DT_Q6_K)->blck_size);
    CHECK_EQ_INT(QK_K, dtype_get(DT_Q8_K)->blck_size);
    /* field offsets of the on-disk layout */
    CHECK_EQ_INT(offsetof(block_q4_K, scales), 4);
    CHECK_EQ_INT(offsetof(block_q4_K, qs), 16);
    CHECK_EQ_INT(offsetof(block_q6_K, qh), 128);
    CHECK_EQ_INT(offsetof(block_q6_K, scales), 192);
    CHECK_EQ_INT(offsetof(block_q6_K, d), 208);
    CHECK_EQ_INT(offsetof(block_q8_K, bsums), 260);
    /* the other formats */
    const struct { uint32_t t; size_t size; } more[] = {
        {DT_Q4_1, sizeof(block_q4_1)}, {DT_Q5_0, sizeof(block_q5_0)}, {DT_Q5_1, sizeof(block_q5_1)},
        {DT_Q8_1, sizeof(block_q8_1)}, {DT_Q2_K, sizeof(block_q2_K)}, {DT_Q3_K, sizeof(block_q3_K)},
        {DT_Q5_K, sizeof(block_q5_K)}, {DT_IQ4_NL, sizeof(block_iq4_nl)}, {DT_IQ4_XS, sizeof(block_iq4_xs)},
        {DT_TQ1_0, sizeof(block_tq1_0)}, {DT_TQ2_0, sizeof(block_tq2_0)},
        {DT_IQ2_XXS, sizeof(block_iq2_xxs)}, {DT_IQ2_XS, sizeof(block_iq2_xs)}, {DT_IQ2_S, sizeof(block_iq2_s)},
        {DT_IQ3_XXS, sizeof(block_iq3_xxs)}, {DT_IQ3_S, sizeof(block_iq3_s)}, {DT_IQ1_S, sizeof(block_iq1_s)},
        {DT_IQ1_M, sizeof(block_iq1_m)},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        CHECK_MSG(more[i].size == dtype_get(more[i].t)->type_size, "%s: struct %zu B, table %u B",
                  dtype_get(more[i].t)->name, more[i].size, dtype_get(more[i].t)->type_size);
    CHECK_EQ_INT(offsetof(block_q5_1, qh), 4);
    CHECK_EQ_INT(offsetof(block_q2_K, d), 80);
    CHECK_EQ_INT(offsetof(block_q3_K, scales), 96);
    CHECK_EQ_INT(offsetof(block_q5_K, qh), 16);
    CHECK_EQ_INT(offsetof(block_q5_K, qs), 48);
    CHECK_EQ_INT(offsetof(block_iq4_xs, qs), 8);
    CHECK_EQ_INT(offsetof(block_tq1_0, qh), 48);
    CHECK_EQ_INT(offsetof(block_tq2_0, d), 64);
    CHECK_EQ_INT(offsetof(block_iq2_s, qh), 66);
    CHECK_EQ_INT(offsetof(block_iq3_s, signs), 74);
    CHECK_EQ_INT(offsetof(block_iq3_s, scales), 106);
    CHECK_EQ_INT(offsetof(block_iq1_s, qh), 34);
    CHECK_EQ_INT(offsetof(block_iq1_m, scales), 48);
}

TEST(supported_types)
{
    const uint32_t yes[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q6_K, DT_Q8_K,
                            DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_1, DT_Q2_K, DT_Q3_K, DT_Q5_K,
                            DT_IQ4_NL, DT_IQ4_XS, DT_TQ1_0, DT_TQ2_0};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) CHECK(quant_supported(yes[i]));
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) CHECK(quant_can_quantize(yes[i]));
    /* the lattice i-quants: read and written */
    const uint32_t lattice[] = {DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S, DT_IQ3_XXS, DT_IQ3_S, DT_IQ1_S, DT_IQ1_M};
    for (size_t i = 0; i < sizeof lattice / sizeof lattice[0]; i++) {
        CHECK(quant_supported(lattice[i]));
        CHECK(quant_is_lattice(lattice[i]));
        CHECK(quant_can_quantize(lattice[i]));
    }
    CHECK(!quant_is_lattice(DT_IQ4_XS));
    CHECK(!quant_supported(DT_MXFP4));
    CHECK(!quant_supported(DT_I32));
    CHECK(!quant_supported(12345));
}

TEST(round_nearest_ties_to_even)
{
    CHECK_EQ_INT(quant_round_nearest(2.5f), 2);
    CHECK_EQ_INT(quant_round_nearest(3.5f), 4);
    CHECK_EQ_INT(quant_round_nearest(-2.5f), -2);
    CHECK_EQ_INT(quant_round_nearest(-1.5f), -2);
    CHECK_EQ_INT(quant_round_nearest(0.49999997f), 0);
    CHECK_EQ_INT(quant_round_nearest(-0.5f), 0);
    CHECK_EQ_INT(quant_round_nearest(127.4f), 127);
    CHECK_EQ_INT(quant_round_nearest(-4194303.0f), -4194303);
}

/* ----------------------------------------------------- f16 and bf16 */

TEST(f16_known_values)
{
    const struct { uint16_t h; float f; } v[] = {
        {0x3C00, 1.0f}, {0xC000, -2.0f}, {0x7BFF, 65504.0f}, {0x0001, 0x1p-24f},
        {0x03FF, 1023 * 0x1p-24f}, {0x0400, 0x1p-14f}, {0x3555, 0.333251953125f},
        {0x8000, -0.0f}, {0x0000, 0.0f}, {0x7C00, INFINITY}, {0xFC00, -INFINITY},
        {0x3C01, 1.0f + 0x1p-10f}, {0xFBFF, -65504.0f},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        CHECK_MSG(f32_bits(f16_to_f32(v[i].h)) == f32_bits(v[i].f), "f16 %04x -> %g, want %g",
                  v[i].h, f16_to_f32(v[i].h), v[i].f);
        CHECK_MSG(f32_to_f16(v[i].f) == v[i].h, "%g -> f16 %04x, want %04x", v[i].f,
                  f32_to_f16(v[i].f), v[i].h);
    }
    CHECK(isnan(f16_to_f32(0x7E00)));
    CHECK(isnan(f16_to_f32(0x7C01)));
    CHECK(isnan(f16_to_f32(0xFE00)));
}

TEST(f16_rounding_edges)
{
    /* ties to even between two normals */
    CHECK_EQ_INT(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    CHECK_EQ_INT(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    CHECK_EQ_INT(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    CHECK_EQ_INT(f32_to_f16(-(1.0f + 0x1p-11f)), 0xBC00);
    /* overflow: 65520 is the tie between 65504 and 2^16 -> inf */
    CHECK_EQ_INT(f32_to_f16(65519.0f), 0x7BFF);
    CHECK_EQ_INT(f32_to_f16(65520.0f), 0x7C00);
    CHECK_EQ_INT(f32_to_f16(1e10f), 0x7C00);
    CHECK_EQ_INT(f32_to_f16(-1e10f), 0xFC00);
    CHECK_EQ_INT(f32_to_f16(FLT_MAX), 0x7C00);
    /* subnormals and underflow ties */
    CHECK_EQ_INT(f32_to_f16(0x1p-24f), 0x0001);
    CHECK_EQ_INT(f32_to_f16(0x1p-25f), 0x0000);          /* tie 0 / 1 -> 0 */
    CHECK_EQ_INT(f32_to_f16(0x1.8p-25f), 0x0001);
    CHECK_EQ_INT(f32_to_f16(3 * 0x1p-25f), 0x0002);      /* tie 1 / 2 -> 2 */
    CHECK_EQ_INT(f32_to_f16(5 * 0x1p-25f), 0x0002);      /* tie 2 / 3 -> 2 */
    CHECK_EQ_INT(f32_to_f16(0x1p-26f), 0x0000);
    CHECK_EQ_INT(f32_to_f16(-0x1p-26f), 0x8000);
    CHECK_EQ_INT(f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* tie at top of subnormals -> normal */
    CHECK_EQ_INT(f32_to_f16(1e-45f), 0x0000);            /* f32 subnormal */
    CHECK_EQ_INT(f32_to_f16(-0.0f), 0x8000);
    /* non-finite */
    CHECK_EQ_INT(f32_to_f16(INFINITY), 0x7C00);
    CHECK_EQ_INT(f32_to_f16(-INFINITY), 0xFC00);
    const uint16_t n = f32_to_f16(NAN);
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x03FF) != 0);
    const uint16_t sn = f32_to_f16(bits_f32(0x7F800001u)); /* signalling NaN stays NaN */
    CHECK((sn & 0x7C00) == 0x7C00 && (sn & 0x03FF) != 0);
}

TEST(f16_every_value_round_trips)
{
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = f16_to_f32((uint16_t)h);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) { CHECK_MSG(isnan(f), "%04x", h); continue; }
        CHECK_MSG(f32_to_f16(f) == h, "f16 %04x -> %g -> %04x", h, f, f32_to_f16(f));
    }
}

TEST(bf16_edges)
{
    CHECK_EQ_INT(f32_to_bf16(1.0f), 0x3F80);
    CHECK_EQ_INT(f32_to_bf16(-123.5f), 0xC2F7);
    CHECK(bf16_to_f32(0x4049) == 3.140625f);
    CHECK_EQ_INT(f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);             /* tie -> even */
    CHECK_EQ_INT(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);         /* tie -> even */
    CHECK_EQ_INT(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    CHECK_EQ_INT(f32_to_bf16(FLT_MAX), 0x7F80);                    /* rounds to inf */
    CHECK_EQ_INT(f32_to_bf16(INFINITY), 0x7F80);
    CHECK_EQ_INT(f32_to_bf16(-INFINITY), 0xFF80);
    CHECK_EQ_INT(f32_to_bf16(-0.0f), 0x8000);
    CHECK_EQ_INT(f32_to_bf16(bits_f32(0x00000001u)), 0x0000);      /* f32 subnormals */
    CHECK_EQ_INT(f32_to_bf16(bits_f32(0x00008000u)), 0x0000);      /* tie -> even 0 */
    CHECK_EQ_INT(f32_to_bf16(bits_f32(0x00018000u)), 0x0002);      /* tie -> even 2 */
    CHECK_EQ_INT(f32_to_bf16(bits_f32(0x00010000u)), 0x0001);
    CHECK(bf16_to_f32(0x0001) == bits_f32(0x00010000u));
    /* NaN stays NaN, also a signalling NaN whose payload sits in the low bits */
    CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))));
    CHECK(isnan(bf16_to_f32(f32_to_bf16(bits_f32(0x7F800001u)))));
    CHECK(isnan(bf16_to_f32(f32_to_bf16(bits_f32(0xFF800001u)))));
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = bf16_to_f32((uint16_t)h);
        if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) continue;
        CHECK_MSG(f32_to_bf16(f) == h, "bf16 %04x round trip", h);
    }
}

TEST(f16_bf16_rows)
{
    const float x[4] = {1.0f, -2.0f, 0.5f, 65504.0f};
    uint16_t h[4];
    float y[4];
    quant_quantize_row(DT_F16, x, h, 4);
    CHECK_EQ_INT(h[0], 0x3C00); CHECK_EQ_INT(h[1], 0xC000); CHECK_EQ_INT(h[2], 0x3800);
    CHECK_EQ_INT(h[3], 0x7BFF);
    quant_dequant_row(DT_F16, h, y, 4);
    CHECK(memcmp(x, y, sizeof x) == 0);
    quant_quantize_row(DT_BF16, x, h, 4);
    CHECK_EQ_INT(h[0], 0x3F80); CHECK_EQ_INT(h[1], 0xC000); CHECK_EQ_INT(h[2], 0x3F00);
    quant_dequant_row(DT_BF16, h, y, 3);
    CHECK(memcmp(x, y, 3 * sizeof(float)) == 0);
    float z[4];
    quant_quantize_row(DT_F32, x, z, 4);
    CHECK(memcmp(x, z, sizeof x) == 0);
    quant_dequant_row(DT_F32, x, z, 4);
    CHECK(memcmp(x, z, sizeof x) == 0);
}

/* ------------------------------------------------- hand-built blocks */

TEST(q8_0_hand_block)
{
    block_q8_0 b[2];
    memset(b, 0, sizeof b);
    b[0].d = 0x3800; /* 0.5 */
    b[1].d = 0xC400; /* -4 */
    for (int j = 0; j < 32; j++) { b[0].qs[j] = (int8_t)(j - 16); b[1].qs[j] = (int8_t)(3 * j - 96); }
    b[0].qs[0] = -128;
    b[0].qs[31] = 127;
    float y[64];
    quant_dequant_row(DT_Q8_0, b, y, 64);
    CHECK(y[0] == -64.0f);
    CHECK(y[1] == -7.5f);
    CHECK(y[16] == 0.0f);
    CHECK(y[17] == 0.5f);
    CHECK(y[31] == 63.5f);
    CHECK(y[32] == 384.0f);   /* -96 * -4 */
    CHECK(y[63] == 12.0f);   /* (3*31 - 96) * -4 */
    CHECK(y[48] == -(3 * 16 - 96) * 4.0f);
}

TEST(q4_0_hand_block)
{
    block_q4_0 b;
    b.d = 0x4000; /* 2.0 */
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    quant_dequant_row(DT_Q4_0, &b, y, 32);
    /* element j (j < 16) is the low nibble j: 2*(j-8); element j+16 the high
     * nibble 15-j: 2*(7-j) */
    CHECK(y[0] == -16.0f);
    CHECK(y[8] == 0.0f);
    CHECK(y[15] == 14.0f);
    CHECK(y[16] == 14.0f);
    CHECK(y[23] == 0.0f);
    CHECK(y[31] == -16.0f);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == 2.0f * (float)(j - 8));
        CHECK(y[j + 16] == 2.0f * (float)(7 - j));
    }
    /* -16 is the extreme: ggml's rounding (d = max / -8 = 2) and ours both
     * give back exactly this block */
    block_q4_0 c;
    quant_q4_0_quantize_row_ref(y, &c, 32);
    CHECK(memcmp(&b, &c, sizeof b) == 0);
    quant_quantize_row(DT_Q4_0, y, &c, 32);
    CHECK(memcmp(&b, &c, sizeof b) == 0);
}

/* Q4_K: d = 1, dmin = 0.5, sub-block scales / mins chosen to use all six
 * bits, packed by hand (see the worked bytes below). */
static const uint8_t q4k_sc[8] = {1, 2, 3, 4, 33, 40, 63, 17};
static const uint8_t q4k_m[8] = {0, 1, 5, 10, 20, 63, 2, 48};

static void q4k_hand_block(block_q4_K *b)
{
    b->d = 0x3C00;    /* 1.0 */
    b->dmin = 0x3800; /* 0.5 */
    /* bytes 0-3: sc[0..3] | (sc[4..7] >> 4) << 6:
     *   33>>4=2, 40>>4=2, 63>>4=3, 17>>4=1  ->  1|2<<6, 2|2<<6, 3|3<<6, 4|1<<6
     * bytes 4-7: m[0..3] | (m[4..7] >> 4) << 6:
     *   20>>4=1, 63>>4=3, 2>>4=0, 48>>4=3   ->  0|1<<6, 1|3<<6, 5|0, 10|3<<6
     * bytes 8-11: (sc[4..7] & 15) | (m[4..7] & 15) << 4:
     *   1|4<<4, 8|15<<4, 15|2<<4, 1|0<<4 */
    const uint8_t scales[12] = {0x81, 0x82, 0xC3, 0x44, 0x40, 0xC1, 0x05, 0xCA,
                                0x41, 0xF8, 0x2F, 0x01};
    memcpy(b->scales, scales, 12);
    /* group g: low nibbles (sub-block 2g) count l & 15 up, high nibbles
     * (sub-block 2g+1) count 15 - (l & 15) down */
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) b->qs[32 * g + l] = (uint8_t)((l & 15) | ((15 - (l & 15)) << 4));
}

TEST(q4_K_scale_unpacking)
{
    block_q4_K b;
    q4k_hand_block(&b);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        block_q4_K_scale_min(j, b.scales, &sc, &m);
        CHECK_MSG(sc == q4k_sc[j] && m == q4k_m[j], "sub-block %d: sc %d m %d", j, sc, m);
    }
}

TEST(q4_K_hand_block)
{
    block_q4_K b;
    q4k_hand_block(&b);
    float y[256];
    quant_dequant_row(DT_Q4_K, &b, y, 256);
    /* worked by hand: y = 1*sc*q - 0.5*m */
    CHECK(y[0] == 0.0f);             /* sb 0, q 0: 1*0 - 0 */
    CHECK(y[5] == 5.0f);             /* sb 0, q 5: 1*5 - 0 */
    CHECK(y[32 + 1] == 27.5f);       /* sb 1, q 14: 2*14 - 0.5 */
    CHECK(y[64 + 20] == 9.5f);       /* sb 2, q 4: 3*4 - 2.5 */
    CHECK(y[96 + 0] == 55.0f);       /* sb 3, q 15: 4*15 - 5 */
    CHECK(y[128 + 5] == 155.0f);     /* sb 4, q 5: 33*5 - 10 */
    CHECK(y[160 + 3] == 448.5f);     /* sb 5, q 12: 40*12 - 31.5 */
    CHECK(y[192 + 15] == 944.0f);    /* sb 6, q 15: 63*15 - 1 */
    CHECK(y[224 + 0] == 231.0f);     /* sb 7, q 15: 17*15 - 24 */
    CHECK(y[224 + 15] == -24.0f);    /* sb 7, q 0: 0 - 24 */
    for (int s = 0; s < 8; s++)
        for (int l = 0; l < 32; l++) {
            const int q = s % 2 == 0 ? (l & 15) : 15 - (l & 15);
            const float want = (float)(q4k_sc[s] * q) - 0.5f * q4k_m[s];
            CHECK_MSG(y[32 * s + l] == want, "sb %d l %d: %g vs %g", s, l, y[32 * s + l], want);
        }
}

TEST(q6_K_hand_block)
{
    block_q6_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3400; /* 0.25 */
    for (int s = 0; s < 16; s++) b.scales[s] = (int8_t)(s - 8);
    /* element e = 128h + 32k + l: low 4 bits in ql[64h + l + 32(k&1)],
     * nibble k>>1; high 2 bits in qh[32h + l] bits 2k..2k+1 */
    b.ql[0] = 0x0F;  b.qh[0] = 0x03;       /* e 0   (h0 k0 l0): q 63 */
    b.ql[33] = 0x05; b.qh[1] = 0x01 << 2;  /* e 33  (h0 k1 l1): q 0x15 = 21 */
    b.ql[2] = 0xF0;  b.qh[2] = 0x02 << 4;  /* e 66  (h0 k2 l2): q 0x2F = 47 */
    b.qh[3] = 0x02 << 6;                   /* e 99  (h0 k3 l3): q 0x20 = 32 */
    b.ql[127] = 0x10;                      /* e 255 (h1 k3 l31): q 1 */
    b.ql[80] = 0x08; b.qh[48] = 0x02;      /* e 144 (h1 k0 l16): q 0x28 = 40 */
    float y[256];
    quant_dequant_row(DT_Q6_K, &b, y, 256);
    /* y = 0.25 * sc[e/16] * (q - 32) */
    CHECK(y[0] == -62.0f);     /* 0.25 * -8 * 31 */
    CHECK(y[33] == 16.5f);     /* 0.25 * -6 * -11 */
    CHECK(y[66] == -15.0f);    /* 0.25 * -4 * 15 */
    CHECK(y[99] == 0.0f);      /* 0.25 * -2 * 0 */
    CHECK(y[255] == -54.25f);  /* 0.25 * 7 * -31 */
    CHECK(y[144] == 2.0f);     /* 0.25 * 1 * 8 */
    for (int e = 0; e < 256; e++) {
        if (e == 0 || e == 33 || e == 66 || e == 99 || e == 255 || e == 144) continue;
        const float want = 0.25f * (float)(e / 16 - 8) * -32.0f;  /* q 0 everywhere else */
        CHECK_MSG(y[e] == want, "e %d: %g vs %g", e, y[e], want);
    }
}

TEST(q8_K_hand_block)
{
    block_q8_K b;
    memset(&b, 0, sizeof b);
    b.d = 0.5f;
    for (int j = 0; j < 256; j++) b.qs[j] = (int8_t)(j - 128);
    float y[256];
    quant_dequant_row(DT_Q8_K, &b, y, 256);
    CHECK(y[0] == -64.0f);
    CHECK(y[128] == 0.0f);
    CHECK(y[255] == 63.5f);
}

/* ------------------------------------------------ hand-checked quantizers */

TEST(q8_0_quantize_known)
{
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) * 0.25f;   /* amax 4 at j = 0 */
    block_q8_0 b;
    quant_quantize_row(DT_Q8_0, x, &b, 32);
    CHECK_EQ_INT(b.d, f32_to_f16(4.0f / 127));
    CHECK_EQ_INT(b.qs[0], -127);
    CHECK_EQ_INT(b.qs[16], 0);
    CHECK_EQ_INT(b.qs[17], 8);     /* 0.25 * 31.75 = 7.94 */
    CHECK_EQ_INT(b.qs[18], 16);    /* 15.875 */
    CHECK_EQ_INT(b.qs[31], 119);   /* 119.06 */
    /* all zero: d 0 and q 0 */
    memset(x, 0, sizeof x);
    quant_quantize_row(DT_Q8_0, x, &b, 32);
    CHECK_EQ_INT(b.d, 0);
    for (int j = 0; j < 32; j++) CHECK_EQ_INT(b.qs[j], 0);
}

TEST(q8_K_quantize_known)
{
    float x[256] = {0};
    x[0] = -127.0f; x[1] = 2.5f; x[2] = 3.5f; x[3] = -0.5f; x[17] = 100.4f;
    block_q8_K b;
    quant_quantize_row(DT_Q8_K, x, &b, 256);
    /* iscale = -127 / max = 1; nearest_int rounds ties to even */
    CHECK(b.d == 1.0f);
    CHECK_EQ_INT(b.qs[0], -127);
    CHECK_EQ_INT(b.qs[1], 2);
    CHECK_EQ_INT(b.qs[2], 4);
    CHECK_EQ_INT(b.qs[3], 0);
    CHECK_EQ_INT(b.qs[17], 100);
    CHECK_EQ_INT(b.bsums[0], -127 + 2 + 4);
    CHECK_EQ_INT(b.bsums[1], 100);
    CHECK_EQ_INT(b.bsums[2], 0);
    /* a positive extreme maps to -127 too (d < 0) */
    memset(x, 0, sizeof x);
    x[5] = 2.0f; x[6] = -1.0f;
    quant_quantize_row(DT_Q8_K, x, &b, 256);
    CHECK_EQ_INT(b.qs[5], -127);
    CHECK_EQ_INT(b.qs[6], 64);     /* 63.5 -> 64 (even) */
    CHECK(b.d < 0);
}

TEST(zero_rows_decode_to_zero)
{
    const uint32_t types[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q6_K, DT_Q8_K, NEW_TYPES, LATTICE_TYPES};
    float x[512] = {0}, y[512];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int i = 0; i < 512; i++) y[i] = 1;
        roundtrip_err(types[t], x, y, 512);
        for (int i = 0; i < 512; i++) CHECK_MSG(y[i] == 0.0f, "type %u: y[%d] = %g", types[t], i, y[i]);
    }
}

/* Constant rows (a sub-block with max == min) and one-hot rows exercise the
 * degenerate branches of the scale searches. */
TEST(degenerate_rows)
{
    const uint32_t types[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q6_K, DT_Q8_K, NEW_TYPES, LATTICE_TYPES};
    float x[256], y[256];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int i = 0; i < 256; i++) x[i] = 0.75f;
        /* the table formats have no zero level: the other 31 elements of a
         * one-hot block decode to d (3/127 here). Nor have the lattice ones
         * but IQ1: there the spike's 31 neighbours decode to +- its scale x
         * the lowest level (3 x 8/43 in IQ2), about the spike's own energy,
         * and their codebooks hold few all-equal entries near the top level
         * the scale search aims at, so a constant row is ~15-33% off (IQ2_XS
         * and IQ2_S find one) */
        const bool lattice = quant_is_lattice(types[t]), iq1 = types[t] == DT_IQ1_S || types[t] == DT_IQ1_M;
        const double tol = types[t] == DT_IQ4_NL || types[t] == DT_IQ4_XS ? 0.05 : lattice && !iq1 ? 0.35 : 0.01;
        const double tol1 = lattice ? (iq1 ? 0.65 : 1.1) : tol;
        CHECK_MSG(roundtrip_err(types[t], x, y, 256) < tol, "constant row, type %u", types[t]);
        for (int i = 0; i < 256; i++) x[i] = -0.75f;
        CHECK_MSG(roundtrip_err(types[t], x, y, 256) < tol, "negative constant, type %u", types[t]);
        memset(x, 0, sizeof x);
        x[77] = -3.0f;
        const double e1 = roundtrip_err(types[t], x, y, 256);
        CHECK_MSG(e1 < tol1, "one-hot row, type %s: %g", dtype_get(types[t])->name, e1);
    }
}

/* NaN / inf / huge inputs give garbage blocks (nothing can represent them),
 * but must stay memory- and UB-safe (this runs under UBSan in `make asan`)
 * and must not leak into the neighbouring blocks of the row. */
TEST(nonfinite_inputs_stay_in_their_block)
{
    rng_seed(1);
    const uint32_t types[] = {DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q6_K, DT_Q8_K, NEW_TYPES, LATTICE_TYPES};
    const float bad[] = {NAN, INFINITY, -INFINITY, 1e38f, -3e38f};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            float x[512], y[512];
            fill_weights(x, 512);
            x[5] = bad[b];
            x[17] = bad[(b + 1) % 5];
            quant_quantize_row(types[t], x, gq, 512);
            quant_dequant_row(types[t], gq, y, 512);
            /* the second 256 elements are whole blocks of every type */
            const double e = rel_rms_err(x + 256, y + 256, 256);
            const double bound = types[t] == DT_TQ1_0 || types[t] == DT_TQ2_0 ? 0.9
                                 : types[t] == DT_Q2_K || quant_is_lattice(types[t]) ? 0.6
                                                                                    : 0.2;
            CHECK_MSG(e < bound, "%s with %g: the clean half has error %g", dtype_get(types[t])->name, bad[b], e);
            if (types[t] != DT_Q4_0) continue;
            quant_q4_0_quantize_row_ref(x, (block_q4_0 *)gq, 512);
            quant_dequant_row(DT_Q4_0, gq, y, 512);
            CHECK(rel_rms_err(x + 256, y + 256, 256) < 0.2);
        }
}

/* -------------------------------------------------- random round trips */

TEST(random_roundtrip_error_bounds)
{
    rng_seed(2);
    const int64_t n = 256 * 64;
    float *x = gx, *y = gy;
    /* gaussian rows of different scales (the harsher fill_weights data is
     * for the comparisons with ggml below) */
    for (int64_t i = 0; i < n; i++) x[i] = rng_gauss() * (float)(1 + i / 1024);
    const struct { uint32_t type; double max; } b[] = {
        {DT_F32, 0.0}, {DT_F16, 1e-3}, {DT_BF16, 0.01}, {DT_Q8_0, 0.01}, {DT_Q8_K, 0.01},
        {DT_Q4_0, 0.12}, {DT_Q4_K, 0.08}, {DT_Q6_K, 0.02},
        {DT_Q4_1, 0.10}, {DT_Q5_0, 0.06}, {DT_Q5_1, 0.05}, {DT_Q8_1, 0.01}, {DT_Q2_K, 0.35},
        {DT_Q3_K, 0.18}, {DT_Q5_K, 0.04}, {DT_IQ4_NL, 0.10}, {DT_IQ4_XS, 0.10},
        {DT_TQ1_0, 0.85}, {DT_TQ2_0, 0.85},
        /* the lattice formats, ~4% above what the search reaches here */
        {DT_IQ2_XXS, 0.36}, {DT_IQ2_XS, 0.31}, {DT_IQ2_S, 0.26}, {DT_IQ3_XXS, 0.195}, {DT_IQ3_S, 0.145},
        {DT_IQ1_S, 0.50}, {DT_IQ1_M, 0.465},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        const double e = roundtrip_err(b[i].type, x, y, n);
        printf("# %s rel rms error %.5f (bound %.3f)\n", dtype_get(b[i].type)->name, e, b[i].max);
        CHECK_MSG(e <= b[i].max, "%s: rel rms error %.5f > %.5f", dtype_get(b[i].type)->name, e, b[i].max);
    }
    /* f16 keeps every element to 2^-11 relative (normal range) */
    roundtrip_err(DT_F16, x, y, n);
    for (int64_t i = 0; i < n; i++)
        CHECK_MSG(!(fabsf(x[i]) > 1e-4f) || fabsf(x[i] - y[i]) <= fabsf(x[i]) * 0x1p-11f,
                  "f16 element %lld off by more than half an ulp", (long long)i);
}

/* Every element's error is at most half a step of its block's grid (plus
 * the clamp at the top of the range), i.e. no element is badly mapped. */
TEST(q8_0_elementwise_bound)
{
    rng_seed(3);
    float x[1024], y[1024];
    fill_weights(x, 1024);
    block_q8_0 b[32];
    quant_quantize_row(DT_Q8_0, x, b, 1024);
    quant_dequant_row(DT_Q8_0, b, y, 1024);
    for (int i = 0; i < 1024; i++) {
        const float d = fabsf(f16_to_f32(b[i / 32].d));
        CHECK_MSG(fabsf(x[i] - y[i]) <= 0.5f * d + 1e-3f * d + fabsf(x[i]) * 1e-3f,
                  "element %d: %g vs %g (d %g)", i, x[i], y[i], d);
    }
}

TEST(q8_0_requantizes_to_same_bytes)
{
    rng_seed(4);
    float x[2048], y[2048];
    fill_weights(x, 2048);
    block_q8_0 a[64], b[64];
    quant_quantize_row(DT_Q8_0, x, a, 2048);
    quant_dequant_row(DT_Q8_0, a, y, 2048);
    quant_quantize_row(DT_Q8_0, y, b, 2048);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

TEST(q8_K_requantizes_to_same_ints)
{
    rng_seed(5);
    float x[1024], y[1024];
    fill_weights(x, 1024);
    block_q8_K a[4], b[4];
    quant_quantize_row(DT_Q8_K, x, a, 1024);
    quant_dequant_row(DT_Q8_K, a, y, 1024);
    quant_quantize_row(DT_Q8_K, y, b, 1024);
    for (int i = 0; i < 4; i++) {
        CHECK(memcmp(a[i].qs, b[i].qs, sizeof a[i].qs) == 0);
        CHECK(memcmp(a[i].bsums, b[i].bsums, sizeof a[i].bsums) == 0);
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += a[i].qs[16 * g + k];
            CHECK_EQ_INT(a[i].bsums[g], sum);
        }
        CHECK_NEAR(a[i].d, b[i].d, fabsf(a[i].d) * 1e-6);
    }
}

/* The weight quantizers see data that already lies on one of their grids.
 * Q4_0 must find it again exactly (re-quantizing a Q4_0 model to Q4_0 loses
 * nothing). The K-quants quantize their sub-block scales against a block
 * maximum, so a sub-block's grid is not always reachable again; there the
 * drift must stay well below the format's own error. */
TEST(weight_quantizers_stable_on_own_output)
{
    rng_seed(6);
    const struct { uint32_t type; double max_drift; } b[] = {
        {DT_Q4_0, 0.0}, {DT_Q4_K, 0.005}, {DT_Q6_K, 0.006},
    };
    const int64_t n = 256 * 16;
    float *x = gx, *y = gy, *z = gz;
    fill_weights(x, n);
    for (size_t t = 0; t < sizeof b / sizeof b[0]; t++) {
        roundtrip_err(b[t].type, x, y, n);
        const double e = roundtrip_err(b[t].type, y, z, n);
        printf("# %s re-quantization drift %.3g\n", dtype_get(b[t].type)->name, e);
        CHECK_MSG(e <= b[t].max_drift, "%s: re-quantizing its own output moved it by %.5f rel rms",
                  dtype_get(b[t].type)->name, e);
    }
    for (int64_t i = 0; i < n; i++) y[i] = 3.0f * rng_gauss();   /* plain gaussian too */
    roundtrip_err(DT_Q4_0, y, z, n);
    CHECK(roundtrip_err(DT_Q4_0, z, y, n) == 0.0);
}

/* ------------------------------------------------------ ggml as oracle */

typedef struct { uint16_t bits; } ggml_bf16;
typedef void (*deq_fn)(const void *, float *, int64_t);
typedef void (*qref_fn)(const float *, void *, int64_t);

static struct {
    bool tried, ok;
    char why[640];
    deq_fn deq[DT_COUNT];
    qref_fn qref[DT_COUNT];
    /* ggml's search quantizers (the lattice formats need an init and, for
     * the 1- and 2-bit ones, an importance matrix) */
    void (*quantize_init)(int type);
    size_t (*quantize_chunk)(int type, const float *src, void *dst, int64_t start, int64_t nrows, int64_t n_per_row,
                             const float *imatrix);
    float (*fp16_to_fp32)(uint16_t);
    uint16_t (*fp32_to_fp16)(float);
    float (*bf16_to_fp32)(ggml_bf16);
    ggml_bf16 (*fp32_to_bf16)(float);
} oracle;

static void *oracle_sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p && oracle.ok) {
        snprintf(oracle.why, sizeof oracle.why, "libggml-base.so has no %s", name);
        oracle.ok = false;
    }
    return p;
}

#define ORACLE_BIND(dst, h, name) do { void *p_ = oracle_sym(h, name); memcpy(&(dst), &p_, sizeof p_); } while (0)

static bool oracle_load(void)
{
    if (oracle.tried) return oracle.ok;
    oracle.tried = true;
    const char *dir = getenv("PEER_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so",
             dir ? dir : "/tmp/llamacpp-peer");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { snprintf(oracle.why, sizeof oracle.why, "no ggml oracle (%s)", path); return false; }
    oracle.ok = true;
    ORACLE_BIND(oracle.deq[DT_Q8_0], h, "dequantize_row_q8_0");
    ORACLE_BIND(oracle.deq[DT_Q4_0], h, "dequantize_row_q4_0");
    ORACLE_BIND(oracle.deq[DT_Q4_K], h, "dequantize_row_q4_K");
    ORACLE_BIND(oracle.deq[DT_Q6_K], h, "dequantize_row_q6_K");
    ORACLE_BIND(oracle.deq[DT_Q8_K], h, "dequantize_row_q8_K");
    ORACLE_BIND(oracle.qref[DT_Q8_0], h, "quantize_row_q8_0_ref");
    ORACLE_BIND(oracle.qref[DT_Q4_0], h, "quantize_row_q4_0_ref");
    ORACLE_BIND(oracle.qref[DT_Q4_K], h, "quantize_row_q4_K_ref");
    ORACLE_BIND(oracle.qref[DT_Q6_K], h, "quantize_row_q6_K_ref");
    ORACLE_BIND(oracle.qref[DT_Q8_K], h, "quantize_row_q8_K_ref");
    ORACLE_BIND(oracle.qref[DT_Q8_1], h, "quantize_row_q8_1_ref");
    static const struct { uint32_t t; const char *name; } more[] = {
        {DT_Q4_1, "q4_1"}, {DT_Q5_0, "q5_0"}, {DT_Q5_1, "q5_1"}, {DT_Q2_K, "q2_K"}, {DT_Q3_K, "q3_K"},
        {DT_Q5_K, "q5_K"}, {DT_IQ4_NL, "iq4_nl"}, {DT_IQ4_XS, "iq4_xs"}, {DT_TQ1_0, "tq1_0"}, {DT_TQ2_0, "tq2_0"},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "dequantize_row_%s", more[i].name);
        ORACLE_BIND(oracle.deq[more[i].t], h, name);
        snprintf(name, sizeof name, "quantize_row_%s_ref", more[i].name);
        ORACLE_BIND(oracle.qref[more[i].t], h, name);
    }
    static const struct { uint32_t t; const char *name; } lattice[] = {
        {DT_IQ2_XXS, "iq2_xxs"}, {DT_IQ2_XS, "iq2_xs"}, {DT_IQ2_S, "iq2_s"}, {DT_IQ3_XXS, "iq3_xxs"},
        {DT_IQ3_S, "iq3_s"},     {DT_IQ1_S, "iq1_s"},   {DT_IQ1_M, "iq1_m"},
    };
    ORACLE_BIND(oracle.quantize_init, h, "ggml_quantize_init");
    ORACLE_BIND(oracle.quantize_chunk, h, "ggml_quantize_chunk");
    for (size_t i = 0; i < sizeof lattice / sizeof lattice[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "dequantize_row_%s", lattice[i].name);
        ORACLE_BIND(oracle.deq[lattice[i].t], h, name);
    }
    ORACLE_BIND(oracle.fp16_to_fp32, h, "ggml_fp16_to_fp32");
    ORACLE_BIND(oracle.fp32_to_fp16, h, "ggml_fp32_to_fp16");
    ORACLE_BIND(oracle.bf16_to_fp32, h, "ggml_bf16_to_fp32");
    ORACLE_BIND(oracle.fp32_to_bf16, h, "ggml_fp32_to_bf16");
    /* the handle stays open for the process: the pointers above live in it */
    return oracle.ok;
}

/* A random finite f16 scale with magnitude in [2^-12, 2^3]. */
static uint16_t random_scale16(void)
{
    const uint16_t exp = (uint16_t)(3 + rng_next() % 16);
    return (uint16_t)(((rng_next() & 1) << 15) | (exp << 10) | (rng_next() & 0x3FF));
}

/* The f16 scale fields of a block of one of NEW_TYPES at blk: their count
 * (1 or 2), pointers to them in sc[]. */
static int block_scales16(uint32_t t, uint8_t *blk, uint16_t **sc)
{
    switch (t) {
    case DT_Q4_1: sc[0] = &((block_q4_1 *)blk)->d, sc[1] = &((block_q4_1 *)blk)->m; return 2;
    case DT_Q5_0: sc[0] = &((block_q5_0 *)blk)->d; return 1;
    case DT_Q5_1: sc[0] = &((block_q5_1 *)blk)->d, sc[1] = &((block_q5_1 *)blk)->m; return 2;
    case DT_Q8_1: sc[0] = &((block_q8_1 *)blk)->d, sc[1] = &((block_q8_1 *)blk)->s; return 2;
    case DT_Q2_K: sc[0] = &((block_q2_K *)blk)->d, sc[1] = &((block_q2_K *)blk)->dmin; return 2;
    case DT_Q3_K: sc[0] = &((block_q3_K *)blk)->d; return 1;
    case DT_Q5_K: sc[0] = &((block_q5_K *)blk)->d, sc[1] = &((block_q5_K *)blk)->dmin; return 2;
    case DT_IQ4_NL: sc[0] = &((block_iq4_nl *)blk)->d; return 1;
    case DT_IQ4_XS: sc[0] = &((block_iq4_xs *)blk)->d; return 1;
    case DT_TQ1_0: sc[0] = &((block_tq1_0 *)blk)->d; return 1;
    case DT_TQ2_0: sc[0] = &((block_tq2_0 *)blk)->d; return 1;
    case DT_IQ2_XXS: sc[0] = &((block_iq2_xxs *)blk)->d; return 1;
    case DT_IQ2_XS: sc[0] = &((block_iq2_xs *)blk)->d; return 1;
    case DT_IQ2_S: sc[0] = &((block_iq2_s *)blk)->d; return 1;
    case DT_IQ3_XXS: sc[0] = &((block_iq3_xxs *)blk)->d; return 1;
    case DT_IQ3_S: sc[0] = &((block_iq3_s *)blk)->d; return 1;
    case DT_IQ1_S: sc[0] = &((block_iq1_s *)blk)->d; return 1;
    default: return 0;
    }
}

/* IQ1_M keeps its f16 scale in the top nibbles of its 4 scale u16. */
static void iq1_m_set_d(block_iq1_m *x, uint16_t d)
{
    for (int i = 0; i < 4; i++) {
        x->scales[2 * i + 1] = (uint8_t)((x->scales[2 * i + 1] & 0x0F) | ((d >> (4 * i)) & 0xF) << 4);
    }
}

/* Random blocks of type t (n elements): random bytes, finite scales. */
static void *random_blocks(uint32_t t, int64_t n)
{
    const size_t bytes = dtype_row_bytes(t, (uint64_t)n);
    assert(bytes <= sizeof gq);
    uint8_t *p = gq;
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rng_next();
    const int64_t nb = n / dtype_get(t)->blck_size;
    for (int64_t b = 0; b < nb; b++) {
        switch (t) {
        case DT_Q8_0: ((block_q8_0 *)p)[b].d = random_scale16(); break;
        case DT_Q4_0: ((block_q4_0 *)p)[b].d = random_scale16(); break;
        case DT_Q4_K:
            ((block_q4_K *)p)[b].d = random_scale16();
            ((block_q4_K *)p)[b].dmin = random_scale16();
            break;
        case DT_Q6_K: ((block_q6_K *)p)[b].d = random_scale16(); break;
        case DT_Q8_K: ((block_q8_K *)p)[b].d = rng_gauss() * 0.01f; break;
        default: {
            /* the f16 scales of the other formats: every one finite */
            uint16_t *sc[2];
            const int k = block_scales16(t, p + (size_t)b * dtype_get(t)->type_size, sc);
            for (int i = 0; i < k; i++) *sc[i] = random_scale16();
            if (t == DT_IQ1_M) iq1_m_set_d((block_iq1_m *)p + b, random_scale16());
        }
        }
    }
    return p;
}

TEST(oracle_dequant)
{
    rng_seed(7);
    const uint32_t types[] = {DT_Q8_0,  DT_Q4_0,   DT_Q4_K,    DT_Q6_K,   DT_Q8_K,    DT_Q4_1,  DT_Q5_0,
                              DT_Q5_1,  DT_Q2_K,   DT_Q3_K,    DT_Q5_K,   DT_IQ4_NL,  DT_IQ4_XS, DT_TQ1_0,
                              DT_TQ2_0, DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S,  DT_IQ3_XXS, DT_IQ3_S, DT_IQ1_S,
                              DT_IQ1_M};
    const int64_t n = 256 * 32;
    float *a = gx, *b = gy;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const void *q = random_blocks(types[t], n);
        quant_dequant_row(types[t], q, a, n);
        oracle.deq[types[t]](q, b, n);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (f32_bits(a[i]) != f32_bits(b[i])) bad = i;
        CHECK_MSG(bad < 0, "%s: element %lld is %.9g, ggml says %.9g", dtype_get(types[t])->name,
                  (long long)bad, a[bad < 0 ? 0 : bad], b[bad < 0 ? 0 : bad]);
    }
}

/* Extreme blocks of every new format, bit for bit against ggml: all-zero
 * bytes; every quant bit set with the largest finite scales (65504) of
 * either sign; every quant bit set or clear with the smallest subnormal
 * scales; alternating bytes. Then the IQ4 level table read back from
 * ggml through blocks of d = 1 holding the indices 0..15. */
TEST(oracle_dequant_extremes)
{
    const uint32_t types[] = {DT_Q4_1,    DT_Q5_0,   DT_Q5_1,  DT_Q2_K,    DT_Q3_K,  DT_Q5_K,  DT_IQ4_NL,
                              DT_IQ4_XS,  DT_TQ1_0,  DT_TQ2_0, DT_IQ2_XXS, DT_IQ2_XS, DT_IQ2_S, DT_IQ3_XXS,
                              DT_IQ3_S,   DT_IQ1_S,  DT_IQ1_M};
    static const struct { uint8_t fill; uint16_t scale; } kinds[] = {
        {0x00, 0x0000}, {0xFF, 0x7BFF}, {0xFF, 0xFBFF}, {0x00, 0x7BFF}, {0xFF, 0x0001},
        {0x55, 0x3C00}, {0xAA, 0xBC00}, {0x0F, 0x7BFF}, {0xF0, 0xFBFF},
    };
    const int64_t n = 256;
    float *a = gx, *b = gy;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            const size_t bytes = dtype_row_bytes(types[t], (uint64_t)n), bs = dtype_get(types[t])->type_size;
            memset(gq, kinds[k].fill, bytes);
            for (size_t o = 0; o < bytes; o += bs) {
                uint16_t *sc[2];
                const int ns = block_scales16(types[t], gq + o, sc);
                for (int i = 0; i < ns; i++) *sc[i] = kinds[k].scale;
                if (types[t] == DT_IQ1_M) iq1_m_set_d((block_iq1_m *)(gq + o), kinds[k].scale);
            }
            quant_dequant_row(types[t], gq, a, n);
            oracle.deq[types[t]](gq, b, n);
            for (int64_t i = 0; i < n; i++)
                CHECK_MSG(f32_bits(a[i]) == f32_bits(b[i]), "%s extreme %zu: element %lld is %.9g, ggml %.9g",
                          dtype_get(types[t])->name, k, (long long)i, a[i], b[i]);
        }
    block_iq4_nl blk = {.d = 0x3C00};
    for (int j = 0; j < 16; j++) blk.qs[j] = (uint8_t)(j | (15 - j) << 4);
    oracle.deq[DT_IQ4_NL](&blk, a, 32);
    for (int j = 0; j < 16; j++) {
        CHECK_EQ_INT(a[j], quant_iq4nl_values[j]);
        CHECK_EQ_INT(a[16 + j], quant_iq4nl_values[15 - j]);
    }
}

/* Every codebook entry of the lattice formats against ggml: a block whose
 * every index is entry e (the other bits random: signs, scales), ours and
 * ggml's dequantization bit for bit. Index bits: IQ2_XXS a byte of each
 * sub-block's first u32; IQ2_XS 9 of each u16; IQ2_S a byte + 2 bits of
 * qh; IQ3_XXS a byte; IQ3_S a byte + a bit of qh; IQ1_S/M a byte + 3 bits. */
static void set_lattice_index(uint32_t t, uint8_t *blk, int e)
{
    switch (t) {
    case DT_IQ2_XXS: {
        block_iq2_xxs *x = (block_iq2_xxs *)blk;
        for (int s = 0; s < 8; s++) x->qs[4 * s] = x->qs[4 * s + 1] = (uint16_t)(e | e << 8);
        break;
    }
    case DT_IQ2_XS: {
        block_iq2_xs *x = (block_iq2_xs *)blk;
        for (int i = 0; i < 32; i++) x->qs[i] = (uint16_t)((x->qs[i] & ~511u) | (unsigned)e);
        break;
    }
    case DT_IQ2_S: {
        block_iq2_s *x = (block_iq2_s *)blk;
        memset(x->qs, e & 0xFF, 32);
        memset(x->qh, (e >> 8) * 0x55, 8);
        break;
    }
    case DT_IQ3_XXS: memset(((block_iq3_xxs *)blk)->qs, e, 64); break;
    case DT_IQ3_S: {
        block_iq3_s *x = (block_iq3_s *)blk;
        memset(x->qs, e & 0xFF, 64);
        memset(x->qh, e >> 8 ? 0xFF : 0, 8);
        break;
    }
    case DT_IQ1_S: {
        block_iq1_s *x = (block_iq1_s *)blk;
        memset(x->qs, e & 0xFF, 32);
        const unsigned hi = (unsigned)e >> 8;
        for (int s = 0; s < 8; s++) x->qh[s] = (uint16_t)((x->qh[s] & 0xF000u) | hi | hi << 3 | hi << 6 | hi << 9);
        break;
    }
    default: {
        block_iq1_m *x = (block_iq1_m *)blk;
        memset(x->qs, e & 0xFF, 32);
        const unsigned hi = (unsigned)e >> 8;
        for (int i = 0; i < 16; i++) x->qh[i] = (uint8_t)((x->qh[i] & 0x88u) | hi | hi << 4);
        break;
    }
    }
}

TEST(oracle_lattice_grids)
{
    static const struct { uint32_t t; int entries; } fmts[] = {
        {DT_IQ2_XXS, 256}, {DT_IQ2_XS, 512}, {DT_IQ2_S, 1024}, {DT_IQ3_XXS, 256},
        {DT_IQ3_S, 512},   {DT_IQ1_S, 2048}, {DT_IQ1_M, 2048},
    };
    rng_seed(11);
    float *a = gx, *b = gy;
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        const uint32_t t = fmts[f].t;
        int bad = -1;
        for (int e = 0; e < fmts[f].entries && bad < 0; e++) {
            uint8_t *blk = random_blocks(t, QK_K);
            set_lattice_index(t, blk, e);
            quant_dequant_row(t, blk, a, QK_K);
            oracle.deq[t](blk, b, QK_K);
            for (int i = 0; i < QK_K; i++)
                if (f32_bits(a[i]) != f32_bits(b[i])) bad = e;
        }
        CHECK_MSG(bad < 0, "%s: codebook entry %d decodes unlike ggml's", dtype_get(t)->name, bad);
    }
}

TEST(oracle_half_conversions)
{
    rng_seed(8);
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = f16_to_f32((uint16_t)h), b = oracle.fp16_to_fp32((uint16_t)h);
        CHECK_MSG(f32_bits(a) == f32_bits(b) || (isnan(a) && isnan(b)), "f16 %04x", h);
        ggml_bf16 g = {(uint16_t)h};
        const float c = bf16_to_f32((uint16_t)h), d = oracle.bf16_to_fp32(g);
        CHECK_MSG(f32_bits(c) == f32_bits(d), "bf16 %04x", h);
    }
    /* f32 -> f16/bf16 over random bit patterns (every exponent) and near ties */
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)rng_next();
        if (i % 4 == 1) u = (u & 0xFFFFE000u) | 0x1000u;  /* exact f16 ties */
        if (i % 4 == 2) u = (u & 0xFFFF0000u) | 0x8000u;  /* exact bf16 ties */
        const float f = bits_f32(u);
        if (isnan(f)) continue;
        CHECK_MSG(f32_to_f16(f) == oracle.fp32_to_fp16(f), "f32 %08x -> f16 %04x vs ggml %04x", u,
                  f32_to_f16(f), oracle.fp32_to_fp16(f));
        CHECK_MSG(f32_to_bf16(f) == oracle.fp32_to_bf16(f).bits, "f32 %08x -> bf16", u);
    }
}

/* Activation formats (and the reference Q4_0 rounding): byte-identical to
 * ggml's reference. */
TEST(oracle_q8_quantize_bit_exact)
{
    rng_seed(9);
    const int64_t n = 256 * 64;
    float *x = gx;
    fill_weights(x, n);
    /* some exact .5 products to exercise the tie rules */
    for (int64_t i = 0; i < n; i += 97) x[i] = (float)(i % 64) * 0.5f - 16.0f;
    const uint32_t types[] = {DT_Q8_0, DT_Q8_K, DT_Q4_0, DT_Q8_1};
    for (size_t t = 0; t < 4; t++) {
        const size_t bytes = dtype_row_bytes(types[t], (uint64_t)n);
        if (types[t] == DT_Q4_0) quant_q4_0_quantize_row_ref(x, (block_q4_0 *)gq, n); /* the fast one */
        else quant_quantize_row(types[t], x, gq, n);
        oracle.qref[types[t]](x, gq2, n);
        CHECK_MSG(memcmp(gq, gq2, bytes) == 0, "%s differs from ggml's reference",
                  dtype_get(types[t])->name);
    }
}

/* Weight formats: ours must be at least as accurate as ggml's reference. */
TEST(oracle_weight_quantizers_not_worse)
{
    rng_seed(10);
    const int64_t n = NMAX;
    float *x = gx, *y = gy;
    fill_weights(x, n);
    const uint32_t types[] = {DT_Q4_0, DT_Q4_K, DT_Q6_K, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q2_K, DT_Q3_K,
                              DT_Q5_K, DT_IQ4_NL, DT_IQ4_XS, DT_TQ1_0, DT_TQ2_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        oracle.qref[types[t]](x, gq2, n);
        quant_dequant_row(types[t], gq2, y, n);
        const double e_ggml = rel_rms_err(x, y, n);
        const double e_ours = roundtrip_err(types[t], x, y, n);
        printf("# %s rel rms error: ours %.5f, ggml ref %.5f\n", dtype_get(types[t])->name, e_ours, e_ggml);
        CHECK_MSG(e_ours <= e_ggml * 1.005, "%s: ours %.5f vs ggml %.5f", dtype_get(types[t])->name,
                  e_ours, e_ggml);
    }
}


/* The lattice formats: ours against ggml's search with a uniform importance
 * matrix (what its 1- and 2-bit quantizers need at least), on the same
 * rows. Ours searches differently (no imatrix, weights x^2 + sigma^2), so a
 * small margin; a wrong packing or codebook slip costs far more. IQ2_S and
 * IQ1_S/M are left to test_formats.sh (whole files beside llama.cpp's):
 * ggml's set-up of their codebook neighbours takes 5 and 12 s. */
TEST(oracle_lattice_quantizers_not_worse)
{
    rng_seed(11);
    const int64_t n = 256 * 64, per_row = 256 * 16;
    float *x = gx, *y = gy;
    static float ones[256 * 16];
    for (int64_t i = 0; i < per_row; i++) ones[i] = 1;
    fill_weights(x, n);
    const uint32_t types[] = {DT_IQ2_XXS, DT_IQ2_XS, DT_IQ3_XXS, DT_IQ3_S};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        oracle.quantize_init((int)types[t]);
        oracle.quantize_chunk((int)types[t], x, gq2, 0, n / per_row, per_row, ones);
        quant_dequant_row(types[t], gq2, y, n);
        const double e_ggml = rel_rms_err(x, y, n);
        const double e_ours = roundtrip_err(types[t], x, y, n);
        printf("# %s rel rms error: ours %.5f, ggml (uniform imatrix) %.5f\n", dtype_get(types[t])->name, e_ours,
               e_ggml);
        CHECK_MSG(e_ours <= e_ggml * 1.03, "%s: ours %.5f vs ggml %.5f", dtype_get(types[t])->name, e_ours, e_ggml);
    }
}

/* ------------------------------------------------------------ pl_quantize */

static char qdir[64];

/* A scratch directory for the files these tests write (removed at the end). */
static const char *qpath(const char *name)
{
    static char buf[4][160];
    static int k;
    if (!qdir[0]) {
        snprintf(qdir, sizeof qdir, "/tmp/pagellm-tq.XXXXXX");
        if (!mkdtemp(qdir)) qdir[0] = 0;
    }
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", qdir, name);
    return buf[k];
}

static bool value_eq(const gguf_value *a, const gguf_value *b)
{
    if (a->type != b->type) return false;
    switch (a->type) {
    case GGUF_TYPE_STRING:
        return a->v.str.len == b->v.str.len && memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len) == 0;
    case GGUF_TYPE_ARRAY:
        if (a->v.arr.elem != b->v.arr.elem || a->v.arr.n != b->v.arr.n) return false;
        for (uint64_t i = 0; i < a->v.arr.n; i++) {
            if (a->v.arr.elem == GGUF_TYPE_STRING) {
                const gguf_str x = a->v.arr.strs[i], y = b->v.arr.strs[i];
                if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len) != 0) return false;
            } else if (a->v.arr.elem == GGUF_TYPE_ARRAY) {
                if (!value_eq(&a->v.arr.vals[i], &b->v.arr.vals[i])) return false;
            }
        }
        if (a->v.arr.elem != GGUF_TYPE_STRING && a->v.arr.elem != GGUF_TYPE_ARRAY)
            return memcmp(a->v.arr.data, b->v.arr.data, a->v.arr.n * gguf_type_size(a->v.arr.elem)) == 0;
        return true;
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
        return a->v.f64 == b->v.f64;
    default:
        return a->v.u64 == b->v.u64;
    }
}

/* Relative rms difference of tensor b (any supported type) from a. */
static double tensor_rel_err(const gguf_tensor *a, const gguf_tensor *b)
{
    const int64_t n = (int64_t)a->ne[0];
    const uint64_t rows = a->ne[1] * a->ne[2] * a->ne[3];
    double e = 0, s = 0;
    assert(n <= NMAX);
    for (uint64_t r = 0; r < rows; r++) {
        memcpy(gq, (const uint8_t *)a->data + r * dtype_row_bytes(a->type, (uint64_t)n),
               dtype_row_bytes(a->type, (uint64_t)n));
        quant_dequant_row(a->type, gq, gx, n);
        memcpy(gq, (const uint8_t *)b->data + r * dtype_row_bytes(b->type, (uint64_t)n),
               dtype_row_bytes(b->type, (uint64_t)n));
        quant_dequant_row(b->type, gq, gy, n);
        for (int64_t i = 0; i < n; i++) {
            e += ((double)gx[i] - gy[i]) * ((double)gx[i] - gy[i]);
            s += (double)gx[i] * gx[i];
        }
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static double type_err_bound(uint32_t t)
{
    switch (t) {
    case DT_F32: return 0;
    case DT_F16: return 1e-3;
    case DT_BF16: return 1e-2;
    case DT_Q8_0: return 0.01;
    case DT_Q6_K: return 0.03;
    case DT_Q4_K: return 0.10;
    default: return 0.15; /* q4_0; small tensors with outliers */
    }
}

static uint32_t file_type_of(const char *type)
{
    /* llama.cpp's include/llama.h values */
    static const struct { const char *n; uint32_t ft; } t[] = {
        {"f32", 0}, {"f16", 1}, {"q4_0", 2}, {"q4_1", 3}, {"q8_0", 7}, {"q5_0", 8}, {"q5_1", 9},
        {"q2_k", 10}, {"q3_k_s", 11}, {"q3_k_m", 12}, {"q3_k_l", 13}, {"q4_k_s", 14}, {"q4_k_m", 15},
        {"q5_k_s", 16}, {"q5_k_m", 17}, {"q6_k", 18}, {"iq4_nl", 25}, {"iq4_xs", 30}, {"bf16", 32},
        {"tq1_0", 36}, {"tq2_0", 37}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(t[i].n, type) == 0) return t[i].ft;
    return 9999;
}

/* Checks out against in: metadata copied (file_type replaced), tensors in
 * the same order and shapes, each of the type want(name) says, unchanged
 * ones byte-identical, converted ones within their type's error bound.
 * Returns NULL or a static message. */
typedef uint32_t (*want_fn)(const gguf_tensor *src, const char *name);

static const char *quantized_file_check(const char *in_path, const char *out_path, const char *type, want_fn want)
{
    static char why[512];
    gguf_file *in = NULL, *out = NULL;
    why[0] = 0;
    if (gguf_open(&in, in_path) || gguf_open(&out, out_path)) {
        snprintf(why, sizeof why, "open: %s", err_msg());
        goto done;
    }
    uint32_t ft = 0, qv = 0;
    if (gguf_get_u32(out, "general.file_type", &ft) || ft != file_type_of(type)) {
        snprintf(why, sizeof why, "general.file_type %u for %s", ft, type);
        goto done;
    }
    if (gguf_get_u32(out, "general.quantization_version", &qv) || qv != 2) {
        snprintf(why, sizeof why, "general.quantization_version %u", qv);
        goto done;
    }
    for (uint64_t i = 0; i < gguf_meta_count(in) && !why[0]; i++) {
        const gguf_meta *kv = gguf_meta_at(in, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        const gguf_meta *o = gguf_meta_find(out, key);
        if (strcmp(key, "general.file_type") != 0 && (!o || !value_eq(&kv->value, &o->value)))
            snprintf(why, sizeof why, "key %s not copied", key);
    }
    if (!why[0] && gguf_tensor_count(in) != gguf_tensor_count(out))
        snprintf(why, sizeof why, "tensor count %llu vs %llu", (unsigned long long)gguf_tensor_count(in),
                 (unsigned long long)gguf_tensor_count(out));
    for (uint64_t i = 0; i < gguf_tensor_count(in) && !why[0]; i++) {
        const gguf_tensor *a = gguf_tensor_at(in, i), *b = gguf_tensor_at(out, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)a->name.len, a->name.ptr);
        const uint32_t w = want(a, name);
        if (a->name.len != b->name.len || memcmp(a->name.ptr, b->name.ptr, a->name.len) != 0
            || a->n_dims != b->n_dims || memcmp(a->ne, b->ne, sizeof a->ne) != 0)
            snprintf(why, sizeof why, "tensor %llu (%s): name or shape changed", (unsigned long long)i, name);
        else if (b->type != w)
            snprintf(why, sizeof why, "%s: type %s, want %s", name, dtype_get(b->type)->name, dtype_get(w)->name);
        else if (a->type == b->type && (a->nbytes != b->nbytes || memcmp(a->data, b->data, a->nbytes) != 0))
            snprintf(why, sizeof why, "%s: unchanged tensor not copied byte for byte", name);
        else if (a->type != b->type && !(tensor_rel_err(a, b) <= type_err_bound(b->type)))
            snprintf(why, sizeof why, "%s: %s error %.4f", name, dtype_get(b->type)->name, tensor_rel_err(a, b));
    }
done:
    gguf_close(in);
    gguf_close(out);
    return why[0] ? why : NULL;
}

/* stories260K: dim 64, ffn 172: every weight row is 64 or 172 long, so
 * q4_K falls back to q5_0 (llama.cpp's choice) and the 172-long rows
 * (ffn_down) to f16; q6_K (the output projection, q4_k_m's attn_v bumps)
 * falls back to q8_0. */
static const char *stories_target;

static uint32_t stories_want(const gguf_tensor *src, const char *name)
{
    const uint32_t t = (uint32_t)dtype_from_name(strcmp(stories_target, "q4_k_m") == 0 ? "q5_0" : stories_target);
    if (src->n_dims < 2) return src->type;
    if (dtype_get(t)->blck_size > 1 && src->ne[0] % 32) return DT_F16;
    if (dtype_get(t)->blck_size > 1 && strcmp(name, "output.weight") == 0) return DT_Q8_0;
    /* q4_k_m's q6_K for attn_v in layers 2 and 4 of 5 (use_more_bits) */
    if (strcmp(stories_target, "q4_k_m") == 0 && (strstr(name, "blk.2.attn_v") || strstr(name, "blk.4.attn_v")))
        return DT_Q8_0;
    return t;
}

#define STORIES SHARED_MODELS "/stories260K.gguf"

TEST(quantize_stories_every_type)
{
    const char *types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const char *out = qpath("stories.gguf");
        CHECK_MSG(pl_quantize(STORIES, out, types[i]) == 0, "%s: %s", types[i], pl_last_error());
        stories_target = types[i];
        const char *why = quantized_file_check(STORIES, out, types[i], stories_want);
        CHECK_MSG(!why, "%s: %s", types[i], why);
        unlink(out);
    }
}

/* A synthetic 16-layer model whose tensors exercise every rule of the mix. */
#define SYN_LAYERS 16

typedef struct { char name[64]; uint32_t type, n_dims; uint64_t ne[2]; void *data; } syn_tensor;

static int syn_add(syn_tensor *t, int n, const char *name, uint32_t type, uint32_t n_dims, uint64_t ne0, uint64_t ne1)
{
    syn_tensor *s = &t[n];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->type = type; s->n_dims = n_dims; s->ne[0] = ne0; s->ne[1] = ne1;
    const int64_t elems = (int64_t)(ne0 * ne1);
    const uint64_t bytes = dtype_row_bytes(type, ne0) * ne1;
    s->data = malloc(bytes ? bytes : 1);
    if (type == DT_I32 || !quant_can_quantize(type)) {
        for (uint64_t i = 0; i < bytes; i++) ((uint8_t *)s->data)[i] = (uint8_t)rng_next();
    } else {
        float *f = malloc((size_t)elems * sizeof *f);
        fill_weights(f, elems);
        quant_quantize_row(type, f, s->data, elems);
        free(f);
    }
    return n + 1;
}

/* Writes the synthetic model; extra (may be NULL) adds one more tensor. */
static int syn_write(const char *path, bool with_output, const char *extra_name, uint32_t extra_type)
{
    static syn_tensor t[SYN_LAYERS * 8 + 8];
    int n = 0;
    n = syn_add(t, n, "token_embd.weight", DT_F32, 2, 256, 32);
    for (int l = 0; l < SYN_LAYERS; l++) {
        char nm[64];
#define SYN(suffix, type, nd, a, b) (snprintf(nm, sizeof nm, "blk.%d." suffix, l), n = syn_add(t, n, nm, type, nd, a, b))
        SYN("attn_norm.weight", DT_F32, 1, 256, 1);
        SYN("attn_q.weight", DT_F16, 2, 256, 16);
        SYN("attn_v.weight", DT_F32, 2, 256, 8);
        SYN("ffn_down.weight", DT_BF16, 2, 512, 8);
        SYN("ffn_up.weight", DT_F32, 2, 96, 8);   /* 96: no 256-block, but 32 */
        SYN("ffn_gate.weight", DT_F32, 2, 100, 4); /* 100: no 32-block either */
#undef SYN
    }
    n = syn_add(t, n, "blk.0.ffn_gate_inp.weight", DT_F32, 2, 256, 4); /* a router: kept */
    n = syn_add(t, n, "blk.0.expert_ids.weight", DT_I32, 2, 4, 4);      /* integers: kept */
    n = syn_add(t, n, "rope_freqs.weight", DT_F32, 1, 32, 1);
    if (with_output) n = syn_add(t, n, "output.weight", DT_F32, 2, 256, 32);
    if (extra_name) n = syn_add(t, n, extra_name, extra_type, 2, 256, 2);
    gguf_writer *w = gguf_writer_new();
    int rc = w ? 0 : -1;
    if (!rc) rc = gguf_writer_set_str(w, "general.architecture", "llama");
    if (!rc) rc = gguf_writer_set_u32(w, "llama.block_count", SYN_LAYERS);
    if (!rc) rc = gguf_writer_set_u32(w, "general.file_type", 0);
    const gguf_str toks[3] = {{"a", 1}, {"bc", 2}, {"", 0}};
    if (!rc) rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    const float sc[3] = {0.5f, -1.0f, 2.0f};
    if (!rc) rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, 3);
    if (!rc) rc = gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f);
    for (int i = 0; i < n && !rc; i++) {
        uint64_t ne[2] = {t[i].ne[0], t[i].ne[1]};
        int idx = gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, ne, t[i].data);
        if (idx < 0) rc = idx;
    }
    if (!rc) rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    for (int i = 0; i < n; i++) free(t[i].data);
    return rc;
}

static bool syn_tied;

/* llama.cpp's Q4_K_M choices for this model, worked out by hand: with 16
 * layers, use_more_bits picks layers 0, 1 (first eighth), 14, 15 (last
 * eighth) and 4, 7, 10, 13 ((i - 2) % 3 == 2). */
static uint32_t syn_want_q4_k_m(const gguf_tensor *src, const char *name)
{
    static const int more[] = {0, 1, 4, 7, 10, 13, 14, 15};
    if (src->n_dims < 2 || strstr(name, "ffn_gate_inp") || src->type == DT_I32) return src->type;
    if (strcmp(name, "output.weight") == 0 || (syn_tied && strcmp(name, "token_embd.weight") == 0)) return DT_Q6_K;
    if (strstr(name, "ffn_up")) return DT_Q5_0;   /* 96 % 256: q4_K -> q5_0 */
    if (strstr(name, "ffn_gate")) return DT_F16;  /* 100 % 32: -> f16 */
    if (strstr(name, "attn_v") || strstr(name, "ffn_down")) {
        int layer = atoi(name + 4);
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            if (more[i] == layer) return DT_Q6_K;
    }
    return DT_Q4_K;
}

static uint32_t syn_want_q4_0(const gguf_tensor *src, const char *name)
{
    if (src->n_dims < 2 || strstr(name, "ffn_gate_inp") || src->type == DT_I32) return src->type;
    if (strcmp(name, "output.weight") == 0 || (syn_tied && strcmp(name, "token_embd.weight") == 0)) return DT_Q6_K;
    if (strstr(name, "ffn_gate")) return DT_F16;
    return DT_Q4_0;
}

static uint32_t syn_want_f16(const gguf_tensor *src, const char *name)
{
    if (src->n_dims < 2 || strstr(name, "ffn_gate_inp") || src->type == DT_I32) return src->type;
    return DT_F16;
}

TEST(quantize_mix_rules)
{
    rng_seed(11);
    const char *in = qpath("syn.gguf"), *out = qpath("syn-out.gguf");
    for (int tied = 0; tied < 2; tied++) {
        syn_tied = tied;
        CHECK_MSG(syn_write(in, !tied, NULL, 0) == 0, "synthetic model: %s", err_msg());
        const struct { const char *type; want_fn want; } c[] = {
            {"q4_k_m", syn_want_q4_k_m}, {"q4_0", syn_want_q4_0}, {"f16", syn_want_f16}};
        for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
            CHECK_MSG(pl_quantize(in, out, c[i].type) == 0, "%s: %s", c[i].type, pl_last_error());
            const char *why = quantized_file_check(in, out, c[i].type, c[i].want);
            CHECK_MSG(!why, "%s (%s): %s", c[i].type, tied ? "tied embeddings" : "with output.weight", why);
        }
    }
    /* an already quantized model can be quantized again (q4_k_m -> q8_0) */
    CHECK_MSG(pl_quantize(out, in, "q4_k_m") == 0 && pl_quantize(in, out, "Q8_0") == 0, "%s", pl_last_error());
    unlink(in);
    unlink(out);
}

/* quant_mix_types visits tensors in llama.cpp's order (layer number, then
 * name), whatever the file order: with 12 layers listed backwards, q3_k_m's
 * "first two attn_v" are still blk.0 and blk.1, and q4_k_m's use_more_bits
 * layers (0, 3, 6, 9, 10, 11 of 12) are counted from blk.0, not from
 * blk.10 as a plain string sort would put it. An MoE mix needs the layer in
 * the name. */
TEST(quant_mix_counts_in_llama_cpp_order)
{
    quant_mix_tensor ts[24];
    char names[24][32];
    for (int i = 0; i < 12; i++) {
        const int l = 11 - i;
        snprintf(names[2 * i], sizeof names[0], "blk.%d.attn_v.weight", l);
        snprintf(names[2 * i + 1], sizeof names[0], "blk.%d.ffn_down.weight", l);
        ts[2 * i] = (quant_mix_tensor){names[2 * i], DT_F16, 2, {256, 64, 1, 1}};
        ts[2 * i + 1] = (quant_mix_tensor){names[2 * i + 1], DT_F16, 2, {256, 256, 1, 1}};
    }
    const quant_model m = {"llama", 12, 8, 8, 0, false};
    uint32_t out[24];
    CHECK(quant_mix_types(quant_preset_find("q3_k_m"), &m, ts, 24, out) == 0);
    for (int i = 0; i < 12; i++) {
        const int l = 11 - i;
        CHECK_MSG(out[2 * i] == (uint32_t)(l < 2 ? DT_Q5_K : DT_Q4_K), "q3_k_m %s: %s", names[2 * i],
                  dtype_get(out[2 * i])->name);
    }
    CHECK(quant_mix_types(quant_preset_find("Q4_K_M"), &m, ts, 24, out) == 0);
    for (int i = 0; i < 12; i++) {
        const int l = 11 - i;
        const bool more = l == 0 || l == 3 || l == 6 || l == 9 || l == 10 || l == 11;
        CHECK_MSG(out[2 * i] == (uint32_t)(more ? DT_Q6_K : DT_Q4_K), "q4_k_m %s", names[2 * i]);
        CHECK_MSG(out[2 * i + 1] == (uint32_t)(more ? DT_Q6_K : DT_Q4_K), "q4_k_m %s", names[2 * i + 1]);
    }
    const quant_model moe = {"llama", 12, 8, 8, 8, false};
    ts[3].name = "ffn_down_without_layer.weight";
    CHECK(quant_mix_types(quant_preset_find("q4_k_m"), &moe, ts, 24, out) == PL_EINVAL);
    CHECK_MSG(strstr(err_msg(), "ffn_down_without_layer.weight"), "%s", err_msg());
    CHECK(quant_preset_find("q3_k_xl") == NULL);
}

/* A llama-shaped model for the lattice mixes: 8 layers of attn_q / k / v /
 * output and ffn_gate / up / down (MoE: ffn_*_exps, 8 experts, plus
 * ffn_down_shexp and the router), token_embd, output_norm and, unless tied,
 * output.weight; every row ne0 wide. */
enum { LM_TIED = 1, LM_MOE = 2, LM_ROW64 = 4, LM_ROW48 = 8 };

typedef struct {
    quant_mix_tensor ts[96];
    char names[96][40];
    uint32_t out[96];
    size_t n;
} lattice_model;

static void lm_add(lattice_model *lm, const char *name, uint32_t n_dims, uint64_t ne0, uint64_t ne1, uint64_t ne2)
{
    snprintf(lm->names[lm->n], sizeof lm->names[0], "%s", name);
    lm->ts[lm->n] = (quant_mix_tensor){lm->names[lm->n], DT_F16, n_dims, {ne0, ne1, ne2, 1}};
    lm->n++;
}

static void lm_build(lattice_model *lm, int shape)
{
    const uint64_t ne0 = shape & LM_ROW64 ? 64 : shape & LM_ROW48 ? 48 : 256;
    static const char *const attn[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
    static const char *const ffn[] = {"ffn_gate", "ffn_up", "ffn_down"};
    char nm[40];
    lm->n = 0;
    lm_add(lm, "token_embd.weight", 2, ne0, 512, 1);
    if (!(shape & LM_TIED)) lm_add(lm, "output.weight", 2, ne0, 512, 1);
    lm_add(lm, "output_norm.weight", 1, ne0, 1, 1);
    for (int l = 0; l < 8; l++) {
        for (int k = 0; k < 4; k++) {
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, attn[k]);
            lm_add(lm, nm, 2, ne0, 256, 1);
        }
        for (int k = 0; k < 3; k++) {
            snprintf(nm, sizeof nm, shape & LM_MOE ? "blk.%d.%s_exps.weight" : "blk.%d.%s.weight", l, ffn[k]);
            lm_add(lm, nm, shape & LM_MOE ? 3 : 2, ne0, 256, shape & LM_MOE ? 8 : 1);
        }
        if (shape & LM_MOE) {
            snprintf(nm, sizeof nm, "blk.%d.ffn_down_shexp.weight", l);
            lm_add(lm, nm, 2, ne0, 256, 1);
            snprintf(nm, sizeof nm, "blk.%d.ffn_gate_inp.weight", l);
            lm_add(lm, nm, 2, ne0, 8, 1);
        }
    }
}

static uint32_t lm_type(const lattice_model *lm, const char *name)
{
    for (size_t i = 0; i < lm->n; i++)
        if (strcmp(lm->names[i], name) == 0) return lm->out[i];
    return DT_COUNT;
}

/* The lattice presets' per-tensor types, each read off llama.cpp's
 * llama_tensor_get_type_impl / tensor_type_fallback (src/llama-quant.cpp)
 * with has_imatrix = false, not from quant_mix.c: the iq2 / iq1 rule set
 * (attn_v q4_K when n_gqa >= 4 or n_expert >= 4, else q2_K / iq3_s; the
 * first n/8 ffn_down by rank, even in MoE; no 70B bump), the iq3 ones, the
 * output and token_embd rules (tied or not), and the iq4_nl fallback. */
TEST(quant_mix_lattice_presets)
{
    const quant_model gqa4 = {"llama", 8, 32, 8, 0, false}, gqa1 = {"llama", 8, 8, 8, 0, false};
    const quant_model l70b = {"llama", 80, 64, 8, 0, false}, moe8 = {"llama", 8, 8, 8, 8, false};
    const struct {
        const char *preset;
        const quant_model *m;
        int shape;
        const char *tensor;
        uint32_t want;
    } c[] = {
        {"iq2_xxs", &gqa4, 0, "output.weight", DT_Q5_K},
        {"iq2_xxs", &gqa4, 0, "token_embd.weight", DT_Q2_K},
        {"iq2_xxs", &gqa4, LM_TIED, "token_embd.weight", DT_Q5_K},
        {"iq2_xxs", &gqa4, 0, "output_norm.weight", DT_F16},
        {"iq2_xxs", &gqa4, 0, "blk.3.attn_v.weight", DT_Q4_K},
        {"iq2_xxs", &gqa1, 0, "blk.3.attn_v.weight", DT_Q2_K},
        {"iq2_xxs", &l70b, 0, "blk.3.attn_v.weight", DT_Q4_K},
        {"iq2_xxs", &gqa1, 0, "blk.0.ffn_down.weight", DT_Q2_K},
        {"iq2_xxs", &gqa1, 0, "blk.1.ffn_down.weight", DT_IQ2_XXS},
        {"iq2_xxs", &gqa1, 0, "blk.0.attn_output.weight", DT_IQ2_XXS},
        {"iq2_xxs", &gqa1, 0, "blk.0.attn_k.weight", DT_IQ2_XXS},
        {"iq2_xxs", &gqa1, 0, "blk.0.ffn_gate.weight", DT_IQ2_XXS},
        {"iq2_xs", &gqa1, 0, "blk.2.attn_q.weight", DT_IQ2_XS},
        {"iq2_xs", &gqa1, LM_TIED, "token_embd.weight", DT_Q5_K},
        {"iq2_s", &gqa1, 0, "blk.5.attn_v.weight", DT_IQ3_S},
        {"iq2_s", &gqa1, 0, "blk.0.ffn_down.weight", DT_IQ3_S},
        {"iq2_s", &gqa1, 0, "blk.7.ffn_down.weight", DT_IQ2_XS},
        {"iq2_s", &gqa1, 0, "blk.2.attn_output.weight", DT_IQ3_S},
        {"iq2_s", &gqa1, 0, "blk.2.ffn_up.weight", DT_IQ2_XS},
        {"iq2_m", &gqa1, 0, "token_embd.weight", DT_IQ3_S},
        {"iq2_m", &gqa1, 0, "output.weight", DT_Q5_K},
        {"iq2_m", &gqa1, 0, "blk.4.ffn_gate.weight", DT_IQ2_S},
        {"iq2_m", &gqa4, 0, "blk.4.attn_v.weight", DT_Q4_K},
        {"iq1_s", &gqa1, 0, "blk.2.attn_output.weight", DT_IQ2_XXS},
        {"iq1_s", &gqa1, 0, "token_embd.weight", DT_Q2_K},
        {"iq1_s", &gqa1, 0, "blk.2.attn_q.weight", DT_IQ1_S},
        {"iq1_m", &gqa1, LM_TIED, "token_embd.weight", DT_Q5_K},
        {"iq1_m", &gqa1, 0, "blk.6.attn_output.weight", DT_IQ2_XXS},
        {"iq1_m", &gqa1, 0, "blk.6.ffn_down.weight", DT_IQ1_M},
        {"iq3_xxs", &gqa4, 0, "blk.2.attn_v.weight", DT_Q4_K},
        {"iq3_xxs", &gqa1, 0, "blk.2.attn_v.weight", DT_IQ3_S},
        {"iq3_xxs", &l70b, 0, "blk.2.attn_v.weight", DT_Q5_K},
        {"iq3_xxs", &gqa1, 0, "blk.2.attn_q.weight", DT_IQ2_S},
        {"iq3_xxs", &gqa1, 0, "blk.2.attn_k.weight", DT_IQ2_S},
        {"iq3_xxs", &gqa1, 0, "blk.0.ffn_down.weight", DT_Q4_K},
        {"iq3_xxs", &gqa1, 0, "blk.1.ffn_down.weight", DT_Q3_K},
        {"iq3_xxs", &gqa1, 0, "blk.1.attn_output.weight", DT_IQ3_S},
        {"iq3_xxs", &gqa1, 0, "blk.1.ffn_up.weight", DT_IQ3_XXS},
        {"iq3_xxs", &gqa1, 0, "output.weight", DT_Q5_K},
        {"iq3_xxs", &gqa1, 0, "token_embd.weight", DT_IQ3_S},
        {"iq3_xs", &gqa4, 0, "blk.2.attn_v.weight", DT_Q4_K},
        {"iq3_xs", &gqa1, 0, "blk.2.attn_v.weight", DT_IQ3_S},
        {"iq3_xs", &gqa1, 0, "blk.2.attn_k.weight", DT_IQ3_XXS},
        {"iq3_xs", &gqa1, 0, "blk.2.attn_q.weight", DT_IQ3_XXS},
        {"iq3_xs", &gqa1, 0, "blk.0.ffn_gate.weight", DT_IQ3_S},
        {"iq3_xs", &gqa1, 0, "blk.1.ffn_gate.weight", DT_IQ3_XXS},
        {"iq3_xs", &gqa1, 0, "blk.6.ffn_up.weight", DT_IQ3_XXS},
        {"iq3_xs", &gqa1, 0, "blk.7.ffn_up.weight", DT_IQ3_S},
        {"iq3_xs", &gqa1, 0, "blk.0.ffn_down.weight", DT_IQ3_S},
        {"iq3_xs", &gqa1, 0, "blk.0.attn_output.weight", DT_IQ3_S},
        {"iq3_xs", &gqa1, 0, "output.weight", DT_Q6_K},
        {"iq3_xs", &gqa1, 0, "token_embd.weight", DT_IQ3_S},
        {"iq3_s", &gqa4, 0, "blk.2.attn_v.weight", DT_Q4_K},
        {"iq3_s", &gqa1, 0, "blk.2.attn_v.weight", DT_IQ3_S},
        {"iq3_s", &gqa1, 0, "blk.2.attn_k.weight", DT_IQ3_S},
        {"iq3_s", &gqa1, 0, "blk.0.ffn_down.weight", DT_IQ3_S},
        {"iq3_s", &gqa1, LM_TIED, "token_embd.weight", DT_Q6_K},
        {"iq3_m", &gqa1, 0, "blk.2.attn_v.weight", DT_Q4_K},
        {"iq3_m", &l70b, 0, "blk.2.attn_v.weight", DT_Q5_K},
        {"iq3_m", &gqa1, 0, "blk.0.ffn_down.weight", DT_Q4_K},
        {"iq3_m", &gqa1, 0, "blk.1.ffn_down.weight", DT_IQ3_S},
        {"iq3_m", &gqa1, 0, "blk.7.ffn_down.weight", DT_IQ3_S},
        {"iq3_m", &gqa1, 0, "blk.1.attn_output.weight", DT_Q4_K},
        {"iq3_m", &gqa1, 0, "blk.1.attn_q.weight", DT_IQ3_S},
        {"iq3_m", &gqa1, 0, "output.weight", DT_Q6_K},
        /* 8 experts */
        {"iq2_xs", &moe8, LM_MOE, "blk.1.attn_v.weight", DT_Q4_K},
        {"iq2_xs", &moe8, LM_MOE, "blk.1.attn_k.weight", DT_Q4_K},
        {"iq2_xs", &moe8, LM_MOE, "blk.1.attn_output.weight", DT_Q5_K},
        {"iq2_xs", &moe8, LM_MOE, "blk.0.ffn_down_exps.weight", DT_Q2_K},
        {"iq2_xs", &moe8, LM_MOE, "blk.0.ffn_down_shexp.weight", DT_IQ2_XS}, /* rank 1, not layer 0 */
        {"iq2_xs", &moe8, LM_MOE, "blk.3.ffn_gate_inp.weight", DT_F16},
        {"iq3_xxs", &moe8, LM_MOE, "blk.1.attn_v.weight", DT_Q8_0},
        {"iq3_xxs", &moe8, LM_MOE, "blk.1.attn_k.weight", DT_Q8_0},
        {"iq3_xxs", &moe8, LM_MOE, "blk.1.attn_q.weight", DT_IQ2_S},
        {"iq3_xxs", &moe8, LM_MOE, "blk.1.attn_output.weight", DT_Q5_K},
        {"iq3_xxs", &moe8, LM_MOE, "blk.0.ffn_down_shexp.weight", DT_Q4_K}, /* layer 0 by name */
        {"iq3_xs", &moe8, LM_MOE, "blk.1.attn_output.weight", DT_Q5_K},
        {"iq3_xs", &moe8, LM_MOE, "blk.1.ffn_up_exps.weight", DT_IQ3_XXS},
        {"iq3_m", &moe8, LM_MOE, "blk.1.attn_output.weight", DT_Q5_K},
        {"iq3_s", &moe8, LM_MOE, "blk.1.attn_output.weight", DT_Q5_K},
        {"iq3_m", &moe8, LM_MOE, "blk.3.ffn_down_exps.weight", DT_Q4_K},
        {"iq3_m", &moe8, LM_MOE, "blk.4.ffn_down_exps.weight", DT_IQ3_S},
        {"iq3_m", &moe8, LM_MOE, "blk.6.ffn_down_shexp.weight", DT_Q4_K},
        /* rows of 64: lattice -> iq4_nl, q2_K / q3_K -> q4_0, q4_K -> q5_0; output q8_0 */
        {"iq2_xxs", &gqa1, LM_ROW64, "blk.1.attn_q.weight", DT_IQ4_NL},
        {"iq2_xxs", &gqa1, LM_ROW64, "blk.0.ffn_down.weight", DT_Q4_0},
        {"iq2_xxs", &gqa1, LM_ROW64, "token_embd.weight", DT_Q4_0},
        {"iq2_xxs", &gqa1, LM_ROW64, "output.weight", DT_Q8_0},
        {"iq2_xxs", &gqa4, LM_ROW64, "blk.1.attn_v.weight", DT_Q5_0},
        {"iq2_m", &gqa1, LM_ROW64 | LM_TIED, "token_embd.weight", DT_Q8_0},
        {"iq2_m", &gqa1, LM_ROW64, "token_embd.weight", DT_IQ4_NL},
        {"iq2_s", &gqa1, LM_ROW64, "blk.1.ffn_up.weight", DT_IQ4_NL},
        {"iq1_s", &gqa1, LM_ROW64, "blk.1.ffn_up.weight", DT_IQ4_NL},
        {"iq1_m", &gqa1, LM_ROW64, "blk.1.attn_output.weight", DT_IQ4_NL},
        {"iq3_xxs", &gqa1, LM_ROW64, "blk.1.attn_k.weight", DT_IQ4_NL},
        {"iq3_xxs", &gqa1, LM_ROW64, "blk.1.ffn_down.weight", DT_Q4_0},
        {"iq3_xxs", &gqa1, LM_ROW64, "blk.1.ffn_gate.weight", DT_IQ4_NL},
        {"iq3_s", &gqa1, LM_ROW64, "blk.1.attn_k.weight", DT_IQ4_NL},
        {"iq3_m", &gqa1, LM_ROW64, "blk.1.attn_output.weight", DT_Q5_0},
        /* rows of 48: not even iq4_nl's 32 divides them */
        {"iq2_xxs", &gqa1, LM_ROW48, "blk.1.attn_q.weight", DT_F16},
        {"iq3_xs", &gqa1, LM_ROW48, "blk.1.ffn_up.weight", DT_F16},
    };
    static lattice_model lm;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const quant_preset *p = quant_preset_find(c[i].preset);
        CHECK_MSG(p, "no preset %s", c[i].preset);
        lm_build(&lm, c[i].shape);
        CHECK_MSG(quant_mix_types(p, c[i].m, lm.ts, lm.n, lm.out) == 0, "%s: %s", c[i].preset, err_msg());
        const uint32_t got = lm_type(&lm, c[i].tensor);
        CHECK_MSG(got == c[i].want, "case %zu: %s %s: %s, want %s", i, c[i].preset, c[i].tensor,
                  got < DT_COUNT && dtype_get(got) ? dtype_get(got)->name : "?", dtype_get(c[i].want)->name);
    }
    /* llama.cpp's ftype numbers and default types */
    const struct { const char *name; uint32_t ftype, type; } d[] = {
        {"iq2_xxs", 19, DT_IQ2_XXS}, {"iq2_xs", 20, DT_IQ2_XS}, {"iq3_xs", 22, DT_IQ3_S}, {"iq3_xxs", 23, DT_IQ3_XXS},
        {"iq1_s", 24, DT_IQ1_S},     {"iq3_s", 26, DT_IQ3_S},   {"iq3_m", 27, DT_IQ3_S},  {"iq2_s", 28, DT_IQ2_XS},
        {"IQ2_M", 29, DT_IQ2_S},     {"iq1_m", 31, DT_IQ1_M},
    };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        const quant_preset *p = quant_preset_find(d[i].name);
        CHECK_MSG(p && p->ftype == d[i].ftype && p->type == d[i].type, "%s", d[i].name);
    }
}

/* ------------------------------------------------ importance matrices */

/* An imatrix GGUF with one entry: sums (ne0 x n_mat) and counts (n_mat). */
static int write_imatrix_gguf(const char *path, const char *name, const float *sums, uint64_t ne0, const float *counts,
                              uint64_t n_mat, uint32_t sums_type)
{
    gguf_writer *w = gguf_writer_new();
    char a[128], b[128];
    snprintf(a, sizeof a, "%s.in_sum2", name);
    snprintf(b, sizeof b, "%s.counts", name);
    const uint64_t ne_s[2] = {ne0, n_mat}, ne_c[2] = {1, n_mat};
    int rc = w ? 0 : -1;
    if (!rc && gguf_writer_add_tensor(w, a, sums_type, 2, ne_s, sums) < 0) rc = -1;
    if (!rc && counts && gguf_writer_add_tensor(w, b, DT_F32, 2, ne_c, counts) < 0) rc = -1;
    if (!rc) rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    return rc;
}

/* The same entry in llama.cpp's legacy layout (values = mean x ncall). */
static int write_imatrix_dat(const char *path, const char *name, const float *v, int32_t n, int32_t ncall, size_t cut)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int32_t one = 1, len = (int32_t)strlen(name);
    uint8_t buf[4096];
    size_t at = 0;
    memcpy(buf + at, &one, 4), at += 4;
    memcpy(buf + at, &len, 4), at += 4;
    memcpy(buf + at, name, (size_t)len), at += (size_t)len;
    memcpy(buf + at, &ncall, 4), at += 4;
    memcpy(buf + at, &n, 4), at += 4;
    memcpy(buf + at, v, 4 * (size_t)n), at += 4 * (size_t)n;
    const size_t wrote = fwrite(buf, 1, cut && cut < at ? cut : at, f);
    fclose(f);
    return wrote ? 0 : -1;
}

/* Both of llama.cpp's formats read to the same means (sum / count, 1 where
 * a count is 0; legacy: value / ncall); bad files name file and entry. */
TEST(imatrix_files)
{
    float sums[2 * 8], counts[2] = {4, 0}, want[16], dat[16];
    for (int i = 0; i < 16; i++) sums[i] = (float)(i + 1);
    for (int i = 0; i < 8; i++) want[i] = sums[i] / 4, want[8 + i] = 1; /* expert 1 saw no token */
    for (int i = 0; i < 16; i++) dat[i] = want[i] * 3;                   /* legacy: x ncall */
    const char *g = qpath("im.gguf"), *d = qpath("im.dat");
    CHECK(write_imatrix_gguf(g, "blk.0.ffn_up.weight", sums, 8, counts, 2, DT_F32) == 0);
    CHECK(write_imatrix_dat(d, "blk.0.ffn_up.weight", dat, 16, 3, 0) == 0);
    const char *files[2] = {g, d};
    for (int k = 0; k < 2; k++) {
        imatrix *m = NULL;
        CHECK_MSG(imatrix_load(&m, files[k]) == 0, "%s: %s", files[k], err_msg());
        if (!m) continue;
        uint64_t n = 0;
        const float *v = imatrix_find(m, "blk.0.ffn_up.weight", &n);
        CHECK(imatrix_count(m) == 1 && v && n == 16);
        for (uint64_t i = 0; v && i < 16; i++) CHECK_MSG(v[i] == want[i], "%s value %llu: %g", files[k], (unsigned long long)i, v[i]);
        CHECK(imatrix_find(m, "blk.0.ffn_down.weight", &n) == NULL);
        imatrix_free(m);
    }
    /* bad: counts missing, f16 sums, negative / NaN values, truncated legacy */
    imatrix *m = NULL;
    CHECK(write_imatrix_gguf(g, "a.weight", sums, 8, NULL, 2, DT_F32) == 0);
    CHECK(imatrix_load(&m, g) != 0 && strstr(err_msg(), "a.weight") && strstr(err_msg(), "im.gguf"));
    uint16_t h[16] = {0};
    CHECK(write_imatrix_gguf(g, "a.weight", (const float *)h, 8, counts, 2, DT_F16) == 0);
    CHECK(imatrix_load(&m, g) != 0 && strstr(err_msg(), "f32"));
    sums[3] = -1;
    CHECK(write_imatrix_gguf(g, "a.weight", sums, 8, counts, 2, DT_F32) == 0);
    CHECK(imatrix_load(&m, g) != 0 && strstr(err_msg(), "value 3"));
    dat[5] = NAN;
    CHECK(write_imatrix_dat(d, "b.weight", dat, 16, 3, 0) == 0);
    CHECK(imatrix_load(&m, d) != 0 && strstr(err_msg(), "b.weight") && strstr(err_msg(), "value 5"));
    dat[5] = 1;
    CHECK(write_imatrix_dat(d, "b.weight", dat, 16, 3, 30) == 0);
    CHECK(imatrix_load(&m, d) != 0 && strstr(err_msg(), "im.dat"));
    CHECK(imatrix_load(&m, qpath("absent.dat")) != 0);
    CHECK(m == NULL);
    unlink(g), unlink(d);
}

/* The importance steers the lattice search: every 4th column marked 100x
 * as important (a uniform factor over a whole scale group would change
 * nothing) comes out closer to the input than under a uniform importance
 * (and the others pay for it), for every lattice type; other types ignore
 * it. */
TEST(imatrix_weighs_lattice_error)
{
    rng_seed(12);
    const int64_t n = 256 * 64;
    float *x = gx, *y = gy, *z = gz;
    static float qw[256 * 64], ones[256 * 64];
    fill_weights(x, n);
    for (int64_t i = 0; i < n; i++) qw[i] = i % 4 == 0 ? 100.f : 1.f, ones[i] = 1.f; /* within every group */
    const uint32_t types[] = {LATTICE_TYPES};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        quant_quantize_row_w(types[t], x, gq, n, ones);
        quant_dequant_row(types[t], gq, y, n);
        quant_quantize_row_w(types[t], x, gq, n, qw);
        quant_dequant_row(types[t], gq, z, n);
        double e0 = 0, e1 = 0, r0 = 0, r1 = 0;
        for (int64_t i = 0; i < n; i++) {
            const double a = (x[i] - y[i]) * (double)(x[i] - y[i]), b = (x[i] - z[i]) * (double)(x[i] - z[i]);
            if (i % 4 == 0) e0 += a, e1 += b;
            else r0 += a, r1 += b;
        }
        printf("# %s: marked columns' squared error %.4g -> %.4g, the rest %.4g -> %.4g\n",
               dtype_get(types[t])->name, e0, e1, r0, r1);
        CHECK_MSG(e1 < 0.8 * e0, "%s: marked %g vs %g", dtype_get(types[t])->name, e1, e0);
        CHECK_MSG(r1 > r0, "%s: the rest %g vs %g", dtype_get(types[t])->name, r1, r0);
    }
    quant_quantize_row(DT_Q4_K, x, gq, 256);
    quant_quantize_row_w(DT_Q4_K, x, gq2, 256, qw);
    CHECK(memcmp(gq, gq2, sizeof(block_q4_K)) == 0);
}

/* With an importance matrix the mix takes llama.cpp's rules for one. */
TEST(quant_mix_with_imatrix)
{
    quant_mix_tensor ts[4] = {
        {"blk.0.attn_v.weight", DT_F16, 2, {256, 256, 1, 1}},
        {"blk.0.ffn_down.weight", DT_F16, 2, {256, 256, 1, 1}},
        {"blk.1.ffn_down.weight", DT_F16, 2, {256, 256, 1, 1}},
        {"output.weight", DT_F16, 2, {256, 256, 1, 1}},
    };
    uint32_t out[4];
    quant_model m = {"llama", 8, 8, 8, 0, false};
    CHECK(quant_mix_types(quant_preset_find("iq3_xxs"), &m, ts, 4, out) == 0);
    CHECK(out[0] == DT_IQ3_S && out[1] == DT_Q4_K && out[2] == DT_Q3_K);
    CHECK(quant_mix_types(quant_preset_find("iq4_xs"), &m, ts, 4, out) == 0);
    CHECK(out[1] == DT_Q5_K);
    CHECK(quant_mix_types(quant_preset_find("q4_0"), &m, ts, 4, out) == 0);
    CHECK(out[1] == DT_Q4_0);
    m.has_imatrix = true;
    CHECK(quant_mix_types(quant_preset_find("iq3_xxs"), &m, ts, 4, out) == 0);
    CHECK(out[0] == DT_IQ3_XXS && out[1] == DT_IQ3_XXS && out[2] == DT_IQ3_XXS && out[3] == DT_Q5_K);
    CHECK(quant_mix_types(quant_preset_find("iq4_xs"), &m, ts, 4, out) == 0);
    CHECK(out[1] == DT_IQ4_XS);
    CHECK(quant_mix_types(quant_preset_find("q4_0"), &m, ts, 4, out) == 0);
    CHECK(out[1] == DT_Q4_1 && out[2] == DT_Q4_0);
    CHECK(quant_mix_types(quant_preset_find("q5_0"), &m, ts, 4, out) == 0);
    CHECK(out[1] == DT_Q5_1 && out[2] == DT_Q5_0);
}

TEST(quantize_errors_name_file_and_tensor)
{
    rng_seed(12);
    const char *in = qpath("bad.gguf"), *out = qpath("bad-out.gguf");
    /* a weight in a type pagellm cannot read (mxfp4) */
    CHECK(syn_write(in, true, "blk.3.attn_k.weight", DT_MXFP4) == 0);
    int rc = pl_quantize(in, out, "q8_0");
    CHECK_EQ_INT(rc, PL_EUNSUPPORTED);
    CHECK_MSG(strstr(pl_last_error(), in) && strstr(pl_last_error(), "blk.3.attn_k.weight")
              && strstr(pl_last_error(), "mxfp4"), "message: %s", pl_last_error());
    CHECK(access(out, F_OK) != 0); /* nothing written */
    /* but it may stay what it is when the target is its own type: f32 keeps
     * it only if it is not a weight matrix, so f16 fails the same way */
    CHECK(pl_quantize(in, out, "f16") == PL_EUNSUPPORTED);
    /* unknown type: named */
    CHECK(pl_quantize(in, out, "q3_k_xl") == PL_EINVAL);
    CHECK_MSG(strstr(pl_last_error(), "q3_k_xl"), "message: %s", pl_last_error());
    /* missing input: named */
    CHECK(pl_quantize(qpath("nope.gguf"), out, "q8_0") != 0);
    CHECK_MSG(strstr(pl_last_error(), "nope.gguf"), "message: %s", pl_last_error());
    /* not a GGUF */
    FILE *f = fopen(in, "w");
    CHECK(f);
    fputs("definitely not a gguf file\n", f);
    fclose(f);
    CHECK(pl_quantize(in, out, "q8_0") != 0);
    CHECK_MSG(strstr(pl_last_error(), "bad.gguf"), "message: %s", pl_last_error());
    /* unwritable output */
    CHECK(syn_write(in, true, NULL, 0) == 0);
    CHECK(pl_quantize(in, "/nonexistent-dir/x.gguf", "q8_0") != 0);
    CHECK_MSG(strstr(pl_last_error(), "/nonexistent-dir/x.gguf"), "message: %s", pl_last_error());
    unlink(in);
}

int main(void)
{
    RUN(block_sizes_match_dtype_table);
    RUN(supported_types);
    RUN(round_nearest_ties_to_even);
    RUN(f16_known_values);
    RUN(f16_rounding_edges);
    RUN(f16_every_value_round_trips);
    RUN(bf16_edges);
    RUN(f16_bf16_rows);
    RUN(q8_0_hand_block);
    RUN(q4_0_hand_block);
    RUN(q4_K_scale_unpacking);
    RUN(q4_K_hand_block);
    RUN(q6_K_hand_block);
    RUN(q8_K_hand_block);
    RUN(q8_0_quantize_known);
    RUN(q8_K_quantize_known);
    RUN(zero_rows_decode_to_zero);
    RUN(degenerate_rows);
    RUN(nonfinite_inputs_stay_in_their_block);
    RUN(random_roundtrip_error_bounds);
    RUN(q8_0_elementwise_bound);
    RUN(q8_0_requantizes_to_same_bytes);
    RUN(q8_K_requantizes_to_same_ints);
    RUN(weight_quantizers_stable_on_own_output);
    if (oracle_load()) {
        RUN(oracle_dequant);
        RUN(oracle_dequant_extremes);
        RUN(oracle_lattice_grids);
        RUN(oracle_half_conversions);
        RUN(oracle_q8_quantize_bit_exact);
        RUN(oracle_weight_quantizers_not_worse);
        RUN(oracle_lattice_quantizers_not_worse);
    } else {
        test_skip("oracle_*", oracle.why);
    }
    if (access(STORIES, R_OK) == 0) RUN(quantize_stories_every_type);
    else test_skip("quantize_stories_every_type", STORIES " not found");
    RUN(quantize_mix_rules);
    RUN(quant_mix_counts_in_llama_cpp_order);
    RUN(quant_mix_lattice_presets);
    RUN(quantize_errors_name_file_and_tensor);
    RUN(imatrix_files);
    RUN(imatrix_weighs_lattice_error);
    RUN(quant_mix_with_imatrix);
    if (qdir[0]) {
        const char *files[] = {"stories.gguf", "syn.gguf", "syn-out.gguf", "bad.gguf", "bad-out.gguf"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(qpath(files[i]));
        rmdir(qdir);
    }
    return test_summary();
}
