/* gm_work.h - the matcher's scratch, shared by grammar_match.c and
 * grammar_mask.c (internal to src/grammar).
 *
 * Stacks live in an arena of nodes linked towards the bottom; node 0 is
 * the empty stack. A set of stacks is a run of top-node indices in a
 * second arena. Both arenas only grow and are reset to a mark, so the
 * trie walk can keep one set per depth and drop a subtree's work at once.
 * Indices (never pointers) survive the arenas' reallocation.
 *
 *   nodes: [0: empty][pos,up,depth,hash][...]    sets: [top top top][top]...
 */
#ifndef PL_GRAMMAR_GM_WORK_H
#define PL_GRAMMAR_GM_WORK_H

#include "grammar/grammar.h"

typedef struct {
    uint32_t pos;   /* element position (a CLASS once expanded) */
    uint32_t up;    /* the node below, 0 = bottom */
    uint32_t depth; /* positions in the stack */
    uint64_t hash;  /* of (pos, up's hash): equal stacks hash equal */
} gw_node;

#define GW_HT 16384 /* > 2 x GM_MAX_STACKS, a power of two */
#define GW_HT_FROM 16 /* sets smaller than this are deduplicated by a scan */

struct gm_work {
    gw_node *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *sets;
    size_t n_sets, cap_sets;
    uint32_t *todo;  /* expansion work list */
    size_t cap_todo;
    uint32_t *ht;    /* [GW_HT] stack-dedupe table of the set being built: sets index + 1 */
    uint32_t *ht_gen;/* [GW_HT] generation of each slot (a slot of an older one is empty) */
    uint32_t gen;
    size_t ht_off;   /* the set the table holds (its offset in sets) */
    long budget;     /* expansion steps left for this code point */
    int err;         /* the first error of this operation (0: none) */
};

typedef struct {
    size_t off, n; /* sets[off .. off+n) */
} gw_set;

/* Arena marks. */
static inline void gw_reset(gm_work *w, size_t nodes, size_t sets)
{
    w->n_nodes = nodes;
    w->n_sets = sets;
}

/* Clears both arenas and arms the step budget. */
void gw_begin(gm_work *w);
/* The set of s's stacks, rebuilt in the arena. */
int gw_load(gm_work *w, const gm_state *s, gw_set *out);
/* The stacks of in advanced by code point cp (possibly empty). */
int gw_advance(gm_work *w, const gm_grammar *g, gw_set in, uint32_t cp, gw_set *out);
/* Whether some stack's top class takes a code point in [lo, hi]. */
bool gw_any_in_range(const gm_work *w, const gm_grammar *g, gw_set in, uint32_t lo, uint32_t hi);
bool gw_has_empty(const gm_work *w, gw_set in);
/* Writes the set into s (stacks only; the partial char is the caller's). */
int gw_store(gm_work *w, gw_set in, gm_state *s);

/* One byte of UTF-8 into a pending code point: 1 = cp complete in *cp,
 * 0 = still pending, -1 = invalid. */
static inline int gw_utf8_step(uint32_t *part, uint8_t *left, uint8_t *len, uint8_t b, uint32_t *cp)
{
    if (*left == 0) {
        if (b < 0x80) { *cp = b; return 1; }
        int n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
        if (!n || b == 0xC0 || b == 0xC1 || b > 0xF4) return -1;
        *part = b & (0x7Fu >> n);
        *left = (uint8_t)(n - 1);
        *len = (uint8_t)n;
        return 0;
    }
    if ((b & 0xC0) != 0x80) return -1;
    *part = *part << 6 | (b & 0x3Fu);
    if (--*left) return 0;
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t v = *part;
    if (v < min[*len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return -1;
    *cp = v;
    return 1;
}

/* The code points a pending sequence of len bytes can still become (no
 * overlong forms: E0 needs at least U+0800, F0 at least U+10000). */
static inline void gw_utf8_range(uint32_t part, uint8_t left, uint8_t len, uint32_t *lo, uint32_t *hi)
{
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    *lo = part << (6 * left);
    if (len <= 4 && *lo < min[len]) *lo = min[len];
    *hi = *lo | ((1u << (6 * left)) - 1);
    if (*hi > 0x10FFFF) *hi = 0x10FFFF;
}

#endif
