/* tokenizer.h - text <-> token ids with the vocabulary stored in a GGUF file,
 * giving the same ids and text as llama.cpp for the same file.
 *
 * Supported: tokenizer.ggml.model "llama" (SentencePiece: score-driven
 * bigram merges, ▁ for spaces, byte fallback to <0xXX>) and "gpt2"
 * (byte-level BPE: merge ranks, a regex pre-tokenizer run with PCRE2 for
 * tokenizer.ggml.pre gpt-2/default, llama3/llama-bpe, qwen2, deepseek,
 * starcoder, falcon and most other regex-only pre-tokenizers). Anything else
 * is refused with PL_EUNSUPPORTED naming the key and its value.
 *
 * Loading validates every key it reads: a missing or wrong-typed
 * tokenizer.ggml.tokens/scores/token_type/merges, arrays shorter than the
 * token list, or a special token id (bos/eos/unk/...) outside the
 * vocabulary fail with an error naming the key. (llama.cpp only warns about
 * bad ids and keeps its defaults; we refuse such a file. An id of -1 or
 * 0xFFFFFFFF is read as "none", which converters write.)
 *
 * Behaviour on unusual input (all of it deterministic, none of it fatal):
 * - Embedded NUL bytes are ordinary characters (lengths are explicit).
 * - Invalid UTF-8, SentencePiece: bytes are grouped by their lead byte as
 *   llama.cpp does and end as byte tokens (<0xXX>), so they come back from
 *   detokenization as the same bytes - except that a space inside such a
 *   group comes back as the bytes of ▁. Valid UTF-8 always round-trips
 *   when the vocabulary has byte fallback.
 * - Invalid UTF-8, BPE: each undecodable byte becomes U+FFFD before
 *   pre-tokenization (as llama.cpp); overlong forms and surrogates decode
 *   like llama.cpp does. Where llama.cpp throws (a sequence above U+10FFFF)
 *   we also write U+FFFD.
 * - Long input: time and memory are O(n log n) in the text length. BPE
 *   merges run per pre-tokenized word; SentencePiece merges run per
 *   "▁word" chunk when no token of the vocabulary can span such a cut
 *   (true of Llama's vocabulary), else over the whole text with a heap.
 *   Repeated words are merged once per call (a word cache). 1 MB of
 *   English takes about 0.1 s on one core; 1 MB without a single space
 *   (the worst case: one giant word) about 1 s.
 * - A SentencePiece byte with neither <0xXX> nor a one-byte token becomes
 *   the unk token, or nothing without one (llama.cpp aborts there).
 *
 * Threads: a loaded vocabulary is never written again, so any number of
 * threads may tokenize and detokenize with it at once; a tok_detok stream
 * belongs to one thread at a time.
 */
#ifndef PL_TOKENIZER_H
#define PL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef enum { TOK_SPM = 1, TOK_BPE = 2 } tok_kind;

/* The same object as the public pl_vocab. */
typedef struct pl_vocab tok_vocab;

/* Reads the tokenizer.ggml.* metadata of an open GGUF file. The vocabulary
 * copies what it needs: f may be closed afterwards. */
int tok_vocab_load(tok_vocab **out, const gguf_file *f);
/* Opens path, loads its vocabulary and closes it. */
int tok_vocab_load_path(tok_vocab **out, const char *path);
void tok_vocab_free(tok_vocab *v);

int32_t tok_vocab_size(const tok_vocab *v);
tok_kind tok_vocab_kind(const tok_vocab *v);
int32_t tok_vocab_bos(const tok_vocab *v);
int32_t tok_vocab_eos(const tok_vocab *v);
bool tok_vocab_add_bos(const tok_vocab *v);
bool tok_vocab_is_eog(const tok_vocab *v, int32_t id);
/* The stored text of a token (NUL-terminated; "" for ids out of range). */
const char *tok_vocab_text(const tok_vocab *v, int32_t id);
/* Bytes of the longest decoded piece: a push into a tok_detok never needs
 * more than 4 times this + 16 bytes of output room (U+FFFD for a stray
 * byte takes 3). */
size_t tok_vocab_max_piece(const tok_vocab *v);
/* The bytes generating token id adds to the output, as tok_detok_push
 * streams them (control and unknown tokens: none, *len = 0). */
const char *tok_vocab_output_bytes(const tok_vocab *v, int32_t id, size_t *len);

/* Text -> ids, as llama_tokenize(add_special = add_bos, parse_special):
 * add_bos puts BOS first when the vocabulary has one, and then also appends
 * EOS if the file sets tokenizer.ggml.add_eos_token. parse_special turns
 * the texts of control tokens ("<s>", "<|endoftext|>") into their ids;
 * user-defined tokens are always matched, as in llama.cpp. *ids is malloc'd
 * (free()); an empty result gives *ids = NULL, *n = 0. */
int tok_tokenize(const tok_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                 int32_t **ids, size_t *n);

/* Ids -> text, as llama_detokenize(remove_special = false, unparse_special
 * = false): control tokens render as nothing, byte tokens as their byte,
 * SentencePiece drops the leading space of the first piece (only when that
 * first id is not a control token such as BOS - llama.cpp's rule), and
 * byte-level BPE vocabularies with clean-up (gpt-2, llama3...) remove the
 * space before ?!., and in " 's" " 'm" " 're" " 've". The bytes are
 * returned as llama.cpp produces them, valid UTF-8 or not. *text is
 * malloc'd and NUL-terminated. PL_ERANGE names an id out of range. */
int tok_detokenize(const tok_vocab *v, const int32_t *ids, size_t n, char **text, size_t *len);

/* Streaming detokenizer for generated tokens: each push adds the token's
 * piece exactly as llama.cpp prints a generated token (the leading space is
 * kept, no clean-up), and writes only complete UTF-8: an incomplete
 * sequence at the end is held until a later push completes it, and bytes
 * that can never form a character become U+FFFD. So the concatenated
 * output equals tok_detokenize of the same ids whenever that is valid UTF-8
 * and neither of its two whole-text rules applies (e.g. the ids start with
 * BOS, or the vocabulary is SentencePiece and clean-up-free). */
typedef struct pl_detok tok_detok;

tok_detok *tok_detok_new(const tok_vocab *v); /* NULL on ENOMEM */
void tok_detok_free(tok_detok *d);
/* Writes the newly complete text to out (NUL-terminated) and returns its
 * length. If it does not fit in cap bytes, returns PL_ERANGE and leaves the
 * stream as it was (retry with more room; 4 * tok_vocab_max_piece + 16
 * always suffices). PL_ERANGE also for an id out of range (nothing consumed). */
int tok_detok_push(tok_detok *d, int32_t id, char *out, size_t cap);
/* Writes whatever is held (an incomplete tail becomes U+FFFD) and empties
 * the stream. Same return and PL_ERANGE contract as push. */
int tok_detok_flush(tok_detok *d, char *out, size_t cap);

#endif
