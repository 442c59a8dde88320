/* attention_avx2.c - paged attention, AVX2 + FMA + F16C variant; see
 * attention.h for the contract and attention_impl.h for the scratch layout.
 *
 * The build has no -march flags: every function here carries
 * target("avx2,fma,f16c") and runs only after attn_avx2_available().
 *
 * A call gets R rows (query vectors) of one sequence, grouped in segments of
 * adjacent rows that read the same KV head: the heads of a GQA group and/or
 * several prefill tokens. It runs in three sweeps, each tiled so that a K or
 * V row is fetched from the cache and converted once per call, then used by
 * every row of the segment (the idea of batching queries against a K/V
 * tile, as flash-attention and vLLM do). Segments are visited key group by
 * key group, so that a decode call over several KV heads reads each cache
 * row's heads together: one contiguous span instead of one head's column at
 * a time (about twice the read rate from RAM: docs/speed.md):
 *
 *   1. scores: keys in groups of 8. f32/f16/bf16/fp8 keys are read in
 *      place and converted in registers: a single row runs its 8 dot
 *      products in 8 accumulators of 8 lanes (dot8); a GQA segment loads
 *      each key's row once and runs one accumulator per row (scores_rows),
 *      then transposes; both reduce every (row, key) by the same hadd tree.
 *      q8_0/q4_0 keys go to an int8 tile (kt) once per segment and are dotted
 *      in int8 against the q8_0 query (scores8_i8): exact int sums per block.
 *   2. softmax per row (kern avx2 softmax: max, vector expf, sum in double),
 *      then the weights rounded to f16 for an f16 cache. For e4m3 the block
 *      scales (x 256, see ld8) multiply the scores before and the weights
 *      after the softmax, instead of every element (powers of two: exact).
 *   3. values: keys in tiles of ATTN_VB. The rows of a segment go in
 *      chunks of up to 4, dims in chunks of C vectors (about 8
 *      accumulators: 4 rows x 2, 2 x 4, 1 x 8): each V vector is loaded and
 *      converted once in a register for the chunk's rows, whatever the
 *      dtype (e4m3 in its 4-op form when no value of the tile is a NaN
 *      code, e4m3_kind). An f32 copy of the tile, converted once for the
 *      segment and reloaded by each row, cost more than converting each
 *      vector for up to 4 rows, even for q4_0 (the FK_ kinds below). Each
 *      output element is one FMA chain p_j * v_j, j ascending.
 *
 * Both sweeps prefetch the cache rows ~8 KiB ahead (see kv_pf; the call's
 * heads of each row):
 * a block's rows are contiguous only within the block,
 * so the hardware prefetchers restart at every block. The prefetches go
 * out a row at a time between the keys' work, never in a burst (kv_pfb).
 * Values grouped by head (the pool's f16 values) are prefetched as each
 * block's run of the call's heads instead (vline_pf, attention_walk.h: one
 * line range a block, a line per key of the V tiles).
 *
 * Row independence (attention.h): whatever else shares the call, a row sees
 * the same float values (conversions of f16/bf16/q8_0/q4_0/fp8 to f32 are
 * exact, so "converted in a tile" and "read in place" agree) and the same operation
 * order: one FMA chain over the dims per key then the same reduction tree;
 * the softmax over exactly its n_ctx scores; one FMA chain over j ascending
 * per output dim. Lanes of a score group past a row's n_ctx are computed but
 * never read, so the group's other keys do not matter.
 *
 * Exact two-pass softmax rather than flash's online one: llama.cpp's
 * non-flash path rounds the *normalized* weights to f16 before they weight
 * V, which needs the sum before the V sweep. The scores of a call take
 * R x n_ctx floats (never n_ctx x n_ctx).
 */
#include "kernels/attention.h"

#include <assert.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/kern_impl.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

#if defined(__x86_64__) || defined(__i386__)

#include "kernels/attention_walk.h"

#include <immintrin.h>

#define KA __attribute__((target("avx2,fma,f16c")))
#define KAI static inline __attribute__((always_inline, target("avx2,fma,f16c")))

bool attn_avx2_available(void) { return kern_cpu_has_avx2() && kern_vt_avx2() != NULL; }

/* How a cache row's elements become f32 in registers: every dtype is read
 * in place (conversions are exact, d x q for the quants). A converted f32
 * copy of a tile, once shared by a GQA segment's rows, cost more in stores
 * and reloads than converting each vector for up to 4 rows (V in L2,
 * PAGELLM_KERNELS=avx2, Zen 5: e4m3 -16%, q8_0 -19%, q4_0 -16% a call;
 * docs/long-context.md). FK_Q4_0 is read by vtile only (its scores are
 * int8 dots). */
enum { FK_F32, FK_F16, FK_BF16, FK_Q8_0, FK_E4M3, FK_E5M2, FK_E4M3_NONAN, FK_Q4_0 };

/* Block b's scale of a q8_0 / q4_0 head row (blocks of 32 elements). */
KAI float quant_d(int kind, const void *p, int b)
{
    return _cvtsh_ss(kind == FK_Q8_0 ? ((const block_q8_0 *)p)[b].d : ((const block_q4_0 *)p)[b].d);
}

/* Elements i .. i + 7 (i a multiple of 8) of block b as int8 in the low
 * 8 bytes: q8_0's quants; q4_0's nibble - 8, element i < 16 the low nibble
 * of byte i, 16 + i the high one. */
