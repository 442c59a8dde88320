/* test_server_api.c - the request fields and endpoints beyond completions
 * and chat, in process: sampling fields (server_params.c), prompt lists,
 * echo, CORS origins and preflight headers (server_cors.c), /tokenize and
 * /detokenize (server_tokenize.c), /v1/embeddings parsing and base64
 * (server_embed.c, with a real engine for the answer's shape). The HTTP
 * side is tested end to end by tests/cli/test_serve_api.sh.
 *
 * Uses ../shared/models/stories260K.gguf; skips when it is absent.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server_cors.h"
#include "server_embed.h"
#include "server_openai.h"
#include "server_tokenize.h"
#include "server_tokens.h"

#include "test.h"

#define MODEL SHARED_MODELS "/stories260K.gguf"

static pl_model *model;
static srv_tokens toks;
static srv_model_ctx mc;

static int parse(const char *body, srv_gen_req *q, srv_error *e)
{
    memset(e, 0, sizeof *e);
    return srv_gen_req_parse(&mc, SRV_COMPLETIONS, body, strlen(body), q, e) == 0 ? 200 : e->status;
}

static int rejects(const char *body, const char *param, const char *text)
{
    srv_gen_req q;
    srv_error e;
    int st = parse(body, &q, &e);
    if (st == 200) { srv_gen_req_free(&q); printf("  accepted: %s\n", body); return 0; }
    int ok = st == 400 && (param ? e.param && strcmp(e.param, param) == 0 : e.param == NULL) && strstr(e.message, text);
    if (!ok) printf("  %s -> %d param=%s msg=%s\n", body, st, e.param ? e.param : "null", e.message);
    return ok;
}

TEST(sampling_fields_reach_the_params)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse("{\"prompt\":\"Hi\",\"max_tokens\":8,\"presence_penalty\":0.5,\"frequency_penalty\":-1.5,"
                       "\"logit_bias\":{\"5\":-100,\"7\":2.5},\"min_tokens\":3,\"stop_token_ids\":[2,9],\"best_of\":1}",
                       &q, &e), 200);
    CHECK_NEAR(q.p.sampling.presence_penalty, 0.5, 1e-6);
    CHECK_NEAR(q.p.sampling.frequency_penalty, -1.5, 1e-6);
    CHECK_EQ_INT(q.p.sampling.n_logit_bias, 2);
    CHECK(q.p.sampling.logit_bias == q.bias);
    bool seen5 = false, seen7 = false;
    for (size_t i = 0; i < q.p.sampling.n_logit_bias; i++) {
        seen5 |= q.bias[i].token == 5 && q.bias[i].bias == -100;
        seen7 |= q.bias[i].token == 7 && q.bias[i].bias == 2.5f;
    }
    CHECK(seen5 && seen7);
    CHECK_EQ_INT(q.p.min_tokens, 3);
    CHECK_EQ_INT(q.p.n_stop_token_ids, 2);
    CHECK(q.p.stop_token_ids == q.stop_ids && q.stop_ids[0] == 2 && q.stop_ids[1] == 9);
    srv_gen_req_free(&q);
    /* absent: off */
    CHECK_EQ_INT(parse("{\"prompt\":\"Hi\"}", &q, &e), 200);
    CHECK(q.p.sampling.presence_penalty == 0 && q.p.sampling.frequency_penalty == 0 && q.p.sampling.n_logit_bias == 0);
    CHECK(q.p.min_tokens == 0 && q.p.n_stop_token_ids == 0 && !q.echo);
    srv_gen_req_free(&q);
}

TEST(sampling_fields_refused_by_name)
{
    CHECK(rejects("{\"prompt\":\"Hi\",\"presence_penalty\":2.5}", "presence_penalty", "between -2 and 2"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"frequency_penalty\":\"a\"}", "frequency_penalty", "must be a number"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"logit_bias\":[1]}", "logit_bias", "must be an object"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"logit_bias\":{\"512\":1}}", "logit_bias", "not a token id"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"logit_bias\":{\"-1\":1}}", "logit_bias", "not a token id"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"logit_bias\":{\"3\":-101}}", "logit_bias", "between -100 and 100"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"logit_bias\":{\"3\":\"x\"}}", "logit_bias", "between -100 and 100"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"min_tokens\":-1}", "min_tokens", "between 0"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"max_tokens\":4,\"min_tokens\":5}", "min_tokens", "larger than max_tokens"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"stop_token_ids\":5}", "stop_token_ids", "must be an array"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"stop_token_ids\":[1,\"a\"]}", "stop_token_ids", "stop_token_ids[1]"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"best_of\":2}", "best_of", "not supported"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"n\":2,\"best_of\":3}", "best_of", "equal to n (2)"));
    CHECK(rejects("{\"prompt\":\"Hi\",\"echo\":\"yes\"}", "echo", "must be a boolean"));
    char big[2048];
    char *p = big + sprintf(big, "{\"prompt\":\"Hi\",\"stop_token_ids\":[");
    for (int i = 0; i < 65; i++) p += sprintf(p, i ? ",%d" : "%d", i);
    strcpy(p, "]}");
    CHECK(rejects(big, "stop_token_ids", "at most 64"));
}

