/* server_embed.h - POST /v1/embeddings (OpenAI's shape):
 *
 *   {"input": str | [str...] | [id...] | [[id...]...], "model"?,
 *    "encoding_format"?: "float" (default) | "base64", "dimensions"?: int, "user"?}
 *   -> {"object": "list", "data": [{"object": "embedding", "index": i,
 *       "embedding": [f32...] | base64 of little-endian f32}], "model",
 *       "usage": {"prompt_tokens", "total_tokens"}}
 *
 * Each input is one engine request (pl_request_params.embed): they are
 * submitted together and batch in the engine's steps like prompts do.
 * Strings are tokenized as completions prompts are (BOS when the
 * vocabulary wants it, special-token text not parsed); token ids are used
 * as given. dimensions other than the model's width is a 400 (no
 * truncation is offered).
 */
#ifndef PL_SERVER_EMBED_H
#define PL_SERVER_EMBED_H

#include <stdbool.h>

#include "server_openai.h"

#define SRV_EMBED_MAX_INPUTS 2048 /* inputs in one request (OpenAI's limit) */

/* Called while waiting: true when the client went away (the requests are
 * then cancelled). */
typedef bool (*srv_gone_fn)(void *cls);

/* Runs the request body; 0 with *out the answer (malloc'd JSON), or -1
 * with *e set (400 naming the field, 503 queue full or shutting down, 500). */
int srv_embed_run(pl_engine *eng, const srv_model_ctx *mc, const char *model_name, const char *body, size_t len,
                  srv_gone_fn gone, void *cls, char **out, srv_error *e);

/* Base64 (RFC 4648, padded) of n bytes, malloc'd and NUL-terminated. */
char *srv_base64(const unsigned char *b, size_t n);

#endif
