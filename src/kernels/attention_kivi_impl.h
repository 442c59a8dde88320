/* attention_kivi_impl.h - what the KIVI kernels share (attention_kivi.c:
 * reference and AVX2; attention_kivi_avx512.c): the block geometry, the
 * scratch layout, the reference's fold and per-key score chain (the bits
 * every variant reproduces), a row's span of keys in a block, and the
 * prefetch of blocks ahead.
 */
#ifndef PL_KERNELS_ATTENTION_KIVI_IMPL_H
#define PL_KERNELS_ATTENTION_KIVI_IMPL_H

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "tensor/half.h"

#define KIVI_GROUP 32 /* value elements a (scale, min) pair covers */

/* The byte geometry of a KIVI cache's planes. */
typedef struct {
    uint32_t bits, T;
    size_t cb; /* bytes of one key column (T codes) */
    size_t C;  /* channels of a row (all heads) */
    size_t gb; /* bytes of one value group: s, m, 32 codes */
} kivi_geom;

static inline kivi_geom kivi_geom_of(const attn_kv *kv)
{
    kivi_geom k;
    k.bits = attn_kivi_bits(kv->kv_type);
    k.T = kv->block_size;
    k.cb = ((size_t)k.T * k.bits + 7) / 8;
    k.C = kv->scale_off / k.cb;
    k.gb = 4 + KIVI_GROUP * k.bits / 8;
    return k;
}

static inline uint32_t kivi_code(const uint8_t *p, uint32_t bits, size_t i)
{
    const size_t bit = i * bits;
    return (uint32_t)(p[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1);
}

static inline float ld_half(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

/* Scratch of a call (floats), inside attn_scratch_floats(max n_ctx, D):
 * sc[R][ncp] scores, qs[R][D] folded queries, bias[R], dk[D], mk[D] the
 * block's key scales and mins, macc[R][slices] the mins' chains, then
 * (AVX2) the value tile: ATTN_VB x 32 codes, ATTN_VB scales, ATTN_VB mins. */
typedef struct {
    float *sc, *qs, *bias, *dk, *mk, *macc, *tile, *td, *tm;
    size_t ncp;
    int slices; /* group slices of one head: ceil over the 32-groups it touches */
} kivi_scratch;

static inline int kivi_head_slices(int D) { return D / KIVI_GROUP + 2; }

static inline kivi_scratch kivi_scratch_at(float *s, int R, int nmax, int D, bool tile, size_t sf)
{
    kivi_scratch k;
    k.ncp = attn_round8((size_t)nmax);
    k.slices = kivi_head_slices(D);
    k.sc = s;
    k.qs = k.sc + (size_t)R * k.ncp;
    k.bias = k.qs + (size_t)R * D;
    k.dk = k.bias + ATTN_ROWS_CAP;
    k.mk = k.dk + D;
    k.macc = k.mk + D;
    k.tile = k.macc + (size_t)R * k.slices;
    k.td = k.tile + ATTN_VB * KIVI_GROUP;
    k.tm = k.td + ATTN_VB;
    assert((size_t)((tile ? k.tm + ATTN_VB : k.tile) - s) <= sf);
    (void)tile;
    (void)sf;
    return k;
}

/* Fold of one row (see the top): qs = q x dk, and the bias in 8 lanes
 * reduced as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
static inline float kivi_fold_ref(const float *q, const float *dk, const float *mk, int D, float *qs)
{
    float l[8] = {0};
    for (int i = 0; i < D; i++) {
        qs[i] = q[i] * dk[i];
        l[i % 8] = fmaf(q[i], mk[i], l[i % 8]);
    }
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* One key's score: the fmaf chain over d ascending, plus the bias, times
 * scale. col: the head's first column in the block. */
static inline __attribute__((always_inline)) float kivi_score1(const kivi_geom *k, const uint8_t *col,
                                                               const float *qs, int D, float bias, uint32_t t,
                                                               float scale)
{
    float s = 0;
    for (int i = 0; i < D; i++) s = fmaf(qs[i], (float)kivi_code(col + (size_t)i * k->cb, k->bits, t), s);
    return (s + bias) * scale;
}

/* Keys [t0, t1) of a block a row sees (t0 >= t1: none). */
static inline void row_span(const attn_row *r, uint32_t blk, uint32_t T, uint32_t *t0, uint32_t *t1)
{
    const uint32_t b0 = blk * T, lo = (uint32_t)r->lo, n = (uint32_t)r->n_ctx;
    *t0 = lo > b0 ? lo - b0 : 0;
    *t1 = n <= b0 ? 0 : n - b0 < T ? n - b0 : T;
}

/* Blocks prefetched ahead of the one being read: blocks sit anywhere in
 * the pool, so the hardware prefetchers restart at each one. */
#define KIVI_PF_BLOCKS 4

/* Prefetches the lines in [p, p + n) into L1 (prefetcht0). */
static inline void kivi_prefetch_span(const uint8_t *p, size_t n)
{
    const uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, e = (uintptr_t)(p + n);
    for (uintptr_t l = a; l < e; l += 64) __builtin_prefetch((const void *)l, 0, 3);
}

/* Head g's key columns, scales and mins of logical block blk, if it is
 * before end. */
static inline void kivi_prefetch_keys(const attn_kv *kv, const kivi_geom *k, uint32_t blk, uint32_t end, int g)
{
    if (blk >= end) return;
    const int D = kv->head_dim;
    const uint8_t *kp = kv->k_base + (size_t)kv->blocks[blk] * kv->block_bytes;
    kivi_prefetch_span(kp + (size_t)g * D * k->cb, (size_t)D * k->cb);
    kivi_prefetch_span(kp + k->C * k->cb + (size_t)g * D * 2, (size_t)D * 2);
    kivi_prefetch_span(kp + k->C * k->cb + k->C * 2 + (size_t)g * D * 2, (size_t)D * 2);
}

/* Head g's value groups of every token of logical block blk (< end). */
static inline void kivi_prefetch_values(const attn_kv *kv, const kivi_geom *k, uint32_t blk, uint32_t end, int g)
{
    if (blk >= end) return;
    const size_t at = (size_t)g * kv->head_dim / KIVI_GROUP * k->gb, n = (size_t)kv->head_dim / KIVI_GROUP * k->gb;
    const uint8_t *vp = kv->v_base + (size_t)kv->blocks[blk] * kv->v_block_bytes + at;
    for (uint32_t t = 0; t < k->T; t++) kivi_prefetch_span(vp + (size_t)t * kv->row_bytes, n);
}

#endif
