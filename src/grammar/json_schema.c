/* json_schema.c - JSON schema -> GBNF, one rule per schema node.
 *
 * The rules match compact or lightly spaced JSON (the `space` rule allows
 * one space or a newline and up to 20 blanks after each token), so the
 * model may pretty-print a little but never loop on whitespace. Numbers
 * have at most 16 integer and 16 fraction digits and a 2-digit exponent,
 * for the same reason (and so that every one fits a double).
 *
 * An object's declared properties come in the schema's order; each
 * optional one may be left out. For k properties the rules are
 *   first_i ::= kv_i after_{i+1} | first_{i+1}     (nothing emitted yet)
 *   after_i ::= "," kv_i after_{i+1} | after_{i+1} (something emitted)
 * (the second alternative only for optional properties), so commas are
 * right whatever is omitted. Without "additionalProperties" an object with
 * "properties" admits no other keys (OpenAI's strict mode requires false;
 * llama.cpp reads it so too).
 *
 * Keywords outside the supported set are refused with the schema path
 * ("$.properties.age: 'minimum' is not supported"); annotations (title,
 * description, default, examples...) are ignored.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/gbnf_write.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

enum {
    P_SPACE = 1 << 0, P_BOOL = 1 << 1, P_NULL = 1 << 2, P_INT = 1 << 3, P_NUM = 1 << 4,
    P_CHAR = 1 << 5, P_STRING = 1 << 6, P_VALUE = 1 << 7,
};

#define SC_MAX_NEST 64
#define SC_MAX_ITEMS 1000

typedef struct {
    char *ref;
    char name[SC_NAME];
} sc_ref;

struct sc_ctx {
    gw_buf out;
    json_t *root;
    unsigned counter;
    unsigned prims;
    sc_ref *refs;
    size_t n_refs, cap_refs;
    int depth;
    int rc;
};

static int sc_fail(sc_ctx *c, const char *path, const char *fmt, const char *arg)
{
    if (c->rc) return c->rc;
    char what[256];
    snprintf(what, sizeof what, fmt, arg ? arg : "");
    c->rc = err_set(PL_EINVAL, "json_schema: %s: %s", path, what);
    return c->rc;
}

/* A fresh rule name from a hint (a property name, a $defs name...). */
static void new_name(sc_ctx *c, const char *hint, char *name)
{
    char h[40];
    size_t k = 0;
    for (const char *p = hint; *p && k < sizeof h - 1; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        h[k++] = ok ? ch : '-';
    }
    h[k] = 0;
    snprintf(name, SC_NAME, "%s-%u", k ? h : "r", c->counter++);
}

static void emit_rule(sc_ctx *c, const char *name, const gw_buf *body)
{
    gb_str(&c->out, name);
    gb_str(&c->out, " ::= ");
    if (body->n) gb_add(&c->out, body->p, body->n);
    else gb_str(&c->out, "\"\""); /* an empty body would let the next line continue it */
    gb_str(&c->out, "\n");
    if (c->out.n > GM_MAX_TEXT && !c->rc) c->rc = err_set(PL_EINVAL, "json_schema: the schema compiles to more than 1 MiB of grammar");
}

static const char *const annotations[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "$defs", "definitions", "strict", NULL,
};
static const char *const supported[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format", NULL,
};

static bool in_list(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (strcmp(*l, k) == 0) return true;
    return false;
}

static int check_keywords(sc_ctx *c, json_t *s, const char *path)
{
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (!in_list(annotations, k) && !in_list(supported, k)) return sc_fail(c, path, "'%s' is not supported", k);
    }
    if (json_object_get(s, "$ref")) {
        json_object_foreach(s, k, v) {
            if (strcmp(k, "$ref") && !in_list(annotations, k))
                return sc_fail(c, path, "'$ref' beside '%s' is not supported", k);
        }
    }
    return 0;
}

/* A JSON value as the GBNF literal of its compact text, then space. */
static int literal_of(sc_ctx *c, json_t *v, gw_buf *body, const char *path)
{
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!txt) return sc_fail(c, path, "cannot serialise an enum/const value%s", NULL);
    gb_literal(body, txt, strlen(txt));
    gb_str(body, " space");
    c->prims |= P_SPACE;
    free(txt);
    return 0;
}

/* ---------------------------------------------------------------- $ref */

