/* server_openai.c - OpenAI request parsing and response JSON; see
 * server_openai.h.
 *
 * Validation follows the OpenAI API where it has a rule (types, ranges,
 * "top_logprobs needs logprobs") and refuses, rather than silently ignores,
 * the fields that would change the answer and that this server does not do
 * (suffix, tools, images, best_of other than n, echo with a prompt list).
 * Fields it does not know are ignored.
 * null is the same as an absent field.
 *
 * Defaults chosen here (docs/server.md):
 * - /v1/completions max_tokens: 16 as OpenAI, cut to what the context holds
 *   when not given; /v1/chat/completions: until end of generation or the
 *   end of the context. A max_tokens given explicitly that does not fit the
 *   context is a 400 (context_length_exceeded), as OpenAI does.
 * - sampling parameters not given come from the server's flags (--temp ...);
 *   a request without "seed" gets a random one unless --seed was given.
 * - text_offset (completions logprobs) counts code points of the choice's
 *   text, the echoed prompt included.
 */
#include "server_openai.h"
#include "server_format.h"

#include "server_chat.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ------------------------------------------------------------ buffers */

int srv_buf_add(srv_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return PL_ERR_NOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int srv_buf_str(srv_buf *b, const char *s) { return srv_buf_add(b, s, strlen(s)); }

void srv_buf_free(srv_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------- errors */

static void error_vset(srv_error *e, int status, const char *type, const char *param, const char *code,
                       const char *fmt, va_list ap)
{
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    vsnprintf(e->message, sizeof e->message, fmt, ap);
}

void srv_error_set(srv_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, status, type, param, code, fmt, ap);
    va_end(ap);
}

int srv_out_of_memory(srv_error *e)
{
    srv_error_set(e, 503, "server_error", NULL, "out_of_memory", "the server is out of memory; retry later");
    return -1;
}

int srv_bad_request(srv_error *e, const char *param, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vset(e, 400, "invalid_request_error", param, code, fmt, ap);
    va_end(ap);
    return -1;
}

/* A json string from text that should be, but may not be, valid UTF-8
 * (error texts quote input; engine text is sanitized upstream): rather than
 * losing the whole answer, bytes >= 0x80 become '?' if it is not. */
json_t *srv_json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *c = malloc(n + 1);
    if (!c) return json_string("");
    for (size_t i = 0; i < n; i++) c[i] = (unsigned char)s[i] >= 0x80 ? '?' : s[i];
    j = json_stringn(c, n);
    free(c);
    return j ? j : json_string("");
}

static json_t *json_text(const char *s) { return srv_json_text(s, strlen(s)); }

json_t *srv_error_obj(const srv_error *e)
{
    return json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", json_text(e->message), "type",
                     e->type ? e->type : "invalid_request_error", "param",
                     e->param ? json_string(e->param) : json_null(), "code",
                     e->code ? json_string(e->code) : json_null());
}

