/* attention_chunks.c - long rows in chunks of keys, merged by log-sum-exp;
 * see attention_chunks.h. */
#include "kernels/attention_chunks.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#ifndef ATTN_CHUNK_KEYS
#define ATTN_CHUNK_KEYS 2048u /* a build may set it to measure others (docs/long-context.md) */
#endif
#define CHUNK_KEYS ATTN_CHUNK_KEYS

uint32_t attn_chunk_keys(uint32_t bs)
{
    assert(bs >= 1);
    return (CHUNK_KEYS + bs - 1) / bs * bs;
}

uint32_t attn_chunk_call_max(uint32_t bs) { return 2 * attn_chunk_keys(bs); }

/* part[ATTN_ROWS_CAP][hd] partial outputs, plse[ATTN_ROWS_CAP] their
 * log-sum-exps, run[ATTN_TILES_CAP][ATTN_ROWS_CAP] the running ones. */
size_t attn_chunks_work_floats(int head_dim)
{
    return (size_t)ATTN_ROWS_CAP * ((size_t)head_dim + 1) + (size_t)ATTN_TILES_CAP * ATTN_ROWS_CAP;
}

/* A row's keys as pieces (see attention_chunks.h): it reads [k0, n_ctx),
 * k0 its window's first block. Split mode (a reader with a sealed view):
 * [k0, own) in chunks through the sealed view, then its own block [own,
 * n_ctx) through the reader. Else one call if the span fits a call, or
 * [k0, n_ctx) in chunks. */
typedef struct {
    uint32_t k0, own; /* first key read; start of the keys read by the own-block pass (n_ctx: none) */
    uint32_t c0, c1;  /* its chunks c0..c1 over [k0, own) (c0 > c1: none) */
    bool whole;       /* one plain call */
} row_plan;

static row_plan plan_row(const attn_kv *kv, const attn_row *r)
{
    const uint32_t bs = kv->block_size, ck = attn_chunk_keys(bs), n = (uint32_t)r->n_ctx;
    const bool split = kv->reader && kv->sealed;
    row_plan p = {(uint32_t)r->lo / bs * bs, split ? (n - 1) / bs * bs : n, 1, 0, false};
    p.whole = !split && n - p.k0 <= attn_chunk_call_max(bs);
    if (!p.whole && p.own > p.k0) {
        p.c0 = p.k0 / ck;
        p.c1 = (p.own - 1) / ck;
    }
    return p;
}

/* The rows of a tile that take one call, in one call per first block
 * (rows of one tile share a window, so one or two calls): over a view
 * starting at that block. */
static void run_short(const attn_kv *kv, const attn_row *rows, int n, float scale, float *scratch, size_t sf)
{
    bool done[ATTN_ROWS_CAP] = {false};
    for (int i = 0; i < n; i++) {
        const row_plan pi = plan_row(kv, &rows[i]);
        if (done[i] || !pi.whole) continue;
        attn_row sub[ATTN_ROWS_CAP];
        int m = 0;
        for (int j = i; j < n; j++) {
            const row_plan pj = plan_row(kv, &rows[j]);
            if (done[j] || !pj.whole || pj.k0 != pi.k0) continue;
            done[j] = true;
            sub[m] = rows[j];
            sub[m].n_ctx -= (int)pi.k0;
            sub[m++].lo -= (int)pi.k0;
        }
        const attn_kv v = attn_kv_chunk(kv, pi.k0 / kv->block_size, true);
        attn_paged(&v, sub, m, scale, scratch, sf);
    }
}

/* Folds a piece's result (o, l) into a row's running one (out, *L; -inf:
 * none yet). */
static void fold(float *out, float *L, const float *o, float l, int hd)
{
    if (*L == -INFINITY) {
        memcpy(out, o, sizeof(float) * (size_t)hd);
        *L = l;
        return;
    }
    const float mx = *L > l ? *L : l, a = expf(*L - mx), b = expf(l - mx), inv = 1.0f / (a + b);
    for (int i = 0; i < hd; i++) out[i] = (out[i] * a + o[i] * b) * inv;
    *L = mx + logf(a + b);
}

