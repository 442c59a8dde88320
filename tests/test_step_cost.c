/* test_step_cost.c - the key costs learned from step times
 * (engine/step_cost.c): steps drawn from a known cost with noise, as the
 * engine runs them (decodes at many depths beside a prompt filled in chunks
 * of many sizes), give back its key ratios; steps that cannot tell keys
 * from tokens apart leave the model's estimate; the ratios stay in their
 * range, follow a change, shrug off a burst, and bad observations are
 * ignored. No clock is read: the times are made up. */
#include <math.h>
#include <string.h>

#include "engine/step_cost.h"

#include "rng.h"
#include "test.h"

#define KC0 3.7e-4 /* TinyLlama's model_key_cost */

/* A made-up host: seconds = a + b tokens + c logit rows + (md decode keys
 * + mp prompt keys) x KC0 x b, times (1 + noise x gauss / 3). The logits
 * are the host's: the fit has no term for them (step_cost.h). */
typedef struct {
    double a, b, c, md, mp, noise;
} host;

static double host_time(const host *h, const step_cost_obs *o, double logit_rows)
{
    const double t = h->a + h->b * o->tokens + h->c * logit_rows +
                     (h->md * o->decode_keys + h->mp * o->prompt_keys) * KC0 * h->b;
    return t * (1 + h->noise * rng_gauss() / 3);
}

/* One step as the engine plans them: 0-4 decodes at depths up to 16k and,
 * in most steps, a prompt chunk of 16-512 tokens at a depth up to 16k. */
static step_cost_obs engine_step(const host *h)
{
    step_cost_obs o = {0};
    const int decodes = (int)(rng_u32() % 5);
    for (int i = 0; i < decodes; i++) o.decode_keys += rng_u32() % 16384;
    o.tokens = decodes;
    double rows = decodes;
    if (decodes == 0 || rng_u32() % 4 != 0) {
        const double n = 16 + rng_u32() % 497, p0 = rng_u32() % 16384;
        o.tokens += n;
        rows += rng_u32() % 2; /* the prompt's last chunk */
        o.prompt_keys = n * (p0 + (n - 1) / 2);
    }
    o.seconds = host_time(h, &o, rows);
    return o;
}

static void run_steps(step_cost *sc, const host *h, int n)
{
    for (int i = 0; i < n; i++) {
        step_cost_obs o = engine_step(h);
        step_cost_observe(sc, &o);
    }
}

TEST(learns_the_key_ratios_of_a_host)
{
    /* TinyLlama-like: 12 ms of weights a step, 2.7 ms a prompt token */
    const host hosts[] = {
        {12e-3, 2.7e-3, 0.2e-3, 1.0, 1.0, 0.05},
        {12e-3, 2.7e-3, 0.2e-3, 2.0, 1.5, 0.05},
        {12e-3, 2.7e-3, 0.2e-3, 0.6, 3.0, 0.05},
        {2e-3, 0.4e-3, 0.1e-3, 1.4, 0.5, 0.10}, /* logits a quarter of a token, as Llama-3.2-1B's */
    };
    for (size_t k = 0; k < sizeof hosts / sizeof hosts[0]; k++) {
        rng_seed(11 + k);
        step_cost sc;
        step_cost_init(&sc, KC0);
        run_steps(&sc, &hosts[k], 400);
        INFO("host %zu: decode key ratio %.3f (true %.2f), prompt key ratio %.3f (true %.2f)", k, sc.ratio_decode,
             hosts[k].md, sc.ratio_prompt, hosts[k].mp);
        CHECK_NEAR(sc.ratio_decode / hosts[k].md, 1, 0.1);
        CHECK_NEAR(sc.ratio_prompt / hosts[k].mp, 1, 0.1);
        /* the scheduler takes no key as cheaper than the model counts it */
        CHECK_NEAR(step_cost_key_prompt(&sc), KC0 * (sc.ratio_prompt > 1 ? sc.ratio_prompt : 1), 1e-12);
        CHECK_NEAR(step_cost_key_decode(&sc), KC0 * (sc.ratio_decode > 1 ? sc.ratio_decode : 1), 1e-12);
    }
}

