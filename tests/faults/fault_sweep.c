/* fault_sweep.c - one scenario of the fault sweep, run once per process by
 * tests/cli/test_faults.sh with PAGELLM_FAULT set (the faults build).
 *
 *   fault_sweep load MODEL    load the model and its vocabulary, tokenize
 *   fault_sweep run MODEL     a context: prompt, greedy decode, the same
 *                             prompt again in a new sequence (a prefix-cache
 *                             hit), kv_check after every call
 *   fault_sweep engine MODEL  the engine: a request with n=3 (a fork), then
 *                             the same prompt again (a prefix-cache hit);
 *                             the pool must drain to 0 used blocks
 *
 * Exit status: 0 the scenario ran through; 1 a call failed and said why
 * (the clean failure an injected fault must give); 3 an invariant broke:
 * kv_check failed, an error came without a message, or blocks stayed used.
 * A crash, a leak or UB is reported by the sanitizers. */
#include "base/err.h"
#include "kv/kv_check.h"
#include "runtime/runtime.h"
#include "pagellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char PROMPT[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
    "with her friends. One day, she saw a big red ball under a tree.";

/* A failed call: a clean failure names its cause. */
static int failed(const char *what, int rc)
{
    const char *msg = pl_last_error();
    if (!msg || !*msg) {
        fprintf(stderr, "BROKEN: %s failed (%d) without an error message\n", what, rc);
        return 3;
    }
    fprintf(stderr, "error: %s: %s\n", what, msg);
    return 1;
}

static int broken(const char *what)
{
    fprintf(stderr, "BROKEN: %s: %s\n", what, pl_last_error());
    return 3;
}

/* *ids: malloc'd by pl_tokenize, NULL on failure; free with pl_free */
static int tokenize(const pl_model *m, int32_t **ids, size_t *n)
{
    const pl_vocab *v = pl_model_vocab(m);
    int rc = pl_tokenize(v, PROMPT, strlen(PROMPT), pl_vocab_add_bos(v), false, ids, n);
    return rc ? failed("pl_tokenize", rc) : 0;
}

static int scenario_load(const char *path)
{
    pl_model *m = NULL;
    int rc = pl_model_load(&m, path);
    if (rc) return failed("pl_model_load", rc);
    int32_t *ids = NULL;
    size_t n = 0;
    int st = tokenize(m, &ids, &n);
    char *text = NULL;
    size_t len = 0;
    if (!st && (rc = pl_detokenize(pl_model_vocab(m), ids, n, &text, &len)) != 0) st = failed("pl_detokenize", rc);
    pl_free(text);
    pl_free(ids);
    pl_model_free(m);
    return st;
}

/* kv_check over the context's pool and every live sequence. */
static int ctx_check(pl_ctx *c)
{
    kv_seq *live[8];
    size_t n = 0;
    for (uint32_t i = 0; i < rt_ctx_params(c)->max_seqs && n < 8; i++) {
        const kv_seq *k = rt_seq_kv(c, (int32_t)i);
        if (k) live[n++] = (kv_seq *)k;
    }
    return kv_check(rt_ctx_pool(c), live, n) ? broken("kv_check") : 0;
}

static int32_t argmax(const float *l, uint32_t n)
{
    int32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = (int32_t)i;
    return b;
}

/* prompt then 8 greedy tokens in a new sequence, checking the pool as it goes */
static int ctx_generate(pl_ctx *c, const int32_t *ids, size_t n, float *logits, uint32_t nv)
{
    int32_t seq = -1;
    int rc = pl_seq_new(c, &seq);
    if (rc) return failed("pl_seq_new", rc);
    int st = (rc = pl_seq_append(c, seq, ids, n, logits)) ? failed("pl_seq_append (prompt)", rc) : ctx_check(c);
    for (int i = 0; !st && i < 8; i++) {
        int32_t t = argmax(logits, nv);
        if ((rc = pl_seq_append(c, seq, &t, 1, logits)) != 0) st = failed("pl_seq_append (decode)", rc);
        else st = ctx_check(c);
    }
    pl_seq_free(c, seq);
    return st ? st : ctx_check(c);
}

