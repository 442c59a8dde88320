/* test_attention_chunks.c - long rows in chunks of keys
 * (kernels/attention_chunks.h) against one attn_paged call over all keys.
 *
 * - Short rows (at most attn_chunk_call_max keys from their window's first
 *   block) take one call over a view that starts at that block: equal to
 *   the call over the whole table (== on every element: the kernel's
 *   skipped keys only ever add +-0).
 * - Long rows, chunked and merged by log-sum-exp: within the tolerance of
 *   test_attention.c's SIMD-vs-reference (f16: 2^-10 of max|v|, as the
 *   weights are rounded to f16 per chunk; else 1e-5 of max|v|, times 2 for
 *   the merge's own rounding), for every KV row type, windows included.
 * - Row independence: a long row gives the same bits alone, in a tile of
 *   rows that straddle a chunk boundary, and in a run of several tiles.
 * - Through a block reader (KIVI's path), each block is read at its true
 *   index and as the row's own block exactly when it is (a wrong flag
 *   reads poisoned values).
 * - With a sealed view beside the reader (fp8_e4m3, kivi4, kivi2), every
 *   block before a row's own is read in place and only the own block
 *   through the reader; the result matches one in-place call.
 * - Across the chunk boundaries (one chunk's keys and one more or less,
 *   the first chunked depth, several chunks), a decode call of 16 rows
 *   (two GQA groups) under each kernel table (reference, AVX2, AVX-512)
 *   matches the reference's one call over all keys, for every KV row type
 *   and sealed KIVI read in place.
 */
#include "test.h"
#include "fake_kv.h"
#include "rng.h"

#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/attention_chunks.h"
#include "kernels/attention_impl.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

typedef struct {
    float *scratch, *work;
    size_t sf; /* scratch floats, without work */
} chunk_buf;

static int buf_make(chunk_buf *b, int max_ctx, int hd, size_t reader_floats)
{
    b->sf = attn_scratch_floats(max_ctx, hd) + reader_floats + 64;
    b->scratch = malloc(sizeof(float) * b->sf);
    b->work = malloc(sizeof(float) * attn_chunks_work_floats(hd));
    return b->scratch && b->work ? 0 : -1;
}

static void buf_free(chunk_buf *b)
{
    free(b->scratch);
    free(b->work);
}

static void run_chunks(const attn_kv *kv, const attn_row *rows, int n, float scale, chunk_buf *b)
{
    attn_chunks_run(kv, &rows, &n, 1, scale, b->scratch, b->sf, b->work);
}

/* max |v| over the V rows of head g in [lo, n) (the tolerance's scale) */
static float max_abs_v(const fake_kv *f, int g, int lo, int n)
{
    const int hd = f->kv.head_dim;
    float *tmp = malloc(sizeof(float) * (size_t)hd), m = 0;
    for (int j = lo; j < n; j++) {
        const uint8_t *blk = f->kv.v_base + (size_t)f->kv.blocks[j / f->kv.block_size] * f->kv.block_bytes;
        float sc;
        memcpy(&sc, blk + f->kv.scale_off + 4 * (size_t)g, 4);
        const size_t at = f->kv.head_bytes > f->kv.row_bytes ? (size_t)g * f->kv.head_bytes + (size_t)(j % f->kv.block_size) * f->kv.row_bytes
                                                             : (size_t)(j % f->kv.block_size) * f->kv.row_bytes + (size_t)g * f->kv.head_bytes;
        fake_kv_decode_row(fake_kv_elem_type(f->kv.kv_type), blk + at, tmp, hd, sc);
        for (int i = 0; i < hd; i++) m = fabsf(tmp[i]) > m ? fabsf(tmp[i]) : m;
    }
    free(tmp);
    return m;
}

