/* kern_impl.h - internals shared by the kernel files: the variant tables.
 *
 * A variant (ref, avx2, avx512, neon) is one kern_vtable. A variant may
 * leave entries NULL: kern_init() starts from the reference table and
 * overlays every non-NULL entry of the best variant the CPU supports, so the
 * active table (kern_vt) is always complete and a new variant can be added one
 * kernel at a time.
 *
 * Matrix products are built from GEMM tiles: nw (1..KERN_NW_MAX) weight rows
 * against nx (1..the type's tile height) activation rows already converted
 * to the weight type's dot type, so that a weight block is loaded and
 * unpacked once for nx rows and an activation block once for nw rows:
 *
 *   y[r * y_stride + c] = dot(w + c * w_stride, x + r * x_stride)
 *                                           for c < nw, r < nx
 *
 * THE INVARIANT: every element is computed by one fixed sequence of float
 * operations that depends only on its weight row and activation row (the
 * per-block products in block order into one accumulator, then one fixed
 * reduction), never on nw, nx, the position in the tile or the thread. So
 * kern_matmul's rows are bit-identical whatever m > KERN_DOT_MAX_M (any m
 * for a type without decode dot tiles, and any m for weights packed at
 * load; for the K-quants and IQ4_XS with kern_kgemm, within each band of
 * m below and from its min_m), batching or threads; the tests
 * check it. Tiling only decides which
 * values sit in registers.
 *
 * DECODE DOT TILES (dot[], optional per type): for m <= KERN_DOT_MAX_M
 * activation rows kern_matmul uses one weight row against nx rows,
 *
 *   s[r * s_stride] = dot(w[0..n), x + r * x_stride)   for r < nx <= KERN_DOT_NX_MAX
 *
 * laid out like ggml's AVX2 vec_dot (8 float lanes accumulated across
 * blocks, one horizontal sum at the end): faster than the reference order
 * for a single row (kern_matmul.c). Their own invariant: an element
 * does not depend on nx (1 or 2) nor on the thread, so the rows of any
 * m <= KERN_DOT_MAX_M are equal to single rows; they differ from the GEMM's
 * (m > KERN_DOT_MAX_M) within rounding.
 *
 *   weight type  dot type   conversion of activations (conv[dot type])
 *   F32          F32        none (x used as is)
 *   F16          F16        f32 -> f16, round to nearest even
 *   BF16         BF16       f32 -> bf16, round to nearest even
 *   Q8_0, Q4_0,  Q8_0       ggml's quantize_row_q8_0_ref (roundf)
 *   Q5_0, IQ4_NL
 *   Q4_1, Q5_1   Q8_1       ggml's quantize_row_q8_1_ref (roundf)
 *   the K-quants Q8_K       ggml's quantize_row_q8_K_ref (nearest even)
 *   IQ4_XS, TQ*
 *
 * Every conversion in every variant produces the same bytes as the
 * reference (quant_quantize_row for Q8_0/Q8_K, half.h for f16/bf16), so that
 * all variants multiply the same integers; the tests check it.
 */
#ifndef PL_KERNELS_KERN_IMPL_H
#define PL_KERNELS_KERN_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"

/* Weight rows and activation rows one GEMM tile handles at most. */
#define KERN_NW_MAX 4
#define KERN_NX_MAX 4

typedef void (*kern_gemm_fn)(int n, float *y, size_t y_stride, const void *w, size_t w_stride, int nw,
                             const void *x, size_t x_stride, int nx);

typedef void (*kern_conv_fn)(void *dst, const float *src, int n);

/* A tile function and the tile it is best at (the driver's step sizes):
 * nw <= KERN_NW_MAX weight rows by nx <= KERN_NX_MAX activation rows. It
 * accepts any smaller nw, nx (the edges). xconv, when set: the tile takes
 * its activations in a form of its own, rows of n_in x x_elem bytes made by
 * xconv, holding the same values as the dot type's conversion (the AVX-512
 * F16 tile: f32 rows of the f16-rounded values, so that it converts only
 * its weights); NULL: the dot type's bytes (conv[]). */
typedef struct {
    kern_gemm_fn fn;
    int nw, nx;
    kern_conv_fn xconv;
    int x_elem;
} kern_gemm;
/* Optional packed GEMM per weight type (Q8_0, Q4_0, F16, IQ4_XS, Q3_K,
 * Q4_K): the variant's GEMM on the packed layout of kern_pack.c (groups of
 * kern_pack_rows(type) weight rows, packed once at model load by
 * kern_pack, or per chunk by kern_matmul for Q8_0/Q4_0 weights that were
 * not), against nx (1..the tile's nx) activation rows. wp is one group (gw
 * of them for F16); nw of its rows are stored. Q8_0/Q4_0/IQ4_XS/Q3_K/Q4_K
 * must compute every element with the reference's float operations
 * (IQ4_XS, Q3_K, Q4_K: x is Q8_K rows), F16 in THE PACKED F16 ORDER below,
 * so that packed results are the same bits whatever m, nx, threads or
 * variant. A variant without one gets kern_pack.c's portable version
 * (kern_packed_for); F16, IQ4_XS, Q3_K and Q4_K are packed only where the
 * variant has its own (kern_pack_supports).
 *
 * Besides the Q8_0 rows x (x_stride bytes apart), a GEMM may ask (px_row)
 * for the same activations re-laid once per call by kern_matmul (kern_px):
 * block-major, so that one pointer plus constant offsets reach block b of
 * every row of a tile, with per row and block the scale as a float and the
 * Q4_0 offset term precomputed (kern_xblk). */
