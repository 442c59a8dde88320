/* engine.h - the engine's internals, shared by engine.c (thread, submit,
 * step loop), engine_emit.c (sampling, text, events) and engine_stats.c
 * (metrics, /v1/kv JSON).
 *
 * Threads and locks:
 *
 *   callers ──submit──> subq ─┐  (mu)            ┌──> request mu: events
 *   callers ──kv_json─> jobs ─┤                  │
 *   shutdown/free ──> flags ──┘                  │
 *                         engine thread: intake, sweep, plan, rt_step,
 *                         sample, publish (mmu), deliver ┘
 *
 * Only the engine thread touches ctx, sc, m and the outbox. Lock order:
 * a request's mu is never held while taking the engine's mu or mmu, and
 * the engine thread holds no lock while it runs a step. Events of a step
 * are delivered after its metrics are published, so a caller that has seen
 * an event sees metrics at least as new as it.
 */
#ifndef PL_ENGINE_ENGINE_H
#define PL_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/request.h"
#include "engine/scheduler.h"
#include "pagellm.h"

/* An event waiting for the end of the step (engine thread). */
typedef struct {
    pl_request *r;
    bool final;      /* the request's last event: the engine drops its reference after it */
    bool pushed;     /* already queued to the request (out of memory: spilled early) */
    pl_event ev;
} eng_out;

/* PAGELLM_ENGINE_PROFILE=1: CPU seconds of the engine thread in each part
 * of its iterations (pl_engine_free prints them on stderr): what the engine
 * adds to the forward passes. Thread CPU time, so that a loaded machine's
 * preemptions do not count; with -t > 1 `forward` is the engine thread's
 * share of the pass only. */
typedef struct {
    double plan;     /* sched_plan (and preemption retries) */
    double forward;  /* rt_step: the batched forward pass */
    double emit;     /* sampling, logprobs, detokenizing, stop strings, events */
    double publish;  /* metrics snapshot (KV stats) */
    double deliver;  /* events handed to their requests (waking readers) */
    uint64_t steps, items, tokens;
} eng_prof;

/* engine_kv.c: a copy of the pool's and scheduler's state for /v1/kv. */
typedef struct eng_kv_snap eng_kv_snap;
/* A request's final event held back (prefill role) until the blocks its
 * prompt published are written to the tiers, so that a decode replica
 * asked next finds them; at most ENG_HOLD_MAX_S. */
typedef struct {
    eng_out o;
    uint64_t mark;   /* store_put_mark when it was held */
    double until;    /* eng_now() after which it goes anyway */
} eng_held;

#define ENG_HOLD_MAX_S 5.0

/* A pl_engine_kv_json call waiting for the engine thread (on its stack). */
typedef struct eng_job {
    struct eng_job *next;
    eng_kv_snap *snap; /* shared by the jobs served together; NULL: out of memory */
    bool done;
} eng_job;

struct pl_engine {
    pl_model *model;
    pl_ctx *ctx;
    pl_engine_params p;
    req_limits lim;
    int32_t *eog;              /* [n_eog] end-of-generation ids of the vocabulary */
    uint32_t n_eog;
    pthread_t thread;
    bool thread_ok;

    pthread_mutex_t mu;        /* guards the block below */
    pthread_cond_t cv;         /* the engine thread sleeps on it */
    pthread_cond_t job_cv;     /* kv_json callers sleep on it */
    pl_request *subq_head, *subq_tail;
    uint32_t subq_n;
    uint32_t waiting_pub;      /* the scheduler's waiting count after the newest step */
    uint64_t next_id;
    double t_last_submit;      /* eng_now() of the newest submission (eng_gather) */
    bool accepting, draining, stop, exited;
    eng_job *jobs;

    pthread_mutex_t mmu;       /* guards pub */
    pl_engine_metrics pub;

    bool check;                /* PAGELLM_ENGINE_CHECK: sched_check after every iteration */
    bool prof;                 /* PAGELLM_ENGINE_PROFILE: fill pf */
    eng_prof pf;

    store *st;                 /* the KV tiers, or NULL; its stats are thread-safe */

    /* engine thread only */
    sched sc;
    pl_engine_metrics m;
    uint64_t steps_summed;             /* m.steps when the per-step sums last took a step */
    eng_out *out;
    size_t n_out, cap_out;
    int stalls;                        /* iterations in a row that ran nothing with work left */
    eng_held *held;                    /* prefill role: final events waiting for the tiers */
    size_t n_held, cap_held;
    eng_out spare;                     /* out of memory: one event that could not be queued */
    bool spare_used;
    char piece[4096];                  /* one token's text from the detokenizer */
    char sbuf[2 * PL_MAX_STOP_LEN + 1]; /* pl_stop output: a slice + the longest stop + NUL */
    struct eng_grammar *gm;            /* token trie and mask scratch, made with the first grammar */
};

/* engine_emit.c */
void eng_on_logits(pl_engine *e, sched_seq *q, const float *logits, double now);
/* A prompt-logprobs chunk of n rows just ran (q->n_done counts it): the
 * figures of the prompt tokens they predict, then eng_on_logits with the
 * last row if the chunk ended the sequence's tokens. */
void eng_prompt_rows(pl_engine *e, sched_seq *q, const float *rows, uint32_t n, double now);
void eng_drop(pl_engine *e, sched_seq *q, double now);           /* cancel: DONE "cancelled", removed */
void eng_fail(pl_engine *e, pl_request *r, const char *msg, double now); /* ERROR; sweep removes its seqs */
void eng_sweep(pl_engine *e, double now);                        /* drops failed and cancelled seqs */
/* Hands the step's events to their requests; with flush, also every held one. */
void eng_deliver(pl_engine *e, bool flush);

/* engine_grammar.c: constrained sampling. eng_grammar_logits returns the
 * logits with every token the grammar of c forbids at -inf (a scratch
 * row), or NULL with the error text set; *complete is set instead when the
 * grammar is complete and nothing may follow (the completion ends
 * "stop" without sampling). eng_grammar_take advances c's state by the
 * sampled token. */
const float *eng_grammar_logits(pl_engine *e, pl_request *r, req_comp *c, const float *logits, bool *complete);
int eng_grammar_take(pl_engine *e, pl_request *r, req_comp *c, int32_t tok);
void eng_grammar_free(pl_engine *e);

/* engine_stats.c */
void eng_hist_init(pl_histogram *h);
void eng_hist_observe(pl_histogram *h, double v);
void eng_metrics_publish(pl_engine *e);
/* engine_kv.c. take: the engine thread (or under mu once it has exited),
 * one reference; set_refs before handing it to several callers, each of
 * which formats it (any thread) and releases it. NULL: out of memory. */
eng_kv_snap *eng_kv_snap_take(pl_engine *e);
void eng_kv_snap_set_refs(eng_kv_snap *s, unsigned n);
char *eng_kv_snap_json(const eng_kv_snap *s, unsigned flags);
void eng_kv_snap_release(eng_kv_snap *s);
void eng_kv_snap_free(eng_kv_snap *s);

/* engine_tiers.c: the KV tiers of p (kv_disk, kv_redis) as a store over
 * ctx's prefix cache, attached to the context and the scheduler; *out =
 * NULL when p names none. */
int eng_tiers_open(pl_engine *e, store **out);
void eng_tiers_metrics(store *st, pl_engine_metrics *m);

#endif
