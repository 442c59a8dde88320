/* test_swa.c - sliding-window attention (pl_ctx_params.swa; kernels'
 * attn_row.lo, forward's fwd_seq.window/pos0, rt_window.c's front drop).
 *
 * Kernel: rows with a lower bound lo against an explicit computation in
 * double; the same rows with the blocks before lo removed from the table
 * (slots moved down) give the same bits; a call over rows with mixed lo
 * gives each row what a call over it alone gives.
 *
 * Model: a synthetic tiny model (4 layers) declaring sliding_window = 40,
 * blocks of 16, decoded far past 4 W:
 *   - logits bit for bit equal whether the blocks before the window are
 *     freed (default) or kept with the mask only (swa_keep_blocks), for
 *     several KV dtypes and the static layout, and through the engine;
 *   - prefill in one call (cut into pieces by the window) vs token by
 *     token: within the tolerance of the other prefill tests;
 *   - the mask itself: with L layers and window W the last token's logits
 *     depend exactly on the tokens at positions >= p - L (W - 1) (each
 *     layer reaches W - 1 positions further back, HF's kv_idx > q_idx - W):
 *     a change at p - L (W - 1) moves them, one at p - L (W - 1) - 1 does
 *     not (bit for bit), while with --swa off it does. An off-by-one in the
 *     window moves the boundary by L and fails one of the two;
 *   - memory: a decoding sequence holds <= ceil(W / T) + 1 blocks and
 *     kv_check passes at every step;
 *   - prefix cache: a second sequence that takes the blocks a first one
 *     published, before and after its front drops, computes what a fresh
 *     one does.
 * Peer: llama.cpp (node-llama-cpp 3.21.1) ignores sliding_window for the
 * llama arch: its logits match ours with --swa off, not with SWA.
 */
#include "test.h"

#include <stdint.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "engine_util.h"
#include "gen_util.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kv/kv_check.h"
#include "kv/kv_seq.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float rng_sym(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return 2.0f * (float)((rng_state >> 16) & 0xFFFFFF) / 16777216.0f - 1.0f;
}

/* ------------------------------------------------------------------ kernel */

#define HD 32
#define NKV 2
#define BS 16
#define NB 8 /* blocks: 128 tokens */

typedef struct {
    uint8_t *data;
    uint32_t table[NB];
    attn_kv kv;
    float kf[NB * BS][NKV][HD], vf[NB * BS][NKV][HD]; /* the values as stored, in f32 */
} kv_fix;

/* A pool of NB blocks (K plane then V plane each), table a permutation;
 * rows of type t (f32 or f16). */
static void fix_make(kv_fix *f, uint32_t t)
{
    const size_t eb = t == DT_F16 ? 2 : 4, row = NKV * HD * eb, plane = row * BS;
    f->data = calloc(NB, 2 * plane);
    for (uint32_t i = 0; i < NB; i++) f->table[i] = (i * 5 + 3) % NB;
    f->kv = (attn_kv){.blocks = f->table, .k_base = f->data, .v_base = f->data + plane, .block_bytes = 2 * plane, .v_block_bytes = 2 * plane,
                      .block_size = BS, .row_bytes = row, .head_bytes = HD * eb, .kv_type = t, .head_dim = HD};
    for (int j = 0; j < NB * BS; j++)
        for (int g = 0; g < NKV; g++)
            for (int i = 0; i < HD; i++) {
                float k = 1.5f * rng_sym(), v = rng_sym();
                uint8_t *kp = f->data + (size_t)f->table[j / BS] * 2 * plane + (size_t)(j % BS) * row + (size_t)g * HD * eb;
                uint8_t *vp = kp + plane;
                if (t == DT_F16) {
                    uint16_t kh = f32_to_f16(k), vh = f32_to_f16(v);
                    memcpy(kp + 2 * i, &kh, 2);
                    memcpy(vp + 2 * i, &vh, 2);
                    k = f16_to_f32(kh);
                    v = f16_to_f32(vh);
                } else {
                    memcpy(kp + 4 * i, &k, 4);
                    memcpy(vp + 4 * i, &v, 4);
                }
                f->kf[j][g][i] = k;
                f->vf[j][g][i] = v;
            }
}

typedef void (*attn_fn)(const attn_kv *, const attn_row *, int, float, float *, size_t);

