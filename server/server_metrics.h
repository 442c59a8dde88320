/* server_metrics.h - GET /metrics: the engine's counters and the server's
 * own in the Prometheus text exposition format (version 0.0.4):
 *
 *   # HELP pagellm_kv_blocks_total KV blocks in the pool.
 *   # TYPE pagellm_kv_blocks_total gauge
 *   pagellm_kv_blocks_total 128
 *   ...
 *   pagellm_time_to_first_token_seconds_bucket{le="0.01"} 3
 *
 * Counters end in _total, times are in seconds, histograms are cumulative
 * with a final le="+Inf" bucket equal to _count. Pure formatting.
 */
#ifndef PL_SERVER_METRICS_H
#define PL_SERVER_METRICS_H

#include <stdint.h>

#include "pagellm.h"

/* HTTP statuses the server answers with, in a fixed order. */
#define SRV_N_CODES 11
extern const int srv_http_codes[SRV_N_CODES]; /* 200 400 401 404 405 413 429 500 501 503 other(0) */
int srv_http_code_index(int status);

typedef struct {
    uint64_t responses[SRV_N_CODES]; /* answers by status (srv_http_codes order) */
    uint64_t active;                 /* generation requests the server is serving now */
    uint64_t disconnects;            /* generations cancelled because the client went away */
    uint64_t conns_open;             /* connections now */
    uint64_t timeouts;               /* connections cut at their request deadline */
    uint64_t over_ip, over_max;      /* connections refused: per-address limit, --max-conns */
} srv_http_stats;

/* The exposition text, malloc'd (NULL when out of memory). */
char *srv_metrics_text(const pl_engine_metrics *m, const srv_http_stats *h);

#endif
