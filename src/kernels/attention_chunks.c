/* attention_chunks.c - long rows in chunks of keys, merged by log-sum-exp;
 * see attention_chunks.h. */
#include "kernels/attention_chunks.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#define CHUNK_KEYS 2048u

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

/* Keys a row reads from the first block of its window on. */
static inline uint32_t row_span(const attn_row *r, uint32_t bs)
{
    return (uint32_t)r->n_ctx - (uint32_t)r->lo / bs * bs;
}

static inline bool row_chunked(const attn_row *r, uint32_t bs) { return row_span(r, bs) > attn_chunk_call_max(bs); }

/* The rows of a tile that are not chunked, in one call per first block
 * (rows of one tile share a window, so one or two calls): over a view
 * starting at that block. */
static void run_short(const attn_kv *kv, const attn_row *rows, int n, float scale, float *scratch, size_t sf)
{
    const uint32_t bs = kv->block_size;
    bool done[ATTN_ROWS_CAP] = {false};
    for (int i = 0; i < n; i++) {
        if (done[i] || row_chunked(&rows[i], bs)) continue;
        const uint32_t b0 = (uint32_t)rows[i].lo / bs, k0 = b0 * bs;
        attn_row sub[ATTN_ROWS_CAP];
        int m = 0;
        for (int j = i; j < n; j++) {
            if (done[j] || row_chunked(&rows[j], bs) || (uint32_t)rows[j].lo / bs != b0) continue;
            done[j] = true;
            sub[m] = rows[j];
            sub[m].n_ctx -= (int)k0;
            sub[m++].lo -= (int)k0;
        }
        const attn_kv v = attn_kv_chunk(kv, b0, true);
        attn_paged(&v, sub, m, scale, scratch, sf);
    }
}

/* Folds a chunk's result (o, l) into a row's running one (out, *L). */
static void fold(float *out, float *L, const float *o, float l, int hd)
{
    const float mx = *L > l ? *L : l, a = expf(*L - mx), b = expf(l - mx), inv = 1.0f / (a + b);
    for (int i = 0; i < hd; i++) out[i] = (out[i] * a + o[i] * b) * inv;
    *L = mx + logf(a + b);
}

/* Chunk c of the chunked rows of one tile: one call for the rows whose own
 * block lies in it and one for those it is past to (a reader reads an own
 * block from its stage), each folded into the running results. */
static void run_chunk(const attn_kv *kv, const attn_row *rows, int n, uint32_t c, float scale, float *scratch,
                      size_t sf, float *part, float *plse, float *run)
{
    const uint32_t bs = kv->block_size, ck = attn_chunk_keys(bs), cs = c * ck;
    const int hd = kv->head_dim;
    for (int last = 0; last < 2; last++) {
        attn_row sub[ATTN_ROWS_CAP];
        int idx[ATTN_ROWS_CAP], m = 0;
        for (int i = 0; i < n; i++) {
            const attn_row *r = &rows[i];
            if (!row_chunked(r, bs)) continue;
            const uint32_t c0 = (uint32_t)r->lo / ck, c1 = (uint32_t)(r->n_ctx - 1) / ck;
            if (c < c0 || c > c1 || (c == c1) != (last == 1)) continue;
            const uint32_t end = (uint32_t)r->n_ctx < cs + ck ? (uint32_t)r->n_ctx : cs + ck;
            const uint32_t lo = (uint32_t)r->lo > cs ? (uint32_t)r->lo - cs : 0;
            sub[m] = (attn_row){r->q, part + (size_t)m * hd, (int)(end - cs), r->g, (int)lo};
            idx[m++] = i;
        }
        if (!m) continue;
        attn_kv v = attn_kv_chunk(kv, cs / bs, last == 1);
        v.lse = plse;
        attn_paged(&v, sub, m, scale, scratch, sf);
        for (int k = 0; k < m; k++) {
            const attn_row *r = &rows[idx[k]];
            if (c == (uint32_t)r->lo / ck) { /* its first chunk */
                memcpy(r->out, sub[k].out, sizeof(float) * (size_t)hd);
                run[idx[k]] = plse[k];
            } else {
                fold(r->out, &run[idx[k]], sub[k].out, plse[k], hd);
            }
        }
    }
}

void attn_chunks_run(const attn_kv *kv, const attn_row *const *tiles, const int *n_rows, int n_tiles, float scale,
                     float *scratch, size_t scratch_floats, float *work)
{
    assert(n_tiles >= 1 && n_tiles <= ATTN_TILES_CAP);
    const uint32_t bs = kv->block_size, ck = attn_chunk_keys(bs);
    const int hd = kv->head_dim;
    float *part = work, *plse = part + (size_t)ATTN_ROWS_CAP * hd, *run = plse + ATTN_ROWS_CAP;
    uint32_t cmin = UINT32_MAX, cmax = 0;
    for (int t = 0; t < n_tiles; t++) {
        assert(n_rows[t] >= 1 && n_rows[t] <= ATTN_ROWS_CAP);
        run_short(kv, tiles[t], n_rows[t], scale, scratch, scratch_floats);
        for (int i = 0; i < n_rows[t]; i++) {
            const attn_row *r = &tiles[t][i];
            if (!row_chunked(r, bs)) continue;
            const uint32_t c0 = (uint32_t)r->lo / ck, c1 = (uint32_t)(r->n_ctx - 1) / ck;
            cmin = c0 < cmin ? c0 : cmin;
            cmax = c1 > cmax ? c1 : cmax;
        }
    }
    for (uint32_t c = cmin; cmin != UINT32_MAX && c <= cmax; c++)
        for (int t = 0; t < n_tiles; t++)
            run_chunk(kv, tiles[t], n_rows[t], c, scale, scratch, scratch_floats, part, plse,
                      run + (size_t)t * ATTN_ROWS_CAP);
}
