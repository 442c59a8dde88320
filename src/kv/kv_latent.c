/* kv_latent.c - the latent KV kind's rows; see kv_latent.h. */
#include "kv/kv_latent.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_codec.h"
#include "kv/kv_pool.h"
#include "kv/kv_writer.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

uint32_t kv_latent_row_type(kv_dtype dtype)
{
    switch (dtype) {
    case KV_F32: return DT_F32;
    case KV_F16: return DT_F16;
    case KV_BF16: return DT_BF16;
    case KV_Q8_0: return DT_Q8_0;
    case KV_Q4_0: return DT_Q4_0;
    case KV_FP8_E4M3: return ATTN_KV_FP8_E4M3;
    case KV_FP8_E5M2: return ATTN_KV_FP8_E5M2;
    case KV_INT4: return ATTN_MLA_KIVI4;
    case KV_INT2: return ATTN_MLA_KIVI2;
    default: return UINT32_MAX;
    }
}

int kv_latent_check(kv_dtype dtype, uint32_t n_kv_heads, uint32_t head_dim)
{
    if (n_kv_heads != 1) return err_set(PL_EINVAL, "KV shape: the latent kind has one row a token (n_kv_heads %u)", n_kv_heads);
    if (kv_latent_row_type(dtype) == UINT32_MAX)
        return err_set(PL_EUNSUPPORTED, "KV dtype %s: the latent (MLA) cache takes f32, f16, bf16, q8_0, q4_0, "
                       "fp8_e4m3, fp8_e5m2, kivi4 or kivi2", kv_dtype_get(dtype)->name);
    if ((dtype == KV_Q8_0 || dtype == KV_Q4_0 || dtype == KV_INT4 || dtype == KV_INT2) && head_dim % 32)
        return err_set(PL_EUNSUPPORTED, "KV dtype %s: the latent row of %u values is not a multiple of 32",
                       kv_dtype_get(dtype)->name, head_dim);
    return 0;
}

uint64_t kv_latent_row_bytes(kv_dtype dtype, uint32_t head_dim)
{
    const uint32_t t = kv_latent_row_type(dtype);
    if (t == ATTN_KV_FP8_E4M3 || t == ATTN_KV_FP8_E5M2) return head_dim;
    if (attn_mla_kivi_bits(t)) return (uint64_t)head_dim * attn_mla_kivi_bits(t) / 8;
    return t == UINT32_MAX ? 0 : dtype_row_bytes(t, head_dim);
}

uint64_t kv_latent_plane_bytes(kv_dtype dtype, uint32_t head_dim, uint32_t block_size)
{
    const uint64_t rows = kv_latent_row_bytes(dtype, head_dim) * block_size;
    if (!rows) return 0;
    if (dtype == KV_FP8_E4M3) return rows + sizeof(float);
    if (attn_mla_kivi_bits(kv_latent_row_type(dtype))) return rows + attn_mla_kivi_param_bytes((int)head_dim);
    return rows;
}

/* Row slot of block b in layer. */
static uint8_t *row_at(const kv_pool *pool, uint32_t b, uint32_t layer, uint32_t slot)
{
    return kv_block_k(pool, b, layer) + (uint64_t)slot * pool->g.row_bytes[0];
}

void kv_latent_write_row(kv_pool *pool, uint32_t b, uint32_t layer, uint32_t slot, const float *row)
{
    const kv_shape *s = &pool->g.s;
    assert(s->kind == KV_KIND_LATENT && !kv_dtype_staged(s->dtype) && slot < s->block_size);
    const uint32_t type = kv_latent_row_type(s->dtype);
    uint8_t *dst = row_at(pool, b, layer, slot);
    if (type == ATTN_KV_FP8_E5M2)
        for (uint32_t i = 0; i < s->head_dim; i++) dst[i] = kv_e5m2_from_f32(row[i]);
    else quant_quantize_row(type, row, dst, s->head_dim);
}

