/* jinja_builtins.c - what templates call: attribute and item access, the
 * methods of strings, dicts and lists, filters, tests and the globals
 * (range, namespace, dict, raise_exception, strftime_now).
 *
 * As in jinja2's immutable sandbox, methods that would change a list or a
 * dict (append, update, pop, ...) can be looked up but fail when called.
 * Case mappings (upper, lower, title, capitalize) cover ASCII letters;
 * other text passes through unchanged.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/jinja_impl.h"

/* ------------------------------------------------------------ helpers */

static jv arg_or(const jv *args, size_t nargs, size_t i, const char *const *kwn, const jv *kwv, size_t nkw,
                 const char *name, jv dflt)
{
    for (size_t k = 0; k < nkw; k++)
        if (!strcmp(kwn[k], name)) return kwv[k];
    return i < nargs ? args[i] : dflt;
}

static jv need_str(jctx *c, jv v, const char *what)
{
    if (v.k != JV_STR) jfail(c, 0, "%s expects a string, got %s", what, jv_type_name(v));
    return v;
}

/* Python's str.isspace() code points, as UTF-8: bytes of the one at s[i], or 0 */
static size_t ws_at(const char *s, size_t n, size_t i)
{
    unsigned char b = (unsigned char)s[i];
    if (b == ' ' || (b >= 0x09 && b <= 0x0d) || (b >= 0x1c && b <= 0x1f)) return 1;
    if (b == 0xC2 && i + 1 < n && ((unsigned char)s[i + 1] == 0x85 || (unsigned char)s[i + 1] == 0xA0)) return 2;
    if (i + 2 < n) {
        unsigned b1 = (unsigned char)s[i + 1], b2 = (unsigned char)s[i + 2];
        if (b == 0xE1 && b1 == 0x9A && b2 == 0x80) return 3;
        if (b == 0xE2 && b1 == 0x80 && (b2 <= 0x8A || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF)) return 3;
        if (b == 0xE2 && b1 == 0x81 && b2 == 0x9F) return 3;
        if (b == 0xE3 && b1 == 0x80 && b2 == 0x80) return 3;
    }
    return 0;
}

static size_t ws_before(const char *s, size_t end)
{
    for (size_t k = 1; k <= 3 && k <= end; k++)
        if (ws_at(s, end, end - k) == k) return k;
    return 0;
}

static bool in_chars(jv chars, const char *s, size_t len)
{
    for (size_t i = 0; i < chars.n;) {
        size_t j = i + 1;
        while (j < chars.n && ((unsigned char)chars.s[j] & 0xC0) == 0x80) j++;
        if (j - i == len && !memcmp(chars.s + i, s, len)) return true;
        i = j;
    }
    return false;
}

static size_t cp_len(const char *s, size_t n, size_t i)
{
    size_t j = i + 1;
    while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80) j++;
    return j - i;
}

static size_t cp_len_before(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return end - i;
}

static jv strip(jctx *c, jv s, jv chars, bool left, bool right)
{
    size_t a = 0, b = s.n;
    bool custom = chars.k == JV_STR;
    if (!custom && chars.k != JV_UNDEF && chars.k != JV_NONE) jfail(c, 0, "strip arg must be None or str");
    if (left)
        while (a < b) {
            size_t k = custom ? cp_len(s.s, b, a) : ws_at(s.s, b, a);
            if (!k || (custom && !in_chars(chars, s.s + a, k))) break;
            a += k;
        }
    if (right)
        while (b > a) {
            size_t k = custom ? cp_len_before(s.s, b) : ws_before(s.s, b);
            if (!k || (custom && !in_chars(chars, s.s + b - k, k))) break;
            b -= k;
        }
    return jv_str_ref(s.s + a, b - a);
}

static jv case_map(jctx *c, jv s, int mode) /* 0 lower, 1 upper, 2 title, 3 capitalize, 4 jinja title */
{
    char *o = jarena_alloc(c, s.n + 1);
    bool prev_letter = false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.s[i];
        bool letter = isalpha(ch) || ch >= 0x80;
        switch (mode) {
        case 0: ch = (unsigned char)tolower(ch); break;
        case 1: ch = (unsigned char)toupper(ch); break;
        case 2: ch = (unsigned char)(prev_letter ? tolower(ch) : toupper(ch)); break;
        case 3: ch = (unsigned char)(i == 0 ? toupper(ch) : tolower(ch)); break;
        case 4: { /* words begin after - whitespace ( { [ < */
            bool begin = i == 0 || strchr("- \t\n\r\f\v({[<", s.s[i - 1]) != NULL;
            ch = (unsigned char)(begin ? toupper(ch) : tolower(ch));
            break;
        }
        }
        o[i] = (char)ch;
        prev_letter = letter;
    }
    return jv_str_ref(o, s.n);
}

static jv replace(jctx *c, jv s, jv old, jv new, int64_t count)
{
    jbuf b = {0};
    jbuf_add(c, &b, "", 0);
    size_t i = 0;
    int64_t done = 0;
    if (old.n == 0) { /* Python inserts new between every code point */
        while (i <= s.n && (count < 0 || done < count)) {
            jstep(c);
            jbuf_add(c, &b, new.s, new.n);
            done++;
            if (i == s.n) { i++; break; }
            size_t k = cp_len(s.s, s.n, i);
            jbuf_add(c, &b, s.s + i, k);
            i += k;
        }
        if (i < s.n) jbuf_add(c, &b, s.s + i, s.n - i);
        return jv_str_ref(b.s, b.n);
    }
    while (i < s.n) {
        const char *hit = (count < 0 || done < count) ? memmem(s.s + i, s.n - i, old.s, old.n) : NULL;
        if (!hit) break;
        jstep(c);
        jbuf_add(c, &b, s.s + i, (size_t)(hit - (s.s + i)));
        jbuf_add(c, &b, new.s, new.n);
        i = (size_t)(hit - s.s) + old.n;
        done++;
    }
    jbuf_add(c, &b, s.s + i, s.n - i);
    return jv_str_ref(b.s, b.n);
}

