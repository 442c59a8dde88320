/* request.c - request validation, the per-request event queue and the
 * caller side of pl_request_*; see request.h for the threading rules.
 *
 * The event queue is a ring that grows by doubling: the engine never waits
 * for a slow reader, and a reader waits on the condvar (CLOCK_MONOTONIC, so
 * timeouts do not jump with the wall clock).
 */
#include "engine/request.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/mem.h"

double eng_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ validation */

static int req_check_stops(const pl_request_params *p)
{
    if (p->n_stops > REQ_MAX_STOPS)
        return err_set(PL_ERANGE, "request: %zu stop strings (at most %d)", p->n_stops, REQ_MAX_STOPS);
    if (p->n_stops && !p->stops) return err_set(PL_EINVAL, "request: n_stops %zu but no stops array", p->n_stops);
    for (size_t i = 0; i < p->n_stops; i++) {
        if (!p->stops[i]) return err_set(PL_EINVAL, "request: stop string %zu is NULL", i);
        size_t l = strlen(p->stops[i]);
        if (l >= PL_MAX_STOP_LEN)
            return err_set(PL_ERANGE, "request: stop string %zu is %zu bytes (at most %d)", i, l, PL_MAX_STOP_LEN - 1);
    }
    return 0;
}

static int req_check_embed(const pl_request_params *p, const req_limits *lim)
{
    if (p->n != 1) return err_set(PL_ERANGE, "request: an embedding has n 1, not %d", p->n);
    if (p->n_prompt > lim->n_ctx)
        return err_set(PL_ERANGE, "request: input of %zu tokens exceeds the context of %u tokens", p->n_prompt, lim->n_ctx);
    if (lim->pooling == PL_POOL_RANK)
        return err_set(PL_EUNSUPPORTED, "request: the model's pooling_type is rank (a reranker): no embeddings");
    return 0;
}

static int req_check(const pl_request_params *p, const req_limits *lim)
{
    if (!p) return err_set(PL_EINVAL, "request: no parameters");
    if (!p->prompt || p->n_prompt == 0) return err_set(PL_EINVAL, "request: empty prompt");
    if (p->embed) {
        for (size_t i = 0; i < p->n_prompt; i++)
            if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= lim->n_vocab)
                return err_set(PL_EINVAL, "request: token %zu: id %d out of range 0..%u", i, p->prompt[i], lim->n_vocab - 1);
        return req_check_embed(p, lim);
    }
    if (p->n_prompt > lim->n_ctx && !lim->window)
        return err_set(PL_ERANGE, "request: prompt of %zu tokens exceeds the context of %u tokens", p->n_prompt,
                       lim->n_ctx);
    for (size_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= lim->n_vocab)
            return err_set(PL_EINVAL, "request: prompt token %zu: id %d out of range 0..%u", i, p->prompt[i],
                           lim->n_vocab - 1);
    if (p->n < 1 || p->n > REQ_MAX_N) return err_set(PL_ERANGE, "request: n %d out of range 1..%d", p->n, REQ_MAX_N);
    if ((uint32_t)p->n > lim->max_seqs)
        return err_set(PL_ERANGE, "request: n %d exceeds the engine's max_seqs %u (completions run side by side)",
                       p->n, lim->max_seqs);
    if (p->max_tokens < 1) return err_set(PL_ERANGE, "request: max_tokens %d must be >= 1", p->max_tokens);
    if (lim->window && (p->n_prompt > REQ_WINDOW_MAX_TOKENS || p->max_tokens > REQ_WINDOW_MAX_TOKENS))
        return err_set(PL_ERANGE, "request: prompt %zu / max_tokens %d tokens: at most %d each with a KV window",
                       p->n_prompt, p->max_tokens, REQ_WINDOW_MAX_TOKENS);
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return err_set(PL_ERANGE, "request: min_tokens %d out of range 0..max_tokens (%d)", p->min_tokens, p->max_tokens);
    if (p->n_stop_token_ids > PL_MAX_STOP_TOKEN_IDS || (p->n_stop_token_ids && !p->stop_token_ids))
        return err_set(PL_ERANGE, "request: %zu stop_token_ids (at most %d)", p->n_stop_token_ids, PL_MAX_STOP_TOKEN_IDS);
    for (size_t i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || (uint32_t)p->stop_token_ids[i] >= lim->n_vocab)
            return err_set(PL_EINVAL, "request: stop_token_ids[%zu]: id %d out of range 0..%u", i, p->stop_token_ids[i],
                           lim->n_vocab - 1);
    if (p->top_logprobs < -1 || p->top_logprobs > PL_MAX_TOP_LOGPROBS)
        return err_set(PL_ERANGE, "request: top_logprobs %d out of range -1..%d", p->top_logprobs,
                       PL_MAX_TOP_LOGPROBS);
    return req_check_stops(p);
}