#define KERN_PACK_ROWS 8

/* Per activation row and Q8_0 block: d as f32 (exact), and in the two
 * int16 halves of q4off, -8 times the sum of the block's values whose index
 * is 0 or 1 (low half), 2 or 3 (high half) mod 4 (|.| <= 16256). */
typedef struct {
    int32_t q4off;
    float d;
} kern_xblk;

/* The 32 values of block b of activation row r (rows counted from the
 * tile's first) are q[(b * rows + r) * 32 ...], its kern_xblk a[b * rows + r]. */
typedef struct {
    const int8_t *q;
    const kern_xblk *a;
    size_t rows; /* the block stride: the tile's rows (kern_matmul lays each group of rows out apart) */
    /* The packed F16 GEMM's activations (pxf_row): the f16 values as f32,
     * element k of row r (counted from the tile's first) at f[k * rows + r],
     * so that one 32-byte line holds element k of up to 8 rows. */
    const float *f;
} kern_px;

typedef struct {
    int nx; /* activation rows per sweep it is best at (<= 8) */
    /* When non-NULL, gemm reads px, which kern_matmul fills row by row with
     * this: Q8_0 row x of n values into q, a (already offset to the row),
     * block stride rows. Else px is NULL. */
    void (*px_row)(int8_t *q, kern_xblk *a, size_t rows, const void *x, int n);
    /* wp is gw (0 counts as 1) consecutive groups at most, kern_pack_group_bytes
     * apart, nw <= gw * kern_pack_rows(type) rows of them stored. */
    void (*gemm)(int n, float *y, size_t y_stride, const void *wp, int nw, const void *x, size_t x_stride,
                 const kern_px *px, int nx);
    int gw;
    /* The F16 form of px (kern_px.f): f16 row x (the dot type's bytes) of n
     * values as f32 at f[k * rows] (f already offset to the row). */
    void (*pxf_row)(float *f, size_t rows, const void *x, int n);
    /* IQ4_XS, Q3_K, Q4_K: one kern_kpack.c group (16 rows) from the packed
     * groups at wp (two, gb bytes apart; nw <= 16 rows stored), for
     * kern_kgemm at prefill (kern_pack_iq4.c, kern_pack_q3k.c,
     * kern_pack_q4k.c); NULL: none. */
    void (*to_kpack)(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n);
} kern_packed;

/* Optional per-call packed GEMM of a K-quant or IQ4_XS type against Q8_K
 * activations (kern_kpack.c has the layout and the packing): for m >
 * KERN_DOT_MAX_M kern_matmul packs each chunk of ggml rows once into
 * groups of KERN_KPACK_ROWS rows (the quants as unsigned bytes, four
 * consecutive values of every row in one 64-byte vector, then per-row
 * scales) and sweeps it against every group of nx activation rows, so a
 * super-block is unpacked once per call instead of once per tile of 4
 * rows. gemm: one group wp (nw <= KERN_KPACK_ROWS rows stored) against nx
 * (1..KERN_KPACK_NX) rows of Q8_K x. Every element in the reference's
 * float operations (exact integer sums per super-block, then its products
 * and sums in its order), so rows are the same bits whatever m, nx,
 * threads or variant, and equal the reference's. */
#define KERN_KPACK_ROWS 16
#define KERN_KPACK_NX 8
/* Activation rows from which kern_matmul takes kern_kgemm (its min_m; a
 * type may ask for more): packing costs about 20-45 rows of the product
 * (AVX-512, 2048 x 5632, one thread: Q4_K breaks even near m = 20, Q6_K
 * near 64, Q3_K at once, docs/speed.md), so below it the GEMM tiles stay.
 * Rows of KERN_DOT_MAX_M < m < min_m are the same bits whatever m in that
 * band, rows of m >= min_m the reference's bits; the two agree within
 * rounding. */
#define KERN_KPACK_MIN_M 32
typedef struct {
    void (*gemm)(int n, float *y, size_t y_stride, const uint8_t *wp, int nw, const void *x, size_t x_stride,
                 int nx);
    /* kern_kpack_group's bytes, faster (the variant's own), or NULL: kern_kpack_group */
    void (*pack)(uint32_t t, uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n);
    int min_m; /* activation rows from which kern_matmul takes it (KERN_KPACK_MIN_M or more) */
} kern_kgemm;

/* Decode dot tile: nx (1..KERN_DOT_NX_MAX) activation rows against one
 * weight row (see DECODE DOT TILES above). */
#define KERN_DOT_NX_MAX 2
/* For weights NOT packed at load, kern_matmul uses the dot tiles for
 * m <= KERN_DOT_MAX_M (in groups of KERN_DOT_NX_MAX rows), the GEMM above:
 * measured single-threaded on 2048 x 5632 Q4_0/Q8_0, the per-call packed
 * GEMM only catches up around m = 8 (its packing is paid per call), the dot
 * tiles win clearly at m = 3, 4. Weights packed at load take the packed
 * GEMM for every m. */
#define KERN_DOT_MAX_M 4
typedef void (*kern_dot_fn)(int n, float *s, size_t s_stride, const void *w, const void *x, size_t x_stride,
                            int nx);


