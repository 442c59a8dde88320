/* kv_view.c - attention's view of a sequence's cache; see kv_view.h.
 *
 * attn_kv addresses (attention.h): K/V of token j, head g at
 * base + blocks[j / bs] x step + (j % bs) x row_bytes + g x head_bytes,
 * where base is the layer's plane in block 0 and step the plane's
 * (block_bytes for K, v_block_bytes for V: kv_plane_step). Rows of all heads side by
 * side: row_bytes = the pool's row stride, head_bytes = a head's row; f16
 * values grouped by head: row_bytes = a head's row, head_bytes = bs of
 * them; f16 keys in columns: k_cols. Staged dtypes' sealed blocks
 * (fp8_e4m3 rows and scales, KIVI columns and groups) also get a view the
 * kernel reads in place (attn_kv.sealed); the reader then serves only the
 * own, staged block.
 */
#include "kv/kv_view.h"

#include <assert.h>

#include "kv/kv_codec.h"
#include "tensor/dtype.h"

size_t kv_view_scratch_floats(const kv_geom *g, int max_ctx)
{
    size_t sf = attn_scratch_floats(max_ctx, (int)g->s.head_dim);
    if (kv_dtype_head_type(g->s.dtype) == DT_COUNT) {
        const size_t rf = attn_scratch_floats_reader(
            max_ctx, kv_codec_scratch_floats(g->s.head_dim, g->s.block_size, ATTN_ROWS_CAP));
        sf = rf > sf ? rf : sf;
    }
    return sf;
}

/* The f16 rows [first, first + n) of a staged sequence's own block blk, as
 * one or two refs: the stage for slots before the batch, the batch rows
 * from there. Returns the count; part[i] covers slots [s0[i], s0[i] + n[i]). */
static int own_parts(const kv_view_reader *c, uint32_t blk, uint32_t n, kv_block_ref part[2], uint32_t s0[2],
                     uint32_t cnt[2])
{
    const kv_geom *g = &c->pool->g;
    const uint32_t T = g->s.block_size, b0 = blk * T, a = c->from > b0 ? c->from - b0 : 0;
    int k = 0;
    if (a) { /* a < n: a row of this block sits at a slot >= from */
        part[k] = kv_codec_ref_stage(c->pool, c->sq->stage, c->layer);
        s0[k] = 0;
        cnt[k++] = a < n ? a : n;
    }
    if (n > a) {
        const size_t off = (size_t)(b0 + a - c->from) * g->kv_dim;
        part[k] = (kv_block_ref){
            .dtype = KV_F16,
            .plane = {(const uint8_t *)(c->kh + off), (const uint8_t *)(c->vh + off)},
            .row_bytes = {g->kv_dim * 2, g->kv_dim * 2},
            .block_size = T,
            .n_kv_heads = g->s.n_kv_heads,
            .head_dim = g->s.head_dim,
        };
        s0[k] = a;
        cnt[k++] = n - a;
    }
    return k;
}

static void reader_k_dot(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *const *q, int n_q,
                         float *scores, size_t ld, float *scratch)
{
    const kv_view_reader *c = ctx;
    if (own && c->kh) {
        kv_block_ref part[2];
        uint32_t s0[2], cnt[2];
        const int k = own_parts(c, blk, n, part, s0, cnt);
        for (int i = 0; i < k; i++) kv_codec_k_dot(&part[i], (uint32_t)g, 0, cnt[i], q, n_q, scores + s0[i], ld, scratch);
        return;
    }
    assert(blk < c->sq->n_blocks);
    const kv_block_ref r = kv_codec_ref(c->pool, c->sq->blocks[blk], c->layer);
    kv_codec_k_dot(&r, (uint32_t)g, 0, n, q, n_q, scores, ld, scratch);
}

static void reader_v_axpy(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *w, size_t ldw,
                          int n_q, float *const *acc, float *scratch)
{
    const kv_view_reader *c = ctx;
    if (own && c->kh) {
        kv_block_ref part[2];
        uint32_t s0[2], cnt[2];
        const int k = own_parts(c, blk, n, part, s0, cnt);
        for (int i = 0; i < k; i++) kv_codec_v_axpy(&part[i], (uint32_t)g, 0, cnt[i], w + s0[i], ldw, n_q, acc, scratch);
        return;
    }
    assert(blk < c->sq->n_blocks);
    const kv_block_ref r = kv_codec_ref(c->pool, c->sq->blocks[blk], c->layer);
    kv_codec_v_axpy(&r, (uint32_t)g, 0, n, w, ldw, n_q, acc, scratch);
}

