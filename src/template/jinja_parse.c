/* jinja_parse.c - tokens -> syntax tree, with jinja2's grammar and operator
 * precedence (lowest first):
 *   a if c else b | or | and | not | comparisons (== != < > <= >= in, not in)
 *   | + - | ~ | * / // % | ** | unary - + | primary with .attr [item] (call)
 *   followed by filters (|f) and tests (is t)
 * Statements: if/elif/else, for (else, inline if), set (and block set,
 * attribute targets of namespaces), macro, call blocks, break, continue.
 * Nesting is capped by the render's max_depth.
 */
#include <string.h>

#include "template/jinja_impl.h"

static const jtok *cur(jctx *c) { return &c->toks[c->pos]; }
static const jtok *next_tok(jctx *c) { const jtok *t = &c->toks[c->pos]; if (t->k != JT_EOF) c->pos++; return t; }

static bool is_op(jctx *c, const char *op)
{
    const jtok *t = cur(c);
    return t->k == JT_OP && strcmp(t->s, op) == 0;
}

static bool is_name(jctx *c, const char *name)
{
    const jtok *t = cur(c);
    return t->k == JT_NAME && strcmp(t->s, name) == 0;
}

static bool is_name_at(jctx *c, size_t ahead, const char *name)
{
    if (c->pos + ahead >= c->ntok) return false;
    const jtok *t = &c->toks[c->pos + ahead];
    return t->k == JT_NAME && strcmp(t->s, name) == 0;
}

static const char *tok_desc(const jtok *t)
{
    switch (t->k) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "a string";
    case JT_INT: case JT_FLOAT: return "a number";
    default: return t->s;
    }
}

static void expect_op(jctx *c, const char *op)
{
    if (!is_op(c, op)) jfail(c, cur(c)->line, "expected '%s', got %s", op, tok_desc(cur(c)));
    c->pos++;
}

static const char *expect_name(jctx *c)
{
    const jtok *t = cur(c);
    if (t->k != JT_NAME) jfail(c, t->line, "expected a name, got %s", tok_desc(t));
    c->pos++;
    return t->s;
}

static void expect_kind(jctx *c, jtok_kind k)
{
    if (cur(c)->k != k) {
        const jtok want = {.k = k};
        jfail(c, cur(c)->line, "expected %s, got %s", tok_desc(&want), tok_desc(cur(c)));
    }
    c->pos++;
}

static jnode *node(jctx *c, jnode_kind k, size_t nkids)
{
    jnode *n = jarena_alloc(c, sizeof *n);
    n->k = k;
    n->line = cur(c)->line;
    if (nkids) n->kids = jarena_alloc(c, nkids * sizeof(jnode *));
    n->nkids = nkids;
    return n;
}

/* a growable kid list */
typedef struct {
    jnode **v;
    const char **names;
    size_t n, cap;
} kids;

static void kids_add(jctx *c, kids *k, jnode *n, const char *name)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 4;
        jnode **nv = jarena_alloc(c, cap * sizeof *nv);
        const char **nn = jarena_alloc(c, cap * sizeof *nn);
        if (k->n) { memcpy(nv, k->v, k->n * sizeof *nv); memcpy(nn, k->names, k->n * sizeof *nn); }
        k->v = nv;
        k->names = nn;
        k->cap = cap;
    }
    k->v[k->n] = n;
    k->names[k->n++] = name;
}

static void enter(jctx *c)
{
    if (++c->depth > c->lim.max_depth) jfail(c, cur(c)->line, "the template nests deeper than %d", c->lim.max_depth);
}

static jnode *parse_expr(jctx *c);
static jnode *parse_or(jctx *c);
static jnode *parse_unary(jctx *c, bool with_filter);
static jnode *parse_primary(jctx *c);
static jnode *parse_postfix(jctx *c, jnode *n);

