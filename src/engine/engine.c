/* engine.c - pl_engine_*: the engine thread, submission, the step loop,
 * shutdown; see engine.h for the threads and locks, scheduler.h for what a
 * step runs.
 *
 * One iteration of the engine thread:
 *   take submissions and kv_json jobs (mu) -> serve jobs -> queue the new
 *   requests -> drop cancelled/failed sequences -> plan + rt_step (retry
 *   after preemption on PL_EFULL) -> sample -> publish metrics -> deliver
 *   events.
 * With nothing running or waiting it sleeps on cv; submit, kv_json,
 * shutdown and free wake it. Woken idle by a submission, it gathers the
 * rest of a burst (eng_gather) before its first step. After
 * pl_engine_shutdown it runs until running and waiting are empty and exits;
 * pl_engine_free cancels what is left (every unfinished completion gets DONE
 * "cancelled") and joins.
 */
#include "pagellm.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/mem.h"
#include "engine/engine.h"

void pl_engine_params_default(pl_engine_params *p)
{
    memset(p, 0, sizeof *p);
    pl_ctx_params_default(&p->ctx);
    p->ctx.max_seqs = 16;
    p->max_batch_tokens = 512;
    p->max_queue = 256;
    p->prefix_order = false;
    p->prefix_cache = true;
    p->gather_us = 5000;
}

/* ------------------------------------------------------------- the step */

/* The engine thread's CPU seconds: the profile counts work, not the time
 * other threads or processes held the core. */
static double eng_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void eng_fail_too_big(pl_engine *e, sched_seq *q, double now)
{
    char msg[200];
    const kv_pool *pool = rt_ctx_pool(e->ctx);
    if (e->sc.admit_rc)
        snprintf(msg, sizeof msg, "cannot start: %s", err_msg());
    else
        snprintf(msg, sizeof msg,
                 "needs more KV cache than the whole pool: %u tokens do not fit %u blocks of %u tokens",
                 sched_total(q), pool->n_blocks, pool->g.s.block_size);
    eng_fail(e, q->r, msg, now);
    eng_sweep(e, now);
}

/* rt_step failed for another reason than a full pool: the batch's
 * requests fail with its message. */
static void eng_fail_batch(pl_engine *e, int rc, double now)
{
    char msg[200];
    snprintf(msg, sizeof msg, "forward pass failed (%d): %s", rc, err_msg());
    for (int i = 0; i < e->sc.n_items; i++) eng_fail(e, e->sc.planned[i]->r, msg, now);
    eng_sweep(e, now);
}

/* Plans and runs one forward pass; false if there was nothing to run. */
static bool eng_run_step(pl_engine *e)
{
    sched *s = &e->sc;
    double t0 = e->prof ? eng_cpu_now() : 0, t1 = t0, wall = 0;
    for (;;) {
        sched_seq *big = NULL;
        int n = sched_plan(s, &big);
        if (big) { eng_fail_too_big(e, big, eng_now()); continue; }
        if (n == 0) return false;
        if (e->prof) t1 = eng_cpu_now(), e->pf.plan += t1 - t0;
        const double w0 = eng_now();
        int rc = rt_step(e->ctx, s->items, n);
        wall = eng_now() - w0;
        if (e->prof) t0 = eng_cpu_now(), e->pf.forward += t0 - t1;
        if (rc == 0) break;
        if (rc != PL_EFULL) { eng_fail_batch(e, rc, eng_now()); return true; }
        /* The plan's block count was short (it should not be): preempt. */
        if (!sched_preempt_newest(s)) eng_fail_too_big(e, s->running[0], eng_now());
    }
    sched_commit(s, wall);
    e->m.steps++;
    const double now = eng_now(), c0 = e->prof ? eng_cpu_now() : 0;
    const uint64_t gen0 = e->m.generated_tokens;
    for (int i = 0; i < s->n_items; i++) {
        const rt_item *it = &s->items[i];
        if (it->all) eng_prompt_rows(e, s->planned[i], it->logits, it->n, now); /* prompt logprobs */
        else if (it->logits) eng_on_logits(e, s->planned[i], it->logits, now);
    }
    eng_sweep(e, now); /* sequences of requests that failed while sampling */
    if (e->prof) {
        e->pf.emit += eng_cpu_now() - c0;
        e->pf.steps++;
        e->pf.items += (uint64_t)s->n_items;
        e->pf.tokens += e->m.generated_tokens - gen0;
    }
    return true;
}