TEST(echo_and_prompt_lists)
{
    srv_gen_req q;
    srv_error e;
    CHECK_EQ_INT(parse("{\"prompt\":\"Once upon\",\"echo\":true}", &q, &e), 200);
    CHECK_STR(q.echo, "Once upon");
    CHECK(!q.p.prompt_logprobs);
    srv_gen_req_free(&q);
    CHECK_EQ_INT(parse("{\"prompt\":\"Once upon\",\"echo\":true,\"logprobs\":2}", &q, &e), 200);
    CHECK(q.p.prompt_logprobs && q.p.top_logprobs == 2);
    srv_gen_req_free(&q);
    CHECK_EQ_INT(parse("{\"prompt\":[1,403,407],\"echo\":true}", &q, &e), 200);
    CHECK(q.echo && q.echo_len > 0);
    char *want = NULL;
    size_t n = 0;
    CHECK(pl_detokenize(mc.vocab, (const int32_t[]){1, 403, 407}, 3, &want, &n) == 0);
    CHECK_STR(q.echo, want);
    pl_free(want);
    srv_gen_req_free(&q);
    CHECK_EQ_INT(parse("{\"prompt\":[\"a b\",[1,5,6,7],\"c\"],\"n\":2}", &q, &e), 200);
    CHECK_EQ_INT(q.n_prompts, 3);
    CHECK_EQ_INT(srv_gen_req_choices(&q), 6);
    CHECK_EQ_INT(q.more_n[0], 4);
    CHECK(q.more[0][0] == 1 && q.more[0][3] == 7 && q.more_n[1] >= 1);
    CHECK(q.p.prompt == q.prompt && q.p.n_prompt == q.n_prompt && q.n_prompt >= 1);
    srv_gen_req_free(&q);
    /* the longest prompt decides the context rule (n_ctx 32 here) */
    CHECK(rejects("{\"prompt\":[\"a\",[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32]]}",
                  "prompt", "maximum context length"));
    CHECK(rejects("{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\"],\"n\":3}", "prompt", "at most 16"));
    CHECK(rejects("{\"prompt\":[\"a\",\"\"]}", "prompt", "empty"));
}

TEST(cors_origins)
{
    srv_cors c = {0};
    char err[300];
    CHECK(srv_cors_add(&c, "http://a.example, https://b.example:8443", err, sizeof err) == 0);
    CHECK(srv_cors_add(&c, "http://[::1]:3000", err, sizeof err) == 0);
    CHECK_EQ_INT(c.n, 3);
    CHECK_STR(srv_cors_allow(&c, "http://a.example"), "http://a.example");
    CHECK_STR(srv_cors_allow(&c, "https://b.example:8443"), "https://b.example:8443");
    CHECK(srv_cors_allow(&c, "https://b.example") == NULL);
    CHECK(srv_cors_allow(&c, "http://evil.example") == NULL);
    CHECK(srv_cors_allow(&c, NULL) == NULL);
    const char *bad[] = {"a.example", "http://a.example/path", "http://", "://x", "http://a b", "ht tp://a", "http://a\r\nX: y"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(srv_cors_add(&c, bad[i], err, sizeof err) == -1, "accepted %s", bad[i]);
        CHECK(strstr(err, "--cors-origin"));
    }
    CHECK(srv_cors_add(&c, "*", err, sizeof err) == 0);
    CHECK_STR(srv_cors_allow(&c, "http://evil.example"), "*");
    srv_cors_free(&c);
    CHECK_STR(srv_cors_allow(&c, NULL), "*"); /* empty list: any */
    char h[200];
    srv_cors_allow_headers("x-stainless-os, Content-Type", h, sizeof h);
    CHECK_STR(h, "Authorization, Content-Type, x-stainless-os, Content-Type");
    srv_cors_allow_headers("x\r\nSet-Cookie: a", h, sizeof h);
    CHECK_STR(h, "Authorization, Content-Type");
    srv_cors_allow_headers(NULL, h, sizeof h);
    CHECK_STR(h, "Authorization, Content-Type");
}

static json_t *tokenize(const char *body, srv_error *e) { return srv_tokenize(&mc, &toks, body, strlen(body), e); }