/* (args) of a call, filter or test: positional first, then name=value */
static void parse_args(jctx *c, jnode *n, jnode *first)
{
    kids k = {0};
    size_t nkw = 0;
    kids_add(c, &k, first, NULL);
    expect_op(c, "(");
    while (!is_op(c, ")")) {
        if (k.n > 1) expect_op(c, ",");
        if (is_op(c, ")")) break;
        if (cur(c)->k == JT_NAME && c->toks[c->pos + 1].k == JT_OP && strcmp(c->toks[c->pos + 1].s, "=") == 0) {
            const char *name = expect_name(c);
            c->pos++;
            kids_add(c, &k, parse_expr(c), name);
            nkw++;
        } else {
            if (nkw) jfail(c, cur(c)->line, "a positional argument follows a keyword argument");
            kids_add(c, &k, parse_expr(c), NULL);
        }
    }
    expect_op(c, ")");
    n->kids = k.v;
    n->nkids = k.n;
    n->names = k.names;
    n->nkw = nkw;
}

static jnode *parse_filter(jctx *c, jnode *operand)
{
    jnode *n = node(c, JN_FILTER, 0);
    n->name = expect_name(c);
    if (is_op(c, "(")) parse_args(c, n, operand);
    else {
        n->kids = jarena_alloc(c, sizeof(jnode *));
        n->kids[0] = operand;
        n->nkids = 1;
    }
    return n;
}

static jnode *parse_test(jctx *c, jnode *operand)
{
    jnode *n = node(c, JN_TEST, 0);
    if (is_name(c, "not")) { c->pos++; n->flag = 1; }
    n->name = expect_name(c);
    if (is_op(c, "(")) { parse_args(c, n, operand); return n; }
    const jtok *t = cur(c);
    bool arg = (t->k == JT_NAME && strcmp(t->s, "else") && strcmp(t->s, "or") && strcmp(t->s, "and") && strcmp(t->s, "if")
                && strcmp(t->s, "is") && strcmp(t->s, "in") && strcmp(t->s, "not"))
               || t->k == JT_STRING || t->k == JT_INT || t->k == JT_FLOAT || (t->k == JT_OP && (!strcmp(t->s, "[") || !strcmp(t->s, "{")));
    n->nkids = arg ? 2 : 1;
    n->kids = jarena_alloc(c, 2 * sizeof(jnode *));
    n->kids[0] = operand;
    if (arg) n->kids[1] = parse_postfix(c, parse_primary(c));
    return n;
}

static jnode *parse_filter_expr(jctx *c, jnode *n)
{
    for (;;) {
        if (is_op(c, "|")) { c->pos++; n = parse_filter(c, n); }
        else if (is_name(c, "is")) { c->pos++; n = parse_test(c, n); }
        else if (is_op(c, "(")) {
            jnode *call = node(c, JN_CALL, 0);
            parse_args(c, call, n);
            n = call;
        } else return n;
    }
}

static jnode *parse_subscript(jctx *c, jnode *obj)
{
    jnode *parts[3] = {0};
    int np = 0;
    bool slice = false;
    for (;;) {
        if (is_op(c, ":")) {
            slice = true;
            c->pos++;
            if (++np > 2) jfail(c, cur(c)->line, "too many ':' in a slice");
            continue;
        }
        if (is_op(c, "]")) break;
        if (parts[np]) jfail(c, cur(c)->line, "expected ':' or ']' in a subscript");
        parts[np] = parse_expr(c);
    }
    expect_op(c, "]");
    if (!slice) {
        if (!parts[0]) jfail(c, cur(c)->line, "empty subscript");
        jnode *n = node(c, JN_ITEM, 2);
        n->kids[0] = obj;
        n->kids[1] = parts[0];
        return n;
    }
    jnode *n = node(c, JN_SLICE, 4);
    n->kids[0] = obj;
    for (int i = 0; i < 3; i++) n->kids[1 + i] = parts[i];
    return n;
}

