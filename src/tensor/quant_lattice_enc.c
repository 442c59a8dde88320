/* quant_lattice_enc.c - quantization into the lattice i-quants (IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; layouts in blocks.h).
 *
 * Every format decodes to x = D * sc * q (quant_lattice_unpack): D the
 * super-block's f16 scale times a power of two, sc = 2s + 1 a scale per
 * 16 or 32 values, q a codebook entry's levels with signs (IQ1: 8g + delta,
 * the entry signed). So one search serves all seven, driven by a table of
 * the format's shape, and a packer per format writes the bits.
 *
 * The search, per super-block of 256:
 *   signs     fixed first: a byte per 8 values, or 7 bits whose parity
 *             gives the 8th (an odd count of minus signs flips the value
 *             of least weight, whose target becomes -|x|); IQ1 has none;
 *   scales    per scale group, candidate scales a around max|x| / top
 *             level; at each, every codebook group takes its best entry,
 *             then a is refit by least squares; the fit of least weighted
 *             error wins;
 *   D         the largest a over the codes' top (2 * 15 + 1, or 15 for IQ1),
 *             rounded to f16; each group's code s then the nearest of
 *             (a / D - 1) / 2 and its two neighbours, entries re-picked at
 *             the coded scale.
 * The best entry of a group: its targets rounded level by level give a
 * cell; the entries within a small distance of every cell are listed once
 * per format (lazily, ~0.1 s for the 2048-entry IQ1 codebook), and the
 * listed one of least weighted error is taken.
 * Weights are x^2 + sigma^2 (sigma^2 the super-block's mean square), or
 * with an importance matrix (a mean square activation per input column,
 * imatrix.h) that times sqrt(sigma^2 + x^2), as llama.cpp weighs them.
 */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "tensor/half.h"
#include "tensor/quant.h"
#include "tensor/quant_grids.h"

enum { SIGN_BYTE, SIGN_PARITY, SIGN_NONE };
enum { DELTA_NONE, DELTA_PER_SCALE, DELTA_PER_GROUP };

#define LAT_MAX_G 8
#define LAT_SLACK 2   /* candidates: entries within the cell's nearest distance + this (squared level steps) */
#define LAT_MAX_CAND 16

typedef struct {
    uint32_t type;
    int G, n_entries, L;        /* values an entry, entries, levels a value */
    const uint16_t *grid;       /* compact entries (quant_grids.h) */
    int bits;                   /* bits a level in the compact form */
    float lv[8];                /* the levels in q units */
    int sgroup, smax;           /* values a scale code, largest code */
    int signs, delta;
    float pow2;                 /* D = f16 d * pow2 */
} lat_fmt;

static const lat_fmt FMTS[] = {
    {DT_IQ2_XXS, 8, 256, 3, quant_grid_iq2xxs, 2, {8, 25, 43}, 32, 15, SIGN_PARITY, DELTA_NONE, 0.125f},
    {DT_IQ2_XS, 8, 512, 3, quant_grid_iq2xs, 2, {8, 25, 43}, 16, 15, SIGN_PARITY, DELTA_NONE, 0.125f},
    {DT_IQ2_S, 8, 1024, 3, quant_grid_iq2s, 2, {8, 25, 43}, 16, 15, SIGN_BYTE, DELTA_NONE, 0.125f},
    {DT_IQ3_XXS, 4, 256, 8, quant_grid_iq3xxs, 3, {4, 12, 20, 28, 36, 44, 52, 62}, 32, 15, SIGN_PARITY, DELTA_NONE, 0.25f},
    {DT_IQ3_S, 4, 512, 8, quant_grid_iq3s, 3, {1, 3, 5, 7, 9, 11, 13, 15}, 32, 15, SIGN_BYTE, DELTA_NONE, 1.f},
    {DT_IQ1_S, 8, 2048, 3, quant_grid_iq1s, 2, {-8, 0, 8}, 32, 7, SIGN_NONE, DELTA_PER_SCALE, 0.125f},
    {DT_IQ1_M, 8, 2048, 3, quant_grid_iq1s, 2, {-8, 0, 8}, 16, 7, SIGN_NONE, DELTA_PER_GROUP, 0.125f},
};
#define N_FMTS (sizeof FMTS / sizeof FMTS[0])

/* A format's entries as levels in q units, and per cell the entries worth
 * trying. */
typedef struct {
    float (*q)[LAT_MAX_G];
    uint32_t *start; /* n_cells + 1 */
    uint16_t *cand;
    int n_cells;
} lat_tables;

