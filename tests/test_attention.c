/* test_attention.c - paged attention (kernels/attention.h): the AVX2 and
 * AVX-512 variants against the reference, and the row-independence invariant.
 *
 * Data: tests/fake_kv.h's pool (K and V planes per block, several KV heads
 * a row, a shuffled block table) in every KV row type: F32, F16, BF16,
 * Q8_0, Q4_0, the OFP8 rows E4M3 and E5M2, and the pool's f16 layout.
 *
 * Tolerance (SIMD vs reference), on each output element, relative to
 * max |v| of the row's values:
 * - F32, BF16, Q8_0, Q4_0, FP8: 1e-5. Only the float order differs (8-lane dots
 *   with a tree reduction, FMA, vector expf within ~2 ulp of libm): a few
 *   ulp on scores, weights and sums.
 * - F16: 2^-10. The weights are rounded to f16 before they weight V (as
 *   llama.cpp); a 1-ulp difference in a weight before that rounding can
 *   flip it by one f16 ulp (2^-11 relative). The flips move the output by
 *   at most 2^-11 x sum p_j x max|v| = 2^-11 max|v|, plus the float noise.
 *
 * Row independence (bit for bit): a call over R rows (GQA heads of several
 * tokens with different n_ctx) gives each row exactly what a call over that
 * row alone gives, and so does the same call with the rows reversed; this
 * is what makes prefill chunking, batching and threads invisible in the
 * tokens.
 *
 * bench/micro/bench_attn_calls.c and bench_attn_decode.c time these
 * kernels on the same data.
 */
#include "test.h"
#include "fake_kv.h"
#include "rng.h"

#include <float.h>
#include <stdint.h>

#include "kernels/attention.h"
#if defined(__x86_64__) || defined(__i386__)
#include "kernels/attention_walk.h"
#endif
#include "kernels/attention_impl.h"
#include "tensor/quant.h"
#include "kernels/kernels.h"
#include "kernels/kern_impl.h"
#include "kv/kv_codec.h"
#include "tensor/dtype.h"

/* max |v| over the V rows of head g, positions < n (the tolerance's scale) */
static float max_abs_v(const fake_kv *f, int g, int n)
{
    const int hd = f->kv.head_dim;
    float *tmp = malloc(sizeof(float) * (size_t)hd), m = 0;
    for (int j = 0; j < n; j++) {
        const uint8_t *blk = f->kv.v_base + (size_t)f->kv.blocks[j / f->kv.block_size] * f->kv.block_bytes;
        float sc;
        memcpy(&sc, blk + f->kv.scale_off + 4 * (size_t)g, 4);
        fake_kv_decode_row(f->kv.kv_type,
                           blk + (size_t)(j % f->kv.block_size) * f->kv.row_bytes + (size_t)g * f->kv.head_bytes, tmp,
                           hd, sc);
        for (int i = 0; i < hd; i++) m = fabsf(tmp[i]) > m ? fabsf(tmp[i]) : m;
    }
    free(tmp);
    return m;
}

static bool type_fits(uint32_t t, int hd) { return fake_kv_head_bytes(t, hd) != 0; }

/* -------------------------------------------------------------- the tests */

typedef void (*attn_fn)(const attn_kv *, const attn_row *, int, float, float *, size_t);

/* A SIMD variant against the reference (tolerance at the top). */
static void simd_vs_reference(attn_fn simd)
{
    static const int hds[] = {8, 64, 128}, reps[] = {1, 2, 4, 8}, bss[] = {1, 16, 32};
    static const int ctxs[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 255, 257, 1000, 2047, 2100};
    const int n_ctxs = (int)(sizeof ctxs / sizeof ctxs[0]);
    double worst[FAKE_KV_N_TYPES] = {0};
    int calls = 0;
    for (int ti = 0; ti < FAKE_KV_N_TYPES; ti++)
        for (int hi = 0; hi < 3; hi++) {
            const uint32_t t = fake_kv_types[ti];
            const int hd = hds[hi];
            if (!type_fits(t, hd)) continue;
            for (int bi = 0; bi < 3; bi++) {
                fake_kv f;
                const int n_kv = 2, nmax = 2100;
                CHECK(fake_kv_make(&f, t, hd, n_kv, nmax, bss[bi], 1000u + 17u * ti + 5u * hi + bi) == 0);
                for (int ri = 0; ri < 4; ri++) {
                    const int rep = reps[ri];
                    /* a subset of the contexts per (rep, block size) keeps the run short */
                    for (int ci = (ri + bi) % 2; ci < n_ctxs; ci += 2) {
                        const int n = ctxs[ci], g = (ci + ri) % n_kv;
                        const size_t sf = attn_scratch_floats(n, hd);
                        float *scratch = malloc(sizeof(float) * sf);
                        float *q = malloc(sizeof(float) * (size_t)rep * hd);
                        float *o_ref = malloc(sizeof(float) * (size_t)rep * hd), *o_simd = malloc(sizeof(float) * (size_t)rep * hd);
                        attn_row rr[8], rs[8];
                        for (int i = 0; i < rep * hd; i++) q[i] = 0.8f * rng_gauss();
                        for (int r = 0; r < rep; r++) {
                            rr[r] = (attn_row){q + r * hd, o_ref + r * hd, n, g, 0};
                            rs[r] = (attn_row){q + r * hd, o_simd + r * hd, n, g, 0};
                        }
                        const float scale = 1.0f / sqrtf((float)hd);
                        CHECK(rep <= attn_rows_max(n));
                        attn_paged_ref(&f.kv, rr, rep, scale, scratch, sf);
                        simd(&f.kv, rs, rep, scale, scratch, sf);
                        const double vmax = max_abs_v(&f, g, n);
                        const double tol = (fake_kv_elem_type(t) == DT_F16 ? 1.0 / 1024 : 1e-5) * vmax;
                        double md = 0;
                        for (int i = 0; i < rep * hd; i++) md = fmax(md, fabs((double)o_ref[i] - o_simd[i]));
                        worst[ti] = fmax(worst[ti], md / vmax);
                        calls++;
                        free(scratch);
                        free(q);
                        free(o_ref);
                        free(o_simd);
                        CHECK_MSG(md <= tol, "%s hd %d rep %d n_ctx %d bs %d: max diff %.3g > tol %.3g",
                                  fake_kv_type_name(t), hd, rep, n, bss[bi], md, tol);
                    }
                }
                fake_kv_free(&f);
            }
        }
    INFO("%d calls; worst |simd - ref| / max|v|: f32 %.2g, f16 %.2g, bf16 %.2g, q8_0 %.2g, q4_0 %.2g, e4m3 %.2g, "
         "e5m2 %.2g, f16 pool %.2g", calls, worst[0], worst[1], worst[2], worst[3], worst[4], worst[5], worst[6],
         worst[7]);
}

