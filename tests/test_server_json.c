/* test_server_json.c - the HTTP-free layers of `pagellm serve`: request
 * parsing and validation, response and SSE chunk JSON, token strings for
 * logprobs, and the /metrics text.
 *
 * Also the bearer keys (server_keys.h) and the connection guard
 * (server_guard.h: limits, and the request deadline on a socketpair).
 *
 * Those layers live in server/ (libpagellm_server.a, which sees only
 * include/pagellm.h). They depend on jansson and the public API only, never
 * on libmicrohttpd or the engine thread, so they are tested here in
 * process; the HTTP layer is tested end to end by tests/cli/test_serve.sh.
 *
 * Uses ../shared/models/stories260K.gguf (SentencePiece, 512 tokens, a plain
 * chat template fallback); skips when it is absent.
 */
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server_guard.h"
#include "server_keys.h"
#include "server_metrics.h"
#include "server_openai.h"
#include "server_sse.h"
#include "server_tokens.h"

#include "test.h"

#define MODEL SHARED_MODELS "/stories260K.gguf"

static pl_model *model;
static srv_tokens toks;
static srv_model_ctx mc;

/* Parses body as kind; returns the status (200 when accepted) and leaves
 * the request in *q (freed by the caller) or the error in *e. */
static int parse(srv_kind kind, const char *body, srv_gen_req *q, srv_error *e)
{
    memset(e, 0, sizeof *e);
    return srv_gen_req_parse(&mc, kind, body, strlen(body), q, e) == 0 ? 200 : e->status;
}

/* Expects a 400 naming param (NULL: no param) and containing text. */
static int rejects(srv_kind kind, const char *body, const char *param, const char *text)
{
    srv_gen_req q;
    srv_error e;
    int st = parse(kind, body, &q, &e);
    if (st == 200) { srv_gen_req_free(&q); printf("  accepted: %s\n", body); return 0; }
    int ok = st == 400 && strcmp(e.type, "invalid_request_error") == 0 &&
             (param ? e.param && strcmp(e.param, param) == 0 : e.param == NULL) && strstr(e.message, text);
    if (!ok) printf("  %s -> %d param=%s msg=%s\n", body, st, e.param ? e.param : "null", e.message);
    return ok;
}

TEST(error_body_shape)
{
    srv_error e;
    srv_bad_request(&e, "n", NULL, "'n' must be between %d and %d", 1, 16);
    char *s = srv_error_json(&e);
    CHECK_STR(s, "{\"error\":{\"message\":\"'n' must be between 1 and 16\",\"type\":\"invalid_request_error\","
                 "\"param\":\"n\",\"code\":null}}");
    free(s);
    srv_error_set(&e, 503, "server_error", NULL, "overloaded", "busy \xff");  /* invalid UTF-8 survives */
    s = srv_error_json(&e);
    CHECK(s && strstr(s, "\"message\":\"busy ?\"") && strstr(s, "\"code\":\"overloaded\""));
    free(s);
}

TEST(token_strings)
{
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(pl_tokenize(mc.vocab, "Once upon", 9, false, false, &ids, &n) == 0 && n >= 2);
    CHECK_STR(srv_token_str(&toks, ids[0]), " Once"); /* SentencePiece put a space before the first word */
    pl_free(ids);
    /* find the byte token <0x0A> and a partial UTF-8 byte */
    int32_t nl = -1, e2 = -1;
    for (int32_t i = 0; i < toks.n; i++) {
        if (strcmp(pl_token_piece(mc.vocab, i), "<0x0A>") == 0) nl = i;
        if (strcmp(pl_token_piece(mc.vocab, i), "<0xE2>") == 0) e2 = i;
    }
    CHECK(nl >= 0 && e2 >= 0);
    CHECK_STR(srv_token_str(&toks, nl), "\n");
    CHECK_STR(srv_token_str(&toks, e2), "bytes:\\xe2");
    size_t nb;
    const uint8_t *b = srv_token_bytes(&toks, e2, &nb);
    CHECK(nb == 1 && b[0] == 0xE2);
    CHECK(srv_utf8_valid("h\xc3\xa9", 3) && !srv_utf8_valid("\xc3", 1) && !srv_utf8_valid("\xed\xa0\x80", 3));
    CHECK_EQ_INT(srv_utf8_count("h\xc3\xa9!", 4), 3);
}