static lat_tables TABLES[N_FMTS];
/* Built lazily, each format on first use, under one lock; the flag is
 * read without it once set. */
static pthread_mutex_t TABLES_LOCK = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool TABLES_BUILT[N_FMTS];

static int level_of(const lat_fmt *f, uint16_t e, int j) { return (e >> (f->bits * j)) & ((1 << f->bits) - 1); }

static void tables_build(size_t fi)
{
    const lat_fmt *f = &FMTS[fi];
    lat_tables *t = &TABLES[fi];
    int n_cells = 1;
    for (int j = 0; j < f->G; j++) n_cells *= f->L;
    t->n_cells = n_cells;
    t->q = malloc(sizeof *t->q * (size_t)f->n_entries);
    t->start = malloc(sizeof *t->start * (size_t)(n_cells + 1));
    t->cand = malloc(sizeof *t->cand * (size_t)n_cells * LAT_MAX_CAND);
    int *dist = malloc(sizeof *dist * (size_t)f->n_entries);
    if (!t->q || !t->start || !t->cand || !dist) abort(); /* a few hundred KB once; nothing to recover to */
    for (int e = 0; e < f->n_entries; e++)
        for (int j = 0; j < f->G; j++) t->q[e][j] = f->lv[level_of(f, f->grid[e], j)];
    uint32_t used = 0;
    for (int c = 0; c < n_cells; c++) {
        int lc[LAT_MAX_G], dmin = 1 << 30;
        for (int j = 0, r = c; j < f->G; j++, r /= f->L) lc[j] = r % f->L;
        for (int e = 0; e < f->n_entries; e++) {
            int d = 0;
            for (int j = 0; j < f->G; j++) {
                const int k = level_of(f, f->grid[e], j) - lc[j];
                d += k * k;
            }
            dist[e] = d;
            if (d < dmin) dmin = d;
        }
        t->start[c] = used;
        /* nearest first, up to LAT_MAX_CAND */
        for (int d = dmin; d <= dmin + LAT_SLACK; d++)
            for (int e = 0; e < f->n_entries && used - t->start[c] < LAT_MAX_CAND; e++)
                if (dist[e] == d) t->cand[used++] = (uint16_t)e;
    }
    t->start[n_cells] = used;
    free(dist);
}

static const lat_tables *tables_of(size_t fi)
{
    if (!atomic_load_explicit(&TABLES_BUILT[fi], memory_order_acquire)) {
        pthread_mutex_lock(&TABLES_LOCK);
        if (!atomic_load_explicit(&TABLES_BUILT[fi], memory_order_relaxed)) {
            tables_build(fi);
            atomic_store_explicit(&TABLES_BUILT[fi], true, memory_order_release);
        }
        pthread_mutex_unlock(&TABLES_LOCK);
    }
    return &TABLES[fi];
}

/* ------------------------------------------------------------ the search */

typedef struct {
    const lat_fmt *f;
    const lat_tables *t;
} lat_ctx;

static int nearest_level(const lat_fmt *f, float v)
{
    int best = 0;
    float bd = fabsf(v - f->lv[0]);
    for (int i = 1; i < f->L; i++) {
        const float d = fabsf(v - f->lv[i]);
        if (d < bd) bd = d, best = i;
    }
    return best;
}

/* The entry for the G targets xp (weights w) at scale a with offset delta
 * (IQ1: +-1, else 0); its weighted error in *err. */
static int best_entry(const lat_ctx *c, const float *xp, const float *w, float a, float delta, float *err)
{
    const lat_fmt *f = c->f;
    int cell = 0;
    for (int j = 0, mul = 1; j < f->G; j++, mul *= f->L) cell += nearest_level(f, xp[j] / a - delta) * mul;
    int best = c->t->cand[c->t->start[cell]];
    float be = INFINITY;
    for (uint32_t k = c->t->start[cell]; k < c->t->start[cell + 1]; k++) {
        const float *q = c->t->q[c->t->cand[k]];
        float e = 0;
        for (int j = 0; j < f->G; j++) {
            const float r = xp[j] - a * (q[j] + delta);
            e += w[j] * r * r;
        }
        if (e < be) be = e, best = c->t->cand[k];
    }
    *err = be;
    return best;
}

/* A scale group's choice: an entry and a delta (+-1 or 0) per codebook group. */
typedef struct {
    int idx[32 / 4];
    int8_t neg[32 / 4]; /* delta -1 */
} lat_pick;

