/* kv_dtype.h - KV cache element types: their bytes, and only their bytes.
 *
 * This file knows how many bytes each KV dtype needs for a block of tokens of
 * one layer's K or V (a "plane"), and how those bytes are arranged, so that
 * the block pool (kv_pool.h), `pagellm kvcalc` and `pagellm inspect` all
 * count the same way. Encoding and decoding live in kv_codec.h.
 *
 * A plane holds block_size (T) tokens of one layer's K (or V); kv_dim =
 * n_kv_heads * head_dim elements per token. Row-major dtypes lay a plane out
 * as T rows, one per token, followed by an optional scale tail:
 *
 *   plane = | row 0 | row 1 | ... | row T-1 | tail: per-head scales (opt.) |
 *   row   = kv_dim / group groups of group_bytes each (scales inside rows)
 *
 *   f32       group 1,  4 B                     no tail
 *   f16/bf16  group 1,  2 B                     no tail
 *   q8_0      group 32, 34 B (f16 d + 32 x i8)  no tail  (ggml block_q8_0)
 *   q4_0      group 32, 18 B (f16 d + 16 B)     no tail  (ggml block_q4_0)
 *   fp8_e4m3  group 1,  1 B                     tail: n_kv_heads x f32 scale
 *   fp8_e5m2  group 1,  1 B                     no tail
 *   kivi4/2 V group 32, 4 B (f16 d, f16 m) + 32 x 4 (2) bit codes = 20 (12) B
 *
 * KIVI keys (kivi4, kivi2) are quantized per channel over the block's T
 * tokens, so their K plane has no token rows (KV_LAYOUT_CHANNELS): one
 * packed column of T codes per channel, then every channel's f16 scale, then
 * every channel's f16 min (C = kv_dim channels, cb = ceil(T x bits / 8)):
 *
 *   K plane = | codes ch 0 (cb B) | ch 1 | ... | ch C-1 | d[C] f16 | m[C] f16 |
 *
 * (kv_codec.h draws the bit order.) KIVI values are rows of groups of 32
 * along the KV row, each group | f16 d | f16 m | 32 codes |, like ggml's
 * q4_1. A KIVI block is quantized once, when it is full ("the block is the
 * quantization group"); while it fills, its rows live in f16 in a staging
 * block that belongs to the sequence (fill_dtype = f16), not to the pool:
 * kv_dtype_stage_bytes counts it, apart from the pool's bytes per token.
 * fp8_e4m3 is staged the same way (its block scales are chosen when the
 * block is full; kv_codec.h says why).
 *
 * f16 keys are stored in columns, unquantized (KV_LAYOUT_COLUMNS): channel
 * after channel (c = head x head_dim + dim), each channel's T halves slot
 * after slot (the f16 table row above counts the same bytes):
 *
 *   K plane = | ch 0: slot 0 .. T-1 | ch 1 | ... | ch C-1 |   (T x C x 2 B)
 *
 * This is the order the decode attention reads them in: a head's keys of a
 * block are one run of head_dim x T halves, and 16 keys of one dim are one
 * 32-byte load, so the scores need no transpose (measured on Zen 4, 16
 * query rows x 2048 keys in cache: 47 us of scores against ~100 us for
 * rows; kernels/attention_avx512.c). A token's elements stay separable
 * (stride T), so a block is still written, shifted or copied in part token
 * by token. The stage of the staged dtypes is f16 rows, not this layout.
 *
 * f16 values are rows, grouped by head (KV_LAYOUT_HEADS): head after head,
 * each head's T rows of head_dim halves slot after slot (same bytes, no
 * tail):
 *
 *   V plane = | head 0: slot 0 .. T-1 | head 1 | ... | head H-1 |   (T x H x D x 2 B)
 *
 * so one head's values of a block are one run of T x head_dim halves, as
 * its keys are. Without GQA each value row serves one query row and the
 * weighted sum is bound by how fast the reads come in: a head's slice of
 * every token row (128 B a 1.5 KiB row, 110M shape) came in at ~8 GB/s a
 * core, a run per head faster (bench_attn_decode, 6 heads x 1
 * row a thread, 576 keys, cache cold: 1.32-1.36 -> 0.98-1.00 ms a token a
 * thread); under GQA (compute-bound) it measured the same.
 *
 * Bytes per token by the formula = n_layers x (K plane + V plane) / T
 * (= 2 x n_layers x kv_dim x bytes/elem for the plain types), fractional
 * when a tail or per-channel parameters are shared by the block's tokens.
 *
 * Invariants: every table entry has group >= 1 and group_bytes >= 1; bits is
 * 0 for the byte-coded dtypes and 2 or 4 for KIVI; a dtype fits a shape iff
 * kv_dim % group == 0 for both planes (kv_dtype_check).
 */
#ifndef PL_KV_DTYPE_H
#define PL_KV_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

/* The values equal include/pagellm.h's pl_kv_dtype (asserted in api_kv.c). */
typedef enum {
    KV_F32 = 0,
    KV_F16,
    KV_BF16,
    KV_Q8_0,
    KV_Q4_0,
    KV_FP8_E4M3,
    KV_FP8_E5M2,
    KV_INT4, /* "kivi4": KIVI 4-bit, keys per channel, values per token */
    KV_INT2, /* "kivi2": KIVI 2-bit */
    KV_DTYPE_COUNT
} kv_dtype;