char *srv_error_json(const srv_error *e)
{
    json_t *o = srv_error_obj(e);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* -------------------------------------------------------- field readers */

/* Each reader: an absent or null field leaves *out alone and *given false
 * (when asked); a present one of the wrong type or out of range is a 400
 * naming the field. */

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static json_t *field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_bool(json_t *o, const char *key, bool *out, srv_error *e)
{
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return srv_bad_request(e, key, NULL, "'%s' must be a boolean, got %s", key, json_kind(v));
    *out = json_is_true(v);
    return 0;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *given, srv_error *e)
{
    json_t *v = field(o, key);
    if (given) *given = false;
    if (!v) return 0;
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else return srv_bad_request(e, key, NULL, "'%s' must be an integer, got %s", key, json_kind(v));
    if (x < lo || x > hi)
        return srv_bad_request(e, key, NULL, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    if (given) *given = true;
    return 0;
}

static int get_num(json_t *o, const char *key, double lo, double hi, double *out, srv_error *e)
{
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_number(v)) return srv_bad_request(e, key, NULL, "'%s' must be a number, got %s", key, json_kind(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return srv_bad_request(e, key, NULL, "'%s' must be between %g and %g, got %g", key, lo, hi, x);
    *out = x;
    return 0;
}

json_t *srv_field(json_t *o, const char *key) { return field(o, key); }
const char *srv_json_kind(const json_t *v) { return json_kind(v); }
int srv_get_bool(json_t *o, const char *key, bool *out, srv_error *e) { return get_bool(o, key, out, e); }
int srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *given, srv_error *e)
{
    return get_int(o, key, lo, hi, out, given, e);
}
int srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, srv_error *e)
{
    return get_num(o, key, lo, hi, out, e);
}

/* Fields this server refuses when they ask for something (a non-empty
 * value): answering without them would be silently wrong. */
static int refuse_if_set(json_t *o, const char *key, srv_error *e)
{
    json_t *v = field(o, key);
    if (!v || json_is_false(v)) return 0;
    if ((json_is_string(v) && json_string_length(v) == 0) || (json_is_object(v) && json_object_size(v) == 0) ||
        (json_is_array(v) && json_array_size(v) == 0))
        return 0;
    return srv_bad_request(e, key, "unsupported_parameter", "'%s' is not supported by this server", key);
}

/* ------------------------------------------------------------ sampling */

static uint64_t random_u64(void)
{
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    return x;
}

void srv_make_id(char *out, size_t cap, const char *prefix)
{
    uint64_t a = random_u64(), b = random_u64();
    snprintf(out, cap, "%s%016llx%08llx", prefix, (unsigned long long)a, (unsigned long long)(b & 0xFFFFFFFFu));
}

static int parse_sampling(const srv_model_ctx *mc, json_t *o, pl_sampler_params *sp, srv_error *e)
{
    *sp = mc->defaults;
    double temp = sp->temperature, top_p = sp->top_p, min_p = sp->min_p, rep = sp->repeat_penalty;
    long long top_k = sp->top_k, seed = 0;
    bool seed_given = false;
    if (get_num(o, "temperature", 0, 2, &temp, e) || get_num(o, "top_p", 0, 1, &top_p, e) ||
        get_num(o, "min_p", 0, 1, &min_p, e) || get_int(o, "top_k", -1, 1 << 30, &top_k, NULL, e) ||
        get_num(o, "repetition_penalty", 0.01, 100, &rep, e) || get_num(o, "repeat_penalty", 0.01, 100, &rep, e) ||
        get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, &seed_given, e))
        return -1;
    sp->temperature = (float)temp;
    sp->top_p = (float)top_p;
    sp->min_p = (float)min_p;
    sp->top_k = top_k < 0 ? 0 : (int32_t)top_k;
    sp->repeat_penalty = (float)rep;
    if (seed_given) sp->seed = (uint64_t)seed;
    else if (mc->random_seed) sp->seed = random_u64();
    return 0;
}

/* "stop": a string or an array of strings (empty strings are skipped). */
static int parse_stops(json_t *o, srv_gen_req *q, srv_error *e)
{
    json_t *v = field(o, "stop"), *one[1] = {v};
    if (!v) return 0;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return srv_bad_request(e, "stop", NULL, "'stop' must be a string or an array of strings, got %s", json_kind(v));
    if (n > SRV_MAX_STOPS) return srv_bad_request(e, "stop", NULL, "'stop' has %zu strings; at most %d are allowed", n, SRV_MAX_STOPS);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s)) return srv_bad_request(e, "stop", NULL, "'stop' entries must be strings, got %s", json_kind(s));
        size_t len = json_string_length(s);
        if (len == 0) continue;
        if (len >= PL_MAX_STOP_LEN)
            return srv_bad_request(e, "stop", NULL, "a stop string has %zu bytes; at most %d are allowed", len, PL_MAX_STOP_LEN - 1);
        if (memchr(json_string_value(s), 0, len)) return srv_bad_request(e, "stop", NULL, "stop strings must not contain NUL");
        if (!(q->stops[q->n_stops] = strdup(json_string_value(s)))) return srv_out_of_memory(e);
        q->n_stops++;
    }
    return 0;
}

