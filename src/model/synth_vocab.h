/* synth_vocab.h - the built-in byte-level BPE vocabulary of synthetic models.
 *
 * Layout of a vocabulary of n tokens (n >= 259):
 *   0..255      one token per byte, in GPT-2's byte-to-unicode spelling
 *   256         <|bos|>  (control)
 *   257         <|eos|>  (control)
 *   258..n-1    lowercase words "Ġa".."Ġz", "aa", "Ġaa", ... (normal), each with
 *               the merge that builds it from a shorter token, so the
 *               vocabulary is a complete BPE and real text tokenizes into it.
 * The pre-tokenizer is GPT-2's. Everything is deterministic; no seed.
 */
#ifndef PL_MODEL_SYNTH_VOCAB_H
#define PL_MODEL_SYNTH_VOCAB_H

#include <stdint.h>

#include "gguf/gguf.h"

/* Writes the tokenizer.ggml.* metadata for an n-token vocabulary. */
int synth_vocab_write(gguf_writer *w, uint32_t n_vocab);

#endif
