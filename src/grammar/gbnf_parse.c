/* gbnf_parse.c - GBNF text -> gm_grammar (see grammar.h for the layout).
 *
 * Recursive descent over llama.cpp's dialect. Groups become generated
 * rules; x* becomes R ::= x R | ; x+ is x x*; x? is R ::= x | ; x{m,n} is
 * m copies of x then n-m nested optionals. Every error names line:column
 * of the text. After parsing: every referenced rule must be defined, the
 * root must exist, and no rule may reach itself at a leftmost position
 * through nullable prefixes (left recursion would make the matcher loop).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/grammar.h"

typedef struct {
    gm_elem *v;
    size_t n, cap;
} elvec;

typedef struct {
    const char *s;
    size_t len, pos;
    char **names;       /* [n_rules] */
    elvec *body;        /* [n_rules] alternatives separated by GE_ALT, no GE_END yet */
    size_t *first_use;  /* [n_rules] text offset of the first reference (for errors) */
    size_t *defined_at; /* [n_rules] text offset + 1 of the definition, 0 = not defined */
    size_t n_rules, cap_rules;
    gm_class *cls;
    size_t n_cls, cap_cls;
    gm_range *rng;
    size_t n_rng, cap_rng;
    size_t total_el;
    int depth;
    int rc;             /* first error (0 = none) */
} parser;

static void where(const parser *p, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && i < p->len; i++) {
        if (p->s[i] == '\n') { (*line)++; *col = 1; }
        else if (((unsigned char)p->s[i] & 0xC0) != 0x80) (*col)++;
    }
}

static int fail_at(parser *p, size_t off, const char *what)
{
    if (p->rc) return p->rc;
    int line, col;
    where(p, off, &line, &col);
    p->rc = err_set(PL_EINVAL, "grammar: line %d, column %d: %s", line, col, what);
    return p->rc;
}

static int grow(void **v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *nv = realloc(*v, nc * elem);
    if (!nv) return err_set(PL_ENOMEM, "grammar: out of memory");
    *v = nv;
    *cap = nc;
    return 0;
}

static int el_push(parser *p, elvec *e, uint32_t type, uint32_t v)
{
    if (++p->total_el > GM_MAX_ELEMS) return fail_at(p, p->pos, "grammar too large (repetitions expand past 2M elements)");
    if (grow((void **)&e->v, &e->cap, e->n + 1, sizeof *e->v)) return p->rc = PL_ENOMEM;
    e->v[e->n++] = (gm_elem){type, v};
    return 0;
}

/* ---------------------------------------------------------------- rules */

static int rule_new(parser *p, const char *name, size_t n, uint32_t *id)
{
    size_t k = p->n_rules;
    if (grow((void **)&p->names, &p->cap_rules, k + 1, sizeof *p->names)) return p->rc = PL_ENOMEM;
    size_t cap = p->cap_rules;
    elvec *nb = realloc(p->body, cap * sizeof *nb);
    if (nb) p->body = nb;
    size_t *fu = nb ? realloc(p->first_use, cap * sizeof *fu) : NULL;
    if (fu) p->first_use = fu;
    size_t *da = fu ? realloc(p->defined_at, cap * sizeof *da) : NULL;
    if (da) p->defined_at = da;
    char *nm = da ? strndup(name, n) : NULL;
    if (!nm) return p->rc = err_set(PL_ENOMEM, "grammar: out of memory");
    p->names[k] = nm;
    p->body[k] = (elvec){0};
    p->first_use[k] = p->pos;
    p->defined_at[k] = 0;
    p->n_rules++;
    *id = (uint32_t)k;
    return 0;
}

/* The rule named s[0..n), created (undefined) if new. Linear search: user
 * grammars have few named rules; generated ones are never looked up. */
static int rule_ref(parser *p, const char *s, size_t n, uint32_t *id)
{
    for (size_t i = 0; i < p->n_rules; i++)
        if (strlen(p->names[i]) == n && memcmp(p->names[i], s, n) == 0) { *id = (uint32_t)i; return 0; }
    return rule_new(p, s, n, id);
}

