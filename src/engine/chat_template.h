/* chat_template.h - rendering chat messages with a template text (the
 * model-free core of pl_chat_render, so that tests can give any template). */
#ifndef PL_ENGINE_CHAT_TEMPLATE_H
#define PL_ENGINE_CHAT_TEMPLATE_H

#include "pagellm.h"

/* tpl: a tokenizer.chat_template text, or NULL for the plain fallback. */
int chat_render(const char *tpl, const pl_chat_msg *msgs, size_t n, bool add_assistant, char **out,
                const char **name);

#endif
