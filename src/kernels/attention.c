/* attention.c - paged attention: sizing, dispatch and the reference variant;
 * see attention.h. The AVX2 variant is in attention_avx2.c, the AVX-512 one
 * in attention_avx512.c. */
#include "kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/kern_impl.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"
#include "tensor/half.h"
#include "tensor/quant.h"

int attn_rows_max(int max_ctx)
{
    const size_t ncp = attn_round8(max_ctx > 0 ? (size_t)max_ctx : 1);
    const size_t r = ATTN_SCORE_BUDGET / ncp;
    return r < 1 ? 1 : r > ATTN_ROWS_CAP ? ATTN_ROWS_CAP : (int)r;
}

size_t attn_scratch_floats(int max_ctx, int head_dim)
{
    const size_t n = max_ctx > 0 ? (size_t)max_ctx : 1;
    return attn_layout_floats((size_t)attn_rows_max(max_ctx), n, (size_t)head_dim) + 16;
}

static void attn_paged_reader(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                              size_t scratch_floats);

/* ------------------------------------------------------------- reference */

static inline const uint8_t *kv_row(const uint8_t *base, const attn_kv *kv, int j, int g)
{
    return base + (size_t)kv->blocks[j / kv->block_size] * attn_plane_step(kv, base) +
           (size_t)(j % kv->block_size) * kv->row_bytes + (size_t)g * kv->head_bytes;
}

/* q . k for a q8_0 or q4_0 key against the query quantized to q8_0 (q8):
 * per block the exact int dot s_b, then sum_b (float)s_b x (d_k x d_q), b
 * ascending (the AVX2 variant computes these very operations). */
static float dot_key_i8(uint32_t t, const uint8_t *k, const block_q8_0 *q8, int n)
{
    float acc = 0;
    for (int b = 0; b < n / 32; b++) {
        int32_t sb = 0;
        uint16_t dk;
        if (t == DT_Q8_0) {
            const block_q8_0 *x = (const block_q8_0 *)k + b;
            for (int i = 0; i < 32; i++) sb += (int32_t)x->qs[i] * q8[b].qs[i];
            dk = x->d;
        } else {
            const block_q4_0 *x = (const block_q4_0 *)k + b;
            for (int i = 0; i < 16; i++) {
                sb += ((int32_t)(x->qs[i] & 0x0F) - 8) * q8[b].qs[i];
                sb += ((int32_t)(x->qs[i] >> 4) - 8) * q8[b].qs[i + 16];
            }
            dk = x->d;
        }
        acc += (float)sb * (f16_to_f32(dk) * f16_to_f32(q8[b].d));
    }
    return acc;
}

/* q . k for one key row; qh is q pre-rounded to f16 when the cache is f16,
 * q quantized to q8_0 when it is q8_0 or q4_0. */
static float dot_key(const attn_kv *kv, const uint8_t *k, const float *q, const uint16_t *qh, float *tmp)
{
    const int n = kv->head_dim;
    float s = 0;
    if (kv->kv_type == DT_Q8_0 || kv->kv_type == DT_Q4_0) {
        return dot_key_i8(kv->kv_type, k, (const block_q8_0 *)qh, n);
    } else if (attn_is_fp8(kv->kv_type)) { /* tmp holds the row, scaled (fp8_row) */
        for (int i = 0; i < n; i++) s += tmp[i] * q[i];
    } else if (kv->kv_type == DT_F16) {
        const uint16_t *kh = (const uint16_t *)k;
        for (int i = 0; i < n; i++) s += f16_to_f32(kh[i]) * f16_to_f32(qh[i]);
    } else if (kv->kv_type == DT_F32) {
        const float *kf = (const float *)k;
        for (int i = 0; i < n; i++) s += kf[i] * q[i];
    } else {
        quant_dequant_row(kv->kv_type, k, tmp, n);
        for (int i = 0; i < n; i++) s += tmp[i] * q[i];
    }
    return s;
}