static json_t *resolve_pointer(json_t *root, const char *ref)
{
    if (strcmp(ref, "#") == 0) return root;
    if (strncmp(ref, "#/", 2) != 0) return NULL;
    json_t *cur = root;
    const char *p = ref + 2;
    while (cur && *p) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char key[256];
        size_t k = 0;
        for (size_t i = 0; i < n && k < sizeof key - 1; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) { key[k++] = p[i + 1] == '0' ? '~' : '/'; i++; }
            else key[k++] = p[i];
        }
        key[k] = 0;
        cur = json_is_object(cur) ? json_object_get(cur, key) : NULL;
        p += n + (e ? 1 : 0);
    }
    return cur;
}

static int gen_named(sc_ctx *c, json_t *s, const char *path, const char *name);

static int gen_ref(sc_ctx *c, const char *ref, const char *path, gw_buf *body)
{
    for (size_t i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, ref) == 0) { gb_str(body, c->refs[i].name); return 0; }
    json_t *t = resolve_pointer(c->root, ref);
    if (!t) return sc_fail(c, path, "'$ref' %s does not resolve to a local definition ('#/$defs/...')", ref);
    if (c->n_refs == c->cap_refs) {
        size_t nc = c->cap_refs ? c->cap_refs * 2 : 8;
        sc_ref *nr = realloc(c->refs, nc * sizeof *nr);
        if (!nr) return c->rc = err_set(PL_ENOMEM, "json_schema: out of memory");
        c->refs = nr;
        c->cap_refs = nc;
    }
    sc_ref *r = &c->refs[c->n_refs];
    r->ref = strdup(ref);
    if (!r->ref) return c->rc = err_set(PL_ENOMEM, "json_schema: out of memory");
    const char *slash = strrchr(ref, '/');
    new_name(c, slash ? slash + 1 : "root", r->name);
    c->n_refs++;
    char name[SC_NAME];
    memcpy(name, r->name, SC_NAME);
    gb_str(body, name);
    char sub[512];
    snprintf(sub, sizeof sub, "%s", ref);
    return gen_named(c, t, sub, name);
}

/* --------------------------------------------------------------- types */

static int get_count(sc_ctx *c, json_t *s, const char *key, long long dflt, long long max, long long *out,
                     const char *path)
{
    json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return sc_fail(c, path, "'%s' must be a non-negative integer", key);
    if (json_integer_value(v) > max) {
        char m[64];
        snprintf(m, sizeof m, "%s above %lld", key, max);
        return sc_fail(c, path, "'%s' is not supported", m);
    }
    *out = json_integer_value(v);
    return 0;
}

static void repeat_suffix(gw_buf *b, long long mn, long long mx)
{
    if (mx < 0) gb_fmt(b, "{%lld,}", mn);
    else gb_fmt(b, "{%lld,%lld}", mn, mx);
}

static int gen_string(sc_ctx *c, json_t *s, const char *path, gw_buf *body)
{
    long long mn, mx;
    if (get_count(c, s, "minLength", 0, GM_MAX_REPEAT, &mn, path) ||
        get_count(c, s, "maxLength", -1, GM_MAX_REPEAT, &mx, path))
        return c->rc;
    if (mx >= 0 && mx < mn) return sc_fail(c, path, "maxLength is below minLength%s", NULL);
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    c->prims |= P_SPACE | P_CHAR;
    if (pat || fmt) {
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") || (pat && fmt))
            return sc_fail(c, path, "'pattern'/'format' together with each other or with min/maxLength is not supported%s", NULL);
        char sub[512];
        snprintf(sub, sizeof sub, "%s.%s", path, pat ? "pattern" : "format");
        if (pat && !json_is_string(pat)) return sc_fail(c, path, "'pattern' must be a string%s", NULL);
        if (fmt && !json_is_string(fmt)) return sc_fail(c, path, "'format' must be a string%s", NULL);
        gb_str(body, "\"\\\"\" ");
        int rc = pat ? sc_regex(c, json_string_value(pat), sub, body) : sc_format(c, json_string_value(fmt), sub, body);
        if (rc) return rc;
        gb_str(body, " \"\\\"\" space");
        return 0;
    }
    gb_str(body, "\"\\\"\" char");
    if (mn == 0 && mx < 0) gb_str(body, "*");
    else repeat_suffix(body, mn, mx);
    gb_str(body, " \"\\\"\" space");
    return 0;
}

