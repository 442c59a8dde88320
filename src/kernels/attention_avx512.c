/* attention_avx512.c - paged attention, AVX-512 variant for F16 caches
 * (the engine's default), Q8_0 and Q4_0; fp8 caches go to
 * attention_fp8_avx512.c, sealed KIVI blocks to
 * attention_kivi_avx512.c; every other cache type, and calls through a
 * reader, go to the AVX2 variant whole (attention_avx2.c), so each type
 * keeps one variant and its row independence. See attention.h
 * for the contract and attention_impl.h for the scratch layout.
 *
 * Q8_0 / Q4_0 keys: lanes over 16 keys, the int8 block dots by VNNI
 * (vpdpbusd, u8 x s8 sums of 4 in one instruction: the keys as u8 - q8_0 +
 * 128, q4_0's nibbles, i.e. value + 8 - against the query's q8_0 quants,
 * then the offset x the query block's sum taken off: exact), after a 16 x
 * 8 transpose of the keys' dwords shared by the segment's rows; then per
 * block the reference's float operations, so the scores are the
 * reference's bits (as the AVX2 variant's, whose maddubs needs the sign
 * trick and a hadd tree per key). Values: d x q in registers (exact).
 * Warm, about half the AVX2 variant's time (docs/speed.md).
 *
 * F16 keys in columns (attn_kv.k_cols, the kv pool's f16 layout,
 * kv_dtype.h): lanes over 16 keys of a block, the scores broadcast FMAs,
 * one chain per (row, key) over the dims in order (scores_cols below), the
 * query rounded to f16 (as ggml) and the keys exact in f32. F16 rows (no
 * longer what the pool stores) go to the AVX2 variant as the other types
 * do. (An f16-rows kernel here, lanes = 4 keys x 4 dims with 4 x 4
 * transposes and shuffle-add reductions, took about twice the columns'
 * time for its scores; it was removed.)
 * The softmax is the avx512 table's (kern_avx512_elem.c: max, vector expf,
 * sum in double) over exactly the row's scores lo..n_ctx-1, the weights
 * rounded to f16 after it (llama.cpp's non-flash path); the V sum is one
 * FMA chain p_j x v_j per output element, j ascending, 16 dims a vector,
 * each V vector converted once in a register for up to 8 rows.
 *
 * Numerics relative to the reference (attention.c): F16: the same f16
 * query, weights and values; each dot product one FMA chain in dim order
 * (the reference: one chain of separate multiplies and adds). Q8_0,
 * Q4_0: the reference's scores bit for bit, and the V sum of the
 * unnormalized exponentials times (float)(1 / sum) at the end instead of
 * the normalized weights'. All: vector expf within ~2 ulp and the softmax
 * sum in another order, FMA in the V sum: within test_attention's
 * tolerances. Relative to the AVX2 variant: for F16
 * another order of the dot products, for all the avx512 softmax, so the
 * two differ in the last bits (each is row independent on its own), and
 * with near-tied logits (the synthetic bench models) the tokens can differ.
 *
 * Prefetching is the AVX2 variant's scheme (attention_walk.h's kv_pf /
 * kv_pfb, shared with it): cache rows ~8 KiB ahead, issued a row or two
 * at a time between the keys' work; f16 key
 * columns: the group 8 KiB ahead, a line every 2 dims of the scores;
 * head-major V (the pool's f16 values): attention_walk.h's vline_pf, each
 * block's run of the call's heads as one line range, a line per key of
 * the V tiles, which replaced a per-position walk that cost ~40% of the V
 * pass (docs/speed.md).
 *
 * The softmax (step 2) is the avx512 table's softmax_avx512 operation for
 * operation, with rows of the same range interleaved (softmax_group).
 */
#include "kernels/attention.h"

#include <assert.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/avx512_intrin.h"
#include "kernels/kern_avx512_exp.h"
#include "kernels/kern_impl.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"

#ifdef PL_HAVE_AVX512_CODE

#include "kernels/attention_walk.h"


bool attn_avx512_available(void)
{
    return attn_avx2_available() && (kern_cpu_avx512() & KERN_X512_BASE) != 0;
}

K5I __mmask16 lanes16(int r) { return (__mmask16)((1u << r) - 1); }

/* ----------------------------------------------- cache walk and prefetch
 * As attention_avx2.c (see there for why and the measurements). */

/* kv_cursor, kv_pf, kv_pfb, pf_*: attention_walk.h */

/* ------------------------------------------------------------ the scores */


/* ------------------------------------------------- f16 keys in columns
 * (attn_kv.k_cols): a head's keys of one block are head_dim columns of bs
 * halves, so 16 keys of a dim are one 32-byte load: lanes over 16 keys,
 * each dim's query element broadcast, one FMA per (row, dim) and no
 * transpose or horizontal sum. Per (row, key) one chain
 *   s = fma(q[hd-1], k[hd-1], ... fma(q[0], k[0], 0)),  then s x scale,
 * the same for any number of rows or key groups in the call (row
 * independence). In cache, about half the time of the row layout's quads
 * (docs/speed.md). */

/* acc + k x *q (q broadcast). EB false: from intrinsics, GCC loads the
 * broadcast once (vbroadcastss) for the FMAs that share it. EB true: the
 * broadcast embedded in each FMA's memory operand (vfmadd231ps m32{1to16}),
 * a separate instruction fewer per broadcast. Which is faster is the CPU's:
 * Zen 4 (512-bit operations as two halves) runs the prefill tiles ~10%
 * faster embedded, Intel (Emerald Rapids) issues an FMA with an embedded
 * broadcast at about half the rate (docs/speed.md); kern_init picks
 * (kern_attn_bcast_embedded). The emulation build has the intrinsics. */
