/* attention_fp8_avx512.c - fp8 caches (ATTN_KV_FP8_E4M3 / _E5M2) read in
 * place, AVX-512 variant (attn_paged_avx512's route for them). It does the
 * AVX2 variant's float operations in the AVX2 variant's order, so its
 * results are attn_paged_avx2's bits for these types (tests/test_attention.c
 * checks that); only the work per instruction changes:
 *
 *   conversion: 16 codes a vector, by the half trick (attention_impl.h)
 *   in 16-bit lanes then vcvtph2ps; e4m3's NaN code S.1111.111 made a half
 *   NaN exactly as AVX2's ld8 does (the same half bits, so the same NaN);
 *   e5m2 is the top byte of a half.
 *   e4m3's x 256 and block scale multiply the scores before and the
 *   weights after the softmax (scale_by_block), as in AVX2.
 *
 *   scores: a vector holds 2 keys x 8 dims, so each key's lanes run AVX2's
 *   8-lane FMA chain (lane l: dims l, l + 8, ... in order) and are reduced
 *   by AVX2's hadd tree on each 256-bit half. A key pair is converted once
 *   for up to 8 rows of a GQA segment; fewer rows take more pairs at once
 *   (8 pairs for 1 row), so there are always about 8 chains in flight.
 *
 *   softmax: the AVX2 table's (kern_vt_avx2()->softmax), as AVX2 calls it.
 *
 *   values: per output element one FMA chain p_j x v_j, j ascending, from
 *   0, continued across tiles through the output: 16 dims a vector, each V
 *   vector converted once in a register for up to 8 rows.
 *
 * The cache walk and prefetching are AVX2's (attention_walk.h).
 */
#include "kernels/attention.h"

#include <assert.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/avx512_intrin.h"
#include "kernels/kern_impl.h"

#ifdef PL_HAVE_AVX512_CODE

#include "kernels/attention_walk.h"

K5I __mmask16 lanes16(int r) { return (__mmask16)((1u << r) - 1); }

/* 16 fp8 codes as f32: e4m3 unscaled (its half trick without the x 256),
 * e5m2 exact. */
K5AI __m512 fp8_16(bool e4m3, __m128i x)
{
    if (!e4m3) return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(x), 8));
    const __m256i w = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x), 7), _mm256_set1_epi16((short)0xBF80));
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7F80)), _mm256_set1_epi16(0x3F80));
    /* S.1111.111 -> a half NaN as AVX2 makes it: w | (nan & 0x4000) in one ternary op */
    return _mm512_cvtph_ps(_mm256_ternarylogic_epi32(w, nan, _mm256_set1_epi16(0x4000), 0xF8));
}

/* Dims i..i+7 of key a in the low half, of key b in the high half. */
K5AI __m512 fp8_pair(bool e4m3, const uint8_t *a, const uint8_t *b, int i)
{
    return fp8_16(e4m3, _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(a + i)),
                                           _mm_loadl_epi64((const __m128i *)(b + i))));
}

/* AVX2's hsum8_ps: lane x = ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) of a[x]. */
K5AI __m256 hsum8_ps(const __m256 *a)
{
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* The dots of NR rows (1..8) with keys k[0..2 PG): PG pairs at once, each
 * pair converted once per 8 dims for the NR rows. res[k][r] = row r . key k
 * by AVX2's chain and tree (rows >= NR: zeros). */
K5AI void dots_pairs(int NR, int PG, bool e4m3, const uint8_t *const *k, const float *const *q, int hd,
                     float (*res)[8])
{
    __m512 a[8][8]; /* [pair][row] */
#pragma GCC unroll 8
    for (int p = 0; p < PG; p++)
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) a[p][r] = _mm512_setzero_ps();
    for (int i = 0; i < hd; i += 8) {
        __m512 qv[8];
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) qv[r] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q[r] + i))));
#pragma GCC unroll 8
        for (int p = 0; p < PG; p++) {
            const __m512 kc = fp8_pair(e4m3, k[2 * p], k[2 * p + 1], i);
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) a[p][r] = _mm512_fmadd_ps(kc, qv[r], a[p][r]);
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < PG; p++) {
        __m256 lo[8], hi[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            lo[r] = r < NR ? _mm512_castps512_ps256(a[p][r]) : _mm256_setzero_ps();
            hi[r] = r < NR ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[p][r]), 1)) : _mm256_setzero_ps();
        }
        _mm256_storeu_ps(res[2 * p], hsum8_ps(lo));
        _mm256_storeu_ps(res[2 * p + 1], hsum8_ps(hi));
    }
}

