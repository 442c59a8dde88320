/* kern_matmul.c - the matrix product driver: converts activations once,
 * splits output columns over threads, and calls the variant's GEMM tiles.
 *
 *   x [m][n_in] f32 --conv--> xa [m][row bytes of the dot type]   (scratch)
 *   W [n_out][n_in] (ggml rows, or packed at load: kern_pack.c)
 *   y [m][n_out]:  y[i][j] = dot(W[j], xa[i])
 *
 * kern_matmul_mats does this for up to KERN_MATS_MAX matrices of one input
 * in one dispatch (q/k/v, gate/up): x is converted once per dot type, the
 * matrices' chunks are numbered one after the other and handed out from
 * one counter, so the call costs one thread-pool barrier (two when x is
 * large enough for a threaded conversion). A matrix's elements are computed
 * exactly as if it were alone.
 *
 * Work is cut into chunks of consecutive output columns (weight rows). Each
 * thread owns a contiguous run of chunks (an equal share of the columns) and
 * takes them in order; a thread done with its own takes the last chunk of
 * the thread with the most left, and so on, so a thread that falls behind
 * (preempted, slower core) does not hold up the others. Owning a run, not
 * taking the next free chunk of a shared counter (the first scheme), keeps
 * each thread's weight reads one rising stream that the hardware prefetcher
 * follows across chunks (decode reads every weight from DRAM), and a claim
 * touches only the thread's own cache line. Inside a chunk (weights sized
 * for L2), activation rows
 * go in groups of the tile's height (kept in L1) and the chunk's weight rows
 * are swept for each group, nw rows per tile: each weight block is read once
 * per group and each activation block once per nw weight rows, from
 * registers. Neither the tile an element falls in nor the thread that
 * computes it changes its value (kern_impl.h), so results do not depend on
 * m (within each path below), on how rows are batched, or on the thread
 * count.
 *
 * Float orders, chosen by how W is stored and by m:
 * - packed at load (Q8_0/Q4_0, and F16, IQ4_XS, Q3_K and Q4_K on x86, by default:
 *   model_weights_repack): the packed GEMM for EVERY m, decode included
 *   (IQ4_XS, Q3_K and Q4_K from the kern_kgemm's min_m: that GEMM on kern_kpack.c groups
 *   converted from the packed ones per chunk), every element in the
 *   reference's order (F16: the packed F16 order of kern_impl.h): a row
 *   is the same bit for bit whatever m or variant. With
 *   the weights already packed, its m = 1 tile beats the decode dot tiles
 *   (no horizontal work, 8 rows per vector: in L2, 1.4x for Q8_0 and 2.2x
 *   for Q4_0, single-threaded 2048 x 128; F16 as fast from DRAM), so
 *   there is no crossover left to keep.
 * - ggml rows, m <= KERN_DOT_MAX_M (PAGELLM_NO_REPACK=1, K-quants, floats):
 *   the variant's decode dot tiles, laid out like ggml's AVX2
 *   vec_dot (float lanes accumulated across blocks, one horizontal sum at
 *   the end). Not ggml's bits: Q8_0/Q4_0 use two accumulators over
 *   alternating blocks where ggml uses one, and the float/K-quant
 *   reductions differ; all within rounding of it (test_kernels
 *   dots_match_llama_cpp). Rows go KERN_DOT_NX_MAX at a time; a row is the
 *   same whatever m <= KERN_DOT_MAX_M.
 * - ggml rows, m > KERN_DOT_MAX_M: the GEMM tiles (for Q8_0/Q4_0 the
 *   packed GEMM, packing each chunk per call; for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and
 *   IQ4_XS from m = kern_kgemm.min_m the variant's kern_kgemm where it
 *   has one, packing each chunk per call into kern_kpack.c's layout; F16 is not packed per call:
 *   its transposition cost 7x the product at m = 8), every element in one fixed
 *   order (the reference's for Q8_0/Q4_0 and kern_kgemm), so a row is the same bit for bit
 *   whatever m > KERN_DOT_MAX_M. The two orders agree within rounding
 *   (tests/test_kernels.c checks every property above).
 *
 * Scratch: the converted activations live in a buffer owned by the calling
 * thread (_Thread_local pointer, freed by a pthread key destructor when the
 * thread exits). It only grows, so a steady state allocates nothing; the
 * engine can reserve the largest size up front with kern_matmul_reserve.
 */