/* The first n_groups picks of src into dst (the rest of src is unset). */
static void pick_copy(lat_pick *dst, const lat_pick *src, int n_groups)
{
    for (int g = 0; g < n_groups; g++) dst->idx[g] = src->idx[g], dst->neg[g] = src->neg[g];
}

/* Entries for the n targets at scale a; the weighted error, and the sums
 * of the least-squares refit (a = sqx / sq2). delta_fixed: IQ1_S's one
 * delta for the group (+-1), else ignored. */
static float pick_at(const lat_ctx *c, const float *xp, const float *w, int n, float a, float delta_fixed, lat_pick *p,
                     float *sqx, float *sq2)
{
    const lat_fmt *f = c->f;
    float err = 0, qx = 0, q2 = 0;
    for (int g = 0; g < n / f->G; g++) {
        const float *x = xp + g * f->G, *wg = w + g * f->G;
        float e, delta = f->delta == DELTA_PER_SCALE ? delta_fixed : f->delta == DELTA_PER_GROUP ? 1.f : 0.f;
        int idx = best_entry(c, x, wg, a, delta, &e);
        if (f->delta == DELTA_PER_GROUP) { /* each group its own sign of delta */
            float e2;
            const int i2 = best_entry(c, x, wg, a, -1, &e2);
            if (e2 < e) idx = i2, e = e2, delta = -1;
        }
        p->idx[g] = idx;
        p->neg[g] = delta < 0;
        err += e;
        const float *q = c->t->q[idx];
        for (int j = 0; j < f->G; j++) {
            const float qq = q[j] + delta;
            qx += wg[j] * x[j] * qq;
            q2 += wg[j] * qq * qq;
        }
    }
    *sqx = qx, *sq2 = q2;
    return err;
}

/* The best (refit) scale of a group of n targets, its picks in *best. */
static float fit_group(const lat_ctx *c, const float *xp, const float *w, int n, lat_pick *best)
{
    const lat_fmt *f = c->f;
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(xp[i]));
    const float top = f->lv[f->L - 1] + (f->delta != DELTA_NONE ? 1 : 0);
    float best_a = 0, best_err = INFINITY;
    memset(best, 0, sizeof *best);
    if (amax == 0) return 0;
    const int n_delta = f->delta == DELTA_PER_SCALE ? 2 : 1;
    for (int di = 0; di < n_delta; di++) {
        const float delta = di ? -1.f : 1.f;
        for (int k = -4; k <= 4; k++) {
            const float a0 = amax / (top * (1.f + 0.08f * (float)k));
            lat_pick p;
            float sqx, sq2;
            pick_at(c, xp, w, n, a0, delta, &p, &sqx, &sq2);
            if (sq2 <= 0 || sqx <= 0) continue;
            const float a = sqx / sq2;
            /* the error at the refit scale, entries kept */
            float err = 0;
            for (int g = 0; g < n / f->G; g++) {
                const float *q = c->t->q[p.idx[g]];
                const float dl = f->delta == DELTA_NONE ? 0 : p.neg[g] ? -1.f : 1.f;
                for (int j = 0; j < f->G; j++) {
                    const float r = xp[g * f->G + j] - a * (q[j] + dl);
                    err += w[g * f->G + j] * r * r;
                }
            }
            if (err < best_err) best_err = err, best_a = a, pick_copy(best, &p, n / f->G);
        }
    }
    return best_a;
}

/* Targets of 8 values under the format's sign rule: xp (what the levels
 * approximate) and the sign byte (bit j: value j negative). */
static uint8_t signs_of(const lat_fmt *f, const float *x, const float *w, float *xp)
{
    if (f->signs == SIGN_NONE) {
        memcpy(xp, x, 8 * sizeof *xp);
        return 0;
    }
    uint8_t s = 0;
    for (int j = 0; j < 8; j++) {
        xp[j] = fabsf(x[j]);
        if (x[j] < 0) s |= (uint8_t)(1u << j);
    }
    if (f->signs == SIGN_PARITY && __builtin_parity(s)) {
        int jmin = 0;
        for (int j = 1; j < 8; j++)
            if (w[j] * x[j] * x[j] < w[jmin] * x[jmin] * x[jmin]) jmin = j;
        s ^= (uint8_t)(1u << jmin);
        xp[jmin] = -xp[jmin];
    }
    return s;
}