/* A generated rule "base~k" (the ~ keeps it apart from user names). */
static int rule_gen(parser *p, uint32_t base, uint32_t *id)
{
    char nm[96];
    int k = snprintf(nm, sizeof nm, "%.60s~%zu", p->names[base], p->n_rules);
    int rc = rule_new(p, nm, (size_t)k, id);
    if (!rc) p->defined_at[*id] = p->pos + 1;
    return rc;
}

/* ------------------------------------------------------------- classes */

static int class_new(parser *p, bool neg, uint32_t *id)
{
    if (grow((void **)&p->cls, &p->cap_cls, p->n_cls + 1, sizeof *p->cls)) return p->rc = PL_ENOMEM;
    p->cls[p->n_cls] = (gm_class){.off = (uint32_t)p->n_rng, .n = 0, .neg = neg};
    *id = (uint32_t)p->n_cls++;
    return 0;
}

static int class_add(parser *p, uint32_t lo, uint32_t hi)
{
    if (grow((void **)&p->rng, &p->cap_rng, p->n_rng + 1, sizeof *p->rng)) return p->rc = PL_ENOMEM;
    p->rng[p->n_rng++] = (gm_range){lo, hi};
    p->cls[p->n_cls - 1].n++;
    return 0;
}

/* ---------------------------------------------------------------- lexing */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int peek(const parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

/* Skips blanks and # comments; newlines too when nl_ok. */
static void skip_space(parser *p, bool nl_ok)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t') p->pos++;
        else if (c == '#') { while (p->pos < p->len && p->s[p->pos] != '\n') p->pos++; }
        else if (nl_ok && (c == '\n' || c == '\r')) p->pos++;
        else break;
    }
}

static int hex_digits(parser *p, int n, uint32_t *cp)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int c = peek(p), d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return fail_at(p, p->pos, "expected a hex digit in an escape");
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    if (v > 0x10FFFF) return fail_at(p, p->pos, "escape beyond U+10FFFF");
    *cp = v;
    return 0;
}

/* One UTF-8 code point of the text. */
static int utf8_char(parser *p, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || (size_t)n > left) return fail_at(p, p->pos, "invalid UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return fail_at(p, p->pos, "invalid UTF-8");
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail_at(p, p->pos, "invalid UTF-8");
    p->pos += (size_t)n;
    *cp = v;
    return 0;
}

/* A character of a literal or class, with escapes. */
static int lit_char(parser *p, uint32_t *cp)
{
    if (peek(p) != '\\') return utf8_char(p, cp);
    size_t at = p->pos++;
    int c = peek(p);
    p->pos++;
    switch (c) {
    case 'x': return hex_digits(p, 2, cp);
    case 'u': return hex_digits(p, 4, cp);
    case 'U': return hex_digits(p, 8, cp);
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'n': *cp = '\n'; return 0;
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': *cp = (uint32_t)c; return 0;
    default: return fail_at(p, at, "unknown escape");
    }
}

/* ---------------------------------------------------------------- terms */

static int parse_alternates(parser *p, uint32_t rule, bool nested);

static int parse_literal(parser *p, elvec *cur)
{
    size_t at = p->pos++;
    while (peek(p) != '"') {
        if (peek(p) < 0 || peek(p) == '\n') return fail_at(p, at, "unterminated string literal");
        uint32_t cp, c;
        if (lit_char(p, &cp) || class_new(p, false, &c) || class_add(p, cp, cp) || el_push(p, cur, GE_CLASS, c))
            return p->rc;
    }
    p->pos++;
    return 0;
}

static int parse_class(parser *p, elvec *cur)
{
    size_t at = p->pos++;
    bool neg = peek(p) == '^';
    if (neg) p->pos++;
    uint32_t c;
    if (class_new(p, neg, &c)) return p->rc;
    while (peek(p) != ']') {
        if (peek(p) < 0 || peek(p) == '\n') return fail_at(p, at, "unterminated character class");
        uint32_t lo, hi;
        if (lit_char(p, &lo)) return p->rc;
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->s[p->pos + 1] != ']' && p->s[p->pos + 1] != '\n') {
            p->pos++;
            size_t hat = p->pos;
            if (lit_char(p, &hi)) return p->rc;
            if (hi < lo) return fail_at(p, hat, "character range upper bound below its lower bound");
        }
        if (class_add(p, lo, hi)) return p->rc;
    }
    p->pos++;
    return el_push(p, cur, GE_CLASS, c);
}

