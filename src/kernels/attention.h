/* attention.h - attention over a paged KV cache: reference, AVX2, AVX-512.
 *
 * The kernel never sees the pool itself: the caller passes, for one layer
 * of one sequence, the block table and the address arithmetic of the pool.
 * Token j of the sequence lives in physical block blocks[j / block_size] at
 * row j % block_size:
 *   K row of token j, head g = k_base + blocks[j/bs] * block_bytes
 *                              + (j % bs) * row_bytes + g * head_bytes
 * (the same for V from v_base with v_block_bytes; f16 keys may instead be stored in columns,
 * attn_kv.k_cols below). The strides are free: rows that hold every head
 * side by side (head_bytes x n_heads = row_bytes), or rows grouped by head
 * in each block (the pool's f16 values: row_bytes = one head's row,
 * head_bytes = block_size of them), for which head_bytes > row_bytes. Rows are ggml rows of head_dim elements of
 * kv_type (F32, F16, BF16, Q8_0, Q4_0), or rows of OFP8 bytes
 * (ATTN_KV_FP8_E4M3 / _E5M2, one byte an element), so any quantized KV row
 * is read by dequantizing on the fly and the cache is never expanded.
 * E4M3 elements are times a power-of-two f32 scale per (block, plane, head):
 *   scale of head g in the block of token j = f32 at k_base (or v_base)
 *       + blocks[j/bs] * block_bytes (or v_block_bytes) + scale_off + 4 g
 * (the kv codec's plane tail; kernels/ takes the layout as plain numbers).
 *
 * One call attends a set of query vectors ("rows") of one sequence: the
 * n_rep query heads of a GQA group, the same heads of several prefill
 * tokens, or several KV heads of one decode token. Each row names its KV
 * head g and has its own context length (causal: the token at position p
 * attends to 0..p, n_ctx = p + 1). Rows with the same g should be adjacent:
 * a K/V row is then fetched once for all of them. A row may also have a
 * lower bound lo (sliding-window attention): it then attends to slots
 * lo..n_ctx-1 only, and its result is the same as that of the row with the
 * keys before lo absent (softmax over exactly the n_ctx - lo scores from lo
 * on, weights before lo exactly 0), so a caller may free the blocks before
 * lo / block_size and move the slots down without changing a bit (up to
 * the sign of a zero output element).
 *
 * Numerics follow llama.cpp's non-flash path, per row:
 *   s_j = (q . k_j) * scale                       for j in lo..n_ctx-1
 *   p_j = e_j * (float)(1 / sum_j e_j),  e_j = exp(s_j - max s), sum in double
 *   out = sum_j p_j v_j                           (j ascending)
 * With an f16 cache the query is rounded to f16 before Q.K and p_j is rounded
 * to f16 before it weights V, as ggml's mul_mat does when it converts the
 * f32 operand to the cache's dot type. With a q8_0 or q4_0 cache the query
 * is quantized to q8_0 (their dot type in ggml) and q . k_j is the exact
 * int dot of each 32-block times d_k x d_q, summed over blocks in order.
 * FP8 rows are read as the f32 values they encode (query and weights as
 * they are); an e4m3 scale is a power of two, so the kernel may apply it
 * to a key's score or a value's weight instead of each element: same bits. The softmax is exact two-pass (all
 * scores, then weights, then V), not flash's online rescaling, because the
 * f16 rounding applies to the final normalized weights.
 *
 * INVARIANT (row independence): a row's result depends only on its own q,
 * n_ctx and the cache, never on which other rows share the call, their
 * number or order, nor on the thread that runs it. Each variant computes
 * every row by one fixed sequence of float operations, so prefill chunking,
 * batching with other sequences, GQA grouping and the thread count all give
 * the same bits (the project tests identical tokens across all of these).
 * The AVX2 variant reaches this by tiling only the *memory* side: a K or V
 * row is loaded (and converted) once per call and used by every row of the
 * call that reads that KV head, while each row's dot products, softmax and
 * V sum keep one order.
 *
 * The variants differ from each other within float tolerance (AVX2: 8-lane
 * dot products with a fixed reduction tree, vector expf within ~2 ulp, FMA
 * in the V sum); tests/test_attention.c states the tolerance.
 */
#ifndef PL_KERNELS_ATTENTION_H
#define PL_KERNELS_ATTENTION_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A block reader supplied by the caller, for KV encodings that are not
 * rows (KIVI's per-channel keys: kv/kv_view.c implements it with kv/kv_codec.h,
 * which kernels/ may not include). Token j of the sequence is slot
 * j % block_size of logical block j / block_size. Both functions cover the
 * tokens [blk x block_size, blk x block_size + n) of KV head g, n <= block
 * size, for n_q query rows of one call:
 *   k_dot   scores[k * ld + t] = q[k] . K_t (unscaled), written;
 *   v_axpy  acc[k][i] += sum_t w[k * ldw + t] V_t[i], t ascending.
 * own: the block is the last one of these rows' context (the block their
 * token sits in), which a staged encoding (KIVI) reads in f16; other rows
 * read it as stored. Each result element must depend only on its own row,
 * token, own and the cache, never on n_q, n or the other rows (row
 * independence below). scratch: scratch_floats floats for n_q <=
 * ATTN_ROWS_CAP, owned by the calling thread. */
