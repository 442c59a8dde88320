/* server_chat.h - a chat request's way into the model's chat template, and
 * the reply's way back out: reasoning, content and tool calls.
 *
 * In: the messages as OpenAI sends them (system/developer, user, assistant
 * with tool_calls, tool results; text content parts joined), the tools and
 * chat_template_kwargs, rendered by pl_chat_apply with the model's Jinja
 * template (or serve --chat-template-file). Tool-call arguments that arrive
 * as JSON text are handed to the template as objects, as transformers'
 * templates expect. A template that raises is a 400 quoting its message.
 *
 * Out: generated text is split into reasoning_content (server_reasoning.h)
 * and content, and tool calls are parsed out of the content
 * (server_tools.h) - whole for a response, piece by piece for a stream.
 */
#ifndef PL_SERVER_CHAT_H
#define PL_SERVER_CHAT_H

#include <jansson.h>

#include "server_openai.h"
#include "server_reasoning.h"
#include "server_tools.h"

/* Renders the chat request body o into prompt text (*text malloc'd) and
 * sets q's chat-output fields (tools, reasoning). 0, or -1 with *e (400). */
int srv_chat_render(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, char **text, srv_error *e);

/* POST /apply-template (llama-server's): {"messages", "tools"?,
 * "add_generation_prompt"? (default true), "chat_template_kwargs"?} ->
 * {"prompt"}, rendered as a chat request would be. The answer is malloc'd
 * JSON, or NULL with *e (400). */
char *srv_apply_template(const srv_model_ctx *mc, const char *body, size_t len, srv_error *e);

/* The reply of one choice, decoded as it comes. */
typedef struct {
    bool active;          /* reasoning or tools apply: else text is content as is */
    bool tools;           /* tool calls are parsed out of the content */
    srv_think think;
    srv_tool_stream ts;
} srv_chat_out;

void srv_chat_out_init(srv_chat_out *o, const srv_gen_req *q);
/* Feeds generated text; appends what is decided to reasoning and content. */
int srv_chat_out_feed(srv_chat_out *o, const char *text, size_t len, srv_buf *reasoning, srv_buf *content);
/* End of the reply: the rest, and the tool calls (NULL if none). */
int srv_chat_out_finish(srv_chat_out *o, const srv_gen_req *q, srv_buf *reasoning, srv_buf *content, json_t **calls);
void srv_chat_out_free(srv_chat_out *o);

#endif
