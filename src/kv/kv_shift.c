/* kv_shift.c - re-rotation of cached keys after a window drop; see
 * kv_shift.h for the design and its numerics.
 *
 * Per layer of the block: decode all n_rows key rows first, then rotate
 * and write them back (row by row, or, for a sealed block of a staged
 * dtype such as fp8_e4m3, the whole plane at once with new block scales).
 * The partly filled last block of a staged sequence lives in its stage and
 * is rotated there (kv_shift_stage).
 */
#include "kv/kv_shift.h"

#include <assert.h>

#include "kernels/kernels.h"
#include "kv/kv_codec.h"
#include "kv/kv_latent.h"

bool kv_shift_supported(kv_dtype t)
{
    /* keys read and written token by token: rows, or f16 columns (kv_codec) */
    return t < KV_DTYPE_COUNT && kv_dtype_get(t)->plane[KV_PLANE_K].layout != KV_LAYOUT_CHANNELS;
}

bool kv_shift_latent_supported(kv_dtype t) { return t < KV_DTYPE_COUNT && kv_latent_row_type(t) != UINT32_MAX; }

size_t kv_shift_scratch_floats(const kv_pool *pool)
{
    /* the block's rows, then the codec's per-call scratch (one query); the
     * latent kind: the rows, then their f16 copy for a staged dtype's seal */
    const size_t rows = (size_t)pool->g.s.block_size * pool->g.kv_dim;
    if (pool->g.s.kind == KV_KIND_LATENT) return rows + rows / 2 + 1;
    return rows + kv_codec_scratch_floats(pool->g.s.head_dim, pool->g.s.block_size, 1);
}

/* The latent kind: only the RoPE key (the row's last rope_dim elements)
 * turns; c_kv is decoded and encoded again unchanged (q8_0, q4_0 and a
 * KIVI channel's codes re-encode to what they were, up to the f16 rounding
 * of a staged row), and a staged dtype's sealed block is sealed anew from
 * the rotated rows (e4m3: a new block scale; KIVI: new ranges for the
 * RoPE channels). */
static void shift_latent_block(const kv_rope *r, kv_pool *pool, uint32_t b, uint32_t n_rows, uint32_t delta,
                               float *scratch)
{
    const kv_geom *g = &pool->g;
    const uint32_t L = g->s.head_dim, off = L - r->rope_dim;
    const bool staged = kv_dtype_staged(g->s.dtype);
    float *rows = scratch;
    uint16_t *half = (uint16_t *)(scratch + (size_t)g->s.block_size * L);
    const uint32_t table[1] = {b};
    for (uint32_t l = 0; l < g->s.n_layers; l++) {
        kv_latent_read(pool, table, l, n_rows, rows);
        for (uint32_t t = 0; t < n_rows; t++) {
            float *row = rows + (size_t)t * L;
            kern_rope(row + off, 1, (int)r->rope_dim, (int)r->rope_dim, -(int)delta, r->base, r->scale, r->neox,
                      r->freqs);
            if (staged) kv_codec_f16_row(row, half + (size_t)t * L, L);
            else kv_latent_write_row(pool, b, l, t, row);
        }
        if (staged) kv_latent_seal(pool, b, l, half);
    }
}

void kv_shift_block(const kv_rope *r, kv_pool *pool, uint32_t b, uint32_t n_rows, uint32_t delta, float *scratch)
{
    const kv_geom *g = &pool->g;
    const bool staged = kv_dtype_staged(g->s.dtype);
    const bool latent = g->s.kind == KV_KIND_LATENT;
    assert((latent ? kv_shift_latent_supported(g->s.dtype) : kv_shift_supported(g->s.dtype)) &&
           n_rows <= g->s.block_size && (!staged || n_rows == g->s.block_size));
    assert(r->rope_dim <= g->s.head_dim);
    if (n_rows == 0 || delta == 0) return;
    if (latent) {
        shift_latent_block(r, pool, b, n_rows, delta, scratch);
        return;
    }
    const uint32_t D = g->s.head_dim, H = g->s.n_kv_heads;
    float *rows = scratch, *tmp = scratch + (size_t)g->s.block_size * g->kv_dim;
    for (uint32_t l = 0; l < g->s.n_layers; l++) {
        const kv_block_ref ref = kv_codec_ref(pool, b, l);
        for (uint32_t t = 0; t < n_rows; t++)
            for (uint32_t h = 0; h < H; h++)
                kv_codec_dequant(&ref, KV_PLANE_K, h, t, 1, rows + (size_t)t * g->kv_dim + (size_t)h * D, tmp);
        for (uint32_t t = 0; t < n_rows; t++) {
            float *row = rows + (size_t)t * g->kv_dim;
            kern_rope(row, (int)H, (int)D, (int)r->rope_dim, -(int)delta, r->base, r->scale, r->neox, r->freqs);
            if (!staged) kv_codec_write_row(pool, b, l, KV_PLANE_K, t, row);
        }
        if (staged) kv_codec_reseal_plane(pool, b, l, KV_PLANE_K, rows); /* a sealed block: whole, scales anew */
    }
}

void kv_shift_stage(const kv_rope *r, const kv_pool *pool, kv_stage *st, uint32_t n_rows, uint32_t delta,
                    float *scratch)
{
    const kv_geom *g = &pool->g;
    assert(st->rows && n_rows <= st->block_size && st->kv_dim == g->kv_dim && r->rope_dim <= g->s.head_dim);
    if (n_rows == 0 || delta == 0) return;
    const bool latent = g->s.kind == KV_KIND_LATENT; /* one head whose RoPE dims are its last ones */
    const uint32_t off = latent ? g->s.head_dim - r->rope_dim : 0;
    for (uint32_t l = 0; l < st->n_layers; l++) {
        uint16_t *k = kv_stage_plane(st, l, KV_PLANE_K);
        for (uint32_t t = 0; t < n_rows; t++) {
            uint16_t *h = k + (size_t)t * st->kv_dim;
            for (uint64_t i = 0; i < st->kv_dim; i++) scratch[i] = f16_to_f32(h[i]);
            kern_rope(scratch + off, latent ? 1 : (int)g->s.n_kv_heads, latent ? (int)r->rope_dim : (int)g->s.head_dim,
                      (int)r->rope_dim, -(int)delta, r->base, r->scale, r->neox, r->freqs);
            kv_codec_f16_row(scratch, h, st->kv_dim);
        }
    }
}
