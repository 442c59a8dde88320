/* kv_codec.h - encoding and decoding of the KV cache, for every KV dtype:
 * the write side that kv_writer.c calls per token (or block) and layer, and
 * the read side that attention calls block by block (dequantizing on the
 * fly; the cache is never expanded). kv_dtype.h says how many bytes each
 * dtype takes; this file says what the bytes mean.
 *
 * What writing a token means, per dtype:
 *   f32 f16 bf16 q8_0 q4_0 fp8_e5m2  row-major and stateless: a token's row is
 *       encoded on its own (q4_0 with ggml's reference rounding, as
 *       llama.cpp's cache does; q8_0/q4_0 group 32 elements along the row).
 *   fp8_e4m3  staged like KIVI (below): rows go in f16 into the sequence's
 *       kv_stage; the write of a block's last slot seals it: T row-major
 *       e4m3 rows, plus one f32 scale per (block, layer, K|V, KV head) in
 *       the plane tail, element = e4m3(x / s). See "E4M3 scales" below.
 *   kivi4 kivi2  staged: rows go in f16 into the sequence's kv_stage; the
 *       write of a block's last slot seals it (quantizes the T staged rows
 *       into the pool block, once). See "KIVI" below.
 *
 * ---------------------------------------------------------------- FP8
 * Both formats follow the OCP 8-bit floating point spec (OFP8 rev 1.0):
 *   e4m3  S.EEEE.MMM, bias 7, subnormals, no infinities, NaN = S.1111.111,
 *         max finite 448 (S.1111.110), min subnormal 2^-9.
 *   e5m2  S.EEEEE.MM, bias 15, IEEE-like: inf = S.11111.00, NaN = S.11111.xx
 *         (xx != 0), max finite 57344 (S.11110.11), min subnormal 2^-16;
 *         e5m2 is exactly the top byte of an IEEE half.
 * Conversion from f32 rounds to nearest, ties to even, once, directly from
 * the f32 bits (going through f16 first would round twice and get ties
 * wrong: 1.125 + 2^-12 is nearer 1.25 than 1.0 in e5m2, but becomes the tie
 * 1.125 in f16, which then rounds to even 1.0). Overflow policy:
 *   finite values beyond the max saturate to +-max in both formats (OFP8's
 *       saturation mode): a KV value of 60000 must not become inf, which
 *       would turn attention into NaN; the error of a saturated e4m3 value
 *       cannot occur anyway while the block scale is kept right (below);
 *   +-inf: e4m3 has none, so it saturates to +-448 (x scale); e5m2 keeps inf
 *       (an inf in K or V is already a bug upstream; keeping it is what an f16
 *       cache does, and it stays visible);
 *   NaN stays NaN (e4m3 S.1111.111, e5m2 S.11111.10), sign kept; -0 stays -0.
 *
 * E4M3 scales ("when the block is written"). Chosen: the block is written
 * once, when it is full, from the f16 rows of the sequence's stage (KIVI's
 * residual window: the block being filled is read in f16 until then), and
 * each head's scale is picked from the whole block to minimise the squared
 * error: amax = the head's largest finite |x| over the block's T rows,
 * candidates s_k = amax / 448 x 2^(k / 16), k = 0 .. 16 (one octave: a
 * float format's relative grid repeats every factor of 2), the first with
 * the least sum of (x - e4m3(x / s) s)^2 wins (k = 0 maps amax to 448
 * exactly). Zeros only: s = 0 (codes decode to 0).
 * Why (measured with `pagellm perplexity` on stories260K, the stories text,
 * ctx 512, vs f16; README "What each KV dtype costs in quality"):
 *   - the error is the keys': e4m3 on values alone +0.0% / KL 2.4e-4, on
 *     keys alone +6.5% / KL 5.1e-2 (head dim 8: one key element rounding by
 *     up to 1/16 moves q.k a lot);
 *   - scale granularity does not matter with power-of-two scales (per token
 *     and per block both +6.7%): they only shift exponents; what matters is
 *     where the grid falls on the largest elements. Per token and head,
 *     amax / 448 scales gave +1.7%, least-squares ones +1.2% -- at 2-4
 *     more bytes per head and token;
 *   - the stage (block being filled in f16): +0.87% with power-of-two
 *     scales, +0.71% (KL 5.4e-3) with the least-squares block scales above,
 *     at no byte per token: the per-sequence stage is kv_dtype_stage_bytes.
 *   The previous policy (power-of-two scales raised while the block filled,
 *   re-encoding its rows; no stage) gave +6.67%, KL 5.3e-2.
 * Cost: 17 trial encodings of each element, once per block (kv_codec_seal).
 *
 * ---------------------------------------------------------------- KIVI
 * kivi4 / kivi2 (KIVI, Liu et al. 2024): asymmetric min/max quantization
 * with b = 4 or 2 bits, L = 2^b - 1 levels:
 *   d = f16((max - min) / L), m = f16(min), code = clamp(rne((x - m) / d), 0, L),
 *   x^ = m + d x code    (d = 0: every code is 0, x^ = m)
 * over these groups:
 *   keys   per channel over the block's T tokens (outlier channels of the
 *          keys, which are large for every token, get their own range)
 *   values per token, in groups of 32 along the KV row (values have no
 *          channel outliers; a token's row is its own group). kv_dim must
 *          be a multiple of 32; with head_dim not a multiple of 32 (e.g. 8)
 *          a group spans heads, and reads slice it per head.
 * The block being filled is the "residual" window in f16: it lives in the
 * sequence's kv_stage (one f16 block, all layers) and is quantized once, at
 * the write of its last slot (kv_codec_seal); until then attention reads it
 * in f16 from the stage. Staged values are saturated to +-65504 (f16 max).
 * fp8_e4m3 uses the same stage, the same seal points and the same reads.
 *
 * Pool layout of a KIVI block's layer (b bits, T tokens, C = kv_dim
 * channels, H heads of D = head_dim; cb = ceil(T x b / 8) bytes per column):
 *
 *   K plane (channel-major):
 *   | col 0 | col 1 | ... | col C-1 | d[0] ... d[C-1] | m[0] ... m[C-1] |
 *     cb B each                       f16 each           f16 each
 *     col c = codes of channel c for tokens 0..T-1, LSB first:
 *       b=4: byte j = | tok 2j+1 (hi nibble) | tok 2j (lo nibble) |
 *       b=2: byte j = | tok 4j+3 | tok 4j+2 | tok 4j+1 | tok 4j |  (2 bits each)
 *     channel c = head c / D, dim c % D: a head's columns are contiguous.
 *
 *   V plane (row-major, like the other row dtypes):
 *   | row 0 | row 1 | ... | row T-1 |      row = C / 32 groups
 *     group = | d f16 | m f16 | 32 codes, LSB first (16 B at b=4, 8 B at b=2) |
 *
 * The stage (per sequence, not in the pool):
 *   rows: | layer 0: K [T][C] f16 | V [T][C] f16 | layer 1: ... |
 * a staged plane is laid out exactly like an f16 pool plane, so it is read
 * as one (kv_block_ref with dtype f16).
 *
 * Order of writes (all dtypes): a block's slots are written in increasing
 * order; a write at slot j assumes slots [0, j) hold this block's rows
 * (in the stage for staged dtypes), and slots after j are don't-care. kv_writer.c writes positions in
 * order, so this holds; copy-on-write and the prefix cache's tail copy copy
 * whole blocks, scales included.
 *
 * Reading: attention visits a sequence's blocks one at a time. For logical
 * block i of a sequence with n_tokens written, kv_codec_ref_seq gives a
 * kv_block_ref: the pool block, or the stage when the dtype is staged and i
 * is the partly filled last block (i == n_tokens / T). With the ref:
 *   kv_codec_dequant    one head's rows [first, first+n) as floats, [n][D]
 *   kv_codec_dequant_kt the same, transposed [D][n] (natural for per-channel
 *                       keys: one contiguous run per channel)
 *   kv_codec_k_dot      scores[r][t] = q_r . K_t for n_q query heads sharing
 *                       the KV head (GQA), fused: KIVI keys are never
 *                       expanded (q.k = sum_c q_c m_c + sum_c (q_c d_c) code)
 *   kv_codec_v_axpy     acc[r] += sum_t w[r][t] V_t
 * All read functions are pure (thread-safe) and take caller-owned scratch
 * of kv_codec_scratch_floats() floats (per thread). Arithmetic is f32.
 * Row independence (what kernels/attention.h requires): every score and
 * every acc element is computed by one fixed sequence of float operations
 * that depends only on its own query row, the token and the cache, never on
 * n_q, the other rows, first/n, or the thread. (The AVX2 loops keep this by
 * fusing their scalar tails with fmaf like their lanes.)
 *
 * Threading: writes to one block come from one thread; reads of blocks that
 * nobody writes meanwhile may run on any number of threads.
 *
 * How the rest of the engine uses it:
 *   sequence  owns a kv_stage besides its kv_seq: kv_stage_init with the
 *             pool's geometry when it is made (no bytes unless the dtype is
 *             staged), kv_stage_copy(child, parent) after kv_seq_fork,
 *             kv_stage_free with it.
 *   writer    (kv_writer.c, which keeps ggml's own row code for f32 ..
 *             q4_0) unstaged: kv_codec_put(pool, NULL, table[pos / T],
 *             layer, pos % T, k_row, v_row) per token, in position order,
 *             after kv_seq_append made the blocks private. Staged: a token
 *             reads its own block in f16 (the residual window, as token-by-
 *             token decoding sees it), so that a batch gives the same values
 *             however it is chunked; the writer rounds the batch rows with
 *             kv_codec_f16_row, seals each block the batch fills with
 *             kv_codec_seal_rows from [stage rows | batch rows], and writes
 *             the stage only after attention (kv_writer.h's three steps).
 *   attention for each logical block of a sequence: kv_codec_ref (a sealed
 *             or row block), or a KV_F16 ref over the stage or the batch
 *             rows (own block, staged), then kv_codec_k_dot for the scores
 *             and kv_codec_v_axpy for the output. kernels/ may not include
 *             kv/, so kv_view.c hands these to the kernel as an attn_reader
 *             (kernels/attention.h). Sealed fp8_e4m3 and KIVI blocks are
 *             also handed over as a view the kernel reads in place
 *             (attn_kv.sealed; the layouts above as plain numbers), so the
 *             reader serves only a sequence's own, staged block.
 *   truncate  into a sealed block of a staged dtype (n % T != 0 and block
 *             n / T was full): recompute tokens [n / T x T, n) from the block
 *             boundary (exact: src/runtime/rt_stage.c does this, from the token
 *             history), or kv_codec_unseal that block (lossy).
 *   prefix    hits are whole blocks, which are sealed; the tail copy is
 *             off for staged dtypes (prefix_cache.c: fill_dtype != dtype).
 *   window    re-rotated keys (kv_shift.c): row dtypes rewrite rows;
 *             a sealed fp8_e4m3 block is re-encoded whole
 *             (kv_codec_reseal_plane), its partly filled block is rotated in
 *             the stage. KIVI is refused (per-channel keys).
 *
 * Variants: a plain C reference and AVX2+FMA+F16C paths (target attribute,
 * chosen at run time by CPU features); conversions are bit-identical between
 * them, fused dots differ only in summation order.
 */
