/* kv_seq.c - block tables, fork and copy-on-write; see kv_seq.h.
 *
 * Every fallible operation first counts the blocks it will take (new table
 * entries plus at most one copy) against kv_pool_available(), and only then
 * changes anything, so that PL_EFULL leaves the sequence and the pool as
 * they were. After the count, taking a block cannot fail. Blocks are taken
 * to follow their table neighbour (kv_pool_alloc_next), so that a
 * sequence's blocks stay runs of ids.
 */
#include "kv/kv_seq.h"

#include "base/err.h"
#include "base/mem.h"

#include <string.h>

static uint32_t kv_seq_blocks_for(const kv_seq *seq, uint32_t n_tokens)
{
    uint32_t t = seq->pool->g.s.block_size;
    return (uint32_t)(((uint64_t)n_tokens + t - 1) / t);
}

int kv_seq_init(kv_seq *seq, kv_pool *pool, uint32_t max_ctx, kv_seq_mode mode)
{
    if (max_ctx == 0) return err_set(PL_EINVAL, "KV sequence: max_ctx must be >= 1");
    kv_seq s = {.pool = pool, .mode = mode, .max_ctx = max_ctx};
    s.cap = kv_seq_blocks_for(&s, max_ctx);
    s.table = mem_calloc(s.cap, sizeof *s.table);
    if (!s.table) return err_prefix(PL_ENOMEM, "KV block table of %u entries", s.cap);
    if (mode == KV_SEQ_STATIC) {
        int rc = kv_pool_alloc_n(pool, s.cap, s.table);
        if (rc) {
            mem_free(s.table);
            return err_prefix(rc, "static KV sequence of %u tokens", max_ctx);
        }
        s.n_blocks = s.cap;
    }
    *seq = s;
    return 0;
}

void kv_seq_free(kv_seq *seq)
{
    if (!seq || !seq->table) return;
    /* Last block first: it then sits deepest in the free list / oldest in
     * the LRU, so a chain's tail is evicted before its head. */
    while (seq->n_blocks > 0) kv_pool_decref(seq->pool, seq->table[--seq->n_blocks]);
    mem_free(seq->table);
    memset(seq, 0, sizeof *seq);
}

/* Checks max_ctx for n more tokens and counts the new blocks they need. */
static int kv_seq_room(const kv_seq *seq, uint32_t n, uint32_t *new_blocks)
{
    if (n > seq->max_ctx - seq->n_tokens)
        return err_set(PL_ERANGE, "KV sequence: %u + %u tokens exceed its max_ctx %u", seq->n_tokens, n,
                       seq->max_ctx);
    *new_blocks = seq->mode == KV_SEQ_STATIC ? 0 : kv_seq_blocks_for(seq, seq->n_tokens + n) - seq->n_blocks;
    return 0;
}

static int kv_seq_full(const kv_seq *seq, uint32_t need)
{
    return err_set(PL_EFULL, "KV pool full: %u blocks needed, %u available of %u", need,
                   kv_pool_available(seq->pool), seq->pool->n_blocks);
}

/* Appends n new blocks to the table; the caller checked availability. */
static void kv_seq_take(kv_seq *seq, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        assert(seq->n_blocks < seq->cap);
        int rc = kv_pool_alloc_next(seq->pool, kv_seq_last_block(seq), &seq->table[seq->n_blocks]);
        assert(rc == 0);
        (void)rc;
        seq->n_blocks++;
    }
}

int kv_seq_reserve(kv_seq *seq, uint32_t n)
{
    uint32_t need = 0;
    int rc = kv_seq_room(seq, n, &need);
    if (rc) return rc;
    if (need > kv_pool_available(seq->pool)) return kv_seq_full(seq, need);
    kv_seq_take(seq, need);
    seq->n_tokens += n;
    return 0;
}

static bool kv_seq_shared(const kv_seq *seq, uint32_t i)
{
    return seq->pool->blocks[seq->table[i]].refcount > 1;
}

/* Replaces shared table entry i by a private copy; the caller checked that
 * a block is available. */