static void add_value(const attn_kv *kv, const uint8_t *v, float p, float *acc, float *tmp)
{
    const int n = kv->head_dim;
    if (kv->kv_type == DT_F16) {
        const uint16_t *vh = (const uint16_t *)v;
        const float ph = f16_to_f32(f32_to_f16(p));
        for (int i = 0; i < n; i++) acc[i] += ph * f16_to_f32(vh[i]);
    } else if (kv->kv_type == DT_F32) {
        const float *vf = (const float *)v;
        for (int i = 0; i < n; i++) acc[i] += p * vf[i];
    } else if (attn_is_fp8(kv->kv_type)) { /* tmp holds the row, scaled (fp8_row) */
        for (int i = 0; i < n; i++) acc[i] += p * tmp[i];
    } else {
        quant_dequant_row(kv->kv_type, v, tmp, n);
        for (int i = 0; i < n; i++) acc[i] += p * tmp[i];
    }
}

/* Head g of token j's fp8 row of a plane as the f32 values it encodes
 * (times the e4m3 scale) into tmp; nothing for the other types. */
static void fp8_row(const attn_kv *kv, const uint8_t *plane, int j, int g, float *tmp)
{
    if (!attn_is_fp8(kv->kv_type)) return;
    const uint32_t pb = kv->blocks[j / kv->block_size];
    const float s = attn_fp8_scale(kv, plane, pb, g);
    const uint8_t *r = kv_row(plane, kv, j, g);
    for (int i = 0; i < kv->head_dim; i++) tmp[i] = attn_fp8_to_f32(kv->kv_type, r[i]) * s;
}

/* One row, scalar, in the plainest order: the definition the SIMD variants
 * are tested against. */
static void ref_row(const attn_kv *kv, const attn_row *row, float scale, float *scratch, float *lse)
{
    const int hd = kv->head_dim, n_ctx = row->n_ctx, g = row->g;
    const size_t hdp = attn_round8((size_t)hd);
    float *scores = scratch, *tmp = scratch + attn_round8((size_t)n_ctx), *acc = tmp + hdp;
    uint16_t *qh = (uint16_t *)(acc + hdp);
    const float *q = row->q;
    if (kv->kv_type == DT_F16)
        for (int i = 0; i < hd; i++) qh[i] = f32_to_f16(q[i]);
    else if (kv->kv_type == DT_Q8_0 || kv->kv_type == DT_Q4_0) /* K's dot type, as ggml (fits: 34/32 hd B <= 2 hdp B) */
        quant_q8_0_quantize_row(q, (block_q8_0 *)qh, hd);
    /* keys before lo (sliding window) are not visited at all: the same
     * operations as if their blocks were gone */
    const int lo = row->lo;
    float mx = -INFINITY;
    uint16_t *kcol = qh + hdp; /* a key gathered from its columns (k_cols) */
    for (int j = lo; j < n_ctx; j++) {
        fp8_row(kv, kv->k_base, j, g, tmp);
        const uint8_t *k = kv->k_cols ? (const uint8_t *)kcol : kv_row(kv->k_base, kv, j, g);
        if (kv->k_cols) {
            const uint16_t *c = (const uint16_t *)(kv->k_base + (size_t)kv->blocks[j / kv->block_size] * kv->block_bytes) +
                                (size_t)g * hd * kv->block_size + j % kv->block_size;
            for (int i = 0; i < hd; i++) kcol[i] = c[(size_t)i * kv->block_size];
        }
        scores[j] = dot_key(kv, k, q, qh, tmp) * scale;
        attn_softcap(scores + j, 1, kv->softcap);
        if (scores[j] > mx) mx = scores[j];
    }
    double sum = 0;
    for (int j = lo; j < n_ctx; j++) {
        scores[j] = expf(scores[j] - mx);
        sum += scores[j];
    }
    const float inv = (float)(1.0 / sum);
    if (lse) *lse = mx + (float)log(sum);
    memset(acc, 0, sizeof(float) * (size_t)hd);
    for (int j = lo; j < n_ctx; j++) {
        fp8_row(kv, kv->v_base, j, g, tmp);
        add_value(kv, kv_row(kv->v_base, kv, j, g), scores[j] * inv, acc, tmp);
    }
    memcpy(row->out, acc, sizeof(float) * (size_t)hd);
}