typedef struct kern_vtable {
    const char *name;
    kern_gemm gemm[DT_COUNT];    /* by weight type */
    kern_dot_fn dot[DT_COUNT];   /* by weight type; NULL = the GEMM tiles for every m */
    kern_packed packed[DT_COUNT]; /* by weight type; .gemm NULL = none */
    kern_kgemm kgemm[DT_COUNT];   /* by weight type; .gemm NULL = none */
    kern_conv_fn conv[DT_COUNT]; /* by dot type: F16, BF16, Q8_0, Q8_K */
    void (*rmsnorm)(float *y, const float *x, const float *w, int n, float eps);
    void (*rope)(float *x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base,
                 float freq_scale, bool neox, const float *freq_factors);
    void (*rope_apply)(float *x, int n_heads, int head_dim, int rope_dim, bool neox, const float *cs);
    void (*add_rmsnorm)(float *x, const float *d, float *y, const float *w, int n, float eps);
    float (*softmax)(float *x, int n); /* returns the log-sum-exp (kern_softmax) */
    void (*swiglu)(float *a, const float *b, int n);
    void (*exp_row)(float *y, const float *x, int n); /* y = expf(x); y may alias x */
    void (*f32_to_f16)(uint16_t *dst, const float *src, int n);
    void (*f16_to_f32)(float *dst, const uint16_t *src, int n);
} kern_vtable;

/* The scalar tails of the SIMD softmaxes (elements i..n-1, past the last
 * whole vector), in the reference's operations: the running max, then
 * x = expf(x - max) with the sum in double. */
static inline float kern_softmax_max_tail(const float *x, int i, int n, float max)
{
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    return max;
}

/* The log-sum-exp of the scores a softmax normalized: max + log(sum of
 * exp(x - max)), what a caller needs to merge softmaxes over parts. */
static inline float kern_softmax_lse(float max, double sum) { return max + (float)log(sum); }

static inline double kern_softmax_exp_tail(float *x, int i, int n, float max, double sum)
{
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    return sum;
}

/* kern_pack.c: the packed layout (its header has the picture). Bytes of
 * one whole group (a multiple of 64), packing of nw <= KERN_PACK_ROWS rows
 * (ggml rows w, stride ws) into one group (rows past nw zero), and the
 * packed GEMM for type t (the variant's or the portable one; NULL if t has
 * no packed layout). */
size_t kern_pack_group_bytes(uint32_t t, int n);
/* Bytes of one block's quants in a group (8 rows x 32 values), blocks per
 * scale line, and where block b's quants and 8 f16 scales sit in a group:
 * runs of KERN_PACK_RUN blocks, each run one 64-byte line of scales and
 * then its blocks' quants, so a group is read at strictly rising
 * addresses. */
#define KERN_PACK_RUN 4
/* Weight rows per group: KERN_PACK_ROWS for Q8_0/Q4_0, KERN_PACKF_ROWS
 * for F16 (a group is [n][16] f16: element k of its 16 rows in one 32-byte
 * line, so a converted load is the 16 rows' lanes). */
#define KERN_PACKF_ROWS 16
static inline int kern_pack_rows(uint32_t t) { return t == DT_F16 ? KERN_PACKF_ROWS : KERN_PACK_ROWS; }
/* IQ4_XS (kern_pack_iq4.c has the picture): groups of KERN_PACK_ROWS rows,
 * one slab of KERN_IQ4P_SLAB bytes per super-block: the 8 rows' d as f32
 * (KERN_IQ4P_D), their sub-block scales minus 32 as int8 (KERN_IQ4P_SC +
 * 8 j + c), then 32 vectors of 32 bytes of nibbles (KERN_IQ4P_Q + 32 v),
 * vector 4 j + t holding row c's qs[16 j + 4 t .. + 3] at 4 c. */
#define KERN_IQ4P_D 0
#define KERN_IQ4P_SC 32
#define KERN_IQ4P_Q 96
#define KERN_IQ4P_SLAB (KERN_IQ4P_Q + 32 * 32)
/* Q3_K (kern_pack_q3k.c has the picture): groups of KERN_PACK_ROWS rows,
 * one slab of KERN_Q3P_SLAB bytes per super-block: the 8 rows' d as f16,
 * then 8 triples of KERN_Q3P_TRI bytes (the 8 rows' two sub-block scales
 * minus 32 as int8, then three 32-byte vectors holding 8 values x 3 bits
 * of every row's 4-byte lane). */
#define KERN_Q3P_D_BYTES 16
#define KERN_Q3P_SC_BYTES 16
#define KERN_Q3P_TRI (KERN_Q3P_SC_BYTES + 3 * 32)
#define KERN_Q3P_SLAB (KERN_Q3P_D_BYTES + 8 * KERN_Q3P_TRI)
/* Q4_K (kern_pack_q4k.c has the picture): groups of KERN_PACK_ROWS rows,
 * one slab of KERN_Q4P_SLAB bytes per super-block: the 8 rows' d, then
 * dmin, as f16 (KERN_Q4P_HEAD bytes), then 4 quads of KERN_Q4P_QUAD bytes
 * (sub-blocks 2 g, 2 g + 1: the 8 rows' two scales, then two mins, as
 * bytes, then 8 vectors of 32 bytes, vector t holding row c's qs[32 g +
 * 4 t .. + 3] at 4 c). */
#define KERN_Q4P_HEAD 32
#define KERN_Q4P_SC 0
#define KERN_Q4P_MIN 16
#define KERN_Q4P_Q 32
#define KERN_Q4P_QUAD (KERN_Q4P_Q + 8 * 32)
#define KERN_Q4P_SLAB (KERN_Q4P_HEAD + 4 * KERN_Q4P_QUAD)
/* THE PACKED F16 ORDER: element (row c, activation r) is, in float,
 *   tot = 0; for each block of KERN_PACKF_KB elements k from 0 (the last
 *   may be shorter): acc = 0; acc = fma(w[c][k], x[r][k], acc) for k in
 *   order; tot = tot + acc.
 * One chain of fused multiply-adds per block (lanes are weight rows, so no
 * horizontal sum), the blocks summed in order: the rounding error grows
 * with KB + n / KB terms, not n. Every variant's packed F16 tile and the
 * portable one (fmaf) are the same bits. */
