/* attention_fp8_avx512.c - fp8 caches (ATTN_KV_FP8_E4M3 / _E5M2) read in
 * place, AVX-512 variant (attn_paged_avx512's route for them). Its order
 * of float operations is its own (the AVX2 variant's 8-lane chains and hadd
 * trees, which it once copied for the same bits, took about 40% more time
 * a decode call), so the two variants differ in the last bits, as for F16;
 * tests/test_attention.c holds it to the reference:
 *
 *   scores: lanes over 16 keys, as attention_avx512.c's q8_0 keys: a
 *   step's 16 key rows transposed in registers 32 codes at a time
 *   (k5_transpose16x8_epi32), then each dword lane's 4 codes moved to the
 *   top bytes of halves (one vpermw) and converted (vcvtph2ps), once for
 *   the segment's rows; per (row, key) one FMA chain over the dims in
 *   order (f32 query), times the key's 256 x block scale (e4m3) x scale.
 *   e5m2 is the top byte of a half; e4m3 the half trick (attention_impl.h)
 *   x 2^-8; a key with an e4m3 NaN code (S.1111.111) scores NaN.
 *
 *   softmax: attention_avx512.c's (attn_softmax_rows_avx512), the
 *   exponentials left and each row's V sum times 1 / sum at the end; for
 *   e4m3 each weight times its value's 256 x block scale (scale_by_block).
 *
 *   values: per output element one FMA chain p_j x v_j, j ascending, from
 *   0, continued across tiles through the output: 16 dims a vector, each V
 *   vector converted once in a register for up to 8 rows (the half trick
 *   in 16-bit lanes, e4m3's NaN code made a half NaN).
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

/* 16 keys' codes [i, i + 32) (zeros past hd) as 8 vectors of 16 dword
 * lanes: t[j] lane kk = codes i + 4j .. i + 4j + 3 of key kk. */
K5AI void keys16(const uint8_t *const *k, int i, int hd, __m512i *t)
{
    __m512i z[8];
    const int w = hd - i < 32 ? hd - i : 32;
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        const uint8_t *a = k[K5_TR_KEY(p)] + i, *c = k[K5_TR_KEY(p) + 4] + i;
        if (w == 32) {
            z[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                                      _mm256_loadu_si256((const __m256i *)c), 1);
        } else { /* a head dim's last 8, 16 or 24 codes (no byte-masked load in the emulation build) */
            uint8_t b[64] = {0};
            memcpy(b, a, (size_t)w);
            memcpy(b + 32, c, (size_t)w);
            z[p] = _mm512_loadu_si512(b);
        }
    }
    k5_transpose16x8_epi32(z, t);
}

/* The 4 dims of t (16 keys' dwords of 4 codes) as 4 vectors of 16 f32
 * keys, x[b] = dim b: the keys' low words then high words side by side
 * (one vpermw), each code moved to the top byte of a half (e5m2: that is
 * the half; e4m3: the half trick without its NaN, whose codes the caller
 * finds by e4m3_nans). */
K5AI void codes4(bool e4m3, __m512i t, __m512 *x)
{
    const __m512i idx = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1, 30, 28, 26, 24, 22,
                                         20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i w = _mm512_permutexvar_epi16(idx, t);
    __m512i lo = _mm512_slli_epi16(w, 8), hi = _mm512_and_si512(w, _mm512_set1_epi16((short)0xFF00));
    if (e4m3) { /* S.EEEE.MMM at bits 15..8 -> S.0EEEE.MMM0000000 */
        lo = _mm512_and_si512(_mm512_srai_epi16(lo, 1), _mm512_set1_epi16((short)0xBF80));
        hi = _mm512_and_si512(_mm512_srai_epi16(hi, 1), _mm512_set1_epi16((short)0xBF80));
    }
    x[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(lo));
    x[1] = _mm512_cvtph_ps(_mm512_castsi512_si256(hi));
    x[2] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(lo, 1));
    x[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(hi, 1));
}

/* Bits 4kk .. 4kk + 3 set where key kk's codes in t are e4m3 NaN (S.1111.111). */
K5AI uint64_t e4m3_nans(__m512i t)
{
    return _mm512_cmpeq_epi8_mask(_mm512_or_si512(t, _mm512_set1_epi8((char)0x80)), _mm512_set1_epi8((char)0xFF));
}

/* The keys (lanes) with a bit of their nibble set in m. */
static inline __mmask16 nan_keys(uint64_t m)
{
    unsigned r = 0;
    for (int kk = 0; kk < 16; kk++) r |= ((m >> (4 * kk)) & 15) ? 1u << kk : 0;
    return (__mmask16)r;
}

