/* server_sse.c - streaming chunks as server-sent events; see server_sse.h. */
#include "server_sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_sse_init(srv_sse *s, const srv_gen_req *q, const srv_tokens *tok, const char *id, long created,
                  const char *model)
{
    memset(s, 0, sizeof *s);
    s->q = q;
    s->tok = tok;
    snprintf(s->id, sizeof s->id, "%s", id);
    s->created = created;
    s->model = model;
    for (int32_t i = 0; i < SRV_MAX_N; i++) srv_chat_out_init(&s->out[i], q);
}

/* The prompt logprobs held for echo (a stream cut short). */
static void release_prompt_logprobs(srv_sse *s)
{
    for (int i = 0; i < SRV_MAX_N; i++) {
        json_decref(s->plp[i]);
        s->plp[i] = NULL;
    }
}

void srv_sse_free(srv_sse *s)
{
    for (int32_t i = 0; i < SRV_MAX_N; i++) srv_chat_out_free(&s->out[i]);
    release_prompt_logprobs(s);
}

/* Appends "data: <json>\n\n" and releases o; on failure nothing of the
 * frame stays in out (what is there is whole frames only). */
static int frame(srv_buf *out, json_t *o)
{
    if (!o) return PL_ERR_NOMEM;
    char *j = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!j) return PL_ERR_NOMEM;
    const size_t len0 = out->len;
    int rc = srv_buf_str(out, "data: ");
    if (!rc) rc = srv_buf_str(out, j);
    if (!rc) rc = srv_buf_str(out, "\n\n");
    if (rc && out->p) out->p[out->len = len0] = 0;
    free(j);
    return rc;
}