TEST(completion_request_defaults)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse(SRV_COMPLETIONS, "{\"model\":\"x\",\"prompt\":\"Once upon a time\",\"whatever\":[1,{}]}", &q, &e), 200);
    int32_t *ids = NULL;
    size_t n = 0;
    pl_tokenize(mc.vocab, "Once upon a time", 16, pl_vocab_add_bos(mc.vocab), false, &ids, &n);
    CHECK_EQ_INT(q.n_prompt, n);
    CHECK(memcmp(q.p.prompt, ids, n * sizeof *ids) == 0);
    pl_free(ids);
    CHECK_EQ_INT(q.p.max_tokens, 16);
    CHECK_EQ_INT(q.p.n, 1);
    CHECK_EQ_INT(q.p.top_logprobs, -1);
    CHECK(!q.stream && !q.include_usage && !q.max_tokens_given);
    CHECK_NEAR(q.p.sampling.temperature, mc.defaults.temperature, 1e-6);
    srv_gen_req_free(&q);
    /* a default max_tokens is cut to the room the context leaves */
    CHECK_EQ_INT(parse(SRV_COMPLETIONS, "{\"prompt\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30]}", &q, &e), 200);
    CHECK_EQ_INT(q.n_prompt, 30);
    CHECK_EQ_INT(q.p.max_tokens, 2);  /* n_ctx 32 in these tests */
    srv_gen_req_free(&q);
}

/* The context rule, as OpenAI's: prompt + an explicit max_tokens past the
 * context is a 400 context_length_exceeded naming max_tokens; a prompt that
 * leaves no room names the prompt; a default max_tokens is cut to fit. */
TEST(context_length_rule)
{
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":[1,2,3,4,5,6,7,8,9,10],\"max_tokens\":23}", "max_tokens",
                  "maximum context length is 32 tokens. However, you requested 33 tokens"));
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse(SRV_COMPLETIONS, "{\"prompt\":[1,2,3,4,5,6,7,8,9,10],\"max_tokens\":22}", &q, &e), 200);
    CHECK_EQ_INT(q.p.max_tokens, 22);
    srv_gen_req_free(&q);
    CHECK_EQ_INT(parse(SRV_COMPLETIONS, "{\"prompt\":[1,2,3,4,5,6,7,8,9,10],\"max_tokens\":23}", &q, &e), 400);
    CHECK_STR(e.code, "context_length_exceeded");
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_completion_tokens\":1000}",
                  "max_tokens", "maximum context length"));
    char big[256] = "{\"prompt\":[";
    for (int i = 0; i < 32; i++) strcat(big, i ? ",7" : "7");
    strcat(big, "]}");
    CHECK(rejects(SRV_COMPLETIONS, big, "prompt", "maximum context length is 32 tokens"));
    /* chat without max_tokens: until the end of the context */
    CHECK_EQ_INT(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &q, &e), 200);
    CHECK_EQ_INT((size_t)q.p.max_tokens + q.n_prompt, 32);
    srv_gen_req_free(&q);
}

TEST(completion_request_fields)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse(SRV_COMPLETIONS,
                       "{\"prompt\":[\"Hi\"],\"max_tokens\":5,\"n\":3,\"temperature\":0,\"top_p\":0.5,\"top_k\":7,"
                       "\"min_p\":0.1,\"seed\":42,\"stop\":[\"a\",\"\",\"bc\"],\"logprobs\":2,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true,\"echo\":false,"
                       "\"presence_penalty\":0.5,\"logit_bias\":{}}", &q, &e), 200);
    CHECK_EQ_INT(q.p.max_tokens, 5);
    CHECK_EQ_INT(q.p.n, 3);
    CHECK_NEAR(q.p.sampling.temperature, 0, 0);
    CHECK_NEAR(q.p.sampling.top_p, 0.5, 1e-6);
    CHECK_EQ_INT(q.p.sampling.top_k, 7);
    CHECK_NEAR(q.p.sampling.min_p, 0.1, 1e-6);
    CHECK_EQ_INT(q.p.sampling.seed, 42);
    CHECK_EQ_INT(q.p.n_stops, 2);
    CHECK_STR(q.p.stops[0], "a");
    CHECK_STR(q.p.stops[1], "bc");
    CHECK_EQ_INT(q.p.top_logprobs, 2);
    CHECK(q.stream && q.include_usage && q.p.ignore_eos && q.max_tokens_given);
    CHECK(q.p.prompt == q.prompt && q.p.n_prompt == q.n_prompt);
    srv_gen_req_free(&q);
    CHECK_EQ_INT(parse(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"stop\":\"x\",\"top_k\":-1,\"seed\":null,\"n\":null}", &q, &e), 200);
    CHECK_EQ_INT(q.p.n_stops, 1);
    CHECK_EQ_INT(q.p.sampling.top_k, 0);
    CHECK_EQ_INT(q.p.n, 1);
    srv_gen_req_free(&q);
}

