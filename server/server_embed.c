/* server_embed.c - /v1/embeddings: input parsing, one engine request per
 * input, the answer; see server_embed.h.
 *
 * Submission keeps going while the engine's queue takes requests; when it
 * is full (PL_ERR_FULL) the oldest request in flight is waited for, then
 * the submission is tried again, so a long input list never fails for its
 * own length. A client that goes away cancels whatever is in flight.
 */
#include "server_embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SRV_EMBED_POLL_MS 100

typedef struct {
    int32_t *ids;
    size_t n;
} embed_input;

typedef struct {
    embed_input *in;
    size_t n;
    uint32_t dim;
    float *vec;          /* [n x dim] */
    pl_request **r;      /* [n] in flight or NULL */
    uint64_t tokens;
} embed_job;

static void job_free(embed_job *j)
{
    for (size_t i = 0; j->in && i < j->n; i++) free(j->in[i].ids);
    for (size_t i = 0; j->r && i < j->n; i++) pl_request_free(j->r[i]);
    free(j->in);
    free(j->vec);
    free(j->r);
}

static int input_text(const srv_model_ctx *mc, json_t *s, size_t i, embed_input *out, srv_error *e)
{
    if (json_string_length(s) == 0) return srv_bad_request(e, "input", NULL, "input[%zu] is an empty string", i);
    int32_t *ids = NULL;
    size_t n = 0;
    if (pl_tokenize(mc->vocab, json_string_value(s), json_string_length(s), pl_vocab_add_bos(mc->vocab), false, &ids,
                    &n) != 0)
        return srv_bad_request(e, "input", NULL, "cannot tokenize input[%zu]: %s", i, pl_last_error());
    out->ids = malloc(sizeof *out->ids * (n ? n : 1));
    if (out->ids && n) memcpy(out->ids, ids, n * sizeof *ids);
    pl_free(ids);
    if (!out->ids) return srv_bad_request(e, NULL, NULL, "out of memory");
    out->n = n;
    return n ? 0 : srv_bad_request(e, "input", NULL, "input[%zu] has no tokens", i);
}

static int input_ids(const srv_model_ctx *mc, json_t *a, size_t i, embed_input *out, srv_error *e)
{
    size_t n = json_array_size(a);
    if (n == 0) return srv_bad_request(e, "input", NULL, "input[%zu] is an empty list of token ids", i);
    if (!(out->ids = malloc(sizeof *out->ids * n))) return srv_bad_request(e, NULL, NULL, "out of memory");
    out->n = n;
    for (size_t k = 0; k < n; k++) {
        json_t *t = json_array_get(a, k);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= pl_vocab_size(mc->vocab))
            return srv_bad_request(e, "input", NULL, "input[%zu][%zu] is not a token id of this model (0..%d)", i, k,
                                   pl_vocab_size(mc->vocab) - 1);
        out->ids[k] = (int32_t)id;
    }
    return 0;
}

/* "input": a string, a list of strings, a list of ids, a list of id lists. */
static int parse_input(const srv_model_ctx *mc, json_t *o, embed_job *j, srv_error *e)
{
    json_t *v = srv_field(o, "input");
    if (!v) return srv_bad_request(e, "input", NULL, "'input' is required");
    bool one = json_is_string(v) || (json_is_array(v) && json_array_size(v) > 0 && json_is_integer(json_array_get(v, 0)));
    if (!one && !json_is_array(v))
        return srv_bad_request(e, "input", NULL, "'input' must be a string, an array of strings, an array of token ids "
                                                 "or an array of arrays of token ids, got %s", srv_json_kind(v));
    j->n = one ? 1 : json_array_size(v);
    if (j->n == 0) return srv_bad_request(e, "input", NULL, "'input' is empty");
    if (j->n > SRV_EMBED_MAX_INPUTS)
        return srv_bad_request(e, "input", NULL, "'input' has %zu entries; at most %d are allowed", j->n, SRV_EMBED_MAX_INPUTS);
    if (!(j->in = calloc(j->n, sizeof *j->in))) return srv_bad_request(e, NULL, NULL, "out of memory");
    for (size_t i = 0; i < j->n; i++) {
        json_t *x = one ? v : json_array_get(v, i);
        int rc = json_is_string(x) ? input_text(mc, x, i, &j->in[i], e)
                 : json_is_array(x) ? input_ids(mc, x, i, &j->in[i], e)
                                    : srv_bad_request(e, "input", NULL, "input[%zu] must be a string or an array of token "
                                                                        "ids, got %s", i, srv_json_kind(x));
        if (rc) return rc;
        if (j->in[i].n > mc->n_ctx)
            return srv_bad_request(e, "input", "context_length_exceeded",
                                   "input[%zu] has %zu tokens; this model's context is %u tokens", i, j->in[i].n, mc->n_ctx);
        j->tokens += j->in[i].n;
    }
    return 0;
}

