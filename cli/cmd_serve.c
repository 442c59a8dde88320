/* cmd_serve.c - `pagellm serve`: an OpenAI-compatible HTTP server over the
 * engine (continuous batching, paged KV cache, prefix cache).
 *
 * Start-up: flags -> model -> token table -> engine -> HTTP server, then
 * "listening on http://HOST:PORT" on stderr (tests wait for that line).
 *
 * Shutdown on SIGTERM or SIGINT (exit status 0):
 *   1. new generations get 503 and /health answers 503 (connections are
 *      still accepted, so that clients and load balancers hear it, and each
 *      answer closes its connection); the engine stops taking requests
 *      (pl_engine_shutdown);
 *   2. let running and waiting requests finish, up to --drain-timeout
 *      seconds; a second signal or the timeout cancels them instead;
 *   3. close every connection, free the engine and the model.
 * The signals are blocked in every thread and taken by sigtimedwait in the
 * main thread, so no work happens in a signal handler.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"
#include "commands.h"
#include "gen_opts.h"
#include "tier_opts.h"
#include "server_http.h"
#include "server_openai.h"
#include "server_tokens.h"

typedef struct {
    gen_opts g;
    srv_http_config http;
    int max_queue, completions_max_tokens;
    double drain_s, gather_ms;
    bool no_prefix_cache, prefix_order;
    tier_opts tiers;
    const char *role;
    uint64_t max_body;
    const char *api_key, *api_key_file, *metrics_key;
    srv_keys api_keys, metrics_keys; /* what http.api_keys / metrics_keys point to */
    cli_strs cors_flags;             /* --cors-origin, as given */
    srv_cors cors;                   /* what http.cors points to */
    const char *chat_template_file, *reasoning_format;
    char *chat_template;             /* the file's text (mc.chat_template) */
} serve_opts;

#define SEED_UNSET UINT64_MAX /* --seed not given: each request without a seed gets a random one */

/* The API and metrics keys from --api-key ($PAGELLM_API_KEY),
 * --api-key-file and --metrics-key. A key that is set but blank is refused:
 * it would otherwise turn authentication off without a word. Returns 0 or
 * the exit status (1: the file cannot be read, 2: not a key). */
static int serve_keys(serve_opts *o)
{
    char err[600];
    const char *env = getenv("PAGELLM_API_KEY");
    int rc = 0;
    if (o->api_key) rc = srv_keys_add(&o->api_keys, o->api_key, "--api-key", err, sizeof err);
    else if (env) rc = srv_keys_add(&o->api_keys, env, "$PAGELLM_API_KEY", err, sizeof err);
    bool loose = false;
    if (!rc && o->api_key_file) rc = srv_keys_load(&o->api_keys, o->api_key_file, &loose, err, sizeof err);
    if (!rc && o->metrics_key) rc = srv_keys_add(&o->metrics_keys, o->metrics_key, "--metrics-key", err, sizeof err);
    if (rc) {
        cli_error("serve", "%s", rc == PL_ERR_NOMEM ? "out of memory" : err);
        return rc == PL_ERR_INVAL ? 2 : 1;
    }
    if (loose)
        fprintf(stderr, "pagellm serve: warning: %s is readable by group or others (chmod 600 it)\n", o->api_key_file);
    o->http.api_keys = &o->api_keys;
    o->http.metrics_keys = &o->metrics_keys;
    return 0;
}

