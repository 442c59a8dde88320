/* sample.h - the sample module's internal helpers (beside the public
 * pl_sampler_* in pagellm.h): argmax and log-softmax figures, vectorised
 * where the CPU allows.
 */
#ifndef PL_SAMPLE_SAMPLE_H
#define PL_SAMPLE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* Highest of l[0..n), n >= 1; the lowest id on ties (greedy). */
int32_t sample_argmax(const float *l, uint32_t n);

/* log(sum_i exp(l[i])) over l[0..n), n >= 1, computed as
 * max + log(sum exp(l[i] - max)) with the sum in double. Every term is
 * within a few float ulps of expf's (an AVX2 polynomial when the CPU has
 * it, expf otherwise). */
double sample_logsumexp(const float *l, uint32_t n);

/* Log-softmax figures of one token: *lp = logits[tok] - logsumexp, and the
 * k best ids (best first; lowest id on equal logits, as greedy picks) with
 * their log-probabilities. k is clamped to [0, n]; *n_top gets how many
 * were written to top_ids/top_lp (room for k). */
void sample_logprobs(const float *logits, uint32_t n, int32_t tok, int32_t k, float *lp, int32_t *top_ids,
                     float *top_lp, int32_t *n_top);

/* OpenAI's presence/frequency penalties: for every distinct id j of
 * gen[0..n_gen) seen c times, l[j] -= c * frequency + presence. count is
 * n_vocab zeros of scratch, left all zero. */
void sample_penalize_counts(float *l, uint32_t *count, int32_t n_vocab, const int32_t *gen, size_t n_gen,
                            float presence, float frequency);

#endif