void kv_view_init(kv_view *v, const kv_pool *pool, const kv_writer *w, const kv_batch *b, int seq, uint32_t layer)
{
    const kv_geom *g = &pool->g;
    const kv_dtype dt = g->s.dtype;
    const kv_batch_seq *sq = &b->seqs[seq];
    const uint32_t rt = kv_dtype_head_type(dt), hd = g->s.head_dim;
    v->rc = (kv_view_reader){pool, sq, layer, 0, NULL, NULL};
    kv_writer_rows(w, seq, &v->rc.from, &v->rc.kh, &v->rc.vh);
    v->rd = (attn_reader){reader_k_dot, reader_v_axpy, &v->rc,
                          kv_codec_scratch_floats(hd, g->s.block_size, ATTN_ROWS_CAP)};
    /* in place: ggml rows, and unstaged fp8 (e5m2), plain rows of bytes the
     * kernel converts in registers (8 keys at a time) */
    const bool fp8 = (dt == KV_FP8_E4M3 || dt == KV_FP8_E5M2) && !kv_dtype_staged(dt);
    const bool rows_ok = rt != DT_COUNT || fp8;
    assert(!fp8 || kv_row_stride(pool, KV_PLANE_K) == kv_row_stride(pool, KV_PLANE_V));
    const bool v_heads = rows_ok && kv_plane_heads(pool, KV_PLANE_V);
    const size_t head_row = fp8 ? (size_t)hd : rows_ok ? dtype_row_bytes(rt, (uint64_t)hd) : 0;
    v->kv = (attn_kv){
        .reader = rows_ok ? NULL : &v->rd,
        .blocks = sq->blocks,
        .k_base = kv_block_k(pool, 0, layer),
        .v_base = kv_block_v(pool, 0, layer),
        .block_bytes = kv_plane_step(pool, KV_PLANE_K),
        .v_block_bytes = kv_plane_step(pool, KV_PLANE_V),
        .block_size = g->s.block_size,
        .row_bytes = v_heads ? head_row : rows_ok ? kv_row_stride(pool, KV_PLANE_V) : 0,
        .head_bytes = v_heads ? head_row * g->s.block_size : head_row,
        .kv_type = fp8 ? (dt == KV_FP8_E4M3 ? ATTN_KV_FP8_E4M3 : ATTN_KV_FP8_E5M2) : rt,
        .head_dim = (int)hd,
        .scale_off = fp8 ? kv_row_stride(pool, KV_PLANE_K) * g->s.block_size : 0,
        .k_cols = rows_ok && kv_plane_cols(pool, KV_PLANE_K),
    };
    if (dt == KV_FP8_E4M3 && kv_dtype_staged(dt)) { /* sealed blocks in place: e4m3 rows, scales in the tail */
        const size_t rb = g->row_bytes[KV_PLANE_K];
        assert(rb == g->row_bytes[KV_PLANE_V] && rb == (size_t)g->kv_dim);
        v->sealed = (attn_kv){
            .blocks = sq->blocks,
            .k_base = v->kv.k_base,
            .v_base = v->kv.v_base,
            .block_bytes = kv_plane_step(pool, KV_PLANE_K),
            .v_block_bytes = kv_plane_step(pool, KV_PLANE_V),
            .block_size = g->s.block_size,
            .row_bytes = rb,
            .head_bytes = hd,
            .kv_type = ATTN_KV_FP8_E4M3,
            .head_dim = (int)hd,
            .scale_off = rb * g->s.block_size,
        };
        v->kv.sealed = &v->sealed;
    }
    if (dt == KV_INT4 || dt == KV_INT2) { /* sealed blocks in place: key columns and value groups (attention.h) */
        const uint32_t bits = kv_dtype_get(dt)->plane[KV_PLANE_K].bits;
        const size_t cb = ((size_t)g->s.block_size * bits + 7) / 8;
        v->sealed = (attn_kv){
            .blocks = sq->blocks,
            .k_base = v->kv.k_base,
            .v_base = v->kv.v_base,
            .block_bytes = kv_plane_step(pool, KV_PLANE_K),
            .v_block_bytes = kv_plane_step(pool, KV_PLANE_V),
            .block_size = g->s.block_size,
            .row_bytes = g->row_bytes[KV_PLANE_V],
            .kv_type = dt == KV_INT4 ? ATTN_KV_KIVI4 : ATTN_KV_KIVI2,
            .head_dim = (int)hd,
            .scale_off = cb * g->kv_dim,
        };
        v->kv.sealed = &v->sealed;
    }
}