static int gen_array(sc_ctx *c, json_t *s, const char *path, gw_buf *body)
{
    long long mn, mx;
    if (get_count(c, s, "minItems", 0, SC_MAX_ITEMS, &mn, path) || get_count(c, s, "maxItems", -1, SC_MAX_ITEMS, &mx, path))
        return c->rc;
    if (mx >= 0 && mx < mn) return sc_fail(c, path, "maxItems is below minItems%s", NULL);
    json_t *items = json_object_get(s, "items");
    char item[SC_NAME] = "value";
    if (items && json_is_array(items)) return sc_fail(c, path, "'items' as an array (tuples) is not supported%s", NULL);
    if (items) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s.items", path);
        new_name(c, "item", item);
        if (gen_named(c, items, sub, item)) return c->rc;
    } else c->prims |= P_VALUE;
    c->prims |= P_SPACE;
    gb_str(body, "\"[\" space ");
    if (mx == 0) { gb_str(body, "\"]\" space"); return 0; }
    if (mn == 0) gb_fmt(body, "( %s ( \",\" space %s )", item, item);
    else gb_fmt(body, "%s ( \",\" space %s )", item, item);
    long long rmn = mn ? mn - 1 : 0, rmx = mx < 0 ? -1 : mx - 1;
    if (rmn == 0 && rmx < 0) gb_str(body, "*");
    else repeat_suffix(body, rmn, rmx);
    gb_str(body, mn == 0 ? " )? \"]\" space" : " \"]\" space");
    return 0;
}

/* ------------------------------------------------- keys not declared */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static size_t cp_len(const char *s)
{
    unsigned char ch = (unsigned char)*s;
    return ch < 0x80 ? 1 : (ch & 0xE0) == 0xC0 ? 2 : (ch & 0xF0) == 0xE0 ? 3 : 4;
}

/* Rule `name` matches a string's JSON content (up to the closing quote)
 * that differs from every keys[0..n) (sorted, JSON-encoded), given that
 * its first `depth` bytes equal theirs: continue along a key, or leave
 * them all with a plain character (anything may follow), or stop where
 * no key stops. */
static void not_keys(sc_ctx *c, char **keys, size_t n, size_t depth, const char *name)
{
    gw_buf b = {0}, other = {0};
    bool ends = false;
    for (size_t i = 0; i < n && !c->rc;) {
        const char *k = keys[i];
        if (!k[depth]) { ends = true; i++; continue; }
        size_t l = cp_len(k + depth), j = i + 1;
        while (j < n && strlen(keys[j]) >= depth + l && memcmp(keys[j] + depth, k + depth, l) == 0) j++;
        char sub[SC_NAME];
        new_name(c, "key", sub);
        gb_str(&b, b.n ? " | " : "");
        gb_literal(&b, k + depth, l);
        gb_fmt(&b, " %s", sub);
        if (l == 1) gb_class_cp(&other, (unsigned char)k[depth]);
        else gb_add(&other, k + depth, l);
        not_keys(c, keys + i, j - i, depth + l, sub);
        i = j;
    }
    gb_fmt(&b, "%s[^%s\"\\\\\\x00-\\x1F\\x7F] char*", b.n ? " | " : "", other.p ? other.p : "");
    if (!ends) gb_str(&b, " | \"\"");
    c->prims |= P_CHAR;
    emit_rule(c, name, &b);
    gb_free(&b);
    gb_free(&other);
}

/* A rule for the keys of additional properties: any string but the
 * declared property names (a key must not be given twice). */
static int other_key_rule(sc_ctx *c, json_t *props, char *name)
{
    size_t n = props ? json_object_size(props) : 0;
    char **keys = calloc(n ? n : 1, sizeof *keys);
    if (!keys) return c->rc = err_set(PL_ENOMEM, "json_schema: out of memory");
    const char *key;
    json_t *v;
    size_t k = 0;
    json_object_foreach(props, key, v) {
        json_t *js = json_string(key);
        char *t = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        if (!t) { c->rc = err_set(PL_ENOMEM, "json_schema: out of memory"); break; }
        t[strlen(t) - 1] = 0;      /* drop the quotes */
        memmove(t, t + 1, strlen(t));
        keys[k++] = t;
    }
    if (!c->rc) {
        qsort(keys, k, sizeof *keys, cmp_str);
        char inner[SC_NAME];
        new_name(c, "key", inner);
        not_keys(c, keys, k, 0, inner);
        new_name(c, "key", name);
        gw_buf b = {0};
        gb_fmt(&b, "\"\\\"\" %s \"\\\"\" space", inner);
        emit_rule(c, name, &b);
        gb_free(&b);
    }
    for (size_t i = 0; i < k; i++) free(keys[i]);
    free(keys);
    return c->rc;
}