#define KERN_PACKF_KB 256
static inline size_t kern_pack_block_quant_bytes(uint32_t t) { return t == DT_Q8_0 ? 256 : 128; }
static inline const uint8_t *kern_pack_quants(const uint8_t *g, size_t gq, int b)
{
    return g + (size_t)(b / KERN_PACK_RUN) * (64 + KERN_PACK_RUN * gq) + 64 + (size_t)(b % KERN_PACK_RUN) * gq;
}
static inline const uint16_t *kern_pack_scales(const uint8_t *g, size_t gq, int b)
{
    return (const uint16_t *)(g + (size_t)(b / KERN_PACK_RUN) * (64 + KERN_PACK_RUN * gq) + (size_t)(b % KERN_PACK_RUN) * 16);
}
/* A packed tile's software prefetch at block b whose quants are at q: the
 * lines PF bytes further on (every line of a group once over its blocks:
 * a run's scale line with its first block; past the group's end into the
 * next group, which may be another thread's or past the matrix: a prefetch
 * neither faults nor changes a value). HINT: an _MM_HINT_* constant. */
#define KERN_PACK_PREFETCH(q, gq, b, PF, HINT)                                                         \
    do {                                                                                               \
        const char *pf_at_ = (const char *)(q) + (PF);                                                 \
        for (int l_ = 0; l_ < (int)(gq) / 64; l_++) _mm_prefetch(pf_at_ + 64 * l_, HINT);              \
        if ((b) % KERN_PACK_RUN == 0) _mm_prefetch(pf_at_ - 64, HINT);                                 \
    } while (0)
void kern_pack_group(uint32_t t, uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n);
const kern_packed *kern_packed_for(const kern_vtable *vt, uint32_t t);
/* kern_pack_iq4.c: IQ4_XS's packed group (bytes, packing), its portable
 * GEMM and its portable kern_packed.to_kpack. */
size_t kern_iq4p_group_bytes(int n);
void kern_iq4p_group(uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n);
void kern_gemmp_iq4_xs_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                           const kern_px *px, int nx);
void kern_iq4p_to_kpack_ref(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n);
/* kern_avx2_iq4p.c: the AVX2 ones (x86 only; the AVX-512 table keeps its to_kpack) */
void kern_gemmp_iq4_xs_avx2(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                            const kern_px *px, int nx);
void kern_iq4p_to_kpack_avx2(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n);
/* kern_pack_q3k.c: Q3_K's packed group (bytes, packing), its portable
 * GEMM and its portable kern_packed.to_kpack; kern_avx2_q3kp.c: the AVX2
 * GEMM and to_kpack (x86 only). */
size_t kern_q3p_group_bytes(int n);
void kern_q3p_group(uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n);
void kern_gemmp_q3_K_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                         const kern_px *px, int nx);
void kern_q3p_to_kpack_ref(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n);
void kern_gemmp_q3_K_avx2(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                          const kern_px *px, int nx);
void kern_q3p_to_kpack_avx2(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n);
/* kern_pack_q4k.c: Q4_K's packed group (bytes, packing), its portable
 * GEMM, its portable kern_packed.to_kpack and the part of it that every
 * variant's to_kpack shares (slab b's scales, pairs, d and dmin);
 * kern_avx2_q4kp.c: the AVX2 GEMM and to_kpack (x86 only). */
size_t kern_q4p_group_bytes(int n);
void kern_q4p_group(uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n);
void kern_gemmp_q4_K_ref(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                         const kern_px *px, int nx);
void kern_q4p_to_kpack_ref(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n);
void kern_q4p_kpack_tail(uint8_t *s, const uint8_t *wp, size_t gb, int ng, int b);
void kern_gemmp_q4_K_avx2(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                          const kern_px *px, int nx);
void kern_q4p_to_kpack_avx2(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n);
/* kern_kpack.c: the K-quant/IQ4_XS packed layout (kern_kgemm). Whether t
 * has one, bytes of one group of KERN_KPACK_ROWS rows of n values (a
 * multiple of 64), and packing of nw <= KERN_KPACK_ROWS ggml rows (w,
 * stride ws) into one group (rows past nw zero). */
bool kern_kpack_layout(uint32_t t);
size_t kern_kpack_group_bytes(int n);
void kern_kpack_group(uint32_t t, uint8_t *dst, const uint8_t *w, size_t ws, int nw, int n);
/* The pieces a variant's faster packing (kern_kgemm.pack) is built from:
 * one row's super-block blk unpacked (the values u, the scales, the pairs,
 * d and dmin of kern_kpack.c's table; the values of IQ4_XS and Q5_K only
 * if values: a variant writes those faster with its own vectors, the
 * IQ4_XS table lookup by a byte shuffle, Q5_K's bit planes by 16-bit
 * shifts), and everything of a slab s but the quants, from rows 0..nw-1. */
