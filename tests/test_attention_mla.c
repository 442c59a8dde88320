/* test_attention_mla.c - the latent attention kernel (attention_mla.h)
 * over a paged cache of rows in a shuffled block table: the reference
 * against a plain double-precision reading of its contract, the AVX2 and
 * AVX-512 variants against the reference for every row type, heads and
 * context, each head's bits the same whatever heads share its call, and
 * the dispatch following kern_init. OFP8 rows (e5m2; e4m3 with block
 * scales) are written with kv_codec's encoders and read back with its
 * decoders for the contract; "e4m3 staged" also hands the rows of the
 * last block and the one before it over as f16 tail rows, and fills the
 * block rows the tail replaces with NaN codes, which the result would
 * show if the kernel read them. KIVI rows (kivi4, kivi2) are sealed per
 * channel over each block by kv_latent_kivi_seal and read back for the
 * contract by this file's own reading of the layout attention_mla.h
 * draws, in doubles; "kivi4 staged" hands its last blocks over as f16
 * tail rows as e4m3 does. */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/attention_mla.h"
#include "kernels/kernels.h"
#include "kv/kv_codec.h"
#include "kv/kv_latent.h"
#include "rng.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

#define E4M3_STAGED 0x20000u  /* ATTN_KV_FP8_E4M3 rows with a tail */
#define KIVI4_STAGED 0x20001u /* ATTN_MLA_KIVI4 rows with a tail */
static const uint32_t types[] = {DT_F32,           DT_F16,           DT_BF16,        DT_Q8_0,        DT_Q4_0,
                                 ATTN_KV_FP8_E5M2, ATTN_KV_FP8_E4M3, E4M3_STAGED,    ATTN_MLA_KIVI4, ATTN_MLA_KIVI2,
                                 KIVI4_STAGED};
#define N_TYPES (sizeof types / sizeof types[0])

static const char *tname(uint32_t t)
{
    return t == ATTN_KV_FP8_E5M2   ? "e5m2"
           : t == ATTN_KV_FP8_E4M3 ? "e4m3"
           : t == E4M3_STAGED      ? "e4m3 staged"
           : t == ATTN_MLA_KIVI4   ? "kivi4"
           : t == ATTN_MLA_KIVI2   ? "kivi2"
           : t == KIVI4_STAGED     ? "kivi4 staged"
                                   : dtype_get(t)->name;
}

static bool is_fp8(uint32_t t) { return t == ATTN_KV_FP8_E5M2 || t == ATTN_KV_FP8_E4M3; }

/* The e4m3 scale of logical block b: a different one for each block, so
 * that a row read with its neighbour's scale shows. */
static float block_scale(uint32_t b) { return (1.0f + 0.37f * (float)(b % 5)) / 448.0f; }

static uint32_t kivi_bits(uint32_t t) { return t == ATTN_MLA_KIVI4 ? 4 : t == ATTN_MLA_KIVI2 ? 2 : 0; }

/* Element i of row r of type t (a ggml type, OFP8, or KIVI with its
 * block's parameters par) as floats. KIVI: m + d x code in doubles, read
 * from the layout: codes LSB first, per 32 channels 32 f16 d then 32 m. */
static void decode_row(uint32_t t, const uint8_t *r, float scale, const uint8_t *par, float *out, int L)
{
    if (kivi_bits(t)) {
        const uint32_t b = kivi_bits(t);
        for (int i = 0; i < L; i++) {
            uint16_t d, m;
            memcpy(&d, par + ((size_t)(i / 32) * 64 + (size_t)(i % 32)) * 2, 2);
            memcpy(&m, par + ((size_t)(i / 32) * 64 + 32 + (size_t)(i % 32)) * 2, 2);
            const uint32_t code = (r[(uint32_t)i * b / 8] >> ((uint32_t)i * b % 8)) & ((1u << b) - 1);
            out[i] = (float)((double)f16_to_f32(m) + (double)f16_to_f32(d) * code);
        }
    } else if (t == ATTN_KV_FP8_E5M2) for (int i = 0; i < L; i++) out[i] = kv_e5m2_to_f32(r[i]);
    else if (t == ATTN_KV_FP8_E4M3) for (int i = 0; i < L; i++) out[i] = kv_e4m3_to_f32(r[i]) * scale;
    else quant_dequant_row(t, r, out, (size_t)L);
}

