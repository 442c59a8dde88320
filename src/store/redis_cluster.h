/* redis_cluster.h - a small Redis Cluster client for batched GET and SET,
 * over hiredis's synchronous API.
 *
 * Slot map. Keys hash to one of 16384 slots (CRC16 of the key, or of its
 * {hash tag}); each slot is served by one master. The map slot -> master
 * comes from CLUSTER SLOTS, asked of a seed at open and of a live node
 * after a MOVED reply, after a node failure, and every 500 ms while a
 * node's keys go unserved (a promoted replica shows there).
 *
 * Batches. get_many / set_many group the keys by master and pipeline them
 * per master per round (in chunks of at most 512 commands or 16 MiB, each
 * sent to every master before their replies are read). MOVED updates the map and sends the key again to the named node in
 * the next round; ASK sends ASKING + the command to the named node without
 * changing the map. At most REDIS_CLUSTER_MAX_ROUNDS rounds per batch; keys
 * still redirected after that are misses.
 *
 * Failures never fail a batch: a node that does not connect, times out or
 * closes the connection yields misses (gets) or dropped writes (sets) for
 * its keys, its connection is dropped, and it is not tried again before a
 * backoff that doubles on each failure (backoff_min_ms .. backoff_max_ms)
 * and resets on success. A reply of the wrong shape (an error string, an
 * integer where a bulk string was due, WRONGTYPE) is a miss and an error.
 *
 * Threads: one instance is used by one thread (no locks). The counters are
 * relaxed atomics, so redis_cluster_stats_get may be called from any thread.
 */
#ifndef PL_STORE_REDIS_CLUSTER_H
#define PL_STORE_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#define REDIS_CLUSTER_SLOTS 16384
#define REDIS_CLUSTER_MAX_ROUNDS 4
#define REDIS_CLUSTER_MAX_NODES 256

typedef struct redis_cluster redis_cluster;

typedef struct {
    int connect_timeout_ms; /* per connect attempt (150) */
    int command_timeout_ms; /* per socket read or write (200) */
    int backoff_min_ms;     /* first wait after a node failure (100) */
    int backoff_max_ms;     /* cap of the doubling wait (5000) */
    const char *user;       /* AUTH [user] password on every connection when password is set */
    const char *password;   /* (NULL: no AUTH; both are copied at open) */
} redis_cluster_opts;

/* The defaults above. */
redis_cluster_opts redis_cluster_default_opts(void);

typedef struct {
    uint64_t hits, misses;          /* GET outcomes, per key */
    uint64_t sets_ok, sets_dropped; /* SET outcomes, per key */
    uint64_t errors;                /* bad replies, I/O errors, timeouts, failed connects */
    uint64_t redirects;             /* MOVED + ASK replies followed */
    uint64_t connects;              /* successful connections (first ones included) */
    uint64_t reconnects;            /* successful connections to a node that had failed */
    uint64_t connect_failures;      /* connect attempts that failed */
    uint64_t skipped_down;          /* keys not sent because their node was in backoff */
    uint64_t slot_refreshes;        /* CLUSTER SLOTS maps loaded */
    uint64_t bytes_read;            /* value bytes returned by GET hits */
    uint64_t bytes_written;         /* value bytes acknowledged by SET */
} redis_cluster_stats;

/* Parses "HOST:PORT[,HOST:PORT...]" (an IPv6 host in brackets: [::1]:7000;
 * port 1..65535; no empty items, no spaces). On success returns the number
 * of seeds and fills at most max of hosts (each of host_size bytes) and
 * ports; on failure returns PL_EINVAL with err_msg() naming the bad item. */
int redis_cluster_parse_seeds(const char *hostports, char (*hosts)[256], int *ports, int max);

/* The cluster slot of a key (CRC16-CCITT/XMODEM of the key or of the first
 * non-empty {hash tag}, mod 16384), as Redis computes it. */
unsigned redis_cluster_key_slot(const char *key, size_t len);

/* Connects to the seeds and loads the slot map from the first one that
 * answers. NULL when the seeds do not parse or none answers CLUSTER SLOTS
 * with a usable map (err_msg() says why). opts may be NULL (defaults). */
redis_cluster *redis_cluster_open(const char *hostports, const redis_cluster_opts *opts);

/* GET of n keys: vals[i] = a malloc'd copy of the value (freed by the
 * caller) and lens[i] its length, or NULL / 0 for a miss. Returns 0, or
 * PL_EIO when some key met an error (those keys are misses). */
int redis_cluster_get_many(redis_cluster *rc, const char *const *keys, const size_t *klens, size_t n,
                           uint8_t **vals, size_t *lens);

/* SET of n keys with a time to live of ttl_ms (PX; 0 = no expiry).
 * Returns 0, or PL_EIO when some writes were dropped. */
int redis_cluster_set_many(redis_cluster *rc, const char *const *keys, const size_t *klens, size_t n,
                           const uint8_t *const *vals, const size_t *lens, int64_t ttl_ms);

/* A snapshot of the counters (any thread). */
void redis_cluster_stats_get(const redis_cluster *rc, redis_cluster_stats *out);

/* "host:port" of the master serving slot, or NULL when unknown. */
const char *redis_cluster_slot_owner(const redis_cluster *rc, unsigned slot);

/* Number of slots with a known master (16384 when the cluster is whole). */
unsigned redis_cluster_slots_covered(const redis_cluster *rc);

/* Number of nodes the client knows: seeds, the map's masters, and nodes
 * left from earlier maps until they are dropped (between batches, once
 * REDIS_CLUSTER_MAX_NODES / 2 are known). */
unsigned redis_cluster_node_count(const redis_cluster *rc);

void redis_cluster_close(redis_cluster *rc);

#endif
