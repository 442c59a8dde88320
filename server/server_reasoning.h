/* server_reasoning.h - the thinking of reasoning models (DeepSeek-R1, Qwen3,
 * QwQ) apart from the answer: text between <think> and </think> goes to
 * message.reasoning_content (delta.reasoning_content when streaming), the
 * rest to content, as vLLM and llama-server do.
 *
 * A <think> counts only at the start of the reply (after whitespace); a
 * reply whose prompt already opened <think> (the templates of Qwen3 and
 * DeepSeek-R1 end the generation prompt with it) starts inside. A tag cut
 * across tokens is held back until it is whole. `serve --reasoning-format
 * none` turns the split off (the text stays as generated).
 */
#ifndef PL_SERVER_REASONING_H
#define PL_SERVER_REASONING_H

#include <stdbool.h>

#include "server_openai.h"

typedef struct {
    int state;        /* 0 before any text, 1 thinking, 3 just after </think>, 2 answering */
    srv_buf pending;  /* text that may be the start of a tag */
} srv_think;

/* think_open: the prompt ends inside <think>. */
void srv_think_init(srv_think *t, bool think_open);
/* Feeds text; appends the decided parts to reasoning and content. */
int srv_think_feed(srv_think *t, const char *text, size_t len, srv_buf *reasoning, srv_buf *content);
/* End of the reply: what is held goes where its state says. */
int srv_think_finish(srv_think *t, srv_buf *reasoning, srv_buf *content);
void srv_think_free(srv_think *t);

/* True when a rendered chat prompt ends inside <think> (after whitespace). */
bool srv_think_prompt_open(const char *prompt);

#endif
