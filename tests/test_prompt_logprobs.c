/* test_prompt_logprobs.c - prompt logprobs through the engine on
 * stories260K (what completions' echo + logprobs answers): the logprob the
 * engine gives a prompt token equals the logprob it gave the same token
 * when it generated it after the same text, across prompt chunks of
 * PL_PROMPT_LOGPROBS_CHUNK, beside other requests, for every completion of
 * n; the first prompt token has none; the cached prefix is not used (rows
 * are needed) and no KV block is left. */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pagellm.h"

#define STORIES SHARED_MODELS "/stories260K.gguf"
#define WAIT_MS 60000
#define N_GEN 12

static pl_model *M;

typedef struct {
    int32_t ids[4096];
    float lp[4096];
    int32_t top[4096][3];
    int n;
} toks;

static pl_engine *engine(void)
{
    pl_engine_params p;
    pl_engine_params_default(&p);
    p.ctx.n_ctx = 512;
    p.ctx.max_seqs = 8;
    p.ctx.n_threads = 2;
    p.gather_us = 0;
    pl_engine *e = NULL;
    return pl_engine_new(&e, M, &p) == 0 ? e : NULL;
}

static pl_request *submit(pl_engine *e, const int32_t *ids, int n, int max_tokens, int n_comp, bool plp)
{
    pl_request_params p;
    memset(&p, 0, sizeof p);
    p.prompt = ids;
    p.n_prompt = (size_t)n;
    p.n = n_comp;
    p.max_tokens = max_tokens;
    p.top_logprobs = 3;
    p.ignore_eos = true;
    p.prompt_logprobs = plp;
    pl_sampler_params_default(&p.sampling);
    p.sampling.temperature = 0;
    pl_request *r = NULL;
    return pl_engine_submit(e, &p, &r) == 0 ? r : NULL;
}

/* Reads r to its end: generated tokens into gen, PL_EV_PROMPT events of
 * each completion into prm[index]. Returns the DONE events seen. */
static int drain(pl_request *r, toks *gen, toks *prm, int n_comp)
{
    pl_event ev;
    int done = 0;
    while (pl_request_next(r, &ev, WAIT_MS) == 1) {
        if (ev.index < 0 || ev.index >= n_comp) continue;
        toks *t = ev.kind == PL_EV_PROMPT ? &prm[ev.index] : ev.kind == PL_EV_TOKEN && ev.index == 0 && gen ? gen : NULL;
        if (t && t->n < 4096 && (ev.kind == PL_EV_PROMPT || ev.token >= 0)) {
            t->ids[t->n] = ev.token;
            t->lp[t->n] = ev.logprob;
            for (int k = 0; k < 3; k++) t->top[t->n][k] = k < ev.n_top ? ev.top_ids[k] : -1;
            t->n++;
        }
        if (ev.kind == PL_EV_PROMPT && done) return -1; /* a prompt event after a DONE */
        done += ev.kind == PL_EV_DONE;
    }
    pl_request_free(r);
    return done;
}

TEST(prompt_logprobs_equal_generation_logprobs)
{
    pl_engine *e = engine();
    CHECK(e);
    if (!e) return;
    /* a prompt of more than two chunks */
    const char *text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                       "One day, she saw a big, red ball. She wanted to play with it, but it was too high. Lily's mom "
                       "said she could have it if she was good. Lily was very happy and played with the ball all day. "
                       "The next day, Lily and her friend Tom went to the park again. They saw a little dog. The dog "
                       "was sad because it lost its bone. Lily and Tom helped the dog find the bone under a tree.";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(pl_tokenize(pl_model_vocab(M), text, strlen(text), true, false, &ids, &n) == 0);
    CHECK_MSG(n > 2 * PL_PROMPT_LOGPROBS_CHUNK, "prompt of %zu tokens", n);
    static toks gen, prm[4];
    memset(&gen, 0, sizeof gen);
    CHECK(drain(submit(e, ids, (int)n, N_GEN, 1, false), &gen, prm, 1) == 1);
    CHECK_EQ_INT(gen.n, N_GEN);
    CHECK_EQ_INT(prm[0].n, 0); /* none unless asked */
    /* the prompt + what was generated, as a prompt: its tail's logprobs are the generation's */
    int32_t *all = malloc(sizeof *all * (n + N_GEN));
    memcpy(all, ids, n * sizeof *ids);
    memcpy(all + n, gen.ids, N_GEN * sizeof *all);
    memset(prm, 0, sizeof prm);
    /* beside it, another request keeps the batch mixed */
    pl_request *other = submit(e, ids, 20, 30, 1, false);
    CHECK(drain(submit(e, all, (int)n + N_GEN, 2, 2, true), NULL, prm, 2) == 2);
    CHECK(drain(other, NULL, prm + 2, 1) == 1);
    for (int c = 0; c < 2; c++) {
        CHECK_EQ_INT(prm[c].n, (int)n + N_GEN);
        CHECK(isnan(prm[c].lp[0]));
        for (int i = 0; i < (int)n + N_GEN && i < prm[c].n; i++) CHECK_EQ_INT(prm[c].ids[i], all[i]);
        for (int i = 1; i < prm[c].n; i++) CHECK(prm[c].lp[i] <= 0 && isfinite(prm[c].lp[i]));
        double worst = 0;
        for (int j = 0; j < N_GEN; j++) {
            worst = fmax(worst, fabs((double)prm[c].lp[n + (size_t)j] - gen.lp[j]));
            CHECK_MSG(memcmp(prm[c].top[n + (size_t)j], gen.top[j], sizeof gen.top[j]) == 0, "alternatives of %d differ", j);
        }
        if (c == 0) INFO("prompt vs generation logprobs over %d tokens: max difference %.2e", N_GEN, worst);
        CHECK_MSG(worst < 1e-3, "prompt logprobs differ from generation logprobs by %g", worst);
    }
    pl_engine_metrics m;
    for (int i = 0; i < 100; i++) {
        pl_engine_metrics_get(e, &m);
        if (m.kv.blocks_used == 0) break;
        usleep(10000);
    }
    CHECK_EQ_INT(m.kv.blocks_used, 0);
    /* the cached prefix of the first request was not used: every row was computed */
    CHECK(m.prefix_hit_tokens < (uint64_t)n);
    free(all);
    pl_free(ids);
    pl_engine_free(e);
}

int main(void)
{
    setenv("PAGELLM_ENGINE_CHECK", "1", 1); /* sched_check + kv_check after every iteration */
    if (pl_model_load(&M, STORIES) != 0) {
        printf("FAIL load %s: %s\n", STORIES, pl_last_error());
        return 1;
    }
    RUN(prompt_logprobs_equal_generation_logprobs);
    pl_model_free(M);
    return test_summary();
}
