/* engine_util.h - tests that drive pl_engine with greedy requests and
 * count what comes back (test_swa.c, test_kv_groups.c). */
#ifndef PL_TESTS_ENGINE_UTIL_H
#define PL_TESTS_ENGINE_UTIL_H

#include <string.h>

#include "pagellm.h"

/* Submits r_n greedy requests of n_prompt tokens (prompts[i]) for g tokens
 * each (ignore_eos), then reads them all: n[i] tokens of request i,
 * *errors error events, *done requests finished with all g tokens.
 * Returns -1 if a submit failed (pl_last_error() says why), else 0. */
static int engine_run_greedy(pl_engine *e, const int32_t *const *prompts, int n_prompt, int r_n, int g, int *n,
                             int *errors, int *done)
{
    pl_request *r[64];
    if (r_n > 64) return -1;
    *errors = *done = 0;
    for (int i = 0; i < r_n; i++) {
        pl_request_params rp;
        memset(&rp, 0, sizeof rp);
        rp.prompt = prompts[i];
        rp.n_prompt = (size_t)n_prompt;
        rp.max_tokens = g;
        rp.n = 1;
        pl_sampler_params_default(&rp.sampling);
        rp.sampling.temperature = 0;
        rp.ignore_eos = true;
        rp.top_logprobs = -1;
        if (pl_engine_submit(e, &rp, &r[i]) != 0) {
            while (i-- > 0) pl_request_free(r[i]);
            return -1;
        }
    }
    for (int i = 0; i < r_n; i++) {
        pl_event ev;
        n[i] = 0;
        for (int k; (k = pl_request_next(r[i], &ev, 60000)) == 1;) {
            if (ev.kind == PL_EV_ERROR) (*errors)++;
            else if (ev.kind == PL_EV_DONE) *done += ev.completion_tokens == (uint32_t)g;
            else n[i]++;
        }
        pl_request_free(r[i]);
    }
    return 0;
}

#endif
