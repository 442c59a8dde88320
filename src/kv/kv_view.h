/* kv_view.h - the attention kernel's view of one sequence's cache in one
 * layer (kernels/attention.h's attn_kv), for every KV dtype.
 *
 * kernels/ may not include kv/, so the kernel takes the cache as plain
 * address arithmetic (attn_kv), or, for encodings that are not rows of a
 * type it knows, as an attn_reader of callbacks. This file makes either
 * from the pool and a batch:
 *   f32 f16 bf16 q8_0 q4_0  ggml rows per head (f16: keys in columns,
 *       values grouped by head), read by the kernel in place;
 *   fp8_e5m2  rows of OFP8 bytes, read in place (ATTN_KV_FP8_E5M2);
 *   fp8_e4m3 kivi4 kivi2  (staged, kv_writer.h) through the reader below,
 *       which decodes one block at a time with kv_codec (never the cache)
 *       and reads a row's own block in f16: from the sequence's stage for
 *       slots before the batch, from the writer's batch rows for the slots
 *       in it (step 2 of kv_writer.h).
 * fp8_e4m3's sealed blocks are also rows the kernel reads in place (e4m3
 * bytes, the block scales in each plane's tail): kv.sealed is that view,
 * and attn_chunks_run reads every block before a row's own in place and
 * only the own block (f16 stage or batch rows) through the reader.
 */
#ifndef PL_KV_KV_VIEW_H
#define PL_KV_KV_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kv/kv_pool.h"
#include "kv/kv_writer.h"

/* What the reader needs of one sequence in one layer. */
typedef struct {
    const kv_pool *pool;
    const kv_batch_seq *sq;
    uint32_t layer;
    uint32_t from;           /* staged dtypes: slots >= from are batch rows, row 0 at kh/vh */
    const uint16_t *kh, *vh; /* NULL: not staged */
} kv_view_reader;

/* One view. It points into itself (kv.reader -> rd, rd.ctx -> rc): make it
 * where it is used, never copy it. */
typedef struct {
    attn_kv kv;        /* what attn_paged takes */
    attn_kv sealed;    /* fp8_e4m3: its sealed blocks read in place (kv.sealed) */
    attn_reader rd;    /* kv.reader for kv_codec's encodings */
    kv_view_reader rc; /* rd.ctx */
} kv_view;

/* Floats of scratch one attn_paged call over views of geometry g needs,
 * for rows of n_ctx <= max_ctx (per thread; attn_scratch_floats, or more
 * with a reader). */
size_t kv_view_scratch_floats(const kv_geom *g, int max_ctx);

/* The view of sequence seq of batch b in layer of pool. w is the writer
 * that stored b (staged dtypes read its batch rows: between its store and
 * commit of layer). The dtype must pass kv_dtype_check_heads. */
void kv_view_init(kv_view *v, const kv_pool *pool, const kv_writer *w, const kv_batch *b, int seq, uint32_t layer);

#endif