TEST(completion_request_rejects)
{
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\"", NULL, "invalid JSON"));
    CHECK(rejects(SRV_COMPLETIONS, "[1,2]", NULL, "must be a JSON object"));
    CHECK(rejects(SRV_COMPLETIONS, "", NULL, "invalid JSON"));
    CHECK(rejects(SRV_COMPLETIONS, "{}", "prompt", "required"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"\"}", "prompt", "empty"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":[]}", "prompt", "empty"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":5}", "prompt", "must be a string"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":[1,99999]}", "prompt", "not a token id"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":[\"a\",5]}", "prompt", "prompt[1] must be a string"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"max_tokens\":\"5\"}", "max_tokens", "must be an integer, got a string"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"max_tokens\":2.5}", "max_tokens", "must be an integer"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"max_tokens\":0}", "max_tokens", "between 1"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"max_tokens\":40}", "max_tokens", "maximum context length is 32"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"n\":0}", "n", "between 1 and 16"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"n\":17}", "n", "between 1 and 16"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"temperature\":\"hot\"}", "temperature", "must be a number"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"temperature\":3}", "temperature", "between 0 and 2"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"top_p\":1.5}", "top_p", "between"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"stream\":1}", "stream", "must be a boolean"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"stream_options\":1}", "stream_options", "must be an object"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"stop\":3}", "stop", "string or an array"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"stop\":[\"a\",1]}", "stop", "must be strings"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"logprobs\":21}", "logprobs", "between 0 and 20"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"logprobs\":true}", "logprobs", "must be an integer"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"],\"echo\":true}", "echo", "list of prompts"));
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"logit_bias\":{\"x1\":5}}", "logit_bias", "not a token id"));
    /* a prompt filling the context leaves no room */
    CHECK(rejects(SRV_COMPLETIONS, "{\"prompt\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32]}",
                  "prompt", "maximum context length is 32"));
    srv_gen_req q;
    srv_error e;
    parse(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"max_tokens\":40}", &q, &e);
    CHECK_STR(e.code, "context_length_exceeded");
    char big[600];
    memset(big, 'a', sizeof big);
    memcpy(big, "{\"prompt\":\"Hi\",\"stop\":\"", 23);
    memcpy(big + sizeof big - 4, "\"}", 3);
    CHECK(rejects(SRV_COMPLETIONS, big, "stop", "at most 255"));
}

TEST(chat_request)
{
    srv_gen_req q;
    srv_error e;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}]}],\"logprobs\":true,"
                       "\"top_logprobs\":3,\"max_completion_tokens\":4}";
    mc.n_ctx = 128; /* the plain template's words are many tokens of this 512-token vocabulary */
    CHECK_MSG(parse(SRV_CHAT, body, &q, &e) == 200, "%s", e.message);
    pl_chat_msg m[2] = {{"system", "Be brief."}, {"user", "Hi"}};
    char *text = NULL;
    CHECK(pl_chat_render(model, m, 2, true, &text, NULL) == 0);
    int32_t *ids = NULL;
    size_t n = 0;
    pl_tokenize(mc.vocab, text, strlen(text), pl_vocab_add_bos(mc.vocab), true, &ids, &n);
    CHECK_EQ_INT(q.n_prompt, n);
    CHECK(memcmp(q.prompt, ids, n * sizeof *ids) == 0);
    pl_free(ids);
    pl_free(text);
    CHECK_EQ_INT(q.p.top_logprobs, 3);
    CHECK_EQ_INT(q.p.max_tokens, 4);
    srv_gen_req_free(&q);
    /* the chat default max_tokens is the rest of the context */
    CHECK_EQ_INT(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", &q, &e), 200);
    CHECK_EQ_INT(q.p.max_tokens, 128 - (int)q.n_prompt);
    CHECK_EQ_INT(q.p.top_logprobs, -1);
    srv_gen_req_free(&q);
    mc.n_ctx = 32;
}

TEST(chat_request_rejects)
{
    CHECK(rejects(SRV_CHAT, "{}", "messages", "required"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[]}", "messages", "empty"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":\"hi\"}", "messages", "must be an array"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[1]}", "messages", "must be an object"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages", "role must be a string"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages", "not supported"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages", "content must be"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages", "only"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs", "needs"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs", "boolean"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", "tools", "type must be"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":32}", "max_tokens", "context"));
    CHECK(rejects(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"xml\"}}",
                  "response_format", "must be text, json_object or json_schema"));
}

