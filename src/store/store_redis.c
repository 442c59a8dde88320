/* store_redis.c - the Redis Cluster tier as a store_backend; see store_redis.h.
 * Two cluster clients, one per I/O thread: gets (the store's reader) on rc,
 * sets (its writer, at the lowest priority) on wc, so that a lookup never
 * queues behind a write nor behind a thread that is waiting for idle CPU. */
#include "store/store_redis.h"

#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    store_backend base; /* first: a store_backend * is a store_redis * */
    redis_cluster *rc; /* gets */
    redis_cluster *wc; /* sets */
    int64_t ttl_ms;
} store_redis;

void store_redis_key(const store_key *key, char out[STORE_REDIS_KEY_LEN])
{
    static const char hex[] = "0123456789abcdef";
    memcpy(out, STORE_REDIS_KEY_PREFIX, 5);
    for (int w = 0; w < 2; w++)
        for (int d = 0; d < 16; d++) out[5 + w * 16 + d] = hex[(key->h[w] >> (60 - 4 * d)) & 15];
}

/* The n keys as strings in one allocation: *names (n x 37 bytes) and the
 * pointer and length arrays redis_cluster takes. */
static int key_names(const store_key *keys, size_t n, char **names, const char ***ptrs, size_t **lens)
{
    *names = malloc(n * STORE_REDIS_KEY_LEN + 1);
    *ptrs = malloc(n * sizeof **ptrs);
    *lens = malloc(n * sizeof **lens);
    if (!*names || !*ptrs || !*lens) {
        free(*names), free(*ptrs), free(*lens);
        return err_set(PL_ENOMEM, "Redis tier: names of %zu keys", n);
    }
    for (size_t i = 0; i < n; i++) {
        store_redis_key(&keys[i], *names + i * STORE_REDIS_KEY_LEN);
        (*ptrs)[i] = *names + i * STORE_REDIS_KEY_LEN;
        (*lens)[i] = STORE_REDIS_KEY_LEN;
    }
    return 0;
}

static int sr_get_many(store_backend *b, const store_key *keys, size_t n, uint8_t **vals, size_t *lens)
{
    store_redis *s = (store_redis *)b;
    char *names;
    const char **ptrs;
    size_t *klens;
    if (n == 0) return 0;
    int rc = key_names(keys, n, &names, &ptrs, &klens);
    if (rc) {
        for (size_t i = 0; i < n; i++) vals[i] = NULL, lens[i] = 0;
        return rc;
    }
    rc = redis_cluster_get_many(s->rc, ptrs, klens, n, vals, lens);
    free(names), free(ptrs), free(klens);
    return rc;
}

static int sr_put_many(store_backend *b, const store_key *keys, size_t n, const uint8_t *const *vals,
                       const size_t *lens)
{
    store_redis *s = (store_redis *)b;
    char *names;
    const char **ptrs;
    size_t *klens;
    if (n == 0) return 0;
    int rc = key_names(keys, n, &names, &ptrs, &klens);
    if (rc) return rc;
    rc = redis_cluster_set_many(s->wc, ptrs, klens, n, vals, lens, s->ttl_ms);
    free(names), free(ptrs), free(klens);
    return rc;
}

static void sr_close(store_backend *b)
{
    store_redis *s = (store_redis *)b;
    if (!s) return;
    redis_cluster_close(s->rc);
    redis_cluster_close(s->wc);
    free(s);
}

store_backend *store_redis_open_opts(const char *hostports, int ttl_s, const redis_cluster_opts *opts, char *err,
                                     size_t errlen)
{
    if (ttl_s < 0) {
        snprintf(err, errlen, "--kv-redis-ttl: %d is negative (seconds; 0 = no expiry)", ttl_s);
        return NULL;
    }
    store_redis *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "Redis tier: out of memory");
        return NULL;
    }
    s->rc = redis_cluster_open(hostports, opts);
    s->wc = s->rc ? redis_cluster_open(hostports, opts) : NULL;
    if (!s->rc || !s->wc) {
        snprintf(err, errlen, "%s", err_msg());
        redis_cluster_close(s->rc);
        free(s);
        return NULL;
    }
    s->ttl_ms = (int64_t)ttl_s * 1000;
    s->base.name = "redis";
    s->base.get_many = sr_get_many;
    s->base.put_many = sr_put_many;
    s->base.close = sr_close;
    return &s->base;
}

store_backend *store_redis_open(const char *hostports, int ttl_s, char *err, size_t errlen)
{
    return store_redis_open_opts(hostports, ttl_s, NULL, err, errlen);
}

void store_redis_stats_get(const store_backend *b, store_redis_stats *out)
{
    const store_redis *s = (const store_redis *)b;
    redis_cluster_stats k, w;
    redis_cluster_stats_get(s->rc, &k);
    redis_cluster_stats_get(s->wc, &w);
    k.sets_ok += w.sets_ok, k.sets_dropped += w.sets_dropped, k.errors += w.errors, k.redirects += w.redirects;
    k.reconnects += w.reconnects, k.connect_failures += w.connect_failures, k.bytes_written += w.bytes_written;
    k.hits += w.hits, k.misses += w.misses, k.bytes_read += w.bytes_read;
    *out = (store_redis_stats){.hits = k.hits,
                               .misses = k.misses,
                               .puts = k.sets_ok,
                               .dropped = k.sets_dropped,
                               .errors = k.errors,
                               .redirects = k.redirects,
                               .reconnects = k.reconnects,
                               .connect_failures = k.connect_failures,
                               .bytes_read = k.bytes_read,
                               .bytes_written = k.bytes_written};
}
