/* test_window.c - the KV sliding window with attention sinks through the
 * context API (pl_ctx_params.kv_window / kv_sinks, src/runtime/rt_window.c)
 * on stories260K: runs far past n_ctx and the train context, keeps the sink
 * blocks and the newest tokens, changes nothing while the window is not
 * reached, stops using the prefix cache once shifted, keeps kv_check's
 * invariants, and refuses bad parameters naming the flag. */
#include "test.h"

#include "runtime/runtime.h"
#include "base/err.h"
#include "kv/kv_check.h"
#include "kv/prefix_cache.h"
#include "pagellm.h"

#include <stdint.h>

#define STORIES SHARED_MODELS "/stories260K.gguf"

static pl_model *M;

static void params(pl_ctx_params *cp, uint32_t window, uint32_t sinks)
{
    pl_ctx_params_default(cp);
    cp->n_threads = 2;
    cp->kv_window = window;
    cp->kv_sinks = sinks;
}

static int32_t argmax(const float *l, uint32_t n)
{
    int32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = (int32_t)i;
    return b;
}

static int check_pool(pl_ctx *c)
{
    kv_seq *live[8];
    size_t n = 0;
    for (uint32_t i = 0; i < rt_ctx_params(c)->max_seqs && n < 8; i++) {
        const kv_seq *k = rt_seq_kv(c, (int32_t)i);
        if (k) live[n++] = (kv_seq *)k;
    }
    return kv_check(rt_ctx_pool(c), live, n);
}

/* Greedy generation of n tokens after prompt; all tokens fed go to fed[]. */
static int greedy(pl_ctx *c, int32_t seq, const int32_t *prompt, int n_prompt, int n, int32_t *fed, int *n_fed)
{
    const uint32_t nv = pl_model_n_vocab(M);
    float *l = malloc(nv * sizeof *l);
    int rc = pl_seq_append(c, seq, prompt, (size_t)n_prompt, l);
    memcpy(fed, prompt, (size_t)n_prompt * sizeof *fed);
    *n_fed = n_prompt;
    for (int i = 0; !rc && i < n; i++) {
        int32_t t = argmax(l, nv);
        fed[(*n_fed)++] = t;
        rc = pl_seq_append(c, seq, &t, 1, l);
        if (!rc) rc = check_pool(c);
    }
    free(l);
    return rc;
}

static const int32_t prompt[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
                                 338, 401, 396, 267, 337};

TEST(runs_far_past_the_context_keeping_sinks_and_the_newest_tokens)
{
    pl_ctx_params cp;
    params(&cp, 64, 4);
    pl_ctx *c = NULL;
    CHECK_MSG(pl_ctx_new(&c, M, &cp) == 0, "%s", pl_last_error());
    CHECK_EQ_INT(pl_ctx_n_ctx(c), 16 + 64); /* sinks pinned in a whole block of 16 */
    CHECK_EQ_INT(pl_ctx_kv_window(c), 64);
    int32_t seq, fed[3000];
    int n_fed = 0;
    CHECK(pl_seq_new(c, &seq) == 0);
    const int n_gen = 2600; /* past the train context (2048 in the file) and 32 x n_ctx */
    CHECK_MSG(greedy(c, seq, prompt, 21, n_gen, fed, &n_fed) == 0, "%s", pl_last_error());
    const uint32_t len = pl_seq_len(c, seq);
    const uint64_t gone = pl_seq_n_dropped(c, seq);
    CHECK(len <= 80 && len > 80 - 16);
    CHECK_EQ_INT(len + gone, (uint64_t)n_fed);
    const int32_t *kept = pl_seq_tokens(c, seq);
    for (uint32_t i = 0; i < 16; i++) CHECK_EQ_INT(kept[i], fed[i]);              /* the sinks */
    for (uint32_t i = 16; i < len; i++) CHECK_EQ_INT(kept[i], fed[gone + i]);     /* the newest */
    const kv_seq *kv = rt_seq_kv(c, seq);
    CHECK_EQ_INT(kv->n_tokens, len);
    /* the text did not collapse into one repeated token */
    int distinct = 0;
    for (int i = n_fed - 200; i < n_fed; i++) distinct += fed[i] != fed[i - 1];
    CHECK(distinct > 50);
    pl_seq_free(c, seq);
    CHECK_EQ_INT(check_pool(c), 0);
    pl_ctx_free(c);
}

