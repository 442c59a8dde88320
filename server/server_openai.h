/* server_openai.h - the OpenAI API's JSON for `pagellm serve`: request
 * parsing and validation, error bodies, and the non-streaming response of
 * /v1/completions and /v1/chat/completions (server_sse.h builds the
 * streaming one from the same pieces).
 *
 * This layer knows JSON (jansson) and include/pagellm.h, never HTTP: the
 * HTTP layer (server_http.c) hands it a body and gets back either a
 * srv_gen_req ready for pl_engine_submit or a srv_error with the status to
 * send. Unit tests (tests/test_server_json.c) include it directly.
 *
 * Invariants:
 * - every string put into JSON is valid UTF-8 (engine text is sanitized by
 *   the detokenizer; token strings come from server_tokens.h);
 * - a srv_gen_req owns everything its pl_request_params points to;
 * - on failure the parse functions leave *out zeroed (nothing to free).
 */
#ifndef PL_SERVER_OPENAI_H
#define PL_SERVER_OPENAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagellm.h"
#include "server_tokens.h"

#define SRV_MAX_N 16      /* completions per request: the engine's fork limit */
#define SRV_MAX_STOPS 16  /* stop strings per request */

/* ------------------------------------------------------------ buffers */

/* A growing byte buffer, always NUL-terminated when p != NULL. */
typedef struct {
    char *p;
    size_t len, cap;
} srv_buf;

int srv_buf_add(srv_buf *b, const char *s, size_t n);   /* 0 or PL_ERR_NOMEM */
int srv_buf_str(srv_buf *b, const char *s);
void srv_buf_free(srv_buf *b);

/* ------------------------------------------------------------- errors */

/* An error answer: HTTP status and the OpenAI error object
 * {"error": {"message", "type", "param", "code"}}. */
typedef struct {
    int status;         /* 400, 401, 404, 405, 413, 500, 503 */
    const char *type;   /* "invalid_request_error" | "server_error" | ... (static) */
    const char *param;  /* the offending request field, or NULL (static) */
    const char *code;   /* e.g. "context_length_exceeded", or NULL (static) */
    char message[512];
} srv_error;

void srv_error_set(srv_error *e, int status, const char *type, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Shorthand for a 400 invalid_request_error. Returns -1 (for `return`). */
int srv_bad_request(srv_error *e, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A 503 out_of_memory (the server's fault, not the request's). Returns -1. */
int srv_out_of_memory(srv_error *e);
/* The error object as JSON, malloc'd. */
char *srv_error_json(const srv_error *e);
json_t *srv_error_obj(const srv_error *e);

/* ------------------------------------------------------------ requests */

typedef enum { SRV_COMPLETIONS = 0, SRV_CHAT = 1 } srv_kind;

/* What request parsing needs to know about the model and the server. */
typedef struct {
    const pl_model *model;       /* chat templates */
    const pl_vocab *vocab;
    uint32_t n_ctx;              /* tokens per sequence (prompt + generated) */
    uint32_t kv_window;          /* --kv-window: sequences run past n_ctx (0: off) */
    pl_sampler_params defaults;  /* sampling when a request does not say */
    bool random_seed;            /* requests without "seed" get a random one (else defaults.seed) */
    int32_t completions_max_tokens; /* /v1/completions default max_tokens (OpenAI's is 16) */
    const char *chat_template;   /* serve --chat-template-file: overrides the model's (NULL: the model's) */
    int reasoning_format;        /* SRV_REASONING_*: --reasoning-format */
} srv_model_ctx;

enum { SRV_REASONING_DEEPSEEK = 0, SRV_REASONING_NONE = 1 }; /* <think> split into reasoning_content, or not */

typedef struct {
    srv_kind kind;
    bool stream, include_usage;
    int32_t logprobs;            /* -1: none; else alternatives per token (0..20) */
    bool max_tokens_given;
    int32_t *prompt;             /* token ids (malloc'd) */
    size_t n_prompt;
    char *stops[SRV_MAX_STOPS];  /* malloc'd copies */
    size_t n_stops;
    char *grammar;               /* GBNF from response_format / json_schema / grammar (malloc'd), or NULL */
    pl_request_params p;         /* ready for pl_engine_submit; points into this struct */
    pl_logit_bias *bias;         /* logit_bias (malloc'd), p.sampling points at it */
    int32_t *stop_ids;           /* stop_token_ids (malloc'd), p points at it */
    char *echo;                  /* completions "echo": the prompt's text (malloc'd), else NULL */
    size_t echo_len;
    int n_prompts;               /* completions' prompt list: 1 + the prompts in more[] */
    int32_t *more[SRV_MAX_N - 1]; /* prompts 1.. (malloc'd); prompt 0 is `prompt` */
    size_t more_n[SRV_MAX_N - 1];
    /* chat replies (server_chat.h) */
    json_t *tools;               /* the request's tools when calls are parsed from the reply (owned), or NULL */
    bool tools_functionary;      /* the template's ">>>" call format */
    bool one_tool_call;          /* parallel_tool_calls: false: only the first call is returned */
    bool reasoning;              /* <think> ... </think> goes to reasoning_content */
    bool think_open;             /* the prompt ends inside <think> */
} srv_gen_req;

/* Parses and validates a request body for kind; renders chat messages with
 * the model's template and tokenizes. 0, or -1 with *err set (status 400;
 * 503 out_of_memory when the server ran out of memory). */
int srv_gen_req_parse(const srv_model_ctx *mc, srv_kind kind, const char *body, size_t len, srv_gen_req *out,
                      srv_error *err);
void srv_gen_req_free(srv_gen_req *r);
/* Choices of the answer: n x the prompts of a list. */
static inline int32_t srv_gen_req_choices(const srv_gen_req *q) { return q->p.n * (q->n_prompts > 1 ? q->n_prompts : 1); }

/* Field readers shared by the request parsers (server_openai.c): an absent
 * or null field leaves *out alone (*given false); a present one of the
 * wrong type or out of range is a 400 naming it. */
json_t *srv_field(json_t *o, const char *key);
const char *srv_json_kind(const json_t *v);
int srv_get_bool(json_t *o, const char *key, bool *out, srv_error *e);
int srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, bool *given, srv_error *e);
int srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, srv_error *e);

