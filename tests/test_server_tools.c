/* test_server_tools.c - function calling and reasoning in `pagellm serve`:
 * the tool-call parsers of every supported format (and malformed output,
 * which must stay content), the streaming hold-back of call markers and
 * <think> tags cut across tokens, the request's tools / tool_choice checks,
 * messages with tool calls and results rendered through a real template,
 * a template that raises, and the response and SSE shapes of tool calls
 * and reasoning_content.
 *
 * Uses ../shared/models/stories260K.gguf (for request parsing) and
 * ../shared/templates (Qwen2.5's template); skips those parts without them.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server_chat.h"
#include "server_openai.h"
#include "server_reasoning.h"
#include "server_sse.h"
#include "server_tools.h"

#include "test.h"

#define MODEL SHARED_MODELS "/stories260K.gguf"
#define QWEN SHARED_MODELS "/../templates/Qwen-Qwen2.5-7B-Instruct.jinja"

static json_t *weather_tools(void)
{
    return json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                      "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
                      "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]",
                      0, NULL);
}

/* Extracts from text; checks content and the calls' names and arguments
 * ("name1|args1;name2|args2", args as compact JSON; "" = no calls). */
static int extract_is(const char *text, bool functionary, const char *want_content, const char *want_calls)
{
    json_t *tools = weather_tools(), *calls = NULL;
    char *content = NULL;
    int ok = srv_tools_extract(text, strlen(text), tools, functionary, &content, &calls) == 0;
    char got[1024] = "";
    size_t i;
    json_t *c;
    if (calls) json_array_foreach(calls, i, c) {
        json_t *f = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        ok = ok && id && strncmp(id, "call_", 5) == 0 && strcmp(json_string_value(json_object_get(c, "type")), "function") == 0;
        /* arguments is JSON text of an object */
        json_t *a = json_loads(json_string_value(json_object_get(f, "arguments")), 0, NULL);
        char *ac = a ? json_dumps(a, JSON_COMPACT) : NULL;
        ok = ok && json_is_object(a);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s|%s", i ? ";" : "",
                 json_string_value(json_object_get(f, "name")), ac ? ac : "?");
        free(ac);
        json_decref(a);
    }
    ok = ok && content && strcmp(content, want_content) == 0 && strcmp(got, want_calls) == 0;
    if (!ok) printf("  %s -> content '%s' calls '%s'\n", text, content ? content : "(null)", got);
    free(content);
    json_decref(calls);
    json_decref(tools);
    return ok;
}

