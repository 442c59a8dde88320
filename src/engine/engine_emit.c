/* engine_emit.c - what happens to logits: fork of n > 1 prompts, sampling,
 * logprobs, detokenizing, stop strings and the end of completions, and the
 * events all that produces (engine thread only).
 *
 * Text path of one token:
 *   id -> pl_detok_push (complete UTF-8 only) -> pl_stop_feed in slices of
 *   <= PL_MAX_STOP_LEN bytes (holds back what may become a stop string)
 *   -> the completion's staging text -> the TOKEN event (up to its text
 *   size, cut on a UTF-8 boundary; the rest rides with later events, and
 *   what is left at the end goes before DONE in TOKEN events of token -1:
 *   text only, no token - only tokens of hundreds of bytes need them).
 * A completion ends on EOS or a stop_token_ids id (not emitted; neither
 * can be sampled, nor a stop string found, before min_tokens), a stop string (the token that
 * completed it is emitted with the text before it), max_tokens or the
 * context ("length"); its ctx sequence is freed at once, so its blocks are
 * free for the next step.
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"
#include "sample/sample.h"

/* ------------------------------------------------------------- outbox */

static int eng_out_grow(pl_engine *e)
{
    size_t cap = e->cap_out ? e->cap_out * 2 : 64;
    eng_out *o = realloc(e->out, cap * sizeof *o);
    if (!o) return err_set(PL_ENOMEM, "engine: out of memory for %zu events", cap);
    e->out = o;
    e->cap_out = cap;
    return 0;
}

/* Out of memory for the outbox: push its events now. Final entries stay,
 * release-only: the step may still look at their requests. */
static void eng_out_spill(pl_engine *e)
{
    size_t k = 0;
    for (size_t i = 0; i < e->n_out; i++) {
        eng_out *o = &e->out[i];
        if (!o->pushed) req_push(o->r, &o->ev, o->final);
        o->pushed = true;
        if (o->final) e->out[k++] = *o;
    }
    e->n_out = k;
}

/* The spare entry is used only when even spilling left no room; its
 * engine reference cannot be recorded, so it is leaked rather than
 * released while the step may still use the request. */
static void eng_spare_flush(pl_engine *e)
{
    if (!e->spare_used) return;
    req_push(e->spare.r, &e->spare.ev, e->spare.final);
    e->spare_used = false;
}

/* A zeroed event for r at the end of the outbox. */
static eng_out *eng_event(pl_engine *e, pl_request *r, pl_event_kind kind, int32_t index)
{
    eng_spare_flush(e);
    if (e->n_out == e->cap_out && eng_out_grow(e) != 0) eng_out_spill(e);
    eng_out *o = e->n_out < e->cap_out ? &e->out[e->n_out++] : &e->spare;
    e->spare_used = o == &e->spare;
    memset(o, 0, sizeof *o);
    o->r = r;
    o->ev.kind = kind;
    o->ev.index = index;
    return o;
}

/* Prefill role: holds a request's final event until the writes queued so
 * far reach the tiers; false (deliver now) when not holding or out of memory. */
static bool eng_hold(pl_engine *e, const eng_out *o, double now)
{
    if (e->p.role != PL_ROLE_PREFILL || !e->st || !o->final || o->pushed) return false;
    if (e->n_held == e->cap_held) {
        size_t cap = e->cap_held ? 2 * e->cap_held : 16;
        eng_held *h = realloc(e->held, cap * sizeof *h);
        if (!h) return false;
        e->held = h;
        e->cap_held = cap;
    }
    e->held[e->n_held++] = (eng_held){*o, store_put_mark(e->st), now + ENG_HOLD_MAX_S};
    return true;
}

static void eng_release_held(pl_engine *e, bool flush, double now)
{
    size_t k = 0;
    for (size_t i = 0; i < e->n_held; i++) {
        eng_held *h = &e->held[i];
        if (flush || now >= h->until || store_put_done(e->st, h->mark)) {
            req_push(h->o.r, &h->o.ev, true);
            req_release(h->o.r);
        } else {
            e->held[k++] = *h;
        }
    }
    e->n_held = k;
}