/* server_params.c: the sampling fields beyond the basic ones -
 * presence_penalty, frequency_penalty, logit_bias, min_tokens,
 * stop_token_ids, best_of - into q (q->p.n and max_tokens already set). */
int srv_parse_sampling_extras(const srv_model_ctx *mc, json_t *o, srv_gen_req *q, srv_error *e);
/* Appends one prompt token (a PL_EV_PROMPT event) to a completions
 * logprobs object; the first prompt token's logprob and alternatives are
 * null. *offset advances by the token string's code points. */
int srv_lp_prompt_add(json_t *lp, const srv_tokens *t, const pl_event *ev, size_t *offset);
/* Completions "echo": q->echo gets the prompt's text (call after the
 * prompt is parsed; text is the prompt string, or NULL for token ids). */
int srv_parse_echo(const srv_model_ctx *mc, json_t *o, const char *text, size_t len, srv_gen_req *q, srv_error *e);

/* ----------------------------------------------------------- responses */

/* One completion of a non-streaming request, accumulated from events. */
typedef struct {
    srv_buf text;
    const char *finish;  /* NULL until its DONE event */
    json_t *lp;          /* logprobs: completions {tokens, token_logprobs, top_logprobs,
                          * text_offset}; chat: the content array */
    size_t offset;       /* completions: code points of token strings so far (text_offset) */
    bool gen_started;    /* a generated token came (its offsets start after the echoed prompt) */
} srv_choice;

typedef struct {
    int32_t n;
    srv_choice ch[SRV_MAX_N];
    uint32_t prompt_tokens, cached_tokens, completion_tokens;
    int32_t n_done;
    bool failed;         /* an ERROR event came */
    char message[256];   /* its text */
} srv_result;

void srv_result_init(srv_result *r, int32_t n);
/* Adds one engine event. 0, or PL_ERR_NOMEM. */
int srv_result_add(srv_result *r, const srv_gen_req *q, const srv_tokens *t, const pl_event *ev);
/* The response object ("text_completion" or "chat.completion"), malloc'd. */
char *srv_result_json(const srv_result *r, const srv_gen_req *q, const char *id, long created, const char *model);
void srv_result_free(srv_result *r);

/* ------------------------------------------------- pieces shared with SSE */

/* {"prompt_tokens", "completion_tokens", "total_tokens",
 *  "prompt_tokens_details": {"cached_tokens"}} */
json_t *srv_usage_json(uint32_t prompt, uint32_t completion, uint32_t cached);
/* An empty completions logprobs object (four arrays), and appending one
 * token to it; *offset advances by the token's length in code points. */
json_t *srv_lp_completion_new(void);
int srv_lp_completion_add(json_t *lp, const srv_tokens *t, const pl_event *ev, size_t *offset);
/* One chat logprobs.content item: {token, logprob, bytes, top_logprobs}. */
json_t *srv_lp_chat_item(const srv_tokens *t, const pl_event *ev);
/* A JSON string of s[0..n); should s not be valid UTF-8, its bytes >= 0x80
 * become '?' (never NULL unless out of memory). */
json_t *srv_json_text(const char *s, size_t n);
/* A fresh response id: prefix + 24 random hex digits. */
void srv_make_id(char *out, size_t cap, const char *prefix);

#endif