/* Fields common to both endpoints. */
static int parse_common(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, srv_error *e)
{
    long long n = 1, max_tokens = 0;
    bool mt_given = false, mct_given = false;
    json_t *so = field(o, "stream_options");
    if (get_bool(o, "stream", &q->stream, e) || get_int(o, "n", 1, SRV_MAX_N, &n, NULL, e) ||
        get_int(o, "max_tokens", 1, INT32_MAX, &max_tokens, &mt_given, e) ||
        (q->kind == SRV_CHAT && get_int(o, "max_completion_tokens", 1, INT32_MAX, &max_tokens, &mct_given, e)) ||
        get_bool(o, "ignore_eos", &q->p.ignore_eos, e) || parse_stops(o, q, e) ||
        parse_sampling(mc, o, &q->p.sampling, e))
        return -1;
    if (so && !json_is_object(so))
        return srv_bad_request(e, "stream_options", NULL, "'stream_options' must be an object, got %s", json_kind(so));
    if (so && get_bool(so, "include_usage", &q->include_usage, e)) return -1;
    q->p.n = (int32_t)n;
    q->p.max_tokens = (int32_t)max_tokens;
    q->max_tokens_given = mt_given || mct_given;
    return srv_parse_sampling_extras(mc, o, q, e);
}

/* ------------------------------------------------------------- prompts */

static int set_prompt(srv_gen_req *q, const int32_t *ids, size_t n, srv_error *e)
{
    q->prompt = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!q->prompt) return srv_out_of_memory(e);
    if (n) memcpy(q->prompt, ids, sizeof(int32_t) * n);
    q->n_prompt = n;
    return 0;
}

static int tokenize_text(const srv_model_ctx *mc, const char *text, size_t len, bool special, const char *param,
                         srv_gen_req *q, srv_error *e)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int trc = pl_tokenize(mc->vocab, text, len, pl_vocab_add_bos(mc->vocab), special, &ids, &n);
    if (trc == PL_ERR_NOMEM) return srv_out_of_memory(e);
    if (trc != 0) return srv_bad_request(e, param, NULL, "cannot tokenize '%s': %s", param, pl_last_error());
    int rc = set_prompt(q, ids, n, e);
    pl_free(ids);
    return rc;
}

/* A prompt given as token ids: used as is (no BOS added). */
static int prompt_ids(const srv_model_ctx *mc, json_t *a, srv_gen_req *q, srv_error *e)
{
    size_t n = json_array_size(a);
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!ids) return srv_out_of_memory(e);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(a, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= pl_vocab_size(mc->vocab)) {
            free(ids);
            return srv_bad_request(e, "prompt", NULL, "prompt token %zu is not a token id of this model (0..%d)", i,
                                   pl_vocab_size(mc->vocab) - 1);
        }
        ids[i] = (int32_t)id;
    }
    int rc = set_prompt(q, ids, n, e);
    free(ids);
    return rc;
}

static int parse_one_prompt(const srv_model_ctx *mc, json_t *p, srv_gen_req *q, srv_error *e);

/* "prompt": a string, token ids, or an array of either (a prompt list: one
 * engine request per prompt, choice index = prompt index x n + i). */
static int parse_prompt(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, srv_error *e)
{
    json_t *p = field(o, "prompt");
    if (!p) return srv_bad_request(e, "prompt", NULL, "'prompt' is required");
    q->n_prompts = 1;
    if (!json_is_array(p) || json_array_size(p) == 0 || json_is_integer(json_array_get(p, 0)))
        return parse_one_prompt(mc, p, q, e);
    size_t k = json_array_size(p);
    if (k * (size_t)q->p.n > SRV_MAX_N)
        return srv_bad_request(e, "prompt", NULL, "%zu prompts x n %d = %zu choices; at most %d are allowed", k, q->p.n,
                               k * (size_t)q->p.n, SRV_MAX_N);
    for (size_t i = k; i-- > 0;) { /* the others first, into more[]; prompt 0 last, into prompt */
        json_t *x = json_array_get(p, i);
        if (!json_is_string(x) && !json_is_array(x))
            return srv_bad_request(e, "prompt", NULL, "prompt[%zu] must be a string or an array of token ids, got %s", i,
                                   json_kind(x));
        free(q->prompt);
        q->prompt = NULL;
        if (parse_one_prompt(mc, x, q, e)) return -1;
        if (i) q->more[i - 1] = q->prompt, q->more_n[i - 1] = q->n_prompt, q->prompt = NULL;
    }
    q->n_prompts = (int)k;
    return 0;
}