static void run_fn(attn_fn fn, const attn_kv *kv, const attn_row *rows, int n)
{
    const size_t sf = attn_scratch_floats(NB * BS, HD);
    float *scratch = malloc(sizeof(float) * sf);
    fn(kv, rows, n, 1.0f / sqrtf((float)HD), scratch, sf);
    free(scratch);
}

TEST(kernel_lo_matches_explicit_softmax)
{
    kv_fix *f = malloc(sizeof *f);
    fix_make(f, DT_F32);
    const int cases[][2] = {{100, 0}, {100, 1}, {100, 17}, {100, 61}, {100, 99}, {128, 64}, {33, 32}};
    float q[HD], out[HD];
    for (int i = 0; i < HD; i++) q[i] = rng_sym();
    for (int v = 0; v < 2; v++) {
        if (v == 1 && !attn_avx2_available()) continue;
        attn_fn fn = v ? attn_paged_avx2 : attn_paged_ref;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int g = 0; g < NKV; g++) {
                const int n = cases[c][0], lo = cases[c][1];
                attn_row r = {q, out, n, g, lo};
                run_fn(fn, &f->kv, &r, 1);
                double s[NB * BS], mx = -1e300, sum = 0, want[HD] = {0}, vmax = 0;
                for (int j = lo; j < n; j++) {
                    s[j] = 0;
                    for (int i = 0; i < HD; i++) s[j] += (double)q[i] * f->kf[j][g][i];
                    s[j] /= sqrt((double)HD);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = lo; j < n; j++) sum += exp(s[j] - mx);
                for (int j = lo; j < n; j++)
                    for (int i = 0; i < HD; i++) {
                        want[i] += exp(s[j] - mx) / sum * f->vf[j][g][i];
                        vmax = fabs(f->vf[j][g][i]) > vmax ? fabs(f->vf[j][g][i]) : vmax;
                    }
                for (int i = 0; i < HD; i++)
                    CHECK_MSG(fabs(out[i] - want[i]) <= 1e-5 * vmax, "%s n_ctx %d lo %d g %d dim %d: %.9g vs %.9g",
                              v ? "avx2" : "ref", n, lo, g, i, out[i], want[i]);
            }
    }
    free(f->data);
    free(f);
}

/* Dropping the k blocks before lo / T from the table (slots move down by
 * k T, lo and n_ctx too) changes no bit of the result: what lets the model
 * free them. */
TEST(kernel_lo_freed_blocks_give_the_same_bits)
{
    const uint32_t types[] = {DT_F32, DT_F16};
    for (int ti = 0; ti < 2; ti++) {
        kv_fix *f = malloc(sizeof *f);
        fix_make(f, types[ti]);
        float q[HD], a[HD], b[HD];
        for (int i = 0; i < HD; i++) q[i] = rng_sym();
        for (int v = 0; v < 2; v++) {
            if (v == 1 && !attn_avx2_available()) continue;
            attn_fn fn = v ? attn_paged_avx2 : attn_paged_ref;
            for (int n = 40; n <= NB * BS; n += 13)
                for (int lo = BS; lo < n; lo += 7) {
                    const int k = lo / BS;
                    attn_row kept = {q, a, n, 1, lo}, freed = {q, b, n - k * BS, 1, lo - k * BS};
                    run_fn(fn, &f->kv, &kept, 1);
                    attn_kv kv2 = f->kv;
                    kv2.blocks = f->table + k;
                    run_fn(fn, &kv2, &freed, 1);
                    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s %s n_ctx %d lo %d: kept and freed differ",
                              v ? "avx2" : "ref", ti ? "f16" : "f32", n, lo);
                }
        }
        free(f->data);
        free(f);
    }
}

TEST(kernel_rows_with_mixed_lo_are_independent)
{
    kv_fix *f = malloc(sizeof *f);
    fix_make(f, DT_F16);
    enum { R = 12 };
    float q[R][HD], all[R][HD], one[R][HD];
    attn_row rows[R];
    for (int r = 0; r < R; r++) {
        for (int i = 0; i < HD; i++) q[r][i] = rng_sym();
        const int n = 90 + r; /* a prefill chunk: consecutive tokens, window 40 */
        rows[r] = (attn_row){q[r], all[r], n, r / 6, n > 40 ? n - 40 : 0};
        if (r % 3 == 0) rows[r].lo = 0; /* and some full-attention rows among them */
    }
    for (int v = 0; v < 2; v++) {
        if (v == 1 && !attn_avx2_available()) continue;
        attn_fn fn = v ? attn_paged_avx2 : attn_paged_ref;
        run_fn(fn, &f->kv, rows, R);
        for (int r = 0; r < R; r++) {
            attn_row x = rows[r];
            x.out = one[r];
            run_fn(fn, &f->kv, &x, 1);
            CHECK_MSG(memcmp(all[r], one[r], sizeof all[r]) == 0, "%s row %d (lo %d) differs alone",
                      v ? "avx2" : "ref", r, rows[r].lo);
        }
        /* the bound matters: the same row without it gives another result */
        attn_row x = rows[1];
        x.out = one[1];
        x.lo = 0;
        run_fn(fn, &f->kv, &x, 1);
        CHECK(memcmp(all[1], one[1], sizeof all[1]) != 0);
    }
    free(f->data);
    free(f);
}

