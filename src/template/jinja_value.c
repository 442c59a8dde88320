/* jinja_value.c - the arena, output buffers and values of the Jinja
 * interpreter: construction, truth, equality and ordering as Python has
 * them, and the three ways a value becomes text: str(), repr() and
 * json.dumps(ensure_ascii=False) (the tojson filter).
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "template/jinja_impl.h"

/* ------------------------------------------------------------ arena */

void *jarena_alloc(jctx *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    jarena_chunk *k = c->chunks;
    if (!k || k->cap - k->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (c->arena_bytes + cap > c->lim.max_memory)
            jfail(c, 0, "the template needs more than %zu bytes of memory", c->lim.max_memory);
        k = malloc(sizeof *k + cap);
        if (!k) jfail(c, 0, "out of memory");
        k->cap = cap;
        k->used = 0;
        k->next = c->chunks;
        c->chunks = k;
        c->arena_bytes += cap;
    }
    void *p = k->data + k->used;
    k->used += n;
    memset(p, 0, n);
    return p;
}

char *jarena_strdup(jctx *c, const char *s, size_t n)
{
    char *p = jarena_alloc(c, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jfail(jctx *c, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) snprintf(c->err, sizeof c->err, "template line %d: %s", line, msg);
    else snprintf(c->err, sizeof c->err, "template: %s", msg);
    if (!c->err_code) c->err_code = PL_EINVAL;
    longjmp(c->fail, 1);
}

void jstep(jctx *c)
{
    if (++c->steps > c->lim.max_steps)
        jfail(c, 0, "the template took more than %" PRIu64 " evaluation steps", c->lim.max_steps);
}

/* ------------------------------------------------------------ buffers */

/* The limit is checked on every add: a buffer's doubled capacity may
 * exceed max_output, and adds that fit it must still be refused. */
static void jbuf_reserve(jctx *c, jbuf *b, size_t more)
{
    if (b->n + more > c->lim.max_output)
        jfail(c, 0, "the template's text (its output or a string it builds) exceeds %zu bytes", c->lim.max_output);
    if (b->n + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->n + more + 1) cap *= 2;
    char *s = jarena_alloc(c, cap);
    if (b->n) memcpy(s, b->s, b->n);
    b->s = s;
    b->cap = cap;
}

void jbuf_add(jctx *c, jbuf *b, const char *s, size_t n)
{
    jbuf_reserve(c, b, n);
    if (n) memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void jbuf_addc(jctx *c, jbuf *b, char ch) { jbuf_add(c, b, &ch, 1); }

void jbuf_addf(jctx *c, jbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    jbuf_add(c, b, tmp, (size_t)n);
}

/* ------------------------------------------------------------ values */

jv jv_str(jctx *c, const char *s, size_t n) { return jv_str_ref(jarena_strdup(c, s, n), n); }

jv jv_list_new(jctx *c, size_t cap)
{
    jv v = {.k = JV_LIST};
    v.l = jarena_alloc(c, sizeof *v.l);
    if (cap) {
        v.l->v = jarena_alloc(c, cap * sizeof(jv));
        v.l->cap = cap;
    }
    return v;
}

jv jv_dict_new(jctx *c, size_t cap)
{
    jv v = {.k = JV_DICT};
    v.d = jarena_alloc(c, sizeof *v.d);
    if (cap) {
        v.d->keys = jarena_alloc(c, cap * sizeof(jv));
        v.d->vals = jarena_alloc(c, cap * sizeof(jv));
        v.d->cap = cap;
    }
    return v;
}

void jv_list_push(jctx *c, jv list, jv item)
{
    jlist *l = list.l;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jarena_alloc(c, cap * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = item;
}

static bool key_eq(jv k, jv key)
{
    if (k.k == JV_STR && key.k == JV_STR) return k.n == key.n && memcmp(k.s, key.s, k.n) == 0;
    return jv_equal(k, key);
}

void jv_dict_set(jctx *c, jv dict, jv key, jv val)
{
    jdict *d = dict.d;
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->keys[i], key)) { d->vals[i] = val; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = jarena_alloc(c, cap * sizeof(jv)), *nv = jarena_alloc(c, cap * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->keys, d->n * sizeof(jv));
            memcpy(nv, d->vals, d->n * sizeof(jv));
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = val;
}

bool jv_dict_get(jv dict, const char *key, size_t n, jv *out)
{
    return jv_dict_get_v(dict, jv_str_ref(key, n), out);
}

bool jv_dict_get_v(jv dict, jv key, jv *out)
{
    jdict *d = dict.d;
    for (size_t i = 0; i < d->n; i++)
        if (key_eq(d->keys[i], key)) { *out = d->vals[i]; return true; }
    return false;
}

jv jv_func(jctx *c, const char *name, jbuiltin_fn fn, jv self)
{
    jv v = {.k = JV_FUNC};
    v.fn = jarena_alloc(c, sizeof *v.fn);
    v.fn->name = name;
    v.fn->fn = fn;
    v.fn->self = self;
    return v;
}

const char *jv_type_name(jv v)
{
    switch (v.k) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.n == JV_LIST_GEN ? "generator" : v.n == JV_LIST_TUPLE ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_FUNC: return "builtin_function_or_method";
    case JV_MACRO: return "Macro";
    }
    return "?";
}

bool jv_truthy(jv v)
{
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0;
    case JV_STR: return v.n != 0;
    case JV_LIST: return v.l->n != 0;
    case JV_DICT: return v.d->n != 0;
    default: return true;
    }
}