/* Queues the requests taken from the submission queue. */
static void eng_intake(pl_engine *e, pl_request *in, double now)
{
    while (in) {
        pl_request *r = in;
        in = in->next;
        r->next = NULL;
        e->m.requests_total++;
        if (sched_add(&e->sc, r) != 0) eng_fail(e, r, err_msg(), now);
    }
}

static void eng_cancel_all(pl_engine *e, double now)
{
    sched *s = &e->sc;
    while (s->n_running) eng_drop(e, s->running[s->n_running - 1], now);
    while (s->wait_head) eng_drop(e, s->wait_head, now);
}

/* Takes one KV snapshot for all waiting jobs; each caller formats it on
 * its own thread (engine_kv.c), so the engine only pays for the copy. */
static void eng_jobs_serve(pl_engine *e, eng_job *jobs, bool locked)
{
    if (!jobs) return;
    eng_kv_snap *snap = eng_kv_snap_take(e);
    unsigned n = 0;
    for (eng_job *j = jobs; j; j = j->next) n++;
    if (snap) eng_kv_snap_set_refs(snap, n);
    if (!locked) pthread_mutex_lock(&e->mu);
    for (eng_job *j = jobs, *nx; j; j = nx) {
        nx = j->next;
        j->snap = snap;
        j->done = true;
    }
    pthread_cond_broadcast(&e->job_cv);
    if (!locked) pthread_mutex_unlock(&e->mu);
}

