/* api_template.c - the template part of include/pagellm.h: JSON text in,
 * rendered text out, over src/template (jinja.h). Builds the context a chat
 * template expects (messages, tools, add_generation_prompt, bos_token,
 * eos_token) the way transformers' apply_chat_template does. */
#include "pagellm.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "template/jinja.h"

static int parse_json(const char *text, const char *what, json_t **out)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    if (!j) return err_set(PL_EINVAL, "%s: invalid JSON at line %d column %d: %s", what, je.line, je.column, je.text);
    *out = j;
    return 0;
}

int pl_template_render(const char *tpl, size_t tpl_len, const char *context_json, char **out)
{
    if (!tpl || !out) return err_set(PL_EINVAL, "pl_template_render: NULL argument");
    json_t *ctx = NULL;
    if (context_json) {
        int rc = parse_json(context_json, "template context", &ctx);
        if (rc) return rc;
        if (!json_is_object(ctx)) {
            json_decref(ctx);
            return err_set(PL_EINVAL, "template context: must be a JSON object");
        }
    }
    jinja_limits lim = jinja_limits_default();
    int rc = jinja_render(tpl, tpl_len, ctx, &lim, out);
    json_decref(ctx);
    return rc;
}

static json_t *token_text(const pl_model *m, int32_t id)
{
    if (id < 0) return json_string("");
    const char *p = pl_token_piece(pl_model_vocab(m), id);
    json_t *s = p ? json_string(p) : NULL;
    return s ? s : json_string("");
}

/* The built-in families for a file without a Jinja template: text
 * contents only, as pl_chat_render takes them. */
static int fallback(const pl_model *m, const json_t *msgs, bool add_gen, char **out)
{
    size_t n = json_array_size(msgs);
    pl_chat_msg *cm = calloc(n ? n : 1, sizeof *cm);
    if (!cm) return err_set(PL_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(e, "role"));
        const char *content = json_string_value(json_object_get(e, "content"));
        cm[i].role = role ? role : "user";
        cm[i].content = content ? content : "";
    }
    int rc = pl_chat_render(m, cm, n, add_gen, out, NULL);
    free(cm);
    return rc;
}

int pl_chat_apply(const pl_model *m, const char *tpl, const char *messages_json, const char *tools_json,
                  bool add_generation_prompt, const char *extra_json, char **out)
{
    if (!m || !messages_json || !out) return err_set(PL_EINVAL, "pl_chat_apply: NULL argument");
    json_t *msgs = NULL, *tools = NULL, *extra = NULL, *ctx = NULL;
    int rc = parse_json(messages_json, "messages", &msgs);
    if (!rc && !json_is_array(msgs)) rc = err_set(PL_EINVAL, "messages: must be a JSON array");
    if (!rc && tools_json) rc = parse_json(tools_json, "tools", &tools);
    if (!rc && extra_json) rc = parse_json(extra_json, "template variables", &extra);
    if (!rc && extra && !json_is_object(extra)) rc = err_set(PL_EINVAL, "template variables: must be a JSON object");
    if (!tpl && tools && json_array_size(tools)) tpl = pl_model_chat_template_named(m, "tool_use");
    if (!tpl) tpl = pl_model_chat_template(m);
    if (!rc && !tpl) {
        rc = fallback(m, msgs, add_generation_prompt, out);
        goto done;
    }
    if (!rc) {
        ctx = extra ? json_deep_copy(extra) : json_object();
        if (!ctx) rc = err_set(PL_ENOMEM, "out of memory");
    }
    if (!rc) {
        const pl_vocab *v = pl_model_vocab(m);
        json_object_set(ctx, "messages", msgs);
        if (tools) json_object_set(ctx, "tools", tools);
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
        if (!json_object_get(ctx, "bos_token")) json_object_set_new(ctx, "bos_token", token_text(m, pl_vocab_bos(v)));
        if (!json_object_get(ctx, "eos_token")) json_object_set_new(ctx, "eos_token", token_text(m, pl_vocab_eos(v)));
        jinja_limits lim = jinja_limits_default();
        rc = jinja_render(tpl, strlen(tpl), ctx, &lim, out);
        /* templates that write bos_token themselves: the tokenizer adds BOS already */
        const char *bos = json_string_value(json_object_get(ctx, "bos_token"));
        size_t bl = bos ? strlen(bos) : 0;
        if (!rc && bl && pl_vocab_add_bos(v) && strncmp(*out, bos, bl) == 0) memmove(*out, *out + bl, strlen(*out) - bl + 1);
    }
done:
    json_decref(msgs);
    json_decref(tools);
    json_decref(extra);
    json_decref(ctx);
    return rc;
}
