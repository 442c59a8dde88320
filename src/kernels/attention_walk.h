/* attention_walk.h - the walk over a paged cache's rows and its software
 * prefetch, and the score dispatch of f16 key columns, shared by the SIMD
 * attention files (attention_avx2.c,
 * attention_avx512.c). x86 only (_mm_prefetch); static inline, no target
 * attributes needed (prefetches are baseline SSE).
 *
 * Invariants: a kv_cursor stands at position j = blk * block_size + off
 * (off < block_size) and cursor_row is head 0 of that row (head g is g *
 * head_bytes further); a kv_pf has prefetched exactly positions [.., j) of
 * its n; a kv_pfb's rows [0, next) are issued, [next, n) pending; a
 * vline_pf has issued every line of blocks [0, blk) of its sweep and lines
 * [0, line) of block blk, and issues nothing at or past block goal.
 */
#ifndef PL_KERNELS_ATTENTION_WALK_H
#define PL_KERNELS_ATTENTION_WALK_H

#include <stddef.h>
#include <stdint.h>
#include <xmmintrin.h>

#include "kernels/attention_impl.h"

/* Walks the cache rows in position order without a division per key
 * (j / block_size is a hardware divide, as costly as a short dot product). */
typedef struct {
    const attn_kv *kv;
    const uint8_t *plane; /* K or V plane of block 0 */
    size_t step;          /* from one block's plane to the next's (attn_plane_step) */
    uint32_t blk, off;    /* position j = blk * block_size + off */
} kv_cursor;

static inline kv_cursor cursor_at(const attn_kv *kv, const uint8_t *plane, int j)
{
    return (kv_cursor){kv, plane, attn_plane_step(kv, plane), (uint32_t)j / kv->block_size, (uint32_t)j % kv->block_size};
}

static inline const uint8_t *cursor_row(const kv_cursor *c)
{
    return c->plane + (size_t)c->kv->blocks[c->blk] * c->step + (size_t)c->off * c->kv->row_bytes;
}

static inline void cursor_next(kv_cursor *c)
{
    if (++c->off == c->kv->block_size) {
        c->off = 0;
        c->blk++;
    }
}

/* The next n rows (row[0..n)) from the cursor, which moves past them: a
 * block's run at a time (one multiply a block, not a key). */
static inline void cursor_rows(kv_cursor *c, const uint8_t **row, int n)
{
    for (int k = 0; k < n;) {
        const uint8_t *r = cursor_row(c);
        const int left = (int)(c->kv->block_size - c->off), run = left < n - k ? left : n - k;
        for (int i = 0; i < run; i++) row[k + i] = r + (size_t)i * c->kv->row_bytes;
        k += run;
        if ((c->off += (uint32_t)run) == c->kv->block_size) {
            c->off = 0;
            c->blk++;
        }
    }
}

/* Software prefetch ahead of a sweep over the cache rows: bytes [lo, lo +
 * len) of each row (the heads the call reads), rows in position order up
 * to a bound. A block's rows are contiguous only within the block and
 * blocks sit anywhere in the pool, so the hardware prefetchers lose the
 * stream at every block (and 4 KiB page). */
#ifndef ATTN_PF_HINT
#define ATTN_PF_HINT _MM_HINT_T1 /* to L2 (measured a little better than T0) */
#endif
#ifndef ATTN_PF_BYTES
#define ATTN_PF_BYTES 8192 /* how far ahead, in bytes of the rows read, when rows share KV heads (GQA,
                              prefill: measured with spread issue: 4-32 KiB within 5%, 8 best) */
#endif
#ifndef ATTN_PF_BYTES_ALONE
#define ATTN_PF_BYTES_ALONE 32768 /* ... and with a row per head, where the sweep waits on the reads
                                     (faster than 8 KiB there: docs/speed.md) */
#endif

/* Keys to prefetch ahead for a call of n_rows rows over KV heads gmin..gmax
 * fetching bytes_per_key a position, within [lo, hi]. */
static inline int kv_pf_keys(int n_rows, int gmin, int gmax, size_t bytes_per_key, int lo, int hi)
{
    const size_t ahead = n_rows >= 2 * (gmax - gmin + 1) ? ATTN_PF_BYTES : ATTN_PF_BYTES_ALONE;
    const size_t k = ahead / bytes_per_key;
    return k < (size_t)lo ? lo : k > (size_t)hi ? hi : (int)k;
}

/* A plane is head-major when a block holds each head's slots in a run
 * (head_bytes > row_bytes: the pool's f16 values); else a row holds every
 * head side by side. Head-major planes are prefetched by vline_pf, rows by
 * kv_pf. */
