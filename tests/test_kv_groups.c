/* test_kv_groups.c - layer groups, the KV kind of gemma2/3's local
 * sliding-window layers (kv/kv_groups.h, runtime/rt_groups.c).
 *
 * Plan: gemma3-1b's 26 layers (pattern 6) give a global group of 4 layers
 * and 6 local groups of 4 slots (22 layers, 2 padded); a model without
 * local or global layers gets none.
 * Model: synthetic gemma2 and gemma3 (tiny: 4 layers, 2 local, window 32),
 * blocks of 16, run far past the window:
 *   - logits bit for bit equal with layer groups and with one table, token
 *     by token and with a prompt prefilled in pieces, and the local groups
 *     hold at most the window's blocks while the global one keeps all;
 *   - gemma3 at the 110m shape (6 groups of 2 slots): three sequences in
 *     batched steps give one table's logits bit for bit;
 *   - several sequences, forks and prefix hits with the context's checks
 *     (kv_check over every table, the groups' invariants, prefix_check)
 *     after every step; a prefix hit gives the logits a fresh context
 *     computes; a hit whose local window block was evicted shrinks to
 *     before it and still gives them; a truncation below the local window
 *     recomputes it;
 *   - the engine with a pool too small for its requests: preemption and
 *     recomputation through the groups, its invariant checks every step.
 *   - /v1/kv and the stats behind /metrics while a request decodes: each
 *     group's table per sequence, owners over every group, per-group block
 *     counts that add up to the blocks used.
 *   - the disk tier: a prompt of 7 windows written behind, then loaded by a
 *     fresh context (the local table takes the window only) with logits bit
 *     for bit equal to a recompute of the same prefix, also after a RAM
 *     prefix of 5 or 13 blocks; a one-table context
 *     finds none of its entries; a damaged entry and a one-table entry
 *     under a groups key are refused.
 */
#include "test.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <unistd.h>

#include "kv/kv_check.h"
#include "kv/kv_groups.h"
#include "kv/prefix_cache.h"
#include "runtime/runtime.h"
#include "store/store.h"
#include "store/store_disk.h"
#include "engine_util.h"
#include "gen_util.h"

#define BS 16
#define W 32 /* synth's gemma window */

static char path2[256], path3[256];
static pl_model *M2, *M3;

TEST(plan_gemma3_1b_and_refusals)
{
    bool local[26];
    for (int l = 0; l < 26; l++) local[l] = l % 6 < 5;
    kv_groups g;
    kv_groups_plan(&g, 26, local, 512);
    CHECK_EQ_INT(g.n_groups, 7);
    CHECK_EQ_INT(g.slots, 4);
    CHECK_EQ_INT(g.group[5], 0);
    CHECK_EQ_INT(g.slot[11], 1);
    CHECK_EQ_INT(g.group[25], 6); /* the 22nd local layer: group 6, slot 1 */
    CHECK_EQ_INT(g.slot[25], 1);
    bool seen[7][4] = {{false}};
    for (int l = 0; l < 26; l++) {
        CHECK(!seen[g.group[l]][g.slot[l]]);
        seen[g.group[l]][g.slot[l]] = true;
        CHECK(local[l] == (g.group[l] != 0));
    }
    for (int l = 0; l < 26; l++) local[l] = true;
    kv_groups_plan(&g, 26, local, 512);
    CHECK_EQ_INT(g.n_groups, 0);
    for (int l = 0; l < 26; l++) local[l] = false;
    kv_groups_plan(&g, 26, local, 512);
    CHECK_EQ_INT(g.n_groups, 0);
}

static void params(pl_ctx_params *p, bool one_table)
{
    pl_ctx_params_default(p);
    p->n_threads = 2;
    p->block_size = BS;
    p->n_ctx = 512;
    p->kv_dtype = PL_KV_F32;
    p->kv_one_table = one_table;
}

static int32_t tok(int i, int salt) { return (int32_t)(1 + (i * 37 + salt * 101 + (i * i) % 11) % 500); }

/* The most blocks any local table of seq holds now (0 without groups). */
static uint32_t local_blocks(pl_ctx *c, int32_t seq)
{
    const kv_glocal *lg = rt_seq_kv_local(c, seq);
    return lg ? lg->t[0].n_blocks : 0;
}

/* Prompt of P tokens in one call (cut in pieces of max_batch), then N
 * tokens one at a time; every step's logits into out[(1 + N)][nv]. */
static int run_seq(pl_ctx *c, size_t nv, int P, int N, float *out, uint32_t *max_local)
{
    int32_t seq, ids[256];
    for (int i = 0; i < P; i++) ids[i] = tok(i, 1);
    int rc = pl_seq_new(c, &seq);
    if (!rc) rc = pl_seq_append(c, seq, ids, (size_t)P, out);
    for (int i = 0; i < N && !rc; i++) {
        const int32_t t = tok(P + i, 1);
        rc = pl_seq_append(c, seq, &t, 1, out + (size_t)(i + 1) * nv);
        if (!rc) rc = rt_ctx_check(c);
        if (max_local && local_blocks(c, seq) > *max_local) *max_local = local_blocks(c, seq);
    }
    return rc;
}