/* ------------------------------------------------------------- building */

static void req_destroy(pl_request *r)
{
    for (int32_t i = 0; r->comp && i < r->n; i++) {
        req_comp *c = &r->comp[i];
        pl_sampler_free(c->smp);
        pl_detok_free(c->dt);
        pl_stop_free(c->stop);
        free(c->toks);
        free(c->text);
        gm_state_free(&c->gm);
    }
    gm_grammar_free(r->grammar);
    gm_mask_cache_free(r->gm_cache);
    free(r->comp);
    free(r->prompt);
    free(r->stop_ids);
    free(r->ban);
    free(r->embd);
    free(r->plp_rows);
    free(r->plp_lp);
    free(r->plp_ids);
    free(r->plp_top);
    free(r->plp_n);
    free(r->q);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static int req_comp_init(pl_request *r, req_comp *c, int32_t i, const pl_request_params *p, const req_limits *lim)
{
    pl_sampler_params sp = p->sampling;
    sp.seed = p->sampling.seed + (uint64_t)i;
    c->index = i;
    int rc = pl_sampler_new(&c->smp, &sp, (int32_t)lim->n_vocab);
    if (rc) return err_prefix(rc, "request: sampling");
    c->dt = pl_detok_new(lim->vocab);
    c->stop = pl_stop_new(p->stops, p->n_stops);
    c->toks = mem_calloc(r->cap_toks, sizeof *c->toks);
    if (!c->dt || !c->stop || !c->toks) return err_set(PL_ENOMEM, "request: out of memory");
    memcpy(c->toks, r->prompt, r->n_prompt * sizeof *c->toks);
    return 0;
}

/* Compiles p->grammar and gives every completion its start state. */
static int req_grammar_init(pl_request *r, const pl_request_params *p)
{
    if (!p->grammar) return 0;
    int rc = gm_parse(&r->grammar, p->grammar, strlen(p->grammar), NULL);
    if (rc) return err_prefix(rc, "request");
    gm_work *w = gm_work_new();
    r->gm_cache = gm_mask_cache_new();
    if (!w || !r->gm_cache) rc = err_set(PL_ENOMEM, "request: out of memory");
    for (int32_t i = 0; !rc && i < r->n; i++) rc = gm_state_init(&r->comp[i].gm, r->grammar, w);
    gm_work_free(w);
    return rc ? err_prefix(rc, "request: grammar") : 0;
}

static int req_init_sync(pl_request *r)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return err_set(PL_ENOMEM, "request: condvar attributes");
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad) return err_set(PL_ENOMEM, "request: condvar");
    if (pthread_mutex_init(&r->mu, NULL)) {
        pthread_cond_destroy(&r->cv);
        return err_set(PL_ENOMEM, "request: mutex");
    }
    return 0;
}

/* stop_token_ids, and the ban list min_tokens applies (EOG ids unless
 * ignore_eos, then the stop ids). */
static int req_ids_init(pl_request *r, const pl_request_params *p, const req_limits *lim)
{
    const uint32_t n_eog = p->ignore_eos ? 0 : lim->n_eog, n_stop = (uint32_t)p->n_stop_token_ids;
    r->stop_ids = mem_calloc(n_stop ? n_stop : 1, sizeof *r->stop_ids);
    r->ban = mem_calloc(n_eog + n_stop ? n_eog + n_stop : 1, sizeof *r->ban);
    if (!r->stop_ids || !r->ban) return err_set(PL_ENOMEM, "request: out of memory");
    if (n_stop) memcpy(r->stop_ids, p->stop_token_ids, n_stop * sizeof *r->stop_ids);
    r->n_stop_ids = n_stop;
    if (n_eog) memcpy(r->ban, lim->eog, n_eog * sizeof *r->ban);
    if (n_stop) memcpy(r->ban + n_eog, p->stop_token_ids, n_stop * sizeof *r->ban);
    r->n_ban = r->min_tokens > 0 ? n_eog + n_stop : 0;
    return 0;
}