void eng_deliver(pl_engine *e, bool flush)
{
    const double now = eng_now();
    eng_spare_flush(e);
    for (size_t i = 0; i < e->n_out; i++) {
        eng_out *o = &e->out[i];
        if (eng_hold(e, o, now)) continue;
        if (!o->pushed) req_push(o->r, &o->ev, o->final);
        if (o->final) req_release(o->r); /* the engine is done with it */
    }
    e->n_out = 0;
    if (e->n_held) eng_release_held(e, flush, now);
}

/* --------------------------------------------------------------- text */

/* Feeds text through the stop matcher into c's staging text; true once a
 * stop string has appeared. */
static bool eng_stop_feed(pl_engine *e, req_comp *c, const char *text, size_t n, bool look)
{
    bool stopped = false;
    if (!look) return req_text_add(c, text, n), false; /* before min_tokens: no stop strings */
    for (size_t at = 0; at < n && !stopped;) {
        size_t k = n - at < PL_MAX_STOP_LEN ? n - at : PL_MAX_STOP_LEN;
        size_t w = pl_stop_feed(c->stop, text + at, k, e->sbuf, &stopped);
        req_text_add(c, e->sbuf, w);
        at += k;
    }
    return stopped;
}

/* Detokenizes tok into c's staging text; true if a stop string appeared. */
static bool eng_text_push(pl_engine *e, const pl_request *r, req_comp *c, int32_t tok)
{
    int k = pl_detok_push(c->dt, tok, e->piece, sizeof e->piece);
    return k > 0 && eng_stop_feed(e, c, e->piece, (size_t)k, c->n_gen > (uint32_t)r->min_tokens);
}

/* ----------------------------------------------------------- logprobs */

/* log-softmax of the model's logits (before penalty and temperature): the
 * chosen token's value and the k best alternatives, best first (lowest id
 * on ties, like greedy). */
static void eng_logprobs(const float *logits, uint32_t nv, int32_t tok, int32_t k, pl_event *ev)
{
    sample_logprobs(logits, nv, tok, k, &ev->logprob, ev->top_ids, ev->top_logprobs, &ev->n_top);
}

/* ----------------------------------------------------------- endings */

/* The last event of completion c: text left over, then DONE. */
static void eng_done(pl_engine *e, pl_request *r, req_comp *c, const char *reason, double now)
{
    assert(!c->done && r->n_live > 0);
    /* Text longer than one event (very long tokens): continuation events. */
    while (c->text_len >= sizeof ((pl_event *)0)->text) {
        eng_out *o = eng_event(e, r, PL_EV_TOKEN, c->index);
        o->ev.token = -1;
        o->ev.text_len = req_text_take(c, o->ev.text, sizeof o->ev.text);
        o->ev.logprob = NAN;
    }
    eng_out *o = eng_event(e, r, PL_EV_DONE, c->index);
    o->ev.text_len = req_text_take(c, o->ev.text, sizeof o->ev.text);
    o->ev.finish_reason = reason;
    o->ev.prompt_tokens = r->n_prompt;
    o->ev.cached_tokens = r->cached_tokens;
    o->ev.completion_tokens = c->n_gen;
    c->done = true;
    if (strcmp(reason, "cancelled") == 0) r->any_cancelled = true;
    if (--r->n_live > 0) return;
    o->final = true;
    e->m.requests_finished++;
    if (r->any_cancelled) e->m.requests_cancelled++;
    eng_hist_observe(&e->m.e2e, now - r->t_submit);
}

/* Ends q's completion normally: flushes held text, DONE, frees its blocks. */
static void eng_finish(pl_engine *e, sched_seq *q, const char *reason, double now)
{
    pl_request *r = q->r;
    req_comp *c = &r->comp[q->comp_lo];
    assert(q->n_comp == 1);
    int k = pl_detok_flush(c->dt, e->piece, sizeof e->piece);
    if (k > 0 && eng_stop_feed(e, c, e->piece, (size_t)k, true)) reason = "stop";
    size_t w = pl_stop_flush(c->stop, e->sbuf);
    req_text_add(c, e->sbuf, w);
    eng_done(e, r, c, reason, now);
    sched_remove(&e->sc, q);
}

