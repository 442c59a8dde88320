/* kv_writer.c - a batch's K/V rows into the cache; see kv_writer.h for the
 * dtypes and the staged dtypes' three steps.
 *
 * Scratch (staged dtypes only, none otherwise):
 *   kh, vh  [max_tokens][kv_dim] f16  the batch's rows, row t = batch token t
 *   seal    [2][block_size][kv_dim] f16  one block's rows being sealed, K then V
 *   seq_t0, seq_from, seq_n  [max_tokens]  per sequence of the batch: its
 *           first batch token, its first slot, its token count
 */
#include "kv/kv_writer.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

struct kv_writer {
    kv_geom g;
    int max_tokens;
    uint32_t head_type;       /* kv_dtype_head_type: DT_COUNT for kv_codec's encodings */
    bool staged;
    uint16_t *kh, *vh, *seal; /* staged only: see the top */
    int32_t *seq_t0, *seq_from, *seq_n;
};

void kv_writer_free(kv_writer *w)
{
    if (!w) return;
    mem_free(w->kh);
    mem_free(w->vh);
    mem_free(w->seal);
    free(w->seq_t0);
    free(w->seq_from);
    free(w->seq_n);
    free(w);
}

int kv_writer_new(kv_writer **out, const kv_geom *g, int max_tokens)
{
    assert(max_tokens >= 1);
    kv_writer *w = mem_calloc(1, sizeof *w);
    if (!w) return PL_ENOMEM;
    w->g = *g;
    w->max_tokens = max_tokens;
    w->head_type = kv_dtype_head_type(g->s.dtype);
    w->staged = kv_dtype_staged(g->s.dtype);
    if (w->staged) {
        const size_t T = (size_t)max_tokens, kvd = (size_t)g->kv_dim;
        w->kh = mem_alloc_aligned(T * kvd * sizeof(uint16_t), 64);
        w->vh = mem_alloc_aligned(T * kvd * sizeof(uint16_t), 64);
        w->seal = mem_alloc_aligned(2 * (size_t)g->s.block_size * kvd * sizeof(uint16_t), 64);
        w->seq_t0 = calloc(T, sizeof(int32_t));
        w->seq_from = calloc(T, sizeof(int32_t));
        w->seq_n = calloc(T, sizeof(int32_t));
        if (!w->kh || !w->vh || !w->seal || !w->seq_t0 || !w->seq_from || !w->seq_n) {
            kv_writer_free(w);
            return PL_ENOMEM;
        }
    }
    *out = w;
    return 0;
}

void kv_writer_begin(kv_writer *w, const kv_batch *b)
{
    assert(b->n_tokens <= w->max_tokens && b->n_seqs <= w->max_tokens);
    if (!w->staged) return;
    /* each sequence's run: adjacent tokens, consecutive slots */
    for (int i = 0; i < b->n_seqs; i++) w->seq_n[i] = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        const int i = b->seq[t];
        if (w->seq_n[i]++ == 0) {
            w->seq_t0[i] = t;
            w->seq_from[i] = b->slot[t];
        }
        assert(t - w->seq_t0[i] == w->seq_n[i] - 1 && b->slot[t] == w->seq_from[i] + w->seq_n[i] - 1);
        assert(b->seqs[i].stage);
    }
    for (int i = 0; i < b->n_seqs; i++)
        if (w->seq_n[i] == 0) /* a sequence without tokens: nothing to store or commit */
            w->seq_from[i] = 0;
}

bool kv_writer_rows(const kv_writer *w, int seq, uint32_t *from, const uint16_t **kh, const uint16_t **vh)
{
    if (!w->staged) return false;
    const size_t off = (size_t)w->seq_t0[seq] * w->g.kv_dim;
    *from = (uint32_t)w->seq_from[seq];
    *kh = w->kh + off;
    *vh = w->vh + off;
    return true;
}

/* Encodes one head's K or V row in the cache's row type (f16, the default
 * cache, through the kernels' bit-exact vector conversion). q4_0 uses ggml's
 * reference rounding (what llama.cpp's cache does), not the searching
 * weight quantizer, which is slower and would store different values. */
static void head_encode(uint32_t rt, const float *src, uint8_t *dst, int n)
{
    if (rt == DT_Q4_0) quant_q4_0_quantize_row_ref(src, (block_q4_0 *)dst, n);
    else if (rt == DT_F16) kern_f32_to_f16_row((uint16_t *)dst, src, n); /* half.h's bits, F16C where there is */
    else quant_quantize_row(rt, src, dst, n);
}