TEST(simd_matches_reference_for_every_kv_type_gqa_head_dim_context_and_block_size)
{
    if (!attn_avx2_available()) { test_skip(__func__, "no AVX2+FMA+FAKE_KV_F16C"); return; }
    simd_vs_reference(attn_paged_avx2);
}

/* The AVX-512 variant (its own kernels for the f16 pool layout, q8_0, q4_0,
 * fp8 and KIVI, AVX2's for the rest, f16 rows included). */
TEST(avx512_matches_reference_for_every_kv_type_gqa_head_dim_context_and_block_size)
{
    if (!attn_avx512_available()) { test_skip(__func__, "no AVX-512"); return; }
    simd_vs_reference(attn_paged_avx512);
}

/* One call over R rows == R calls of one row == the call reversed, bit for
 * bit, for one variant. Rows as the forward pass makes them: (KV head g,
 * token, head of g's group) for n_g KV heads from g = 0, consecutive tokens
 * (prefill-like, n_ctx = base + token + 1); R <= attn_rows_max(n). */
static int rows_independent(attn_fn fn, const fake_kv *f, int n_g, int rep, int base, int n_tok, char *why, size_t wn)
{
    const int hd = f->kv.head_dim, R = n_g * rep * n_tok, nmax = base + n_tok;
    const size_t sf = attn_scratch_floats(nmax, hd);
    float *scratch = malloc(sizeof(float) * sf), *q = malloc(sizeof(float) * (size_t)R * hd);
    float *o_all = malloc(sizeof(float) * (size_t)R * hd), *o_one = malloc(sizeof(float) * (size_t)R * hd);
    float *o_rev = malloc(sizeof(float) * (size_t)R * hd);
    attn_row all[ATTN_ROWS_CAP], rev[ATTN_ROWS_CAP];
    int ok = R <= attn_rows_max(nmax) && n_g <= f->n_kv;
    if (!ok) snprintf(why, wn, "%d rows > attn_rows_max(%d) = %d or too many heads", R, nmax, attn_rows_max(nmax));
    for (int i = 0; i < R * hd; i++) q[i] = 0.8f * rng_gauss();
    for (int v = 0; ok && v < R; v++) {
        const int g = v / (rep * n_tok), n = base + (v % (rep * n_tok)) / rep + 1;
        all[v] = (attn_row){q + v * hd, o_all + v * hd, n, g, 0};
        rev[R - 1 - v] = (attn_row){q + v * hd, o_rev + v * hd, n, g, 0};
    }
    const float scale = 1.0f / sqrtf((float)hd);
    if (ok) {
        fn(&f->kv, all, R, scale, scratch, sf);
        fn(&f->kv, rev, R, scale, scratch, sf);
        for (int v = 0; v < R; v++) {
            const attn_row one = {q + v * hd, o_one + v * hd, all[v].n_ctx, all[v].g, all[v].lo};
            fn(&f->kv, &one, 1, scale, scratch, sf);
        }
        for (int v = 0; ok && v < R; v++)
            if (memcmp(o_all + v * hd, o_one + v * hd, sizeof(float) * (size_t)hd) != 0 ||
                memcmp(o_all + v * hd, o_rev + v * hd, sizeof(float) * (size_t)hd) != 0) {
                snprintf(why, wn, "row %d (head %d, n_ctx %d) differs between the batched, single and reversed calls",
                         v, all[v].g, all[v].n_ctx);
                ok = 0;
            }
    }
    free(scratch);
    free(q);
    free(o_all);
    free(o_one);
    free(o_rev);
    return ok;
}

/* prefill tiles of one head (GQA 1..8), decode tiles over several heads,
 * and mixes of both (a tile that crosses a head boundary) */
static const struct { int n_g, rep, n_tok, base; } indep_shapes[] = {
    {1, 1, 16, 0}, {1, 1, 16, 23}, {1, 2, 8, 100}, {1, 4, 4, 1017}, {1, 8, 2, 2030}, {1, 8, 1, 5},
    {1, 1, 3, 0},  {4, 1, 1, 2047}, {4, 2, 1, 300}, {4, 1, 3, 60},  {2, 4, 2, 9},
    /* the V sweep's row chunks (4 rows, then 1-3) with unequal n_ctx */
    {1, 5, 1, 40}, {1, 3, 2, 33},   {2, 7, 1, 70},  {1, 6, 2, 500},
};
TEST(a_batch_of_rows_gives_each_row_bit_for_bit_what_it_gets_alone)
{
    static const int hds[] = {8, 64, 128}, bss[] = {1, 16, 32};
    char why[256];
    for (int ti = 0; ti < FAKE_KV_N_TYPES; ti++)
        for (int hi = 0; hi < 3; hi++) {
            const uint32_t t = fake_kv_types[ti];
            if (!type_fits(t, hds[hi])) continue;
            for (int bi = 0; bi < 3; bi++) {
                fake_kv f;
                CHECK(fake_kv_make(&f, t, hds[hi], 4, 2100, bss[bi], 77u + 13u * ti + 3u * hi + bi) == 0);
                for (size_t s = 0; s < sizeof indep_shapes / sizeof indep_shapes[0]; s++) {
                    const int n_g = indep_shapes[s].n_g, rep = indep_shapes[s].rep, n_tok = indep_shapes[s].n_tok, base = indep_shapes[s].base;
                    int ok = rows_independent(attn_paged_ref, &f, n_g, rep, base, n_tok, why, sizeof why);
                    if (ok && attn_avx2_available())
                        ok = rows_independent(attn_paged_avx2, &f, n_g, rep, base, n_tok, why, sizeof why);
                    if (!ok) fake_kv_free(&f);
                    CHECK_MSG(ok, "%s hd %d bs %d heads %d rep %d: %s", fake_kv_type_name(t), hds[hi], bss[bi], n_g, rep, why);
                }
                fake_kv_free(&f);
            }
        }
}

/* The same for the AVX-512 variant on its own kernels (the f16 pool layout, q8_0,
 * q4_0; f16 rows go to AVX2's): rows in chunks of 1..8 with 1 to 4 key
 * groups a call must give a row the same bits, over head dims 8 and 72
 * (not multiples of 16: f16 only) as well. */