static inline bool kv_head_major(const attn_kv *kv) { return kv->head_bytes > kv->row_bytes; }

/* Bytes of heads gmin..gmax at one position. */
static inline size_t kv_key_bytes(const attn_kv *kv, int gmin, int gmax)
{
    const size_t nh = (size_t)(gmax - gmin + 1);
    return nh * (kv_head_major(kv) ? kv->row_bytes : kv->head_bytes);
}

/* Prefetch of a rows-layout plane (see above): at each position the span
 * of heads gmin..gmax. */
typedef struct {
    kv_cursor c;
    int j, n;       /* next position to prefetch, positions to prefetch (0: none) */
    size_t lo, len; /* bytes [lo, lo + len) of a row */
} kv_pf;

/* A kv_pf over heads gmin..gmax of n positions (none for a head-major
 * plane: vline_pf's). */
static inline kv_pf kv_pf_at(const attn_kv *kv, const uint8_t *plane, int n, int gmin, int gmax)
{
    const size_t hb = kv->head_bytes;
    return (kv_pf){cursor_at(kv, plane, 0), 0, kv_head_major(kv) ? 0 : n, (size_t)gmin * hb,
                   (size_t)(gmax - gmin + 1) * hb};
}

/* The lines of bytes [p, p + len). */
static inline void pf_line_range(const uint8_t *p, size_t len)
{
    const uintptr_t a = (uintptr_t)p;
    for (uintptr_t l = a & ~(uintptr_t)63; l < a + len; l += 64) _mm_prefetch((const char *)l, ATTN_PF_HINT);
}

static inline void pf_until(kv_pf *p, int jend)
{
    if (jend > p->n) jend = p->n;
    for (; p->j < jend; p->j++, cursor_next(&p->c)) pf_line_range(cursor_row(&p->c) + p->lo, p->len);
}

/* A batch of rows to prefetch, collected from a kv_pf for one stretch of
 * work (a score group, a V tile) and issued a row or two at a time between
 * its keys or passes. Issued in one burst, a group's 32+ line prefetches
 * outran the L1's miss buffers and every prefetch past them stalled the
 * core until a buffer freed, so the memory time added to the compute
 * instead of hiding under it; spread out, the same work takes a fifth
 * less time (docs/speed.md). */
typedef struct {
    const uint8_t *a[ATTN_VB];
    size_t len;  /* bytes of each row from a[i] (kv_pf's) */
    int n, next; /* rows collected, rows issued */
} kv_pfb;

/* Moves the rows of p before position jend into b, up to cap rows in all
 * (none when b holds rows of another shape). */
static inline void pf_collect(kv_pf *p, int jend, kv_pfb *b, int cap)
{
    if (b->n > 0 && b->len != p->len) return;
    b->len = p->len;
    if (jend > p->n) jend = p->n;
    for (; p->j < jend && b->n < cap; p->j++, cursor_next(&p->c)) b->a[b->n++] = cursor_row(&p->c) + p->lo;
}

/* Issues the next m rows of b (none when b is NULL). */
static inline void pf_take(kv_pfb *b, int m)
{
    if (!b) return;
    for (; m > 0 && b->next < b->n; m--, b->next++) pf_line_range(b->a[b->next], b->len);
}

/* Prefetch of a head-major V plane (attn_kv.head_bytes > row_bytes: a
 * block holds each head's run of block_size rows): heads gmin..gmax of a
 * block are one contiguous range, so the sweep ahead is a walk over lines,
 * block after block, handed out a span at a time to the V tiles, which
 * issue one line per key (spread between the FMAs, as the scores' line
 * every 2 dims). Replaces for this layout kv_pf's walk of every position's
 * rows (a cursor step, a multiply and 2 x heads lines per key): that
 * bookkeeping took ~40% of the V pass in cache (perf, TinyLlama shape,
 * 1,024 keys). Invariant: see the top of this file. */
typedef struct {
    const attn_kv *kv;
    const uint8_t *plane;
    size_t lo, len;     /* bytes [lo, lo + len) of each block's plane */
    int nblk, goal;     /* blocks of the sweep; issue blocks before goal */
    int blk, line;      /* the next line: block blk (sweep order), its line-th line */
    const char *first;  /* block blk's first line (NULL: not computed yet) */
    int lines;          /* ... and its line count */
} vline_pf;

static inline vline_pf vline_at(const attn_kv *kv, const uint8_t *plane, int n, int gmin, int gmax)
{
    const int bs = (int)kv->block_size;
    return (vline_pf){kv, plane, (size_t)gmin * kv->head_bytes, (size_t)(gmax - gmin + 1) * kv->head_bytes,
                      (n + bs - 1) / bs, 0, 0, 0, NULL, 0};
}

