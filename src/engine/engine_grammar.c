/* engine_grammar.c - grammar-constrained sampling on the engine thread.
 *
 * The first request with a grammar builds the vocabulary's token trie
 * (the bytes each token adds to the output, as the streaming detokenizer
 * writes them). Each sampling step of a constrained completion then asks
 * the matcher for the mask of its state (cached per request while states
 * recur), copies the logits with every forbidden token at -inf, and
 * samples from that row, greedy or not; logprobs are computed from the
 * same masked row (llama-server's choice: the distribution actually
 * sampled). After sampling, the state advances by the token's bytes.
 *
 *   logits --mask(state)--> masked row --sampler--> tok --advance--> state'
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

struct eng_grammar {
    gm_trie *trie;
    gm_work *work;
    uint64_t *bits;  /* [(n_vocab + 63) / 64] the mask */
    float *row;      /* [n_vocab] masked logits */
    bool *eog;       /* [n_vocab] end-of-generation tokens */
    int32_t n_vocab;
};

void eng_grammar_free(pl_engine *e)
{
    struct eng_grammar *g = e->gm;
    if (!g) return;
    gm_trie_free(g->trie);
    gm_work_free(g->work);
    free(g->bits);
    free(g->row);
    free(g->eog);
    free(g);
    e->gm = NULL;
}

static int eng_grammar_setup(pl_engine *e)
{
    const int32_t n = (int32_t)e->lim.n_vocab;
    struct eng_grammar *g = calloc(1, sizeof *g);
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    int rc = 0;
    if (g) {
        g->n_vocab = n;
        g->work = gm_work_new();
        g->bits = malloc(((size_t)n + 63) / 64 * sizeof *g->bits);
        g->row = malloc((size_t)n * sizeof *g->row);
        g->eog = malloc((size_t)n * sizeof *g->eog);
    }
    if (!g || !pieces || !lens || !g->work || !g->bits || !g->row || !g->eog)
        rc = err_set(PL_ENOMEM, "grammar: out of memory (token trie)");
    for (int32_t i = 0; !rc && i < n; i++) {
        pieces[i] = tok_vocab_output_bytes(e->lim.vocab, i, &lens[i]);
        g->eog[i] = tok_vocab_is_eog(e->lim.vocab, i);
    }
    if (!rc) rc = gm_trie_new(&g->trie, pieces, lens, g->eog, n);
    free(pieces);
    free(lens);
    e->gm = g;
    if (rc) eng_grammar_free(e);
    return rc;
}

const float *eng_grammar_logits(pl_engine *e, pl_request *r, req_comp *c, const float *logits, bool *complete)
{
    *complete = false;
    if (!gm_state_can_continue(&c->gm) && gm_state_accepting(&c->gm)) {
        *complete = true; /* nothing may follow: end as a sampled EOS would */
        return NULL;
    }
    if (!e->gm && eng_grammar_setup(e)) return NULL;
    struct eng_grammar *g = e->gm;
    int32_t n_allowed = 0;
    if (gm_mask(r->grammar, g->trie, &c->gm, g->work, r->gm_cache, g->bits, &n_allowed)) return NULL;
    const int32_t n = g->n_vocab;
    if (r->ignore_eos) /* EOG would be emitted as text-less tokens: keep them out */
        for (int32_t i = 0; i < n; i++)
            if (g->eog[i] && (g->bits[i >> 6] >> (i & 63) & 1)) { g->bits[i >> 6] &= ~(1ull << (i & 63)); n_allowed--; }
    if (n_allowed == 0) {
        if (gm_state_accepting(&c->gm)) { *complete = true; return NULL; }
        err_set(PL_EINVAL, "grammar: no token of the vocabulary can continue the output here");
        return NULL;
    }
    for (int32_t w = 0; w < (n + 63) / 64; w++) {
        const uint64_t m = g->bits[w];
        const int32_t lo = w * 64, hi = lo + 64 < n ? lo + 64 : n;
        if (m == ~0ull) memcpy(g->row + lo, logits + lo, (size_t)(hi - lo) * sizeof *g->row);
        else
            for (int32_t i = lo; i < hi; i++) g->row[i] = (m >> (i - lo)) & 1 ? logits[i] : -INFINITY;
    }
    return g->row;
}

int eng_grammar_take(pl_engine *e, pl_request *r, req_comp *c, int32_t tok)
{
    size_t len;
    const char *b = tok_vocab_output_bytes(e->lim.vocab, tok, &len);
    int rc = gm_state_advance(&c->gm, r->grammar, e->gm->work, b, len);
    if (rc == 1) return 0;
    /* the mask allowed tok, so this is an invariant broken or a limit hit */
    return rc < 0 ? rc : err_set(PL_EINVAL, "grammar: sampled token %d is not allowed by the grammar", tok);
}
