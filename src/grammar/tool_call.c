/* tool_call.c - a grammar that forces one tool call: the wire format's
 * opening marker, {"name": "<fn>", "arguments": <fn's schema>}, then its
 * closing marker; with several functions, any one of them. This is what
 * tool_choice "required" or a named function constrains sampling with.
 *
 *   root ::= "<tool_call>\n" "{" space "\"name\"" space ":" space
 *            ( "\"get_weather\"" space "," space "\"arguments\"" space ":" space schema-0
 *            | ... ) "}" space "</tool_call>"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

static bool name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

int gm_tool_call_gbnf(const gm_tool_fn *fns, size_t n, const char *prefix, const char *suffix, char **gbnf)
{
    if (!fns || n == 0) return err_set(PL_EINVAL, "tool call grammar: no functions");
    if (n > 128) return err_set(PL_EINVAL, "tool call grammar: %zu functions, at most 128", n);
    for (size_t i = 0; i < n; i++)
        if (!name_ok(fns[i].name))
            return err_set(PL_EINVAL, "tool call grammar: function %zu: name must be 1-64 of [A-Za-z0-9_.-]", i);
    sc_ctx *c = NULL;
    int rc = sc_begin(&c, NULL);
    if (rc) return rc;
    char (*names)[SC_NAME] = calloc(n, sizeof *names);
    if (!names) rc = err_set(PL_ENOMEM, "tool call grammar: out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        const char *p = fns[i].parameters ? fns[i].parameters : "{\"type\": \"object\"}";
        json_error_t je;
        json_t *s = json_loads(p, JSON_DECODE_ANY, &je);
        if (!s) { rc = err_set(PL_EINVAL, "tool call grammar: function '%s': parameters are not JSON: %s", fns[i].name, je.text); break; }
        char path[96];
        snprintf(path, sizeof path, "%s.parameters", fns[i].name);
        rc = sc_compile(c, s, s, path, names[i]);
        json_decref(s);
        if (rc) rc = err_prefix(rc, "tool call grammar: function '%s'", fns[i].name);
    }
    if (!rc) {
        gw_buf *o = sc_out(c);
        sc_need(c, "space");
        gb_str(o, "root ::= ");
        if (prefix && *prefix) { gb_literal(o, prefix, strlen(prefix)); gb_str(o, " "); }
        gb_str(o, "\"{\" space \"\\\"name\\\"\" space \":\" space (");
        for (size_t i = 0; i < n; i++) {
            gb_str(o, i ? " | " : " ");
            gb_fmt(o, "\"\\\"%s\\\"\" space \",\" space \"\\\"arguments\\\"\" space \":\" space %s", fns[i].name, names[i]);
        }
        gb_str(o, " ) \"}\" space");
        if (suffix && *suffix) { gb_str(o, " "); gb_literal(o, suffix, strlen(suffix)); }
        gb_str(o, "\n");
    }
    free(names);
    int rc2 = sc_end(c, rc ? NULL : gbnf);
    return rc ? rc : rc2;
}
