/* scheduler.c - continuous batching, chunked prefill, preemption by
 * recompute and prefix-ordered admission; see scheduler.h.
 *
 * KV block accounting: the plan keeps `held`, the blocks its items will
 * take, and never lets held exceed kv_pool_available() (free + evictable
 * cached blocks). Each item's count is the runtime's (rt_seq_append_cost:
 * kv's own count of new table entries plus one copy per shared block
 * written into, and a window's drop net of what it frees), taken before
 * any item runs: two forks sharing one partly filled block both count a
 * copy although the second writer finds it private, an overestimate, never
 * an underestimate.
 */
#include "engine/scheduler.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "kv/kv_check.h"

/* prefix_order looks this far into the waiting queue for the best prefix. */
#define SCHED_PEEK_WINDOW 32
/* The fewest tokens a step's first prefill chunk is cut to by cost. */
#define SCHED_MIN_CUT 16

int sched_init(sched *s, pl_ctx *ctx, const pl_engine_params *p, uint32_t n_vocab)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->pool = rt_ctx_pool(ctx);
    s->max_seqs = rt_ctx_params(ctx)->max_seqs;
    s->budget = p->max_batch_tokens;
    step_cost_init(&s->learn, rt_ctx_key_cost(ctx));
    s->key_cost = step_cost_key_prompt(&s->learn);
    s->key_cost_decode = step_cost_key_decode(&s->learn);
    s->key_cap = rt_ctx_params(ctx)->n_ctx;
    s->prefix_order = p->prefix_order;
    s->prefix_cache = p->prefix_cache;
    s->n_vocab = n_vocab;
    s->running = mem_calloc(s->max_seqs, sizeof *s->running);
    s->planned = mem_calloc(s->max_seqs, sizeof *s->planned);
    s->items = mem_calloc(s->max_seqs, sizeof *s->items);
    s->logits = mem_calloc((size_t)s->max_seqs * n_vocab, sizeof *s->logits);
    if (!s->running || !s->planned || !s->items || !s->logits) {
        const uint32_t n = s->max_seqs; /* sched_free clears s */
        sched_free(s);
        return err_set(PL_ENOMEM, "scheduler: out of memory for %u sequences", n);
    }
    return 0;
}

void sched_free(sched *s)
{
    for (uint32_t i = 0; s->running && i < s->n_running; i++) free(s->running[i]);
    for (sched_seq *q = s->wait_head, *nx; q; q = nx) {
        nx = q->next;
        store_lookup_free(q->tier);
        free(q);
    }
    free(s->running);
    free(s->planned);
    free(s->items);
    free(s->logits);
    memset(s, 0, sizeof *s);
}

/* -------------------------------------------------------------- lists */

static void wait_unlink(sched *s, sched_seq *q)
{
    if (q->prev) q->prev->next = q->next;
    else s->wait_head = q->next;
    if (q->next) q->next->prev = q->prev;
    else s->wait_tail = q->prev;
    q->prev = q->next = NULL;
    s->n_waiting--;
}

static void wait_push_back(sched *s, sched_seq *q)
{
    q->prev = s->wait_tail;
    q->next = NULL;
    if (s->wait_tail) s->wait_tail->next = q;
    else s->wait_head = q;
    s->wait_tail = q;
    s->n_waiting++;
}

static void wait_push_front(sched *s, sched_seq *q)
{
    q->prev = NULL;
    q->next = s->wait_head;
    if (s->wait_head) s->wait_head->prev = q;
    else s->wait_tail = q;
    s->wait_head = q;
    s->n_waiting++;
}

static uint32_t running_index(const sched *s, const sched_seq *q)
{
    for (uint32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == q) return i;
    assert(!"sequence not running");
    return s->n_running;
}

static void running_remove(sched *s, sched_seq *q)
{
    uint32_t i = running_index(s, q);
    memmove(s->running + i, s->running + i + 1, (s->n_running - i - 1) * sizeof *s->running);
    s->n_running--;
    s->slots_used -= (uint32_t)q->n_comp;
}

/* Inserts q at index at (keeps admission order). */
static void running_insert(sched *s, uint32_t at, sched_seq *q)
{
    assert(s->n_running < s->max_seqs && at <= s->n_running);
    memmove(s->running + at + 1, s->running + at, (s->n_running - at) * sizeof *s->running);
    s->running[at] = q;
    s->n_running++;
}

