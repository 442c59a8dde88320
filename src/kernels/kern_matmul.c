/* kern_matmul.c - the matrix product driver: converts activations once,
 * splits output columns over threads, and calls the variant's GEMM tiles.
 *
 *   x [m][n_in] f32 --conv--> xa [m][row bytes of the dot type]   (scratch)
 *   W [n_out][n_in] (ggml rows)
 *   y [m][n_out]:  y[i][j] = dot(W[j], xa[i])
 *
 * Work is cut into chunks of consecutive output columns (weight rows). Each
 * thread takes chunk ith first, then the next free chunk from an atomic
 * counter, so a thread that falls behind (preempted, slower core) does not
 * hold up the others. Inside a chunk (weights sized for L2), activation rows
 * go in groups of the tile's height (kept in L1) and the chunk's weight rows
 * are swept for each group, nw rows per tile: each weight block is read once
 * per group and each activation block once per nw weight rows, from
 * registers. Neither the tile an element falls in nor the thread that
 * computes it changes its value (kern_impl.h), so results do not depend on
 * m (within each path below), on how rows are batched, or on the thread
 * count.
 *
 * Two float orders, chosen by m:
 * - m <= KERN_DOT_MAX_M (single-sequence decode, the number that matters
 *   most): the variant's decode dot tiles, laid out like ggml's AVX2
 *   vec_dot (float lanes accumulated across blocks, one horizontal sum at
 *   the end). Per Q8_0/Q4_0 block that is a convert + FMA where the
 *   reference order needs a horizontal integer sum: decode on tinyllama
 *   q4_0 ~1.5x the GEMM path's. Not ggml's bits: Q8_0/Q4_0 use two
 *   accumulators over alternating blocks where ggml uses one (one is
 *   bit-exact with llama.cpp's vec_dot but measured ~10% slower decode),
 *   and the float/K-quant reductions differ; all within rounding of it
 *   (test_kernels dots_match_llama_cpp). Rows go
 *   KERN_DOT_NX_MAX at a time; a row is the same whatever m <= KERN_DOT_MAX_M.
 * - m > KERN_DOT_MAX_M (prefill, larger batches): the GEMM tiles (packed
 *   for Q8_0/Q4_0 from MM_PACK_MIN_M), every element in one fixed order
 *   (the reference's for Q8_0/Q4_0), so a row is the same bit for bit
 *   whatever m > KERN_DOT_MAX_M. The two orders agree within rounding
 *   (tests/test_kernels.c checks both properties).
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
    /* The widest dot type per element is f16/bf16 (2 B); Q8_0 takes 34/32 B
     * and Q8_K 292/256 B per element. */
    if (m > 0 && n_in > 0 && !mm_scratch_get(MM_SCRATCH_X, (size_t)m * (size_t)n_in * 2)) return PL_ENOMEM;
    return PL_OK;
}

/* ------------------------------------------------------------- the jobs */

typedef struct {
    const float *x;
    uint8_t *xa;
    size_t x_row;      /* bytes of one converted row */
    int m, n_in;
    kern_conv_fn conv;
} mm_conv_job;

static void mm_conv_run(void *arg, int ith, int nth)
{
    mm_conv_job *j = arg;
    int r0 = (int)((int64_t)j->m * ith / nth), r1 = (int)((int64_t)j->m * (ith + 1) / nth);
    for (int r = r0; r < r1; r++) j->conv(j->xa + (size_t)r * j->x_row, j->x + (size_t)r * j->n_in, j->n_in);
}

typedef struct {
    float *y;
    const uint8_t *w, *xa;
    size_t w_row, x_row; /* bytes of one weight row, one activation row */
    int m, n_in, n_out;
    int chunk;           /* output columns per chunk */
    kern_gemm gemm;
    kern_dot_fn dot;           /* non-NULL: the decode dot tiles (m <= KERN_DOT_MAX_M) */
    const kern_packed *packed; /* NULL: direct tiles */
    const int32_t *xs;         /* packed->xsums: [m][n_in / 32] block sums of xa */
    _Atomic int next;    /* next chunk to hand out */
} mm_dot_job;

/* The decode path (m <= KERN_DOT_MAX_M): groups of KERN_DOT_NX_MAX
 * activation rows, the chunk's weight rows swept for each group. */
