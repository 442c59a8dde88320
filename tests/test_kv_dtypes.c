/* test_kv_dtypes.c - the codec KV dtypes (fp8_e4m3, fp8_e5m2, kivi4,
 * kivi2) end to end through pl_ctx: they generate, their teacher-forced
 * logits stay near an f16 cache's, their tokens do not depend on batching,
 * chunking, threads or block size, fork copies the KIVI stage, a truncation
 * into a sealed KIVI block recomputes it exactly, and prefix-cache hits give
 * the tokens of a cold run.
 *
 * Models: stories260K (head dim 8, kv_dim 32: the smallest KIVI fits) and
 * the synthetic "tiny" shape (head dim 32, kv_dim 64, random weights),
 * made once under $BUILD/models.
 *
 * Tolerances (max |logit - f16 logit| over every position of a
 * teacher-forced run, and the share of positions whose argmax is f16's):
 * stated per dtype in tol[] below, from measured values with ~2x margin
 * on the difference; the measured figures are printed as INFO lines. */
#include "test.h"

#include "runtime/runtime.h"
#include "gen_util.h"
#include "kv/kv_check.h"
#include "kv/kv_codec.h"

#include <errno.h>

#define STORIES SHARED_MODELS "/stories260K.gguf"

static const pl_kv_dtype dtypes[] = {PL_KV_FP8_E4M3, PL_KV_FP8_E5M2, PL_KV_INT4, PL_KV_INT2};
#define N_DT (sizeof dtypes / sizeof dtypes[0])

static const char *prompt_text = "Once upon a time, there was a little girl named Lily. She loved to play outside. One day";

/* The synthetic tiny model (made once). */
static const char *tiny_path(void)
{
    static char path[512];
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    char dir[256];
    snprintf(dir, sizeof dir, "%s/models", build);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/synth-tiny-f32.gguf", dir);
    if (!file_exists(path)) {
        pl_synth_params sp = {.shape = "tiny", .seed = 1, .type = "f32", .out_path = path, .arch = "llama"};
        if (pl_synth(&sp) != 0) return NULL;
    }
    return path;
}

static void params(pl_ctx_params *cp, pl_kv_dtype dt)
{
    pl_ctx_params_default(cp);
    cp->n_threads = 2;
    cp->kv_dtype = dt;
    cp->n_ctx = 512;
}

static int tokenize(pl_model *m, int32_t **ids, size_t *n)
{
    return pl_tokenize(pl_model_vocab(m), prompt_text, strlen(prompt_text), true, false, ids, n);
}

/* stories260K loaded into *m and prompt_text's tokens; 0, or -1 with
 * nothing left to free. */
static int stories_and_prompt(pl_model **m, int32_t **ids, size_t *n)
{
    *m = NULL;
    if (pl_model_load(m, STORIES) != 0) return -1;
    if (tokenize(*m, ids, n) == 0) return 0;
    pl_model_free(*m);
    *m = NULL;
    return -1;
}

static int argmax(const float *l, uint32_t n)
{
    int b = 0;
    for (uint32_t v = 1; v < n; v++)
        if (l[v] > l[b]) b = (int)v;
    return b;
}

/* Teacher-forced logits of every position of ids[0..n) under dtype dt. */
static float *forced_logits(pl_model *m, pl_kv_dtype dt, const int32_t *ids, int n)
{
    const uint32_t nv = pl_model_n_vocab(m);
    float *l = malloc(sizeof(float) * nv * (size_t)n);
    pl_ctx_params cp;
    params(&cp, dt);
    cp.max_batch = 32; /* several chunks, crossing blocks inside a chunk */
    pl_ctx *c = NULL;
    int32_t seq;
    int rc = pl_ctx_new(&c, m, &cp);
    if (!rc) rc = pl_seq_new(c, &seq);
    if (!rc) rc = pl_seq_append_all(c, seq, ids, (size_t)n, l);
    pl_ctx_free(c);
    if (rc) { free(l); return NULL; }
    return l;
}