int sched_add(sched *s, pl_request *r)
{
    sched_seq *q = mem_calloc(1, sizeof *q);
    if (!q) return err_set(PL_ENOMEM, "scheduler: out of memory queueing request %llu", (unsigned long long)r->id);
    *q = (sched_seq){.r = r, .comp_lo = 0, .n_comp = r->n, .seq = -1, .fresh = true, .peek = -1};
    wait_push_back(s, q);
    return 0;
}

void sched_remove(sched *s, sched_seq *q)
{
    if (q->seq >= 0) {
        running_remove(s, q);
        rt_seq_free(s->ctx, q->seq);
    } else {
        wait_unlink(s, q);
    }
    store_lookup_free(q->tier);
    free(q);
}

/* ------------------------------------------------------- block counting */

/* q (running) holds the KV of its n_done tokens. */
static inline bool sched_holds(const sched *s, const sched_seq *q)
{
    const kv_seq *kv = rt_seq_kv(s->ctx, q->seq);
    return kv && kv->n_tokens + rt_seq_dropped(s->ctx, q->seq) == q->n_done;
}

/* Blocks appending n tokens to ctx sequence id takes (rt_seq_append_cost:
 * kv's count, with a window's drop net of what it frees). */
static uint32_t sched_need(const sched *s, int32_t id, uint32_t n)
{
    return rt_seq_append_cost(s->ctx, id, n);
}

/* The most tokens (<= want) sequence id can append with `avail` blocks;
 * with a window also at most what one step may carry (rt_seq_max_chunk).
 * (With a window the count need not grow with n; the search still returns
 * a count that fits.) */
static uint32_t sched_fit(const sched *s, int32_t id, uint32_t want, uint32_t avail)
{
    if (rt_ctx_slides(s->ctx)) {
        uint32_t cap = rt_seq_max_chunk(s->ctx, id);
        want = want < cap ? want : cap;
    }
    if (sched_need(s, id, want) <= avail) return want;
    uint32_t lo = 0, hi = want; /* fits(lo), !fits(hi) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (sched_need(s, id, mid) <= avail) lo = mid;
        else hi = mid;
    }
    return lo;
}

static uint32_t sched_avail(const sched *s, uint32_t held)
{
    uint32_t a = kv_pool_available(s->pool);
    return a > held ? a - held : 0;
}

/* ------------------------------------------------------------- planning */

void sched_step_begin(sched *s)
{
    s->preempted_now = false;
    s->n_items = 0;
}

static void sched_preempt(sched *s, sched_seq *q)
{
    assert(q->seq >= 0);
    running_remove(s, q);
    rt_seq_free(s->ctx, q->seq);
    q->seq = -1;
    q->n_done = 0;
    q->peek = -1;
    wait_push_front(s, q);
    s->st.preemptions++;
    s->preempted_now = true;
}

bool sched_preempt_newest(sched *s)
{
    if (s->n_running <= 1) return false;
    sched_preempt(s, s->running[s->n_running - 1]);
    return true;
}

/* A prompt-logprobs sequence still in its prompt: every row's logits, in
 * chunks of at most PL_PROMPT_LOGPROBS_CHUNK. */
bool sched_wants_rows(const sched_seq *q) { return q->r->plp && q->n_done < q->r->n_prompt; }

static uint32_t sched_cap(const sched_seq *q, uint32_t want)
{
    return sched_wants_rows(q) && want > PL_PROMPT_LOGPROBS_CHUNK ? PL_PROMPT_LOGPROBS_CHUNK : want;
}

/* Adds q's next n tokens to the plan; logits when they are its last. */
static void sched_take(sched *s, sched_seq *q, uint32_t n)
{
    assert(n >= 1 && q->n_done + n <= sched_total(q) && s->n_items < (int)s->max_seqs);
    const int i = s->n_items++;
    const bool last = q->n_done + n == sched_total(q);
    q->chunk = n;
    s->planned[i] = q;
    s->items[i] = (rt_item){.seq = q->seq, .tokens = q->r->comp[q->comp_lo].toks + q->n_done, .n = n,
                            .logits = last ? s->logits + (size_t)i * s->n_vocab : NULL};
    if (sched_wants_rows(q)) { /* prompt logprobs: a row for every token (eng_run_step reads them) */
        assert(n <= PL_PROMPT_LOGPROBS_CHUNK);
        s->items[i].logits = q->r->plp_rows;
        s->items[i].all = true;
    }
    if (q->r->embed) { /* every prompt row pools; a (re)start from token 0 starts the sum afresh */
        if (q->n_done == 0) memset(q->r->embd, 0, q->r->dim * sizeof *q->r->embd);
        s->items[i].pool = q->r->embd;
        s->items[i].pool_kind = q->r->pooling;
    }
}

static bool sched_is_decode(const sched_seq *q)
{
    return q->r->comp[q->comp_lo].n_gen > 0 && sched_total(q) - q->n_done == 1;
}

/* The keys n tokens from position p0 attend to: each its position's, at
 * most key_cap. */
static double sched_keys(const sched *s, uint32_t p0, uint32_t n)
{
    const double mid = p0 + (n - 1) / 2.0;
    return n * (mid < s->key_cap ? mid : s->key_cap);
}

/* What n tokens from position p0 cost, in depth-0 tokens (scheduler.h);
 * one token is a decode. */
static double sched_cost(const sched *s, uint32_t p0, uint32_t n)
{
    return n + sched_keys(s, p0, n) * (n == 1 ? s->key_cost_decode : s->key_cost);
}

/* The step's cost left after its decodes: INFINITY when it has none. */
static void sched_cost_begin(sched *s)
{
    s->cost_left = INFINITY;
    s->cut_floor_used = false;
    if (s->n_items == 0 || !(s->key_cost > 0)) return;
    double c = s->budget;
    for (int i = 0; i < s->n_items; i++) c -= sched_cost(s, s->planned[i]->n_done, 1);
    s->cost_left = c;
}

/* The most of `want` tokens from position p0 the step's cost left allows
 * (its first prefill chunk at least SCHED_MIN_CUT of them). */
static uint32_t sched_cost_cut(sched *s, uint32_t p0, uint32_t want)
{
    if (want == 0 || sched_cost(s, p0, want) <= s->cost_left) return want;
    uint32_t lo = 0, hi = want; /* fits(lo), !fits(hi) */
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (sched_cost(s, p0, mid) <= s->cost_left) lo = mid;
        else hi = mid;
    }
    const uint32_t floor = want < SCHED_MIN_CUT ? want : SCHED_MIN_CUT;
    if (!s->cut_floor_used && lo < floor) lo = floor;
    if (lo < want) s->st.cost_cuts++;
    return lo;
}