TEST(avx512_batch_of_rows_gives_each_row_bit_for_bit_what_it_gets_alone)
{
    if (!attn_avx512_available()) { test_skip(__func__, "no AVX-512"); return; }
    static const uint32_t types[] = {DT_F16, DT_Q8_0, DT_Q4_0, FAKE_KV_F16C};
    static const int hds[] = {8, 64, 72, 128}, bss[] = {1, 16, 32};
    char why[256];
    for (int ti = 0; ti < 4; ti++)
        for (int hi = 0; hi < 4; hi++) {
            if (!type_fits(types[ti], hds[hi])) continue;
            for (int bi = 0; bi < 3; bi++) {
                fake_kv f;
                CHECK(fake_kv_make(&f, types[ti], hds[hi], 4, 2100, bss[bi], 91u + 7u * ti + 3u * hi + bi) == 0);
                for (size_t s = 0; s < sizeof indep_shapes / sizeof indep_shapes[0]; s++) {
                    const int n_g = indep_shapes[s].n_g, rep = indep_shapes[s].rep;
                    const int ok = rows_independent(attn_paged_avx512, &f, n_g, rep, indep_shapes[s].base,
                                                    indep_shapes[s].n_tok, why, sizeof why);
                    CHECK_MSG(ok, "%s hd %d bs %d heads %d rep %d: %s", fake_kv_type_name(types[ti]), hds[hi], bss[bi], n_g,
                              rep, why);
                }
                fake_kv_free(&f);
            }
        }
}

/* The AVX-512 tiles' two broadcast forms (kern_attn_bcast_embedded: the
 * query element or softmax weight embedded in each FMA, or loaded first)
 * are the same operations in the same order: the same bits, for prefill
 * tiles (one KV head, 8 heads x 4 tokens) and decode calls (4 KV heads x 8
 * rows), every kernel that has both (the f16 pool layout, q8_0, q4_0). */
TEST(avx512_broadcast_forms_give_the_same_bits)
{
    if (!attn_avx512_available()) { test_skip(__func__, "no AVX-512"); return; }
    static const uint32_t types[] = {FAKE_KV_F16C, DT_Q8_0, DT_Q4_0};
    static const int hds[] = {64, 72, 128};
    static const struct { int n_g, rep, n_tok, base; } shapes[] = {{1, 8, 4, 300}, {4, 8, 1, 777}, {2, 4, 2, 33}};
    const int saved = kern_attn_bcast_embedded;
    for (int ti = 0; ti < 3; ti++)
        for (int hi = 0; hi < 3; hi++) {
            const int hd = hds[hi];
            if (!type_fits(types[ti], hd)) continue;
            fake_kv f;
            CHECK(fake_kv_make(&f, types[ti], hd, 4, 800, 16, 606u + 5u * ti + hi) == 0);
            for (int si = 0; si < 3; si++) {
                const int n_g = shapes[si].n_g, rep = shapes[si].rep, R = n_g * rep * shapes[si].n_tok;
                const int nmax = shapes[si].base + shapes[si].n_tok;
                const size_t sf = attn_scratch_floats(nmax, hd);
                float *scratch = malloc(sizeof(float) * sf), *q = malloc(sizeof(float) * (size_t)R * hd);
                float *o[2] = {malloc(sizeof(float) * (size_t)R * hd), malloc(sizeof(float) * (size_t)R * hd)};
                for (int i = 0; i < R * hd; i++) q[i] = 0.8f * rng_gauss();
                for (int e = 0; e < 2; e++) {
                    attn_row rows[ATTN_ROWS_CAP];
                    for (int v = 0; v < R; v++)
                        rows[v] = (attn_row){q + v * hd, o[e] + v * hd, shapes[si].base + (v % (rep * shapes[si].n_tok)) / rep + 1,
                                             v / (rep * shapes[si].n_tok), 0};
                    kern_attn_bcast_embedded = e;
                    attn_paged_avx512(&f.kv, rows, R, 1.0f / sqrtf((float)hd), scratch, sf);
                }
                CHECK_MSG(memcmp(o[0], o[1], sizeof(float) * (size_t)R * hd) == 0, "%s hd %d shape %d: the forms differ",
                          fake_kv_type_name(types[ti]), hd, si);
                free(scratch);
                free(q);
                free(o[0]);
                free(o[1]);
            }
            fake_kv_free(&f);
        }
    kern_attn_bcast_embedded = saved;
}

/* The pool's f16 layout (K in columns, V in head runs) is only another
 * address of the same halves: the reference reads the same keys and
 * values either way, so its outputs are the same bits; the SIMD variants'
 * kernels for it are held to the reference by the tests above (type "f16
 * pool"). Block sizes 1, 5 (short groups of every SIMD width), 16, 32 and
 * 48 (a block of several key groups). */
TEST(f16_pool_layout_reads_the_same_keys_and_values_as_rows)
{
    static const int bss[] = {1, 5, 16, 32, 48}, ctxs[] = {1, 5, 16, 17, 100, 777};
    for (int bi = 0; bi < 5; bi++) {
        fake_kv fr, fc;
        CHECK(fake_kv_make(&fr, DT_F16, 64, 3, 800, bss[bi], 4242u + bi) == 0);
        CHECK(fake_kv_make(&fc, FAKE_KV_F16C, 64, 3, 800, bss[bi], 4242u + bi) == 0);
        CHECK(fc.kv.k_cols && !fr.kv.k_cols && fc.kv.head_bytes == (size_t)bss[bi] * fc.kv.row_bytes && fr.kv.row_bytes == 3 * fr.kv.head_bytes);
        for (int ci = 0; ci < 6; ci++) {
            const int n = ctxs[ci];
            const size_t sf = attn_scratch_floats(n, 64);
            float *scratch = malloc(sizeof(float) * sf), q[4 * 64], o[2][4 * 64];
            for (int i = 0; i < 4 * 64; i++) q[i] = rng_gauss();
            attn_row rr[4], rc[4];
            for (int r = 0; r < 4; r++) {
                rr[r] = (attn_row){q + 64 * r, o[0] + 64 * r, n - r > 0 ? n - r : 1, r % 3, 0};
                rc[r] = (attn_row){q + 64 * r, o[1] + 64 * r, n - r > 0 ? n - r : 1, r % 3, 0};
            }
            attn_paged_ref(&fr.kv, rr, 4, 0.125f, scratch, sf);
            attn_paged_ref(&fc.kv, rc, 4, 0.125f, scratch, sf);
            free(scratch);
            CHECK_MSG(memcmp(o[0], o[1], sizeof o[0]) == 0, "bs %d n_ctx %d: the pool layout and rows differ", bss[bi], n);
        }
        fake_kv_free(&fr);
        fake_kv_free(&fc);
    }
}