void attn_paged_ref(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                    size_t scratch_floats)
{
    if (kv->reader) {
        attn_paged_reader(kv, rows, n_rows, scale, scratch, scratch_floats);
        return;
    }
    if (attn_is_kivi(kv->kv_type)) { /* sealed KIVI blocks in place: attention_kivi.c */
        attn_kivi_ref(kv, rows, n_rows, scale, scratch, scratch_floats);
        return;
    }
    for (int r = 0; r < n_rows; r++) {
        assert(rows[r].n_ctx >= 1 && rows[r].lo >= 0 && rows[r].lo < rows[r].n_ctx);
        assert(attn_round8((size_t)rows[r].n_ctx) + 3 * attn_round8((size_t)kv->head_dim) <= scratch_floats);
        (void)scratch_floats;
        ref_row(kv, &rows[r], scale, scratch, kv->lse ? kv->lse + r : NULL);
    }
}

/* ---------------------------------------------------------- block reader */

size_t attn_scratch_floats_reader(int max_ctx, size_t reader_scratch_floats)
{
    const size_t n = max_ctx > 0 ? (size_t)max_ctx : 1;
    return (size_t)attn_rows_max(max_ctx) * attn_round8(n) + reader_scratch_floats + 16;
}

/* How a row (context n_ctx, window lower bound lo) sees logical block blk:
 * -1 not at all (past its position, or wholly before lo), 0 as a past block
 * (all T tokens), 1 as its own last block. A block holding lo is read whole
 * and the scores before lo get weight 0 after the softmax. */
static inline int rd_view(const attn_row *row, uint32_t blk, uint32_t T)
{
    const uint32_t last = (uint32_t)(row->n_ctx - 1) / T;
    return blk > last || blk < (uint32_t)row->lo / T ? -1 : blk < last ? 0 : 1;
}

/* Tokens of block blk that a row sees: T for a past block, else up to its
 * own position. */
static inline uint32_t rd_tokens(const attn_row *row, uint32_t blk, uint32_t T)
{
    return rd_view(row, blk, T) == 0 ? T : (uint32_t)row->n_ctx - blk * T;
}

/* The reader path (attention.h): per run of rows of one KV head, scores
 * block by block, softmax per row, then values block by block. Calls go to
 * maximal runs of adjacent rows that see the block the same way (for V:
 * also over the same tokens), so that the reader decodes a block once for
 * all of them; each row's numbers come from its own view only. */