/* Books a planned prefill chunk against the step's cost. */
static void sched_cost_take(sched *s, uint32_t p0, uint32_t n)
{
    s->cut_floor_used = true;
    if (s->cost_left != INFINITY) s->cost_left -= sched_cost(s, p0, n);
}

/* Step 1: one token for every decoding sequence, preempting the newest
 * while the pool cannot hold them. Returns false with *too_big set if a
 * sequence alone does not fit. */
static bool sched_plan_decodes(sched *s, uint32_t *budget, uint32_t *held, sched_seq **too_big)
{
    for (uint32_t i = 0; i < s->n_running && *budget > 0; i++) {
        sched_seq *q = s->running[i];
        if (!sched_is_decode(q)) continue;
        assert(sched_holds(s, q));
        uint32_t need = sched_need(s, q->seq, 1);
        bool dropped = false;
        while (need > sched_avail(s, *held) && !dropped) {
            if (s->n_running == 1) { *too_big = q; return false; }
            sched_seq *victim = s->running[s->n_running - 1];
            dropped = victim == q;
            sched_preempt(s, victim);
            if (!dropped) need = sched_need(s, q->seq, 1); /* a victim may have shared q's block */
        }
        if (dropped) break; /* q was the newest: nothing after it */
        sched_take(s, q, 1);
        *held += need;
        (*budget)--;
    }
    return true;
}

/* Step 2: prefill chunks of running sequences, cut to budget and blocks. */
static void sched_plan_prefills(sched *s, uint32_t *budget, uint32_t *held)
{
    for (uint32_t i = 0; i < s->n_running && *budget > 0; i++) {
        sched_seq *q = s->running[i];
        if (sched_is_decode(q)) continue;
        uint32_t rem = sched_total(q) - q->n_done, want = sched_cap(q, rem < *budget ? rem : *budget);
        want = sched_cost_cut(s, q->n_done, want);
        assert(sched_holds(s, q));
        uint32_t n = sched_fit(s, q->seq, want, sched_avail(s, *held));
        if (n == 0) continue;
        *held += sched_need(s, q->seq, n);
        sched_cost_take(s, q->n_done, n);
        sched_take(s, q, n);
        *budget -= n;
    }
}

