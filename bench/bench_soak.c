/* bench_soak.c - `pagellm bench soak`: does the server hold up? Many
 * streaming clients for a while against `pagellm serve` with a small KV
 * pool, some of them hanging up mid-stream, then checks that nothing went
 * wrong and that nothing was kept.
 *
 * Method:
 *   server   `pagellm serve -m MODEL --host 127.0.0.1 --port 0 --max-seqs
 *            CLIENTS --kv-mem BYTES [--ctx N] -t T --max-conns-per-ip 0`,
 *            a child started and stopped as bench_http.h says. --kv-blocks N
 *            is turned into --kv-mem from the model's block size (f16,
 *            16-token blocks: the server's defaults). A pool smaller than
 *            CLIENTS sequences makes the engine preempt, which is the point.
 *   clients  CLIENTS threads, each sending one streaming POST
 *            /v1/completions after another until --seconds have passed:
 *            a prompt of random words (half of them after a shared
 *            preamble, so that live sequences share prefix-cache blocks),
 *            max_tokens in 4..--max-tokens, temperature 0.8 with a seed.
 *            A --disconnect fraction of the requests close the connection
 *            after the first SSE event (an abrupt disconnect). Choices come
 *            from a seeded RNG per client (--seed): a run can be repeated.
 *   warm-up  every client's first request is sent before the clock starts
 *            and not counted, so that the weights and the pool are paged in
 *            when the start RSS is read.
 *   end      after the last request, /metrics is read until no block is
 *            used and no request runs (at most 10 s).
 * Checks (exit 1 if any fails, after the report):
 *   errors       0: anything but a stream read to data: [DONE] or a
 *                deliberate disconnect (any non-200 status, 5xx and 503
 *                included: each client has one request at a time, so the
 *                queue never fills; a transport error; an error chunk)
 *   completed    > 0
 *   blocks_used  0 and requests running 0 at the end (pagellm_kv_blocks_used)
 *   rss          the server's VmRSS (/proc/PID/status) at the end exceeds
 *                the one after the warm-up by at most --rss-slack (RSS
 *                flat; allocator caches and late first touches fit in the
 *                slack; a leak shows over minutes, LeakSanitizer in
 *                tests/cli/test_soak.sh catches small ones). Not judged in
 *                an AddressSanitizer build (the server is this binary):
 *                ASan's quarantine grows RSS by design; its leak check at
 *                the server's exit is the check there.
 *   server exit  status 0 after SIGTERM
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "bench_http.h"
#include "cli.h"

/* Whether this binary, and so the server it starts, runs under ASan. */
#if defined(__SANITIZE_ADDRESS__)
#define SK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SK_ASAN 1
#endif
#endif
#ifndef SK_ASAN
#define SK_ASAN 0
#endif

#define SK_MAX_CLIENTS 256
#define SK_FIRST_ERRORS 5

typedef struct {
    const char *model;
    int clients, seconds, kv_blocks, ctx, max_tokens, prompt_words, threads, timeout_s;
    uint64_t kv_mem, rss_slack, seed;
    double disconnect;
    bool json;
} sk_opts;

/* What every client adds to, under mu. */
typedef struct {
    pthread_mutex_t mu;
    long completed, disconnects, errors;
    double *lat;            /* ms per completed request */
    size_t n_lat, cap_lat;
    char first[SK_FIRST_ERRORS][300];
    int n_first;
} sk_tally;

typedef struct {
    const sk_opts *o;
    int port, id;
    double deadline;        /* 0: the warm-up request only */
    bench_rng rng;
    sk_tally *tally;
} sk_client;

static const char *const WORDS[] = {"once", "upon", "a",    "time", "there", "was",  "little", "girl", "named",
                                    "lily", "she",  "loved", "to",  "play",  "in",   "the",    "park", "with",
                                    "her",  "dog",  "one",  "day",  "sun",   "happy", "big",   "tree", "ball"};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

/* The shared preamble: the same first words for half of the prompts. */
static void sk_preamble(char *s, size_t cap)
{
    size_t len = 0;
    s[0] = 0;
    for (int i = 0; i < 32 && len + 16 < cap; i++) len += (size_t)snprintf(s + len, cap - len, "%s ", WORDS[(i * 7) % N_WORDS]);
}