static void eng_iteration(pl_engine *e, pl_request *in, bool stop)
{
    double now = eng_now();
    eng_intake(e, in, now);
    bool stalled = false;
    if (stop) {
        eng_cancel_all(e, now);
    } else {
        sched_step_begin(&e->sc);
        eng_sweep(e, now);
        stalled = !eng_run_step(e) && !sched_idle(&e->sc);
    }
    double t0 = e->prof ? eng_cpu_now() : 0;
    eng_metrics_publish(e);
    double t1 = e->prof ? eng_cpu_now() : 0;
    eng_deliver(e, stop);
    if (e->prof) e->pf.publish += t1 - t0, e->pf.deliver += eng_cpu_now() - t1;
    int crc = e->check ? sched_check(&e->sc) : 0;
    if (crc != 0 && crc != PL_ENOMEM) { /* ENOMEM: no room to check, nothing broken */
        /* a test hook: an invariant is broken, stop where it broke */
        fprintf(stderr, "pagellm engine: %s\n", err_msg());
        abort();
    }
    /* Work left but nothing ran: a step that preempted admits nothing, so
     * one such iteration can happen (the next admits); two in a row would be
     * a scheduler bug, and must not become a busy loop. */
    e->stalls = stalled ? e->stalls + 1 : 0;
    if (e->stalls > 1 || (e->n_held && sched_idle(&e->sc))) { /* polls, not a busy loop */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static bool eng_should_sleep(const pl_engine *e)
{
    return !e->stop && !e->subq_head && !e->jobs && !e->draining && sched_idle(&e->sc) && !e->n_held;
}

/* Slots the queued submissions will take (a request takes one per completion). */
static uint32_t eng_subq_slots(const pl_engine *e)
{
    uint32_t n = 0;
    for (const pl_request *r = e->subq_head; r; r = r->next) n += (uint32_t)r->n;
    return n;
}

/* The engine was idle and a request came (mu held): clients that send
 * several requests at once (a burst) are gathered into the first step, or
 * the first request would prefill alone and the others a whole prefill
 * step later - in that step the first one's decode waits for their prefill
 * (measured: 8 streams sent together over HTTP split 4 + 4 or 1 + 7 over
 * two steps, their submissions 0.2 - 4 ms apart). Waits until no
 * submission has come for gather_us, at most 4 x gather_us after the
 * first, and no longer once the queue fills every sequence slot or
 * max_queue, the engine stops or a kv_json job waits. Running sequences
 * never wait: it happens only when nothing runs. */
static void eng_gather(pl_engine *e)
{
    const double gap = e->p.gather_us * 1e-6, t_end = e->subq_head->t_submit + 4 * gap;
    while (!e->stop && !e->draining && !e->jobs && e->subq_n < e->p.max_queue &&
           eng_subq_slots(e) < e->p.ctx.max_seqs) {
        double until = e->t_last_submit + gap;
        if (until > t_end) until = t_end;
        if (eng_now() >= until) break;
        struct timespec ts = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
        pthread_cond_timedwait(&e->cv, &e->mu, &ts); /* CLOCK_MONOTONIC, like eng_now */
    }
}

static void *eng_main(void *arg)
{
    pl_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (eng_should_sleep(e)) pthread_cond_wait(&e->cv, &e->mu);
        if (!e->stop && e->draining && !e->subq_head && sched_idle(&e->sc) && !e->n_held) break; /* drained */
        if (e->subq_head && e->p.gather_us && sched_idle(&e->sc)) eng_gather(e);
        pl_request *in = e->subq_head;
        e->subq_head = e->subq_tail = NULL;
        e->waiting_pub += e->subq_n; /* they are waiting now, until the step publishes */
        e->subq_n = 0;
        eng_job *jobs = e->jobs;
        e->jobs = NULL;
        const bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        eng_jobs_serve(e, jobs, false);
        eng_iteration(e, in, stop);
        pthread_mutex_lock(&e->mu);
        if (stop) break;
    }
    /* Still under mu: later kv_json callers build it themselves, under mu. */
    e->exited = true;
    eng_job *jobs = e->jobs;
    e->jobs = NULL;
    eng_jobs_serve(e, jobs, true);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ------------------------------------------------------------ lifecycle */

static int eng_params_check(const pl_engine_params *p)
{
    if (p->ctx.no_kv_cache) return err_set(PL_EUNSUPPORTED, "engine: no_kv_cache is a single-sequence baseline");
    if (p->max_batch_tokens == 0 || p->max_batch_tokens > 65536)
        return err_set(PL_EINVAL, "engine: max_batch_tokens %u out of range 1..65536", p->max_batch_tokens);
    if (p->ctx.max_seqs == 0 || p->ctx.max_seqs > RT_STEP_MAX_ITEMS)
        return err_set(PL_EINVAL, "engine: max_seqs %u out of range 1..%d", p->ctx.max_seqs, RT_STEP_MAX_ITEMS);
    if (p->max_batch_tokens < p->ctx.max_seqs)
        return err_set(PL_EINVAL, "engine: max_batch_tokens %u < max_seqs %u: every running sequence needs a token per step",
                       p->max_batch_tokens, p->ctx.max_seqs);
    if (p->max_queue == 0) return err_set(PL_EINVAL, "engine: max_queue must be >= 1");
    if (p->gather_us > 1000000) return err_set(PL_EINVAL, "engine: gather_us %u out of range 0..1000000", p->gather_us);
    if (p->role < PL_ROLE_MIXED || p->role > PL_ROLE_DECODE) return err_set(PL_EINVAL, "engine: role %d unknown", p->role);
    if (p->role != PL_ROLE_MIXED && !p->kv_disk && !p->kv_redis)
        return err_set(PL_EINVAL, "engine: the %s role needs a KV tier (--kv-disk or --kv-redis) to share prompts through",
                       p->role == PL_ROLE_PREFILL ? "prefill" : "decode");
    return 0;
}

static int eng_sync_init(pl_engine *e)
{
    /* cv's timed waits (eng_gather) count on CLOCK_MONOTONIC, as eng_now does */
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return err_set(PL_ENOMEM, "engine: cannot make its locks");
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad) return err_set(PL_ENOMEM, "engine: cannot make its locks");
    if (pthread_mutex_init(&e->mu, NULL) || pthread_mutex_init(&e->mmu, NULL) || pthread_cond_init(&e->job_cv, NULL))
        return err_set(PL_ENOMEM, "engine: cannot make its locks");
    return 0;
}

static void eng_destroy(pl_engine *e)
{
    sched_free(&e->sc); /* releases its tier lookups */
    pl_ctx_free(e->ctx);
    store_free(e->st);  /* writes what is still queued */
    free(e->out);
    eng_grammar_free(e);
    free(e->eog);
    free(e->held);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->mmu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->job_cv);
    free(e);
}

