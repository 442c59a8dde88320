/* prefix_cache.c - keys, the two index tables, lookup with a token-granular
 * tail, registering, eviction callback, prefix_check; see prefix_cache.h.
 *
 * Both tables use linear probing from a home slot and backward-shift
 * deletion: removing slot i pulls later entries of the same probe run back
 * into the hole when their home allows, so every entry stays reachable from
 * its home without tombstones, and a lookup stops at the first empty slot.
 * A table holds at most n_blocks entries in >= 2 x n_blocks slots, so a
 * probe always meets an empty slot.
 *
 *   keys: | -1 | 7 | 3 | -1 | 12 | ... |   entry = block id; its key is
 *                                          pool->blocks[id].hash
 *   kids: | -1 | 5 | -1 | ... |            entry = head of a list:
 *            5 <-> 9 <-> 2                 sib_next / sib_prev, same parent
 *                                          key and first token, newest first
 */
#include "kv/prefix_cache.h"

#include "base/err.h"
#include "base/mem.h"

#include <string.h>
#include <xxhash.h>

const uint64_t PREFIX_ROOT[2] = {0, 0};

/* ------------------------------------------------------------- hashing */

static void prefix_xxh3(uint64_t out[2], const void *data, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(data, len);
    out[0] = h.low64;
    out[1] = h.high64;
}

/* Little-endian on every host, so that keys could later be shared through
 * a disk or Redis tier between machines. */
static uint8_t *prefix_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 8;
}

static uint8_t *prefix_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
    return p + 4;
}

/* key = hash(salt | parent | tok[0, T)). Uses pc->hbuf (hence no const
 * data, only a const handle: one thread owns the cache). */
static void prefix_key(const prefix_cache *pc, const uint64_t parent[2], const int32_t *tok, uint64_t key[2])
{
    uint8_t *p = pc->hbuf;
    p = prefix_put_u64(p, pc->salt[0]);
    p = prefix_put_u64(p, pc->salt[1]);
    p = prefix_put_u64(p, parent[0]);
    p = prefix_put_u64(p, parent[1]);
    for (uint32_t i = 0; i < pc->block_size; i++) p = prefix_put_u32(p, (uint32_t)tok[i]);
    pc->hash(key, pc->hbuf, (size_t)(p - pc->hbuf));
}

void prefix_salt_make(uint64_t salt[2], const uint64_t model_fp[2], const kv_shape *s)
{
    uint8_t buf[8 + 16 + 6 * 4], *p = buf;
    memcpy(p, "pagellm1", 8); /* bump if the key's byte layout changes */
    p = prefix_put_u64(p + 8, model_fp[0]);
    p = prefix_put_u64(p, model_fp[1]);
    p = prefix_put_u32(p, s->n_layers);
    p = prefix_put_u32(p, s->n_kv_heads);
    p = prefix_put_u32(p, s->head_dim);
    p = prefix_put_u32(p, s->block_size);
    p = prefix_put_u32(p, (uint32_t)s->dtype);
    p = prefix_put_u32(p, (uint32_t)s->kind);
    prefix_xxh3(salt, buf, (size_t)(p - buf));
}

/* --------------------------------------------------------------- tables */

static bool prefix_eq(const uint64_t a[2], const uint64_t b[2]) { return a[0] == b[0] && a[1] == b[1]; }

/* A finalizer, so that the home slot is spread even under a weak test hash. */
static uint64_t prefix_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    return x ^ (x >> 33);
}

static const int32_t *prefix_tok(const prefix_cache *pc, uint32_t b) { return pc->tok + (size_t)b * pc->block_size; }

static uint32_t prefix_key_home(const prefix_cache *pc, const uint64_t key[2])
{
    return (uint32_t)prefix_mix(key[0] ^ prefix_mix(key[1])) & pc->keys_mask;
}

static uint32_t prefix_kid_home(const prefix_cache *pc, const uint64_t parent[2], int32_t first)
{
    return (uint32_t)prefix_mix(parent[0] ^ prefix_mix(parent[1] ^ (uint32_t)first)) & pc->keys_mask;
}

