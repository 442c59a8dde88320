/* fake_kv.h - a fake paged KV pool for the attention kernels: what
 * test_attention.c checks the variants on and what the attention
 * micro-benchmarks (bench/micro/bench_attn_calls.c, bench_attn_decode.c)
 * time.
 *
 * One layer's K and V planes per block, several KV heads a row, the block
 * table a shuffled permutation of the physical blocks (one spare block, so
 * ids are not dense; fake_kv_make_laid also lays them in order, or spaced
 * as the engine's pool spaces one layer's planes), filled with random rows
 * of each KV row type: F32, F16, BF16, Q8_0, Q4_0, the OFP8 rows E4M3 (a
 * power-of-two scale per block, plane and head in the plane tail) and E5M2
 * encoded with kv/kv_codec.h, and the pool's f16 layout (FAKE_KV_F16C).
 * Keys are scaled so that softmaxes range from flat to peaked.
 *
 *   block: [K plane: bs rows x n_kv heads | n_kv f32 scales]
 *          [V plane: the same] [16 bytes, so that blocks do not all
 *                               start on a cache line]
 *
 * Draws from rng.h's stream (fake_kv_make seeds it). Header-only; -Itests
 * finds it.
 */
#ifndef PL_TESTS_FAKE_KV_H
#define PL_TESTS_FAKE_KV_H

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "kernels/attention.h"
#include "kv/kv_codec.h"
#include "rng.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

typedef struct {
    uint8_t *data;   /* the blocks (mem_alloc_huge) */
    uint32_t *table; /* [logical block] -> physical block */
    attn_kv kv;      /* what the kernels read */
    int n_kv, n_ctx;
} fake_kv;

/* FAKE_KV_F16C: the kv pool's f16 layout, the K plane stored in columns
 * (attn_kv.k_cols) and the V plane's rows grouped by head (head_bytes =
 * block_size x row_bytes); a test-only name, made from the F16 rows. */
#define FAKE_KV_F16C 0x20000u
static const uint32_t fake_kv_types[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, ATTN_KV_FP8_E4M3, ATTN_KV_FP8_E5M2, FAKE_KV_F16C};
#define FAKE_KV_N_TYPES ((int)(sizeof fake_kv_types / sizeof fake_kv_types[0]))
static inline const char *fake_kv_type_name(uint32_t t)
{
    return t == DT_F32 ? "f32" : t == DT_F16 ? "f16" : t == DT_BF16 ? "bf16" : t == DT_Q8_0 ? "q8_0"
         : t == DT_Q4_0 ? "q4_0" : t == ATTN_KV_FP8_E4M3 ? "e4m3" : t == FAKE_KV_F16C ? "f16 pool" : "e5m2";
}

/* The element type of a test type (FAKE_KV_F16C's is F16). */
static inline uint32_t fake_kv_elem_type(uint32_t t) { return t == FAKE_KV_F16C ? DT_F16 : t; }

static inline bool fake_kv_is_fp8(uint32_t t) { return t == ATTN_KV_FP8_E4M3 || t == ATTN_KV_FP8_E5M2; }

static inline size_t fake_kv_head_bytes(uint32_t t, int hd) { return fake_kv_is_fp8(t) ? (size_t)hd : dtype_row_bytes(fake_kv_elem_type(t), (uint64_t)hd); }

/* s: the e4m3 scale of the row's head (elements are stored as x / s) */
static inline void fake_kv_encode_row(uint32_t t, const float *src, uint8_t *dst, int n, float s)
{
    if (t == ATTN_KV_FP8_E4M3) for (int i = 0; i < n; i++) dst[i] = kv_e4m3_from_f32(src[i] / s);
    else if (t == ATTN_KV_FP8_E5M2) for (int i = 0; i < n; i++) dst[i] = kv_e5m2_from_f32(src[i]);
    else if (t == DT_Q4_0) quant_q4_0_quantize_row_ref(src, (block_q4_0 *)dst, n); /* as the cache does */
    else quant_quantize_row(t, src, dst, n);
}

static inline void fake_kv_decode_row(uint32_t t, const uint8_t *src, float *dst, int n, float s)
{
    if (t == ATTN_KV_FP8_E4M3) for (int i = 0; i < n; i++) dst[i] = kv_e4m3_to_f32(src[i]) * s;
    else if (t == ATTN_KV_FP8_E5M2) for (int i = 0; i < n; i++) dst[i] = kv_e5m2_to_f32(src[i]);
    else quant_dequant_row(t, src, dst, n);
}