static void kv_seq_cow(kv_seq *seq, uint32_t i)
{
    kv_pool *pool = seq->pool;
    uint32_t old = seq->table[i], b;
    int rc = kv_pool_alloc_next(pool, i > 0 ? (int64_t)seq->table[i - 1] : KV_NONE, &b);
    assert(rc == 0);
    (void)rc;
    kv_pool_copy_block(pool, b, old);
    seq->table[i] = b;
    kv_pool_decref(pool, old); /* still >= 1: another table holds it */
}

/* Makes table entry i private and unkeyed before it is written; the caller
 * checked that a block is available if it is shared. */
static void kv_seq_make_private(kv_seq *seq, uint32_t i)
{
    kv_pool *pool = seq->pool;
    if (kv_seq_shared(seq, i)) kv_seq_cow(seq, i);
    /* A private block about to change no longer matches its prefix key. */
    uint32_t b = seq->table[i];
    kv_block *k = &pool->blocks[b];
    if (k->flags & KV_BLOCK_HASHED) {
        if (pool->on_evict) pool->on_evict(pool->evict_user, b, k->hash);
        kv_pool_clear_hash(pool, b);
    }
}

int kv_seq_prepare_write(kv_seq *seq, uint32_t pos)
{
    if (pos >= seq->n_tokens)
        return err_set(PL_ERANGE, "KV sequence: write at %u but only %u tokens reserved", pos, seq->n_tokens);
    uint32_t i = pos / seq->pool->g.s.block_size;
    if (kv_seq_shared(seq, i) && kv_pool_available(seq->pool) == 0) return kv_seq_full(seq, 1);
    kv_seq_make_private(seq, i);
    return 0;
}

int kv_seq_push_block(kv_seq *seq, uint32_t b)
{
    uint32_t t = seq->pool->g.s.block_size;
    if (seq->mode != KV_SEQ_PAGED || seq->n_tokens % t != 0)
        return err_set(PL_EINVAL, "KV sequence: a block can only be pushed at a block boundary of a paged sequence");
    if (b >= seq->pool->n_blocks) return err_set(PL_EINVAL, "KV sequence: block %u out of range", b);
    if (t > seq->max_ctx - seq->n_tokens)
        return err_set(PL_ERANGE, "KV sequence: %u + %u tokens exceed its max_ctx %u", seq->n_tokens, t,
                       seq->max_ctx);
    kv_pool_acquire(seq->pool, b);
    seq->table[seq->n_blocks++] = b;
    seq->n_tokens += t;
    return 0;
}

/* Blocks kv_seq_append(n) takes from the table the sequence has after
 * dropping logical blocks [first, first + k) (k = 0: the table as it is),
 * holding n_tok tokens then: new entries (PAGED) plus a copy of every shared
 * entry the new positions fall in (PAGED: the partly filled last block, a
 * fork's tail; STATIC: any, since its table covers max_ctx). Entries
 * [first, private_end) are private by then (kv_seq_drop_range rewrites the
 * blocks that move down). A drop rotates [first, n_blocks) left by k: PAGED
 * keeps n_blocks - k entries, STATIC keeps the dropped ids at the end, so
 * entry i >= first is old entry first + (i - first + k) mod (n_blocks - first)
 * for both. Saturates at UINT32_MAX. */
static uint32_t kv_seq_append_need(const kv_seq *seq, uint32_t first, uint32_t k, uint32_t n_tok,
                                   uint32_t private_end, uint32_t n)
{
    if (n == 0) return 0;
    const uint32_t t = seq->pool->g.s.block_size;
    const uint32_t nb = seq->mode == KV_SEQ_PAGED ? seq->n_blocks - k : seq->n_blocks;
    const uint64_t end_tok = (uint64_t)n_tok + n;
    uint64_t need = seq->mode == KV_SEQ_PAGED ? (end_tok + t - 1) / t - nb : 0;
    const uint64_t w_end = (end_tok - 1) / t + 1;
    const uint32_t have = w_end < nb ? (uint32_t)w_end : nb;
    for (uint32_t i = n_tok / t; i < have; i++) {
        if (i >= first && i < private_end) continue;
        const uint32_t j = i < first || k == 0 ? i : first + (i - first + k) % (seq->n_blocks - first);
        need += kv_seq_shared(seq, j);
    }
    return need < UINT32_MAX ? (uint32_t)need : UINT32_MAX;
}

