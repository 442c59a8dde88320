/* ctx_internal.h - what the engine (src/engine) may do with a pl_ctx beyond
 * the public API: one batched forward pass over several sequences. */
#ifndef PL_API_CTX_INTERNAL_H
#define PL_API_CTX_INTERNAL_H

#include "model/model.h"
#include "pagellm.h"

#define CTX_STEP_MAX_ITEMS 4096

typedef struct {
    int32_t seq;            /* a live sequence of the context */
    const int32_t *tokens;  /* tokens to append */
    uint32_t n;
    float *logits;          /* n_vocab floats for the last token, or NULL */
} ctx_item;

/* Appends each item's tokens to its sequence and runs them all in ONE
 * forward pass (the weights are read once for every sequence). Total tokens
 * <= max_batch; a sequence at most once. All or nothing: on PL_EFULL (KV
 * pool exhausted) no sequence changes. */
int ctx_step(pl_ctx *c, const ctx_item *items, int n_items);

/* The model behind a public handle. */
const model *pl_model_internal(const pl_model *pm);

#endif