K5I __m512 fmadd_b32(bool EB, __m512 acc, __m512 k, const float *q)
{
#ifndef PL_AVX512_EMU
    if (EB) {
        __asm__("vfmadd231ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(k), "m"(*q));
        return acc;
    }
#endif
    (void)EB;
    return _mm512_fmadd_ps(_mm512_set1_ps(*q), k, acc);
}

/* A group: up to 16 consecutive keys of one block; col = the first key's
 * slot in the block's K plane (dim d of head g at col + (g hd + d) bs);
 * j0 = the first key's position. */
typedef struct {
    const uint16_t *col;
    int j0, n;
} key_group;

/* NR rows (1..8) x NG groups (1..4) of keys; qt: the rows' queries
 * interleaved, element d of row r at qt[d NR + r] (each dim's NR
 * broadcasts then come from one base register: with a pointer per row the
 * loop ran out of general registers); pf[0..npf): later groups of the same
 * head to prefetch, a line (2 dims of 16 keys) every 2 dims. */
K5I void scores_cols(bool EB, int NR, int NG, const key_group *kg, size_t goff, size_t bs, const float *qt, int hd,
                     __m512 vscale, float *const *out, const int *n, const key_group *pf, int npf)
{
    __m512 acc[8][4];
    __mmask16 m[4];
    const uint16_t *c[4];
#pragma GCC unroll 4
    for (int k = 0; k < NG; k++) {
        m[k] = lanes16(kg[k].n);
        c[k] = kg[k].col + goff;
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NG; k++) acc[r][k] = _mm512_setzero_ps();
    /* a dim's column of a block is bs halves: a line holds 32 / bs dims
     * (bs < 32), else each dim starts a line (bs = 32: exactly one) */
    const int dpl = bs < 32 ? (int)(32 / bs) : 1;
    for (int d = 0, pd = 0; d < hd; d++) {
        if (d == pd) {
            pd += dpl;
            for (int k = 0; k < npf; k++) _mm_prefetch((const char *)(pf[k].col + goff + (size_t)d * bs), ATTN_PF_HINT);
        }
        /* entries past NG are never read (zeroed for the compiler's sake) */
        __m512 kx[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
#pragma GCC unroll 4
        for (int k = 0; k < NG; k++) kx[k] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m[k], c[k] + (size_t)d * bs));
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
#pragma GCC unroll 4
            for (int k = 0; k < NG; k++) acc[r][k] = fmadd_b32(EB, acc[r][k], kx[k], qt + (size_t)d * NR + r);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NG; k++) {
            const int at = kg[k].j0 - kg[0].j0, left = n[r] - at; /* row r's keys from this group's first */
            if (left > 0)
                _mm512_mask_storeu_ps(out[r] + at, lanes16(left < kg[k].n ? left : kg[k].n), _mm512_mul_ps(acc[r][k], vscale));
        }
}

/* Key groups a scores_cols call takes for nr rows: up to 16 accumulators
 * (of the 32 zmm registers; AVX2's rule, attention_walk.h, stops at 8 of
 * 16), so that a call's loop and prefetch issue serve more FMAs (8 rows x
 * 2 groups beat 8 x 1, warm and cold: docs/speed.md). */
#ifndef COLS512_ACC
#define COLS512_ACC 16
#endif
static inline int cols_groups512(int nr)
{
    const int g = COLS512_ACC / nr;
    return g > 4 ? 4 : g < 1 ? 1 : g;
}

/* scores_cols with constants: every (R, G) cols_groups512 can ask for,
 * either broadcast form. */
static K5 void scores_cols_nr(bool eb, int nr, int ng, const key_group *kg, size_t goff, size_t bs, const float *qt, int hd,
                              __m512 vscale, float *const *out, const int *n, const key_group *pf, int npf)
{
#define SC(EB, R, G) scores_cols(EB, R, G, kg, goff, bs, qt, hd, vscale, out, n, pf, npf)
#define SC_G(EB, R)                    \
    switch (ng) {                      \
    case 1: SC(EB, R, 1); break;       \
    case 2: SC(EB, R, 2); break;       \
    case 3: SC(EB, R, 3); break;       \
    default: SC(EB, R, 4); break;      \
    }
#define SC_R(EB)                       \
    switch (nr) {                      \
    case 1: SC_G(EB, 1); break;        \
    case 2: SC_G(EB, 2); break;        \
    case 3: SC_G(EB, 3); break;        \
    case 4: SC_G(EB, 4); break;        \
    case 5: SC_G(EB, 5); break;        \
    case 6: SC_G(EB, 6); break;        \
    case 7: SC_G(EB, 7); break;        \
    default: SC_G(EB, 8); break;       \
    }
    if (eb) SC_R(true) else SC_R(false)
#undef SC_R
#undef SC_G
#undef SC
}


/* Step 1 for k_cols: every row's scores, in groups of up to 16 keys of one
 * block, 4 groups a step; each segment's rows in chunks of up to 8. */
#ifndef ATTN_COLS_AHEAD
#define ATTN_COLS_AHEAD 4 /* groups prefetched ahead (>= 4): 8 KiB of a head of 64 dims at bs 16 (4, 8, 12 and
                              ATTN_PF_BYTES 16 KiB measured equal: bench-decode cold, 576 and 2,048 keys) */