TEST(short_rows_equal_one_call_over_the_whole_table)
{
    static const struct { int n, lo; } rows_of[] = {{1, 0}, {17, 0}, {300, 0}, {4096, 0}, {4100, 10}, {6000, 5000}, {9000, 7000}};
    for (int ti = 0; ti < FAKE_KV_N_TYPES; ti++) {
        const uint32_t t = fake_kv_types[ti];
        fake_kv f;
        CHECK(fake_kv_make(&f, t, 64, 2, 9000, 16, 500u + ti) == 0);
        chunk_buf b;
        CHECK(buf_make(&b, 9000, 64, 0) == 0);
        float q[64], o1[64], o2[64];
        for (size_t k = 0; k < sizeof rows_of / sizeof rows_of[0]; k++) {
            for (int i = 0; i < 64; i++) q[i] = 0.8f * rng_gauss();
            const attn_row a = {q, o1, rows_of[k].n, 1, rows_of[k].lo}, c = {q, o2, rows_of[k].n, 1, rows_of[k].lo};
            attn_paged(&f.kv, &a, 1, 0.125f, b.scratch, b.sf);
            run_chunks(&f.kv, &c, 1, 0.125f, &b);
            int same = 1;
            for (int i = 0; i < 64; i++) same &= o1[i] == o2[i];
            if (rows_of[k].n - rows_of[k].lo / 16 * 16 <= (int)attn_chunk_call_max(16))
                CHECK_MSG(same, "%s n_ctx %d lo %d: not the one call's bits", fake_kv_type_name(t), rows_of[k].n,
                          rows_of[k].lo);
        }
        buf_free(&b);
        fake_kv_free(&f);
    }
}

TEST(long_rows_in_chunks_match_one_call_within_tolerance)
{
    static const int bss[] = {16, 48};
    static const struct { int n, lo; } rows_of[] = {{4097, 0}, {6145, 0}, {9000, 0}, {9000, 3000}, {8200, 2047}};
    double worst[FAKE_KV_N_TYPES] = {0};
    for (int ti = 0; ti < FAKE_KV_N_TYPES; ti++)
        for (int bi = 0; bi < 2; bi++) {
            const uint32_t t = fake_kv_types[ti];
            fake_kv f;
            CHECK(fake_kv_make(&f, t, 64, 2, 9000, bss[bi], 900u + 7u * ti + bi) == 0);
            chunk_buf b;
            CHECK(buf_make(&b, 9000, 64, 0) == 0);
            float q[8 * 64], o1[8 * 64], o2[8 * 64];
            for (size_t k = 0; k < sizeof rows_of / sizeof rows_of[0]; k++) {
                attn_row a[8], c[8];
                for (int r = 0; r < 8; r++) { /* a GQA group of one token */
                    for (int i = 0; i < 64; i++) q[r * 64 + i] = 0.8f * rng_gauss();
                    a[r] = (attn_row){q + r * 64, o1 + r * 64, rows_of[k].n, 0, rows_of[k].lo};
                    c[r] = (attn_row){q + r * 64, o2 + r * 64, rows_of[k].n, 0, rows_of[k].lo};
                }
                for (int r = 0; r < 8; r++) attn_paged(&f.kv, &a[r], 1, 0.125f, b.scratch, b.sf);
                run_chunks(&f.kv, c, 8, 0.125f, &b);
                const double vmax = max_abs_v(&f, 0, rows_of[k].lo, rows_of[k].n);
                const double tol = (fake_kv_elem_type(t) == DT_F16 ? 1.0 / 1024 : 2e-5) * vmax;
                double md = 0;
                for (int i = 0; i < 8 * 64; i++) md = fmax(md, fabs((double)o1[i] - o2[i]));
                worst[ti] = fmax(worst[ti], md / vmax);
                CHECK_MSG(md <= tol, "%s bs %d n_ctx %d lo %d: max diff %.3g > tol %.3g", fake_kv_type_name(t), bss[bi],
                          rows_of[k].n, rows_of[k].lo, md, tol);
            }
            buf_free(&b);
            fake_kv_free(&f);
        }
    INFO("worst |chunks - one call| / max|v|: f32 %.2g, f16 %.2g, bf16 %.2g, q8_0 %.2g, q4_0 %.2g, e4m3 %.2g, "
         "e5m2 %.2g, f16 pool %.2g", worst[0], worst[1], worst[2], worst[3], worst[4], worst[5], worst[6], worst[7]);
}