/* Up to max lines of one block from the next, before block goal: *at and
 * the count (0: nothing left to issue). */
static inline int vline_span(vline_pf *p, int max, const char **at)
{
    if (p->blk >= p->goal || p->blk >= p->nblk || max <= 0) return 0;
    if (!p->first) {
        const uintptr_t a = (uintptr_t)(p->plane + (size_t)p->kv->blocks[p->blk] * attn_plane_step(p->kv, p->plane) + p->lo);
        const uintptr_t l0 = a & ~(uintptr_t)63, l1 = (a + p->len + 63) & ~(uintptr_t)63;
        p->first = (const char *)l0;
        p->lines = (int)((l1 - l0) / 64);
    }
    const int n = p->lines - p->line < max ? p->lines - p->line : max;
    *at = p->first + 64 * (size_t)p->line;
    if ((p->line += n) == p->lines) {
        p->blk++;
        p->line = 0;
        p->first = NULL;
    }
    return n;
}

/* Sets the goal to the blocks holding positions [0, jend): the V tiles
 * take spans up to there (vline_span). */
static inline void vline_aim(vline_pf *p, int jend)
{
    const int bs = (int)p->kv->block_size;
    p->goal = (jend + bs - 1) / bs;
}

/* vline_aim, then issues every line before the goal not issued yet. */
static inline void vline_until(vline_pf *p, int jend)
{
    vline_aim(p, jend);
    const char *at;
    for (int n; (n = vline_span(p, 1 << 20, &at)) > 0;)
        for (int i = 0; i < n; i++) _mm_prefetch(at + 64 * (size_t)i, ATTN_PF_HINT);
}

/* f16 key columns (attn_kv.k_cols): key groups a score call takes for nr
 * rows (more groups for fewer rows: independent FMA chains to cover the
 * FMA latency), and the dispatch of a score kernel SC(R, G) instantiated
 * with constant rows R (1..8) and groups G (cols_groups(R) at most). */
static inline int cols_groups(int nr) { return nr == 1 ? 4 : nr <= 3 ? 2 : 1; }

/* Key groups of width w (16 for AVX-512, 8 for AVX2) over the first nmax
 * keys: a group never crosses a block, so a block holds ceil(bs / w) of
 * them, its last one short when w does not divide bs. */
static inline int cols_n_groups(const attn_kv *kv, int w, int nmax)
{
    const int bs = (int)kv->block_size;
    return (nmax + bs - 1) / bs * ((bs + w - 1) / w);
}

/* Group gi of width w: its key count (0 when it starts at or past nmax),
 * the position of its first key (*j0) and that key's slot in its block's
 * K plane, head 0 (*col). */
static inline int cols_group(const attn_kv *kv, int gi, int w, int nmax, const uint16_t **col, int *j0)
{
    const int bs = (int)kv->block_size, gpb = (bs + w - 1) / w, b = gi / gpb, k = gi % gpb * w;
    *j0 = b * bs + k;
    if (*j0 >= nmax) return 0;
    *col = (const uint16_t *)(kv->k_base + (size_t)kv->blocks[b] * kv->block_bytes) + k;
    const int n = bs - k < w ? bs - k : w;
    return nmax - *j0 < n ? nmax - *j0 : n;
}

#define ATTN_COLS_DISPATCH(nr, ng, SC) \
    switch ((nr) * 8 + (ng)) {         \
    case 8 + 1: SC(1, 1); break;       \
    case 8 + 2: SC(1, 2); break;       \
    case 8 + 3: SC(1, 3); break;       \
    case 8 + 4: SC(1, 4); break;       \
    case 16 + 1: SC(2, 1); break;      \
    case 16 + 2: SC(2, 2); break;      \
    case 24 + 1: SC(3, 1); break;      \
    case 24 + 2: SC(3, 2); break;      \
    case 32 + 1: SC(4, 1); break;      \
    case 40 + 1: SC(5, 1); break;      \
    case 48 + 1: SC(6, 1); break;      \
    case 56 + 1: SC(7, 1); break;      \
    default: SC(8, 1); break;          \
    }

/* End of the run of rows from r0 that read the same KV head. */
static inline int segment_end(const attn_row *rows, int n_rows, int r0)
{
    int r1 = r0 + 1;
    while (r1 < n_rows && rows[r1].g == rows[r0].g) r1++;
    return r1;
}

/* Largest n_ctx of rows [r0, r1). */
static inline int segment_nmax(const attn_row *rows, int r0, int r1)
{
    int n = 0;
    for (int r = r0; r < r1; r++) n = rows[r].n_ctx > n ? rows[r].n_ctx : n;
    return n;
}

#endif
