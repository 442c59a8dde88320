/* server_format.c - see server_format.h.
 *
 *   response_format {"type": "text"}                      free output
 *   response_format {"type": "json_object"}               any JSON object
 *   response_format {"type": "json_object", "schema": S}  S (llama-server)
 *   response_format {"type": "json_schema",
 *                    "json_schema": {"name", "schema": S, "strict"}}  S
 *   "json_schema": S                                      S (llama-server)
 *   "grammar": "root ::= ..."                             that GBNF
 * At most one of them may constrain a request. "strict": false is
 * honoured as true: the output always matches the schema.
 */
#include "server_format.h"

#include <stdlib.h>
#include <string.h>

#include "pagellm.h"

/* GBNF of schema s (an object or a boolean); 400 naming param. */
static int schema_grammar(json_t *s, const char *param, char **grammar, srv_error *e)
{
    if (!json_is_object(s) && !json_is_boolean(s))
        return srv_bad_request(e, param, NULL, "'%s' must be a JSON schema (an object), got %s", param, srv_json_kind(s));
    char *text = json_dumps(s, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return srv_bad_request(e, param, NULL, "out of memory");
    char *g = NULL;
    int rc = pl_json_schema_to_gbnf(text, strlen(text), &g);
    free(text);
    if (rc) return srv_bad_request(e, param, "invalid_schema", "%s", pl_last_error());
    *grammar = strdup(g);
    pl_free(g);
    return *grammar ? 0 : srv_bad_request(e, param, NULL, "out of memory");
}

static int response_format(json_t *rf, char **grammar, srv_error *e)
{
    const char *P = "response_format";
    if (!json_is_object(rf)) return srv_bad_request(e, P, NULL, "'response_format' must be an object, got %s", srv_json_kind(rf));
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type) return srv_bad_request(e, P, NULL, "'response_format.type' must be a string");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        json_t *s = json_object_get(rf, "schema");
        if (s && !json_is_null(s)) return schema_grammar(s, P, grammar, e);
        json_t *any = json_pack("{s:s}", "type", "object");
        int rc = any ? schema_grammar(any, P, grammar, e) : srv_bad_request(e, P, NULL, "out of memory");
        json_decref(any);
        return rc;
    }
    if (!strcmp(type, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js))
            return srv_bad_request(e, P, NULL, "'response_format.json_schema' must be an object with a 'schema'");
        json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
        if (name && !json_is_string(name)) return srv_bad_request(e, P, NULL, "'response_format.json_schema.name' must be a string");
        if (strict && !json_is_boolean(strict) && !json_is_null(strict))
            return srv_bad_request(e, P, NULL, "'response_format.json_schema.strict' must be a boolean");
        json_t *s = json_object_get(js, "schema");
        if (!s || json_is_null(s)) return srv_bad_request(e, P, NULL, "'response_format.json_schema.schema' is missing");
        return schema_grammar(s, P, grammar, e);
    }
    return srv_bad_request(e, P, NULL, "'response_format.type' must be text, json_object or json_schema, got '%.40s'", type);
}

int srv_format_parse(json_t *o, char **grammar, srv_error *e)
{
    *grammar = NULL;
    json_t *rf = json_object_get(o, "response_format"), *gb = json_object_get(o, "grammar");
    json_t *js = json_object_get(o, "json_schema");
    if (json_is_null(rf)) rf = NULL;
    if (json_is_null(gb)) gb = NULL;
    if (json_is_null(js)) js = NULL;
    int rc = 0;
    if (rf) rc = response_format(rf, grammar, e);
    if (!rc && (gb || js) && *grammar) {
        free(*grammar);
        *grammar = NULL;
        return srv_bad_request(e, gb ? "grammar" : "json_schema", NULL,
                               "give one of 'response_format' (json), 'json_schema' and 'grammar', not several");
    }
    if (!rc && gb && js) return srv_bad_request(e, "grammar", NULL, "give one of 'json_schema' and 'grammar', not both");
    if (!rc && js) rc = schema_grammar(js, "json_schema", grammar, e);
    if (!rc && gb) {
        if (!json_is_string(gb)) return srv_bad_request(e, "grammar", NULL, "'grammar' must be a GBNF string, got %s", srv_json_kind(gb));
        const char *t = json_string_value(gb);
        size_t n = json_string_length(gb);
        if (pl_grammar_check(t, n, NULL)) return srv_bad_request(e, "grammar", "invalid_grammar", "%s", pl_last_error());
        if (memchr(t, 0, n)) return srv_bad_request(e, "grammar", NULL, "'grammar' holds a NUL character");
        *grammar = strdup(t);
        if (!*grammar) return srv_bad_request(e, "grammar", NULL, "out of memory");
    }
    if (rc) { free(*grammar); *grammar = NULL; }
    return rc;
}