typedef struct attn_reader {
    void (*k_dot)(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *const *q, int n_q,
                  float *scores, size_t ld, float *scratch);
    void (*v_axpy)(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *w, size_t ldw, int n_q,
                   float *const *acc, float *scratch);
    const void *ctx;
    size_t scratch_floats;
} attn_reader;

typedef struct attn_kv {
    const uint32_t *blocks;         /* the sequence's block table */
    const uint8_t *k_base, *v_base; /* K / V plane of this layer in block 0 */
    size_t block_bytes;             /* from one block's K plane to the next block's */
    size_t v_block_bytes;           /* the same for V (a pool keeps a layer's K planes in
                                       one run and its V planes in another: attn_plane_step) */
    uint32_t block_size;            /* tokens per block */
    size_t row_bytes;               /* from one token slot to the next (a row of all heads,
                                       or of one head when rows are grouped by head) */
    size_t head_bytes;              /* from one head to the next (within a row, or from one
                                       head's run of block_size rows to the next) */
    uint32_t kv_type;               /* ggml type of the rows */
    int head_dim;
    const attn_reader *reader;      /* if not NULL, blocks are read through it (then only
                                       block_size and head_dim above are used) */
    size_t scale_off;               /* ATTN_KV_FP8_E4M3: where a block's plane keeps its
                                       per-head f32 scales, from the plane's start */
    bool k_cols;                    /* F16 only: the K plane is stored in columns (below);
                                       row_bytes and head_bytes then describe V alone */
    float softcap;                  /* > 0: each score s (after x scale) becomes
                                       softcap x tanhf(s x (1 / softcap)) before the softmax,
                                       as llama.cpp caps gemma2's logits; 0: none */
    uint32_t reader_blk0;           /* with a reader: the call's logical block 0 is the
                                       reader's block reader_blk0 (attn_kv_chunk) */
    bool reader_past;               /* with a reader: every block of the call is a past block
                                       of its rows, none their own (attn_kv_chunk) */
    const struct attn_kv *sealed;   /* with a reader, if not NULL: the same cache's blocks
                                       before each row's own block as rows the kernel reads
                                       in place (a staged encoding's sealed fp8 or KIVI blocks);
                                       attn_chunks_run then reads only own blocks through the
                                       reader. attn_paged itself ignores it. */
    float *lse;                     /* if not NULL, lse[r] receives the log-sum-exp of row r's
                                       scores lo..n_ctx-1 (after scale and softcap): max +
                                       log(sum of exp(s - max)), with which the caller merges
                                       one row's results over chunks of its keys */
} attn_kv;

/* Bytes from one block's plane to the next block's, for the plane at
 * plane (kv->k_base or kv->v_base). */
static inline size_t attn_plane_step(const attn_kv *kv, const uint8_t *plane)
{
    assert(plane == kv->k_base || plane == kv->v_base);
    return plane == kv->v_base ? kv->v_block_bytes : kv->block_bytes;
}

/* The view of blocks [blk0, ...) of kv as a cache of its own (token blk0 x
 * block_size becomes token 0): one chunk of a long context, attended by
 * rows whose n_ctx and lo are counted from the chunk's start. last: the
 * chunk holds the rows' own (last) block; false for a chunk that ends
 * before it, whose blocks are all full past blocks. */
static inline attn_kv attn_kv_chunk(const attn_kv *kv, uint32_t blk0, bool last)
{
    attn_kv c = *kv;
    c.blocks = kv->blocks + blk0;
    c.reader_blk0 = kv->reader_blk0 + blk0;
    c.reader_past = kv->reader_past || !last;
    return c;
}

/* K in columns (attn_kv.k_cols, kv_type DT_F16): a block's K plane holds,
 * channel after channel (channel c = g x head_dim + d), one column of
 * block_size halves, token slot after slot:
 *   K element d of token j, head g = k_base + blocks[j/bs] * block_bytes
 *                                    + ((g * head_dim + d) * bs + j % bs) * 2
 * so a head's keys of one block are one contiguous run of head_dim x bs
 * halves, and a score of 16 keys is a broadcast FMA per dim with no
 * transpose (the kv pool's f16 layout, kv_dtype.h). Numerics are those of
 * the row layout's (the same query, keys and order of the reference). */

