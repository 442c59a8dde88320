/* server_chat.c - chat messages into the template, the reply out of it; see
 * server_chat.h. */
#include "server_chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ messages */

/* content: a string, null, or an array of {"type": "text", "text": ...}
 * parts, joined with newlines. Returns the new value (a reference). */
static json_t *message_content(json_t *c, size_t i, srv_error *e)
{
    if (!c || json_is_null(c)) return json_null();
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        srv_bad_request(e, "messages", NULL, "messages[%zu].content must be a string or an array of parts", i);
        return NULL;
    }
    srv_buf b = {0};
    srv_buf_add(&b, "", 0);
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k);
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") != 0 || !json_is_string(text)) {
            srv_buf_free(&b);
            srv_bad_request(e, "messages", "unsupported_parameter",
                            "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts are supported", i, k);
            return NULL;
        }
        if ((k && srv_buf_str(&b, "\n")) || srv_buf_add(&b, json_string_value(text), json_string_length(text))) {
            srv_buf_free(&b);
            srv_bad_request(e, NULL, NULL, "out of memory");
            return NULL;
        }
    }
    json_t *s = json_stringn(b.p, b.len);
    srv_buf_free(&b);
    if (!s) srv_bad_request(e, "messages", NULL, "messages[%zu].content is not valid UTF-8", i);
    return s;
}

/* An assistant's tool_calls, with JSON-text arguments turned into objects
 * when as_objects (*converted counts them). */
static json_t *message_tool_calls(json_t *tc, size_t i, bool as_objects, int *converted, srv_error *e)
{
    if (!json_is_array(tc)) {
        srv_bad_request(e, "messages", NULL, "messages[%zu].tool_calls must be an array", i);
        return NULL;
    }
    json_t *out = json_array();
    size_t k;
    json_t *c;
    json_array_foreach(tc, k, c) {
        json_t *f = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!json_is_object(c) || !json_is_object(f) || !name || !*name) {
            json_decref(out);
            srv_bad_request(e, "messages", NULL, "messages[%zu].tool_calls[%zu] needs function.name (a string)", i, k);
            return NULL;
        }
        json_t *copy = json_deep_copy(c), *cf = json_object_get(copy, "function");
        json_t *args = json_object_get(cf, "arguments");
        if (json_is_string(args) && as_objects) {
            json_t *parsed = json_loads(json_string_value(args), 0, NULL);
            if (json_is_object(parsed)) json_object_set_new(cf, "arguments", parsed), (*converted)++;
            else json_decref(parsed);
        } else if (args && !json_is_string(args) && !json_is_object(args) && !json_is_null(args)) {
            json_decref(copy);
            json_decref(out);
            srv_bad_request(e, "messages", NULL, "messages[%zu].tool_calls[%zu].function.arguments must be a JSON string", i, k);
            return NULL;
        }
        if (!json_object_get(copy, "type")) json_object_set_new(copy, "type", json_string("function"));
        json_array_append_new(out, copy);
    }
    return out;
}

/* mode: MSG_OBJECT_ARGS turns JSON-text arguments into objects,
 * MSG_EMPTY_CONTENT gives a null content as "" (*adapted counts both). */
enum { MSG_OBJECT_ARGS = 1, MSG_EMPTY_CONTENT = 2 };

static json_t *message(json_t *m, size_t i, int mode, int *adapted, srv_error *e)
{
    if (!json_is_object(m)) {
        srv_bad_request(e, "messages", NULL, "messages[%zu] must be an object", i);
        return NULL;
    }
    const char *r = json_string_value(json_object_get(m, "role"));
    if (!r) {
        srv_bad_request(e, "messages", NULL, "messages[%zu].role must be a string", i);
        return NULL;
    }
    if (strcmp(r, "developer") == 0) r = "system";
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
        srv_bad_request(e, "messages", NULL, "messages[%zu].role '%s' is not supported (system, developer, user, assistant, tool)", i, r);
        return NULL;
    }
    json_t *out = json_pack("{s:s}", "role", r);
    json_t *content = message_content(json_object_get(m, "content"), i, e);
    if (!out || !content) { json_decref(out); json_decref(content); return NULL; }
    if (json_is_null(content) && (mode & MSG_EMPTY_CONTENT) && strcmp(r, "tool") != 0) {
        json_decref(content);
        content = json_string("");
        (*adapted)++;
    }
    json_object_set_new(out, "content", content);
    json_t *tc = json_object_get(m, "tool_calls");
    if (tc && !json_is_null(tc)) {
        if (strcmp(r, "assistant") != 0) {
            json_decref(out);
            srv_bad_request(e, "messages", NULL, "messages[%zu]: only assistant messages have tool_calls", i);
            return NULL;
        }
        json_t *calls = message_tool_calls(tc, i, mode & MSG_OBJECT_ARGS, adapted, e);
        if (!calls) { json_decref(out); return NULL; }
        json_object_set_new(out, "tool_calls", calls);
    }
    if (strcmp(r, "tool") == 0 && json_is_null(content)) {
        json_decref(out);
        srv_bad_request(e, "messages", NULL, "messages[%zu]: a tool message needs content (the result)", i);
        return NULL;
    }
    static const char *const keep[] = {"name", "tool_call_id", "reasoning_content"};
    for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
        json_t *v = json_object_get(m, keep[k]);
        if (v && !json_is_null(v)) {
            if (!json_is_string(v)) {
                json_decref(out);
                srv_bad_request(e, "messages", NULL, "messages[%zu].%s must be a string", i, keep[k]);
                return NULL;
            }
            json_object_set(out, keep[k], v);
        }
    }
    return out;
}