/* The cached prefix of q's tokens, without taking it (walks the hash chain). */
static int32_t sched_peek(sched *s, sched_seq *q)
{
    if (q->peek_at == s->n_plans && q->peek >= 0) return q->peek;
    int32_t k = (int32_t)rt_prefix_peek(s->ctx, q->r->comp[q->comp_lo].toks, sched_total(q));
    q->peek = k;
    q->peek_at = s->n_plans;
    return k;
}

/* Starts q's tier lookup: the chain keys of its prompt's full blocks past
 * those RAM holds. Nothing to ask (all in RAM, a short prompt, out of
 * memory): no lookup. */
static void sched_tier_start(sched *s, sched_seq *q)
{
    const int32_t *tok = q->r->comp[q->comp_lo].toks;
    uint32_t n = sched_total(q), in_ram = 0;
    uint64_t(*keys)[2] = malloc((n / s->pool->g.s.block_size + 1) * sizeof *keys);
    if (!keys) return;
    uint32_t nb = rt_prefix_chain(s->ctx, tok, n, keys, &in_ram);
    if (nb > in_ram) {
        const uint32_t T = s->pool->g.s.block_size;
        q->tier = store_lookup_start(s->tiers, in_ram ? keys[in_ram - 1] : PREFIX_ROOT, (const uint64_t(*)[2])keys + in_ram,
                                     tok + (size_t)in_ram * T, nb - in_ram);
        q->tier_first = in_ram;
    }
    free(keys);
}

/* An embedding pools every token's state and prompt logprobs need every
 * row: such a sequence takes no cached prefix, from RAM or a tier. */
static bool sched_no_prefix(const sched_seq *q) { return q->r->embed || q->r->plp; }

/* Whether q may be admitted now: no tier lookup, or one that is done.
 * Starts the lookup of a sequence met for the first time. */
static bool sched_tier_ready(sched *s, sched_seq *q)
{
    if (!s->tiers || !s->prefix_cache || sched_no_prefix(q)) return true;
    if (!q->tier_tried) {
        q->tier_tried = true;
        sched_tier_start(s, q);
    }
    bool done = true;
    if (q->tier) store_lookup_poll(q->tier, &done);
    return done;
}

/* The waiting sequence to admit next: the front (FCFS; preempted ones are
 * there), or with prefix_order the fresh one with the longest cached
 * prefix among the first SCHED_PEEK_WINDOW (earliest on ties). Sequences
 * waiting on a tier lookup are passed over; NULL if all in reach are. */
static sched_seq *sched_pick(sched *s)
{
    sched_seq *best = s->wait_head;
    int k = 0;
    while (best && !sched_tier_ready(s, best)) {
        best = ++k < SCHED_PEEK_WINDOW ? best->next : NULL;
    }
    if (!best || !s->prefix_order || !best->fresh || !s->prefix_cache) return best;
    int32_t best_k = sched_peek(s, best);
    k++;
    for (sched_seq *q = best->next; q && k < SCHED_PEEK_WINDOW; q = q->next, k++) {
        if (!sched_tier_ready(s, q)) continue;
        int32_t h = sched_peek(s, q);
        if (h > best_k) { best = q; best_k = h; }
    }
    return best;
}

/* Attaches q's cached prefix to ctx sequence id: RAM, then the blocks its
 * finished tier lookup found (which is released). Returns the tokens held. */
static int sched_attach(sched *s, sched_seq *q, int32_t id)
{
    const int32_t *tok = q->r->comp[q->comp_lo].toks;
    if (!q->tier) return rt_seq_attach_prefix(s->ctx, id, tok, sched_total(q), !q->fresh);
    bool done;
    uint32_t nh = store_lookup_poll(q->tier, &done), loaded = 0;
    const uint8_t **blocks = nh ? malloc(nh * sizeof *blocks) : NULL;
    if (!blocks) nh = 0;
    for (uint32_t i = 0; i < nh; i++) blocks[i] = store_lookup_block(q->tier, i);
    /* one block kept available, so that the prompt's last token can run */
    int h = rt_seq_attach_tiered(s->ctx, id, tok, sched_total(q), !q->fresh, q->tier_first, blocks, nh, 1, &loaded);
    free(blocks);
    store_lookup_free(q->tier);
    q->tier = NULL;
    if (q->fresh) s->st.tier_hit_tokens += (uint64_t)loaded * s->pool->g.s.block_size;
    return h;
}