static void mm_decode_chunk(const mm_dot_job *j, int c0, int c1)
{
    for (int i0 = 0; i0 < j->m; i0 += KERN_DOT_NX_MAX) {
        const int nx = j->m - i0 < KERN_DOT_NX_MAX ? j->m - i0 : KERN_DOT_NX_MAX;
        const uint8_t *xg = j->xa + (size_t)i0 * j->x_row;
        float *yg = j->y + (size_t)i0 * j->n_out;
        for (int c = c0; c < c1; c++)
            j->dot(j->n_in, yg + c, (size_t)j->n_out, j->w + (size_t)c * j->w_row, xg, j->x_row, nx);
    }
}

static void mm_dot_chunk(const mm_dot_job *j, int c0, int c1)
{
    const int gx = j->gemm.nx, gw = j->gemm.nw;
    for (int i0 = 0; i0 < j->m; i0 += gx) {
        const int nx = j->m - i0 < gx ? j->m - i0 : gx;
        const uint8_t *xg = j->xa + (size_t)i0 * j->x_row;
        float *yg = j->y + (size_t)i0 * j->n_out;
        for (int c = c0; c < c1; c += gw) {
            const int nw = c1 - c < gw ? c1 - c : gw;
            j->gemm.fn(j->n_in, yg + c, (size_t)j->n_out, j->w + (size_t)c * j->w_row, j->w_row, nw, xg, j->x_row,
                       nx);
        }
    }
}

/* The packed path: the chunk's weight rows are packed once into this
 * thread's buffer, then every group of activation rows sweeps them. */
static void mm_packed_chunk(const mm_dot_job *j, int c0, int c1)
{
    const kern_packed *pk = j->packed;
    const size_t gb = pk->group_bytes(j->n_in);
    const int ng = (c1 - c0 + pk->rows - 1) / pk->rows;
    uint8_t *buf = mm_scratch_get(MM_SCRATCH_PACK, (size_t)ng * gb);
    if (!buf) {
        fprintf(stderr, "kern_matmul: out of memory for packed weights\n");
        abort();
    }
    for (int g = 0; g < ng; g++) {
        const int c = c0 + g * pk->rows;
        pk->pack(buf + (size_t)g * gb, j->w + (size_t)c * j->w_row, j->w_row, c1 - c < pk->rows ? c1 - c : pk->rows,
                 j->n_in);
    }
    const size_t nbx = (size_t)j->n_in / 32;
    for (int i0 = 0; i0 < j->m; i0 += pk->nx) {
        const int nx = j->m - i0 < pk->nx ? j->m - i0 : pk->nx;
        const uint8_t *xg = j->xa + (size_t)i0 * j->x_row;
        const int32_t *xsg = j->xs ? j->xs + (size_t)i0 * nbx : NULL;
        float *yg = j->y + (size_t)i0 * j->n_out;
        for (int g = 0; g < ng; g++) {
            const int c = c0 + g * pk->rows;
            pk->gemm(j->n_in, yg + c, (size_t)j->n_out, buf + (size_t)g * gb, c1 - c < pk->rows ? c1 - c : pk->rows,
                     xg, j->x_row, xsg, nbx, nx);
        }
    }
}

static void mm_dot_run(void *arg, int ith, int nth)
{
    mm_dot_job *j = arg;
    const int n_chunks = (j->n_out + j->chunk - 1) / j->chunk;
    (void)nth;
    for (int c = ith; c < n_chunks; c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) {
        const int c0 = c * j->chunk;
        const int c1 = c0 + j->chunk < j->n_out ? c0 + j->chunk : j->n_out;
        if (j->dot) mm_decode_chunk(j, c0, c1);
        else if (j->packed) mm_packed_chunk(j, c0, c1);
        else mm_dot_chunk(j, c0, c1);
    }
}

/* Columns per chunk: about 8 chunks per thread for balance, and no more
 * weight bytes (as the tiles read them: packed or not) than fit in L2, so
 * that every activation group after the first finds the chunk's weights in
 * cache; a multiple of the tile width nw, so that only the last chunk has a
 * narrow tile. */
#define MM_CHUNK_BYTES (192 * 1024)

