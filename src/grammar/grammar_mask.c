/* grammar_mask.c - which tokens a grammar state allows, by one walk of a
 * trie over the vocabulary's decoded bytes.
 *
 * The trie is stored in preorder; each node knows its depth and where its
 * subtree ends (skip), so the walk is a loop: a node whose byte the
 * grammar rejects jumps to skip, pruning every token that shares the
 * prefix. The walk keeps one stack set per depth (gm_work arenas, reset to
 * the parent's mark before each node), so a token of k bytes costs at
 * most k code-point advances and a shared prefix is advanced once.
 *
 *   nodes[i]: byte, depth, skip, tok_lo..tok_hi (ids in sorted order)
 *   "a"  "ab"  "b"   ->   [root][a: tok "a"][b: tok "ab"][b: tok "b"]
 *
 * States recur (every token inside a JSON string leaves the same stacks),
 * so a small cache keyed by the flattened state returns their masks.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/gm_work.h"

typedef struct {
    uint32_t skip;           /* first node after this subtree */
    uint32_t tok_lo, tok_hi; /* sorted[tok_lo..tok_hi): tokens ending here */
    uint32_t sub_lo, sub_hi; /* sorted[sub_lo..sub_hi): every token of the subtree */
    uint16_t depth;          /* bytes from the root (root: 0) */
    uint8_t byte;
    bool desc_high;          /* a byte >= 0x80 below this node */
    bool desc_bad;           /* a token of the subtree is not UTF-8 (nor a valid start of it) */
    uint64_t desc[2];        /* the ASCII bytes below this node */
} trie_node;

struct gm_trie {
    trie_node *nodes;  /* [n_nodes] preorder */
    uint32_t n_nodes;
    int32_t *sorted;   /* token ids in byte order */
    int32_t *eog;      /* [n_eog] end-of-generation ids */
    int32_t n_eog;
    int32_t n_tokens;  /* vocabulary size (mask bits) */
    uint16_t max_depth;
};

typedef struct {
    const char *const *pieces;
    const size_t *lens;
} sort_ctx;