static void eng_metrics_init(pl_engine_metrics *m)
{
    memset(m, 0, sizeof *m);
    eng_hist_init(&m->ttft);
    eng_hist_init(&m->itl);
    eng_hist_init(&m->e2e);
}

/* The vocabulary's end-of-generation ids, once: min_tokens bans them. */
static int eng_eog_init(pl_engine *e, const pl_vocab *v)
{
    const int32_t nv = pl_vocab_size(v);
    for (int32_t i = 0; i < nv; i++) e->n_eog += pl_vocab_is_eog(v, i);
    e->eog = mem_calloc(e->n_eog ? e->n_eog : 1, sizeof *e->eog);
    if (!e->eog) return err_set(PL_ENOMEM, "engine: out of memory");
    for (int32_t i = 0, k = 0; i < nv; i++)
        if (pl_vocab_is_eog(v, i)) e->eog[k++] = i;
    return 0;
}

int pl_engine_new(pl_engine **out, pl_model *m, const pl_engine_params *params)
{
    pl_engine_params p;
    if (params) p = *params;
    else pl_engine_params_default(&p);
    if (!out || !m) return err_set(PL_EINVAL, "pl_engine_new: NULL argument");
    int rc = eng_params_check(&p);
    if (rc) return rc;
    pl_engine *e = mem_calloc(1, sizeof *e);
    if (!e) return PL_ENOMEM;
    if (eng_sync_init(e)) { free(e); return PL_ENOMEM; }
    e->model = m;
    e->p = p;
    pl_ctx_params cp = p.ctx;
    cp.max_batch = p.max_batch_tokens; /* one step = one forward pass */
    rc = pl_ctx_new(&e->ctx, m, &cp);
    const uint32_t nv = pl_model_n_vocab(m);
    if (!rc) rc = sched_init(&e->sc, e->ctx, &p, nv);
    if (!rc) rc = eng_tiers_open(e, &e->st);
    if (rc) { eng_destroy(e); return rc; }
    if (!rc) rc = eng_eog_init(e, pl_model_vocab(m));
    if (rc) { eng_destroy(e); return rc; }
    e->lim = (req_limits){pl_model_vocab(m), nv, pl_ctx_n_ctx(e->ctx), p.ctx.max_seqs, pl_ctx_unbounded(e->ctx),
                          e->eog, e->n_eog, pl_model_n_embd(m), (int)pl_model_pooling(m)};
    e->accepting = true;
    const char *chk = getenv("PAGELLM_ENGINE_CHECK");
    e->check = chk && strcmp(chk, "0") != 0;
    const char *prof = getenv("PAGELLM_ENGINE_PROFILE");
    e->prof = prof && strcmp(prof, "0") != 0;
    eng_metrics_init(&e->m);
    pl_ctx_kv_stats(e->ctx, &e->m.kv);
    e->pub = e->m;
    if (pthread_create(&e->thread, NULL, eng_main, e) != 0) {
        eng_destroy(e);
        return err_set(PL_ENOMEM, "engine: cannot start its thread");
    }
    e->thread_ok = true;
    *out = e;
    return 0;
}