/* The chunk envelope around one choice (choices: [choice]). */
static json_t *chunk(const srv_sse *s, json_t *choice)
{
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", s->id, "object",
                          s->q->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)s->created, "model", s->model, "system_fingerprint", "pagellm", "choices", choice);
    if (o && s->q->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* One choice of a chunk. text may be NULL (no text field change: chat's
 * final empty delta); lp is the logprobs object or NULL; finish NULL while
 * the completion runs. */
static json_t *choice(srv_sse *s, int32_t i, const char *text, size_t len, json_t *lp, const char *finish)
{
    json_t *c = json_pack("{s:i, s:o, s:o}", "index", (int)i, "logprobs", lp ? lp : json_null(), "finish_reason",
                          finish ? json_string(finish) : json_null());
    if (!c) return NULL;
    if (s->q->kind == SRV_COMPLETIONS) {
        json_object_set_new(c, "text", srv_json_text(text ? text : "", text ? len : 0));
        return c;
    }
    json_t *delta = json_object();
    if (!s->role_sent[i]) {
        json_object_set_new(delta, "role", json_string("assistant"));
        s->role_sent[i] = true;
        if (!text) text = "", len = 0;
    }
    if (text) json_object_set_new(delta, "content", srv_json_text(text, len));
    json_object_set_new(c, "delta", delta);
    return c;
}

/* A chat choice whose delta holds reasoning_content, content and
 * tool_calls as given (each left out when empty). */
static json_t *chat_choice(srv_sse *s, int32_t i, const srv_buf *reasoning, const srv_buf *content, json_t *calls,
                           json_t *lp, const char *finish)
{
    json_t *c = json_pack("{s:i, s:o, s:o}", "index", (int)i, "logprobs", lp ? lp : json_null(), "finish_reason",
                          finish ? json_string(finish) : json_null());
    json_t *delta = json_object();
    if (!c || !delta) { json_decref(c); json_decref(delta); json_decref(calls); return NULL; }
    if (!s->role_sent[i]) {
        json_object_set_new(delta, "role", json_string("assistant"));
        s->role_sent[i] = true;
    }
    if (reasoning->len) json_object_set_new(delta, "reasoning_content", srv_json_text(reasoning->p, reasoning->len));
    if (content->len || (!reasoning->len && !calls))
        json_object_set_new(delta, "content", srv_json_text(content->p ? content->p : "", content->len));
    if (calls) {
        size_t k;
        json_t *call;
        json_array_foreach(calls, k, call) json_object_set_new(call, "index", json_integer((json_int_t)k));
        json_object_set_new(delta, "tool_calls", calls);
    }
    json_object_set_new(c, "delta", delta);
    return c;
}

/* A token or the end of a chat reply that reasoning or tools decode. */
static int chat_decoded(srv_sse *s, const pl_event *ev, json_t *lp, srv_buf *out, bool *had_calls)
{
    srv_chat_out *o = &s->out[ev->index];
    srv_buf reasoning = {0}, content = {0};
    json_t *calls = NULL;
    bool done = ev->kind == PL_EV_DONE;
    int rc = srv_chat_out_feed(o, ev->text, ev->text_len, &reasoning, &content);
    if (!rc && done) rc = srv_chat_out_finish(o, s->q, &reasoning, &content, &calls);
    if (!rc && (reasoning.len || content.len || lp || !s->role_sent[ev->index]))
        rc = frame(out, chunk(s, chat_choice(s, ev->index, &reasoning, &content, NULL, lp, NULL)));
    else json_decref(lp);
    srv_buf_free(&reasoning);
    srv_buf_free(&content);
    if (!rc && calls) {
        srv_buf none = {0};
        if (had_calls) *had_calls = true;
        rc = frame(out, chunk(s, chat_choice(s, ev->index, &none, &none, calls, NULL, NULL)));
        calls = NULL;
    }
    json_decref(calls);
    return rc;
}

static json_t *token_logprobs(srv_sse *s, const pl_event *ev)
{
    if (s->q->logprobs < 0) return NULL;
    if (s->q->kind == SRV_CHAT) return json_pack("{s:[o], s:n}", "content", srv_lp_chat_item(s->tok, ev), "refusal");
    json_t *lp = srv_lp_completion_new();
    if (lp && srv_lp_completion_add(lp, s->tok, ev, &s->offset[ev->index])) {
        json_decref(lp);
        return NULL;
    }
    return lp;
}

static int on_done(srv_sse *s, const pl_event *ev, srv_buf *out)
{
    int rc = 0;
    const char *fin = ev->finish_reason ? ev->finish_reason : "stop";
    if (s->q->kind == SRV_CHAT && s->out[ev->index].active) {
        bool calls = false;
        rc = chat_decoded(s, ev, NULL, out, &calls);
        if (calls && strcmp(fin, "stop") == 0) fin = "tool_calls";
    } else if (ev->text_len || (s->q->kind == SRV_CHAT && !s->role_sent[ev->index]))
        rc = frame(out, chunk(s, choice(s, ev->index, ev->text, ev->text_len, NULL, NULL)));
    if (!rc) rc = frame(out, chunk(s, choice(s, ev->index, NULL, 0, NULL, fin)));
    s->prompt_tokens = ev->prompt_tokens;
    if (ev->cached_tokens > s->cached_tokens) s->cached_tokens = ev->cached_tokens;
    s->completion_tokens += ev->completion_tokens;
    return rc;
}

int srv_sse_event(srv_sse *s, const pl_event *ev, srv_buf *out)
{
    if (ev->kind == PL_EV_ERROR) {
        srv_error e;
        srv_error_set(&e, 500, "server_error", NULL, NULL, "%s", ev->message);
        s->failed = true;
        return srv_sse_error(out, &e);
    }
    if (ev->index < 0 || ev->index >= srv_gen_req_choices(s->q)) return 0;
    if (ev->kind == PL_EV_PROMPT) { /* gathered, sent with the echo chunk */
        json_t **lp = &s->plp[ev->index];
        if (!*lp && !(*lp = srv_lp_completion_new())) return PL_ERR_NOMEM;
        return srv_lp_prompt_add(*lp, s->tok, ev, &s->plp_off[ev->index]);
    }
    if (s->q->echo && !s->echo_sent[ev->index]) {
        s->echo_sent[ev->index] = true;
        s->offset[ev->index] = s->q->p.prompt_logprobs ? s->plp_off[ev->index] : srv_utf8_count(s->q->echo, s->q->echo_len);
        json_t *lp = s->plp[ev->index];
        s->plp[ev->index] = NULL;
        int rc = frame(out, chunk(s, choice(s, ev->index, s->q->echo, s->q->echo_len, lp, NULL)));
        if (rc) return rc;
    }
    if (ev->kind == PL_EV_DONE) return on_done(s, ev, out);
    json_t *lp = token_logprobs(s, ev);
    if (s->q->kind == SRV_CHAT && s->out[ev->index].active) return chat_decoded(s, ev, lp, out, NULL);
    if (!ev->text_len && !lp) return 0;
    return frame(out, chunk(s, choice(s, ev->index, ev->text, ev->text_len, lp, NULL)));
}

int srv_sse_finish(srv_sse *s, srv_buf *out)
{
    release_prompt_logprobs(s);
    if (s->q->include_usage && !s->failed) {
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:o}", "id", s->id, "object",
                              s->q->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)s->created, "model", s->model, "system_fingerprint", "pagellm", "choices",
                              "usage", srv_usage_json(s->prompt_tokens, s->completion_tokens, s->cached_tokens));
        int rc = frame(out, o);
        if (rc) return rc;
    }
    return srv_buf_str(out, "data: [DONE]\n\n");
}

int srv_sse_error(srv_buf *out, const srv_error *e) { return frame(out, srv_error_obj(e)); }

int srv_sse_comment(srv_buf *out, const char *text)
{
    int rc = srv_buf_str(out, ": ");
    if (!rc) rc = srv_buf_str(out, text);
    if (!rc) rc = srv_buf_str(out, "\n\n");
    return rc;
}
