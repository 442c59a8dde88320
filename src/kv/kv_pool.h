/* kv_pool.h - the KV block pool: one allocation cut into fixed blocks.
 *
 * The pool knows dimensions (layers, KV heads, head dim, block size, dtype),
 * never the model. It is made once at start and never grows: taking and
 * returning blocks never calls malloc, so the decode path does not either.
 * A block id addresses the same block_size-token range in every layer.
 *
 * Data layout (pool->data, 2 MiB aligned on 2 MiB pages when it is that
 * large (mem_alloc_huge); planes padded to KV_PLANE_ALIGN). Layer-major:
 * each layer (slot) has an arena of every block's planes of that layer,
 * its K planes in one run and its V planes in another, so a sequence's
 * blocks of one layer, taken in id order, are one stream of keys and one
 * of values:
 *
 *   data: | layer 0 arena | layer 1 arena | ... | layer L-1 arena |  layer_span each
 *   arena:| K of block 0 | ... | K of block n-1 | V of block 0 | ... | V of block n-1 |
 *   plane:| row 0 | row 1 | ... | row T-1 | tail | pad |      plane_stride[p]
 *          ^ kv_block_k(pool, b, l)        ^ kv_block_tail(...)
 *   row:  kv_dim = n_kv_heads x head_dim elements of the KV dtype,
 *         head h at h x head_dim (see kv_dtype.h for the quantized rows,
 *         and for f16, whose K plane is columns and V plane head runs)
 *
 * Why layer-major: a decode step's attention reads one layer of every
 * block of a sequence, then the next layer. With a block's layers side by
 * side (block-major) that was a few KiB out of every block_bytes (352 KiB
 * for TinyLlama at f16), which one core reads at a third of a stream's
 * rate however it prefetches. Layer-major, the f16 decode attention at
 * depth 8192 took 8-19% less time (docs/long-context.md, "The pool's
 * layout at depth"). Why K and V apart: the scores read a layer's K planes,
 * then the V sum its V planes; with a block's two planes side by side each
 * pass read half of every 2 x plane bytes, and one core reads such runs
 * at two thirds of a stream's rate even prefetched (same section).
 * The cost: a whole block is 2 x n_layers pieces, so copy-on-write and the
 * tiers move it with kv_block_save / kv_block_load (two pieces a layer),
 * and its serialized form (block_bytes: layer 0's K and V planes, layer
 * 1's, ...) is not a run of the pool.
 *
 * KV kinds (kv_shape.kind), the second level of the pool: what a block
 * holds per token and layer. Layer groups (kv_groups.h) are a kind of the
 * same level: the pool's "layers" are then slots, a block belongs to one
 * group at a time and holds that group's layers, one slot each. The block table (first level) and everything
 * that moves whole blocks (paging, prefix cache, fork, copy-on-write) do
 * not look at it.
 *   KV_KIND_KV      a K and a V plane as above (MHA, GQA, MQA).
 *   KV_KIND_LATENT  multi-head latent attention (deepseek2): one plane of
 *                   rows of head_dim = kv_lora_rank + rope dims (the
 *                   compressed c_kv, then the shared RoPE key), n_kv_heads
 *                   1; the V plane has 0 bytes, the attention reads its
 *                   values from the first kv_lora_rank elements of the same
 *                   row. Rows are ggml rows of f32, f16, bf16 or q8_0
 *                   (kv/kv_latent.h writes and reads them).
 *
 * Block states (each block is in exactly one):
 *   FREE    refcount 0, on the free list, no hash
 *   USED    refcount >= 1 (= block-table references), on no list
 *   CACHED  refcount 0, hashed, on the LRU list (head = least recent); its
 *           data is still valid, so a prefix-cache hit can revive it, and it
 *           is evicted only when the free list is empty.
 * Both lists are doubly linked through the block metadata, so that a block
 * leaves the middle of a list in O(1) (prefix-cache revive, static runs).
 * kv_check() (kv_check.h) walks all of this.
 */
