/* step_cost.h - what a key costs, learned from the engine's own steps.
 *
 * The scheduler holds a step that carries decodes to the token budget's
 * cost at depth 0, counting a token that attends to k keys as 1 + k x
 * key_cost depth-0 tokens (scheduler.h). model_key_cost estimates that
 * from the model's shape alone, so it cannot know that an fp8 or KIVI key
 * costs its kernels more than an f16 one, nor how far this CPU's kernels
 * are from counting multiply-adds. Nor does one figure serve both kinds of
 * token: a decode reads each key from memory for one query, a prompt chunk
 * reuses a key from cache for many (compute-bound). Every step's wall time
 * tells: it is fit to
 *     t = a + b x tokens + gd x decode keys' + gp x prompt keys'
 * (keys' = the keys the step's one-token items, resp. longer items, attend
 * to, times model_key_cost), and a key costs model_key_cost x gd / b
 * depth-0 tokens to a decode, model_key_cost x gp / b to a prompt token.
 * A decode's logits (the output matrix, which a prompt token skips) have
 * no term of their own: they would be all but collinear with the decode
 * keys, and what they cost falls on a, b and gd.
 *
 * The fit is least squares on relative errors (each step weighs the same,
 * whether it took 1 ms or 10 s; relative to the larger of its time and
 * the fit's prediction, so that no step weighs more than a miss by its
 * whole time). Its sums decay by STEP_COST_DECAY a step, so that it follows
 * the host (a cost that doubles is followed in ~200 steps). A prior with
 * the weight of STEP_COST_PRIOR steps pulls gd / b and gp / b toward 1 and
 * a toward 0: steps that cannot tell keys from tokens apart (decodes at one
 * depth) leave the estimate where the model put it. The learned ratios are
 * held to [1/STEP_COST_RANGE, STEP_COST_RANGE], so that no burst on the
 * host makes the scheduler starve prompts or decodes. Timing moves only
 * where prompt chunks are cut; a prompt's tokens do not depend on its cuts
 * (test_engine: a prompt cut beside a decode, against its run alone).
 */
#ifndef PL_ENGINE_STEP_COST_H
#define PL_ENGINE_STEP_COST_H

#include <stdint.h>

#define STEP_COST_DECAY 0.98
#define STEP_COST_PRIOR 0.01
#define STEP_COST_RANGE 4.0
#define STEP_COST_N 4

typedef struct {
    double key_cost0;  /* model_key_cost: the prior, and the unit of keys' */
    /* decayed sums over steps of x x^T / t^2 and x / t,
     * x = (1, tokens, decode keys', prompt keys') */
    double s[STEP_COST_N][STEP_COST_N], r[STEP_COST_N];
    double theta[STEP_COST_N]; /* the last fit (a, b, gd, gp) in seconds; b = 0 before any */
    double ratio_decode, ratio_prompt; /* gd / b and gp / b as held to the range: 1 until a fit */
    uint64_t steps;    /* steps observed */
} step_cost;

void step_cost_init(step_cost *sc, double key_cost0);

/* What one step ran and how long it took. */
typedef struct {
    double tokens;
    double decode_keys, prompt_keys; /* keys attended by one-token items' tokens, by longer items' */
    double seconds;                  /* wall */
} step_cost_obs;

/* Steps of no tokens or no time are ignored. */
void step_cost_observe(step_cost *sc, const step_cost_obs *o);

/* A key's cost in depth-0 tokens to a decode, to a prompt token, as the
 * scheduler takes it: key_cost0 x the learned ratio, or key_cost0 where
 * the ratio is below 1. A chunk at depth cut too short costs the fill
 * little (its keys' work is the same in any chunks; only each step's
 * overhead repeats), one cut too long costs every decode beside it a
 * longer gap: f16 keys learned at 0.8x the estimate gave gaps a quarter
 * longer and no faster fill (docs/long-context.md). */
double step_cost_key_decode(const step_cost *sc);
double step_cost_key_prompt(const step_cost *sc);

#endif