/* A paged cache of n rows of R + D elements: blocks of bs rows in a
 * reversed, spread-out block table, rows of random values in [-1, 1). */
typedef struct {
    attn_mla_kv kv;
    uint8_t *data;
    uint32_t *blocks;
    uint16_t *tail; /* E4M3_STAGED: f16 rows from kv.tail0 to n */
    float *q;   /* [H][R + D] */
    float *out; /* [H][R] */
    float *scratch;
} cache;

static void cache_make(cache *c, uint32_t type, int R, int D, int n, int H, uint32_t bs, uint64_t seed)
{
    rng_seed(seed);
    const int L = R + D;
    const bool staged = type == E4M3_STAGED || type == KIVI4_STAGED;
    if (staged) type = type == E4M3_STAGED ? ATTN_KV_FP8_E4M3 : ATTN_MLA_KIVI4;
    const uint32_t bits = kivi_bits(type);
    const size_t row_bytes = is_fp8(type) ? (size_t)L : bits ? (size_t)L * bits / 8 : dtype_row_bytes(type, (uint64_t)L),
                 block_bytes = bs * row_bytes + (bits ? attn_mla_kivi_param_bytes(L) : 64);
    const uint32_t nb = ((uint32_t)n + bs - 1) / bs, phys = 2 * nb + 1;
    c->data = calloc(phys, block_bytes);
    c->blocks = malloc(nb * sizeof *c->blocks);
    for (uint32_t b = 0; b < nb; b++) c->blocks[b] = phys - 1 - 2 * b;
    c->kv = (attn_mla_kv){c->blocks, c->data, block_bytes, row_bytes, bs, type, R, L, bs * row_bytes, NULL, 0, 0};
    /* the tail: from the block before the last one on */
    const uint32_t last0 = (uint32_t)(n - 1) / bs * bs, tail0 = last0 >= bs ? last0 - bs : 0;
    c->tail = staged ? malloc((size_t)(n - (int)tail0) * L * sizeof *c->tail) : NULL;
    for (uint32_t b = 0; b < nb && type == ATTN_KV_FP8_E4M3; b++) {
        const float sb = block_scale(b);
        memcpy(c->data + (size_t)c->blocks[b] * block_bytes + c->kv.scale_off, &sb, sizeof sb);
    }
    float *row = malloc((size_t)L * sizeof *row);
    uint16_t *f16rows = bits ? malloc((size_t)bs * L * sizeof *f16rows) : NULL; /* KIVI: a block's rows */
    for (int j = 0; j < n; j++) {
        for (int i = 0; i < L; i++) row[i] = rng_sym();
        /* KIVI channels with their own ranges: an outlier channel, and the rope dims wider */
        for (int i = 0; bits && i < L; i++) row[i] *= i == 5 ? 8.0f : i >= R ? 2.0f : 1.0f;
        uint8_t *dst = c->data + (size_t)c->blocks[j / bs] * block_bytes + (size_t)(j % bs) * row_bytes;
        if (staged && (uint32_t)j >= tail0) kv_codec_f16_row(row, c->tail + (size_t)(j - (int)tail0) * L, (uint64_t)L);
        if (staged && (uint32_t)j >= last0 && !bits) memset(dst, 0x7F, row_bytes); /* NaN codes: never to be read */
        else if (type == ATTN_KV_FP8_E5M2) for (int i = 0; i < L; i++) dst[i] = kv_e5m2_from_f32(row[i]);
        else if (type == ATTN_KV_FP8_E4M3)
            for (int i = 0; i < L; i++) dst[i] = kv_e4m3_from_f32(row[i] / block_scale((uint32_t)j / bs));
        else if (bits) { /* a block is sealed at its last row (or the cache's) */
            kv_codec_f16_row(row, f16rows + (size_t)(j % bs) * L, (uint64_t)L);
            if ((uint32_t)j % bs == bs - 1 || j == n - 1)
                kv_latent_kivi_seal(c->data + (size_t)c->blocks[j / bs] * block_bytes, row_bytes, f16rows,
                                    (uint32_t)j % bs + 1, bs, (uint32_t)L, bits);
        } else quant_quantize_row(type, row, dst, (size_t)L);
    }
    if (staged && bits) /* the rows the tail replaces as maximal codes of the widest range: shows if read */
        for (int j = (int)last0; j < n; j++) memset(c->data + (size_t)c->blocks[j / bs] * block_bytes + (size_t)(j % bs) * row_bytes, 0xFF, row_bytes);
    if (staged && bits) {
        uint16_t *par = (uint16_t *)(c->data + (size_t)c->blocks[last0 / bs] * block_bytes + c->kv.scale_off);
        for (int i = 0; i < L; i++) par[(i / 32) * 64 + i % 32] = f32_to_f16(1000.0f);
    }
    free(row);
    free(f16rows);
    if (staged) {
        c->kv.tail = c->tail;
        c->kv.tail0 = (int)tail0;
        c->kv = attn_mla_at(&c->kv, n);
    }
    c->q = malloc((size_t)H * L * sizeof *c->q);
    for (int i = 0; i < H * L; i++) c->q[i] = 2.0f * rng_sym();
    c->out = malloc((size_t)H * R * sizeof *c->out);
    c->scratch = malloc(attn_mla_scratch_floats(H, n, L) * sizeof *c->scratch);
}