/* Makes q running with a ctx sequence holding its cached prefix. */
static void sched_admit(sched *s, sched_seq *q, int32_t id, uint32_t hit)
{
    wait_unlink(s, q);
    q->seq = id;
    q->n_done = hit;
    q->order = s->next_order++;
    running_insert(s, s->n_running, q);
    s->slots_used += (uint32_t)q->n_comp;
    if (q->fresh) {
        /* Counted once per request: recomputation after preemption is not a hit. */
        q->fresh = false;
        q->r->admitted = true;
        q->r->cached_tokens = hit;
        s->st.prefix_query_tokens += q->r->n_prompt;
        s->st.prefix_hit_tokens += hit;
        s->st.prompt_tokens += q->r->n_prompt;
    }
}

/* Step 3: admissions. Returns false with *too_big set if the pool cannot
 * take even one token of a sequence while nothing else runs. */
static bool sched_plan_admits(sched *s, uint32_t *budget, uint32_t *held, sched_seq **too_big)
{
    while (!s->preempted_now && *budget > 0 && s->wait_head && s->slots_used < s->max_seqs) {
        sched_seq *q = sched_pick(s);
        if (!q) break; /* every waiting sequence in reach waits on a tier */
        if (s->slots_used + (uint32_t)q->n_comp > s->max_seqs) break;
        int32_t id;
        int rc = rt_seq_new(s->ctx, &id);
        if (rc == PL_ENOMEM) { s->admit_rc = rc; *too_big = q; return false; }
        if (rc != 0) { /* static layout: no room to reserve n_ctx */
            if (s->n_running == 0) { *too_big = q; return false; }
            break;
        }
        /* an embedding pools every token's state, prompt logprobs need every row: no cached prefix */
        int h = s->prefix_cache && !sched_no_prefix(q) ? sched_attach(s, q, id) : 0;
        uint32_t hit = h > 0 ? (uint32_t)h : 0;
        uint32_t rem = sched_total(q) - hit, want = sched_cap(q, rem < *budget ? rem : *budget);
        want = sched_cost_cut(s, hit, want);
        uint32_t n = sched_fit(s, id, want, sched_avail(s, *held));
        if (n == 0) {
            rt_seq_free(s->ctx, id);
            if (s->n_running == 0) { *too_big = q; return false; }
            break;
        }
        sched_admit(s, q, id, hit);
        *held += sched_need(s, id, n);
        sched_cost_take(s, hit, n);
        sched_take(s, q, n);
        *budget -= n;
    }
    return true;
}

int sched_plan(sched *s, sched_seq **too_big)
{
    *too_big = NULL;
    s->admit_rc = 0;
    for (;;) {
        s->n_items = 0;
        s->n_plans++;
        uint32_t budget = s->budget, held = 0;
        if (!sched_plan_decodes(s, &budget, &held, too_big)) return 0;
        sched_cost_begin(s);
        sched_plan_prefills(s, &budget, &held);
        if (!sched_plan_admits(s, &budget, &held, too_big)) return 0;
        if (s->n_items > 0 || s->n_running == 0) return s->n_items;
        /* Every running sequence is a prefill that got no block: they hold
         * the pool between them. Free the newest and try again. */
        if (s->n_running == 1) { *too_big = s->running[0]; return 0; }
        sched_preempt_newest(s);
    }
}

void sched_commit(sched *s, double seconds)
{
    step_cost_obs o = {.seconds = seconds};
    for (int i = 0; i < s->n_items; i++) {
        const sched_seq *q = s->planned[i];
        o.tokens += q->chunk;
        *(q->chunk == 1 ? &o.decode_keys : &o.prompt_keys) += sched_keys(s, q->n_done, q->chunk);
    }
    if (seconds > 0) {
        step_cost_observe(&s->learn, &o);
        s->key_cost = step_cost_key_prompt(&s->learn);
        s->key_cost_decode = step_cost_key_decode(&s->learn);
    }
    for (int i = 0; i < s->n_items; i++) {
        sched_seq *q = s->planned[i];
        q->n_done += q->chunk;
        q->chunk = 0;
        assert(rt_seq_len(s->ctx, q->seq) + rt_seq_dropped(s->ctx, q->seq) == q->n_done);
    }
}

/* ----------------------------------------------------------------- fork */

