/* test_engine_grammar.c - grammar-constrained sampling through the engine
 * on stories260K (a model that knows nothing of JSON): at temperature 1
 * over many seeds every completion parses and validates against its
 * schema; greedy and n > 1 too; logprobs come from the masked row; a bad
 * grammar is refused at submit with its position; a forced tool call. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "pagellm.h"

#define STORIES SHARED_MODELS "/stories260K.gguf"

static pl_model *M;
static pl_engine *E;

/* Runs one request; out gets completion i's text. 0 ok. */
static int run(const char *grammar, float temp, uint64_t seed, int n, int top_logprobs, char out[][1024],
               const char **reasons, float *min_lp)
{
    int32_t *ids = NULL;
    size_t n_ids = 0;
    const pl_vocab *v = pl_model_vocab(M);
    const char *prompt = "Once upon a time";
    if (pl_tokenize(v, prompt, strlen(prompt), true, false, &ids, &n_ids)) return -1;
    pl_request_params p = {.prompt = ids, .n_prompt = n_ids, .max_tokens = 400, .n = n, .top_logprobs = top_logprobs,
                           .grammar = grammar};
    pl_sampler_params_default(&p.sampling);
    p.sampling.temperature = temp;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1;
    p.sampling.min_p = 0;
    p.sampling.seed = seed;
    pl_request *r = NULL;
    int rc = pl_engine_submit(E, &p, &r);
    pl_free(ids);
    if (rc) return rc;
    for (int i = 0; i < n; i++) out[i][0] = 0;
    size_t len[16] = {0};
    pl_event ev;
    int k;
    while ((k = pl_request_next(r, &ev, 60000)) == 1) {
        if (ev.kind == PL_EV_ERROR) { fprintf(stderr, "error: %s\n", ev.message); rc = -1; }
        if (ev.kind == PL_EV_TOKEN && min_lp && ev.logprob < *min_lp) *min_lp = ev.logprob;
        if (ev.kind == PL_EV_DONE) reasons[ev.index] = ev.finish_reason;
        if ((ev.kind == PL_EV_TOKEN || ev.kind == PL_EV_DONE) && len[ev.index] + ev.text_len < 1024) {
            memcpy(out[ev.index] + len[ev.index], ev.text, ev.text_len);
            len[ev.index] += ev.text_len;
            out[ev.index][len[ev.index]] = 0;
        }
    }
    pl_request_free(r);
    return k == 2 ? rc : -1;
}

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"
    "\"age\":{\"type\":\"integer\"},\"pet\":{\"enum\":[\"cat\",\"dog\",null]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":3}},"
    "\"required\":[\"name\",\"age\",\"pet\"],\"additionalProperties\":false}";

/* The schema's checks, written out. */
static int person_ok(const char *text)
{
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    if (!o) return 0;
    json_t *name = json_object_get(o, "name"), *age = json_object_get(o, "age"), *pet = json_object_get(o, "pet");
    json_t *tags = json_object_get(o, "tags");
    size_t nk = 3 + (tags != NULL);
    int ok = json_is_object(o) && json_object_size(o) == nk && json_is_string(name) && json_is_integer(age) && pet &&
             (json_is_null(pet) || (json_is_string(pet) && (!strcmp(json_string_value(pet), "cat") ||
                                                            !strcmp(json_string_value(pet), "dog"))));
    if (ok) {
        const char *s = json_string_value(name);
        size_t cps = 0;
        for (; *s; s++) cps += ((unsigned char)*s & 0xC0) != 0x80;
        ok = cps <= 6;
    }
    if (ok && tags) {
        ok = json_is_array(tags) && json_array_size(tags) <= 3;
        size_t i;
        json_t *t;
        json_array_foreach(tags, i, t) ok &= json_is_boolean(t);
    }
    json_decref(o);
    return ok;
}

TEST(sampled_json_always_parses_and_validates)
{
    char *gbnf = NULL;
    CHECK_MSG(pl_json_schema_to_gbnf(SCHEMA, strlen(SCHEMA), &gbnf) == 0, "%s", pl_last_error());
    static char out[16][1024];
    const char *reasons[16];
    int n_ok = 0;
    for (uint64_t seed = 1; seed <= 24; seed++) {
        CHECK_MSG(run(gbnf, 1.0f, seed * 7919, 1, -1, out, reasons, NULL) == 0, "seed %llu", (unsigned long long)seed);
        CHECK_MSG(reasons[0] && !strcmp(reasons[0], "stop"), "seed %llu ended %s: %.300s", (unsigned long long)seed,
                  reasons[0] ? reasons[0] : "?", out[0]);
        CHECK_MSG(person_ok(out[0]), "seed %llu: %.300s", (unsigned long long)seed, out[0]);
        n_ok++;
    }
    INFO("24 of 24 sampled completions valid, e.g. %.200s", out[0]);
    pl_free(gbnf);
    CHECK_EQ_INT(n_ok, 24);
}

