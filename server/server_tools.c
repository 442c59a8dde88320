/* server_tools.c - tools in requests, tool calls out of generated text; see
 * server_tools.h. */
#include "server_tools.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ requests */

static int check_tool(json_t *t, size_t i, srv_error *e)
{
    if (!json_is_object(t)) return srv_bad_request(e, "tools", NULL, "tools[%zu] must be an object, got %s", i, srv_json_kind(t));
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!type || strcmp(type, "function") != 0)
        return srv_bad_request(e, "tools", NULL, "tools[%zu].type must be \"function\"", i);
    json_t *f = json_object_get(t, "function");
    if (!json_is_object(f)) return srv_bad_request(e, "tools", NULL, "tools[%zu].function must be an object", i);
    const char *name = json_string_value(json_object_get(f, "name"));
    if (!name || !*name) return srv_bad_request(e, "tools", NULL, "tools[%zu].function.name is required (a non-empty string)", i);
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.')
            return srv_bad_request(e, "tools", NULL, "tools[%zu].function.name '%s' may hold only a-z, A-Z, 0-9, _, - and .", i, name);
    json_t *params = json_object_get(f, "parameters");
    if (params && !json_is_null(params) && !json_is_object(params))
        return srv_bad_request(e, "tools", NULL, "tools[%zu].function.parameters must be a JSON schema object", i);
    json_t *d = json_object_get(f, "description");
    if (d && !json_is_null(d) && !json_is_string(d))
        return srv_bad_request(e, "tools", NULL, "tools[%zu].function.description must be a string", i);
    return 0;
}

static bool has_tool(json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && strcmp(n, name) == 0) return true;
    }
    return false;
}

int srv_tools_parse_request(json_t *o, json_t **tools, srv_tool_choice *choice, const char **named,
                            bool *parallel, srv_error *e)
{
    *tools = NULL;
    *choice = SRV_TOOL_AUTO;
    *named = NULL;
    *parallel = true;
    json_t *t = json_object_get(o, "tools"), *tc = json_object_get(o, "tool_choice"),
           *pc = json_object_get(o, "parallel_tool_calls");
    if (json_object_get(o, "functions") && !json_is_null(json_object_get(o, "functions")))
        return srv_bad_request(e, "functions", "unsupported_parameter", "'functions' is deprecated and not supported: use 'tools'");
    if (pc && !json_is_null(pc)) {
        if (!json_is_boolean(pc)) return srv_bad_request(e, "parallel_tool_calls", NULL, "'parallel_tool_calls' must be a boolean");
        *parallel = json_is_true(pc);
    }
    if (t && !json_is_null(t)) {
        if (!json_is_array(t)) return srv_bad_request(e, "tools", NULL, "'tools' must be an array, got %s", srv_json_kind(t));
        size_t i;
        json_t *x;
        json_array_foreach(t, i, x) if (check_tool(x, i, e)) return -1;
        if (json_array_size(t)) *tools = t;
    }
    if (tc && !json_is_null(tc)) {
        if (json_is_string(tc)) {
            const char *s = json_string_value(tc);
            if (strcmp(s, "auto") == 0) *choice = SRV_TOOL_AUTO;
            else if (strcmp(s, "none") == 0) *choice = SRV_TOOL_NONE;
            else if (strcmp(s, "required") == 0) *choice = SRV_TOOL_REQUIRED;
            else return srv_bad_request(e, "tool_choice", NULL, "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got \"%s\"", s);
        } else if (json_is_object(tc)) {
            const char *n = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
            if (!n) return srv_bad_request(e, "tool_choice", NULL, "'tool_choice' names no function (tool_choice.function.name)");
            if (!*tools || !has_tool(*tools, n))
                return srv_bad_request(e, "tool_choice", NULL, "'tool_choice' names the function '%s', which is not in 'tools'", n);
            *choice = SRV_TOOL_NAMED;
            *named = n;
        } else return srv_bad_request(e, "tool_choice", NULL, "'tool_choice' must be a string or an object, got %s", srv_json_kind(tc));
        if (*choice == SRV_TOOL_REQUIRED && !*tools)
            return srv_bad_request(e, "tool_choice", NULL, "'tool_choice' is \"required\" but there are no 'tools'");
    }
    if (*tools) json_incref(*tools);
    return 0;
}

