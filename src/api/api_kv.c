/* api_kv.c - KV sizing through the public API: dtype names and the bytes of
 * a KV shape (pl_kv_size_of), answered by src/kv so that `kvcalc`,
 * `inspect` and the block pool all count the same way.
 *
 * pl_kv_size.bytes_per_token is the formula (2 x layers x bytes of one
 * token's K or V row, plus its share of block-wide scales and, for KIVI,
 * of the per-channel key scales); bytes_per_block is one block as the pool
 * lays it out (planes padded to KV_PLANE_ALIGN, which for every common
 * shape is no padding at all). KIVI's f16 staging block is a per-sequence
 * cost outside both (kv_dtype_stage_bytes): pl_kv_size.stage_bytes.
 */
#include "pagellm.h"

#include "base/err.h"
#include "kv/kv_codec.h"
#include "kv/kv_dtype.h"
#include "kv/kv_groups.h"
#include "kv/kv_pool.h"

#include <assert.h>

/* The public enum and src/kv's are the same numbers. */
static_assert((int)PL_KV_F32 == (int)KV_F32, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_F16 == (int)KV_F16, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_BF16 == (int)KV_BF16, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_Q8_0 == (int)KV_Q8_0, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_Q4_0 == (int)KV_Q4_0, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_FP8_E4M3 == (int)KV_FP8_E4M3, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_FP8_E5M2 == (int)KV_FP8_E5M2, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_INT4 == (int)KV_INT4, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_INT2 == (int)KV_INT2, "pl_kv_dtype == kv_dtype");
static_assert((int)PL_KV_DTYPE_COUNT == (int)KV_DTYPE_COUNT, "pl_kv_dtype == kv_dtype");

const char *pl_kv_dtype_name(pl_kv_dtype t) { return kv_dtype_name((kv_dtype)t); }

int pl_kv_dtype_from_name(const char *name, pl_kv_dtype *out)
{
    kv_dtype t;
    int rc = kv_dtype_from_name(name, &t);
    if (rc) return rc;
    *out = (pl_kv_dtype)t;
    return 0;
}

int pl_kv_size_of(const pl_kv_shape *shape, pl_kv_dtype dt, pl_kv_size *out)
{
    if (!shape || !out) return err_set(PL_EINVAL, "pl_kv_size_of: NULL argument");
    if ((unsigned)dt >= PL_KV_DTYPE_COUNT) return err_set(PL_EINVAL, "pl_kv_size_of: dtype %d out of range", (int)dt);
    kv_shape s = {shape->n_layers, shape->n_kv_heads, shape->head_dim, shape->block_size, (kv_dtype)dt, KV_KIND_KV};
    kv_geom g;
    int rc = kv_geom_init(&g, &s);
    if (rc) return rc;
    out->bytes_per_token = g.bytes_per_token;
    out->bytes_per_block = g.block_bytes;
    out->stage_bytes = kv_dtype_stage_bytes(s.dtype, s.n_layers, s.n_kv_heads, s.head_dim, s.block_size);
    return 0;
}

int pl_kv_size_of_latent(uint32_t n_layers, uint32_t kv_lora_rank, uint32_t rope_dim, uint32_t block_size,
                         pl_kv_dtype dt, pl_kv_size *out)
{
    if (!out) return err_set(PL_EINVAL, "pl_kv_size_of_latent: NULL argument");
    if ((unsigned)dt >= PL_KV_DTYPE_COUNT) return err_set(PL_EINVAL, "pl_kv_size_of_latent: dtype %d out of range", (int)dt);
    if (kv_lora_rank == 0) return err_set(PL_EINVAL, "KV shape: kv_lora_rank must be >= 1");
    if ((uint64_t)kv_lora_rank + rope_dim > UINT32_MAX / 2) return err_set(PL_EINVAL, "KV shape: latent row too large");
    kv_shape s = {n_layers, 1, kv_lora_rank + rope_dim, block_size, (kv_dtype)dt, KV_KIND_LATENT};
    kv_geom g;
    int rc = kv_geom_init(&g, &s);
    if (rc) return rc;
    out->bytes_per_token = g.bytes_per_token;
    out->bytes_per_block = g.block_bytes;
    out->stage_bytes = kv_stage_bytes(&g);
    return 0;
}

int pl_kv_size_of_groups(const pl_kv_shape *shape, uint32_t local_layers, uint32_t window, pl_kv_dtype dt,
                         uint64_t ctx, pl_kv_groups_size *out)
{
    if (!shape || !out) return err_set(PL_EINVAL, "pl_kv_size_of_groups: NULL argument");
    if (local_layers > shape->n_layers)
        return err_set(PL_EINVAL, "layer groups: %u local layers of %u", local_layers, shape->n_layers);
    pl_kv_size one;
    int rc = pl_kv_size_of(shape, dt, &one);
    if (rc) return rc;
    const uint64_t T = shape->block_size, blocks = (ctx + T - 1) / T;
    *out = (pl_kv_groups_size){.one_table_bytes = blocks * one.bytes_per_block};
    if (shape->n_layers > KV_GROUPS_MAX_LAYERS) return 0;
    bool local[KV_GROUPS_MAX_LAYERS];
    for (uint32_t l = 0; l < shape->n_layers; l++) local[l] = l >= shape->n_layers - local_layers;
    kv_groups g;
    kv_groups_plan(&g, shape->n_layers, local, window);
    if (g.n_groups == 0) return 0;
    pl_kv_shape gs = *shape;
    gs.n_layers = g.slots;
    pl_kv_size b;
    rc = pl_kv_size_of(&gs, dt, &b);
    if (rc) return rc;
    /* before an append at p a local table keeps blocks p / T back to (p + 1 - W) / T */
    uint64_t held = (window - 1 + T - 1) / T + 1;
    if (held > blocks) held = blocks;
    out->groups = g.n_groups;
    out->slots = g.slots;
    out->bytes_per_block = b.bytes_per_block;
    out->global_bytes = blocks * b.bytes_per_block;
    out->local_bytes = (uint64_t)(g.n_groups - 1) * held * b.bytes_per_block;
    return 0;
}