TEST(groups_equal_one_table_bit_for_bit_past_the_window)
{
    pl_model *ms[2] = {M2, M3};
    enum { P = 100, N = 4 * W + 30 };
    for (int k = 0; k < 2; k++) {
        const size_t nv = pl_model_n_vocab(ms[k]);
        float *a = malloc(sizeof(float) * nv * (N + 1)), *b = malloc(sizeof(float) * nv * (N + 1));
        pl_ctx_params pg, po;
        params(&pg, false);
        params(&po, true);
        pg.max_batch = po.max_batch = 24; /* the prompt runs in pieces, the drop between them */
        pl_ctx *cg = NULL, *co = NULL;
        CHECK_MSG(pl_ctx_new(&cg, ms[k], &pg) == 0 && pl_ctx_new(&co, ms[k], &po) == 0, "%s", pl_last_error());
        CHECK(rt_ctx_groups(cg) && rt_ctx_groups(cg)->n_groups == 2 && !rt_ctx_groups(co));
        uint32_t held = 0;
        CHECK_MSG(run_seq(cg, nv, P, N, a, &held) == 0, "groups: %s", pl_last_error());
        CHECK_MSG(run_seq(co, nv, P, N, b, NULL) == 0, "one table: %s", pl_last_error());
        for (int i = 0; i <= N; i++)
            CHECK_MSG(memcmp(a + (size_t)i * nv, b + (size_t)i * nv, sizeof(float) * nv) == 0,
                      "model %d step %d: logits differ with layer groups", k, i);
        /* decoding: the window's blocks and the one being filled; the prompt's pieces held more */
        CHECK_MSG(held <= (W - 1 + BS - 1) / BS + 2 + 24 / BS, "%u local blocks held", held);
        CHECK(local_blocks(cg, 0) <= (W - 1 + BS - 1) / BS + 2);
        pl_kv_stats sg, so;
        pl_ctx_kv_stats(cg, &sg);
        pl_ctx_kv_stats(co, &so);
        INFO("model %d, %d tokens: groups %llu bytes (global %llu, local %llu), one table %llu", k, P + N,
             (unsigned long long)sg.bytes_allocated, (unsigned long long)sg.global_bytes,
             (unsigned long long)sg.local_bytes, (unsigned long long)so.bytes_allocated);
        CHECK(sg.layer_groups == 2 && sg.global_bytes + sg.local_bytes == sg.bytes_allocated);
        /* half the layers, every token (blocks of 4 KiB and more carry a line of pad: kv_pool.h) */
        CHECK(fabs(2.0 * (double)sg.global_bytes - (double)so.bytes_allocated) <= 0.01 * (double)so.bytes_allocated);
        CHECK(sg.bytes_allocated < so.bytes_allocated * 6 / 10);
        CHECK_EQ_INT(pl_seq_kv_bytes(cg, 0), sg.bytes_allocated);
        pl_ctx_free(cg);
        pl_ctx_free(co);
        free(a);
        free(b);
    }
}

/* max |a - b| over nv floats */
static double diff(const float *a, const float *b, size_t nv)
{
    double w = 0;
    for (size_t j = 0; j < nv; j++) w = fmax(w, fabs(a[j] - b[j]));
    return w;
}

/* Logits of tokens ids[0, n) in a fresh one-table context. */
static int fresh_logits(const int32_t *ids, int n, float *out)
{
    pl_ctx_params p;
    params(&p, true);
    pl_ctx *c = NULL;
    int32_t s;
    int rc = pl_ctx_new(&c, M3, &p);
    if (!rc) rc = pl_seq_new(c, &s);
    if (!rc) rc = pl_seq_append(c, s, ids, (size_t)n, out);
    pl_ctx_free(c);
    return rc;
}

/* Appends ids[0, n) one at a time with the checks after each. */
static int feed(pl_ctx *c, int32_t s, const int32_t *ids, int n, float *logits)
{
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = pl_seq_append(c, s, ids + i, 1, logits);
        if (!rc) rc = rt_ctx_check(c);
    }
    return rc;
}

/* gemma3 at the 110m shape: 12 layers, 10 local, so 6 groups of 2 slots.
 * Three sequences decode in batched steps (pl_seq_step) past 3W; every
 * step's logits equal one table's bit for bit, and the checks hold. */