/* ggml row dtypes: each head's row into the token's block and slot. */
static void store_heads(const kv_writer *w, kv_pool *pool, const kv_batch *b, uint32_t l, const float *k,
                        const float *v)
{
    const uint32_t rt = w->head_type, bs = w->g.s.block_size, H = w->g.s.n_kv_heads, D = w->g.s.head_dim;
    const uint64_t head_bytes = dtype_row_bytes(rt, D);
    const size_t kvd = (size_t)w->g.kv_dim;
    for (int t = 0; t < b->n_tokens; t++) {
        const kv_batch_seq *sq = &b->seqs[b->seq[t]];
        const uint32_t p = (uint32_t)b->slot[t];
        assert(p / bs < sq->n_blocks);
        const uint32_t blk = sq->blocks[p / bs];
        if (kv_plane_heads(pool, KV_PLANE_V)) { /* f16 values grouped by head (kv_dtype.h): head h's run of bs rows */
            uint8_t *vp = kv_block_v(pool, blk, l) + (p % bs) * head_bytes;
            for (uint32_t h = 0; h < H; h++)
                head_encode(rt, v + t * kvd + h * D, vp + (uint64_t)h * bs * head_bytes, (int)D);
        } else {
            uint8_t *vr = kv_block_v(pool, blk, l) + (p % bs) * kv_row_stride(pool, KV_PLANE_V);
            for (uint32_t h = 0; h < H; h++) head_encode(rt, v + t * kvd + h * D, vr + h * head_bytes, (int)D);
        }
        if (kv_plane_cols(pool, KV_PLANE_K)) { /* f16 keys in columns (kv_dtype.h): element e at stride bs */
            uint16_t *col = (uint16_t *)kv_block_k(pool, blk, l) + p % bs, half[256];
            for (size_t e0 = 0; e0 < kvd; e0 += 256) {
                const size_t n = kvd - e0 < 256 ? kvd - e0 : 256;
                kern_f32_to_f16_row(half, k + t * kvd + e0, (int)n);
                for (size_t e = 0; e < n; e++) col[(e0 + e) * bs] = half[e];
            }
            continue;
        }
        uint8_t *kr = kv_block_k(pool, blk, l) + (p % bs) * kv_row_stride(pool, KV_PLANE_K);
        for (uint32_t h = 0; h < H; h++) head_encode(rt, k + t * kvd + h * D, kr + h * head_bytes, (int)D);
    }
}

/* Staged dtypes, step 1 (see kv_writer.h): the batch's rows in f16, and
 * every block the batch fills sealed from [its stage rows | batch rows]. */
static void store_staged(kv_writer *w, kv_pool *pool, const kv_batch *b, uint32_t l, const float *k,
                         const float *v)
{
    const uint64_t C = w->g.kv_dim;
    const uint32_t T = w->g.s.block_size;
    for (int t = 0; t < b->n_tokens; t++) {
        kv_codec_f16_row(k + (size_t)t * C, w->kh + (size_t)t * C, C);
        kv_codec_f16_row(v + (size_t)t * C, w->vh + (size_t)t * C, C);
    }
    uint16_t *sk = w->seal, *sv = w->seal + (size_t)T * C;
    for (int i = 0; i < b->n_seqs; i++) {
        const kv_batch_seq *sq = &b->seqs[i];
        const uint32_t from = (uint32_t)w->seq_from[i], end = from + (uint32_t)w->seq_n[i];
        const size_t t0 = (size_t)w->seq_t0[i];
        for (uint32_t blk = from / T; (blk + 1) * T <= end; blk++) {
            const uint32_t b0 = blk * T, a = from > b0 ? from - b0 : 0; /* slots [0, a) are in the stage */
            assert(blk < sq->n_blocks && (a == 0 || sq->stage));
            if (a) {
                memcpy(sk, kv_stage_plane(sq->stage, l, KV_PLANE_K), (size_t)a * C * sizeof(uint16_t));
                memcpy(sv, kv_stage_plane(sq->stage, l, KV_PLANE_V), (size_t)a * C * sizeof(uint16_t));
            }
            const size_t bt = t0 + (b0 + a - from); /* batch row of slot a */
            memcpy(sk + (size_t)a * C, w->kh + bt * C, (size_t)(T - a) * C * sizeof(uint16_t));
            memcpy(sv + (size_t)a * C, w->vh + bt * C, (size_t)(T - a) * C * sizeof(uint16_t));
            kv_codec_seal_rows(pool, sq->blocks[blk], l, sk, sv);
        }
    }
}

void kv_writer_store(kv_writer *w, kv_pool *pool, const kv_batch *b, uint32_t layer, const float *k,
                     const float *v)
{
    assert(pool->g.s.dtype == w->g.s.dtype && pool->g.s.block_size == w->g.s.block_size &&
           pool->g.kv_dim == w->g.kv_dim);
    if (w->head_type != DT_COUNT) {
        store_heads(w, pool, b, layer, k, v);
        return;
    }
    if (w->staged) {
        store_staged(w, pool, b, layer, k, v);
        return;
    }
    const uint64_t C = w->g.kv_dim;
    const uint32_t T = w->g.s.block_size;
    for (int t = 0; t < b->n_tokens; t++) { /* in slot order per sequence */
        const kv_batch_seq *sq = &b->seqs[b->seq[t]];
        const uint32_t p = (uint32_t)b->slot[t];
        assert(p / T < sq->n_blocks);
        kv_codec_put(pool, NULL, sq->blocks[p / T], layer, p % T, k + (size_t)t * C, v + (size_t)t * C);
    }
}

void kv_writer_commit(kv_writer *w, const kv_batch *b, uint32_t layer)
{
    if (!w->staged) return;
    const uint64_t C = w->g.kv_dim;
    const uint32_t T = w->g.s.block_size;
    for (int i = 0; i < b->n_seqs; i++) {
        const kv_batch_seq *sq = &b->seqs[i];
        if (w->seq_n[i] == 0) continue;
        const uint32_t from = (uint32_t)w->seq_from[i], end = from + (uint32_t)w->seq_n[i];
        const uint32_t b0 = (end - 1) / T * T, p0 = from > b0 ? from : b0;
        const size_t bt = (size_t)w->seq_t0[i] + (p0 - from);
        memcpy(kv_stage_plane(sq->stage, layer, KV_PLANE_K) + (size_t)(p0 - b0) * C, w->kh + bt * C,
               (size_t)(end - p0) * C * sizeof(uint16_t));
        memcpy(kv_stage_plane(sq->stage, layer, KV_PLANE_V) + (size_t)(p0 - b0) * C, w->vh + bt * C,
               (size_t)(end - p0) * C * sizeof(uint16_t));
    }
}