#endif
static K5 void scores_by_cols(const attn_kv *kv, const attn_row *rows, const int *sg_r0, const int *sg_n, int n_sg,
                              int nmax, const float *const *qr, float *sc, size_t ncp, __m512 vscale, float *qt)
{
    const bool eb = kern_attn_bcast_embedded;
    const int hd = kv->head_dim;
    const size_t bs = kv->block_size, head = (size_t)hd * bs; /* halves of one head's columns */
    /* qt: each call's rows [a, a + nr) interleaved (scores_cols) at qt + a hd */
    for (int sg = 0; sg < n_sg; sg++)
        for (int a = sg_r0[sg]; a < sg_r0[sg + 1]; a += 8) {
            const int nr = sg_r0[sg + 1] - a < 8 ? sg_r0[sg + 1] - a : 8;
            for (int r = 0; r < nr; r++)
                for (int d = 0; d < hd; d++) qt[(size_t)a * hd + (size_t)d * nr + r] = qr[a + r][d];
        }
    const int n_groups = cols_n_groups(kv, 16, nmax);
    enum { STEP = 4, AHEAD = ATTN_COLS_AHEAD };
    for (int g0 = 0; g0 < n_groups; g0 += STEP) {
        key_group kg[STEP + AHEAD];
        int ng = 0, np = 0;
        for (int gi = g0; gi < g0 + STEP + AHEAD && gi < n_groups; gi++) {
            key_group x;
            if ((x.n = cols_group(kv, gi, 16, nmax, &x.col, &x.j0)) == 0) break;
            if (gi < g0 + STEP) kg[ng++] = x;
            else kg[STEP + np++] = x;
        }
        for (int sg = 0; sg < n_sg; sg++) {
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1];
            const size_t goff = (size_t)rows[r0].g * head;
            for (int a = r0; a < r1; a += 8) {
                const int nr = r1 - a < 8 ? r1 - a : 8, per = cols_groups512(nr);
                for (int k = 0; k < ng && kg[k].j0 < sg_n[sg]; k += per) {
                    const int nk = ng - k < per ? ng - k : per;
                    float *out[8];
                    int n[8];
                    for (int r = 0; r < nr; r++) {
                        out[r] = sc + (size_t)(a + r) * ncp + kg[k].j0;
                        n[r] = rows[a + r].n_ctx - kg[k].j0;
                    }
                    /* the same head's groups AHEAD later, spread over the dims (first row chunk only) */
                    const int p0 = k + AHEAD - STEP, npf = a > r0 || p0 >= np ? 0 : np - p0 < nk ? np - p0 : nk;
                    scores_cols_nr(eb, nr, nk, kg + k, goff, bs, qt + (size_t)a * hd, hd, vscale, out, n, kg + STEP + p0, npf);
                }
            }
        }
    }
}

/* ---------------------------------------------------- q8_0 keys: VNNI */

/* q8_0's block b of a key's head row as u8 (the quants + 128); its d in *d. */
K5I __m256i key_u8(const uint8_t *row, int b, uint16_t *d)
{
    const block_q8_0 *x = (const block_q8_0 *)row + b;
    *d = x->d;
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x->qs), _mm256_set1_epi8((char)0x80));
}

/* q4_0's block b of 16 keys as keys_i8 gives it, from a 16 x 4 transpose
 * of the raw bytes' dwords: raw dword j of a key holds elements 4j..4j+3
 * in its low nibbles and 16 + 4j.. in its high ones, so the nibbles are
 * split after the transpose, 4 vectors at a time, not per key. z[p]'s
 * 128-bit lane L holds key 4L + p, so the unpacks leave the keys in order. */
K5I void keys_q4(const uint8_t *const *k, size_t goff, int b, __m512i *t, __m512 *dk)
{
    __m512i z[4], u[4];
    uint16_t d[16];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const block_q4_0 *x[4];
#pragma GCC unroll 4
        for (int L = 0; L < 4; L++) {
            x[L] = (const block_q4_0 *)(k[4 * L + p] + goff) + b;
            d[4 * L + p] = x[L]->d;
        }
        z[p] = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)x[0]->qs));
        z[p] = _mm512_inserti32x4(z[p], _mm_loadu_si128((const __m128i *)x[1]->qs), 1);
        z[p] = _mm512_inserti32x4(z[p], _mm_loadu_si128((const __m128i *)x[2]->qs), 2);
        z[p] = _mm512_inserti32x4(z[p], _mm_loadu_si128((const __m128i *)x[3]->qs), 3);
    }
    *dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d));
    u[0] = _mm512_unpacklo_epi32(z[0], z[1]); /* per lane: dwords 0, 1 of keys p = 0, 1 */
    u[1] = _mm512_unpackhi_epi32(z[0], z[1]); /* dwords 2, 3 */
    u[2] = _mm512_unpacklo_epi32(z[2], z[3]);
    u[3] = _mm512_unpackhi_epi32(z[2], z[3]);
    const __m512i raw[4] = {_mm512_unpacklo_epi64(u[0], u[2]), _mm512_unpackhi_epi64(u[0], u[2]),
                            _mm512_unpacklo_epi64(u[1], u[3]), _mm512_unpackhi_epi64(u[1], u[3])};
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_and_si512(raw[j], m4);
        t[j + 4] = _mm512_and_si512(_mm512_srli_epi16(raw[j], 4), m4);
    }
}

/* Block b of 16 keys' q8_0 or q4_0 head rows (k[kk] + goff) as 8 vectors
 * of 16 int32 lanes: t[j] lane kk = elements 4j..4j+3 of key kk as u8 (for
 * vpdpbusd's unsigned operand): q8_0's quants + 128, q4_0's nibbles (the
 * value + 8), and dk lane kk = the key's d.
 * q8_0: k5_transpose16x8_epi32. q4_0: keys_q4. */