void eng_drop(pl_engine *e, sched_seq *q, double now)
{
    for (int32_t i = 0; i < q->n_comp; i++) eng_done(e, q->r, &q->r->comp[q->comp_lo + i], "cancelled", now);
    sched_remove(&e->sc, q);
}

void eng_fail(pl_engine *e, pl_request *r, const char *msg, double now)
{
    if (r->failed || r->n_live == 0) return;
    r->failed = true;
    for (int32_t i = 0; i < r->n; i++) r->comp[i].done = true;
    r->n_live = 0;
    eng_out *o = eng_event(e, r, PL_EV_ERROR, 0);
    snprintf(o->ev.message, sizeof o->ev.message, "request %llu: %s", (unsigned long long)r->id, msg);
    o->final = true;
    e->m.requests_finished++;
    eng_hist_observe(&e->m.e2e, now - r->t_submit);
}

static void eng_sweep_one(pl_engine *e, sched_seq *q, double now, bool *removed)
{
    *removed = true;
    if (q->r->failed) sched_remove(&e->sc, q);
    else if (atomic_load(&q->r->cancelled)) eng_drop(e, q, now);
    else *removed = false;
}

void eng_sweep(pl_engine *e, double now)
{
    sched *s = &e->sc;
    bool removed;
    for (uint32_t i = 0; i < s->n_running;) {
        eng_sweep_one(e, s->running[i], now, &removed);
        i += !removed;
    }
    for (sched_seq *q = s->wait_head, *nx; q; q = nx) {
        nx = q->next;
        eng_sweep_one(e, q, now, &removed);
    }
}

/* ----------------------------------------------------------- sampling */

/* Samples q's next token from logits and emits it; ends the completion
 * when it should. */
static void eng_sample(pl_engine *e, sched_seq *q, const float *logits, double now)
{
    pl_request *r = q->r;
    req_comp *c = &r->comp[q->comp_lo];
    const uint32_t hist = r->n_prompt + c->n_gen;
    assert(q->n_comp == 1 && q->n_done == hist && hist < r->cap_toks);
    if (r->grammar) {
        bool complete = false;
        logits = eng_grammar_logits(e, r, c, logits, &complete);
        if (complete) { eng_finish(e, q, "stop", now); return; }
        if (!logits) { eng_fail(e, r, err_msg(), now); return; }
    }
    const bool early = c->n_gen < (uint32_t)r->min_tokens;
    int32_t tok = pl_sampler_sample_gen(c->smp, logits, c->toks, hist, r->n_prompt, r->ban, early ? r->n_ban : 0);
    if (!r->first_token) {
        r->first_token = true;
        eng_hist_observe(&e->m.ttft, now - r->t_submit);
    }
    if ((!r->ignore_eos && pl_vocab_is_eog(e->lim.vocab, tok)) || req_is_stop_id(r, tok)) {
        eng_finish(e, q, "stop", now);
        return;
    }
    if (r->grammar && eng_grammar_take(e, r, c, tok)) { eng_fail(e, r, err_msg(), now); return; }
    c->toks[hist] = tok;
    c->n_gen++;
    e->m.generated_tokens++;
    if (c->t_last > 0) eng_hist_observe(&e->m.itl, now - c->t_last);
    c->t_last = now;
    bool stopped = eng_text_push(e, r, c, tok);
    eng_out *o = eng_event(e, r, PL_EV_TOKEN, c->index);
    o->ev.token = tok;
    o->ev.text_len = req_text_take(c, o->ev.text, sizeof o->ev.text);
    o->ev.logprob = NAN;
    if (r->top_logprobs >= 0) eng_logprobs(logits, e->lim.n_vocab, tok, r->top_logprobs, &o->ev);
    if (stopped) eng_finish(e, q, "stop", now);
    else if (c->n_gen >= (uint32_t)r->max_tokens) eng_finish(e, q, "length", now);
    else if (!e->lim.window && r->n_prompt + c->n_gen > e->lim.n_ctx) eng_finish(e, q, "length", now); /* no room to feed it */
}