static jv split(jctx *c, jv s, jv sep, int64_t maxsplit)
{
    jv l = jv_list_new(c, 0);
    if (sep.k == JV_STR) {
        if (!sep.n) jfail(c, 0, "empty separator");
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            jstep(c);
            const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(s.s + i, s.n - i, sep.s, sep.n) : NULL;
            if (!hit) break;
            jv_list_push(c, l, jv_str_ref(s.s + i, (size_t)(hit - (s.s + i))));
            i = (size_t)(hit - s.s) + sep.n;
            done++;
        }
        jv_list_push(c, l, jv_str_ref(s.s + i, s.n - i));
        return l;
    }
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        jstep(c);
        size_t k;
        while (i < s.n && (k = ws_at(s.s, s.n, i))) i += k;
        if (i >= s.n) break;
        if (maxsplit >= 0 && done >= maxsplit) {
            size_t e = s.n;
            while (e > i && (k = ws_before(s.s, e))) e -= k;
            jv_list_push(c, l, jv_str_ref(s.s + i, e - i));
            break;
        }
        size_t st = i;
        while (i < s.n && !ws_at(s.s, s.n, i)) i++;
        jv_list_push(c, l, jv_str_ref(s.s + st, i - st));
        done++;
    }
    return l;
}

static bool affix(jctx *c, jv s, jv a, bool start)
{
    if (a.k == JV_LIST) {
        for (size_t i = 0; i < a.l->n; i++)
            if (affix(c, s, a.l->v[i], start)) return true;
        return false;
    }
    need_str(c, a, start ? "startswith" : "endswith");
    if (a.n > s.n) return false;
    return !memcmp(start ? s.s : s.s + s.n - a.n, a.s, a.n);
}

static int64_t as_int(jctx *c, jv v, const char *what)
{
    if (v.k == JV_INT) return v.i;
    if (v.k == JV_BOOL) return v.b;
    jfail(c, 0, "%s expects an integer, got %s", what, jv_type_name(v));
}

/* ------------------------------------------------------------ methods */

#define ARGS jctx *c, const jfunc *fn, const jv *args, size_t nargs, const char *const *kwn, const jv *kwv, size_t nkw
#define ARG(i, name, dflt) arg_or(args, nargs, i, kwn, kwv, nkw, name, dflt)

static jv str_format(jctx *c, jv s, const jv *args, size_t nargs)
{
    jbuf b = {0};
    jbuf_add(c, &b, "", 0);
    size_t auto_i = 0;
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.s[i];
        if ((ch == '{' || ch == '}') && i + 1 < s.n && s.s[i + 1] == ch) { jbuf_addc(c, &b, ch); i++; continue; }
        if (ch != '{') { jbuf_addc(c, &b, ch); continue; }
        size_t e = i + 1;
        while (e < s.n && s.s[e] != '}') e++;
        if (e >= s.n) jfail(c, 0, "format: single '{' encountered in format string");
        size_t idx = auto_i++;
        if (e > i + 1) {
            char *end;
            idx = (size_t)strtoul(s.s + i + 1, &end, 10);
            if (end != s.s + e) jfail(c, 0, "format: only {} and {N} fields are supported");
        }
        if (idx >= nargs) jfail(c, 0, "format: replacement index %zu out of range", idx);
        jv_to_str(c, &b, args[idx]);
        i = e;
    }
    return jv_str_ref(b.s, b.n);
}

static jv str_method(ARGS)
{
    jv s = fn->self;
    const char *m = fn->name;
    if (!strcmp(m, "strip")) return strip(c, s, ARG(0, "chars", jv_none()), true, true);
    if (!strcmp(m, "lstrip")) return strip(c, s, ARG(0, "chars", jv_none()), true, false);
    if (!strcmp(m, "rstrip")) return strip(c, s, ARG(0, "chars", jv_none()), false, true);
    if (!strcmp(m, "upper")) return case_map(c, s, 1);
    if (!strcmp(m, "lower")) return case_map(c, s, 0);
    if (!strcmp(m, "title")) return case_map(c, s, 2);
    if (!strcmp(m, "capitalize")) return case_map(c, s, 3);
    if (!strcmp(m, "split")) {
        jv sep = ARG(0, "sep", jv_none());
        if (sep.k != JV_NONE) need_str(c, sep, "split");
        return split(c, s, sep, as_int(c, ARG(1, "maxsplit", jv_int(-1)), "split"));
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (nargs < 1) jfail(c, 0, "%s takes one argument", m);
        return jv_bool(affix(c, s, args[0], m[0] == 's'));
    }
    if (!strcmp(m, "replace")) {
        if (nargs < 2) jfail(c, 0, "replace takes two arguments");
        return replace(c, s, need_str(c, args[0], "replace"), need_str(c, args[1], "replace"),
                       nargs > 2 ? as_int(c, args[2], "replace") : -1);
    }
    if (!strcmp(m, "find") || !strcmp(m, "count") || !strcmp(m, "index")) {
        if (nargs < 1) jfail(c, 0, "%s takes one argument", m);
        jv sub = need_str(c, args[0], m);
        if (!strcmp(m, "count")) {
            if (!sub.n) return jv_int((int64_t)jutf8_len(s.s, s.n) + 1);
            int64_t k = 0;
            for (const char *p = s.s; (p = memmem(p, s.n - (size_t)(p - s.s), sub.s, sub.n)); p += sub.n) k++;
            return jv_int(k);
        }
        const char *hit = sub.n ? memmem(s.s, s.n, sub.s, sub.n) : s.s;
        if (!hit && m[0] == 'i') jfail(c, 0, "substring not found");
        return jv_int(hit ? (int64_t)jutf8_len(s.s, (size_t)(hit - s.s)) : -1);
    }
    if (!strcmp(m, "join")) {
        jv l = jv_iterable_list(c, 0, nargs ? args[0] : jv_undef(NULL));
        jbuf b = {0};
        jbuf_add(c, &b, "", 0);
        for (size_t i = 0; i < l.l->n; i++) {
            if (i) jbuf_add(c, &b, s.s, s.n);
            jbuf_add(c, &b, need_str(c, l.l->v[i], "join").s, l.l->v[i].n);
        }
        return jv_str_ref(b.s, b.n);
    }
    if (!strcmp(m, "splitlines")) {
        jv l = jv_list_new(c, 0);
        size_t st = 0;
        for (size_t i = 0; i < s.n; i++)
            if (s.s[i] == '\n' || s.s[i] == '\r') {
                jv_list_push(c, l, jv_str_ref(s.s + st, i - st));
                if (s.s[i] == '\r' && i + 1 < s.n && s.s[i + 1] == '\n') i++;
                st = i + 1;
            }
        if (st < s.n) jv_list_push(c, l, jv_str_ref(s.s + st, s.n - st));
        return l;
    }
    if (!strcmp(m, "format")) return str_format(c, s, args, nargs);
    if (!strcmp(m, "isdigit") || !strcmp(m, "isalpha") || !strcmp(m, "isspace") || !strcmp(m, "isalnum")
        || !strcmp(m, "islower") || !strcmp(m, "isupper")) {
        if (!s.n) return jv_bool(false);
        bool any_cased = false;
        for (size_t i = 0; i < s.n; i++) {
            int ch = (unsigned char)s.s[i];
            bool ok = m[2] == 'd' ? isdigit(ch) : m[3] == 'l' ? isalpha(ch) : m[2] == 's' ? isspace(ch)
                      : m[3] == 'n' ? isalnum(ch) : m[2] == 'l' ? !isupper(ch) : !islower(ch);
            if (!ok) return jv_bool(false);
            any_cased |= isalpha(ch) != 0;
        }
        return jv_bool(m[2] == 'l' || m[2] == 'u' ? any_cased : true);
    }
    jfail(c, 0, "'str' object has no attribute '%s'", m);
}

