/* sampler.c - token samplers: greedy, temperature, top-k, top-p, min-p,
 * repetition penalty, with a seeded RNG.
 *
 * The chain follows llama.cpp's order: logit_bias -> repetition penalty ->
 * presence/frequency penalties (OpenAI's, over generated tokens) -> bans
 * (min_tokens) -> top-k -> top-p -> min-p -> temperature -> draw. top-k/top-p/min-p judge the probabilities of the
 * (penalised) logits before temperature, as llama.cpp's do; temperature then
 * reshapes what is left. Greedy (temperature <= 0) is a plain argmax of the
 * penalised logits, lowest id on ties, like llama.cpp's greedy sampler.
 *
 * Cost per token (this runs once per sequence per engine step, on the
 * engine thread, between two forward passes): the vocabulary is never
 * sorted whole unless the cut itself needs it.
 *   greedy          one pass over the logits (no copy without a bias,
 *                   penalty or ban; penalties cost O(generated tokens))
 *   top-k           one pass keeping the k best in a heap, then k log k
 *   top-p / min-p   without top-k: one pass of expf for the softmax sum,
 *                   then the best m candidates (m = 64, x8 while the cut
 *                   lies beyond them; m = n_vocab only if it must)
 *   temperature     alone: drawn in id order from the full softmax
 * Candidates are ordered best first: higher logit, then lower id; the cut
 * and the draw walk that order, so a partial selection gives the same
 * token as sorting everything would.
 *
 * Scratch is allocated once per sampler: sampling allocates nothing.
 */
#include "pagellm.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "sample/sample.h"

typedef struct {
    int32_t id;
    float logit;
    float p;
} cand;

struct pl_sampler {
    pl_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];
    cand *c;        /* [n_vocab] candidates, best first after a selection */
    float *l;       /* [n_vocab] biased, penalised, banned logits (only when one applies) */
    float *w;       /* [n_vocab] temperature-only weights */
    uint8_t *seen;  /* [n_vocab] repetition-penalty marks */
    uint32_t *count; /* [n_vocab] presence/frequency counts, all zero between calls */
    pl_logit_bias *bias; /* [n_bias] copy of logit_bias */
    size_t n_bias;
};

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** */
static uint64_t rng_next(uint64_t *s)
{
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

void pl_sampler_params_default(pl_sampler_params *p)
{
    *p = (pl_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                             .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0};
}

int pl_sampler_new(pl_sampler **out, const pl_sampler_params *p, int32_t n_vocab)
{
    if (n_vocab <= 0) return err_set(PL_EINVAL, "sampler: n_vocab %d", n_vocab);
    if (!(p->temperature >= 0 && p->temperature <= 100)) return err_set(PL_EINVAL, "temperature %g out of range 0..100", p->temperature);
    if (!(p->top_p >= 0 && p->top_p <= 1)) return err_set(PL_EINVAL, "top_p %g out of range 0..1", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1)) return err_set(PL_EINVAL, "min_p %g out of range 0..1", p->min_p);
    if (!(p->repeat_penalty > 0 && p->repeat_penalty <= 100)) return err_set(PL_EINVAL, "repeat_penalty %g out of range (0, 100]", p->repeat_penalty);
    if (p->top_k < 0) return err_set(PL_EINVAL, "top_k %d is negative", p->top_k);
    if (p->repeat_last_n < 0) return err_set(PL_EINVAL, "repeat_last_n %d is negative", p->repeat_last_n);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return err_set(PL_EINVAL, "presence_penalty %g out of range -2..2", p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return err_set(PL_EINVAL, "frequency_penalty %g out of range -2..2", p->frequency_penalty);
    if (p->n_logit_bias && !p->logit_bias) return err_set(PL_EINVAL, "logit_bias: %zu entries but no array", p->n_logit_bias);
    if (p->n_logit_bias > (size_t)n_vocab) return err_set(PL_EINVAL, "logit_bias: %zu entries for a vocabulary of %d", p->n_logit_bias, n_vocab);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const pl_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return err_set(PL_EINVAL, "logit_bias: token %d out of range 0..%d", b->token, n_vocab - 1);
        if (!(b->bias >= -100 && b->bias <= 100))
            return err_set(PL_EINVAL, "logit_bias: bias %g for token %d out of range -100..100", b->bias, b->token);
    }
    pl_sampler *s = mem_calloc(1, sizeof *s);
    if (!s) return PL_ENOMEM;
    s->p = *p;
    s->p.logit_bias = NULL; /* the caller's array is not kept */
    s->n_vocab = n_vocab;
    s->c = mem_calloc((size_t)n_vocab, sizeof *s->c);
    s->l = mem_calloc((size_t)n_vocab, sizeof *s->l);
    s->w = mem_calloc((size_t)n_vocab, sizeof *s->w);
    s->seen = mem_calloc((size_t)n_vocab, 1);
    s->count = mem_calloc((size_t)n_vocab, sizeof *s->count);
    s->bias = mem_calloc(p->n_logit_bias ? p->n_logit_bias : 1, sizeof *s->bias);
    if (!s->c || !s->l || !s->w || !s->seen || !s->count || !s->bias) { pl_sampler_free(s); return PL_ENOMEM; }
    if (p->n_logit_bias) memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof *s->bias);
    s->n_bias = p->n_logit_bias;
    uint64_t st = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&st);
    *out = s;
    return 0;
}