/* One call over the piece [ks, ke) of each selected row (sel[k] = row
 * index, ks/ke per row, all in view v that starts at key base), folded
 * into the running results. */
static void run_piece(const attn_kv *v, uint32_t base, const attn_row *rows, const int *sel, const uint32_t *ke,
                      int m, float scale, float *scratch, size_t sf, float *part, float *plse, float *run)
{
    if (!m) return;
    const int hd = v->head_dim;
    attn_row sub[ATTN_ROWS_CAP] = {{0}};
    for (int k = 0; k < m; k++) {
        const attn_row *r = &rows[sel[k]];
        const uint32_t lo = (uint32_t)r->lo > base ? (uint32_t)r->lo - base : 0;
        sub[k] = (attn_row){r->q, part + (size_t)k * hd, (int)(ke[k] - base), r->g, (int)lo};
    }
    attn_kv c = *v;
    c.lse = plse;
    attn_paged(&c, sub, m, scale, scratch, sf);
    for (int k = 0; k < m; k++) fold(rows[sel[k]].out, &run[sel[k]], sub[k].out, plse[k], hd);
}

/* Chunk c of the chunked rows of one tile: [c ck, (c + 1) ck) cut at each
 * row's own start. Without a split, one call for the rows whose own block
 * lies in it and one for those it is past to (a reader reads an own block
 * from its stage); with one, the sealed view (every block a past one). */
static void run_chunk(const attn_kv *kv, const attn_row *rows, int n, uint32_t c, float scale, float *scratch,
                      size_t sf, float *part, float *plse, float *run)
{
    const uint32_t bs = kv->block_size, ck = attn_chunk_keys(bs), cs = c * ck;
    const bool split = kv->reader && kv->sealed;
    for (int last = 0; last < 2; last++) {
        int sel[ATTN_ROWS_CAP], m = 0;
        uint32_t ke[ATTN_ROWS_CAP];
        for (int i = 0; i < n; i++) {
            const row_plan p = plan_row(kv, &rows[i]);
            if (p.whole || c < p.c0 || c > p.c1) continue;
            const bool own_here = !split && c == p.c1;
            if (own_here != (last == 1)) continue;
            ke[m] = p.own < cs + ck ? p.own : cs + ck;
            sel[m++] = i;
        }
        const attn_kv v = split ? attn_kv_chunk(kv->sealed, cs / bs, false) : attn_kv_chunk(kv, cs / bs, last == 1);
        run_piece(&v, cs, rows, sel, ke, m, scale, scratch, sf, part, plse, run);
    }
}

/* Split mode's last pass: each row's own block through the reader, one
 * call per own block. */
static void run_own(const attn_kv *kv, const attn_row *rows, int n, float scale, float *scratch, size_t sf,
                    float *part, float *plse, float *run)
{
    bool done[ATTN_ROWS_CAP] = {false};
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        const uint32_t own = plan_row(kv, &rows[i]).own;
        int sel[ATTN_ROWS_CAP], m = 0;
        uint32_t ke[ATTN_ROWS_CAP];
        for (int j = i; j < n; j++)
            if (!done[j] && plan_row(kv, &rows[j]).own == own) {
                done[j] = true;
                ke[m] = (uint32_t)rows[j].n_ctx;
                sel[m++] = j;
            }
        const attn_kv v = attn_kv_chunk(kv, own / kv->block_size, true);
        run_piece(&v, own, rows, sel, ke, m, scale, scratch, sf, part, plse, run);
    }
}