/* Home slot of the entry naming block b in table t (keys or kids). */
static uint32_t prefix_entry_home(const prefix_cache *pc, const int32_t *t, uint32_t b)
{
    if (t == pc->keys) return prefix_key_home(pc, pc->pool->blocks[b].hash);
    return prefix_kid_home(pc, pc->parent[b], prefix_tok(pc, b)[0]);
}

/* The slot holding key, or the empty slot where it would go; *b = the
 * block there or KV_NONE. */
static uint32_t prefix_keys_find(const prefix_cache *pc, const uint64_t key[2], int32_t *b)
{
    for (uint32_t i = prefix_key_home(pc, key);; i = (i + 1) & pc->keys_mask) {
        int32_t e = pc->keys[i];
        if (e == KV_NONE || prefix_eq(pc->pool->blocks[e].hash, key)) {
            *b = e;
            return i;
        }
    }
}

/* The slot of the kids list (parent, first), or the empty slot where it
 * would go; *head = its first block or KV_NONE. */
static uint32_t prefix_kids_find(const prefix_cache *pc, const uint64_t parent[2], int32_t first, int32_t *head)
{
    for (uint32_t i = prefix_kid_home(pc, parent, first);; i = (i + 1) & pc->keys_mask) {
        int32_t e = pc->kids[i];
        if (e == KV_NONE || (prefix_eq(pc->parent[e], parent) && prefix_tok(pc, (uint32_t)e)[0] == first)) {
            *head = e;
            return i;
        }
    }
}