static int parse_one_prompt(const srv_model_ctx *mc, json_t *p, srv_gen_req *q, srv_error *e)
{
    if (json_is_string(p)) {
        if (json_string_length(p) == 0) return srv_bad_request(e, "prompt", NULL, "'prompt' is empty");
        if (tokenize_text(mc, json_string_value(p), json_string_length(p), false, "prompt", q, e)) return -1;
    } else if (json_is_array(p)) {
        if (prompt_ids(mc, p, q, e)) return -1;
    } else {
        return srv_bad_request(e, "prompt", NULL, "'prompt' must be a string or an array of token ids, got %s", json_kind(p));
    }
    if (q->n_prompt == 0) return srv_bad_request(e, "prompt", NULL, "'prompt' is empty");
    return 0;
}

/* The longest prompt of a list: what the context rules are checked with. */
static size_t longest_prompt(const srv_gen_req *q)
{
    size_t n = q->n_prompt;
    for (int i = 1; i < q->n_prompts; i++) n = q->more_n[i - 1] > n ? q->more_n[i - 1] : n;
    return n;
}

static int parse_completion_fields(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, srv_error *e)
{
    long long lp = -1;
    bool given;
    if (get_int(o, "logprobs", 0, PL_MAX_TOP_LOGPROBS, &lp, &given, e)) return -1;
    q->logprobs = given ? (int32_t)lp : -1;
    if (refuse_if_set(o, "suffix", e) || parse_prompt(mc, o, q, e)) return -1;
    json_t *p = field(o, "prompt");
    bool echo = false;
    if (q->n_prompts > 1 && !get_bool(o, "echo", &echo, e) && echo)
        return srv_bad_request(e, "echo", "unsupported_parameter", "'echo' with a list of prompts is not supported");
    if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
    return srv_parse_echo(mc, o, json_string_value(p), json_is_string(p) ? json_string_length(p) : 0, q, e);
}

/* ---------------------------------------------------------------- chat */

static int parse_chat_fields(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, srv_error *e)
{
    bool lp = false, given;
    long long top = 0;
    if (get_bool(o, "logprobs", &lp, e) || get_int(o, "top_logprobs", 0, PL_MAX_TOP_LOGPROBS, &top, &given, e)) return -1;
    if (given && !lp) return srv_bad_request(e, "top_logprobs", NULL, "'top_logprobs' needs 'logprobs': true");
    q->logprobs = lp ? (int32_t)top : -1;
    char *text = NULL;
    int rc = srv_chat_render(mc, o, q, &text, e);
    if (!rc) rc = tokenize_text(mc, text, strlen(text), true, "messages", q, e);
    if (!rc && q->n_prompt == 0) rc = srv_bad_request(e, "messages", NULL, "the messages render to an empty prompt");
    pl_free(text);
    return rc;
}

/* -------------------------------------------------------------- request */

/* The context rules: the prompt must leave room for one token; an explicit
 * max_tokens must fit; a default one is cut to fit. */