#ifndef PL_KV_POOL_H
#define PL_KV_POOL_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_dtype.h"

#define KV_BLOCK_SIZE_DEFAULT 16
#define KV_POOL_ALIGN 64  /* alignment of the whole pool */
#define KV_PLANE_ALIGN 16 /* alignment of every plane inside a block */
#define KV_NONE (-1)      /* "no block" in links and parents */

typedef enum { KV_KIND_KV = 0, KV_KIND_LATENT = 1 } kv_kind;

typedef struct {
    uint32_t n_layers, n_kv_heads, head_dim;
    uint32_t block_size; /* tokens per block */
    kv_dtype dtype;
    kv_kind kind;        /* KV_KIND_KV (0) unless set */
} kv_shape;

/* Everything derived from a kv_shape. */
typedef struct {
    kv_shape s;
    uint64_t kv_dim;            /* n_kv_heads x head_dim */
    uint64_t row_bytes[2];      /* one token's row in the [K], [V] plane */
    uint64_t plane_bytes[2];    /* exact plane size (rows + tail) */
    uint64_t plane_stride[2];   /* plane_bytes rounded up to KV_PLANE_ALIGN */
    uint64_t layer_stride;      /* plane_stride[K] + plane_stride[V] (latent: V's is 0) */
    uint64_t block_bytes;       /* n_layers x layer_stride: one block, all layers (pool bytes, tier payload) */
    uint64_t block_bytes_exact; /* n_layers x (plane_bytes[K] + plane_bytes[V]): the formula */
    double bytes_per_token;     /* block_bytes_exact / block_size */
} kv_geom;

typedef enum { KV_BLOCK_FREE = 0, KV_BLOCK_USED = 1, KV_BLOCK_CACHED = 2 } kv_block_state;

enum { KV_BLOCK_HASHED = 1 }; /* kv_block.flags: hash holds a prefix-cache key */

/* Metadata of one block (the data lives in kv_pool.data). */
typedef struct {
    uint64_t hash[2];   /* 128-bit prefix-cache key; valid iff flags & KV_BLOCK_HASHED */
    int32_t parent;     /* prefix cache's parent link (its meaning is the cache's); KV_NONE */
    int32_t prev, next; /* free-list or LRU links; KV_NONE at the ends and when USED */
    uint32_t refcount;  /* block-table references; 0 unless USED */
    uint8_t state;      /* kv_block_state */
    uint8_t flags;      /* KV_BLOCK_HASHED */
} kv_block;

typedef struct {
    int32_t head, tail; /* KV_NONE when empty */
    uint32_t n;
} kv_list;

/* Called when a block loses its prefix-cache key, before the key is
 * cleared, so that the prefix cache can forget it: a CACHED block evicted
 * to be reused, or a private block about to be rewritten (kv_seq.h). */
typedef void (*kv_evict_fn)(void *user, uint32_t block, const uint64_t hash[2]);

/* Read-only outside src/kv. */
typedef struct kv_pool {
    kv_geom g;
    uint32_t n_blocks;
    uint8_t *data;      /* [n_layers][K: n_blocks x plane_stride[K], V: n_blocks x plane_stride[V]], one allocation */
    uint64_t layer_span; /* n_blocks x g.layer_stride: from one layer's arena to the next */
    kv_block *blocks;   /* [n_blocks] */
    kv_list free_list;  /* FREE blocks; kv_pool_alloc takes the head, kv_pool_alloc_next by id; returned to the head */
    uint64_t *free_bits; /* [ceil(n_blocks / 64)]: bit b set iff block b is FREE (runs, kv_pool_alloc_next) */
    kv_list lru;        /* CACHED blocks; head = least recently used */
    uint32_t n_used;
    uint32_t *scratch;  /* [n_blocks] for kv_check / kv_stats_get, so they need no malloc */
    kv_evict_fn on_evict;
    void *evict_user;
    /* Layer groups (kv_groups.h): model layer l lives in slot layer_slot[l]
     * of the blocks of its group ([n_mapped]; not owned). NULL: slot = layer. */
    const uint16_t *layer_slot;
    uint32_t n_mapped;
} kv_pool;