/* What a super-block came to, for the packers. */
typedef struct {
    float d;                  /* the f16 d's value */
    uint16_t d16;
    uint8_t signs[QK_K / 8];  /* a byte per 8 values (even parity where the format has it) */
    uint8_t s[QK_K / 16];     /* scale codes per scale group */
    lat_pick pick[QK_K / 16]; /* per scale group */
} lat_block;

static void quantize_block(const lat_ctx *c, const float *x, const float *qw, lat_block *b)
{
    const lat_fmt *f = c->f;
    const int n_sg = QK_K / f->sgroup, per_sg = f->sgroup / f->G;
    float w[QK_K], xp[QK_K], a[QK_K / 16];
    float sigma2 = 0;
    for (int i = 0; i < QK_K; i++) sigma2 += x[i] * x[i];
    sigma2 /= QK_K;
    for (int i = 0; i < QK_K; i++) w[i] = qw ? qw[i] * sqrtf(sigma2 + x[i] * x[i]) : x[i] * x[i] + sigma2;
    for (int k = 0; k < QK_K / 8; k++) b->signs[k] = signs_of(f, x + 8 * k, w + 8 * k, xp + 8 * k);
    float amax = 0;
    for (int g = 0; g < n_sg; g++) {
        a[g] = fit_group(c, xp + g * f->sgroup, w + g * f->sgroup, f->sgroup, &b->pick[g]);
        amax = fmaxf(amax, a[g]);
    }
    memset(b->s, 0, sizeof b->s);
    memset(b->pick, 0, sizeof b->pick); /* a group whose every fit is NaN keeps entry 0 */
    b->d16 = f32_to_f16(amax / (float)(2 * f->smax + 1) / f->pow2);
    b->d = f16_to_f32(b->d16);
    const float D = b->d * f->pow2;
    if (!(D > 0) || !isfinite(D)) { /* all zero (or not finite): d = 0 decodes zeros whatever the codes */
        b->d16 = 0, b->d = 0;
        return;
    }
    for (int g = 0; g < n_sg; g++) {
        const float *xg = xp + g * f->sgroup, *wg = w + g * f->sgroup;
        int s0 = (int)lrintf((a[g] / D - 1) / 2);
        s0 = s0 < 0 ? 0 : s0 > f->smax ? f->smax : s0;
        float best_err = INFINITY;
        for (int s = s0 - 1; s <= s0 + 1; s++) {
            if (s < 0 || s > f->smax) continue;
            const float as = D * (float)(2 * s + 1);
            const int n_delta = f->delta == DELTA_PER_SCALE ? 2 : 1;
            for (int di = 0; di < n_delta; di++) {
                lat_pick p;
                float sqx, sq2;
                const float err = pick_at(c, xg, wg, f->sgroup, as, di ? -1.f : 1.f, &p, &sqx, &sq2);
                if (err < best_err) best_err = err, b->s[g] = (uint8_t)s, pick_copy(&b->pick[g], &p, per_sg);
            }
        }
    }
}

/* ------------------------------------------------------------ the packers */

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* The idx of codebook group k (of G values) of the super-block. */
static int idx_at(const lat_fmt *f, const lat_block *b, int k)
{
    const int per_sg = f->sgroup / f->G;
    return b->pick[k / per_sg].idx[k % per_sg];
}

static bool neg_at(const lat_fmt *f, const lat_block *b, int k)
{
    const int per_sg = f->sgroup / f->G;
    return b->pick[k / per_sg].neg[k % per_sg];
}