#include "kernels/kernels.h"
#include "kernels/kern_impl.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/mem.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

/* Below this many multiply-adds, waking workers costs more than it saves. */
#define MM_MIN_PARALLEL_MACS (1 << 16)
/* Rows converted on the caller alone below this many elements. */
#define MM_MIN_PARALLEL_CONV (1 << 15)

/* ------------------------------------------------------------- scratch */

/* Two per-thread buffers: slot 0 the converted activations (the calling
 * thread's), slot 1 packed weights (each thread that runs packed tiles). */
enum { MM_SCRATCH_X, MM_SCRATCH_PACK, MM_SCRATCH_SLOTS };

static _Thread_local void *mm_scratch[MM_SCRATCH_SLOTS];
static _Thread_local size_t mm_scratch_cap[MM_SCRATCH_SLOTS];
static pthread_key_t mm_scratch_key[MM_SCRATCH_SLOTS];
static pthread_once_t mm_scratch_once = PTHREAD_ONCE_INIT;
static int mm_scratch_key_ok;

static void mm_scratch_destroy(void *p) { mem_free(p); }

static void mm_scratch_key_init(void)
{
    mm_scratch_key_ok = pthread_key_create(&mm_scratch_key[0], mm_scratch_destroy) == 0 &&
                        pthread_key_create(&mm_scratch_key[1], mm_scratch_destroy) == 0;
}

/* This thread's scratch slot of at least bytes, or NULL (error text set). */
static void *mm_scratch_get(int slot, size_t bytes)
{
    if (bytes <= mm_scratch_cap[slot]) return mm_scratch[slot];
    size_t cap = bytes + bytes / 4 + 4096; /* slack: fewer regrowths while m creeps up */
    void *p = mem_alloc_aligned(cap, 64);
    if (!p) return NULL;
    pthread_once(&mm_scratch_once, mm_scratch_key_init);
    mem_free(mm_scratch[slot]);
    mm_scratch[slot] = p;
    mm_scratch_cap[slot] = cap;
    if (mm_scratch_key_ok) pthread_setspecific(mm_scratch_key[slot], p);
    return p;
}

void kern_scratch_free(void)
{
    for (int slot = 0; slot < MM_SCRATCH_SLOTS; slot++) {
        mem_free(mm_scratch[slot]);
        mm_scratch[slot] = NULL;
        mm_scratch_cap[slot] = 0;
        if (mm_scratch_key_ok) pthread_setspecific(mm_scratch_key[slot], NULL);
    }
}

/* Bytes of one converted activation row. */
static size_t mm_x_row_bytes(int dot_type, int n_in)
{
    return (size_t)dtype_row_bytes((uint32_t)dot_type, (uint64_t)n_in);
}

int kern_matmul_reserve(int m, int n_in)
{
    /* Per element: f16/bf16 2 B (packed F16: plus its f32 copy, kern_px.f,
     * 4 B), a GEMM tile's own form (kern_gemm.xconv: the AVX-512 F16
     * tile's f32) 4 B, Q8_0 34/32 B plus the packed GEMMs'
     * re-laid copy (kern_px: 1 B and 8/32 B of kern_xblk), Q8_K
     * 292/256 B; a call converts to at most two of them in practice (fused
     * matrices of different types), so 8 B, plus alignment. */
    if (m > 0 && n_in > 0 && !mm_scratch_get(MM_SCRATCH_X, (size_t)m * (size_t)n_in * 8 + 8 * 64)) return PL_ENOMEM;
    return PL_OK;
}

/* ------------------------------------------------------------- the jobs */

/* The conversions of one call: x once per distinct dot type. */
typedef struct {
    int dt;            /* dot type, or -1 - dot type for a GEMM tile's own form (kern_gemm.xconv) */
    kern_conv_fn conv; /* NULL: F32, x used as is */
    size_t x_row;      /* bytes of one converted row */
    uint8_t *xa;       /* [m][x_row] */
    void (*px_row)(int8_t *, kern_xblk *, size_t, const void *, int); /* a packed GEMM's (kern_packed) */
    int px_gx;         /* its rows per group (mm_row_group) */
    int8_t *pxq;       /* per group of rows i0.. (nx of them): [n_in / 32][nx][32] at i0 * n_in, else NULL */
    kern_xblk *pxa;    /* the same: [n_in / 32][nx] at i0 * n_in / 32 */
    void (*pxf_row)(float *, size_t, const void *, int); /* the packed F16 GEMM's (kern_packed) */
    float *pxf;        /* per group of rows i0..: [n_in][nx] at i0 * n_in, else NULL */
} mm_conv;