typedef struct {
    _Alignas(64) uint8_t u[256];
    int8_t sc[16];
    int16_t pair[8][2];
    float d, dmin;
} kern_kpack_row;
void kern_kpack_unpack(uint32_t t, kern_kpack_row *o, const void *blk, bool values);
void kern_kpack_slab_tail(uint8_t *s, const kern_kpack_row *rows, int nw);
/* One super-block of a group (KPACK_SLAB bytes): the quants, vector v
 * (0..63) at 64 v holding values 4v..4v+3 of row c at bytes 4c..4c+3;
 * per sub-block j the 16 rows' scales as int8 (KPACK_SC + 16 j); eight
 * int16 pairs per row for the activations' bsums (KPACK_PAIRS + 64 i:
 * row c's pair for bsums 2i, 2i+1 at 4c); d and dmin as f32. */
#define KPACK_SC 4096
#define KPACK_PAIRS (KPACK_SC + 256)
#define KPACK_D (KPACK_PAIRS + 512)
#define KPACK_DMIN (KPACK_D + 64)
#define KPACK_SLAB (KPACK_DMIN + 64)

/* The reference variant (complete). */
extern const kern_vtable kern_vt_ref;
/* kern_ref_quants.c: the reference tiles of the other block formats and
 * the Q8_1 conversion, which kern_vt_ref lists. */
void kern_gemm_q4_1_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_gemm_q5_0_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_gemm_q5_1_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_gemm_iq4_nl_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_gemm_q2_K_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_gemm_q3_K_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_gemm_q5_K_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_gemm_iq4_xs_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
#define KERN_LATTICE_REF_DECL(name) \
    void kern_gemm_##name##_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
KERN_LATTICE_REF_DECL(iq2_xxs)
KERN_LATTICE_REF_DECL(iq2_xs)
KERN_LATTICE_REF_DECL(iq2_s)
KERN_LATTICE_REF_DECL(iq3_xxs)
KERN_LATTICE_REF_DECL(iq3_s)
KERN_LATTICE_REF_DECL(iq1_s)
KERN_LATTICE_REF_DECL(iq1_m)
void kern_gemm_tq1_0_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_gemm_tq2_0_ref(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx);
void kern_conv_q8_1_ref(void *dst, const float *src, int n);

/* The AVX2+FMA+F16C variant, or NULL when not compiled for x86. Only valid to
 * call through when kern_cpu_has_avx2() is true. Getting the table also
 * initializes its private data (once, thread-safe). */
const kern_vtable *kern_vt_avx2(void);
bool kern_cpu_has_avx2(void);
/* f16 -> f32 by table, for the SIMD variants' per-block scales (a load is
 * cheaper than F16C on a scalar); x86 only, filled by kern_f16_lut_init()
 * (once, thread-safe), which kern_vt_avx2() and kern_vt_avx512() call. */
extern float kern_f16_lut[65536];
void kern_f16_lut_init(void);
/* THE DECODE STREAM'S SOFTWARE PREFETCH, per CPU. At decode (m = 1) each
 * weight byte comes from DRAM once, and whether a software prefetch on top
 * of the hardware prefetchers helps that stream depends on the CPU's
 * prefetchers, not on the instructions: on Zen 4 the L2 prefetcher follows
 * each thread's rising stream alone and a software prefetch takes the
 * stream from it; on Intel (Emerald Rapids) the tiles fall well short of
 * the bandwidth without one; on Zen 5 every tile gains from one 16 KiB
 * ahead in the engine, where attention and small operations sit between
 * the matrices. The measurements are in docs/speed.md ("Kernel choices").
 * kern_pf_stream is how far ahead (bytes) the AVX-512 table's decode
 * tiles prefetch their weight row stream (the packed Q8_0/Q4_0 tile at
 * m = 1, the F32/F16/BF16 dots and the K-quant dots), 0 = not at all. The
 * AVX2 table keeps its fixed distances (Zen 3's best). kern_init sets it:
 * AMD before Zen 5 0, Zen 5 16 KiB, any other vendor
 * KERN_PF_STREAM_BYTES; PAGELLM_PREFETCH=none,
 * auto or a distance in bytes (0..65536) overrides, for A/B runs. Read
 * once per tile call. */
extern int kern_pf_stream;
/* The AVX-512 f16 / q8_0 / q4_0 attention tiles' broadcast form
 * (attention_avx512.c, fmadd_b32): 1 embeds each query element's or
 * softmax weight's broadcast in its FMA (vfmadd231ps m32{1to16}), 0 loads
 * it first (vbroadcastss). The same bits either way. kern_init sets it: 1
 * on AMD before Zen 5 (a zmm operation in two halves: the prefill tiles
 * ~10% faster, docs/speed.md), 0 elsewhere (on Emerald Rapids an FMA with
 * an embedded broadcast issues at about half the rate);
 * PAGELLM_ATTN_BCAST=auto, embedded or loaded overrides, for A/B runs. */
extern int kern_attn_bcast_embedded;
#ifndef KERN_PF_STREAM_BYTES
#define KERN_PF_STREAM_BYTES 8192
#endif
/* kern_avx2.c's F32 and F16 decode dot tiles with kern_pf_stream's
 * prefetch (into L2; the AVX2 table's own go 1 KiB ahead into L1, Zen 3's
 * best): the AVX-512 table lists them, x86 only. */
void kern_dot_f32_avx2_stream(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx);
void kern_dot_f16_avx2_stream(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx);
/* kern_avx2_quants.c: the AVX2 table's GEMM and decode dot tiles of the
 * other block formats (x86 only). */
/* A per-row tile TILE(T, NX, n, s, ss, w, x, xs) (one weight row against
 * NX activation rows, NX a constant of each instantiation) as a GEMM tile
 * (kern_gemm_fn: nw rows one at a time, nx <= 4) named GEMM and a decode
 * dot tile (kern_dot_fn, nx <= 2) named DOT; ATTR: their target attribute. */