TEST(batched_steps_over_six_groups)
{
    char path[256];
    snprintf(path, sizeof path, "/tmp/pagellm-test-lg110-%d.gguf", (int)getpid());
    pl_synth_params sp = {.shape = "110m", .seed = 7, .type = "q8_0", .out_path = path, .arch = "gemma3"};
    pl_model *m = NULL;
    CHECK_MSG(pl_synth(&sp) == 0 && pl_model_load(&m, path) == 0, "%s", pl_last_error());
    unlink(path);
    enum { S = 3, P = 20, N = 3 * W + 10 };
    const size_t nv = pl_model_n_vocab(m);
    pl_ctx *c[2] = {NULL, NULL};
    int32_t seq[2][S];
    float *l[2] = {malloc(sizeof(float) * nv * S), malloc(sizeof(float) * nv * S)};
    int bad = -1;
    for (int k = 0; k < 2 && bad < 0; k++) {
        pl_ctx_params p;
        params(&p, k == 1);
        p.max_seqs = S;
        CHECK_MSG(pl_ctx_new(&c[k], m, &p) == 0, "%s", pl_last_error());
        for (int i = 0; i < S; i++) {
            int32_t ids[P];
            for (int j = 0; j < P; j++) ids[j] = tok(j, 20 + i);
            CHECK(pl_seq_new(c[k], &seq[k][i]) == 0 && pl_seq_append(c[k], seq[k][i], ids, P, l[k] + i * nv) == 0);
        }
    }
    CHECK(rt_ctx_groups(c[0]) && rt_ctx_groups(c[0])->n_groups == 6 && rt_ctx_groups(c[0])->slots == 2);
    for (int step = 0; step < N && bad < 0; step++) {
        int32_t next[S];
        for (int i = 0; i < S; i++) next[i] = tok(step, 30 + i);
        for (int k = 0; k < 2; k++) CHECK_MSG(pl_seq_step(c[k], seq[k], next, S, l[k]) == 0, "%s", pl_last_error());
        CHECK_MSG(rt_ctx_check(c[0]) == 0, "step %d: %s", step, pl_last_error());
        if (memcmp(l[0], l[1], sizeof(float) * nv * S)) bad = step;
    }
    CHECK_MSG(bad < 0, "step %d: logits differ with 6 layer groups", bad);
    pl_kv_stats st;
    pl_ctx_kv_stats(c[0], &st);
    INFO("6 groups, %d sequences of %d tokens: global %llu bytes, local %llu", S, P + N,
         (unsigned long long)st.global_bytes, (unsigned long long)st.local_bytes);
    for (int k = 0; k < 2; k++) pl_ctx_free(c[k]);
    free(l[0]);
    free(l[1]);
    pl_model_free(m);
}