/* prompt_logprobs: one chunk's logits and the figures of every prompt token. */
static int req_plp_init(pl_request *r, const pl_request_params *p, const req_limits *lim)
{
    const size_t np = r->n_prompt;
    r->plp = true;
    r->plp_k = p->top_logprobs > 0 ? p->top_logprobs : 0;
    r->plp_rows = mem_calloc((size_t)PL_PROMPT_LOGPROBS_CHUNK * lim->n_vocab, sizeof *r->plp_rows);
    r->plp_lp = mem_calloc(np, sizeof *r->plp_lp);
    r->plp_ids = mem_calloc(np * (size_t)r->plp_k + 1, sizeof *r->plp_ids);
    r->plp_top = mem_calloc(np * (size_t)r->plp_k + 1, sizeof *r->plp_top);
    r->plp_n = mem_calloc(np, sizeof *r->plp_n);
    if (!r->plp_rows || !r->plp_lp || !r->plp_ids || !r->plp_top || !r->plp_n)
        return err_set(PL_ENOMEM, "request: out of memory for prompt logprobs");
    return 0;
}

bool req_is_stop_id(const pl_request *r, int32_t tok)
{
    for (uint32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == tok) return true;
    return false;
}

int req_new(pl_request **out, const pl_request_params *p, const req_limits *lim, uint64_t id)
{
    int rc = req_check(p, lim);
    if (rc) return rc;
    pl_request *r = mem_calloc(1, sizeof *r);
    if (!r) return PL_ENOMEM;
    if (req_init_sync(r)) { free(r); return PL_ENOMEM; }
    r->id = id;
    r->n_prompt = (uint32_t)p->n_prompt;
    r->n = p->n;
    r->max_tokens = p->embed ? 1 : p->max_tokens;
    r->top_logprobs = p->top_logprobs;
    r->ignore_eos = p->ignore_eos;
    r->min_tokens = p->embed ? 0 : p->min_tokens;
    r->embed = p->embed;
    r->pooling = lim->pooling;
    r->dim = lim->dim;
    uint64_t cap = (uint64_t)r->n_prompt + (uint64_t)p->max_tokens;
    r->cap_toks = (uint32_t)(cap < (uint64_t)lim->n_ctx + 1 || lim->window ? cap : (uint64_t)lim->n_ctx + 1);
    r->t_submit = eng_now();
    atomic_init(&r->refs, 2);
    atomic_init(&r->cancelled, false);
    r->n_live = p->n;
    r->prompt = mem_calloc(r->n_prompt, sizeof *r->prompt);
    r->comp = mem_calloc((size_t)p->n, sizeof *r->comp);
    if (!r->prompt || !r->comp) rc = err_set(PL_ENOMEM, "request: out of memory");
    if (!rc) memcpy(r->prompt, p->prompt, r->n_prompt * sizeof *r->prompt);
    if (!rc) rc = req_ids_init(r, p, lim);
    if (!rc && p->embed && !(r->embd = mem_calloc(lim->dim, sizeof *r->embd)))
        rc = err_set(PL_ENOMEM, "request: out of memory");
    if (!rc && p->prompt_logprobs && !p->embed) rc = req_plp_init(r, p, lim);
    for (int32_t i = 0; !rc && i < p->n; i++) rc = req_comp_init(r, &r->comp[i], i, p, lim);
    if (!rc) rc = req_grammar_init(r, p);
    if (rc) { req_destroy(r); return rc; }
    *out = r;
    return 0;
}

void req_release(pl_request *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1) req_destroy(r);
}

/* ---------------------------------------------------------------- events */