static pl_event token_ev(int32_t index, int32_t id, const char *text, float lp)
{
    pl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = PL_EV_TOKEN;
    ev.index = index;
    ev.token = id;
    snprintf(ev.text, sizeof ev.text, "%s", text);
    ev.text_len = strlen(text);
    ev.logprob = lp;
    ev.n_top = 2;
    ev.top_ids[0] = id, ev.top_logprobs[0] = lp;
    ev.top_ids[1] = 13, ev.top_logprobs[1] = -INFINITY;
    return ev;
}

static pl_event done_ev(int32_t index, const char *text, const char *finish, uint32_t completion)
{
    pl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = PL_EV_DONE;
    ev.index = index;
    snprintf(ev.text, sizeof ev.text, "%s", text);
    ev.text_len = strlen(text);
    ev.finish_reason = finish;
    ev.prompt_tokens = 5;
    ev.cached_tokens = 3;
    ev.completion_tokens = completion;
    return ev;
}

/* Tokens of " Once" -> ids for the event helpers. */
static int32_t tok_of(const char *piece)
{
    for (int32_t i = 0; i < toks.n; i++)
        if (strcmp(pl_token_piece(mc.vocab, i), piece) == 0) return i;
    return 0;
}

TEST(completion_response)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"n\":2,\"logprobs\":1,\"max_tokens\":3}", &q, &e), 200);
    srv_result r;
    srv_result_init(&r, q.p.n);
    int32_t the = tok_of("\xE2\x96\x81the");
    pl_event evs[] = {token_ev(0, the, " the", -0.5f), token_ev(1, the, "", -1.0f), done_ev(0, "", "length", 1),
                      done_ev(1, " the", "stop", 1)};
    for (size_t i = 0; i < 4; i++) CHECK(srv_result_add(&r, &q, &toks, &evs[i]) == 0);
    CHECK_EQ_INT(r.n_done, 2);
    char *s = srv_result_json(&r, &q, "cmpl-1", 7, "m.gguf");
    json_t *o = json_loads(s, 0, NULL);
    CHECK(o);
    CHECK_STR(json_string_value(json_object_get(o, "object")), "text_completion");
    CHECK_STR(json_string_value(json_object_get(o, "id")), "cmpl-1");
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "created")), 7);
    CHECK_STR(json_string_value(json_object_get(o, "model")), "m.gguf");
    json_t *c0 = json_array_get(json_object_get(o, "choices"), 0), *c1 = json_array_get(json_object_get(o, "choices"), 1);
    CHECK_STR(json_string_value(json_object_get(c0, "text")), " the");
    CHECK_STR(json_string_value(json_object_get(c0, "finish_reason")), "length");
    CHECK_STR(json_string_value(json_object_get(c1, "text")), " the");
    CHECK_STR(json_string_value(json_object_get(c1, "finish_reason")), "stop");
    CHECK_EQ_INT(json_integer_value(json_object_get(c1, "index")), 1);
    json_t *lp = json_object_get(c0, "logprobs");
    CHECK_STR(json_string_value(json_array_get(json_object_get(lp, "tokens"), 0)), " the");
    CHECK_NEAR(json_real_value(json_array_get(json_object_get(lp, "token_logprobs"), 0)), -0.5, 1e-6);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 0)), 0);
    json_t *top = json_array_get(json_object_get(lp, "top_logprobs"), 0);
    CHECK_NEAR(json_real_value(json_object_get(top, " the")), -0.5, 1e-6);
    CHECK(json_object_size(top) == 2); /* -inf is written as -9999 */
    json_t *u = json_object_get(o, "usage");
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "prompt_tokens")), 5);
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "completion_tokens")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(u, "total_tokens")), 7);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")), 3);
    json_decref(o);
    free(s);
    srv_result_free(&r);
    srv_gen_req_free(&q);
}

TEST(chat_response)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"logprobs\":true}", &q, &e), 200);
    srv_result r;
    srv_result_init(&r, 1);
    int32_t e2 = tok_of("<0xE2>");
    pl_event a = token_ev(0, e2, "", -0.25f), d = done_ev(0, "\xE2\x82\xAC", "stop", 1);
    a.n_top = 0;
    CHECK(srv_result_add(&r, &q, &toks, &a) == 0 && srv_result_add(&r, &q, &toks, &d) == 0);
    char *s = srv_result_json(&r, &q, "chatcmpl-1", 1, "m");
    json_t *o = json_loads(s, 0, NULL), *c = json_array_get(json_object_get(o, "choices"), 0);
    CHECK_STR(json_string_value(json_object_get(o, "object")), "chat.completion");
    CHECK_STR(json_string_value(json_object_get(json_object_get(c, "message"), "role")), "assistant");
    CHECK_STR(json_string_value(json_object_get(json_object_get(c, "message"), "content")), "\xE2\x82\xAC");
    json_t *item = json_array_get(json_object_get(json_object_get(c, "logprobs"), "content"), 0);
    CHECK_STR(json_string_value(json_object_get(item, "token")), "bytes:\\xe2");
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(item, "bytes"), 0)), 0xE2);
    CHECK(json_array_size(json_object_get(item, "top_logprobs")) == 0);
    json_decref(o);
    free(s);
    srv_result_free(&r);
    srv_gen_req_free(&q);
}