/* Validates the shape (dims >= 1, dtype fits: PL_EINVAL naming the field)
 * and fills *g; *g is untouched on failure. */
int kv_geom_init(kv_geom *g, const kv_shape *shape);

/* Blocks of geometry g that fit in bytes (0 if none). */
uint32_t kv_geom_blocks_for_bytes(const kv_geom *g, uint64_t bytes);

/* Makes the pool: one zeroed allocation of n_blocks x block_bytes, all blocks
 * FREE, ids ascending on the free list. PL_EINVAL / PL_ENOMEM; *pool is
 * untouched on failure. */
int kv_pool_init(kv_pool *pool, const kv_shape *shape, uint32_t n_blocks);
void kv_pool_free(kv_pool *pool);

void kv_pool_set_evict(kv_pool *pool, kv_evict_fn fn, void *user);

/* Layer groups: the pool's n_layers are slots, and model layer l (< n)
 * lives in slot slot[l] (< n_layers, asserted) of whichever block its
 * group's table names. slot must outlive the pool. */
void kv_pool_set_layer_slots(kv_pool *pool, const uint16_t *slot, uint32_t n);

/* Blocks that can be taken now: FREE plus CACHED (evictable). */
static inline uint32_t kv_pool_available(const kv_pool *pool)
{
    return pool->free_list.n + pool->lru.n;
}

/* Takes a block (FREE first, else evicts the least recently used CACHED
 * one): USED, refcount 1. PL_EFULL if none; nothing changes then. */
int kv_pool_alloc(kv_pool *pool, uint32_t *out);

/* Takes a block to follow block prev (KV_NONE: a sequence's first) in a
 * block table, so that a sequence's blocks stay runs of ids, which a
 * layer's arena holds as runs of memory (what decode attention streams):
 * prev + 1 if it is FREE; else a FREE block where the largest run of FREE
 * ids starts, or its middle if a USED block precedes the run (leaving the
 * first half to that block's sequence to grow into); else as
 * kv_pool_alloc (evicts the least recently used CACHED block). USED,
 * refcount 1; PL_EFULL if none, nothing changed. */
int kv_pool_alloc_next(kv_pool *pool, int64_t prev, uint32_t *out);

/* Takes n blocks into ids[], contiguous ids if a run of n FREE blocks exists
 * (first fit), else any n. All or nothing: PL_EFULL leaves the pool as it was. */
int kv_pool_alloc_n(kv_pool *pool, uint32_t n, uint32_t *ids);

/* Takes block b whatever its state: USED -> refcount+1; CACHED -> revived
 * (off the LRU, refcount 1, hash kept); FREE -> off the free list. */
void kv_pool_acquire(kv_pool *pool, uint32_t b);

void kv_pool_incref(kv_pool *pool, uint32_t b);

/* Drops one reference; at 0 the block becomes CACHED (most recent) if it is
 * hashed, else FREE. */
void kv_pool_decref(kv_pool *pool, uint32_t b);

/* Prefix-cache key of a USED block (the cache computes it). */
void kv_pool_set_hash(kv_pool *pool, uint32_t b, const uint64_t hash[2], int32_t parent);
void kv_pool_clear_hash(kv_pool *pool, uint32_t b);

/* Copies all layers' K and V (the whole block) from src to dst. */
void kv_pool_copy_block(kv_pool *pool, uint32_t dst, uint32_t src);

/* A whole block in one run of g.block_bytes: slot 0's K plane
 * (plane_stride[K]) and V plane (plane_stride[V]), then slot 1's, ... (the
 * tiers' payload; bit for bit what kv_block_load puts back). */