/* Rows per group when m rows go through a tile of at most tile_nx: equal
 * groups (the last may be smaller), e.g. m = 13, tile 8: 7 + 6. */
static int mm_row_group(int m, int tile_nx)
{
    const int ng = (m + tile_nx - 1) / tile_nx;
    return (m + ng - 1) / ng;
}

typedef struct {
    const float *x;
    mm_conv *cv;
    int n_cv, m, n_in;
} mm_conv_job;

static void mm_conv_run(void *arg, int ith, int nth)
{
    mm_conv_job *j = arg;
    const int r0 = (int)((int64_t)j->m * ith / nth), r1 = (int)((int64_t)j->m * (ith + 1) / nth);
    const size_t nbx = (size_t)j->n_in / 32;
    for (int k = 0; k < j->n_cv; k++) {
        const mm_conv *c = &j->cv[k];
        if (!c->conv) continue;
        for (int r = r0; r < r1; r++) {
            uint8_t *xr = c->xa + (size_t)r * c->x_row;
            c->conv(xr, j->x + (size_t)r * j->n_in, j->n_in);
            if (!c->px_row && !c->pxf_row) continue;
            /* block-major within the row's group only: a tile's rows sit
             * together (m * 32-byte strides would alias in L1 for large m) */
            const int i0 = r - r % c->px_gx, nx = j->m - i0 < c->px_gx ? j->m - i0 : c->px_gx;
            if (c->pxf_row) {
                c->pxf_row(c->pxf + (size_t)i0 * (size_t)j->n_in + (size_t)(r - i0), (size_t)nx, xr, j->n_in);
                continue;
            }
            const size_t at = (size_t)i0 * nbx + (size_t)(r - i0);
            c->px_row(c->pxq + at * 32, c->pxa + at, (size_t)nx, xr, j->n_in);
        }
    }
}

/* How one matrix of a call is multiplied. */
enum {
    MM_DOT,       /* decode dot tiles, ggml rows (m <= KERN_DOT_MAX_M) */
    MM_GEMM,      /* GEMM tiles, ggml rows */
    MM_PACK_CALL, /* ggml rows packed per chunk, then the packed GEMM */
    MM_PACKED,    /* packed at load: the packed GEMM for every m */
    MM_KPACK,     /* K-quant/IQ4_XS rows packed per chunk (kern_kpack.c), then kern_kgemm */
};

typedef struct {
    float *y;             /* [m][n_out] */
    const uint8_t *w;     /* ggml rows, or the packed groups (MM_PACKED) */
    const uint8_t *xa;    /* x in the dot type */
    kern_px px;           /* x re-laid for the packed GEMM (when pk->px_row): the first group's */
    uint32_t wtype;
    int mode, n_out, chunk;
    int c_begin;          /* index of the matrix's first chunk in the call */
    int n_big;            /* chunks of `chunk` columns, then chunks of `small` (the call's tail) */
    int small, n_chunks;  /* that size; the matrix's chunks in all */
    size_t w_row, x_row;  /* bytes of one weight row, one activation row */
    size_t gb;            /* bytes of one packed group */
    kern_gemm gemm;
    kern_dot_fn dot;
    const kern_packed *pk;
    kern_kgemm kg;
    /* MM_KPACK from weights packed at load (IQ4_XS, Q3_K, Q4_K): kern_packed.to_kpack
     * and the bytes of one packed group; else NULL */
    void (*to_kpack)(uint8_t *dst, const uint8_t *wp, size_t gb, int nw, int n);
    size_t pgb;
} mm_part;

/* Threads with a share of their own; a bigger pool shares one counter. */
#define MM_SHARES_MAX 32

/* One thread's run of chunks [next, end) as next | end << 32, on a cache
 * line of its own: the owner takes from the front, others from the back,
 * each by a compare-and-swap of the whole word, so a chunk is taken once.
 * (Lines apart: the fields of mm_job are read for every tile call, and
 * perf once showed ~1 ms a TinyLlama token lost on a claim counter's round
 * trips when it shared their line.) */
typedef struct {
    _Alignas(64) _Atomic uint64_t span;
} mm_share;