/* The kv pool keeps a layer's K planes in one run and its V planes in
 * another, each with its own step (attn_kv.v_block_bytes): every variant
 * reads such a cache, whose V step is a line longer than its K step, bit
 * for bit as the same rows with each block's planes side by side. */
TEST(split_planes_read_as_planes_side_by_side_in_every_variant)
{
    const attn_fn fns[] = {attn_paged_ref, attn_avx2_available() ? attn_paged_avx2 : NULL,
                           attn_avx512_available() ? attn_paged_avx512 : NULL};
    const char *const names[] = {"reference", "avx2", "avx512"};
    static const int ctxs[] = {1, 17, 100, 777};
    for (int ti = 0; ti < FAKE_KV_N_TYPES; ti++) {
        const uint32_t t = fake_kv_types[ti];
        fake_kv fp, fs;
        CHECK(fake_kv_make_laid(&fp, t, 64, 3, 800, 16, 777u + ti, (fake_kv_layout){false, 1, false}) == 0);
        CHECK(fake_kv_make_laid(&fs, t, 64, 3, 800, 16, 777u + ti, (fake_kv_layout){false, 1, true}) == 0);
        CHECK(fs.kv.v_block_bytes == fs.kv.block_bytes + 64 && fp.kv.v_block_bytes == fp.kv.block_bytes);
        for (int v = 0; v < 3; v++) {
            if (!fns[v]) continue;
            for (int ci = 0; ci < 4; ci++) {
                const int n = ctxs[ci];
                const size_t sf = attn_scratch_floats(n, 64);
                float *scratch = malloc(sizeof(float) * sf), q[4 * 64], o[2][4 * 64];
                CHECK(scratch);
                for (int i = 0; i < 4 * 64; i++) q[i] = rng_gauss();
                attn_row rp[4], rs[4];
                for (int r = 0; r < 4; r++) {
                    rp[r] = (attn_row){q + 64 * r, o[0] + 64 * r, n - r > 0 ? n - r : 1, r % 3, 0};
                    rs[r] = (attn_row){q + 64 * r, o[1] + 64 * r, n - r > 0 ? n - r : 1, r % 3, 0};
                }
                fns[v](&fp.kv, rp, 4, 0.125f, scratch, sf);
                fns[v](&fs.kv, rs, 4, 0.125f, scratch, sf);
                free(scratch);
                CHECK_MSG(memcmp(o[0], o[1], sizeof o[0]) == 0, "%s %s n_ctx %d: split planes read differently",
                          names[v], fake_kv_type_name(t), n);
            }
        }
        fake_kv_free(&fp);
        fake_kv_free(&fs);
    }
}

/* The q8_0 and q4_0 scores of the AVX-512 variant (VNNI) are the
 * reference's: exact int block dots, then its float operations. With one
 * key the weight is exactly 1, so out = V bit for bit; with more the
 * weights come from the same scores, so the outputs agree within the
 * softmax's last bits (vector expf, sum order). */
TEST(avx512_q8_0_q4_0_scores_are_the_references)
{
    if (!attn_avx512_available()) { test_skip(__func__, "no AVX-512"); return; }
    for (int ti = 0; ti < 2; ti++) {
        fake_kv f;
        CHECK(fake_kv_make(&f, ti ? DT_Q4_0 : DT_Q8_0, 128, 1, 40, 16, 17) == 0);
        const size_t sf = attn_scratch_floats(40, 128);
        float *scratch = malloc(sizeof(float) * sf), q[128], o[2][128];
        for (int i = 0; i < 128; i++) q[i] = rng_gauss();
        for (int n = 1; n <= 40; n += 13) {
            attn_row r0 = {q, o[0], n, 0, 0}, r1 = {q, o[1], n, 0, 0};
            attn_paged_ref(&f.kv, &r0, 1, 0.09f, scratch, sf);
            attn_paged_avx512(&f.kv, &r1, 1, 0.09f, scratch, sf);
            double md = 0;
            for (int i = 0; i < 128; i++) md = fmax(md, fabs((double)o[0][i] - o[1][i]));
            CHECK_MSG(n == 1 ? md == 0 : md <= 1e-6 * max_abs_v(&f, 0, n), "%s n_ctx %d: max diff %.3g",
                      ti ? "q4_0" : "q8_0", n, md);
        }
        free(scratch);
        fake_kv_free(&f);
    }
}

#if defined(__x86_64__) || defined(__i386__)
/* The int8 kernels' query (attn_query_q8): quant_q8_0_quantize_row's
 * bytes for gaussian rows, rows with ties at .5 after scaling, zero blocks,
 * huge and tiny values, and rows with an inf or a NaN (the reference's
 * own mapping); the block sums x offset as the scalar sum gives them. */
TEST(query_q8_is_the_references_bytes_and_sums)
{
    if (!attn_avx2_available()) { test_skip(__func__, "no AVX2"); return; }
    enum { HD = 256, NB = HD / 32 };
    int bad = -1;
    for (int c = 0; c < 400 && bad < 0; c++) {
        float q[HD];
        for (int i = 0; i < HD; i++) q[i] = rng_gauss() * (c % 7 == 0 ? 1e30f : c % 7 == 1 ? 1e-30f : 3.0f);
        if (c % 5 == 2) /* amax 127 x 2^k: every integer and half-integer multiple scales to a tie */
            for (int i = 0; i < HD; i++) q[i] = i % 32 == 0 ? 127.0f : (float)(rng_u32() % 255) * 0.5f - 63.5f;
        if (c % 5 == 3) memset(q + 32, 0, 32 * sizeof(float));
        if (c % 11 == 4) q[rng_u32() % HD] = c % 2 ? INFINITY : -INFINITY;
        if (c % 11 == 5) q[rng_u32() % HD] = NAN;
        block_q8_0 want[NB], got[NB];
        int32_t sums[NB];
        quant_q8_0_quantize_row(q, want, HD);
        attn_query_q8(q, got, HD, c % 2 ? 128 : 8, sums);
        for (int b = 0; b < NB && bad < 0; b++) {
            int32_t s = 0;
            for (int i = 0; i < 32; i++) s += want[b].qs[i];
            if (memcmp(&want[b], &got[b], sizeof want[b]) != 0 || sums[b] != (c % 2 ? 128 : 8) * s) bad = c;
        }
    }
    CHECK_MSG(bad < 0, "case %d: bytes or sums differ from the reference", bad);
}
#endif