static int gen_object(sc_ctx *c, json_t *s, const char *path, gw_buf *body)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return sc_fail(c, path, "'properties' must be an object%s", NULL);
    if (req && !json_is_array(req)) return sc_fail(c, path, "'required' must be an array of names%s", NULL);
    size_t i;
    json_t *rv;
    json_array_foreach(req, i, rv) {
        if (!json_is_string(rv)) return sc_fail(c, path, "'required' must be an array of names%s", NULL);
        if (!props || !json_object_get(props, json_string_value(rv)))
            return sc_fail(c, path, "required property '%s' is not declared in 'properties'", json_string_value(rv));
    }
    c->prims |= P_SPACE;
    char extra[SC_NAME] = "";
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return sc_fail(c, path, "'additionalProperties' must be a boolean or a schema%s", NULL);
    if ((!props && !addl) || json_is_true(addl)) { snprintf(extra, sizeof extra, "value"); c->prims |= P_VALUE; }
    else if (json_is_object(addl)) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s.additionalProperties", path);
        new_name(c, "additional", extra);
        if (gen_named(c, addl, sub, extra)) return c->rc;
    }
    size_t k = props ? json_object_size(props) : 0;
    char next_first[SC_NAME], next_after[SC_NAME], first[SC_NAME], after[SC_NAME];
    /* the tail: additional properties, if any */
    new_name(c, "after", next_after);
    new_name(c, "first", next_first);
    gw_buf b = {0};
    if (extra[0]) {
        char key[SC_NAME];
        if (other_key_rule(c, props, key)) return c->rc;
        gb_fmt(&b, "| \",\" space %s \":\" space %s %s", key, extra, next_after);
        emit_rule(c, next_after, &b);
        b.n = 0;
        gb_fmt(&b, "| %s \":\" space %s %s", key, extra, next_after);
    } else emit_rule(c, next_after, &b);
    emit_rule(c, next_first, &b);
    gb_free(&b);
    /* the declared properties, last to first */
    const char **keys = k ? malloc(k * sizeof *keys) : NULL;
    if (k && !keys) return c->rc = err_set(PL_ENOMEM, "json_schema: out of memory");
    const char *key;
    json_t *ps;
    size_t n = 0;
    json_object_foreach(props, key, ps) keys[n++] = key;
    for (size_t j = k; j-- > 0 && !c->rc;) {
        key = keys[j];
        ps = json_object_get(props, key);
        bool required = false;
        json_array_foreach(req, i, rv) required |= strcmp(json_string_value(rv), key) == 0;
        char sub[512], val[SC_NAME];
        snprintf(sub, sizeof sub, "%s.properties.%s", path, key);
        new_name(c, key, val);
        if (gen_named(c, ps, sub, val)) break;
        json_t *ks = json_string(key);
        char *kt = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!kt) { c->rc = err_set(PL_ENOMEM, "json_schema: out of memory"); break; }
        gw_buf kv = {0};
        gb_literal(&kv, kt, strlen(kt));
        free(kt);
        gb_fmt(&kv, " space \":\" space %s", val);
        new_name(c, "after", after);
        new_name(c, "first", first);
        gw_buf r = {0};
        gb_fmt(&r, "\",\" space %s %s", kv.p ? kv.p : "", next_after);
        if (!required) gb_fmt(&r, " | %s", next_after);
        emit_rule(c, after, &r);
        r.n = 0;
        gb_fmt(&r, "%s %s", kv.p ? kv.p : "", next_after);
        if (!required) gb_fmt(&r, " | %s", next_first);
        emit_rule(c, first, &r);
        gb_free(&r);
        gb_free(&kv);
        memcpy(next_after, after, SC_NAME);
        memcpy(next_first, first, SC_NAME);
    }
    free(keys);
    gb_fmt(body, "\"{\" space %s \"}\" space", next_first);
    return c->rc;
}