static int parse_group(parser *p, uint32_t rule, elvec **cur_p)
{
    size_t at = p->pos++;
    if (++p->depth > GM_MAX_NEST) return fail_at(p, at, "groups nested too deeply");
    uint32_t g;
    if (rule_gen(p, rule, &g)) return p->rc;
    skip_space(p, true);
    if (parse_alternates(p, g, true)) return p->rc;
    if (peek(p) != ')') return fail_at(p, at, "expected ')' to close this group");
    p->pos++;
    p->depth--;
    /* p->body may have moved while the group added rules */
    *cur_p = &p->body[rule];
    return el_push(p, *cur_p, GE_RULE, g);
}

static int parse_uint(parser *p, uint32_t *v)
{
    if (peek(p) < '0' || peek(p) > '9') return fail_at(p, p->pos, "expected a number in {m,n}");
    uint64_t x = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        x = x * 10 + (uint64_t)(peek(p) - '0');
        if (x > GM_MAX_REPEAT) return fail_at(p, p->pos, "repetition count above 10000");
        p->pos++;
    }
    *v = (uint32_t)x;
    return 0;
}

/* Reads a postfix operator into [*mn, *mx] (mx UINT32_MAX: unbounded);
 * false if there is none. */
static int parse_postfix(parser *p, bool *has, uint32_t *mn, uint32_t *mx)
{
    *has = true;
    int c = peek(p);
    if (c == '*') { *mn = 0; *mx = UINT32_MAX; p->pos++; return 0; }
    if (c == '+') { *mn = 1; *mx = UINT32_MAX; p->pos++; return 0; }
    if (c == '?') { *mn = 0; *mx = 1; p->pos++; return 0; }
    if (c != '{') { *has = false; return 0; }
    size_t at = p->pos++;
    skip_space(p, false);
    if (parse_uint(p, mn)) return p->rc;
    skip_space(p, false);
    *mx = *mn;
    if (peek(p) == ',') {
        p->pos++;
        skip_space(p, false);
        *mx = UINT32_MAX;
        if (peek(p) != '}' && parse_uint(p, mx)) return p->rc;
        skip_space(p, false);
    }
    if (peek(p) != '}') return fail_at(p, at, "expected '}' to close {m,n}");
    p->pos++;
    if (*mx < *mn) return fail_at(p, at, "repetition {m,n} with n < m");
    return 0;
}

/* Rewrites cur[from..) (one term) repeated mn..mx times. */
static int repeat_term(parser *p, uint32_t rule, size_t from, uint32_t mn, uint32_t mx)
{
    elvec *cur = &p->body[rule];
    gm_elem s;
    if (cur->n - from == 1) s = cur->v[from];
    else {
        uint32_t r;
        if (rule_gen(p, rule, &r)) return p->rc;
        cur = &p->body[rule];
        for (size_t i = from; i < cur->n; i++)
            if (el_push(p, &p->body[r], cur->v[i].type, cur->v[i].v)) return p->rc;
        s = (gm_elem){GE_RULE, r};
    }
    p->total_el -= cur->n - from;
    cur->n = from;
    if ((uint64_t)p->total_el + mn > GM_MAX_ELEMS) return fail_at(p, p->pos, "grammar too large (repetitions expand past 2M elements)");
    for (uint32_t i = 0; i < mn; i++)
        if (el_push(p, cur, s.type, s.v)) return p->rc;
    if (mx == mn) return 0;
    uint32_t r, prev = 0;
    if (mx == UINT32_MAX) { /* R ::= s R | */
        if (rule_gen(p, rule, &r)) return p->rc;
        elvec *b = &p->body[r];
        if (el_push(p, b, s.type, s.v) || el_push(p, b, GE_RULE, r) || el_push(p, b, GE_ALT, 0)) return p->rc;
        return el_push(p, &p->body[rule], GE_RULE, r);
    }
    for (uint32_t k = 0; k < mx - mn; k++) { /* O_k ::= s O_{k-1} | */
        if (rule_gen(p, rule, &r)) return p->rc;
        elvec *b = &p->body[r];
        if (el_push(p, b, s.type, s.v) || (k && el_push(p, b, GE_RULE, prev)) || el_push(p, b, GE_ALT, 0))
            return p->rc;
        prev = r;
    }
    return el_push(p, &p->body[rule], GE_RULE, prev);
}