void attn_chunks_run(const attn_kv *kv, const attn_row *const *tiles, const int *n_rows, int n_tiles, float scale,
                     float *scratch, size_t scratch_floats, float *work)
{
    assert(n_tiles >= 1 && n_tiles <= ATTN_TILES_CAP);
    assert(!kv->sealed || (kv->sealed->block_size == kv->block_size && !kv->sealed->reader));
    const int hd = kv->head_dim;
    float *part = work, *plse = part + (size_t)ATTN_ROWS_CAP * hd, *run = plse + ATTN_ROWS_CAP;
    uint32_t cmin = UINT32_MAX, cmax = 0;
    for (int i = 0; i < ATTN_TILES_CAP * ATTN_ROWS_CAP; i++) run[i] = -INFINITY;
    for (int t = 0; t < n_tiles; t++) {
        assert(n_rows[t] >= 1 && n_rows[t] <= ATTN_ROWS_CAP);
        run_short(kv, tiles[t], n_rows[t], scale, scratch, scratch_floats);
        for (int i = 0; i < n_rows[t]; i++) {
            const row_plan p = plan_row(kv, &tiles[t][i]);
            if (p.whole || p.c0 > p.c1) continue;
            cmin = p.c0 < cmin ? p.c0 : cmin;
            cmax = p.c1 > cmax ? p.c1 : cmax;
        }
    }
    for (uint32_t c = cmin; cmin != UINT32_MAX && c <= cmax; c++)
        for (int t = 0; t < n_tiles; t++)
            run_chunk(kv, tiles[t], n_rows[t], c, scale, scratch, scratch_floats, part, plse,
                      run + (size_t)t * ATTN_ROWS_CAP);
    if (kv->reader && kv->sealed)
        for (int t = 0; t < n_tiles; t++)
            run_own(kv, tiles[t], n_rows[t], scale, scratch, scratch_floats, part, plse, run + (size_t)t * ATTN_ROWS_CAP);
}

/* ------------------------------------------- flash-decoding across threads */

int attn_chunks_n_pieces(const attn_kv *kv, const attn_row *rows, int n, uint32_t *c0)
{
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int i = 0; i < n; i++) {
        const row_plan p = plan_row(kv, &rows[i]);
        if (p.whole) return 0;
        if (p.c0 > p.c1) continue;
        lo = p.c0 < lo ? p.c0 : lo;
        hi = p.c1 > hi ? p.c1 : hi;
    }
    const int chunks = lo == UINT32_MAX ? 0 : (int)(hi - lo + 1);
    *c0 = lo == UINT32_MAX ? 0 : lo;
    return chunks + (kv->reader && kv->sealed ? 1 : 0);
}

size_t attn_chunks_piece_floats(int n, int head_dim) { return (size_t)n * ((size_t)head_dim + 1); }

void attn_chunks_piece(const attn_kv *kv, const attn_row *rows, int n, int p, uint32_t c0, float scale,
                       float *scratch, size_t scratch_floats, float *work, float *parts)
{
    assert(n >= 1 && n <= ATTN_ROWS_CAP);
    const int hd = kv->head_dim;
    float *part = work, *plse = part + (size_t)ATTN_ROWS_CAP * hd, *run = plse + ATTN_ROWS_CAP;
    attn_row to[ATTN_ROWS_CAP]; /* the rows, each writing into its slot of parts */
    for (int i = 0; i < n; i++) {
        to[i] = rows[i];
        to[i].out = parts + (size_t)i * (hd + 1);
        run[i] = -INFINITY;
    }
    uint32_t first;
    const int np = attn_chunks_n_pieces(kv, rows, n, &first);
    assert(np > 0 && p < np && first == c0);
    (void)np, (void)first;
    if (kv->reader && kv->sealed && p == np - 1) run_own(kv, to, n, scale, scratch, scratch_floats, part, plse, run);
    else run_chunk(kv, to, n, c0 + (uint32_t)p, scale, scratch, scratch_floats, part, plse, run);
    for (int i = 0; i < n; i++) parts[(size_t)i * (hd + 1) + hd] = run[i];
}

void attn_chunks_fold(const attn_row *rows, int n, int head_dim, const float *parts, int n_pieces)
{
    const size_t stride = attn_chunks_piece_floats(n, head_dim);
    for (int i = 0; i < n; i++) {
        float L = -INFINITY;
        for (int p = 0; p < n_pieces; p++) {
            const float *o = parts + (size_t)p * stride + (size_t)i * (head_dim + 1);
            if (o[head_dim] != -INFINITY) fold(rows[i].out, &L, o, o[head_dim], head_dim);
        }
    }
}