static int piece_cmp(const void *a, const void *b, void *ctx)
{
    const sort_ctx *c = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = c->lens[x], ly = c->lens[y], m = lx < ly ? lx : ly;
    int r = memcmp(c->pieces[x], c->pieces[y], m);
    if (r) return r;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

#define TRIE_MAX_PIECE 65535

int gm_trie_new(gm_trie **out, const char *const *pieces, const size_t *lens, const bool *eog, int32_t n)
{
    gm_trie *t = calloc(1, sizeof *t);
    size_t total = 1;
    for (int32_t i = 0; i < n; i++) total += lens[i] < TRIE_MAX_PIECE ? lens[i] : 0;
    if (t) {
        t->sorted = malloc(((size_t)n + 1) * sizeof *t->sorted);
        t->eog = malloc(((size_t)n + 1) * sizeof *t->eog);
        t->nodes = malloc(total * sizeof *t->nodes);
    }
    uint32_t *path = malloc((TRIE_MAX_PIECE + 1) * sizeof *path);
    if (!t || !t->sorted || !t->eog || !t->nodes || !path) {
        free(path);
        gm_trie_free(t);
        return err_set(PL_ENOMEM, "grammar: out of memory (token trie)");
    }
    t->n_tokens = n;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (eog[i]) t->eog[t->n_eog++] = i;
        else if (lens[i] > 0 && lens[i] < TRIE_MAX_PIECE) t->sorted[m++] = i;
    }
    sort_ctx sc = {pieces, lens};
    qsort_r(t->sorted, (size_t)m, sizeof *t->sorted, piece_cmp, &sc);
    uint32_t *parent = malloc(total * sizeof *parent);
    if (!parent) {
        free(path);
        gm_trie_free(t);
        return err_set(PL_ENOMEM, "grammar: out of memory (token trie)");
    }
    t->nodes[0] = (trie_node){.skip = 0};
    parent[0] = 0;
    t->n_nodes = 1;
    path[0] = 0;
    size_t plen = 0; /* bytes on the current path */
    const char *prev = "";
    for (int32_t k = 0; k < m; k++) {
        int32_t id = t->sorted[k];
        const char *s = pieces[id];
        size_t len = lens[id], l = 0;
        while (l < len && l < plen && s[l] == prev[l]) l++;
        for (size_t d = plen; d > l; d--) { /* close */
            t->nodes[path[d]].skip = t->n_nodes;
            t->nodes[path[d]].sub_hi = (uint32_t)k;
        }
        for (size_t d = l; d < len; d++) {
            uint32_t x = t->n_nodes++;
            t->nodes[x] = (trie_node){.tok_lo = (uint32_t)k, .tok_hi = (uint32_t)k, .sub_lo = (uint32_t)k,
                                      .depth = (uint16_t)(d + 1), .byte = (uint8_t)s[d]};
            parent[x] = path[d];
            path[d + 1] = x;
        }
        plen = len;
        prev = s;
        trie_node *end = &t->nodes[path[len]];
        if (end->tok_hi == end->tok_lo) end->tok_lo = (uint32_t)k;
        end->tok_hi = (uint32_t)k + 1;
        if (len > t->max_depth) t->max_depth = (uint16_t)len;
    }
    for (size_t d = plen; d > 0; d--) {
        t->nodes[path[d]].skip = t->n_nodes;
        t->nodes[path[d]].sub_hi = (uint32_t)m;
    }
    t->nodes[0].skip = t->n_nodes;
    t->nodes[0].sub_hi = (uint32_t)m;
    /* what lies below each node: children come after their parent */
    for (uint32_t x = t->n_nodes; x-- > 1;) {
        trie_node *c = &t->nodes[x], *pa = &t->nodes[parent[x]];
        pa->desc[0] |= c->desc[0];
        pa->desc[1] |= c->desc[1];
        pa->desc_high |= c->desc_high || c->byte >= 0x80;
        if (c->byte < 0x80) pa->desc[c->byte >> 6] |= 1ull << (c->byte & 63);
    }
    /* tokens that are not (the start of) valid UTF-8, counted in sorted order */
    uint32_t *bad = malloc(((size_t)m + 1) * sizeof *bad);
    if (!bad) {
        free(parent);
        free(path);
        gm_trie_free(t);
        return err_set(PL_ENOMEM, "grammar: out of memory (token trie)");
    }
    bad[0] = 0;
    for (int32_t k = 0; k < m; k++) {
        const char *p = pieces[t->sorted[k]];
        uint32_t part = 0, cp;
        uint8_t left = 0, ulen = 0;
        bool ok = true;
        for (size_t j = 0; j < lens[t->sorted[k]] && ok; j++) ok = gw_utf8_step(&part, &left, &ulen, (uint8_t)p[j], &cp) >= 0;
        bad[k + 1] = bad[k] + !ok;
    }
    for (uint32_t x = 0; x < t->n_nodes; x++) t->nodes[x].desc_bad = bad[t->nodes[x].sub_hi] > bad[t->nodes[x].sub_lo];
    free(bad);
    free(parent);
    free(path);
    *out = t;
    return 0;
}

void gm_trie_free(gm_trie *t)
{
    if (!t) return;
    free(t->nodes);
    free(t->sorted);
    free(t->eog);
    free(t);
}

int32_t gm_trie_n_tokens(const gm_trie *t) { return t->n_tokens; }

/* ---------------------------------------------------------------- cache */

#define CACHE_SLOTS 16

typedef struct {
    uint32_t *key;     /* flat stacks, then part_cp, part_left, part_len */
    size_t n_key;
    uint64_t *bits;
    size_t n_words;
    int32_t n_allowed;
    uint64_t used;     /* last use (LRU) */
} cache_slot;

struct gm_mask_cache {
    cache_slot slot[CACHE_SLOTS];
    uint64_t clock;
};

gm_mask_cache *gm_mask_cache_new(void)
{
    gm_mask_cache *c = calloc(1, sizeof *c);
    if (!c) err_set(PL_ENOMEM, "grammar: out of memory");
    return c;
}

void gm_mask_cache_free(gm_mask_cache *c)
{
    if (!c) return;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        free(c->slot[i].key);
        free(c->slot[i].bits);
    }
    free(c);
}

static bool key_eq(const cache_slot *e, const gm_state *s)
{
    return e->n_key == s->n_flat + 3 && (!s->n_flat || memcmp(e->key, s->flat, s->n_flat * sizeof *s->flat) == 0) &&
           e->key[s->n_flat] == s->part_cp && e->key[s->n_flat + 1] == s->part_left &&
           e->key[s->n_flat + 2] == s->part_len;
}