static int parse_sequence(parser *p, uint32_t rule, bool nested)
{
    elvec *cur = &p->body[rule];
    for (;;) {
        size_t from = cur->n;
        int c = peek(p);
        if (c == '"') { if (parse_literal(p, cur)) return p->rc; }
        else if (c == '[') { if (parse_class(p, cur)) return p->rc; }
        else if (c == '(') { if (parse_group(p, rule, &cur)) return p->rc; }
        else if (c == '.') {
            uint32_t k;
            p->pos++;
            if (class_new(p, true, &k) || el_push(p, cur, GE_CLASS, k)) return p->rc;
        } else if (c == '<') return fail_at(p, p->pos, "token references <...> are not supported");
        else if (c >= 0 && name_char((char)c)) {
            size_t at = p->pos;
            while (p->pos < p->len && name_char(p->s[p->pos])) p->pos++;
            uint32_t r;
            if (rule_ref(p, p->s + at, p->pos - at, &r)) return p->rc;
            if (p->first_use[r] == p->pos) p->first_use[r] = at; /* just created */
            cur = &p->body[rule];
            if (el_push(p, cur, GE_RULE, r)) return p->rc;
        } else return 0;
        bool has;
        uint32_t mn = 0, mx = 0;
        if (parse_postfix(p, &has, &mn, &mx)) return p->rc;
        if (has && repeat_term(p, rule, from, mn, mx)) return p->rc;
        cur = &p->body[rule];
        skip_space(p, nested);
    }
}

static int parse_alternates(parser *p, uint32_t rule, bool nested)
{
    if (parse_sequence(p, rule, nested)) return p->rc;
    while (peek(p) == '|') {
        p->pos++;
        if (el_push(p, &p->body[rule], GE_ALT, 0)) return p->rc;
        skip_space(p, true);
        if (parse_sequence(p, rule, nested)) return p->rc;
    }
    return 0;
}

static int parse_rule(parser *p)
{
    size_t at = p->pos;
    while (p->pos < p->len && name_char(p->s[p->pos])) p->pos++;
    if (p->pos == at) return fail_at(p, at, "expected a rule name");
    uint32_t r;
    if (rule_ref(p, p->s + at, p->pos - at, &r)) return p->rc;
    if (p->defined_at[r]) {
        char msg[160];
        int line, col;
        where(p, p->defined_at[r] - 1, &line, &col);
        snprintf(msg, sizeof msg, "rule '%.60s' is already defined at line %d, column %d", p->names[r], line, col);
        return fail_at(p, at, msg);
    }
    p->defined_at[r] = at + 1;
    skip_space(p, false);
    if (p->pos + 3 > p->len || memcmp(p->s + p->pos, "::=", 3) != 0) return fail_at(p, p->pos, "expected '::='");
    p->pos += 3;
    skip_space(p, true);
    if (parse_alternates(p, r, false)) return p->rc;
    int c = peek(p);
    if (c == '\r') { p->pos++; c = peek(p); }
    if (c != '\n' && c >= 0) return fail_at(p, p->pos, "unexpected character (expected a term, '|' or the end of the line)");
    return 0;
}

/* ------------------------------------------------------------- checking */

static bool *nullable_rules(const gm_grammar *g)
{
    bool *nl = calloc(g->n_rules ? g->n_rules : 1, 1);
    if (!nl) return NULL;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (nl[r]) continue;
            bool alt_ok = true;
            for (uint32_t i = g->rule_start[r];; i++) {
                const gm_elem *e = &g->el[i];
                if (e->type == GE_END || e->type == GE_ALT) {
                    if (alt_ok) { nl[r] = changed = true; break; }
                    if (e->type == GE_END) break;
                    alt_ok = true;
                } else if (e->type == GE_CLASS || (e->type == GE_RULE && !nl[e->v])) alt_ok = false;
            }
        }
    }
    return nl;
}