/* Splits SSE bytes into the JSON payloads of its data: frames. */
static int sse_frames(const char *s, json_t **out, int max, int *done)
{
    int n = 0;
    *done = 0;
    while (*s) {
        const char *end = strstr(s, "\n\n");
        if (!end || strncmp(s, "data: ", 6) != 0) return -1;
        if (strncmp(s + 6, "[DONE]", 6) == 0) { *done = 1; if (end[2]) return -1; break; }
        if (n < max) out[n++] = json_loadb(s + 6, (size_t)(end - s - 6), 0, NULL);
        s = end + 2;
    }
    return n;
}

/* Streams evs[0..n_ev) through a srv_sse for q (id, created 3, model
 * "m") and finishes it, into *b (the caller frees it); 0, or -1 when an
 * event or the finish failed. */
static int sse_stream(const srv_gen_req *q, const char *id, const pl_event *evs, size_t n_ev, srv_buf *b)
{
    srv_sse st;
    srv_sse_init(&st, q, &toks, id, 3, "m");
    int rc = 0;
    for (size_t i = 0; !rc && i < n_ev; i++) rc = srv_sse_event(&st, &evs[i], b);
    if (!rc) rc = srv_sse_finish(&st, b);
    srv_sse_free(&st);
    return rc == 0 ? 0 : -1;
}

TEST(sse_completion_stream)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &q, &e), 200);
    srv_buf b = {0};
    int32_t the = tok_of("\xE2\x96\x81the");
    pl_event evs[] = {token_ev(0, the, " the", -0.5f), token_ev(0, the, "", -0.5f), done_ev(0, " end", "length", 2)};
    CHECK(sse_stream(&q, "cmpl-9", evs, 3, &b) == 0);
    json_t *f[8];
    int done, n = sse_frames(b.p, f, 8, &done);
    CHECK_EQ_INT(n, 4); /* " the", (held token: no frame), " end", finish, usage */
    CHECK(done);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(f[0], "choices"), 0), "text")), " the");
    CHECK(json_is_null(json_object_get(f[0], "usage")));
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(f[1], "choices"), 0), "text")), " end");
    json_t *fin = json_array_get(json_object_get(f[2], "choices"), 0);
    CHECK_STR(json_string_value(json_object_get(fin, "finish_reason")), "length");
    CHECK(json_array_size(json_object_get(f[3], "choices")) == 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(f[3], "usage"), "completion_tokens")), 2);
    CHECK_STR(json_string_value(json_object_get(f[3], "object")), "text_completion");
    for (int i = 0; i < n; i++) json_decref(f[i]);
    srv_buf_free(&b);
    srv_gen_req_free(&q);
}

TEST(sse_chat_stream)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"stream\":true,\"logprobs\":true,\"top_logprobs\":1}", &q, &e), 200);
    srv_buf b = {0};
    int32_t the = tok_of("\xE2\x96\x81the");
    pl_event evs[] = {token_ev(0, the, " the", -0.5f), token_ev(0, the, "", -0.7f), done_ev(0, "", "stop", 2)};
    evs[0].n_top = evs[1].n_top = 1;
    CHECK(sse_stream(&q, "chatcmpl-9", evs, 3, &b) == 0);
    json_t *f[8];
    int done, n = sse_frames(b.p, f, 8, &done);
    CHECK_EQ_INT(n, 3); /* role + " the", the held token's logprobs, finish; no usage chunk */
    CHECK(done);
    json_t *c0 = json_array_get(json_object_get(f[0], "choices"), 0);
    CHECK_STR(json_string_value(json_object_get(f[0], "object")), "chat.completion.chunk");
    CHECK_STR(json_string_value(json_object_get(json_object_get(c0, "delta"), "role")), "assistant");
    CHECK_STR(json_string_value(json_object_get(json_object_get(c0, "delta"), "content")), " the");
    json_t *lp = json_array_get(json_object_get(json_object_get(c0, "logprobs"), "content"), 0);
    CHECK_STR(json_string_value(json_object_get(lp, "token")), " the");
    CHECK(json_array_size(json_object_get(lp, "top_logprobs")) == 1);
    json_t *c1 = json_array_get(json_object_get(f[1], "choices"), 0);
    CHECK(json_object_get(json_object_get(c1, "delta"), "role") == NULL);
    CHECK_STR(json_string_value(json_object_get(json_object_get(c1, "delta"), "content")), "");
    json_t *c2 = json_array_get(json_object_get(f[2], "choices"), 0);
    CHECK(json_object_size(json_object_get(c2, "delta")) == 0);
    CHECK_STR(json_string_value(json_object_get(c2, "finish_reason")), "stop");
    CHECK(json_object_get(f[2], "usage") == NULL);
    for (int i = 0; i < n; i++) json_decref(f[i]);
    srv_buf_free(&b);
    srv_gen_req_free(&q);
}

