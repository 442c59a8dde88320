/* test_json_schema.c - JSON schema -> GBNF: each supported keyword accepts
 * the documents valid under it and rejects invalid ones; random strings
 * generated from the compiled grammar parse (jansson) and validate (a
 * small validator written here, PCRE2 for patterns); unsupported
 * keywords are refused with the schema path; the forced tool-call
 * grammar. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/gm_work.h"
#include "grammar/grammar.h"
#include "test.h"

static gm_grammar *compile(const char *schema)
{
    char *gbnf = NULL;
    if (gm_schema_to_gbnf(schema, strlen(schema), "root", &gbnf)) {
        fprintf(stderr, "schema %s: %s\n", schema, err_msg());
        return NULL;
    }
    gm_grammar *g = NULL;
    if (gm_parse(&g, gbnf, strlen(gbnf), "root")) fprintf(stderr, "grammar:\n%s\nerror: %s\n", gbnf, err_msg());
    free(gbnf);
    return g;
}

static int accepts(const gm_grammar *g, const char *doc) { return gm_match_string(g, doc, strlen(doc)) == 1; }

/* ---------------------------------------------------------- validator */

static size_t utf8_len(const char *s)
{
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool pattern_ok(const char *pat, const char *s)
{
    int e;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &e, &off, NULL);
    if (!re) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static bool type_is(json_t *v, const char *t)
{
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

/* The subset this compiler supports, checked independently. */
static bool valid(json_t *v, json_t *s, json_t *root)
{
    json_t *k;
    if ((k = json_object_get(s, "$ref"))) {
        const char *r = json_string_value(k);
        json_t *defs = json_object_get(root, "$defs");
        return valid(v, r[1] ? json_object_get(defs, strrchr(r, '/') + 1) : root, root);
    }
    if ((k = json_object_get(s, "const"))) return json_equal(v, k);
    if ((k = json_object_get(s, "enum"))) {
        size_t i;
        json_t *e;
        json_array_foreach(k, i, e) if (json_equal(v, e)) return true;
        return false;
    }
    if ((k = json_object_get(s, "anyOf"))) {
        size_t i;
        json_t *e;
        json_array_foreach(k, i, e) if (valid(v, e, root)) return true;
        return false;
    }
    json_t *t = json_object_get(s, "type");
    if (json_is_string(t) && !type_is(v, json_string_value(t))) return false;
    if (json_is_array(t)) {
        bool any = false;
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) any |= type_is(v, json_string_value(e));
        if (!any) return false;
    }
    if (json_is_object(v)) {
        json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(s, "required"), i, e) if (!json_object_get(v, json_string_value(e))) return false;
        const char *key;
        json_object_foreach(v, key, e) {
            json_t *ps = props ? json_object_get(props, key) : NULL;
            if (ps) { if (!valid(e, ps, root)) return false; }
            else if (props && (!addl || json_is_false(addl))) return false;
            else if (json_is_object(addl) && !valid(e, addl, root)) return false;
        }
    }
    if (json_is_array(v)) {
        json_t *items = json_object_get(s, "items"), *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
        if (mn && json_array_size(v) < (size_t)json_integer_value(mn)) return false;
        if (mx && json_array_size(v) > (size_t)json_integer_value(mx)) return false;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (items && !valid(e, items, root)) return false;
    }
    if (json_is_string(v)) {
        const char *str = json_string_value(v);
        json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
        json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
        if (mn && utf8_len(str) < (size_t)json_integer_value(mn)) return false;
        if (mx && utf8_len(str) > (size_t)json_integer_value(mx)) return false;
        if (pat && !pattern_ok(json_string_value(pat), str)) return false;
        if (fmt && !strcmp(json_string_value(fmt), "date") && !pattern_ok("^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$", str)) return false;
        if (fmt && !strcmp(json_string_value(fmt), "uuid") && !pattern_ok("^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$", str)) return false;
    }
    return true;
}

/* ------------------------------------------------------ random strings */