/* The in-register fp8 decodings (AVX2 and AVX-512, scale folded into the
 * weight) and the reference's give every code's value exactly, as kv_codec.h decodes it
 * (NaN codes included): one token, so the weight is 1 and out = V. */
TEST(fp8_every_code_reads_as_the_codec_decodes_it)
{
    for (int ti = 5; ti < 7; ti++) { /* e4m3, e5m2 */
        const uint32_t t = fake_kv_types[ti];
        fake_kv f;
        CHECK(fake_kv_make(&f, t, 256, 1, 1, 16, 3) == 0);
        uint8_t *vrow = (uint8_t *)f.kv.v_base + (size_t)f.table[0] * f.kv.block_bytes;
        float sc, want[256], q[256], o[3][256];
        memcpy(&sc, vrow + f.kv.scale_off, 4);
        for (int i = 0; i < 256; i++) {
            vrow[i] = (uint8_t)i;
            want[i] = t == ATTN_KV_FP8_E4M3 ? kv_e4m3_to_f32((uint8_t)i) * sc : kv_e5m2_to_f32((uint8_t)i);
            q[i] = 0.01f * rng_gauss();
        }
        const size_t sf = attn_scratch_floats(1, 256);
        float *scratch = malloc(sizeof(float) * sf);
        attn_row r0 = {q, o[0], 1, 0, 0}, r1 = {q, o[1], 1, 0, 0}, r2 = {q, o[2], 1, 0, 0};
        attn_paged_ref(&f.kv, &r0, 1, 0.0625f, scratch, sf);
        if (attn_avx2_available()) attn_paged_avx2(&f.kv, &r1, 1, 0.0625f, scratch, sf);
        else memcpy(o[1], o[0], sizeof o[0]);
        if (attn_avx512_available()) attn_paged_avx512(&f.kv, &r2, 1, 0.0625f, scratch, sf);
        else memcpy(o[2], o[0], sizeof o[0]);
        int bad = -1;
        for (int i = 0; i < 256 && bad < 0; i++)
            for (int v = 0; v < 3; v++)
                if (isnan(want[i]) ? !isnan(o[v][i]) : o[v][i] != want[i]) bad = i;
        free(scratch);
        fake_kv_free(&f);
        CHECK_MSG(bad < 0, "%s code 0x%02x: ref %g, avx2 %g, avx512 %g, codec %g", fake_kv_type_name(t),
                  bad < 0 ? 0 : bad, bad < 0 ? 0.0 : o[0][bad], bad < 0 ? 0.0 : o[1][bad], bad < 0 ? 0.0 : o[2][bad],
                  bad < 0 ? 0.0 : want[bad]);
    }
}

/* attn_paged follows kern_init: the reference when forced, else the SIMD
 * variant when the CPU has it (same bits as calling it directly). */
TEST(dispatch_follows_kern_init)
{
    fake_kv f;
    CHECK(fake_kv_make(&f, DT_F16, 64, 1, 300, 16, 5) == 0);
    const size_t sf = attn_scratch_floats(300, 64);
    float *scratch = malloc(sizeof(float) * sf), q[64], o[3][64];
    for (int i = 0; i < 64; i++) q[i] = rng_gauss();
    attn_row r0 = {q, o[0], 300, 0, 0}, r1 = {q, o[1], 300, 0, 0}, r2 = {q, o[2], 300, 0, 0};
    kern_init(1);
    attn_paged(&f.kv, &r0, 1, 0.125f, scratch, sf);
    attn_paged_ref(&f.kv, &r1, 1, 0.125f, scratch, sf);
    kern_init(0);
    int same_ref = memcmp(o[0], o[1], sizeof o[0]) == 0, same_simd = 1;
    if (attn_avx2_available()) { /* the AVX-512 variant when the kernel table is an AVX-512 one */
        attn_paged(&f.kv, &r0, 1, 0.125f, scratch, sf);
        const bool x512 = strncmp(kern_variant(), "avx512", 6) == 0 && attn_avx512_available();
        (x512 ? attn_paged_avx512 : attn_paged_avx2)(&f.kv, &r2, 1, 0.125f, scratch, sf);
        same_simd = memcmp(o[0], o[2], sizeof o[0]) == 0;
    }
    free(scratch);
    fake_kv_free(&f);
    CHECK(same_ref);
    CHECK(same_simd);
}

/* vline_pf (the AVX-512 V pass's prefetch of head-major planes) hands out
 * every line of each block's run of the call's heads exactly once, block
 * after block in sweep order, in spans that never cross a block or pass
 * the goal; blocks whose base is not line aligned (fake_kv's blocks are
 * 16 bytes past a multiple of their planes) cover the head bytes too. The
 * kernel's use: per chunk of keys a goal, spans of up to a tile's keys,
 * then vline_until for the rest. x86 only (the header's prefetches). */
TEST(vline_prefetch_walk_covers_each_blocks_heads_once_in_order)
{
#if defined(__x86_64__) || defined(__i386__)
    const int bss[] = {1, 5, 16, 48}, ns[] = {1, 77, 300};
    for (int bi = 0; bi < 4; bi++)
        for (int ni = 0; ni < 3; ni++) {
            const int bs = bss[bi], n = ns[ni], n_kv = 4, hd = 64;
            fake_kv f;
            CHECK(fake_kv_make(&f, DT_F16, hd, n_kv, n, bs, 77u + (uint64_t)bi) == 0);
            const attn_kv kv = f.kv; /* rows: a row holds every head; as a head-major plane: one head's run */
            attn_kv hm = kv;
            hm.row_bytes = (size_t)hd * 2;
            hm.head_bytes = hm.row_bytes * (size_t)bs;
            const int gmin = 1, gmax = 2, nblk = (n + bs - 1) / bs;
            vline_pf p = vline_at(&hm, kv.v_base, n, gmin, gmax);
            /* the lines expected, in order */
            size_t want_n = 0, got_n = 0;
            const size_t cap = (size_t)nblk * (hm.head_bytes * 2 / 64 + 2);
            uintptr_t *want = malloc(sizeof(uintptr_t) * cap), *got = malloc(sizeof(uintptr_t) * (cap + 1));
            CHECK(want && got);
            for (int b = 0; b < nblk; b++) {
                const uintptr_t a = (uintptr_t)(kv.v_base + (size_t)kv.blocks[b] * kv.block_bytes + (size_t)gmin * hm.head_bytes);
                for (uintptr_t l = a & ~(uintptr_t)63; l < a + (size_t)(gmax - gmin + 1) * hm.head_bytes; l += 64) want[want_n++] = l;
            }
            bool ok = true;
            for (int j0 = 0; j0 < n && ok; j0 += 32) {
                vline_aim(&p, j0 + 32 + 32); /* as the kernel: the chunk and pfd keys ahead */
                const char *at;
                for (int m, k = 0; (m = vline_span(&p, 7 + k % 29, &at)) > 0; k++) {
                    const int blk_before = (int)(((uintptr_t)at - (uintptr_t)kv.v_base) / kv.block_bytes);
                    for (int i = 0; i < m && ok; i++) {
                        ok = got_n < cap && ((uintptr_t)at + 64 * (size_t)i) % 64 == 0;
                        if (ok) got[got_n++] = (uintptr_t)at + 64 * (size_t)i;
                    }
                    /* a span stays in one block (the physical block of its first line, or a line before it) */
                    const int blk_after = (int)(((uintptr_t)at + 64 * (size_t)(m - 1) - (uintptr_t)kv.v_base) / kv.block_bytes);
                    ok = ok && blk_after - blk_before <= 1 && p.blk <= p.goal;
                }
            }
            CHECK_MSG(ok && got_n == want_n && memcmp(got, want, sizeof(uintptr_t) * want_n) == 0,
                      "bs %d n %d: %zu lines handed out, %zu expected", bs, n, got_n, want_n);
            free(want);
            free(got);
            fake_kv_free(&f);
        }
#endif
}

