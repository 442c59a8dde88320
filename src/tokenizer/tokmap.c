/* tokmap.c - the small containers of the tokenizer: a string -> id hash map,
 * a pair -> rank hash map, a growable id vector, a per-call word cache and
 * the (4-ary) heap of candidate merges.
 *
 * Invariants: both maps use linear probing over a power-of-two table kept at
 * most half full, so a probe always ends at an empty slot. The heap pops the
 * smallest key (see tok_bigram), which is llama.cpp's merge order.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

/* header-only XXH3: inlined into the lookups, no link dependency */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* Token texts are short; XXH3 is fast on short keys (DESIGN.md: hashing
 * comes from xxhash). */
uint64_t tok_hash_bytes(const char *s, size_t n) { return XXH3_64bits(s, n); }

static size_t cap_for(size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 2) cap *= 2;
    return cap;
}

int tok_strmap_init(tok_strmap *m, size_t expected)
{
    m->cap = cap_for(expected);
    m->count = 0;
    m->slots = malloc(m->cap * sizeof *m->slots);
    if (!m->slots) return err_set(PL_ENOMEM, "tokenizer: out of memory for a map of %zu strings", expected);
    for (size_t i = 0; i < m->cap; i++) m->slots[i].val = -1;
    return 0;
}

void tok_strmap_free(tok_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}

static int strmap_grow(tok_strmap *m)
{
    tok_strmap bigger = {0};
    int rc = tok_strmap_init(&bigger, m->cap);
    if (rc) return rc;
    for (size_t i = 0; i < m->cap; i++) {
        const tok_strmap_slot *s = &m->slots[i];
        if (s->val < 0) continue;
        size_t j = s->hash & (bigger.cap - 1);
        while (bigger.slots[j].val >= 0) j = (j + 1) & (bigger.cap - 1);
        bigger.slots[j] = *s;
    }
    bigger.count = m->count;
    free(m->slots);
    *m = bigger;
    return 0;
}

int tok_strmap_put(tok_strmap *m, const char *s, size_t len, int32_t val)
{
    if ((m->count + 1) * 2 > m->cap) {
        int rc = strmap_grow(m);
        if (rc) return rc;
    }
    uint64_t h = tok_hash_bytes(s, len);
    size_t i = h & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        tok_strmap_slot *sl = &m->slots[i];
        if (sl->val < 0) break;
        if (sl->hash == h && sl->len == len && memcmp(sl->s, s, len) == 0) {
            sl->val = val;
            return 0;
        }
    }
    m->slots[i] = (tok_strmap_slot){s, (uint32_t)len, val, h};
    m->count++;
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t len)
{
    uint64_t h = tok_hash_bytes(s, len);
    for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        const tok_strmap_slot *sl = &m->slots[i];
        if (sl->val < 0) return -1;
        if (sl->hash == h && sl->len == len && memcmp(sl->s, s, len) == 0) return sl->val;
    }
}

static size_t pair_slot(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key & (cap - 1);
}

int tok_pairmap_init(tok_pairmap *m, size_t expected)
{
    m->cap = cap_for(expected);
    m->count = 0;
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->vals = malloc(m->cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        tok_pairmap_free(m);
        return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu merges", expected);
    }
    memset(m->keys, 0xff, m->cap * sizeof *m->keys);
    return 0;
}

void tok_pairmap_free(tok_pairmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->count = 0;
}

/* Callers size the map for every key up front (tok_pairmap_init), so it
 * never needs to grow; a full map is a caller bug. */
int tok_pairmap_add(tok_pairmap *m, uint64_t key, int32_t val)
{
    if ((m->count + 1) * 2 > m->cap) return err_set(PL_EFULL, "tokenizer: merge map full");
    size_t i = pair_slot(key, m->cap);
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == key) return 0;
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
    return 0;
}

int32_t tok_pairmap_get(const tok_pairmap *m, uint64_t key)
{
    if (!m->cap) return -1;
    for (size_t i = pair_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (m->keys[i] == UINT64_MAX) return -1;
    }
}

int tok_ids_push(tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *nv = realloc(ids->v, cap * sizeof *nv);
        if (!nv) return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu token ids", cap);
        ids->v = nv;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

int tok_cache_get(const tok_cache *c, const char *word, size_t len, tok_ids *out)
{
    if (!c->n || len > TOK_CACHE_MAX_WORD) return 0;
    int32_t i = tok_strmap_get(&c->map, word, len);
    if (i < 0) return 0;
    const int32_t *ids = c->ids.v + c->spans[2 * i];
    for (uint32_t k = 0; k < c->spans[2 * i + 1]; k++)
        if (tok_ids_push(out, ids[k])) return -1;
    return 1;
}

void tok_cache_put(tok_cache *c, const char *word, size_t len, const int32_t *ids, size_t n)
{
    if (len > TOK_CACHE_MAX_WORD || c->n >= TOK_CACHE_MAX) return;
    if (!c->map.slots && tok_strmap_init(&c->map, 1024)) return;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1024;
        uint32_t *ns = realloc(c->spans, cap * 2 * sizeof *ns);
        if (!ns) return;
        c->spans = ns;
        c->cap = cap;
    }
    size_t at = c->ids.n;
    for (size_t k = 0; k < n; k++)
        if (tok_ids_push(&c->ids, ids[k])) {
            c->ids.n = at;
            return;
        }
    if (tok_strmap_put(&c->map, word, len, (int32_t)c->n)) {
        c->ids.n = at;
        return;
    }
    c->spans[2 * c->n] = (uint32_t)at;
    c->spans[2 * c->n + 1] = (uint32_t)n;
    c->n++;
}

void tok_cache_free(tok_cache *c)
{
    tok_strmap_free(&c->map);
    free(c->spans);
    free(c->ids.v);
    memset(c, 0, sizeof *c);
}

/* a goes before b. */
static bool heap_before(const tok_bigram *a, const tok_bigram *b) { return a->key < b->key; }

/* A 4-ary heap: half the depth of a binary one, and the four children of a
 * node share about one cache line, which matters once a giant word puts
 * millions of candidates on the heap. */
int tok_heap_push(tok_heap *h, tok_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tok_bigram *nv = realloc(h->v, cap * sizeof *nv);
        if (!nv) return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu merge candidates", cap);
        h->v = nv;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 4;
        if (!heap_before(&b, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = b;
    return 0;
}

tok_bigram tok_heap_pop(tok_heap *h)
{
    tok_bigram top = h->v[0];
    tok_bigram last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 4 * i + 1, end = c + 4 < n ? c + 4 : n;
        if (c >= n) break;
        size_t best = c;
        for (size_t k = c + 1; k < end; k++)
            if (heap_before(&h->v[k], &h->v[best])) best = k;
        if (!heap_before(&h->v[best], &last)) break;
        h->v[i] = h->v[best];
        i = best;
    }
    if (n) h->v[i] = last;
    return top;
}

int tok_merge_all(tok_symbol *sym, size_t n, tok_heap *heap, tok_pair_fn pair, tok_merged_fn merged, void *ctx)
{
    int rc = 0;
    for (int32_t i = 1; !rc && i < (int32_t)n; i++) rc = pair(ctx, i - 1, i);
    while (!rc && heap->n) {
        tok_bigram b = tok_heap_pop(heap);
        int32_t left = tok_bigram_left(b);
        tok_symbol *l = &sym[left], *r = &sym[b.right];
        if (!l->len || !r->len || l->len + r->len != b.size) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = left;
        if (merged) merged(ctx, l);
        rc = pair(ctx, l->prev, left);
        if (!rc) rc = pair(ctx, left, l->next);
    }
    return rc;
}
