/* json_schema.h - the JSON-schema compiler's inside, shared by
 * json_schema.c, schema_regex.c (pattern and format) and tool_call.c
 * (internal to src/grammar). One sc_ctx writes one GBNF text; several
 * schemas may be compiled into it, sharing the primitive rules (space,
 * string, value...), which sc_end appends once.
 */
#ifndef PL_GRAMMAR_JSON_SCHEMA_H
#define PL_GRAMMAR_JSON_SCHEMA_H

#include <jansson.h>

#include "grammar/gbnf_write.h"

#define SC_NAME 64 /* rule names written by the compiler */

typedef struct sc_ctx sc_ctx;

int sc_begin(sc_ctx **out, json_t *root);
/* Compiles schema (whose $refs resolve against root) into a fresh rule;
 * its name goes to name (SC_NAME bytes). Errors name path. */
int sc_compile(sc_ctx *c, json_t *schema, json_t *root, const char *path, char *name);
/* Asks for primitive rules used by text the caller writes ("space",
 * "object"). */
void sc_need(sc_ctx *c, const char *prims);
/* The text so far, for the caller's own rules. */
gw_buf *sc_out(sc_ctx *c);
/* Appends the primitives, hands the text over (if gbnf) and frees c. */
int sc_end(sc_ctx *c, char **gbnf);

/* A GBNF expression for the JSON-encoded content of a string matching
 * the regular expression pattern (a subset: see schema_regex.c). */
int sc_regex(sc_ctx *c, const char *pattern, const char *path, gw_buf *body);
/* The same for a "format" (date, time, date-time, uuid). */
int sc_format(sc_ctx *c, const char *format, const char *path, gw_buf *body);

#endif