static uint64_t rng_u64(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void put_utf8(char *out, size_t *n, uint32_t cp)
{
    if (cp < 0x80) out[(*n)++] = (char)cp;
    else if (cp < 0x800) { out[(*n)++] = (char)(0xC0 | cp >> 6); out[(*n)++] = (char)(0x80 | (cp & 0x3F)); }
    else { out[(*n)++] = (char)(0xE0 | cp >> 12); out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[(*n)++] = (char)(0x80 | (cp & 0x3F)); }
}

/* A random string of g's language (or NULL if the walk got too long): at
 * each step stop if the grammar is complete (p = 1/3), else pick a stack
 * and a random code point its top class takes. */
static char *random_doc(const gm_grammar *g, gm_work *w, uint64_t *seed)
{
    static const uint32_t pool[] = {'a', 'Z', '0', '7', ' ', '"', '\\', '-', ':', 'T', 'e', 0xE9, 0x4E2D, 'n', 'u'};
    gm_state s;
    if (gm_state_init(&s, g, w)) return NULL;
    char *out = malloc(8192);
    size_t n = 0;
    for (int step = 0; step < 1500; step++) {
        bool acc = gm_state_accepting(&s);
        if (acc && (!gm_state_can_continue(&s) || rng_u64(seed) % 3 == 0)) {
            out[n] = 0;
            gm_state_free(&s);
            return out;
        }
        /* the tops of the stacks */
        uint32_t tops[256];
        int nt = 0;
        for (size_t i = 0; i < s.n_flat && nt < 256; i += 1 + s.flat[i])
            if (s.flat[i]) tops[nt++] = s.flat[i + 1];
        if (!nt) break;
        uint32_t cls = g->el[tops[rng_u64(seed) % (uint64_t)nt]].v;
        const gm_class *c = &g->cls[cls];
        uint32_t cp = 0;
        bool found = false;
        if (!c->neg && c->n) {
            const gm_range *r = &g->rng[c->off + rng_u64(seed) % c->n];
            cp = r->lo + (uint32_t)(rng_u64(seed) % (r->hi - r->lo + 1));
            found = true;
        }
        for (int tries = 0; !found && tries < 64; tries++) {
            cp = pool[rng_u64(seed) % (sizeof pool / sizeof *pool)];
            found = gm_class_match(g, cls, cp);
        }
        if (!found || cp >= 0x10000 || (cp >= 0xD800 && cp <= 0xDFFF)) break;
        char u[4];
        size_t k = 0;
        put_utf8(u, &k, cp);
        if (gm_state_advance(&s, g, w, u, k) != 1) break;
        memcpy(out + n, u, k);
        n += k;
        if (n > 8000) break;
    }
    gm_state_free(&s);
    free(out);
    return NULL;
}

/* n random documents of schema's grammar all parse and validate; at least
 * half of the walks must finish. */
static int random_docs_valid(const char *schema, int n, uint64_t seed)
{
    gm_grammar *g = compile(schema);
    json_t *s = json_loads(schema, 0, NULL);
    gm_work *w = gm_work_new();
    int ok = g && s && w, done = 0;
    for (int i = 0; ok && i < n; i++) {
        char *doc = random_doc(g, w, &seed);
        if (!doc) continue;
        done++;
        json_t *v = json_loads(doc, JSON_DECODE_ANY, NULL);
        if (!v || !valid(v, s, s)) {
            fprintf(stderr, "schema %s: generated %s: %s\n", schema, doc, v ? "invalid" : "not JSON");
            ok = 0;
        }
        json_decref(v);
        free(doc);
    }
    if (ok && done < n / 2) { fprintf(stderr, "schema %s: only %d of %d walks finished\n", schema, done, n); ok = 0; }
    gm_work_free(w);
    json_decref(s);
    gm_grammar_free(g);
    return ok;
}

/* ---------------------------------------------------------------- tests */

TEST(primitive_types)
{
    gm_grammar *g = compile("{\"type\": \"integer\"}");
    CHECK(g);
    CHECK(accepts(g, "0") && accepts(g, "-12") && accepts(g, "123456"));
    CHECK(!accepts(g, "01") && !accepts(g, "1.5") && !accepts(g, "\"1\"") && !accepts(g, "-"));
    gm_grammar_free(g);
    g = compile("{\"type\": \"number\"}");
    CHECK(g);
    CHECK(accepts(g, "0.5") && accepts(g, "-1e10") && accepts(g, "3.25E-2") && accepts(g, "7"));
    CHECK(!accepts(g, ".5") && !accepts(g, "1.") && !accepts(g, "1e"));
    gm_grammar_free(g);
    g = compile("{\"type\": [\"boolean\", \"null\"]}");
    CHECK(g);
    CHECK(accepts(g, "true") && accepts(g, "false") && accepts(g, "null"));
    CHECK(!accepts(g, "True") && !accepts(g, "0"));
    gm_grammar_free(g);
    g = compile("{\"type\": \"string\"}");
    CHECK(g);
    CHECK(accepts(g, "\"\"") && accepts(g, "\"a \\\"q\\\" \\u00e9 \\n\"") && accepts(g, "\"日本\""));
    CHECK(!accepts(g, "\"a\nb\"") && !accepts(g, "\"\\x\"") && !accepts(g, "\"abc"));
    gm_grammar_free(g);
}

TEST(objects_required_and_additional)
{
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                      "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"],\"additionalProperties\":false}";
    gm_grammar *g = compile(sch);
    CHECK(g);
    CHECK(accepts(g, "{\"b\":\"x\"}"));
    CHECK(accepts(g, "{\"a\": 1, \"b\": \"x\", \"c\": true}"));
    CHECK(accepts(g, "{\"a\":1,\"b\":\"x\"}"));
    CHECK(accepts(g, "{\"b\":\"x\",\"c\":false}"));
    CHECK(accepts(g, "{\n  \"b\": \"x\"\n}"));
    CHECK(!accepts(g, "{}"));                          /* b required */
    CHECK(!accepts(g, "{\"a\":1}"));
    CHECK(!accepts(g, "{\"b\":\"x\",\"d\":1}"));       /* no additional */
    CHECK(!accepts(g, "{\"b\":\"x\",}"));
    CHECK(!accepts(g, "{,\"b\":\"x\"}"));
    CHECK(!accepts(g, "{\"b\":1}"));
    gm_grammar_free(g);
    g = compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}");
    CHECK(g);
    CHECK(accepts(g, "{}") && accepts(g, "{\"a\":1,\"zz\":\"q\"}") && accepts(g, "{\"zz\":\"q\",\"yy\":\"r\"}"));
    CHECK(!accepts(g, "{\"zz\":1}"));
    CHECK(!accepts(g, "{\"a\":1,\"a\":\"q\"}"));      /* a declared key is not an additional one */
    CHECK(accepts(g, "{\"a\":1,\"ab\":\"q\",\"\":\"r\"}"));
    gm_grammar_free(g);
    g = compile("{\"type\":\"object\"}"); /* any object */
    CHECK(g);
    CHECK(accepts(g, "{\"x\":[1,{\"y\":null}],\"z\":\"w\"}") && accepts(g, "{}"));
    CHECK(!accepts(g, "[]") && !accepts(g, "{\"x\"}"));
    gm_grammar_free(g);
}