/* The call's wire format as the template writes it, where a grammar can
 * force it: Hermes/Qwen <tool_call> blocks and Mistral's [TOOL_CALLS] list.
 * Other formats put the name outside the JSON (DeepSeek, functionary); for
 * them (and templates without tools) the call is the bare {"name",
 * "arguments"} object, which srv_tools_extract reads for every template. */
static void call_markers(const char *tpl, const char **open, const char **close)
{
    *open = *close = "";
    if (tpl && strstr(tpl, "<tool_call>")) *open = "<tool_call>\n", *close = "\n</tool_call>";
    else if (tpl && strstr(tpl, "[TOOL_CALLS]")) *open = "[TOOL_CALLS][", *close = "]";
}

int srv_tools_forced_gbnf(json_t *tools, srv_tool_choice choice, const char *named, const char *tpl, bool think_open,
                          char **gbnf)
{
    *gbnf = NULL;
    if (!tools || (choice != SRV_TOOL_REQUIRED && choice != SRV_TOOL_NAMED)) return 0;
    const size_t n = json_array_size(tools);
    pl_tool_fn *fns = calloc(n ? n : 1, sizeof *fns);
    char **params = calloc(n ? n : 1, sizeof *params);
    int rc = fns && params ? 0 : PL_ERR_NOMEM;
    size_t k = 0, i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (rc) break;
        json_t *f = json_object_get(t, "function"), *p = json_object_get(f, "parameters");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || (choice == SRV_TOOL_NAMED && strcmp(name, named) != 0)) continue;
        if (json_is_object(p) && !(params[k] = json_dumps(p, JSON_COMPACT))) rc = PL_ERR_NOMEM;
        fns[k].name = name;
        fns[k].parameters = params[k]; /* NULL: any object */
        k++;
    }
    const char *open, *close;
    call_markers(tpl, &open, &close);
    /* a prompt that opened <think> (DeepSeek-R1) has it closed first */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s%s", think_open ? "</think>\n\n" : "", open);
    if (!rc) rc = k ? pl_tool_call_gbnf(fns, k, prefix, close, gbnf) : PL_ERR_INVAL;
    for (size_t j = 0; params && j < n; j++) free(params[j]);
    free(params);
    free(fns);
    return rc;
}

/* ------------------------------------------------------------ parsing */

typedef struct {
    json_t *calls;   /* array being built */
    json_t *tools;
    srv_buf content;
    bool bad;        /* something looked like a call and was not one */
} extract;

static bool known(extract *x, const char *name) { return !x->tools || has_tool(x->tools, name); }

/* Appends one call; args: an object (dumped) or a string (kept). */
static bool add_call(extract *x, const char *name, json_t *args)
{
    if (!name || !*name || !known(x, name)) return false;
    char *a = NULL;
    if (json_is_string(args)) a = strdup(json_string_value(args));
    else if (json_is_object(args)) a = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
    else if (!args || json_is_null(args)) a = strdup("{}");
    if (!a) return false;
    char id[40];
    srv_make_id(id, sizeof id, "call_");
    json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", name, "arguments", a);
    free(a);
    if (!c) return false;
    json_array_append_new(x->calls, c);
    return true;
}

/* {"name": f, "arguments"|"parameters": {...}} (also {"function": f}) */
static bool add_call_obj(extract *x, json_t *o)
{
    if (!json_is_object(o)) return false;
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name) name = json_string_value(json_object_get(o, "function"));
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    if (json_is_string(args)) { /* arguments as JSON text: it must parse to an object */
        json_t *p = json_loads(json_string_value(args), 0, NULL);
        bool ok = json_is_object(p) && add_call(x, name, p);
        json_decref(p);
        return ok;
    }
    return add_call(x, name, args);
}

/* Parses one JSON value at s[0..n) allowing trailing text; *used = bytes read. */
static json_t *json_prefix(const char *s, size_t n, size_t *used)
{
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (j) *used = (size_t)je.position;
    return j;
}

static const char *find(const char *s, size_t n, const char *m) { return memmem(s, n, m, strlen(m)); }

