/* kv_pool.c - the block pool: geometry, the two block lists, refcounts.
 * See kv_pool.h for the layout and the block states.
 *
 * Invariants kept by every function here (and checked by kv_check):
 *   free_list.n + lru.n + n_used == n_blocks;
 *   a block is on the free list iff FREE, on the LRU iff CACHED;
 *   refcount > 0 iff USED; CACHED blocks are hashed, FREE blocks are not.
 */
#include "kv/kv_pool.h"
#include "kv/kv_latent.h"

#include "base/err.h"
#include "base/mem.h"

#include <string.h>

/* ------------------------------------------------------------- geometry */

static uint64_t kv_round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int kv_shape_check(const kv_shape *s)
{
    if (s->n_layers == 0) return err_set(PL_EINVAL, "KV shape: n_layers must be >= 1");
    if (s->n_kv_heads == 0) return err_set(PL_EINVAL, "KV shape: n_kv_heads must be >= 1");
    if (s->head_dim == 0) return err_set(PL_EINVAL, "KV shape: head_dim must be >= 1");
    if (s->block_size == 0) return err_set(PL_EINVAL, "KV shape: block_size must be >= 1");
    if ((unsigned)s->dtype >= KV_DTYPE_COUNT)
        return err_set(PL_EINVAL, "KV shape: dtype %d out of range", (int)s->dtype);
    if (s->kind == KV_KIND_LATENT) return kv_latent_check(s->dtype, s->n_kv_heads, s->head_dim);
    if (s->kind != KV_KIND_KV) return err_set(PL_EINVAL, "KV shape: kind %d out of range", (int)s->kind);
    return kv_dtype_check(s->dtype, s->n_kv_heads, s->head_dim);
}

int kv_geom_init(kv_geom *g, const kv_shape *shape)
{
    int rc = kv_shape_check(shape);
    if (rc) return rc;
    kv_geom t = {.s = *shape, .kv_dim = (uint64_t)shape->n_kv_heads * shape->head_dim};
    uint64_t exact = 0;
    const bool latent = shape->kind == KV_KIND_LATENT;
    for (int p = 0; p < 2; p++) {
        if (latent && p == KV_PLANE_V) continue; /* values are read from the K rows */
        t.row_bytes[p] = latent ? kv_latent_row_bytes(shape->dtype, shape->head_dim)
                                : kv_dtype_row_bytes(shape->dtype, (kv_plane)p, t.kv_dim);
        t.plane_bytes[p] = latent ? kv_latent_plane_bytes(shape->dtype, shape->head_dim, shape->block_size)
                                  : kv_dtype_plane_bytes(shape->dtype, (kv_plane)p, shape->block_size,
                                                         shape->n_kv_heads, shape->head_dim);
        /* 0 is an overflow (the fit was checked above); the 2^62 cap keeps
         * the rounding and the sums below from wrapping. */
        if (t.plane_bytes[p] == 0 || t.plane_bytes[p] > (UINT64_C(1) << 62))
            return err_set(PL_ERANGE, "KV shape: one plane of %u tokens overflows", shape->block_size);
        t.plane_stride[p] = kv_round_up(t.plane_bytes[p], KV_PLANE_ALIGN);
        exact += t.plane_bytes[p];
    }
    t.layer_stride = t.plane_stride[0] + t.plane_stride[1];
    if (!mul_u64(t.layer_stride, shape->n_layers, &t.block_bytes) ||
        !mul_u64(exact, shape->n_layers, &t.block_bytes_exact))
        return err_set(PL_ERANGE, "KV shape: block size overflows");
    t.bytes_per_token = (double)t.block_bytes_exact / shape->block_size;
    *g = t;
    return 0;
}

uint32_t kv_geom_blocks_for_bytes(const kv_geom *g, uint64_t bytes)
{
    uint64_t n = bytes / g->block_bytes;
    return n > INT32_MAX ? INT32_MAX : (uint32_t)n;
}

/* ---------------------------------------------------------------- lists */

/* free_bits follows the free list: set on the way in, cleared on the way out. */
static void kv_free_bit(kv_pool *pool, const kv_list *l, uint32_t b, bool set)
{
    if (l != &pool->free_list) return;
    const uint64_t m = UINT64_C(1) << (b % 64);
    if (set) pool->free_bits[b / 64] |= m;
    else pool->free_bits[b / 64] &= ~m;
}