TEST(a_long_row_gets_the_same_bits_alone_in_a_tile_and_in_a_run_of_tiles)
{
    const uint32_t types[] = {DT_F16, DT_Q8_0, FAKE_KV_F16C, ATTN_KV_FP8_E5M2};
    for (int ti = 0; ti < 4; ti++) {
        fake_kv f;
        CHECK(fake_kv_make(&f, types[ti], 64, 2, 6200, 16, 31u + ti) == 0);
        chunk_buf b;
        CHECK(buf_make(&b, 6200, 64, 0) == 0);
        enum { R = 16 };
        float q[R * 64], o_tile[R * 64], o_one[R * 64], o_run[R * 64];
        attn_row tile[R], run[4][R / 4];
        /* 8 tokens x 2 heads of a prefill across the chunk boundary at 6144,
         * and across the short/long boundary at 4096 */
        const int base[2] = {6140, 4092};
        for (int s = 0; s < 2; s++) {
            for (int i = 0; i < R * 64; i++) q[i] = 0.8f * rng_gauss();
            for (int v = 0; v < R; v++) {
                const int g = v / 8, n = base[s] + v % 8;
                tile[v] = (attn_row){q + v * 64, o_tile + v * 64, n, g, 0};
                run[v / 4][v % 4] = (attn_row){q + v * 64, o_run + v * 64, n, g, 0};
            }
            run_chunks(&f.kv, tile, R, 0.125f, &b);
            for (int v = 0; v < R; v++) {
                const attn_row one = {q + v * 64, o_one + v * 64, tile[v].n_ctx, tile[v].g, 0};
                run_chunks(&f.kv, &one, 1, 0.125f, &b);
            }
            const attn_row *tiles[4] = {run[0], run[1], run[2], run[3]};
            const int nr[4] = {4, 4, 4, 4};
            attn_chunks_run(&f.kv, tiles, nr, 4, 0.125f, b.scratch, b.sf, b.work);
            for (int v = 0; v < R; v++) {
                CHECK_MSG(memcmp(o_tile + v * 64, o_one + v * 64, 64 * sizeof(float)) == 0,
                          "%s row %d (n_ctx %d): tile vs alone", fake_kv_type_name(types[ti]), v, tile[v].n_ctx);
                CHECK_MSG(memcmp(o_run + v * 64, o_one + v * 64, 64 * sizeof(float)) == 0,
                          "%s row %d (n_ctx %d): run of tiles vs alone", fake_kv_type_name(types[ti]), v, tile[v].n_ctx);
            }
        }
        buf_free(&b);
        fake_kv_free(&f);
    }
}

/* A block reader over any fake_kv type (rows decoded with their block
 * scale) that knows the row's own block: a block read with the wrong own
 * flag, or past the own one, is poisoned (values x 3) and counted in
 * wrong; every call for a block other than the own one counts in
 * past_reads. */
typedef struct {
    const fake_kv *f;
    uint32_t own_blk;
    int wrong, past_reads;
    float *tmp; /* head_dim floats */
} test_reader;

static float tr_factor(test_reader *p, uint32_t blk, bool own)
{
    const bool bad = (blk == p->own_blk) != own || blk > p->own_blk;
    p->wrong += bad;
    p->past_reads += !own || blk != p->own_blk;
    return bad ? 3.0f : 1.0f;
}

static const float *tr_row(test_reader *p, int plane, uint32_t blk, uint32_t t, int g)
{
    const attn_kv *kv = &p->f->kv;
    if (attn_is_kivi(kv->kv_type)) {
        fake_kivi_decode(kv, plane, (int)(blk * kv->block_size + t), g, p->tmp);
        return p->tmp;
    }
    const uint8_t *b = (plane ? kv->v_base : kv->k_base) + (size_t)kv->blocks[blk] * kv->block_bytes;
    float sc;
    memcpy(&sc, b + kv->scale_off + 4 * (size_t)g, 4);
    fake_kv_decode_row(kv->kv_type, b + (size_t)t * kv->row_bytes + (size_t)g * kv->head_bytes, p->tmp, kv->head_dim, sc);
    return p->tmp;
}

static void tr_k_dot(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *const *q, int n_q,
                     float *scores, size_t ld, float *scratch)
{
    (void)scratch;
    test_reader *p = (test_reader *)ctx;
    const float f = tr_factor(p, blk, own);
    for (uint32_t t = 0; t < n; t++) {
        const float *r = tr_row(p, 0, blk, t, g);
        for (int k = 0; k < n_q; k++) {
            float s = 0;
            for (int i = 0; i < p->f->kv.head_dim; i++) s += q[k][i] * r[i] * f;
            scores[(size_t)k * ld + t] = s;
        }
    }
}

