/* kv_latent.c - the latent KV kind's rows; see kv_latent.h. */
#include "kv/kv_latent.h"

#include <assert.h>

#include "base/err.h"
#include "kernels/kernels.h"
#include "kv/kv_pool.h"
#include "kv/kv_writer.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

uint32_t kv_latent_row_type(kv_dtype dtype)
{
    switch (dtype) {
    case KV_F32: return DT_F32;
    case KV_F16: return DT_F16;
    case KV_BF16: return DT_BF16;
    case KV_Q8_0: return DT_Q8_0;
    case KV_Q4_0: return DT_Q4_0;
    default: return UINT32_MAX;
    }
}

int kv_latent_check(kv_dtype dtype, uint32_t n_kv_heads, uint32_t head_dim)
{
    if (n_kv_heads != 1) return err_set(PL_EINVAL, "KV shape: the latent kind has one row a token (n_kv_heads %u)", n_kv_heads);
    if (kv_latent_row_type(dtype) == UINT32_MAX)
        return err_set(PL_EUNSUPPORTED, "KV dtype %s: the latent (MLA) cache takes f32, f16, bf16, q8_0 or q4_0",
                       kv_dtype_get(dtype)->name);
    if ((dtype == KV_Q8_0 || dtype == KV_Q4_0) && head_dim % 32)
        return err_set(PL_EUNSUPPORTED, "KV dtype %s: the latent row of %u values is not a multiple of 32",
                       kv_dtype_get(dtype)->name, head_dim);
    return 0;
}

uint64_t kv_latent_row_bytes(kv_dtype dtype, uint32_t head_dim)
{
    const uint32_t t = kv_latent_row_type(dtype);
    return t == UINT32_MAX ? 0 : dtype_row_bytes(t, head_dim);
}

void kv_latent_store(kv_pool *pool, const kv_batch *b, uint32_t layer, const float *rows)
{
    const kv_shape *s = &pool->g.s;
    assert(s->kind == KV_KIND_LATENT);
    const uint32_t type = kv_latent_row_type(s->dtype), T = s->block_size;
    for (int t = 0; t < b->n_tokens; t++) {
        const kv_batch_seq *q = &b->seqs[b->seq[t]];
        const uint32_t slot = (uint32_t)b->slot[t];
        assert(slot / T < q->n_blocks);
        uint8_t *dst = kv_block_k(pool, q->blocks[slot / T], layer) + (uint64_t)(slot % T) * pool->g.row_bytes[0];
        quant_quantize_row(type, rows + (size_t)t * s->head_dim, dst, s->head_dim);
    }
}

attn_mla_kv kv_latent_view(const kv_pool *pool, const uint32_t *blocks, uint32_t layer, uint32_t rank)
{
    const kv_shape *s = &pool->g.s;
    assert(s->kind == KV_KIND_LATENT && rank <= s->head_dim);
    return (attn_mla_kv){
        .blocks = blocks,
        .base = kv_block_k(pool, 0, layer),
        .block_bytes = pool->g.block_bytes,
        .row_bytes = pool->g.row_bytes[0],
        .block_size = s->block_size,
        .type = kv_latent_row_type(s->dtype),
        .rank = (int)rank,
        .row_len = (int)s->head_dim,
    };
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
    const uint32_t type = kv_latent_row_type(s->dtype), T = s->block_size;
    for (uint32_t j = j0; j < j1; j++) {
        const uint8_t *src = kv_block_k(pool, blocks[j / T], layer) + (uint64_t)(j % T) * pool->g.row_bytes[0];
        if (type == DT_F16) kern_f16_to_f32_row(out + (size_t)j * s->head_dim, (const uint16_t *)src, (int)s->head_dim);
        else quant_dequant_row(type, src, out + (size_t)j * s->head_dim, s->head_dim);
    }
}