/* Scores of NR rows (1..8) against 16 keys k[0..16): lanes over the keys,
 * per (row, key) one FMA chain over the dims in order, then x ks (lane kk:
 * the key's 256 x block scale for e4m3, times scale); a key with an e4m3
 * NaN code scores NaN. qt: the rows' queries interleaved (element d of row
 * r at qt[d NR + r]: each dim's NR broadcasts from one base register).
 * out[r][kk] for kk < n[r] (at most 16; rows with n[r] <= 0 store nothing). */
K5AI void scores_t(int NR, bool e4m3, const uint8_t *const *k, const float *qt, int hd, __m512 ks, float *const *out,
                   const int *n)
{
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    uint64_t nan = 0;
    for (int i = 0; i < hd; i += 32) {
        __m512i t[8];
        keys16(k, i, hd, t);
        const int nj = hd - i >= 32 ? 8 : (hd - i) / 4;
        for (int j = 0; j < nj; j++) {
            __m512 x[4];
            codes4(e4m3, t[j], x);
            if (e4m3) nan |= e4m3_nans(t[j]);
            const float *qd = qt + (size_t)(i + 4 * j) * NR;
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) /* hd % 8 == 0: whole dwords */
#pragma GCC unroll 8
                for (int r = 0; r < NR; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(qd[b * NR + r]), x[b], acc[r]);
        }
    }
    const __mmask16 nk = nan ? nan_keys(nan) : 0;
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        if (n[r] <= 0) continue;
        const __m512 s = _mm512_mask_mov_ps(_mm512_mul_ps(acc[r], ks), nk, _mm512_set1_ps(NAN));
        _mm512_mask_storeu_ps(out[r], lanes16(n[r] < 16 ? n[r] : 16), s);
    }
}

static K5 void scores_t_nr(int nr, bool e4m3, const uint8_t *const *k, const float *qt, int hd, __m512 ks,
                           float *const *out, const int *n)
{
#define ST(R) (e4m3 ? scores_t(R, true, k, qt, hd, ks, out, n) : scores_t(R, false, k, qt, hd, ks, out, n))
    switch (nr) {
    case 1: ST(1); break;
    case 2: ST(2); break;
    case 3: ST(3); break;
    case 4: ST(4); break;
    case 5: ST(5); break;
    case 6: ST(6); break;
    case 7: ST(7); break;
    default: ST(8); break;
    }
#undef ST
}

/* x[j] *= 256 x (e4m3 scale of head g in the block of position j), j < n:
 * the values' block scales, applied to their weights (as AVX2 does). */
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
 * the last masked by klast: o[r][d0 ..] (+)= sum_k w[r ATTN_VB + k] v_k, k = 0..n-1
 * ascending, from 0 when first. One FMA chain a output element. */