static int fit_context(const srv_model_ctx *mc, srv_gen_req *q, srv_error *e)
{
    const char *pp = q->kind == SRV_CHAT ? "messages" : "prompt";
    const size_t n_prompt = longest_prompt(q);
    if (mc->kv_window) { /* the window drops old blocks: only max_tokens bounds a completion */
        if (!q->max_tokens_given)
            q->p.max_tokens = q->kind == SRV_CHAT || mc->completions_max_tokens <= 0 ? (int32_t)mc->n_ctx
                                                                                     : mc->completions_max_tokens;
        return 0;
    }
    if (n_prompt >= mc->n_ctx)
        return srv_bad_request(e, pp, "context_length_exceeded",
                               "This model's maximum context length is %u tokens, but the prompt has %zu tokens "
                               "(at least one token must be left to generate)", mc->n_ctx, n_prompt);
    uint32_t room = mc->n_ctx - (uint32_t)n_prompt;
    if (q->max_tokens_given && (uint32_t)q->p.max_tokens > room)
        return srv_bad_request(e, "max_tokens", "context_length_exceeded",
                               "This model's maximum context length is %u tokens. However, you requested %zu tokens "
                               "(%zu in the prompt, %d for the completion)", mc->n_ctx,
                               n_prompt + (size_t)q->p.max_tokens, n_prompt, q->p.max_tokens);
    if (!q->max_tokens_given) {
        uint32_t def = q->kind == SRV_CHAT || mc->completions_max_tokens <= 0 ? room : (uint32_t)mc->completions_max_tokens;
        q->p.max_tokens = (int32_t)(def < room ? def : room);
    }
    return 0;
}

static json_t *load_body(const char *body, size_t len, srv_error *e)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o) {
        srv_bad_request(e, NULL, NULL, "invalid JSON in the request body: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        srv_bad_request(e, NULL, NULL, "the request body must be a JSON object, got %s", json_kind(o));
        json_decref(o);
        return NULL;
    }
    return o;
}

int srv_gen_req_parse(const srv_model_ctx *mc, srv_kind kind, const char *body, size_t len, srv_gen_req *out,
                      srv_error *err)
{
    srv_gen_req q;
    memset(&q, 0, sizeof q);
    q.kind = kind;
    q.logprobs = -1;
    q.n_prompts = 1;
    json_t *o = load_body(body, len, err);
    int rc = o ? 0 : -1;
    if (!rc) rc = parse_common(mc, o, &q, err);
    if (!rc) rc = kind == SRV_CHAT ? parse_chat_fields(mc, o, &q, err) : parse_completion_fields(mc, o, &q, err);
    char *format = NULL; /* response_format / json_schema / grammar */
    if (!rc) rc = srv_format_parse(o, &format, err);
    if (!rc && format && q.grammar) {
        free(format);
        rc = srv_bad_request(err, "tool_choice", NULL,
                             "a forced tool call (tool_choice) cannot be combined with 'response_format', 'json_schema' or 'grammar'");
    } else if (!rc && format) q.grammar = format;
    if (!rc) rc = fit_context(mc, &q, err);
    json_decref(o);
    if (rc) {
        srv_gen_req_free(&q);
        memset(out, 0, sizeof *out);
        return -1;
    }
    q.p.top_logprobs = q.logprobs;
    *out = q;
    /* the params point into *out, not into the local copy */
    out->p.prompt = out->prompt;
    out->p.n_prompt = out->n_prompt;
    out->p.stops = (const char *const *)out->stops;
    out->p.n_stops = out->n_stops;
    out->p.grammar = out->grammar;
    return 0;
}

void srv_gen_req_free(srv_gen_req *r)
{
    free(r->prompt);
    free(r->bias);
    free(r->stop_ids);
    free(r->echo);
    for (int i = 0; i < SRV_MAX_N - 1; i++) free(r->more[i]);
    for (size_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->grammar);
    json_decref(r->tools);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------ logprobs */

/* JSON has no -inf: OpenAI writes -9999 for impossible tokens. */
static json_t *json_logprob(float lp) { return json_real(isfinite(lp) ? (double)lp : -9999.0); }

static json_t *json_bytes(const srv_tokens *t, int32_t id)
{
    size_t n;
    const uint8_t *b = srv_token_bytes(t, id, &n);
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(b[i]));
    return a;
}