static jv dict_method(ARGS)
{
    jv d = fn->self;
    const char *m = fn->name;
    (void)kwn; (void)kwv; (void)nkw;
    if (!strcmp(m, "get")) {
        if (nargs < 1) jfail(c, 0, "get expected at least 1 argument");
        jv v;
        if (jv_dict_get_v(d, args[0], &v)) return v;
        return nargs > 1 ? args[1] : jv_none();
    }
    bool items = !strcmp(m, "items"), keys = !strcmp(m, "keys");
    if (items || keys || !strcmp(m, "values")) {
        jv l = jv_list_new(c, d.d->n);
        for (size_t i = 0; i < d.d->n; i++) {
            if (items) {
                jv t = jv_list_new(c, 2);
                t.n = 1;
                jv_list_push(c, t, d.d->keys[i]);
                jv_list_push(c, t, d.d->vals[i]);
                jv_list_push(c, l, t);
            } else jv_list_push(c, l, keys ? d.d->keys[i] : d.d->vals[i]);
        }
        return l;
    }
    if (!strcmp(m, "copy")) {
        jv o = jv_dict_new(c, d.d->n);
        for (size_t i = 0; i < d.d->n; i++) jv_dict_set(c, o, d.d->keys[i], d.d->vals[i]);
        return o;
    }
    jfail(c, 0, "'dict' object has no attribute '%s'", m);
}

static jv list_method(ARGS)
{
    jv l = fn->self;
    const char *m = fn->name;
    (void)kwn; (void)kwv; (void)nkw;
    if (!strcmp(m, "index") || !strcmp(m, "count")) {
        if (nargs < 1) jfail(c, 0, "%s takes one argument", m);
        int64_t k = 0;
        for (size_t i = 0; i < l.l->n; i++)
            if (jv_equal(l.l->v[i], args[0])) {
                if (m[0] == 'i') return jv_int((int64_t)i);
                k++;
            }
        if (m[0] == 'i') jfail(c, 0, "value is not in list");
        return jv_int(k);
    }
    if (!strcmp(m, "copy")) {
        jv o = jv_list_new(c, l.l->n);
        for (size_t i = 0; i < l.l->n; i++) jv_list_push(c, o, l.l->v[i]);
        return o;
    }
    jfail(c, 0, "'list' object has no attribute '%s'", m);
}

static jv unsafe_method(ARGS)
{
    (void)args; (void)nargs; (void)kwn; (void)kwv; (void)nkw;
    jfail(c, 0, "access to attribute '%s' of '%s' object is unsafe", fn->name, jv_type_name(fn->self));
}

static bool name_in(const char *name, size_t n, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == n && !memcmp(list[i], name, n)) return true;
    return false;
}

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize", "split",
                                          "startswith", "endswith", "replace", "find", "count", "index", "join",
                                          "splitlines", "format", "isdigit", "isalpha", "isspace", "isalnum",
                                          "islower", "isupper", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", "copy", NULL};
static const char *const DICT_UNSAFE[] = {"update", "pop", "popitem", "setdefault", "clear", NULL};
static const char *const LIST_METHODS[] = {"index", "count", "copy", NULL};
static const char *const LIST_UNSAFE[] = {"append", "extend", "pop", "insert", "remove", "clear", "sort", "reverse", NULL};

static jv loop_attr(jctx *c, int line, jloop *lp, const char *name)
{
    size_t i = lp->index0, n = lp->length;
    if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return jv_int((int64_t)i);
    if (!strcmp(name, "first")) return jv_bool(i == 0);
    if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return jv_int((int64_t)n);
    if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "depth")) return jv_int(1);
    if (!strcmp(name, "depth0")) return jv_int(0);
    if (!strcmp(name, "previtem")) return lp->has_prev ? lp->prev : jv_undef("previtem");
    if (!strcmp(name, "nextitem")) return lp->has_next ? lp->next : jv_undef("nextitem");
    (void)c; (void)line;
    return jv_undef(name);
}

static jv loop_cycle(ARGS)
{
    (void)kwn; (void)kwv; (void)nkw;
    if (!nargs) jfail(c, 0, "no items for cycling given");
    return args[fn->self.loop->index0 % nargs];
}