/* kv_type values beyond ggml's types: OFP8 rows (see the top). */
#define ATTN_KV_FP8_E4M3 0x10000u
#define ATTN_KV_FP8_E5M2 0x10001u

/* Sealed KIVI blocks (kv/kv_codec.h "KIVI", b = 4 or 2 bits), read in
 * place: every block of the view is a full, sealed one. With C channels
 * (all heads), D = head_dim, T = block_size, cb = ceil(T b / 8):
 *   key code of token j, channel c (= g D + d): the column at k_base
 *       + blocks[j/T] * block_bytes + c * cb, code j % T (LSB first);
 *   its scale and min: f16 at the same block's K plane + scale_off + 2 c
 *       and + scale_off + 2 C + 2 c, scale_off = C x cb (so C = scale_off / cb);
 *   value row of token j: v_base + blocks[j/T] * v_block_bytes
 *       + (j % T) * row_bytes, C / 32 groups of | s f16 | m f16 | 32 codes |.
 * x^ = m + s x code. Scores and V are dotted from the codes (attention_kivi.c);
 * numerics as through a reader (no f16 rounding of queries or weights). */
#define ATTN_KV_KIVI4 0x10002u
#define ATTN_KV_KIVI2 0x10003u

/* One query vector and where its result goes. */
typedef struct {
    const float *q; /* head_dim floats */
    float *out;     /* head_dim floats; must not overlap any q of the call */
    int n_ctx;      /* attends to positions 0..n_ctx-1; 1 <= n_ctx */
    int g;          /* KV head */
    int lo;         /* sliding window: keys at cache slots < lo are excluded (their
                       softmax weight is exactly 0); 0 <= lo < n_ctx, 0 = none */
} attn_row;

/* Rows per call at most, whatever the context: a GQA group of 8 over 4
 * tokens, or TinyLlama's 4 KV heads of one decode token, so that each K/V
 * row fetched from L2/RAM serves 32 rows and a decode call reads whole
 * cache rows (every head side by side) in one sweep, not half of each row
 * twice: at depth 16384 on Zen 5 the decode attention of q8_0 and q4_0
 * takes 4-25% less CPU than with 16, f16's (planes grouped by head) the
 * same, and q8_0 and q4_0 prefill tiles 7-13% less (docs/long-context.md,
 * "The pool's layout at depth"). The score buffer: 32 x 4096 x 4 B =
 * 512 KiB at a chunk pair. */
#define ATTN_ROWS_CAP 32

/* With a reader (attn_kv.reader), a call computes, per row: scores by
 * k_dot block by block, times scale, kern_softmax over its n_ctx (the
 * active kernel table's, exact two-pass, sum in double), then v_axpy
 * block by block; no f16 rounding of queries or weights (the reader's
 * encodings are not ggml's dot types). Scratch: R x round8(n_ctx max) +
 * reader->scratch_floats floats (attn_scratch_floats_reader). */

/* Most rows one call may take when no row's n_ctx exceeds max_ctx (>= 1;
 * the scores of a call's rows live in scratch at once, so long contexts get
 * fewer rows per call). */
int attn_rows_max(int max_ctx);

/* Floats of scratch a call needs with up to attn_rows_max(max_ctx) rows of
 * n_ctx <= max_ctx: O(rows x max_ctx), never n_ctx x n_ctx. */
size_t attn_scratch_floats(int max_ctx, int head_dim);

/* Floats of scratch a call through a reader needs (see above). */
size_t attn_scratch_floats_reader(int max_ctx, size_t reader_scratch_floats);

/* out = attention of each row over its KV head (see above). scratch holds
 * scratch_floats >= attn_scratch_floats(max n_ctx of the rows, head_dim)
 * floats, owned by the calling thread; n_rows <= attn_rows_max(that max).
 * Uses the AVX2 variant when the CPU has it and kern_init did not force the
 * references. */
void attn_paged(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                size_t scratch_floats);

/* The variants, for tests. attn_paged_avx2 may only be called when
 * attn_avx2_available(). */
void attn_paged_ref(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                    size_t scratch_floats);
void attn_paged_avx2(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                     size_t scratch_floats);
bool attn_avx2_available(void);
/* The AVX-512 variant (attention_avx512.c): its own kernels for F16
 * caches (dot products in 4 FMA chains of dims mod 4 and a fixed sum, so
 * its bits differ from AVX2's within the same tolerance) and Q8_0 / Q4_0
 * caches (VNNI int8 dots: the reference's scores), the AVX2 variant for
 * every other type. attn_paged uses it when the active kernel table is an AVX-512 one
 * (not capped by PAGELLM_KERNELS, not forced to the reference). Only call
 * when attn_avx512_available(). */
void attn_paged_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                       size_t scratch_floats);
bool attn_avx512_available(void);

#endif