void kv_block_save(const kv_pool *pool, uint32_t b, uint8_t *out);
void kv_block_load(kv_pool *pool, uint32_t b, const uint8_t *in);

/* ------------------------------------------------------------ addressing */

/* Block b's plane p in slot's arena (plane_stride[p] bytes). */
static inline uint8_t *kv_slot_plane(const kv_pool *pool, uint32_t slot, uint32_t b, kv_plane p)
{
    assert(b < pool->n_blocks && slot < pool->g.s.n_layers);
    const uint64_t run = p == KV_PLANE_V ? (uint64_t)pool->n_blocks * pool->g.plane_stride[KV_PLANE_K] : 0;
    return pool->data + (uint64_t)slot * pool->layer_span + run + (uint64_t)b * pool->g.plane_stride[p];
}

/* Base of the plane p (K or V) of layer in block b: row 0. With layer
 * groups, layer is the model's and names its slot (kv_pool_set_layer_slots). */
static inline uint8_t *kv_block_plane(const kv_pool *pool, uint32_t b, uint32_t layer, kv_plane p)
{
    assert(!pool->layer_slot || layer < pool->n_mapped);
    const uint32_t slot = pool->layer_slot ? pool->layer_slot[layer] : layer;
    return kv_slot_plane(pool, slot, b, p);
}

/* Bytes from block b's plane p of a layer to block b + 1's (attention
 * views' block steps). */
static inline uint64_t kv_plane_step(const kv_pool *pool, kv_plane p) { return pool->g.plane_stride[p]; }

static inline uint8_t *kv_block_k(const kv_pool *pool, uint32_t b, uint32_t layer)
{
    return kv_block_plane(pool, b, layer, KV_PLANE_K);
}

static inline uint8_t *kv_block_v(const kv_pool *pool, uint32_t b, uint32_t layer)
{
    return kv_block_plane(pool, b, layer, KV_PLANE_V);
}

/* Bytes from one token's row to the next in plane p (rows layout). */
static inline uint64_t kv_row_stride(const kv_pool *pool, kv_plane p)
{
    assert(kv_dtype_get(pool->g.s.dtype)->plane[p].layout == KV_LAYOUT_ROWS);
    return pool->g.row_bytes[p];
}

/* The plane's tail (fp8_e4m3: n_kv_heads f32 scales), or NULL if it has none. */
static inline uint8_t *kv_block_tail(const kv_pool *pool, uint32_t b, uint32_t layer, kv_plane p)
{
    if (kv_dtype_get(pool->g.s.dtype)->plane[p].head_tail_bytes == 0) return NULL;
    return kv_block_plane(pool, b, layer, p) + pool->g.row_bytes[p] * pool->g.s.block_size;
}

/* True if plane p's rows are grouped by head (f16 values, kv_dtype.h):
 * head h of the token in slot t at plane + (h x block_size + t) x (row
 * bytes / n_kv_heads). */
static inline bool kv_plane_heads(const kv_pool *pool, kv_plane p)
{
    return kv_dtype_get(pool->g.s.dtype)->plane[p].layout == KV_LAYOUT_HEADS;
}

/* Bytes of one head's slice of a token row in a HEADS plane. */
static inline uint64_t kv_head_row_bytes(const kv_pool *pool, kv_plane p)
{
    assert(kv_plane_heads(pool, p) && pool->g.row_bytes[p] % pool->g.s.n_kv_heads == 0);
    return pool->g.row_bytes[p] / pool->g.s.n_kv_heads;
}

/* True if plane p is stored in columns (f16 keys, kv_dtype.h): element c of
 * the token in slot t at plane + (c x block_size + t) x 2. */
static inline bool kv_plane_cols(const kv_pool *pool, kv_plane p)
{
    return kv_dtype_get(pool->g.s.dtype)->plane[p].layout == KV_LAYOUT_COLUMNS;
}

#endif
