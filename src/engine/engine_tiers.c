/* engine_tiers.c - the engine's KV tiers (src/store): the disk and Redis
 * backends named by pl_engine_params, chained disk first, keyed and salted
 * like the context's prefix cache; and their counters for the metrics.
 */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine.h"
#include "store/store_disk.h"
#include "store/store_entry.h"
#include "store/store_redis.h"

#define ENG_KV_DISK_MAX_DEFAULT ((uint64_t)10 << 30)

int eng_tiers_open(pl_engine *e, store **out)
{
    const pl_engine_params *p = &e->p;
    *out = NULL;
    if (!p->kv_disk && !p->kv_redis) return 0;
    const prefix_cache *pc = rt_ctx_prefix_cache(e->ctx);
    if (!pc || !p->prefix_cache)
        return err_set(PL_EINVAL, "KV tiers (--kv-disk, --kv-redis) need the paged layout with the prefix cache");
    const kv_pool *pool = rt_ctx_pool(e->ctx);
    store_params sp = {.block_size = pool->g.s.block_size, .block_bytes = rt_ctx_tier_block_bytes(e->ctx),
                       .timeout_ms = p->kv_tier_timeout_ms,
                       .urgent_puts = p->role == PL_ROLE_PREFILL /* its answers wait for the writes */};
    memcpy(sp.salt, pc->salt, sizeof sp.salt);
    const uint64_t entry = store_entry_size(sp.block_size, sp.block_bytes);
    if (p->kv_disk && p->kv_disk_max && p->kv_disk_max < entry)
        return err_set(PL_EINVAL, "--kv-disk-max %llu bytes is less than one KV block's entry (%llu bytes)",
                       (unsigned long long)p->kv_disk_max, (unsigned long long)entry);
    store *st;
    int rc = store_new(&st, &sp);
    if (rc) return rc;
    char err[512];
    if (p->kv_disk) {
        store_backend *b = store_disk_open(p->kv_disk, p->kv_disk_max ? p->kv_disk_max : ENG_KV_DISK_MAX_DEFAULT, err,
                                           sizeof err);
        rc = b ? store_add_tier(st, b) : err_set(PL_EIO, "%s", err);
    }
    if (!rc && p->kv_redis) {
        store_backend *b = store_redis_open(p->kv_redis, (int)p->kv_redis_ttl, err, sizeof err);
        rc = b ? store_add_tier(st, b) : err_set(PL_EIO, "%s", err);
    }
    if (rc) {
        store_free(st);
        return rc;
    }
    rt_ctx_set_store(e->ctx, st);
    sched_set_store(&e->sc, st);
    *out = st;
    return 0;
}

static void eng_tier_hist(pl_histogram *h, const store_hist *s)
{
    _Static_assert(PL_HIST_BUCKETS == STORE_HIST_BUCKETS, "one bucket layout");
    memcpy(h->le, s->le, sizeof h->le);
    memcpy(h->count, s->count, sizeof h->count);
    h->sum = s->sum;
    h->n = s->n;
}

void eng_tiers_metrics(store *st, pl_engine_metrics *m)
{
    m->n_tiers = 0;
    m->has_redis = false;
    for (int i = 0; st && i < store_n_tiers(st) && i < PL_MAX_TIERS; i++) {
        store_tier_stats s;
        store_tier_stats_get(st, i, &s);
        pl_tier_metrics *t = &m->tiers[m->n_tiers++];
        snprintf(t->name, sizeof t->name, "%s", store_tier_name(st, i));
        t->hits = s.hits;
        t->misses = s.misses;
        t->rejected = s.rejected;
        t->bytes_read = s.bytes_read;
        t->bytes_written = s.bytes_written;
        t->writes = s.puts;
        t->errors = s.errors;
        t->dropped_writes = s.dropped_writes;
        eng_tier_hist(&t->get_latency, &s.get_latency);
        eng_tier_hist(&t->put_latency, &s.put_latency);
        if (strcmp(t->name, "redis") == 0) {
            store_redis_stats r;
            store_redis_stats_get(store_tier_backend(st, i), &r);
            m->has_redis = true;
            m->redis_redirects = r.redirects;
            m->redis_reconnects = r.reconnects;
            m->redis_connect_failures = r.connect_failures;
            m->redis_errors = r.errors;
        }
    }
}