static void kv_list_unlink(kv_pool *pool, kv_list *l, uint32_t b)
{
    kv_free_bit(pool, l, b, false);
    kv_block *k = &pool->blocks[b];
    if (k->prev != KV_NONE) pool->blocks[k->prev].next = k->next;
    else l->head = k->next;
    if (k->next != KV_NONE) pool->blocks[k->next].prev = k->prev;
    else l->tail = k->prev;
    k->prev = k->next = KV_NONE;
    assert(l->n > 0);
    l->n--;
}

static void kv_list_push_head(kv_pool *pool, kv_list *l, uint32_t b)
{
    kv_free_bit(pool, l, b, true);
    kv_block *k = &pool->blocks[b];
    k->prev = KV_NONE;
    k->next = l->head;
    if (l->head != KV_NONE) pool->blocks[l->head].prev = (int32_t)b;
    else l->tail = (int32_t)b;
    l->head = (int32_t)b;
    l->n++;
}

static void kv_list_push_tail(kv_pool *pool, kv_list *l, uint32_t b)
{
    kv_free_bit(pool, l, b, true);
    kv_block *k = &pool->blocks[b];
    k->next = KV_NONE;
    k->prev = l->tail;
    if (l->tail != KV_NONE) pool->blocks[l->tail].next = (int32_t)b;
    else l->head = (int32_t)b;
    l->tail = (int32_t)b;
    l->n++;
}

/* ----------------------------------------------------------- life cycle */

int kv_pool_init(kv_pool *pool, const kv_shape *shape, uint32_t n_blocks)
{
    kv_geom g;
    uint64_t bytes;
    int rc = kv_geom_init(&g, shape);
    if (rc) return rc;
    if (n_blocks == 0 || n_blocks > INT32_MAX)
        return err_set(PL_EINVAL, "KV pool: %u blocks (must be 1 .. %d)", n_blocks, INT32_MAX);
    if (!mul_u64(g.block_bytes, n_blocks, &bytes) || bytes > SIZE_MAX)
        return err_set(PL_ERANGE, "KV pool: %u blocks of %llu bytes overflow", n_blocks,
                       (unsigned long long)g.block_bytes);
    kv_pool p = {.g = g, .n_blocks = n_blocks, .layer_span = g.layer_stride * n_blocks}; /* <= bytes: no overflow */
    p.data = mem_alloc_huge((size_t)bytes); /* 2 MiB pages: see mem.h */
    p.blocks = p.data ? mem_calloc(n_blocks, sizeof *p.blocks) : NULL;
    p.scratch = p.blocks ? mem_calloc(n_blocks, sizeof *p.scratch) : NULL;
    p.free_bits = p.scratch ? mem_calloc(((size_t)n_blocks + 63) / 64, sizeof *p.free_bits) : NULL;
    if (!p.free_bits) {
        mem_free(p.data);
        mem_free(p.blocks);
        mem_free(p.scratch);
        return err_prefix(PL_ENOMEM, "KV pool of %u blocks (%llu bytes)", n_blocks, (unsigned long long)bytes);
    }
    p.free_list = p.lru = (kv_list){KV_NONE, KV_NONE, 0};
    *pool = p;
    for (uint32_t b = n_blocks; b-- > 0;) {
        pool->blocks[b] = (kv_block){.parent = KV_NONE, .state = KV_BLOCK_FREE};
        kv_list_push_head(pool, &pool->free_list, b);
    }
    return 0;
}

void kv_pool_free(kv_pool *pool)
{
    if (!pool) return;
    mem_free(pool->data);
    mem_free(pool->blocks);
    mem_free(pool->scratch);
    mem_free(pool->free_bits);
    memset(pool, 0, sizeof *pool);
}

void kv_pool_set_evict(kv_pool *pool, kv_evict_fn fn, void *user)
{
    pool->on_evict = fn;
    pool->evict_user = user;
}

void kv_pool_set_layer_slots(kv_pool *pool, const uint16_t *slot, uint32_t n)
{
    for (uint32_t l = 0; l < n; l++) assert(slot[l] < pool->g.s.n_layers);
    pool->layer_slot = slot;
    pool->n_mapped = n;
}

/* ------------------------------------------------------ taking, returning */

static void kv_block_wipe_hash(kv_block *k)
{
    k->hash[0] = k->hash[1] = 0;
    k->parent = KV_NONE;
    k->flags &= (uint8_t)~KV_BLOCK_HASHED;
}

