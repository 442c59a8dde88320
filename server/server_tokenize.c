/* server_tokenize.c - llama-server's /tokenize and /detokenize:
 *
 *   POST /tokenize   {"content": str, "add_special"?: bool (false),
 *                     "parse_special"?: bool (true), "with_pieces"?: bool (false)}
 *                 -> {"tokens": [id...]}, or with_pieces
 *                    {"tokens": [{"id": id, "piece": str | [bytes]}...]}
 *   POST /detokenize {"tokens": [id...]} -> {"content": str}
 *
 * add_special adds BOS when the model's vocabulary wants one; a piece is
 * the token's text as a string when it is valid UTF-8 on its own, else its
 * bytes (a fragment of a character), as llama-server answers.
 */
#include "server_tokenize.h"

#include <stdlib.h>
#include <string.h>

#define SRV_DETOK_MAX (1 << 20) /* token ids in one /detokenize body */

static json_t *load_object(const char *body, size_t len, srv_error *e)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o) {
        srv_bad_request(e, NULL, NULL, "invalid JSON in the request body: %s (line %d, column %d)", je.text, je.line,
                        je.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        srv_bad_request(e, NULL, NULL, "the request body must be a JSON object, got %s", srv_json_kind(o));
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *piece_json(const srv_tokens *t, int32_t id)
{
    size_t n;
    const uint8_t *b = srv_token_bytes(t, id, &n);
    if (srv_utf8_valid((const char *)b, n)) return json_stringn((const char *)b, n);
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(b[i]));
    return a;
}

static json_t *tokens_json(const srv_tokens *t, const int32_t *ids, size_t n, bool pieces)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, pieces ? json_pack("{s:i, s:o}", "id", (int)ids[i], "piece", piece_json(t, ids[i]))
                                        : json_integer(ids[i]));
    return json_pack("{s:o}", "tokens", a);
}

json_t *srv_tokenize(const srv_model_ctx *mc, const srv_tokens *t, const char *body, size_t len, srv_error *e)
{
    json_t *o = load_object(body, len, e);
    if (!o) return NULL;
    bool add = false, special = true, pieces = false;
    json_t *c = srv_field(o, "content"), *res = NULL;
    if (srv_get_bool(o, "add_special", &add, e) || srv_get_bool(o, "parse_special", &special, e) ||
        srv_get_bool(o, "with_pieces", &pieces, e)) {
    } else if (!c) {
        srv_bad_request(e, "content", NULL, "'content' is required");
    } else if (!json_is_string(c)) {
        srv_bad_request(e, "content", NULL, "'content' must be a string, got %s", srv_json_kind(c));
    } else {
        int32_t *ids = NULL;
        size_t n = 0;
        if (pl_tokenize(mc->vocab, json_string_value(c), json_string_length(c), add && pl_vocab_add_bos(mc->vocab),
                        special, &ids, &n) != 0)
            srv_bad_request(e, "content", NULL, "cannot tokenize 'content': %s", pl_last_error());
        else if (!(res = tokens_json(t, ids, n, pieces)))
            srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        pl_free(ids);
    }
    json_decref(o);
    return res;
}

json_t *srv_detokenize(const srv_model_ctx *mc, const char *body, size_t len, srv_error *e)
{
    json_t *o = load_object(body, len, e);
    if (!o) return NULL;
    json_t *a = srv_field(o, "tokens"), *res = NULL;
    int32_t *ids = NULL;
    size_t n = a && json_is_array(a) ? json_array_size(a) : 0;
    if (!a) srv_bad_request(e, "tokens", NULL, "'tokens' is required");
    else if (!json_is_array(a)) srv_bad_request(e, "tokens", NULL, "'tokens' must be an array of token ids, got %s", srv_json_kind(a));
    else if (n > SRV_DETOK_MAX) srv_bad_request(e, "tokens", NULL, "'tokens' has %zu ids; at most %d", n, SRV_DETOK_MAX);
    else if (!(ids = malloc(sizeof *ids * (n ? n : 1)))) srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    else {
        size_t i = 0;
        for (; i < n; i++) {
            json_t *v = json_array_get(a, i);
            json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (id < 0 || id >= pl_vocab_size(mc->vocab)) {
                srv_bad_request(e, "tokens", NULL, "tokens[%zu] is not a token id of this model (0..%d)", i,
                                pl_vocab_size(mc->vocab) - 1);
                break;
            }
            ids[i] = (int32_t)id;
        }
        char *text = NULL;
        size_t tl = 0;
        if (i < n) {
        } else if (pl_detokenize(mc->vocab, ids, n, &text, &tl) != 0) {
            srv_error_set(e, 500, "server_error", NULL, NULL, "cannot detokenize: %s", pl_last_error());
        } else if (!(res = json_pack("{s:o}", "content", srv_json_text(text, tl)))) {
            srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        }
        pl_free(text);
    }
    free(ids);
    json_decref(o);
    return res;
}