TEST(parse_hermes)
{
    CHECK(extract_is("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", false, "",
                     "get_weather|{\"city\":\"Paris\"}"));
    CHECK(extract_is("Let me look.\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"東京\"}}</tool_call>\n"
                     "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>", false, "Let me look.",
                     "get_weather|{\"city\":\"東京\"};get_time|{}"));
    /* an unclosed call at the end of generation still counts */
    CHECK(extract_is("<tool_call>{\"name\":\"get_time\",\"arguments\":{}}", false, "", "get_time|{}"));
    /* malformed: bad JSON, an unknown function, no name -> all of it is content */
    CHECK(extract_is("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": </tool_call>", false,
                     "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": </tool_call>", ""));
    CHECK(extract_is("<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", false,
                     "<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call>", ""));
    CHECK(extract_is("<tool_call>{\"arguments\":{}}</tool_call>", false, "<tool_call>{\"arguments\":{}}</tool_call>", ""));
    CHECK(extract_is("Just text, no call.", false, "Just text, no call.", ""));
}

TEST(parse_mistral)
{
    CHECK(extract_is("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcdefghi\"}]",
                     false, "", "get_weather|{\"city\":\"Paris\"}"));
    CHECK(extract_is("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]get_time[ARGS]{}", false, "",
                     "get_weather|{\"city\":\"Rome\"};get_time|{}"));
    CHECK(extract_is("[TOOL_CALLS][{\"name\": \"get_weather\"", false, "[TOOL_CALLS][{\"name\": \"get_weather\"", ""));
    CHECK(extract_is("[TOOL_CALLS]get_weather{\"city\": 1}", false, "[TOOL_CALLS]get_weather{\"city\": 1}", ""));
}

TEST(parse_llama3)
{
    CHECK(extract_is("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", false, "",
                     "get_weather|{\"city\":\"Oslo\"}"));
    CHECK(extract_is("<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}",
                     false, "", "get_time|{};get_weather|{\"city\":\"Lima\"}"));
    /* arguments given as JSON text */
    CHECK(extract_is("{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Kyiv\\\"}\"}", false, "",
                     "get_weather|{\"city\":\"Kyiv\"}"));
    /* JSON that is not a call is plain content */
    CHECK(extract_is("{\"answer\": 42}", false, "{\"answer\": 42}", ""));
    CHECK(extract_is("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}} and more", false,
                     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}} and more", ""));
}

#define DSB "<\xef\xbd\x9ctool\xe2\x96\x81"
TEST(parse_deepseek)
{
    CHECK(extract_is("Checking." DSB "calls\xe2\x96\x81" "begin\xef\xbd\x9c>" DSB "call\xe2\x96\x81" "begin\xef\xbd\x9c>function"
                     DSB "sep\xef\xbd\x9c>get_weather\n```json\n{\"city\": \"Paris\"}\n```" DSB "call\xe2\x96\x81" "end\xef\xbd\x9c>"
                     DSB "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
                     false, "Checking.", "get_weather|{\"city\":\"Paris\"}"));
    CHECK(extract_is(DSB "calls\xe2\x96\x81" "begin\xef\xbd\x9c>" DSB "call\xe2\x96\x81" "begin\xef\xbd\x9c>get_time" DSB
                     "sep\xef\xbd\x9c>{}" DSB "call\xe2\x96\x81" "end\xef\xbd\x9c>" DSB "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
                     false, "", "get_time|{}"));
    CHECK(extract_is(DSB "calls\xe2\x96\x81" "begin\xef\xbd\x9c>" DSB "call\xe2\x96\x81" "begin\xef\xbd\x9c>function" DSB
                     "sep\xef\xbd\x9c>get_weather\n```json\n{\"city\": ",
                     false,
                     DSB "calls\xe2\x96\x81" "begin\xef\xbd\x9c>" DSB "call\xe2\x96\x81" "begin\xef\xbd\x9c>function" DSB
                     "sep\xef\xbd\x9c>get_weather\n```json\n{\"city\": ",
                     ""));
}

TEST(parse_functionary)
{
    CHECK(extract_is("all\nLet me check.>>>get_weather\n{\"city\": \"Paris\"}", true, "Let me check.",
                     "get_weather|{\"city\":\"Paris\"}"));
    CHECK(extract_is("get_time\n{}>>>get_weather\n{\"city\": \"Nice\"}", true, "", "get_time|{};get_weather|{\"city\":\"Nice\"}"));
    CHECK(extract_is("all\nHello there.", true, "Hello there.", ""));
    CHECK(extract_is("get_weather\n{\"city\": ", true, "get_weather\n{\"city\": ", ""));
}

/* Streams text in pieces of `step` bytes; returns the content shown while
 * streaming, and at the end the rest and the calls. */
static int stream_is(const char *text, size_t step, const char *want_live, const char *want_rest, int want_calls)
{
    srv_tool_stream s;
    memset(&s, 0, sizeof s);
    srv_buf live = {0}, rest = {0};
    json_t *tools = weather_tools(), *calls = NULL;
    size_t n = strlen(text);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i += step) rc = srv_tool_stream_feed(&s, text + i, i + step <= n ? step : n - i, &live);
    if (!rc) rc = srv_tool_stream_finish(&s, tools, &rest, &calls);
    int ok = !rc && strcmp(live.p ? live.p : "", want_live) == 0 && strcmp(rest.p ? rest.p : "", want_rest) == 0 &&
             (int)json_array_size(calls) == want_calls;
    if (!ok) printf("  step %zu: live '%s' rest '%s' calls %zu\n", step, live.p ? live.p : "", rest.p ? rest.p : "", json_array_size(calls));
    srv_tool_stream_free(&s);
    srv_buf_free(&live), srv_buf_free(&rest);
    json_decref(calls);
    json_decref(tools);
    return ok;
}

TEST(tool_stream_holds_calls)
{
    const char *t = "Let me see. <tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>";
    for (size_t step = 1; step <= 8; step++) CHECK(stream_is(t, step, "Let me see. ", "", 1));
    /* a partial marker at the end is content after all */
    CHECK(stream_is("Text <tool_", 1, "Text ", "<tool_", 0));
    /* a reply that opens with '{' is held: a Llama 3 call, or content at the end */
    CHECK(stream_is("{\"name\": \"get_time\", \"parameters\": {}}", 3, "", "", 1));
    CHECK(stream_is("  {\"x\": 1}", 2, "", "  {\"x\": 1}", 0));
    /* a malformed call comes back as content at the end, nothing is lost */
    CHECK(stream_is("Hi [TOOL_CALLS]oops", 4, "Hi ", "[TOOL_CALLS]oops", 0));
}

static int think_is(const char *text, size_t step, bool open, const char *want_r, const char *want_c)
{
    srv_think t;
    srv_think_init(&t, open);
    srv_buf r = {0}, c = {0};
    size_t n = strlen(text);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i += step) rc = srv_think_feed(&t, text + i, i + step <= n ? step : n - i, &r, &c);
    if (!rc) rc = srv_think_finish(&t, &r, &c);
    int ok = !rc && strcmp(r.p ? r.p : "", want_r) == 0 && strcmp(c.p ? c.p : "", want_c) == 0;
    if (!ok) printf("  '%s' step %zu: reasoning '%s' content '%s'\n", text, step, r.p ? r.p : "", c.p ? c.p : "");
    srv_think_free(&t);
    srv_buf_free(&r), srv_buf_free(&c);
    return ok;
}