#define KERN_ROW_TILES(ATTR, GEMM, DOT, TILE, T)                                                        \
    ATTR void GEMM(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx) \
    {                                                                                                  \
        for (int c = 0; c < nw; c++) {                                                                 \
            const void *wc = (const uint8_t *)w + (size_t)c * ws;                                      \
            switch (nx) {                                                                              \
            case 1: TILE(T, 1, n, y + c, ys, wc, x, xs); break;                                        \
            case 2: TILE(T, 2, n, y + c, ys, wc, x, xs); break;                                        \
            case 3: TILE(T, 3, n, y + c, ys, wc, x, xs); break;                                        \
            default: TILE(T, 4, n, y + c, ys, wc, x, xs); break;                                       \
            }                                                                                          \
        }                                                                                              \
    }                                                                                                  \
    ATTR void DOT(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx)         \
    {                                                                                                  \
        if (nx == 1) TILE(T, 1, n, s, ss, w, x, xs);                                                   \
        else TILE(T, 2, n, s, ss, w, x, xs);                                                           \
    }

#define KERN_AVX2Q_DECL(T)                                                                             \
    void kern_gemm_##T##_avx2(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, \
                              size_t xs, int nx);                                                       \
    void kern_dot_##T##_avx2(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx);
KERN_AVX2Q_DECL(q4_1)
KERN_AVX2Q_DECL(q5_0)
KERN_AVX2Q_DECL(q5_1)
KERN_AVX2Q_DECL(iq4_nl)
KERN_AVX2Q_DECL(q2_K)
KERN_AVX2Q_DECL(q3_K)
KERN_AVX2Q_DECL(q5_K)
KERN_AVX2Q_DECL(iq4_xs)
KERN_AVX2Q_DECL(iq2_xxs) /* kern_avx2_lattice.c */
KERN_AVX2Q_DECL(iq2_xs)
KERN_AVX2Q_DECL(iq2_s)
KERN_AVX2Q_DECL(iq3_xxs)
KERN_AVX2Q_DECL(iq3_s)
KERN_AVX2Q_DECL(iq1_s)
KERN_AVX2Q_DECL(iq1_m)
KERN_AVX2Q_DECL(tq2_0)
KERN_AVX2Q_DECL(tq1_0) /* kern_avx2_tq1.c */
#undef KERN_AVX2Q_DECL
/* kern_avx2_kgemm.c: the AVX2 table's K-quant/IQ4_XS packed GEMM
 * (kern_kgemm.gemm; x86 only). */
#define KERN_AVX2KG_DECL(T)                                                                            \
    void kern_kgemm_##T##_avx2(int n, float *y, size_t ys, const uint8_t *wp, int nw, const void *x,   \
                               size_t xs, int nx);
KERN_AVX2KG_DECL(q2_K)
KERN_AVX2KG_DECL(q3_K)
KERN_AVX2KG_DECL(q4_K)
KERN_AVX2KG_DECL(q5_K)
KERN_AVX2KG_DECL(q6_K)
KERN_AVX2KG_DECL(iq4_xs)
KERN_AVX2KG_DECL(lattice)
#undef KERN_AVX2KG_DECL
/* kern_avx2_f16p.c: the AVX2 table's packed F16 GEMM (kern_packed). */
void kern_gemmp_f16_avx2(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,
                         const kern_px *px, int nx);
void kern_pxf_row_f16_avx2(float *f, size_t rows, const void *x, int n);
/* The AVX-512 variant (kern_avx512*.c; see avx512_intrin.h). It needs
 * AVX-512 F, BW, VL, DQ and VNNI (Ice Lake, Zen 4 and later: the gain is
 * VNNI's integer dot, so a CPU without it keeps AVX2) and has a second
 * table for CPUs that also have AVX512_BF16. Its tables hold only what it
 * improves: kern_init overlays it on the AVX2 variant. kern_cpu_avx512()
 * says which of the features this CPU has (0 when not compiled for x86);
 * kern_vt_avx512(f) is the table for features f (NULL without
 * KERN_X512_BASE or when not compiled). */
enum { KERN_X512_BASE = 1, KERN_X512_BF16 = 2 };
unsigned kern_cpu_avx512(void);
const kern_vtable *kern_vt_avx512(unsigned features);
/* Each AVX-512 file fills its own entries of the table (kern_avx512.c calls
 * them once per table); bf16: the table is for a CPU with AVX512_BF16. */
void kern_avx512_fill_q8(kern_vtable *t);
void kern_avx512_fill_kquant(kern_vtable *t);
void kern_avx512_fill_float(kern_vtable *t, bool bf16);
void kern_avx512_fill_elem(kern_vtable *t);
void kern_avx512_fill_f16p(kern_vtable *t);
void kern_avx512_fill_quants(kern_vtable *t); /* kern_avx512_quants.c: Q5_K, IQ4_XS */
void kern_avx512_fill_legacy(kern_vtable *t); /* kern_avx512_legacy.c: Q4_1, Q5_0, Q5_1, IQ4_NL */
void kern_avx512_fill_kgemm(kern_vtable *t);  /* kern_avx512_kgemm.c: Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS packed per call */
void kern_avx512_fill_lowbit(kern_vtable *t); /* kern_avx512_lowbit.c: Q3_K, Q2_K, TQ2_0 */
void kern_avx512_fill_tq1(kern_vtable *t);   /* kern_avx512_tq1.c: TQ1_0 */
void kern_avx512_fill_iq4p(kern_vtable *t);  /* kern_avx512_iq4p.c: IQ4_XS packed at load */
void kern_avx512_fill_q3kp(kern_vtable *t);  /* kern_avx512_q3kp.c: Q3_K packed at load */
void kern_avx512_fill_q4kp(kern_vtable *t);  /* kern_avx512_q4kp.c: Q4_K packed at load */
/* The NEON variant (kern_neon.c), or NULL when not compiled for aarch64.
 * Advanced SIMD is part of the aarch64 base ABI, so no run-time check is
 * needed; its name says whether the integer dots use the dot-product
 * instructions ("neon-dotprod", chosen at compile time from
 * __ARM_FEATURE_DOTPROD, e.g. -march=armv8.2-a+dotprod; every kern_neon*.c
 * file must be built with the same flags) or the widening multiplies
 * ("neon"). */