TEST(tokenize_and_detokenize)
{
    srv_error e;
    json_t *o = tokenize("{\"content\":\"Hello world\"}", &e);
    CHECK(o && json_array_size(json_object_get(o, "tokens")) >= 2);
    int32_t ids[64];
    size_t n = 0;
    json_t *v;
    size_t i;
    json_array_foreach(json_object_get(o, "tokens"), i, v) if (n < 64) ids[n++] = (int32_t)json_integer_value(v);
    CHECK(ids[0] != 1); /* no BOS unless add_special */
    json_decref(o);
    o = tokenize("{\"content\":\"Hello world\",\"add_special\":true,\"with_pieces\":true}", &e);
    json_t *t0 = o ? json_array_get(json_object_get(o, "tokens"), 0) : NULL;
    CHECK(t0 && json_integer_value(json_object_get(t0, "id")) == 1 && json_is_string(json_object_get(t0, "piece")));
    json_decref(o);
    /* a byte token that is not UTF-8 on its own comes as bytes */
    o = tokenize("{\"content\":\"\\u65e5\",\"with_pieces\":true}", &e); /* 日: byte tokens here */
    bool bytes = false;
    json_array_foreach(json_object_get(o, "tokens"), i, v) bytes |= json_is_array(json_object_get(v, "piece"));
    CHECK(o && bytes);
    json_decref(o);
    char body[512];
    char *p = body + sprintf(body, "{\"tokens\":[");
    for (size_t k = 0; k < n; k++) p += sprintf(p, k ? ",%d" : "%d", ids[k]);
    strcpy(p, "]}");
    o = srv_detokenize(&mc, body, strlen(body), &e);
    CHECK(o && strcmp(json_string_value(json_object_get(o, "content")), "Hello world") == 0);
    json_decref(o);
    const struct { const char *body, *param, *text; bool detok; } bad[] = {
        {"{\"content\":5}", "content", "must be a string", false},
        {"{}", "content", "required", false},
        {"{\"content\":\"a\",\"with_pieces\":1}", "with_pieces", "must be a boolean", false},
        {"[1]", NULL, "JSON object", false},
        {"{\"tokens\":[1,512]}", "tokens", "tokens[1]", true},
        {"{\"tokens\":[1.5]}", "tokens", "tokens[0]", true},
        {"{\"tokens\":\"1\"}", "tokens", "array of token ids", true},
        {"{\"tokens\":", NULL, "invalid JSON", true},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memset(&e, 0, sizeof e);
        o = bad[k].detok ? srv_detokenize(&mc, bad[k].body, strlen(bad[k].body), &e) : tokenize(bad[k].body, &e);
        CHECK_MSG(!o && e.status == 400 && (bad[k].param ? e.param && !strcmp(e.param, bad[k].param) : !e.param) &&
                      strstr(e.message, bad[k].text),
                  "%s -> %d %s %s", bad[k].body, e.status, e.param ? e.param : "null", e.message);
        json_decref(o);
    }
}

TEST(base64_is_rfc4648)
{
    const struct { const char *in, *out; } v[] = {{"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"},
                                                  {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char *s = srv_base64((const unsigned char *)v[i].in, strlen(v[i].in));
        CHECK(s && strcmp(s, v[i].out) == 0);
        free(s);
    }
    const unsigned char hi[3] = {0xff, 0xfe, 0x80};
    char *s = srv_base64(hi, 3);
    CHECK(s && strcmp(s, "//6A") == 0);
    free(s);
}

/* Byte i of the data base64 string s encodes. */
static unsigned char b64_byte(const char *s, uint32_t i)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *q = s + i / 3 * 4;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v = v << 6 | (uint32_t)(q[k] == '=' ? 0 : strchr(tab, q[k]) - tab);
    return (unsigned char)(v >> (16 - 8 * (i % 3)));
}

static int embed(pl_engine *eng, const char *body, char **out, srv_error *e)
{
    memset(e, 0, sizeof *e);
    *out = NULL;
    return srv_embed_run(eng, &mc, "m", body, strlen(body), NULL, NULL, out, e);
}