TEST(sink_block_is_pinned_and_never_rewritten)
{
    pl_ctx_params cp;
    params(&cp, 48, 16);
    pl_ctx *c = NULL;
    CHECK(pl_ctx_new(&c, M, &cp) == 0);
    int32_t seq, fed[600];
    int n_fed;
    CHECK(pl_seq_new(c, &seq) == 0);
    CHECK(greedy(c, seq, prompt, 21, 20, fed, &n_fed) == 0);
    const kv_seq *kv = rt_seq_kv(c, seq);
    const uint32_t b0 = kv->table[0];
    const kv_pool *pool = rt_ctx_pool(c);
    uint8_t *copy = malloc(pool->g.block_bytes), *now = malloc(pool->g.block_bytes);
    kv_block_save(pool, b0, copy);
    int32_t more[600];
    CHECK(greedy(c, seq, fed + n_fed - 1, 1, 300, more, &n_fed) == 0);
    CHECK(pl_seq_n_dropped(c, seq) > 200);
    CHECK_EQ_INT(rt_seq_kv(c, seq)->table[0], b0);
    kv_block_save(pool, b0, now);
    CHECK(memcmp(copy, now, pool->g.block_bytes) == 0);
    free(copy);
    free(now);
    pl_ctx_free(c);
}

TEST(a_window_not_reached_changes_nothing)
{
    const uint32_t nv = pl_model_n_vocab(M);
    pl_ctx_params a, b;
    params(&a, 0, 0);
    a.n_ctx = 256;
    params(&b, 192, 4);
    b.n_ctx = 256;
    pl_ctx *ca = NULL, *cb = NULL;
    CHECK(pl_ctx_new(&ca, M, &a) == 0);
    CHECK(pl_ctx_new(&cb, M, &b) == 0);
    int32_t sa, sb;
    CHECK(pl_seq_new(ca, &sa) == 0 && pl_seq_new(cb, &sb) == 0);
    float *la = malloc(nv * sizeof *la), *lb = malloc(nv * sizeof *lb);
    CHECK(pl_seq_append(ca, sa, prompt, 21, la) == 0);
    CHECK(pl_seq_append(cb, sb, prompt, 21, lb) == 0);
    for (int i = 0; i < 150; i++) {
        CHECK_MSG(memcmp(la, lb, nv * sizeof *la) == 0, "logits differ at step %d", i);
        int32_t t = argmax(la, nv);
        CHECK(pl_seq_append(ca, sa, &t, 1, la) == 0);
        CHECK(pl_seq_append(cb, sb, &t, 1, lb) == 0);
    }
    CHECK_EQ_INT(pl_seq_n_dropped(cb, sb), 0);
    free(la);
    free(lb);
    pl_ctx_free(ca);
    pl_ctx_free(cb);
}

TEST(append_all_streams_a_long_text_and_a_fork_continues_alike)
{
    const uint32_t nv = pl_model_n_vocab(M);
    pl_ctx_params cp;
    params(&cp, 96, 4);
    cp.max_seqs = 2;
    cp.max_batch = 64; /* pieces are also cut by the batch */
    pl_ctx *c = NULL;
    CHECK(pl_ctx_new(&c, M, &cp) == 0);
    int32_t seq, kid, text[700];
    for (int i = 0; i < 700; i++) text[i] = prompt[i % 21];
    float *l = malloc(700 * (size_t)nv * sizeof *l), *lk = malloc(nv * sizeof *lk), *lp = malloc(nv * sizeof *lp);
    CHECK(pl_seq_new(c, &seq) == 0);
    CHECK_MSG(pl_seq_append_all(c, seq, text, 700, l) == 0, "%s", pl_last_error());
    for (size_t i = 0; i < 700 * (size_t)nv; i++) CHECK(isfinite(l[i]));
    CHECK_EQ_INT(pl_seq_len(c, seq) + pl_seq_n_dropped(c, seq), 700);
    CHECK(rt_seq_fork(c, seq, &kid) == 0);
    CHECK_EQ_INT(pl_seq_n_dropped(c, kid), pl_seq_n_dropped(c, seq));
    for (int i = 0; i < 40; i++) { /* the parent and the fork drop and re-rotate copies of shared blocks */
        int32_t t = prompt[i % 21];
        CHECK(pl_seq_append(c, seq, &t, 1, lp) == 0);
        CHECK(pl_seq_append(c, kid, &t, 1, lk) == 0);
        CHECK_MSG(memcmp(lp, lk, nv * sizeof *lp) == 0, "fork differs at step %d", i);
        CHECK_EQ_INT(check_pool(c), 0);
    }
    free(l);
    free(lk);
    free(lp);
    pl_ctx_free(c);
}

