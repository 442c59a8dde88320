/* server_sse.h - the streaming answer of /v1/completions and
 * /v1/chat/completions as server-sent events: engine events in, the bytes
 * of "data: {chunk}\n\n" frames out, ending with "data: [DONE]\n\n".
 *
 *   completions  {"object": "text_completion", "choices": [{index, text, logprobs, finish_reason}]}
 *   chat         {"object": "chat.completion.chunk", "choices": [{index, delta, logprobs, finish_reason}]}
 *
 * A chat completion's first chunk carries delta.role = "assistant"; its
 * last one an empty delta and the finish_reason. Thinking goes out as
 * delta.reasoning_content; tool calls, parsed when the reply ends, as one
 * chunk of delta.tool_calls [{index, id, type, function: {name,
 * arguments}}] before the finish_reason "tool_calls" (server_chat.h). A token whose text is
 * still held back (incomplete UTF-8, a possible stop string) makes no chunk
 * unless logprobs were asked for. With stream_options.include_usage every
 * chunk has "usage": null and one more chunk before [DONE] has empty
 * choices and the usage.
 *
 * Pure formatting (no I/O, no locks): one srv_sse per streaming request,
 * used by one thread.
 */
#ifndef PL_SERVER_SSE_H
#define PL_SERVER_SSE_H

#include "server_chat.h"
#include "server_openai.h"

typedef struct {
    const srv_gen_req *q;
    const srv_tokens *tok;
    char id[64];
    long created;
    const char *model;
    bool role_sent[SRV_MAX_N];
    bool echo_sent[SRV_MAX_N]; /* completions' echo: the prompt's text went first */
    json_t *plp[SRV_MAX_N];    /* echo + logprobs: the prompt tokens' logprobs, sent with the echo */
    size_t plp_off[SRV_MAX_N]; /* ... and their text_offset so far */
    size_t offset[SRV_MAX_N];  /* completions logprobs text_offset, per choice */
    uint32_t prompt_tokens, cached_tokens, completion_tokens;
    bool failed;               /* an ERROR event was sent: no usage chunk */
    srv_chat_out out[SRV_MAX_N]; /* chat: reasoning and tool calls apart from content */
} srv_sse;

void srv_sse_init(srv_sse *s, const srv_gen_req *q, const srv_tokens *tok, const char *id, long created,
                  const char *model);
/* Releases what the stream still holds: the chat decoding, a stream cut
 * short's prompt logprobs (safe on a zeroed srv_sse). */
void srv_sse_free(srv_sse *s);
/* Appends the frames for one engine event to out. 0 or PL_ERR_NOMEM. */
int srv_sse_event(srv_sse *s, const pl_event *ev, srv_buf *out);
/* Appends the usage chunk (if asked for) and "data: [DONE]". */
int srv_sse_finish(srv_sse *s, srv_buf *out);
/* Appends an error frame: data: {"error": {...}}. */
int srv_sse_error(srv_buf *out, const srv_error *e);
/* Appends an SSE comment line (ignored by clients; keeps idle streams
 * alive and lets a write discover a client that went away). */
int srv_sse_comment(srv_buf *out, const char *text);

#endif