/* Per dtype: max |logit diff| vs f16 and min share of equal argmax (%). */
typedef struct { double max_diff, min_same; } tol_t;

static void check_model(const char *label, const char *path, const tol_t tol[N_DT])
{
    pl_model *m = NULL;
    CHECK_MSG(pl_model_load(&m, path) == 0, "%s: %s", path, pl_last_error());
    const uint32_t nv = pl_model_n_vocab(m);
    int32_t *ids;
    size_t np;
    CHECK(tokenize(m, &ids, &np) == 0);
    /* the f16 run's greedy continuation is the text every dtype is forced on */
    pl_ctx_params cp;
    params(&cp, PL_KV_F16);
    id_list ref, got;
    CHECK(our_greedy(m, &cp, ids, (int)np, 96, &ref, NULL) == 0);
    int32_t seqv[256];
    memcpy(seqv, ids, np * sizeof *ids);
    memcpy(seqv + np, ref.ids, (size_t)ref.n * sizeof *ids);
    const int n = (int)np + ref.n;
    float *base = forced_logits(m, PL_KV_F16, seqv, n);
    CHECK(base);
    for (size_t d = 0; d < N_DT; d++) {
        const char *name = pl_kv_dtype_name(dtypes[d]);
        params(&cp, dtypes[d]);
        CHECK_MSG(our_greedy(m, &cp, ids, (int)np, 96, &got, NULL) == 0, "%s %s: %s", label, name, pl_last_error());
        CHECK_EQ_INT(got.n, 96);
        float *l = forced_logits(m, dtypes[d], seqv, n);
        CHECK_MSG(l, "%s %s: %s", label, name, pl_last_error());
        double md = 0;
        int same = 0;
        for (int i = 0; i < n; i++) {
            const float *a = base + (size_t)i * nv, *b = l + (size_t)i * nv;
            for (uint32_t v = 0; v < nv; v++) md = fmax(md, fabs(a[v] - b[v]));
            same += argmax(a, nv) == argmax(b, nv);
        }
        free(l);
        const double pct = 100.0 * same / n;
        INFO("%s %-8s: greedy %d/96 tokens equal to f16's; teacher-forced over %d positions: max |logit diff| %.3f "
             "(tol %.2f), same argmax %.1f%% (min %.0f%%)",
             label, name, first_difference(&ref, &got), n, md, tol[d].max_diff, pct, tol[d].min_same);
        CHECK_MSG(md <= tol[d].max_diff, "%s %s: max logit diff %.3f > %.2f", label, name, md, tol[d].max_diff);
        CHECK_MSG(pct >= tol[d].min_same, "%s %s: same argmax %.1f%% < %.0f%%", label, name, pct, tol[d].min_same);
    }
    free(base);
    pl_free(ids);
    pl_model_free(m);
}

/* Measured (2026-11-29, max |diff|, same argmax): e4m3 2.27 96%, e5m2 7.6
 * 94%, kivi4 1.15 99%, kivi2 6.3 88%. Head dim 8 makes fp8 coarse here:
 * one e4m3 step (2^-3 relative) on a query-key dot of 8 terms. */
TEST(stories260k_generates_near_f16_with_each_codec_dtype)
{
    static const tol_t tol[N_DT] = {{4.5, 90}, {12, 85}, {2.5, 95}, {10, 75}};
    check_model("stories260K", STORIES, tol);
}

/* Measured: e4m3 0.24 94.5%, e5m2 0.48 93%, kivi4 0.42 91%, kivi2 2.1 72%. */
TEST(synthetic_tiny_generates_near_f16_with_each_codec_dtype)
{
    static const tol_t tol[N_DT] = {{0.5, 88}, {1.0, 85}, {0.8, 85}, {4.0, 60}};
    const char *p = tiny_path();
    CHECK_MSG(p, "synth tiny: %s", pl_last_error());
    check_model("tiny", p, tol);
}