/* Empties slot i of table t (backward-shift deletion, see the top). */
static void prefix_slot_remove(prefix_cache *pc, int32_t *t, uint32_t i)
{
    const uint32_t mask = pc->keys_mask;
    for (uint32_t j = (i + 1) & mask; t[j] != KV_NONE; j = (j + 1) & mask) {
        uint32_t home = prefix_entry_home(pc, t, (uint32_t)t[j]);
        /* t[j] may fill the hole iff the hole lies on its path home .. j. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t[i] = t[j];
            i = j;
        }
    }
    t[i] = KV_NONE;
}

/* ----------------------------------------------------------- kids lists */

/* Puts keyed block b at the head of its (parent, first token) list. */
static void prefix_kid_add(prefix_cache *pc, uint32_t b)
{
    int32_t head;
    uint32_t i = prefix_kids_find(pc, pc->parent[b], prefix_tok(pc, b)[0], &head);
    pc->sib_prev[b] = KV_NONE;
    pc->sib_next[b] = head;
    if (head != KV_NONE) pc->sib_prev[head] = (int32_t)b;
    pc->kids[i] = (int32_t)b; /* a new entry, or the list's new head */
}

static void prefix_kid_remove(prefix_cache *pc, uint32_t b)
{
    int32_t prev = pc->sib_prev[b], next = pc->sib_next[b];
    if (next != KV_NONE) pc->sib_prev[next] = prev;
    if (prev != KV_NONE) {
        pc->sib_next[prev] = next;
    } else { /* b heads the list: its entry moves to next, or goes */
        int32_t head;
        uint32_t i = prefix_kids_find(pc, pc->parent[b], prefix_tok(pc, b)[0], &head);
        assert(head == (int32_t)b);
        if (next != KV_NONE) pc->kids[i] = next;
        else prefix_slot_remove(pc, pc->kids, i);
    }
    pc->sib_prev[b] = pc->sib_next[b] = KV_NONE;
}

/* ------------------------------------------------- keying and forgetting */

/* Keys USED block b (key absent, its empty slot given): tokens and parent
 * stored, pool key set, both tables updated. */
static void prefix_block_key(prefix_cache *pc, uint32_t b, uint32_t slot, const uint64_t key[2],
                         const uint64_t parent[2], const int32_t *tok)
{
    assert(pc->keys[slot] == KV_NONE && !(pc->pool->blocks[b].flags & KV_BLOCK_HASHED));
    memcpy(pc->tok + (size_t)b * pc->block_size, tok, pc->block_size * sizeof *tok);
    pc->parent[b][0] = parent[0];
    pc->parent[b][1] = parent[1];
    /* No parent block id: the cache links by parent key (prefix_cache.h). */
    kv_pool_set_hash(pc->pool, b, key, KV_NONE);
    pc->keys[slot] = (int32_t)b;
    prefix_kid_add(pc, b);
    pc->st.registered++;
    pc->st.cached_blocks++;
}

/* The pool's callback: block b is about to lose key hash (still set). */
static void prefix_on_evict(void *user, uint32_t b, const uint64_t hash[2])
{
    prefix_cache *pc = user;
    int32_t e;
    uint32_t i = prefix_keys_find(pc, hash, &e);
    assert(e == (int32_t)b); /* every pool key is in the table */
    if (e != (int32_t)b) return;
    prefix_slot_remove(pc, pc->keys, i);
    prefix_kid_remove(pc, b);
    /* kv_pool_alloc calls back while the block is still marked CACHED;
     * kv_seq_prepare_write on a USED private block. */
    if (pc->pool->blocks[b].state == KV_BLOCK_CACHED) pc->st.evictions++;
    else pc->st.invalidations++;
    assert(pc->st.cached_blocks > 0);
    pc->st.cached_blocks--;
}

/* ------------------------------------------------------------ life cycle */

static void prefix_arrays_free(prefix_cache *c)
{
    mem_free(c->keys);
    mem_free(c->kids);
    mem_free(c->tok);
    mem_free(c->parent);
    mem_free(c->sib_prev);
    mem_free(c->sib_next);
    mem_free(c->hbuf);
    mem_free(c->mark);
}

static int prefix_arrays_make(prefix_cache *c, uint32_t n, uint32_t t)
{
    uint64_t slots = 16, ntok;
    while (slots < 2 * (uint64_t)n) slots <<= 1;
    if (!mul_u64(n, t, &ntok) || ntok > SIZE_MAX / sizeof(int32_t) || slots > SIZE_MAX / sizeof(int32_t))
        return err_set(PL_ERANGE, "prefix cache: %u blocks of %u tokens overflow", n, t);
    c->keys_mask = (uint32_t)(slots - 1);
    c->keys = mem_calloc((size_t)slots, sizeof *c->keys);
    c->kids = mem_calloc((size_t)slots, sizeof *c->kids);
    c->tok = mem_calloc((size_t)ntok, sizeof *c->tok);
    c->parent = mem_calloc(n, sizeof *c->parent);
    c->sib_prev = mem_calloc(n, sizeof *c->sib_prev);
    c->sib_next = mem_calloc(n, sizeof *c->sib_next);
    c->hbuf = mem_calloc(32 + 4 * (size_t)t, 1);
    c->mark = mem_calloc(n, 1);
    if (!c->keys || !c->kids || !c->tok || !c->parent || !c->sib_prev || !c->sib_next || !c->hbuf || !c->mark) {
        prefix_arrays_free(c);
        return err_prefix(PL_ENOMEM, "prefix cache index for %u blocks", n);
    }
    /* All bits set is KV_NONE (-1) in every slot and link. */
    memset(c->keys, 0xff, (size_t)slots * sizeof *c->keys);
    memset(c->kids, 0xff, (size_t)slots * sizeof *c->kids);
    memset(c->sib_prev, 0xff, (size_t)n * sizeof *c->sib_prev);
    memset(c->sib_next, 0xff, (size_t)n * sizeof *c->sib_next);
    return 0;
}

int prefix_init(prefix_cache *pc, kv_pool *pool, const uint64_t model_fp[2])
{
    if (pool->on_evict) return err_set(PL_EINVAL, "prefix cache: the KV pool already has an evict callback");
    for (uint32_t b = 0; b < pool->n_blocks; b++)
        if (pool->blocks[b].flags & KV_BLOCK_HASHED)
            return err_set(PL_EINVAL, "prefix cache: KV pool block %u is already keyed", b);
    const kv_shape *s = &pool->g.s;
    prefix_cache c = {.pool = pool, .block_size = s->block_size, .hash = prefix_xxh3};
    int rc = prefix_arrays_make(&c, pool->n_blocks, s->block_size);
    if (rc) return rc;
    prefix_salt_make(c.salt, model_fp, s);
    /* A tail copy keeps m tokens of a block: only if a token's elements are
     * separable (rows, or f16 columns; not KIVI's per-channel quantization). */
    const kv_dtype_traits *tr = kv_dtype_get(s->dtype);
    c.partial_ok = tr->fill_dtype == s->dtype && tr->plane[KV_PLANE_K].layout != KV_LAYOUT_CHANNELS &&
                   tr->plane[KV_PLANE_V].layout != KV_LAYOUT_CHANNELS;
    *pc = c;
    kv_pool_set_evict(pool, prefix_on_evict, pc); /* pc must not move from now on */
    return 0;
}

void prefix_free(prefix_cache *pc)
{
    if (!pc || !pc->pool) return;
    if (pc->pool->evict_user == pc) kv_pool_set_evict(pc->pool, NULL, NULL);
    prefix_arrays_free(pc);
    memset(pc, 0, sizeof *pc);
}

void prefix_cursor_init(prefix_cursor *cur) { prefix_cursor_init_root(cur, PREFIX_ROOT); }

void prefix_cursor_init_root(prefix_cursor *cur, const uint64_t root[2])
{
    *cur = (prefix_cursor){0, {root[0], root[1]}, {root[0], root[1]}};
}

void prefix_group_root(uint32_t group, uint64_t root[2])
{
    /* group 0 is the plain chain; the others differ from it and each other */
    root[0] = group ? prefix_mix(group) : PREFIX_ROOT[0];
    root[1] = group ? UINT64_C(0x4c61796572477270) ^ group : PREFIX_ROOT[1];
}

void prefix_cursor_truncate(const prefix_cache *pc, prefix_cursor *cur, uint32_t n_tokens)
{
    if (cur->n_blocks > n_tokens / pc->block_size) prefix_cursor_init_root(cur, cur->root);
}

void prefix_stats_get(const prefix_cache *pc, prefix_stats *out) { *out = pc->st; }

/* --------------------------------------------------------------- lookup */

/* The verified block that follows parent with tokens tok[0, T), or
 * KV_NONE; key = its key. A key found with other tokens or another parent
 * is a collision: *collision is set and it is a miss. */
static int32_t prefix_find_verified(const prefix_cache *pc, const uint64_t parent[2], const int32_t *tok,
                                uint64_t key[2], bool *collision)
{
    int32_t b;
    prefix_key(pc, parent, tok, key);
    prefix_keys_find(pc, key, &b);
    if (b == KV_NONE) return KV_NONE;
    if (!prefix_eq(pc->parent[b], parent) || memcmp(prefix_tok(pc, (uint32_t)b), tok, pc->block_size * sizeof *tok)) {
        *collision = true;
        return KV_NONE;
    }
    return b;
}

/* Full blocks of tokens[0, limit) found along the chain; h = the last
 * one's key (PREFIX_ROOT if none). With seq, each is pushed onto it. */
static uint32_t prefix_walk(const prefix_cache *pc, const int32_t *tokens, uint32_t limit, kv_seq *seq,
                        uint64_t h[2], bool *collision)
{
    const uint32_t t = pc->block_size;
    uint32_t k = 0;
    h[0] = PREFIX_ROOT[0];
    h[1] = PREFIX_ROOT[1];
    while ((uint64_t)(k + 1) * t <= limit) {
        uint64_t key[2];
        int32_t b = prefix_find_verified(pc, h, tokens + (size_t)k * t, key, collision);
        if (b == KV_NONE) break;
        if (seq) {
            int rc = kv_seq_push_block(seq, (uint32_t)b); /* the caller checked mode, boundary, max_ctx */
            assert(rc == 0);
            (void)rc;
        }
        h[0] = key[0];
        h[1] = key[1];
        k++;
    }
    return k;
}

/* Among the keyed children of parent starting with tok[0], the one sharing
 * the longest prefix with tok[0, rem): *m tokens (0 if none). Ties go to
 * the newest (list head first). */
static int32_t prefix_best_kid(const prefix_cache *pc, const uint64_t parent[2], const int32_t *tok, uint32_t rem,
                           uint32_t *m)
{
    int32_t head, best = KV_NONE;
    uint32_t best_m = 0, seen = 0;
    prefix_kids_find(pc, parent, tok[0], &head);
    for (int32_t b = head; b != KV_NONE && seen < PREFIX_PARTIAL_SCAN_MAX && best_m < rem;
         b = pc->sib_next[b], seen++) {
        const int32_t *s = prefix_tok(pc, (uint32_t)b);
        assert(s[0] == tok[0]);
        uint32_t j = 1;
        while (j < rem && s[j] == tok[j]) j++;
        if (j > best_m) {
            best_m = j;
            best = b;
        }
    }
    *m = best_m;
    return best;
}

uint32_t prefix_match_len(const prefix_cache *pc, const int32_t *tokens, uint32_t n)
{
    if (n <= 1) return 0;
    const uint32_t t = pc->block_size;
    uint64_t h[2];
    bool collision = false;
    uint32_t m = 0, done = prefix_walk(pc, tokens, n - 1, NULL, h, &collision) * t;
    uint32_t rem = n - 1 - done < t ? n - 1 - done : t;
    if (pc->partial_ok && rem > 0) prefix_best_kid(pc, h, tokens + done, rem, &m);
    return done + m;
}

uint32_t prefix_chain_keys(const prefix_cache *pc, const int32_t *tokens, uint32_t n_blocks, uint64_t (*keys)[2])
{
    const uint32_t t = pc->block_size;
    uint64_t h[2] = {PREFIX_ROOT[0], PREFIX_ROOT[1]};
    uint32_t cached = 0;
    bool run = true;
    for (uint32_t i = 0; i < n_blocks; i++) {
        const int32_t *tok = tokens + (size_t)i * t;
        prefix_key(pc, h, tok, keys[i]);
        if (run) {
            int32_t b;
            prefix_keys_find(pc, keys[i], &b);
            run = b != KV_NONE && prefix_eq(pc->parent[b], h) && !memcmp(prefix_tok(pc, (uint32_t)b), tok, t * sizeof *tok);
            cached += run;
        }
        h[0] = keys[i][0];
        h[1] = keys[i][1];
    }
    return cached;
}

/* The token-granular tail: copies the best child's block into a fresh
 * block of seq (at a block boundary) holding its m matching tokens.
 * Returns m, 0 when there is no candidate or no block for the copy. */
static uint32_t prefix_attach_tail(prefix_cache *pc, kv_seq *seq, const uint64_t parent[2], const int32_t *tok,
                               uint32_t rem)
{
    uint32_t m = 0;
    if (!pc->partial_ok || rem == 0) return 0;
    int32_t src = prefix_best_kid(pc, parent, tok, rem, &m);
    if (src == KV_NONE) return 0;
    kv_pool *pool = pc->pool;
    /* Pinning a CACHED source takes it off the LRU: one more block needed. */
    uint32_t need = 1 + (pool->blocks[src].state == KV_BLOCK_CACHED);
    if (kv_pool_available(pool) < need) return 0;
    kv_pool_acquire(pool, (uint32_t)src); /* so the new block cannot be the evicted source */
    int rc = kv_seq_reserve(seq, m);
    assert(rc == 0); /* availability checked; k x T + m < n <= max_ctx */
    (void)rc;
    kv_pool_copy_block(pool, seq->table[seq->n_blocks - 1], (uint32_t)src);
    kv_pool_decref(pool, (uint32_t)src); /* back to the LRU (most recent) if CACHED before */
    return m;
}

static void prefix_count(prefix_cache *pc, uint32_t n, uint32_t k, uint32_t m, bool is_recompute)
{
    prefix_stats *st = &pc->st;
    uint32_t hit = k * pc->block_size + m;
    if (is_recompute) {
        st->recompute_lookups++;
        st->recompute_tokens += n;
        st->recompute_hit_tokens += hit;
        return;
    }
    st->lookups++;
    st->lookups_hit += hit > 0;
    st->query_tokens += n;
    st->hit_tokens += hit;
    st->miss_tokens += n - hit;
    st->block_hits += k;
    st->partial_hits += m > 0;
    st->partial_tokens += m;
}

int prefix_attach(prefix_cache *pc, kv_seq *seq, const int32_t *tokens, uint32_t n, bool is_recompute,
              prefix_cursor *cur, uint32_t *n_hit)
{
    if (seq->pool != pc->pool) return err_set(PL_EINVAL, "prefix cache: the sequence uses another KV pool");
    if (seq->mode != KV_SEQ_PAGED) return err_set(PL_EINVAL, "prefix cache: only paged sequences take cached blocks");
    if (seq->n_tokens != 0)
        return err_set(PL_EINVAL, "prefix cache: attach to a sequence holding %u tokens (must be empty)", seq->n_tokens);
    if (n > seq->max_ctx) return err_set(PL_ERANGE, "prefix cache: %u prompt tokens > max_ctx %u", n, seq->max_ctx);
    if (n > 0 && !tokens) return err_set(PL_EINVAL, "prefix cache: no tokens");
    const uint32_t t = pc->block_size;
    uint32_t k = 0, m = 0;
    prefix_cursor_init(cur);
    if (n > 1) { /* at most n - 1: the last token is computed for its logits */
        bool collision = false;
        k = prefix_walk(pc, tokens, n - 1, seq, cur->hash, &collision);
        cur->n_blocks = k;
        pc->st.collisions += collision;
        uint32_t left = n - 1 - k * t;
        m = prefix_attach_tail(pc, seq, cur->hash, tokens + (size_t)k * t, left < t ? left : t);
    }
    prefix_count(pc, n, k, m, is_recompute);
    assert(seq->n_tokens == k * t + m);
    *n_hit = seq->n_tokens;
    return 0;
}

int64_t prefix_range_missing(const prefix_cache *pc, const uint64_t root[2], const int32_t *tokens, uint32_t first,
                             uint32_t k)
{
    const uint32_t t = pc->block_size;
    uint64_t h[2] = {root[0], root[1]};
    int64_t missing = -1;
    bool collision = false;
    for (uint32_t i = 0; i < k; i++) {
        uint64_t key[2];
        const int32_t *tok = tokens + (size_t)i * t;
        if (i >= first) {
            if (prefix_find_verified(pc, h, tok, key, &collision) == KV_NONE) missing = i;
        } else {
            prefix_key(pc, h, tok, key);
        }
        h[0] = key[0];
        h[1] = key[1];
    }
    return missing;
}

void prefix_cursor_advance(const prefix_cache *pc, prefix_cursor *cur, const int32_t *tokens, uint32_t n_blocks)
{
    for (uint32_t i = cur->n_blocks; i < n_blocks; i++) {
        uint64_t key[2];
        prefix_key(pc, cur->hash, tokens + (size_t)i * pc->block_size, key);
        cur->hash[0] = key[0];
        cur->hash[1] = key[1];
        cur->n_blocks = i + 1;
    }
}

void prefix_attach_range(prefix_cache *pc, kv_seq *seq, const int32_t *tokens, uint32_t first, uint32_t k,
                         prefix_cursor *cur)
{
    assert(seq->pool == pc->pool && seq->mode == KV_SEQ_PAGED && seq->n_tokens == 0);
    const uint32_t t = pc->block_size;
    uint64_t h[2] = {cur->root[0], cur->root[1]};
    bool collision = false;
    for (uint32_t i = 0; i < k; i++) {
        uint64_t key[2];
        const int32_t *tok = tokens + (size_t)i * t;
        if (i >= first) {
            const int32_t b = prefix_find_verified(pc, h, tok, key, &collision);
            assert(b != KV_NONE); /* the caller checked with prefix_range_missing */
            int rc = kv_seq_push_block(seq, (uint32_t)b);
            assert(rc == 0);
            (void)rc;
        } else {
            prefix_key(pc, h, tok, key);
        }
        h[0] = key[0];
        h[1] = key[1];
    }
    cur->n_blocks = k;
    cur->hash[0] = h[0];
    cur->hash[1] = h[1];
}

void prefix_count_missed(prefix_cache *pc, uint32_t n, bool is_recompute)
{
    if (is_recompute) {
        pc->st.recompute_tokens += n;
        return;
    }
    pc->st.query_tokens += n;
    pc->st.miss_tokens += n;
}

/* ------------------------------------------------------------ registering */

/* seq's full block i holds what keyed block e holds (same key): seq takes
 * e instead and releases its own copy, so one block serves both and the
 * prefix stays cached as long as either holds it. A key found with other
 * tokens is a collision: seq's block then stays unkeyed. */
static void prefix_dedupe(prefix_cache *pc, kv_seq *seq, uint32_t i, uint32_t e, const uint64_t parent[2],
                      const int32_t *tok)
{
    kv_pool *pool = pc->pool;
    if (!prefix_eq(pc->parent[e], parent) || memcmp(prefix_tok(pc, e), tok, pc->block_size * sizeof *tok)) {
        pc->st.collisions++;
        return;
    }
    uint32_t old = seq->table[i];
    assert(!(pool->blocks[old].flags & KV_BLOCK_HASHED));
    /* A full block is never written again without prepare_write, which
     * copies it if shared: swapping the table entry is safe between steps.
     * e may be CACHED: acquiring revives it. */
    kv_pool_acquire(pool, e);
    seq->table[i] = e;
    kv_pool_decref(pool, old);
    pc->st.deduped++;
}

uint32_t prefix_register(prefix_cache *pc, kv_seq *seq, const int32_t *tokens, prefix_cursor *cur)
{
    return prefix_register_at(pc, seq, tokens, 0, cur);
}

uint32_t prefix_register_at(prefix_cache *pc, kv_seq *seq, const int32_t *tokens, uint32_t base, prefix_cursor *cur)
{
    assert(seq->pool == pc->pool);
    const uint32_t t = pc->block_size, full = base + seq->n_tokens / t;
    uint32_t added = 0;
    if (seq->mode != KV_SEQ_PAGED) return 0; /* the static baseline stays uncached */
    if (cur->n_blocks > full) prefix_cursor_init_root(cur, cur->root); /* truncated without prefix_cursor_truncate */
    if (cur->n_blocks < base) return 0; /* the chain's next block is gone: nothing can be keyed */
    for (uint32_t i = cur->n_blocks; i < full; i++) {
        const int32_t *tok = tokens + (size_t)(i - base) * t;
        uint32_t b = seq->table[i - base];
        uint64_t key[2];
        int32_t e;
        prefix_key(pc, cur->hash, tok, key);
        uint32_t slot = prefix_keys_find(pc, key, &e);
        if (e == KV_NONE) {
            /* Keyed under another key would mean tokens that are not seq's. */
            assert(!(pc->pool->blocks[b].flags & KV_BLOCK_HASHED));
            if (!(pc->pool->blocks[b].flags & KV_BLOCK_HASHED)) {
                prefix_block_key(pc, b, slot, key, cur->hash, tok);
                added++;
            }
        } else if (e != (int32_t)b) {
            prefix_dedupe(pc, seq, i - base, (uint32_t)e, cur->hash, tok);
        }
        cur->hash[0] = key[0];
        cur->hash[1] = key[1];
        cur->n_blocks = i + 1;
    }
    return added;
}

/* ---------------------------------------------------------------- check */

#define PREFIX_BAD(...) err_set(PL_EFORMAT, "prefix_check: " __VA_ARGS__)

/* The keys table against the pool; counts its entries into *n_keys and
 * marks them (bit 0 of pc->mark). */
static int prefix_check_keys(const prefix_cache *pc, uint32_t *n_keys)
{
    const kv_pool *pool = pc->pool;
    for (uint32_t i = 0; i <= pc->keys_mask; i++) {
        int32_t e = pc->keys[i], f;
        if (e == KV_NONE) continue;
        if (e < 0 || (uint32_t)e >= pool->n_blocks) return PREFIX_BAD("keys slot %u: block %d out of range", i, e);
        if (pc->mark[e] & 1) return PREFIX_BAD("block %d is in the keys table twice", e);
        pc->mark[e] |= 1;
        (*n_keys)++;
        const kv_block *k = &pool->blocks[e];
        if (!(k->flags & KV_BLOCK_HASHED)) return PREFIX_BAD("block %d is in the keys table but not keyed in the pool", e);
        if (k->state == KV_BLOCK_FREE) return PREFIX_BAD("block %d is keyed but FREE", e);
        if (prefix_keys_find(pc, k->hash, &f) != i || f != e)
            return PREFIX_BAD("block %d (slot %u) is not found from its home slot, or its key is not unique", e, i);
        uint64_t key[2];
        prefix_key(pc, pc->parent[e], prefix_tok(pc, (uint32_t)e), key);
        if (!prefix_eq(key, k->hash)) return PREFIX_BAD("block %d: the key does not recompute from its parent and tokens", e);
    }
    for (uint32_t b = 0; b < pool->n_blocks; b++)
        if ((pool->blocks[b].flags & KV_BLOCK_HASHED) && !(pc->mark[b] & 1))
            return PREFIX_BAD("block %u is keyed in the pool but not in the keys table", b);
    if (*n_keys != pc->st.cached_blocks)
        return PREFIX_BAD("%u keyed blocks, stats say %u", *n_keys, pc->st.cached_blocks);
    return 0;
}

/* One kids list, from the head in slot i; counts its members into *n. */
static int prefix_check_kid_list(const prefix_cache *pc, uint32_t i, uint32_t *n)
{
    int32_t h = pc->kids[i], f, prev = KV_NONE;
    if (h < 0 || (uint32_t)h >= pc->pool->n_blocks) return PREFIX_BAD("kids slot %u: block %d out of range", i, h);
    if (prefix_kids_find(pc, pc->parent[h], prefix_tok(pc, (uint32_t)h)[0], &f) != i || f != h)
        return PREFIX_BAD("kids list of block %d (slot %u) is not found from its home slot, or is not unique", h, i);
    for (int32_t b = h; b != KV_NONE; prev = b, b = pc->sib_next[b], (*n)++) {
        if (b < 0 || (uint32_t)b >= pc->pool->n_blocks) return PREFIX_BAD("kids list %u: link %d out of range", i, b);
        if (!(pc->mark[b] & 1)) return PREFIX_BAD("block %d is on a kids list but not keyed", b);
        if (pc->mark[b] & 2) return PREFIX_BAD("block %d is met twice on the kids lists", b);
        pc->mark[b] |= 2;
        if (pc->sib_prev[b] != prev) return PREFIX_BAD("block %d: sib_prev %d, expected %d", b, pc->sib_prev[b], prev);
        if (!prefix_eq(pc->parent[b], pc->parent[h]) || prefix_tok(pc, (uint32_t)b)[0] != prefix_tok(pc, (uint32_t)h)[0])
            return PREFIX_BAD("block %d is on the kids list of block %d but has another parent or first token", b, h);
    }
    return 0;
}

int prefix_check(const prefix_cache *pc)
{
    uint32_t n_keys = 0, n_kids = 0;
    memset(pc->mark, 0, pc->pool->n_blocks);
    int rc = prefix_check_keys(pc, &n_keys);
    for (uint32_t i = 0; !rc && i <= pc->keys_mask; i++)
        if (pc->kids[i] != KV_NONE) rc = prefix_check_kid_list(pc, i, &n_kids);
    if (rc) return rc;
    if (n_kids != n_keys) return PREFIX_BAD("%u keyed blocks but %u on kids lists", n_keys, n_kids);
    return 0;
}