const kern_vtable *kern_vt_neon(void);
/* kern_neon_quants.c: the NEON table's GEMM tiles ({1, 4}) and decode dot
 * tiles of the other block formats (aarch64 only). */
#define KERN_NEONQ_DECL(T)                                                                             \
    void kern_gemm_##T##_neon(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x, \
                              size_t xs, int nx);                                                       \
    void kern_dot_##T##_neon(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx);
KERN_NEONQ_DECL(iq2_xxs) /* kern_neon_lattice.c */
KERN_NEONQ_DECL(iq2_xs)
KERN_NEONQ_DECL(iq2_s)
KERN_NEONQ_DECL(iq3_xxs)
KERN_NEONQ_DECL(iq3_s)
KERN_NEONQ_DECL(iq1_s)
KERN_NEONQ_DECL(iq1_m)
KERN_NEONQ_DECL(q4_1)
KERN_NEONQ_DECL(q5_0)
KERN_NEONQ_DECL(q5_1)
KERN_NEONQ_DECL(iq4_nl)
KERN_NEONQ_DECL(q2_K)
KERN_NEONQ_DECL(q3_K)
KERN_NEONQ_DECL(q5_K)
KERN_NEONQ_DECL(iq4_xs)
KERN_NEONQ_DECL(tq2_0)
KERN_NEONQ_DECL(tq1_0)
#undef KERN_NEONQ_DECL
/* kern_elem_avx2.c: the AVX2 elementwise kernels the avx2 table lists
 * (x86 only; same feature requirement). */
void kern_rope_apply_avx2(float *x, int n_heads, int head_dim, int rope_dim, bool neox, const float *cs);
void kern_rmsnorm_avx2(float *y, const float *x, const float *w, int n, float eps);
void kern_add_rmsnorm_avx2(float *x, const float *d, float *y, const float *w, int n, float eps);

/* Copies every non-NULL entry of v (and its name) over dst: how kern_init
 * stacks the variants (tests build the same stacks). */
void kern_vt_overlay(kern_vtable *dst, const kern_vtable *v);

/* The active table (filled by kern_init; kern_active() initializes lazily). */
extern kern_vtable kern_vt;
const kern_vtable *kern_active(void);

/* Dot type of a weight type, or -1 if kern_matmul does not support it. */
int kern_dot_type(uint32_t wtype);


/* ------------------------------------------------------------------------
 * Tile drivers shared by the SIMD variants (kern_avx2.c, kern_neon.c).
 *
 * Each macro defines one kernel entry (static, with the variant's function
 * attributes ATTR, e.g. its target(); empty where none) that splits the
 * call into the variant's tiles TILE. They are macros, not functions taking
 * the tile as a pointer, so that every call names an always-inline tile
 * with constant is_q4 and tile height: each height is its own fully
 * unrolled instantiation, as if written out by hand.
 */

/* Q8_0/Q4_0 decode dot tile (kern_dot_fn): one weight row against nx = 1
 * or 2 rows in one tile. TILE(is_q4, NX, nb, s, ss, w, x, xs) takes nb
 * blocks, x as bytes. */
#define KERN_Q8DOT_DRIVER(name, ATTR, TILE, is_q4)                                                     \
    static ATTR void name(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx) \
    {                                                                                                  \
        const int nb = n / 32;                                                                         \
        if (nx == 1) TILE(is_q4, 1, nb, s, ss, w, x, xs);                                              \
        else TILE(is_q4, 2, nb, s, ss, w, x, xs);                                                      \
    }

/* Q8_0/Q4_0 GEMM from ggml rows (kern_gemm_fn, tile {4, 2}): 4 weight rows
 * by 2 activation rows at a time. TILE(is_q4, NX, tw, nb, y, ys, w, ws, x,
 * xs) computes tw <= 4 weight rows (w, x as bytes) by NX rows. */
#define KERN_Q8GEMM_DRIVER(name, ATTR, TILE, is_q4)                                                    \
    static ATTR void name(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x,  \
                          size_t xs, int nx)                                                           \
    {                                                                                                  \
        const int nb = n / 32;                                                                         \
        for (int c = 0; c < nw; c += 4) {                                                              \
            const int tw = nw - c < 4 ? nw - c : 4;                                                    \
            const uint8_t *wc = (const uint8_t *)w + c * ws;                                           \
            for (int r = 0; r < nx; r += 2) {                                                          \
                const uint8_t *xr = (const uint8_t *)x + r * xs;                                       \
                if (nx - r >= 2) TILE(is_q4, 2, tw, nb, y + r * ys + c, ys, wc, ws, xr, xs);           \
                else TILE(is_q4, 1, tw, nb, y + r * ys + c, ys, wc, ws, xr, xs);                       \
            }                                                                                          \
        }                                                                                              \
    }