/* Greedy ids on model path with the given params, 80 tokens. */
static int greedy_ids(const char *path, const pl_ctx_params *cp, id_list *out)
{
    pl_model *m = NULL;
    if (pl_model_load(&m, path) != 0) return -1;
    int32_t *ids;
    size_t n;
    int rc = tokenize(m, &ids, &n);
    if (!rc) rc = our_greedy(m, cp, ids, (int)n, 80, out, NULL);
    pl_free(ids);
    pl_model_free(m);
    return rc;
}

/* Two sequences in the same forward passes (rt_step): prompt A and a
 * shifted prompt B prefilled together, then decoded together; A's tokens. */
static int greedy_batched_with_another(const char *path, const pl_ctx_params *cp, id_list *out)
{
    pl_model *m = NULL;
    if (pl_model_load(&m, path) != 0) return -1;
    const uint32_t nv = pl_model_n_vocab(m);
    int32_t *ids;
    size_t n;
    int rc = tokenize(m, &ids, &n);
    pl_ctx_params p = *cp;
    p.max_seqs = 2;
    pl_ctx *c = NULL;
    int32_t a, b;
    float *la = malloc(sizeof(float) * nv), *lb = malloc(sizeof(float) * nv);
    if (!rc) rc = pl_ctx_new(&c, m, &p);
    if (!rc) rc = pl_seq_new(c, &a);
    if (!rc) rc = pl_seq_new(c, &b);
    if (!rc) {
        rt_item it[2] = {{.seq = a, .tokens = ids, .n = (uint32_t)n, .logits = la}, {.seq = b, .tokens = ids + 3, .n = (uint32_t)n - 3, .logits = lb}};
        rc = rt_step(c, it, 2);
    }
    out->n = 0;
    for (int i = 0; !rc && i < 80; i++) {
        int32_t ta = argmax(la, nv), tb = argmax(lb, nv);
        out->ids[out->n++] = ta;
        rt_item it[2] = {{.seq = b, .tokens = &tb, .n = 1, .logits = lb}, {.seq = a, .tokens = &ta, .n = 1, .logits = la}};
        if (i + 1 < 80) rc = rt_step(c, it, 2);
    }
    pl_ctx_free(c);
    free(la);
    free(lb);
    pl_free(ids);
    pl_model_free(m);
    return rc;
}

/* Max |logit diff| over every position of ids[0..n) teacher-forced with
 * max_batch mb against the logits base (of the same dtype). */
static double forced_diff(pl_model *m, pl_kv_dtype dt, uint32_t mb, const int32_t *ids, int n, const float *base)
{
    const uint32_t nv = pl_model_n_vocab(m);
    float *l = malloc(sizeof(float) * nv * (size_t)n);
    pl_ctx_params cp;
    params(&cp, dt);
    cp.max_batch = mb;
    pl_ctx *c = NULL;
    int32_t seq;
    int rc = pl_ctx_new(&c, m, &cp);
    if (!rc) rc = pl_seq_new(c, &seq);
    if (!rc) rc = pl_seq_append_all(c, seq, ids, (size_t)n, l);
    double md = rc ? INFINITY : 0;
    for (size_t i = 0; !rc && i < (size_t)n * nv; i++) md = fmax(md, fabs(l[i] - base[i]));
    pl_ctx_free(c);
    free(l);
    return md;
}

/* Tokens do not depend on how the work is cut. The forward pass reads a
 * row's own KIVI block in f16 whatever the chunking (kv_writer.h), so every
 * variant computes the same values up to the matmul's summation order,
 * which differs between batch shapes (~3e-6, test_generate.c). That is
 * enough for fp8 and kivi4 to keep every token. kivi2 (3 levels per step)
 * turns such a 1e-6 change into a whole code step when it flips a rounding
 * at a seal (measured on stories260K: 3e-6 .. 1e-2 before the first seal,
 * up to 1.2 after), so for kivi2 the variants that change batch shapes are
 * held to the teacher-forced logit tolerance instead, and its tokens must
 * be equal for the variants that keep the shapes (threads, KV layout). */
