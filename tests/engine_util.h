/* engine_util.h - tests that drive pl_engine with greedy requests and
 * count what comes back (test_swa.c, test_kv_groups.c). */
#ifndef PL_TESTS_ENGINE_UTIL_H
#define PL_TESTS_ENGINE_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagellm.h"

/* A greedy request of n_prompt tokens for g tokens, past end-of-generation. */
static void engine_greedy_params(pl_request_params *rp, const int32_t *prompt, int n_prompt, int g)
{
    memset(rp, 0, sizeof *rp);
    rp->prompt = prompt;
    rp->n_prompt = (size_t)n_prompt;
    rp->max_tokens = g;
    rp->n = 1;
    pl_sampler_params_default(&rp->sampling);
    rp->sampling.temperature = 0;
    rp->ignore_eos = true;
    rp->top_logprobs = -1;
}

/* An engine over m with settings ep, its scheduler's and the context's
 * invariant checks run every step (PAGELLM_ENGINE_CHECK). */
static int engine_checked_new(pl_engine **e, pl_model *m, const pl_engine_params *ep)
{
    setenv("PAGELLM_ENGINE_CHECK", "1", 1);
    int rc = pl_engine_new(e, m, ep);
    unsetenv("PAGELLM_ENGINE_CHECK");
    return rc;
}

/* What engine_preempt_run saw. */
typedef struct {
    int n[64];      /* tokens of each request */
    int errors;     /* error events */
    int done;       /* requests finished with all their tokens */
    pl_engine_metrics mt;
} engine_run_result;

/* r_n greedy requests of n_prompt tokens (prompts[i]) for g tokens each,
 * through a checked engine of max_seqs sequences whose pool holds `blocks`
 * blocks of cp's geometry and whose steps carry 64 tokens: a pool too small
 * for them all preempts and recomputes. -1 with pl_last_error() if the
 * engine or a request could not be made. */
static int engine_preempt_run(pl_model *m, const pl_ctx_params *cp, uint32_t blocks, uint32_t max_seqs,
                              const int32_t *const *prompts, int n_prompt, int r_n, int g, engine_run_result *out)
{
    pl_ctx *c = NULL;
    pl_kv_stats ks;
    if (r_n > 64 || pl_ctx_new(&c, m, cp) != 0) return -1;
    pl_ctx_kv_stats(c, &ks);
    pl_ctx_free(c);
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx = *cp;
    ep.ctx.max_seqs = max_seqs;
    ep.ctx.kv_mem = blocks * ks.block_bytes;
    ep.max_batch_tokens = 64;
    pl_engine *e = NULL;
    if (engine_checked_new(&e, m, &ep) != 0) return -1;
    pl_request *r[64];
    memset(out, 0, sizeof *out);
    for (int i = 0; i < r_n; i++) {
        pl_request_params rp;
        engine_greedy_params(&rp, prompts[i], n_prompt, g);
        if (pl_engine_submit(e, &rp, &r[i]) != 0) {
            while (i-- > 0) pl_request_free(r[i]);
            pl_engine_free(e);
            return -1;
        }
    }
    for (int i = 0; i < r_n; i++) {
        pl_event ev;
        for (int k; (k = pl_request_next(r[i], &ev, 60000)) == 1;) {
            if (ev.kind == PL_EV_ERROR) out->errors++;
            else if (ev.kind == PL_EV_DONE) out->done += ev.completion_tokens == (uint32_t)g;
            else out->n[i]++;
        }
        pl_request_free(r[i]);
    }
    pl_engine_metrics_get(e, &out->mt);
    pl_engine_free(e);
    return 0;
}

/* True if every one of r_n requests ran all its g tokens without an error,
 * and the pool was small enough to preempt; else false with why. */
static bool engine_run_complete(const engine_run_result *res, int r_n, int g, char *why, size_t n_why)
{
    snprintf(why, n_why, "%d errors, %d of %d done, %llu preemptions", res->errors, res->done, r_n,
             (unsigned long long)res->mt.preemptions);
    bool ok = res->errors == 0 && res->done == r_n && res->mt.preemptions > 0;
    for (int i = 0; i < r_n; i++) ok &= res->n[i] == g;
    return ok;
}

#endif