static void attn_paged_reader(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                              size_t scratch_floats)
{
    const attn_reader *rd = kv->reader;
    const uint32_t T = kv->block_size;
    const int hd = kv->head_dim;
    int nmax = 0;
    for (int r = 0; r < n_rows; r++) {
        assert(rows[r].n_ctx >= 1 && rows[r].lo >= 0 && rows[r].lo < rows[r].n_ctx);
        nmax = rows[r].n_ctx > nmax ? rows[r].n_ctx : nmax;
    }
    const size_t ncp = attn_round8((size_t)nmax);
    assert(n_rows <= ATTN_ROWS_CAP && (size_t)n_rows * ncp + rd->scratch_floats <= scratch_floats);
    (void)scratch_floats;
    float *sc = scratch, *rs = sc + (size_t)n_rows * ncp;
    const float *qp[ATTN_ROWS_CAP];
    float *op[ATTN_ROWS_CAP];
    for (int r0 = 0, r1; r0 < n_rows; r0 = r1) {
        const int g = rows[r0].g;
        int sn = 0;
        for (r1 = r0; r1 < n_rows && rows[r1].g == g; r1++) sn = rows[r1].n_ctx > sn ? rows[r1].n_ctx : sn;
        const uint32_t nb = ((uint32_t)sn + T - 1) / T;
        /* 1. scores */
        for (uint32_t blk = 0; blk < nb; blk++)
            for (int a = r0, e; a < r1; a = e) {
                const int v = rd_view(&rows[a], blk, T);
                uint32_t n = rd_tokens(&rows[a], blk, T);
                for (e = a + 1; e < r1 && rd_view(&rows[e], blk, T) == v; e++) {
                    const uint32_t ne = rd_tokens(&rows[e], blk, T);
                    n = ne > n ? ne : n;
                }
                if (v < 0) continue;
                for (int k = a; k < e; k++) qp[k - a] = rows[k].q;
                rd->k_dot(rd->ctx, g, kv->reader_blk0 + blk, n, v == 1 && !kv->reader_past, qp, e - a,
                          sc + (size_t)a * ncp + blk * T, ncp, rs);
            }
        /* 2. softmax of each row over its own scores lo..n_ctx-1; the
         * scores of its first block before lo (read, not wanted) weigh 0 */
        for (int r = r0; r < r1; r++) {
            const int lo = rows[r].lo, lo0 = lo / (int)T * (int)T;
            float *x = sc + (size_t)r * ncp;
            for (int j = lo; j < rows[r].n_ctx; j++) x[j] *= scale;
            attn_softcap(x + lo, rows[r].n_ctx - lo, kv->softcap);
            const float lse = kern_softmax(x + lo, rows[r].n_ctx - lo);
            if (kv->lse) kv->lse[r] = lse;
            for (int j = lo0; j < lo; j++) x[j] = 0;
            memset(rows[r].out, 0, sizeof(float) * (size_t)hd);
        }
        /* 3. values: each row over exactly its tokens */
        for (uint32_t blk = 0; blk < nb; blk++)
            for (int a = r0, e; a < r1; a = e) {
                const int v = rd_view(&rows[a], blk, T);
                const uint32_t n = rd_tokens(&rows[a], blk, T);
                for (e = a + 1; e < r1 && rd_view(&rows[e], blk, T) == v && rd_tokens(&rows[e], blk, T) == n;)
                    e++;
                if (v < 0) continue;
                for (int k = a; k < e; k++) op[k - a] = rows[k].out;
                rd->v_axpy(rd->ctx, g, kv->reader_blk0 + blk, n, v == 1 && !kv->reader_past, sc + (size_t)a * ncp + blk * T,
                           ncp, e - a, op, rs);
            }
    }
}

/* -------------------------------------------------------------- dispatch */

/* The AVX2 variant runs when the CPU has it and the kernel table is not the
 * forced reference (kern_init(1)), so that one switch selects the reference
 * everywhere; the AVX-512 one when the active table is an AVX-512 one (so
 * PAGELLM_KERNELS=avx2 caps attention too). Head dims that are not a multiple of 8 take the reference
 * (always, whatever the call's rows, so row independence holds). */
void attn_paged(const attn_kv *kv, const attn_row *rows, int n_rows, float scale, float *scratch,
                size_t scratch_floats)
{
    static const char ref_name[] = "ref";
    if (kv->reader) { /* the reader has its own SIMD choice */
        attn_paged_reader(kv, rows, n_rows, scale, scratch, scratch_floats);
        return;
    }
    const char *name = kern_active()->name;
    const bool simd = kv->head_dim % 8 == 0 && strcmp(name, ref_name) != 0 && attn_avx2_available();
    if (simd && strncmp(name, "avx512", 6) == 0 && attn_avx512_available())
        attn_paged_avx512(kv, rows, n_rows, scale, scratch, scratch_floats);
    else if (simd) attn_paged_avx2(kv, rows, n_rows, scale, scratch, scratch_floats);
    else attn_paged_ref(kv, rows, n_rows, scale, scratch, scratch_floats);
}