TEST(codec_dtypes_give_the_same_tokens_however_batched_chunked_or_threaded)
{
    const char *models[] = {STORIES, tiny_path()};
    for (size_t mi = 0; mi < 2; mi++) {
        CHECK(models[mi]);
        for (size_t d = 0; d < N_DT; d++) {
            const char *name = pl_kv_dtype_name(dtypes[d]);
            const bool coarse = dtypes[d] == PL_KV_INT2;
            pl_ctx_params base;
            params(&base, dtypes[d]);
            id_list ref, got;
            CHECK_MSG(greedy_ids(models[mi], &base, &ref) == 0, "%s: %s", name, pl_last_error());
            struct { const char *what; pl_ctx_params p; bool shapes; } v[8];
            int nv = 0;
            v[nv].what = "batch 1"; v[nv].p = base; v[nv].shapes = true; v[nv++].p.max_batch = 1;
            v[nv].what = "batch 7"; v[nv].p = base; v[nv].shapes = true; v[nv++].p.max_batch = 7;
            v[nv].what = "batch 20"; v[nv].p = base; v[nv].shapes = true; v[nv++].p.max_batch = 20;
            v[nv].what = "no-kv-cache"; v[nv].p = base; v[nv].shapes = true; v[nv++].p.no_kv_cache = true;
            v[nv].what = "1 thread"; v[nv].p = base; v[nv].shapes = false; v[nv++].p.n_threads = 1;
            v[nv].what = "static"; v[nv].p = base; v[nv].shapes = false; v[nv++].p.layout = PL_KV_STATIC;
            for (int i = 0; i < nv; i++) {
                if (coarse && v[i].shapes) continue;
                CHECK_MSG(greedy_ids(models[mi], &v[i].p, &got) == 0, "%s %s: %s", name, v[i].what, pl_last_error());
                CHECK_MSG(ids_equal(&ref, &got), "%s %s %s: tokens differ at index %d", models[mi], name, v[i].what,
                          first_difference(&ref, &got));
            }
            if (!coarse) {
                CHECK_MSG(greedy_batched_with_another(models[mi], &base, &got) == 0, "%s batched: %s", name,
                          pl_last_error());
                CHECK_MSG(ids_equal(&ref, &got), "%s %s batched with another sequence: tokens differ at index %d",
                          models[mi], name, first_difference(&ref, &got));
                continue;
            }
            /* kivi2: teacher-forced on the base's own tokens, chunked vs not */
            pl_model *m = NULL;
            CHECK(pl_model_load(&m, models[mi]) == 0);
            int32_t *ids, seqv[256];
            size_t np;
            CHECK(tokenize(m, &ids, &np) == 0);
            memcpy(seqv, ids, np * sizeof *ids);
            memcpy(seqv + np, ref.ids, (size_t)ref.n * sizeof *ids);
            const int n = (int)np + ref.n;
            float *bl = forced_logits(m, dtypes[d], seqv, n); /* max_batch 32 */
            CHECK(bl);
            const uint32_t mbs[] = {1, 7, 512};
            for (int k = 0; k < 3; k++) {
                const double md = forced_diff(m, dtypes[d], mbs[k], seqv, n, bl);
                INFO("%s %s: teacher-forced max |logit diff| max_batch %u vs 32: %.3g (tol 3)", models[mi], name, mbs[k], md);
                CHECK_MSG(md < 3.0, "%s %s max_batch %u: logits move by %g", models[mi], name, mbs[k], md);
            }
            free(bl);
            pl_free(ids);
            pl_model_free(m);
        }
    }
}

/* Greedy continuation of sequence seq for n tokens from logits l. */
static int continue_greedy(pl_ctx *c, int32_t seq, float *l, uint32_t nv, int n, id_list *out)
{
    out->n = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = argmax(l, nv);
        out->ids[out->n++] = t;
        if (i + 1 < n && pl_seq_append(c, seq, &t, 1, l) != 0) return -1;
    }
    return 0;
}

/* A new sequence of the prompt ids (logits of its last token into l, and
 * into first when not NULL), its greedy continuation of n_gen tokens into
 * out, then the sequence freed; 0, or -1 when a call failed. */