K5I void keys_i8(bool q4, const uint8_t *const *k, size_t goff, int b, __m512i *t, __m512 *dk)
{
    if (q4) {
        keys_q4(k, goff, b, t, dk);
        return;
    }
    __m512i z[8];
    uint16_t d[16];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        const __m256i a = key_u8(k[K5_TR_KEY(p)] + goff, b, &d[K5_TR_KEY(p)]);
        const __m256i c = key_u8(k[K5_TR_KEY(p) + 4] + goff, b, &d[K5_TR_KEY(p) + 4]);
        z[p] = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
    }
    *dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d));
    k5_transpose16x8_epi32(z, t);
}

/* keys_i8 of every block of 16 keys' head rows, kept for the row chunks
 * of a segment of more than 8 rows (a prefill tile), which would each
 * transpose them again. */
typedef struct {
    __m512i t[8][8];
    __m512 dk[8];
} key_tile;

/* NR (1..8) rows against 16 q8_0 (or q4 = q4_0) keys: per (row, key) and
 * block the exact int dot s_b = sum_i k_i q_i (vpdpbusd on k + 128, or k +
 * 8, minus 128 or 8 x sum_i q_i), then acc = sum_b (float)s_b x (d_k x d_q)
 * (b ascending, from 0, multiply then add) and acc x scale: the reference's
 * operations (attention.c), so the scores are the reference's bits, as the
 * AVX2 variant's are. q8[r]: row r's query as q8_0; qs[r][b] = the offset
 * (128 or 8) x the sum of its block b's quants. kt: the keys already
 * transposed, or NULL. */
K5I void scores_q8(bool q4, int NR, const uint8_t *const *kp, size_t goff, const block_q8_0 *const *q8, const int32_t (*qs)[8],
                   int nb, __m512 vscale, float *const *out, const int *n, const key_tile *kt)
{
    __m512 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i t[8];
        __m512 dk;
        if (kt) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) t[j] = kt->t[b][j];
            dk = kt->dk[b];
        } else {
            keys_i8(q4, kp, goff, b, t, &dk);
        }
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const int8_t *qb = q8[r][b].qs;
            int32_t w[8];
            memcpy(w, qb, 32);
            __m512i s0 = _mm512_setzero_si512(), s1 = s0; /* exact ints: two chains in any order */
#pragma GCC unroll 4
            for (int j = 0; j < 8; j += 2) {
                s0 = _mm512_dpbusd_epi32(s0, t[j], _mm512_set1_epi32(w[j]));
                s1 = _mm512_dpbusd_epi32(s1, t[j + 1], _mm512_set1_epi32(w[j + 1]));
            }
            const __m512i sb = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(qs[r][b]));
            const __m512 d = _mm512_mul_ps(dk, _mm512_set1_ps(kern_f16_lut[q8[r][b].d]));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(sb), d));
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
        if (n[r] > 0) _mm512_mask_storeu_ps(out[r], lanes16(n[r] < 16 ? n[r] : 16), _mm512_mul_ps(acc[r], vscale));
}

static K5 void scores_q8_nr(bool q4, int nr, const uint8_t *const *kp, size_t goff, const block_q8_0 *const *q8,
                            const int32_t (*qs)[8], int nb, __m512 vscale, float *const *out, const int *n, const key_tile *kt)
{
#define SQ8(R) (q4 ? scores_q8(true, R, kp, goff, q8, qs, nb, vscale, out, n, kt) : scores_q8(false, R, kp, goff, q8, qs, nb, vscale, out, n, kt))
    switch (nr) {
    case 1: SQ8(1); break;
    case 2: SQ8(2); break;
    case 3: SQ8(3); break;
    case 4: SQ8(4); break;
    case 5: SQ8(5); break;
    case 6: SQ8(6); break;
    case 7: SQ8(7); break;
    default: SQ8(8); break;
    }
#undef SQ8
}

/* ------------------------------------------------------------ the values */

/* The V sum of RR (1..8) rows over C (1..4) vectors of 16 dims from d0
 * (RR x C <= 16 accumulators),
 * the last one masked by klast (kind VK_F16; VK_Q8_0 and VK_Q4_0 rows have
 * a head dim that is a multiple of 32): for r < RR, c < C,
 *   o[r][d0 + 16c ..] (+)= sum_k w[r ATTN_VB + k] * v_k[d0 + 16c ..]   k = 0..n-1 ascending,
 * from 0 when first (else from o). Each V vector is converted once in a
 * register for the RR rows (q8_0, q4_0: d x q, exact); per output element
 * one FMA chain over k. */
enum { VK_F16, VK_Q8_0, VK_Q4_0 };
K5I void vtile(bool EB, int kind, int RR, int C, __mmask16 klast, bool first, float *const *o, const float *w, int n,
               const void *const *vp, int d0, const char *pf, int npf)
{
    assert(kind == VK_F16 || d0 % 32 == 0); /* q8_0, q4_0: whole blocks */
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
        __m512 v[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}; /* C used */
        if (kind == VK_Q8_0) { /* a block's 32 dims (d0 % 32 == 0), its scale looked up once */
#pragma GCC unroll 2
            for (int c = 0; c < C; c += 2) {
                const block_q8_0 *bl = (const block_q8_0 *)vp[k] + (d0 + 16 * c) / QK8_0;
                const __m512 d = _mm512_set1_ps(kern_f16_lut[bl->d]);
                v[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)bl->qs))), d);
                if (c + 1 < C)
                    v[c + 1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(bl->qs + 16)))), d);
            }
        } else if (kind == VK_Q4_0) { /* a block's 32 dims (d0 % 32 == 0): its 16 bytes widened once, the low
                                          nibbles then the high, (q - 8) d as q d - 8 d (both exact: same bits) */
#pragma GCC unroll 2
            for (int c = 0; c < C; c += 2) {
                const block_q4_0 *bl = (const block_q4_0 *)vp[k] + (d0 + 16 * c) / QK4_0;
                const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)bl->qs));
                const __m512 d = _mm512_set1_ps(kern_f16_lut[bl->d]), d8 = _mm512_mul_ps(d, _mm512_set1_ps(8.0f));
                v[c] = _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(x, _mm512_set1_epi32(0x0F))), d, d8);
                if (c + 1 < C) v[c + 1] = _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(x, 4)), d, d8);
            }
        } else {
            const uint16_t *vr = (const uint16_t *)vp[k] + d0;
#pragma GCC unroll 4
            for (int c = 0; c < C; c++)
                v[c] = _mm512_cvtph_ps(c == C - 1 ? _mm256_maskz_loadu_epi16(klast, vr + 16 * c)
                                                  : _mm256_loadu_si256((const __m256i *)(vr + 16 * c)));
        }