TEST(steps_that_cannot_tell_keys_from_tokens_keep_the_model_estimate)
{
    /* one sequence decoding at one depth: every step is the same row */
    const host h = {12e-3, 2.7e-3, 0.2e-3, 2.5, 2.5, 0.05};
    rng_seed(5);
    step_cost sc;
    step_cost_init(&sc, KC0);
    for (int i = 0; i < 300; i++) {
        step_cost_obs o = {.tokens = 1, .decode_keys = 4000};
        o.seconds = host_time(&h, &o, 1);
        step_cost_observe(&sc, &o);
    }
    INFO("decodes at one depth: ratios %.3f, %.3f", sc.ratio_decode, sc.ratio_prompt);
    CHECK_NEAR(sc.ratio_prompt, 1, 0.05);
    CHECK_NEAR(sc.ratio_decode, 1, 0.05);
}

TEST(ratios_stay_in_range_follow_a_change_and_shrug_off_a_burst)
{
    step_cost sc;
    step_cost_init(&sc, KC0);
    rng_seed(7);
    host h = {12e-3, 2.7e-3, 0.2e-3, 20, 0.01, 0.05};
    run_steps(&sc, &h, 300);
    CHECK_NEAR(sc.ratio_decode, STEP_COST_RANGE, 1e-12);
    CHECK_NEAR(sc.ratio_prompt, 1 / STEP_COST_RANGE, 1e-12);
    /* the neighbours take half the bandwidth: decode keys cost twice */
    step_cost_init(&sc, KC0);
    h.md = 1.2, h.mp = 2.2;
    run_steps(&sc, &h, 400);
    h.md = 2.4;
    int steps = 0;
    while (steps < 1000 && fabs(sc.ratio_decode / h.md - 1) > 0.1) {
        run_steps(&sc, &h, 1);
        steps++;
    }
    run_steps(&sc, &h, 100);
    INFO("decode keys at twice the cost: within 10%% after %d steps; %.3f (2.4), %.3f (2.2) 100 steps on", steps,
         sc.ratio_decode, sc.ratio_prompt);
    CHECK_MSG(steps <= 250, "%d steps to follow", steps); /* ~200 at STEP_COST_DECAY 0.98 */
    CHECK_NEAR(sc.ratio_decode / 2.4, 1, 0.1);
    CHECK_NEAR(sc.ratio_prompt / 2.2, 1, 0.1);
    /* a neighbour's burst: one step in 25 takes 5x its time */
    for (int i = 0; i < 400; i++) {
        step_cost_obs o = engine_step(&h);
        if (i % 25 == 0) o.seconds *= 5;
        step_cost_observe(&sc, &o);
    }
    INFO("with bursts: %.3f (2.4), %.3f (2.2)", sc.ratio_decode, sc.ratio_prompt);
    CHECK_NEAR(sc.ratio_decode / 2.4, 1, 0.2);
    CHECK_NEAR(sc.ratio_prompt / 2.2, 1, 0.2);
}

TEST(bad_observations_change_nothing)
{
    step_cost sc, before;
    step_cost_init(&sc, KC0);
    rng_seed(9);
    const host h = {12e-3, 2.7e-3, 0.2e-3, 1.5, 1.5, 0.05};
    run_steps(&sc, &h, 50);
    before = sc;
    const step_cost_obs bad[] = {
        {.tokens = 10, .seconds = NAN},
        {.tokens = 10, .seconds = INFINITY},
        {.tokens = 10, .seconds = 0},
        {.tokens = 10, .seconds = -1},
        {.tokens = 0, .seconds = 1},
        {.tokens = NAN, .seconds = 1},
        {.tokens = 10, .prompt_keys = -5, .seconds = 1},
        {.tokens = 10, .decode_keys = NAN, .seconds = 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) step_cost_observe(&sc, &bad[i]);
    CHECK(memcmp(&sc, &before, sizeof sc) == 0);
    /* a model without a key cost (steps held to tokens only) learns none */
    step_cost_init(&sc, 0);
    run_steps(&sc, &h, 20);
    CHECK(sc.steps == 0 && step_cost_key_prompt(&sc) == 0 && step_cost_key_decode(&sc) == 0);
    step_cost_init(&sc, NAN);
    CHECK(step_cost_key_prompt(&sc) == 0);
}

int main(void)
{
    RUN(learns_the_key_ratios_of_a_host);
    RUN(steps_that_cannot_tell_keys_from_tokens_keep_the_model_estimate);
    RUN(ratios_stay_in_range_follow_a_change_and_shrug_off_a_burst);
    RUN(bad_observations_change_nothing);
    return test_summary();
}