static int solo_greedy(pl_ctx *c, const int32_t *ids, size_t n, float *l, float *first, uint32_t nv, int n_gen,
                       id_list *out)
{
    int32_t seq;
    if (pl_seq_new(c, &seq) != 0) return -1;
    int rc = pl_seq_append(c, seq, ids, n, l);
    if (!rc && first) memcpy(first, l, sizeof(float) * nv);
    if (!rc) rc = continue_greedy(c, seq, l, nv, n_gen, out);
    pl_seq_free(c, seq);
    return rc ? -1 : 0;
}

TEST(kivi_fork_copies_the_stage)
{
    pl_model *m = NULL;
    int32_t *ids;
    size_t n;
    CHECK(stories_and_prompt(&m, &ids, &n) == 0);
    const uint32_t nv = pl_model_n_vocab(m);
    CHECK(n % 16 != 0); /* the fork point is inside a block: the stage holds rows */
    const pl_kv_dtype dts[] = {PL_KV_INT4, PL_KV_INT2};
    for (int d = 0; d < 2; d++) {
        pl_ctx_params cp;
        params(&cp, dts[d]);
        cp.max_seqs = 3;
        pl_ctx *c = NULL;
        int32_t parent, child;
        float *l = malloc(sizeof(float) * nv), *lp = malloc(sizeof(float) * nv);
        id_list ref, got;
        CHECK(pl_ctx_new(&c, m, &cp) == 0);
        CHECK(solo_greedy(c, ids, n, l, NULL, nv, 40, &ref) == 0);
        CHECK(pl_seq_new(c, &parent) == 0);
        CHECK(pl_seq_append(c, parent, ids, n, lp) == 0);
        CHECK(rt_seq_fork(c, parent, &child) == 0);
        memcpy(l, lp, sizeof(float) * nv);
        /* the parent moves on first (other tokens, across a block edge): its
         * stage is rewritten, the child's must not be */
        int32_t other[20];
        for (int i = 0; i < 20; i++) other[i] = 100 + i;
        CHECK(pl_seq_append(c, parent, other, 20, lp) == 0);
        CHECK(continue_greedy(c, child, l, nv, 40, &got) == 0);
        CHECK_MSG(ids_equal(&ref, &got), "%s: forked child differs from a solo run at %d", pl_kv_dtype_name(dts[d]),
                  first_difference(&ref, &got));
        pl_kv_stats st;
        pl_ctx_kv_stats(c, &st);
        CHECK(st.blocks_used > 0);
        kv_seq *live[2] = {(kv_seq *)rt_seq_kv(c, parent), (kv_seq *)rt_seq_kv(c, child)};
        CHECK_MSG(kv_check(rt_ctx_pool(c), live, 2) == 0, "%s", pl_last_error());
        free(l);
        free(lp);
        pl_ctx_free(c);
    }
    pl_free(ids);
    pl_model_free(m);
}

/* Truncating into a sealed KIVI block (and into the block the stage holds)
 * then appending again gives the same tokens and logits as a fresh run. */
