/* grammar_match.c - the pushdown matcher: sets of stacks of grammar
 * positions, advanced one code point at a time (see grammar.h, gm_work.h).
 *
 * Expanding a stack replaces a top that is not a CLASS: END/ALT pops (the
 * rule is done; resume below), RULE r pushes each alternative of r above
 * the position after the reference (left out when that position ends its
 * own alternative, so right recursion x ::= a x | does not grow the
 * stack). Expansion runs off a work list, never the C stack; a step budget
 * and caps on set size and depth turn a hostile grammar into an error.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/gm_work.h"

#define GW_BUDGET (1L << 15) /* expansion steps per code point (JSON grammars need tens) */

gm_work *gm_work_new(void)
{
    gm_work *w = calloc(1, sizeof *w);
    if (!w) { err_set(PL_ENOMEM, "grammar: out of memory"); return NULL; }
    return w;
}

void gm_work_free(gm_work *w)
{
    if (!w) return;
    free(w->nodes);
    free(w->sets);
    free(w->todo);
    free(w->ht);
    free(w->ht_gen);
    free(w);
}

static int gw_fail(gm_work *w, int code, const char *what)
{
    if (!w->err) w->err = err_set(code, "grammar: %s", what);
    return w->err;
}

void gw_begin(gm_work *w)
{
    w->n_nodes = 1; /* node 0: the empty stack */
    w->n_sets = 0;
    w->budget = GW_BUDGET;
    w->err = 0;
    if (!w->cap_nodes) {
        w->nodes = malloc(1024 * sizeof *w->nodes);
        w->cap_nodes = w->nodes ? 1024 : 0;
        if (!w->nodes) { w->n_nodes = 0; gw_fail(w, PL_ENOMEM, "out of memory"); return; }
    }
    w->nodes[0] = (gw_node){0, 0, 0, 0x9E3779B97F4A7C15ull};
}

static int reserve(gm_work *w, void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 1024;
    while (nc < need) nc *= 2;
    void *nv = realloc(*v, nc * elem);
    if (!nv) return gw_fail(w, PL_ENOMEM, "out of memory");
    *v = nv;
    *cap = nc;
    return 0;
}