static jnode *parse_postfix(jctx *c, jnode *n)
{
    for (;;) {
        if (is_op(c, ".")) {
            c->pos++;
            jnode *a;
            if (cur(c)->k == JT_INT) { /* x.0 is x[0] */
                a = node(c, JN_ITEM, 2);
                jnode *k = node(c, JN_CONST, 0);
                k->value = jv_int(next_tok(c)->i);
                a->kids[1] = k;
            } else {
                a = node(c, JN_ATTR, 1);
                a->name = expect_name(c);
            }
            a->kids[0] = n;
            n = a;
        } else if (is_op(c, "[")) {
            c->pos++;
            n = parse_subscript(c, n);
        } else if (is_op(c, "(")) {
            jnode *call = node(c, JN_CALL, 0);
            parse_args(c, call, n);
            n = call;
        } else return n;
    }
}

static jnode *parse_primary(jctx *c)
{
    enter(c);
    const jtok *t = cur(c);
    jnode *n;
    if (t->k == JT_NAME) {
        c->pos++;
        n = node(c, JN_CONST, 0);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) n->value = jv_bool(true);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) n->value = jv_bool(false);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) n->value = jv_none();
        else { n->k = JN_NAME; n->name = t->s; }
    } else if (t->k == JT_STRING) {
        jbuf b = {0};
        jbuf_add(c, &b, "", 0);
        while (cur(c)->k == JT_STRING) { const jtok *s = next_tok(c); jbuf_add(c, &b, s->s, s->n); }
        n = node(c, JN_CONST, 0);
        n->value = jv_str_ref(b.s, b.n);
    } else if (t->k == JT_INT || t->k == JT_FLOAT) {
        c->pos++;
        n = node(c, JN_CONST, 0);
        n->value = t->k == JT_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (is_op(c, "(")) {
        c->pos++;
        kids k = {0};
        bool tuple = false;
        while (!is_op(c, ")")) {
            if (k.n) { expect_op(c, ","); tuple = true; }
            if (is_op(c, ")")) break;
            kids_add(c, &k, parse_expr(c), NULL);
        }
        expect_op(c, ")");
        if (k.n == 1 && !tuple) n = k.v[0];
        else {
            n = node(c, JN_TUPLE, 0);
            n->kids = k.v;
            n->nkids = k.n;
        }
    } else if (is_op(c, "[")) {
        c->pos++;
        kids k = {0};
        while (!is_op(c, "]")) {
            if (k.n) expect_op(c, ",");
            if (is_op(c, "]")) break;
            kids_add(c, &k, parse_expr(c), NULL);
        }
        expect_op(c, "]");
        n = node(c, JN_LIST, 0);
        n->kids = k.v;
        n->nkids = k.n;
    } else if (is_op(c, "{")) {
        c->pos++;
        kids k = {0};
        while (!is_op(c, "}")) {
            if (k.n) expect_op(c, ",");
            if (is_op(c, "}")) break;
            kids_add(c, &k, parse_expr(c), NULL);
            expect_op(c, ":");
            kids_add(c, &k, parse_expr(c), NULL);
        }
        expect_op(c, "}");
        n = node(c, JN_DICT, 0);
        n->kids = k.v;
        n->nkids = k.n;
    } else jfail(c, t->line, "unexpected %s", tok_desc(t));
    c->depth--;
    return n;
}

static jnode *binary(jctx *c, jnode_kind k, const char *op, jnode *a, jnode *b)
{
    jnode *n = node(c, k, 2);
    n->name = op;
    n->kids[0] = a;
    n->kids[1] = b;
    return n;
}

static jnode *parse_unary(jctx *c, bool with_filter)
{
    enter(c);
    jnode *n;
    if (is_op(c, "-") || is_op(c, "+")) {
        const char *op = next_tok(c)->s;
        n = node(c, JN_UNARY, 1);
        n->name = op;
        n->kids[0] = parse_unary(c, false);
    } else n = parse_postfix(c, parse_primary(c));
    if (with_filter) n = parse_filter_expr(c, n);
    c->depth--;
    return n;
}

static jnode *parse_pow(jctx *c)
{
    jnode *n = parse_unary(c, true);
    while (is_op(c, "**")) { c->pos++; n = binary(c, JN_BINARY, "**", n, parse_unary(c, true)); }
    return n;
}