uint32_t kv_seq_append_cost(const kv_seq *seq, uint32_t n)
{
    return kv_seq_append_need(seq, 0, 0, seq->n_tokens, 0, n);
}

int kv_seq_append(kv_seq *seq, uint32_t n)
{
    uint32_t need = 0, t = seq->pool->g.s.block_size, first = seq->n_tokens / t;
    int rc = kv_seq_room(seq, n, &need);
    if (rc || n == 0) return rc;
    const uint32_t cost = kv_seq_append_cost(seq, n); /* need + the copies below */
    if (cost > kv_pool_available(seq->pool)) return kv_seq_full(seq, cost);
    /* Blocks the new positions fall in that the table already has: in a
     * paged sequence only the partly filled last one; in a static one all
     * of them (after a truncate they may be shared with a fork). */
    const uint32_t end = (uint32_t)(((uint64_t)seq->n_tokens + n - 1) / t) + 1;
    const uint32_t have = end < seq->n_blocks ? end : seq->n_blocks;
    kv_seq_take(seq, need);
    seq->n_tokens += n;
    for (uint32_t i = first; i < have; i++) kv_seq_make_private(seq, i);
    return 0;
}

int kv_seq_fork(kv_seq *child, const kv_seq *parent)
{
    kv_pool *pool = parent->pool;
    kv_seq c = {.pool = pool, .mode = parent->mode, .cap = parent->cap, .max_ctx = parent->max_ctx,
                .n_tokens = parent->n_tokens};
    /* A static child shares what holds tokens and owns the rest, as if it
     * had reserved its own max_ctx (the baseline's cost). */
    uint32_t shared = c.mode == KV_SEQ_STATIC ? kv_seq_blocks_for(&c, c.n_tokens) : parent->n_blocks;
    uint32_t fresh = c.mode == KV_SEQ_STATIC ? c.cap - shared : 0;
    c.table = mem_calloc(c.cap, sizeof *c.table);
    if (!c.table) return err_prefix(PL_ENOMEM, "KV block table of %u entries", c.cap);
    if (fresh > 0) {
        int rc = kv_pool_alloc_n(pool, fresh, c.table + shared);
        if (rc) {
            mem_free(c.table);
            return err_prefix(rc, "fork of a static KV sequence");
        }
    }
    for (uint32_t i = 0; i < shared; i++) {
        c.table[i] = parent->table[i];
        kv_pool_incref(pool, c.table[i]);
    }
    c.n_blocks = shared + fresh;
    *child = c;
    return 0;
}

static void kv_seq_reverse(uint32_t *a, uint32_t n)
{
    for (uint32_t i = 0, j = n; i + 1 < j; i++, j--) {
        uint32_t x = a[i];
        a[i] = a[j - 1];
        a[j - 1] = x;
    }
}

/* Copies (shared blocks among those that move and hold tokens) and frees
 * (dropped blocks whose last reference this is) of a drop; see kv_seq.h. */
static void kv_seq_drop_count(const kv_seq *seq, uint32_t first, uint32_t n, uint32_t *copies, uint32_t *freed)
{
    const uint32_t held = kv_seq_blocks_for(seq, seq->n_tokens);
    *copies = *freed = 0;
    for (uint32_t i = first + n; i < held; i++) *copies += kv_seq_shared(seq, i);
    if (seq->mode == KV_SEQ_PAGED)
        for (uint32_t i = first; i < first + n; i++) *freed += !kv_seq_shared(seq, i);
}

int64_t kv_seq_drop_balance(const kv_seq *seq, uint32_t first, uint32_t n)
{
    uint32_t copies, freed;
    kv_seq_drop_count(seq, first, n, &copies, &freed);
    return (int64_t)copies - (int64_t)freed;
}

/* Tokens left after kv_seq_drop_range(seq, first, n). */
static uint32_t kv_seq_drop_kept(const kv_seq *seq, uint32_t first, uint32_t n)
{
    const uint32_t t = seq->pool->g.s.block_size;
    const uint32_t end_tok = (first + n) * t < seq->n_tokens ? (first + n) * t : seq->n_tokens;
    return seq->n_tokens - (end_tok - first * t);
}