bool jv_is_number(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }

double jv_num(jv v) { return v.k == JV_FLOAT ? v.f : v.k == JV_INT ? (double)v.i : v.k == JV_BOOL ? v.b : 0; }

bool jv_equal(jv a, jv b)
{
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) return jv_num(a) == jv_num(b) && (a.k == JV_BOOL ? a.b : a.i) == (b.k == JV_BOOL ? b.b : b.i);
        return jv_num(a) == jv_num(b);
    }
    if (a.k != b.k) return false;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.n == b.n && memcmp(a.s, b.s, a.n) == 0;
    case JV_LIST:
        if (a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jv_equal(a.l->v[i], b.l->v[i])) return false;
        return true;
    case JV_DICT: case JV_NS:
        if (a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jv o;
            if (!jv_dict_get_v(b, a.d->keys[i], &o) || !jv_equal(a.d->vals[i], o)) return false;
        }
        return true;
    case JV_LOOP: return a.loop == b.loop;
    case JV_FUNC: return a.fn == b.fn;
    case JV_MACRO: return a.m == b.m;
    default: return false;
    }
}

int jv_compare(jctx *c, int line, jv a, jv b)
{
    if (jv_is_number(a) && jv_is_number(b)) {
        double x = jv_num(a), y = jv_num(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.n < b.n ? a.n : b.n;
        int r = memcmp(a.s, b.s, n);
        return r ? r : a.n < b.n ? -1 : a.n > b.n ? 1 : 0;
    }
    if (a.k == JV_LIST && b.k == JV_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (jv_equal(a.l->v[i], b.l->v[i])) continue;
            return jv_compare(c, line, a.l->v[i], b.l->v[i]);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n ? 1 : 0;
    }
    jfail(c, line, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

/* ------------------------------------------------------------ UTF-8 */

size_t jutf8_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

size_t jutf8_offset(const char *s, size_t n, size_t cp)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) == 0x80) continue;
        if (k == cp) return i;
        k++;
    }
    return n;
}

/* ------------------------------------------------------------ text */

/* Python's float repr: the shortest digits that read back to the same
 * double; exponent form below 1e-4 and from 1e16 on. */
void jfmt_float(char *buf, size_t size, double f)
{
    if (isnan(f)) { snprintf(buf, size, "nan"); return; }
    if (isinf(f)) { snprintf(buf, size, f < 0 ? "-inf" : "inf"); return; }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = d.ddde[+-]XX */
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = buf;
    size_t left = size;
#define PUT(...) do { int w = snprintf(o, left, __VA_ARGS__); if (w < 0 || (size_t)w >= left) return; o += w; left -= (size_t)w; } while (0)
    if (neg) PUT("-");
    if (exp < -4 || exp >= 16) {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        PUT("0.");
        for (int i = 0; i < -exp - 1; i++) PUT("0");
        PUT("%s", digits);
    } else {
        for (int i = 0; i <= exp; i++) PUT("%c", i < nd ? digits[i] : '0');
        PUT(".");
        if (nd > exp + 1) PUT("%s", digits + exp + 1);
        else PUT("0");
    }
#undef PUT
}

static void repr_str(jctx *c, jbuf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jbuf_addc(c, b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == (unsigned char)q || ch == '\\') { jbuf_addc(c, b, '\\'); jbuf_addc(c, b, (char)ch); }
        else if (ch == '\n') jbuf_add(c, b, "\\n", 2);
        else if (ch == '\r') jbuf_add(c, b, "\\r", 2);
        else if (ch == '\t') jbuf_add(c, b, "\\t", 2);
        else if (ch < 0x20 || ch == 0x7f) jbuf_addf(c, b, "\\x%02x", ch);
        else jbuf_addc(c, b, (char)ch);
    }
    jbuf_addc(c, b, q);
}