TEST(sse_error_frame)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse(SRV_COMPLETIONS, "{\"prompt\":\"Hi\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", &q, &e), 200);
    srv_buf b = {0};
    pl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = PL_EV_ERROR;
    snprintf(ev.message, sizeof ev.message, "KV pool exhausted");
    CHECK(sse_stream(&q, "cmpl-9", &ev, 1, &b) == 0);
    CHECK_STR(b.p, "data: {\"error\":{\"message\":\"KV pool exhausted\",\"type\":\"server_error\",\"param\":null,"
                   "\"code\":null}}\n\ndata: [DONE]\n\n");
    srv_buf_free(&b);
    srv_gen_req_free(&q);
}

TEST(metrics_text)
{
    pl_engine_metrics m;
    memset(&m, 0, sizeof m);
    m.kv.blocks_total = 128, m.kv.blocks_used = 32, m.kv.blocks_cached = 5;
    m.prefix_hit_tokens = 77;
    m.running = 2;
    m.running_peak = 7, m.running_steps = 90, m.kv_live_byte_steps = 3000, m.kv_allocated_byte_steps = 4096;
    for (int i = 0; i < PL_HIST_BUCKETS; i++) {
        m.ttft.le[i] = i == PL_HIST_BUCKETS - 1 ? INFINITY : 0.001 * (1 << i);
        m.ttft.count[i] = (uint64_t)i;
    }
    m.ttft.n = 15, m.ttft.sum = 0.25;
    srv_http_stats h;
    memset(&h, 0, sizeof h);
    h.responses[srv_http_code_index(400)] = 4;
    char *s = srv_metrics_text(&m, &h);
    CHECK(s);
    CHECK(strstr(s, "# TYPE pagellm_kv_blocks_total gauge\npagellm_kv_blocks_total 128\n"));
    CHECK(strstr(s, "\npagellm_kv_blocks_used 32\n"));
    CHECK(strstr(s, "\npagellm_kv_blocks_cached 5\n"));
    CHECK(strstr(s, "\npagellm_kv_usage_ratio 0.25\n"));
    CHECK(strstr(s, "# TYPE pagellm_prefix_cache_hit_tokens_total counter\npagellm_prefix_cache_hit_tokens_total 77\n"));
    CHECK(strstr(s, "\npagellm_requests_running 2\n"));
    CHECK(strstr(s, "# TYPE pagellm_requests_running_peak gauge\npagellm_requests_running_peak 7\n"));
    CHECK(strstr(s, "# TYPE pagellm_requests_running_steps_total counter\npagellm_requests_running_steps_total 90\n"));
    CHECK(strstr(s, "\npagellm_kv_bytes_live_steps_total 3000\n"));
    CHECK(strstr(s, "\npagellm_kv_bytes_allocated_steps_total 4096\n"));
    CHECK(strstr(s, "# TYPE pagellm_time_to_first_token_seconds histogram\n"));
    CHECK(strstr(s, "\npagellm_time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n"));
    CHECK(strstr(s, "\npagellm_time_to_first_token_seconds_bucket{le=\"0.002\"} 1\n"));
    CHECK(strstr(s, "\npagellm_time_to_first_token_seconds_bucket{le=\"+Inf\"} 15\n"));
    CHECK(strstr(s, "\npagellm_time_to_first_token_seconds_sum 0.25\npagellm_time_to_first_token_seconds_count 15\n"));
    CHECK(strstr(s, "pagellm_inter_token_latency_seconds_bucket"));
    CHECK(strstr(s, "pagellm_e2e_request_latency_seconds_bucket"));
    CHECK(strstr(s, "\npagellm_http_responses_total{code=\"400\"} 4\n"));
    /* every line is a comment or "name[{labels}] value" */
    for (char *line = s; *line;) {
        char *nl = strchr(line, '\n');
        CHECK(nl);
        if (*line != '#') {
            char name[128];
            double v;
            CHECK_MSG(sscanf(line, "%127[a-z_{}=\"+.0-9A-Za-z] %lf", name, &v) == 2, "bad line %.*s", (int)(nl - line), line);
        }
        line = nl + 1;
    }
    free(s);
}