static void tr_v_axpy(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *w, size_t ldw, int n_q,
                      float *const *acc, float *scratch)
{
    (void)scratch;
    test_reader *p = (test_reader *)ctx;
    const float f = tr_factor(p, blk, own);
    for (uint32_t t = 0; t < n; t++) {
        const float *r = tr_row(p, 1, blk, t, g);
        for (int k = 0; k < n_q; k++)
            for (int i = 0; i < p->f->kv.head_dim; i++) acc[k][i] += w[(size_t)k * ldw + t] * r[i] * f;
    }
}

/* 8 GQA rows (n_ctx n, window lo) of KV head 1 through attn_chunks_run
 * with f read by a test_reader (sealed: with f itself as the sealed view)
 * against one in-place call over f; the largest difference. */
static double reader_vs_in_place(const fake_kv *f, int n, int lo, bool sealed, test_reader *p)
{
    const attn_reader rd = {tr_k_dot, tr_v_axpy, p, 0};
    attn_kv kr = f->kv;
    kr.reader = &rd;
    kr.sealed = sealed ? &f->kv : NULL;
    chunk_buf b;
    if (buf_make(&b, 9000, 64, 0) != 0) return INFINITY;
    float q[8 * 64], o1[8 * 64], o2[8 * 64];
    attn_row a[8], c[8];
    for (int r = 0; r < 8; r++) {
        for (int i = 0; i < 64; i++) q[r * 64 + i] = 0.8f * rng_gauss();
        a[r] = (attn_row){q + r * 64, o1 + r * 64, n, 1, lo};
        c[r] = (attn_row){q + r * 64, o2 + r * 64, n, 1, lo};
    }
    attn_paged(&f->kv, a, 8, 0.125f, b.scratch, b.sf); /* in place: no reader, no poison */
    run_chunks(&kr, c, 8, 0.125f, &b);
    double md = 0;
    for (int i = 0; i < 8 * 64; i++) md = fmax(md, fabs((double)o1[i] - o2[i]));
    buf_free(&b);
    return md;
}

TEST(a_reader_sees_each_chunk_block_at_its_index_and_only_the_last_as_own)
{
    fake_kv f;
    CHECK(fake_kv_make(&f, DT_F32, 64, 2, 9000, 16, 77) == 0);
    const int ns[] = {300, 5000, 8999};
    float tmp[64];
    for (int k = 0; k < 3; k++) {
        test_reader p = {&f, (uint32_t)(ns[k] - 1) / 16, 0, 0, tmp};
        const double md = reader_vs_in_place(&f, ns[k], 0, false, &p);
        CHECK_MSG(p.wrong == 0, "n_ctx %d: %d reads with a wrong own flag or block", ns[k], p.wrong);
        CHECK_MSG(md <= 1e-4, "n_ctx %d: reader chunks differ from the in-place call by %.3g", ns[k], md);
    }
    fake_kv_free(&f);
}

TEST(with_a_sealed_view_only_the_own_block_goes_through_the_reader)
{
    static const uint32_t types[] = {ATTN_KV_FP8_E4M3, ATTN_KV_KIVI4, ATTN_KV_KIVI2};
    for (int ti = 0; ti < 3; ti++) {
        const uint32_t t = types[ti];
        fake_kv f;
        CHECK((attn_is_kivi(t) ? fake_kv_make_kivi(&f, t, 64, 2, 9000, 16, 123) : fake_kv_make(&f, t, 64, 2, 9000, 16, 123)) == 0);
        float tmp[64];
        const struct { int n, lo; } rows_of[] = {{1, 0}, {16, 0}, {17, 0}, {300, 0}, {300, 290}, {5000, 0}, {8999, 100}};
        for (size_t k = 0; k < sizeof rows_of / sizeof rows_of[0]; k++) {
            test_reader p = {&f, (uint32_t)(rows_of[k].n - 1) / 16, 0, 0, tmp};
            const double md = reader_vs_in_place(&f, rows_of[k].n, rows_of[k].lo, true, &p);
            CHECK_MSG(p.past_reads == 0, "type %#x n_ctx %d: %d reader calls for blocks other than the own one", t,
                      rows_of[k].n, p.past_reads);
            double vmax = 0;
            for (int j = rows_of[k].lo; j < rows_of[k].n; j++) {
                tr_row(&p, 1, (uint32_t)j / 16, (uint32_t)j % 16, 1);
                for (int i = 0; i < 64; i++) vmax = fmax(vmax, fabs(tmp[i]));
            }
            CHECK_MSG(md <= 2e-5 * vmax, "type %#x n_ctx %d lo %d: split differs from one in-place call by %.3g (max|v| %.3g)",
                      t, rows_of[k].n, rows_of[k].lo, md, vmax);
        }
        fake_kv_free(&f);
    }
}