TEST(reasoning_split)
{
    for (size_t step = 1; step <= 9; step++) {
        CHECK(think_is("<think>\nSmall primes.\n</think>\n\nYes, 17 is prime.", step, false, "\nSmall primes.\n", "Yes, 17 is prime."));
        CHECK(think_is("Checking divisors.</think>Yes.", step, true, "Checking divisors.", "Yes."));
        CHECK(think_is("No thinking here <think>x</think>", step, false, "", "No thinking here <think>x</think>"));
    }
    CHECK(think_is("<think>cut off", 2, false, "cut off", ""));
    CHECK(think_is("<thi", 1, false, "", "<thi"));
    CHECK(think_is("  \n<think>a</think>b", 1, false, "a", "b"));
    CHECK(srv_think_prompt_open("<|im_start|>assistant\n<think>\n"));
    CHECK(!srv_think_prompt_open("<|im_start|>assistant\n"));
}

static bool has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

TEST(forced_call_grammar)
{
    json_t *tools = weather_tools();
    char *g = (char *)1;
    CHECK(srv_tools_forced_gbnf(tools, SRV_TOOL_AUTO, NULL, NULL, false, &g) == 0 && g == NULL);
    CHECK(srv_tools_forced_gbnf(tools, SRV_TOOL_NONE, NULL, NULL, false, &g) == 0 && g == NULL);
    /* required: either function, in Hermes/Qwen's <tool_call> block */
    CHECK(srv_tools_forced_gbnf(tools, SRV_TOOL_REQUIRED, NULL, "{{ '<tool_call>' }}", false, &g) == 0);
    CHECK(pl_grammar_check(g, strlen(g), NULL) == 0);
    CHECK(has(g, "<tool_call>") && has(g, "</tool_call>") && has(g, "get_weather") && has(g, "get_time"));
    CHECK(!has(g, "think"));
    free(g);
    /* named: that one only; Mistral's list; a think block closed first */
    CHECK(srv_tools_forced_gbnf(tools, SRV_TOOL_NAMED, "get_time", "[TOOL_CALLS]", true, &g) == 0);
    CHECK(pl_grammar_check(g, strlen(g), NULL) == 0);
    CHECK(has(g, "[TOOL_CALLS][") && has(g, "get_time") && !has(g, "get_weather") && has(g, "</think>"));
    free(g);
    /* no known marker: the bare object */
    CHECK(srv_tools_forced_gbnf(tools, SRV_TOOL_REQUIRED, NULL, "{{ messages }}", false, &g) == 0);
    CHECK(pl_grammar_check(g, strlen(g), NULL) == 0 && !has(g, "tool_call>") && !has(g, "TOOL_CALLS"));
    free(g);
    json_decref(tools);
    /* a parameters schema the compiler refuses is an error naming it */
    json_t *bad = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                             "\"properties\":{\"n\":{\"type\":\"integer\",\"multipleOf\":3}}}}}]", 0, NULL);
    g = NULL;
    CHECK(srv_tools_forced_gbnf(bad, SRV_TOOL_REQUIRED, NULL, NULL, false, &g) == PL_ERR_INVAL && g == NULL);
    CHECK(has(pl_last_error(), "multipleOf"));
    json_decref(bad);
}