void pl_engine_shutdown(pl_engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->accepting = false;
    e->draining = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void eng_prof_print(const pl_engine *e)
{
    const eng_prof *p = &e->pf;
    const double all = p->plan + p->forward + p->emit + p->publish + p->deliver, per = p->steps ? 1e6 / p->steps : 0;
    fprintf(stderr,
            "pagellm engine profile: %llu steps, %llu items, %llu tokens sampled; engine-thread CPU us per step: "
            "forward %.1f, plan %.1f, emit %.1f, publish %.1f, deliver %.1f; outside the forward pass: %.2f%%\n",
            (unsigned long long)p->steps, (unsigned long long)p->items, (unsigned long long)p->tokens, p->forward * per,
            p->plan * per, p->emit * per, p->publish * per, p->deliver * per,
            all > 0 ? 100 * (all - p->forward) / all : 0);
}

void pl_engine_free(pl_engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->accepting = false;
    e->stop = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_ok) pthread_join(e->thread, NULL);
    /* The thread took every submission before it stopped; no request is
     * referenced by the engine any more. */
    assert(!e->subq_head && sched_idle(&e->sc) && e->n_out == 0 && e->n_held == 0);
    if (e->prof) eng_prof_print(e);
    eng_destroy(e);
}

/* --------------------------------------------------------------- submit */

int pl_engine_submit(pl_engine *e, const pl_request_params *p, pl_request **out)
{
    if (!e || !out) return err_set(PL_EINVAL, "pl_engine_submit: NULL argument");
    pthread_mutex_lock(&e->mu);
    const bool open = e->accepting;
    const uint64_t id = ++e->next_id;
    pthread_mutex_unlock(&e->mu);
    if (!open) return err_set(PL_EUNSUPPORTED, "engine: shut down, not taking requests");
    pl_request *r;
    pl_request_params capped;
    if (e->p.role == PL_ROLE_PREFILL && p && p->max_tokens > 1) { /* a prefill replica stops at the first token */
        capped = *p;
        capped.max_tokens = 1;
        p = &capped;
    }
    int rc = req_new(&r, p, &e->lim, id);
    if (rc) return rc;
    pthread_mutex_lock(&e->mu);
    if (!e->accepting) rc = err_set(PL_EUNSUPPORTED, "engine: shut down, not taking requests");
    else if (e->subq_n + e->waiting_pub >= e->p.max_queue)
        rc = err_set(PL_EFULL, "engine: %u requests waiting (max_queue %u)", e->subq_n + e->waiting_pub,
                     e->p.max_queue);
    if (!rc) {
        if (e->subq_tail) e->subq_tail->next = r;
        else e->subq_head = r;
        e->subq_tail = r;
        e->subq_n++;
        e->t_last_submit = eng_now();
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (rc) {
        req_release(r);
        req_release(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* ------------------------------------------------------ metrics, kv json */

void pl_engine_metrics_get(pl_engine *e, pl_engine_metrics *out)
{
    if (!e || !out) return;
    pthread_mutex_lock(&e->mmu);
    *out = e->pub;
    pthread_mutex_unlock(&e->mmu);
    /* the tiers' counters move on their own threads, also while the engine sleeps: read them now */
    eng_tiers_metrics(e->st, out);
}

char *pl_engine_kv_json_ex(pl_engine *e, unsigned flags)
{
    eng_job job = {0};
    eng_kv_snap *snap;
    if (!e) {
        err_set(PL_EINVAL, "pl_engine_kv_json: NULL engine");
        return NULL;
    }
    if (flags & ~(unsigned)PL_KV_JSON_COMPACT) {
        err_set(PL_EINVAL, "pl_engine_kv_json_ex: unknown flags 0x%x", flags);
        return NULL;
    }
    pthread_mutex_lock(&e->mu);
    if (e->exited) {
        snap = eng_kv_snap_take(e); /* the thread is gone; mu keeps callers apart */
    } else {
        job.next = e->jobs;
        e->jobs = &job;
        pthread_cond_signal(&e->cv);
        while (!job.done) pthread_cond_wait(&e->job_cv, &e->mu);
        snap = job.snap;
    }
    pthread_mutex_unlock(&e->mu);
    char *res = snap ? eng_kv_snap_json(snap, flags) : NULL; /* formatted here, not on the engine thread */
    eng_kv_snap_release(snap);
    if (!res) err_set(PL_ENOMEM, "engine: out of memory building the KV JSON");
    return res;
}

char *pl_engine_kv_json(pl_engine *e) { return pl_engine_kv_json_ex(e, 0); }