TEST(forks_prefix_hits_and_truncation_keep_every_invariant)
{
    enum { N = 5 * W + 7 };
    const size_t nv = pl_model_n_vocab(M3);
    int32_t ids[N + 40], alt[N + 40];
    for (int i = 0; i < N + 40; i++) ids[i] = tok(i, 3), alt[i] = i < N ? ids[i] : tok(i, 9);
    float *l = malloc(sizeof(float) * nv), *f = malloc(sizeof(float) * nv);
    pl_ctx_params p;
    params(&p, false);
    p.max_seqs = 4;
    pl_ctx *c = NULL;
    int32_t a, b, d, e;
    CHECK(pl_ctx_new(&c, M3, &p) == 0);
    CHECK(pl_seq_new(c, &a) == 0 && feed(c, a, ids, N, l) == 0);
    /* a fork shares every group's blocks; both go on with other tokens (copy-on-write) */
    CHECK_MSG(rt_seq_fork(c, a, &b) == 0 && rt_ctx_check(c) == 0, "%s", pl_last_error());
    CHECK(feed(c, a, ids + N, 40, l) == 0);
    CHECK(fresh_logits(ids, N + 40, f) == 0);
    CHECK_MSG(diff(l, f, nv) < 2e-3, "parent after fork: %g", diff(l, f, nv));
    CHECK(feed(c, b, alt + N, 40, l) == 0);
    CHECK(fresh_logits(alt, N + 40, f) == 0);
    CHECK_MSG(diff(l, f, nv) < 2e-3, "child after fork: %g", diff(l, f, nv));
    /* a prompt equal to a's history: a hit of whole blocks in every group */
    prefix_stats s0, s1;
    prefix_stats_get(rt_ctx_prefix_cache(c), &s0);
    CHECK(pl_seq_new(c, &d) == 0 && pl_seq_append(c, d, ids, N + 40, l) == 0 && rt_ctx_check(c) == 0);
    prefix_stats_get(rt_ctx_prefix_cache(c), &s1);
    const uint64_t hit = s1.hit_tokens - s0.hit_tokens;
    CHECK(fresh_logits(ids, N + 40, f) == 0);
    INFO("prefix hit %llu of %d tokens; hit vs fresh max |diff| %.3g", (unsigned long long)hit, N + 40, diff(l, f, nv));
    CHECK_EQ_INT(hit, (N + 39) / BS * BS);
    CHECK_MSG(diff(l, f, nv) < 2e-3, "hit vs fresh: %g", diff(l, f, nv));
    CHECK_EQ_INT(s1.query_tokens - s0.query_tokens, N + 40);
    /* evict one block of the window the local group needs at the end of a's
     * history: a later hit stops before it */
    const kv_glocal *lg = rt_seq_kv_local(c, a);
    const uint32_t victim = lg->t[0].table[lg->t[0].n_blocks - 2], victim_at = lg->dropped + lg->t[0].n_blocks - 2;
    pl_seq_free(c, a);
    pl_seq_free(c, d);
    kv_pool *pool = rt_ctx_pool(c);
    CHECK(pool->blocks[victim].state == KV_BLOCK_CACHED);
    kv_pool_acquire(pool, victim);
    pool->on_evict(pool->evict_user, victim, pool->blocks[victim].hash);
    kv_pool_clear_hash(pool, victim);
    kv_pool_decref(pool, victim);
    CHECK(rt_ctx_check(c) == 0);
    prefix_stats_get(rt_ctx_prefix_cache(c), &s0);
    CHECK(pl_seq_new(c, &e) == 0 && pl_seq_append(c, e, ids, N + 40, l) == 0 && rt_ctx_check(c) == 0);
    prefix_stats_get(rt_ctx_prefix_cache(c), &s1);
    INFO("with local block %u evicted: hit %llu tokens", victim_at, (unsigned long long)(s1.hit_tokens - s0.hit_tokens));
    CHECK(s1.hit_tokens - s0.hit_tokens <= (uint64_t)victim_at * BS);
    CHECK(s1.hit_tokens - s0.hit_tokens > 0);
    CHECK_MSG(diff(l, f, nv) < 2e-3, "shrunk hit vs fresh: %g", diff(l, f, nv));
    /* truncation below the local window: recomputed, then the same logits */
    CHECK_MSG(pl_seq_truncate(c, e, 50) == 0 && rt_ctx_check(c) == 0, "%s", pl_last_error());
    CHECK_EQ_INT(pl_seq_len(c, e), 50);
    CHECK(feed(c, e, ids + 50, 1, l) == 0);
    CHECK(fresh_logits(ids, 51, f) == 0);
    CHECK_MSG(diff(l, f, nv) < 2e-3, "after truncation: %g", diff(l, f, nv));
    pl_ctx_free(c);
    free(l);
    free(f);
}

TEST(engine_preemption_through_the_groups)
{
    pl_ctx_params cp;
    params(&cp, false);
    enum { R = 4, G = 200 };
    int32_t prompts[R][20];
    const int32_t *pp[R];
    for (int i = 0; i < R; i++) {
        for (int j = 0; j < 20; j++) prompts[i][j] = tok(j, i < 2 ? 10 : 10 + i); /* two share a prompt */
        pp[i] = prompts[i];
    }
    /* 4 sequences of 220 tokens need about 4 x (14 + 4) blocks */
    engine_run_result res;
    CHECK_MSG(engine_preempt_run(M3, &cp, 40, 4, pp, 20, R, G, &res) == 0, "%s", pl_last_error());
    INFO("layer groups in 40 blocks, %d requests x %d tokens: %llu preemptions, %llu steps", R, G,
         (unsigned long long)res.mt.preemptions, (unsigned long long)res.mt.steps);
    char why[128];
    CHECK_MSG(engine_run_complete(&res, R, G, why, sizeof why), "%s", why);
}

/* /v1/kv (pl_engine_kv_json) and the stats behind /metrics with layer
 * groups, while a request of 6 windows decodes: every sequence lists each
 * group's table (group 0's is its "blocks"; the local ones start past the
 * window's front and hold a few blocks), every used block's owners are
 * every table naming it (so their count is its refcount), and the
 * per-group block counts add up to the blocks used. */