/* Visits rule r's leftmost references (through nullable prefixes). */
static uint32_t left_refs(const gm_grammar *g, const bool *nl, uint32_t r, uint32_t *out)
{
    uint32_t n = 0;
    bool open = true;
    for (uint32_t i = g->rule_start[r];; i++) {
        const gm_elem *e = &g->el[i];
        if (e->type == GE_END) break;
        if (e->type == GE_ALT) { open = true; continue; }
        if (!open) continue;
        if (e->type == GE_CLASS) open = false;
        else {
            out[n++] = e->v;
            open = nl[e->v];
        }
    }
    return n;
}

/* Iterative DFS over leftmost references; a back edge is left recursion. */
static int check_left_recursion(const gm_grammar *g)
{
    bool *nl = nullable_rules(g);
    uint8_t *color = calloc(g->n_rules, 1);
    uint32_t *st = malloc(((size_t)g->n_el + g->n_rules + 1) * 2 * sizeof *st);
    uint32_t *refs = malloc(((size_t)g->n_el + 1) * sizeof *refs);
    int rc = 0;
    if (!nl || !color || !st || !refs) { rc = err_set(PL_ENOMEM, "grammar: out of memory"); goto out; }
    for (uint32_t s0 = 0; s0 < g->n_rules && !rc; s0++) {
        if (color[s0]) continue;
        size_t sp = 0;
        st[sp++] = s0;
        st[sp++] = 0; /* next reference index to try */
        color[s0] = 1;
        while (sp && !rc) {
            uint32_t r = st[sp - 2], k = st[sp - 1];
            uint32_t n = left_refs(g, nl, r, refs);
            if (k >= n) { color[r] = 2; sp -= 2; continue; }
            st[sp - 1]++;
            uint32_t x = refs[k];
            if (color[x] == 1)
                rc = err_set(PL_EINVAL, "grammar: rule '%s' is left-recursive (reaches itself via '%s' before consuming input)",
                             g->rule_name[x], g->rule_name[r]);
            else if (!color[x]) { color[x] = 1; st[sp++] = x; st[sp++] = 0; }
        }
    }
out:
    free(nl);
    free(color);
    free(st);
    free(refs);
    return rc;
}

/* ------------------------------------------------------------- building */