#ifndef PL_KV_CODEC_H
#define PL_KV_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_dtype.h"
#include "kv/kv_pool.h"
#include "tensor/half.h"

/* ------------------------------------------------------------- FP8 elements */

#define KV_E4M3_MAX 448.0f
#define KV_E5M2_MAX 57344.0f
#define KV_E4M3_SCALE_STEPS 16 /* block scale candidates per octave (see "E4M3 scales") */

/* f32 -> e4m3: RNE; finite overflow and +-inf saturate to +-448 (0x7E);
 * NaN -> 0x7F with the sign. */
uint8_t kv_e4m3_from_f32(float x);

/* f32 -> e5m2: RNE; finite overflow saturates to +-57344 (0x7B); +-inf ->
 * +-inf (0x7C); NaN -> 0x7E with the sign. */
uint8_t kv_e5m2_from_f32(float x);

/* e4m3 -> f32, exact. Via the half trick: e4m3's 7 magnitude bits shifted
 * left by 7 are the half with the same fields and a bias 8 larger, so the
 * half's value x 256 is the e4m3 value (subnormals included). */
static inline float kv_e4m3_to_f32(uint8_t b)
{
    if ((b & 0x7F) == 0x7F) return half_f32_bits(0x7FC00000u | ((uint32_t)(b & 0x80) << 24));
    return f16_to_f32((uint16_t)(((b & 0x7F) << 7) | ((b & 0x80) << 8))) * 256.0f;
}