TEST(kv_json_and_stats_show_every_group)
{
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    params(&ep.ctx, false);
    ep.ctx.max_seqs = 2;
    ep.ctx.n_ctx = 8192; /* room for a request the engine cannot finish before the JSON is taken */
    pl_engine *e = NULL;
    CHECK_MSG(pl_engine_new(&e, M3, &ep) == 0, "%s", pl_last_error());
    if (!e) return;
    enum { P = 6 * W + 5 };
    int32_t ids[P];
    for (int i = 0; i < P; i++) ids[i] = tok(i, 7);
    /* the engine decodes on its own thread with no backpressure: a short
     * request of this tiny model can end between the second token's event
     * and the JSON, so the request is long and cancelled after */
    pl_request_params rp = {.prompt = ids, .n_prompt = P, .max_tokens = 8192 - P - 8, .n = 1, .top_logprobs = -1};
    pl_sampler_params_default(&rp.sampling);
    rp.sampling.temperature = 0;
    rp.ignore_eos = true;
    pl_request *r = NULL;
    CHECK(pl_engine_submit(e, &rp, &r) == 0);
    pl_event ev;
    /* two tokens: the second one's step appended the first, so the local
     * table has dropped what the window passed (a prefill in one piece
     * keeps every block until the next append) */
    for (int got = 0; got < 2;) {
        int rc = pl_request_next(r, &ev, 20000);
        CHECK_EQ_INT(rc, 1);
        if (rc != 1) return;
        got += ev.kind == PL_EV_TOKEN;
    }
    char *js = pl_engine_kv_json(e);
    pl_engine_metrics mt;
    pl_engine_metrics_get(e, &mt);
    json_t *o = js ? json_loads(js, 0, NULL) : NULL;
    pl_free(js);
    CHECK(o);
    if (!o) return;
    CHECK_STR(json_string_value(json_object_get(o, "kv_kind")), "layer_groups");
    json_t *seqs = json_object_get(o, "sequences"), *gbl = json_object_get(o, "group_blocks");
    CHECK_EQ_INT(json_array_size(seqs), 1);
    CHECK_EQ_INT(json_array_size(gbl), 2);
    json_t *q = json_array_get(seqs, 0), *groups = json_object_get(q, "groups");
    CHECK_EQ_INT(json_array_size(groups), 2);
    json_t *g0 = json_array_get(groups, 0), *g1 = json_array_get(groups, 1);
    CHECK(json_equal(json_object_get(g0, "blocks"), json_object_get(q, "blocks")));
    CHECK_EQ_INT(json_integer_value(json_object_get(g0, "first_block")), 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(g1, "group")), 1);
    const json_int_t first = json_integer_value(json_object_get(g1, "first_block"));
    const size_t n0 = json_array_size(json_object_get(g0, "blocks")), n1 = json_array_size(json_object_get(g1, "blocks"));
    INFO("a sequence of %lld tokens: global table %zu blocks, local table %zu from block %lld",
         json_integer_value(json_object_get(q, "tokens")), n0, n1, (long long)first);
    CHECK(first > 0 && (size_t)first + n1 == n0 && n1 <= (W - 1 + BS - 1) / BS + 2);
    /* the per-group counts: the JSON's, the metrics', the tables' */
    CHECK_EQ_INT(json_integer_value(json_array_get(gbl, 0)), n0);
    CHECK_EQ_INT(json_integer_value(json_array_get(gbl, 1)), n1);
    CHECK(mt.kv.layer_groups == 2 && mt.kv.group_blocks[0] >= 1 && mt.kv.group_blocks[1] >= 1);
    CHECK_EQ_INT(json_integer_value(json_array_get(gbl, 0)) + json_integer_value(json_array_get(gbl, 1)),
                 json_integer_value(json_object_get(o, "blocks_used")));
    /* owners: every table naming a block, with its group */
    json_t *blocks = json_object_get(o, "blocks"), *b;
    size_t i;
    int local_owned = 0;
    json_array_foreach(blocks, i, b) {
        json_t *own = json_object_get(b, "owners");
        CHECK_EQ_INT(json_array_size(own), json_integer_value(json_object_get(b, "refcount")));
        if (json_array_size(own) && json_integer_value(json_object_get(json_array_get(own, 0), "group")) == 1)
            local_owned++;
    }
    CHECK_EQ_INT(local_owned, n1);
    json_decref(o);
    pl_request_cancel(r);
    while (pl_request_next(r, &ev, 20000) == 1) {}
    pl_request_free(r);
    pl_engine_free(e);
}

/* ------------------------------------------------------- the KV tiers */

static char tierdir[256];

/* A disk tier on tierdir keyed like c's prefix cache, set on c. */
static store *tier_open(pl_ctx *c)
{
    char err[300];
    store_backend *b = store_disk_open(tierdir, 1 << 26, err, sizeof err);
    if (!b) {
        printf("# %s\n", err);
        return NULL;
    }
    const kv_pool *pool = rt_ctx_pool(c);
    store_params sp = {.block_size = pool->g.s.block_size, .block_bytes = rt_ctx_tier_block_bytes(c),
                       .timeout_ms = 5000};
    memcpy(sp.salt, rt_ctx_prefix_cache(c)->salt, sizeof sp.salt);
    store *st = NULL;
    if (store_new(&st, &sp) || store_add_tier(st, b)) return NULL;
    rt_ctx_set_store(c, st);
    return st;
}

/* Looks up ids[0, n)'s full blocks in st for c's empty sequence seq and
 * attaches them (rt_seq_attach_tiered): the tokens held; *found = blocks
 * the tier verified. */