KAI __m128i quant8(int kind, const void *p, int b, int i)
{
    if (kind == FK_Q8_0) return _mm_loadl_epi64((const __m128i *)(((const block_q8_0 *)p)[b].qs + i));
    __m128i x = _mm_loadl_epi64((const __m128i *)(((const block_q4_0 *)p)[b].qs + i % 16));
    if (i >= 16) x = _mm_srli_epi16(x, 4);
    return _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
}

/* The kind of a cache dtype (FK_E4M3 before e4m3_kind's check). */
static inline int fk_of(uint32_t t)
{
    return t == DT_F16 ? FK_F16 : t == DT_BF16 ? FK_BF16 : t == DT_Q8_0 ? FK_Q8_0 : t == DT_Q4_0 ? FK_Q4_0
         : t == ATTN_KV_FP8_E4M3 ? FK_E4M3 : t == ATTN_KV_FP8_E5M2 ? FK_E5M2 : FK_F32;
}

KAI __m256 ld8(int kind, const void *p, int i)
{
    if (kind == FK_F32) return _mm256_loadu_ps((const float *)p + i);
    if (kind == FK_Q8_0) /* d x q, exact in f32 (quant_dequant_row's values) */
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(quant8(FK_Q8_0, p, i / 32, i % 32))),
                             _mm256_set1_ps(quant_d(FK_Q8_0, p, i / 32)));
    if (kind == FK_E5M2) /* the top byte of a half */
        return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)((const uint8_t *)p + i))), 8));
    if (kind == FK_E4M3) { /* the half trick (attention_impl.h) without the x 256, which the block scale carries */
        const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)((const uint8_t *)p + i)));
        __m128i w = _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16((short)0xBF80)); /* sign, 7 bits at 13..7 */
        const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7F80)), _mm_set1_epi16(0x3F80));
        w = _mm_or_si128(w, _mm_and_si128(nan, _mm_set1_epi16(0x4000))); /* S.1111.111 -> a half NaN */
        return _mm256_cvtph_ps(w);
    }
    if (kind == FK_E4M3_NONAN) { /* FK_E4M3 on rows known to hold no NaN code (e4m3_kind) */
        const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)((const uint8_t *)p + i)));
        return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16((short)0xBF80)));
    }
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (kind == FK_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* FK_E4M3, or FK_E4M3_NONAN when none of the n head rows r[k] (hd bytes)
 * holds a NaN code (S.1111.111): the two read the same values then, and the
 * check (4 ops a 32 bytes) costs less than the NaN repair (4 ops a 8). */
KAI int e4m3_kind(const void *const *r, int n, int hd)
{
    const __m256i hi = _mm256_set1_epi8((char)0x80), ff = _mm256_set1_epi8((char)0xFF);
    __m256i any = _mm256_setzero_si256();
    int i0 = 0;
    if (hd % 32 == 0) {
        for (int k = 0; k < n; k++)
            for (int i = 0; i < hd; i += 32) {
                const __m256i b = _mm256_loadu_si256((const __m256i *)((const uint8_t *)r[k] + i));
                any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_or_si256(b, hi), ff));
            }
        i0 = hd;
    }
    for (int k = 0; k < n; k++)
        for (int i = i0; i < hd; i++) if ((((const uint8_t *)r[k])[i] & 0x7F) == 0x7F) return FK_E4M3;
    return _mm256_testz_si256(any, any) ? FK_E4M3_NONAN : FK_E4M3;
}

/* kv_cursor, kv_pf, kv_pfb, pf_*, segment_*: attention_walk.h */

/* Lane x = the sum of a[x]'s lanes, ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)),
 * for every x: the hadd tree (the same order whichever x). */
KAI __m256 hsum8_ps(const __m256 *a)
{
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* The 8 dot products q . k[0..8) as one vector: per key, one FMA chain of 8
 * lanes over the dims in order, then lanes summed as
 * ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) (the hadd tree). */
KAI __m256 dot8(int kind, const void *const *k, const float *q, int hd)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int i = 0; i < hd; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(ld8(kind, k[0], i), qv, a0);
        a1 = _mm256_fmadd_ps(ld8(kind, k[1], i), qv, a1);
        a2 = _mm256_fmadd_ps(ld8(kind, k[2], i), qv, a2);
        a3 = _mm256_fmadd_ps(ld8(kind, k[3], i), qv, a3);
        a4 = _mm256_fmadd_ps(ld8(kind, k[4], i), qv, a4);
        a5 = _mm256_fmadd_ps(ld8(kind, k[5], i), qv, a5);
        a6 = _mm256_fmadd_ps(ld8(kind, k[6], i), qv, a6);
        a7 = _mm256_fmadd_ps(ld8(kind, k[7], i), qv, a7);
    }
    const __m256 a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    return hsum8_ps(a);
}

/* The scores of NR rows (GQA heads of one KV head) against 8 keys, each
 * key's K row loaded and converted once for all of them: per key, NR FMA
 * chains over the dims, reduced by hsum8_ps into one vector over the rows,
 * then the 8 x 8 block transposed so that each row stores its 8 scores. A
 * (row, key) score is the very float sequence of dot8 (k x q + acc, dims in
 * order, the same tree): one row alone and the same row in a group agree. */