/* e5m2 -> f32, exact: e5m2 is the top byte of a half. */
static inline float kv_e5m2_to_f32(uint8_t b) { return f16_to_f32((uint16_t)(b << 8)); }

/* -------------------------------------------------------------- the stage */

/* A sequence's f16 staging block for staged (KIVI, fp8_e4m3) dtypes: the block being
 * filled, all layers, K and V; see the drawing above. Owned by whoever owns
 * the sequence; one per sequence, made with it (no malloc while decoding). */
typedef struct {
    uint16_t *rows;      /* [n_layers][planes][block_size][kv_dim] f16; NULL if not staged */
    uint32_t n_layers, block_size;
    uint32_t planes;     /* 2 (K, V); 1 for the latent kind (K: its rows, kv_latent.h) */
    uint64_t kv_dim;
    uint64_t bytes;      /* allocated bytes (= kv_stage_bytes), 0 if not staged */
} kv_stage;

/* Bytes of one sequence's stage for geometry g: kv_dtype_stage_bytes, or
 * half of it for the latent kind, which has no V plane. */
uint64_t kv_stage_bytes(const kv_geom *g);

/* Makes the stage for geometry g: kv_stage_bytes bytes, zeroed; for
 * a dtype that is not staged, nothing is allocated (rows NULL, bytes 0) and
 * it still succeeds. PL_ENOMEM; *st untouched on failure. */