TEST(arrays_enum_const_anyof_ref)
{
    gm_grammar *g = compile("{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",3]},\"minItems\":1,\"maxItems\":3}");
    CHECK(g);
    CHECK(accepts(g, "[\"red\"]") && accepts(g, "[3, \"green\", \"red\"]"));
    CHECK(!accepts(g, "[]") && !accepts(g, "[\"blue\"]") && !accepts(g, "[3,3,3,3]"));
    gm_grammar_free(g);
    g = compile("{\"anyOf\":[{\"const\":{\"k\":[1,2]}},{\"type\":\"null\"}]}");
    CHECK(g);
    CHECK(accepts(g, "{\"k\":[1,2]}") && accepts(g, "null"));
    CHECK(!accepts(g, "{\"k\":[1]}"));
    gm_grammar_free(g);
    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
                       "\"$ref\":\"#/$defs/node\"}";
    g = compile(tree);
    CHECK(g);
    CHECK(accepts(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"));
    CHECK(!accepts(g, "{\"v\":1,\"kids\":[{}]}"));
    gm_grammar_free(g);
}

TEST(string_lengths_patterns_formats)
{
    gm_grammar *g = compile("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    CHECK(g);
    CHECK(accepts(g, "\"ab\"") && accepts(g, "\"a\\nb\"") && accepts(g, "\"日本語\""));
    CHECK(!accepts(g, "\"a\"") && !accepts(g, "\"abcd\""));
    gm_grammar_free(g);
    g = compile("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}");
    CHECK(g);
    CHECK(accepts(g, "\"AB-123\"") && accepts(g, "\"QQ-000yz\""));
    CHECK(!accepts(g, "\"AB-12\"") && !accepts(g, "\"ab-123\"") && !accepts(g, "\"AB-123y\""));
    gm_grammar_free(g);
    g = compile("{\"type\":\"string\",\"pattern\":\"a\\\"b\"}"); /* unanchored, with a quote */
    CHECK(g);
    CHECK(accepts(g, "\"xxa\\\"byy\"") && accepts(g, "\"a\\\"b\""));
    CHECK(!accepts(g, "\"ab\""));
    gm_grammar_free(g);
    g = compile("{\"type\":\"string\",\"format\":\"date\"}");
    CHECK(g);
    CHECK(accepts(g, "\"2024-02-29\"") && !accepts(g, "\"2024-13-01\"") && !accepts(g, "\"24-01-01\""));
    gm_grammar_free(g);
    g = compile("{\"type\":\"string\",\"format\":\"uuid\"}");
    CHECK(g);
    CHECK(accepts(g, "\"123e4567-e89b-12d3-a456-426614174000\"") && !accepts(g, "\"123e4567\""));
    gm_grammar_free(g);
    g = compile("{\"type\":\"string\",\"format\":\"date-time\"}");
    CHECK(g);
    CHECK(accepts(g, "\"2024-01-02T03:04:05Z\"") && accepts(g, "\"2024-01-02T23:59:59.123+02:00\""));
    CHECK(!accepts(g, "\"2024-01-02T24:00:00Z\""));
    gm_grammar_free(g);
}

static int refused(const char *schema, const char *want)
{
    char *gbnf = NULL;
    int rc = gm_schema_to_gbnf(schema, strlen(schema), "root", &gbnf);
    free(gbnf);
    if (rc == 0 || !strstr(err_msg(), want)) {
        fprintf(stderr, "schema %s: rc %d, \"%s\", wanted \"%s\"\n", schema, rc, err_msg(), want);
        return 0;
    }
    return 1;
}

TEST(unsupported_is_refused_with_the_path)
{
    CHECK(refused("{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\",\"minimum\":0}}}",
                  "$.properties.age: 'minimum' is not supported"));
    CHECK(refused("{\"type\":\"array\",\"items\":{\"not\":{}}}", "$.items: 'not' is not supported"));
    CHECK(refused("{\"$ref\":\"http://x/y\"}", "$: '$ref' http://x/y does not resolve"));
    CHECK(refused("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "$.pattern: pattern at offset 1: lookaround"));
    CHECK(refused("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreference"));
    CHECK(refused("{\"type\":\"string\",\"format\":\"email\"}", "$.format: format 'email' is not supported"));
    CHECK(refused("{\"type\":\"strin\"}", "$: unknown type 'strin'"));
    CHECK(refused("{\"type\":\"object\",\"required\":[\"x\"]}", "required property 'x' is not declared"));
    CHECK(refused("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"maxItems\":5000}]}",
                  "$.anyOf[1]: 'maxItems above 1000' is not supported"));
    CHECK(refused("{\"type\":", "not JSON"));
    CHECK(refused("false", "matches nothing"));
}

TEST(random_documents_parse_and_validate)
{
    const char *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},\"age\":{\"type\":\"integer\"},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3},\"ok\":{\"type\":\"boolean\"}},"
        "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
        "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},"
        "\"y\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\",\"pattern\":\"^[a-c]+\\\\d?$\"}]}},\"required\":[\"y\"]},"
        "\"minItems\":1,\"maxItems\":4}",
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"const\":1},\"k\":{\"type\":\"array\","
        "\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}",
        "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},"
        "\"u\":{\"type\":\"string\",\"format\":\"uuid\"},\"s\":{\"type\":\"string\",\"minLength\":1}},"
        "\"additionalProperties\":{\"type\":\"integer\"}}",
    };
    for (size_t i = 0; i < sizeof schemas / sizeof *schemas; i++) CHECK(random_docs_valid(schemas[i], 200, 1000 + i));
}

TEST(tool_call_grammar)
{
    gm_tool_fn fns[2] = {
        {"get_weather", "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}"},
        {"now", NULL},
    };
    char *gbnf = NULL;
    CHECK_EQ_INT(gm_tool_call_gbnf(fns, 2, "<tool_call>\n", "</tool_call>", &gbnf), 0);
    gm_grammar *g = NULL;
    int rc = gm_parse(&g, gbnf, strlen(gbnf), "root");
    free(gbnf);
    CHECK_EQ_INT(rc, 0);
    CHECK(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"));
    CHECK(accepts(g, "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}</tool_call>"));
    CHECK(!accepts(g, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}}</tool_call>"));
    CHECK(!accepts(g, "{\"name\":\"now\",\"arguments\":{}}"));
    CHECK(!accepts(g, "<tool_call>\n{\"name\":\"later\",\"arguments\":{}}</tool_call>"));
    gm_grammar_free(g);
    gm_tool_fn bad = {"bad name", NULL};
    CHECK(gm_tool_call_gbnf(&bad, 1, NULL, NULL, &gbnf) < 0);
    gm_tool_fn badp = {"f", "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"maximum\":3}}}"};
    CHECK(gm_tool_call_gbnf(&badp, 1, NULL, NULL, &gbnf) < 0);
    CHECK(strstr(err_msg(), "function 'f'") && strstr(err_msg(), "f.parameters.properties.n: 'maximum'"));
}

int main(void)
{
    RUN(primitive_types);
    RUN(objects_required_and_additional);
    RUN(arrays_enum_const_anyof_ref);
    RUN(string_lengths_patterns_formats);
    RUN(unsupported_is_refused_with_the_path);
    RUN(random_documents_parse_and_validate);
    RUN(tool_call_grammar);
    return test_summary();
}