static int tier_attach(pl_ctx *c, store *st, int32_t seq, const int32_t *ids, uint32_t n, uint32_t *found,
                       uint32_t *loaded)
{
    uint64_t keys[64][2];
    uint32_t in_ram = 0, nb = rt_prefix_chain(c, ids, n, keys, &in_ram);
    *found = *loaded = 0;
    if (nb <= in_ram) return rt_seq_attach_prefix(c, seq, ids, n, false);
    store_lookup *l = store_lookup_start(st, in_ram ? keys[in_ram - 1] : PREFIX_ROOT,
                                         (const uint64_t(*)[2])keys + in_ram, ids + (size_t)in_ram * BS, nb - in_ram);
    bool done = false;
    for (int w = 0; w < 5000 && !done; w++) {
        *found = store_lookup_poll(l, &done);
        if (!done) usleep(1000);
    }
    const uint8_t *blocks[64];
    for (uint32_t i = 0; i < *found; i++) blocks[i] = store_lookup_block(l, i);
    int h = rt_seq_attach_tiered(c, seq, ids, n, false, in_ram, blocks, *found, 1, loaded);
    store_lookup_free(l);
    return h;
}

/* Where the disk tier holds chain block i of ids[0, n) in c's keys: its
 * segment file, the entry's offset and length (store_disk_locate, with the
 * tier opened for it: no store may hold tierdir). *k = the block's key. */
static bool entry_where(pl_ctx *c, const int32_t *ids, uint32_t n, uint32_t i, char *path, uint64_t *off,
                        uint64_t *len, store_key *k)
{
    uint64_t keys[64][2];
    uint32_t in_ram;
    rt_prefix_chain(c, ids, n, keys, &in_ram);
    *k = (store_key){{keys[i][0], keys[i][1]}};
    char err[300];
    store_backend *b = store_disk_open(tierdir, 1 << 26, err, sizeof err);
    if (!b) return false;
    bool ok = store_disk_locate(b, k, path, 400, off, len) == 0;
    b->close(b);
    return ok;
}

/* gemma3 with layer groups on a disk tier: a prompt of 7 windows computed
 * once is written behind (one entry a position: the global and the local
 * group's block); a fresh context on the same directory loads every full
 * block, the local table only the window's, and the logits of the rest of
 * the prompt and 20 decoded tokens equal bit for bit those of a context
 * that computed the same prefix itself (in the same pieces). A one-table
 * context on the same directory finds none of those entries (their keys
 * and salt name the groups), and an entry whose bytes are damaged is
 * refused: the hit stops before it. */
