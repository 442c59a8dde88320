/* attention_chunks.h - attention of long rows in chunks of keys, merged by
 * their log-sum-exp (flash-decoding's merge), over attn_paged.
 *
 * attn_paged keeps a call's scores in scratch (rows x n_ctx floats): at
 * depth 16k that is 1 MiB for 16 rows, more than a core's L2, and the
 * scores then travel to memory and back between the softmax and the V
 * pass. Here a row that attends more than attn_chunk_min keys is cut at
 * fixed key positions (multiples of attn_chunk_keys, counted from token 0)
 * into chunks; each chunk is an attn_paged call over a shifted view of the
 * cache (attn_kv_chunk) that also yields its log-sum-exp, and the chunks'
 * results are folded in ascending order:
 *   L' = max(L, l), a = exp(L - L'), b = exp(l - L'),
 *   out = (out a + o b) / (a + b), L = L' + log(a + b).
 * Shorter rows take one call, over a view that starts at the block of
 * their window's lower bound (keys before it are never read; the same bits
 * as reading them, attention.h).
 *
 * The cut depends only on a row's own n_ctx and lo, and the fold on its
 * own chunks, so row independence (attention.h) holds: neither the tile a
 * row shares, nor the thread, nor the batch changes a bit. A chunked row
 * differs from the one-call softmax within float tolerance (the f16
 * weights of an f16 cache are rounded per chunk).
 *
 * Split mode: a cache read through a reader (attn_kv.reader) that also
 * offers a sealed view (attn_kv.sealed: fp8_e4m3 and KIVI, whose full
 * blocks the kernel reads in place) cuts every row at its own block: the
 * blocks before it in chunks through the sealed view, in place, then the
 * own block (still in the f16 stage) through the reader, folded last. The
 * reader then decodes one block per row instead of the whole context.
 *
 * Several tiles (calls' worth of rows, the same sequence) run chunk by
 * chunk: every tile's rows over chunk c, then over chunk c + 1, so that a
 * chunk's K/V, read once from memory, serves every tile from L2 (prefill
 * at depth: a query tile's keys are read once per tile group, not once
 * per tile).
 */
#ifndef PL_KERNELS_ATTENTION_CHUNKS_H
#define PL_KERNELS_ATTENTION_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"

/* Tiles one attn_chunks_run takes at most. */
#define ATTN_TILES_CAP 16

/* Keys of a chunk for blocks of bs tokens: 2048 rounded up to whole blocks
 * (K and V of one f16 head of 64 dims: 512 KiB, within L2 with the scores). */
uint32_t attn_chunk_keys(uint32_t bs);

/* Rows attending more keys than this (from their window's first block)
 * are chunked: 2 x attn_chunk_keys(bs). No call of attn_chunks_run has an
 * n_ctx above it, so attn_scratch_floats(attn_chunk_call_max(bs), ...)
 * sizes its scratch whatever the context. */
uint32_t attn_chunk_call_max(uint32_t bs);

/* Floats of work (besides the attn_paged scratch) one attn_chunks_run needs
 * for head_dim: partial outputs, their log-sum-exps, the running ones. */
size_t attn_chunks_work_floats(int head_dim);

/* out of every row of tiles[0..n_tiles) (n_rows[i] rows each, <=
 * ATTN_ROWS_CAP, n_tiles <= ATTN_TILES_CAP), as attn_paged would compute it
 * for short rows and by the chunked fold for long ones. The rows' out
 * buffers hold running results while the call runs. scratch: as for
 * attn_paged with max n_ctx min(longest row, attn_chunk_call_max); work:
 * attn_chunks_work_floats floats. Both owned by the calling thread. */
void attn_chunks_run(const attn_kv *kv, const attn_row *const *tiles, const int *n_rows, int n_tiles, float scale,
                     float *scratch, size_t scratch_floats, float *work);

/* Flash-decoding across threads: the same results, a row's pieces
 * computed anywhere and folded afterwards. Pieces of rows[0..n): chunk
 * c0 + p for p < the count's chunks, then (split mode) the own-block
 * pass. Returns the number of pieces and sets *c0; 0 when a row takes one
 * call (nothing to split). */
int attn_chunks_n_pieces(const attn_kv *kv, const attn_row *rows, int n, uint32_t *c0);

/* Floats a piece's results of n rows take: n x (head_dim + 1). */
size_t attn_chunks_piece_floats(int n, int head_dim);

/* Piece p (< attn_chunks_n_pieces) of every row into parts: row r's
 * result at parts + r (head_dim + 1), its log-sum-exp after it (-inf: the
 * row has no such piece). The rows' out buffers are not touched. scratch,
 * work: as attn_chunks_run. */
void attn_chunks_piece(const attn_kv *kv, const attn_row *rows, int n, int p, uint32_t c0, float scale,
                       float *scratch, size_t scratch_floats, float *work, float *parts);

/* out of every row from its pieces 0..n_pieces-1 (piece p at parts + p x
 * attn_chunks_piece_floats(n, head_dim)), folded in order: the bits of
 * attn_chunks_run. */
void attn_chunks_fold(const attn_row *rows, int n, int head_dim, const float *parts, int n_pieces);

#endif