static json_t *messages(json_t *o, int mode, int *adapted, srv_error *e)
{
    json_t *a = json_object_get(o, "messages");
    if (!a || json_is_null(a)) { srv_bad_request(e, "messages", NULL, "'messages' is required"); return NULL; }
    if (!json_is_array(a)) { srv_bad_request(e, "messages", NULL, "'messages' must be an array"); return NULL; }
    if (!json_array_size(a)) { srv_bad_request(e, "messages", NULL, "'messages' is empty"); return NULL; }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(a, i, m) {
        json_t *n = message(m, i, mode, adapted, e);
        if (!n) { json_decref(out); return NULL; }
        json_array_append_new(out, n);
    }
    return out;
}

/* ------------------------------------------------------------ rendering */

static const char *template_of(const srv_model_ctx *mc, bool tools)
{
    if (mc->chat_template) return mc->chat_template;
    const char *t = tools ? pl_model_chat_template_named(mc->model, "tool_use") : NULL;
    return t ? t : pl_model_chat_template(mc->model);
}

/* Renders o's messages (and tools unless tool_choice is none) with the
 * template; *tools_out gets the tools used (a reference) or NULL, *choice_out
 * and *named_out (pointing into o) the tool_choice. */
static int render(const srv_model_ctx *mc, json_t *o, bool add_gen, char **text, json_t **tools_out,
                  bool *parallel_out, srv_tool_choice *choice_out, const char **named_out, srv_error *e)
{
    json_t *tools = NULL;
    srv_tool_choice choice;
    const char *named;
    bool parallel;
    *text = NULL;
    *parallel_out = true;
    *tools_out = NULL;
    if (srv_tools_parse_request(o, &tools, &choice, &named, &parallel, e)) return -1;
    if (choice == SRV_TOOL_NONE) { json_decref(tools); tools = NULL; }
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw)) {
        json_decref(tools);
        return srv_bad_request(e, "chat_template_kwargs", NULL, "'chat_template_kwargs' must be an object");
    }
    char *tt = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
    char *kt = kw && !json_is_null(kw) ? json_dumps(kw, JSON_COMPACT) : NULL;
    int rc = tools && !tt ? srv_bad_request(e, NULL, NULL, "out of memory") : 1; /* 1: not rendered yet */
    /* Templates differ in what they take: arguments as objects (most) or as
     * the JSON text OpenAI sends (DeepSeek's); a null content (OpenAI's, beside
     * tool calls) or only strings (Qwen3's). The first form is the one
     * transformers' templates expect; the others are tried when it fails, and
     * the first failure is what a client hears. */
    static const int modes[] = {MSG_OBJECT_ARGS, 0, MSG_OBJECT_ARGS | MSG_EMPTY_CONTENT, MSG_EMPTY_CONTENT};
    char *tried[4] = {0};
    for (size_t k = 0; rc > 0 && k < sizeof modes / sizeof modes[0]; k++) {
        int adapted = 0;
        json_t *msgs = messages(o, modes[k], &adapted, e);
        if (!msgs) { rc = -1; break; }
        char *mt = tried[k] = json_dumps(msgs, JSON_COMPACT);
        json_decref(msgs);
        bool same = false; /* a form no different from one tried already */
        for (size_t j = 0; mt && j < k; j++) same |= tried[j] && strcmp(tried[j], mt) == 0;
        if (!mt || same) continue;
        const int arc = pl_chat_apply(mc->model, mc->chat_template, mt, tt, add_gen, kt, text);
        if (arc == 0) rc = 0;
        else if (arc == PL_ERR_NOMEM) { /* the server's trouble, not the request's: a 503 */
            srv_out_of_memory(e);
            rc = -1;
        } else if (k == 0) srv_bad_request(e, "messages", NULL, "cannot render the messages with the chat template: %s", pl_last_error());
    }
    for (size_t k = 0; k < 4; k++) free(tried[k]);
    if (rc > 0) rc = -1;
    free(tt), free(kt);
    if (rc) { json_decref(tools); return -1; }
    *tools_out = tools;
    *parallel_out = parallel;
    *choice_out = choice;
    *named_out = named;
    return 0;
}

