/* test_sample.c - samplers, stop strings and chat templates. */
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat_template.h"
#include "pagellm.h"
#include "sample/sample.h"

static pl_sampler *mk(float temp, int k, float p, float minp, float pen, uint64_t seed, int n)
{
    pl_sampler_params sp = {.temperature = temp, .top_k = k, .top_p = p, .min_p = minp, .repeat_penalty = pen,
                            .repeat_last_n = 64, .seed = seed};
    pl_sampler *s = NULL;
    return pl_sampler_new(&s, &sp, n) == 0 ? s : NULL;
}

TEST(greedy_is_argmax_lowest_id_on_ties)
{
    float l[6] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
    pl_sampler *s = mk(0, 40, 0.95f, 0.05f, 1, 0, 6);
    CHECK(s);
    CHECK_EQ_INT(pl_sampler_sample(s, l, NULL, 0), 1);
    pl_sampler_free(s);
}

TEST(top_k_1_equals_greedy_at_any_temperature)
{
    float l[100];
    for (int i = 0; i < 100; i++) l[i] = (float)((i * 37) % 100) / 10.0f;
    int best = 0;
    for (int i = 1; i < 100; i++) if (l[i] > l[best]) best = i;
    pl_sampler *s = mk(1.5f, 1, 1, 0, 1, 42, 100);
    CHECK(s);
    for (int t = 0; t < 50; t++) CHECK_EQ_INT(pl_sampler_sample(s, l, NULL, 0), best);
    pl_sampler_free(s);
}

TEST(same_seed_same_tokens_other_seed_differs)
{
    float l[64];
    for (int i = 0; i < 64; i++) l[i] = 0.01f * (float)i;
    pl_sampler *a = mk(1, 0, 1, 0, 1, 7, 64), *b = mk(1, 0, 1, 0, 1, 7, 64), *c = mk(1, 0, 1, 0, 1, 8, 64);
    CHECK(a && b && c);
    int diff = 0;
    for (int t = 0; t < 200; t++) {
        int x = pl_sampler_sample(a, l, NULL, 0), y = pl_sampler_sample(b, l, NULL, 0), z = pl_sampler_sample(c, l, NULL, 0);
        CHECK_EQ_INT(x, y);
        diff += x != z;
    }
    CHECK(diff > 100);
    pl_sampler_free(a); pl_sampler_free(b); pl_sampler_free(c);
}

TEST(temperature_one_follows_softmax)
{
    /* logits log(0.5), log(0.3), log(0.2): frequencies must follow */
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    pl_sampler *s = mk(1, 0, 1, 0, 1, 123, 3);
    CHECK(s);
    int cnt[3] = {0};
    for (int t = 0; t < 20000; t++) cnt[pl_sampler_sample(s, l, NULL, 0)]++;
    CHECK_NEAR(cnt[0] / 20000.0, 0.5, 0.02);
    CHECK_NEAR(cnt[1] / 20000.0, 0.3, 0.02);
    CHECK_NEAR(cnt[2] / 20000.0, 0.2, 0.02);
    pl_sampler_free(s);
}

TEST(top_p_and_min_p_cut_the_tail)
{
    float l[4] = {logf(0.6f), logf(0.25f), logf(0.1f), logf(0.05f)};
    pl_sampler *p = mk(1, 0, 0.8f, 0, 1, 5, 4);   /* keeps 0.6 + 0.25 */
    pl_sampler *m = mk(1, 0, 1, 0.3f, 1, 5, 4);   /* keeps p >= 0.18 */
    CHECK(p && m);
    for (int t = 0; t < 3000; t++) {
        CHECK(pl_sampler_sample(p, l, NULL, 0) < 2);
        CHECK(pl_sampler_sample(m, l, NULL, 0) < 2);
    }
    pl_sampler_free(p); pl_sampler_free(m);
}