static void to_text(jctx *c, jbuf *b, jv v, bool repr)
{
    char num[48];
    switch (v.k) {
    case JV_UNDEF: if (!repr) return; jbuf_add(c, b, "Undefined", 9); return;
    case JV_NONE: jbuf_add(c, b, "None", 4); return;
    case JV_BOOL: if (v.b) jbuf_add(c, b, "True", 4); else jbuf_add(c, b, "False", 5); return;
    case JV_INT: jbuf_addf(c, b, "%" PRId64, v.i); return;
    case JV_FLOAT: jfmt_float(num, sizeof num, v.f); jbuf_add(c, b, num, strlen(num)); return;
    case JV_STR: if (repr) repr_str(c, b, v.s, v.n); else jbuf_add(c, b, v.s, v.n); return;
    case JV_LIST:
        if (v.n == JV_LIST_GEN) { jbuf_add(c, b, "<generator object>", 18); return; }
        jbuf_addc(c, b, v.n ? '(' : '[');
        for (size_t i = 0; i < v.l->n; i++) {
            jstep(c);
            if (i) jbuf_add(c, b, ", ", 2);
            to_text(c, b, v.l->v[i], true);
        }
        if (v.n && v.l->n == 1) jbuf_addc(c, b, ',');
        jbuf_addc(c, b, v.n ? ')' : ']');
        return;
    case JV_DICT: case JV_NS:
        if (v.k == JV_NS) jbuf_add(c, b, "<Namespace ", 11);
        jbuf_addc(c, b, '{');
        for (size_t i = 0; i < v.d->n; i++) {
            jstep(c);
            if (i) jbuf_add(c, b, ", ", 2);
            to_text(c, b, v.d->keys[i], true);
            jbuf_add(c, b, ": ", 2);
            to_text(c, b, v.d->vals[i], true);
        }
        jbuf_addc(c, b, '}');
        if (v.k == JV_NS) jbuf_addc(c, b, '>');
        return;
    case JV_LOOP: jbuf_add(c, b, "<LoopContext>", 13); return;
    case JV_FUNC: jbuf_addf(c, b, "<built-in function %s>", v.fn->name); return;
    case JV_MACRO: jbuf_addf(c, b, "<Macro '%s'>", v.m->def->name); return;
    }
}

void jv_to_str(jctx *c, jbuf *b, jv v) { to_text(c, b, v, false); }
void jv_to_repr(jctx *c, jbuf *b, jv v) { to_text(c, b, v, true); }

jv jv_stringify(jctx *c, jv v)
{
    if (v.k == JV_STR) return v;
    jbuf b = {0};
    jv_to_str(c, &b, v);
    return jv_str_ref(b.s ? b.s : "", b.n);
}

static void json_str(jctx *c, jbuf *b, const char *s, size_t n)
{
    jbuf_addc(c, b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': jbuf_add(c, b, "\\\"", 2); break;
        case '\\': jbuf_add(c, b, "\\\\", 2); break;
        case '\n': jbuf_add(c, b, "\\n", 2); break;
        case '\r': jbuf_add(c, b, "\\r", 2); break;
        case '\t': jbuf_add(c, b, "\\t", 2); break;
        case '\b': jbuf_add(c, b, "\\b", 2); break;
        case '\f': jbuf_add(c, b, "\\f", 2); break;
        default:
            if (ch < 0x20) jbuf_addf(c, b, "\\u%04x", ch);
            else jbuf_addc(c, b, (char)ch);
        }
    }
    jbuf_addc(c, b, '"');
}

static void json_nl(jctx *c, jbuf *b, int indent, int level)
{
    jbuf_addc(c, b, '\n');
    for (int i = 0; i < indent * level; i++) jbuf_addc(c, b, ' ');
}

static int cmp_keys(const void *x, const void *y)
{
    const jv *a = *(const jv *const *)x, *b = *(const jv *const *)y;
    size_t n = a->n < b->n ? a->n : b->n;
    int r = memcmp(a->s, b->s, n);
    return r ? r : (a->n > b->n) - (a->n < b->n);
}

