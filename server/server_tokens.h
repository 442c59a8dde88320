/* server_tokens.h - every token's raw bytes and display string, for the
 * logprobs of the OpenAI API ("tokens", "token", "bytes").
 *
 * The bytes are what the token contributes to the text: SentencePiece's ▁
 * becomes a space and <0xNN> byte tokens their byte; byte-level BPE undoes
 * GPT-2's byte alphabet. A token that is a fragment of a multi-byte
 * character has bytes that are not UTF-8 on their own; its display string
 * is then OpenAI's "bytes:\xNN..." form, so every display string is valid
 * UTF-8 and may go into JSON as is.
 *
 * Built once at start from the public vocabulary API (read-only after, so
 * any thread may use it).
 */
#ifndef PL_SERVER_TOKENS_H
#define PL_SERVER_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "pagellm.h"

typedef struct {
    int32_t n;
    uint32_t *boff;  /* [n+1] token i's bytes are bytes[boff[i], boff[i+1]) */
    char *bytes;
    uint32_t *soff;  /* [n+1] token i's display string is strs + soff[i] (NUL-terminated) */
    char *strs;
} srv_tokens;

/* tokenizer_model: tokenizer.ggml.model ("llama" = SentencePiece, "gpt2" =
 * byte-level BPE; anything else: pieces with ▁ as space). 0 or PL_ERR_NOMEM. */
int srv_tokens_init(srv_tokens *t, const pl_vocab *v, const char *tokenizer_model);
void srv_tokens_free(srv_tokens *t);

/* Display string of id ("" when out of range). */
const char *srv_token_str(const srv_tokens *t, int32_t id);
/* Raw bytes of id (*n = 0 when out of range). */
const uint8_t *srv_token_bytes(const srv_tokens *t, int32_t id, size_t *n);

/* True when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
int srv_utf8_valid(const char *s, size_t n);
/* Unicode code points in valid UTF-8 s[0..n). */
size_t srv_utf8_count(const char *s, size_t n);

#endif