TEST(disk_tier_hit_equals_recompute_bit_for_bit)
{
    enum { P = 7 * W + 11, N = 20 };
    const size_t nv = pl_model_n_vocab(M3);
    int32_t ids[P + N];
    for (int i = 0; i < P + N; i++) ids[i] = tok(i, 4);
    float *a = malloc(sizeof(float) * nv * (N + 1)), *b = malloc(sizeof(float) * nv * (N + 1));
    snprintf(tierdir, sizeof tierdir, "/tmp/pagellm-test-lgtier-%d", (int)getpid());
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tierdir);
    CHECK(system(cmd) == 0);
    pl_ctx_params p;
    params(&p, false);
    pl_ctx *c0 = NULL, *c1 = NULL, *cc = NULL;
    int32_t s0, s1, sc;
    /* the first context computes the prompt and writes it behind */
    CHECK_MSG(pl_ctx_new(&c0, M3, &p) == 0, "%s", pl_last_error());
    store *st = tier_open(c0);
    CHECK(st != NULL);
    if (!st) return;
    CHECK(pl_seq_new(c0, &s0) == 0 && pl_seq_append(c0, s0, ids, P, NULL) == 0);
    store_free(st); /* writes what is queued */
    pl_ctx_free(c0);
    /* a fresh context loads it */
    CHECK(pl_ctx_new(&c1, M3, &p) == 0);
    st = tier_open(c1);
    CHECK(st != NULL);
    if (!st) return;
    uint32_t found, loaded;
    CHECK(pl_seq_new(c1, &s1) == 0);
    const int h = tier_attach(c1, st, s1, ids, P, &found, &loaded);
    const uint32_t nb = (P - 1) / BS, d = (uint32_t)(h + 1 - W) / BS;
    INFO("tier: %u of %u full blocks found, %u loaded, %d tokens held", found, nb, loaded, h);
    CHECK_EQ_INT(found, nb);
    CHECK_EQ_INT(loaded, nb);
    CHECK_EQ_INT(h, (int)(nb * BS));
    const kv_glocal *lg = rt_seq_kv_local(c1, s1);
    CHECK(lg && lg->dropped == d && lg->t[0].n_blocks == nb - d); /* the window's blocks only */
    CHECK_MSG(rt_ctx_check(c1) == 0, "%s", pl_last_error());
    CHECK(pl_seq_append(c1, s1, ids + h, (size_t)(P - h), a) == 0);
    for (int i = 0; i < N; i++) CHECK(pl_seq_append(c1, s1, ids + P + i, 1, a + (size_t)(i + 1) * nv) == 0);
    CHECK_MSG(rt_ctx_check(c1) == 0, "%s", pl_last_error());
    /* the same prefix computed, then the same pieces */
    CHECK(pl_ctx_new(&cc, M3, &p) == 0);
    CHECK(pl_seq_new(cc, &sc) == 0 && pl_seq_append(cc, sc, ids, (size_t)h, NULL) == 0);
    CHECK(pl_seq_append(cc, sc, ids + h, (size_t)(P - h), b) == 0);
    for (int i = 0; i < N; i++) CHECK(pl_seq_append(cc, sc, ids + P + i, 1, b + (size_t)(i + 1) * nv) == 0);
    for (int i = 0; i <= N; i++)
        CHECK_MSG(memcmp(a + (size_t)i * nv, b + (size_t)i * nv, sizeof(float) * nv) == 0,
                  "step %d: logits after a tier hit differ from the recomputed prefix's", i);
    /* the loaded blocks are RAM hits for the next prompt, every group's */
    int32_t s2;
    pl_seq_free(c1, s1);
    CHECK(pl_seq_new(c1, &s2) == 0);
    CHECK_EQ_INT(rt_seq_attach_prefix(c1, s2, ids, P, false), (int)(nb * BS));
    store_free(st);
    pl_ctx_free(c1);
    pl_ctx_free(cc);
    /* RAM holds the first k0 blocks (every group's), the tier the rest: at
     * k0 = 5 the local table's window at the end lies wholly in the loaded
     * blocks (its RAM blocks dropped, its chain moved over them), at k0 = 13
     * it keeps a RAM block and takes one loaded */
    const uint32_t k0s[2] = {5, 13};
    for (int r = 0; r < 2; r++) {
        const uint32_t k0 = k0s[r];
        pl_ctx *cr = NULL;
        int32_t sa, sb;
        CHECK(pl_ctx_new(&cr, M3, &p) == 0);
        st = tier_open(cr);
        CHECK(st != NULL);
        if (!st) return;
        CHECK(pl_seq_new(cr, &sa) == 0 && pl_seq_append(cr, sa, ids, k0 * BS + 1, NULL) == 0);
        pl_seq_free(cr, sa);
        CHECK(pl_seq_new(cr, &sb) == 0);
        const int hr = tier_attach(cr, st, sb, ids, P, &found, &loaded);
        INFO("RAM %u blocks: the tier found %u, loaded %u; %d tokens held", k0, found, loaded, hr);
        CHECK_EQ_INT(found, nb - k0);
        CHECK_EQ_INT(loaded, nb - k0);
        CHECK_EQ_INT(hr, h);
        lg = rt_seq_kv_local(cr, sb);
        CHECK(lg && lg->dropped == d && lg->t[0].n_blocks == nb - d);
        CHECK_MSG(rt_ctx_check(cr) == 0, "%s", pl_last_error());
        CHECK(pl_seq_append(cr, sb, ids + h, (size_t)(P - h), a) == 0);
        for (int i = 0; i < N; i++) CHECK(pl_seq_append(cr, sb, ids + P + i, 1, a + (size_t)(i + 1) * nv) == 0);
        for (int i = 0; i <= N; i++)
            CHECK_MSG(memcmp(a + (size_t)i * nv, b + (size_t)i * nv, sizeof(float) * nv) == 0,
                      "RAM %u blocks, step %d: logits differ from the recomputed prefix's", k0, i);
        pl_seq_free(cr, sb);
        CHECK(pl_seq_new(cr, &sb) == 0);
        CHECK_EQ_INT(rt_seq_attach_prefix(cr, sb, ids, P, false), (int)(nb * BS)); /* every group's chain keyed */
        CHECK_MSG(rt_ctx_check(cr) == 0, "%s", pl_last_error());
        store_free(st);
        pl_ctx_free(cr);
    }
    /* one table, same model, same directory: none of the groups' entries is
     * found; it computes the prompt and writes entries of its own layout */
    pl_ctx_params po;
    params(&po, true);
    pl_ctx *co = NULL;
    int32_t so;
    CHECK(pl_ctx_new(&co, M3, &po) == 0 && !rt_ctx_groups(co));
    st = tier_open(co);
    CHECK(st != NULL);
    if (!st) return;
    CHECK(pl_seq_new(co, &so) == 0);
    CHECK_EQ_INT(tier_attach(co, st, so, ids, P, &found, &loaded), 0);
    CHECK_EQ_INT(found, 0);
    CHECK(pl_seq_append(co, so, ids, P, NULL) == 0);
    store_free(st);
    char one0[400], grp0[400], grp3[400];
    uint64_t one0_off, one0_len, grp0_off, grp0_len, grp3_off, grp3_len;
    store_key one0_key, grp0_key, grp3_key;
    CHECK(entry_where(co, ids, P, 0, one0, &one0_off, &one0_len, &one0_key));
    pl_ctx_free(co);
    /* a groups context: an entry damaged in its last local bytes (block 3) is refused */
    pl_ctx *cg = NULL;
    int32_t sg;
    CHECK(pl_ctx_new(&cg, M3, &p) == 0);
    CHECK(entry_where(cg, ids, P, 0, grp0, &grp0_off, &grp0_len, &grp0_key));
    CHECK(entry_where(cg, ids, P, 3, grp3, &grp3_off, &grp3_len, &grp3_key));
    int fd = open(grp3, O_RDWR);
    CHECK(fd >= 0 && pwrite(fd, "Z", 1, (off_t)(grp3_off + grp3_len - 3)) == 1);
    if (fd >= 0) close(fd);
    st = tier_open(cg);
    CHECK(st != NULL);
    if (!st) return;
    store_tier_stats ts;
    CHECK(pl_seq_new(cg, &sg) == 0);
    CHECK_EQ_INT(tier_attach(cg, st, sg, ids, P, &found, &loaded), 3 * BS);
    store_tier_stats_get(st, 0, &ts);
    CHECK_EQ_INT(found, 3);
    CHECK_EQ_INT(ts.rejected, 1); /* met by the read: not the segment's last record, which open checks */
    pl_seq_free(cg, sg);
    store_free(st);
    pl_ctx_free(cg);
    /* the one-table entry of block 0 (same tokens) put under the groups' key: refused */
    uint8_t *e1 = malloc(one0_len);
    fd = open(one0, O_RDONLY);
    CHECK(e1 && fd >= 0 && pread(fd, e1, one0_len, (off_t)one0_off) == (ssize_t)one0_len);
    if (fd >= 0) close(fd);
    char err[300];
    store_backend *raw = store_disk_open(tierdir, 1 << 26, err, sizeof err);
    CHECK_MSG(raw, "%s", err);
    if (raw && e1) {
        const uint8_t *vv = e1;
        size_t l1 = one0_len;
        CHECK_EQ_INT(raw->put_many(raw, &grp0_key, 1, &vv, &l1), 0);
    }
    if (raw) raw->close(raw);
    free(e1);
    CHECK(pl_ctx_new(&cg, M3, &p) == 0);
    st = tier_open(cg);
    CHECK(st != NULL);
    if (!st) return;
    CHECK(pl_seq_new(cg, &sg) == 0);
    CHECK_EQ_INT(tier_attach(cg, st, sg, ids, P, &found, &loaded), 0);
    store_tier_stats_get(st, 0, &ts);
    CHECK_EQ_INT(found, 0);
    CHECK_EQ_INT(ts.rejected, 1);
    CHECK_MSG(rt_ctx_check(cg) == 0, "%s", pl_last_error());
    store_free(st);
    pl_ctx_free(cg);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tierdir);
    CHECK(system(cmd) == 0);
    free(a);
    free(b);
}