/* ------------------------------------------------------------- keys */

static int write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    fclose(f);
    return chmod(path, mode);
}

TEST(keys_checked)
{
    srv_keys k = {0};
    char err[600];
    CHECK_EQ_INT(srv_keys_add(&k, "", "--api-key", err, sizeof err), PL_ERR_INVAL);
    CHECK(strstr(err, "--api-key is empty"));
    CHECK_EQ_INT(srv_keys_add(&k, "  ", "--api-key", err, sizeof err), PL_ERR_INVAL);
    CHECK_EQ_INT(srv_keys_add(&k, "ab cd", "--api-key", err, sizeof err), PL_ERR_INVAL);
    CHECK_EQ_INT(srv_keys_add(&k, "caf\xc3\xa9", "--api-key", err, sizeof err), PL_ERR_INVAL);
    CHECK_EQ_INT(k.n, 0);
    CHECK_EQ_INT(srv_keys_add(&k, "sk-1", "--api-key", err, sizeof err), 0);
    CHECK_EQ_INT(srv_keys_add(&k, "sk-22", "--api-key", err, sizeof err), 0);
    CHECK(srv_keys_match(&k, "Bearer sk-1"));
    CHECK(srv_keys_match(&k, "bearer  sk-22"));
    CHECK(!srv_keys_match(&k, "Bearer sk-2"));
    CHECK(!srv_keys_match(&k, "Bearer sk-222"));
    CHECK(!srv_keys_match(&k, "Bearer "));
    CHECK(!srv_keys_match(&k, "Basic sk-1"));
    CHECK(!srv_keys_match(&k, NULL));
    srv_keys_free(&k);
    CHECK(!srv_keys_match(&k, "Bearer sk-1")); /* an empty set matches nothing */
}

TEST(keys_file)
{
    char dir[] = "/tmp/pagellm-keys.XXXXXX", path[64];
    CHECK(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/keys", dir);
    srv_keys k = {0};
    char err[600];
    bool loose;
    CHECK_EQ_INT(srv_keys_load(&k, path, &loose, err, sizeof err), PL_ERR_IO);
    CHECK(strstr(err, path));
    CHECK_EQ_INT(write_file(path, "# team keys\n\n  key-a \r\nkey-b\n", 0600), 0);
    CHECK_EQ_INT(srv_keys_load(&k, path, &loose, err, sizeof err), 0);
    CHECK(!loose);
    CHECK_EQ_INT(k.n, 2);
    CHECK(srv_keys_match(&k, "Bearer key-a") && srv_keys_match(&k, "Bearer key-b"));
    CHECK(!srv_keys_match(&k, "Bearer # team keys"));
    srv_keys_free(&k);
    CHECK_EQ_INT(write_file(path, "key-a\nkey b\n", 0644), 0);
    CHECK_EQ_INT(srv_keys_load(&k, path, &loose, err, sizeof err), PL_ERR_INVAL);
    CHECK(strstr(err, "line 2"));
    CHECK_EQ_INT(k.n, 0); /* unchanged on failure */
    CHECK_EQ_INT(write_file(path, "# nothing\n   \n", 0644), 0);
    CHECK_EQ_INT(srv_keys_load(&k, path, &loose, err, sizeof err), PL_ERR_INVAL);
    CHECK(loose && strstr(err, "holds no key"));
    srv_keys_free(&k);
    unlink(path);
    rmdir(dir);
}

/* ------------------------------------------------------------ guard */

static struct sockaddr_in ipv4(uint32_t host_order)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(host_order);
    return a;
}

