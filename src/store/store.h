/* store.h - the KV tiers below the RAM prefix cache: a chain of backends
 * (disk, then Redis), each driven by two I/O threads, a reader and a
 * writer, that the engine thread uses without ever waiting.
 *
 *   engine thread                      tier 0                tier 1
 *   store_put_block --copy--> staging --put queue--> writer: seal, put_many   writer: put_many
 *   store_lookup_start ------------> get queue --> reader: get_many, verify
 *                                          misses from the first gap on --> reader: get_many, verify
 *   store_lookup_poll <-- per-key results (mutex), deadline
 *
 * Write-behind: a newly keyed full block is copied with its header and
 * tokens (store_entry.h) into an entry buffer on the engine thread (a spare
 * one when a write has freed one) and queued to every tier; the first
 * writer to take it computes its checksum. Writers run at the lowest
 * priority (SCHED_IDLE, else nice 19) so that on a machine whose cores the
 * engine's threads fill, writing waits for idle time instead of taking it
 * from the decodes; readers keep normal priority, as lookups have a
 * deadline. The entries in flight are bounded (staging_bytes); past the
 * bound a write is dropped and counted, never waited for. A short table of
 * recently written keys keeps a block from being written again when another
 * sequence re-keys it.
 *
 * Lookup: the keys of a prompt's full blocks that RAM lacks, in chain order.
 * Tier 0 is asked for all; tier i+1 for tier i's misses from the first gap
 * on. Every value is verified on the I/O thread (salt, key, parent key,
 * token ids, length, checksum): one that fails is a miss counted as
 * rejected; a hit in tier i is queued as a write to tiers [0, i), which
 * missed it. The engine polls: the lookup is done when the leading run of
 * hits is followed by a miss, when every key is resolved, or at the
 * deadline (the keys still pending then are misses).
 *
 * Threads: store_put_block, store_lookup_* and store_free on the engine
 * thread; store_tier_stats from any thread. One mutex guards the queues,
 * the lookups' results and the stats; no backend call runs under it. A
 * backend's get_many (reader) and put_many (writer) may run at once.
 */
#ifndef PL_STORE_STORE_H
#define PL_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store_backend.h"

#define STORE_MAX_TIERS 4
#define STORE_HIST_BUCKETS 16

typedef struct store store;
typedef struct store_lookup store_lookup;

typedef struct {
    uint32_t block_size;     /* tokens per block (T) */
    uint64_t block_bytes;    /* one block's bytes in the pool */
    uint64_t salt[2];        /* the prefix cache's salt */
    uint32_t timeout_ms;     /* a lookup's deadline (0: STORE_TIMEOUT_MS_DEFAULT) */
    uint64_t staging_bytes;  /* writes in flight, at most (0: STORE_STAGING_DEFAULT) */
    bool urgent_puts;        /* writers keep normal priority: something waits on
                                the writes (the prefill role, store_put_done) */
} store_params;

#define STORE_TIMEOUT_MS_DEFAULT 50
#define STORE_STAGING_DEFAULT ((uint64_t)256 << 20)

/* Latency of one backend batch, in seconds; cumulative counts, last bound +Inf. */
typedef struct {
    double le[STORE_HIST_BUCKETS];
    uint64_t count[STORE_HIST_BUCKETS];
    double sum;
    uint64_t n;
} store_hist;

typedef struct {
    uint64_t hits;          /* verified entries served */
    uint64_t misses;        /* keys asked and absent (or past the deadline) */
    uint64_t rejected;      /* values that failed verification */
    uint64_t bytes_read, bytes_written;
    uint64_t puts;          /* entries handed to the backend */
    uint64_t errors;        /* backend batches that reported an error */
    uint64_t dropped_writes;/* writes dropped: staging full */
    store_hist get_latency, put_latency;
} store_tier_stats;

int store_new(store **out, const store_params *p);
/* Appends a tier (lookups ask tiers in the order added) and starts its
 * thread; the store owns b from then on, also on failure. */
int store_add_tier(store *s, store_backend *b);
/* Writes what is queued (for at most a few seconds), stops the threads,
 * closes the backends. Lookups still held by the caller must be freed first. */
void store_free(store *s);

int store_n_tiers(const store *s);
const char *store_tier_name(const store *s, int i);
void store_tier_stats_get(store *s, int i, store_tier_stats *out);
/* Tier i's backend, for a backend's own counters (store_redis_stats_get);
 * the store keeps owning it. */
const store_backend *store_tier_backend(const store *s, int i);

/* A mark of the writes queued so far; store_put_done(mark) once every
 * tier has written (or dropped) all of them. */
uint64_t store_put_mark(store *s);
bool store_put_done(store *s, uint64_t mark);

/* Bytes of writes queued and not yet written by every tier. */
uint64_t store_staged_bytes(store *s);

/* Queues the full block `block` (block_bytes) with key, parent key and its
 * T tokens to every tier; a copy is taken, the call never waits. */
void store_put_block(store *s, const uint64_t key[2], const uint64_t parent[2], const int32_t *tokens,
                     const uint8_t *block);

/* Writes an entry's payload of len (block_bytes) bytes from user's data. */
typedef void (*store_fill_fn)(const void *user, uint8_t *payload, size_t len);

/* store_put_block whose payload fill writes straight into the entry (a
 * block gathered from the pool's layer arenas): called at most once, and
 * not at all when the key was written already or the staging is full. */
void store_put_block_fill(store *s, const uint64_t key[2], const uint64_t parent[2], const int32_t *tokens,
                          store_fill_fn fill, const void *user);

/* Asks the tiers for n chained blocks: keys[i] holds tokens[i T, (i+1) T)
 * and its parent is keys[i - 1] (parent0 for i = 0). NULL if out of memory
 * (then there is nothing to wait for). */
store_lookup *store_lookup_start(store *s, const uint64_t parent0[2], const uint64_t (*keys)[2], const int32_t *tokens,
                                 uint32_t n);
/* The leading verified hits so far; *done when no more can come. */
uint32_t store_lookup_poll(store_lookup *l, bool *done);
/* Block bytes of leading hit i (< what poll returned); valid until free. */
const uint8_t *store_lookup_block(const store_lookup *l, uint32_t i);
/* Releases the lookup (an unfinished one is abandoned: its thread drops it). */
void store_lookup_free(store_lookup *l);

#endif