/* ---------------------------------------------------------- requests */

static pl_model *model;
static srv_model_ctx mc;
static srv_tokens toks;

static int parse(const char *body, srv_gen_req *q, srv_error *e)
{
    memset(e, 0, sizeof *e);
    return srv_gen_req_parse(&mc, SRV_CHAT, body, strlen(body), q, e) == 0 ? 200 : e->status;
}

static int rejects(const char *body, const char *param, const char *text)
{
    srv_gen_req q;
    srv_error e;
    int st = parse(body, &q, &e);
    if (st == 200) { srv_gen_req_free(&q); printf("  accepted: %s\n", body); return 0; }
    int ok = st == 400 && e.param && strcmp(e.param, param) == 0 && strstr(e.message, text);
    if (!ok) printf("  %s -> %d param=%s msg=%s\n", body, st, e.param ? e.param : "null", e.message);
    return ok;
}

#define USER "\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}]"
#define TOOL "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"

TEST(tools_request_checks)
{
    CHECK(rejects("{" USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"x\"}}]}", "tools", "name is required"));
    CHECK(rejects("{" USER ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "tools", "may hold only"));
    CHECK(rejects("{" USER ",\"tools\":[{\"type\":\"retrieval\"}]}", "tools", "type must be"));
    CHECK(rejects("{" USER ",\"tools\":{}}", "tools", "must be an array"));
    CHECK(rejects("{" USER ",\"tools\":[" TOOL "],\"tool_choice\":\"sometimes\"}", "tool_choice", "must be"));
    CHECK(rejects("{" USER ",\"tools\":[" TOOL "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
                  "tool_choice", "not in 'tools'"));
    CHECK(rejects("{" USER ",\"tool_choice\":\"required\"}", "tool_choice", "no 'tools'"));
    CHECK(rejects("{" USER ",\"tools\":[" TOOL "],\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
                  "tool_choice", "cannot be combined"));
    CHECK(rejects("{" USER ",\"tools\":[" TOOL "],\"parallel_tool_calls\":\"yes\"}", "parallel_tool_calls", "boolean"));
    CHECK(rejects("{" USER ",\"functions\":[{\"name\":\"f\"}]}", "functions", "deprecated"));
    CHECK(rejects("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}]}", "messages", "only assistant"));
    CHECK(rejects("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{}}]}]}", "messages", "function.name"));
    CHECK(rejects("{\"messages\":[{\"role\":\"tool\",\"content\":null}]}", "messages", "needs content"));
    CHECK(rejects("{" USER ",\"chat_template_kwargs\":[1]}", "chat_template_kwargs", "must be an object"));
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse("{" USER ",\"tools\":[" TOOL "],\"tool_choice\":\"auto\",\"parallel_tool_calls\":false}", &q, &e), 200);
    CHECK(q.tools != NULL);
    srv_gen_req_free(&q);
    CHECK_EQ_INT(parse("{" USER ",\"tools\":[" TOOL "],\"tool_choice\":\"none\"}", &q, &e), 200);
    CHECK(q.tools == NULL); /* none: no calls are parsed out of the reply */
    srv_gen_req_free(&q);
    /* a forced call samples under a grammar of one call */
    CHECK_EQ_INT(parse("{" USER ",\"tools\":[" TOOL "],\"tool_choice\":\"required\"}", &q, &e), 200);
    CHECK(q.grammar != NULL && q.p.grammar == q.grammar && strstr(q.grammar, "get_weather"));
    srv_gen_req_free(&q);
    CHECK_EQ_INT(parse("{" USER ",\"tools\":[" TOOL "],\"tool_choice\":\"auto\"}", &q, &e), 200);
    CHECK(q.grammar == NULL);
    srv_gen_req_free(&q);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 20);
    size_t n = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

