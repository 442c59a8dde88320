/* test_embed.c - embedding requests through the engine on stories260K:
 * llama.cpp's embedding of the same ids (peer-embed: mean pooling,
 * L2-normalised), chunked prefill and batching beside generations give
 * the same vector, no KV block is left behind (the engine checks its
 * invariants and kv_check after every iteration), the prefix cache is
 * neither read by an embedding nor spoiled by one, and the pooling kinds
 * of <arch>.pooling_type (a copy of the file with the key set). */
#include "test.h"

#include <math.h>
#include <unistd.h>

#include "gen_util.h"
#include "gguf/gguf.h"

#define STORIES SHARED_MODELS "/stories260K.gguf"
#define WAIT_MS 60000

static pl_model *M;
static uint32_t DIM;

static void tokenize(pl_model *m, const char *text, id_list *out)
{
    int32_t *ids = NULL;
    size_t n = 0;
    const pl_vocab *v = pl_model_vocab(m);
    out->n = 0;
    if (pl_tokenize(v, text, strlen(text), pl_vocab_add_bos(v), false, &ids, &n) != 0) return;
    for (size_t i = 0; i < n && i < 4096; i++) out->ids[out->n++] = ids[i];
    pl_free(ids);
}

static pl_engine *engine(pl_model *m, uint32_t batch, bool prefix)
{
    pl_engine_params p;
    pl_engine_params_default(&p);
    p.ctx.n_ctx = 256;
    p.ctx.max_seqs = 8;
    p.ctx.n_threads = 2;
    p.max_batch_tokens = batch;
    p.prefix_cache = prefix;
    p.gather_us = 0;
    pl_engine *e = NULL;
    return pl_engine_new(&e, m, &p) == 0 ? e : NULL;
}

static pl_request *submit_embed(pl_engine *e, const id_list *ids)
{
    pl_request_params p;
    memset(&p, 0, sizeof p);
    p.prompt = ids->ids;
    p.n_prompt = (size_t)ids->n;
    p.n = 1;
    p.max_tokens = 1;
    p.top_logprobs = -1;
    p.embed = true;
    pl_sampler_params_default(&p.sampling);
    pl_request *r = NULL;
    return pl_engine_submit(e, &p, &r) == 0 ? r : NULL;
}

/* Waits for r's end; 0 and v filled, or -1. */
static int finish_embed(pl_request *r, float *v)
{
    pl_event ev;
    int rc, done = 0;
    while ((rc = pl_request_next(r, &ev, WAIT_MS)) == 1) done += ev.kind == PL_EV_DONE;
    int ok = rc == 2 && done == 1 && pl_request_embedding(r, v, DIM) == 0;
    pl_request_free(r);
    return ok ? 0 : -1;
}

static int embed_one(pl_engine *e, const id_list *ids, float *v)
{
    pl_request *r = submit_embed(e, ids);
    return r ? finish_embed(r, v) : -1;
}