typedef struct {
    mm_part p[KERN_MATS_MAX];
    int n_parts, m, n_in, n_chunks;
    int shared; /* 1: the pool is larger than MM_SHARES_MAX, chunks come from `next` */
    _Alignas(64) _Atomic int next;
    mm_share share[MM_SHARES_MAX];
} mm_job;

/* The decode path (m <= KERN_DOT_MAX_M): groups of KERN_DOT_NX_MAX
 * activation rows, the chunk's weight rows swept for each group. */
static void mm_decode_chunk(const mm_job *j, const mm_part *p, int c0, int c1)
{
    for (int i0 = 0; i0 < j->m; i0 += KERN_DOT_NX_MAX) {
        const int nx = j->m - i0 < KERN_DOT_NX_MAX ? j->m - i0 : KERN_DOT_NX_MAX;
        const uint8_t *xg = p->xa + (size_t)i0 * p->x_row;
        float *yg = p->y + (size_t)i0 * p->n_out;
        for (int c = c0; c < c1; c++)
            p->dot(j->n_in, yg + c, (size_t)p->n_out, p->w + (size_t)c * p->w_row, xg, p->x_row, nx);
    }
}

static void mm_gemm_chunk(const mm_job *j, const mm_part *p, int c0, int c1)
{
    const int gx = p->gemm.nx, gw = p->gemm.nw;
    for (int i0 = 0; i0 < j->m; i0 += gx) {
        const int nx = j->m - i0 < gx ? j->m - i0 : gx;
        const uint8_t *xg = p->xa + (size_t)i0 * p->x_row;
        float *yg = p->y + (size_t)i0 * p->n_out;
        for (int c = c0; c < c1; c += gw) {
            const int nw = c1 - c < gw ? c1 - c : gw;
            p->gemm.fn(j->n_in, yg + c, (size_t)p->n_out, p->w + (size_t)c * p->w_row, p->w_row, nw, xg, p->x_row,
                       nx);
        }
    }
}

/* This thread's buffer for weights packed per call; out of memory is fatal
 * (a tile has no way to fail). */
static uint8_t *mm_pack_buf(size_t bytes)
{
    uint8_t *b = mm_scratch_get(MM_SCRATCH_PACK, bytes);
    if (!b) {
        fprintf(stderr, "kern_matmul: out of memory for packed weights\n");
        abort();
    }
    return b;
}

/* The packed paths: the chunk's groups (packed at load, or packed now into
 * this thread's buffer), swept once per group of activation rows. The m
 * rows go in equal groups of at most pk->nx (AVX2: 8, so m = 8 sweeps the
 * weights once; m = 13: 7 + 6, not 8 + 5). */
static void mm_packed_chunk(const mm_job *j, const mm_part *p, int c0, int c1)
{
    const kern_packed *pk = p->pk;
    const int R = kern_pack_rows(p->wtype), ng = (c1 - c0 + R - 1) / R, gw = pk->gw > 1 ? pk->gw : 1;
    const uint8_t *buf;
    if (p->mode == MM_PACKED) {
        buf = p->w + (size_t)(c0 / R) * p->gb; /* chunks are whole groups */
    } else {
        uint8_t *b = mm_pack_buf((size_t)ng * p->gb);
        for (int g = 0; g < ng; g++) {
            const int c = c0 + g * R;
            kern_pack_group(p->wtype, b + (size_t)g * p->gb, p->w + (size_t)c * p->w_row, p->w_row,
                            c1 - c < R ? c1 - c : R, j->n_in);
        }
        buf = b;
    }
    /* in locals: the tile is an indirect call, after which the compiler
     * would reload every field through j and p */
    const int m = j->m, n_in = j->n_in, gx = mm_row_group(m, pk->nx);
    const size_t nbx = (size_t)n_in / 32, gb = p->gb, x_row = p->x_row, n_out = (size_t)p->n_out;
    const bool with_px = pk->px_row != NULL || pk->pxf_row != NULL;
    __typeof__(pk->gemm) const gemm = pk->gemm;
    for (int i0 = 0; i0 < m; i0 += gx) {
        const int nx = m - i0 < gx ? m - i0 : gx;
        const uint8_t *xg = p->xa + (size_t)i0 * x_row;
        const kern_px pxg = {p->px.q ? p->px.q + (size_t)i0 * nbx * 32 : NULL, p->px.a ? p->px.a + (size_t)i0 * nbx : NULL,
                             (size_t)nx, p->px.f ? p->px.f + (size_t)i0 * (size_t)n_in : NULL};
        float *yg = p->y + (size_t)i0 * n_out;
        for (int g = 0; g < ng; g += gw) {
            const int c = c0 + g * R, cw = gw * R;
            gemm(n_in, yg + c, n_out, buf + (size_t)g * gb, c1 - c < cw ? c1 - c : cw, xg, x_row, with_px ? &pxg : NULL, nx);
        }
    }
}