/* Packed Q8_0/Q4_0 GEMM (kern_packed.gemm, tile height 8): one group of nw
 * weight rows against nx = 1..8 rows of px in one tile, every height its
 * own instantiation (accumulators in registers), so m = 8 sweeps the
 * weights once. TILE(is_q4, NX, nw, nb, y, ys, wp, px) with wp as bytes.
 * The ggml-layout rows x are not read. */
#define KERN_GEMMP_DRIVER(name, ATTR, TILE, is_q4)                                                     \
    static ATTR void name(int n, float *y, size_t ys, const void *wp, int nw, const void *x, size_t xs,\
                          const kern_px *px, int nx)                                                   \
    {                                                                                                  \
        (void)x, (void)xs;                                                                             \
        const int nb = n / 32;                                                                         \
        switch (nx) {                                                                                  \
        case 1: TILE(is_q4, 1, nw, nb, y, ys, wp, px); break;                                          \
        case 2: TILE(is_q4, 2, nw, nb, y, ys, wp, px); break;                                          \
        case 3: TILE(is_q4, 3, nw, nb, y, ys, wp, px); break;                                          \
        case 4: TILE(is_q4, 4, nw, nb, y, ys, wp, px); break;                                          \
        case 5: TILE(is_q4, 5, nw, nb, y, ys, wp, px); break;                                          \
        case 6: TILE(is_q4, 6, nw, nb, y, ys, wp, px); break;                                          \
        case 7: TILE(is_q4, 7, nw, nb, y, ys, wp, px); break;                                          \
        default: TILE(is_q4, 8, nw, nb, y, ys, wp, px); break;                                         \
        }                                                                                              \
    }

/* Packed F16 GEMM (kern_packed.gemm for DT_F16), the sweep of one tile
 * height NX over nw weight rows (up to 4 groups of KERN_PACKF_ROWS at a
 * time): tiles of GROUPS(NX) groups, the last one narrower, every width
 * its own instantiation (widths above GROUPS(NX) never occur).
 * TILE(G, NX, n, y, ys, wc, cw, xf, pfd) with wc the tile's first group
 * (uint16_t *) and cw its stored rows; uses n, y, ys, wp, nw, xf, pfd and
 * gs (halves per group) of the enclosing function. */
#define KERN_F16P_CASE_(TILE, GROUPS, G, NX)                                                           \
    case G: TILE((G) < GROUPS(NX) ? (G) : GROUPS(NX), NX, n, y + c, ys, wc, cw, xf, pfd); break;
#define KERN_F16P_SWEEP(TILE, GROUPS, NX)                                                              \
    do {                                                                                               \
        for (int c = 0; c < nw; c += KERN_PACKF_ROWS * GROUPS(NX)) {                                   \
            const int cw = nw - c < KERN_PACKF_ROWS * GROUPS(NX) ? nw - c : KERN_PACKF_ROWS * GROUPS(NX); \
            const uint16_t *wc = (const uint16_t *)wp + (size_t)(c / KERN_PACKF_ROWS) * gs;            \
            switch ((cw + KERN_PACKF_ROWS - 1) / KERN_PACKF_ROWS) {                                    \
                KERN_F16P_CASE_(TILE, GROUPS, 1, NX)                                                   \
                KERN_F16P_CASE_(TILE, GROUPS, 2, NX)                                                   \
                KERN_F16P_CASE_(TILE, GROUPS, 3, NX)                                                   \
                KERN_F16P_CASE_(TILE, GROUPS, 4, NX)                                                   \
            }                                                                                          \
        }                                                                                              \
    } while (0)

/* Q4_K/Q6_K GEMM from ggml rows (kern_gemm_fn, tile {1, 4}): one weight
 * row at a time (the per-row state of a K-quant tile, integer sums per
 * super-block then one float accumulator, leaves no registers for more)
 * against nx <= 4 rows. TILE(NX, nb, y, ys, wb, x, xs) with wb a WTYPE *. */
#define KERN_KGEMM_DRIVER(name, ATTR, TILE, WTYPE)                                                     \
    static ATTR void name(int n, float *y, size_t ys, const void *w, size_t ws, int nw, const void *x,\
                          size_t xs, int nx)                                                           \
    {                                                                                                  \
        const int nb = n / QK_K;                                                                       \
        for (int c = 0; c < nw; c++) {                                                                 \
            const WTYPE *wb = (const WTYPE *)((const uint8_t *)w + c * ws);                            \
            switch (nx) {                                                                              \
            case 1: TILE(1, nb, y + c, ys, wb, x, xs); break;                                          \
            case 2: TILE(2, nb, y + c, ys, wb, x, xs); break;                                          \
            case 3: TILE(3, nb, y + c, ys, wb, x, xs); break;                                          \
            default: TILE(4, nb, y + c, ys, wb, x, xs); break;                                         \
            }                                                                                          \
        }                                                                                              \
    }

/* Q4_K/Q6_K decode dot tile (kern_dot_fn): one weight row, nx = 1 or 2. */
#define KERN_KDOT_DRIVER(name, ATTR, TILE, WTYPE)                                                      \
    static ATTR void name(int n, float *s, size_t ss, const void *w, const void *x, size_t xs, int nx)\
    {                                                                                                  \
        const int nb = n / QK_K;                                                                       \
        const WTYPE *wb = w;                                                                           \
        if (nx == 1) TILE(1, nb, s, ss, wb, x, xs);                                                    \
        else TILE(2, nb, s, ss, wb, x, xs);                                                            \
    }

#endif