TEST(embeddings_request)
{
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.n_ctx = 64;
    ep.ctx.max_seqs = 4;
    ep.ctx.n_threads = 1;
    ep.max_queue = 2; /* a list longer than the queue waits for room */
    ep.gather_us = 0;
    pl_engine *eng = NULL;
    CHECK(pl_engine_new(&eng, model, &ep) == 0);
    if (!eng) return;
    char *out;
    srv_error e;
    CHECK(embed(eng, "{\"input\":[\"a cat\",\"a dog\",[1,5,6],\"x\",\"y\"],\"encoding_format\":\"float\"}", &out, &e) == 0);
    json_t *o = out ? json_loads(out, 0, NULL) : NULL;
    CHECK(o && json_array_size(json_object_get(o, "data")) == 5);
    json_t *d2 = json_array_get(json_object_get(o, "data"), 2);
    CHECK(json_integer_value(json_object_get(d2, "index")) == 2);
    CHECK(json_array_size(json_object_get(d2, "embedding")) == pl_model_n_embd(model));
    CHECK(json_integer_value(json_object_get(json_object_get(o, "usage"), "prompt_tokens")) >= 9);
    json_decref(o);
    free(out);
    /* base64 holds the same floats, little-endian (one input: the same batch as the float answer) */
    static float fl[4096];
    uint32_t dim = pl_model_n_embd(model);
    CHECK(embed(eng, "{\"input\":[[1,5,6]]}", &out, &e) == 0);
    o = out ? json_loads(out, 0, NULL) : NULL;
    json_t *arr = json_object_get(json_array_get(json_object_get(o, "data"), 0), "embedding");
    for (uint32_t k = 0; k < dim && k < 4096; k++) fl[k] = (float)json_real_value(json_array_get(arr, k));
    json_decref(o);
    free(out);
    CHECK(embed(eng, "{\"input\":[[1,5,6]],\"encoding_format\":\"base64\"}", &out, &e) == 0);
    o = out ? json_loads(out, 0, NULL) : NULL;
    const char *b = json_string_value(json_object_get(json_array_get(json_object_get(o, "data"), 0), "embedding"));
    CHECK(b && strlen(b) == (dim * 4 + 2) / 3 * 4);
    for (uint32_t k = 0; b && k < dim && k * 4 + 4 <= strlen(b) / 4 * 3; k++) {
        unsigned char fb[4];
        for (int j = 0; j < 4; j++) fb[j] = b64_byte(b, k * 4 + (uint32_t)j);
        uint32_t u = (uint32_t)fb[0] | (uint32_t)fb[1] << 8 | (uint32_t)fb[2] << 16 | (uint32_t)fb[3] << 24;
        float x;
        memcpy(&x, &u, 4);
        CHECK_MSG(x == fl[k], "float %u: base64 %g, float answer %g", k, x, fl[k]);
        if (x != fl[k]) break;
    }
    json_decref(o);
    free(out);
    const struct { const char *body, *param, *text; } bad[] = {
        {"{}", "input", "required"},
        {"{\"input\":\"\"}", "input", "empty string"},
        {"{\"input\":[]}", "input", "empty"},
        {"{\"input\":5}", "input", "must be a string"},
        {"{\"input\":[\"a\",5]}", "input", "input[1]"},
        {"{\"input\":[[1,2],[]]}", "input", "input[1]"},
        {"{\"input\":[[1,512]]}", "input", "input[0][1]"},
        {"{\"input\":\"a\",\"encoding_format\":\"int8\"}", "encoding_format", "float"},
        {"{\"input\":\"a\",\"dimensions\":32}", "dimensions", "64 dimensions"},
        {"{\"input\":\"a\",\"dimensions\":\"64\"}", "dimensions", "integer"},
        {"[\"a\"]", NULL, "JSON object"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int rc = embed(eng, bad[k].body, &out, &e);
        CHECK_MSG(rc == -1 && !out && e.status == 400 &&
                      (bad[k].param ? e.param && !strcmp(e.param, bad[k].param) : !e.param) && strstr(e.message, bad[k].text),
                  "%s -> %d %s %s", bad[k].body, e.status, e.param ? e.param : "null", e.message);
    }
    char big[1024];
    char *p = big + sprintf(big, "{\"input\":[[");
    for (int i = 0; i < 65; i++) p += sprintf(p, i ? ",%d" : "%d", 5);
    strcpy(p, "]]}");
    CHECK(embed(eng, big, &out, &e) == -1 && e.code && !strcmp(e.code, "context_length_exceeded"));
    CHECK(embed(eng, "{\"input\":\"a\",\"dimensions\":64}", &out, &e) == 0);
    free(out);
    pl_engine_metrics m;
    pl_engine_metrics_get(eng, &m);
    CHECK_EQ_INT(m.kv.blocks_used, 0);
    pl_engine_free(eng);
}

int main(void)
{
    RUN(cors_origins);
    RUN(base64_is_rfc4648);
    FILE *f = fopen(MODEL, "rb");
    if (!f) { test_skip("server_api", MODEL " not found"); return test_summary(); }
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
    RUN(sampling_fields_reach_the_params);
    RUN(sampling_fields_refused_by_name);
    RUN(echo_and_prompt_lists);
    RUN(tokenize_and_detokenize);
    mc.n_ctx = 64;
    RUN(embeddings_request);
    srv_tokens_free(&toks);
    pl_model_free(model);
    return test_summary();
}