/* The K-quant/IQ4_XS batched path: the chunk's rows packed once into this
 * thread's buffer (groups of KERN_KPACK_ROWS; from ggml rows, or from
 * IQ4_XS's, Q3_K's or Q4_K's groups packed at load, two to one), then swept once per group
 * of up to KERN_KPACK_NX activation rows. */
static void mm_kpack_chunk(const mm_job *j, const mm_part *p, int c0, int c1)
{
    const int R = KERN_KPACK_ROWS, ng = (c1 - c0 + R - 1) / R;
    uint8_t *buf = mm_pack_buf((size_t)ng * p->gb);
    for (int g = 0; g < ng; g++) {
        const int c = c0 + g * R, nw = c1 - c < R ? c1 - c : R;
        if (p->to_kpack)
            p->to_kpack(buf + (size_t)g * p->gb, p->w + (size_t)(c / KERN_PACK_ROWS) * p->pgb, p->pgb, nw, j->n_in);
        else
            (p->kg.pack ? p->kg.pack : kern_kpack_group)(p->wtype, buf + (size_t)g * p->gb, p->w + (size_t)c * p->w_row,
                                                         p->w_row, nw, j->n_in);
    }
    const int m = j->m, n_in = j->n_in, gx = mm_row_group(m, KERN_KPACK_NX);
    const size_t gb = p->gb, x_row = p->x_row, n_out = (size_t)p->n_out;
    __typeof__(p->kg.gemm) const gemm = p->kg.gemm;
    for (int i0 = 0; i0 < m; i0 += gx) {
        const int nx = m - i0 < gx ? m - i0 : gx;
        const uint8_t *xg = p->xa + (size_t)i0 * x_row;
        float *yg = p->y + (size_t)i0 * n_out;
        for (int g = 0; g < ng; g++) {
            const int c = c0 + g * R;
            gemm(n_in, yg + c, n_out, buf + (size_t)g * gb, c1 - c < R ? c1 - c : R, xg, x_row, nx);
        }
    }
}

/* Chunk i of part p: columns [*c0, *c1). */
static void mm_chunk_cols(const mm_part *p, int i, int *c0, int *c1)
{
    const int big = i < p->n_big, size = big ? p->chunk : p->small;
    *c0 = big ? i * p->chunk : p->n_big * p->chunk + (i - p->n_big) * p->small;
    *c1 = *c0 + size < p->n_out ? *c0 + size : p->n_out;
}

static void mm_do_chunk(const mm_job *j, int c)
{
    int k = 0;
    while (c >= j->p[k].c_begin + j->p[k].n_chunks) k++;
    const mm_part *p = &j->p[k];
    int c0, c1;
    mm_chunk_cols(p, c - p->c_begin, &c0, &c1);
    if (p->mode == MM_DOT) mm_decode_chunk(j, p, c0, c1);
    else if (p->mode == MM_GEMM) mm_gemm_chunk(j, p, c0, c1);
    else if (p->mode == MM_KPACK) mm_kpack_chunk(j, p, c0, c1);
    else mm_packed_chunk(j, p, c0, c1);
}

/* The front (own) or back (stolen) chunk of a share, or -1 if it is empty. */
static int mm_take(mm_share *s, bool front)
{
    uint64_t v = atomic_load_explicit(&s->span, memory_order_relaxed);
    for (;;) {
        const uint32_t next = (uint32_t)v, end = (uint32_t)(v >> 32);
        if (next >= end) return -1;
        const uint64_t nv = front ? v + 1 : ((uint64_t)(end - 1) << 32) | next;
        if (atomic_compare_exchange_weak_explicit(&s->span, &v, nv, memory_order_relaxed, memory_order_relaxed))
            return front ? (int)next : (int)end - 1;
    }
}

/* A chunk from the back of the share with the most left, or -1 when every
 * share is empty. */