KAI void scores_rows(int NR, int kind, const void *const *kp, const float *const *q, int hd, __m256 vscale,
                     float *const *out, kv_pfb *pb)
{
    __m256 res[8];
    for (int k = 0; k < 8; k++) {
        pf_take(pb, 1);
        __m256 a[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) a[r] = _mm256_setzero_ps();
        for (int i = 0; i < hd; i += 8) {
            const __m256 kc = ld8(kind, kp[k], i);
#pragma GCC unroll 8
            for (int r = 0; r < NR; r++) a[r] = _mm256_fmadd_ps(kc, _mm256_loadu_ps(q[r] + i), a[r]);
        }
        res[k] = hsum8_ps(a);
    }
    /* res[k] lane r -> row r lane k */
    const __m256 t0 = _mm256_unpacklo_ps(res[0], res[1]), t1 = _mm256_unpackhi_ps(res[0], res[1]);
    const __m256 t2 = _mm256_unpacklo_ps(res[2], res[3]), t3 = _mm256_unpackhi_ps(res[2], res[3]);
    const __m256 t4 = _mm256_unpacklo_ps(res[4], res[5]), t5 = _mm256_unpackhi_ps(res[4], res[5]);
    const __m256 t6 = _mm256_unpacklo_ps(res[6], res[7]), t7 = _mm256_unpackhi_ps(res[6], res[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    const __m256 o[8] = {
        _mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
        _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
        _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
        _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31),
    };
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
        if (out[r]) _mm256_storeu_ps(out[r], _mm256_mul_ps(o[r], vscale));
}

/* scores_rows with NR and kind as constants (accumulators in registers). */
#define SROWS_NR(kind)                                                                            \
    switch (nr) {                                                                                 \
    case 2: scores_rows(2, kind, kp, q, hd, vscale, out, pb); break;                              \
    case 3: scores_rows(3, kind, kp, q, hd, vscale, out, pb); break;                              \
    case 4: scores_rows(4, kind, kp, q, hd, vscale, out, pb); break;                              \
    case 5: scores_rows(5, kind, kp, q, hd, vscale, out, pb); break;                              \
    case 6: scores_rows(6, kind, kp, q, hd, vscale, out, pb); break;                              \
    case 7: scores_rows(7, kind, kp, q, hd, vscale, out, pb); break;                              \
    default: scores_rows(8, kind, kp, q, hd, vscale, out, pb); break;                             \
    }

static KA void scores_rows_any(int kind, int nr, const void *const *kp, const float *const *q, int hd, __m256 vscale,
                               float *const *out, kv_pfb *pb)
{
    if (kind == FK_F16) { SROWS_NR(FK_F16) }
    else if (kind == FK_BF16) { SROWS_NR(FK_BF16) }
    else if (kind == FK_Q8_0) { SROWS_NR(FK_Q8_0) }
    else if (kind == FK_E4M3) { SROWS_NR(FK_E4M3) }
    else if (kind == FK_E4M3_NONAN) { SROWS_NR(FK_E4M3_NONAN) }
    else if (kind == FK_E5M2) { SROWS_NR(FK_E5M2) }
    else { SROWS_NR(FK_F32) }
}

/* The V sum of RR rows over C vectors of dims: for r < RR, c < C,
 *   o[r][d0 + 8c ..] (+)= sum_k p[r][k] * v_k[d0 + 8c ..]   k = 0..n-1 ascending,
 * starting from 0 when first (else from o). Each V vector is loaded and
 * converted once, in a register, for the RR rows (no f32 copy of the tile);
 * RR x C accumulators stay in registers. Per output element it is one FMA
 * chain over k ascending, whatever RR and C: the tiling only decides which
 * (row, dims) share a conversion. */
KAI void vtile(int RR, int C, int kind, bool first, float *const *o, const float *const *p, int n,
               const void *const *vp, int d0, const char *pf, int npf)
{
    __m256 a[4][8];
#pragma GCC unroll 4
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) a[r][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(o[r] + d0 + 8 * c);
    for (int k = 0; k < n; k++) {
        if (k < npf) _mm_prefetch(pf + 64 * (size_t)k, ATTN_PF_HINT); /* vline_pf's span: a line a key */
        __m256 v[8];
        if (kind == FK_Q8_0 || kind == FK_Q4_0) { /* d x q, each block's d converted once: d0 is a
                                                     multiple of 8 C, so C <= 4 vectors lie in one
                                                     block and C = 8 in two */
            const int b0 = d0 / 32, e0 = C >= 4 ? 0 : d0 % 32; /* e0 a constant for C >= 4 */
            __m256 d = _mm256_set1_ps(quant_d(kind, vp[k], b0));
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                if (c == 4) d = _mm256_set1_ps(quant_d(kind, vp[k], b0 + 1));
                const int e = e0 + 8 * c;
                v[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(quant8(kind, vp[k], b0 + e / 32, e % 32))), d);
            }
        } else {
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) v[c] = ld8(kind, vp[k], d0 + 8 * c);
        }
#pragma GCC unroll 4
        for (int r = 0; r < RR; r++) {
            const __m256 pk = _mm256_broadcast_ss(p[r] + k);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) a[r][c] = _mm256_fmadd_ps(pk, v[c], a[r][c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) _mm256_storeu_ps(o[r] + d0 + 8 * c, a[r][c]);
}

/* vtile with RR, C and kind as constants (accumulators in registers): RR
 * rows, as many dims as fill about 8 accumulators (2 FMA a cycle, latency 4). */