static void skip_ws(const char **p, const char *end)
{
    while (*p < end && isspace((unsigned char)**p)) (*p)++;
}

/* Hermes/Qwen: <tool_call>JSON</tool_call> blocks; text around them is content. */
static bool parse_hermes(extract *x, const char *s, size_t n)
{
    const char *end = s + n, *p = s;
    const char *first = find(s, n, "<tool_call>");
    if (!first) return false;
    srv_buf_add(&x->content, s, (size_t)(first - s));
    p = first;
    while (p < end) {
        const char *open = find(p, (size_t)(end - p), "<tool_call>");
        if (!open) { srv_buf_add(&x->content, p, (size_t)(end - p)); break; }
        srv_buf_add(&x->content, p, (size_t)(open - p));
        const char *body = open + strlen("<tool_call>");
        const char *close = find(body, (size_t)(end - body), "</tool_call>");
        const char *body_end = close ? close : end; /* an unclosed last call at the end of generation */
        json_t *j = json_loadb(body, (size_t)(body_end - body), 0, NULL);
        bool ok = add_call_obj(x, j);
        json_decref(j);
        if (!ok) return x->bad = true, false;
        p = close ? close + strlen("</tool_call>") : end;
    }
    return true;
}

/* Mistral: [TOOL_CALLS][{...}, ...]  or  [TOOL_CALLS]name[ARGS]{...} (repeated) */
static bool parse_mistral(extract *x, const char *s, size_t n)
{
    const char *m = find(s, n, "[TOOL_CALLS]");
    if (!m) return false;
    srv_buf_add(&x->content, s, (size_t)(m - s));
    const char *end = s + n, *p = m;
    while (p < end) {
        if (end - p >= 12 && memcmp(p, "[TOOL_CALLS]", 12) == 0) p += 12;
        skip_ws(&p, end);
        if (p >= end) break;
        if (*p == '[') {
            size_t used;
            json_t *a = json_prefix(p, (size_t)(end - p), &used);
            bool ok = json_is_array(a) && json_array_size(a) > 0;
            size_t i;
            json_t *c;
            if (ok) json_array_foreach(a, i, c) ok = ok && add_call_obj(x, c);
            json_decref(a);
            if (!ok) return x->bad = true, false;
            p += used;
        } else {
            const char *args = find(p, (size_t)(end - p), "[ARGS]");
            if (!args) return x->bad = true, false;
            char *name = strndup(p, (size_t)(args - p));
            const char *q = args + 6;
            size_t used = 0;
            json_t *a = name ? json_prefix(q, (size_t)(end - q), &used) : NULL;
            bool ok = json_is_object(a) && add_call(x, name, a);
            json_decref(a);
            free(name);
            if (!ok) return x->bad = true, false;
            p = q + used;
        }
        skip_ws(&p, end);
    }
    return true;
}

/* JSON objects separated by ';' (Llama 3.x), each a call. */
static bool parse_json_calls(extract *x, const char *p, const char *end)
{
    bool any = false;
    while (p < end) {
        skip_ws(&p, end);
        if (p >= end) break;
        size_t used;
        json_t *j = json_prefix(p, (size_t)(end - p), &used);
        bool ok = json_is_object(j) && add_call_obj(x, j);
        json_decref(j);
        if (!ok) return false;
        any = true;
        p += used;
        skip_ws(&p, end);
        if (p < end && *p == ';') p++;
    }
    return any;
}

static bool parse_llama3(extract *x, const char *s, size_t n)
{
    const char *tag = find(s, n, "<|python_tag|>");
    if (tag) {
        srv_buf_add(&x->content, s, (size_t)(tag - s));
        const char *p = tag + strlen("<|python_tag|>");
        if (!parse_json_calls(x, p, s + n)) return x->bad = true, false;
        return true;
    }
    const char *p = s, *end = s + n;
    skip_ws(&p, end);
    if (p >= end || *p != '{') return false;
    if (!parse_json_calls(x, p, end)) { /* plain JSON content, not a call */
        json_array_clear(x->calls);
        return false;
    }
    return true;
}