TEST(kivi_truncation_into_a_sealed_block_recomputes_it)
{
    pl_model *m = NULL;
    int32_t *ids;
    size_t n;
    CHECK(stories_and_prompt(&m, &ids, &n) == 0);
    const uint32_t nv = pl_model_n_vocab(m);
    CHECK(n > 21);
    const pl_kv_dtype dts[] = {PL_KV_INT4, PL_KV_INT2};
    for (int d = 0; d < 2; d++) {
        const char *name = pl_kv_dtype_name(dts[d]);
        pl_ctx_params cp;
        params(&cp, dts[d]);
        pl_ctx *c = NULL;
        int32_t seq;
        float *l = malloc(sizeof(float) * nv), *lf = malloc(sizeof(float) * nv);
        id_list fresh, got;
        CHECK(pl_ctx_new(&c, m, &cp) == 0);
        /* fresh: the prompt, then 60 greedy tokens */
        CHECK(solo_greedy(c, ids, n, l, lf, nv, 60, &fresh) == 0);
        /* cut runs: the prompt + 30 other tokens (blocks 0..2 sealed, the
         * stage past them), truncate to cut (inside sealed block 1, or near
         * the prompt's end), re-append the rest of the prompt */
        const uint32_t cuts[] = {21, 17, (uint32_t)n - 2};
        for (int k = 0; k < 3; k++) {
            const uint32_t cut = cuts[k];
            int32_t other[40];
            for (int i = 0; i < 40; i++) other[i] = 200 + i;
            CHECK(pl_seq_new(c, &seq) == 0);
            CHECK(pl_seq_append(c, seq, ids, n, l) == 0);
            CHECK(pl_seq_append(c, seq, other, 30, l) == 0);
            CHECK(pl_seq_truncate(c, seq, cut) == 0);
            CHECK_EQ_INT(pl_seq_len(c, seq), cut);
            CHECK(pl_seq_append(c, seq, ids + cut, n - cut, l) == 0);
            double md = 0;
            for (uint32_t v = 0; v < nv; v++) md = fmax(md, fabs(l[v] - lf[v]));
            CHECK(continue_greedy(c, seq, l, nv, 60, &got) == 0);
            INFO("%s: truncate to %u then re-append: max |logit diff| vs fresh %.2e, %d/60 tokens equal", name, cut,
                 md, first_difference(&fresh, &got));
            /* the recomputed rows come from batches of other sizes, whose
             * matmul sums in another order (~1e-6), so not always bit-equal */
            CHECK_MSG(md < 2e-2, "%s cut %u: logits differ from a fresh run by %g", name, cut, md);
            CHECK_MSG(ids_equal(&fresh, &got), "%s cut %u: tokens differ from a fresh run at %d", name, cut,
                      first_difference(&fresh, &got));
            pl_seq_free(c, seq);
        }
        free(l);
        free(lf);
        pl_ctx_free(c);
    }
    pl_free(ids);
    pl_model_free(m);
}

/* Bit for bit: with one token per pass everywhere (the same matmul shapes
 * in every run), a sequence cut back to 21 tokens, from 40 (block 1 sealed
 * and the stage moved on: recomputed) or from 23 (the stage still holds
 * block 1: kept), continues exactly like one that never went past 21. A
 * stale stage, or the lossy unseal, would change the logits. */
TEST(kivi_cut_then_append_is_bit_identical_to_never_going_past)
{
    pl_model *m = NULL;
    CHECK(pl_model_load(&m, STORIES) == 0);
    const uint32_t nv = pl_model_n_vocab(m);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = i ? 300 + (i * 7) % 200 : 1;
    const pl_kv_dtype dts[] = {PL_KV_INT4, PL_KV_INT2};
    for (int d = 0; d < 2; d++) {
        pl_ctx_params cp;
        params(&cp, dts[d]);
        cp.max_seqs = 3;
        cp.max_batch = 1;
        pl_ctx *c = NULL;
        int32_t s[3];
        const uint32_t len[3] = {21, 40, 23};
        float *l[3];
        CHECK(pl_ctx_new(&c, m, &cp) == 0);
        for (int k = 0; k < 3; k++) {
            l[k] = malloc(sizeof(float) * nv);
            CHECK(pl_seq_new(c, &s[k]) == 0);
            CHECK(pl_seq_append(c, s[k], ids, len[k], NULL) == 0);
            if (len[k] != 21) CHECK(pl_seq_truncate(c, s[k], 21) == 0);
        }
        for (int step = 21; step < 30; step++)
            for (int k = 0; k < 3; k++) CHECK(pl_seq_append(c, s[k], &ids[step], 1, l[k]) == 0);
        CHECK_MSG(memcmp(l[0], l[1], sizeof(float) * nv) == 0, "%s: cut from 40 (recomputed) differs",
                  pl_kv_dtype_name(dts[d]));
        CHECK_MSG(memcmp(l[0], l[2], sizeof(float) * nv) == 0, "%s: cut from 23 (stage kept) differs",
                  pl_kv_dtype_name(dts[d]));
        for (int k = 0; k < 3; k++) free(l[k]);
        pl_ctx_free(c);
    }
    pl_model_free(m);
}

