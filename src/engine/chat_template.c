/* chat_template.c - messages -> prompt text with a model's chat template.
 *
 * GGUF files carry a Jinja template (tokenizer.chat_template). We do not run
 * Jinja: like llama.cpp's built-in templates, we recognise the common
 * families by their marker strings and render them in C. A model with no
 * template, or one we do not recognise, gets the plain fallback:
 *   "System: ...\n\nUser: ...\n\nAssistant: ..."  (role-labelled turns)
 * BOS is not written here: the tokenizer adds it (add_bos), so rendered text
 * must be tokenized with parse_special on and add_bos per the vocabulary.
 */
#include "pagellm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/chat_template.h"

typedef enum { TPL_PLAIN, TPL_LLAMA2, TPL_LLAMA3, TPL_CHATML, TPL_MISTRAL, TPL_ZEPHYR, TPL_PHI3, TPL_GEMMA } tpl_kind;

static const char *const tpl_names[] = {"plain", "llama2", "llama3", "chatml", "mistral", "zephyr", "phi3", "gemma"};

static tpl_kind tpl_detect(const char *t)
{
    if (!t) return TPL_PLAIN;
    if (strstr(t, "<|im_start|>")) return TPL_CHATML;
    if (strstr(t, "<|start_header_id|>")) return TPL_LLAMA3;
    if (strstr(t, "<start_of_turn>")) return TPL_GEMMA;
    if (strstr(t, "<|assistant|>") && strstr(t, "<|end|>")) return TPL_PHI3;
    if (strstr(t, "<|assistant|>")) return TPL_ZEPHYR;
    if (strstr(t, "<<SYS>>")) return TPL_LLAMA2;
    if (strstr(t, "[INST]")) return TPL_MISTRAL;
    return TPL_PLAIN;
}

typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->failed) { b->failed = 1; return; }
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) { b->failed = 1; return; }
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static bool is_role(const pl_chat_msg *m, const char *r) { return strcmp(m->role, r) == 0; }

static void render_turns(sbuf *b, tpl_kind k, const pl_chat_msg *msgs, size_t n)
{
    const char *pending_sys = NULL; /* llama2/mistral/gemma fold the system text into the next user turn */
    for (size_t i = 0; i < n; i++) {
        const pl_chat_msg *m = &msgs[i];
        const char *r = m->role, *c = m->content;
        switch (k) {
        case TPL_CHATML: sb_add(b, "<|im_start|>%s\n%s<|im_end|>\n", r, c); break;
        case TPL_LLAMA3: sb_add(b, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", r, c); break;
        case TPL_ZEPHYR: sb_add(b, "<|%s|>\n%s</s>\n", r, c); break;
        case TPL_PHI3: sb_add(b, "<|%s|>\n%s<|end|>\n", r, c); break;
        case TPL_GEMMA:
            if (is_role(m, "system")) { pending_sys = c; break; }
            sb_add(b, "<start_of_turn>%s\n%s%s%s<end_of_turn>\n", is_role(m, "assistant") ? "model" : "user",
                   pending_sys ? pending_sys : "", pending_sys ? "\n\n" : "", c);
            pending_sys = NULL;
            break;
        case TPL_LLAMA2:
        case TPL_MISTRAL:
            if (is_role(m, "system")) { pending_sys = c; break; }
            if (is_role(m, "assistant")) { sb_add(b, " %s</s>", c); break; }
            if (k == TPL_LLAMA2 && pending_sys) sb_add(b, "[INST] <<SYS>>\n%s\n<</SYS>>\n\n%s [/INST]", pending_sys, c);
            else if (pending_sys) sb_add(b, "[INST] %s\n\n%s [/INST]", pending_sys, c);
            else sb_add(b, "[INST] %s [/INST]", c);
            pending_sys = NULL;
            break;
        case TPL_PLAIN:
            sb_add(b, "%s%s: %s", i ? "\n\n" : "", is_role(m, "system") ? "System" : is_role(m, "user") ? "User" : "Assistant", c);
            break;
        }
    }
}

static void render_opener(sbuf *b, tpl_kind k, size_t n)
{
    switch (k) {
    case TPL_CHATML: sb_add(b, "<|im_start|>assistant\n"); break;
    case TPL_LLAMA3: sb_add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n"); break;
    case TPL_ZEPHYR:
    case TPL_PHI3: sb_add(b, "<|assistant|>\n"); break;
    case TPL_GEMMA: sb_add(b, "<start_of_turn>model\n"); break;
    case TPL_LLAMA2:
    case TPL_MISTRAL: break; /* the answer follows [/INST] */
    case TPL_PLAIN: sb_add(b, "%sAssistant:", n ? "\n\n" : ""); break;
    }
}

int chat_render(const char *tpl, const pl_chat_msg *msgs, size_t n, bool add_assistant, char **out,
                const char **name)
{
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return err_set(PL_EINVAL, "messages[%zu]: role and content are required", i);
        if (!is_role(&msgs[i], "system") && !is_role(&msgs[i], "user") && !is_role(&msgs[i], "assistant"))
            return err_set(PL_EINVAL, "messages[%zu].role: '%.32s' is not system, user or assistant", i, msgs[i].role);
    }
    tpl_kind k = tpl_detect(tpl);
    sbuf b = {0};
    sb_add(&b, "%s", "");
    render_turns(&b, k, msgs, n);
    if (add_assistant) render_opener(&b, k, n);
    if (b.failed) { free(b.s); return err_set(PL_ENOMEM, "out of memory rendering a chat"); }
    *out = b.s;
    if (name) *name = tpl_names[k];
    return 0;
}

int pl_chat_render(const pl_model *m, const pl_chat_msg *msgs, size_t n, bool add_assistant, char **out,
                   const char **name)
{
    return chat_render(pl_model_chat_template(m), msgs, n, add_assistant, out, name);
}
