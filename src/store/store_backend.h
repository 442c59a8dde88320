/* store_backend.h - one KV tier's key-value storage (disk, Redis Cluster),
 * as the store's I/O thread sees it.
 *
 * A backend stores opaque values under 128-bit keys: the prefix cache's
 * chained block hash (prefix_cache.h), which already names the model, the
 * KV dtype, the layout, the block size and the whole token prefix. What a
 * value holds (header, token ids, checksum, the block's bytes) and how a
 * read is verified is the store's business (store_entry.h), not the
 * backend's: a backend may lose, truncate or return stale values, and the
 * store must still never use a wrong block.
 *
 * Threads: each backend instance is driven by its tier's two I/O threads:
 * get_many from the reader and put_many from the writer, possibly at the
 * same time (so a backend guards what both touch, or keeps one connection
 * per thread); close runs alone. Calls may block (disk, network); they never
 * run on the engine thread.
 *
 * Errors: a backend never fails a request. A get that cannot be served
 * (node down, file missing, timeout) reports misses; the return value only
 * says whether the batch met an error, for the metrics.
 */
#ifndef PL_STORE_BACKEND_H
#define PL_STORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t h[2];
} store_key;

typedef struct store_backend store_backend;

struct store_backend {
    const char *name; /* "disk", "redis": the metrics label */

    /* For i in [0, n): vals[i] = a malloc'd copy of the value stored under
     * keys[i] and lens[i] its length, or vals[i] = NULL, lens[i] = 0 for a
     * miss. The caller frees each vals[i]. Returns 0, or a negative PL_E*
     * code when some of the batch met an error (those entries are misses). */
    int (*get_many)(store_backend *b, const store_key *keys, size_t n, uint8_t **vals, size_t *lens);

    /* Stores vals[i] (lens[i] bytes) under keys[i], replacing any value.
     * Best effort: returns 0, or a negative PL_E* code when some puts were
     * dropped. */
    int (*put_many)(store_backend *b, const store_key *keys, size_t n, const uint8_t *const *vals,
                    const size_t *lens);

    /* Frees the backend and everything it holds (connections, files). */
    void (*close)(store_backend *b);
};

#endif