/* Where the physical blocks sit (fake_kv_make_laid): the table shuffled
 * (false: block i of the sequence is physical block i), and the distance
 * from one block to the next, times the packed block's bytes (1: packed;
 * L: as the engine's pool, whose block holds every one of L layers'
 * planes, so that one layer's planes of consecutive blocks are L packed
 * blocks apart; the bytes between are never read). */
typedef struct {
    bool shuffled;
    int stride_blocks;
    bool split; /* K planes of every block in one run, then V planes in another */
} fake_kv_layout;

/* n_ctx tokens of n_kv heads in blocks of bs tokens laid out as lay says
 * (and one spare block more than needed, so ids are not dense).
 * 0, or -1 when out of memory (then nothing is held; else fake_kv_free). */
static inline int fake_kv_make_laid(fake_kv *f, uint32_t t_test, int hd, int n_kv, int n_ctx, int bs, uint64_t seed,
                                    fake_kv_layout lay)
{
    const uint32_t t = fake_kv_elem_type(t_test);
    rng_seed(seed);
    const size_t head_bytes = fake_kv_head_bytes(t, hd), row_bytes = head_bytes * (size_t)n_kv;
    /* a plane: bs rows, then (e4m3) one f32 scale per head, as the codec lays it out */
    const size_t rows_bytes = row_bytes * (size_t)bs, plane = rows_bytes + 4 * (size_t)n_kv;
    assert(lay.stride_blocks >= 1);
    const int n_used = (n_ctx + bs - 1) / bs, n_phys = n_used + 1;
    /* K plane of block b at b x kstep, V plane at vplane_at + b x vstep:
     * a block's planes side by side, or (split) every K plane, then every
     * V plane, a V plane's step a line longer than a K plane's (as KIVI's
     * planes differ in the pool), so that a kernel taking one for the
     * other reads the wrong rows */
    const size_t kstep = ((lay.split ? 1 : 2) * plane + 16) * (size_t)lay.stride_blocks;
    const size_t vstep = lay.split ? kstep + 64 : kstep, vplane_at = lay.split ? (size_t)n_phys * kstep : plane;
    uint8_t *data = mem_alloc_huge((size_t)n_phys * (lay.split ? kstep + vstep : kstep)); /* as the pool (2 MiB pages) */
    uint32_t *table = malloc(sizeof(uint32_t) * (size_t)n_phys);
    float *tmp = malloc(sizeof(float) * (size_t)hd);
    uint16_t *rows = t_test == FAKE_KV_F16C ? malloc(rows_bytes) : NULL;
    if (!data || !table || !tmp || (t_test == FAKE_KV_F16C && !rows)) {
        mem_free(data), free(table), free(tmp), free(rows);
        return -1;
    }
    f->data = data;
    f->table = table;
    for (int i = 0; i < n_phys; i++) f->table[i] = (uint32_t)i;
    if (lay.shuffled) rng_shuffle_u32(f->table, (size_t)n_phys);
#define FAKE_PLANE(b, pv) (f->data + ((pv) ? vplane_at + (size_t)(b) * vstep : (size_t)(b) * kstep))
    f->kv = (attn_kv){f->table, f->data, f->data + vplane_at, kstep, vstep, (uint32_t)bs, row_bytes, head_bytes, t, hd, NULL,
                      rows_bytes, false, 0.0f, 0, false, NULL, NULL};
    for (int b = 0; b < n_phys; b++) /* scales 2^-4 .. 2^-1 (|x| / s stays within e4m3's range) */
        for (int pv = 0; pv < 2; pv++)
            for (int g = 0; g < n_kv; g++) {
                const float sc = ldexpf(1.0f, -1 - (int)(rng_u32() % 4));
                memcpy(FAKE_PLANE(b, pv) + rows_bytes + 4 * (size_t)g, &sc, 4);
            }
    for (int j = 0; j < n_ctx; j++)
        for (int g = 0; g < n_kv; g++)
            for (int plane_v = 0; plane_v < 2; plane_v++) {
                /* keys of varied norm: some rows dominate some softmaxes */
                const float amp = plane_v ? 1.0f : 0.3f + 2.0f * (float)(rng_u32() % 8) / 8.0f;
                for (int i = 0; i < hd; i++) tmp[i] = amp * rng_gauss();
                uint8_t *blk = FAKE_PLANE(f->table[j / bs], plane_v);
                float sc;
                memcpy(&sc, blk + rows_bytes + 4 * (size_t)g, 4);
                fake_kv_encode_row(t, tmp, blk + (size_t)(j % bs) * row_bytes + (size_t)g * head_bytes, hd, sc);
            }
    free(tmp);
    f->n_kv = n_kv;
    f->n_ctx = n_ctx;
    if (t_test == FAKE_KV_F16C) { /* the pool's f16 layout (kv_dtype.h); each block's K plane from rows [slot][channel] to columns [channel][slot] */
        const size_t C = (size_t)n_kv * (size_t)hd;
        for (int b = 0; b < n_phys; b++) {
            uint16_t *k = (uint16_t *)FAKE_PLANE(b, 0);
            memcpy(rows, k, rows_bytes);
            for (size_t c = 0; c < C; c++)
                for (int j = 0; j < bs; j++) k[c * (size_t)bs + (size_t)j] = rows[(size_t)j * C + c];
        }
        { /* each block's V plane from rows [slot][head][dim] to head runs [head][slot][dim] */
            for (int b = 0; b < n_phys; b++) {
                uint8_t *v = FAKE_PLANE(b, 1);
                memcpy(rows, v, rows_bytes);
                for (int g = 0; g < n_kv; g++)
                    for (int j = 0; j < bs; j++)
                        memcpy(v + ((size_t)g * bs + j) * head_bytes, (uint8_t *)rows + (size_t)j * row_bytes + (size_t)g * head_bytes, head_bytes);
            }
            f->kv.row_bytes = head_bytes;
            f->kv.head_bytes = head_bytes * bs;
        }
        f->kv.k_cols = true;
    }
#undef FAKE_PLANE
    free(rows);
    return 0;
}