/* The scratch size covers the largest call, and attn_rows_max shrinks with
 * the context so the scores stay O(rows x n_ctx) within a budget. */
/* Sealed KIVI blocks read in place (attention_kivi.c): the reference
 * against a double-precision oracle over the dequantized cache (the fold
 * of scales into the query is algebra, not an approximation), and the
 * AVX2 and AVX-512 entry points against the reference (the same products
 * and chains but for the softmax), windows and GQA included, AVX-512 bit
 * for bit AVX2's (the same chains and kern_softmax); rows of mixed
 * contexts in one call give the bits they give alone (both variants). */
static double kivi_oracle_diff(const fake_kv *f, const attn_row *rows, int n, float scale)
{
    const int hd = f->kv.head_dim;
    double md = 0;
    float *k = malloc(sizeof(float) * (size_t)hd), *v = malloc(sizeof(float) * (size_t)hd);
    double *s = malloc(sizeof(double) * (size_t)rows[0].n_ctx), *o = malloc(sizeof(double) * (size_t)hd);
    for (int r = 0; r < n; r++) {
        const attn_row *w = &rows[r];
        double mx = -INFINITY, sum = 0;
        for (int j = w->lo; j < w->n_ctx; j++) {
            fake_kivi_decode(&f->kv, 0, j, w->g, k);
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)w->q[i] * k[i];
            s[j] = d * scale;
            mx = fmax(mx, s[j]);
        }
        for (int j = w->lo; j < w->n_ctx; j++) sum += s[j] = exp(s[j] - mx);
        for (int i = 0; i < hd; i++) o[i] = 0;
        for (int j = w->lo; j < w->n_ctx; j++) {
            fake_kivi_decode(&f->kv, 1, j, w->g, v);
            for (int i = 0; i < hd; i++) o[i] += s[j] / sum * v[i];
        }
        for (int i = 0; i < hd; i++) md = fmax(md, fabs(o[i] - w->out[i]));
    }
    free(k), free(v), free(s), free(o);
    return md;
}

TEST(kivi_in_place_matches_the_dequantized_oracle_and_simd_the_reference)
{
    static const struct { int hd, n_kv, bs; } shapes[] = {{8, 4, 16}, {64, 2, 16}, {64, 2, 7}, {128, 2, 32}, {64, 4, 20}, {32, 2, 64}};
    static const int ctxs[] = {1, 7, 8, 9, 16, 17, 33, 100, 257, 1000};
    static const uint32_t types[] = {ATTN_KV_KIVI4, ATTN_KV_KIVI2};
    double worst_oracle = 0, worst_simd = 0;
    int calls = 0;
    for (int ti = 0; ti < 2; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int hd = shapes[si].hd, nmax = 1000;
            fake_kv f;
            CHECK(fake_kv_make_kivi(&f, types[ti], hd, shapes[si].n_kv, nmax, shapes[si].bs, 500u + 7u * ti + si) == 0);
            for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++)
                for (int ri = 0; ri < 3; ri++) { /* 16 rows: a prefill tile, 8 heads x 2 tokens */
                    const int rep = ri == 0 ? 1 : 8 * ri;
                    const int n = ctxs[ci], g = (int)(ci % (size_t)shapes[si].n_kv), lo = ci % 3 == 2 ? n / 3 : 0;
                    const size_t sf = attn_scratch_floats(n, hd);
                    float *scratch = malloc(sizeof(float) * sf), *q = malloc(sizeof(float) * (size_t)rep * hd);
                    float *o[3];
                    for (int v = 0; v < 3; v++) o[v] = malloc(sizeof(float) * (size_t)rep * hd);
                    attn_row rr[3][16];
                    for (int i = 0; i < rep * hd; i++) q[i] = 0.8f * rng_gauss();
                    for (int v = 0; v < 3; v++)
                        for (int r = 0; r < rep; r++) rr[v][r] = (attn_row){q + r * hd, o[v] + r * hd, n, g, lo};
                    const float scale = 1.0f / sqrtf((float)hd);
                    float lse[2][16];
                    attn_kv kv = f.kv;
                    kv.lse = lse[0];
                    attn_paged_ref(&kv, rr[0], rep, scale, scratch, sf);
                    double vmax = 0;
                    for (int j = lo; j < n; j++) {
                        float vv[128];
                        fake_kivi_decode(&f.kv, 1, j, g, vv);
                        for (int i = 0; i < hd; i++) vmax = fmax(vmax, fabs(vv[i]));
                    }
                    const double od = kivi_oracle_diff(&f, rr[0], rep, scale);
                    worst_oracle = fmax(worst_oracle, od / vmax);
                    CHECK_MSG(od <= 1e-4 * vmax, "kivi%d hd %d bs %d n_ctx %d lo %d: reference off the oracle by %.3g",
                              ti ? 2 : 4, hd, shapes[si].bs, n, lo, od);
                    for (int v = 1; v < 3; v++) {
                        if (v == 1 ? !attn_avx2_available() : !attn_avx512_available()) continue;
                        kv.lse = lse[1];
                        (v == 1 ? attn_paged_avx2 : attn_paged_avx512)(&kv, rr[v], rep, scale, scratch, sf);
                        double md = 0;
                        for (int i = 0; i < rep * hd; i++) md = fmax(md, fabs((double)o[0][i] - o[v][i]));
                        for (int r = 0; r < rep; r++)
                            CHECK_MSG(fabsf(lse[0][r] - lse[1][r]) <= 1e-5f * fmaxf(1.0f, fabsf(lse[0][r])),
                                      "kivi lse %g vs %g", lse[0][r], lse[1][r]);
                        worst_simd = fmax(worst_simd, md / vmax);
                        if (v == 2 && attn_avx2_available()) /* the same chains and softmax as AVX2's: its bits */
                            CHECK_MSG(memcmp(o[1], o[2], sizeof(float) * (size_t)rep * hd) == 0,
                                      "kivi%d hd %d bs %d rep %d n_ctx %d lo %d: avx512 differs from avx2", ti ? 2 : 4,
                                      hd, shapes[si].bs, rep, n, lo);
                        CHECK_MSG(md <= 1e-5 * vmax, "kivi%d %s hd %d bs %d rep %d n_ctx %d lo %d: %.3g off the reference",
                                  ti ? 2 : 4, v == 1 ? "avx2" : "avx512", hd, shapes[si].bs, rep, n, lo, md);
                    }
                    for (int v = 1; v < 3 && rep >= 8; v++) { /* row independence: mixed rows, batch vs alone */
                        if (v == 1 ? !attn_avx2_available() : !attn_avx512_available()) continue;
                        void (*run)(const attn_kv *, const attn_row *, int, float, float *, size_t) =
                            v == 1 ? attn_paged_avx2 : attn_paged_avx512;
                        attn_row mix[16];
                        float one[128];
                        for (int r = 0; r < rep; r++) {
                            const int nr = n - 3 * r > 1 ? n - 3 * r : 1;
                            mix[r] = (attn_row){q + r * hd, o[v] + r * hd, nr, g, lo < nr ? lo : nr - 1};
                        }
                        run(&f.kv, mix, rep, scale, scratch, sf);
                        for (int r = 0; r < rep; r++) {
                            attn_row alone = mix[r];
                            alone.out = one;
                            run(&f.kv, &alone, 1, scale, scratch, sf);
                            CHECK_MSG(memcmp(one, mix[r].out, sizeof(float) * (size_t)hd) == 0,
                                      "kivi%d %s hd %d n_ctx %d: row %d of a mixed batch differs from it alone",
                                      ti ? 2 : 4, v == 1 ? "avx2" : "avx512", hd, mix[r].n_ctx, r);
                        }
                    }
                    calls++;
                    free(scratch), free(q);
                    for (int v = 0; v < 3; v++) free(o[v]);
                }
            fake_kv_free(&f);
        }
    INFO("%d KIVI calls; worst / max|v|: reference vs oracle %.2g, simd vs reference %.2g", calls, worst_oracle,
         worst_simd);
}