static jnode *parse_math2(jctx *c)
{
    jnode *n = parse_pow(c);
    while (is_op(c, "*") || is_op(c, "/") || is_op(c, "//") || is_op(c, "%")) {
        const char *op = next_tok(c)->s;
        n = binary(c, JN_BINARY, op, n, parse_pow(c));
    }
    return n;
}

static jnode *parse_concat(jctx *c)
{
    jnode *n = parse_math2(c);
    while (is_op(c, "~")) { c->pos++; n = binary(c, JN_BINARY, "~", n, parse_math2(c)); }
    return n;
}

static jnode *parse_math1(jctx *c)
{
    jnode *n = parse_concat(c);
    while (is_op(c, "+") || is_op(c, "-")) {
        const char *op = next_tok(c)->s;
        n = binary(c, JN_BINARY, op, n, parse_concat(c));
    }
    return n;
}

static jnode *parse_compare(jctx *c)
{
    jnode *first = parse_math1(c);
    kids k = {0};
    kids_add(c, &k, first, NULL);
    for (;;) {
        const char *op = NULL;
        const jtok *t = cur(c);
        if (t->k == JT_OP && (!strcmp(t->s, "==") || !strcmp(t->s, "!=") || !strcmp(t->s, "<") || !strcmp(t->s, ">")
                              || !strcmp(t->s, "<=") || !strcmp(t->s, ">=")))
            op = t->s, c->pos++;
        else if (is_name(c, "in")) op = "in", c->pos++;
        else if (is_name(c, "not") && is_name_at(c, 1, "in")) op = "notin", c->pos += 2;
        else break;
        kids_add(c, &k, parse_math1(c), op);
    }
    if (k.n == 1) return first;
    jnode *n = node(c, JN_COMPARE, 0);
    n->kids = k.v;
    n->nkids = k.n;
    n->names = k.names;
    return n;
}

static jnode *parse_not(jctx *c)
{
    if (is_name(c, "not")) {
        enter(c);
        c->pos++;
        jnode *n = node(c, JN_NOT, 1);
        n->kids[0] = parse_not(c);
        c->depth--;
        return n;
    }
    return parse_compare(c);
}

static jnode *parse_and(jctx *c)
{
    jnode *n = parse_not(c);
    while (is_name(c, "and")) { c->pos++; n = binary(c, JN_AND, "and", n, parse_not(c)); }
    return n;
}

static jnode *parse_or(jctx *c)
{
    jnode *n = parse_and(c);
    while (is_name(c, "or")) { c->pos++; n = binary(c, JN_OR, "or", n, parse_and(c)); }
    return n;
}

static jnode *parse_expr(jctx *c)
{
    enter(c);
    jnode *n = parse_or(c);
    while (is_name(c, "if")) {
        c->pos++;
        jnode *cond = node(c, JN_COND, 3);
        cond->kids[0] = n;
        cond->kids[1] = parse_or(c);
        if (is_name(c, "else")) { c->pos++; cond->kids[2] = parse_expr(c); }
        n = cond;
    }
    c->depth--;
    return n;
}

/* ------------------------------------------------------------ statements */

static jnode *parse_body(jctx *c, const char *const *ends);

/* After {% : is the next statement one of ends? */
static bool at_end_tag(jctx *c, const char *const *ends)
{
    if (cur(c)->k != JT_BLOCK_BEGIN || !ends) return false;
    const jtok *t = &c->toks[c->pos + 1];
    if (t->k != JT_NAME) return false;
    for (int i = 0; ends[i]; i++)
        if (!strcmp(t->s, ends[i])) return true;
    return false;
}

