/* tier_opts.c - the shared KV tier flags; see tier_opts.h. */
#include "tier_opts.h"

#include <string.h>

void tier_opts_table(tier_opts *t, cli_opt *opts, int *n)
{
    const cli_opt add[TIER_OPTS_N] = {
        {"kv-disk", 0, CLI_STR, &t->kv_disk, 0, 0, "DIR", "KV tier on disk: prompt blocks are written behind to DIR and found again by a later process on DIR, e.g. after a restart (one process per DIR at a time)"},
        {"kv-disk-max", 0, CLI_SIZE, &t->kv_disk_max, 1, 1e18, "BYTES", "size limit of --kv-disk, e.g. 20G; least recently used blocks go first (default 10G)"},
        {"kv-redis", 0, CLI_STR, &t->kv_redis, 0, 0, "HOST:PORT[,...]", "KV tier in a Redis Cluster shared by replicas (asked after --kv-disk)"},
        {"kv-redis-ttl", 0, CLI_INT, &t->kv_redis_ttl, 0, 1 << 30, "S", "seconds a block lives in Redis (default 0: no expiry)"},
        {"kv-tier-timeout-ms", 0, CLI_INT, &t->kv_tier_timeout_ms, 1, 60000, "MS", "a prompt waits at most MS ms for the KV tiers; what is not found by then is recomputed (default 50)"},
    };
    for (int i = 0; i < TIER_OPTS_N; i++) opts[(*n)++] = add[i];
}

bool tier_opts_any(const tier_opts *t) { return t->kv_disk || t->kv_redis; }

int tier_opts_check(const char *cmd, const tier_opts *t, const gen_opts *g, bool no_prefix_cache)
{
    if ((t->kv_disk_max || t->kv_tier_timeout_ms) && !tier_opts_any(t)) {
        cli_error(cmd, "--kv-disk-max and --kv-tier-timeout-ms need --kv-disk or --kv-redis");
        return 2;
    }
    if (t->kv_redis_ttl && !t->kv_redis) { cli_error(cmd, "--kv-redis-ttl needs --kv-redis"); return 2; }
    if (tier_opts_any(t) && no_prefix_cache) {
        cli_error(cmd, "--kv-disk / --kv-redis need the prefix cache (drop --no-prefix-cache)");
        return 2;
    }
    if (tier_opts_any(t) && g->no_kv_cache) {
        cli_error(cmd, "--kv-disk / --kv-redis need the KV cache (drop --no-kv-cache)");
        return 2;
    }
    if (tier_opts_any(t) && strcmp(g->kv_layout, "paged") != 0) {
        cli_error(cmd, "--kv-disk / --kv-redis need the paged KV layout (drop --kv-layout %s)", g->kv_layout);
        return 2;
    }
    return 0;
}

void tier_opts_engine_params(const tier_opts *t, pl_engine_params *ep)
{
    ep->kv_disk = t->kv_disk;
    ep->kv_disk_max = t->kv_disk_max;
    ep->kv_redis = t->kv_redis;
    ep->kv_redis_ttl = (uint32_t)t->kv_redis_ttl;
    ep->kv_tier_timeout_ms = (uint32_t)t->kv_tier_timeout_ms;
}
