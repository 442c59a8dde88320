/* store_redis.h - the Redis Cluster KV tier: a store_backend over
 * redis_cluster.h.
 *
 * Keys. A store_key becomes the 37-byte string "plkv:" + 32 lowercase hex
 * digits (h[0] then h[1], each most significant digit first). Hex rather
 * than the 16 raw bytes so that redis-cli shows and types the keys; the
 * prefix marks pagellm's entries in a shared cluster (and lets an operator
 * drop them with SCAN MATCH plkv:*). There is no {hash tag}: blocks spread
 * over every slot, so over every master.
 *
 * Values are stored as given (binary-safe), with SET ... PX ttl; the store
 * verifies what comes back. get_many / put_many are one pipelined batch
 * per master (redis_cluster_get_many / _set_many), each on its own cluster
 * client (the store's reader and writer threads call them at once), so
 * every node sees two connections per process and the counters below are
 * the two clients' sums.
 */
#ifndef PL_STORE_STORE_REDIS_H
#define PL_STORE_STORE_REDIS_H

#include "store/redis_cluster.h"
#include "store/store_backend.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_REDIS_KEY_PREFIX "plkv:"
#define STORE_REDIS_KEY_LEN 37 /* prefix + 32 hex digits */

typedef struct {
    uint64_t hits, misses;   /* gets, per key */
    uint64_t puts, dropped;  /* puts acknowledged, puts lost */
    uint64_t errors;         /* bad replies, I/O errors, timeouts, failed connects */
    uint64_t redirects;      /* MOVED + ASK followed */
    uint64_t reconnects;     /* connections again to a node that had failed */
    uint64_t connect_failures; /* connect attempts that failed (each starts a backoff) */
    uint64_t bytes_read, bytes_written; /* value bytes */
} store_redis_stats;

/* Opens the tier on the cluster reached through hostports
 * ("HOST:PORT[,HOST:PORT...]", any subset of the nodes), entries living
 * ttl_s seconds (0: no expiry). NULL on failure with err (errlen bytes)
 * saying why: a bad seed string, or no seed answering CLUSTER SLOTS (a
 * refused connection, NOAUTH / WRONGPASS, cluster support disabled). opts
 * may be NULL (redis_cluster_default_opts); its timeouts, backoff and
 * AUTH user / password are copied. */
store_backend *store_redis_open_opts(const char *hostports, int ttl_s, const redis_cluster_opts *opts, char *err,
                                     size_t errlen);
store_backend *store_redis_open(const char *hostports, int ttl_s, char *err, size_t errlen);

/* The 37 characters (not NUL-terminated) naming key in Redis. */
void store_redis_key(const store_key *key, char out[STORE_REDIS_KEY_LEN]);

/* A snapshot of b's counters; b must come from store_redis_open. Callable
 * from any thread (the /metrics handler) while the I/O threads use b. */
void store_redis_stats_get(const store_backend *b, store_redis_stats *out);

#endif