jv jattr(jctx *c, int line, jv obj, const char *name, size_t n)
{
    jstep(c);
    const char *nm = jarena_strdup(c, name, n);
    switch (obj.k) {
    case JV_UNDEF:
        if (obj.s) jfail(c, line, "'%s' is undefined", obj.s);
        jfail(c, line, "an undefined value has no attribute '%s'", nm);
    case JV_DICT:
        if (name_in(name, n, DICT_METHODS)) return jv_func(c, nm, dict_method, obj);
        if (name_in(name, n, DICT_UNSAFE)) return jv_func(c, nm, unsafe_method, obj);
        /* fall through */
    case JV_NS: {
        jv v;
        if (jv_dict_get(obj, name, n, &v)) return v;
        return jv_undef(nm);
    }
    case JV_STR:
        if (name_in(name, n, STR_METHODS)) return jv_func(c, nm, str_method, obj);
        return jv_undef(nm);
    case JV_LIST:
        if (name_in(name, n, LIST_METHODS)) return jv_func(c, nm, list_method, obj);
        if (name_in(name, n, LIST_UNSAFE)) return jv_func(c, nm, unsafe_method, obj);
        return jv_undef(nm);
    case JV_LOOP:
        if (!strcmp(nm, "cycle")) return jv_func(c, nm, loop_cycle, obj);
        return loop_attr(c, line, obj.loop, nm);
    default: return jv_undef(nm);
    }
}

jv jitem(jctx *c, int line, jv obj, jv key)
{
    jstep(c);
    switch (obj.k) {
    case JV_UNDEF:
        if (obj.s) jfail(c, line, "'%s' is undefined", obj.s);
        jfail(c, line, "an undefined value has no items");
    case JV_DICT: case JV_NS: {
        jv v;
        if (jv_dict_get_v(obj, key, &v)) return v;
        return jv_undef(NULL);
    }
    case JV_LIST: case JV_STR: {
        if (key.k != JV_INT && key.k != JV_BOOL) {
            if (key.k == JV_STR) return jattr(c, line, obj, key.s, key.n);
            return jv_undef(NULL);
        }
        int64_t i = key.k == JV_INT ? key.i : key.b;
        int64_t n = obj.k == JV_LIST ? (int64_t)obj.l->n : (int64_t)jutf8_len(obj.s, obj.n);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return jv_undef(NULL);
        if (obj.k == JV_LIST) return obj.l->v[i];
        size_t o = jutf8_offset(obj.s, obj.n, (size_t)i), e = jutf8_offset(obj.s, obj.n, (size_t)i + 1);
        return jv_str_ref(obj.s + o, e - o);
    }
    case JV_LOOP:
        if (key.k == JV_STR) return jattr(c, line, obj, key.s, key.n);
        return jv_undef(NULL);
    default: return jv_undef(NULL);
    }
}

/* ------------------------------------------------------------ tests */

static const char *const TESTS[] = {"defined", "undefined", "none", "boolean", "false", "true", "integer", "float",
                                    "number", "string", "mapping", "iterable", "sequence", "callable", "sameas",
                                    "escaped", "in", "lower", "upper", "odd", "even", "divisibleby", "eq", "equalto",
                                    "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", NULL};

bool jtest_known(const char *name) { return name_in(name, strlen(name), TESTS); }

bool jtest(jctx *c, int line, const char *t, jv v, const jv *args, size_t nargs)
{
    jv a = nargs ? args[0] : jv_undef(NULL);
    if (!jtest_known(t)) jfail(c, line, "no test named '%s'", t);
    if (!strcmp(t, "defined")) return v.k != JV_UNDEF;
    if (!strcmp(t, "undefined")) return v.k == JV_UNDEF;
    if (!strcmp(t, "none")) return v.k == JV_NONE;
    if (!strcmp(t, "boolean")) return v.k == JV_BOOL;
    if (!strcmp(t, "false")) return v.k == JV_BOOL && !v.b;
    if (!strcmp(t, "true")) return v.k == JV_BOOL && v.b;
    if (!strcmp(t, "integer")) return v.k == JV_INT;
    if (!strcmp(t, "float")) return v.k == JV_FLOAT;
    if (!strcmp(t, "number")) return jv_is_number(v);
    if (!strcmp(t, "string")) return v.k == JV_STR;
    if (!strcmp(t, "mapping")) return v.k == JV_DICT;
    if (!strcmp(t, "iterable")) return v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF;
    if (!strcmp(t, "sequence")) return v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF;
    if (!strcmp(t, "callable")) return v.k == JV_FUNC || v.k == JV_MACRO;
    if (!strcmp(t, "sameas")) return v.k == a.k && (v.k == JV_NONE || v.k == JV_UNDEF || (v.k == JV_BOOL && v.b == a.b) || jv_equal(v, a));
    if (!strcmp(t, "escaped")) return false;
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        if (v.k != JV_STR) return false;
        jv m = case_map(c, v, t[0] == 'l' ? 0 : 1);
        return jv_equal(m, v);
    }
    if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        int64_t x = as_int(c, v, t), d = t[0] == 'd' ? as_int(c, a, t) : 2;
        if (d == 0) jfail(c, line, "divisibleby 0");
        int64_t r = d == -1 ? 0 : x % d;
        return t[0] == 'o' ? r != 0 : r == 0;
    }
    if (!strcmp(t, "in")) {
        jv r = jv_none();
        (void)r;
        if (a.k == JV_STR) return v.k == JV_STR && (v.n == 0 || memmem(a.s, a.n, v.s, v.n));
        if (a.k == JV_LIST) { for (size_t i = 0; i < a.l->n; i++) if (jv_equal(v, a.l->v[i])) return true; return false; }
        if (a.k == JV_DICT) { jv o; return jv_dict_get_v(a, v, &o); }
        jfail(c, line, "argument of type '%s' is not iterable", jv_type_name(a));
    }
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==")) return jv_equal(v, a);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !jv_equal(v, a);
    int r = jv_compare(c, line, v, a);
    if (!strcmp(t, "lt") || !strcmp(t, "<")) return r < 0;
    if (!strcmp(t, "le") || !strcmp(t, "<=")) return r <= 0;
    if (!strcmp(t, "gt") || !strcmp(t, ">")) return r > 0;
    return r >= 0;
}