static void cache_free(cache *c)
{
    free(c->data), free(c->blocks), free(c->tail), free(c->q), free(c->out), free(c->scratch);
}

/* x rounded as the kernel rounds its query and weights for type t. */
static float rounded(uint32_t t, float x)
{
    if (t != DT_F16 && t != DT_BF16) return x;
    uint16_t h;
    quant_quantize_row(t, &x, &h, 1);
    quant_dequant_row(t, &h, &x, 1);
    return x;
}

/* The contract in doubles: out[h] of the cache for head h. */
static void plain(const cache *c, int h, int n, float scale, double *out)
{
    const attn_mla_kv *kv = &c->kv;
    const int L = kv->row_len, R = kv->rank;
    float *rows = malloc((size_t)n * L * sizeof *rows);
    double *s = malloc((size_t)n * sizeof *s), mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) {
        const uint8_t *r = kv->base + (size_t)kv->blocks[j / kv->block_size] * kv->block_bytes +
                           (size_t)(j % kv->block_size) * kv->row_bytes;
        if (kv->tail && j >= kv->n_sealed)
            for (int i = 0; i < L; i++) rows[(size_t)j * L + i] = f16_to_f32(kv->tail[(size_t)(j - kv->tail0) * L + i]);
        else decode_row(kv->type, r, block_scale((uint32_t)j / kv->block_size),
                        kv->base + (size_t)kv->blocks[j / kv->block_size] * kv->block_bytes + kv->scale_off,
                        rows + (size_t)j * L, L);
        double d = 0;
        for (int i = 0; i < L; i++) d += (double)rounded(kv->type, c->q[(size_t)h * L + i]) * rows[(size_t)j * L + i];
        s[j] = d * scale;
        mx = s[j] > mx ? s[j] : mx;
    }
    for (int j = 0; j < n; j++) sum += s[j] = exp(s[j] - mx);
    for (int i = 0; i < R; i++) out[i] = 0;
    for (int j = 0; j < n; j++) {
        const double p = rounded(kv->type, (float)(s[j] / sum));
        for (int i = 0; i < R; i++) out[i] += p * rows[(size_t)j * L + i];
    }
    free(rows), free(s);
}

/* Weights rounded to bf16 keep 8 bits: a weight on the other side of a
 * rounding boundary moves an output by up to 2^-8 of itself. */
static double tolerance(uint32_t t) { return t == DT_BF16 ? 4e-3 : t == DT_F16 ? 1e-3 : 1e-4; }

static const int shapes[][2] = {{512, 64}, {64, 32}}; /* rank, rope dims */
static const int contexts[] = {1, 3, 17, 300};
static const int heads[] = {1, 5, 16};