static uint64_t mix(uint64_t h, uint32_t pos)
{
    h ^= pos + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

/* A node (pos above up); 0 on error (w->err set). */
static uint32_t node_new(gm_work *w, uint32_t pos, uint32_t up)
{
    if (w->err) return 0;
    if (w->nodes[up].depth >= GM_MAX_DEPTH) { gw_fail(w, PL_ERANGE, "a stack deeper than 4096 (nesting too deep)"); return 0; }
    if (w->n_nodes >= UINT32_MAX - 1) { gw_fail(w, PL_ERANGE, "matcher arena full"); return 0; }
    if (reserve(w, (void **)&w->nodes, &w->cap_nodes, w->n_nodes + 1, sizeof *w->nodes)) return 0;
    const gw_node *u = &w->nodes[up];
    w->nodes[w->n_nodes] = (gw_node){pos, up, u->depth + 1, mix(u->hash, pos)};
    return (uint32_t)w->n_nodes++;
}

static bool stack_equal(const gm_work *w, uint32_t a, uint32_t b)
{
    while (a != b) {
        const gw_node *x = &w->nodes[a], *y = &w->nodes[b];
        if (x->hash != y->hash || x->depth != y->depth || x->pos != y->pos) return false;
        a = x->up;
        b = y->up;
    }
    return true;
}

/* The dedupe table's slot for top: where an equal stack sits, or the
 * empty slot to put it in. */
static size_t ht_slot(const gm_work *w, uint32_t top, bool *found)
{
    size_t h = (size_t)w->nodes[top].hash & (GW_HT - 1);
    for (;; h = (h + 1) & (GW_HT - 1)) {
        if (w->ht_gen[h] != w->gen) { *found = false; return h; }
        if (stack_equal(w, w->sets[w->ht[h] - 1], top)) { *found = true; return h; }
    }
}

static void ht_put(gm_work *w, size_t i)
{
    bool found;
    size_t h = ht_slot(w, w->sets[i], &found);
    w->ht[h] = (uint32_t)i + 1;
    w->ht_gen[h] = w->gen;
}

/* Adds top to the set being built at sets[off..n_sets), unless an equal
 * stack is there: a scan while the set is small, then a hash table. */
static void set_add(gm_work *w, size_t off, uint32_t top)
{
    const size_t n = w->n_sets - off;
    if (n < GW_HT_FROM) {
        for (size_t i = off; i < w->n_sets; i++)
            if (stack_equal(w, w->sets[i], top)) return;
    } else {
        if (!w->ht && (!(w->ht = malloc(GW_HT * sizeof *w->ht)) || !(w->ht_gen = calloc(GW_HT, sizeof *w->ht_gen)))) {
            gw_fail(w, PL_ENOMEM, "out of memory");
            return;
        }
        if (n == GW_HT_FROM || w->ht_off != off) { /* (re)load the table with this set */
            if (++w->gen == 0) { memset(w->ht_gen, 0, GW_HT * sizeof *w->ht_gen); w->gen = 1; }
            w->ht_off = off;
            for (size_t i = off; i < w->n_sets; i++) ht_put(w, i);
        }
        bool found;
        ht_slot(w, top, &found);
        if (found) return;
    }
    if (n >= GM_MAX_STACKS) { gw_fail(w, PL_ERANGE, "more than 4096 live parses (grammar too ambiguous)"); return; }
    if (reserve(w, (void **)&w->sets, &w->cap_sets, w->n_sets + 1, sizeof *w->sets)) return;
    w->sets[w->n_sets++] = top;
    if (n >= GW_HT_FROM) ht_put(w, w->n_sets - 1);
}

static void todo_push(gm_work *w, size_t *n, uint32_t node)
{
    if (reserve(w, (void **)&w->todo, &w->cap_todo, *n + 1, sizeof *w->todo)) return;
    w->todo[(*n)++] = node;
}

/* Expands node (and what it leads to) into the set at sets[off..). */
static void expand(gm_work *w, const gm_grammar *g, uint32_t node, size_t off)
{
    size_t n = 0;
    todo_push(w, &n, node);
    while (n && !w->err) {
        if (--w->budget < 0) { gw_fail(w, PL_ERANGE, "matching needs too many steps (grammar too ambiguous)"); return; }
        uint32_t t = w->todo[--n];
        if (t == 0) { set_add(w, off, 0); continue; }
        const gw_node nd = w->nodes[t];
        const gm_elem e = g->el[nd.pos];
        if (e.type == GE_CLASS) set_add(w, off, t);
        else if (e.type == GE_END || e.type == GE_ALT) todo_push(w, &n, nd.up);
        else {
            const uint32_t ret = nd.pos + 1, rt = g->el[ret].type;
            uint32_t base = (rt == GE_END || rt == GE_ALT) ? nd.up : node_new(w, ret, nd.up);
            for (uint32_t i = g->rule_start[e.v];; i++) {
                uint32_t a = node_new(w, i, base);
                if (w->err) return;
                todo_push(w, &n, a);
                while (g->el[i].type != GE_ALT && g->el[i].type != GE_END) i++;
                if (g->el[i].type == GE_END) break;
            }
        }
    }
}

int gw_advance(gm_work *w, const gm_grammar *g, gw_set in, uint32_t cp, gw_set *out)
{
    w->budget = GW_BUDGET; /* per code point: a mask advances once per trie node */
    out->off = w->n_sets;
    for (size_t i = 0; i < in.n && !w->err; i++) {
        uint32_t t = w->sets[in.off + i];
        if (t == 0) continue;
        const gw_node nd = w->nodes[t];
        if (!gm_class_match(g, g->el[nd.pos].v, cp)) continue;
        uint32_t nx = node_new(w, nd.pos + 1, nd.up);
        if (!w->err) expand(w, g, nx, out->off);
    }
    out->n = w->n_sets - out->off;
    return w->err;
}

/* Whether [lo, hi] holds a code point class k matches. */
static bool class_meets(const gm_grammar *g, uint32_t k, uint32_t lo, uint32_t hi)
{
    const gm_class *c = &g->cls[k];
    if (!c->neg) {
        for (uint32_t i = 0; i < c->n; i++)
            if (g->rng[c->off + i].lo <= hi && g->rng[c->off + i].hi >= lo) return true;
        return false;
    }
    /* negated: true unless the ranges cover [lo, hi] entirely */
    for (uint32_t cur = lo;;) {
        bool moved = false;
        for (uint32_t i = 0; i < c->n; i++) {
            const gm_range *r = &g->rng[c->off + i];
            if (r->lo <= cur && r->hi >= cur) {
                if (r->hi >= hi) return false;
                cur = r->hi + 1;
                moved = true;
            }
        }
        if (!moved) return true;
    }
}

bool gw_any_in_range(const gm_work *w, const gm_grammar *g, gw_set in, uint32_t lo, uint32_t hi)
{
    for (size_t i = 0; i < in.n; i++) {
        uint32_t t = w->sets[in.off + i];
        if (t && class_meets(g, g->el[w->nodes[t].pos].v, lo, hi)) return true;
    }
    return false;
}

bool gw_has_empty(const gm_work *w, gw_set in)
{
    for (size_t i = 0; i < in.n; i++)
        if (w->sets[in.off + i] == 0) return true;
    return false;
}

int gw_load(gm_work *w, const gm_state *s, gw_set *out)
{
    out->off = w->n_sets;
    for (size_t i = 0; i < s->n_flat && !w->err;) {
        uint32_t d = s->flat[i];
        uint32_t up = 0;
        for (uint32_t k = d; k > 0; k--) up = node_new(w, s->flat[i + k], up);
        if (!w->err) set_add(w, out->off, up);
        i += 1 + d;
    }
    out->n = w->n_sets - out->off;
    return w->err;
}

int gw_store(gm_work *w, gw_set in, gm_state *s)
{
    size_t need = 0;
    for (size_t i = 0; i < in.n; i++) need += 1 + w->nodes[w->sets[in.off + i]].depth;
    if (need > s->cap) {
        uint32_t *nf = realloc(s->flat, need * sizeof *nf);
        if (!nf) return gw_fail(w, PL_ENOMEM, "out of memory");
        s->flat = nf;
        s->cap = need;
    }
    size_t k = 0;
    for (size_t i = 0; i < in.n; i++) {
        uint32_t t = w->sets[in.off + i];
        s->flat[k++] = w->nodes[t].depth;
        for (; t; t = w->nodes[t].up) s->flat[k++] = w->nodes[t].pos;
    }
    s->n_flat = k;
    return 0;
}

/* ------------------------------------------------------------- states */

int gm_state_init(gm_state *s, const gm_grammar *g, gm_work *w)
{
    gw_begin(w);
    memset(s, 0, sizeof *s);
    gw_set st = {w->n_sets, 0};
    /* a pseudo-stack at the root rule's alternatives */
    for (uint32_t i = g->rule_start[g->root]; !w->err; i++) {
        expand(w, g, node_new(w, i, 0), st.off);
        while (g->el[i].type != GE_ALT && g->el[i].type != GE_END) i++;
        if (g->el[i].type == GE_END) break;
    }
    st.n = w->n_sets - st.off;
    if (!w->err) gw_store(w, st, s);
    if (w->err) { gm_state_free(s); return w->err; }
    return 0;
}

void gm_state_free(gm_state *s)
{
    free(s->flat);
    memset(s, 0, sizeof *s);
}

int gm_state_copy(gm_state *dst, const gm_state *src)
{
    uint32_t *f = malloc((src->n_flat ? src->n_flat : 1) * sizeof *f);
    if (!f) return err_set(PL_ENOMEM, "grammar: out of memory");
    if (src->n_flat) memcpy(f, src->flat, src->n_flat * sizeof *f);
    *dst = *src;
    dst->flat = f;
    dst->cap = src->n_flat ? src->n_flat : 1;
    return 0;
}

bool gm_state_accepting(const gm_state *s)
{
    if (s->part_left) return false;
    for (size_t i = 0; i < s->n_flat; i += 1 + s->flat[i])
        if (s->flat[i] == 0) return true;
    return false;
}

bool gm_state_can_continue(const gm_state *s)
{
    for (size_t i = 0; i < s->n_flat; i += 1 + s->flat[i])
        if (s->flat[i] != 0) return true;
    return false;
}

int gm_state_advance(gm_state *s, const gm_grammar *g, gm_work *w, const char *bytes, size_t n)
{
    gw_begin(w);
    gw_set cur;
    if (gw_load(w, s, &cur)) return w->err;
    uint32_t part = s->part_cp;
    uint8_t left = s->part_left, len = s->part_len;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        int r = gw_utf8_step(&part, &left, &len, (uint8_t)bytes[i], &cp);
        if (r < 0) return 0;
        if (r == 0) {
            uint32_t lo, hi;
            gw_utf8_range(part, left, len, &lo, &hi);
            if (!gw_any_in_range(w, g, cur, lo, hi)) return 0;
            continue;
        }
        gw_set nx;
        if (gw_advance(w, g, cur, cp, &nx)) return w->err;
        if (nx.n == 0) return 0;
        cur = nx;
    }
    if (gw_store(w, cur, s)) return w->err;
    s->part_cp = part;
    s->part_left = left;
    s->part_len = len;
    return 1;
}

int gm_match_string(const gm_grammar *g, const char *text, size_t len)
{
    gm_work *w = gm_work_new();
    if (!w) return PL_ENOMEM;
    gm_state s;
    int rc = gm_state_init(&s, g, w);
    if (!rc) {
        rc = gm_state_advance(&s, g, w, text, len);
        if (rc == 1) rc = gm_state_accepting(&s);
        gm_state_free(&s);
    }
    gm_work_free(w);
    return rc;
}