#define DS_CALLS_BEGIN "<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9c" "tool\xe2\x96\x81" "sep\xef\xbd\x9c>"

static bool parse_deepseek(extract *x, const char *s, size_t n)
{
    const char *end = s + n;
    const char *m = find(s, n, DS_CALLS_BEGIN);
    if (!m) m = find(s, n, DS_CALL_BEGIN);
    if (!m) return false;
    srv_buf_add(&x->content, s, (size_t)(m - s));
    const char *p = m;
    bool any = false;
    for (;;) {
        const char *b = find(p, (size_t)(end - p), DS_CALL_BEGIN);
        if (!b) break;
        const char *q = b + strlen(DS_CALL_BEGIN);
        const char *sep = find(q, (size_t)(end - q), DS_SEP);
        if (!sep) return x->bad = true, false;
        const char *ce = find(sep, (size_t)(end - sep), DS_CALL_END);
        const char *body_end = ce ? ce : end;
        const char *a = sep + strlen(DS_SEP);
        char *name;
        if ((size_t)(sep - q) == 8 && memcmp(q, "function", 8) == 0) { /* R1/V3: function<sep>name\n```json\n{...}\n``` */
            const char *nl = memchr(a, '\n', (size_t)(body_end - a));
            if (!nl) return x->bad = true, false;
            name = strndup(a, (size_t)(nl - a));
            a = nl + 1;
            const char *fence = find(a, (size_t)(body_end - a), "```json");
            if (fence) a = fence + 7;
        } else name = strndup(q, (size_t)(sep - q)); /* V3.1: name<sep>{...} */
        size_t used = 0;
        skip_ws(&a, body_end);
        json_t *j = name ? json_prefix(a, (size_t)(body_end - a), &used) : NULL;
        bool ok = json_is_object(j) && add_call(x, name, j);
        json_decref(j);
        free(name);
        if (!ok) return x->bad = true, false;
        any = true;
        p = ce ? ce + strlen(DS_CALL_END) : end;
    }
    if (!any) return x->bad = true, false;
    const char *tail = find(p, (size_t)(end - p), DS_CALLS_END);
    if (tail) p = tail + strlen(DS_CALLS_END);
    srv_buf_add(&x->content, p, (size_t)(end - p));
    return true;
}

/* Functionary v3.2: segments "recipient\nbody" separated by ">>>"; the
 * prompt already wrote the first ">>>". "all" is content. */
static bool parse_functionary(extract *x, const char *s, size_t n)
{
    const char *end = s + n, *p = s;
    bool any = false;
    while (p < end) {
        const char *next = find(p, (size_t)(end - p), ">>>");
        const char *seg_end = next ? next : end;
        const char *nl = memchr(p, '\n', (size_t)(seg_end - p));
        if (!nl) return x->bad = any, false;
        char *name = strndup(p, (size_t)(nl - p));
        if (!name) return false;
        if (strcmp(name, "all") == 0) srv_buf_add(&x->content, nl + 1, (size_t)(seg_end - nl - 1));
        else {
            json_t *j = json_loadb(nl + 1, (size_t)(seg_end - nl - 1), 0, NULL);
            bool ok = json_is_object(j) && add_call(x, name, j);
            json_decref(j);
            if (!ok) { free(name); return x->bad = true, false; }
            any = true;
        }
        free(name);
        p = next ? next + 3 : end;
    }
    return true;
}