static void kv_block_mark_used(kv_pool *pool, uint32_t b)
{
    kv_block *k = &pool->blocks[b];
    assert(k->refcount == 0 && k->prev == KV_NONE && k->next == KV_NONE);
    k->state = KV_BLOCK_USED;
    k->refcount = 1;
    pool->n_used++;
}

int kv_pool_alloc(kv_pool *pool, uint32_t *out)
{
    uint32_t b;
    if (pool->free_list.n > 0) {
        b = (uint32_t)pool->free_list.head;
        kv_list_unlink(pool, &pool->free_list, b);
    } else if (pool->lru.n > 0) {
        b = (uint32_t)pool->lru.head;
        kv_list_unlink(pool, &pool->lru, b);
        /* The cache forgets the block before its key is wiped. */
        if (pool->on_evict) pool->on_evict(pool->evict_user, b, pool->blocks[b].hash);
        kv_block_wipe_hash(&pool->blocks[b]);
    } else {
        return err_set(PL_EFULL, "KV pool full: all %u blocks in use", pool->n_blocks);
    }
    kv_block_mark_used(pool, b);
    *out = b;
    return 0;
}

/* The first run of FREE ids at or after id `from`: its length (0 if none)
 * and its first id in *start. Reads free_bits a word at a time; bits past
 * n_blocks are 0, so a run ends at the pool's end at the latest. */
static uint32_t kv_free_run_from(const kv_pool *pool, uint32_t from, uint32_t *start)
{
    const uint32_t n_words = (pool->n_blocks + 63) / 64;
    uint32_t w = from / 64;
    if (w >= n_words) return 0;
    uint64_t x = pool->free_bits[w] & (~UINT64_C(0) << (from % 64));
    while (!x) {
        if (++w == n_words) return 0;
        x = pool->free_bits[w];
    }
    const uint32_t s = w * 64 + (uint32_t)__builtin_ctzll(x);
    uint64_t y = ~pool->free_bits[w] & (~UINT64_C(0) << (s % 64)); /* the ids after s that are not FREE */
    while (!y) {
        if (++w == n_words) break; /* the pool's last word was all FREE */
        y = ~pool->free_bits[w];
    }
    const uint32_t end = w == n_words ? pool->n_blocks : w * 64 + (uint32_t)__builtin_ctzll(y);
    *start = s;
    return end - s;
}

/* The largest run of FREE ids (the lowest first on a tie): its length, 0 if
 * none, and its first id in *start. */
static uint32_t kv_largest_free_run(const kv_pool *pool, uint32_t *start)
{
    uint32_t best = 0, at, len;
    for (uint32_t from = 0; (len = kv_free_run_from(pool, from, &at)) > 0; from = at + len)
        if (len > best) best = len, *start = at;
    return best;
}

int kv_pool_alloc_next(kv_pool *pool, int64_t prev, uint32_t *out)
{
    assert(prev >= KV_NONE && prev < (int64_t)pool->n_blocks);
    uint32_t b = (uint32_t)(prev + 1);
    if (prev == KV_NONE || b >= pool->n_blocks || pool->blocks[b].state != KV_BLOCK_FREE) {
        uint32_t at, len = kv_largest_free_run(pool, &at);
        if (len == 0) return kv_pool_alloc(pool, out);
        const bool after_used = at > 0 && pool->blocks[at - 1].state == KV_BLOCK_USED;
        b = after_used ? at + len / 2 : at;
    }
    assert(pool->blocks[b].state == KV_BLOCK_FREE);
    kv_list_unlink(pool, &pool->free_list, b);
    kv_block_mark_used(pool, b);
    *out = b;
    return 0;
}

/* First FREE run of n ids, or KV_NONE (used when a static sequence is
 * made, never while decoding). */
static int32_t kv_pool_find_run(const kv_pool *pool, uint32_t n)
{
    uint32_t at, len;
    for (uint32_t from = 0; (len = kv_free_run_from(pool, from, &at)) > 0; from = at + len)
        if (len >= n) return (int32_t)at;
    return KV_NONE;
}