#define VT_RC(kind)                                                                               \
    switch (rr * 16 + c) {                                                                        \
    case 0x18: vtile(1, 8, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x14: vtile(1, 4, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x12: vtile(1, 2, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x11: vtile(1, 1, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x24: vtile(2, 4, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x22: vtile(2, 2, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x21: vtile(2, 1, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x32: vtile(3, 2, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x31: vtile(3, 1, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    case 0x42: vtile(4, 2, kind, first, o, p, n, vp, d0, pf, npf); break;                                  \
    default: vtile(4, 1, kind, first, o, p, n, vp, d0, pf, npf); break;                                    \
    }

static KA void vtile_rc(int kind, int rr, int c, bool first, float *const *o, const float *const *p, int n,
                        const void *const *vp, int d0, const char *pf, int npf)
{
    if (kind == FK_F16) { VT_RC(FK_F16) }
    else if (kind == FK_BF16) { VT_RC(FK_BF16) }
    else if (kind == FK_Q8_0) { VT_RC(FK_Q8_0) }
    else if (kind == FK_Q4_0) { VT_RC(FK_Q4_0) }
    else if (kind == FK_E4M3) { VT_RC(FK_E4M3) }
    else if (kind == FK_E4M3_NONAN) { VT_RC(FK_E4M3_NONAN) }
    else if (kind == FK_E5M2) { VT_RC(FK_E5M2) }
    else { VT_RC(FK_F32) }
}

/* The V sum of nr rows (o[r], p[r] at the tile's first key, n[r] >= 1 keys
 * of the tile each) over the keys vp[0..max n): rows in chunks of up to 4
 * over their common keys, then each row alone over the keys only it has
 * (its chains go on in k order). */
static KA void vrows(int kind, int nr, bool first, float *const *o, const float *const *p, const int *n,
                     const void *const *vp, int hd, kv_pfb *pb, int quota, vline_pf *lp)
{
    /* f32 rows (an F32 cache) have no conversion to share: one row
     * at a time, whose loads fold into the FMAs (as before the register
     * tiles; callgrind, q8_0 GQA at 830 keys: 1.09 -> 1.05 M instructions a
     * call) */
    const int rmax = kind == FK_F32 ? 1 : 4;
    for (int r0 = 0; r0 < nr; r0 += rmax) {
        const int rr = nr - r0 < rmax ? nr - r0 : rmax;
        int nmin = n[r0];
        for (int r = r0 + 1; r < r0 + rr; r++) nmin = n[r] < nmin ? n[r] : nmin;
        const int cw = rr == 1 ? 8 : rr == 2 ? 4 : 2; /* dim vectors a pass: about 8 accumulators */
        /* the quota spread over this chunk's passes and the chunks left */
        const int calls = ((nr - r0 + rr - 1) / rr) * ((hd + 8 * cw - 1) / (8 * cw));
        const int take = pb && quota > 0 ? (quota + calls - 1) / calls : 0;
        for (int d0 = 0; d0 < hd;) {
            int c = cw;
            while (8 * c > hd - d0) c /= 2;
            pf_take(pb, take);
            quota -= take;
            const char *pf = NULL;
            const int npf = lp ? vline_span(lp, nmin, &pf) : 0;
            vtile_rc(kind, rr, c, first, o + r0, p + r0, nmin, vp, d0, pf, npf);
            d0 += 8 * c;
        }
        for (int r = r0; r < r0 + rr; r++) {
            if (n[r] == nmin) continue;
            const float *pr = p[r] + nmin;
            for (int d0 = 0; d0 < hd;) {
                int c = 8;
                while (8 * c > hd - d0) c /= 2;
                vtile_rc(kind, 1, c, false, o + r, &pr, n[r] - nmin, vp + nmin, d0, NULL, 0);
                d0 += 8 * c;
            }
        }
    }
}

static KA void scores8(int kind, float *s, const void *const *kp, const float *q, int hd, __m256 vscale)
{
    if (kind == FK_F16) _mm256_storeu_ps(s, _mm256_mul_ps(dot8(FK_F16, kp, q, hd), vscale));
    else if (kind == FK_BF16) _mm256_storeu_ps(s, _mm256_mul_ps(dot8(FK_BF16, kp, q, hd), vscale));
    else if (kind == FK_Q8_0) _mm256_storeu_ps(s, _mm256_mul_ps(dot8(FK_Q8_0, kp, q, hd), vscale));
    else if (kind == FK_E4M3) _mm256_storeu_ps(s, _mm256_mul_ps(dot8(FK_E4M3, kp, q, hd), vscale));
    else if (kind == FK_E4M3_NONAN) _mm256_storeu_ps(s, _mm256_mul_ps(dot8(FK_E4M3_NONAN, kp, q, hd), vscale));
    else if (kind == FK_E5M2) _mm256_storeu_ps(s, _mm256_mul_ps(dot8(FK_E5M2, kp, q, hd), vscale));
    else _mm256_storeu_ps(s, _mm256_mul_ps(dot8(FK_F32, kp, q, hd), vscale));
}

/* ------------------------------------------- q8_0 / q4_0 keys: int8 dots */

/* The int8 form of 8 keys' head rows (q8_0 as stored, q4_0 unpacked to
 * nibble - 8), block by block: kq[(k * nb + b) * 32 + i], their absolute
 * values at kq + 8 * nb * 32 (the same layout), and each block's scale as a
 * vector over the 8 keys: kd[b] lane k = d of key k, block b. Built once
 * per key group and segment, read by every row of the segment. */
KAI void keys_to_i8(uint32_t t, const uint8_t *const *krow, size_t goff, int nb, int8_t *kq, __m256 *kd)
{
    for (int b = 0; b < nb; b++) {
        uint16_t d[8];
        for (int k = 0; k < 8; k++) {
            int8_t *dst = kq + ((size_t)k * nb + b) * 32;
            if (t == DT_Q8_0) {
                const block_q8_0 *x = (const block_q8_0 *)(krow[k] + goff) + b;
                d[k] = x->d;
                const __m256i v = _mm256_loadu_si256((const __m256i *)x->qs);
                _mm256_storeu_si256((__m256i *)dst, v);
                _mm256_storeu_si256((__m256i *)(dst + 8 * nb * 32), _mm256_sign_epi8(v, v));
            } else {
                const block_q4_0 *x = (const block_q4_0 *)(krow[k] + goff) + b;
                d[k] = x->d;
                const __m128i raw = _mm_loadu_si128((const __m128i *)x->qs), m4 = _mm_set1_epi8(0x0F);
                const __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, m4), _mm_set1_epi8(8));
                const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_set1_epi8(8));
                const __m256i v = _mm256_set_m128i(hi, lo);
                _mm256_storeu_si256((__m256i *)dst, v);
                _mm256_storeu_si256((__m256i *)(dst + 8 * nb * 32), _mm256_sign_epi8(v, v));
            }
        }
        kd[b] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    }
}

/* Sum of each of 8 int32 vectors, as one vector (lane k = sum of m[k]).
 * Integer sums are exact, so the tree's order does not matter. */
KAI __m256i hsum8_epi32(const __m256i *m)
{
    const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(m[0], m[1]), _mm256_hadd_epi32(m[2], m[3]));
    const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(m[4], m[5]), _mm256_hadd_epi32(m[6], m[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* Scores of one row against the 8 keys of keys_to_i8: per key and block the
 * exact int dot s_b = sum_i k_i q_i, then acc = sum_b (float)s_b x (d_k x d_q)
 * (b ascending, from 0) and acc x scale: the order attention.c's reference
 * uses, so both variants give the same bits. q8 is the row's query as q8_0. */
KAI __m256 scores8_i8(const int8_t *kq, const __m256 *kd, const block_q8_0 *q8, int nb, __m256 vscale)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const __m256i qv = _mm256_loadu_si256((const __m256i *)q8[b].qs);
        __m256i m[8];
        const int8_t *kb = kq + (size_t)b * 32, *ka = kb + 8 * nb * 32;
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i kv = _mm256_loadu_si256((const __m256i *)(kb + (size_t)k * nb * 32));
            const __m256i kabs = _mm256_loadu_si256((const __m256i *)(ka + (size_t)k * nb * 32));
            /* |k| x (q with k's sign): maddubs needs an unsigned operand; pairs
             * stay within int16 as |k|, |q| <= 127 (q4_0: |k| <= 8) */
            m[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(kabs, _mm256_sign_epi8(qv, kv)), ones);
        }
        const __m256 sb = _mm256_cvtepi32_ps(hsum8_epi32(m));
        const __m256 d = _mm256_mul_ps(kd[b], _mm256_set1_ps(_cvtsh_ss(q8[b].d)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(sb, d));
    }
    return _mm256_mul_ps(acc, vscale);
}

/* x[j] *= 256 x (e4m3 scale of head g in the block of position j), j < n:
 * what the fp8 kinds leave out of each element, applied to a whole score
 * or weight instead (powers of two: the same bits either way). */
static KA void scale_by_block(const attn_kv *kv, const uint8_t *plane, int g, float *x, int n)
{
    const int T = (int)kv->block_size;
    for (int j0 = 0, b = 0; j0 < n; j0 += T, b++) {
        const float f = 256.0f * attn_fp8_scale(kv, plane, kv->blocks[b], g);
        const __m256 vf = _mm256_set1_ps(f);
        const int e = j0 + T < n ? j0 + T : n;
        int j = j0;
        for (; j + 8 <= e; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), vf));
        for (; j < e; j++) x[j] *= f;
    }
}

/* ------------------------------------------------- f16 keys in columns
 * (attn_kv.k_cols; see attention_avx512.c for the why): lanes over 8 keys
 * of a block, each dim's query element broadcast, per (row, key) one FMA
 * chain over the dims in order, then x scale; the same operations for any
 * number of rows or groups in a call. A group shorter than 8 keys (a
 * block's tail, the context's end, block sizes below 8) is first copied
 * into a zero-padded [hd][8] tile. */
typedef struct {
    const uint16_t *col; /* the first key's slot in its block's K plane, head 0 */
    size_t stride;       /* halves from one dim's keys to the next: bs, or 8 in a tile */
    int j0, n;
} key_group8;

/* pf[0..npf): later groups' columns (head 0; goff added here) to
 * prefetch, a line (4 dims of 8 keys) every 4 dims. */
KAI void scores_cols8(int NR, int NG, const key_group8 *kg, const float *const *q, int hd, __m256 vscale,
                      float *const *out, const int *n, const key_group8 *pf, int npf, size_t goff)
{
    __m256 acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NG; k++) acc[r][k] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        if ((d & 3) == 0)
            for (int k = 0; k < npf; k++) _mm_prefetch((const char *)(pf[k].col + goff + (size_t)d * pf[k].stride), ATTN_PF_HINT);
        __m256 kx[4];
#pragma GCC unroll 4
        for (int k = 0; k < NG; k++) kx[k] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kg[k].col + (size_t)d * kg[k].stride)));
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const __m256 qd = _mm256_broadcast_ss(q[r] + d);
#pragma GCC unroll 4
            for (int k = 0; k < NG; k++) acc[r][k] = _mm256_fmadd_ps(qd, kx[k], acc[r][k]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int k = 0; k < NG; k++) {
            const int at = kg[k].j0 - kg[0].j0, left = n[r] - at, w = left < kg[k].n ? left : kg[k].n;
            if (left <= 0) continue;
            const __m256 s = _mm256_mul_ps(acc[r][k], vscale);
            if (w == 8) _mm256_storeu_ps(out[r] + at, s);
            else _mm256_maskstore_ps(out[r] + at, _mm256_cmpgt_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), s);
        }
}