/* rows' outputs of attn_chunks_run against its pieces computed one by one
 * (in reverse order, as threads might finish them) and folded: the same
 * bits; 0 if they differ */
static int pieces_equal_run(const attn_kv *kv, const float *q, int n_ctx, int lo, chunk_buf *b)
{
    enum { R = 8 };
    float o1[R * 64], o2[R * 64];
    attn_row a[R], c[R];
    for (int r = 0; r < R; r++) {
        a[r] = (attn_row){q + r * 64, o1 + r * 64, n_ctx, 1, lo};
        c[r] = (attn_row){q + r * 64, o2 + r * 64, n_ctx, 1, lo};
    }
    run_chunks(kv, a, R, 0.125f, b);
    uint32_t c0;
    const int np = attn_chunks_n_pieces(kv, c, R, &c0);
    if (np <= 0) return 0;
    const size_t pf = attn_chunks_piece_floats(R, 64);
    float *parts = malloc(sizeof(float) * pf * (size_t)np);
    for (int p = np - 1; p >= 0; p--) attn_chunks_piece(kv, c, R, p, c0, 0.125f, b->scratch, b->sf, b->work, parts + pf * (size_t)p);
    attn_chunks_fold(c, R, 64, parts, np);
    free(parts);
    return memcmp(o1, o2, sizeof o1) == 0;
}

TEST(pieces_folded_after_give_the_bits_of_one_run)
{
    float q[8 * 64];
    for (int i = 0; i < 8 * 64; i++) q[i] = 0.8f * rng_gauss();
    for (int ti = 0; ti < FAKE_KV_N_TYPES; ti++) {
        fake_kv f;
        CHECK(fake_kv_make(&f, fake_kv_types[ti], 64, 2, 9000, 16, 600u + ti) == 0);
        chunk_buf b;
        CHECK(buf_make(&b, 9000, 64, 0) == 0);
        CHECK_MSG(pieces_equal_run(&f.kv, q, 9000, 0, &b), "%s n_ctx 9000", fake_kv_type_name(fake_kv_types[ti]));
        CHECK_MSG(pieces_equal_run(&f.kv, q, 8191, 2100, &b), "%s n_ctx 8191 lo 2100", fake_kv_type_name(fake_kv_types[ti]));
        uint32_t c0;
        attn_row shortr = {q, q, 300, 0, 0};
        CHECK(attn_chunks_n_pieces(&f.kv, &shortr, 1, &c0) == 0); /* one call: nothing to split */
        if (fake_kv_types[ti] == ATTN_KV_FP8_E4M3) { /* split mode: the own block is the last piece */
            float tmp[64];
            test_reader p = {&f, (uint32_t)(9000 - 1) / 16, 0, 0, tmp};
            const attn_reader rd = {tr_k_dot, tr_v_axpy, &p, 0};
            attn_kv kr = f.kv;
            kr.reader = &rd;
            kr.sealed = &f.kv;
            CHECK_MSG(pieces_equal_run(&kr, q, 9000, 0, &b), "e4m3 split mode n_ctx 9000");
            attn_row one = {q, q, 300, 0, 0};
            CHECK(attn_chunks_n_pieces(&kr, &one, 1, &c0) == 2); /* split mode splits short rows too */
        }
        buf_free(&b);
        fake_kv_free(&f);
    }
}