static int mm_steal(mm_job *j, int nth)
{
    for (;;) {
        int best = -1;
        uint32_t most = 0;
        for (int t = 0; t < nth; t++) {
            const uint64_t v = atomic_load_explicit(&j->share[t].span, memory_order_relaxed);
            const uint32_t next = (uint32_t)v, end = (uint32_t)(v >> 32);
            if (end > next && end - next > most) most = end - next, best = t;
        }
        if (best < 0) return -1;
        const int c = mm_take(&j->share[best], false);
        if (c >= 0) return c;
    }
}

static void mm_run(void *arg, int ith, int nth)
{
    mm_job *j = arg;
    if (j->shared) {
        for (int c = ith; c < j->n_chunks; c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
            mm_do_chunk(j, c);
        return;
    }
    for (;;) {
        int c = mm_take(&j->share[ith], true);
        if (c < 0 && (c = mm_steal(j, nth)) < 0) return;
        mm_do_chunk(j, c);
    }
}

/* Splits the call's chunks into nth runs of about equal columns. */
static void mm_share_out(mm_job *j, int nth)
{
    int64_t cols = 0;
    for (int k = 0; k < j->n_parts; k++) cols += j->p[k].n_out > 0 ? j->p[k].n_out : 0;
    int t = 0, start = 0;
    int64_t done = 0;
    for (int k = 0; k < j->n_parts; k++) {
        const mm_part *p = &j->p[k];
        for (int i = 0; i < p->n_chunks; i++) {
            /* chunk c starts thread t+1's run once t's share of columns is reached */
            while (t < nth - 1 && done >= cols * (t + 1) / nth) {
                atomic_init(&j->share[t].span, (uint64_t)start | (uint64_t)(p->c_begin + i) << 32);
                start = p->c_begin + i, t++;
            }
            int c0, c1;
            mm_chunk_cols(p, i, &c0, &c1);
            done += c1 - c0;
        }
    }
    for (; t < nth; t++) {
        atomic_init(&j->share[t].span, (uint64_t)start | (uint64_t)j->n_chunks << 32);
        start = j->n_chunks;
    }
}

/* Columns per chunk: about 8 chunks per thread over the whole call for
 * balance, and no more weight bytes (as the tiles read them: packed or not)
 * than fit in L2, so that every activation group after the first finds the
 * chunk's weights in cache; a multiple of the tile width nw, so that only
 * the last chunk has a narrow tile (and packed chunks are whole groups). */
#ifndef MM_CHUNK_BYTES
#define MM_CHUNK_BYTES (192 * 1024)
#endif

/* Rows of activations from which packing ggml rows per call pays for itself
 * (below it, the decode dot tiles run anyway). */
#define MM_PACK_MIN_M 3

static int mm_chunk_size(int total_cols, int nth, size_t w_row, int nw)
{
    int c = total_cols / (8 * nth);
    const size_t cap = MM_CHUNK_BYTES / (w_row ? w_row : 1);
    if ((size_t)c > cap) c = (int)cap;
    c -= c % nw;
    return c < nw ? nw : c;
}

/* The call's tail: chunks are handed out in order, so the threads finish
 * unevenly by up to one chunk of the last matrix. Its last nth chunks' worth
 * of columns go in chunks of a quarter size (a multiple of nw), so the
 * threads end within a quarter chunk of each other. */
static void mm_part_chunks(mm_part *p, int chunk, int nw, int nth, bool last)
{
    p->chunk = chunk;
    p->small = chunk / 4 - chunk / 4 % nw;
    if (p->small < nw) p->small = nw;
    p->n_big = (p->n_out + chunk - 1) / chunk;
    p->n_chunks = p->n_big;
    if (last && nth > 1 && p->small < chunk) {
        p->n_big = p->n_out > nth * chunk ? (p->n_out - nth * chunk) / chunk : 0;
        p->n_chunks = p->n_big + (p->n_out - p->n_big * chunk + p->small - 1) / p->small;
    }
}

/* ------------------------------------------------------------ kern_matmul */

static void mm_fatal_scratch(void)
{
    fprintf(stderr, "kern_matmul: %s (call kern_matmul_reserve at start)\n", err_msg());
    abort();
}

/* Converts x to every dot type the call needs (cv[0..n_cv), in this
 * thread's scratch). */
static void mm_convert(mm_conv *cv, int n_cv, const float *x, int m, int n_in, threadpool *tp)
{
    const size_t nbx = (size_t)n_in / 32;
    size_t bytes = 0;
    for (int k = 0; k < n_cv; k++) {
        if (!cv[k].conv) continue;
        bytes += ((size_t)m * cv[k].x_row + 63) & ~(size_t)63;
        if (cv[k].px_row) bytes += m * nbx * 32 + (((size_t)m * nbx * sizeof(kern_xblk) + 63) & ~(size_t)63);
        if (cv[k].pxf_row) bytes += (size_t)m * (size_t)n_in * sizeof(float);
    }
    uint8_t *buf = bytes ? mm_scratch_get(MM_SCRATCH_X, bytes) : NULL;
    if (bytes && !buf) mm_fatal_scratch();
    bool any = false;
    for (int k = 0; k < n_cv; k++) {
        if (!cv[k].conv) {
            cv[k].xa = (uint8_t *)(uintptr_t)x;
            continue;
        }
        any = true;
        cv[k].xa = buf;
        buf += ((size_t)m * cv[k].x_row + 63) & ~(size_t)63;
        if (cv[k].px_row) {
            cv[k].pxq = (int8_t *)buf;
            buf += m * nbx * 32;
            cv[k].pxa = (kern_xblk *)buf;
            buf += ((size_t)m * nbx * sizeof(kern_xblk) + 63) & ~(size_t)63;
        }
        if (cv[k].pxf_row) {
            cv[k].pxf = (float *)buf;
            buf += (size_t)m * (size_t)n_in * sizeof(float);
        }
    }
    if (!any) return;
    mm_conv_job cj = {x, cv, n_cv, m, n_in};
    if ((int64_t)m * n_in >= MM_MIN_PARALLEL_CONV && m > 1) tp_run(tp, mm_conv_run, &cj);
    else mm_conv_run(&cj, 0, 1);
}

void kern_matmul_mats(int n_mats, float *const *y, const float *x, const kern_mat *const *w, int m, threadpool *tp)
{
    const kern_vtable *vt = kern_active();
    assert(n_mats >= 1 && n_mats <= KERN_MATS_MAX);
    if (m <= 0) return;
    const int n_in = w[0]->n_in;
    mm_job j = {.n_parts = n_mats, .m = m, .n_in = n_in};
    mm_conv cv[KERN_MATS_MAX];
    int n_cv = 0, cv_of[KERN_MATS_MAX];
    int64_t cols = 0;
    for (int i = 0; i < n_mats; i++) {
        const kern_mat *wi = w[i];
        mm_part *p = &j.p[i];
        const int dt = kern_dot_type(wi->type);
        assert(dt >= 0 && "kern_matmul: unsupported weight type");
        assert(wi->n_in == n_in && "kern_matmul_mats: every matrix takes the same input");
        assert(dtype_row_bytes(wi->type, (uint64_t)n_in) != 0 && "kern_matmul: n_in not a multiple of the block");
        *p = (mm_part){.y = y[i], .wtype = wi->type, .n_out = wi->n_out,
                       .w_row = (size_t)dtype_row_bytes(wi->type, (uint64_t)n_in),
                       .x_row = mm_x_row_bytes(dt, n_in), .gemm = vt->gemm[wi->type]};
        if (wi->packed) {
            assert(kern_pack_bytes(wi->type, n_in, 1) != 0 && "kern_matmul: no packed layout for this type");
            p->w = wi->packed;
            const kern_packed *pk = kern_packed_for(vt, wi->type);
            if (pk->to_kpack && vt->kgemm[wi->type].gemm && m >= vt->kgemm[wi->type].min_m) {
                /* prefill: the kgemm on kern_kpack.c groups made from the packed ones */
                p->mode = MM_KPACK, p->kg = vt->kgemm[wi->type], p->gb = kern_kpack_group_bytes(n_in);
                p->to_kpack = pk->to_kpack, p->pgb = kern_pack_group_bytes(wi->type, n_in);
            } else {
                p->mode = MM_PACKED;
                p->pk = pk;
            }
        } else {
            p->w = wi->data;
            if (m <= KERN_DOT_MAX_M && vt->dot[wi->type]) p->mode = MM_DOT, p->dot = vt->dot[wi->type];
            else if (vt->kgemm[wi->type].gemm && m >= vt->kgemm[wi->type].min_m && kern_kpack_layout(wi->type))
                p->mode = MM_KPACK, p->kg = vt->kgemm[wi->type], p->gb = kern_kpack_group_bytes(n_in);
            else if (vt->packed[wi->type].gemm && m >= MM_PACK_MIN_M && (wi->type == DT_Q8_0 || wi->type == DT_Q4_0) &&
                     kern_pack_supports(wi->type, n_in)) /* F16, IQ4_XS, Q3_K, Q4_K: packed at load only */
                p->mode = MM_PACK_CALL, p->pk = &vt->packed[wi->type];
            else p->mode = MM_GEMM;
        }
        if (p->pk) p->gb = kern_pack_group_bytes(wi->type, n_in);
        /* the tile's own activation form, when it has one (kern_impl.h) */
        const bool own = p->mode == MM_GEMM && p->gemm.xconv;
        if (own) p->x_row = (size_t)n_in * (size_t)p->gemm.x_elem;
        const int key = own ? -1 - dt : dt;
        kern_conv_fn conv = own ? p->gemm.xconv : dt == DT_F32 ? NULL : vt->conv[dt];
        int k = 0;
        while (k < n_cv && cv[k].dt != key) k++;
        if (k == n_cv) cv[n_cv++] = (mm_conv){key, conv, p->x_row, NULL, NULL, 0, NULL, NULL, NULL, NULL};
        /* one px per conversion: the packed GEMMs of a variant share the form and tile height */
        if (p->pk && p->pk->px_row) cv[k].px_row = p->pk->px_row, cv[k].px_gx = mm_row_group(m, p->pk->nx);
        if (p->pk && p->pk->pxf_row) cv[k].pxf_row = p->pk->pxf_row, cv[k].px_gx = mm_row_group(m, p->pk->nx);
        cv_of[i] = k;
        cols += wi->n_out > 0 ? wi->n_out : 0;
    }
    if (cols == 0) return;
    mm_convert(cv, n_cv, x, m, n_in, tp);
    const int64_t macs = (int64_t)m * n_in * cols;
    const int nth = macs < MM_MIN_PARALLEL_MACS ? 1 : tp_size(tp);
    int chunks = 0, last = n_mats - 1;
    while (last > 0 && j.p[last].n_out <= 0) last--;
    for (int i = 0; i < n_mats; i++) {
        mm_part *p = &j.p[i];
        p->xa = cv[cv_of[i]].xa;
        if (p->pk) p->px = (kern_px){cv[cv_of[i]].pxq, cv[cv_of[i]].pxa, 0, cv[cv_of[i]].pxf};
        const size_t tile_row = p->pk                  ? p->gb / (size_t)kern_pack_rows(p->wtype)
                                : p->mode == MM_KPACK ? p->gb / KERN_KPACK_ROWS
                                                      : p->w_row;
        /* packed GEMMs of several groups a call (gw >= 2: F16 on x86, Q8_0
         * and Q4_0 on AVX-512) at m > 1: chunks of whole pairs of groups,
         * the width of the AVX-512 F16 tile at nx > 4 and of the Q8_0/Q4_0
         * pair tile, not one pair and a lone group (one weight stream a
         * tile; docs/speed.md) */
        const int pair = m > 1 && p->pk && p->pk->gw >= 2 ? 2 : 1;
        const int nw = p->mode == MM_DOT     ? 1
                       : p->pk                ? kern_pack_rows(p->wtype) * pair
                       : p->mode == MM_KPACK  ? KERN_KPACK_ROWS
                                              : p->gemm.nw;
        if (p->n_out <= 0) {
            p->chunk = p->small = nw, p->n_big = p->n_chunks = 0;
        } else {
            mm_part_chunks(p, mm_chunk_size((int)cols, nth, tile_row, nw), nw, nth, i == last);
        }
        p->c_begin = chunks;
        chunks += p->n_chunks;
    }
    j.n_chunks = chunks;
    j.shared = nth > MM_SHARES_MAX;
    atomic_init(&j.next, nth);
    if (!j.shared) mm_share_out(&j, nth);
    if (nth == 1) mm_run(&j, 0, 1);
    else tp_run(tp, mm_run, &j);
}

void kern_matmul(float *y, const float *x, const void *w, uint32_t wtype, int m, int n_in, int n_out,
                 threadpool *tp)
{
    if (n_out <= 0) return;
    const kern_mat mat = {w, NULL, wtype, n_in, n_out};
    const kern_mat *mp = &mat;
    kern_matmul_mats(1, &y, x, &mp, m, tp);
}