void kv_latent_store(kv_pool *pool, const kv_batch *b, uint32_t layer, const float *rows)
{
    const kv_shape *s = &pool->g.s;
    assert(s->kind == KV_KIND_LATENT);
    if (kv_dtype_staged(s->dtype)) return; /* kv_latent_stage_batch writes these */
    const uint32_t T = s->block_size;
    for (int t = 0; t < b->n_tokens; t++) {
        const kv_batch_seq *q = &b->seqs[b->seq[t]];
        const uint32_t slot = (uint32_t)b->slot[t];
        assert(slot / T < q->n_blocks);
        kv_latent_write_row(pool, q->blocks[slot / T], layer, slot % T, rows + (size_t)t * s->head_dim);
    }
}

void kv_latent_kivi_seal(uint8_t *plane, uint64_t stride, const uint16_t *rows, uint32_t n, uint32_t T, uint32_t L,
                         uint32_t bits)
{
    assert(n >= 1 && n <= T && L % 32 == 0 && (bits == 2 || bits == 4));
    const float levels = (float)((1u << bits) - 1);
    uint16_t *par = (uint16_t *)(plane + (uint64_t)T * stride);
    for (uint32_t t = 0; t < T; t++) memset(plane + (uint64_t)t * stride, 0, (size_t)L * bits / 8);
    for (uint32_t c = 0; c < L; c++) {
        float mn = INFINITY, mx = -INFINITY;
        for (uint32_t t = 0; t < n; t++) {
            const float x = f16_to_f32(rows[(size_t)t * L + c]);
            mn = x < mn ? x : mn; /* NaN is left out */
            mx = x > mx ? x : mx;
        }
        if (!(mn <= mx)) mn = mx = 0; /* all NaN */
        /* staged rows are halves, so m is the minimum exactly; d rounds */
        const uint16_t mh = f32_to_f16(mn), dh = f32_to_f16((mx - mn) / levels);
        uint16_t *dp = par + (size_t)(c / 32) * 64 + c % 32;
        memcpy(dp, &dh, sizeof dh);
        memcpy(dp + 32, &mh, sizeof mh);
        const float m = f16_to_f32(mh), d = f16_to_f32(dh), id = d > 0 ? 1.0f / d : 0.0f;
        for (uint32_t t = 0; t < n; t++) {
            float q = (f16_to_f32(rows[(size_t)t * L + c]) - m) * id;
            q = q > 0 ? q : 0; /* also NaN -> 0 */
            q = q < levels ? q : levels;
            const uint32_t bit = c * bits;
            plane[(uint64_t)t * stride + (bit >> 3)] |= (uint8_t)(quant_round_nearest(q) << (bit & 7));
        }
    }
}

void kv_latent_seal(kv_pool *pool, uint32_t b, uint32_t layer, const uint16_t *rows)
{
    const kv_shape *s = &pool->g.s;
    assert(s->kind == KV_KIND_LATENT && kv_dtype_staged(s->dtype));
    uint8_t *plane = kv_block_k(pool, b, layer);
    const uint32_t bits = attn_mla_kivi_bits(kv_latent_row_type(s->dtype)), T = s->block_size, L = s->head_dim;
    if (bits) kv_latent_kivi_seal(plane, pool->g.row_bytes[0], rows, T, T, L, bits);
    else kv_codec_e4m3_seal_f16(plane, pool->g.row_bytes[0], rows, T, 1, L);
}

uint32_t kv_latent_stage_batch(kv_pool *pool, const kv_batch *b, int seq, uint32_t layer, const float *rows,
                               const int *toks, int n, uint16_t *tail)
{
    const kv_shape *s = &pool->g.s;
    assert(s->kind == KV_KIND_LATENT && kv_dtype_staged(s->dtype) && n >= 1);
    const kv_batch_seq *q = &b->seqs[seq];
    const uint32_t T = s->block_size, L = s->head_dim, from = (uint32_t)b->slot[toks[0]], tail0 = from / T * T;
    if (from > tail0) {
        assert(q->stage && q->stage->rows && q->stage->kv_dim == L);
        memcpy(tail, kv_stage_plane(q->stage, layer, KV_PLANE_K), (size_t)(from - tail0) * L * sizeof *tail);
    }
    for (int k = 0; k < n; k++) {
        assert((uint32_t)b->slot[toks[k]] == from + (uint32_t)k);
        kv_codec_f16_row(rows + (size_t)toks[k] * L, tail + (size_t)(from - tail0 + (uint32_t)k) * L, L);
    }
    for (uint32_t b0 = tail0; b0 + T <= from + (uint32_t)n; b0 += T) { /* the blocks the batch fills */
        assert(b0 / T < q->n_blocks);
        kv_latent_seal(pool, q->blocks[b0 / T], layer, tail + (size_t)(b0 - tail0) * L);
    }
    return tail0;
}

