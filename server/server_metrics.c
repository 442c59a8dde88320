/* server_metrics.c - Prometheus text for GET /metrics; see server_metrics.h. */
#include "server_metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_openai.h"

const int srv_http_codes[SRV_N_CODES] = {200, 400, 401, 404, 405, 413, 429, 500, 501, 503, 0};

int srv_http_code_index(int status)
{
    for (int i = 0; i < SRV_N_CODES - 1; i++)
        if (srv_http_codes[i] == status) return i;
    return SRV_N_CODES - 1;
}

/* printf into the buffer; errors stick in *rc so that the callers can
 * write a sequence of lines and check once. */
static void out(srv_buf *b, int *rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void out(srv_buf *b, int *rc, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (*rc) return;
    if (n < 0 || (size_t)n >= sizeof line) { *rc = PL_ERR_RANGE; return; }
    *rc = srv_buf_add(b, line, (size_t)n);
}

static void head(srv_buf *b, int *rc, const char *name, const char *type, const char *help)
{
    out(b, rc, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(srv_buf *b, int *rc, const char *name, const char *help, double v)
{
    head(b, rc, name, "gauge", help);
    out(b, rc, "%s %.17g\n", name, v);
}

static void counter(srv_buf *b, int *rc, const char *name, const char *help, uint64_t v)
{
    head(b, rc, name, "counter", help);
    out(b, rc, "%s %llu\n", name, (unsigned long long)v);
}

/* A pl_histogram: its counts are cumulative already; the last bound is
 * +Inf (written so whatever the engine stored there). */
static void histogram(srv_buf *b, int *rc, const char *name, const char *help, const pl_histogram *h)
{
    head(b, rc, name, "histogram", help);
    for (int i = 0; i < PL_HIST_BUCKETS; i++) {
        if (i == PL_HIST_BUCKETS - 1 || isinf(h->le[i]))
            out(b, rc, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->n);
        else
            out(b, rc, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)h->count[i]);
        if (isinf(h->le[i])) break;
    }
    out(b, rc, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

static void kv_metrics(srv_buf *b, int *rc, const pl_kv_stats *kv)
{
    gauge(b, rc, "pagellm_kv_blocks_total", "KV blocks in the pool.", kv->blocks_total);
    gauge(b, rc, "pagellm_kv_blocks_used", "KV blocks held by sequences.", kv->blocks_used);
    gauge(b, rc, "pagellm_kv_blocks_cached", "Free KV blocks that still hold reusable prefix-cache content.",
          kv->blocks_cached);
    gauge(b, rc, "pagellm_kv_blocks_free", "KV blocks free for allocation (cached ones included).", kv->blocks_free);
    gauge(b, rc, "pagellm_kv_usage_ratio", "Share of the KV blocks held by sequences (used / total).",
          kv->blocks_total ? (double)kv->blocks_used / kv->blocks_total : 0.0);
    gauge(b, rc, "pagellm_kv_block_size_tokens", "Tokens per KV block.", kv->block_size);
    gauge(b, rc, "pagellm_kv_pool_bytes", "Bytes of the KV block pool.", (double)kv->pool_bytes);
    gauge(b, rc, "pagellm_kv_bytes_per_token", "KV bytes per token by the formula, for the pool's dtype.",
          kv->bytes_per_token);
    gauge(b, rc, "pagellm_kv_tokens", "Live tokens held in the KV cache over all sequences.", (double)kv->tokens);
    gauge(b, rc, "pagellm_kv_bytes_allocated", "Bytes of KV blocks held by sequences.", (double)kv->bytes_allocated);
    gauge(b, rc, "pagellm_kv_bytes_wasted", "Allocated KV bytes not holding a token (unfilled block tails).",
          (double)kv->bytes_wasted);
    if (!kv->layer_groups) return;
    /* layer groups (gemma2/3): group 0 holds the global layers of every token, the others the local layers' window */
    const uint32_t ng = kv->layer_groups < PL_KV_GROUPS_MAX ? kv->layer_groups : PL_KV_GROUPS_MAX;
    head(b, rc, "pagellm_kv_group_blocks", "gauge", "KV blocks the sequences hold in each layer group (0: the global layers).");
    for (uint32_t g = 0; g < ng; g++) out(b, rc, "pagellm_kv_group_blocks{group=\"%u\"} %u\n", g, kv->group_blocks[g]);
    head(b, rc, "pagellm_kv_group_bytes", "gauge", "Bytes of the KV blocks the sequences hold in each layer group.");
    for (uint32_t g = 0; g < ng; g++)
        out(b, rc, "pagellm_kv_group_bytes{group=\"%u\"} %llu\n", g,
            (unsigned long long)kv->group_blocks[g] * (unsigned long long)kv->block_bytes);
}

static void tier_metrics(srv_buf *b, int *rc, const pl_engine_metrics *m);

static void engine_metrics(srv_buf *b, int *rc, const pl_engine_metrics *m)
{
    gauge(b, rc, "pagellm_requests_running", "Requests being generated.", m->running);
    gauge(b, rc, "pagellm_requests_waiting", "Requests waiting to be scheduled.", m->waiting);
    counter(b, rc, "pagellm_requests_total", "Requests submitted to the engine.", m->requests_total);
    counter(b, rc, "pagellm_requests_finished_total", "Requests that finished.", m->requests_finished);
    counter(b, rc, "pagellm_requests_cancelled_total", "Requests cancelled (client gone, shutdown).",
            m->requests_cancelled);
    counter(b, rc, "pagellm_preemptions_total", "Sequences preempted because the KV pool ran dry.", m->preemptions);
    counter(b, rc, "pagellm_prefill_cuts_total",
            "Prompt chunks cut short so that a step with decodes costs no more than its token budget at depth 0.",
            m->prefill_cuts);
    gauge(b, rc, "pagellm_key_cost_prompt",
          "What a key costs a prompt token, in depth-0 prompt tokens, as the scheduler takes it: learned from the step times, "
          "never below the model's estimate.", m->key_cost_prompt);
    gauge(b, rc, "pagellm_key_cost_decode",
          "What a key costs a decoding token, in depth-0 prompt tokens, as the scheduler takes it: learned from the step times, "
          "never below the model's estimate.", m->key_cost_decode);
    gauge(b, rc, "pagellm_key_cost_model", "What a key costs a token by the model's shape: where the learning starts.",
          m->key_cost_model);
    counter(b, rc, "pagellm_prefix_cache_query_tokens_total", "Prompt tokens looked up in the prefix cache.",
            m->prefix_query_tokens);
    counter(b, rc, "pagellm_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.",
            m->prefix_hit_tokens);
    counter(b, rc, "pagellm_prompt_tokens_total", "Prompt tokens of submitted requests.", m->prompt_tokens);
    counter(b, rc, "pagellm_generation_tokens_total", "Tokens generated.", m->generated_tokens);
    counter(b, rc, "pagellm_engine_steps_total", "Engine steps (batched forward passes).", m->steps);
    gauge(b, rc, "pagellm_requests_running_peak", "The most requests running after one engine step since start.",
          m->running_peak);
    counter(b, rc, "pagellm_requests_running_steps_total",
            "Requests running after each engine step, summed (over pagellm_engine_steps_total: the mean batch).",
            m->running_steps);
    counter(b, rc, "pagellm_kv_bytes_live_steps_total",
            "KV bytes holding live tokens after each engine step, summed.", m->kv_live_byte_steps);
    counter(b, rc, "pagellm_kv_bytes_allocated_steps_total",
            "pagellm_kv_bytes_allocated after each engine step, summed (live over allocated: the KV utilisation "
            "averaged over the steps).", m->kv_allocated_byte_steps);
    histogram(b, rc, "pagellm_time_to_first_token_seconds", "Time from submission to the first generated token.",
              &m->ttft);
    histogram(b, rc, "pagellm_inter_token_latency_seconds", "Time between consecutive tokens of a sequence.", &m->itl);
    histogram(b, rc, "pagellm_e2e_request_latency_seconds", "Time from submission to the end of a request.", &m->e2e);
    tier_metrics(b, rc, m);
}

/* One counter of every KV tier, labelled by tier. */
#define TIER_COUNTER(field, mname, help)                                                                 \
    do {                                                                                                 \
        head(b, rc, mname, "counter", help);                                                             \
        for (uint32_t i = 0; i < m->n_tiers; i++)                                                        \
            out(b, rc, "%s{tier=\"%s\"} %llu\n", mname, m->tiers[i].name, (unsigned long long)m->tiers[i].field); \
    } while (0)

static void tier_histogram(srv_buf *b, int *rc, const char *name, const char *help, const pl_engine_metrics *m,
                           bool put)
{
    head(b, rc, name, "histogram", help);
    for (uint32_t t = 0; t < m->n_tiers; t++) {
        const pl_histogram *h = put ? &m->tiers[t].put_latency : &m->tiers[t].get_latency;
        const char *tn = m->tiers[t].name;
        for (int i = 0; i < PL_HIST_BUCKETS; i++) {
            if (i == PL_HIST_BUCKETS - 1 || isinf(h->le[i])) {
                out(b, rc, "%s_bucket{tier=\"%s\",le=\"+Inf\"} %llu\n", name, tn, (unsigned long long)h->n);
                break;
            }
            out(b, rc, "%s_bucket{tier=\"%s\",le=\"%g\"} %llu\n", name, tn, h->le[i], (unsigned long long)h->count[i]);
        }
        out(b, rc, "%s_sum{tier=\"%s\"} %.9g\n%s_count{tier=\"%s\"} %llu\n", name, tn, h->sum, name, tn,
            (unsigned long long)h->n);
    }
}

/* The KV tiers below RAM (--kv-disk, --kv-redis); nothing without them. */
static void tier_metrics(srv_buf *b, int *rc, const pl_engine_metrics *m)
{
    if (m->n_tiers == 0) return;
    counter(b, rc, "pagellm_kv_tier_hit_tokens_total", "Prompt tokens loaded from the KV tiers (part of the prefix-cache hits).",
            m->tier_hit_tokens);
    TIER_COUNTER(hits, "pagellm_kv_tier_hits_total", "KV blocks found in the tier and verified.");
    TIER_COUNTER(misses, "pagellm_kv_tier_misses_total", "KV blocks asked of the tier and absent.");
    TIER_COUNTER(rejected, "pagellm_kv_tier_rejected_total", "KV blocks read from the tier that failed verification (recomputed).");
    TIER_COUNTER(bytes_read, "pagellm_kv_tier_read_bytes_total", "Bytes read from the tier.");
    TIER_COUNTER(bytes_written, "pagellm_kv_tier_written_bytes_total", "Bytes written to the tier.");
    TIER_COUNTER(writes, "pagellm_kv_tier_writes_total", "KV blocks handed to the tier.");
    TIER_COUNTER(errors, "pagellm_kv_tier_errors_total", "Tier batches that reported an error.");
    TIER_COUNTER(dropped_writes, "pagellm_kv_tier_dropped_writes_total", "Writes dropped because the staging buffer was full.");
    tier_histogram(b, rc, "pagellm_kv_tier_get_seconds", "Time of one batched tier read.", m, false);
    tier_histogram(b, rc, "pagellm_kv_tier_put_seconds", "Time of one batched tier write.", m, true);
    if (!m->has_redis) return;
    counter(b, rc, "pagellm_kv_redis_redirects_total", "MOVED and ASK replies the Redis Cluster client followed.",
            m->redis_redirects);
    counter(b, rc, "pagellm_kv_redis_reconnects_total", "Connections again to a Redis node that had failed.",
            m->redis_reconnects);
    counter(b, rc, "pagellm_kv_redis_connect_failures_total", "Connects to a Redis node that failed (each starts a backoff).",
            m->redis_connect_failures);
    counter(b, rc, "pagellm_kv_redis_errors_total", "Redis bad replies, I/O errors, timeouts and failed connects.",
            m->redis_errors);
}

static void http_metrics(srv_buf *b, int *rc, const srv_http_stats *h)
{
    head(b, rc, "pagellm_http_responses_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i < SRV_N_CODES; i++) {
        if (srv_http_codes[i]) out(b, rc, "pagellm_http_responses_total{code=\"%d\"} %llu\n", srv_http_codes[i],
                                   (unsigned long long)h->responses[i]);
        else out(b, rc, "pagellm_http_responses_total{code=\"other\"} %llu\n", (unsigned long long)h->responses[i]);
    }
    gauge(b, rc, "pagellm_http_active_generations", "Completion requests the HTTP server is serving now.",
          (double)h->active);
    counter(b, rc, "pagellm_http_client_disconnects_total", "Generations cancelled because the client went away.",
            h->disconnects);
    gauge(b, rc, "pagellm_http_connections", "Open HTTP connections.", (double)h->conns_open);
    counter(b, rc, "pagellm_http_request_timeouts_total",
            "Connections closed because a request's head and body did not arrive within --header-timeout.", h->timeouts);
    counter(b, rc, "pagellm_http_connections_over_ip_limit_total",
            "Connections answered 429 and closed: past --max-conns-per-ip.", h->over_ip);
    counter(b, rc, "pagellm_http_connections_over_limit_total",
            "Connections answered 503 and closed: past --max-conns.", h->over_max);
}

char *srv_metrics_text(const pl_engine_metrics *m, const srv_http_stats *h)
{
    srv_buf b = {0};
    int rc = 0;
    kv_metrics(&b, &rc, &m->kv);
    engine_metrics(&b, &rc, m);
    http_metrics(&b, &rc, h);
    if (rc) { srv_buf_free(&b); return NULL; }
    return b.p;
}
