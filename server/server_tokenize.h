/* server_tokenize.h - POST /tokenize and /detokenize (llama-server's
 * shapes); see server_tokenize.c. Each takes the request body and returns
 * the answer object, or NULL with *e set (400 naming the field, 500 out of
 * memory). */
#ifndef PL_SERVER_TOKENIZE_H
#define PL_SERVER_TOKENIZE_H

#include "server_openai.h"
#include "server_tokens.h"

json_t *srv_tokenize(const srv_model_ctx *mc, const srv_tokens *t, const char *body, size_t len, srv_error *e);
json_t *srv_detokenize(const srv_model_ctx *mc, const char *body, size_t len, srv_error *e);

#endif