void kv_latent_stage_commit(const kv_pool *pool, const kv_batch *b, int seq, uint32_t layer, const uint16_t *tail,
                            uint32_t tail0, uint32_t end)
{
    const kv_shape *s = &pool->g.s;
    const uint32_t T = s->block_size, L = s->head_dim, last0 = (end - 1) / T * T;
    kv_stage *st = b->seqs[seq].stage;
    assert(st && st->rows && end > tail0 && last0 >= tail0);
    memcpy(kv_stage_plane(st, layer, KV_PLANE_K), tail + (size_t)(last0 - tail0) * L,
           (size_t)(end - last0) * L * sizeof *tail);
}

attn_mla_kv kv_latent_view(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t rank)
{
    const kv_shape *s = &pool->g.s;
    assert(s->kind == KV_KIND_LATENT && rank <= s->head_dim);
    return (attn_mla_kv){
        .blocks = blocks,
        .base = kv_block_k(pool, 0, layer),
        .block_bytes = kv_plane_step(pool, KV_PLANE_K),
        .row_bytes = pool->g.row_bytes[0],
        .block_size = s->block_size,
        .type = kv_latent_row_type(s->dtype),
        .rank = (int)rank,
        .row_len = (int)s->head_dim,
        .scale_off = (size_t)s->block_size * pool->g.row_bytes[0],
    };
}

attn_mla_kv kv_latent_view_staged(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t rank,
                                  const uint16_t *tail, uint32_t tail0)
{
    attn_mla_kv v = kv_latent_view(pool, blocks, layer, rank);
    v.tail = tail;
    v.tail0 = (int)tail0;
    return v;
}

void kv_latent_read(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t n, float *out)
{
    kv_latent_read_range(pool, blocks, layer, 0, n, out);
}

void kv_latent_read_range(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t j0, uint32_t j1,
                          float *out)
{
    const kv_shape *s = &pool->g.s;
    assert(s->kind == KV_KIND_LATENT && j0 <= j1);
    const uint32_t type = kv_latent_row_type(s->dtype), T = s->block_size, bits = attn_mla_kivi_bits(type);
    for (uint32_t j = j0; j < j1; j++) {
        const uint8_t *src = row_at(pool, blocks[j / T], layer, j % T);
        float *o = out + (size_t)j * s->head_dim, sc;
        if (bits) { /* a sealed block's: the kernel's fused product (attention_mla.h) */
            const uint16_t *par = (const uint16_t *)(kv_block_k(pool, blocks[j / T], layer) +
                                                     (uint64_t)T * pool->g.row_bytes[0]);
            for (uint32_t i = 0; i < s->head_dim; i++) {
                const uint16_t *dp = par + (size_t)(i / 32) * 64 + i % 32;
                const uint32_t bit = i * bits;
                const uint32_t code = (src[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1);
                o[i] = fmaf(f16_to_f32(dp[0]), (float)code, f16_to_f32(dp[32]));
            }
        } else if (type == DT_F16) {
            kern_f16_to_f32_row(o, (const uint16_t *)src, (int)s->head_dim);
        } else if (type == ATTN_KV_FP8_E5M2) {
            for (uint32_t i = 0; i < s->head_dim; i++) o[i] = kv_e5m2_to_f32(src[i]);
        } else if (type == ATTN_KV_FP8_E4M3) { /* a sealed block's: element x its block scale */
            memcpy(&sc, kv_block_k(pool, blocks[j / T], layer) + (uint64_t)T * pool->g.row_bytes[0], sizeof sc);
            for (uint32_t i = 0; i < s->head_dim; i++) o[i] = kv_e4m3_to_f32(src[i]) * sc;
        } else {
            quant_dequant_row(type, src, o, s->head_dim);
        }
    }
}