TEST(template_renders_tool_turns)
{
    char *tpl = slurp(QWEN);
    if (!tpl) { printf("SKIP template_renders_tool_turns: %s not found\n", QWEN); return; }
    mc.chat_template = tpl;
    srv_error e;
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":null,"
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}],\"tools\":[" TOOL "],\"add_generation_prompt\":false}";
    char *j = srv_apply_template(&mc, body, strlen(body), &e);
    mc.chat_template = NULL;
    CHECK_MSG(j != NULL, "%s", e.message);
    json_t *o = json_loads(j, 0, NULL);
    const char *p = json_string_value(json_object_get(o, "prompt"));
    /* arguments sent as JSON text reach the template as an object */
    CHECK(p && strstr(p, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
    CHECK(strstr(p, "<tool_response>\nsunny\n</tool_response>"));
    CHECK(strstr(p, "\"name\": \"get_weather\"}}\n</tools>"));
    CHECK(strstr(p, "<|im_start|>assistant\n") && p[strlen(p) - 1] == '\n');
    json_decref(o);
    free(j);
    free(tpl);
}

/* Qwen3's template needs string contents, DeepSeek-R1's joins arguments as
 * text: OpenAI's null content and JSON-text arguments render with both. */
TEST(templates_take_openai_shapes)
{
    const char *files[] = {SHARED_MODELS "/../templates/Qwen-Qwen3-0.6B.jinja",
                           SHARED_MODELS "/../templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"};
    const char *want[] = {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                          "get_weather\n```json\n{\"city\":\"Paris\"}\n```"};
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":null,"
                       "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                       "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"content\":\"sunny\"}]}";
    for (int i = 0; i < 2; i++) {
        char *tpl = slurp(files[i]);
        if (!tpl) { printf("SKIP templates_take_openai_shapes: %s not found\n", files[i]); return; }
        mc.chat_template = tpl;
        srv_error e;
        char *j = srv_apply_template(&mc, body, strlen(body), &e);
        mc.chat_template = NULL;
        free(tpl);
        CHECK_MSG(j != NULL, "%s: %s", files[i], e.message);
        json_t *o = json_loads(j, 0, NULL);
        const char *p = json_string_value(json_object_get(o, "prompt"));
        CHECK_MSG(p && strstr(p, want[i]), "%s: %s", files[i], p ? p : "(null)");
        json_decref(o);
        free(j);
    }
}

TEST(template_that_raises_is_400)
{
    mc.chat_template = "{% if messages[0].role != 'system' %}{{ raise_exception('A system message comes first!') }}{% endif %}x";
    CHECK(rejects("{" USER "}", "messages", "template raised: A system message comes first!"));
    mc.chat_template = "{% for %}";
    CHECK(rejects("{" USER "}", "messages", "template line 1"));
    mc.chat_template = NULL;
}

/* ---------------------------------------------------------- responses */

static pl_event ev_of(int kind, const char *text, const char *finish)
{
    pl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    snprintf(ev.text, sizeof ev.text, "%s", text);
    ev.text_len = strlen(text);
    ev.finish_reason = finish;
    ev.completion_tokens = 3;
    return ev;
}

TEST(response_has_tool_calls_and_reasoning)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse("{" USER ",\"tools\":[" TOOL "]}", &q, &e), 200);
    srv_result r;
    srv_result_init(&r, 1);
    pl_event a = ev_of(PL_EV_TOKEN, "<think>rain?</think>", NULL);
    pl_event b = ev_of(PL_EV_DONE, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>", "stop");
    CHECK(srv_result_add(&r, &q, &toks, &a) == 0 && srv_result_add(&r, &q, &toks, &b) == 0);
    char *j = srv_result_json(&r, &q, "chatcmpl-1", 1, "m");
    json_t *o = json_loads(j, 0, NULL);
    json_t *c = json_array_get(json_object_get(o, "choices"), 0), *m = json_object_get(c, "message");
    CHECK_STR(json_string_value(json_object_get(c, "finish_reason")), "tool_calls");
    CHECK(json_is_null(json_object_get(m, "content")));
    CHECK_STR(json_string_value(json_object_get(m, "reasoning_content")), "rain?");
    json_t *call = json_array_get(json_object_get(m, "tool_calls"), 0);
    CHECK_STR(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "get_weather");
    CHECK_STR(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"city\":\"Oslo\"}");
    json_decref(o);
    free(j);
    srv_result_free(&r);
    srv_gen_req_free(&q);
}