int kv_stage_init(kv_stage *st, const kv_geom *g);
void kv_stage_free(kv_stage *st);

/* dst = src (same geometry, asserted): for a fork, the child's partly
 * filled block is the parent's. */
void kv_stage_copy(kv_stage *dst, const kv_stage *src);

/* Row 0 of layer's K or V plane in the stage. */
static inline uint16_t *kv_stage_plane(const kv_stage *st, uint32_t layer, kv_plane p)
{
    assert(st->rows && layer < st->n_layers && (uint32_t)p < st->planes);
    return st->rows + ((uint64_t)layer * st->planes + (uint64_t)p) * st->block_size * st->kv_dim;
}

/* ------------------------------------------------------------- writing */

/* Encodes row (kv_dim floats: all KV heads of one token) into slot of
 * layer's plane p of block b, for an unstaged dtype (f32 .. q4_0,
 * fp8_e5m2). b must be private to the writer. */
void kv_codec_write_row(kv_pool *pool, uint32_t b, uint32_t layer, kv_plane p, uint32_t slot, const float *row);

/* fp8_e4m3: re-encodes layer's plane p of the sealed block b from T rows
 * of kv_dim floats ([T][kv_dim]), scales chosen afresh as a seal does; for
 * re-rotated keys (kv_shift.c). b must be private to the writer. */
void kv_codec_reseal_plane(kv_pool *pool, uint32_t b, uint32_t layer, kv_plane p, const float *rows);

/* Staged dtypes: row (kv_dim floats) into the stage's slot, in f16 (saturated). */
void kv_codec_stage_row(kv_stage *st, uint32_t layer, kv_plane p, uint32_t slot, const float *row);

/* The stage's rounding of a row: n floats to f16, saturated to +-65504
 * (NaN kept). */
void kv_codec_f16_row(const float *row, uint16_t *dst, uint64_t n);

/* Staged dtypes: encodes the stage's T rows of layer into block b of the
 * pool (KIVI: K per channel, V per token; fp8_e4m3: rows, block scales):
 * the block is full. */
void kv_codec_seal(kv_pool *pool, uint32_t b, uint32_t layer, const kv_stage *st);

/* The same from T f16 rows of kv_dim each laid out like a stage plane
 * ([T][kv_dim], rounded by kv_codec_f16_row): for a batch that fills
 * and seals a block at once (kv_writer.c). */
void kv_codec_seal_rows(kv_pool *pool, uint32_t b, uint32_t layer, const uint16_t *k_rows, const uint16_t *v_rows);

/* fp8_e4m3's sealing of one plane from T f16 rows of H heads x D
 * ([T][H x D], rounded by kv_codec_f16_row): T e4m3 rows `stride` bytes
 * apart, then the H f32 block scales ("E4M3 scales"); what
 * kv_codec_seal_rows does to each plane of a K/V block, and what the
 * latent kind (kv_latent.h) does to its one plane (H = 1). */
void kv_codec_e4m3_seal_f16(uint8_t *plane, uint64_t stride, const uint16_t *rows, uint32_t T, uint32_t H, uint32_t D);

/* One token's write: stores its K and V rows
 * (kv_dim floats each) of layer at slot of block b. Unstaged dtypes encode
 * into the pool (st may be NULL); staged ones write the stage and seal
 * layer of b when slot is the block's last. */
void kv_codec_put(kv_pool *pool, kv_stage *st, uint32_t b, uint32_t layer, uint32_t slot, const float *k,
                  const float *v);

/* Staged dtypes: the inverse of sealing, for a truncation that cuts into a sealed
 * block: every layer's T rows of block b, dequantized, back into the stage
 * (in f16). Lossy: re-sealing quantizes them a second time; recomputing
 * the cut block's tokens is the exact alternative. */