TEST(a_shifted_sequence_stops_publishing_prefix_blocks)
{
    pl_ctx_params cp;
    params(&cp, 64, 4);
    pl_ctx *c = NULL;
    CHECK(pl_ctx_new(&c, M, &cp) == 0);
    const prefix_cache *pc = rt_ctx_prefix_cache(c);
    CHECK(pc != NULL);
    int32_t seq, fed[400];
    int n_fed;
    CHECK(pl_seq_new(c, &seq) == 0);
    CHECK(greedy(c, seq, prompt, 21, 300, fed, &n_fed) == 0);
    prefix_stats st;
    prefix_stats_get(pc, &st);
    /* the 5 blocks (80 tokens) filled before the first drop, none after */
    CHECK_EQ_INT(st.registered, 5);
    pl_seq_free(c, seq);
    /* the same tokens again: at least the sink block is still cached (the
     * blocks that moved lost their keys) */
    int32_t s2;
    CHECK(pl_seq_new(c, &s2) == 0);
    float *l = malloc(pl_model_n_vocab(M) * sizeof *l);
    CHECK(pl_seq_append(c, s2, fed, 70, l) == 0);
    prefix_stats_get(pc, &st);
    CHECK(st.hit_tokens >= 16);
    free(l);
    pl_ctx_free(c);
}

TEST(bad_parameters_name_the_flag)
{
    pl_ctx_params cp;
    pl_ctx *c = NULL;
    params(&cp, 20, 0); /* < 2 blocks */
    CHECK_EQ_INT(pl_ctx_new(&c, M, &cp), PL_ERR_INVAL);
    CHECK(strstr(pl_last_error(), "--kv-window") != NULL);
    params(&cp, 0, 4);
    CHECK_EQ_INT(pl_ctx_new(&c, M, &cp), PL_ERR_INVAL);
    CHECK(strstr(pl_last_error(), "--kv-sinks") != NULL);
    params(&cp, 64, 4);
    cp.n_ctx = 64; /* 16 + 64 > 64 */
    CHECK_EQ_INT(pl_ctx_new(&c, M, &cp), PL_ERR_INVAL);
    CHECK(strstr(pl_last_error(), "--ctx") != NULL);
    params(&cp, 64, 0);
    cp.no_kv_cache = true;
    CHECK_EQ_INT(pl_ctx_new(&c, M, &cp), PL_ERR_INVAL);
    params(&cp, 64, 0);
    cp.kv_dtype = PL_KV_INT4;
    int rc = pl_ctx_new(&c, M, &cp);
    CHECK(rc == PL_ERR_UNSUPPORTED);
    CHECK(c == NULL);
}

int main(void)
{
    if (pl_model_load(&M, STORIES) != 0) {
        printf("FAIL load %s: %s\n", STORIES, pl_last_error());
        return 1;
    }
    RUN(runs_far_past_the_context_keeping_sinks_and_the_newest_tokens);
    RUN(sink_block_is_pinned_and_never_rewritten);
    RUN(a_window_not_reached_changes_nothing);
    RUN(append_all_streams_a_long_text_and_a_fork_continues_alike);
    RUN(a_shifted_sequence_stops_publishing_prefix_blocks);
    RUN(bad_parameters_name_the_flag);
    pl_model_free(M);
    return test_summary();
}
