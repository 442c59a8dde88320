/* fuzz_schema.c - libFuzzer target for the JSON-schema compiler.
 *
 * Input: a JSON schema (any bytes). It is compiled to GBNF; the GBNF is
 * parsed; a JSON document drawn from the schema's own "examples"... is
 * not needed: the input text itself is matched against the grammar.
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - compiling never crashes, hangs or leaks; a refusal leaves an error
 *     text starting with "json_schema:";
 *   - whatever compiles is GBNF our parser accepts, unless the schema
 *     itself is left-recursive ({"$ref": "#"}-like loops) or too large;
 *   - the forced tool-call grammar built over the same schema parses too.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/grammar.h"

static void require(bool ok, const char *what, const char *gbnf)
{
    if (!ok) {
        fprintf(stderr, "broken property: %s (%s)\n%s\n", what, err_msg(), gbnf ? gbnf : "");
        abort();
    }
}

static bool acceptable_refusal(void)
{
    const char *m = err_msg();
    return strstr(m, "left-recursive") || strstr(m, "too large") || strstr(m, "bytes, more than");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *gbnf = NULL;
    int rc = gm_schema_to_gbnf(text, size, "root", &gbnf);
    if (rc) {
        require(strncmp(err_msg(), "json_schema:", 12) == 0, "a refusal says json_schema:", NULL);
        free(text);
        return 0;
    }
    gm_grammar *g = NULL;
    rc = gm_parse(&g, gbnf, strlen(gbnf), "root");
    require(rc == 0 || acceptable_refusal(), "compiled GBNF parses", gbnf);
    if (g) (void)gm_match_string(g, text, size);
    gm_grammar_free(g);
    free(gbnf);
    if (!memchr(text, 0, size)) {
        gm_tool_fn fn = {"f", text};
        gbnf = NULL;
        if (gm_tool_call_gbnf(&fn, 1, "<a>", "</a>", &gbnf) == 0) {
            g = NULL;
            rc = gm_parse(&g, gbnf, strlen(gbnf), "root");
            require(rc == 0 || acceptable_refusal(), "tool-call GBNF parses", gbnf);
            gm_grammar_free(g);
            free(gbnf);
        }
    }
    free(text);
    return 0;
}