static int submit_error(int rc, srv_error *e)
{
    if (rc == PL_ERR_FULL)
        srv_error_set(e, 503, "server_error", NULL, "server_overloaded", "the server is busy: its request queue is full; retry later");
    else if (rc == PL_ERR_UNSUPPORTED)
        srv_error_set(e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    else if (rc == PL_ERR_INVAL || rc == PL_ERR_RANGE)
        srv_error_set(e, 400, "invalid_request_error", "input", NULL, "%s", pl_last_error());
    else
        srv_error_set(e, 500, "server_error", NULL, NULL, "%s", pl_last_error());
    return -1;
}

/* Waits for request i to end and takes its vector. */
static int wait_one(embed_job *j, size_t i, srv_gone_fn gone, void *cls, srv_error *e)
{
    pl_event ev;
    int rc;
    char msg[256] = "";
    while ((rc = pl_request_next(j->r[i], &ev, SRV_EMBED_POLL_MS)) != 2 && rc >= 0) {
        if (rc == 1 && ev.kind == PL_EV_ERROR) snprintf(msg, sizeof msg, "%s", ev.message);
        if (gone && gone(cls)) {
            srv_error_set(e, 499, "server_error", NULL, NULL, "the client went away");
            return -1;
        }
    }
    if (pl_request_embedding(j->r[i], j->vec + i * j->dim, j->dim) != 0) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "%s", msg[0] ? msg : pl_last_error());
        return -1;
    }
    pl_request_free(j->r[i]);
    j->r[i] = NULL;
    return 0;
}

static int run_all(pl_engine *eng, embed_job *j, srv_gone_fn gone, void *cls, srv_error *e)
{
    size_t oldest = 0;
    for (size_t i = 0; i < j->n; i++) {
        pl_request_params p;
        memset(&p, 0, sizeof p);
        p.prompt = j->in[i].ids;
        p.n_prompt = j->in[i].n;
        p.n = 1;
        p.max_tokens = 1;
        p.top_logprobs = -1;
        p.embed = true;
        pl_sampler_params_default(&p.sampling);
        for (;;) {
            int rc = pl_engine_submit(eng, &p, &j->r[i]);
            if (rc == 0) break;
            j->r[i] = NULL;
            if (rc != PL_ERR_FULL || oldest == i) return submit_error(rc, e);
            if (wait_one(j, oldest++, gone, cls, e)) return -1; /* queue full: let the oldest finish */
        }
    }
    for (; oldest < j->n; oldest++)
        if (j->r[oldest] && wait_one(j, oldest, gone, cls, e)) return -1;
    return 0;
}

char *srv_base64(const unsigned char *b, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        *o++ = tab[v >> 18 & 63];
        *o++ = tab[v >> 12 & 63];
        *o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *o = 0;
    return out;
}

/* One vector as JSON: numbers, or base64 of its little-endian f32 bytes. */
static json_t *vec_json(const float *v, uint32_t dim, bool b64)
{
    if (!b64) {
        json_t *a = json_array();
        for (uint32_t k = 0; a && k < dim; k++) json_array_append_new(a, json_real(v[k]));
        return a;
    }
    unsigned char *bytes = malloc((size_t)dim * 4);
    if (!bytes) return NULL;
    for (uint32_t k = 0; k < dim; k++) {
        uint32_t u;
        memcpy(&u, &v[k], 4);
        for (int s = 0; s < 4; s++) bytes[k * 4 + s] = (unsigned char)(u >> (8 * s));
    }
    char *s = srv_base64(bytes, (size_t)dim * 4);
    free(bytes);
    json_t *j = s ? json_string(s) : NULL;
    free(s);
    return j;
}

static char *answer(const embed_job *j, const char *model_name, bool b64)
{
    json_t *data = json_array();
    for (size_t i = 0; data && i < j->n; i++)
        json_array_append_new(data, json_pack("{s:s, s:I, s:o}", "object", "embedding", "index", (json_int_t)i,
                                              "embedding", vec_json(j->vec + i * j->dim, j->dim, b64)));
    json_t *o = json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model", model_name, "usage",
                          "prompt_tokens", (json_int_t)j->tokens, "total_tokens", (json_int_t)j->tokens);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static int parse_options(const srv_model_ctx *mc, json_t *o, bool *b64, srv_error *e)
{
    json_t *f = srv_field(o, "encoding_format");
    long long dims = 0;
    bool given = false;
    if (f && !(json_is_string(f) && (strcmp(json_string_value(f), "float") == 0 || strcmp(json_string_value(f), "base64") == 0)))
        return srv_bad_request(e, "encoding_format", NULL, "'encoding_format' must be \"float\" or \"base64\"");
    *b64 = f && strcmp(json_string_value(f), "base64") == 0;
    if (srv_get_int(o, "dimensions", 1, INT32_MAX, &dims, &given, e)) return -1;
    const uint32_t dim = pl_model_n_embd(mc->model);
    if (given && (uint64_t)dims != dim)
        return srv_bad_request(e, "dimensions", "unsupported_parameter",
                               "'dimensions' %lld is not supported: this model's embeddings have %u dimensions", dims, dim);
    return 0;
}

int srv_embed_run(pl_engine *eng, const srv_model_ctx *mc, const char *model_name, const char *body, size_t len,
                  srv_gone_fn gone, void *cls, char **out, srv_error *e)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o) return srv_bad_request(e, NULL, NULL, "invalid JSON in the request body: %s (line %d, column %d)", je.text, je.line, je.column);
    embed_job j = {0};
    bool b64 = false;
    int rc = json_is_object(o) ? 0 : srv_bad_request(e, NULL, NULL, "the request body must be a JSON object, got %s", srv_json_kind(o));
    if (!rc) rc = parse_options(mc, o, &b64, e);
    if (!rc) rc = parse_input(mc, o, &j, e);
    json_decref(o);
    if (!rc) {
        j.dim = pl_model_n_embd(mc->model);
        j.vec = calloc(j.n * j.dim, sizeof *j.vec);
        j.r = calloc(j.n, sizeof *j.r);
        if (!j.vec || !j.r) rc = srv_bad_request(e, NULL, NULL, "out of memory");
    }
    if (!rc) rc = run_all(eng, &j, gone, cls, e);
    if (!rc && !(*out = answer(&j, model_name, b64))) {
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        rc = -1;
    }
    job_free(&j);
    return rc;
}