static int gen_type(sc_ctx *c, json_t *s, const char *type, const char *path, gw_buf *body)
{
    if (strcmp(type, "object") == 0) return gen_object(c, s, path, body);
    if (strcmp(type, "array") == 0) return gen_array(c, s, path, body);
    if (strcmp(type, "string") == 0) return gen_string(c, s, path, body);
    c->prims |= P_SPACE;
    if (strcmp(type, "integer") == 0) { c->prims |= P_INT; gb_str(body, "integer"); return 0; }
    if (strcmp(type, "number") == 0) { c->prims |= P_NUM; gb_str(body, "number"); return 0; }
    if (strcmp(type, "boolean") == 0) { c->prims |= P_BOOL; gb_str(body, "boolean"); return 0; }
    if (strcmp(type, "null") == 0) { c->prims |= P_NULL; gb_str(body, "null"); return 0; }
    return sc_fail(c, path, "unknown type '%s'", type);
}

static const char *infer_type(json_t *s)
{
    static const char *const obj[] = {"properties", "additionalProperties", "required", NULL};
    static const char *const arr[] = {"items", "minItems", "maxItems", NULL};
    static const char *const str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    for (int i = 0; obj[i]; i++) if (json_object_get(s, obj[i])) return "object";
    for (int i = 0; arr[i]; i++) if (json_object_get(s, arr[i])) return "array";
    for (int i = 0; str[i]; i++) if (json_object_get(s, str[i])) return "string";
    return NULL;
}

static int gen_alternatives(sc_ctx *c, json_t *list, const char *kw, const char *path, gw_buf *body)
{
    if (!json_is_array(list) || json_array_size(list) == 0) return sc_fail(c, path, "'%s' must be a non-empty array", kw);
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        char sub[512], name[SC_NAME];
        snprintf(sub, sizeof sub, "%s.%s[%zu]", path, kw, i);
        new_name(c, kw, name);
        if (gen_named(c, v, sub, name)) return c->rc;
        gb_fmt(body, "%s%s", i ? " | " : "", name);
    }
    return 0;
}

static int gen_body(sc_ctx *c, json_t *s, const char *path, gw_buf *body)
{
    if (json_is_true(s)) { c->prims |= P_VALUE; gb_str(body, "value"); return 0; }
    if (json_is_false(s)) return sc_fail(c, path, "the schema false matches nothing%s", NULL);
    if (!json_is_object(s)) return sc_fail(c, path, "a schema must be an object or a boolean%s", NULL);
    if (check_keywords(c, s, path)) return c->rc;
    json_t *v;
    if ((v = json_object_get(s, "$ref"))) {
        if (!json_is_string(v)) return sc_fail(c, path, "'$ref' must be a string%s", NULL);
        return gen_ref(c, json_string_value(v), path, body);
    }
    if ((v = json_object_get(s, "const"))) return literal_of(c, v, body, path);
    if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || json_array_size(v) == 0) return sc_fail(c, path, "'enum' must be a non-empty array%s", NULL);
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (i) gb_str(body, " | ");
            if (literal_of(c, e, body, path)) return c->rc;
        }
        return 0;
    }
    if ((v = json_object_get(s, "anyOf"))) return gen_alternatives(c, v, "anyOf", path, body);
    if ((v = json_object_get(s, "oneOf"))) return gen_alternatives(c, v, "oneOf", path, body);
    if ((v = json_object_get(s, "allOf"))) {
        if (!json_is_array(v) || json_array_size(v) != 1)
            return sc_fail(c, path, "'allOf' with other than one schema is not supported%s", NULL);
        return gen_alternatives(c, v, "allOf", path, body);
    }
    json_t *t = json_object_get(s, "type");
    if (!t) {
        const char *it = infer_type(s);
        if (it) return gen_type(c, s, it, path, body);
        c->prims |= P_VALUE;
        gb_str(body, "value");
        return 0;
    }
    if (json_is_string(t)) return gen_type(c, s, json_string_value(t), path, body);
    if (!json_is_array(t) || json_array_size(t) == 0) return sc_fail(c, path, "'type' must be a name or a non-empty array of names%s", NULL);
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) {
        if (!json_is_string(e)) return sc_fail(c, path, "'type' must be a name or a non-empty array of names%s", NULL);
        gb_str(body, i ? " | ( " : "( ");
        if (gen_type(c, s, json_string_value(e), path, body)) return c->rc;
        gb_str(body, " )");
    }
    return 0;
}

