/* fuzz_server.c - libFuzzer target for the server's request parsers over
 * stories260K: completions and chat bodies (sampling fields, logit_bias,
 * stop_token_ids, prompt lists, echo), /tokenize, /detokenize,
 * /v1/embeddings bodies (parsing and validation; no engine is given, so an
 * accepted body ends in the submit error) and --cors-origin lists with the
 * preflight header echo.
 *
 * Input: byte 0 chooses the parser, the rest is the body.
 *   0 completions  1 chat  2 tokenize  3 detokenize  4 embeddings  5 CORS
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - every parser returns an answer or an error, never both, never neither;
 *   - an error is a 4xx/5xx with a message, and its param (when set) is a
 *     field name the parser knows;
 *   - an accepted request's params are in range: n x prompts <= 16, logit
 *     bias ids inside the vocabulary and biases in -100..100, stop ids
 *     inside the vocabulary, min_tokens <= max_tokens when given, penalties
 *     in -2..2, every prompt token inside the vocabulary;
 *   - preflight Allow-Headers never carries CR or LF.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_cors.h"
#include "server_embed.h"
#include "server_openai.h"
#include "server_tokenize.h"
#include "server_tokens.h"

#define MODEL "../shared/models/stories260K.gguf"

static pl_model *model;
static srv_tokens toks;
static srv_model_ctx mc;

static void need(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "broken property: %s\n", what);
        abort();
    }
}

static void setup(void)
{
    if (model) return;
    pl_file_info info;
    if (pl_model_load(&model, MODEL) != 0 || pl_file_inspect(MODEL, &info) != 0) {
        fprintf(stderr, "fuzz_server: cannot load %s: %s\n", MODEL, pl_last_error());
        exit(2);
    }
    mc.model = model;
    mc.vocab = pl_model_vocab(model);
    mc.n_ctx = 64;
    pl_sampler_params_default(&mc.defaults);
    mc.completions_max_tokens = 16;
    if (srv_tokens_init(&toks, mc.vocab, info.tokenizer) != 0) exit(2);
}

static void check_error(const srv_error *e)
{
    need(e->status >= 400 && e->status < 600 && e->message[0], "an error has a status and a message");
}

static void check_ids(const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) need(ids[i] >= 0 && ids[i] < pl_vocab_size(mc.vocab), "prompt ids in the vocabulary");
}

static void check_request(const srv_gen_req *q)
{
    const pl_request_params *p = &q->p;
    need(p->n >= 1 && srv_gen_req_choices(q) <= SRV_MAX_N, "choices <= 16");
    need(q->n_prompts >= 1 && p->prompt == q->prompt && p->n_prompt == q->n_prompt && q->n_prompt > 0, "prompt set");
    check_ids(q->prompt, q->n_prompt);
    for (int i = 1; i < q->n_prompts; i++) check_ids(q->more[i - 1], q->more_n[i - 1]);
    for (size_t i = 0; i < p->sampling.n_logit_bias; i++) {
        const pl_logit_bias *b = &p->sampling.logit_bias[i];
        need(b->token >= 0 && b->token < pl_vocab_size(mc.vocab) && b->bias >= -100 && b->bias <= 100, "logit_bias in range");
    }
    for (size_t i = 0; i < p->n_stop_token_ids; i++)
        need(p->stop_token_ids[i] >= 0 && p->stop_token_ids[i] < pl_vocab_size(mc.vocab), "stop ids in range");
    need(p->sampling.presence_penalty >= -2 && p->sampling.presence_penalty <= 2, "presence_penalty in range");
    need(p->sampling.frequency_penalty >= -2 && p->sampling.frequency_penalty <= 2, "frequency_penalty in range");
    need(!q->max_tokens_given || p->min_tokens <= p->max_tokens, "min_tokens <= max_tokens");
    need(!q->echo || q->kind == SRV_COMPLETIONS, "echo only on completions");
}

static void fuzz_cors(const char *s)
{
    srv_cors c = {0};
    char err[300], h[1200];
    if (srv_cors_add(&c, s, err, sizeof err) != 0) need(strstr(err, "--cors-origin") || strstr(err, "memory"), "cors error names the flag");
    for (int i = 0; i < c.n; i++) need(srv_cors_allow(&c, c.origin[i]) != NULL, "a listed origin is allowed");
    srv_cors_allow_headers(s, h, sizeof h);
    need(!strpbrk(h, "\r\n"), "no CR/LF in Allow-Headers");
    srv_cors_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_error e;
    memset(&e, 0, sizeof e);
    switch (data[0] % 6) {
    case 0:
    case 1: {
        srv_gen_req q;
        if (srv_gen_req_parse(&mc, data[0] % 6 ? SRV_CHAT : SRV_COMPLETIONS, body, len, &q, &e) == 0) {
            check_request(&q);
            srv_gen_req_free(&q);
        } else {
            check_error(&e);
        }
        break;
    }
    case 2:
    case 3: {
        json_t *o = data[0] % 6 == 2 ? srv_tokenize(&mc, &toks, body, len, &e) : srv_detokenize(&mc, body, len, &e);
        if (o) json_decref(o);
        else check_error(&e);
        break;
    }
    case 4: {
        char *out = NULL;
        need(srv_embed_run(NULL, &mc, "m", body, len, NULL, NULL, &out, &e) != 0 && !out, "no engine, no answer");
        check_error(&e);
        break;
    }
    default: {
        char *s = malloc(len + 1);
        if (!s) return 0;
        memcpy(s, body, len);
        s[len] = 0;
        fuzz_cors(s);
        free(s);
    }
    }
    return 0;
}