int kv_pool_alloc_n(kv_pool *pool, uint32_t n, uint32_t *ids)
{
    if (n > kv_pool_available(pool))
        return err_set(PL_EFULL, "KV pool full: %u blocks wanted, %u available of %u", n,
                       kv_pool_available(pool), pool->n_blocks);
    int32_t first = n > 0 ? kv_pool_find_run(pool, n) : KV_NONE;
    for (uint32_t i = 0; i < n; i++) {
        if (first != KV_NONE) {
            ids[i] = (uint32_t)first + i;
            kv_pool_acquire(pool, ids[i]);
        } else {
            int rc = kv_pool_alloc(pool, &ids[i]);
            assert(rc == 0); /* availability was checked above */
            (void)rc;
        }
    }
    return 0;
}

void kv_pool_acquire(kv_pool *pool, uint32_t b)
{
    assert(b < pool->n_blocks);
    kv_block *k = &pool->blocks[b];
    switch ((kv_block_state)k->state) {
    case KV_BLOCK_USED: kv_pool_incref(pool, b); return;
    case KV_BLOCK_CACHED: kv_list_unlink(pool, &pool->lru, b); break;
    case KV_BLOCK_FREE: kv_list_unlink(pool, &pool->free_list, b); break;
    }
    kv_block_mark_used(pool, b);
}

void kv_pool_incref(kv_pool *pool, uint32_t b)
{
    assert(b < pool->n_blocks && pool->blocks[b].state == KV_BLOCK_USED);
    assert(pool->blocks[b].refcount < UINT32_MAX);
    pool->blocks[b].refcount++;
}

void kv_pool_decref(kv_pool *pool, uint32_t b)
{
    assert(b < pool->n_blocks);
    kv_block *k = &pool->blocks[b];
    assert(k->state == KV_BLOCK_USED && k->refcount > 0);
    if (--k->refcount > 0) return;
    pool->n_used--;
    if (k->flags & KV_BLOCK_HASHED) {
        k->state = KV_BLOCK_CACHED;
        kv_list_push_tail(pool, &pool->lru, b); /* most recently used at the tail */
    } else {
        k->state = KV_BLOCK_FREE;
        k->parent = KV_NONE;
        kv_list_push_head(pool, &pool->free_list, b);
    }
}

/* ------------------------------------------------------- hashes, copying */

void kv_pool_set_hash(kv_pool *pool, uint32_t b, const uint64_t hash[2], int32_t parent)
{
    assert(b < pool->n_blocks && pool->blocks[b].state == KV_BLOCK_USED);
    kv_block *k = &pool->blocks[b];
    k->hash[0] = hash[0];
    k->hash[1] = hash[1];
    k->parent = parent;
    k->flags |= KV_BLOCK_HASHED;
}

void kv_pool_clear_hash(kv_pool *pool, uint32_t b)
{
    /* A CACHED block without a key could never be found again: not allowed. */
    assert(b < pool->n_blocks && pool->blocks[b].state != KV_BLOCK_CACHED);
    kv_block_wipe_hash(&pool->blocks[b]);
}

void kv_pool_copy_block(kv_pool *pool, uint32_t dst, uint32_t src)
{
    assert(dst != src);
    for (uint32_t l = 0; l < pool->g.s.n_layers; l++)
        for (int p = 0; p < 2; p++)
            memcpy(kv_slot_plane(pool, l, dst, (kv_plane)p), kv_slot_plane(pool, l, src, (kv_plane)p),
                   (size_t)pool->g.plane_stride[p]);
}

/* Slot l's K plane, then its V plane, at l x layer_stride of a block's run. */
void kv_block_save(const kv_pool *pool, uint32_t b, uint8_t *out)
{
    const uint64_t ls = pool->g.layer_stride, ks = pool->g.plane_stride[KV_PLANE_K];
    for (uint32_t l = 0; l < pool->g.s.n_layers; l++) {
        memcpy(out + l * ls, kv_slot_plane(pool, l, b, KV_PLANE_K), (size_t)ks);
        memcpy(out + l * ls + ks, kv_slot_plane(pool, l, b, KV_PLANE_V), (size_t)pool->g.plane_stride[KV_PLANE_V]);
    }
}

void kv_block_load(kv_pool *pool, uint32_t b, const uint8_t *in)
{
    const uint64_t ls = pool->g.layer_stride, ks = pool->g.plane_stride[KV_PLANE_K];
    for (uint32_t l = 0; l < pool->g.s.n_layers; l++) {
        memcpy(kv_slot_plane(pool, l, b, KV_PLANE_K), in + l * ls, (size_t)ks);
        memcpy(kv_slot_plane(pool, l, b, KV_PLANE_V), in + l * ls + ks, (size_t)pool->g.plane_stride[KV_PLANE_V]);
    }
}