TEST(repetition_penalty_moves_greedy_choice)
{
    float l[3] = {2.0f, 1.9f, -5.0f};
    int32_t hist[2] = {0, 0};
    pl_sampler *s = mk(0, 0, 1, 0, 1.5f, 0, 3);
    CHECK(s);
    CHECK_EQ_INT(pl_sampler_sample(s, l, NULL, 0), 0);
    CHECK_EQ_INT(pl_sampler_sample(s, l, hist, 2), 1); /* 2.0/1.5 < 1.9 */
    CHECK(l[0] == 2.0f); /* logits are not modified */
    pl_sampler_free(s);
}

TEST(bad_sampler_params_are_refused)
{
    pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    pl_sampler *s = NULL;
    sp.top_p = 1.5f;
    CHECK(pl_sampler_new(&s, &sp, 10) == PL_ERR_INVAL);
    CHECK(strstr(pl_last_error(), "top_p"));
    pl_sampler_params_default(&sp);
    sp.temperature = -1;
    CHECK(pl_sampler_new(&s, &sp, 10) == PL_ERR_INVAL);
    CHECK(s == NULL);
}

TEST(stop_strings_hold_back_and_cut)
{
    const char *stops[] = {"END", "\nUser:"};
    pl_stop *s = pl_stop_new(stops, 2);
    CHECK(s);
    char out[256];
    bool stopped = false;
    CHECK_EQ_INT(pl_stop_feed(s, "hello E", 7, out, &stopped), 6);
    CHECK_STR(out, "hello ");
    CHECK(!stopped);
    CHECK_EQ_INT(pl_stop_feed(s, "N", 1, out, &stopped), 0); /* "EN" may still become END */
    CHECK_EQ_INT(pl_stop_feed(s, "o", 1, out, &stopped), 3);
    CHECK_STR(out, "ENo");
    CHECK_EQ_INT(pl_stop_feed(s, " and\nUs", 7, out, &stopped), 4);
    CHECK_STR(out, " and");
    pl_stop_feed(s, "er: x", 5, out, &stopped);
    CHECK(stopped);
    CHECK_STR(out, "");
    CHECK_EQ_INT(pl_stop_flush(s, out), 0);
    pl_stop_free(s);
    s = pl_stop_new(stops, 2);
    pl_stop_feed(s, "abc E", 5, out, &stopped);
    CHECK_EQ_INT(pl_stop_flush(s, out), 1);
    CHECK_STR(out, "E");
    pl_stop_free(s);
}