TEST(guard_limits)
{
    srv_guard *g;
    srv_guard_params p = {.max_conns = 4, .per_ip = 2, .deadline_s = 0};
    CHECK_EQ_INT(srv_guard_new(&g, &p), 0);
    struct sockaddr_in a = ipv4(0x7f000001), b = ipv4(0x7f000002);
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
    a6.sin6_addr.s6_addr[10] = a6.sin6_addr.s6_addr[11] = 0xff;
    a6.sin6_addr.s6_addr[12] = 127, a6.sin6_addr.s6_addr[15] = 1; /* ::ffff:127.0.0.1 is a */
    srv_conn *c1 = srv_guard_open(g, (struct sockaddr *)&a, -1);
    srv_conn *c2 = srv_guard_open(g, (struct sockaddr *)&a6, -1);
    srv_conn *c3 = srv_guard_open(g, (struct sockaddr *)&a, -1);
    CHECK(srv_guard_verdict(c1) == SRV_CONN_OK && srv_guard_verdict(c2) == SRV_CONN_OK);
    CHECK(srv_guard_verdict(c3) == SRV_CONN_OVER_IP);
    srv_conn *c4 = srv_guard_open(g, (struct sockaddr *)&b, -1);
    CHECK(srv_guard_verdict(c4) == SRV_CONN_OK);
    srv_conn *c5 = srv_guard_open(g, (struct sockaddr *)&b, -1); /* 4 open: past max_conns first */
    CHECK(srv_guard_verdict(c5) == SRV_CONN_OVER_MAX);
    srv_guard_close(g, c1);
    srv_guard_close(g, c5);
    srv_conn *c6 = srv_guard_open(g, (struct sockaddr *)&a, -1); /* a has c2 and c3 open */
    CHECK(srv_guard_verdict(c6) == SRV_CONN_OVER_IP);
    srv_guard_stats st;
    srv_guard_stats_get(g, &st);
    CHECK_EQ_INT(st.open, 4);
    CHECK_EQ_INT(st.over_ip, 2);
    CHECK_EQ_INT(st.over_max, 1);
    srv_guard_close(g, c2), srv_guard_close(g, c3), srv_guard_close(g, c4), srv_guard_close(g, c6);
    CHECK(srv_guard_verdict(NULL) == SRV_CONN_OVER_MAX);
    srv_guard_free(g);
}

/* True when the peer of fd sees its connection shut down within ms. */
static bool peer_sees_eof(int fd, int ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    char ch;
    return poll(&pf, 1, ms) == 1 && read(fd, &ch, 1) == 0;
}

TEST(guard_deadline)
{
    srv_guard *g;
    srv_guard_params p = {.max_conns = 8, .per_ip = 0, .deadline_s = 0.3, .tick_ms = 20};
    CHECK_EQ_INT(srv_guard_new(&g, &p), 0);
    int busy[2], slow[2];
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, busy), 0);
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, slow), 0);
    srv_conn *cb = srv_guard_open(g, NULL, busy[0]);
    srv_conn *cs = srv_guard_open(g, NULL, slow[0]);
    srv_guard_busy(g, cb);                   /* its request is in: no deadline */
    for (int i = 0; i < 3; i++) {            /* bytes that trickle in change nothing */
        CHECK_EQ_INT(write(slow[1], "a", 1), 1);
        usleep(50000);
    }
    CHECK(peer_sees_eof(slow[1], 1000));
    CHECK(!peer_sees_eof(busy[1], 500));
    srv_guard_idle(g, cb);                   /* answered; the next request has 0.3 s */
    CHECK(peer_sees_eof(busy[1], 1000));
    srv_guard_stats st;
    srv_guard_stats_get(g, &st);
    CHECK_EQ_INT(st.timeouts, 2);
    srv_guard_close(g, cb);
    srv_guard_close(g, cs);
    srv_guard_free(g);
    for (int i = 0; i < 2; i++) close(busy[i]), close(slow[i]);
}

int main(void)
{
    RUN(keys_checked);
    RUN(keys_file);
    RUN(guard_limits);
    RUN(guard_deadline);
    FILE *f = fopen(MODEL, "rb");
    if (!f) { test_skip("server_json", MODEL " not found"); return test_summary(); }
    fclose(f);
    pl_file_info info;
    if (pl_model_load(&model, MODEL) != 0 || pl_file_inspect(MODEL, &info) != 0) {
        printf("FAIL setup: %s\n", pl_last_error());
        return 1;
    }
    mc.model = model;
    mc.vocab = pl_model_vocab(model);
    mc.n_ctx = 32;
    pl_sampler_params_default(&mc.defaults);
    mc.random_seed = true;
    mc.completions_max_tokens = 16;
    if (srv_tokens_init(&toks, mc.vocab, info.tokenizer) != 0) { printf("FAIL setup: tokens\n"); return 1; }
    RUN(error_body_shape);
    RUN(token_strings);
    RUN(completion_request_defaults);
    RUN(context_length_rule);
    RUN(completion_request_fields);
    RUN(completion_request_rejects);
    RUN(chat_request);
    RUN(chat_request_rejects);
    RUN(completion_response);
    RUN(chat_response);
    RUN(sse_completion_stream);
    RUN(sse_chat_stream);
    RUN(sse_error_frame);
    RUN(metrics_text);
    srv_tokens_free(&toks);
    pl_model_free(model);
    return test_summary();
}