/* ------------------------------------------------------------------- model */

#define W 40
static char model_path[256];
static pl_model *M;

static void ctx_params(pl_ctx_params *p)
{
    pl_ctx_params_default(p);
    p->n_threads = 2;
    p->block_size = BS;
}

/* The token at step i of the test streams (deterministic, in the vocab). */
static int32_t tok(int i, int salt) { return (int32_t)(1 + (i * 37 + salt * 101 + (i * i) % 11) % 500); }

/* Appends n tokens one at a time (stream salt) and keeps every step's
 * logits in out[n][nv] (if out); checks kv_check and the held blocks. */
static int decode(pl_ctx *c, int32_t seq, int n, int salt, float *out, uint32_t *max_blocks)
{
    const size_t nv = pl_model_n_vocab(M);
    float *l = malloc(sizeof(float) * nv);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const int32_t t = tok(i, salt);
        rc = pl_seq_append(c, seq, &t, 1, l);
        if (!rc && out) memcpy(out + (size_t)i * nv, l, sizeof(float) * nv);
        const kv_seq *kv = rt_seq_kv(c, seq);
        kv_seq *live[1] = {(kv_seq *)kv};
        if (!rc && kv_check(rt_ctx_pool(c), live, 1) != 0) rc = -100;
        if (!rc && max_blocks && kv->n_blocks > *max_blocks) *max_blocks = kv->n_blocks;
    }
    free(l);
    return rc;
}

TEST(freed_equals_kept_bit_for_bit_past_4w)
{
    const size_t nv = pl_model_n_vocab(M);
    enum { N = 4 * W + 50 };
    const struct {
        pl_kv_dtype dt;
        pl_kv_layout layout;
        const char *what;
    } v[] = {{PL_KV_F16, PL_KV_PAGED, "f16"}, {PL_KV_F32, PL_KV_PAGED, "f32"}, {PL_KV_Q8_0, PL_KV_PAGED, "q8_0"},
             {PL_KV_F16, PL_KV_STATIC, "f16 static"}, {PL_KV_INT4, PL_KV_PAGED, "kivi4"}, {PL_KV_FP8_E4M3, PL_KV_PAGED, "fp8_e4m3"}};
    float *a = malloc(sizeof(float) * nv * N), *b = malloc(sizeof(float) * nv * N);
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        pl_ctx_params pf, pk;
        ctx_params(&pf);
        pf.kv_dtype = v[k].dt;
        pf.layout = v[k].layout;
        pk = pf;
        pk.swa_keep_blocks = true;
        pk.n_ctx = N + 16;
        pl_ctx *cf = NULL, *ck = NULL;
        int32_t sf, sk;
        uint32_t held = 0;
        CHECK_MSG(pl_ctx_new(&cf, M, &pf) == 0 && pl_ctx_new(&ck, M, &pk) == 0, "%s: %s", v[k].what, pl_last_error());
        CHECK_EQ_INT(pl_ctx_swa(cf), W);
        CHECK(pl_ctx_unbounded(cf) && !pl_ctx_unbounded(ck));
        CHECK(pl_seq_new(cf, &sf) == 0 && pl_seq_new(ck, &sk) == 0);
        CHECK_MSG(decode(cf, sf, N, 1, a, &held) == 0, "%s: freed: %s", v[k].what, pl_last_error());
        CHECK_MSG(decode(ck, sk, N, 1, b, NULL) == 0, "%s: kept: %s", v[k].what, pl_last_error());
        CHECK_MSG(pl_seq_n_dropped(cf, sf) >= (uint64_t)(N - W - 2 * BS) && pl_seq_n_dropped(ck, sk) == 0,
                  "%s: dropped %llu / %llu", v[k].what, (unsigned long long)pl_seq_n_dropped(cf, sf),
                  (unsigned long long)pl_seq_n_dropped(ck, sk));
        for (int i = 0; i < N; i++)
            CHECK_MSG(memcmp(a + (size_t)i * nv, b + (size_t)i * nv, sizeof(float) * nv) == 0,
                      "%s: step %d: logits differ between freed and kept blocks", v[k].what, i);
        if (v[k].layout == PL_KV_PAGED) /* a static sequence owns its whole table by design */
            CHECK_MSG(held <= (W + BS - 1) / BS + 1, "%s: %u blocks held > ceil(W/T) + 1", v[k].what, held);
        pl_ctx_free(cf);
        pl_ctx_free(ck);
    }
    free(a);
    free(b);
}

