/* jinja_eval.c - walks the syntax tree: statements write to the context's
 * output buffer, expressions return values.
 *
 * Scopes follow jinja2: a for loop's body gets a fresh frame each turn (a
 * `set` inside it does not outlive the turn; that is why templates use
 * namespace()), `if` opens no scope, a macro call gets a frame whose parent
 * is the frame the macro was defined in. Every statement and expression
 * costs a step, and macro calls count against max_depth.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "template/jinja_impl.h"

/* ------------------------------------------------------------ frames */

jframe *jframe_new(jctx *c, jframe *parent)
{
    jframe *f = jarena_alloc(c, sizeof *f);
    f->parent = parent;
    return f;
}

void jframe_set(jctx *c, jframe *f, const char *name, jv v)
{
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        const char **nn = jarena_alloc(c, cap * sizeof *nn);
        jv *nv = jarena_alloc(c, cap * sizeof *nv);
        if (f->n) { memcpy(nn, f->names, f->n * sizeof *nn); memcpy(nv, f->vals, f->n * sizeof *nv); }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

bool jframe_get(jframe *f, const char *name, jv *out)
{
    for (; f; f = f->parent)
        for (size_t i = 0; i < f->n; i++)
            if (!strcmp(f->names[i], name)) { *out = f->vals[i]; return true; }
    return false;
}

/* ------------------------------------------------------------ operators */

static void need_defined(jctx *c, int line, jv v)
{
    if (v.k == JV_UNDEF) {
        if (v.s) jfail(c, line, "'%s' is undefined", v.s);
        jfail(c, line, "an undefined value was used");
    }
}

static jv arith_int(jctx *c, int line, const char *op, int64_t a, int64_t b)
{
    int64_t r;
    switch (op[0]) {
    case '+': if (__builtin_add_overflow(a, b, &r)) break; return jv_int(r);
    case '-': if (__builtin_sub_overflow(a, b, &r)) break; return jv_int(r);
    case '*':
        if (op[1] == '*') {
            if (b < 0) return jv_float(pow((double)a, (double)b));
            r = 1;
            for (int64_t i = 0; i < b; i++) {
                jstep(c);
                if (__builtin_mul_overflow(r, a, &r)) jfail(c, line, "integer overflow in '**'");
            }
            return jv_int(r);
        }
        if (__builtin_mul_overflow(a, b, &r)) break;
        return jv_int(r);
    case '/':
        if (b == 0) jfail(c, line, "division by zero");
        if (op[1] == '/') {
            if (a == INT64_MIN && b == -1) break;
            r = a / b;
            if ((a % b != 0) && ((a < 0) != (b < 0))) r--;
            return jv_int(r);
        }
        return jv_float((double)a / (double)b);
    case '%':
        if (b == 0) jfail(c, line, "modulo by zero");
        if (a == INT64_MIN && b == -1) return jv_int(0);
        r = a % b;
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        return jv_int(r);
    }
    jfail(c, line, "integer overflow in '%s'", op);
}

static jv arith_float(jctx *c, int line, const char *op, double a, double b)
{
    switch (op[0]) {
    case '+': return jv_float(a + b);
    case '-': return jv_float(a - b);
    case '*': return jv_float(op[1] == '*' ? pow(a, b) : a * b);
    case '/':
        if (b == 0) jfail(c, line, "float division by zero");
        return jv_float(op[1] == '/' ? floor(a / b) : a / b);
    case '%': {
        if (b == 0) jfail(c, line, "float modulo");
        double r = fmod(a, b);
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        return jv_float(r);
    }
    }
    jfail(c, line, "bad operator '%s'", op);
}

static jv repeat(jctx *c, int line, jv seq, int64_t times)
{
    if (times < 0) times = 0;
    if (seq.k == JV_STR) {
        if (seq.n && (uint64_t)times > c->lim.max_output / seq.n) jfail(c, line, "string repetition too large");
        jbuf b = {0};
        jbuf_add(c, &b, "", 0);
        for (int64_t i = 0; i < times; i++) jbuf_add(c, &b, seq.s, seq.n);
        return jv_str_ref(b.s, b.n);
    }
    if (seq.l->n && (uint64_t)times > c->lim.max_steps / seq.l->n) jfail(c, line, "list repetition too large");
    jv l = jv_list_new(c, 0);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.l->n; k++) { jstep(c); jv_list_push(c, l, seq.l->v[k]); }
    return l;
}