TEST(chunk_sizes_are_whole_blocks_and_bound_every_call)
{
    const uint32_t bss[] = {1, 16, 48, 4096};
    for (int i = 0; i < 4; i++) {
        const uint32_t ck = attn_chunk_keys(bss[i]);
        CHECK(ck % bss[i] == 0 && ck >= 2048 && ck < 2048 + bss[i]);
        CHECK(attn_chunk_call_max(bss[i]) == 2 * ck);
    }
}

/* fp8 rows in chunks (the split mode a long row takes) with the kernels
 * capped at AVX2 and at AVX-512: the two fp8 kernels order their float
 * operations differently, so the merged rows agree within 1e-5 max|v| (a
 * GQA group, windows included). */
TEST(fp8_chunks_on_avx512_agree_with_avx2s)
{
    if (!attn_avx512_available()) { test_skip(__func__, "no AVX-512"); return; }
    static const struct { int n, lo; } rows_of[] = {{4097, 0}, {9000, 3000}, {8200, 2047}};
    for (int ti = 5; ti < 7; ti++) { /* e4m3, e5m2 */
        const uint32_t t = fake_kv_types[ti];
        fake_kv f;
        CHECK(fake_kv_make(&f, t, 64, 2, 9000, 16, 1300u + (unsigned)ti) == 0);
        chunk_buf b;
        CHECK(buf_make(&b, 9000, 64, 0) == 0);
        static float q[8 * 64], o[2][8 * 64];
        for (size_t k = 0; k < sizeof rows_of / sizeof rows_of[0]; k++) {
            for (int i = 0; i < 8 * 64; i++) q[i] = 0.8f * rng_gauss();
            for (int v = 0; v < 2; v++) {
                setenv("PAGELLM_KERNELS", v ? "avx512" : "avx2", 1);
                kern_init(0);
                attn_row a[8];
                for (int r = 0; r < 8; r++) a[r] = (attn_row){q + r * 64, o[v] + r * 64, rows_of[k].n, 1, rows_of[k].lo};
                run_chunks(&f.kv, a, 8, 0.125f, &b);
            }
            const double vmax = max_abs_v(&f, 1, 0, rows_of[k].n);
            double md = 0;
            for (int i = 0; i < 8 * 64; i++) md = fmax(md, fabs((double)o[0][i] - o[1][i]));
            CHECK_MSG(md <= 1e-5 * vmax, "%s n_ctx %d lo %d: avx512 chunks differ from avx2's by %.3g (max|v| %.3g)",
                      fake_kv_type_name(t), rows_of[k].n, rows_of[k].lo, md, vmax);
        }
        unsetenv("PAGELLM_KERNELS");
        kern_init(0);
        buf_free(&b);
        fake_kv_free(&f);
    }
}

/* max |v| of head g over keys [0, n) of any fake cache (KIVI or rows). */
static double vmax_any(const fake_kv *f, int g, int n)
{
    if (!attn_is_kivi(f->kv.kv_type)) return max_abs_v(f, g, 0, n);
    double m = 0;
    float v[64];
    for (int j = 0; j < n; j++) {
        fake_kivi_decode(&f->kv, 1, j, g, v);
        for (int i = 0; i < 64; i++) m = fmax(m, fabs(v[i]));
    }
    return m;
}

/* The reference's one call per row over all n keys, for the 16 decode
 * rows of q (heads 0 and 1, 8 each) at depth n, into oref. */
static void decode_ref(const fake_kv *f, int n, const float *q, float *oref, float *ref_scratch, size_t rsf)
{
    for (int r = 0; r < 16; r++) {
        const attn_row one = {q + r * 64, oref + r * 64, n, r / 8, 0};
        attn_paged_ref(&f->kv, &one, 1, 0.125f, ref_scratch, rsf);
    }
}

/* Worst |out - oref| / vmax of the same 16 rows through attn_chunks_run
 * under the active kernel table. */
static double decode_vs_ref(const fake_kv *f, int n, const float *q, const float *oref, double vmax, chunk_buf *b)
{
    enum { R = 16 };
    static float o[R * 64];
    attn_row rows[R];
    for (int r = 0; r < R; r++) rows[r] = (attn_row){q + r * 64, o + r * 64, n, r / 8, 0};
    run_chunks(&f->kv, rows, R, 0.125f, b);
    double md = 0;
    for (int i = 0; i < R * 64; i++) md = fmax(md, fabs((double)o[i] - oref[i]));
    return md / vmax;
}