static void class_ascii(gm_grammar *g)
{
    for (uint32_t k = 0; k < g->n_cls; k++) {
        gm_class *c = &g->cls[k];
        c->ascii[0] = c->ascii[1] = 0;
        for (uint32_t cp = 0; cp < 128; cp++) {
            bool in = false;
            for (uint32_t i = 0; i < c->n && !in; i++) in = cp >= g->rng[c->off + i].lo && cp <= g->rng[c->off + i].hi;
            if (in != c->neg) c->ascii[cp >> 6] |= 1ull << (cp & 63);
        }
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

#define GM_MAX_HIGH_REPS 64

/* g->high_rep: 0x80 and every range bound above it where some class's
 * answer may change (lo, hi + 1), deduplicated; NULL past 64 of them. */
static int high_reps(gm_grammar *g)
{
    uint32_t *v = malloc((2 * (size_t)g->n_rng + 1) * sizeof *v);
    if (!v) return err_set(PL_ENOMEM, "grammar: out of memory");
    size_t n = 0;
    v[n++] = 0x80;
    for (uint32_t i = 0; i < g->n_rng; i++) {
        if (g->rng[i].lo > 0x80) v[n++] = g->rng[i].lo;
        if (g->rng[i].hi >= 0x80 && g->rng[i].hi < 0x10FFFF) v[n++] = g->rng[i].hi + 1;
    }
    qsort(v, n, sizeof *v, cmp_u32);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!k || v[i] != v[k - 1]) v[k++] = v[i];
    if (k > GM_MAX_HIGH_REPS) { free(v); return 0; }
    g->high_rep = v;
    g->n_high_rep = (uint32_t)k;
    return 0;
}

bool gm_class_match(const gm_grammar *g, uint32_t k, uint32_t cp)
{
    const gm_class *c = &g->cls[k];
    if (cp < 128) return (c->ascii[cp >> 6] >> (cp & 63)) & 1;
    for (uint32_t i = 0; i < c->n; i++)
        if (cp >= g->rng[c->off + i].lo && cp <= g->rng[c->off + i].hi) return !c->neg;
    return c->neg;
}

static int flatten(parser *p, gm_grammar *g)
{
    size_t n = p->n_rules;
    g->rule_start = malloc((n ? n : 1) * sizeof *g->rule_start);
    g->el = malloc((p->total_el + n + 1) * sizeof *g->el);
    if (!g->rule_start || !g->el) return err_set(PL_ENOMEM, "grammar: out of memory");
    uint32_t k = 0;
    for (size_t r = 0; r < n; r++) {
        g->rule_start[r] = k;
        if (p->body[r].n) memcpy(g->el + k, p->body[r].v, p->body[r].n * sizeof *g->el);
        k += (uint32_t)p->body[r].n;
        g->el[k++] = (gm_elem){GE_END, 0};
    }
    g->n_el = k;
    g->n_rules = (uint32_t)n;
    g->rule_name = p->names;
    p->names = NULL;
    g->cls = p->cls;
    g->n_cls = (uint32_t)p->n_cls;
    p->cls = NULL;
    g->rng = p->rng;
    g->n_rng = (uint32_t)p->n_rng;
    p->rng = NULL;
    class_ascii(g);
    return high_reps(g);
}

static void parser_free(parser *p)
{
    for (size_t i = 0; i < p->n_rules; i++) {
        if (p->names) free(p->names[i]);
        free(p->body[i].v);
    }
    free(p->names);
    free(p->body);
    free(p->first_use);
    free(p->defined_at);
    free(p->cls);
    free(p->rng);
}

static int check_defined(parser *p, const char *root, uint32_t *root_id)
{
    for (size_t r = 0; r < p->n_rules; r++) {
        if (p->defined_at[r]) continue;
        char msg[128];
        snprintf(msg, sizeof msg, "rule '%.60s' is used but never defined", p->names[r]);
        return fail_at(p, p->first_use[r], msg);
    }
    for (size_t r = 0; r < p->n_rules; r++)
        if (strcmp(p->names[r], root) == 0) { *root_id = (uint32_t)r; return 0; }
    return p->rc = err_set(PL_EINVAL, "grammar: no rule named '%.60s' (the start rule)", root);
}

int gm_parse(gm_grammar **out, const char *text, size_t len, const char *root)
{
    if (!root) root = "root";
    if (!text) return err_set(PL_EINVAL, "grammar: no text");
    if (len > GM_MAX_TEXT) return err_set(PL_EINVAL, "grammar: %zu bytes, more than the %u allowed", len, GM_MAX_TEXT);
    parser p = {.s = text, .len = len};
    for (;;) {
        skip_space(&p, true);
        if (p.pos >= p.len) break;
        if (parse_rule(&p)) break;
    }
    uint32_t root_id = 0;
    if (!p.rc) check_defined(&p, root, &root_id);
    int rc = p.rc;
    gm_grammar *g = NULL;
    if (!rc) {
        g = calloc(1, sizeof *g);
        rc = g ? flatten(&p, g) : err_set(PL_ENOMEM, "grammar: out of memory");
        if (!rc) g->root = root_id;
        if (!rc) rc = check_left_recursion(g);
    }
    parser_free(&p);
    if (rc) { gm_grammar_free(g); return rc; }
    *out = g;
    return 0;
}

void gm_grammar_free(gm_grammar *g)
{
    if (!g) return;
    for (uint32_t i = 0; g->rule_name && i < g->n_rules; i++) free(g->rule_name[i]);
    free(g->rule_name);
    free(g->el);
    free(g->rule_start);
    free(g->cls);
    free(g->rng);
    free(g->high_rep);
    free(g);
}