static char *render(const char *tpl, bool opener, const char **name)
{
    pl_chat_msg m[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
    char *out = NULL;
    return chat_render(tpl, m, 4, opener, &out, name) == 0 ? out : NULL;
}

TEST(chat_templates_render_the_known_families)
{
    const char *name;
    char *s = render("{% for m in messages %}<|im_start|>{{m.role}}...", true, &name);
    CHECK_STR(name, "chatml");
    CHECK_STR(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                 "Hello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    s = render("<|start_header_id|>", true, &name);
    CHECK_STR(name, "llama3");
    CHECK(strstr(s, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"));
    const char *opener = "<|start_header_id|>assistant<|end_header_id|>\n\n";
    CHECK(strlen(s) > strlen(opener) && strcmp(s + strlen(s) - strlen(opener), opener) == 0);
    free(s);
    s = render("[INST] <<SYS>>", false, &name);
    CHECK_STR(name, "llama2");
    CHECK_STR(s, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello</s>[INST] Bye [/INST]");
    free(s);
    s = render("<start_of_turn>", true, &name);
    CHECK_STR(name, "gemma");
    CHECK_STR(s, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
                 "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    free(s);
    s = render("<|assistant|> <|end|>", true, &name);
    CHECK_STR(name, "phi3");
    free(s);
    s = render("<|assistant|>", true, &name);
    CHECK_STR(name, "zephyr");
    free(s);
    s = render(NULL, true, &name);
    CHECK_STR(name, "plain");
    CHECK_STR(s, "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello\n\nUser: Bye\n\nAssistant:");
    free(s);
}

TEST(chat_render_refuses_unknown_roles)
{
    pl_chat_msg m[] = {{"robot", "x"}};
    char *out = NULL;
    CHECK(chat_render(NULL, m, 1, true, &out, NULL) == PL_ERR_INVAL);
    CHECK(strstr(pl_last_error(), "messages[0].role"));
    CHECK(out == NULL);
}

/* ------------------------------------------------------------------
 * A reference sampler that sorts the whole vocabulary every time (what
 * sampler.c did before it learnt partial selection), with its own copy of
 * the RNG: the partial selection must pick exactly its tokens. */
typedef struct {
    int32_t id;
    float logit, p;
} ref_cand;

static int ref_desc(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static uint64_t ref_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t ref_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t ref_rng_next(uint64_t *s)
{
    const uint64_t r = ref_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = ref_rotl(s[3], 45);
    return r;
}

static int32_t ref_sample(const pl_sampler_params *sp, uint64_t *rng, const float *logits, int32_t n, ref_cand *c,
                          const int32_t *hist, int32_t n_hist)
{
    for (int32_t i = 0; i < n; i++) c[i] = (ref_cand){i, logits[i], 0};
    if (sp->repeat_penalty != 1.0f)
        for (int32_t i = n_hist > sp->repeat_last_n ? n_hist - sp->repeat_last_n : 0; i < n_hist; i++) {
            bool dup = false;
            for (int32_t j = n_hist > sp->repeat_last_n ? n_hist - sp->repeat_last_n : 0; j < i; j++) dup |= hist[j] == hist[i];
            if (dup) continue;
            float *l = &c[hist[i]].logit;
            *l = *l > 0 ? *l / sp->repeat_penalty : *l * sp->repeat_penalty;
        }
    double sum_ids = 0; /* the sampler sums the full softmax in id order */
    float mx = c[0].logit;
    for (int32_t i = 1; i < n; i++) mx = c[i].logit > mx ? c[i].logit : mx;
    for (int32_t i = 0; i < n; i++) sum_ids += expf(c[i].logit - mx);
    qsort(c, (size_t)n, sizeof *c, ref_desc);
    int32_t k = sp->top_k > 0 && sp->top_k < n ? sp->top_k : n;
    double sum = 0;
    for (int32_t i = 0; i < k; i++) sum += c[i].p = expf(c[i].logit - c[0].logit);
    if (k == n) sum = sum_ids;
    for (int32_t i = 0; i < k; i++) c[i].p = (float)(c[i].p / sum);
    if (sp->top_p < 1.0f) {
        double cum = 0;
        for (int32_t i = 0; i < k; i++) {
            cum += c[i].p;
            if (cum >= sp->top_p) { k = i + 1; break; }
        }
    }
    if (sp->min_p > 0) {
        const float floor_p = c[0].p * sp->min_p;
        int32_t keep = 1;
        while (keep < k && c[keep].p >= floor_p) keep++;
        k = keep;
    }
    sum = 0;
    for (int32_t i = 0; i < k; i++) sum += c[i].p = expf((c[i].logit - c[0].logit) / sp->temperature);
    for (int32_t i = 0; i < k; i++) c[i].p = (float)(c[i].p / sum);
    double r = (double)(ref_rng_next(rng) >> 11) * 0x1.0p-53, cum = 0;
    for (int32_t i = 0; i < k; i++) {
        cum += c[i].p;
        if (r < cum) return c[i].id;
    }
    return c[k - 1].id;
}

/* Logits like a model's: a few large, a long flat tail; with coarse, only
 * whole numbers, so that ties sit at every cut (lowest id must win). */
static void rand_logits(uint64_t *st, float *l, int32_t n, float spread, bool coarse)
{
    for (int32_t i = 0; i < n; i++) {
        uint64_t z = ref_splitmix(st);
        float u = (float)(z >> 40) / (float)(1 << 24);
        l[i] = (z & 7) == 0 ? roundf(u * 4) : spread * (u - 0.5f) * (u * u * 8);
        if (coarse) l[i] = roundf(l[i]);
    }
}

TEST(partial_selection_picks_what_a_full_sort_picks)
{
    enum { NV = 5000 };
    static float l[NV];
    static ref_cand rc[NV];
    const struct { float temp; int k; float p, minp, pen; } cfg[] = {
        {0.8f, 40, 0.95f, 0.05f, 1}, {1.0f, 0, 0.9f, 0, 1},   {1.0f, 0, 1, 0.05f, 1}, {0.7f, 0, 0.5f, 0.2f, 1.3f},
        {1.5f, 0, 0.999f, 0, 1},     {1.0f, 1000, 1, 0, 1},   {1.2f, 3, 0.3f, 0, 1},  {1.0f, 0, 0.98f, 0.001f, 1},
        {0.9f, 64, 1, 0.5f, 1.1f},   {2.0f, 0, 0.9999f, 0, 1},
    };
    uint64_t st = 99;
    int32_t hist[80];
    long checked = 0, mism = 0;
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        pl_sampler_params sp = {.temperature = cfg[ci].temp, .top_k = cfg[ci].k, .top_p = cfg[ci].p, .min_p = cfg[ci].minp,
                                .repeat_penalty = cfg[ci].pen, .repeat_last_n = 64, .seed = 1234 + ci};
        pl_sampler *s = NULL;
        CHECK(pl_sampler_new(&s, &sp, NV) == 0);
        uint64_t rng[4], seed = sp.seed;
        for (int i = 0; i < 4; i++) rng[i] = ref_splitmix(&seed);
        for (int t = 0; t < 40; t++) {
            rand_logits(&st, l, NV, t % 2 ? 30.0f : 6.0f, t % 4 == 2); /* peaked, flat, tied */
            for (int i = 0; i < 80; i++) hist[i] = (int32_t)(ref_splitmix(&st) % 200);
            int32_t a = pl_sampler_sample(s, l, hist, 80), b = ref_sample(&sp, rng, l, NV, rc, hist, 80);
            mism += a != b;
            checked++;
        }
        pl_sampler_free(s);
    }
    INFO("%ld draws, %ld differ from the full sort", checked, mism);
    CHECK_EQ_INT(mism, 0);
    /* All tied: the best candidate is the lowest id, with top-k or without. */
    for (int32_t i = 0; i < NV; i++) l[i] = 1.0f;
    pl_sampler *a = mk(1, 5, 0.1f, 0, 1, 3, NV), *b = mk(1, 0, 0.0001f, 0, 1, 3, NV);
    CHECK(a && b);
    CHECK_EQ_INT(pl_sampler_sample(a, l, NULL, 0), 0);
    CHECK_EQ_INT(pl_sampler_sample(b, l, NULL, 0), 0);
    pl_sampler *c = mk(1, 5, 1, 0, 1, 3, NV); /* top-5 of all tied: ids 0..4 */
    int32_t worst = 0;
    for (int t = 0; c && t < 200; t++) {
        int32_t x = pl_sampler_sample(c, l, NULL, 0);
        worst = x > worst ? x : worst;
    }
    CHECK_EQ_INT(worst, 4);
    pl_sampler_free(a);
    pl_sampler_free(b);
    pl_sampler_free(c);
}

TEST(logsumexp_matches_double_precision)
{
    enum { NV = 32003 }; /* not a multiple of 8: the tail is summed too */
    static float l[NV];
    uint64_t st = 5;
    double worst = 0;
    for (int t = 0; t < 6; t++) {
        rand_logits(&st, l, NV, t < 3 ? 40.0f : 4.0f, false);
        if (t == 5) l[7] = -INFINITY; /* a masked id */
        float mx = l[0];
        for (int i = 1; i < NV; i++) mx = l[i] > mx ? l[i] : mx;
        double sum = 0;
        for (int i = 0; i < NV; i++) sum += exp((double)l[i] - mx);
        double want = mx + log(sum), got = sample_logsumexp(l, NV);
        worst = fabs(got - want) > worst ? fabs(got - want) : worst;
    }
    INFO("logsumexp: worst |error| %.3g", worst);
    /* argmax: the first of the tied maxima, at any place and length */
    int bad = 0;
    for (int n = 1; n < 70; n++)
        for (int at = 0; at < n; at += 3) {
            for (int i = 0; i < n; i++) l[i] = (float)(i % 5);
            l[at] = 9;
            if (at + 9 < n) l[at + 9] = 9;
            bad += sample_argmax(l, (uint32_t)n) != at;
        }
    CHECK_EQ_INT(bad, 0);
    CHECK(worst < 1e-6);
    float one[1] = {-3.5f};
    CHECK_NEAR(sample_logsumexp(one, 1), -3.5, 1e-7);
    float lp, tl[3];
    int32_t ids[3], nt;
    float four[4] = {0, 2, 2, 1};
    sample_logprobs(four, 4, 3, 3, &lp, ids, tl, &nt);
    CHECK_EQ_INT(nt, 3);
    CHECK(ids[0] == 1 && ids[1] == 2 && ids[2] == 3);
    const double lse4 = log(1 + 2 * exp(2.0) + exp(1.0));
    CHECK_NEAR(lp, 1 - lse4, 1e-6);
    CHECK_NEAR(tl[0], 2 - lse4, 1e-6);
}

/* OpenAI's definition: l[j] -= count * frequency + presence, over the
 * generated part of the history only. */
TEST(presence_frequency_penalties_follow_openai)
{
    float l[5] = {1.0f, 2.0f, 3.0f, 0.5f, 0.0f}, want[5];
    uint32_t count[5] = {0};
    int32_t gen[6] = {2, 2, 2, 1, 4, 2};
    memcpy(want, l, sizeof l);
    want[2] -= 4 * 0.5f + 0.25f;
    want[1] -= 1 * 0.5f + 0.25f;
    want[4] -= 1 * 0.5f + 0.25f;
    sample_penalize_counts(l, count, 5, gen, 6, 0.25f, 0.5f);
    for (int i = 0; i < 5; i++) CHECK_NEAR(l[i], want[i], 1e-6);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(count[i], 0);
    /* through the sampler: token 2 is best, generated 4 times it loses to 1;
     * the same tokens in the prompt part change nothing */
    float m[5] = {1.0f, 2.0f, 3.0f, 0.5f, 0.0f};
    pl_sampler_params sp = {.temperature = 0, .repeat_penalty = 1, .frequency_penalty = 0.5f};
    pl_sampler *s = NULL;
    CHECK(pl_sampler_new(&s, &sp, 5) == 0);
    int32_t hist[4] = {2, 2, 2, 2};
    CHECK_EQ_INT(pl_sampler_sample_gen(s, m, hist, 4, 4, NULL, 0), 2);
    CHECK_EQ_INT(pl_sampler_sample_gen(s, m, hist, 4, 0, NULL, 0), 1);
    CHECK_EQ_INT(pl_sampler_sample_gen(s, m, hist, 4, 2, NULL, 0), 1); /* 3 - 2 x 0.5 = 2: tie, lowest id is 1 */
    CHECK_EQ_INT(pl_sampler_sample_gen(s, m, hist, 4, 3, NULL, 0), 2); /* 3 - 0.5 = 2.5 */
    pl_sampler_free(s);
    /* a negative presence penalty favours what was said */
    sp = (pl_sampler_params){.temperature = 0, .repeat_penalty = 1, .presence_penalty = -2};
    CHECK(pl_sampler_new(&s, &sp, 5) == 0);
    int32_t h1[1] = {1};
    CHECK_EQ_INT(pl_sampler_sample_gen(s, m, h1, 1, 0, NULL, 0), 1); /* 2 + 2 = 4 > 3 */
    pl_sampler_free(s);
}

TEST(logit_bias_adds_and_minus_100_bans)
{
    float l[4] = {0.0f, 5.0f, 4.0f, 1.0f};
    pl_logit_bias b[2] = {{1, -100}, {3, 3.5f}};
    pl_sampler_params sp = {.temperature = 0, .repeat_penalty = 1, .logit_bias = b, .n_logit_bias = 1};
    pl_sampler *s = NULL;
    CHECK(pl_sampler_new(&s, &sp, 4) == 0);
    CHECK_EQ_INT(pl_sampler_sample(s, l, NULL, 0), 2);
    pl_sampler_free(s);
    sp.n_logit_bias = 2;
    CHECK(pl_sampler_new(&s, &sp, 4) == 0);
    b[1].bias = -50; /* the sampler keeps its own copy */
    CHECK_EQ_INT(pl_sampler_sample(s, l, NULL, 0), 3);
    pl_sampler_free(s);
    /* a banned token is never drawn, at any temperature */
    b[1].bias = 0;
    sp = (pl_sampler_params){.temperature = 2, .top_p = 1, .repeat_penalty = 1, .seed = 7, .logit_bias = b,
                             .n_logit_bias = 1};
    CHECK(pl_sampler_new(&s, &sp, 4) == 0);
    int hits[4] = {0};
    for (int i = 0; i < 2000; i++) hits[pl_sampler_sample(s, l, NULL, 0)]++;
    CHECK_EQ_INT(hits[1], 0);
    CHECK(hits[2] > 0 && hits[3] > 0 && hits[0] > 0);
    pl_sampler_free(s);
    /* out-of-range ids and biases are refused */
    pl_logit_bias bad[1] = {{4, 1}};
    sp = (pl_sampler_params){.temperature = 0, .repeat_penalty = 1, .logit_bias = bad, .n_logit_bias = 1};
    CHECK(pl_sampler_new(&s, &sp, 4) == PL_ERR_INVAL);
    bad[0] = (pl_logit_bias){1, 101};
    CHECK(pl_sampler_new(&s, &sp, 4) == PL_ERR_INVAL);
    sp = (pl_sampler_params){.temperature = 0, .repeat_penalty = 1, .presence_penalty = 2.5f};
    CHECK(pl_sampler_new(&s, &sp, 4) == PL_ERR_INVAL);
}

TEST(bans_skip_tokens_and_all_banned_falls_back)
{
    float l[4] = {0.0f, 5.0f, 4.0f, 1.0f};
    int32_t ban[2] = {1, 2};
    pl_sampler_params sp = {.temperature = 0, .repeat_penalty = 1};
    pl_sampler *s = NULL;
    CHECK(pl_sampler_new(&s, &sp, 4) == 0);
    CHECK_EQ_INT(pl_sampler_sample_gen(s, l, NULL, 0, 0, ban, 2), 3);
    int32_t all[4] = {0, 1, 2, 3};
    CHECK_EQ_INT(pl_sampler_sample_gen(s, l, NULL, 0, 0, all, 4), 1);
    pl_sampler_free(s);
    sp = (pl_sampler_params){.temperature = 1, .top_k = 2, .top_p = 1, .repeat_penalty = 1, .seed = 3};
    CHECK(pl_sampler_new(&s, &sp, 4) == 0);
    for (int i = 0; i < 200; i++) {
        int32_t t = pl_sampler_sample_gen(s, l, NULL, 0, 0, ban, 2);
        CHECK(t == 3 || t == 0);
    }
    pl_sampler_free(s);
}

int main(void)
{
    RUN(greedy_is_argmax_lowest_id_on_ties);
    RUN(top_k_1_equals_greedy_at_any_temperature);
    RUN(same_seed_same_tokens_other_seed_differs);
    RUN(temperature_one_follows_softmax);
    RUN(top_p_and_min_p_cut_the_tail);
    RUN(repetition_penalty_moves_greedy_choice);
    RUN(partial_selection_picks_what_a_full_sort_picks);
    RUN(logsumexp_matches_double_precision);
    RUN(bad_sampler_params_are_refused);
    RUN(presence_frequency_penalties_follow_openai);
    RUN(logit_bias_adds_and_minus_100_bans);
    RUN(bans_skip_tokens_and_all_banned_falls_back);
    RUN(stop_strings_hold_back_and_cut);
    RUN(chat_templates_render_the_known_families);
    RUN(chat_render_refuses_unknown_roles);
    return test_summary();
}