/* max over keys j < n of scale x sum_d |q_d k_jd| (head g): the size of a
 * row's scores, which sets how far two orders of the dot products may
 * move a softmax weight (about an ulp of it, relative). */
static double max_score_size(const fake_kv *f, const float *q, int g, int n, float scale)
{
    const int hd = f->kv.head_dim;
    float *k = malloc(sizeof(float) * (size_t)hd);
    double m = 0;
    for (int j = 0; j < n; j++) {
        const uint8_t *blk = f->kv.k_base + (size_t)f->kv.blocks[j / f->kv.block_size] * f->kv.block_bytes;
        float sc;
        memcpy(&sc, blk + f->kv.scale_off + 4 * (size_t)g, 4);
        fake_kv_decode_row(f->kv.kv_type,
                           blk + (size_t)(j % f->kv.block_size) * f->kv.row_bytes + (size_t)g * f->kv.head_bytes, k, hd, sc);
        double a = 0;
        for (int i = 0; i < hd; i++) a += fabs((double)q[i] * k[i]);
        m = isfinite(a) && a * scale > m ? a * scale : m;
    }
    free(k);
    return m;
}

/* fp8 caches on AVX-512 (attention_fp8_avx512.c: lanes over keys, its own
 * order of operations) against the reference within the tolerance of
 * simd_vs_reference: head dims not a multiple of 16 or 32 (masked key
 * slices and V tails), block sizes that split a 16-key step (e4m3's scale
 * per key), contexts not a multiple of 16 (partial key steps), GQA
 * segments of 1..16 rows (16: a prefill tile, 2 tokens x 8 heads) with
 * mixed contexts in one call, several KV heads a call, windows (lo), and,
 * in every key and value row, the extreme codes (+-max, +-0, +-smallest
 * subnormal). A second pass puts a NaN code (S.1111.111) in one key: then
 * the outputs must be NaN exactly where the reference's are, and the
 * log-sum-exps too. */