static cache_slot *cache_find(gm_mask_cache *c, const gm_state *s, size_t words)
{
    for (int i = 0; c && i < CACHE_SLOTS; i++)
        if (c->slot[i].bits && c->slot[i].n_words == words && key_eq(&c->slot[i], s)) {
            c->slot[i].used = ++c->clock;
            return &c->slot[i];
        }
    return NULL;
}

static void cache_put(gm_mask_cache *c, const gm_state *s, const uint64_t *bits, size_t words, int32_t n_allowed)
{
    if (!c) return;
    cache_slot *e = &c->slot[0];
    for (int i = 1; i < CACHE_SLOTS; i++)
        if (c->slot[i].used < e->used) e = &c->slot[i];
    uint32_t *key = malloc((s->n_flat + 3) * sizeof *key);
    uint64_t *b = e->n_words == words && e->bits ? e->bits : malloc(words * sizeof *b);
    if (!key || !b) { /* a cache miss next time, nothing worse */
        free(key);
        if (b != e->bits) free(b);
        return;
    }
    if (s->n_flat) memcpy(key, s->flat, s->n_flat * sizeof *key);
    key[s->n_flat] = s->part_cp;
    key[s->n_flat + 1] = s->part_left;
    key[s->n_flat + 2] = s->part_len;
    free(e->key);
    if (b != e->bits) free(e->bits);
    memcpy(b, bits, words * sizeof *b);
    *e = (cache_slot){key, s->n_flat + 3, b, words, n_allowed, ++c->clock};
}

/* ----------------------------------------------------------------- walk */

typedef struct {
    gw_set set;
    size_t node_mark, set_mark; /* arena ends once this level's set is made */
    uint32_t part;
    uint8_t left, len;
    int self_known;             /* 0: self[] not computed yet for this set */
    uint64_t self[2];           /* ASCII code points that lead from set back to set */
    bool self_high;             /* ... and so does every code point >= 0x80 */
} level;

#define SELF_MAX_STACKS 32 /* sets above this many stacks get no self[] */

/* Whether sets a and b hold the same stacks. */
static bool set_equal(const gm_work *w, gw_set a, gw_set b)
{
    if (a.n != b.n) return false;
    for (size_t i = 0; i < a.n; i++) {
        bool found = false;
        for (size_t j = 0; j < b.n && !found; j++) {
            uint32_t x = w->sets[a.off + i], y = w->sets[b.off + j];
            while (x != y) {
                const gw_node *p = &w->nodes[x], *q = &w->nodes[y];
                if (p->hash != q->hash || p->depth != q->depth || p->pos != q->pos) break;
                x = p->up;
                y = q->up;
            }
            found = x == y;
        }
        if (!found) return false;
    }
    return true;
}

/* lv->self: the ASCII code points whose advance gives lv->set back (the
 * inside of a JSON string: every plain character). The matcher sees a
 * code point only through class membership, so this is exact. */
static int level_self(const gm_grammar *g, gm_work *w, level *lv)
{
    lv->self[0] = lv->self[1] = 0;
    lv->self_high = false;
    lv->self_known = 1;
    if (lv->set.n > SELF_MAX_STACKS) return 0; /* ambiguous: not worth 130 advances, none assumed */
    for (uint32_t cp = 0; cp < 128; cp++) {
        gw_set nx;
        if (gw_advance(w, g, lv->set, cp, &nx)) return w->err;
        if (nx.n && set_equal(w, nx, lv->set)) lv->self[cp >> 6] |= 1ull << (cp & 63);
        gw_reset(w, lv->node_mark, lv->set_mark);
    }
    lv->self_high = g->high_rep != NULL;
    for (uint32_t i = 0; lv->self_high && i < g->n_high_rep; i++) {
        gw_set nx;
        if (gw_advance(w, g, lv->set, g->high_rep[i], &nx)) return w->err;
        lv->self_high = nx.n && set_equal(w, nx, lv->set);
        gw_reset(w, lv->node_mark, lv->set_mark);
    }
    lv->self_known = 1;
    return 0;
}

/* A fresh set's self[] is worked out (about 130 advances) only above a
 * subtree of this many tokens; inherited ones are free. */
#define SHORTCUT_MIN_TOKENS 64