int srv_tools_extract(const char *text, size_t len, json_t *tools, bool functionary, char **content, json_t **calls)
{
    extract x = {.calls = json_array(), .tools = tools};
    if (!x.calls) return PL_ERR_NOMEM;
    bool (*const parsers[])(extract *, const char *, size_t) = {parse_hermes, parse_mistral, parse_deepseek, parse_llama3};
    bool ok = false;
    if (functionary) ok = parse_functionary(&x, text, len);
    for (size_t i = 0; !ok && !x.bad && i < sizeof parsers / sizeof parsers[0]; i++) {
        x.content.len = 0;
        if (x.content.p) x.content.p[0] = 0;
        ok = parsers[i](&x, text, len);
    }
    /* not a call: all of it is content (functionary's "all\n" text is content without its recipient line) */
    if (!ok || (json_array_size(x.calls) == 0 && !functionary)) {
        json_array_clear(x.calls);
        x.content.len = 0;
        srv_buf_add(&x.content, text, len);
    }
    if (srv_buf_add(&x.content, "", 0)) { json_decref(x.calls); return PL_ERR_NOMEM; }
    /* content around calls: the whitespace between them is not content */
    char *c = x.content.p;
    size_t a = 0, b = x.content.len;
    if (json_array_size(x.calls)) {
        while (a < b && isspace((unsigned char)c[a])) a++;
        while (b > a && isspace((unsigned char)c[b - 1])) b--;
    }
    *content = strndup(c + a, b - a);
    srv_buf_free(&x.content);
    if (!*content) { json_decref(x.calls); return PL_ERR_NOMEM; }
    if (json_array_size(x.calls)) *calls = x.calls;
    else { json_decref(x.calls); *calls = NULL; }
    return 0;
}

/* ------------------------------------------------------------ streaming */

static const char *const MARKERS[] = {"<tool_call>", "[TOOL_CALLS]", "<|python_tag|>", DS_CALLS_BEGIN, DS_CALL_BEGIN, NULL};

/* Length of the longest suffix of s[0..n) that is a proper prefix of a marker. */
static size_t partial_marker(const char *s, size_t n)
{
    size_t best = 0;
    for (int m = 0; MARKERS[m]; m++) {
        size_t ml = strlen(MARKERS[m]);
        for (size_t k = ml - 1; k > best; k--)
            if (k <= n && memcmp(s + n - k, MARKERS[m], k) == 0) { best = k; break; }
    }
    return best;
}

int srv_tool_stream_feed(srv_tool_stream *s, const char *text, size_t len, srv_buf *out)
{
    if (s->functionary || s->holding) return srv_buf_add(&s->held, text, len);
    if (srv_buf_add(&s->pending, text, len)) return PL_ERR_NOMEM;
    const char *p = s->pending.p;
    size_t n = s->pending.len;
    /* a reply that opens with '{' may be a Llama 3 JSON call: hold it */
    if (!s->seen_text) {
        size_t i = 0;
        while (i < n && isspace((unsigned char)p[i])) i++;
        if (i < n && p[i] == '{') {
            s->holding = true;
            int rc = srv_buf_add(&s->held, p, n);
            s->pending.len = 0;
            return rc;
        }
        if (i == n) return 0; /* only whitespace so far: undecided */
    }
    size_t cut = n;
    for (int m = 0; MARKERS[m]; m++) {
        const char *hit = memmem(p, n, MARKERS[m], strlen(MARKERS[m]));
        if (hit && (size_t)(hit - p) < cut) cut = (size_t)(hit - p);
    }
    int rc = 0;
    if (cut < n) {
        s->holding = true;
        rc = srv_buf_add(&s->held, p + cut, n - cut);
    } else cut = n - partial_marker(p, n);
    if (!rc && cut) {
        rc = srv_buf_add(out, p, cut);
        s->seen_text = true;
    }
    if (!rc && !s->holding) {
        memmove(s->pending.p, p + cut, n - cut);
        s->pending.len = n - cut;
        s->pending.p[s->pending.len] = 0;
    } else s->pending.len = 0;
    return rc;
}

int srv_tool_stream_finish(srv_tool_stream *s, json_t *tools, srv_buf *out, json_t **calls)
{
    *calls = NULL;
    int rc = 0;
    if (s->pending.len) { /* undecided text at the end: a partial marker or whitespace is content */
        if (s->holding) rc = srv_buf_add(&s->held, s->pending.p, s->pending.len);
        else rc = srv_buf_add(out, s->pending.p, s->pending.len);
        s->pending.len = 0;
    }
    if (!rc && s->held.len) {
        char *content = NULL;
        rc = srv_tools_extract(s->held.p, s->held.len, tools, s->functionary, &content, calls);
        if (!rc && content) rc = srv_buf_add(out, content, strlen(content));
        free(content);
        s->held.len = 0;
    }
    return rc;
}

void srv_tool_stream_free(srv_tool_stream *s)
{
    srv_buf_free(&s->pending);
    srv_buf_free(&s->held);
}