/* fake_kv_make_laid with the blocks shuffled and packed. */
static inline int fake_kv_make(fake_kv *f, uint32_t t_test, int hd, int n_kv, int n_ctx, int bs, uint64_t seed)
{
    return fake_kv_make_laid(f, t_test, hd, n_kv, n_ctx, bs, seed, (fake_kv_layout){true, 1, false});
}

/* ------------------------------------------------------------ KIVI blocks */

/* KIVI's min/max quantization of n values x[i * stride] (kv_codec.h "KIVI"):
 * f16 scale d and min m, codes packed LSB first into codes. */
static inline void fake_kivi_quant(const float *x, size_t stride, int n, uint32_t bits, uint8_t *codes, uint16_t *dh,
                                   uint16_t *mh)
{
    const float L = (float)((1u << bits) - 1);
    float mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < n; i++) mn = fminf(mn, x[i * stride]), mx = fmaxf(mx, x[i * stride]);
    *mh = f32_to_f16(mn);
    *dh = f32_to_f16((mx - mn) / L);
    const float m = f16_to_f32(*mh), d = f16_to_f32(*dh);
    memset(codes, 0, ((size_t)n * bits + 7) / 8);
    for (int i = 0; i < n; i++) {
        const float c = d > 0 ? fminf(fmaxf(nearbyintf((x[i * stride] - m) / d), 0), L) : 0;
        codes[(size_t)i * bits / 8] |= (uint8_t)((uint32_t)c << ((size_t)i * bits % 8));
    }
}

/* Sealed KIVI blocks (t ATTN_KV_KIVI4 or _KIVI2) holding n_ctx tokens (every
 * block full: its slots past n_ctx hold tokens too), laid out as
 * attention.h says, blocks shuffled like fake_kv_make's. n_kv x hd must be
 * a multiple of 32. 0, or -1 when out of memory. */