int64_t kv_seq_drop_range_append_cost(const kv_seq *seq, uint32_t first, uint32_t k, uint32_t n)
{
    const uint32_t held = kv_seq_blocks_for(seq, seq->n_tokens);
    assert(k >= 1 && first <= held && k <= held - first);
    const uint32_t need = kv_seq_append_need(seq, first, k, kv_seq_drop_kept(seq, first, k), held - k, n);
    return kv_seq_drop_balance(seq, first, k) + need;
}

int64_t kv_seq_drop_front_append_cost(const kv_seq *seq, uint32_t k, uint32_t n)
{
    const uint32_t t = seq->pool->g.s.block_size;
    assert((uint64_t)k * t <= seq->n_tokens);
    int64_t freed = 0;
    for (uint32_t i = 0; seq->mode == KV_SEQ_PAGED && i < k; i++) freed += !kv_seq_shared(seq, i);
    return (int64_t)kv_seq_append_need(seq, 0, k, seq->n_tokens - k * t, 0, n) - freed;
}

int kv_seq_drop_range(kv_seq *seq, uint32_t first, uint32_t n)
{
    const uint32_t held = kv_seq_blocks_for(seq, seq->n_tokens);
    if (n == 0 || first > held || n > held - first)
        return err_set(PL_EINVAL, "KV sequence: drop of blocks [%u, %u) but %u hold tokens", first, first + n, held);
    uint32_t copies, freed;
    kv_seq_drop_count(seq, first, n, &copies, &freed);
    if (copies > kv_pool_available(seq->pool) + freed) return kv_seq_full(seq, copies);
    const uint32_t dropped = seq->n_tokens - kv_seq_drop_kept(seq, first, n);
    uint32_t *gone = seq->table + first;
    if (seq->mode == KV_SEQ_PAGED) {
        /* last first, as kv_seq_free: a chain's tail is evicted before its head */
        for (uint32_t i = n; i-- > 0;) kv_pool_decref(seq->pool, gone[i]);
        memmove(gone, gone + n, (size_t)(seq->n_blocks - first - n) * sizeof *gone);
        seq->n_blocks -= n;
    } else {
        /* rotate [first, cap) left by n (three reversals, no allocation):
         * the dropped ids go to the end, still owned */
        kv_seq_reverse(gone, n);
        kv_seq_reverse(gone + n, seq->n_blocks - first - n);
        kv_seq_reverse(gone, seq->n_blocks - first);
    }
    seq->n_tokens -= dropped;
    for (uint32_t i = first; i < held - n; i++) kv_seq_make_private(seq, i);
    return 0;
}

int kv_seq_drop_front(kv_seq *seq, uint32_t n)
{
    const uint32_t t = seq->pool->g.s.block_size;
    if (n == 0) return 0;
    if ((uint64_t)n * t > seq->n_tokens)
        return err_set(PL_EINVAL, "KV sequence: drop of %u front blocks but only %u tokens held", n, seq->n_tokens);
    uint32_t *tab = seq->table;
    if (seq->mode == KV_SEQ_PAGED) {
        /* last first, as kv_seq_free: a chain's tail is evicted before its head */
        for (uint32_t i = n; i-- > 0;) kv_pool_decref(seq->pool, tab[i]);
        memmove(tab, tab + n, (size_t)(seq->n_blocks - n) * sizeof *tab);
        seq->n_blocks -= n;
    } else {
        kv_seq_reverse(tab, n);
        kv_seq_reverse(tab + n, seq->n_blocks - n);
        kv_seq_reverse(tab, seq->n_blocks);
    }
    seq->n_tokens -= n * t;
    return 0;
}

void kv_seq_truncate(kv_seq *seq, uint32_t n_tokens)
{
    assert(n_tokens <= seq->n_tokens);
    seq->n_tokens = n_tokens;
    if (seq->mode == KV_SEQ_STATIC) return;
    uint32_t keep = kv_seq_blocks_for(seq, n_tokens);
    while (seq->n_blocks > keep) kv_pool_decref(seq->pool, seq->table[--seq->n_blocks]);
}

uint64_t kv_seq_bytes_held(const kv_seq *seq)
{
    return (uint64_t)seq->n_blocks * seq->pool->g.block_bytes;
}
