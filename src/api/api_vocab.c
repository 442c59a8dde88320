/* api_vocab.c - the tokenizer part of include/pagellm.h: thin wrappers over
 * src/tokenizer (see tokenizer.h for the behaviour, including what happens
 * to invalid UTF-8, NUL bytes and very long texts). Arguments from outside
 * are checked here; pl_vocab and tok_vocab are the same object. */
#include "pagellm.h"

#include "base/err.h"
#include "tokenizer/tokenizer.h"

#include <stdlib.h>

int pl_vocab_load(pl_vocab **out, const char *gguf_path)
{
    if (!out || !gguf_path) return err_set(PL_EINVAL, "pl_vocab_load: NULL argument");
    return tok_vocab_load_path(out, gguf_path);
}

void pl_vocab_free(pl_vocab *v) { tok_vocab_free(v); }

int32_t pl_vocab_size(const pl_vocab *v) { return v ? tok_vocab_size(v) : 0; }
int32_t pl_vocab_bos(const pl_vocab *v) { return v ? tok_vocab_bos(v) : -1; }
int32_t pl_vocab_eos(const pl_vocab *v) { return v ? tok_vocab_eos(v) : -1; }
bool pl_vocab_add_bos(const pl_vocab *v) { return v && tok_vocab_add_bos(v); }
bool pl_vocab_is_eog(const pl_vocab *v, int32_t id) { return v && tok_vocab_is_eog(v, id); }

int pl_tokenize(const pl_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                int32_t **ids, size_t *n_ids)
{
    if (!v || !ids || !n_ids || (!text && len)) return err_set(PL_EINVAL, "pl_tokenize: NULL argument");
    return tok_tokenize(v, text, len, add_bos, parse_special, ids, n_ids);
}

const char *pl_token_piece(const pl_vocab *v, int32_t id) { return v ? tok_vocab_text(v, id) : ""; }

int pl_detokenize(const pl_vocab *v, const int32_t *ids, size_t n, char **text, size_t *len)
{
    if (!v || !text || !len || (!ids && n)) return err_set(PL_EINVAL, "pl_detokenize: NULL argument");
    return tok_detokenize(v, ids, n, text, len);
}

pl_detok *pl_detok_new(const pl_vocab *v)
{
    if (!v) {
        err_set(PL_EINVAL, "pl_detok_new: NULL vocabulary");
        return NULL;
    }
    return tok_detok_new(v);
}

void pl_detok_free(pl_detok *d) { tok_detok_free(d); }

int pl_detok_push(pl_detok *d, int32_t id, char *out, size_t cap)
{
    if (!d) return err_set(PL_EINVAL, "pl_detok_push: NULL detokenizer");
    return tok_detok_push(d, id, out, cap);
}

int pl_detok_flush(pl_detok *d, char *out, size_t cap)
{
    if (!d) return err_set(PL_EINVAL, "pl_detok_flush: NULL detokenizer");
    return tok_detok_flush(d, out, cap);
}