static int walk(const gm_grammar *g, const gm_trie *t, gm_work *w, level *lv, uint64_t *bits, int32_t *n_allowed)
{
    for (uint32_t i = 1; i < t->n_nodes;) {
        const trie_node *nd = &t->nodes[i];
        const level *up = &lv[nd->depth - 1];
        level *me = &lv[nd->depth];
        gw_reset(w, up->node_mark, up->set_mark);
        me->part = up->part;
        me->left = up->left;
        me->len = up->len;
        uint32_t cp = 0;
        int r = gw_utf8_step(&me->part, &me->left, &me->len, nd->byte, &cp);
        if (r < 0) {
            i = nd->skip;
            continue;
        }
        /* the parent's set is known to come back for this byte: no work */
        bool same = up->self_known && ((up->self_high && (r == 0 || cp >= 0x80)) ||
                                       (r == 1 && cp < 0x80 && ((up->self[cp >> 6] >> (cp & 63)) & 1)));
        if (!same && r == 0) {
            uint32_t lo, hi;
            gw_utf8_range(me->part, me->left, me->len, &lo, &hi);
            if (!gw_any_in_range(w, g, up->set, lo, hi)) {
                i = nd->skip;
                continue;
            }
            same = true; /* a pending character leaves the set as it is */
        } else if (!same) {
            if (gw_advance(w, g, up->set, cp, &me->set)) return w->err;
            if (me->set.n == 0) {
                i = nd->skip;
                continue;
            }
            if (set_equal(w, me->set, up->set)) {
                gw_reset(w, up->node_mark, up->set_mark);
                same = true;
            }
        }
        if (same) { /* a loop: the parent's set, and what is known of it */
            me->set = up->set;
            me->self_known = up->self_known;
            me->self[0] = up->self[0];
            me->self[1] = up->self[1];
            me->self_high = up->self_high;
        } else me->self_known = 0;
        me->node_mark = w->n_nodes;
        me->set_mark = w->n_sets;
        /* every code point below keeps the set: the whole subtree is
         * allowed (valid UTF-8 from a character boundary here, which
         * holds when the walk began on one: lv[0].left == 0) */
        const uint32_t below = nd->sub_hi - nd->sub_lo;
        if (me->left == 0 && lv[0].left == 0 && !nd->desc_bad && below >= 2 &&
            (me->self_known || below >= SHORTCUT_MIN_TOKENS)) {
            if (!me->self_known && level_self(g, w, me)) return w->err;
            if ((nd->desc[0] & ~me->self[0]) == 0 && (nd->desc[1] & ~me->self[1]) == 0 &&
                (!nd->desc_high || me->self_high)) {
                for (uint32_t k = nd->sub_lo; k < nd->sub_hi; k++) {
                    int32_t id = t->sorted[k];
                    bits[id >> 6] |= 1ull << (id & 63);
                }
                *n_allowed += (int32_t)below;
                i = nd->skip;
                continue;
            }
        }
        for (uint32_t k = nd->tok_lo; k < nd->tok_hi; k++) {
            int32_t id = t->sorted[k];
            bits[id >> 6] |= 1ull << (id & 63);
            (*n_allowed)++;
        }
        i++;
    }
    return 0;
}

int gm_mask(const gm_grammar *g, const gm_trie *t, const gm_state *s, gm_work *w, gm_mask_cache *cache,
            uint64_t *bits, int32_t *n_allowed)
{
    const size_t words = ((size_t)t->n_tokens + 63) / 64;
    const cache_slot *hit = cache_find(cache, s, words);
    if (hit) {
        memcpy(bits, hit->bits, words * sizeof *bits);
        *n_allowed = hit->n_allowed;
        return 0;
    }
    memset(bits, 0, words * sizeof *bits);
    *n_allowed = 0;
    level *lv = calloc((size_t)t->max_depth + 1, sizeof *lv);
    if (!lv) return err_set(PL_ENOMEM, "grammar: out of memory");
    gw_begin(w);
    int rc = gw_load(w, s, &lv[0].set);
    lv[0].node_mark = w->n_nodes;
    lv[0].set_mark = w->n_sets;
    lv[0].part = s->part_cp;
    lv[0].left = s->part_left;
    lv[0].len = s->part_len;
    lv[0].self_known = 0;
    if (!rc) rc = level_self(g, w, &lv[0]);
    if (!rc) rc = walk(g, t, w, lv, bits, n_allowed);
    if (!rc && gm_state_accepting(s))
        for (int32_t k = 0; k < t->n_eog; k++) {
            bits[t->eog[k] >> 6] |= 1ull << (t->eog[k] & 63);
            (*n_allowed)++;
        }
    free(lv);
    if (rc) return rc;
    cache_put(cache, s, bits, words, *n_allowed);
    return 0;
}