TEST(reference_is_the_contract_in_doubles)
{
    kern_init(0);
    for (size_t t = 0; t < N_TYPES; t++)
        for (int sh = 0; sh < 2; sh++)
            for (int ci = 0; ci < 4; ci++) {
                const int R = shapes[sh][0], D = shapes[sh][1], n = contexts[ci], H = 5;
                const float scale = 1.0f / sqrtf((float)(R + D) / 4);
                cache c;
                cache_make(&c, types[t], R, D, n, H, 16, 100 + t * 10 + ci);
                attn_mla_with(ATTN_MLA_REF, &c.kv, c.q, (size_t)(R + D), H, n, scale, c.out, (size_t)R, c.scratch);
                double *want = malloc((size_t)R * sizeof *want), worst = 0;
                for (int h = 0; h < H; h++) {
                    plain(&c, h, n, scale, want);
                    for (int i = 0; i < R; i++) worst = fmax(worst, fabs(c.out[(size_t)h * R + i] - want[i]));
                }
                CHECK_MSG(worst <= tolerance(types[t]), "type %s R %d n %d: worst %.3g", tname(types[t]), R, n, worst);
                free(want);
                cache_free(&c);
            }
}

static void simd_vs_reference(attn_mla_variant v, const char *name)
{
    int runs = 0;
    for (size_t t = 0; t < N_TYPES; t++)
        for (int sh = 0; sh < 2; sh++)
            for (int ci = 0; ci < 4; ci++)
                for (int hi = 0; hi < 3; hi++) {
                    const int R = shapes[sh][0], D = shapes[sh][1], n = contexts[ci], H = heads[hi];
                    const float scale = 1.0f / sqrtf((float)(R + D) / 4);
                    cache c;
                    cache_make(&c, types[t], R, D, n, H, ci % 2 ? 7 : 16, 200 + t * 100 + ci * 10 + hi);
                    if (!attn_mla_variant_available(v, &c.kv)) {
                        cache_free(&c);
                        continue;
                    }
                    float *ref = malloc((size_t)H * R * sizeof *ref);
                    attn_mla_with(ATTN_MLA_REF, &c.kv, c.q, (size_t)(R + D), H, n, scale, ref, (size_t)R, c.scratch);
                    attn_mla_with(v, &c.kv, c.q, (size_t)(R + D), H, n, scale, c.out, (size_t)R, c.scratch);
                    double worst = 0;
                    for (int i = 0; i < H * R; i++) worst = fmax(worst, fabs((double)c.out[i] - ref[i]));
                    CHECK_MSG(worst <= tolerance(types[t]), "%s type %s R %d n %d H %d: worst %.3g", name,
                              tname(types[t]), R, n, H, worst);
                    runs++;
                    free(ref);
                    cache_free(&c);
                }
    if (!runs) test_skip(name, "not available on this CPU");
}

TEST(avx2_matches_reference) { simd_vs_reference(ATTN_MLA_AVX2, "avx2"); }
TEST(avx512_matches_reference) { simd_vs_reference(ATTN_MLA_AVX512, "avx512"); }

/* Heads 0..15 in one call, one at a time and in calls of 3: the same bits,
 * for every variant this CPU has (the model groups heads by thread count
 * and batch). */
TEST(each_head_is_the_same_bits_in_any_call)
{
    const attn_mla_variant vs[] = {ATTN_MLA_REF, ATTN_MLA_AVX2, ATTN_MLA_AVX512};
    for (size_t vi = 0; vi < 3; vi++)
        for (size_t t = 0; t < N_TYPES; t++) {
            const int R = 512, D = 64, L = R + D, H = 16, n = 45;
            cache c;
            cache_make(&c, types[t], R, D, n, H, 16, 300 + t);
            if (!attn_mla_variant_available(vs[vi], &c.kv)) {
                cache_free(&c);
                continue;
            }
            float *alone = malloc((size_t)H * R * sizeof *alone), *threes = malloc((size_t)H * R * sizeof *threes);
            attn_mla_with(vs[vi], &c.kv, c.q, L, H, n, 0.1f, c.out, R, c.scratch);
            for (int h = 0; h < H; h++)
                attn_mla_with(vs[vi], &c.kv, c.q + (size_t)h * L, L, 1, n, 0.1f, alone + (size_t)h * R, R, c.scratch);
            for (int h = 0; h < H; h += 3)
                attn_mla_with(vs[vi], &c.kv, c.q + (size_t)h * L, L, H - h < 3 ? H - h : 3, n, 0.1f,
                              threes + (size_t)h * R, R, c.scratch);
            CHECK_MSG(memcmp(c.out, alone, (size_t)H * R * sizeof(float)) == 0, "variant %zu type %zu: alone", vi, t);
            CHECK_MSG(memcmp(c.out, threes, (size_t)H * R * sizeof(float)) == 0, "variant %zu type %zu: threes", vi, t);
            free(alone), free(threes);
            cache_free(&c);
        }
}