K5AI void vtile(int RR, int C, bool e4m3, __mmask16 klast, bool first, float *const *o, const float *w, int n,
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
            const __m512 pk = _mm512_set1_ps(w[r * ATTN_VB + k]);
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
static K5 void vtile_rc(int rr, int c, bool e4m3, __mmask16 klast, bool first, float *const *o, const float *w,
                        int n, const uint8_t *const *vp, int d0, const char *pf, int npf)
{
#define VT(R, C) vtile(R, C, e4m3, klast, first, o, w, n, vp, d0, pf, npf)
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
static K5 void vdims(bool e4m3, int rr, bool first, float *const *o, const float *w, int n,
                     const uint8_t *const *vp, int hd, kv_pfb *pb, int take, vline_pf *lp)
{
    const int width = rr > 4 ? 32 : 64;
    for (int d0 = 0; d0 < hd; d0 += width) {
        const int left = hd - d0 < width ? hd - d0 : width, c = (left + 15) / 16;
        const char *pf = NULL;
        const int npf = lp ? vline_span(lp, n, &pf) : 0;
        pf_take(pb, take);
        vtile_rc(rr, c, e4m3, lanes16(left - 16 * (c - 1)), first, o, w, n, vp, d0, pf, npf);
    }
}

/* nr rows (n[r] >= 1 keys each from the tile's first): chunks of up to 8
 * rows over their common keys, then each row alone over the rest. A
 * chunk's weights are copied first into rows ATTN_VB floats apart (wt):
 * the tile then reads them from one base register (attention_avx512.c's
 * vrows, for the same reason). */
static K5 void vrows(bool e4m3, int nr, bool first, float *const *o, const float *const *p, const int *n,
                     const uint8_t *const *vp, int hd, kv_pfb *pb, int quota, vline_pf *lp)
{
    float wt[8 * ATTN_VB] __attribute__((aligned(64)));
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int rr = nr - r0 < 8 ? nr - r0 : 8, w = rr > 4 ? 32 : 64;
        int nmin = n[r0];
        for (int r = r0 + 1; r < r0 + rr; r++) nmin = n[r] < nmin ? n[r] : nmin;
        assert(nmin >= 1 && nmin <= ATTN_VB);
        for (int r = 0; r < rr && rr > 1; r++)
            for (int i = 0; i < nmin; i += 16) {
                const __mmask16 m = lanes16(nmin - i < 16 ? nmin - i : 16);
                _mm512_mask_storeu_ps(wt + r * ATTN_VB + i, m, _mm512_maskz_loadu_ps(m, p[r0 + r] + i));
            }
        const int passes = (hd + w - 1) / w, calls = ((nr - r0 + 7) / 8) * passes;
        const int take = pb && quota > 0 ? (quota + calls - 1) / calls : 0;
        vdims(e4m3, rr, first, o + r0, rr > 1 ? wt : p[r0], nmin, vp, hd, pb, take, lp);
        quota -= take * passes;
        for (int r = r0; r < r0 + rr; r++) {
            if (n[r] == nmin) continue;
            vdims(e4m3, 1, false, o + r, p[r] + nmin, n[r] - nmin, vp + nmin, hd, NULL, 0, NULL);
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
    float *sc = scratch + (size_t)n_rows * hdp; /* the layout's scores */

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
     * call's heads visited key step by key step as AVX2 does; the queries
     * interleaved per chunk of 8 rows (scores_t) in the layout's query
     * space, chunk [a, a + nr) at qt + a hd */
    float *qt = scratch;
    for (int sg = 0; sg < n_sg; sg++)
        for (int a = sg_r0[sg]; a < sg_r0[sg + 1]; a += 8) {
            const int nr = sg_r0[sg + 1] - a < 8 ? sg_r0[sg + 1] - a : 8;
            for (int r = 0; r < nr; r++)
                for (int d = 0; d < hd; d++) qt[(size_t)a * hd + (size_t)d * nr + r] = rows[a + r].q[d];
        }
    kv_cursor kc = cursor_at(kv, kv->k_base, 0);
    const int pk_share = (16 + n_sg - 1) / n_sg, bs = (int)kv->block_size;
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
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1], g = rows[r0].g;
            if (sg_n[sg] <= j0) continue;
            const size_t goff = (size_t)g * kv->head_bytes;
            const uint8_t *kp[16];
            for (int k = 0; k < 16; k++) kp[k] = krow[k] + goff;
            __m512 ks = _mm512_set1_ps(scale);
            if (e4m3) { /* each key's 256 x block scale x scale (keys past nmax: the last one's) */
                int b = j0 / bs, e = (b + 1) * bs; /* key j0's block, the first position past it */
                float cur = 256.0f * attn_fp8_scale(kv, kv->k_base, kv->blocks[b], g) * scale;
                if (e >= j0 + 16 || e >= nmax) {
                    ks = _mm512_set1_ps(cur); /* one block (bs a multiple of 16: always) */
                } else {
                    float f[16];
                    for (int k = 0; k < 16; k++) {
                        if (j0 + k >= e && j0 + k < nmax)
                            b++, e += bs, cur = 256.0f * attn_fp8_scale(kv, kv->k_base, kv->blocks[b], g) * scale;
                        f[k] = cur;
                    }
                    ks = _mm512_loadu_ps(f);
                }
            }
            pf_take(&pkb, pk_share);
            for (int a = r0; a < r1; a += 8) {
                const int nr = r1 - a < 8 ? r1 - a : 8;
                float *out[8];
                int n[8];
                for (int r = 0; r < nr; r++) {
                    out[r] = sc + (size_t)(a + r) * ncp + j0;
                    n[r] = rows[a + r].n_ctx - j0;
                }
                scores_t_nr(nr, e4m3, kp, qt + (size_t)a * hd, hd, ks, out, n);
            }
        }
        pf_take(&pkb, 16);
    }

    /* 2. softmax of each row over its own scores lo..n_ctx-1, AVX-512's,
     * the exponentials left (the V sum is scaled by inv at the end), then
     * x each value's 256 x block scale for e4m3 */
    float inv[ATTN_ROWS_CAP];
    attn_softmax_rows_avx512(rows, n_rows, sc, ncp, false, kv->softcap, kv->lse, inv);
    for (int r = 0; e4m3 && r < n_rows; r++) scale_by_block(kv, kv->v_base, rows[r].g, sc + (size_t)r * ncp, rows[r].n_ctx);
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
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < hd; i += 16) {
            const __mmask16 m = lanes16(hd - i < 16 ? hd - i : 16);
            _mm512_mask_storeu_ps(rows[r].out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, rows[r].out + i), _mm512_set1_ps(inv[r])));
        }
}

#else

void attn_fp8_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch, size_t sf)
{
    attn_paged_avx2(kv, rows, n_rows, scale, scratch, sf);
}

#endif
