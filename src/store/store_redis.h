/* store_redis.h - the Redis Cluster tier (`--kv-redis HOST:PORT[,...]`):
 * the store_backend over a Redis Cluster, with a TTL per entry. Its
 * implementation is src/store/store_redis.c.
 */
#ifndef PL_STORE_REDIS_H
#define PL_STORE_REDIS_H

#include <stddef.h>

#include "store/store_backend.h"

/* hostports: "HOST:PORT[,HOST:PORT...]", any nodes of the cluster; ttl_s:
 * each entry's time to live in seconds (0: none). NULL with a message in
 * err when the list is malformed or no node answers. */
store_backend *store_redis_open(const char *hostports, int ttl_s, char *err, size_t errlen);

#endif