TEST(prefill_in_pieces_matches_token_by_token)
{
    const size_t nv = pl_model_n_vocab(M);
    enum { N = 3 * W + 37 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = tok(i, 2);
    float *one = malloc(sizeof(float) * nv * N), *all = malloc(sizeof(float) * nv * N), *last = malloc(sizeof(float) * nv);
    pl_ctx_params p;
    ctx_params(&p);
    p.max_batch = 64;
    p.max_seqs = 3;
    p.n_ctx = W + BS + 30; /* pieces of <= 30..: cut by the window */
    pl_ctx *c = NULL;
    int32_t s1, s2, s3;
    CHECK(pl_ctx_new(&c, M, &p) == 0);
    CHECK(pl_seq_new(c, &s1) == 0 && pl_seq_new(c, &s2) == 0 && pl_seq_new(c, &s3) == 0);
    CHECK(decode(c, s1, N, 2, one, NULL) == 0);
    CHECK_MSG(pl_seq_append(c, s2, ids, N, last) == 0, "%s", pl_last_error());
    CHECK_MSG(pl_seq_append_all(c, s3, ids, N, all) == 0, "%s", pl_last_error());
    CHECK_EQ_INT(pl_seq_len(c, s2) + pl_seq_n_dropped(c, s2), N);
    double worst = 0;
    for (size_t j = 0; j < nv; j++) worst = fmax(worst, fabs(last[j] - one[(size_t)(N - 1) * nv + j]));
    for (size_t j = 0; j < nv * N; j++) worst = fmax(worst, fabs(all[j] - one[j]));
    CHECK_MSG(worst < 2e-3, "prefill vs decode: max |diff| %g", worst);
    pl_ctx_free(c);
    free(one);
    free(all);
    free(last);
}

/* Last-token logits of a stream of n tokens, token `at` replaced. */
static int last_logits(int swa, int n, int at, float *l)
{
    pl_ctx_params p;
    ctx_params(&p);
    p.swa = swa;
    if (swa == PL_SWA_OFF) p.n_ctx = (uint32_t)n + 1;
    pl_ctx *c = NULL;
    int32_t s, *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) ids[i] = tok(i, 3);
    if (at >= 0) ids[at] = ids[at] == 7 ? 8 : 7;
    int rc = pl_ctx_new(&c, M, &p);
    if (!rc) rc = pl_seq_new(c, &s);
    for (int i = 0; i < n && !rc; i++) rc = pl_seq_append(c, s, &ids[i], 1, l);
    pl_ctx_free(c);
    free(ids);
    return rc;
}

TEST(mask_reaches_exactly_layers_times_w_minus_1_back)
{
    const size_t nv = pl_model_n_vocab(M);
    const int L = 4, n = 4 * W + 30, p = n - 1, edge = p - L * (W - 1);
    float *base = malloc(sizeof(float) * nv), *x = malloc(sizeof(float) * nv);
    CHECK(last_logits(PL_SWA_AUTO, n, -1, base) == 0);
    CHECK(last_logits(PL_SWA_AUTO, n, edge - 1, x) == 0);
    CHECK_MSG(memcmp(base, x, sizeof(float) * nv) == 0, "a token before the reach (position %d) changed the logits",
              edge - 1);
    CHECK(last_logits(PL_SWA_AUTO, n, edge, x) == 0);
    CHECK_MSG(memcmp(base, x, sizeof(float) * nv) != 0, "the token at the reach's edge (position %d) did not count",
              edge);
    /* full attention sees the early token */
    CHECK(last_logits(PL_SWA_OFF, n, -1, base) == 0);
    CHECK(last_logits(PL_SWA_OFF, n, edge - 1, x) == 0);
    CHECK(memcmp(base, x, sizeof(float) * nv) != 0);
    free(base);
    free(x);
}