static double max_diff(const float *a, const float *b, uint32_t n)
{
    double d = 0;
    for (uint32_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static double norm(const float *a, uint32_t n)
{
    double s = 0;
    for (uint32_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

/* Generates n greedy tokens from ids; returns the cached prompt tokens. */
static int generate(pl_engine *e, const id_list *ids, int n, id_list *out)
{
    pl_request_params p;
    memset(&p, 0, sizeof p);
    p.prompt = ids->ids;
    p.n_prompt = (size_t)ids->n;
    p.n = 1;
    p.max_tokens = n;
    p.top_logprobs = -1;
    p.ignore_eos = true;
    pl_sampler_params_default(&p.sampling);
    p.sampling.temperature = 0;
    pl_request *r = NULL;
    if (pl_engine_submit(e, &p, &r) != 0) return -1;
    pl_event ev;
    int cached = -1;
    out->n = 0;
    while (pl_request_next(r, &ev, WAIT_MS) == 1) {
        if (ev.kind == PL_EV_TOKEN && ev.token >= 0) out->ids[out->n++] = ev.token;
        if (ev.kind == PL_EV_DONE) cached = (int)ev.cached_tokens;
    }
    pl_request_free(r);
    return cached;
}

static uint32_t blocks_used(pl_engine *e)
{
    pl_engine_metrics m;
    pl_engine_metrics_get(e, &m);
    return m.kv.blocks_used;
}

/* llama.cpp's mean-pooled, L2-normalised embedding of ids (peer-embed). */
static int peer_embed(const char *model, const char *pool, const id_list *ids, float *v)
{
    char cmd[65536], out[64];
    snprintf(out, sizeof out, "/tmp/pagellm-peer-embed-%d.f32", (int)getpid());
    char *q = cmd + snprintf(cmd, sizeof cmd, "%s/peer-embed -m '%s' -pool %s -o %s -ids ", peer_dir(), model, pool, out);
    for (int i = 0; i < ids->n; i++) q += sprintf(q, i ? ",%d" : "%d", ids->ids[i]);
    strcpy(q, " 2>/dev/null");
    if (system(cmd) != 0) return -1;
    FILE *f = fopen(out, "rb");
    int rc = f && fread(v, sizeof(float), DIM, f) == DIM ? 0 : -1;
    if (f) fclose(f);
    unlink(out);
    return rc;
}

static const char *texts[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "Tom had a big red ball.",
    "The cat sat on the mat and looked at the bird in the tree. The bird sang a happy song all day long.",
};

TEST(embedding_matches_llama_cpp)
{
    pl_engine *e = engine(M, 512, true);
    CHECK(e);
    float ours[4096], theirs[4096];
    for (int t = 0; t < 3; t++) {
        id_list ids;
        tokenize(M, texts[t], &ids);
        CHECK(embed_one(e, &ids, ours) == 0);
        CHECK(peer_embed(STORIES, "mean", &ids, theirs) == 0);
        double d = max_diff(ours, theirs, DIM);
        INFO("text %d (%d tokens): max |ours - llama.cpp| = %.2e", t, ids.n, d);
        CHECK_MSG(d < 2e-4, "text %d differs from llama.cpp by %g", t, d);
    }
    pl_engine_free(e);
}

/* Chunked prefill (4 tokens a step) and batching beside generations and
 * other embeddings give the vector of a lone, one-step run. */
TEST(embedding_chunked_and_batched_is_the_same)
{
    pl_engine *solo = engine(M, 512, true), *chunked = engine(M, 8, true);
    CHECK(solo && chunked);
    static float alone[3][4096], got[3][4096];
    id_list ids[3];
    for (int t = 0; t < 3; t++) {
        tokenize(M, texts[t], &ids[t]);
        CHECK(embed_one(solo, &ids[t], alone[t]) == 0);
        CHECK_NEAR(norm(alone[t], DIM), 1.0, 1e-5);
    }
    CHECK(max_diff(alone[0], alone[1], DIM) > 1e-3); /* different texts differ */
    /* all three at once, with a generation running beside them */
    pl_request *r[3];
    pl_request_params gp;
    memset(&gp, 0, sizeof gp);
    gp.prompt = ids[1].ids;
    gp.n_prompt = (size_t)ids[1].n;
    gp.n = 2;
    gp.max_tokens = 40;
    gp.top_logprobs = -1;
    pl_sampler_params_default(&gp.sampling);
    pl_request *g = NULL;
    CHECK(pl_engine_submit(chunked, &gp, &g) == 0);
    for (int t = 0; t < 3; t++) CHECK((r[t] = submit_embed(chunked, &ids[t])) != NULL);
    for (int t = 0; t < 3; t++) CHECK(r[t] && finish_embed(r[t], got[t]) == 0);
    pl_event ev;
    while (g && pl_request_next(g, &ev, WAIT_MS) == 1) {}
    pl_request_free(g);
    for (int t = 0; t < 3; t++) {
        double d = max_diff(alone[t], got[t], DIM);
        CHECK_MSG(d < 1e-5, "text %d: chunked and batched differs by %g", t, d);
    }
    for (int i = 0; i < 100 && blocks_used(chunked); i++) usleep(10000);
    CHECK_EQ_INT(blocks_used(chunked), 0);
    CHECK_EQ_INT(blocks_used(solo), 0);
    pl_engine_free(solo);
    pl_engine_free(chunked);
}

/* An embedding takes no prefix hit (it needs every token), and the blocks
 * it publishes serve a later generation correctly. */
TEST(embedding_and_the_prefix_cache)
{
    pl_engine *e = engine(M, 512, true), *fresh = engine(M, 512, false);
    CHECK(e && fresh);
    id_list ids, gen0, gen1;
    tokenize(M, texts[2], &ids);
    float clean[4096], after[4096];
    CHECK(embed_one(fresh, &ids, clean) == 0);
    CHECK(generate(e, &ids, 8, &gen0) == 0);         /* cold: publishes the prompt's blocks */
    CHECK(embed_one(e, &ids, after) == 0);           /* would hit them; must not use them */
    CHECK(max_diff(clean, after, DIM) < 1e-6);
    pl_engine *e2 = engine(M, 512, true);
    CHECK(e2);
    CHECK(embed_one(e2, &ids, after) == 0);          /* an embedding publishes the blocks... */
    int cached = generate(e2, &ids, 8, &gen1);       /* ...which a generation then uses */
    CHECK_MSG(cached >= 16, "cached %d", cached);
    CHECK_EQ_INT(gen1.n, gen0.n);
    CHECK(memcmp(gen0.ids, gen1.ids, sizeof(int32_t) * (size_t)gen0.n) == 0);
    pl_engine_free(e);
    pl_engine_free(e2);
    pl_engine_free(fresh);
}

TEST(embedding_requests_are_validated)
{
    pl_engine *e = engine(M, 512, true);
    CHECK(e);
    id_list ids;
    tokenize(M, texts[0], &ids);
    pl_request_params p;
    memset(&p, 0, sizeof p);
    p.prompt = ids.ids;
    p.n_prompt = (size_t)ids.n;
    p.n = 2;
    p.embed = true;
    pl_sampler_params_default(&p.sampling);
    pl_request *r = NULL;
    CHECK(pl_engine_submit(e, &p, &r) == PL_ERR_RANGE); /* n 2 */
    p.n = 1;
    static int32_t big[300];
    p.prompt = big;
    p.n_prompt = 300; /* > n_ctx 256 */
    CHECK(pl_engine_submit(e, &p, &r) == PL_ERR_RANGE);
    big[5] = 100000;
    p.n_prompt = 10;
    CHECK(pl_engine_submit(e, &p, &r) == PL_ERR_INVAL);
    /* a generation has no embedding to read */
    id_list g;
    float v[4096];
    CHECK(generate(e, &ids, 2, &g) >= 0);
    p.prompt = ids.ids;
    p.n_prompt = (size_t)ids.n;
    p.embed = false;
    p.max_tokens = 2;
    p.top_logprobs = -1;
    CHECK(pl_engine_submit(e, &p, &r) == 0);
    CHECK(pl_request_embedding(r, v, DIM) == PL_ERR_INVAL);
    pl_request_free(r);
    pl_engine_free(e);
}

/* A copy of stories260K whose <arch>.pooling_type is pool. */
static int write_pooled_copy(const char *path, uint32_t pool)
{
    gguf_file *f = NULL;
    if (gguf_open(&f, STORIES) != 0) return -1;
    gguf_writer *w = gguf_writer_new();
    int rc = w ? 0 : -1;
    for (uint64_t i = 0; !rc && i < gguf_meta_count(f); i++) {
        const gguf_meta *kv = gguf_meta_at(f, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        rc = gguf_writer_set_value(w, key, &kv->value);
    }
    if (!rc) rc = gguf_writer_set_u32(w, "llama.pooling_type", pool);
    for (uint64_t i = 0; !rc && i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        rc = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data) < 0;
    }
    if (!rc) rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

/* last(P) and cls(P) against what they must equal: for one token every
 * pooling is the same; cls depends on the first token only (causal);
 * last pooling of P agrees with llama.cpp's. */
TEST(pooling_types_from_the_file)
{
    char path[3][64];
    pl_model *m[3] = {0};
    pl_engine *e[3] = {0};
    const uint32_t kinds[3] = {1, 2, 3}; /* mean, cls, last */
    for (int k = 0; k < 3; k++) {
        snprintf(path[k], sizeof path[k], "/tmp/pagellm-embed-pool%u-%d.gguf", kinds[k], (int)getpid());
        CHECK(write_pooled_copy(path[k], kinds[k]) == 0);
        CHECK(pl_model_load(&m[k], path[k]) == 0);
        if (!m[k]) return;
        CHECK_EQ_INT(pl_model_pooling(m[k]), kinds[k]);
        CHECK((e[k] = engine(m[k], 8, true)) != NULL);
    }
    id_list ids, one = {{0}, 1}, head;
    tokenize(M, texts[0], &ids);
    one.ids[0] = ids.ids[3];
    static float v1[3][4096], full[3][4096], part[3][4096];
    for (int k = 0; k < 3; k++) CHECK(embed_one(e[k], &one, v1[k]) == 0);
    CHECK(max_diff(v1[0], v1[1], DIM) < 1e-6 && max_diff(v1[0], v1[2], DIM) < 1e-6);
    head = ids;
    head.n = ids.n - 1;
    for (int k = 0; k < 3; k++) CHECK(embed_one(e[k], &ids, full[k]) == 0 && embed_one(e[k], &head, part[k]) == 0);
    CHECK(max_diff(full[1], part[1], DIM) < 1e-6);   /* cls: the first token's state */
    CHECK(max_diff(full[2], part[2], DIM) > 1e-3);   /* last: the last token's */
    CHECK(max_diff(full[0], full[2], DIM) > 1e-3);   /* mean is not last */
    char p[512];
    snprintf(p, sizeof p, "%s/peer-embed", peer_dir());
    if (access(p, X_OK) == 0) { /* else the relations above are all this checks */
        float theirs[4096];
        CHECK(peer_embed(STORIES, "last", &ids, theirs) == 0);
        INFO("last pooling: max |ours - llama.cpp| = %.2e", max_diff(full[2], theirs, DIM));
        CHECK(max_diff(full[2], theirs, DIM) < 2e-4);
        CHECK(peer_embed(STORIES, "cls", &ids, theirs) == 0);
        CHECK(max_diff(full[1], theirs, DIM) < 2e-4);
    }
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(blocks_used(e[k]), 0);
        pl_engine_free(e[k]);
        pl_model_free(m[k]);
        unlink(path[k]);
    }
}

int main(void)
{
    (void)peer_available, (void)peer_greedy, (void)peer_logits, (void)our_greedy, (void)file_exists, (void)ids_equal,
        (void)first_difference;
    setenv("PAGELLM_ENGINE_CHECK", "1", 1); /* sched_check + kv_check after every iteration */
    if (pl_model_load(&M, STORIES) != 0) {
        printf("FAIL load %s: %s\n", STORIES, pl_last_error());
        return 1;
    }
    DIM = pl_model_n_embd(M);
    if (DIM > 4096) { printf("FAIL dim %u\n", DIM); return 1; }
    char peer[512];
    snprintf(peer, sizeof peer, "%s/peer-embed", peer_dir());
    if (access(peer, X_OK) == 0) RUN(embedding_matches_llama_cpp);
    else test_skip("embedding_matches_llama_cpp", "peer-embed not built (make peer)");
    RUN(embedding_chunked_and_batched_is_the_same);
    RUN(embedding_and_the_prefix_cache);
    RUN(embedding_requests_are_validated);
    RUN(pooling_types_from_the_file);
    pl_model_free(M);
    return test_summary();
}