int main(void)
{
    (void)peer_greedy, (void)peer_logits, (void)peer_available, (void)ids_equal, (void)first_difference, (void)file_exists, (void)our_greedy;
    RUN(plan_gemma3_1b_and_refusals);
    snprintf(path2, sizeof path2, "/tmp/pagellm-test-lg2-%d.gguf", (int)getpid());
    snprintf(path3, sizeof path3, "/tmp/pagellm-test-lg3-%d.gguf", (int)getpid());
    pl_synth_params s2 = {.shape = "tiny", .seed = 5, .type = "f32", .out_path = path2, .arch = "gemma2"};
    pl_synth_params s3 = {.shape = "tiny", .seed = 6, .type = "f32", .out_path = path3, .arch = "gemma3"};
    if (pl_synth(&s2) || pl_synth(&s3) || pl_model_load(&M2, path2) || pl_model_load(&M3, path3)) {
        printf("FAIL model: %s\n", pl_last_error());
        return 1;
    }
    RUN(groups_equal_one_table_bit_for_bit_past_the_window);
    RUN(batched_steps_over_six_groups);
    RUN(forks_prefix_hits_and_truncation_keep_every_invariant);
    RUN(engine_preemption_through_the_groups);
    RUN(disk_tier_hit_equals_recompute_bit_for_bit);
    RUN(kv_json_and_stats_show_every_group);
    pl_model_free(M2);
    pl_model_free(M3);
    unlink(path2);
    unlink(path3);
    return test_summary();
}