TEST(decode_rows_across_chunk_boundaries_match_the_reference_on_every_variant)
{
    const int ck = (int)attn_chunk_keys(16), nmax = 3 * ck + 1;
    const int depths[] = {ck - 1, ck, ck + 1, 2 * ck, 2 * ck + 1, 3 * ck - 1, 3 * ck, 3 * ck + 1};
    static const char *const caps[] = {"ref", "avx2", "avx512"};
    enum { NT = FAKE_KV_N_TYPES + 2 };
    static float q[16 * 64], oref[16 * 64];
    for (int i = 0; i < 16 * 64; i++) q[i] = 0.8f * rng_gauss();
    const size_t rsf = attn_scratch_floats(nmax, 64);
    float *ref_scratch = malloc(sizeof(float) * rsf);
    chunk_buf b;
    CHECK(ref_scratch && buf_make(&b, (int)attn_chunk_call_max(16), 64, 0) == 0);
    double worst[NT] = {0};
    for (int ti = 0; ti < NT; ti++) {
        const uint32_t t = ti < FAKE_KV_N_TYPES ? fake_kv_types[ti] : ti == NT - 2 ? ATTN_KV_KIVI4 : ATTN_KV_KIVI2;
        fake_kv f;
        CHECK((attn_is_kivi(t) ? fake_kv_make_kivi(&f, t, 64, 2, nmax, 16, 1700u + ti)
                               : fake_kv_make(&f, t, 64, 2, nmax, 16, 1700u + ti)) == 0);
        /* f16: the weights are rounded to f16 per chunk; else the SIMD
         * variants' 1e-5 of max|v| and as much for the merge */
        const double tol = fake_kv_elem_type(t) == DT_F16 ? 1.0 / 1024 : 2e-5;
        for (size_t k = 0; k < sizeof depths / sizeof depths[0]; k++) {
            const int n = depths[k];
            decode_ref(&f, n, q, oref, ref_scratch, rsf);
            const double vmax = fmax(vmax_any(&f, 0, n), vmax_any(&f, 1, n));
            for (int v = 0; v < 3; v++) {
                if ((v == 1 && !attn_avx2_available()) || (v == 2 && !attn_avx512_available())) continue;
                setenv("PAGELLM_KERNELS", caps[v], 1);
                kern_init(0);
                const double d = decode_vs_ref(&f, n, q, oref, vmax, &b);
                worst[ti] = fmax(worst[ti], d);
                CHECK_MSG(d <= tol, "%s on %s, n_ctx %d (chunk %d): %.3g of max|v| off the reference > %.3g",
                          attn_is_kivi(t) ? (t == ATTN_KV_KIVI4 ? "kivi4" : "kivi2") : fake_kv_type_name(t), caps[v],
                          n, ck, d, tol);
            }
        }
        unsetenv("PAGELLM_KERNELS");
        kern_init(0);
        fake_kv_free(&f);
    }
    buf_free(&b);
    free(ref_scratch);
    INFO("worst |decode - ref| / max|v| at chunk boundaries: f32 %.2g, f16 %.2g, bf16 %.2g, q8_0 %.2g, q4_0 %.2g, "
         "e4m3 %.2g, e5m2 %.2g, f16 pool %.2g, kivi4 %.2g, kivi2 %.2g",
         worst[0], worst[1], worst[2], worst[3], worst[4], worst[5], worst[6], worst[7], worst[8], worst[9]);
}

int main(void)
{
    kern_init(0);
    RUN(short_rows_equal_one_call_over_the_whole_table);
    RUN(long_rows_in_chunks_match_one_call_within_tolerance);
    RUN(a_long_row_gets_the_same_bits_alone_in_a_tile_and_in_a_run_of_tiles);
    RUN(a_reader_sees_each_chunk_block_at_its_index_and_only_the_last_as_own);
    RUN(with_a_sealed_view_only_the_own_block_goes_through_the_reader);
    RUN(pieces_folded_after_give_the_bits_of_one_run);
    RUN(chunk_sizes_are_whole_blocks_and_bound_every_call);
    RUN(fp8_chunks_on_avx512_agree_with_avx2s);
    RUN(decode_rows_across_chunk_boundaries_match_the_reference_on_every_variant);
    return test_summary();
}