/* ------------------------------------------------------------ filters */

static const char *const FILTERS[] = {"trim", "tojson", "length", "count", "upper", "lower", "title", "capitalize",
                                      "replace", "join", "default", "d", "items", "list", "first", "last", "string",
                                      "int", "float", "safe", "map", "select", "reject", "selectattr", "rejectattr",
                                      "unique", "dictsort", "indent", "wordcount", "abs", "round", "sort", "reverse",
                                      "min", "max", "sum", "e", "escape", "center", "batch", "attr", "bool",
                                      "striptags", NULL};

bool jfilter_known(const char *name) { return name_in(name, strlen(name), FILTERS); }

/* dotted attribute paths of map/selectattr/sort ("a.b" walks two levels) */
static jv attr_path(jctx *c, int line, jv v, jv path)
{
    need_str(c, path, "attribute");
    size_t i = 0;
    while (i <= path.n) {
        const char *dot = memchr(path.s + i, '.', path.n - i);
        size_t e = dot ? (size_t)(dot - path.s) : path.n;
        char *end;
        long idx = strtol(path.s + i, &end, 10);
        if (e > i && end == path.s + e) v = jitem(c, line, v, jv_int(idx));
        else v = jitem(c, line, v, jv_str_ref(path.s + i, e - i));
        if (v.k == JV_UNDEF && !dot) return v;
        if (v.k == JV_UNDEF) return v;
        i = e + 1;
    }
    return v;
}

static jv html_escape(jctx *c, jv s)
{
    jbuf b = {0};
    jbuf_add(c, &b, "", 0);
    for (size_t i = 0; i < s.n; i++) {
        switch (s.s[i]) {
        case '&': jbuf_add(c, &b, "&amp;", 5); break;
        case '<': jbuf_add(c, &b, "&lt;", 4); break;
        case '>': jbuf_add(c, &b, "&gt;", 4); break;
        case '"': jbuf_add(c, &b, "&#34;", 5); break;
        case '\'': jbuf_add(c, &b, "&#39;", 5); break;
        default: jbuf_addc(c, &b, s.s[i]);
        }
    }
    return jv_str_ref(b.s, b.n);
}

static int sort_cmp_line;
static jctx *sort_ctx;
static bool sort_ci;
static int cmp_sort(const void *x, const void *y)
{
    jv a = ((const jv *)x)[1], b = ((const jv *)y)[1];
    if (sort_ci && a.k == JV_STR && b.k == JV_STR) {
        a = case_map(sort_ctx, a, 0);
        b = case_map(sort_ctx, b, 0);
    }
    int r = jv_compare(sort_ctx, sort_cmp_line, a, b);
    if (r) return r;
    return ((const jv *)x)[0].i < ((const jv *)y)[0].i ? -1 : 1; /* stable */
}

/* sorts items by keys (pairs laid out as [index, key]) */
static jv sorted(jctx *c, int line, jv items, jv keys, bool reverse, bool ci)
{
    size_t n = items.l->n;
    jv *pairs = jarena_alloc(c, (n ? n : 1) * 2 * sizeof(jv));
    for (size_t i = 0; i < n; i++) { pairs[2 * i] = jv_int((int64_t)i); pairs[2 * i + 1] = keys.l->v[i]; }
    sort_cmp_line = line;
    sort_ctx = c;
    sort_ci = ci;
    qsort(pairs, n, 2 * sizeof(jv), cmp_sort);
    jv out = jv_list_new(c, n);
    for (size_t i = 0; i < n; i++) {
        size_t k = reverse ? n - 1 - i : i;
        jv_list_push(c, out, items.l->v[pairs[2 * k].i]);
    }
    return out;
}

static jv select_like(jctx *c, int line, const char *f, jv v, const jv *args, size_t nargs)
{
    bool by_attr = strstr(f, "attr") != NULL, keep = f[0] == 's';
    jv l = jv_iterable_list(c, line, v), out = jv_list_new(c, 0);
    size_t k = by_attr ? 1 : 0;
    if (by_attr && !nargs) jfail(c, line, "%s needs an attribute name", f);
    const char *test = nargs > k ? need_str(c, args[k], f).s : NULL;
    if (test && !jtest_known(test)) jfail(c, line, "no test named '%s'", test);
    for (size_t i = 0; i < l.l->n; i++) {
        jstep(c);
        jv x = by_attr ? attr_path(c, line, l.l->v[i], args[0]) : l.l->v[i];
        bool r = test ? jtest(c, line, test, x, args + k + 1, nargs - k - 1) : jv_truthy(x);
        if (r == keep) jv_list_push(c, out, l.l->v[i]);
    }
    out.n = JV_LIST_GEN;
    return out;
}

static jv do_indent(jctx *c, jv s, jv width, bool first, bool blank)
{
    jbuf pad = {0};
    jbuf_add(c, &pad, "", 0);
    if (width.k == JV_STR) jbuf_add(c, &pad, width.s, width.n);
    else for (int64_t i = 0; i < as_int(c, width, "indent") && i < 1024; i++) jbuf_addc(c, &pad, ' ');
    jbuf b = {0};
    jbuf_add(c, &b, "", 0);
    if (first && (blank || s.n)) jbuf_add(c, &b, pad.s, pad.n);
    for (size_t i = 0; i < s.n; i++) {
        jbuf_addc(c, &b, s.s[i]);
        if (s.s[i] == '\n') {
            bool empty = i + 1 >= s.n || s.s[i + 1] == '\n';
            if (blank || !empty) jbuf_add(c, &b, pad.s, pad.n);
        }
    }
    return jv_str_ref(b.s, b.n);
}