/* The phases over a split of the keys (scores) and of the value elements
 * (values), as the model shares a decode token out over threads: attn_mla's
 * bits, for every row type and for the reference too. */
TEST(phases_over_split_keys_and_values_are_the_same_bits)
{
    for (int ref = 0; ref < 2; ref++)
        for (size_t t = 0; t < N_TYPES; t++) {
            kern_init(ref);
            const int R = 512, D = 64, L = R + D, H = 16, n = 301;
            cache c;
            cache_make(&c, types[t], R, D, n, H, 16, 500 + t);
            attn_mla(&c.kv, c.q, L, H, n, 0.07f, c.out, R, c.scratch);
            const size_t ls = attn_mla_qr_stride(&c.kv), ld = 304;
            float *qr = malloc(H * ls * sizeof *qr), *sc = malloc(H * ld * sizeof *sc), *spare = malloc(ls * sizeof *spare);
            float *split = malloc((size_t)H * R * sizeof *split);
            attn_mla_queries(&c.kv, c.q, L, H, qr);
            const int cuts[] = {0, 5, 150, 280, 301}; /* staged: the tail from 272, sealed rows to 288 */
            for (int k = 0; k < 4; k++) attn_mla_scores(&c.kv, qr, H, cuts[k], cuts[k + 1], sc, ld, spare);
            attn_mla_weights(&c.kv, sc, ld, H, n, 0.07f);
            for (int i0 = 0; i0 < R; i0 += 96) attn_mla_values(&c.kv, sc, ld, H, n, i0, i0 + 96 < R ? i0 + 96 : R, split, R, spare);
            CHECK_MSG(memcmp(c.out, split, (size_t)H * R * sizeof(float)) == 0, "ref %d type %zu", ref, t);
            free(qr), free(sc), free(spare), free(split);
            cache_free(&c);
        }
    kern_init(0);
}

/* attn_mla runs the reference after kern_init(1), a SIMD variant where the
 * CPU has one after kern_init(0); the shape alone can send it back. F32
 * rows: with f16 ones the rounded weights times f16 values are exact
 * products, and the variants often agree to the bit. */
TEST(dispatch_follows_kern_init_and_shape)
{
    const int R = 64, D = 32, L = R + D, H = 4, n = 20;
    cache c;
    cache_make(&c, DT_F32, R, D, n, H, 16, 400);
    float *ref = malloc((size_t)H * R * sizeof *ref);
    kern_init(1); /* the reference passes with the reference softmax */
    attn_mla_with(ATTN_MLA_REF, &c.kv, c.q, L, H, n, 0.2f, ref, R, c.scratch);
    attn_mla(&c.kv, c.q, L, H, n, 0.2f, c.out, R, c.scratch);
    CHECK(memcmp(c.out, ref, (size_t)H * R * sizeof(float)) == 0);
    kern_init(0);
    attn_mla(&c.kv, c.q, L, H, n, 0.2f, c.out, R, c.scratch);
    if (attn_mla_variant_available(ATTN_MLA_AVX2, &c.kv))
        CHECK_MSG(memcmp(c.out, ref, (size_t)H * R * sizeof(float)) != 0, "a SIMD variant gives the reference's bits");
    attn_mla_kv odd = c.kv;
    odd.rank = 48; /* not a multiple of 32: no SIMD tile */
    CHECK(!attn_mla_variant_available(ATTN_MLA_AVX2, &odd) && !attn_mla_variant_available(ATTN_MLA_AVX512, &odd));
    free(ref);
    cache_free(&c);
}

TEST(scratch_sizing)
{
    CHECK(attn_mla_scratch_floats(16, 4096, 576) >= 16 * (4096 + 576) + 576);
    CHECK(attn_mla_scratch_floats(1, 1, 96) >= 1 + 96 + 96);
}

int main(void)
{
    RUN(reference_is_the_contract_in_doubles);
    RUN(avx2_matches_reference);
    RUN(avx512_matches_reference);
    RUN(each_head_is_the_same_bits_in_any_call);
    RUN(phases_over_split_keys_and_values_are_the_same_bits);
    RUN(dispatch_follows_kern_init_and_shape);
    RUN(scratch_sizing);
    return test_summary();
}