/* Compiles schema s into the rule `name`. */
static int gen_named(sc_ctx *c, json_t *s, const char *path, const char *name)
{
    if (c->rc) return c->rc;
    if (++c->depth > SC_MAX_NEST) return sc_fail(c, path, "schema nested deeper than 64 levels%s", NULL);
    gw_buf body = {0};
    int rc = gen_body(c, s, path, &body);
    if (rc && !c->rc) c->rc = rc;
    if (body.oom && !c->rc) c->rc = err_set(PL_ENOMEM, "json_schema: out of memory");
    if (!c->rc) emit_rule(c, name, &body);
    gb_free(&body);
    c->depth--;
    return c->rc;
}

/* ---------------------------------------------------------- primitives */

static void emit_prims(sc_ctx *c)
{
    unsigned p = c->prims;
    if (p & P_VALUE) p |= P_STRING | P_NUM | P_BOOL | P_NULL;
    if (p & P_STRING) p |= P_CHAR;
    if (p) p |= P_SPACE;
    gw_buf *o = &c->out;
    if (p & P_SPACE) gb_str(o, "space ::= | \" \" | \"\\n\" [ \\t]{0,20}\n");
    if (p & P_BOOL) gb_str(o, "boolean ::= (\"true\" | \"false\") space\n");
    if (p & P_NULL) gb_str(o, "null ::= \"null\" space\n");
    if (p & P_INT) gb_str(o, "integer ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) space\n");
    if (p & P_NUM)
        gb_str(o, "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? space\n");
    /* \u escapes stop short of the surrogates: a lone one is refused by
     * strict parsers, and raw UTF-8 spells every other character */
    if (p & P_CHAR)
        gb_str(o, "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n");
    if (p & P_STRING) gb_str(o, "string ::= \"\\\"\" char* \"\\\"\" space\n");
    if (p & P_VALUE) {
        gb_str(o, "value ::= object | array | string | number | boolean | null\n");
        gb_str(o, "object ::= \"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space\n");
        gb_str(o, "array ::= \"[\" space ( value ( \",\" space value )* )? \"]\" space\n");
    }
}

/* ------------------------------------------------------------- entries */

int sc_begin(sc_ctx **out, json_t *root)
{
    sc_ctx *c = calloc(1, sizeof *c);
    if (!c) return err_set(PL_ENOMEM, "json_schema: out of memory");
    c->root = root;
    *out = c;
    return 0;
}

int sc_compile(sc_ctx *c, json_t *schema, json_t *root, const char *path, char *name)
{
    c->root = root;
    for (size_t i = 0; i < c->n_refs; i++) free(c->refs[i].ref);
    c->n_refs = 0; /* $refs are relative to this root */
    new_name(c, "schema", name);
    return gen_named(c, schema, path, name);
}

void sc_need(sc_ctx *c, const char *prims)
{
    if (strstr(prims, "space")) c->prims |= P_SPACE;
    if (strstr(prims, "object")) c->prims |= P_VALUE;
}

gw_buf *sc_out(sc_ctx *c) { return &c->out; }

int sc_end(sc_ctx *c, char **gbnf)
{
    int rc = c->rc;
    if (!rc) {
        emit_prims(c);
        if (c->out.oom) rc = err_set(PL_ENOMEM, "json_schema: out of memory");
    }
    if (!rc && gbnf) { *gbnf = c->out.p; c->out.p = NULL; }
    for (size_t i = 0; i < c->n_refs; i++) free(c->refs[i].ref);
    free(c->refs);
    gb_free(&c->out);
    free(c);
    return rc;
}

int gm_schema_to_gbnf(const char *schema, size_t len, const char *root_name, char **gbnf)
{
    json_error_t je;
    json_t *s = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!s) return err_set(PL_EINVAL, "json_schema: not JSON: line %d, column %d: %s", je.line, je.column, je.text);
    sc_ctx *c = NULL;
    int rc = sc_begin(&c, s);
    if (rc) { json_decref(s); return rc; }
    char name[SC_NAME];
    if (!sc_compile(c, s, s, "$", name)) gb_fmt(&c->out, "%s ::= %s\n", root_name ? root_name : "root", name);
    rc = sc_end(c, gbnf);
    json_decref(s);
    return rc;
}