TEST(avx512_fp8_matches_the_reference_on_extreme_codes_and_nan)
{
    if (!attn_avx512_available() || !attn_avx2_available()) { test_skip(__func__, "no AVX-512"); return; }
    static const struct { int hd, n_kv, bs; } shapes[] = {{8, 3, 16}, {24, 2, 7}, {64, 4, 16}, {72, 2, 32}, {128, 2, 1}};
    static const int ctxs[] = {1, 2, 15, 16, 17, 31, 33, 100, 257, 700};
    static const int reps[] = {1, 2, 3, 5, 8, 11, 16};
    static const uint8_t extreme[] = {0x7E, 0xFE, 0x00, 0x80, 0x01, 0x81, 0x08, 0x77};
    int calls = 0;
    for (int ti = 5; ti < 7; ti++) /* e4m3, e5m2 */
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const uint32_t t = fake_kv_types[ti];
            const int hd = shapes[si].hd, n_kv = shapes[si].n_kv, bs = shapes[si].bs, nmax = 700;
            fake_kv f;
            CHECK(fake_kv_make(&f, t, hd, n_kv, nmax, bs, 900u + 11u * ti + si) == 0);
            for (int j = 0; j < nmax; j++) /* extreme codes at a different dim in each row */
                for (int pl = 0; pl < 2; pl++)
                    for (int g = 0; g < n_kv; g++) {
                        uint8_t *row = (uint8_t *)(pl ? f.kv.v_base : f.kv.k_base) +
                                       (size_t)f.kv.blocks[j / bs] * f.kv.block_bytes + (size_t)(j % bs) * f.kv.row_bytes +
                                       (size_t)g * f.kv.head_bytes;
                        row[(j * 5 + g) % hd] = extreme[(j + pl) % 8];
                        if (t == ATTN_KV_FP8_E5M2) row[(j * 5 + g) % hd] &= 0x7B; /* e5m2: finite, small */
                    }
            for (int nan = 0; nan < 2; nan++) {
                if (nan) { /* a NaN code in key 5 of head 0 */
                    uint8_t *row = (uint8_t *)f.kv.k_base + (size_t)f.kv.blocks[5 / bs] * f.kv.block_bytes +
                                   (size_t)(5 % bs) * f.kv.row_bytes;
                    row[hd - 1] = t == ATTN_KV_FP8_E4M3 ? 0xFF : 0x7F;
                }
                for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++)
                    for (size_t ri = 0; ri < sizeof reps / sizeof reps[0]; ri++) {
                        const int n = ctxs[ci], rep = reps[ri], lo = ci % 3 == 2 ? n / 3 : 0;
                        const int R = rep * n_kv > 16 ? 16 : rep * n_kv; /* rows: rep a KV head, heads in order */
                        const size_t sf = attn_scratch_floats(n, hd);
                        float *scratch = malloc(sizeof(float) * sf), *q = malloc(sizeof(float) * (size_t)R * hd);
                        float *o[2] = {malloc(sizeof(float) * (size_t)R * hd), malloc(sizeof(float) * (size_t)R * hd)};
                        float lse[2][16];
                        attn_row rr[2][16];
                        for (int i = 0; i < R * hd; i++) q[i] = 0.8f * rng_gauss();
                        for (int v = 0; v < 2; v++)
                            for (int r = 0; r < R; r++) {
                                const int nr = n - (r % rep) > 1 ? n - (r % rep) : 1; /* mixed contexts in a segment */
                                rr[v][r] = (attn_row){q + r * hd, o[v] + r * hd, nr, r / rep, lo < nr ? lo : nr - 1};
                            }
                        CHECK(R <= attn_rows_max(n));
                        const float scale = 1.0f / sqrtf((float)hd);
                        attn_kv kv = f.kv;
                        kv.lse = lse[0];
                        attn_paged_ref(&kv, rr[0], R, scale, scratch, sf);
                        kv.lse = lse[1];
                        attn_paged_avx512(&kv, rr[1], R, scale, scratch, sf);
                        /* each row's error over its tolerance: 1e-5 max|v|, plus an ulp of its largest
                         * score per unit of weight (the extreme codes make scores of thousands) */
                        double md = 0, vmax = 0, ld = 0;
                        bool nan_same = true;
                        for (int r = 0; r < R; r++) {
                            const double vm = max_abs_v(&f, rr[0][r].g, n);
                            const double ss = max_score_size(&f, rr[0][r].q, rr[0][r].g, n, scale);
                            const double tol = 1e-5 + 2 * FLT_EPSILON * ss;
                            vmax = fmax(vmax, vm);
                            nan_same &= isnan(lse[0][r]) == isnan(lse[1][r]);
                            if (!isnan(lse[0][r])) ld = fmax(ld, fabs((double)lse[0][r] - lse[1][r]) / fmax(1.0, ss) / tol);
                            for (int i = 0; i < hd; i++) {
                                const float a = o[0][r * hd + i], b = o[1][r * hd + i];
                                nan_same &= isnan(a) == isnan(b);
                                if (!isnan(a)) md = fmax(md, fabs((double)a - b) / (tol * vm));
                            }
                        }
                        CHECK_MSG(nan_same && md <= 1 && ld <= 1,
                                  "%s hd %d bs %d rep %d n_kv %d n_ctx %d lo %d nan %d: avx512 differs from the reference "
                                  "by %.3g tolerances (max|v| %.3g), log-sum-exp by %.3g, NaNs %s",
                                  fake_kv_type_name(t), hd, bs, rep, n_kv, n, lo, nan, md, vmax, ld, nan_same ? "same" : "differ");
                        /* the NaN key makes NaN every output of the rows of head 0 whose window holds it, and
                         * no other row's */
                        for (int r = 0; r < R; r++) {
                            const attn_row *w = &rr[1][r];
                            const bool sees = nan && w->g == 0 && w->lo <= 5 && w->n_ctx > 5;
                            int nans = 0;
                            for (int i = 0; i < hd; i++) nans += isnan(w->out[i]);
                            CHECK_MSG(nans == (sees ? hd : 0), "%s hd %d n_ctx %d lo %d row %d: %d NaN outputs",
                                      fake_kv_type_name(t), hd, w->n_ctx, w->lo, r, nans);
                        }
                        calls++;
                        free(scratch), free(q), free(o[0]), free(o[1]);
                    }
            }
            fake_kv_free(&f);
        }
    INFO("%d fp8 calls, avx512 within tolerance of the reference, NaNs where it has them", calls);
}

TEST(scratch_sizing)
{
    CHECK_EQ_INT(attn_rows_max(1), ATTN_ROWS_CAP);
    CHECK_EQ_INT(attn_rows_max(2048), ATTN_ROWS_CAP);
    CHECK(attn_rows_max(1 << 20) >= 1);
    CHECK(attn_rows_max(131072) < ATTN_ROWS_CAP);
    CHECK(attn_scratch_floats(131072, 128) < (size_t)8 << 20);
    for (int n = 1; n < 5000; n += 997) CHECK(attn_scratch_floats(n, 64) >= (size_t)attn_rows_max(n) * (size_t)n);
}

int main(void)
{
    RUN(simd_matches_reference_for_every_kv_type_gqa_head_dim_context_and_block_size);
    RUN(avx512_matches_reference_for_every_kv_type_gqa_head_dim_context_and_block_size);
    RUN(a_batch_of_rows_gives_each_row_bit_for_bit_what_it_gets_alone);
    RUN(avx512_batch_of_rows_gives_each_row_bit_for_bit_what_it_gets_alone);
    RUN(avx512_broadcast_forms_give_the_same_bits);
    RUN(f16_pool_layout_reads_the_same_keys_and_values_as_rows);
    RUN(split_planes_read_as_planes_side_by_side_in_every_variant);
    RUN(avx512_q8_0_q4_0_scores_are_the_references);
#if defined(__x86_64__) || defined(__i386__)
    RUN(query_q8_is_the_references_bytes_and_sums);
#endif
    RUN(fp8_every_code_reads_as_the_codec_decodes_it);
    RUN(dispatch_follows_kern_init);
    RUN(vline_prefetch_walk_covers_each_blocks_heads_once_in_order);
    RUN(kivi_in_place_matches_the_dequantized_oracle_and_simd_the_reference);
    RUN(avx512_fp8_matches_the_reference_on_extreme_codes_and_nan);
    RUN(scratch_sizing);
    return test_summary();
}
