/* server_format.h - structured output fields of a generation request:
 * response_format ({"type": "text" | "json_object" | "json_schema"}),
 * llama-server's "grammar" (GBNF) and "json_schema" extensions. Each ends
 * as one GBNF text for pl_request_params.grammar, or a 400 naming the
 * field (with the grammar's line:column or the schema's path).
 */
#ifndef PL_SERVER_FORMAT_H
#define PL_SERVER_FORMAT_H

#include <jansson.h>

#include "server_openai.h"

/* *grammar gets a malloc'd GBNF text, or NULL when the output is free.
 * 0, or -1 with *e set (400). */
int srv_format_parse(json_t *o, char **grammar, srv_error *e);

#endif