TEST(parallel_tool_calls_false_keeps_one)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse("{" USER ",\"parallel_tool_calls\":false,\"tools\":[" TOOL "]}", &q, &e), 200);
    srv_result r;
    srv_result_init(&r, 1);
    pl_event d = ev_of(PL_EV_DONE, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"A\"}}</tool_call>"
                                   "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"B\"}}</tool_call>", "stop");
    CHECK(srv_result_add(&r, &q, &toks, &d) == 0);
    char *j = srv_result_json(&r, &q, "chatcmpl-4", 1, "m");
    json_t *o = json_loads(j, 0, NULL);
    json_t *calls = json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message"), "tool_calls");
    CHECK(json_array_size(calls) == 1);
    CHECK_STR(json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments")), "{\"city\":\"A\"}");
    json_decref(o);
    free(j);
    srv_result_free(&r);
    srv_gen_req_free(&q);
}

TEST(stream_has_tool_call_deltas)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse("{" USER ",\"stream\":true,\"tools\":[" TOOL "]}", &q, &e), 200);
    const char *pieces[] = {"<think>", "cold?", "</th", "ink>\n", "Sure. <tool", "_call>{\"name\":\"get_weather\",",
                            "\"arguments\":{\"city\":\"Oslo\"}}</tool_call>"};
    srv_sse st;
    srv_sse_init(&st, &q, &toks, "chatcmpl-2", 1, "m");
    srv_buf b = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof pieces / sizeof pieces[0]; i++) {
        pl_event ev = ev_of(PL_EV_TOKEN, pieces[i], NULL);
        rc = srv_sse_event(&st, &ev, &b);
    }
    pl_event done = ev_of(PL_EV_DONE, "", "stop");
    if (!rc) rc = srv_sse_event(&st, &done, &b);
    if (!rc) rc = srv_sse_finish(&st, &b);
    srv_sse_free(&st);
    CHECK(rc == 0);
    /* collect the deltas */
    srv_buf reasoning = {0}, content = {0};
    json_t *calls = NULL;
    char finish[32] = "";
    for (const char *s = b.p; s && (s = strstr(s, "data: {")); s += 6) {
        const char *end = strstr(s, "\n\n");
        json_t *o = json_loadb(s + 6, (size_t)(end - s - 6), 0, NULL);
        json_t *c = json_array_get(json_object_get(o, "choices"), 0), *d = json_object_get(c, "delta");
        const char *rs = json_string_value(json_object_get(d, "reasoning_content"));
        const char *cs = json_string_value(json_object_get(d, "content"));
        if (rs) srv_buf_str(&reasoning, rs);
        if (cs) srv_buf_str(&content, cs);
        if (json_object_get(d, "tool_calls")) { json_decref(calls); calls = json_incref(json_object_get(d, "tool_calls")); }
        const char *fr = json_string_value(json_object_get(c, "finish_reason"));
        if (fr) snprintf(finish, sizeof finish, "%s", fr);
        json_decref(o);
    }
    CHECK_STR(reasoning.p, "cold?");
    CHECK_STR(content.p, "Sure. "); /* what was streamed before the call stays streamed */
    CHECK_STR(finish, "tool_calls");
    json_t *call = json_array_get(calls, 0);
    CHECK(json_integer_value(json_object_get(call, "index")) == 0);
    CHECK(strncmp(json_string_value(json_object_get(call, "id")), "call_", 5) == 0);
    CHECK_STR(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"city\":\"Oslo\"}");
    json_decref(calls);
    srv_buf_free(&reasoning), srv_buf_free(&content), srv_buf_free(&b);
    srv_gen_req_free(&q);
}