static void pack(const lat_fmt *f, const lat_block *b, void *dst)
{
    switch (f->type) {
    case DT_IQ2_XXS: {
        block_iq2_xxs *y = dst;
        y->d = b->d16;
        uint8_t *q = (uint8_t *)y->qs;
        for (int s = 0; s < 8; s++) {
            uint32_t sg = (uint32_t)b->s[s] << 28;
            for (int l = 0; l < 4; l++) {
                q[8 * s + l] = (uint8_t)idx_at(f, b, 4 * s + l);
                sg |= (uint32_t)(b->signs[4 * s + l] & 127) << (7 * l);
            }
            put_u32(q + 8 * s + 4, sg);
        }
        break;
    }
    case DT_IQ2_XS: {
        block_iq2_xs *y = dst;
        y->d = b->d16;
        for (int k = 0; k < 32; k++) y->qs[k] = (uint16_t)(idx_at(f, b, k) | (b->signs[k] & 127) << 9);
        for (int s = 0; s < 8; s++) y->scales[s] = (uint8_t)(b->s[2 * s] | b->s[2 * s + 1] << 4);
        break;
    }
    case DT_IQ2_S: {
        block_iq2_s *y = dst;
        y->d = b->d16;
        memset(y->qh, 0, sizeof y->qh);
        for (int k = 0; k < 32; k++) {
            const int e = idx_at(f, b, k);
            y->qs[k] = (uint8_t)e;
            y->qs[QK_K / 8 + k] = b->signs[k];
            y->qh[k / 4] |= (uint8_t)((e >> 8) << (2 * (k % 4)));
        }
        for (int s = 0; s < 8; s++) y->scales[s] = (uint8_t)(b->s[2 * s] | b->s[2 * s + 1] << 4);
        break;
    }
    case DT_IQ3_XXS: {
        block_iq3_xxs *y = dst;
        y->d = b->d16;
        for (int k = 0; k < 64; k++) y->qs[k] = (uint8_t)idx_at(f, b, k);
        for (int s = 0; s < 8; s++) {
            uint32_t sg = (uint32_t)b->s[s] << 28;
            for (int l = 0; l < 4; l++) sg |= (uint32_t)(b->signs[4 * s + l] & 127) << (7 * l);
            put_u32(y->qs + QK_K / 4 + 4 * s, sg);
        }
        break;
    }
    case DT_IQ3_S: {
        block_iq3_s *y = dst;
        y->d = b->d16;
        memset(y->qh, 0, sizeof y->qh);
        memset(y->scales, 0, sizeof y->scales);
        for (int k = 0; k < 64; k++) {
            const int e = idx_at(f, b, k);
            y->qs[k] = (uint8_t)e;
            y->qh[k / 8] |= (uint8_t)((e >> 8) << (k % 8));
        }
        memcpy(y->signs, b->signs, sizeof y->signs);
        for (int s = 0; s < 8; s++) y->scales[s / 2] |= (uint8_t)(b->s[s] << (4 * (s & 1)));
        break;
    }
    case DT_IQ1_S: {
        block_iq1_s *y = dst;
        y->d = b->d16;
        for (int s = 0; s < 8; s++) {
            uint16_t qh = (uint16_t)(b->s[s] << 12 | (neg_at(f, b, 4 * s) ? 0x8000 : 0));
            for (int l = 0; l < 4; l++) {
                const int e = idx_at(f, b, 4 * s + l);
                y->qs[4 * s + l] = (uint8_t)e;
                qh |= (uint16_t)((e >> 8) << (3 * l));
            }
            y->qh[s] = qh;
        }
        break;
    }
    default: {
        assert(f->type == DT_IQ1_M);
        block_iq1_m *y = dst;
        uint16_t sc[4] = {0};
        memset(y->qh, 0, sizeof y->qh);
        for (int k = 0; k < 32; k++) {
            const int e = idx_at(f, b, k);
            y->qs[k] = (uint8_t)e;
            const int sh = k & 1 ? 4 : 0;
            y->qh[k / 2] |= (uint8_t)(((e >> 8) | (neg_at(f, b, k) ? 8 : 0)) << sh);
        }
        for (int s = 0; s < 8; s++)
            sc[s / 2] |= (uint16_t)((b->s[2 * s] | b->s[2 * s + 1] << 3) << (6 * (s % 2)));
        for (int k = 0; k < 4; k++) sc[k] |= (uint16_t)(((b->d16 >> (4 * k)) & 0xF) << 12);
        memcpy(y->scales, sc, sizeof sc);
        break;
    }
    }
}

/* ------------------------------------------------------------ the door */

static size_t fmt_index(uint32_t type)
{
    for (size_t i = 0; i < N_FMTS; i++)
        if (FMTS[i].type == type) return i;
    assert(!"quant_lattice_quantize_row: not a lattice type");
    return 0;
}

void quant_lattice_quantize_row(uint32_t type, const float *src, void *dst, int64_t n, const float *qw)
{
    const size_t fi = fmt_index(type);
    const lat_ctx c = {&FMTS[fi], tables_of(fi)};
    const size_t bytes = dtype_get(type)->type_size;
    for (int64_t b = 0; b < n / QK_K; b++) {
        lat_block blk;
        quantize_block(&c, src + b * QK_K, qw ? qw + b * QK_K : NULL, &blk);
        pack(c.f, &blk, (uint8_t *)dst + (size_t)b * bytes);
    }
}