/* t[r] = x[0..8)[r]: 8 keys' scores of 8 rows turned into each row's 8
 * keys (the scores' read-out, a scalar loop of loads from just-stored
 * vectors before, ~7% of a prefill's e4m3 attention). */
K5AI void transpose8(const float (*x)[8], __m256 *t)
{
    __m256 a[8], b[8];
    for (int k = 0; k < 8; k += 2) {
        a[k] = _mm256_unpacklo_ps(_mm256_loadu_ps(x[k]), _mm256_loadu_ps(x[k + 1]));
        a[k + 1] = _mm256_unpackhi_ps(_mm256_loadu_ps(x[k]), _mm256_loadu_ps(x[k + 1]));
    }
    for (int k = 0; k < 8; k += 4) {
        b[k] = _mm256_shuffle_ps(a[k], a[k + 2], 0x44);
        b[k + 1] = _mm256_shuffle_ps(a[k], a[k + 2], 0xEE);
        b[k + 2] = _mm256_shuffle_ps(a[k + 1], a[k + 3], 0x44);
        b[k + 3] = _mm256_shuffle_ps(a[k + 1], a[k + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2f128_ps(b[i], b[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(b[i], b[i + 4], 0x31);
    }
}

/* Scores of nr rows (1..8) against 16 keys: out[r][k] = (row r . key k) x
 * scale for k < n[r] (at most 16; rows with n[r] <= 0 store nothing). */
static K5 void scores16(bool e4m3, int nr, const uint8_t *const *k, const float *const *q, int hd, float scale,
                        float *const *out, const int *n)
{
    float res[16][8];
#define DP(NR, PG)                                                                          \
    for (int p0 = 0; p0 < 8; p0 += PG) dots_pairs(NR, PG, e4m3, k + 2 * p0, q, hd, res + 2 * p0)
    switch (nr) {
    case 1: DP(1, 8); break;
    case 2: DP(2, 8); break;
    case 3: DP(3, 4); break;
    case 4: DP(4, 4); break;
    case 5: DP(5, 2); break;
    case 6: DP(6, 2); break;
    case 7: DP(7, 2); break;
    default: DP(8, 2); break;
    }
#undef DP
    const __m256 vs = _mm256_set1_ps(scale);
    for (int h = 0; h < 2; h++) { /* keys 8h..8h+7 */
        __m256 t[8];
        transpose8(res + 8 * h, t);
        for (int r = 0; r < nr; r++) {
            const int m = n[r] - 8 * h < 0 ? 0 : n[r] - 8 * h > 8 ? 8 : n[r] - 8 * h;
            _mm256_mask_storeu_ps(out[r] + 8 * h, (__mmask8)((1u << m) - 1), _mm256_mul_ps(t[r], vs));
        }
    }
}

/* AVX2's scale_by_block: x[j] *= 256 x (e4m3 scale of head g in the block
 * of position j), j < n (powers of two: exact, the same bits). */
static K5 void scale_by_block(const attn_kv *kv, const uint8_t *plane, int g, float *x, int n)
{
    const int T = (int)kv->block_size;
    for (int j0 = 0, b = 0; j0 < n; j0 += T, b++) {
        const float f = 256.0f * attn_fp8_scale(kv, plane, kv->blocks[b], g);
        const __m512 vf = _mm512_set1_ps(f);
        const int e = j0 + T < n ? j0 + T : n;
        for (int j = j0; j < e; j += 16) {
            const __mmask16 m = lanes16(e - j < 16 ? e - j : 16);
            _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), vf));
        }
    }
}

/* The V sum of RR rows (1..8) over C vectors (1..4) of 16 dims from d0,
 * the last masked by klast: o[r][d0 ..] (+)= sum_k p[r][k] v_k, k = 0..n-1
 * ascending, from 0 when first. One FMA chain a output element. */
K5AI void vtile(int RR, int C, bool e4m3, __mmask16 klast, bool first, float *const *o, const float *const *p, int n,
                const uint8_t *const *vp, int d0, const char *pf, int npf)
{
    __m512 a[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __mmask16 m = c == C - 1 ? klast : (__mmask16)0xFFFF;
            a[r][c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, o[r] + d0 + 16 * c);
        }
    for (int k = 0; k < n; k++) {
        if (k < npf) _mm_prefetch(pf + 64 * (size_t)k, ATTN_PF_HINT);
        __m512 v[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const uint8_t *s = vp[k] + d0 + 16 * c;
            /* a partial last vector is 8 dims (hd % 8 == 0): klast 0x00FF */
            v[c] = fp8_16(e4m3, c == C - 1 && klast != 0xFFFF ? _mm_loadl_epi64((const __m128i *)s)
                                                               : _mm_loadu_si128((const __m128i *)s));
        }
#pragma GCC unroll 8
        for (int r = 0; r < RR; r++) {
            const __m512 pk = _mm512_set1_ps(p[r][k]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) a[r][c] = _mm512_fmadd_ps(pk, v[c], a[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(o[r] + d0 + 16 * c, c == C - 1 ? klast : (__mmask16)0xFFFF, a[r][c]);
}

/* vtile with RR and C constants: up to 4 rows x 4 vectors, 5..8 rows x 2. */
static K5 void vtile_rc(int rr, int c, bool e4m3, __mmask16 klast, bool first, float *const *o, const float *const *p,
                        int n, const uint8_t *const *vp, int d0, const char *pf, int npf)
{
#define VT(R, C) vtile(R, C, e4m3, klast, first, o, p, n, vp, d0, pf, npf)
    switch (rr * 16 + c) {
    case 0x11: VT(1, 1); break;
    case 0x12: VT(1, 2); break;
    case 0x13: VT(1, 3); break;
    case 0x14: VT(1, 4); break;
    case 0x21: VT(2, 1); break;
    case 0x22: VT(2, 2); break;
    case 0x23: VT(2, 3); break;
    case 0x24: VT(2, 4); break;
    case 0x31: VT(3, 1); break;
    case 0x32: VT(3, 2); break;
    case 0x33: VT(3, 3); break;
    case 0x34: VT(3, 4); break;
    case 0x41: VT(4, 1); break;
    case 0x42: VT(4, 2); break;
    case 0x43: VT(4, 3); break;
    case 0x44: VT(4, 4); break;
    case 0x51: VT(5, 1); break;
    case 0x52: VT(5, 2); break;
    case 0x61: VT(6, 1); break;
    case 0x62: VT(6, 2); break;
    case 0x71: VT(7, 1); break;
    case 0x72: VT(7, 2); break;
    case 0x81: VT(8, 1); break;
    default: VT(8, 2); break;
    }
#undef VT
}

/* All of the head's dims for rr rows over n keys: passes of 64 dims for up
 * to 4 rows, 32 for 5..8; take: prefetches issued a pass. */
static K5 void vdims(bool e4m3, int rr, bool first, float *const *o, const float *const *p, int n,
                     const uint8_t *const *vp, int hd, kv_pfb *pb, int take, vline_pf *lp)
{
    const int w = rr > 4 ? 32 : 64;
    for (int d0 = 0; d0 < hd; d0 += w) {
        const int left = hd - d0 < w ? hd - d0 : w, c = (left + 15) / 16;
        const char *pf = NULL;
        const int npf = lp ? vline_span(lp, n, &pf) : 0;
        pf_take(pb, take);
        vtile_rc(rr, c, e4m3, lanes16(left - 16 * (c - 1)), first, o, p, n, vp, d0, pf, npf);
    }
}

/* nr rows (n[r] >= 1 keys each from the tile's first): chunks of up to 8
 * rows over their common keys, then each row alone over the rest. */
static K5 void vrows(bool e4m3, int nr, bool first, float *const *o, const float *const *p, const int *n,
                     const uint8_t *const *vp, int hd, kv_pfb *pb, int quota, vline_pf *lp)
{
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int rr = nr - r0 < 8 ? nr - r0 : 8, w = rr > 4 ? 32 : 64;
        int nmin = n[r0];
        for (int r = r0 + 1; r < r0 + rr; r++) nmin = n[r] < nmin ? n[r] : nmin;
        const int passes = (hd + w - 1) / w, calls = ((nr - r0 + 7) / 8) * passes;
        const int take = pb && quota > 0 ? (quota + calls - 1) / calls : 0;
        vdims(e4m3, rr, first, o + r0, p + r0, nmin, vp, hd, pb, take, lp);
        quota -= take * passes;
        for (int r = r0; r < r0 + rr; r++) {
            if (n[r] == nmin) continue;
            const float *pr = p[r] + nmin;
            vdims(e4m3, 1, false, o + r, &pr, n[r] - nmin, vp + nmin, hd, NULL, 0, NULL);
        }
    }
}

K5 void attn_fp8_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                        size_t scratch_floats)
{
    const int hd = kv->head_dim;
    const uint32_t t = kv->kv_type;
    const bool e4m3 = t == ATTN_KV_FP8_E4M3;
    assert(attn_is_fp8(t) && !kv->reader && hd % 8 == 0 && n_rows >= 1 && n_rows <= ATTN_ROWS_CAP);
    const int nmax = segment_nmax(rows, 0, n_rows);
    int sg_r0[ATTN_ROWS_CAP + 1], sg_n[ATTN_ROWS_CAP], n_sg = 0;
    for (int r0 = 0, r1; r0 < n_rows; r0 = r1, n_sg++) {
        r1 = segment_end(rows, n_rows, r0);
        sg_r0[n_sg] = r0;
        sg_n[n_sg] = segment_nmax(rows, r0, r1);
    }
    sg_r0[n_sg] = n_rows;
    const size_t ncp = attn_round8((size_t)nmax), hdp = attn_round8((size_t)hd);
    assert(attn_layout_floats((size_t)n_rows, (size_t)nmax, (size_t)hd) <= scratch_floats);
    (void)scratch_floats;
    float *sc = scratch + (size_t)n_rows * hdp; /* the layout's scores (the queries are read in place) */

    int gmin = rows[0].g, gmax = rows[0].g;
    for (int r = 1; r < n_rows; r++) {
        assert(rows[r].n_ctx >= 1 && rows[r].lo >= 0 && rows[r].lo < rows[r].n_ctx);
        gmin = rows[r].g < gmin ? rows[r].g : gmin;
        gmax = rows[r].g > gmax ? rows[r].g : gmax;
    }
    kv_pf pk = kv_pf_at(kv, kv->k_base, nmax, gmin, gmax);
    kv_pf pv = kv_pf_at(kv, kv->v_base, nmax, gmin, gmax);
    const int pfd = kv_pf_keys(n_rows, gmin, gmax, kv_key_bytes(kv, gmin, gmax), 16, 64); /* keys ahead */
    const bool vlines = kv_head_major(kv);
    vline_pf lv = vline_at(kv, kv->v_base, nmax, gmin, gmax);
    pf_until(&pk, pfd);

    /* 1. scores, 16 keys a step (keys past nmax repeat the last one), the
     * call's heads visited key step by key step as AVX2 does */
    kv_cursor kc = cursor_at(kv, kv->k_base, 0);
    const int pk_share = (16 + n_sg - 1) / n_sg;
    for (int j0 = 0; j0 < nmax; j0 += 16) {
        kv_pfb pkb;
        pkb.n = pkb.next = 0;
        pf_collect(&pk, j0 + 16 + pfd, &pkb, 16);
        if (pkb.n < 16) pf_collect(&pv, pfd, &pkb, 16); /* the first values, over the last key steps */
        const uint8_t *krow[16];
        for (int k = 0; k < 16; k++) {
            krow[k] = cursor_row(&kc);
            if (j0 + k + 1 < nmax) cursor_next(&kc);
        }
        for (int sg = 0; sg < n_sg; sg++) {
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1];
            if (sg_n[sg] <= j0) continue;
            const size_t goff = (size_t)rows[r0].g * kv->head_bytes;
            const uint8_t *kp[16];
            for (int k = 0; k < 16; k++) kp[k] = krow[k] + goff;
            pf_take(&pkb, pk_share);
            for (int a = r0; a < r1; a += 8) {
                const int nr = r1 - a < 8 ? r1 - a : 8;
                const float *q[8];
                float *out[8];
                int n[8];
                for (int r = 0; r < nr; r++) {
                    q[r] = rows[a + r].q;
                    out[r] = sc + (size_t)(a + r) * ncp + j0;
                    n[r] = rows[a + r].n_ctx - j0;
                }
                scores16(e4m3, nr, kp, q, hd, scale, out, n);
            }
        }
        pf_take(&pkb, 16);
    }

    /* 2. softmax of each row over its own scores lo..n_ctx-1, AVX2's */
    const kern_vtable *vt2 = kern_vt_avx2();
    for (int r = 0; r < n_rows; r++) {
        float *s = sc + (size_t)r * ncp;
        if (e4m3) scale_by_block(kv, kv->k_base, rows[r].g, s, rows[r].n_ctx);
        const int lo = rows[r].lo;
        attn_softcap(s + lo, rows[r].n_ctx - lo, kv->softcap);
        const float lse = vt2->softmax(s + lo, rows[r].n_ctx - lo);
        if (kv->lse) kv->lse[r] = lse;
        for (int j = 0; j < lo; j++) s[j] = 0;
        if (e4m3) scale_by_block(kv, kv->v_base, rows[r].g, s, rows[r].n_ctx);
    }
    if (vlines) vline_until(&lv, pfd);

    /* 3. values, ATTN_VB keys a tile, heads visited as in 1 */
    kv_cursor vc = cursor_at(kv, kv->v_base, 0);
    for (int j0 = 0; j0 < nmax; j0 += ATTN_VB) {
        const int jn = nmax - j0 < ATTN_VB ? nmax - j0 : ATTN_VB;
        kv_pfb pvb;
        pvb.n = pvb.next = 0, pvb.len = 0;
        if (vlines) vline_aim(&lv, j0 + jn + pfd);
        else pf_collect(&pv, j0 + jn + pfd, &pvb, ATTN_VB);
        const int pv_share = (pvb.n + n_sg - 1) / n_sg;
        const uint8_t *vrow[ATTN_VB];
        cursor_rows(&vc, vrow, jn);
        for (int sg = 0; sg < n_sg; sg++) {
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1], sn = sg_n[sg];
            if (sn <= j0) continue;
            const int sjn = sn - j0 < jn ? sn - j0 : jn;
            const size_t goff = (size_t)rows[r0].g * kv->head_bytes;
            const uint8_t *vp[ATTN_VB];
            for (int k = 0; k < sjn; k++) vp[k] = vrow[k] + goff;
            float *op[ATTN_ROWS_CAP];
            const float *pp[ATTN_ROWS_CAP];
            int np[ATTN_ROWS_CAP], nr = 0;
            for (int r = r0; r < r1; r++) {
                const int n = (rows[r].n_ctx < j0 + jn ? rows[r].n_ctx : j0 + jn) - j0;
                if (n <= 0) continue;
                op[nr] = rows[r].out;
                pp[nr] = sc + (size_t)r * ncp + j0;
                np[nr++] = n;
            }
            vrows(e4m3, nr, j0 == 0, op, pp, np, vp, hd, &pvb, pv_share, vlines ? &lv : NULL);
        }
        pf_take(&pvb, ATTN_VB);
        if (vlines) vline_until(&lv, j0 + jn + pfd);
    }
}

#else

void attn_fp8_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch, size_t sf)
{
    attn_paged_avx2(kv, rows, n_rows, scale, scratch, sf);
}

#endif