/* The next request's body (malloc'd), or NULL. */
static char *sk_body(sk_client *c)
{
    const sk_opts *o = c->o;
    char text[8192], pre[512];
    size_t len = 0;
    text[0] = 0;
    if (bench_rng_range(&c->rng, 0, 1)) {
        sk_preamble(pre, sizeof pre);
        len = (size_t)snprintf(text, sizeof text, "%s", pre);
    }
    const int words = (int)bench_rng_range(&c->rng, 4, (uint32_t)o->prompt_words);
    for (int i = 0; i < words && len + 16 < sizeof text; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, i ? " %s" : "%s", WORDS[bench_rng_range(&c->rng, 0, N_WORDS - 1)]);
    json_t *j = json_pack("{s:s, s:i, s:f, s:I, s:b, s:{s:b}}", "prompt", text, "max_tokens",
                          (int)bench_rng_range(&c->rng, 4, (uint32_t)o->max_tokens), "temperature", 0.8, "seed",
                          (json_int_t)(bench_rng_next(&c->rng) % 1000000), "stream", 1, "stream_options",
                          "include_usage", 1);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

/* One request, its outcome added to the tally; a warm-up one (counted
 * false) adds only its error, if any. */
static void sk_request(sk_client *c, bool counted)
{
    const sk_opts *o = c->o;
    bench_http h = {.port = c->port, .path = "/v1/completions", .timeout_s = o->timeout_s, .sse = true,
                    .usage_tokens = -1};
    h.drop = (double)(bench_rng_next(&c->rng) >> 11) / 9007199254740992.0 < o->disconnect;
    h.body = sk_body(c);
    const double t0 = bench_now();
    if (h.body) bench_http_run(&h);
    else snprintf(h.err, sizeof h.err, "out of memory for a request body");
    const double ms = (bench_now() - t0) * 1e3;
    if (counted || h.err[0]) {
        sk_tally *t = c->tally;
        pthread_mutex_lock(&t->mu);
        if (h.err[0]) {
            t->errors++;
            if (t->n_first < SK_FIRST_ERRORS)
                snprintf(t->first[t->n_first++], sizeof t->first[0], "client %d%s: %s", c->id,
                         h.drop ? " (to disconnect)" : "", h.err);
        } else if (h.dropped) {
            t->disconnects++;
        } else {
            t->completed++;
            if (t->n_lat == t->cap_lat) {
                size_t cap = t->cap_lat ? 2 * t->cap_lat : 1024;
                double *p = realloc(t->lat, cap * sizeof *p);
                if (p) t->lat = p, t->cap_lat = cap;
            }
            if (t->n_lat < t->cap_lat) t->lat[t->n_lat++] = ms;
        }
        pthread_mutex_unlock(&t->mu);
    }
    free(h.body);
    bench_http_free(&h);
}

static void *sk_client_main(void *arg)
{
    sk_client *c = arg;
    if (c->deadline == 0) sk_request(c, false);
    while (c->deadline > 0 && bench_now() < c->deadline) sk_request(c, true);
    return NULL;
}

/* Runs every client until deadline (0: one uncounted request each). */
static int sk_run_clients(sk_client *cl, int n, double deadline)
{
    pthread_t th[SK_MAX_CLIENTS];
    int started = 0;
    for (int i = 0; i < n; i++) {
        cl[i].deadline = deadline;
        if (pthread_create(&th[i], NULL, sk_client_main, &cl[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (started < n) fprintf(stderr, "pagellm bench soak: could start only %d of %d client threads\n", started, n);
    return started == n ? 0 : -1;
}

/* ---------------------------------------------------------- the server */

/* A gauge or counter of the Prometheus text, NAN if absent. */
static double sk_metric(const char *text, const char *name)
{
    const size_t k = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, name, k) == 0 && l[k] == ' ') return strtod(l + k + 1, NULL);
    return NAN;
}

typedef struct {
    double blocks_total, blocks_used, running, preemptions;
} sk_kv;

static int sk_read_kv(int port, sk_kv *kv)
{
    char *m = bench_http_get("bench soak", port, "/metrics", 30);
    if (!m) return -1;
    kv->blocks_total = sk_metric(m, "pagellm_kv_blocks_total");
    kv->blocks_used = sk_metric(m, "pagellm_kv_blocks_used");
    kv->running = sk_metric(m, "pagellm_requests_running");
    kv->preemptions = sk_metric(m, "pagellm_preemptions_total");
    free(m);
    if (isnan(kv->blocks_used) || isnan(kv->running)) {
        fprintf(stderr, "pagellm bench soak: /metrics has no pagellm_kv_blocks_used or pagellm_requests_running\n");
        return -1;
    }
    return 0;
}

/* Bytes of one KV block of the model at the server's defaults (f16, 16
 * tokens): a one-block context says. 0 on failure (the reason printed). */
static uint64_t sk_block_bytes(const char *model)
{
    pl_model *m;
    pl_ctx *c;
    pl_ctx_params cp;
    pl_ctx_params_default(&cp);
    cp.n_ctx = cp.block_size;
    if (pl_model_load(&m, model) != 0) { cli_error("bench soak", "%s", pl_last_error()); return 0; }
    if (pl_ctx_new(&c, m, &cp) != 0) {
        cli_error("bench soak", "cannot size a KV block: %s", pl_last_error());
        pl_model_free(m);
        return 0;
    }
    pl_kv_stats st;
    pl_ctx_kv_stats(c, &st);
    pl_ctx_free(c);
    pl_model_free(m);
    return st.block_bytes;
}

static int sk_server_start(bench_server *s, const sk_opts *o, int *port)
{
    char seqs[16], t[16], mem[32], ctx[16];
    snprintf(seqs, sizeof seqs, "%d", o->clients);
    snprintf(t, sizeof t, "%d", o->threads);
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)o->kv_mem);
    snprintf(ctx, sizeof ctx, "%d", o->ctx);
    char *argv[32] = {"/proc/self/exe", "serve", "-m", (char *)o->model, "--host", "127.0.0.1", "--port", "0",
                      "--max-seqs", seqs, "-t", t, "--max-conns-per-ip", "0"}; /* every client is on loopback */
    int n = 14;
    if (o->kv_mem) argv[n++] = "--kv-mem", argv[n++] = mem;
    if (o->ctx) argv[n++] = "--ctx", argv[n++] = ctx;
    argv[n] = NULL;
    return bench_server_start(s, "bench soak", argv, port);
}

/* ---------------------------------------------------------- the command */

static int sk_parse(int argc, char **argv, sk_opts *o)
{
    memset(o, 0, sizeof *o);
    o->clients = 8;
    o->seconds = 60;
    o->max_tokens = 32;
    o->prompt_words = 100;
    o->threads = 2;
    o->timeout_s = 120;
    o->disconnect = 0.1;
    o->rss_slack = 32ull << 20;
    o->seed = 1;
    const cli_opt opts[] = {
        {"model", 'm', CLI_STR, &o->model, 0, 0, "GGUF", "model file (required)"},
        {"clients", 0, CLI_INT, &o->clients, 1, SK_MAX_CLIENTS, "N", "concurrent streaming clients (default 8)"},
        {"seconds", 0, CLI_INT, &o->seconds, 1, 1 << 24, "S", "how long the clients send requests (default 60)"},
        {"kv-blocks", 0, CLI_INT, &o->kv_blocks, 1, 1 << 24, "N", "the server's KV pool in blocks (f16, 16 tokens each)"},
        {"kv-mem", 0, CLI_SIZE, &o->kv_mem, 1, 1e15, "BYTES", "the server's KV pool in bytes, e.g. 1M (default: the server's)"},
        {"ctx", 'c', CLI_INT, &o->ctx, 1, 1 << 20, "N", "the server's --ctx (default: the server's)"},
        {"disconnect", 0, CLI_FLOAT, &o->disconnect, 0, 1, "F", "fraction of requests dropped after their first event (default 0.1)"},
        {"max-tokens", 0, CLI_INT, &o->max_tokens, 4, 1 << 16, "N", "max_tokens of a request is 4..N (default 32)"},
        {"prompt-words", 0, CLI_INT, &o->prompt_words, 4, 1000, "N", "a prompt has 4..N random words, half of them after a 32-word preamble (default 100)"},
        {"threads", 't', CLI_INT, &o->threads, 1, 256, "N", "the server's threads (default 2)"},
        {"rss-slack", 0, CLI_SIZE, &o->rss_slack, 0, 1e15, "BYTES", "RSS growth allowed from the warm-up to the end (default 32M)"},
        {"timeout", 0, CLI_INT, &o->timeout_s, 1, 1 << 20, "S", "a request that takes longer is an error (default 120)"},
        {"seed", 0, CLI_U64, &o->seed, 0, 0, "N", "the clients' RNG seed (default 1)"},
        {"json", 0, CLI_FLAG, &o->json, 0, 0, NULL, "one JSON line"},
        {0},
    };
    const char *pos[1];
    int np, rc = cli_parse("bench soak", "-m MODEL [--clients N] [--seconds S] [--kv-blocks N | --kv-mem BYTES]", opts,
                           argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if (!o->model) { cli_error("bench soak", "missing -m MODEL"); return 2; }
    if (o->kv_blocks && o->kv_mem) { cli_error("bench soak", "give --kv-blocks or --kv-mem, not both"); return 2; }
    return 0;
}

typedef struct {
    long rss_start, rss_end;
    sk_kv kv0, kv;
    double p50, p99;
    bool server_clean;
} sk_result;

/* Appends name to the failed checks. */
static void sk_fail(json_t *failed, const char *name) { json_array_append_new(failed, json_string(name)); }

static json_t *sk_checks(const sk_opts *o, const sk_tally *t, const sk_result *r)
{
    json_t *f = json_array();
    if (t->errors) sk_fail(f, "errors");
    if (!t->completed) sk_fail(f, "completed");
    if (r->kv.blocks_used != 0 || r->kv.running != 0) sk_fail(f, "blocks_used");
    if (!SK_ASAN && (r->rss_start < 0 || r->rss_end < 0 ||
                     (uint64_t)(r->rss_end > r->rss_start ? r->rss_end - r->rss_start : 0) * 1024 > o->rss_slack))
        sk_fail(f, "rss");
    if (!r->server_clean) sk_fail(f, "server_exit");
    return f;
}

static void sk_report(const sk_opts *o, const sk_tally *t, const sk_result *r, json_t *failed)
{
    const char *base = strrchr(o->model, '/') ? strrchr(o->model, '/') + 1 : o->model;
    const long requests = t->completed + t->disconnects + t->errors;
    if (o->json) {
        json_t *fe = json_array();
        for (int i = 0; i < t->n_first; i++) json_array_append_new(fe, json_string(t->first[i]));
        json_t *j = json_pack("{s:s, s:i, s:i, s:f, s:I, s:I, s:I, s:I, s:o}", "model", base, "clients", o->clients,
                              "seconds", o->seconds, "disconnect_fraction", o->disconnect, "requests",
                              (json_int_t)requests, "completed", (json_int_t)t->completed, "disconnects",
                              (json_int_t)t->disconnects, "errors", (json_int_t)t->errors, "first_errors", fe);
        json_object_set_new(j, "latency_p50_ms", json_real(r->p50));
        json_object_set_new(j, "latency_p99_ms", json_real(r->p99));
        json_object_set_new(j, "kv_blocks_total", json_integer((json_int_t)r->kv.blocks_total));
        json_object_set_new(j, "kv_blocks_used_end", json_integer((json_int_t)r->kv.blocks_used));
        json_object_set_new(j, "requests_running_end", json_integer((json_int_t)r->kv.running));
        json_object_set_new(j, "preemptions", json_integer((json_int_t)(r->kv.preemptions - r->kv0.preemptions)));
        json_object_set_new(j, "rss_start_kb", json_integer(r->rss_start));
        json_object_set_new(j, "rss_end_kb", json_integer(r->rss_end));
        json_object_set_new(j, "rss_judged", json_boolean(!SK_ASAN));
        json_object_set_new(j, "server_clean_exit", json_boolean(r->server_clean));
        json_object_set_new(j, "failed", json_incref(failed));
        json_object_set_new(j, "ok", json_boolean(json_array_size(failed) == 0));
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        if (s) printf("%s\n", s);
        free(s);
        json_decref(j);
        return;
    }
    printf("soak: %s, %d clients for %d s, KV pool %.0f blocks, %.0f%% of requests disconnected on purpose\n", base,
           o->clients, o->seconds, r->kv.blocks_total, 100 * o->disconnect);
    printf("requests   %ld: %ld completed, %ld disconnected, %ld errors\n", requests, t->completed, t->disconnects,
           t->errors);
    for (int i = 0; i < t->n_first; i++) printf("  error: %s\n", t->first[i]);
    printf("latency    p50 %.1f ms, p99 %.1f ms (completed requests, end to end)\n", r->p50, r->p99);
    printf("kv blocks  %.0f used and %.0f requests running at the end (must be 0); %.0f preemptions\n", r->kv.blocks_used,
           r->kv.running, r->kv.preemptions - r->kv0.preemptions);
    printf("rss        %ld KiB after the warm-up, %ld KiB at the end (%+ld KiB; %s %llu KiB)\n", r->rss_start, r->rss_end,
           r->rss_end - r->rss_start, SK_ASAN ? "not judged under ASan, slack" : "slack",
           (unsigned long long)(o->rss_slack >> 10));
    printf("server     %s\n", r->server_clean ? "exited 0 on SIGTERM" : "did not exit cleanly");
    if (json_array_size(failed) == 0) {
        printf("PASS\n");
        return;
    }
    printf("FAIL:");
    for (size_t i = 0; i < json_array_size(failed); i++) printf(" %s", json_string_value(json_array_get(failed, i)));
    printf("\n");
}

int bench_soak(int argc, char **argv)
{
    sk_opts o;
    int rc = sk_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.kv_blocks) {
        const uint64_t bb = sk_block_bytes(o.model);
        if (!bb) return 1;
        o.kv_mem = bb * (uint64_t)o.kv_blocks;
    }
    bench_server srv;
    int port;
    if (sk_server_start(&srv, &o, &port) != 0) return 1;
    sk_tally t = {.mu = PTHREAD_MUTEX_INITIALIZER};
    sk_client cl[SK_MAX_CLIENTS];
    for (int i = 0; i < o.clients; i++)
        cl[i] = (sk_client){.o = &o, .port = port, .id = i, .rng = {o.seed * 7919 + (uint64_t)i}, .tally = &t};
    sk_result r = {.rss_start = -1, .rss_end = -1};
    rc = sk_run_clients(cl, o.clients, 0);
    if (!rc) rc = sk_read_kv(port, &r.kv0);
    r.rss_start = bench_server_rss_kb(&srv);
    if (!rc) rc = sk_run_clients(cl, o.clients, bench_now() + o.seconds);
    /* a dropped stream's blocks are freed at the engine's next step */
    for (double until = bench_now() + 10; !rc; usleep(100 * 1000)) {
        rc = sk_read_kv(port, &r.kv);
        if (rc || (r.kv.blocks_used == 0 && r.kv.running == 0) || bench_now() > until) break;
    }
    r.rss_end = bench_server_rss_kb(&srv);
    r.server_clean = bench_server_stop(&srv, rc != 0 || t.errors > 0) == 0; /* errors: its stderr may say why */
    if (rc) {
        free(t.lat);
        return 1;
    }
    r.p50 = bench_percentile(t.lat, t.n_lat, 0.5);
    r.p99 = bench_percentile(t.lat, t.n_lat, 0.99);
    json_t *failed = sk_checks(&o, &t, &r);
    sk_report(&o, &t, &r, failed);
    rc = json_array_size(failed) ? 1 : 0;
    json_decref(failed);
    free(t.lat);
    return rc;
}