/* name[, name...] targets of for and set */
static void parse_targets(jctx *c, jnode *n)
{
    kids k = {0};
    bool paren = is_op(c, "(");
    if (paren) c->pos++;
    do {
        if (k.n) c->pos++;
        kids_add(c, &k, NULL, expect_name(c));
    } while (is_op(c, ","));
    if (paren) expect_op(c, ")");
    n->names = k.names;
    n->nnames = k.n;
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_FOR[] = {"else", "endfor", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};

static const char *end_keyword(jctx *c)
{
    expect_kind(c, JT_BLOCK_BEGIN);
    return expect_name(c);
}

static jnode *parse_if(jctx *c)
{
    kids k = {0};
    kids_add(c, &k, parse_expr(c), NULL);
    expect_kind(c, JT_BLOCK_END);
    kids_add(c, &k, parse_body(c, END_IF), NULL);
    for (;;) {
        const char *kw = end_keyword(c);
        if (!strcmp(kw, "elif")) {
            kids_add(c, &k, parse_expr(c), NULL);
            expect_kind(c, JT_BLOCK_END);
            kids_add(c, &k, parse_body(c, END_IF), NULL);
        } else if (!strcmp(kw, "else")) {
            expect_kind(c, JT_BLOCK_END);
            kids_add(c, &k, parse_body(c, (const char *const[]){"endif", NULL}), NULL);
            end_keyword(c);
            break;
        } else break; /* endif */
    }
    expect_kind(c, JT_BLOCK_END);
    jnode *n = node(c, JN_IF, 0);
    n->kids = k.v;
    n->nkids = k.n;
    return n;
}

static jnode *parse_for(jctx *c)
{
    jnode *n = node(c, JN_FOR, 4);
    parse_targets(c, n);
    if (!is_name(c, "in")) jfail(c, cur(c)->line, "expected 'in' in a for");
    c->pos++;
    n->kids[0] = parse_or(c); /* jinja2: no inline if-else here, `if` filters */
    if (is_name(c, "if")) { c->pos++; n->kids[3] = parse_expr(c); }
    if (is_name(c, "recursive")) jfail(c, cur(c)->line, "recursive for loops are not supported");
    expect_kind(c, JT_BLOCK_END);
    n->kids[1] = parse_body(c, END_FOR);
    if (!strcmp(end_keyword(c), "else")) {
        expect_kind(c, JT_BLOCK_END);
        n->kids[2] = parse_body(c, END_FOR2);
        end_keyword(c);
    }
    expect_kind(c, JT_BLOCK_END);
    return n;
}

static jnode *parse_set(jctx *c)
{
    jnode *n = node(c, JN_SET, 2);
    if (cur(c)->k == JT_NAME && c->toks[c->pos + 1].k == JT_OP && !strcmp(c->toks[c->pos + 1].s, ".")) {
        jnode *obj = node(c, JN_NAME, 0);
        obj->name = expect_name(c);
        c->pos++;
        n->name = expect_name(c);
        n->kids[1] = obj;
        n->flag = 1;
    } else parse_targets(c, n);
    if (!n->flag && n->nnames == 1 && cur(c)->k == JT_BLOCK_END) {
        c->pos++;
        n->k = JN_SET_BLOCK;
        n->kids[0] = parse_body(c, END_SET);
        end_keyword(c);
        expect_kind(c, JT_BLOCK_END);
        return n;
    }
    expect_op(c, "=");
    jnode *v = parse_expr(c);
    if (is_op(c, ",")) { /* set a, b = x, y */
        kids k = {0};
        kids_add(c, &k, v, NULL);
        while (is_op(c, ",")) { c->pos++; kids_add(c, &k, parse_expr(c), NULL); }
        v = node(c, JN_TUPLE, 0);
        v->kids = k.v;
        v->nkids = k.n;
    }
    n->kids[0] = v;
    expect_kind(c, JT_BLOCK_END);
    return n;
}

/* (name, name=default, ...) of a macro or a call block's caller */
static void parse_params(jctx *c, jnode *n, size_t first_kid)
{
    kids k = {0};
    kids defaults = {0};
    expect_op(c, "(");
    while (!is_op(c, ")")) {
        if (k.n) expect_op(c, ",");
        if (is_op(c, ")")) break;
        kids_add(c, &k, NULL, expect_name(c));
        if (is_op(c, "=")) { c->pos++; kids_add(c, &defaults, parse_expr(c), NULL); }
        else if (defaults.n) jfail(c, cur(c)->line, "a parameter without a default follows one with a default");
    }
    expect_op(c, ")");
    n->names = k.names;
    n->nnames = k.n;
    n->nkw = defaults.n;
    jnode **all = jarena_alloc(c, (first_kid + defaults.n) * sizeof *all);
    for (size_t i = 0; i < first_kid && i < n->nkids; i++) all[i] = n->kids[i];
    for (size_t i = 0; i < defaults.n; i++) all[first_kid + i] = defaults.v[i];
    n->kids = all;
    n->nkids = first_kid + defaults.n;
}

static jnode *parse_macro(jctx *c)
{
    jnode *n = node(c, JN_MACRO, 1);
    n->name = expect_name(c);
    parse_params(c, n, 1);
    expect_kind(c, JT_BLOCK_END);
    n->kids[0] = parse_body(c, END_MACRO);
    end_keyword(c);
    if (cur(c)->k == JT_NAME) c->pos++; /* {% endmacro name %} */
    expect_kind(c, JT_BLOCK_END);
    return n;
}

static jnode *parse_call_block(jctx *c)
{
    jnode *n = node(c, JN_CALL_BLOCK, 2);
    if (is_op(c, "(")) parse_params(c, n, 2);
    n->kids[0] = parse_expr(c);
    if (n->kids[0]->k != JN_CALL) jfail(c, n->line, "a call block needs a macro call");
    expect_kind(c, JT_BLOCK_END);
    n->kids[1] = parse_body(c, END_CALL);
    end_keyword(c);
    expect_kind(c, JT_BLOCK_END);
    return n;
}

static jnode *parse_statement(jctx *c)
{
    const jtok *t = cur(c);
    if (t->k != JT_NAME) jfail(c, t->line, "expected a statement name, got %s", tok_desc(t));
    c->pos++;
    const char *kw = t->s;
    if (!strcmp(kw, "if")) return parse_if(c);
    if (!strcmp(kw, "for")) return parse_for(c);
    if (!strcmp(kw, "set")) return parse_set(c);
    if (!strcmp(kw, "macro")) return parse_macro(c);
    if (!strcmp(kw, "call")) return parse_call_block(c);
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        jnode *n = node(c, !strcmp(kw, "break") ? JN_BREAK : JN_CONTINUE, 0);
        expect_kind(c, JT_BLOCK_END);
        return n;
    }
    jfail(c, t->line, "unknown or unsupported statement '%s'", kw);
}

