/* fake_kv.h - a fake paged KV pool for the attention kernels: what
 * test_attention.c checks the variants on and what the attention
 * micro-benchmarks (bench/micro/bench_attn_calls.c, bench_attn_decode.c)
 * time.
 *
 * One layer's K and V planes per block, several KV heads a row, the block
 * table a shuffled permutation of the physical blocks (one spare block, so
 * ids are not dense), filled with random rows of each KV row type: F32,
 * F16, BF16, Q8_0, Q4_0, the OFP8 rows E4M3 (a power-of-two scale per
 * block, plane and head in the plane tail) and E5M2 encoded with
 * kv/kv_codec.h, and the pool's f16 layout (FAKE_KV_F16C). Keys are scaled
 * so that softmaxes range from flat to peaked.
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

/* n_ctx tokens of n_kv heads in blocks of bs tokens, physical blocks
 * shuffled (and one spare block more than needed, so ids are not dense).
 * 0, or -1 when out of memory (then nothing is held; else fake_kv_free). */
static inline int fake_kv_make(fake_kv *f, uint32_t t_test, int hd, int n_kv, int n_ctx, int bs, uint64_t seed)
{
    const uint32_t t = fake_kv_elem_type(t_test);
    rng_seed(seed);
    const size_t head_bytes = fake_kv_head_bytes(t, hd), row_bytes = head_bytes * (size_t)n_kv;
    /* a plane: bs rows, then (e4m3) one f32 scale per head, as the codec lays it out */
    const size_t rows_bytes = row_bytes * (size_t)bs, plane = rows_bytes + 4 * (size_t)n_kv;
    const size_t block_bytes = 2 * plane + 16;
    const int n_used = (n_ctx + bs - 1) / bs, n_phys = n_used + 1;
    uint8_t *data = mem_alloc_huge((size_t)n_phys * block_bytes); /* as the pool (2 MiB pages) */
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
    for (int i = n_phys - 1; i > 0; i--) {
        int k = (int)(rng_u32() % (uint32_t)(i + 1));
        uint32_t x = f->table[i];
        f->table[i] = f->table[k];
        f->table[k] = x;
    }
    f->kv = (attn_kv){f->table, f->data, f->data + plane, block_bytes, (uint32_t)bs, row_bytes, head_bytes, t, hd, NULL,
                      rows_bytes, false, 0.0f, 0, false, NULL, NULL};
    for (int b = 0; b < n_phys; b++) /* scales 2^-4 .. 2^-1 (|x| / s stays within e4m3's range) */
        for (int pv = 0; pv < 2; pv++)
            for (int g = 0; g < n_kv; g++) {
                const float sc = ldexpf(1.0f, -1 - (int)(rng_u32() % 4));
                memcpy(f->data + (size_t)b * block_bytes + (size_t)pv * plane + rows_bytes + 4 * (size_t)g, &sc, 4);
            }
    for (int j = 0; j < n_ctx; j++)
        for (int g = 0; g < n_kv; g++)
            for (int plane_v = 0; plane_v < 2; plane_v++) {
                /* keys of varied norm: some rows dominate some softmaxes */
                const float amp = plane_v ? 1.0f : 0.3f + 2.0f * (float)(rng_u32() % 8) / 8.0f;
                for (int i = 0; i < hd; i++) tmp[i] = amp * rng_gauss();
                uint8_t *blk = f->data + (size_t)f->table[j / bs] * block_bytes + (plane_v ? plane : 0);
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
            uint16_t *k = (uint16_t *)(f->data + (size_t)b * block_bytes);
            memcpy(rows, k, rows_bytes);
            for (size_t c = 0; c < C; c++)
                for (int j = 0; j < bs; j++) k[c * (size_t)bs + (size_t)j] = rows[(size_t)j * C + c];
        }
        { /* each block's V plane from rows [slot][head][dim] to head runs [head][slot][dim] */
            for (int b = 0; b < n_phys; b++) {
                uint8_t *v = f->data + (size_t)b * block_bytes + plane;
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
    free(rows);
    return 0;
}

static inline void fake_kv_free(fake_kv *f)
{
    mem_free(f->data);
    free(f->table);
}

#endif