TEST(prefix_cache_hits_with_codec_dtypes_give_the_cold_tokens)
{
    pl_model *m = NULL;
    int32_t *ids;
    size_t n;
    CHECK(stories_and_prompt(&m, &ids, &n) == 0);
    const uint32_t nv = pl_model_n_vocab(m);
    for (size_t d = 0; d < N_DT; d++) {
        pl_ctx_params cp;
        params(&cp, dtypes[d]);
        pl_ctx *c = NULL;
        int32_t seq;
        float *l = malloc(sizeof(float) * nv);
        id_list cold, warm;
        CHECK(pl_ctx_new(&c, m, &cp) == 0);
        CHECK(solo_greedy(c, ids, n, l, NULL, nv, 40, &cold) == 0);
        const prefix_cache *pc = rt_ctx_prefix_cache(c);
        CHECK(pc);
        const uint64_t hits0 = pc->st.block_hits;
        CHECK(pl_seq_new(c, &seq) == 0);
        CHECK(pl_seq_append(c, seq, ids, n, l) == 0);
        CHECK_MSG(pc->st.block_hits - hits0 == n / 16, "%s: %llu blocks hit, want %zu", pl_kv_dtype_name(dtypes[d]),
                  (unsigned long long)(pc->st.block_hits - hits0), n / 16);
        CHECK(continue_greedy(c, seq, l, nv, 40, &warm) == 0);
        CHECK_MSG(ids_equal(&cold, &warm), "%s: warm tokens differ at %d", pl_kv_dtype_name(dtypes[d]),
                  first_difference(&cold, &warm));
        free(l);
        pl_ctx_free(c);
    }
    pl_free(ids);
    pl_model_free(m);
}

TEST(unsupported_dtypes_name_the_flag_and_why)
{
    pl_model *m = NULL;
    CHECK(pl_model_load(&m, STORIES) == 0);
    pl_ctx_params cp;
    params(&cp, PL_KV_Q8_0);
    pl_ctx *c = NULL;
    CHECK(pl_ctx_new(&c, m, &cp) == PL_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(pl_last_error(), "--kv-dtype q8_0") && strstr(pl_last_error(), "head dim 8"), "%s", pl_last_error());
    CHECK(c == NULL);
    pl_model_free(m);
}

/* Issue #5's goal for fp8_e4m3: perplexity within 1% of an f16 cache on
 * stories260K, measured the way `pagellm perplexity` does (README "What
 * each KV dtype costs in quality"): the sampled stories text, chunks of 512
 * tokens each starting with BOS, the first half as context, the second
 * half scored. Both runs are made here, chunk by chunk. Measured
 * 2026-11-30: +0.71% (exp of the mean NLL difference), mean KL 5.4e-3;
 * before the stage and the least-squares scales: +6.7%, KL 5.3e-2. The
 * bounds leave ~30% / ~2x margin for float-order changes elsewhere. */
