/* server_params.c - the request fields that shape sampling beyond
 * temperature and top-k/p: presence_penalty, frequency_penalty,
 * logit_bias, min_tokens, stop_token_ids, best_of, and completions' echo.
 *
 * Each is honoured (handed to the sampler or the engine) or refused with a
 * 400 naming it; none is accepted and dropped. Definitions (docs/server.md):
 * - presence/frequency penalties are OpenAI's, over the tokens generated
 *   so far in this choice (not the prompt): logit -= count * frequency +
 *   (count > 0) * presence;
 * - logit_bias maps token ids (as decimal strings, OpenAI's shape) to
 *   -100..100 added to the logits; -100 bans the token;
 * - min_tokens: end-of-generation, stop_token_ids and stop strings wait
 *   until that many tokens are generated;
 * - best_of is accepted only equal to n (nothing is generated to be
 *   thrown away);
 * - echo with logprobs adds the prompt's tokens to the logprobs (the first
 *   one's logprob and alternatives null, as OpenAI and vLLM answer).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server_openai.h"

/* "logit_bias": {"<token id>": bias, ...} */
static int parse_logit_bias(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, srv_error *e)
{
    json_t *v = srv_field(o, "logit_bias");
    if (!v) return 0;
    if (!json_is_object(v))
        return srv_bad_request(e, "logit_bias", NULL, "'logit_bias' must be an object of token id -> bias, got %s",
                               srv_json_kind(v));
    size_t n = json_object_size(v), i = 0;
    const int32_t nv = pl_vocab_size(mc->vocab);
    if (n > (size_t)nv) return srv_bad_request(e, "logit_bias", NULL, "'logit_bias' has %zu entries; the vocabulary has %d", n, nv);
    if (n == 0) return 0;
    if (!(q->bias = calloc(n, sizeof *q->bias))) return srv_bad_request(e, NULL, NULL, "out of memory");
    const char *key;
    json_t *b;
    json_object_foreach(v, key, b) {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id >= nv)
            return srv_bad_request(e, "logit_bias", NULL, "logit_bias key '%.40s' is not a token id of this model (0..%d)",
                                   key, nv - 1);
        if (!json_is_number(b) || !(json_number_value(b) >= -100 && json_number_value(b) <= 100))
            return srv_bad_request(e, "logit_bias", NULL, "logit_bias['%s'] must be a number between -100 and 100", key);
        q->bias[i++] = (pl_logit_bias){(int32_t)id, (float)json_number_value(b)};
    }
    q->p.sampling.logit_bias = q->bias;
    q->p.sampling.n_logit_bias = i;
    return 0;
}

/* "stop_token_ids": [id, ...] (vLLM's name) */
static int parse_stop_ids(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, srv_error *e)
{
    json_t *v = srv_field(o, "stop_token_ids");
    if (!v) return 0;
    if (!json_is_array(v))
        return srv_bad_request(e, "stop_token_ids", NULL, "'stop_token_ids' must be an array of token ids, got %s",
                               srv_json_kind(v));
    size_t n = json_array_size(v);
    if (n > PL_MAX_STOP_TOKEN_IDS)
        return srv_bad_request(e, "stop_token_ids", NULL, "'stop_token_ids' has %zu ids; at most %d are allowed", n,
                               PL_MAX_STOP_TOKEN_IDS);
    if (n == 0) return 0;
    if (!(q->stop_ids = calloc(n, sizeof *q->stop_ids))) return srv_bad_request(e, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(v, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= pl_vocab_size(mc->vocab))
            return srv_bad_request(e, "stop_token_ids", NULL, "stop_token_ids[%zu] is not a token id of this model (0..%d)",
                                   i, pl_vocab_size(mc->vocab) - 1);
        q->stop_ids[i] = (int32_t)id;
    }
    q->p.stop_token_ids = q->stop_ids;
    q->p.n_stop_token_ids = n;
    return 0;
}

int srv_parse_sampling_extras(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, srv_error *e)
{
    double pres = 0, freq = 0;
    long long min_tokens = 0, best_of = 0;
    bool best_given = false;
    if (srv_get_num(o, "presence_penalty", -2, 2, &pres, e) || srv_get_num(o, "frequency_penalty", -2, 2, &freq, e) ||
        srv_get_int(o, "min_tokens", 0, INT32_MAX, &min_tokens, NULL, e) ||
        srv_get_int(o, "best_of", 1, SRV_MAX_N, &best_of, &best_given, e) || parse_logit_bias(mc, o, q, e) ||
        parse_stop_ids(mc, o, q, e))
        return -1;
    if (best_given && best_of != q->p.n)
        return srv_bad_request(e, "best_of", "unsupported_parameter",
                               "'best_of' %lld is not supported: only best_of equal to n (%d) is (no choice is "
                               "generated to be thrown away)", best_of, q->p.n);
    if (q->max_tokens_given && min_tokens > q->p.max_tokens)
        return srv_bad_request(e, "min_tokens", NULL, "'min_tokens' %lld is larger than max_tokens %d", min_tokens,
                               q->p.max_tokens);
    q->p.sampling.presence_penalty = (float)pres;
    q->p.sampling.frequency_penalty = (float)freq;
    q->p.min_tokens = (int32_t)min_tokens;
    return 0;
}

int srv_lp_prompt_add(json_t *lp, const srv_tokens *t, const pl_event *ev, size_t *offset)
{
    const char *s = srv_token_str(t, ev->token);
    const bool first = isnan(ev->logprob); /* the first prompt token has no logprob (null, as OpenAI) */
    json_t *top = first ? json_null() : json_object();
    for (int32_t i = 0; !first && top && i < ev->n_top; i++)
        json_object_set_new(top, srv_token_str(t, ev->top_ids[i]),
                            json_real(isfinite(ev->top_logprobs[i]) ? ev->top_logprobs[i] : -9999.0));
    int rc = 0;
    rc |= json_array_append_new(json_object_get(lp, "tokens"), json_string(s));
    rc |= json_array_append_new(json_object_get(lp, "token_logprobs"),
                                first ? json_null() : json_real(isfinite(ev->logprob) ? ev->logprob : -9999.0));
    rc |= json_array_append_new(json_object_get(lp, "top_logprobs"), top ? top : json_null());
    rc |= json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)*offset));
    *offset += srv_utf8_count(s, strlen(s));
    return rc ? PL_ERR_NOMEM : 0;
}

int srv_parse_echo(const srv_model_ctx *mc, json_t *o, const char *text, size_t len, srv_gen_req *q, srv_error *e)
{
    bool echo = false;
    if (srv_get_bool(o, "echo", &echo, e)) return -1;
    if (!echo) return 0;
    q->p.prompt_logprobs = q->logprobs >= 0; /* echo + logprobs: the prompt's tokens get logprobs too */
    if (text) {
        if (!(q->echo = malloc(len + 1))) return srv_bad_request(e, NULL, NULL, "out of memory");
        memcpy(q->echo, text, len);
        q->echo[len] = 0;
        q->echo_len = len;
        return 0;
    }
    size_t n = 0;
    char *t = NULL;
    if (pl_detokenize(mc->vocab, q->prompt, q->n_prompt, &t, &n) != 0)
        return srv_bad_request(e, "prompt", NULL, "cannot detokenize the prompt for 'echo': %s", pl_last_error());
    q->echo = malloc(n + 1);
    if (q->echo) memcpy(q->echo, t, n), q->echo[n] = 0;
    pl_free(t);
    if (!q->echo) return srv_bad_request(e, NULL, NULL, "out of memory");
    q->echo_len = n;
    return 0;
}