jv jfilter(jctx *c, int line, const char *f, jv v, const jv *args, size_t nargs, const char *const *kwn, const jv *kwv,
           size_t nkw)
{
    jstep(c);
    /* an unknown name fails when it runs, as jinja2's does in a branch */
    if (!jfilter_known(f)) jfail(c, line, "no filter named '%s'", f);
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        bool boolean = jv_truthy(ARG(1, "boolean", jv_bool(false)));
        if (v.k == JV_UNDEF || (boolean && !jv_truthy(v))) return ARG(0, "default_value", jv_str_ref("", 0));
        return v;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        switch (v.k) {
        case JV_UNDEF: return jv_int(0);
        case JV_STR: return jv_int((int64_t)jutf8_len(v.s, v.n));
        case JV_LIST:
            if (v.n == JV_LIST_GEN) jfail(c, line, "object of type 'generator' has no len()");
            return jv_int((int64_t)v.l->n);
        case JV_DICT: case JV_NS: return jv_int((int64_t)v.d->n);
        default: jfail(c, line, "object of type '%s' has no len()", jv_type_name(v));
        }
    }
    if (!strcmp(f, "safe")) return v;
    if (!strcmp(f, "string")) return jv_stringify(c, v);
    if (!strcmp(f, "tojson")) {
        jv ind = ARG(0, "indent", jv_none());
        int indent = ind.k == JV_NONE ? -1 : (int)as_int(c, ind, "tojson indent");
        if (indent > 64) indent = 64;
        jbuf b = {0};
        jbuf_add(c, &b, "", 0);
        jv_to_json(c, line, &b, v, indent, 0, jv_truthy(ARG(3, "sort_keys", jv_bool(false))));
        return jv_str_ref(b.s, b.n);
    }
    if (!strcmp(f, "items")) {
        if (v.k == JV_UNDEF) return jv_list_new(c, 0);
        if (v.k != JV_DICT) jfail(c, line, "can only get item pairs from a mapping");
        jfunc fn = {.name = "items", .self = v};
        return dict_method(c, &fn, NULL, 0, NULL, NULL, 0);
    }
    if (!strcmp(f, "list")) {
        jv l = jv_iterable_list(c, line, v), o = jv_list_new(c, l.l->n);
        for (size_t i = 0; i < l.l->n; i++) jv_list_push(c, o, l.l->v[i]);
        return o;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        jv l = jv_iterable_list(c, line, v);
        if (!l.l->n) return jv_undef(NULL);
        return l.l->v[f[0] == 'f' ? 0 : l.l->n - 1];
    }
    if (!strcmp(f, "reverse")) {
        if (v.k == JV_STR) {
            jbuf b = {0};
            jbuf_add(c, &b, "", 0);
            for (size_t e = v.n; e > 0;) { size_t k = cp_len_before(v.s, e); jbuf_add(c, &b, v.s + e - k, k); e -= k; }
            return jv_str_ref(b.s, b.n);
        }
        jv l = jv_iterable_list(c, line, v), o = jv_list_new(c, l.l->n);
        for (size_t i = l.l->n; i > 0; i--) jv_list_push(c, o, l.l->v[i - 1]);
        return o;
    }
    if (!strcmp(f, "join")) {
        jv sep = ARG(0, "d", jv_str_ref("", 0)), attr = ARG(1, "attribute", jv_none());
        jv l = jv_iterable_list(c, line, v);
        jbuf b = {0};
        jbuf_add(c, &b, "", 0);
        for (size_t i = 0; i < l.l->n; i++) {
            jstep(c);
            if (i) jv_to_str(c, &b, sep);
            jv_to_str(c, &b, attr.k == JV_NONE ? l.l->v[i] : attr_path(c, line, l.l->v[i], attr));
        }
        return jv_str_ref(b.s, b.n);
    }
    if (!strcmp(f, "map")) {
        jv l = jv_iterable_list(c, line, v), o = jv_list_new(c, l.l->n);
        jv attr = ARG(99, "attribute", jv_undef(NULL));
        if (attr.k != JV_UNDEF) {
            jv dflt = ARG(99, "default", jv_undef(NULL));
            for (size_t i = 0; i < l.l->n; i++) {
                jv x = attr_path(c, line, l.l->v[i], attr);
                jv_list_push(c, o, x.k == JV_UNDEF && dflt.k != JV_UNDEF ? dflt : x);
            }
            o.n = JV_LIST_GEN;
            return o;
        }
        if (!nargs) jfail(c, line, "map needs a filter name or attribute=");
        const char *name = need_str(c, args[0], "map").s;
        if (!jfilter_known(name)) jfail(c, line, "no filter named '%s'", name);
        for (size_t i = 0; i < l.l->n; i++)
            jv_list_push(c, o, jfilter(c, line, name, l.l->v[i], args + 1, nargs - 1, kwn, kwv, nkw));
        o.n = JV_LIST_GEN;
        return o;
    }
    if (!strcmp(f, "select") || !strcmp(f, "reject") || !strcmp(f, "selectattr") || !strcmp(f, "rejectattr"))
        return select_like(c, line, f, v, args, nargs);
    if (!strcmp(f, "unique")) {
        jv l = jv_iterable_list(c, line, v), o = jv_list_new(c, 0);
        jv attr = ARG(1, "attribute", jv_none());
        bool cs = jv_truthy(ARG(0, "case_sensitive", jv_bool(false)));
        jv seen = jv_list_new(c, 0);
        for (size_t i = 0; i < l.l->n; i++) {
            jv k = attr.k == JV_NONE ? l.l->v[i] : attr_path(c, line, l.l->v[i], attr);
            if (!cs && k.k == JV_STR) k = case_map(c, k, 0);
            bool dup = false;
            for (size_t j = 0; j < seen.l->n && !dup; j++) { jstep(c); dup = jv_equal(seen.l->v[j], k); }
            if (!dup) { jv_list_push(c, seen, k); jv_list_push(c, o, l.l->v[i]); }
        }
        o.n = JV_LIST_GEN;
        return o;
    }
    if (!strcmp(f, "dictsort")) {
        if (v.k != JV_DICT) jfail(c, line, "you can only sort by either a mapping");
        bool cs = jv_truthy(ARG(0, "case_sensitive", jv_bool(false)));
        jv by = ARG(1, "by", jv_str_ref("key", 3));
        bool rev = jv_truthy(ARG(2, "reverse", jv_bool(false)));
        bool by_value = by.k == JV_STR && by.n == 5 && !memcmp(by.s, "value", 5);
        jfunc fn = {.name = "items", .self = v};
        jv items = dict_method(c, &fn, NULL, 0, NULL, NULL, 0), keys = jv_list_new(c, items.l->n);
        for (size_t i = 0; i < items.l->n; i++) jv_list_push(c, keys, items.l->v[i].l->v[by_value ? 1 : 0]);
        return sorted(c, line, items, keys, rev, !cs);
    }
    if (!strcmp(f, "sort")) {
        jv l = jv_iterable_list(c, line, v), keys = jv_list_new(c, l.l->n);
        bool rev = jv_truthy(ARG(0, "reverse", jv_bool(false))), cs = jv_truthy(ARG(1, "case_sensitive", jv_bool(false)));
        jv attr = ARG(2, "attribute", jv_none());
        for (size_t i = 0; i < l.l->n; i++) jv_list_push(c, keys, attr.k == JV_NONE ? l.l->v[i] : attr_path(c, line, l.l->v[i], attr));
        return sorted(c, line, l, keys, rev, !cs);
    }
    if (!strcmp(f, "min") || !strcmp(f, "max")) {
        jv l = jv_iterable_list(c, line, v);
        if (!l.l->n) return jv_undef(NULL);
        jv best = l.l->v[0];
        for (size_t i = 1; i < l.l->n; i++) {
            int r = jv_compare(c, line, l.l->v[i], best);
            if (f[1] == 'i' ? r < 0 : r > 0) best = l.l->v[i];
        }
        return best;
    }
    if (!strcmp(f, "sum")) {
        jv l = jv_iterable_list(c, line, v);
        jv acc = ARG(1, "start", jv_int(0));
        for (size_t i = 0; i < l.l->n; i++) {
            jv x = l.l->v[i];
            if (!jv_is_number(x) || !jv_is_number(acc)) jfail(c, line, "sum of non-numbers");
            if (acc.k == JV_FLOAT || x.k == JV_FLOAT) { acc = jv_float(jv_num(acc) + jv_num(x)); continue; }
            int64_t r;
            const int64_t a = acc.k == JV_BOOL ? (int64_t)acc.b : acc.i, b = x.k == JV_BOOL ? (int64_t)x.b : x.i;
            if (__builtin_add_overflow(a, b, &r)) jfail(c, line, "integer overflow in sum");
            acc = jv_int(r);
        }
        return acc;
    }
    if (!strcmp(f, "abs")) {
        if (v.k == JV_FLOAT) return jv_float(fabs(v.f));
        int64_t i = as_int(c, v, "abs");
        if (i == INT64_MIN) jfail(c, line, "integer overflow in abs");
        return jv_int(i < 0 ? -i : i);
    }
    if (!strcmp(f, "round")) {
        int64_t prec = as_int(c, ARG(0, "precision", jv_int(0)), "round");
        jv method = ARG(1, "method", jv_str_ref("common", 6));
        if (prec < 0 || prec > 15) jfail(c, line, "round precision out of range");
        double x = jv_num(v), m = pow(10, (double)prec);
        double r = method.k == JV_STR && method.n && method.s[0] == 'c' ? nearbyint(x * m) / m /* ties to even, as Python */
                   : method.k == JV_STR && method.n && method.s[0] == 'f' ? floor(x * m) / m : ceil(x * m) / m;
        return jv_float(r);
    }
    if (!strcmp(f, "int")) {
        jv dflt = ARG(0, "default", jv_int(0));
        if (v.k == JV_INT) return v;
        if (v.k == JV_BOOL) return jv_int(v.b);
        if (v.k == JV_FLOAT) return isfinite(v.f) && fabs(v.f) < 9.2e18 ? jv_int((int64_t)v.f) : dflt;
        if (v.k == JV_STR) {
            char *tmp = jarena_strdup(c, v.s, v.n), *end;
            long long x = strtoll(tmp, &end, 10);
            while (*end == ' ' || *end == '\n' || *end == '\t') end++;
            if (end != tmp && !*end) return jv_int(x);
            double d = strtod(tmp, &end);
            if (end != tmp && !*end && isfinite(d) && fabs(d) < 9.2e18) return jv_int((int64_t)d); /* past int64: the default */
        }
        return dflt;
    }
    if (!strcmp(f, "float")) {
        jv dflt = ARG(0, "default", jv_float(0));
        if (jv_is_number(v)) return jv_float(jv_num(v));
        if (v.k == JV_STR) {
            char *tmp = jarena_strdup(c, v.s, v.n), *end;
            double d = strtod(tmp, &end);
            if (end != tmp && !*end) return jv_float(d);
        }
        return dflt;
    }
    if (!strcmp(f, "bool")) return jv_bool(jv_truthy(v));
    if (!strcmp(f, "attr")) {
        if (!nargs) jfail(c, line, "attr needs a name");
        return jattr(c, line, v, need_str(c, args[0], "attr").s, args[0].n);
    }
    if (!strcmp(f, "batch")) {
        int64_t size = as_int(c, ARG(0, "linecount", jv_int(1)), "batch");
        if (size <= 0) jfail(c, line, "batch size must be positive");
        jv l = jv_iterable_list(c, line, v), o = jv_list_new(c, 0), cur = jv_none();
        for (size_t i = 0; i < l.l->n; i++) {
            if (i % (size_t)size == 0) { cur = jv_list_new(c, 0); jv_list_push(c, o, cur); }
            jv_list_push(c, cur, l.l->v[i]);
        }
        return o;
    }
    /* the rest take text */
    jv s = jv_stringify(c, v);
    if (!strcmp(f, "trim")) return strip(c, s, ARG(0, "chars", jv_none()), true, true);
    if (!strcmp(f, "upper")) return case_map(c, s, 1);
    if (!strcmp(f, "lower")) return case_map(c, s, 0);
    if (!strcmp(f, "title")) return case_map(c, s, 4);
    if (!strcmp(f, "capitalize")) return case_map(c, s, 3);
    if (!strcmp(f, "e") || !strcmp(f, "escape")) return html_escape(c, s);
    if (!strcmp(f, "replace")) {
        if (nargs < 2) jfail(c, line, "replace needs old and new");
        jv cnt = ARG(2, "count", jv_none());
        return replace(c, s, jv_stringify(c, args[0]), jv_stringify(c, args[1]), cnt.k == JV_NONE ? -1 : as_int(c, cnt, "replace"));
    }
    if (!strcmp(f, "indent"))
        return do_indent(c, s, ARG(0, "width", jv_int(4)), jv_truthy(ARG(1, "first", jv_bool(false))),
                         jv_truthy(ARG(2, "blank", jv_bool(false))));
    if (!strcmp(f, "wordcount")) {
        int64_t k = 0;
        bool in = false;
        for (size_t i = 0; i < s.n; i++) {
            unsigned char ch = (unsigned char)s.s[i];
            bool w = isalnum(ch) || ch == '_' || ch >= 0x80;
            if (w && !in) k++;
            in = w;
        }
        return jv_int(k);
    }
    if (!strcmp(f, "center")) {
        int64_t w = as_int(c, ARG(0, "width", jv_int(80)), "center");
        int64_t len = (int64_t)jutf8_len(s.s, s.n);
        if (w > 4096) w = 4096;
        if (w <= len) return s;
        int64_t left = (w - len) / 2 + ((w - len) & w & 1), right = w - len - left;
        jbuf b = {0};
        jbuf_add(c, &b, "", 0);
        for (int64_t i = 0; i < left; i++) jbuf_addc(c, &b, ' ');
        jbuf_add(c, &b, s.s, s.n);
        for (int64_t i = 0; i < right; i++) jbuf_addc(c, &b, ' ');
        return jv_str_ref(b.s, b.n);
    }
    if (!strcmp(f, "striptags")) {
        jbuf b = {0};
        jbuf_add(c, &b, "", 0);
        bool tag = false;
        for (size_t i = 0; i < s.n; i++) {
            if (s.s[i] == '<') tag = true;
            else if (s.s[i] == '>' && tag) tag = false;
            else if (!tag) jbuf_addc(c, &b, s.s[i]);
        }
        return split(c, jv_str_ref(b.s, b.n), jv_none(), -1).l->n ? jv_str_ref(b.s, b.n) : jv_str_ref("", 0);
    }
    jfail(c, line, "no filter named '%s'", f);
}