TEST(fp8_e4m3_meets_its_perplexity_goal_on_stories260k)
{
    enum { N_CTX = 512, FIRST = N_CTX / 2, ROWS = N_CTX - 1 - FIRST };
    FILE *f = fopen("tests/data/stories260K-samples.txt", "rb");
    CHECK_MSG(f, "tests/data/stories260K-samples.txt: %s", strerror(errno));
    static char text[1 << 17];
    const size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    CHECK(len > 1000 && len < sizeof text - 1);
    pl_model *m = NULL;
    CHECK_MSG(pl_model_load(&m, STORIES) == 0, "%s", pl_last_error());
    const pl_vocab *v = pl_model_vocab(m);
    const uint32_t nv = pl_model_n_vocab(m);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    CHECK(pl_tokenize(v, text, len, pl_vocab_add_bos(v), false, &ids, &n_ids) == 0);
    const size_t n_chunks = n_ids / N_CTX;
    CHECK(n_chunks >= 20);
    pl_ctx *c[2] = {NULL, NULL};
    const pl_kv_dtype dt[2] = {PL_KV_F16, PL_KV_FP8_E4M3};
    float *lg[2];
    for (int k = 0; k < 2; k++) {
        pl_ctx_params cp;
        params(&cp, dt[k]);
        CHECK_MSG(pl_ctx_new(&c[k], m, &cp) == 0, "%s", pl_last_error());
        lg[k] = malloc(sizeof(float) * ROWS * nv);
        CHECK(lg[k]);
    }
    double nll[2] = {0, 0}, kl = 0;
    size_t n = 0;
    int32_t chunk[N_CTX];
    for (size_t ci = 0; ci < n_chunks; ci++) {
        const int32_t *tgt = ids + ci * N_CTX;
        memcpy(chunk, tgt, sizeof chunk);
        if (pl_vocab_add_bos(v)) chunk[0] = pl_vocab_bos(v);
        for (int k = 0; k < 2; k++) {
            int32_t seq;
            CHECK(pl_seq_new(c[k], &seq) == 0);
            CHECK(pl_seq_append(c[k], seq, chunk, FIRST, NULL) == 0);
            CHECK(pl_seq_append_all(c[k], seq, chunk + FIRST, ROWS, lg[k]) == 0);
            pl_seq_free(c[k], seq);
        }
        for (int r = 0; r < ROWS; r++, n++) {
            double lse[2];
            for (int k = 0; k < 2; k++) {
                const float *l = lg[k] + (size_t)r * nv;
                double mx = l[0], z = 0;
                for (uint32_t t = 1; t < nv; t++) mx = fmax(mx, l[t]);
                for (uint32_t t = 0; t < nv; t++) z += exp(l[t] - mx);
                lse[k] = mx + log(z);
                nll[k] += lse[k] - l[tgt[FIRST + r + 1]];
            }
            for (uint32_t t = 0; t < nv; t++) {
                const double lp = lg[0][(size_t)r * nv + t] - lse[0], lq = lg[1][(size_t)r * nv + t] - lse[1];
                kl += exp(lp) * (lp - lq);
            }
        }
    }
    const double ppl16 = exp(nll[0] / (double)n), ppl8 = exp(nll[1] / (double)n), d = 100 * (ppl8 / ppl16 - 1);
    INFO("stories260K, %zu tokens scored: perplexity f16 %.4f, fp8_e4m3 %.4f (%+.3f%%, goal < 1%%), mean KL %.3g",
         n, ppl16, ppl8, d, kl / (double)n);
    CHECK_MSG(d < 1.0, "fp8_e4m3 perplexity %+.3f%% vs f16 (goal < 1%%)", d);
    CHECK_MSG(kl / (double)n < 1e-2, "fp8_e4m3 mean KL %.3g vs f16", kl / (double)n);
    for (int k = 0; k < 2; k++) free(lg[k]), pl_ctx_free(c[k]);
    pl_free(ids);
    pl_model_free(m);
}

int main(void)
{
    (void)peer_available; /* gen_util.h's peer helpers are not needed here */
    (void)peer_greedy;
    (void)peer_logits;
    RUN(stories260k_generates_near_f16_with_each_codec_dtype);
    RUN(synthetic_tiny_generates_near_f16_with_each_codec_dtype);
    RUN(codec_dtypes_give_the_same_tokens_however_batched_chunked_or_threaded);
    RUN(kivi_fork_copies_the_stage);
    RUN(kivi_truncation_into_a_sealed_block_recomputes_it);
    RUN(kivi_cut_then_append_is_bit_identical_to_never_going_past);
    RUN(prefix_cache_hits_with_codec_dtypes_give_the_cold_tokens);
    RUN(unsupported_dtypes_name_the_flag_and_why);
    RUN(fp8_e4m3_meets_its_perplexity_goal_on_stories260k);
    return test_summary();
}