static int serve_parse(int argc, char **argv, serve_opts *o)
{
    gen_opts_default(&o->g);
    o->g.max_seqs = 16;
    o->g.seed = SEED_UNSET;
    o->http = (srv_http_config){.host = "127.0.0.1", .port = 8080, .max_conns = 512, .max_conns_per_ip = 64,
                                .timeout_s = 600, .header_timeout_s = 10};
    o->max_queue = 256;
    o->max_body = 8u << 20;
    o->drain_s = 30;
    o->completions_max_tokens = 16;
    pl_engine_params dep;
    pl_engine_params_default(&dep);
    o->gather_ms = dep.gather_us / 1000.0;
    const cli_opt mine[] = {
        {"host", 0, CLI_STR, &o->http.host, 0, 0, "ADDR", "address to listen on (default 127.0.0.1)"},
        {"port", 0, CLI_INT, &o->http.port, 0, 65535, "N", "port (default 8080; 0 = any free port, printed)"},
        {"api-key", 0, CLI_STR, &o->api_key, 0, 0, "KEY", "require Authorization: Bearer KEY on /v1/* and /metrics (also $PAGELLM_API_KEY)"},
        {"api-key-file", 0, CLI_STR, &o->api_key_file, 0, 0, "FILE", "API keys, one per line ('#' comments); with --api-key, either is accepted"},
        {"metrics-key", 0, CLI_STR, &o->metrics_key, 0, 0, "KEY", "a key that opens /metrics only (a scraper's)"},
        {"metrics-public", 0, CLI_FLAG, &o->http.metrics_public, 0, 0, NULL, "/metrics without a key even when API keys are set"},
        {"tls-cert", 0, CLI_STR, &o->http.tls_cert, 0, 0, "FILE", "serve HTTPS with this PEM certificate (chain) ..."},
        {"tls-key", 0, CLI_STR, &o->http.tls_key, 0, 0, "FILE", "... and this PEM private key"},
        {"max-seqs", 0, CLI_INT, &o->g.max_seqs, 1, 4096, "N", "sequences generated at once (default 16; n of a request must fit)"},
        {"max-queue", 0, CLI_INT, &o->max_queue, 0, 1 << 20, "N", "waiting requests beyond which the server answers 503 (default 256)"},
        {"max-body", 0, CLI_SIZE, &o->max_body, 1, 1e12, "BYTES", "largest request body, e.g. 8M (default 8M; 413 beyond)"},
        {"max-conns", 0, CLI_INT, &o->http.max_conns, 1, 1 << 16, "N", "concurrent connections, one thread each (default 512; 503 beyond)"},
        {"max-conns-per-ip", 0, CLI_INT, &o->http.max_conns_per_ip, 0, 1 << 16, "N", "connections from one client address (default 64; 429 beyond; 0 = no limit, e.g. behind a proxy)"},
        {"header-timeout", 0, CLI_INT, &o->http.header_timeout_s, 0, 1 << 20, "S", "a request's head and body must arrive within S seconds of the connection or of the previous answer, else the connection is closed (default 10; 0 = no deadline)"},
        {"timeout", 0, CLI_INT, &o->http.timeout_s, 0, 1 << 20, "S", "close connections silent for S seconds (default 600; 0 = never)"},
        {"drain-timeout", 0, CLI_FLOAT, &o->drain_s, 0, 1e6, "S", "on SIGTERM, wait S seconds for running requests, then cancel (default 30)"},
        {"gather-ms", 0, CLI_FLOAT, &o->gather_ms, 0, 1000, "MS", "idle, wait for requests sent together until none came for MS ms (at most 4x), so that they prefill in one step (default 5; 0 = off)"},
        {"default-max-tokens", 0, CLI_INT, &o->completions_max_tokens, 1, 1 << 20, "N", "/v1/completions max_tokens when not given (default 16)"},
        {"no-prefix-cache", 0, CLI_FLAG, &o->no_prefix_cache, 0, 0, NULL, "do not reuse cached prompt blocks across requests"},
        {"prefix-order", 0, CLI_FLAG, &o->prefix_order, 0, 0, NULL, "schedule waiting requests with the longest cached prefix first"},
        {"role", 0, CLI_STR, &o->role, 0, 0, "ROLE", "mixed (default), prefill (fill and publish prompts' KV to the tiers, answer with at most 1 token) or decode (take prompts' KV from the tiers); prefill and decode need --kv-disk or --kv-redis"},
        {"verbose", 'v', CLI_FLAG, &o->http.verbose, 0, 0, NULL, "log every request on stderr"},
        {"cors-origin", 0, CLI_STRS, &o->cors_flags, 0, 0, "ORIGIN", "browser origins allowed to read answers (repeatable or a comma list; default *: any)"},
        {"chat-template-file", 0, CLI_STR, &o->chat_template_file, 0, 0, "FILE", "Jinja chat template to use instead of the model's"},
        {"reasoning-format", 0, CLI_STR, &o->reasoning_format, 0, 0, "FMT", "deepseek: <think>...</think> goes to reasoning_content (default); none: left in content"},
        {0},
    };
    cli_opt opts[GEN_OPTS_N + sizeof mine / sizeof mine[0] + TIER_OPTS_N]; /* mine ends with {0}: the end mark's room */
    int n = 0;
    gen_opts_table(&o->g, opts, &n);
    for (int i = 0; i < n; i++) /* sampling flags are the defaults of requests that do not say */
        if (strcmp(opts[i].name, "seed") == 0) opts[i].help = "seed of requests without one (default: random per request)";
    for (const cli_opt *x = mine; x->name; x++) opts[n++] = *x;
    tier_opts_table(&o->tiers, opts, &n);
    opts[n] = (cli_opt){0};
    const char *pos[1];
    int np, rc = cli_parse("serve", "-m MODEL [--host ADDR] [--port N] [options]", opts, argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if (!o->g.model) { cli_error("serve", "missing -m MODEL"); return 2; }
    if (!o->http.tls_cert != !o->http.tls_key) { cli_error("serve", "--tls-cert and --tls-key go together"); return 2; }
    if ((rc = tier_opts_check("serve", &o->tiers, &o->g, o->no_prefix_cache))) return rc;
    if (o->role && strcmp(o->role, "mixed") && strcmp(o->role, "prefill") && strcmp(o->role, "decode")) {
        cli_error("serve", "--role %s: expected mixed, prefill or decode", o->role);
        return 2;
    }
    if (o->role && strcmp(o->role, "mixed") && !tier_opts_any(&o->tiers)) {
        cli_error("serve", "--role %s needs a KV tier (--kv-disk or --kv-redis) to share prompts through", o->role);
        return 2;
    }
    if (o->metrics_key && o->http.metrics_public) {
        cli_error("serve", "--metrics-key and --metrics-public contradict each other");
        return 2;
    }
    o->http.max_body = o->max_body;
    char err[300];
    for (int i = 0; i < o->cors_flags.n; i++)
        if (srv_cors_add(&o->cors, o->cors_flags.v[i], err, sizeof err)) { cli_error("serve", "%s", err); return 2; }
    o->http.cors = &o->cors;
    if (o->reasoning_format && strcmp(o->reasoning_format, "deepseek") && strcmp(o->reasoning_format, "none")) {
        cli_error("serve", "--reasoning-format must be deepseek or none, got '%s'", o->reasoning_format);
        return 2;
    }
    return serve_keys(o);
}

/* --chat-template-file: read, and tried on a one-message chat so that a
 * template that cannot work fails now, not on every request (a template
 * that raises for this chat, e.g. wanting a system message, is fine). */
static int serve_chat_template(serve_opts *o, const pl_model *m)
{
    if (!o->chat_template_file) return 0;
    uint64_t n = 0;
    o->chat_template = cli_read_file(o->chat_template_file, &n);
    if (!o->chat_template) {
        cli_error("serve", "cannot read --chat-template-file %s", o->chat_template_file);
        return 1;
    }
    if (strlen(o->chat_template) != n) {
        cli_error("serve", "--chat-template-file %s holds a NUL byte", o->chat_template_file);
        return 2;
    }
    char *out = NULL;
    if (pl_chat_apply(m, o->chat_template, "[{\"role\":\"user\",\"content\":\"Hello\"}]", NULL, true, NULL, &out) != 0 &&
        strncmp(pl_last_error(), "template raised:", 16) != 0) {
        cli_error("serve", "--chat-template-file %s: %s", o->chat_template_file, pl_last_error());
        return 2;
    }
    pl_free(out);
    return 0;
}

/* The model's name in the API: its file's basename. */
static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int serve_engine_params(const serve_opts *o, const pl_model *m, pl_engine_params *ep)
{
    pl_engine_params_default(ep);
    if (gen_opts_ctx_params("serve", &o->g, &ep->ctx)) return 2;
    if (ep->ctx.n_ctx == 0) {
        /* decided here rather than by the engine, so that request checks use the same number;
         * with a window the context is the sinks (in whole blocks) + the window, as pl_ctx's default */
        uint32_t train = pl_model_n_ctx_train(m), bs = ep->ctx.block_size, w = pl_model_sliding_window(m);
        ep->ctx.n_ctx = ep->ctx.kv_window ? (ep->ctx.kv_sinks + bs - 1) / bs * bs + ep->ctx.kv_window
                                          : train && train < 4096 ? train : 4096;
        /* sliding-window attention: the KV slots pl_ctx's default gives (pagellm.h) */
        if (!ep->ctx.kv_window && w && ep->ctx.swa != PL_SWA_OFF)
            ep->ctx.n_ctx = w + bs + (ep->ctx.max_batch < 512 ? ep->ctx.max_batch : 512);
    }
    ep->max_batch_tokens = (uint32_t)o->g.batch;
    ep->max_queue = (uint32_t)o->max_queue;
    ep->prefix_cache = !o->no_prefix_cache;
    ep->prefix_order = o->prefix_order;
    ep->gather_us = (uint32_t)(o->gather_ms * 1000 + 0.5);
    tier_opts_engine_params(&o->tiers, ep);
    ep->role = !o->role || !strcmp(o->role, "mixed") ? PL_ROLE_MIXED : !strcmp(o->role, "prefill") ? PL_ROLE_PREFILL : PL_ROLE_DECODE;
    return 0;
}

static void serve_model_ctx(const serve_opts *o, const pl_model *m, uint32_t n_ctx, srv_model_ctx *mc)
{
    memset(mc, 0, sizeof *mc);
    mc->model = m;
    mc->vocab = pl_model_vocab(m);
    mc->n_ctx = n_ctx;
    mc->kv_window = (uint32_t)o->g.kv_window;
    /* sliding-window attention that frees blocks runs past n_ctx like a window (pl_ctx_unbounded) */
    const uint32_t w = pl_model_sliding_window(m);
    if (!mc->kv_window && w && strcmp(o->g.swa, "off") != 0 && n_ctx > w) mc->kv_window = w;
    gen_opts_sampler_params(&o->g, &mc->defaults);
    mc->random_seed = o->g.seed == SEED_UNSET;
    if (mc->random_seed) mc->defaults.seed = 0;
    mc->completions_max_tokens = o->completions_max_tokens;
    mc->chat_template = o->chat_template;
    mc->reasoning_format = o->reasoning_format && strcmp(o->reasoning_format, "none") == 0 ? SRV_REASONING_NONE
                                                                                           : SRV_REASONING_DEEPSEEK;
}

/* Waits for SIGINT/SIGTERM (blocked in every thread); returns the signal. */
static int wait_signal(const sigset_t *set, double timeout_s)
{
    struct timespec ts = {(time_t)timeout_s, (long)((timeout_s - (double)(time_t)timeout_s) * 1e9)};
    for (;;) {
        int sig = timeout_s < 0 ? sigwaitinfo(set, NULL) : sigtimedwait(set, NULL, &ts);
        if (sig >= 0 || errno != EINTR) return sig;
    }
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Steps 1-2 of the shutdown (see the header). */
static void serve_drain(srv *s, pl_engine *e, const sigset_t *set, double drain_s)
{
    srv_quiesce(s);
    pl_engine_shutdown(e);
    uint64_t n = srv_active(s);
    if (n) fprintf(stderr, "pagellm serve: shutting down; waiting up to %.0f s for %llu request(s) (signal again to cancel them)\n",
                   drain_s, (unsigned long long)n);
    double t_end = mono_s() + drain_s;
    while (srv_active(s) && mono_s() < t_end)
        if (wait_signal(set, 0.05) > 0) break;
    if (srv_active(s)) {
        fprintf(stderr, "pagellm serve: cancelling %llu request(s)\n", (unsigned long long)srv_active(s));
        srv_abort(s);
        for (int i = 0; i < 100 && srv_active(s); i++) wait_signal(set, 0.05);
    }
}

static int serve_run(serve_opts *o, const sigset_t *set)
{
    pl_model *m = NULL;
    pl_engine *e = NULL;
    srv *s = NULL;
    srv_tokens tok = {0};
    pl_file_info info;
    pl_engine_params ep;
    srv_model_ctx mc;
    const int lrc = gen_opts_load_model("serve", &o->g, &m);
    if (lrc) return lrc;
    if (pl_file_inspect(o->g.model, &info) != 0) {
        cli_error("serve", "%s", pl_last_error());
        pl_model_free(m);
        return 1;
    }
    int rc = serve_engine_params(o, m, &ep);
    if (!rc) rc = serve_chat_template(o, m);
    if (!rc && srv_tokens_init(&tok, pl_model_vocab(m), info.tokenizer) != 0) rc = 1, cli_error("serve", "out of memory");
    if (!rc && pl_engine_new(&e, m, &ep) != 0) rc = 1, cli_error("serve", "%s", pl_last_error());
    if (!rc) gen_opts_ctx_warn("serve", m, ep.ctx.n_ctx, ep.ctx.kv_window != 0);
    serve_model_ctx(o, m, ep.ctx.n_ctx, &mc);
    if (!rc) rc = srv_start(&s, &o->http, e, &mc, &tok, base_name(o->g.model));
    if (!rc) {
        const char *h = o->http.host;
        fprintf(stderr, "pagellm serve: model %s, context %u tokens, up to %u sequences\n", base_name(o->g.model),
                ep.ctx.n_ctx, ep.ctx.max_seqs);
        fprintf(stderr, strchr(h, ':') ? "listening on %s://[%s]:%d\n" : "listening on %s://%s:%d\n",
                o->http.tls_cert ? "https" : "http", h, srv_port(s));
        int sig = wait_signal(set, -1);
        fprintf(stderr, "pagellm serve: %s received\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        serve_drain(s, e, set, o->drain_s);
        srv_stop(s);
    }
    pl_engine_free(e);
    srv_tokens_free(&tok);
    pl_model_free(m);
    if (!rc) fprintf(stderr, "pagellm serve: stopped\n");
    return rc;
}

/* Each connection holds three descriptors (the client's socket and the
 * gate's socket pair to the HTTP library), beside model files and tiers:
 * the soft open-file limit is raised to the hard one, and a hard limit
 * below what --max-conns needs is said at start (connections past it get
 * the gate's 503). */
static void serve_fd_limit(unsigned max_conns)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur != rl.rlim_max) {
        struct rlimit up = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
    }
    const rlim_t need = (rlim_t)max_conns * 3 + 64;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        fprintf(stderr,
                "pagellm serve: warning: the open-file limit is %llu, below the ~%llu that --max-conns %u needs "
                "(three descriptors a connection); connections past it get 503 (raise it: ulimit -n)\n",
                (unsigned long long)rl.rlim_cur, (unsigned long long)need, max_conns);
}

int cmd_serve(int argc, char **argv)
{
    serve_opts o;
    memset(&o, 0, sizeof o);
    int rc = serve_parse(argc, argv, &o);
    if (rc) {
        srv_keys_free(&o.api_keys);
        srv_keys_free(&o.metrics_keys);
        srv_cors_free(&o.cors);
        return rc < 0 ? 0 : rc;
    }
    /* Block the stop signals before any thread starts, so that every
     * thread inherits the mask and only sigtimedwait sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    serve_fd_limit(o.http.max_conns);
    rc = serve_run(&o, &set);
    /* The mask stays: a second signal sent during the drain is pending, and
     * unblocking it here would kill the process (143/130) after a clean stop. */
    free(o.chat_template);
    srv_keys_free(&o.api_keys);
    srv_keys_free(&o.metrics_keys);
    srv_cors_free(&o.cors);
    return rc;
}