static KA void scores_cols8_nr(int nr, int ng, const key_group8 *kg, const float *const *q, int hd, __m256 vscale,
                               float *const *out, const int *n, const key_group8 *pf, int npf, size_t goff)
{
#define SC(R, G) scores_cols8(R, G, kg, q, hd, vscale, out, n, pf, npf, goff)
    ATTN_COLS_DISPATCH(nr, ng, SC)
#undef SC
}

/* Step 1 for k_cols: every row's scores, 4 groups of up to 8 keys a step;
 * tile: scratch of 4 x 8 x hd floats (short groups' copies, as halves). */
static KA void scores_by_cols8(const attn_kv *kv, const attn_row *rows, const int *sg_r0, const int *sg_n, int n_sg,
                               int nmax, const float *qf, size_t hdp, float *sc, size_t ncp, __m256 vscale, uint16_t *tile)
{
    const int hd = kv->head_dim;
    const size_t bs = kv->block_size, head = (size_t)hd * bs;
    const int n_groups = cols_n_groups(kv, 8, nmax);
    enum { STEP = 4, AHEAD = 8 }; /* AHEAD groups: 8 KiB of a head of 64 dims at bs 16 */
    for (int g0 = 0; g0 < n_groups; g0 += STEP) {
        int ng = 0, np = 0;
        key_group8 base[STEP + AHEAD];
        for (int gi = g0; gi < g0 + STEP + AHEAD && gi < n_groups; gi++) {
            key_group8 x = {.stride = bs};
            if ((x.n = cols_group(kv, gi, 8, nmax, &x.col, &x.j0)) == 0) break;
            if (gi < g0 + STEP) base[ng++] = x;
            else base[STEP + np++] = x;
        }
        for (int sg = 0; sg < n_sg; sg++) {
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1];
            const size_t goff = (size_t)rows[r0].g * head;
            key_group8 kg[4];
            for (int k = 0; k < ng; k++) {
                kg[k] = base[k];
                kg[k].col += goff;
                if (kg[k].n == 8) continue;
                uint16_t *t = tile + (size_t)k * 8 * hd; /* a short group: zero-padded copy */
                memset(t, 0, sizeof(uint16_t) * 8 * (size_t)hd);
                for (int d = 0; d < hd; d++)
                    memcpy(t + (size_t)d * 8, kg[k].col + (size_t)d * bs, sizeof(uint16_t) * (size_t)kg[k].n);
                kg[k].col = t;
                kg[k].stride = 8;
            }
            for (int a = r0; a < r1; a += 8) {
                const int nr = r1 - a < 8 ? r1 - a : 8, per = cols_groups(nr);
                const float *q[8];
                for (int r = 0; r < nr; r++) q[r] = qf + (size_t)(a + r) * hdp;
                for (int k = 0; k < ng && kg[k].j0 < sg_n[sg]; k += per) {
                    float *out[8];
                    int n[8];
                    for (int r = 0; r < nr; r++) {
                        out[r] = sc + (size_t)(a + r) * ncp + kg[k].j0;
                        n[r] = rows[a + r].n_ctx - kg[k].j0;
                    }
                    /* the same head's groups AHEAD later, spread over the dims (first row chunk only) */
                    const int nk = ng - k < per ? ng - k : per, p0 = k + AHEAD - STEP;
                    const int npf = a > r0 || p0 >= np ? 0 : np - p0 < nk ? np - p0 : nk;
                    scores_cols8_nr(nr, nk, kg + k, q, hd, vscale, out, n, base + STEP + p0, npf, goff);
                }
            }
        }
    }
}

