/* engine_stats.c - the engine's metrics (latency histograms, the snapshot
 * published after every step) and the /v1/kv JSON view of the block pool.
 *
 * Histograms are Prometheus-style: count[i] is the number of observations
 * <= le[i] (cumulative), the last bound is +Inf, so count[last] == n.
 *
 * The KV JSON (built by the engine thread, or under the engine's mutex once
 * the thread has exited):
 *   {"block_size":16, "blocks_total":N, "blocks_used":.., "blocks_cached":..,
 *    "blocks_free":.., "block_bytes":.., "tokens":.., "utilisation":..,
 *    "sequences":[{"seq":3, "request":12, "index":0, "completions":1,
 *                  "tokens":40, "state":"decode", "blocks":[7,2,9]}, ...],
 *    "blocks":[{"id":0, "state":"used", "refcount":2, "cached":true,
 *               "owners":[{"seq":3, "request":12}, ...]}, ...]}
 * state is the pool's: "free", "used" (held by sequences) or "cached"
 * (held by none, kept for prefix hits); cached says the block carries a
 * prefix-cache key (a used block can be cached too).
 */
#include <jansson.h>
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
    m->prefix_query_tokens = s->st.prefix_query_tokens;
    m->prefix_hit_tokens = s->st.prefix_hit_tokens;
    m->prompt_tokens = s->st.prompt_tokens;
    m->tier_hit_tokens = s->st.tier_hit_tokens; /* the tiers' own counters: pl_engine_metrics_get */
    pthread_mutex_lock(&e->mmu);
    e->pub = *m;
    pthread_mutex_unlock(&e->mmu);
    pthread_mutex_lock(&e->mu);
    e->waiting_pub = s->n_waiting;
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- kv json */

static const char *eng_block_state(uint8_t st)
{
    switch (st) {
    case KV_BLOCK_FREE: return "free";
    case KV_BLOCK_USED: return "used";
    case KV_BLOCK_CACHED: return "cached";
    default: return "?";
    }
}

static void jset_int(json_t *o, const char *k, long long v) { json_object_set_new(o, k, json_integer(v)); }

/* The running sequences, and owners[b] = who holds block b. */
static json_t *eng_json_seqs(pl_engine *e, json_t **owners)
{
    json_t *arr = json_array();
    const sched *s = &e->sc;
    for (uint32_t i = 0; arr && i < s->n_running; i++) {
        const sched_seq *q = s->running[i];
        const kv_seq *kv = rt_seq_kv(e->ctx, q->seq);
        json_t *o = json_object(), *bl = json_array();
        jset_int(o, "seq", q->seq);
        jset_int(o, "request", (long long)q->r->id);
        jset_int(o, "index", q->comp_lo);
        jset_int(o, "completions", q->n_comp);
        jset_int(o, "tokens", kv ? kv->n_tokens : 0);
        json_object_set_new(o, "state", json_string(sched_total(q) - q->n_done == 1 && q->r->comp[q->comp_lo].n_gen
                                                        ? "decode" : "prefill"));
        for (uint32_t j = 0; kv && j < kv->n_blocks; j++) {
            uint32_t b = kv->table[j];
            json_array_append_new(bl, json_integer(b));
            if (!owners[b]) owners[b] = json_array();
            json_t *w = json_object();
            jset_int(w, "seq", q->seq);
            jset_int(w, "request", (long long)q->r->id);
            json_array_append_new(owners[b], w);
        }
        json_object_set_new(o, "blocks", bl);
        json_array_append_new(arr, o);
    }
    return arr;
}

static json_t *eng_json_blocks(const kv_pool *pool, json_t **owners)
{
    json_t *arr = json_array();
    for (uint32_t b = 0; arr && b < pool->n_blocks; b++) {
        const kv_block *k = &pool->blocks[b];
        json_t *o = json_object();
        jset_int(o, "id", b);
        json_object_set_new(o, "state", json_string(eng_block_state(k->state)));
        jset_int(o, "refcount", k->refcount);
        json_object_set_new(o, "cached", json_boolean(k->flags & KV_BLOCK_HASHED));
        json_object_set_new(o, "owners", owners[b] ? owners[b] : json_array());
        owners[b] = NULL;
        json_array_append_new(arr, o);
    }
    return arr;
}

char *eng_kv_json(pl_engine *e)
{
    kv_pool *pool = rt_ctx_pool(e->ctx);
    pl_kv_stats st;
    pl_ctx_kv_stats(e->ctx, &st);
    json_t **owners = calloc(pool->n_blocks, sizeof *owners);
    json_t *root = json_object();
    if (!owners || !root) {
        free(owners);
        json_decref(root);
        return NULL;
    }
    jset_int(root, "block_size", st.block_size);
    jset_int(root, "blocks_total", st.blocks_total);
    jset_int(root, "blocks_used", st.blocks_used);
    jset_int(root, "blocks_cached", st.blocks_cached);
    jset_int(root, "blocks_free", st.blocks_free);
    jset_int(root, "block_bytes", (long long)st.block_bytes);
    jset_int(root, "tokens", (long long)st.tokens);
    json_object_set_new(root, "utilisation", json_real(st.utilisation));
    json_object_set_new(root, "sequences", eng_json_seqs(e, owners));
    json_object_set_new(root, "blocks", eng_json_blocks(pool, owners));
    for (uint32_t b = 0; b < pool->n_blocks; b++) json_decref(owners[b]);
    free(owners);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}