/* Rows of activations from which packing the weights pays for itself. */
#define MM_PACK_MIN_M 3

static int mm_chunk_size(int n_out, int nth, size_t w_row, int nw)
{
    int c = n_out / (8 * nth);
    const size_t cap = MM_CHUNK_BYTES / (w_row ? w_row : 1);
    if ((size_t)c > cap) c = (int)cap;
    c -= c % nw;
    return c < nw ? nw : c;
}

/* ------------------------------------------------------------ kern_matmul */

/* Converts x to the dot type (in this thread's scratch, followed by room
 * for extra_bytes); returns the rows. */
static const uint8_t *mm_convert(const kern_vtable *vt, const float *x, int dot_type, int m, int n_in,
                                 size_t x_row, size_t extra_bytes, threadpool *tp)
{
    if (dot_type == DT_F32) return (const uint8_t *)x;
    uint8_t *xa = mm_scratch_get(MM_SCRATCH_X, (size_t)m * x_row + extra_bytes);
    if (!xa) {
        fprintf(stderr, "kern_matmul: %s (call kern_matmul_reserve at start)\n", err_msg());
        abort();
    }
    mm_conv_job cj = {x, xa, x_row, m, n_in, vt->conv[dot_type]};
    if ((int64_t)m * n_in >= MM_MIN_PARALLEL_CONV && m > 1) tp_run(tp, mm_conv_run, &cj);
    else mm_conv_run(&cj, 0, 1);
    return xa;
}

void kern_matmul(float *y, const float *x, const void *w, uint32_t wtype, int m, int n_in, int n_out,
                 threadpool *tp)
{
    const kern_vtable *vt = kern_active();
    const int dot_type = kern_dot_type(wtype);
    assert(dot_type >= 0 && "kern_matmul: unsupported weight type");
    assert(dtype_row_bytes(wtype, (uint64_t)n_in) != 0 && "kern_matmul: n_in not a multiple of the block");
    if (m <= 0 || n_out <= 0) return;

    const size_t x_row = mm_x_row_bytes(dot_type, n_in);
    const kern_dot_fn dot = m <= KERN_DOT_MAX_M ? vt->dot[wtype] : NULL;
    const kern_packed *pk = !dot && vt->packed[wtype].gemm && m >= MM_PACK_MIN_M ? &vt->packed[wtype] : NULL;
    const size_t nbx = (size_t)n_in / 32, xs_bytes = pk && pk->xsums ? (size_t)m * nbx * sizeof(int32_t) + 64 : 0;
    const uint8_t *xa = mm_convert(vt, x, dot_type, m, n_in, x_row, xs_bytes, tp);
    int32_t *xs = NULL;
    if (xs_bytes) { /* the Q8_0 block sums, 4-byte aligned after the rows */
        xs = (int32_t *)(xa + (((size_t)m * x_row + 3) & ~(size_t)3));
        for (int i = 0; i < m; i++) {
            const block_q8_0 *xb = (const block_q8_0 *)(xa + (size_t)i * x_row);
            for (size_t b = 0; b < nbx; b++) {
                int32_t sum = 0;
                for (int k = 0; k < 32; k++) sum += xb[b].qs[k];
                xs[(size_t)i * nbx + b] = sum;
            }
        }
    }
    const int64_t macs = (int64_t)m * n_in * n_out;
    const int nth = macs < MM_MIN_PARALLEL_MACS ? 1 : tp_size(tp);
    const size_t w_row = (size_t)dtype_row_bytes(wtype, (uint64_t)n_in);
    const size_t tile_row = pk ? pk->group_bytes(n_in) / (size_t)pk->rows : w_row;
    mm_dot_job j = {
        .y = y, .w = w, .xa = xa,
        .w_row = w_row, .x_row = x_row,
        .m = m, .n_in = n_in, .n_out = n_out,
        .chunk = mm_chunk_size(n_out, nth, tile_row, dot ? 1 : pk ? pk->rows : vt->gemm[wtype].nw),
        .gemm = vt->gemm[wtype],
        .dot = dot,
        .packed = pk,
        .xs = xs,
    };
    atomic_init(&j.next, nth);
    if (nth == 1) mm_dot_run(&j, 0, 1);
    else tp_run(tp, mm_dot_run, &j);
}