int sched_fork(sched *s, sched_seq *q, sched_seq **kids)
{
    assert(q->seq >= 0 && q->n_comp > 1 && q->n_done == sched_total(q));
    /* Made first, so that no completion can be lost once forking starts. */
    sched_seq *g = mem_calloc(1, sizeof *g);
    if (!g) return err_set(PL_ENOMEM, "scheduler: out of memory forking request %llu", (unsigned long long)q->r->id);
    uint32_t at = running_index(s, q) + 1;
    int made = 0;
    for (int32_t i = 1; i < q->n_comp; i++) {
        sched_seq *k = mem_calloc(1, sizeof *k);
        int32_t id;
        if (!k || rt_seq_fork(s->ctx, q->seq, &id) != 0) { free(k); break; }
        *k = (sched_seq){.r = q->r, .comp_lo = q->comp_lo + i, .n_comp = 1, .seq = id, .n_done = q->n_done,
                         .order = q->order, .peek = -1};
        running_insert(s, at + (uint32_t)made, k);
        kids[made++] = k;
    }
    int32_t left = q->n_comp - 1 - made;
    q->n_comp = 1;
    if (left == 0) {
        free(g);
        return made;
    }
    /* Their slots are given back; they recompute the prompt later. */
    s->slots_used -= (uint32_t)left;
    *g = (sched_seq){.r = q->r, .comp_lo = q->comp_lo + 1 + made, .n_comp = left, .seq = -1, .peek = -1};
    wait_push_front(s, g);
    return made;
}

/* ---------------------------------------------------------------- check */

#define SCHED_BAD(...) err_set(PL_EFORMAT, "sched_check: " __VA_ARGS__)

static int sched_check_running(const sched *s, kv_seq **live)
{
    uint32_t slots = 0;
    for (uint32_t i = 0; i < s->n_running; i++) {
        const sched_seq *q = s->running[i];
        const kv_seq *kv = rt_seq_kv(s->ctx, q->seq);
        if (!kv) return SCHED_BAD("running %u: ctx sequence %d is not live", i, q->seq);
        const uint64_t gone = rt_seq_dropped(s->ctx, q->seq); /* KV window: tokens dropped */
        if (kv->n_tokens + gone != q->n_done || rt_seq_len(s->ctx, q->seq) + gone != q->n_done)
            return SCHED_BAD("running %u: holds %u tokens (+%llu dropped), n_done %u", i, kv->n_tokens,
                             (unsigned long long)gone, q->n_done);
        if (q->n_done >= sched_total(q)) return SCHED_BAD("running %u: nothing left to run", i);
        if (i > 0 && s->running[i - 1]->order > q->order) return SCHED_BAD("running %u: out of admission order", i);
        for (int32_t c = q->comp_lo; c < q->comp_lo + q->n_comp; c++)
            if (q->r->comp[c].done) return SCHED_BAD("running %u: completion %d is done", i, c);
        slots += (uint32_t)q->n_comp;
        live[i] = (kv_seq *)kv;
    }
    if (slots != s->slots_used || s->n_running > slots || slots > s->max_seqs)
        return SCHED_BAD("slots_used %u, counted %u, running %u, max %u", s->slots_used, slots, s->n_running,
                         s->max_seqs);
    return 0;
}

static int sched_check_waiting(const sched *s)
{
    uint32_t n = 0;
    bool seen_fresh = false;
    for (const sched_seq *q = s->wait_head; q; q = q->next, n++) {
        if (q->seq != -1 || q->n_done != 0) return SCHED_BAD("waiting %u holds a ctx sequence", n);
        if (seen_fresh && !q->fresh) return SCHED_BAD("waiting %u: preempted after a fresh request", n);
        seen_fresh |= q->fresh;
        if (q->next && q->next->prev != q) return SCHED_BAD("waiting %u: broken links", n);
        if (!q->next && s->wait_tail != q) return SCHED_BAD("waiting: tail is not the last");
    }
    if (n != s->n_waiting) return SCHED_BAD("n_waiting %u, counted %u", s->n_waiting, n);
    return 0;
}

int sched_check(sched *s)
{
    kv_seq **live = mem_calloc(s->max_seqs ? s->max_seqs : 1, sizeof *live);
    if (!live) return PL_ENOMEM;
    int rc = sched_check_running(s, live);
    if (!rc) rc = sched_check_waiting(s);
    /* every live table of the context, layer groups' local ones included */
    if (!rc) rc = rt_ctx_check(s->ctx);
    free(live);
    return rc;
}
