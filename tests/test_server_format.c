/* test_server_format.c - response_format / json_schema / grammar fields
 * (server/server_format.c): what each yields, and the 400s naming the
 * field with the schema path or the grammar position. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server_format.h"
#include "test.h"

/* 200: *grammar set (maybe NULL); else the error in e. */
static int parse(const char *body, char **grammar, srv_error *e)
{
    json_t *o = json_loads(body, 0, NULL);
    if (!o) return -2;
    memset(e, 0, sizeof *e);
    int rc = srv_format_parse(o, grammar, e);
    json_decref(o);
    return rc ? e->status : 200;
}

static int rejects(const char *body, const char *param, const char *text)
{
    char *g = NULL;
    srv_error e;
    int st = parse(body, &g, &e);
    free(g);
    int ok = st == 400 && e.param && !strcmp(e.param, param) && strstr(e.message, text);
    if (!ok) printf("  %s -> %d param=%s msg=%s\n", body, st, e.param ? e.param : "null", e.message);
    return ok;
}

static int grammar_of(const char *body, const char *want_in)
{
    char *g = NULL;
    srv_error e;
    int st = parse(body, &g, &e);
    int ok = st == 200 && (want_in ? g && strstr(g, want_in) : !g);
    if (!ok) printf("  %s -> %d %s\n", body, st, st == 200 ? (g ? g : "(none)") : e.message);
    free(g);
    return ok;
}

TEST(fields_yield_a_grammar)
{
    CHECK(grammar_of("{}", NULL));
    CHECK(grammar_of("{\"response_format\":{\"type\":\"text\"}}", NULL));
    CHECK(grammar_of("{\"response_format\":null,\"grammar\":null}", NULL));
    CHECK(grammar_of("{\"response_format\":{\"type\":\"json_object\"}}", "object ::="));
    CHECK(grammar_of("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,"
                     "\"schema\":{\"type\":\"object\",\"properties\":{\"zq\":{\"type\":\"integer\"}}}}}}", "\\\"zq\\\""));
    CHECK(grammar_of("{\"response_format\":{\"type\":\"json_object\",\"schema\":{\"enum\":[\"yes\",\"no\"]}}}", "yes"));
    CHECK(grammar_of("{\"json_schema\":{\"type\":\"boolean\"}}", "boolean"));
    CHECK(grammar_of("{\"grammar\":\"root ::= \\\"ok\\\"\\n\"}", "root ::= \"ok\""));
}

TEST(bad_fields_are_400s_naming_them)
{
    CHECK(rejects("{\"response_format\":\"json\"}", "response_format", "must be an object"));
    CHECK(rejects("{\"response_format\":{\"type\":\"yaml\"}}", "response_format", "must be text, json_object or json_schema"));
    CHECK(rejects("{\"response_format\":{\"type\":\"json_schema\"}}", "response_format", "must be an object with a 'schema'"));
    CHECK(rejects("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}}", "response_format",
                  "schema' is missing"));
    CHECK(rejects("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\","
                  "\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"email\"}}}}}}",
                  "response_format", "$.properties.a.format: format 'email' is not supported"));
    CHECK(rejects("{\"json_schema\":{\"type\":\"integer\",\"multipleOf\":3}}", "json_schema", "$: 'multipleOf' is not supported"));
    CHECK(rejects("{\"grammar\":\"root ::= [a-\"}", "grammar", "line 1, column 10: unterminated character class"));
    CHECK(rejects("{\"grammar\":\"root ::= root \\\"a\\\"\"}", "grammar", "left-recursive"));
    CHECK(rejects("{\"grammar\":42}", "grammar", "must be a GBNF string"));
    CHECK(rejects("{\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}}", "grammar", "not several"));
    CHECK(rejects("{\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}}", "grammar", "not both"));
}

int main(void)
{
    RUN(fields_yield_a_grammar);
    RUN(bad_fields_are_400s_naming_them);
    return test_summary();
}