static jv binop(jctx *c, int line, const char *op, jv a, jv b)
{
    if (op[0] == '~') {
        jbuf s = {0};
        jbuf_add(c, &s, "", 0);
        jv_to_str(c, &s, a);
        jv_to_str(c, &s, b);
        return jv_str_ref(s.s, s.n);
    }
    need_defined(c, line, a);
    need_defined(c, line, b);
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT && !(op[0] == '/' && op[1] == 0))
            return arith_int(c, line, op, a.k == JV_BOOL ? a.b : a.i, b.k == JV_BOOL ? b.b : b.i);
        return arith_float(c, line, op, jv_num(a), jv_num(b));
    }
    if (op[0] == '+' && a.k == JV_STR && b.k == JV_STR) {
        char *s = jarena_alloc(c, a.n + b.n + 1);
        if (c->arena_bytes > c->lim.max_output && a.n + b.n > c->lim.max_output) jfail(c, line, "string too large");
        memcpy(s, a.s, a.n);
        memcpy(s + a.n, b.s, b.n);
        return jv_str_ref(s, a.n + b.n);
    }
    if (op[0] == '+' && a.k == JV_LIST && b.k == JV_LIST) {
        jv l = jv_list_new(c, a.l->n + b.l->n);
        for (size_t i = 0; i < a.l->n; i++) jv_list_push(c, l, a.l->v[i]);
        for (size_t i = 0; i < b.l->n; i++) jv_list_push(c, l, b.l->v[i]);
        l.n = a.n == JV_LIST_TUPLE && b.n == JV_LIST_TUPLE ? JV_LIST_TUPLE : JV_LIST_PLAIN;
        return l;
    }
    if (op[0] == '*' && op[1] == 0) {
        if ((a.k == JV_STR || a.k == JV_LIST) && (b.k == JV_INT || b.k == JV_BOOL)) return repeat(c, line, a, b.k == JV_INT ? b.i : b.b);
        if ((b.k == JV_STR || b.k == JV_LIST) && (a.k == JV_INT || a.k == JV_BOOL)) return repeat(c, line, b, a.k == JV_INT ? a.i : a.b);
    }
    jfail(c, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static bool contains(jctx *c, int line, jv needle, jv hay)
{
    switch (hay.k) {
    case JV_STR:
        if (needle.k != JV_STR) jfail(c, line, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        if (!needle.n) return true;
        return memmem(hay.s, hay.n, needle.s, needle.n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < hay.l->n; i++) { jstep(c); if (jv_equal(needle, hay.l->v[i])) return true; }
        return false;
    case JV_DICT: case JV_NS: { jv o; return jv_dict_get_v(hay, needle, &o); }
    case JV_UNDEF: return false; /* jinja2's Undefined iterates as empty */
    default: jfail(c, line, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

/* Comparing two lists or dicts walks them: charge their sizes as steps. */
static void charge(jctx *c, jv v)
{
    size_t n = v.k == JV_LIST ? v.l->n : (v.k == JV_DICT || v.k == JV_NS) ? v.d->n : 0;
    for (size_t i = 0; i < n; i += 16) jstep(c);
}

static bool compare(jctx *c, int line, const char *op, jv a, jv b)
{
    charge(c, a);
    charge(c, b);
    if (!strcmp(op, "==")) return jv_equal(a, b);
    if (!strcmp(op, "!=")) return !jv_equal(a, b);
    if (!strcmp(op, "in")) return contains(c, line, a, b);
    if (!strcmp(op, "notin")) return !contains(c, line, a, b);
    need_defined(c, line, a);
    need_defined(c, line, b);
    int r = jv_compare(c, line, a, b);
    if (!strcmp(op, "<")) return r < 0;
    if (!strcmp(op, ">")) return r > 0;
    if (!strcmp(op, "<=")) return r <= 0;
    return r >= 0;
}

/* ------------------------------------------------------------ slices */

static int64_t clamp_index(int64_t i, int64_t n, bool neg_step)
{
    if (i < 0) { i += n; if (i < 0) i = neg_step ? -1 : 0; }
    else if (i >= n) i = neg_step ? n - 1 : n;
    return i;
}

static jv slice(jctx *c, int line, jv obj, jv lo, jv hi, jv st)
{
    int64_t step = 1;
    if (st.k != JV_UNDEF && st.k != JV_NONE) {
        if (st.k != JV_INT) jfail(c, line, "slice indices must be integers");
        step = st.i;
        if (step == 0) jfail(c, line, "slice step cannot be zero");
    }
    bool neg = step < 0;
    int64_t n;
    if (obj.k == JV_STR) n = (int64_t)jutf8_len(obj.s, obj.n);
    else if (obj.k == JV_LIST) n = (int64_t)obj.l->n;
    else { need_defined(c, line, obj); jfail(c, line, "'%s' object is not subscriptable", jv_type_name(obj)); }
    int64_t a, b;
    if (lo.k == JV_UNDEF || lo.k == JV_NONE) a = neg ? n - 1 : 0;
    else if (lo.k == JV_INT) a = clamp_index(lo.i, n, neg);
    else jfail(c, line, "slice indices must be integers");
    if (hi.k == JV_UNDEF || hi.k == JV_NONE) b = neg ? -1 : n;
    else if (hi.k == JV_INT) b = clamp_index(hi.i, n, neg);
    else jfail(c, line, "slice indices must be integers");
    jv out = obj.k == JV_STR ? jv_none() : jv_list_new(c, 0);
    jbuf s = {0};
    jbuf_add(c, &s, "", 0);
    for (int64_t i = a; neg ? i > b : i < b; i += step) {
        jstep(c);
        if (obj.k == JV_STR) {
            size_t o = jutf8_offset(obj.s, obj.n, (size_t)i), e = jutf8_offset(obj.s, obj.n, (size_t)i + 1);
            jbuf_add(c, &s, obj.s + o, e - o);
        } else jv_list_push(c, out, obj.l->v[i]);
    }
    return obj.k == JV_STR ? jv_str_ref(s.s, s.n) : out;
}

/* ------------------------------------------------------------ calls */

typedef struct {
    jv *args;
    size_t nargs;
    const char **kwn;
    jv *kwv;
    size_t nkw;
} argpack;

static argpack eval_args(jctx *c, jnode *e, size_t first, jframe *f)
{
    argpack a = {0};
    size_t total = e->nkids - first;
    a.nkw = e->nkw;
    a.nargs = total - a.nkw;
    a.args = jarena_alloc(c, (total + 1) * sizeof(jv));
    a.kwv = a.args + a.nargs;
    a.kwn = jarena_alloc(c, (a.nkw + 1) * sizeof(char *));
    for (size_t i = 0; i < total; i++) a.args[i] = jeval(c, e->kids[first + i], f);
    for (size_t i = 0; i < a.nkw; i++) a.kwn[i] = e->names[first + a.nargs + i];
    return a;
}

static jv call_macro(jctx *c, int line, jmacro *m, const jv *args, size_t nargs, const char *const *kwn, const jv *kwv,
                     size_t nkw, jv caller)
{
    jnode *d = m->def;
    bool is_caller = d->k == JN_CALL_BLOCK;
    jnode *body = is_caller ? d->kids[1] : d->kids[0];
    size_t dflt0 = is_caller ? 2 : 1;
    if (++c->depth > c->lim.max_depth) jfail(c, line, "macro calls nest deeper than %d", c->lim.max_depth);
    jframe *f = jframe_new(c, m->closure);
    if (nargs > d->nnames) jfail(c, line, "macro '%s' takes not more than %zu argument(s)", d->name ? d->name : "caller", d->nnames);
    for (size_t i = 0; i < d->nnames; i++) {
        jv v = jv_undef(d->names[i]);
        bool set = false;
        if (i < nargs) { v = args[i]; set = true; }
        for (size_t k = 0; k < nkw; k++)
            if (!strcmp(kwn[k], d->names[i])) { v = kwv[k]; set = true; }
        size_t first_default = d->nnames - d->nkw;
        if (!set && i >= first_default) v = jeval(c, d->kids[dflt0 + i - first_default], f);
        jframe_set(c, f, d->names[i], v);
    }
    for (size_t k = 0; k < nkw; k++) {
        bool known = false;
        for (size_t i = 0; i < d->nnames; i++) known |= !strcmp(kwn[k], d->names[i]);
        if (!known) jfail(c, line, "macro '%s' takes no keyword argument '%s'", d->name ? d->name : "caller", kwn[k]);
    }
    if (caller.k == JV_MACRO) jframe_set(c, f, "caller", caller);
    jbuf *saved = c->out, out = {0};
    jbuf_add(c, &out, "", 0);
    c->out = &out;
    int saved_ctl = c->loop_ctl;
    jeval_body(c, body, f);
    c->loop_ctl = saved_ctl;
    c->out = saved;
    c->depth--;
    return jv_str_ref(out.s, out.n);
}

jv jcall(jctx *c, int line, jv fn, const jv *args, size_t nargs, const char *const *kwn, const jv *kwv, size_t nkw)
{
    jstep(c);
    if (fn.k == JV_FUNC) return fn.fn->fn(c, fn.fn, args, nargs, kwn, kwv, nkw);
    if (fn.k == JV_MACRO) return call_macro(c, line, fn.m, args, nargs, kwn, kwv, nkw, jv_none());
    need_defined(c, line, fn);
    jfail(c, line, "'%s' object is not callable", jv_type_name(fn));
}

/* ------------------------------------------------------------ expressions */

jv jeval(jctx *c, jnode *e, jframe *f)
{
    jstep(c);
    switch (e->k) {
    case JN_CONST: return e->value;
    case JN_NAME: {
        jv v;
        if (jframe_get(f, e->name, &v)) return v;
        return jv_undef(e->name);
    }
    case JN_LIST: case JN_TUPLE: {
        jv l = jv_list_new(c, e->nkids);
        for (size_t i = 0; i < e->nkids; i++) jv_list_push(c, l, jeval(c, e->kids[i], f));
        l.n = e->k == JN_TUPLE;
        return l;
    }
    case JN_DICT: {
        jv d = jv_dict_new(c, e->nkids / 2);
        for (size_t i = 0; i + 1 < e->nkids; i += 2) {
            jv k = jeval(c, e->kids[i], f);
            if (k.k == JV_LIST || k.k == JV_DICT || k.k == JV_UNDEF) jfail(c, e->line, "unhashable dict key of type '%s'", jv_type_name(k));
            jv_dict_set(c, d, k, jeval(c, e->kids[i + 1], f));
        }
        return d;
    }
    case JN_ATTR: return jattr(c, e->line, jeval(c, e->kids[0], f), e->name, strlen(e->name));
    case JN_ITEM: return jitem(c, e->line, jeval(c, e->kids[0], f), jeval(c, e->kids[1], f));
    case JN_SLICE: {
        jv o = jeval(c, e->kids[0], f);
        jv p[3];
        for (int i = 0; i < 3; i++) p[i] = e->kids[1 + i] ? jeval(c, e->kids[1 + i], f) : jv_undef(NULL);
        return slice(c, e->line, o, p[0], p[1], p[2]);
    }
    case JN_CALL: {
        jv fn = jeval(c, e->kids[0], f);
        argpack a = eval_args(c, e, 1, f);
        return jcall(c, e->line, fn, a.args, a.nargs, a.kwn, a.kwv, a.nkw);
    }
    case JN_FILTER: {
        jv v = jeval(c, e->kids[0], f);
        argpack a = eval_args(c, e, 1, f);
        return jfilter(c, e->line, e->name, v, a.args, a.nargs, a.kwn, a.kwv, a.nkw);
    }
    case JN_TEST: {
        jv v = jeval(c, e->kids[0], f);
        argpack a = eval_args(c, e, 1, f);
        bool r = jtest(c, e->line, e->name, v, a.args, a.nargs);
        return jv_bool(e->flag ? !r : r);
    }
    case JN_UNARY: {
        jv v = jeval(c, e->kids[0], f);
        need_defined(c, e->line, v);
        if (!jv_is_number(v)) jfail(c, e->line, "bad operand type for unary %s: '%s'", e->name, jv_type_name(v));
        if (e->name[0] == '+') return v.k == JV_BOOL ? jv_int(v.b) : v;
        if (v.k == JV_FLOAT) return jv_float(-v.f);
        int64_t i = v.k == JV_BOOL ? v.b : v.i;
        if (i == INT64_MIN) jfail(c, e->line, "integer overflow in unary -");
        return jv_int(-i);
    }
    case JN_BINARY: {
        jv a = jeval(c, e->kids[0], f);
        return binop(c, e->line, e->name, a, jeval(c, e->kids[1], f));
    }
    case JN_AND: {
        jv a = jeval(c, e->kids[0], f);
        return jv_truthy(a) ? jeval(c, e->kids[1], f) : a;
    }
    case JN_OR: {
        jv a = jeval(c, e->kids[0], f);
        return jv_truthy(a) ? a : jeval(c, e->kids[1], f);
    }
    case JN_NOT: return jv_bool(!jv_truthy(jeval(c, e->kids[0], f)));
    case JN_COMPARE: {
        jv a = jeval(c, e->kids[0], f);
        for (size_t i = 1; i < e->nkids; i++) {
            jv b = jeval(c, e->kids[i], f);
            if (!compare(c, e->line, e->names[i], a, b)) return jv_bool(false);
            a = b;
        }
        return jv_bool(true);
    }
    case JN_COND:
        if (jv_truthy(jeval(c, e->kids[1], f))) return jeval(c, e->kids[0], f);
        return e->kids[2] ? jeval(c, e->kids[2], f) : jv_undef(NULL);
    default: jfail(c, e->line, "a statement where an expression was expected");
    }
}

/* ------------------------------------------------------------ statements */

static void assign_targets(jctx *c, int line, jframe *f, const char **names, size_t n, jv v)
{
    if (n == 1) { jframe_set(c, f, names[0], v); return; }
    jv l = jv_iterable_list(c, line, v);
    if (l.l->n != n) jfail(c, line, "cannot unpack %zu value(s) into %zu name(s)", l.l->n, n);
    for (size_t i = 0; i < n; i++) jframe_set(c, f, names[i], l.l->v[i]);
}

static void exec_for(jctx *c, jnode *s, jframe *f)
{
    jv it = jeval(c, s->kids[0], f);
    jv all = jv_iterable_list(c, s->line, it);
    jv items = all;
    if (s->kids[3]) { /* for x in xs if cond: filter first, loop.length counts what passes */
        items = jv_list_new(c, 0);
        for (size_t i = 0; i < all.l->n; i++) {
            jframe *tf = jframe_new(c, f);
            assign_targets(c, s->line, tf, s->names, s->nnames, all.l->v[i]);
            if (jv_truthy(jeval(c, s->kids[3], tf))) jv_list_push(c, items, all.l->v[i]);
        }
    }
    size_t n = items.l->n;
    if (n == 0) {
        if (s->kids[2]) jeval_body(c, s->kids[2], f);
        return;
    }
    jloop *lp = jarena_alloc(c, sizeof *lp);
    lp->length = n;
    lp->items = items;
    jv loopv = {.k = JV_LOOP};
    loopv.loop = lp;
    /* iterate over a snapshot: appends during the loop are not walked */
    jv *snap = jarena_alloc(c, n * sizeof(jv));
    memcpy(snap, items.l->v, n * sizeof(jv));
    jframe *bf = jframe_new(c, f); /* one frame, emptied each turn: long loops do not grow the arena */
    for (size_t i = 0; i < n; i++) {
        jstep(c);
        bf->n = 0;
        lp->index0 = i;
        lp->has_prev = i > 0;
        lp->has_next = i + 1 < n;
        if (i > 0) lp->prev = snap[i - 1];
        if (i + 1 < n) lp->next = snap[i + 1];
        jframe_set(c, bf, "loop", loopv);
        assign_targets(c, s->line, bf, s->names, s->nnames, snap[i]);
        jeval_body(c, s->kids[1], bf);
        int ctl = c->loop_ctl;
        c->loop_ctl = 0;
        if (ctl == 1) break;
    }
}

static void exec_set(jctx *c, jnode *s, jframe *f)
{
    jv v = jeval(c, s->kids[0], f);
    if (s->flag) {
        jv obj = jeval(c, s->kids[1], f);
        if (obj.k != JV_NS) jfail(c, s->line, "cannot assign attribute on non-namespace object");
        jv_dict_set(c, obj, jv_str(c, s->name, strlen(s->name)), v);
        return;
    }
    assign_targets(c, s->line, f, s->names, s->nnames, v);
}

static void exec_statement(jctx *c, jnode *s, jframe *f)
{
    jstep(c);
    switch (s->k) {
    case JN_TEXT: jbuf_add(c, c->out, s->value.s, s->value.n); return;
    case JN_OUTPUT: jv_to_str(c, c->out, jeval(c, s->kids[0], f)); return;
    case JN_IF:
        for (size_t i = 0; i + 1 < s->nkids; i += 2)
            if (jv_truthy(jeval(c, s->kids[i], f))) { jeval_body(c, s->kids[i + 1], f); return; }
        if (s->nkids % 2) jeval_body(c, s->kids[s->nkids - 1], f);
        return;
    case JN_FOR: exec_for(c, s, f); return;
    case JN_SET: exec_set(c, s, f); return;
    case JN_SET_BLOCK: {
        jbuf *saved = c->out, out = {0};
        jbuf_add(c, &out, "", 0);
        c->out = &out;
        jeval_body(c, s->kids[0], f);
        c->out = saved;
        jframe_set(c, f, s->names[0], jv_str_ref(out.s, out.n));
        return;
    }
    case JN_MACRO: {
        jv m = {.k = JV_MACRO};
        m.m = jarena_alloc(c, sizeof *m.m);
        m.m->def = s;
        m.m->closure = f;
        jframe_set(c, f, s->name, m);
        return;
    }
    case JN_CALL_BLOCK: {
        jnode *call = s->kids[0];
        jv fn = jeval(c, call->kids[0], f);
        if (fn.k != JV_MACRO) jfail(c, s->line, "a call block needs a macro, got %s", jv_type_name(fn));
        argpack a = eval_args(c, call, 1, f);
        jv caller = {.k = JV_MACRO};
        caller.m = jarena_alloc(c, sizeof *caller.m);
        caller.m->def = s;
        caller.m->closure = f;
        jv r = call_macro(c, s->line, fn.m, a.args, a.nargs, a.kwn, a.kwv, a.nkw, caller);
        jbuf_add(c, c->out, r.s, r.n);
        return;
    }
    case JN_BREAK: c->loop_ctl = 1; return;
    case JN_CONTINUE: c->loop_ctl = 2; return;
    case JN_BODY: jeval_body(c, s, f); return;
    default: jfail(c, s->line, "an expression where a statement was expected");
    }
}

void jeval_body(jctx *c, jnode *body, jframe *f)
{
    for (size_t i = 0; i < body->nkids && !c->loop_ctl; i++) exec_statement(c, body->kids[i], f);
}