void pl_sampler_free(pl_sampler *s)
{
    if (!s) return;
    free(s->c);
    free(s->l);
    free(s->w);
    free(s->seen);
    free(s->count);
    free(s->bias);
    free(s);
}

/* llama.cpp's repetition penalty over the last repeat_last_n of hist, in
 * place: positive logits are divided, negative ones multiplied, once per
 * distinct id of the window. */
static void repeat_penalty(pl_sampler *s, float *l, const int32_t *hist, size_t n_hist)
{
    size_t from = n_hist > (size_t)s->p.repeat_last_n ? n_hist - (size_t)s->p.repeat_last_n : 0;
    for (size_t i = from; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= s->n_vocab || s->seen[id]) continue;
        s->seen[id] = 1;
        l[id] = l[id] > 0 ? l[id] / s->p.repeat_penalty : l[id] * s->p.repeat_penalty;
    }
    for (size_t i = from; i < n_hist; i++)
        if (hist[i] >= 0 && hist[i] < s->n_vocab) s->seen[hist[i]] = 0;
}

/* The logits to sample from: logits itself, or (when a step applies) a
 * copy in s->l with, in order, logit_bias, the repetition penalty,
 * presence/frequency penalties over gen[0..n_gen) and the bans. */
static const float *prepare(pl_sampler *s, const float *logits, const int32_t *hist, size_t n_hist, size_t n_prompt,
                            const int32_t *ban, size_t n_ban)
{
    const bool rep = s->p.repeat_penalty != 1.0f && s->p.repeat_last_n != 0 && n_hist > 0;
    const bool pf = (s->p.presence_penalty != 0 || s->p.frequency_penalty != 0) && n_hist > n_prompt;
    if (!rep && !pf && s->n_bias == 0 && n_ban == 0) return logits;
    float *l = s->l;
    memcpy(l, logits, (size_t)s->n_vocab * sizeof *l);
    for (size_t i = 0; i < s->n_bias; i++)
        l[s->bias[i].token] = s->bias[i].bias <= -100.0f ? -INFINITY : l[s->bias[i].token] + s->bias[i].bias;
    if (rep) repeat_penalty(s, l, hist, n_hist);
    if (pf) sample_penalize_counts(l, s->count, s->n_vocab, hist + n_prompt, n_hist - n_prompt,
                                   s->p.presence_penalty, s->p.frequency_penalty);
    for (size_t i = 0; i < n_ban; i++)
        if (ban[i] >= 0 && ban[i] < s->n_vocab) l[ban[i]] = -INFINITY;
    return l;
}

void sample_penalize_counts(float *l, uint32_t *count, int32_t n_vocab, const int32_t *gen, size_t n_gen,
                            float presence, float frequency)
{
    for (size_t i = 0; i < n_gen; i++)
        if (gen[i] >= 0 && gen[i] < n_vocab) count[gen[i]]++;
    for (size_t i = 0; i < n_gen; i++) {
        int32_t id = gen[i];
        if (id < 0 || id >= n_vocab || count[id] == 0) continue;
        l[id] -= (float)count[id] * frequency + presence;
        count[id] = 0; /* each distinct id once; the array is left all zero */
    }
}

/* Highest logit, lowest id on ties. */
static int32_t argmax(const float *l, int32_t n) { return sample_argmax(l, (uint32_t)n); }

static int cand_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Heap of the m best so far with the worst at the root: a lower logit, or
 * on equal logits a higher id, is worse. */
static bool cand_worse(const cand *x, const cand *y)
{
    return x->logit < y->logit || (x->logit == y->logit && x->id > y->id);
}

