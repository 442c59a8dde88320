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
}

static void engine_metrics(srv_buf *b, int *rc, const pl_engine_metrics *m)
{
    gauge(b, rc, "pagellm_requests_running", "Requests being generated.", m->running);
    gauge(b, rc, "pagellm_requests_waiting", "Requests waiting to be scheduled.", m->waiting);
    counter(b, rc, "pagellm_requests_total", "Requests submitted to the engine.", m->requests_total);
    counter(b, rc, "pagellm_requests_finished_total", "Requests that finished.", m->requests_finished);
    counter(b, rc, "pagellm_requests_cancelled_total", "Requests cancelled (client gone, shutdown).",
            m->requests_cancelled);
    counter(b, rc, "pagellm_preemptions_total", "Sequences preempted because the KV pool ran dry.", m->preemptions);
    counter(b, rc, "pagellm_prefix_cache_query_tokens_total", "Prompt tokens looked up in the prefix cache.",
            m->prefix_query_tokens);
    counter(b, rc, "pagellm_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.",
            m->prefix_hit_tokens);
    counter(b, rc, "pagellm_prompt_tokens_total", "Prompt tokens of submitted requests.", m->prompt_tokens);
    counter(b, rc, "pagellm_generation_tokens_total", "Tokens generated.", m->generated_tokens);
    counter(b, rc, "pagellm_engine_steps_total", "Engine steps (batched forward passes).", m->steps);
    histogram(b, rc, "pagellm_time_to_first_token_seconds", "Time from submission to the first generated token.",
              &m->ttft);
    histogram(b, rc, "pagellm_inter_token_latency_seconds", "Time between consecutive tokens of a sequence.", &m->itl);
    histogram(b, rc, "pagellm_e2e_request_latency_seconds", "Time from submission to the end of a request.", &m->e2e);
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