/* ------------------------------------------------------------ globals */

static jv g_range(ARGS)
{
    (void)fn; (void)kwn; (void)kwv; (void)nkw;
    int64_t a = 0, b, st = 1;
    if (nargs == 1) b = as_int(c, args[0], "range");
    else if (nargs == 2 || nargs == 3) {
        a = as_int(c, args[0], "range");
        b = as_int(c, args[1], "range");
        if (nargs == 3) st = as_int(c, args[2], "range");
    } else jfail(c, 0, "range expected 1 to 3 arguments, got %zu", nargs);
    if (st == 0) jfail(c, 0, "range() arg 3 must not be zero");
    jv l = jv_list_new(c, 0);
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
        jstep(c);
        jv_list_push(c, l, jv_int(i));
        if ((st > 0 && i > INT64_MAX - st) || (st < 0 && i < INT64_MIN - st)) break;
    }
    return l;
}

static jv g_namespace(ARGS)
{
    (void)fn;
    jv ns = jv_dict_new(c, nkw);
    ns.k = JV_NS;
    for (size_t i = 0; i < nargs; i++) {
        if (args[i].k != JV_DICT) jfail(c, 0, "namespace() takes mappings or keyword arguments");
        for (size_t k = 0; k < args[i].d->n; k++) jv_dict_set(c, ns, args[i].d->keys[k], args[i].d->vals[k]);
    }
    for (size_t i = 0; i < nkw; i++) jv_dict_set(c, ns, jv_str(c, kwn[i], strlen(kwn[i])), kwv[i]);
    return ns;
}