/* json.dumps(v, ensure_ascii=False, indent=indent (<0: None), sort_keys) */
void jv_to_json(jctx *c, int line, jbuf *b, jv v, int indent, int level, bool sort_keys)
{
    char num[48];
    jstep(c);
    if (level > c->lim.max_depth) jfail(c, line, "tojson: nesting deeper than %d", c->lim.max_depth);
    switch (v.k) {
    case JV_NONE: jbuf_add(c, b, "null", 4); return;
    case JV_BOOL: if (v.b) jbuf_add(c, b, "true", 4); else jbuf_add(c, b, "false", 5); return;
    case JV_INT: jbuf_addf(c, b, "%" PRId64, v.i); return;
    case JV_FLOAT:
        if (isnan(v.f)) jbuf_add(c, b, "NaN", 3);
        else if (isinf(v.f)) { if (v.f < 0) jbuf_add(c, b, "-Infinity", 9); else jbuf_add(c, b, "Infinity", 8); }
        else { jfmt_float(num, sizeof num, v.f); jbuf_add(c, b, num, strlen(num)); }
        return;
    case JV_STR: json_str(c, b, v.s, v.n); return;
    case JV_LIST:
        if (v.n == JV_LIST_GEN) jfail(c, line, "Object of type generator is not JSON serializable");
        if (!v.l->n) { jbuf_add(c, b, "[]", 2); return; }
        jbuf_addc(c, b, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jbuf_addc(c, b, ',');
            if (indent >= 0) json_nl(c, b, indent, level + 1);
            else if (i) jbuf_addc(c, b, ' ');
            jv_to_json(c, line, b, v.l->v[i], indent, level + 1, sort_keys);
        }
        if (indent >= 0) json_nl(c, b, indent, level);
        jbuf_addc(c, b, ']');
        return;
    case JV_DICT: {
        if (!v.d->n) { jbuf_add(c, b, "{}", 2); return; }
        size_t n = v.d->n;
        const jv **order = jarena_alloc(c, n * sizeof *order);
        for (size_t i = 0; i < n; i++) {
            if (v.d->keys[i].k != JV_STR) jfail(c, line, "tojson: only string keys are supported, got %s", jv_type_name(v.d->keys[i]));
            order[i] = &v.d->keys[i];
        }
        if (sort_keys) qsort(order, n, sizeof *order, cmp_keys);
        jbuf_addc(c, b, '{');
        for (size_t i = 0; i < n; i++) {
            size_t k = (size_t)(order[i] - v.d->keys);
            if (i) jbuf_addc(c, b, ',');
            if (indent >= 0) json_nl(c, b, indent, level + 1);
            else if (i) jbuf_addc(c, b, ' ');
            json_str(c, b, v.d->keys[k].s, v.d->keys[k].n);
            jbuf_add(c, b, ": ", 2);
            jv_to_json(c, line, b, v.d->vals[k], indent, level + 1, sort_keys);
        }
        if (indent >= 0) json_nl(c, b, indent, level);
        jbuf_addc(c, b, '}');
        return;
    }
    default: jfail(c, line, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

jv jv_from_json(jctx *c, const void *jp, int depth)
{
    const json_t *j = jp;
    if (depth > c->lim.max_depth) jfail(c, 0, "the context nests deeper than %d", c->lim.max_depth);
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_str(c, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jv l = jv_list_new(c, n);
        for (size_t i = 0; i < n; i++) jv_list_push(c, l, jv_from_json(c, json_array_get(j, i), depth + 1));
        return l;
    }
    case JSON_OBJECT: {
        jv d = jv_dict_new(c, json_object_size(j));
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)j, k, val) jv_dict_set(c, d, jv_str(c, k, strlen(k)), jv_from_json(c, val, depth + 1));
        return d;
    }
    }
    return jv_none();
}

jv jv_iterable_list(jctx *c, int line, jv v)
{
    switch (v.k) {
    case JV_UNDEF: return jv_list_new(c, 0);
    case JV_LIST: return v;
    case JV_DICT: case JV_NS: {
        jv l = jv_list_new(c, v.d->n);
        for (size_t i = 0; i < v.d->n; i++) jv_list_push(c, l, v.d->keys[i]);
        return l;
    }
    case JV_STR: {
        jv l = jv_list_new(c, v.n);
        for (size_t i = 0; i < v.n;) {
            size_t j = i + 1;
            while (j < v.n && ((unsigned char)v.s[j] & 0xC0) == 0x80) j++;
            jv_list_push(c, l, jv_str_ref(v.s + i, j - i));
            i = j;
        }
        return l;
    }
    default: jfail(c, line, "'%s' object is not iterable", jv_type_name(v));
    }
}