json_t *srv_lp_completion_new(void)
{
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

int srv_lp_completion_add(json_t *lp, const srv_tokens *t, const pl_event *ev, size_t *offset)
{
    const char *s = srv_token_str(t, ev->token);
    json_t *top = json_object();
    for (int32_t i = 0; top && i < ev->n_top; i++)
        json_object_set_new(top, srv_token_str(t, ev->top_ids[i]), json_logprob(ev->top_logprobs[i]));
    int rc = 0;
    rc |= json_array_append_new(json_object_get(lp, "tokens"), json_string(s));
    rc |= json_array_append_new(json_object_get(lp, "token_logprobs"), json_logprob(ev->logprob));
    rc |= json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    rc |= json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)*offset));
    *offset += srv_utf8_count(s, strlen(s));
    return rc ? PL_ERR_NOMEM : 0;
}

json_t *srv_lp_chat_item(const srv_tokens *t, const pl_event *ev)
{
    json_t *top = json_array();
    for (int32_t i = 0; top && i < ev->n_top; i++)
        json_array_append_new(top, json_pack("{s:s, s:o, s:o}", "token", srv_token_str(t, ev->top_ids[i]), "logprob",
                                             json_logprob(ev->top_logprobs[i]), "bytes", json_bytes(t, ev->top_ids[i])));
    return json_pack("{s:s, s:o, s:o, s:o}", "token", srv_token_str(t, ev->token), "logprob", json_logprob(ev->logprob),
                     "bytes", json_bytes(t, ev->token), "top_logprobs", top ? top : json_array());
}

json_t *srv_usage_json(uint32_t prompt, uint32_t completion, uint32_t cached)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                     (json_int_t)completion, "total_tokens", (json_int_t)prompt + (json_int_t)completion,
                     "prompt_tokens_details", "cached_tokens", (json_int_t)cached);
}

/* ------------------------------------------------------------- results */

void srv_result_init(srv_result *r, int32_t n)
{
    memset(r, 0, sizeof *r);
    r->n = n < 1 ? 1 : n > SRV_MAX_N ? SRV_MAX_N : n;
}

static int result_token(srv_result *r, const srv_gen_req *q, const srv_tokens *t, const pl_event *ev, srv_choice *c)
{
    if (srv_buf_add(&c->text, ev->text, ev->text_len)) return PL_ERR_NOMEM;
    if (q->logprobs < 0) return 0;
    (void)r;
    if (!c->lp) c->lp = q->kind == SRV_CHAT ? json_array() : srv_lp_completion_new();
    /* echo: offsets go on after the prompt - its token strings' when they were listed (vLLM's
     * count), else the echoed text's */
    if (!c->gen_started && q->echo && !q->p.prompt_logprobs) c->offset = srv_utf8_count(q->echo, q->echo_len);
    c->gen_started = true;
    if (!c->lp) return PL_ERR_NOMEM;
    if (q->kind == SRV_CHAT) return json_array_append_new(c->lp, srv_lp_chat_item(t, ev)) ? PL_ERR_NOMEM : 0;
    return srv_lp_completion_add(c->lp, t, ev, &c->offset);
}

int srv_result_add(srv_result *r, const srv_gen_req *q, const srv_tokens *t, const pl_event *ev)
{
    if (ev->kind == PL_EV_ERROR) {
        r->failed = true;
        snprintf(r->message, sizeof r->message, "%s", ev->message);
        return 0;
    }
    if (ev->index < 0 || ev->index >= r->n) return 0; /* not ours: ignore rather than trust */
    srv_choice *c = &r->ch[ev->index];
    if (ev->kind == PL_EV_TOKEN) return result_token(r, q, t, ev, c);
    if (ev->kind == PL_EV_PROMPT) { /* echo + logprobs: the prompt's tokens first */
        if (!c->lp && !(c->lp = srv_lp_completion_new())) return PL_ERR_NOMEM;
        return srv_lp_prompt_add(c->lp, t, ev, &c->offset);
    }
    if (srv_buf_add(&c->text, ev->text, ev->text_len)) return PL_ERR_NOMEM;
    if (!c->finish) r->n_done++;
    c->finish = ev->finish_reason ? ev->finish_reason : "stop";
    r->prompt_tokens = ev->prompt_tokens;
    if (ev->cached_tokens > r->cached_tokens) r->cached_tokens = ev->cached_tokens;
    r->completion_tokens += ev->completion_tokens;
    return 0;
}

