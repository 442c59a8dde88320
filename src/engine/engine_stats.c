/* engine_stats.c - the engine's metrics: latency histograms and the
 * snapshot published after every step. (The /v1/kv view: engine_kv.c.)
 *
 * Histograms are Prometheus-style: count[i] is the number of observations
 * <= le[i] (cumulative), the last bound is +Inf, so count[last] == n.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

static const double eng_hist_bounds[PL_HIST_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, INFINITY,
};

void eng_hist_init(pl_histogram *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->le, eng_hist_bounds, sizeof h->le);
}

void eng_hist_observe(pl_histogram *h, double v)
{
    if (!(v >= 0)) v = 0; /* a clock oddity must not poison the sum */
    for (int i = 0; i < PL_HIST_BUCKETS; i++)
        if (v <= h->le[i]) h->count[i]++;
    h->sum += v;
    h->n++;
}

void eng_metrics_publish(pl_engine *e)
{
    pl_engine_metrics *m = &e->m;
    const sched *s = &e->sc;
    pl_ctx_kv_stats(e->ctx, &m->kv);
    m->running = s->n_running;
    m->waiting = s->n_waiting;
    m->preemptions = s->st.preemptions;
    m->prefill_cuts = s->st.cost_cuts;
    m->key_cost_prompt = s->key_cost;
    m->key_cost_decode = s->key_cost_decode;
    m->key_cost_model = s->learn.key_cost0;
    m->prefix_query_tokens = s->st.prefix_query_tokens;
    m->prefix_hit_tokens = s->st.prefix_hit_tokens;
    m->prompt_tokens = s->st.prompt_tokens;
    m->tier_hit_tokens = s->st.tier_hit_tokens; /* the tiers' own counters: pl_engine_metrics_get */
    if (m->steps != e->steps_summed) { /* a step ran since the last snapshot */
        e->steps_summed = m->steps;
        if (m->running > m->running_peak) m->running_peak = m->running, m->kv_utilisation_at_peak = m->kv.utilisation;
        m->running_steps += m->running;
        m->kv_live_byte_steps += m->kv.bytes_live;
        m->kv_allocated_byte_steps += m->kv.bytes_allocated;
    }
    pthread_mutex_lock(&e->mmu);
    e->pub = *m;
    pthread_mutex_unlock(&e->mmu);
    pthread_mutex_lock(&e->mu);
    e->waiting_pub = s->n_waiting;
    pthread_mutex_unlock(&e->mu);
}