#pragma GCC unroll 8
        for (int r = 0; r < RR; r++) {
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) a[r][c] = fmadd_b32(EB, a[r][c], v[c], &w[r * ATTN_VB + k]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(o[r] + d0 + 16 * c, c == C - 1 ? klast : (__mmask16)0xFFFF, a[r][c]);
}

/* vtile with RR and C as constants (accumulators in registers), either
 * broadcast form. */
#define VT_CASES(EB, KIND) \
    switch (rr * 16 + c) { \
    case 0x11: vtile(EB, KIND, 1, 1, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x12: vtile(EB, KIND, 1, 2, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x13: vtile(EB, KIND, 1, 3, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x14: vtile(EB, KIND, 1, 4, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x21: vtile(EB, KIND, 2, 1, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x22: vtile(EB, KIND, 2, 2, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x23: vtile(EB, KIND, 2, 3, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x24: vtile(EB, KIND, 2, 4, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x31: vtile(EB, KIND, 3, 1, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x32: vtile(EB, KIND, 3, 2, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x33: vtile(EB, KIND, 3, 3, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x34: vtile(EB, KIND, 3, 4, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x41: vtile(EB, KIND, 4, 1, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x42: vtile(EB, KIND, 4, 2, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x43: vtile(EB, KIND, 4, 3, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x44: vtile(EB, KIND, 4, 4, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x51: vtile(EB, KIND, 5, 1, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x52: vtile(EB, KIND, 5, 2, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x61: vtile(EB, KIND, 6, 1, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x62: vtile(EB, KIND, 6, 2, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x71: vtile(EB, KIND, 7, 1, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x72: vtile(EB, KIND, 7, 2, klast, first, o, w, n, vp, d0, pf, npf); break; \
    case 0x81: vtile(EB, KIND, 8, 1, klast, first, o, w, n, vp, d0, pf, npf); break; \
    default: vtile(EB, KIND, 8, 2, klast, first, o, w, n, vp, d0, pf, npf); break; \
    }
#define VT_RC(name, KIND)                                                                                   \
    static K5 void name(bool eb, int rr, int c, __mmask16 klast, bool first, float *const *o, const float *w, int n, \
                        const void *const *vp, int d0, const char *pf, int npf)                           \
    {                                                                                                     \
        if (eb) VT_CASES(true, KIND) else VT_CASES(false, KIND)                                           \
    }
VT_RC(vtile_rc_f16, VK_F16)
VT_RC(vtile_rc_q8, VK_Q8_0)
VT_RC(vtile_rc_q4, VK_Q4_0)
#undef VT_CASES
#undef VT_RC

/* All of the head's dims for rr rows over n keys, in passes of 16
 * accumulators: 4 vectors (64 dims) for up to 4 rows, 2 (32 dims) for 5-8
 * (8 rows convert each V vector once for 8 rows rather than twice for 4);
 * pb/take: prefetches issued per pass. */
K5I int vdims_width(int rr) { return rr > 4 ? 32 : 64; }

K5I void vdims(int kind, int rr, bool first, float *const *o, const float *wt, int n, const void *const *vp, int hd,
               kv_pfb *pb, int take, vline_pf *lp)
{
    const int w = vdims_width(rr);
    for (int d0 = 0; d0 < hd; d0 += w) {
        const int left = hd - d0 < w ? hd - d0 : w, c = (left + 15) / 16;
        const __mmask16 klast = lanes16(left - 16 * (c - 1));
        const char *pf = NULL;
        const int npf = lp ? vline_span(lp, n, &pf) : 0;
        pf_take(pb, take);
        (kind == VK_Q8_0 ? vtile_rc_q8 : kind == VK_Q4_0 ? vtile_rc_q4 : vtile_rc_f16)(kern_attn_bcast_embedded, rr, c, klast, first, o, wt, n, vp, d0, pf, npf);
    }
}

/* The V sum of nr rows (o[r], p[r] at the tile's first key, 1 <= n[r] <=
 * ATTN_VB keys each) over the keys vp[0..max n): rows in chunks of up to 8
 * over their common keys, then each row alone over the keys only it has.
 * A chunk's weights are copied first into rows ATTN_VB floats apart (wt),
 * so that the tile reads them from one base register and constant offsets:
 * with a pointer per row the 8 pointers did not fit in the general
 * registers beside the tile's own and were reloaded every key. */
static K5 void vrows(int kind, int nr, bool first, float *const *o, const float *const *p, const int *n, const void *const *vp,
                     int hd, kv_pfb *pb, int quota, vline_pf *lp)
{
    float wt[8 * ATTN_VB] __attribute__((aligned(64)));
    static_assert(ATTN_VB % 16 == 0, "a row of wt is whole vectors");
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int rr = nr - r0 < 8 ? nr - r0 : 8, w = vdims_width(rr);
        int nmin = n[r0];
        for (int r = r0 + 1; r < r0 + rr; r++) nmin = n[r] < nmin ? n[r] : nmin;
        assert(nmin >= 1 && nmin <= ATTN_VB);
        for (int r = 0; r < rr && rr > 1; r++)
            for (int i = 0; i < nmin; i += 16) {
                const __mmask16 m = lanes16(nmin - i < 16 ? nmin - i : 16);
                _mm512_mask_storeu_ps(wt + r * ATTN_VB + i, m, _mm512_maskz_loadu_ps(m, p[r0 + r] + i));
            }
        const int passes = (hd + w - 1) / w, calls = ((nr - r0 + 8 - 1) / 8) * passes;
        const int take = pb && quota > 0 ? (quota + calls - 1) / calls : 0;
        vdims(kind, rr, first, o + r0, rr > 1 ? wt : p[r0], nmin, vp, hd, pb, take, lp); /* one row: any stride */
        quota -= take * passes;
        for (int r = r0; r < r0 + rr; r++) {
            if (n[r] == nmin) continue;
            assert(n[r] <= ATTN_VB);
            vdims(kind, 1, false, o + r, p[r] + nmin, n[r] - nmin, vp + nmin, hd, NULL, 0, NULL);
        }
    }
}

/* ------------------------------------------------------------- softmax */

/* The softmax of R rows of n scores each (x[r][0..n)) with the rows
 * interleaved, each row exactly as kern_avx512_elem.c's softmax_avx512
 * (the same operations in the same order per row: max, expf16 of x - max
 * stored and summed in double by acc16_pd, x / sum as x x (float)(1 /
 * sum)), then for an f16 cache each weight rounded to f16. One row at a
 * time, the exp pass waits on its two double chains and the max pass on
 * one max chain; R rows give R times the independent work, and the f16
 * rounding rides on the last pass instead of a pass of its own (about a
 * quarter off the softmax stage in cache: docs/speed.md). Row results do
 * not depend on R (row independence). With inv (q8_0 and q4_0 caches, whose
 * weights are not rounded) the last pass is skipped: x keeps the
 * exponentials, inv[r] = (float)(1 / sum), and the caller multiplies the V
 * sum by it (one pass over the scores fewer: ~3% of a decode call over
 * 2,048 keys in L2, bench_attn_decode). */
K5AI void softmax_group(int R, float *const *x, int n, bool f16, float *const *lse, float *inv)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 vm[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) vm[r] = ninf;
    int i = 0;
    for (; i + 16 <= n; i += 16)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) vm[r] = _mm512_max_ps(vm[r], _mm512_loadu_ps(x[r] + i));
    const __mmask16 kt = lanes16(n - i);
    if (i < n)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) vm[r] = _mm512_max_ps(vm[r], _mm512_mask_loadu_ps(ninf, kt, x[r] + i));
    __m512d lo[8], hi[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        vm[r] = _mm512_set1_ps(_mm512_reduce_max_ps(vm[r]));
        lo[r] = hi[r] = _mm512_setzero_pd();
    }
    for (i = 0; i + 16 <= n; i += 16)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 e = expf16(_mm512_sub_ps(_mm512_loadu_ps(x[r] + i), vm[r]));
            _mm512_storeu_ps(x[r] + i, e);
            acc16_pd(e, &lo[r], &hi[r]);
        }
    if (i < n)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 e = _mm512_maskz_mov_ps(kt, expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(kt, x[r] + i), vm[r])));
            _mm512_mask_storeu_ps(x[r] + i, kt, e);
            acc16_pd(e, &lo[r], &hi[r]);
        }
    __m512 vi[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        const double sum = sum_pd8(_mm512_add_pd(lo[r], hi[r]));
        vi[r] = _mm512_set1_ps((float)(1.0 / sum));
        if (lse[r]) *lse[r] = _mm_cvtss_f32(_mm512_castps512_ps128(vm[r])) + (float)log(sum);
    }
    if (inv) { /* the caller scales the V sum instead */
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) inv[r] = _mm_cvtss_f32(_mm512_castps512_ps128(vi[r]));
        return;
    }
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = lanes16(n - i < 16 ? n - i : 16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 w = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x[r] + i), vi[r]);
            if (f16) w = _mm512_cvtph_ps(_mm512_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT));
            _mm512_mask_storeu_ps(x[r] + i, k, w);
        }
    }
}

/* Step 2 of a call (also fp8's, attention_fp8_avx512.c): each row's
 * softmax over its own scores lo..n_ctx-1 (the keys before lo weigh 0),
 * the weights rounded to f16 for an f16 cache; rows with the same range (a
 * decode call's) 4 at a time. inv (or NULL): softmax_group's, row r's
 * factor at inv[r]. */
K5 void attn_softmax_rows_avx512(const attn_row *rows, int n_rows, float *sc, size_t ncp, bool f16, float softcap,
                                 float *kv_lse, float *inv)
{
    for (int r = 0; r < n_rows && softcap > 0; r++)
        attn_softcap(sc + (size_t)r * ncp + rows[r].lo, rows[r].n_ctx - rows[r].lo, softcap);
    for (int r0 = 0, r1; r0 < n_rows; r0 = r1) {
        const int lo = rows[r0].lo, n = rows[r0].n_ctx;
        for (r1 = r0 + 1; r1 < n_rows && r1 < r0 + 4 && rows[r1].lo == lo && rows[r1].n_ctx == n; r1++) {}
        float *x[4], *lse[4];
        for (int r = r0; r < r1; r++) {
            lse[r - r0] = kv_lse ? kv_lse + r : NULL;
            x[r - r0] = sc + (size_t)r * ncp + lo;
            for (int j = 0; j < lo; j++) sc[(size_t)r * ncp + j] = 0;
        }
        switch (r1 - r0) {
        case 1: softmax_group(1, x, n - lo, f16, lse, inv ? inv + r0 : NULL); break;
        case 2: softmax_group(2, x, n - lo, f16, lse, inv ? inv + r0 : NULL); break;
        case 3: softmax_group(3, x, n - lo, f16, lse, inv ? inv + r0 : NULL); break;
        default: softmax_group(4, x, n - lo, f16, lse, inv ? inv + r0 : NULL); break;
        }
    }
}

/* ---------------------------------------------------------------- a call */


K5 void attn_paged_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                          size_t scratch_floats)
{
    const uint32_t t = kv->kv_type;
    if (!kv->reader && attn_is_kivi(t)) { /* sealed KIVI blocks in place: attention_kivi_avx512.c */
        attn_kivi_avx512(kv, rows, n_rows, scale, scratch, scratch_floats);
        return;
    }
    if (!kv->reader && attn_is_fp8(t)) { /* fp8 rows in place: attention_fp8_avx512.c */
        attn_fp8_avx512(kv, rows, n_rows, scale, scratch, scratch_floats);
        return;
    }
    if (kv->reader || (!(t == DT_F16 && kv->k_cols) && t != DT_Q8_0 && t != DT_Q4_0)) { /* one variant per cache type: AVX2's */
        attn_paged_avx2(kv, rows, n_rows, scale, scratch, scratch_floats);
        return;
    }
    const int hd = kv->head_dim, nb = hd / QK8_0;
    assert(hd % 8 == 0 && n_rows >= 1 && n_rows <= ATTN_ROWS_CAP);
    const bool i8 = t == DT_Q8_0 || t == DT_Q4_0; /* keys dotted in int8 against a q8_0 query */
    assert(!i8 || (hd % QK8_0 == 0 && nb <= 8));
    int nmax = 0;
    for (int r = 0; r < n_rows; r++) {
        assert(rows[r].n_ctx >= 1 && rows[r].lo >= 0 && rows[r].lo < rows[r].n_ctx);
        nmax = rows[r].n_ctx > nmax ? rows[r].n_ctx : nmax;
    }
    /* the segments (adjacent rows of one KV head): [sg_r0[s], sg_r0[s + 1]), their largest n_ctx */
    int sg_r0[ATTN_ROWS_CAP + 1], sg_n[ATTN_ROWS_CAP], n_sg = 0;
    for (int r0 = 0, r1; r0 < n_rows; r0 = r1, n_sg++) {
        sg_r0[n_sg] = r0;
        sg_n[n_sg] = 0;
        for (r1 = r0; r1 < n_rows && rows[r1].g == rows[r0].g; r1++)
            sg_n[n_sg] = rows[r1].n_ctx > sg_n[n_sg] ? rows[r1].n_ctx : sg_n[n_sg];
    }
    sg_r0[n_sg] = n_rows;
    const size_t hdp = attn_round8((size_t)hd), ncp = attn_round8((size_t)nmax);
    assert(attn_layout_floats((size_t)n_rows, (size_t)nmax, (size_t)hd) <= scratch_floats);
    (void)scratch_floats;
    float *qf = scratch, *sc = qf + (size_t)n_rows * hdp;

    /* queries in K's dot type (ggml's), row r at qf + r hdp: rounded to
     * f16, or quantized to q8_0 (the reference's bytes; 34/32 hd bytes fit)
     * with the key's offset (128 for q8_0, 8 for q4_0) x each block's sum
     * of quants in q8s */
    const float *qr[ATTN_ROWS_CAP];
    const block_q8_0 *q8[ATTN_ROWS_CAP];
    int32_t q8s[ATTN_ROWS_CAP][8];
    for (int r = 0; r < n_rows; r++) {
        float *d = qf + (size_t)r * hdp;
        qr[r] = d;
        q8[r] = (const block_q8_0 *)d;
        if (i8) {
            attn_query_q8(rows[r].q, (block_q8_0 *)d, hd, t == DT_Q8_0 ? 128 : 8, q8s[r]);
            continue;
        }
        for (int i = 0; i < hd; i += 16) {
            const __mmask16 m = lanes16(hd - i < 16 ? hd - i : 16);
            const __m512 v = _mm512_maskz_loadu_ps(m, rows[r].q + i);
            _mm512_mask_storeu_ps(d + i, m, _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
        }
    }

    /* 1. scores. q8_0 / q4_0 rows: KS keys at a time (keys past nmax
     * repeat the last one), heads visited key step by key step as the AVX2
     * variant does (a decode call over several heads then reads each cache
     * row's heads together); each segment's rows in chunks of up to 8, 16
     * keys a call. f16 columns: scores_by_cols. */
    enum { KS = 16 }; /* 64 measured 1.2x the time without GQA (12 layers x 6 heads, cache in L3): a
                         head's column of 64 rows at a time instead of every head of 16 rows */
    const __m512 vscale = _mm512_set1_ps(scale);
    int gmin = rows[0].g, gmax = rows[0].g;
    for (int r = 1; r < n_rows; r++) {
        gmin = rows[r].g < gmin ? rows[r].g : gmin;
        gmax = rows[r].g > gmax ? rows[r].g : gmax;
    }
    const int pf_n = nmax; /* prefetch always (see attention_avx2.c) */
    kv_pf pk = kv_pf_at(kv, kv->k_base, pf_n, gmin, gmax);
    kv_pf pv = kv_pf_at(kv, kv->v_base, pf_n, gmin, gmax);
    const int pfd = kv_pf_keys(n_rows, gmin, gmax, kv_key_bytes(kv, gmin, gmax), 16, 64); /* keys ahead */
    const bool vlines = kv_head_major(kv); /* V by vline_pf (pv then prefetches nothing) */
    vline_pf lv = vline_at(kv, kv->v_base, nmax, gmin, gmax);
    if (!i8) {
        assert((size_t)n_rows * hd <= (8 + ATTN_VB) * hdp); /* the interleaved queries in kt and vt */
        scores_by_cols(kv, rows, sg_r0, sg_n, n_sg, nmax, qr, sc, ncp, vscale, sc + (size_t)n_rows * ncp);
        if (vlines) vline_until(&lv, pfd); /* the first values */
        else pf_until(&pv, pfd);
    } else {
        pf_until(&pk, pfd);
    }
    kv_cursor kc = cursor_at(kv, kv->k_base, 0);
    static_assert(KS == 16, "a key_tile is 16 keys");
    key_tile kt;
    for (int j0 = 0; i8 && j0 < nmax; j0 += KS) {
        kv_pfb pkb; /* not {0}: zeroing its array costs more than the rest of the bookkeeping */
        pkb.n = pkb.next = 0;
        pf_collect(&pk, j0 + KS + pfd, &pkb, KS);
        if (pkb.n < KS) pf_collect(&pv, pfd, &pkb, KS); /* the first values, over the last key steps */
        const int pk_take = (pkb.n + n_sg - 1) / n_sg; /* rows a call issues (a segment's share) */
        const uint8_t *krow[KS];
        for (int k = 0; k < KS; k++) {
            krow[k] = cursor_row(&kc);
            if (j0 + k + 1 < nmax) cursor_next(&kc); /* else stay on the last key */
        }
        for (int sg = 0; sg < n_sg; sg++) {
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1];
            if (sg_n[sg] <= j0) continue;
            const size_t goff = (size_t)rows[r0].g * kv->head_bytes;
            const int gv = sg_n[sg] - j0 < KS ? sg_n[sg] - j0 : KS; /* keys any row of the segment needs */
            const key_tile *ktp = NULL;
            if (r1 - r0 > 8) {
                for (int b = 0; b < nb; b++) keys_i8(t == DT_Q4_0, krow, goff, b, kt.t[b], &kt.dk[b]);
                ktp = &kt;
            }
            for (int a = r0; a < r1; a += 8) {
                const int nr = r1 - a < 8 ? r1 - a : 8;
                for (int k0 = 0; k0 < gv; k0 += 16) {
                    float *out[8];
                    int n[8];
                    for (int r = 0; r < nr; r++) {
                        out[r] = sc + (size_t)(a + r) * ncp + j0 + k0;
                        n[r] = rows[a + r].n_ctx - (j0 + k0);
                    }
                    pf_take(&pkb, pk_take);
                    scores_q8_nr(t == DT_Q4_0, nr, krow + k0, goff, q8 + a, q8s + a, nb, vscale, out, n, ktp);
                }
            }
        }
        pf_take(&pkb, KS); /* what is left */
    }

    /* 2. softmax */
    float inv[ATTN_ROWS_CAP];
    attn_softmax_rows_avx512(rows, n_rows, sc, ncp, t == DT_F16, kv->softcap, kv->lse, t == DT_F16 ? NULL : inv);
    /* 3. values, ATTN_VB keys at a time, heads visited as in 1 */
    kv_cursor vc = cursor_at(kv, kv->v_base, 0);
    for (int j0 = 0; j0 < nmax; j0 += ATTN_VB) {
        const int jn = nmax - j0 < ATTN_VB ? nmax - j0 : ATTN_VB;
        kv_pfb pvb;
        pvb.n = pvb.next = 0, pvb.len = 0;
        if (vlines) vline_aim(&lv, j0 + jn + pfd); /* handed out by the tiles */
        else pf_collect(&pv, j0 + jn + pfd, &pvb, ATTN_VB);
        const int pv_share = (pvb.n + n_sg - 1) / n_sg;
        const uint8_t *vrow[ATTN_VB];
        cursor_rows(&vc, vrow, jn);
        for (int sg = 0; sg < n_sg; sg++) {
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1], sn = sg_n[sg];
            if (sn <= j0) continue;
            const int sjn = sn - j0 < jn ? sn - j0 : jn;
            const size_t goff = (size_t)rows[r0].g * kv->head_bytes;
            const void *vp[ATTN_VB];
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
            vrows(t == DT_Q8_0 ? VK_Q8_0 : t == DT_Q4_0 ? VK_Q4_0 : VK_F16, nr, j0 == 0, op, pp, np, vp, hd, &pvb, pv_share,
                  vlines ? &lv : NULL);
        }
        pf_take(&pvb, ATTN_VB);
        if (vlines) vline_until(&lv, j0 + jn + pfd); /* what the tiles left */
    }
    for (int r = 0; t != DT_F16 && r < n_rows; r++)
        for (int i = 0; i < hd; i += 16) {
            const __mmask16 m = lanes16(hd - i < 16 ? hd - i : 16);
            _mm512_mask_storeu_ps(rows[r].out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, rows[r].out + i), _mm512_set1_ps(inv[r])));
        }
}

#else /* not x86 */

bool attn_avx512_available(void) { return false; }

void attn_paged_avx512(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                       size_t scratch_floats)
{
    attn_paged_ref(kv, rows, n_rows, scale, scratch, scratch_floats);
}

#endif