static int req_queue_grow(pl_request *r)
{
    size_t cap = r->q_cap ? r->q_cap * 2 : 16;
    pl_event *q = malloc(cap * sizeof *q);
    if (!q) return err_set(PL_ENOMEM, "request %llu: event queue of %zu", (unsigned long long)r->id, cap);
    for (size_t i = 0; i < r->q_len; i++) q[i] = r->q[(r->q_head + i) % r->q_cap];
    free(r->q);
    r->q = q;
    r->q_head = 0;
    r->q_cap = cap;
    return 0;
}

int req_push(pl_request *r, const pl_event *ev, bool final)
{
    pthread_mutex_lock(&r->mu);
    assert(!r->ended);
    int rc = r->q_len == r->q_cap ? req_queue_grow(r) : 0;
    if (!rc) {
        r->q[(r->q_head + r->q_len) % r->q_cap] = *ev;
        r->q_len++;
    }
    /* Even if the event is lost to memory, the reader must not hang. */
    if (final) r->ended = true;
    pthread_mutex_unlock(&r->mu);
    /* Woken after the unlock, the reader does not block on mu at once (a
     * futex round trip per token otherwise). r stays valid: the engine's
     * reference is dropped only after this push returns. */
    pthread_cond_broadcast(&r->cv);
    return rc;
}

/* Absolute CLOCK_MONOTONIC deadline timeout_ms from now. */
static struct timespec req_deadline(int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    return ts;
}

int pl_request_next(pl_request *r, pl_event *ev, int timeout_ms)
{
    if (!r || !ev) return err_set(PL_EINVAL, "pl_request_next: NULL argument");
    struct timespec until = req_deadline(timeout_ms < 0 ? 0 : timeout_ms);
    int res = 0;
    pthread_mutex_lock(&r->mu);
    while (r->q_len == 0 && !r->ended) {
        if (timeout_ms < 0) pthread_cond_wait(&r->cv, &r->mu);
        else if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT) break;
    }
    if (r->q_len > 0) {
        *ev = r->q[r->q_head];
        r->q_head = (r->q_head + 1) % r->q_cap;
        r->q_len--;
        res = 1;
    } else if (r->ended) {
        res = 2;
    }
    pthread_mutex_unlock(&r->mu);
    return res;
}

void pl_request_cancel(pl_request *r)
{
    if (r) atomic_store(&r->cancelled, true);
}

void pl_request_free(pl_request *r)
{
    if (!r) return;
    atomic_store(&r->cancelled, true);
    req_release(r);
}

uint64_t pl_request_id(const pl_request *r) { return r ? r->id : 0; }

int pl_request_embedding(pl_request *r, float *out, size_t cap)
{
    if (!r || !out) return err_set(PL_EINVAL, "pl_request_embedding: NULL argument");
    if (!r->embed) return err_set(PL_EINVAL, "pl_request_embedding: request %llu is not an embedding", (unsigned long long)r->id);
    if (cap < r->dim) return err_set(PL_EINVAL, "pl_request_embedding: room for %zu floats, %u needed", cap, r->dim);
    pthread_mutex_lock(&r->mu);
    /* ended is set under mu after the engine wrote the vector */
    bool done = r->ended && r->embd_ready;
    pthread_mutex_unlock(&r->mu);
    if (!done) return err_set(PL_EINVAL, "pl_request_embedding: request %llu has no embedding (not done, or failed)",
                              (unsigned long long)r->id);
    memcpy(out, r->embd, r->dim * sizeof *out);
    return 0;
}

/* ------------------------------------------------------------------ text */

int req_text_add(req_comp *c, const char *s, size_t n)
{
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = (c->text_len + n + 1) * 2;
        char *t = realloc(c->text, cap);
        if (!t) return err_set(PL_ENOMEM, "request: out of memory for text");
        c->text = t;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, s, n);
    c->text_len += n;
    return 0;
}

size_t req_text_take(req_comp *c, char *dst, size_t cap)
{
    assert(cap > 0);
    size_t k = c->text_len < cap - 1 ? c->text_len : cap - 1;
    /* never split a UTF-8 sequence: back off over continuation bytes */
    if (k < c->text_len)
        while (k > 0 && ((unsigned char)c->text[k] & 0xC0) == 0x80) k--;
    if (k) {
        memcpy(dst, c->text, k);
        memmove(c->text, c->text + k, c->text_len - k);
    }
    dst[k] = 0;
    c->text_len -= k;
    return k;
}