/* An embedding's prompt is through: mean divides by its tokens, then the
 * vector is L2-normalised (a zero vector stays zero); DONE, and its blocks
 * go back at once. */
static void eng_embed_done(pl_engine *e, sched_seq *q, double now)
{
    pl_request *r = q->r;
    float *v = r->embd;
    const double inv = r->pooling == PL_POOL_MEAN ? 1.0 / r->n_prompt : 1.0;
    double ss = 0;
    for (uint32_t i = 0; i < r->dim; i++) {
        v[i] = (float)(v[i] * inv);
        ss += (double)v[i] * v[i];
    }
    const double norm = sqrt(ss);
    for (uint32_t i = 0; norm > 0 && i < r->dim; i++) v[i] = (float)(v[i] / norm);
    r->embd_ready = true;
    if (!r->first_token) {
        r->first_token = true;
        eng_hist_observe(&e->m.ttft, now - r->t_submit);
    }
    eng_done(e, r, &r->comp[q->comp_lo], "stop", now);
    sched_remove(&e->sc, q);
}

void eng_prompt_rows(pl_engine *e, sched_seq *q, const float *rows, uint32_t n, double now)
{
    pl_request *r = q->r;
    const uint32_t nv = e->lim.n_vocab, from = q->n_done - n;
    assert(r->plp && q->n_done >= n);
    /* row j holds the logits after token from + j: they predict token from + j + 1 */
    for (uint32_t j = 0; j < n; j++) {
        const uint32_t t = from + j + 1;
        if (t >= r->n_prompt) break;
        sample_logprobs(rows + (size_t)j * nv, nv, r->prompt[t], r->plp_k, &r->plp_lp[t], r->plp_ids + (size_t)t * r->plp_k,
                        r->plp_top + (size_t)t * r->plp_k, &r->plp_n[t]);
    }
    if (q->n_done == sched_total(q)) eng_on_logits(e, q, rows + (size_t)(n - 1) * nv, now);
}

/* The PL_EV_PROMPT events of every completion, once, before its first token. */
static void eng_prompt_events(pl_engine *e, pl_request *r)
{
    if (!r->plp || r->plp_sent) return;
    r->plp_sent = true;
    for (int32_t c = 0; c < r->n; c++)
        for (uint32_t t = 0; t < r->n_prompt; t++) {
            eng_out *o = eng_event(e, r, PL_EV_PROMPT, c);
            o->ev.token = r->prompt[t];
            o->ev.logprob = t ? r->plp_lp[t] : NAN;
            o->ev.n_top = t ? r->plp_n[t] : 0;
            for (int32_t k = 0; k < o->ev.n_top; k++) {
                o->ev.top_ids[k] = r->plp_ids[(size_t)t * r->plp_k + k];
                o->ev.top_logprobs[k] = r->plp_top[(size_t)t * r->plp_k + k];
            }
        }
}

void eng_on_logits(pl_engine *e, sched_seq *q, const float *logits, double now)
{
    if (q->r->failed) return;
    eng_prompt_events(e, q->r);
    if (q->r->embed) {
        eng_embed_done(e, q, now);
        return;
    }
    sched_seq *kids[REQ_MAX_N];
    int nk = 0;
    if (q->n_comp > 1) {
        /* The prompt is done: one sequence per completion, sharing its blocks. */
        nk = sched_fork(&e->sc, q, kids);
        if (nk < 0) {
            eng_fail(e, q->r, err_msg(), now);
            return;
        }
    }
    eng_sample(e, q, logits, now);
    for (int i = 0; i < nk; i++) eng_sample(e, kids[i], logits, now);
}