typedef enum { KV_PLANE_K = 0, KV_PLANE_V = 1 } kv_plane;

typedef enum {
    KV_LAYOUT_ROWS = 0,  /* one row per token: row stride = row bytes */
    KV_LAYOUT_CHANNELS,  /* KIVI keys: one packed column of T codes per channel, no rows */
    KV_LAYOUT_COLUMNS,   /* f16 keys: one column of T elements per channel, no rows */
    KV_LAYOUT_HEADS,     /* f16 values: rows grouped by head (head-major), no tail */
} kv_layout;

/* A layout whose tokens have rows of group_bytes groups (whole, or split
 * by head): the bytes kv_dtype_row_bytes counts. */
static inline bool kv_layout_rows(kv_layout l) { return l == KV_LAYOUT_ROWS || l == KV_LAYOUT_HEADS; }

/* How one plane of a dtype is stored. */
typedef struct {
    kv_layout layout;
    uint32_t group;           /* ROWS: elements per in-row group (1 = plain elements); CHANNELS: 1 */
    uint32_t group_bytes;     /* ROWS: bytes per group, its scale included; CHANNELS: parameter
                                 bytes per channel (f16 d + f16 m = 4) */
    uint32_t head_tail_bytes; /* bytes per KV head in the plane's tail (a block-wide scale) */
    uint32_t bits;            /* KIVI code bits (4 or 2); 0 for byte-coded dtypes */
} kv_plane_traits;

typedef struct {
    const char *name;         /* "f16", "q8_0", "fp8_e4m3" ... (the CLI names) */
    const char *about;        /* one line for help texts */
    kv_dtype fill_dtype;      /* dtype a block holds while it fills (itself, or f16 for KIVI, fp8_e4m3) */
    kv_plane_traits plane[2]; /* [KV_PLANE_K], [KV_PLANE_V] */
} kv_dtype_traits;

/* Traits of t (t < KV_DTYPE_COUNT, asserted). */
const kv_dtype_traits *kv_dtype_get(kv_dtype t);

const char *kv_dtype_name(kv_dtype t);

/* Dtype by name (case-insensitive). Aliases: "fp8" = fp8_e4m3, "int4" =
 * kivi4, "int2" = kivi2.
 * PL_EINVAL with the known names in the error text if none matches. */
int kv_dtype_from_name(const char *name, kv_dtype *out);

/* 0 if t can store rows of n_kv_heads x head_dim elements; else PL_EINVAL
 * with a text saying why (e.g. "q4_0 needs the KV row (4 x 6 = 24) to be a
 * multiple of 32"). Dimensions must be >= 1. */
int kv_dtype_check(kv_dtype t, uint32_t n_kv_heads, uint32_t head_dim);

/* The ggml type (tensor/dtype.h DT_*) in which t stores one KV head's row
 * of a token, for the dtypes whose rows the attention kernel reads as ggml
 * rows (f32 f16 bf16 q8_0 q4_0); DT_COUNT for kv_codec's own encodings
 * (fp8, KIVI). */
uint32_t kv_dtype_head_type(kv_dtype t);

/* 0 if the cache writer and attention's view (kv_writer.h, kv_view.h) can
 * use t for n_kv_heads heads of head_dim: kv_dtype_check's rule for
 * kv_codec's encodings (KIVI: kv_dim % 32 == 0), and for ggml rows a
 * head_dim that is a multiple of the type's group (q8_0/q4_0: 32, each
 * head is its own row). Else PL_EUNSUPPORTED with a text naming --kv-dtype
 * and why. */
int kv_dtype_check_heads(kv_dtype t, uint32_t n_kv_heads, uint32_t head_dim);

/* The same as a yes or no, setting no error text. */
bool kv_dtype_heads_ok(kv_dtype t, uint32_t n_kv_heads, uint32_t head_dim);

/* True if blocks of t are written in f16 into a per-sequence staging block
 * and quantized when full (KIVI, fp8_e4m3). */
static inline bool kv_dtype_staged(kv_dtype t) { return kv_dtype_get(t)->fill_dtype != t; }

/* Bytes of one token's row in plane p (rows layout; in a HEADS plane the
 * row is split in n_kv_heads runs), 0 if the dtype does not fit kv_dim,
 * and 0 for a CHANNELS or COLUMNS plane (no token rows). */
uint64_t kv_dtype_row_bytes(kv_dtype t, kv_plane p, uint64_t kv_dim);

/* Exact bytes of one plane: block_size tokens of one layer's K or V,
 * tail included, no padding. 0 if the dtype does not fit the shape. */
uint64_t kv_dtype_plane_bytes(kv_dtype t, kv_plane p, uint32_t block_size, uint32_t n_kv_heads,
                              uint32_t head_dim);

/* Bytes per token by the formula: n_layers x (K + V plane bytes) /
 * block_size. 0 if the dtype does not fit. */
double kv_dtype_bytes_per_token(kv_dtype t, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                                uint32_t block_size);

/* Bytes of the f16 staging block one sequence needs besides its pool blocks:
 * n_layers x 2 (K, V) x block_size x kv_dim x 2 for a staged dtype (KIVI,
 * fp8_e4m3),
 * 0 for the others and when the shape does not fit or overflows. This is a
 * per-sequence cost, not a per-token one: it is not in bytes_per_token. */
uint64_t kv_dtype_stage_bytes(kv_dtype t, uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim,
                              uint32_t block_size);

#endif
