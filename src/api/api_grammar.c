/* api_grammar.c - pl_* wrappers of the grammar module (src/grammar). */
#include "pagellm.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/grammar.h"

int pl_grammar_check(const char *gbnf, size_t len, const char *root)
{
    gm_grammar *g = NULL;
    int rc = gm_parse(&g, gbnf, len, root);
    gm_grammar_free(g);
    return rc;
}

int pl_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf)
{
    if (!schema || !gbnf) return err_set(PL_EINVAL, "json_schema: no schema");
    return gm_schema_to_gbnf(schema, len, "root", gbnf);
}

int pl_tool_call_gbnf(const pl_tool_fn *fns, size_t n, const char *prefix, const char *suffix, char **gbnf)
{
    if (!gbnf) return err_set(PL_EINVAL, "tool call grammar: no output");
    gm_tool_fn *f = calloc(n ? n : 1, sizeof *f);
    if (!f) return err_set(PL_ENOMEM, "tool call grammar: out of memory");
    for (size_t i = 0; fns && i < n; i++) f[i] = (gm_tool_fn){fns[i].name, fns[i].parameters};
    int rc = gm_tool_call_gbnf(fns ? f : NULL, n, prefix, suffix, gbnf);
    free(f);
    return rc;
}