/* The assistant message of a chat choice: content, and when the request
 * asks for it reasoning_content and tool_calls (server_chat.h). Takes *text. */
static json_t *chat_message(const srv_choice *c, const srv_gen_req *q, json_t **text)
{
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    srv_chat_out o;
    srv_chat_out_init(&o, q);
    if (!msg || !o.active) {
        json_object_set_new(msg, "content", *text);
        srv_chat_out_free(&o);
        return msg;
    }
    srv_buf reasoning = {0}, content = {0};
    json_t *calls = NULL;
    int rc = srv_chat_out_feed(&o, c->text.p ? c->text.p : "", c->text.len, &reasoning, &content);
    if (!rc) rc = srv_chat_out_finish(&o, q, &reasoning, &content, &calls);
    srv_chat_out_free(&o);
    if (rc) { /* out of memory: the text as generated rather than nothing */
        json_object_set_new(msg, "content", *text);
        srv_buf_free(&reasoning), srv_buf_free(&content);
        return msg;
    }
    json_decref(*text);
    *text = NULL;
    json_object_set_new(msg, "content", content.len || !calls ? srv_json_text(content.p ? content.p : "", content.len) : json_null());
    if (reasoning.len) json_object_set_new(msg, "reasoning_content", srv_json_text(reasoning.p, reasoning.len));
    if (calls) json_object_set_new(msg, "tool_calls", calls);
    srv_buf_free(&reasoning), srv_buf_free(&content);
    return msg;
}

static json_t *choice_json(const srv_choice *c, int32_t i, const srv_gen_req *q)
{
    json_t *text = srv_json_text(c->text.p ? c->text.p : "", c->text.len);
    if (q->echo) { /* completions' echo: the prompt's text first */
        srv_buf b = {0};
        if (srv_buf_add(&b, q->echo, q->echo_len) == 0 && srv_buf_add(&b, c->text.p ? c->text.p : "", c->text.len) == 0) {
            json_decref(text);
            text = srv_json_text(b.p, b.len);
        }
        srv_buf_free(&b);
    }
    json_t *lp = c->lp ? json_incref(c->lp) : json_null();
    if (q->kind == SRV_CHAT) {
        if (c->lp) {
            json_decref(lp);
            lp = json_pack("{s:O, s:n}", "content", c->lp, "refusal");
        }
        json_t *msg = chat_message(c, q, &text);
        const char *fin = c->finish ? c->finish : "stop";
        if (json_object_get(msg, "tool_calls") && strcmp(fin, "stop") == 0) fin = "tool_calls";
        return json_pack("{s:i, s:o, s:o, s:s}", "index", (int)i, "message", msg, "logprobs", lp, "finish_reason", fin);
    }
    return json_pack("{s:i, s:o, s:o, s:s}", "index", (int)i, "text", text, "logprobs", lp, "finish_reason",
                     c->finish ? c->finish : "stop");
}

char *srv_result_json(const srv_result *r, const srv_gen_req *q, const char *id, long created, const char *model)
{
    json_t *choices = json_array();
    for (int32_t i = 0; choices && i < r->n; i++) json_array_append_new(choices, choice_json(&r->ch[i], i, q));
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", id, "object",
                          q->kind == SRV_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)created,
                          "model", model, "system_fingerprint", "pagellm", "choices", choices, "usage",
                          srv_usage_json(r->prompt_tokens, r->completion_tokens, r->cached_tokens));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

void srv_result_free(srv_result *r)
{
    for (int32_t i = 0; i < SRV_MAX_N; i++) {
        srv_buf_free(&r->ch[i].text);
        json_decref(r->ch[i].lp);
    }
    memset(r, 0, sizeof *r);
}