static jnode *parse_body(jctx *c, const char *const *ends)
{
    enter(c);
    kids k = {0};
    for (;;) {
        jstep(c);
        const jtok *t = cur(c);
        if (t->k == JT_EOF) {
            if (ends) jfail(c, t->line, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (at_end_tag(c, ends)) break;
        if (t->k == JT_DATA) {
            c->pos++;
            jnode *n = node(c, JN_TEXT, 0);
            n->value = jv_str_ref(t->s, t->n);
            kids_add(c, &k, n, NULL);
        } else if (t->k == JT_VAR_BEGIN) {
            c->pos++;
            jnode *n = node(c, JN_OUTPUT, 1);
            n->kids[0] = parse_expr(c);
            expect_kind(c, JT_VAR_END);
            kids_add(c, &k, n, NULL);
        } else if (t->k == JT_BLOCK_BEGIN) {
            c->pos++;
            kids_add(c, &k, parse_statement(c), NULL);
        } else jfail(c, t->line, "unexpected %s", tok_desc(t));
    }
    jnode *n = node(c, JN_BODY, 0);
    n->kids = k.v;
    n->nkids = k.n;
    c->depth--;
    return n;
}

jnode *jparse(jctx *c)
{
    c->pos = 0;
    c->depth = 0;
    return parse_body(c, NULL);
}
