/* grammar.h - GBNF grammars, their pushdown matcher, the token mask over a
 * vocabulary trie, and the JSON-schema compiler that emits GBNF.
 *
 * A compiled grammar is a flat array of elements, one run per rule:
 *
 *   el: [CLASS a][RULE r][ALT][CLASS b][END]   [CLASS c][RULE r][END] ...
 *        ^ rule 0, alternative 1  ^ alt 2     ^ rule 1
 *
 * CLASS v names cls[v] (code-point ranges, maybe negated; a literal char is
 * a one-range class); RULE v refers to rule v; ALT ends an alternative;
 * END ends the rule. Repetitions and groups are rewritten into generated
 * rules at parse time, so the matcher knows only these four kinds.
 *
 * Matcher state: a set of stacks of element positions. A stack's top is
 * the CLASS the next code point must match; the positions below are where
 * to resume when the rules above finish. The empty stack means the root
 * rule is complete (EOS may follow). A token is allowed when its bytes
 * (decoded as UTF-8, possibly ending inside a code point) advance some
 * stack. Invariants: a compiled grammar has no left recursion and every
 * referenced rule is defined, so expanding a stack always terminates.
 */
#ifndef PL_GRAMMAR_GRAMMAR_H
#define PL_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { GE_END = 0, GE_ALT = 1, GE_RULE = 2, GE_CLASS = 3 };

typedef struct {
    uint32_t type; /* GE_* */
    uint32_t v;    /* RULE: rule index; CLASS: class index */
} gm_elem;

typedef struct {
    uint32_t lo, hi; /* inclusive code points */
} gm_range;

typedef struct {
    uint32_t off, n;     /* rng[off .. off+n) */
    bool neg;            /* matches code points in none of the ranges */
    uint64_t ascii[2];   /* precomputed answer for code points < 128 */
} gm_class;

typedef struct gm_grammar {
    gm_elem *el;          /* [n_el] every rule's alternatives, flat */
    uint32_t n_el;
    uint32_t *rule_start; /* [n_rules] first element of each rule */
    char **rule_name;     /* [n_rules] (generated rules get name-N) */
    uint32_t n_rules;
    gm_class *cls;        /* [n_cls] */
    uint32_t n_cls;
    gm_range *rng;        /* [n_rng] */
    uint32_t n_rng;
    uint32_t root;        /* the start rule */
    uint32_t *high_rep;   /* [n_high_rep] one code point >= 0x80 per stretch on which every
                           * class answers alike (the matcher sees a code point only through
                           * its classes), or NULL when there are too many stretches */
    uint32_t n_high_rep;
} gm_grammar;

/* Limits that keep hostile grammars bounded (errors, never hangs). */
#define GM_MAX_TEXT (1u << 20)      /* GBNF bytes */
#define GM_MAX_ELEMS (1u << 21)     /* elements after expanding repetitions */
#define GM_MAX_REPEAT 10000u        /* m, n of x{m,n} */
#define GM_MAX_NEST 256             /* parenthesis depth */
#define GM_MAX_STACKS 4096          /* stacks alive in one state */
#define GM_MAX_DEPTH 4096           /* positions in one stack */

/* Parses GBNF text (llama.cpp's dialect: rules `name ::= ...`, "literals",
 * [classes] with ranges and ^, ., (groups), |, *, +, ?, {m}, {m,}, {m,n},
 * # comments). root names the start rule (NULL: "root"). Errors name
 * line:column. Also refuses undefined rules and left recursion. */
int gm_parse(gm_grammar **out, const char *text, size_t len, const char *root);
void gm_grammar_free(gm_grammar *g);

bool gm_class_match(const gm_grammar *g, uint32_t cls, uint32_t cp);

/* ------------------------------------------------------------ matching */

/* A matcher state kept between tokens: the stacks, flattened as
 * [depth, top .. bottom] per stack, plus a code point begun by the last
 * token's bytes and not yet complete. */
typedef struct {
    uint32_t *flat;
    size_t n_flat, cap;
    uint32_t part_cp;   /* bits of the pending code point */
    uint8_t part_left;  /* continuation bytes still to come (0: none) */
    uint8_t part_len;   /* bytes the pending code point has in all */
} gm_state;

/* Scratch of the matcher (growable arenas). One per thread of use. */
typedef struct gm_work gm_work;
gm_work *gm_work_new(void);
void gm_work_free(gm_work *w);

/* The start state of g (the root rule's alternatives expanded). */
int gm_state_init(gm_state *s, const gm_grammar *g, gm_work *w);
void gm_state_free(gm_state *s);
int gm_state_copy(gm_state *dst, const gm_state *src);
/* Advances s by bytes; 1 if accepted (s changed), 0 if rejected (s
 * unchanged), negative on error (a state past the limits). */
int gm_state_advance(gm_state *s, const gm_grammar *g, gm_work *w, const char *bytes, size_t n);
/* Whether the grammar is complete in s (some stack empty, no partial char). */
bool gm_state_accepting(const gm_state *s);
/* Whether s can take any further code point. */
bool gm_state_can_continue(const gm_state *s);
/* Whole-string check: the start state advanced by text ends accepting. */
int gm_match_string(const gm_grammar *g, const char *text, size_t len);

/* ------------------------------------------------------------ token mask */

/* A trie over the decoded bytes of every token of a vocabulary. */
typedef struct gm_trie gm_trie;

/* pieces[i] / lens[i]: the bytes token i adds to the output (n tokens).
 * Tokens with no bytes (control tokens) never enter the trie; eog[i]
 * marks end-of-generation tokens (allowed only when the grammar is
 * complete). */
int gm_trie_new(gm_trie **out, const char *const *pieces, const size_t *lens, const bool *eog, int32_t n);
void gm_trie_free(gm_trie *t);
int32_t gm_trie_n_tokens(const gm_trie *t);

/* Masks of recent states, keyed by the state itself (one per request:
 * inside a JSON string the state recurs token after token). */
typedef struct gm_mask_cache gm_mask_cache;
gm_mask_cache *gm_mask_cache_new(void);
void gm_mask_cache_free(gm_mask_cache *c);

/* bits (n_tokens bits, (n+63)/64 words) gets 1 for every token whose
 * bytes advance s (EOG tokens: when s is accepting). *n_allowed counts
 * them. 0 or a negative error. */
int gm_mask(const gm_grammar *g, const gm_trie *t, const gm_state *s, gm_work *w, gm_mask_cache *cache,
            uint64_t *bits, int32_t *n_allowed);

/* ------------------------------------------------------- JSON schema */

/* Compiles a JSON schema (text) into GBNF whose rule root_name matches
 * exactly the JSON documents valid under it (the subset documented in
 * docs/grammar.md). Unsupported keywords are refused with the schema path,
 * e.g. "$.properties.age: 'minimum' is not supported". *gbnf malloc'd. */
int gm_schema_to_gbnf(const char *schema, size_t len, const char *root_name, char **gbnf);

/* GBNF for one forced tool call among n functions: prefix, then
 * {"name": "<fn>", "arguments": <its schema>}, then suffix. */
typedef struct {
    const char *name;       /* [A-Za-z0-9_.-]+ */
    const char *parameters; /* JSON schema text; NULL: any object */
} gm_tool_fn;
int gm_tool_call_gbnf(const gm_tool_fn *fns, size_t n, const char *prefix, const char *suffix, char **gbnf);

#endif
