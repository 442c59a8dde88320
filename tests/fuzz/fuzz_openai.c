/* fuzz_openai.c - libFuzzer target for the OpenAI request parser of `pagellm
 * serve` (server/server_openai.c: body -> srv_gen_req, the same call the
 * HTTP layer makes) over a real model and its tokenizer.
 *
 * Model: $FUZZ_OPENAI_MODEL (tests/fuzz/run.sh passes stories260K.gguf),
 * loaded once.
 *
 * Input: byte 0 chooses, the rest is the request body.
 *   bit 0    /v1/chat/completions (else /v1/completions)
 *   bit 1    a --kv-window server (the context does not bound a completion)
 *   bits 2-3 the context: 8, 64, 256 or 4096 tokens
 *   bit 4    a random seed per request (else the server's)
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - a refused body gives a 4xx (or a 503 out_of_memory) with a message,
 *     and its error object serializes to JSON with error.message;
 *   - an accepted body gives a request pl_engine_submit can take: 1..n_ctx-1
 *     prompt ids inside the vocabulary, 1 <= max_tokens, prompt + max_tokens
 *     within the context (without a window), n in 1..SRV_MAX_N, at most
 *     SRV_MAX_STOPS stop strings shorter than PL_MAX_STOP_LEN, top_logprobs
 *     in -1..PL_MAX_TOP_LOGPROBS;
 *   - nothing leaks (LeakSanitizer) and nothing is read out of bounds.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagellm.h"
#include "server_openai.h"

static pl_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *path = getenv("FUZZ_OPENAI_MODEL");
    if (!path || pl_model_load(&model, path) != 0) {
        fprintf(stderr, "fuzz_openai: set FUZZ_OPENAI_MODEL to a GGUF model (%s)\n", path ? pl_last_error() : "unset");
        exit(2);
    }
    return 0;
}

static void fail(const char *what, const char *body)
{
    fprintf(stderr, "fuzz_openai: broken property: %s (body: %.200s)\n", what, body);
    abort();
}

static void check_error(const srv_error *e, const char *body)
{
    bool oom = e->status == 503 && e->code && strcmp(e->code, "out_of_memory") == 0;
    if (!oom && (e->status < 400 || e->status > 499)) fail("a refusal that is not a 4xx", body);
    if (!e->message[0] || !e->type) fail("a refusal without a message or a type", body);
    char *j = srv_error_json(e);
    if (!j) fail("the error object does not serialize", body);
    json_error_t je;
    json_t *o = json_loads(j, 0, &je);
    if (!o || !json_is_string(json_object_get(json_object_get(o, "error"), "message")))
        fail("the error body is not {\"error\": {\"message\"...}}", body);
    json_decref(o);
    free(j);
}

static void check_request(const srv_model_ctx *mc, const srv_gen_req *q, const char *body)
{
    const pl_request_params *p = &q->p;
    const int32_t nv = pl_vocab_size(mc->vocab);
    if (p->n_prompt == 0 || p->prompt != q->prompt || p->n_prompt != q->n_prompt) fail("no prompt", body);
    for (size_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= nv) fail("a prompt id outside the vocabulary", body);
    if (p->max_tokens < 1) fail("max_tokens < 1", body);
    if (!mc->kv_window && (uint64_t)p->n_prompt + (uint64_t)p->max_tokens > mc->n_ctx)
        fail("prompt + max_tokens past the context", body);
    if (p->n < 1 || p->n > SRV_MAX_N) fail("n outside 1..SRV_MAX_N", body);
    if (p->n_stops > SRV_MAX_STOPS || p->n_stops != q->n_stops) fail("too many stop strings", body);
    for (size_t i = 0; i < p->n_stops; i++)
        if (!p->stops[i] || strlen(p->stops[i]) >= PL_MAX_STOP_LEN) fail("a stop string too long", body);
    if (p->top_logprobs < -1 || p->top_logprobs > PL_MAX_TOP_LOGPROBS) fail("top_logprobs out of range", body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const uint32_t ctxs[4] = {8, 64, 256, 4096};
    const uint8_t sel = data[0];
    srv_model_ctx mc;
    memset(&mc, 0, sizeof mc);
    mc.model = model;
    mc.vocab = pl_model_vocab(model);
    mc.n_ctx = ctxs[(sel >> 2) & 3];
    mc.kv_window = (sel & 2) ? mc.n_ctx / 2 : 0;
    pl_sampler_params_default(&mc.defaults);
    mc.random_seed = (sel & 16) != 0;
    mc.completions_max_tokens = 16;
    /* a NUL-terminated copy, so that a failure message can print it */
    char *body = malloc(size);
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    srv_gen_req q;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_gen_req_parse(&mc, (sel & 1) ? SRV_CHAT : SRV_COMPLETIONS, body, size - 1, &q, &e) == 0) {
        check_request(&mc, &q, body);
        srv_gen_req_free(&q);
    } else {
        check_error(&e, body);
    }
    free(body);
    return 0;
}