/* The query row as q8_0 for the int8 key dots: the reference's bytes
 * (quant_q8_0_quantize_row) by the AVX2 table's conversion, which gives
 * them for finite input; a row with an inf or NaN takes the reference's
 * own (it maps them its way). sums, when not NULL: offset x each block's
 * sum of quants (the u8 correction of the VNNI dots). The scalar
 * quantizer (a roundf call per element) took ~8% of an AVX-512 decode
 * call over 1,024 keys in L2 (bench_attn_decode), and attention_chunks
 * quantizes again for every chunk of 2,048 keys. */
KA void attn_query_q8(const float *q, block_q8_0 *dst, int hd, int32_t offset, int32_t *sums)
{
    const __m256i expo = _mm256_set1_epi32(0x7F800000);
    __m256i bad = _mm256_setzero_si256();
    for (int i = 0; i < hd; i += 8) {
        const __m256i e = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(q + i)), expo);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, expo));
    }
    if (_mm256_testz_si256(bad, bad)) kern_vt_avx2()->conv[DT_Q8_0](dst, q, hd);
    else quant_q8_0_quantize_row(q, dst, hd);
    for (int b = 0; sums && b < hd / QK8_0; b++) { /* sad of q + 128 against 0: four sums of 8 bytes */
        const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)dst[b].qs), _mm256_set1_epi8((char)0x80));
        const __m256i s4 = _mm256_sad_epu8(u, _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        const int32_t sum = (int32_t)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 128 * QK8_0;
        sums[b] = offset * sum;
    }
}