void kv_codec_unseal(const kv_pool *pool, uint32_t b, kv_stage *st);

/* ------------------------------------------------------------- reading */

/* Where one layer of one block is read from, and how it is encoded. Plain
 * data, made per block in the attention loop (cheap). */
typedef struct {
    kv_dtype dtype;           /* encoding: the pool's dtype, or KV_F16 for a staged block */
    const uint8_t *plane[2];  /* [K], [V]: the plane's first byte */
    uint64_t row_bytes[2];    /* row stride of a ROWS plane (0 for KIVI keys and f16 keys) */
    uint32_t block_size, n_kv_heads, head_dim;
    bool k_cols;              /* the K plane is f16 in columns (a pool block of dtype f16) */
    bool v_heads;             /* the V plane's rows are grouped by head (a pool block of dtype f16):
                                 head h of slot t at (h x block_size + t) x row_bytes[V] / n_kv_heads */
} kv_block_ref;

/* Layer of pool block b, as stored. For a staged dtype this is meaningful
 * only once the block is sealed. */
kv_block_ref kv_codec_ref(const kv_pool *pool, uint32_t b, uint32_t layer);

/* Layer of the stage, read as f16 rows. */
kv_block_ref kv_codec_ref_stage(const kv_pool *pool, const kv_stage *st, uint32_t layer);

/* Logical block i of a sequence (block table `table`, n_tokens written,
 * i <= (n_tokens - 1) / T): the stage if the dtype is staged and block i
 * is partly filled, else the pool block table[i]. st may be NULL for
 * unstaged dtypes. */
kv_block_ref kv_codec_ref_seq(const kv_pool *pool, const kv_stage *st, const uint32_t *table, uint32_t n_tokens,
                              uint32_t i, uint32_t layer);

/* Floats of scratch any read call below needs, for n_q query heads per call. */
size_t kv_codec_scratch_floats(uint32_t head_dim, uint32_t block_size, int n_q);

/* out[t][0..D) = KV head `head` of tokens first+t, t < n (first + n <= T). */
void kv_codec_dequant(const kv_block_ref *r, kv_plane p, uint32_t head, uint32_t first, uint32_t n, float *out,
                      float *scratch);

/* The same, transposed: out[i][t], i < D, t < n (row stride n). */
void kv_codec_dequant_kt(const kv_block_ref *r, kv_plane p, uint32_t head, uint32_t first, uint32_t n, float *out,
                         float *scratch);

/* scores[k * ld + t] = q[k] . K(head, first + t) for k < n_q, t < n (no
 * softmax scale; q[k] is D floats). Written, not accumulated. */
void kv_codec_k_dot(const kv_block_ref *r, uint32_t head, uint32_t first, uint32_t n, const float *const *q,
                    int n_q, float *scores, size_t ld, float *scratch);

/* acc[k][i] += sum_t w[k * ldw + t] x V(head, first + t)[i], k < n_q, i < D,
 * t ascending. */
void kv_codec_v_axpy(const kv_block_ref *r, uint32_t head, uint32_t first, uint32_t n, const float *w, size_t ldw,
                     int n_q, float *const *acc, float *scratch);

/* --------------------------------------------------------- inspection */

/* fp8_e4m3: the scale of head in layer's plane p of block b (0 = unset). */
float kv_codec_e4m3_scale(const kv_pool *pool, uint32_t b, uint32_t layer, kv_plane p, uint32_t head);

/* KIVI keys of a sealed block: channel c's scale d, min m, and the code of token t. */
void kv_codec_kivi_k_param(const kv_block_ref *r, uint64_t c, float *d, float *m);
uint32_t kv_codec_kivi_k_code(const kv_block_ref *r, uint64_t c, uint32_t t);

/* KIVI values of a sealed block: token t's group g (elements 32g ..) d, m,
 * and the code of element e of token t. */
void kv_codec_kivi_v_param(const kv_block_ref *r, uint32_t t, uint64_t g, float *d, float *m);
uint32_t kv_codec_kivi_v_code(const kv_block_ref *r, uint32_t t, uint64_t e);

/* ------------------------------------------------------------ variants */

/* false: the reference code only (tests compare the two); true (default):
 * SIMD where the CPU has it. Not to be called while other threads read. */
void kv_codec_set_simd(bool on);

/* "avx2" or "ref": what the read and write paths use now. */
const char *kv_codec_variant(void);

#endif