TEST(reasoning_format_none_keeps_text)
{
    mc.reasoning_format = SRV_REASONING_NONE;
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse("{" USER "}", &q, &e), 200);
    mc.reasoning_format = SRV_REASONING_DEEPSEEK;
    srv_result r;
    srv_result_init(&r, 1);
    pl_event d = ev_of(PL_EV_DONE, "<think>x</think>y", "stop");
    CHECK(srv_result_add(&r, &q, &toks, &d) == 0);
    char *j = srv_result_json(&r, &q, "chatcmpl-3", 1, "m");
    json_t *o = json_loads(j, 0, NULL);
    json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    CHECK_STR(json_string_value(json_object_get(m, "content")), "<think>x</think>y");
    CHECK(json_object_get(m, "reasoning_content") == NULL);
    json_decref(o);
    free(j);
    srv_result_free(&r);
    srv_gen_req_free(&q);
}

int main(void)
{
    RUN(parse_hermes);
    RUN(parse_mistral);
    RUN(parse_llama3);
    RUN(parse_deepseek);
    RUN(parse_functionary);
    RUN(tool_stream_holds_calls);
    RUN(reasoning_split);
    RUN(forced_call_grammar);
    FILE *f = fopen(MODEL, "rb");
    if (!f) { test_skip("server_tools_requests", MODEL " not found"); return test_summary(); }
    fclose(f);
    pl_file_info info;
    if (pl_model_load(&model, MODEL) != 0 || pl_file_inspect(MODEL, &info) != 0 ||
        srv_tokens_init(&toks, pl_model_vocab(model), info.tokenizer) != 0) {
        printf("FAIL setup: %s\n", pl_last_error());
        return 1;
    }
    mc.model = model;
    mc.vocab = pl_model_vocab(model);
    mc.n_ctx = 512;
    RUN(tools_request_checks);
    RUN(template_renders_tool_turns);
    RUN(templates_take_openai_shapes);
    RUN(template_that_raises_is_400);
    RUN(response_has_tool_calls_and_reasoning);
    RUN(parallel_tool_calls_false_keeps_one);
    RUN(stream_has_tool_call_deltas);
    RUN(reasoning_format_none_keeps_text);
    srv_tokens_free(&toks);
    pl_model_free(model);
    return test_summary();
}