KA void attn_paged_avx2(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                        size_t scratch_floats)
{
    if (kv->reader) { /* a reader brings its own SIMD (attention.c) */
        attn_paged_ref(kv, rows, n_rows, scale, scratch, scratch_floats);
        return;
    }
    if (attn_is_kivi(kv->kv_type)) { /* sealed KIVI blocks in place: attention_kivi.c */
        attn_kivi_avx2(kv, rows, n_rows, scale, scratch, scratch_floats);
        return;
    }
    const int hd = kv->head_dim;
    const uint32_t t = kv->kv_type;
    assert(hd % 8 == 0 && n_rows >= 1);
    const int nmax = segment_nmax(rows, 0, n_rows);
    /* the segments, found once (not per key group): [sg_r0[s], sg_r0[s + 1]) */
    int sg_r0[ATTN_ROWS_CAP + 1], sg_n[ATTN_ROWS_CAP], n_sg = 0;
    assert(n_rows <= ATTN_ROWS_CAP);
    for (int r0 = 0, r1; r0 < n_rows; r0 = r1, n_sg++) {
        r1 = segment_end(rows, n_rows, r0);
        sg_r0[n_sg] = r0;
        sg_n[n_sg] = segment_nmax(rows, r0, r1);
    }
    sg_r0[n_sg] = n_rows;
    const size_t hdp = attn_round8((size_t)hd), ncp = attn_round8((size_t)nmax);
    assert(attn_layout_floats((size_t)n_rows, (size_t)nmax, (size_t)hd) <= scratch_floats);
    (void)scratch_floats;
    float *qf = scratch, *sc = qf + (size_t)n_rows * hdp, *kt = sc + (size_t)n_rows * ncp; /* vt: cols' tile only */

    /* queries as the dot uses them: rounded to f16 for an f16 cache (ggml's
     * dot type), else copied as they are */
    const bool i8 = t == DT_Q8_0 || t == DT_Q4_0; /* keys dotted in int8 against a q8_0 query */
    const int nb = hd / 32;
    assert(!i8 || (hd % 32 == 0 && nb <= 8));
    for (int r = 0; r < n_rows; r++) {
        assert(rows[r].n_ctx >= 1);
        float *d = qf + (size_t)r * hdp;
        if (i8) { /* as ggml does for these caches: the query in K's dot type (q8_0), same bytes as the reference */
            attn_query_q8(rows[r].q, (block_q8_0 *)d, hd, 0, NULL);
            continue;
        }
        for (int i = 0; i < hd; i += 8) {
            __m256 v = _mm256_loadu_ps(rows[r].q + i);
            if (t == DT_F16) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            _mm256_storeu_ps(d + i, v);
        }
    }

    const int fk = fk_of(t); /* every row is read in place (FK_ above) */

    /* 1. scores, 8 keys at a time; keys past nmax repeat the last one. The
     * KV heads of a call are visited key group by key group, so that a
     * decode call over several heads reads each cache row's heads together
     * (a contiguous span) rather than one head's column at a time. */
    const __m256 vscale = _mm256_set1_ps(scale);
    int gmin = rows[0].g, gmax = rows[0].g;
    for (int r = 1; r < n_rows; r++) {
        gmin = rows[r].g < gmin ? rows[r].g : gmin;
        gmax = rows[r].g > gmax ? rows[r].g : gmax;
    }
    /* Prefetch always: with the pool on 2 MiB pages and f16 values in head
     * runs, it helps every cache type, also calls with a row per head,
     * whose sweep is bandwidth-bound (docs/speed.md). */
    const int pf_n = nmax;
    kv_pf pk = kv_pf_at(kv, kv->k_base, pf_n, gmin, gmax);
    kv_pf pv = kv_pf_at(kv, kv->v_base, pf_n, gmin, gmax);
    const int pfd = kv_pf_keys(n_rows, gmin, gmax, kv_key_bytes(kv, gmin, gmax), 8, 64); /* keys ahead */
    const bool vlines = kv_head_major(kv); /* V by vline_pf (pv then prefetches nothing) */
    vline_pf lv = vline_at(kv, kv->v_base, nmax, gmin, gmax);
    if (kv->k_cols) {
        assert(t == DT_F16 && 32 * (size_t)hd <= 2 * 40 * hdp); /* the tile in kt and vt */
        scores_by_cols8(kv, rows, sg_r0, sg_n, n_sg, nmax, qf, hdp, sc, ncp, vscale, (uint16_t *)kt);
        if (vlines) vline_until(&lv, pfd); /* the first values */
        else pf_until(&pv, pfd);
    } else {
        pf_until(&pk, pfd);
    }
    const int pk_share = (8 + n_sg - 1) / n_sg; /* rows of a key group's batch each segment issues */
    kv_cursor kc = cursor_at(kv, kv->k_base, 0);
    for (int j0 = 0; !kv->k_cols && j0 < nmax; j0 += 8) {
        kv_pfb pkb; /* not {0}: zeroing its array cost more than the rest of the bookkeeping */
        pkb.n = pkb.next = 0;
        pf_collect(&pk, j0 + 8 + pfd, &pkb, 8);
        if (pkb.n < 8) pf_collect(&pv, pfd, &pkb, 8); /* the first values, over the last key groups */
        kv_pfb *pkp = &pkb;
        const uint8_t *krow[8];
        for (int k = 0; k < 8; k++) {
            krow[k] = cursor_row(&kc);
            if (j0 + k + 1 < nmax) cursor_next(&kc); /* else stay on the last key */
        }
        for (int sg = 0; sg < n_sg; sg++) {
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1];
            if (sg_n[sg] <= j0) continue;
            const size_t goff = (size_t)rows[r0].g * kv->head_bytes;
            if (i8) {
                __m256 kd[8];
                pf_take(pkp, pk_share);
                keys_to_i8(t, krow, goff, nb, (int8_t *)kt, kd);
                for (int r = r0; r < r1; r++)
                    if (rows[r].n_ctx > j0)
                        _mm256_storeu_ps(sc + (size_t)r * ncp + j0,
                                         scores8_i8((const int8_t *)kt, kd, (const block_q8_0 *)(qf + (size_t)r * hdp),
                                                    nb, vscale));
                continue;
            }
            const void *kp[8];
            for (int k = 0; k < 8; k++) kp[k] = krow[k] + goff;
            const int kind = fk == FK_E4M3 ? e4m3_kind(kp, 8, hd) : fk;
            if (r1 - r0 >= 2) { /* GQA: each K row converted once, in registers, for all the rows */
                for (int a = r0; a < r1; a += 8) {
                    const int nr = r1 - a < 8 ? r1 - a : 8;
                    const float *q[8];
                    float *out[8];
                    for (int r = 0; r < nr; r++) {
                        q[r] = qf + (size_t)(a + r) * hdp;
                        out[r] = rows[a + r].n_ctx > j0 ? sc + (size_t)(a + r) * ncp + j0 : NULL;
                    }
                    scores_rows_any(kind, nr, kp, q, hd, vscale, out, pkp);
                    pkp = NULL;
                }
                continue;
            }
            pf_take(pkp, pk_share);
            for (int r = r0; r < r1; r++)
                if (rows[r].n_ctx > j0)
                    scores8(kind, sc + (size_t)r * ncp + j0, kp, qf + (size_t)r * hdp, hd, vscale);
        }
        pf_take(pkp, 8); /* what segments that ended before j0 left */
    }

    /* 2. softmax of each row over its own n_ctx; f16 weights for f16 */
    const kern_vtable *vt2 = kern_vt_avx2();
    for (int r = 0; r < n_rows; r++) {
        float *s = sc + (size_t)r * ncp;
        if (t == ATTN_KV_FP8_E4M3) scale_by_block(kv, kv->k_base, rows[r].g, s, rows[r].n_ctx);
        /* sliding window: the softmax of exactly the scores from lo on (the same
         * operations as without the keys before lo), which then weigh 0 */
        const int lo = rows[r].lo;
        assert(lo >= 0 && lo < rows[r].n_ctx);
        attn_softcap(s + lo, rows[r].n_ctx - lo, kv->softcap);
        const float lse = vt2->softmax(s + lo, rows[r].n_ctx - lo);
        if (kv->lse) kv->lse[r] = lse;
        for (int j = 0; j < lo; j++) s[j] = 0;
        if (t == ATTN_KV_FP8_E4M3) scale_by_block(kv, kv->v_base, rows[r].g, s, rows[r].n_ctx);
        if (t == DT_F16) /* lanes past n_ctx hold scores never read: rounding them is harmless */
            for (int i = 0; i < rows[r].n_ctx; i += 8)
                _mm256_storeu_ps(s + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(s + i),
                                                                        _MM_FROUND_TO_NEAREST_INT)));
    }

    /* 3. values, ATTN_VB keys at a time, heads visited as in 1 */
    kv_cursor vc = cursor_at(kv, kv->v_base, 0);
    for (int j0 = 0; j0 < nmax; j0 += ATTN_VB) {
        const int jn = nmax - j0 < ATTN_VB ? nmax - j0 : ATTN_VB;
        kv_pfb pvb;
        pvb.n = pvb.next = 0, pvb.len = 0;
        if (vlines) vline_aim(&lv, j0 + jn + pfd); /* handed out by the tiles */
        else pf_collect(&pv, j0 + jn + pfd, &pvb, ATTN_VB);
        const int pv_share = (pvb.n + n_sg - 1) / n_sg; /* rows each segment issues */
        kv_pfb *pvp = &pvb;
        const uint8_t *vrow[ATTN_VB];
        cursor_rows(&vc, vrow, jn);
        for (int sg = 0; sg < n_sg; sg++) {
            const int r0 = sg_r0[sg], r1 = sg_r0[sg + 1], sn = sg_n[sg];
            if (sn <= j0) continue;
            const int sjn = sn - j0 < jn ? sn - j0 : jn; /* keys of this tile any row of the segment needs */
            const size_t goff = (size_t)rows[r0].g * kv->head_bytes;
            const void *vp[ATTN_VB];
            for (int k = 0; k < sjn; k++) vp[k] = vrow[k] + goff;
            int kind = fk;
            if (kind == FK_E4M3) kind = e4m3_kind(vp, sjn, hd);
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
            vrows(kind, nr, j0 == 0, op, pp, np, vp, hd, pvp, pv_share, vlines ? &lv : NULL);
        }
        pf_take(pvp, ATTN_VB);
        if (vlines) vline_until(&lv, j0 + jn + pfd); /* what the tiles left */
    }
}

#else /* not x86 */

bool attn_avx2_available(void) { return false; }

void attn_paged_avx2(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                     size_t scratch_floats)
{
    attn_paged_ref(kv, rows, n_rows, scale, scratch, scratch_floats);
}

#endif
