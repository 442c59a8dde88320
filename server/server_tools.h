/* server_tools.h - function calling for /v1/chat/completions: the request's
 * tools and tool_choice, tool calls parsed out of the model's text, and the
 * grammar that forces a call when tool_choice asks for one.
 *
 * Formats recognised in generated text (all are tried; their markers do not
 * overlap):
 *   Hermes / Qwen   <tool_call>{"name": f, "arguments": {...}}</tool_call> (repeated)
 *   Mistral         [TOOL_CALLS][{"name": f, "arguments": {...}}, ...]  or  [TOOL_CALLS]f[ARGS]{...}
 *   Llama 3.x       <|python_tag|>{"name": f, "parameters": {...}}, or the whole text one such
 *                   JSON object (several joined by ';')
 *   DeepSeek        <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```
 *                   <｜tool▁call▁end｜>...  (and V3.1's  ...begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>)
 *   Functionary     (v3.2, after the prompt's ">>>")  f\n{...}>>>g\n{...}, "all\n" + text for content
 * Text that looks like a call but does not parse (bad JSON, no name, an
 * unknown function) stays content: a malformed call is never invented into
 * one, and never lost.
 *
 * Streaming (srv_tool_stream): content is passed through until a call
 * marker may be starting; from there the text is held and parsed at the
 * end, when the calls go out as delta.tool_calls.
 */
#ifndef PL_SERVER_TOOLS_H
#define PL_SERVER_TOOLS_H

#include <jansson.h>
#include <stdbool.h>

#include "server_openai.h"

typedef enum { SRV_TOOL_AUTO = 0, SRV_TOOL_NONE, SRV_TOOL_REQUIRED, SRV_TOOL_NAMED } srv_tool_choice;

/* Validates "tools", "tool_choice" and "parallel_tool_calls" of a chat
 * request body o (400 naming the field on error). *tools gets a new
 * reference to the tools array, or NULL when there are none. */
int srv_tools_parse_request(json_t *o, json_t **tools, srv_tool_choice *choice, const char **named,
                            bool *parallel, srv_error *e);

/* tool_choice "required" (any of the tools) or named (that one): *gbnf
 * gets a grammar (malloc'd) that makes the reply exactly one call, written
 * in the template tpl's format (<tool_call> for Hermes/Qwen, [TOOL_CALLS]
 * for Mistral, else the bare {"name", "arguments"} object), after
 * "</think>" when the prompt opened a think block. NULL for auto/none.
 * 0, or PL_ERR_INVAL (a parameters schema the grammar cannot compile:
 * pl_last_error() names it) / PL_ERR_NOMEM. */
int srv_tools_forced_gbnf(json_t *tools, srv_tool_choice choice, const char *named, const char *tpl, bool think_open,
                          char **gbnf);

/* Parses generated text: *content gets the text that is not a call
 * (malloc'd), *calls an array of OpenAI tool calls
 * [{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}]
 * or NULL when there are none. tools (may be NULL) names the known
 * functions: calls to others stay content. 0 or PL_ERR_NOMEM. */
int srv_tools_extract(const char *text, size_t len, json_t *tools, bool functionary, char **content, json_t **calls);

/* Streaming: which part of the text may be passed on now. */
typedef struct {
    bool functionary;   /* the template's ">>>" format: the whole text is held */
    bool holding;       /* a marker began: everything from here is held */
    bool seen_text;     /* non-space content has been passed on */
    srv_buf pending;    /* text not yet decided */
    srv_buf held;       /* text held for the parser */
} srv_tool_stream;

/* Feeds text; appends what can be shown now to out. */
int srv_tool_stream_feed(srv_tool_stream *s, const char *text, size_t len, srv_buf *out);
/* End: parses what was held; appends leftover content to out; *calls as srv_tools_extract. */
int srv_tool_stream_finish(srv_tool_stream *s, json_t *tools, srv_buf *out, json_t **calls);
void srv_tool_stream_free(srv_tool_stream *s);

#endif
