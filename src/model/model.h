/* model.h - a loaded model and its batched forward pass over a paged KV cache.
 *
 * One forward call takes a ragged batch: tokens of several sequences, each
 * token with its position and sequence, each sequence with its block table.
 * The call first appends every token's K and V (after RoPE) to its
 * sequence's blocks, then lets each token attend to positions 0..pos of its
 * own sequence (or the last fwd_seq.window of them), so a prompt chunk and single decode tokens of other
 * sequences go through one pass, and the weights are read once per step.
 *
 * Logits are produced only for the tokens named in logit_idx.
 */
#ifndef PL_MODEL_MODEL_H
#define PL_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kv/kv_groups.h"
#include "kv/kv_pool.h"
#include "kv/kv_shift.h"
#include "kv/kv_writer.h"
#include "model/config.h"
#include "model/weights.h"

typedef struct {
    gguf_file *file;
    model_config cfg;
    model_weights w;
    uint64_t fingerprint[2]; /* identifies the weights (prefix-cache salt) */
    double key_cost;         /* model_key_cost */
} model;

int model_open(model **out, const char *path);

/* The caller's RoPE scaling in place of the file's (model_config_rope_override's
 * arguments), before any context uses m. Its numbers join the fingerprint:
 * the K a block caches is rotated by them, so blocks kept by a KV tier under
 * other RoPE settings must not match. */
int model_set_rope(model *m, const rope_override *o);

/* What attending to one more key of context adds to a prompt token's
 * work, in units of its matmuls: attention's multiply-adds a key (scores
 * and V sum, every layer and query head, f32) over the matmuls' (int8 dots
 * of quantized weights counted a quarter, as they run about 4x as many a
 * cycle; no output matrix, as a prompt token computes no logits). A token
 * at position p then costs about 1 + p key_cost depth-0 tokens. An
 * estimate for scheduling (engine/scheduler.h), not a timing, checked
 * against measured chunks at depth on two shapes (docs/long-context.md);
 * 0 when it cannot be had. */
double model_key_cost(const model *m);
void model_close(model *m);

typedef struct {
    kv_batch_seq kv;        /* its block table (covering every position written in this batch) and,
                               for the dtypes that need one, its stage (kv/kv_writer.h) */
    uint32_t pos0;          /* absolute position of cache slot 0 (tokens freed from the front by a
                               sliding window); RoPE uses slot + pos0, everything else the slot */
    uint32_t window;        /* sliding-window attention: the token at slot p attends to slots
                               max(0, p - window + 1)..p only; 0 = full causal attention */
    float *pool;            /* [dim] or NULL: embeddings - the final hidden state (after the output
                               norm) of this sequence's tokens in the batch is pooled into it */
    int pool_kind;          /* MODEL_POOL_MEAN: added; LAST: the last row is kept; CLS: slot 0's row */
} fwd_seq;

/* Layer groups (kv/kv_groups.h): the local groups' tables of the batch's
 * sequences and the tokens' slots in them; the global group's are the
 * fwd_seqs' and fwd_batch.pos. */
typedef struct {
    const kv_groups *kg;
    const kv_batch_seq *seqs; /* [kg->n_groups - 1][n_seqs] group g's at (g - 1) x n_seqs */
    const int32_t *slot;      /* [n_tokens] slot in the local tables: pos - dropped x block_size */
} fwd_groups;

/* A sequence's tokens in a batch are at consecutive positions, in order;
 * with a staged KV dtype they must also be adjacent in the batch
 * (kv_writer.h). n_seqs <= the fwd_state's max_tokens. */
typedef struct {
    int n_tokens;
    const int32_t *tokens;  /* [n_tokens] */
    const int32_t *pos;     /* [n_tokens] cache slot in its sequence (= position unless
                               its fwd_seq has pos0 > 0) */
    const int32_t *seq;     /* [n_tokens] index into seqs */
    const fwd_seq *seqs;
    int n_seqs;
    const int32_t *logit_idx; /* [n_logits] token indexes that want logits */
    int n_logits;
    const fwd_groups *groups; /* NULL: one table for all layers */
} fwd_batch;

typedef struct fwd_state fwd_state;

/* Scratch for batches of up to max_tokens tokens attending over up to
 * max_ctx positions, with a KV pool of geometry kvg (its dtype and block
 * size); the forward pass allocates nothing after this. */
int fwd_state_new(fwd_state **out, const model *m, int max_tokens, int max_ctx, const kv_geom *kvg, threadpool *tp);
void fwd_state_free(fwd_state *s);

/* kv_dtype_check_heads for this model's KV heads: 0, or PL_EUNSUPPORTED
 * with a text naming --kv-dtype and why. */
int model_kv_dtype_check(const model *m, kv_dtype t);

/* The model's RoPE, for re-rotating cached keys (kv/kv_shift.h); it points
 * into m's weights (frequency factors). */
kv_rope model_kv_rope(const model *m);

/* True when model_kv_rope describes every layer's RoPE, so that kept keys
 * can be re-rotated (kv_window): one base and scale for all layers, no
 * YaRN or attention factor, no LongRoPE factors. */
bool model_rope_shiftable(const model *m);

/* Runs the batch; logits gets n_logits rows of n_vocab floats. */
int model_forward(const model *m, fwd_state *s, kv_pool *kv, const fwd_batch *b, float *logits);

#endif