static void heap_down(cand *h, int32_t m, int32_t i)
{
    for (;;) {
        int32_t w = i, a = 2 * i + 1, b = a + 1;
        if (a < m && cand_worse(&h[a], &h[w])) w = a;
        if (b < m && cand_worse(&h[b], &h[w])) w = b;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* c[0..m) = the m best of l[0..n), best first (1 <= m <= n). One pass:
 * ids come in ascending order, so a newcomer equal to the root is worse
 * than it and only a strictly higher logit enters. */
static void select_top(cand *c, const float *l, int32_t n, int32_t m)
{
    for (int32_t i = 0; i < m; i++) c[i] = (cand){i, l[i], 0};
    for (int32_t i = m / 2 - 1; i >= 0; i--) heap_down(c, m, i);
    float thr = c[0].logit;
    for (int32_t i = m; i < n; i++) {
        if (!(l[i] > thr)) continue;
        c[0] = (cand){i, l[i], 0};
        heap_down(c, m, 0);
        thr = c[0].logit;
    }
    qsort(c, (size_t)m, sizeof *c, cand_desc);
}

/* p = exp((logit - c[0].logit) / temp) / sum over c[0..n), sum in double
 * in candidate order. */
static void softmax_cands(cand *c, int32_t n, float temp)
{
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / temp);
        sum += c[i].p;
    }
    for (int32_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

/* How many of c[0..n) (with probabilities, best first) top-p then min-p
 * keep; *cut is false when neither cut inside n (the next candidates,
 * if any, might still be kept). */
static int32_t cut_tail(const pl_sampler *s, const cand *c, int32_t n, bool *cut)
{
    int32_t keep = n;
    *cut = false;
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        for (int32_t i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= s->p.top_p) { keep = i + 1; *cut = true; break; }
        }
    }
    if (s->p.min_p > 0) {
        const float floor_p = c[0].p * s->p.min_p;
        int32_t k = 1;
        while (k < keep && c[k].p >= floor_p) k++;
        if (k < keep) { keep = k; *cut = true; }
    }
    return keep;
}

/* top-p / min-p over the whole vocabulary (top-k off): the softmax sum is
 * taken over all n (in id order), then the m best candidates are selected,
 * m growing until the cut falls inside them. */
static int32_t cut_vocab(pl_sampler *s, const float *l, int32_t n)
{
    const float mx = l[argmax(l, n)];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += expf(l[i] - mx);
    for (int32_t m = n < 64 ? n : 64;; m = m > n / 8 ? n : m * 8) {
        select_top(s->c, l, n, m);
        for (int32_t i = 0; i < m; i++) s->c[i].p = (float)(expf(s->c[i].logit - mx) / sum);
        bool cut;
        int32_t keep = cut_tail(s, s->c, m, &cut);
        if (cut || m == n) return keep;
    }
}

static double rng_unit(pl_sampler *s) { return (double)(rng_next(s->rng) >> 11) * 0x1.0p-53; }

/* Temperature alone over the whole vocabulary: no candidate order is
 * needed, the draw walks ids in order. */
static int32_t draw_vocab(pl_sampler *s, const float *l, int32_t n)
{
    const float mx = l[argmax(l, n)], temp = s->p.temperature;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += s->w[i] = expf((l[i] - mx) / temp);
    double r = rng_unit(s) * sum, cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->w[i];
        if (r < cum) return i;
    }
    return argmax(l, n);
}

int32_t pl_sampler_sample(pl_sampler *s, const float *logits, const int32_t *hist, size_t n_hist)
{
    return pl_sampler_sample_gen(s, logits, hist, n_hist, 0, NULL, 0);
}

int32_t pl_sampler_sample_gen(pl_sampler *s, const float *logits, const int32_t *hist, size_t n_hist,
                              size_t n_prompt, const int32_t *ban, size_t n_ban)
{
    const int32_t nv = s->n_vocab;
    if (n_prompt > n_hist) n_prompt = n_hist;
    const float *l = prepare(s, logits, hist, n_hist, n_prompt, ban, n_ban);
    const int32_t best = argmax(l, nv);
    /* everything banned or biased to -100: the model's own best */
    if (l[best] == -INFINITY) return argmax(logits, nv);
    if (s->p.temperature <= 0) return best;
    int32_t n;
    if (s->p.top_k > 0 && s->p.top_k < nv) {
        select_top(s->c, l, nv, s->p.top_k);
        softmax_cands(s->c, s->p.top_k, 1.0f);
        bool cut;
        n = cut_tail(s, s->c, s->p.top_k, &cut);
    } else if (s->p.top_p < 1.0f || s->p.min_p > 0) {
        n = cut_vocab(s, l, nv);
    } else {
        return draw_vocab(s, l, nv);
    }
    softmax_cands(s->c, n, s->p.temperature);
    double r = rng_unit(s), cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->c[i].p;
        if (r < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}