static jv g_dict(ARGS)
{
    jv d = g_namespace(c, fn, args, nargs, kwn, kwv, nkw);
    d.k = JV_DICT;
    return d;
}

void jfail_raised(jctx *c, const char *msg, size_t n)
{
    snprintf(c->err, sizeof c->err, "template raised: %.*s", (int)(n < 400 ? n : 400), msg);
    longjmp(c->fail, 1);
}

static jv g_raise(ARGS)
{
    (void)fn; (void)kwn; (void)kwv; (void)nkw;
    jv m = nargs ? jv_stringify(c, args[0]) : jv_str_ref("", 0);
    jfail_raised(c, m.s, m.n);
}

static jv g_strftime(ARGS)
{
    (void)fn; (void)kwn; (void)kwv; (void)nkw;
    if (nargs < 1) jfail(c, 0, "strftime_now needs a format");
    jv f = need_str(c, args[0], "strftime_now");
    char *fmt = jarena_strdup(c, f.s, f.n);
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char out[512];
    size_t n = strftime(out, sizeof out, fmt, &tm);
    return jv_str(c, out, n);
}

void jglobals_install(jctx *c, jframe *g)
{
    jframe_set(c, g, "range", jv_func(c, "range", g_range, jv_none()));
    jframe_set(c, g, "namespace", jv_func(c, "namespace", g_namespace, jv_none()));
    jframe_set(c, g, "dict", jv_func(c, "dict", g_dict, jv_none()));
    jframe_set(c, g, "raise_exception", jv_func(c, "raise_exception", g_raise, jv_none()));
    jframe_set(c, g, "strftime_now", jv_func(c, "strftime_now", g_strftime, jv_none()));
}