TEST(greedy_and_n4_with_logprobs_follow_the_grammar)
{
    const char *g = "root ::= \"{\\\"ok\\\": \" (\"true\" | \"false\") \", \\\"n\\\": \" [1-9] [0-9]? \"}\"\n";
    static char out[16][1024];
    const char *reasons[16];
    float min_lp = 0;
    CHECK_MSG(run(g, 0.0f, 1, 1, 2, out, reasons, &min_lp) == 0, "%s", pl_last_error());
    json_t *o = json_loads(out[0], 0, NULL);
    CHECK_MSG(o && json_is_boolean(json_object_get(o, "ok")) && json_is_integer(json_object_get(o, "n")), "%.300s", out[0]);
    json_decref(o);
    /* the masked row: a forced token has logprob 0, none is -inf */
    CHECK(isfinite(min_lp));
    CHECK_EQ_INT(run(g, 1.0f, 5, 4, -1, out, reasons, NULL), 0);
    for (int i = 0; i < 4; i++) {
        o = json_loads(out[i], 0, NULL);
        CHECK_MSG(o && json_is_boolean(json_object_get(o, "ok")), "completion %d: %.300s", i, out[i]);
        json_decref(o);
        CHECK(!strcmp(reasons[i], "stop"));
    }
}

TEST(forced_tool_call_matches_its_schema)
{
    pl_tool_fn fn = {"get_weather",
                     "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":10},"
                     "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\",\"days\"],\"additionalProperties\":false}"};
    char *gbnf = NULL;
    CHECK_MSG(pl_tool_call_gbnf(&fn, 1, "<tool_call>\n", "</tool_call>", &gbnf) == 0, "%s", pl_last_error());
    static char out[16][1024];
    const char *reasons[16];
    for (uint64_t seed = 1; seed <= 6; seed++) {
        CHECK_EQ_INT(run(gbnf, 1.0f, seed, 1, -1, out, reasons, NULL), 0);
        const char *a = out[0], *pre = "<tool_call>\n", *suf = "</tool_call>";
        size_t n = strlen(a);
        CHECK_MSG(!strncmp(a, pre, strlen(pre)) && n > strlen(pre) + strlen(suf) && !strcmp(a + n - strlen(suf), suf), "%.300s", a);
        char body[1024];
        size_t bn = n - strlen(pre) - strlen(suf);
        memcpy(body, a + strlen(pre), bn);
        body[bn] = 0;
        json_t *o = json_loads(body, 0, NULL);
        json_t *args = json_object_get(o, "arguments");
        CHECK_MSG(o && !strcmp(json_string_value(json_object_get(o, "name")), "get_weather") &&
                      json_is_string(json_object_get(args, "city")) && json_is_integer(json_object_get(args, "days")),
                  "%.300s", a);
        json_decref(o);
    }
    pl_free(gbnf);
}

TEST(bad_grammar_is_refused_at_submit)
{
    int32_t ids[2] = {1, 2};
    pl_request_params p = {.prompt = ids, .n_prompt = 2, .max_tokens = 4, .n = 1, .top_logprobs = -1,
                           .grammar = "root ::= \"a\" | (\"b\"\n"};
    pl_sampler_params_default(&p.sampling);
    pl_request *r = NULL;
    CHECK_EQ_INT(pl_engine_submit(E, &p, &r), PL_ERR_INVAL);
    CHECK_MSG(strstr(pl_last_error(), "line 1, column 16: expected ')'"), "%s", pl_last_error());
    CHECK(pl_grammar_check("root ::= x\n", 11, NULL) == PL_ERR_INVAL);
    CHECK(strstr(pl_last_error(), "'x' is used but never defined"));
}

int main(void)
{
    if (pl_model_load(&M, STORIES) != 0) {
        printf("FAIL load %s: %s\n", STORIES, pl_last_error());
        return 1;
    }
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.n_ctx = 512;
    ep.ctx.max_seqs = 4;
    ep.ctx.n_threads = 1;
    ep.gather_us = 0;
    if (pl_engine_new(&E, M, &ep) != 0) {
        printf("FAIL engine: %s\n", pl_last_error());
        return 1;
    }
    RUN(sampled_json_always_parses_and_validates);
    RUN(greedy_and_n4_with_logprobs_follow_the_grammar);
    RUN(forced_tool_call_matches_its_schema);
    RUN(bad_grammar_is_refused_at_submit);
    pl_engine_free(E);
    pl_model_free(M);
    return test_summary();
}