static int scenario_run(const char *path)
{
    pl_model *m = NULL;
    int rc = pl_model_load(&m, path);
    if (rc) return failed("pl_model_load", rc);
    int32_t *ids = NULL;
    size_t n = 0;
    int st = tokenize(m, &ids, &n);
    pl_ctx_params cp;
    pl_ctx_params_default(&cp);
    cp.n_ctx = 256;
    cp.max_seqs = 2;
    cp.n_threads = 2;
    pl_ctx *c = NULL;
    if (!st && (rc = pl_ctx_new(&c, m, &cp)) != 0) st = failed("pl_ctx_new", rc);
    uint32_t nv = pl_model_n_vocab(m);
    float *logits = st ? NULL : malloc(nv * sizeof *logits);
    if (!st && !logits) {
        fprintf(stderr, "error: out of memory for the logits\n");
        st = 1;
    }
    if (!st) st = ctx_generate(c, ids, n, logits, nv);
    if (!st) st = ctx_generate(c, ids, n, logits, nv); /* the prompt's full blocks are cached now */
    free(logits);
    pl_free(ids);
    pl_ctx_free(c);
    pl_model_free(m);
    return st;
}

/* Reads r's events to the end: 0, 1 if an ERROR event (with a message)
 * came, 3 if it had no message or the request never ended. */
static int engine_collect(pl_request *r, uint32_t *cached)
{
    pl_event ev;
    int st = 0;
    for (;;) {
        int k = pl_request_next(r, &ev, 30000);
        if (k == 2) return st;
        if (k != 1) {
            fprintf(stderr, "BROKEN: a request did not end within 30 s\n");
            return 3;
        }
        if (ev.kind == PL_EV_ERROR) {
            if (!ev.message[0]) {
                fprintf(stderr, "BROKEN: an ERROR event without a message\n");
                return 3;
            }
            fprintf(stderr, "error: request: %s\n", ev.message);
            st = 1;
        } else if (ev.kind == PL_EV_DONE && cached) {
            *cached = ev.cached_tokens;
        }
    }
}

static int engine_request(pl_engine *e, const int32_t *ids, size_t n, int32_t n_out, uint32_t *cached)
{
    pl_request_params rp;
    memset(&rp, 0, sizeof rp);
    rp.prompt = ids;
    rp.n_prompt = n;
    rp.max_tokens = 8;
    rp.n = n_out;
    pl_sampler_params_default(&rp.sampling);
    rp.sampling.seed = 7;
    rp.ignore_eos = true;
    rp.top_logprobs = 2;
    pl_request *r = NULL;
    int rc = pl_engine_submit(e, &rp, &r);
    if (rc) return failed("pl_engine_submit", rc);
    int st = engine_collect(r, cached);
    pl_request_free(r);
    return st;
}

/* After the requests end, every block goes back (free or cached-free). */
static int engine_drained(pl_engine *e)
{
    pl_engine_metrics mt;
    for (int i = 0; i < 3000; i++) {
        pl_engine_metrics_get(e, &mt);
        if (mt.kv.blocks_used == 0 && mt.running == 0 && mt.waiting == 0) return 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "BROKEN: %u blocks still used, %u running, %u waiting after the requests ended\n",
            mt.kv.blocks_used, mt.running, mt.waiting);
    return 3;
}

static int scenario_engine(const char *path)
{
    pl_model *m = NULL;
    int rc = pl_model_load(&m, path);
    if (rc) return failed("pl_model_load", rc);
    int32_t *ids = NULL;
    size_t n = 0;
    int st = tokenize(m, &ids, &n);
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.n_ctx = 256;
    ep.ctx.max_seqs = 4;
    ep.ctx.n_threads = 2;
    ep.gather_us = 0;
    pl_engine *e = NULL;
    if (!st && (rc = pl_engine_new(&e, m, &ep)) != 0) st = failed("pl_engine_new", rc);
    uint32_t cached = 0;
    int st1 = st ? st : engine_request(e, ids, n, 3, NULL);
    int st2 = st ? st : engine_request(e, ids, n, 1, &cached);
    /* a failed request must not keep the next one from running */
    if (!st && st1 == 1 && st2 == 0 && cached == 0) fprintf(stderr, "note: no prefix hit after a failed request\n");
    st = st1 > st2 ? st1 : st2;
    if (e && st != 3 && engine_drained(e) == 3) st = 3;
    const char *f = getenv("PAGELLM_FAULT"); /* an injected fault may cost the hit, nothing else */
    if (!st && cached == 0 && (!f || !strcmp(f, "count"))) {
        fprintf(stderr, "BROKEN: the repeated prompt had no prefix-cache hit\n");
        st = 3;
    }
    pl_engine_free(e);
    pl_free(ids);
    pl_model_free(m);
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fault_sweep load|run|engine MODEL\n");
        return 2;
    }
    if (!strcmp(argv[1], "load")) return scenario_load(argv[2]);
    if (!strcmp(argv[1], "run")) return scenario_run(argv[2]);
    if (!strcmp(argv[1], "engine")) return scenario_engine(argv[2]);
    fprintf(stderr, "fault_sweep: unknown scenario '%s'\n", argv[1]);
    return 2;
}