int srv_chat_render(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, char **text, srv_error *e)
{
    json_t *tools;
    bool parallel;
    srv_tool_choice choice;
    const char *named;
    if (render(mc, o, true, text, &tools, &parallel, &choice, &named, e)) return -1;
    q->one_tool_call = !parallel;
    const char *tpl = template_of(mc, tools != NULL);
    q->tools = tools;
    q->tools_functionary = tools && tpl && strstr(tpl, ">>>all");
    q->reasoning = mc->reasoning_format != SRV_REASONING_NONE;
    q->think_open = q->reasoning && srv_think_prompt_open(*text);
    /* a forced call: sampling follows a grammar of one call (grammar.md) */
    int rc = srv_tools_forced_gbnf(tools, choice, named, tpl, q->think_open, &q->grammar);
    if (rc) {
        pl_free(*text);
        *text = NULL;
        if (rc == PL_ERR_NOMEM) return srv_out_of_memory(e);
        return srv_bad_request(e, "tools", "invalid_schema", "tool_choice forces a call, but %s", pl_last_error());
    }
    if (q->grammar) q->tools_functionary = false; /* the grammar writes the call as {"name", "arguments"} */
    return 0;
}

char *srv_apply_template(const srv_model_ctx *mc, const char *body, size_t len, srv_error *e)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        srv_bad_request(e, NULL, NULL, "the request body must be a JSON object (%s)", o ? "got another JSON value" : je.text);
        return NULL;
    }
    json_t *ag = json_object_get(o, "add_generation_prompt");
    if (ag && !json_is_null(ag) && !json_is_boolean(ag)) {
        json_decref(o);
        srv_bad_request(e, "add_generation_prompt", NULL, "'add_generation_prompt' must be a boolean");
        return NULL;
    }
    char *text = NULL, *out = NULL;
    json_t *tools = NULL;
    bool parallel;
    srv_tool_choice choice;
    const char *named;
    if (!render(mc, o, !ag || json_is_null(ag) || json_is_true(ag), &text, &tools, &parallel, &choice, &named, e)) {
        json_t *r = json_pack("{s:o}", "prompt", srv_json_text(text, strlen(text)));
        out = r ? json_dumps(r, JSON_COMPACT) : NULL;
        json_decref(r);
        if (!out) srv_bad_request(e, NULL, NULL, "out of memory");
    }
    pl_free(text);
    json_decref(tools);
    json_decref(o);
    return out;
}

/* ------------------------------------------------------------ the reply */

void srv_chat_out_init(srv_chat_out *o, const srv_gen_req *q)
{
    memset(o, 0, sizeof *o);
    o->active = q->kind == SRV_CHAT && (q->reasoning || q->tools);
    srv_think_init(&o->think, q->think_open);
    if (!q->reasoning) o->think.state = 2; /* no split: everything is content */
    o->ts.functionary = q->tools_functionary;
    o->tools = q->tools != NULL;
}

int srv_chat_out_feed(srv_chat_out *o, const char *text, size_t len, srv_buf *reasoning, srv_buf *content)
{
    if (!o->active) return srv_buf_add(content, text, len);
    srv_buf c = {0};
    int rc = srv_think_feed(&o->think, text, len, reasoning, o->tools ? &c : content);
    if (!rc && o->tools && c.len) rc = srv_tool_stream_feed(&o->ts, c.p, c.len, content);
    srv_buf_free(&c);
    return rc;
}

int srv_chat_out_finish(srv_chat_out *o, const srv_gen_req *q, srv_buf *reasoning, srv_buf *content, json_t **calls)
{
    *calls = NULL;
    if (!o->active) return 0;
    srv_buf c = {0};
    int rc = srv_think_finish(&o->think, reasoning, o->tools ? &c : content);
    if (!rc && o->tools && c.len) rc = srv_tool_stream_feed(&o->ts, c.p, c.len, content);
    if (!rc && o->tools) rc = srv_tool_stream_finish(&o->ts, q->tools, content, calls);
    while (!rc && *calls && q->one_tool_call && json_array_size(*calls) > 1) json_array_remove(*calls, json_array_size(*calls) - 1);
    srv_buf_free(&c);
    return rc;
}

void srv_chat_out_free(srv_chat_out *o)
{
    srv_think_free(&o->think);
    srv_tool_stream_free(&o->ts);
}