TEST(prefix_cache_hits_from_an_swa_sequence_are_valid)
{
    const size_t nv = pl_model_n_vocab(M);
    enum { N = 2 * W + 20 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = tok(i, 4);
    float *a = malloc(sizeof(float) * nv), *b = malloc(sizeof(float) * nv);
    pl_ctx_params p;
    ctx_params(&p);
    p.max_seqs = 2;
    pl_ctx *c = NULL, *fresh = NULL;
    int32_t s1, s2, s3;
    CHECK(pl_ctx_new(&c, M, &p) == 0 && pl_ctx_new(&fresh, M, &p) == 0);
    CHECK(pl_seq_new(c, &s1) == 0 && decode(c, s1, N, 4, NULL, NULL) == 0);
    CHECK(pl_seq_new(c, &s2) == 0 && pl_seq_append(c, s2, ids, N, a) == 0);
    {
        const prefix_cache *pc = rt_ctx_prefix_cache(c);
        prefix_stats st;
        prefix_stats_get(pc, &st);
        /* every full block, also those published after the first's drops (its first drop is at 55) */
        CHECK_MSG(st.hit_tokens == N / BS * BS, "%llu tokens hit, not %d", (unsigned long long)st.hit_tokens,
                  N / BS * BS);
        CHECK(prefix_check(pc) == 0);
    }
    CHECK(pl_seq_new(fresh, &s3) == 0 && pl_seq_append(fresh, s3, ids, N, b) == 0);
    double worst = 0;
    for (size_t j = 0; j < nv; j++) worst = fmax(worst, fabs(a[j] - b[j]));
    CHECK_MSG(worst < 2e-3, "hit vs fresh: max |diff| %g", worst);
    pl_ctx_free(c);
    pl_ctx_free(fresh);
    free(a);
    free(b);
}

TEST(engine_generates_past_4w_like_the_api)
{
    enum { P = 12, G = 4 * W + 20 };
    pl_ctx_params p;
    ctx_params(&p);
    p.swa_keep_blocks = true;
    p.n_ctx = P + G + 16;
    id_list *prompt = calloc(1, sizeof *prompt), *want = calloc(1, sizeof *want);
    for (int i = 0; i < P; i++) prompt->ids[prompt->n++] = tok(i, 5);
    CHECK(our_greedy(M, &p, prompt->ids, P, G, want, NULL) == 0 && want->n == G);
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ctx_params(&ep.ctx);
    ep.ctx.max_seqs = 2;
    pl_engine *e = NULL;
    CHECK_MSG(engine_checked_new(&e, M, &ep) == 0, "%s", pl_last_error());
    pl_request_params rp;
    engine_greedy_params(&rp, prompt->ids, P, G);
    pl_request *r = NULL;
    int n = 0, same = 1, done = 0;
    CHECK_MSG(pl_engine_submit(e, &rp, &r) == 0, "%s", pl_last_error());
    pl_event ev;
    for (int k; (k = pl_request_next(r, &ev, 60000)) == 1;) {
        if (ev.kind == PL_EV_ERROR) break;
        if (ev.kind == PL_EV_DONE) { done = 1; continue; }
        if (n < G && ev.token != want->ids[n]) same = 0;
        n++;
    }
    pl_request_free(r);
    pl_engine_free(e);
    CHECK_MSG(done && n == G, "engine: %d tokens, done %d", n, done);
    CHECK_MSG(same, "engine tokens differ from pl_seq_append's (mask only)");
    free(prompt);
    free(want);
}

/* A pool too small for every sequence: preemption and recomputation
 * stream the history back through the window (from absolute position 0,
 * blocks freed again as it goes); every request ends with all its tokens
 * and the engine's invariant checks hold at every step. (Recomputed
 * prefill differs from decoding by float ulps, so tokens are not compared.) */
TEST(engine_preemption_with_swa_keeps_every_invariant)
{
    pl_ctx_params cp;
    ctx_params(&cp);
    enum { R = 4, G = 200 };
    int32_t prompts[R][20];
    const int32_t *pp[R];
    for (int i = 0; i < R; i++) {
        for (int j = 0; j < 20; j++) prompts[i][j] = tok(j, 10 + i);
        pp[i] = prompts[i];
    }
    /* 4 sequences of up to 4 blocks each do not fit 10 */
    engine_run_result res;
    CHECK_MSG(engine_preempt_run(M, &cp, 10, 4, pp, 20, R, G, &res) == 0, "%s", pl_last_error());
    INFO("SWA 40 in 10 blocks, %d requests x %d tokens: %llu preemptions, %llu steps", R, G,
         (unsigned long long)res.mt.preemptions, (unsigned long long)res.mt.steps);
    char why[128];
    CHECK_MSG(engine_run_complete(&res, R, G, why, sizeof why), "%s", why);
}

TEST(params_errors_name_the_flags)
{
    pl_ctx_params p;
    pl_ctx *c = NULL;
    ctx_params(&p);
    p.kv_window = 64;
    CHECK(pl_ctx_new(&c, M, &p) == PL_ERR_INVAL && strstr(pl_last_error(), "--kv-window") &&
          strstr(pl_last_error(), "--swa off"));
    p.swa = PL_SWA_OFF; /* then the window works as before */
    CHECK(pl_ctx_new(&c, M, &p) == 0 && pl_ctx_swa(c) == 0 && pl_ctx_kv_window(c) == 64);
    pl_ctx_free(c);
    ctx_params(&p);
    p.n_ctx = W + 5;
    CHECK(pl_ctx_new(&c, M, &p) == PL_ERR_INVAL && strstr(pl_last_error(), "--ctx"));
    p.n_ctx = W; /* the window never binds */
    CHECK(pl_ctx_new(&c, M, &p) == 0 && pl_ctx_swa(c) == 0 && !pl_ctx_unbounded(c));
    pl_ctx_free(c);
    ctx_params(&p);
    p.swa = 7;
    CHECK(pl_ctx_new(&c, M, &p) == PL_ERR_INVAL && strstr(pl_last_error(), "--swa"));
}

TEST(peer_ignores_the_key_for_llama_arch)
{
    if (!peer_available()) {
        printf("SKIP peer_ignores_the_key_for_llama_arch: no llama.cpp peer\n");
        return;
    }
    const size_t nv = pl_model_n_vocab(M);
    enum { N = 3 * W + 30 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = tok(i, 3);
    float *peer = peer_logits(model_path, ids, N, (int)nv), *off = malloc(sizeof(float) * nv), *on = malloc(sizeof(float) * nv);
    CHECK(peer != NULL);
    CHECK(last_logits(PL_SWA_OFF, N, -1, off) == 0 && last_logits(PL_SWA_AUTO, N, -1, on) == 0);
    double d_off = 0, d_on = 0;
    for (size_t j = 0; j < nv; j++) {
        d_off = fmax(d_off, fabs(peer[j] - off[j]));
        d_on = fmax(d_on, fabs(peer[j] - on[j]));
    }
    INFO("peer vs --swa off: max |diff| %.3g; vs SWA: %.3g", d_off, d_on);
    CHECK_MSG(d_off < 1e-2 && d_on > 10 * d_off, "peer vs off %g, vs on %g", d_off, d_on);
    free(peer);
    free(off);
    free(on);
}

int main(void)
{
    (void)peer_greedy, (void)ids_equal, (void)first_difference, (void)file_exists;
    RUN(kernel_lo_matches_explicit_softmax);
    RUN(kernel_lo_freed_blocks_give_the_same_bits);
    RUN(kernel_rows_with_mixed_lo_are_independent);
    snprintf(model_path, sizeof model_path, "/tmp/pagellm-test-swa-%d.gguf", (int)getpid());
    pl_synth_params sp = {.shape = "tiny", .seed = 3, .type = "f32", .out_path = model_path, .sliding_window = W};
    if (pl_synth(&sp) != 0 || pl_model_load(&M, model_path) != 0) {
        printf("FAIL model: %s\n", pl_last_error());
        return 1;
    }
    RUN(freed_equals_kept_bit_for_bit_past_4w);
    RUN(prefill_in_pieces_matches_token_by_token);
    RUN(mask_reaches_exactly_layers_times_w_minus_1_back);
    RUN(prefix_cache_hits_from_an_swa_sequence_are_valid);
    RUN(engine_generates_past_4w_like_the_api);
    RUN(engine_preemption_with_swa_keeps_every_invariant);
    RUN(params_errors_name_the_flags);
    RUN(peer_ignores_the_key_for_llama_arch);
    pl_model_free(M);
    unlink(model_path);
    return test_summary();
}