static inline int fake_kv_make_kivi(fake_kv *f, uint32_t t, int hd, int n_kv, int n_ctx, int bs, uint64_t seed)
{
    rng_seed(seed);
    const uint32_t bits = t == ATTN_KV_KIVI2 ? 2 : 4;
    const size_t C = (size_t)n_kv * hd, cb = ((size_t)bs * bits + 7) / 8, gb = 4 + 32 * bits / 8;
    const size_t kplane = C * cb + 4 * C, vrow = C / 32 * gb, block_bytes = kplane + (size_t)bs * vrow + 8;
    const int n_used = (n_ctx + bs - 1) / bs, n_phys = n_used + 1;
    uint8_t *data = mem_alloc_huge((size_t)n_phys * block_bytes);
    uint32_t *table = malloc(sizeof(uint32_t) * (size_t)n_phys);
    float *x = malloc(sizeof(float) * (size_t)bs * C);
    if (!data || !table || !x || C % 32) {
        mem_free(data), free(table), free(x);
        return -1;
    }
    for (int i = 0; i < n_phys; i++) table[i] = (uint32_t)i;
    rng_shuffle_u32(table, (size_t)n_phys);
    for (int b = 0; b < n_phys; b++) {
        uint8_t *kp = data + (size_t)b * block_bytes, *vp = kp + kplane;
        /* keys: channels of varied offset and spread (outlier channels), tokens of varied norm */
        for (size_t c = 0; c < C; c++) {
            const float off = 0.5f * rng_gauss(), amp = 0.3f + 2.0f * (float)(rng_u32() % 8) / 8.0f;
            for (int j = 0; j < bs; j++) x[(size_t)j * C + c] = off + amp * rng_gauss();
        }
        for (size_t c = 0; c < C; c++) {
            uint16_t dh, mh;
            fake_kivi_quant(x + c, C, bs, bits, kp + c * cb, &dh, &mh);
            memcpy(kp + C * cb + 2 * c, &dh, 2);
            memcpy(kp + C * cb + 2 * C + 2 * c, &mh, 2);
        }
        for (size_t i = 0; i < (size_t)bs * C; i++) x[i] = rng_gauss();
        for (int j = 0; j < bs; j++)
            for (size_t g = 0; g < C / 32; g++) {
                uint8_t *grp = vp + (size_t)j * vrow + g * gb;
                uint16_t dh, mh;
                fake_kivi_quant(x + (size_t)j * C + g * 32, 1, 32, bits, grp + 4, &dh, &mh);
                memcpy(grp, &dh, 2);
                memcpy(grp + 2, &mh, 2);
            }
    }
    free(x);
    f->data = data;
    f->table = table;
    f->kv = (attn_kv){.blocks = table, .k_base = data, .v_base = data + kplane, .block_bytes = block_bytes,
                      .v_block_bytes = block_bytes,
                      .block_size = (uint32_t)bs, .row_bytes = vrow, .kv_type = t, .head_dim = hd,
                      .scale_off = C * cb};
    f->n_kv = n_kv;
    f->n_ctx = n_ctx;
    return 0;
}

/* Head g of token j's key (plane 0) or value (plane 1) of a fake KIVI
 * cache, dequantized: m + d x code. */
static inline void fake_kivi_decode(const attn_kv *kv, int plane, int j, int g, float *out)
{
    const uint32_t bits = kv->kv_type == ATTN_KV_KIVI2 ? 2 : 4, T = kv->block_size, t = (uint32_t)j % T;
    const size_t cb = ((size_t)T * bits + 7) / 8, C = kv->scale_off / cb, gb = 4 + 32 * bits / 8;
    const uint8_t *base = plane ? kv->v_base : kv->k_base, *blk = base + (size_t)kv->blocks[j / (int)T] * attn_plane_step(kv, base);
    for (int i = 0; i < kv->head_dim; i++) {
        const size_t c = (size_t)g * kv->head_dim + i;
        const uint8_t *codes, *dm;
        size_t at;
        if (plane) dm = blk + t * kv->row_bytes + c / 32 * gb, codes = dm + 4, at = c % 32;
        else codes = blk + c * cb, at = t, dm = NULL;
        uint16_t dh, mh;
        if (plane) memcpy(&dh, dm, 2), memcpy(&mh, dm + 2, 2);
        else memcpy(&dh, blk + C * cb + 2 * c, 2), memcpy(&mh, blk + C * cb + 2 * C + 2 * c, 2);
        const uint32_t code = (codes[at * bits / 8] >> (at * bits % 8)) & ((1u << bits) - 1);
        out[i] = f16_to_f32(mh) + f16_to_f32(dh) * (float)code;
    }
}

static inline void fake_kv_free(fake_kv *f)
{
    mem_free(f->data);
    free(f->table);
}

#endif
