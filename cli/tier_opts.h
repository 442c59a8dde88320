/* tier_opts.h - the KV tier flags (--kv-disk, --kv-disk-max, --kv-redis,
 * --kv-redis-ttl, --kv-tier-timeout-ms) that serve and run share: one
 * table and one check, so that both spell and refuse them alike. The tiers
 * live in the engine (pl_engine_params; docs/kv-tiers.md). */
#ifndef PL_CLI_TIER_OPTS_H
#define PL_CLI_TIER_OPTS_H

#include <stdbool.h>

#include "cli.h"
#include "gen_opts.h"
#include "pagellm.h"

typedef struct {
    const char *kv_disk, *kv_redis;
    uint64_t kv_disk_max;
    int kv_redis_ttl, kv_tier_timeout_ms;
} tier_opts;

/* Appends the flags to opts (room for TIER_OPTS_N more) at *n. */
#define TIER_OPTS_N 5
void tier_opts_table(tier_opts *t, cli_opt *opts, int *n);

/* Whether a tier is asked for. */
bool tier_opts_any(const tier_opts *t);

/* Refuses flags that need a tier without one, and tiers without the paged
 * KV cache or the prefix cache (the tiers hold prefix-cache blocks): prints
 * why and returns 2, else 0. */
int tier_opts_check(const char *cmd, const tier_opts *t, const gen_opts *g, bool no_prefix_cache);

/* Copies the tiers into the engine's parameters. */
void tier_opts_engine_params(const tier_opts *t, pl_engine_params *ep);

#endif
