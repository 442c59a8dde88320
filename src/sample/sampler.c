/* sampler.c - token samplers: greedy, temperature, top-k, top-p, min-p,
 * repetition penalty, with a seeded RNG.
 *
 * The chain follows llama.cpp's order: penalty -> top-k -> top-p -> min-p ->
 * temperature -> draw. top-k/top-p/min-p judge the probabilities of the
 * (penalised) logits before temperature, as llama.cpp's do; temperature then
 * reshapes what is left. Greedy (temperature <= 0) is a plain argmax of the
 * penalised logits, lowest id on ties, like llama.cpp's greedy sampler.
 *
 * Scratch is allocated once per sampler: sampling allocates nothing.
 */
#include "pagellm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"

typedef struct {
    int32_t id;
    float logit;
    float p;
} cand;

struct pl_sampler {
    pl_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];
    cand *c;        /* [n_vocab] */
    uint8_t *seen;  /* [n_vocab] repetition-penalty marks */
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
    pl_sampler *s = mem_calloc(1, sizeof *s);
    if (!s) return PL_ENOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->c = mem_calloc((size_t)n_vocab, sizeof *s->c);
    s->seen = mem_calloc((size_t)n_vocab, 1);
    if (!s->c || !s->seen) { pl_sampler_free(s); return PL_ENOMEM; }
    uint64_t st = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&st);
    *out = s;
    return 0;
}

void pl_sampler_free(pl_sampler *s)
{
    if (!s) return;
    free(s->c);
    free(s->seen);
    free(s);
}

/* llama.cpp's repetition penalty: divide positive logits, multiply negative. */
static void apply_penalty(pl_sampler *s, const int32_t *hist, size_t n_hist)
{
    if (s->p.repeat_penalty == 1.0f || s->p.repeat_last_n == 0) return;
    size_t from = n_hist > (size_t)s->p.repeat_last_n ? n_hist - (size_t)s->p.repeat_last_n : 0;
    for (size_t i = from; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= s->n_vocab || s->seen[id]) continue;
        s->seen[id] = 1;
        float *l = &s->c[id].logit;
        *l = *l > 0 ? *l / s->p.repeat_penalty : *l * s->p.repeat_penalty;
    }
    for (size_t i = from; i < n_hist; i++)
        if (hist[i] >= 0 && hist[i] < s->n_vocab) s->seen[hist[i]] = 0;
}

static int cand_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Moves the k largest logits to the front (quickselect), then sorts them. */
static void top_k_sorted(cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        cand pivot = c[(lo + hi) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cand_desc(&c[i], &pivot) < 0) i++;
            while (cand_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) { cand t = c[i]; c[i] = c[j]; c[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    qsort(c, (size_t)k, sizeof *c, cand_desc);
}

static void softmax_cands(cand *c, int32_t n, float temp)
{
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / temp);
        sum += c[i].p;
    }
    for (int32_t i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

int32_t pl_sampler_sample(pl_sampler *s, const float *logits, const int32_t *hist, size_t n_hist)
{
    int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) s->c[i] = (cand){i, logits[i], 0};
    apply_penalty(s, hist, n_hist);
    if (s->p.temperature <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        return best;
    }
    int32_t k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
    top_k_sorted(s->c, n, k);
    n = k;
    softmax_cands(s->c, n, 1.0f);
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += s->c[i].p;
            if (cum >= s->p.top_p) { keep = i + 1; break; }
        }
        n = keep;
    }
    if (s->p.min_p > 0) {
        const float floor_p = s->c[0].p * s->p.min_p;
        int32_t keep = 1;
        while (keep < n && s->c[keep].p >= floor_p) keep++;
        n = keep;
    }
    softmax_cands(s->c, n, s->p.temperature);
    double r = (double)(rng_next(s->rng) >> 11) * 0x1.0p-53, cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->c[i].p;
        if (r < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}
