/* bench_serve.c - `pagellm bench serve`: concurrent streaming clients
 * against `pagellm serve`, beside llama.cpp's batched decode in the same run.
 *
 * Method:
 *   server   `pagellm serve -m MODEL --host 127.0.0.1 --port P --max-seqs
 *            MAX(clients) -t T --ctx PROMPT+MAX_TOKENS --temp 0`, a child
 *            started and stopped as bench_http.h says.
 *   client   bench_http.h's client: POST /v1/completions with stream:true,
 *            the prompt as token ids (peer-bench's -np prompt: BOS, then ids
 *            cycling from 100; tokens 1 and 2 are changed per request so
 *            that no request is served another's prompt from the prefix
 *            cache: every TTFT pays its prefill, as the peer's do), max_tokens,
 *            temperature 0, ignore_eos (every stream has exactly max_tokens
 *            tokens), logprobs 0 (so that every token makes its own SSE
 *            chunk even when its text is held back as incomplete UTF-8;
 *            --no-logprobs drops it and times text chunks instead) and
 *            stream_options.include_usage (completion_tokens is the count).
 *            Every read has a deadline (--timeout).
 *   level    after one warm-up stream, for each N in --clients, N threads
 *            start together (a gate), each with one streaming request:
 *              total_tok_s   completion tokens / (last stream end - first start)
 *              decode_tok_s  sum(tokens - 1) / (last token of any stream -
 *                            first token of any stream): decode only
 *              ttft          first token chunk - request start, per stream
 *              itl           gaps between consecutive token chunks
 *              ft spread     last stream's first token - first stream's
 *                            first token (median over reps)
 *            p50/p99 are over all streams of the level (all --reps pooled;
 *            throughputs are medians over reps).
 *   peer     /tmp/llamacpp-peer/peer-bench -m MODEL -np PROMPT -ng MAX_TOKENS
 *            -b N -t T (the same prompt but for tokens 1-2, the same lengths,
 *            N sequences decoded in one batch per step, no HTTP): its
 *            decode_tok_s, run right after our level while the server is
 *            idle; ratio = our decode_tok_s / peer decode_tok_s
 *            (ratio_total uses total_tok_s, which also pays prefill, HTTP
 *            and SSE). The peer's -t threads spin while they wait: on a
 *            machine whose cores are busy with other work its figures
 *            collapse (seen: 0.9 tok/s), so compare on an idle machine.
 *   fairness peer-bench prefills its N prompts first, then times N x
 *            (MAX_TOKENS - 1) tokens over its decode loop; our decode window
 *            is the same N x (MAX_TOKENS - 1) tokens when every stream's
 *            first token comes out of one prefill step (ft spread ~ 0; the
 *            engine gathers requests sent together, pl_engine_params
 *            gather_us). When they do not (ft spread of a step or more),
 *            the window also holds the later streams' prefill and counts
 *            it against us; it is not cut out. Per token we also do what
 *            the peer does not: the sampler, logprobs 0 (a log-softmax over
 *            the vocabulary), detokenizing, stop-string checks, and over
 *            HTTP one SSE chunk of JSON; its decode is argmax only.
 *   engine   unless --no-engine, the same streams go to an engine built in
 *            this process with the server's parameters (defaults for the
 *            rest, as the server's, gather_us included; one reader thread
 *            per stream, timing events as they are read): engine_decode_tok_s
 *            is decode_tok_s without HTTP, SSE and JSON, run right after the
 *            HTTP streams of each rep; the gap between the two is what the
 *            server adds.
 * The goal: with 8 concurrent sequences, our throughput >= 2x the
 * peer's batched decode.
 *
 * --svg FILE plots the levels against the number of clients: throughput
 * (HTTP total and decode, the in-process engine's decode, the peer's), time
 * to first token and inter-token latency (p50, p99); bench/svg.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <math.h>

#include "bench_common.h"
#include "bench_http.h"
#include "cli.h"
#include "svg.h"

#define SV_MAX_LEVELS 16
#define SV_MAX_CLIENTS 256

typedef struct {
    const char *model, *clients_s, *peer, *svg;
    int max_tokens, prompt_tokens, port, threads, reps, timeout_s;
    bool no_peer, no_logprobs, no_engine, json;
    int levels[SV_MAX_LEVELS], n_levels, max_clients;
} sv_opts;

/* ----------------------------------------------------------- a client */

/* Clients wait here so that a level's streams start together; ABORT
 * releases them without a request when not every thread could start. */
enum { SV_WAIT, SV_GO, SV_ABORT };
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;
} sv_gate;

/* One stream: over HTTP (h), or to the in-process engine when engine is
 * set (h's out fields are then filled the same way). */
typedef struct {
    bench_http h;
    sv_gate *gate;
    pl_engine *engine;      /* in-process: submit rp to it instead of HTTP */
    pl_request_params rp;   /* in-process request (prompt owned) */
    double t_start, t_end;
} sv_client;

static void sv_fail(bench_http *c, const char *fmt, const char *arg)
{
    if (!c->err[0]) snprintf(c->err, sizeof c->err, fmt, arg);
}

/* In-process: the same request straight to the engine; a token is timed
 * when its event is read, as the HTTP client times its chunk. */
static void sv_local_stream(sv_client *cl)
{
    bench_http *c = &cl->h;
    pl_request *r;
    if (pl_engine_submit(cl->engine, &cl->rp, &r) != 0) { sv_fail(c, "submit: %s", pl_last_error()); return; }
    pl_event ev;
    int rc;
    while ((rc = pl_request_next(r, &ev, -1)) == 1) {
        if (ev.kind == PL_EV_ERROR) sv_fail(c, "%s", ev.message);
        else if (ev.kind == PL_EV_DONE) c->usage_tokens = (int)ev.completion_tokens;
        else if (ev.token >= 0 && c->n_tok < c->cap_tok) c->tok_t[c->n_tok++] = bench_now();
    }
    if (rc < 0) sv_fail(c, "pl_request_next: %s", pl_last_error());
    c->status = 200;
    c->done = true;
    pl_request_free(r);
}

static void *sv_client_main(void *arg)
{
    sv_client *c = arg;
    pthread_mutex_lock(&c->gate->mu);
    while (c->gate->state == SV_WAIT) pthread_cond_wait(&c->gate->cv, &c->gate->mu);
    const int st = c->gate->state;
    pthread_mutex_unlock(&c->gate->mu);
    if (st == SV_ABORT) return NULL;
    c->t_start = bench_now();
    if (c->engine) sv_local_stream(c);
    else bench_http_run(&c->h);
    c->t_end = bench_now();
    return NULL;
}

/* Room for the prompt and every token, rounded up to whole blocks: the
 * server's --ctx and the in-process engine's n_ctx. */
static int sv_ctx_tokens(const sv_opts *o) { return (o->prompt_tokens + o->max_tokens + 15) / 16 * 16; }

/* ------------------------------------------------------------ prompts */

/* Prompts: peer-bench's -np prompt, with tokens 1 and 2 (after BOS) made
 * distinct per request, so that no request finds another's prompt in the
 * prefix cache and every TTFT pays a real prefill, as the peer's does. */
typedef struct {
    int32_t *ids;   /* [prompt_tokens] */
    int32_t span;   /* distinct tokens are 100 .. 100 + span - 1 */
    uint64_t next;  /* requests made so far */
    pl_model *model; /* kept for the in-process engine (NULL with --no-engine) */
} sv_prompts;

static int sv_prompts_init(const sv_opts *o, sv_prompts *p)
{
    pl_model *m;
    memset(p, 0, sizeof *p);
    if (pl_model_load(&m, o->model) != 0) { cli_error("bench serve", "%s", pl_last_error()); return -1; }
    const int32_t nv = (int32_t)pl_model_n_vocab(m);
    p->ids = malloc(sizeof *p->ids * (size_t)o->prompt_tokens);
    if (p->ids) bench_synthetic_prompt(nv, pl_vocab_bos(pl_model_vocab(m)), p->ids, o->prompt_tokens);
    p->span = nv > 1100 ? 1000 : nv > 101 ? nv - 100 : 1;
    if (o->no_engine) pl_model_free(m);
    else p->model = m;
    return p->ids ? 0 : -1;
}

/* The next request's prompt ids (malloc'd), or NULL. */
static int32_t *sv_prompt_next(const sv_opts *o, sv_prompts *p)
{
    const uint64_t k = p->next++;
    int32_t *ids = malloc(sizeof *ids * (size_t)o->prompt_tokens);
    if (!ids) return NULL;
    memcpy(ids, p->ids, sizeof *ids * (size_t)o->prompt_tokens);
    if (o->prompt_tokens > 1) ids[1] = 100 + (int32_t)(k % (uint64_t)p->span);
    if (o->prompt_tokens > 2) ids[2] = 100 + (int32_t)(k / (uint64_t)p->span % (uint64_t)p->span);
    return ids;
}

/* The next request's body (malloc'd), or NULL. */
static char *sv_body(const sv_opts *o, sv_prompts *p)
{
    int32_t *ids = sv_prompt_next(o, p);
    if (!ids) return NULL;
    json_t *a = json_array();
    for (int i = 0; i < o->prompt_tokens; i++) json_array_append_new(a, json_integer(ids[i]));
    free(ids);
    json_t *j = json_pack("{s:o, s:i, s:i, s:b, s:b, s:{s:b}}", "prompt", a, "max_tokens", o->max_tokens,
                          "temperature", 0, "stream", 1, "ignore_eos", 1, "stream_options", "include_usage", 1);
    if (j && !o->no_logprobs) json_object_set_new(j, "logprobs", json_integer(0));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

/* The same request for the in-process engine: what the server makes of
 * sv_body (greedy, ignore_eos, logprobs 0 unless --no-logprobs). */
static int sv_local_params(const sv_opts *o, sv_prompts *p, pl_request_params *rp)
{
    memset(rp, 0, sizeof *rp);
    int32_t *ids = sv_prompt_next(o, p);
    if (!ids) return -1;
    rp->prompt = ids;
    rp->n_prompt = (size_t)o->prompt_tokens;
    rp->max_tokens = o->max_tokens;
    rp->n = 1;
    pl_sampler_params_default(&rp->sampling);
    rp->sampling.temperature = 0;
    rp->sampling.seed = 0;
    rp->ignore_eos = true;
    rp->top_logprobs = o->no_logprobs ? -1 : 0;
    return 0;
}

/* The engine `pagellm serve` would run for these options (cmd_serve.c with
 * --max-seqs MAX(clients) -t T --ctx ROUNDED), in this process. */
static int sv_engine_start(const sv_opts *o, pl_model *m, pl_engine **out)
{
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.max_seqs = (uint32_t)o->max_clients;
    ep.ctx.n_threads = o->threads;
    ep.ctx.n_ctx = (uint32_t)sv_ctx_tokens(o);
    ep.ctx.max_batch = 512;
    ep.max_batch_tokens = 512;
    if (pl_engine_new(out, m, &ep) != 0) {
        fprintf(stderr, "pagellm bench serve: cannot start the in-process engine: %s\n", pl_last_error());
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------- one level */

typedef struct {
    int clients;
    double total_tok_s, decode_tok_s, ttft_p50, ttft_p99, itl_p50, itl_p99;
    long tokens;
    double peer_decode_tok_s; /* 0: not run */
    double eng_total_tok_s, eng_decode_tok_s; /* in-process engine, no HTTP; 0: not run */
    double spread_ms, eng_spread_ms;          /* first-token spread (sv_rates.spread), median over reps */
} sv_level;

typedef struct {
    double *v;
    size_t n, cap;
} sv_vec;

static int sv_vec_add(sv_vec *x, double v)
{
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 256;
        double *p = realloc(x->v, cap * sizeof *p);
        if (!p) return -1;
        x->v = p;
        x->cap = cap;
    }
    x->v[x->n++] = v;
    return 0;
}

/* One run of n streams. */
typedef struct {
    double total, decode; /* tok/s, as in the file header */
    double spread;        /* last stream's first token - first stream's first token, s */
    long tokens;
} sv_rates;

/* Folds finished clients into the level's figures; -1 if any failed. */
static int sv_collect(const sv_client *cl, int n, sv_vec *ttft, sv_vec *itl, sv_rates *out)
{
    double t0 = 1e300, t1 = 0, f0 = 1e300, f1 = 0, f0_last = 0;
    long tok = 0, dec = 0;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const bench_http *c = &cl[i].h;
        if (c->err[0]) {
            fprintf(stderr, "pagellm bench serve: client %d of %d: %s\n", i, n, c->err);
            rc = -1;
        }
        int k = c->usage_tokens >= 0 ? c->usage_tokens : c->n_tok;
        if (c->logprobs && !c->err[0] && k != c->n_tok)
            fprintf(stderr, "pagellm bench serve: client %d: %d token chunks but usage says %d tokens\n", i, c->n_tok, k);
        tok += k;
        if (c->n_tok > 0) {
            dec += k - 1;
            if (sv_vec_add(ttft, (c->tok_t[0] - cl[i].t_start) * 1e3)) rc = -1;
            for (int j = 1; j < c->n_tok; j++)
                if (sv_vec_add(itl, (c->tok_t[j] - c->tok_t[j - 1]) * 1e3)) rc = -1;
            if (c->tok_t[0] < f0) f0 = c->tok_t[0];
            if (c->tok_t[0] > f0_last) f0_last = c->tok_t[0];
            if (c->tok_t[c->n_tok - 1] > f1) f1 = c->tok_t[c->n_tok - 1];
        }
        if (cl[i].t_start < t0) t0 = cl[i].t_start;
        if (cl[i].t_end > t1) t1 = cl[i].t_end;
    }
    out->tokens = tok;
    out->total = t1 > t0 ? (double)tok / (t1 - t0) : 0;
    out->decode = f1 > f0 ? (double)dec / (f1 - f0) : 0;
    out->spread = f0_last > f0 ? f0_last - f0 : 0;
    return rc;
}

/* Runs n concurrent streams once, over HTTP to port, or straight to the
 * engine eng when it is not NULL; adds latencies to ttft/itl, sets rates. */
static int sv_run_once(const sv_opts *o, int port, pl_engine *eng, sv_prompts *pr, int n, sv_vec *ttft, sv_vec *itl,
                       sv_rates *out)
{
    sv_client *cl = calloc((size_t)n, sizeof *cl);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    sv_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, SV_WAIT};
    int rc = cl && th ? 0 : -1, started = 0, made = 0;
    for (int i = 0; i < n && !rc; i++, made++) {
        cl[i] = (sv_client){.h = {.port = port, .path = "/v1/completions", .timeout_s = o->timeout_s,
                                  .logprobs = !o->no_logprobs, .sse = true, .usage_tokens = -1,
                                  .cap_tok = o->max_tokens + 8},
                            .gate = &gate, .engine = eng};
        bool req_ok = eng ? sv_local_params(o, pr, &cl[i].rp) == 0 : (cl[i].h.body = sv_body(o, pr)) != NULL;
        cl[i].h.tok_t = calloc((size_t)cl[i].h.cap_tok, sizeof(double));
        if (!cl[i].h.tok_t || !req_ok || pthread_create(&th[i], NULL, sv_client_main, &cl[i])) rc = -1;
        else started++;
    }
    if (rc) fprintf(stderr, "pagellm bench serve: could not start %d client threads\n", n);
    pthread_mutex_lock(&gate.mu);
    gate.state = rc ? SV_ABORT : SV_GO;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    /* started == made unless a start failed: threads 0..started-1 exist */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (!rc) rc = sv_collect(cl, n, ttft, itl, out);
    for (int i = 0; i < made; i++) {
        free(cl[i].h.body);
        free((void *)cl[i].rp.prompt);
        free(cl[i].h.tok_t);
        bench_http_free(&cl[i].h);
    }
    free(cl);
    free(th);
    return rc;
}

/* ------------------------------------------------------------- the peer */

/* peer-bench's decode_tok_s for n sequences decoded together; 0 if it
 * could not run (the reason is printed). */
static double sv_peer(const sv_opts *o, int n)
{
    char np[16], ng[16], b[16], t[16];
    snprintf(np, sizeof np, "%d", o->prompt_tokens);
    snprintf(ng, sizeof ng, "%d", o->max_tokens);
    snprintf(b, sizeof b, "%d", n);
    snprintf(t, sizeof t, "%d", o->threads);
    char *const argv[] = {(char *)o->peer, "-m", (char *)o->model, "-np", np, "-ng", ng, "-b", b, "-t", t, NULL};
    bench_child c;
    if (bench_child_spawn(&c, argv, 1) != 0) return 0;
    char *out = bench_child_read_all(&c, bench_now() + o->timeout_s);
    int st = out ? bench_child_wait(&c, bench_now() + 30) : bench_child_stop(&c, 5);
    double v = 0;
    json_t *j = out && st == 0 ? json_loads(out, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    if (j) v = json_number_value(json_object_get(j, "decode_tok_s"));
    if (!j || v <= 0) fprintf(stderr, "pagellm bench serve: peer-bench -b %d gave no decode_tok_s (status %d)\n", n, st);
    json_decref(j);
    free(out);
    return v;
}

/* ----------------------------------------------------------- the server */

/* Starts `pagellm serve` for these options and waits for its port. 0 or -1. */
static int sv_server_start(bench_server *s, const sv_opts *o, int *port)
{
    char p[16], seqs[16], t[16], ctx[16];
    snprintf(p, sizeof p, "%d", o->port);
    snprintf(seqs, sizeof seqs, "%d", o->max_clients);
    snprintf(t, sizeof t, "%d", o->threads);
    snprintf(ctx, sizeof ctx, "%d", sv_ctx_tokens(o));
    char *const argv[] = {"/proc/self/exe", "serve", "-m", (char *)o->model, "--host", "127.0.0.1", "--port", p,
                          "--max-seqs", seqs, "-t", t, "--ctx", ctx, "--temp", "0", "--seed", "0",
                          "--max-conns-per-ip", "0", NULL}; /* up to SV_MAX_CLIENTS from loopback */
    return bench_server_start(s, "bench serve", argv, port);
}

/* --------------------------------------------------------------- report */

static void sv_print(const sv_opts *o, const char *model, const sv_level *lv, int n)
{
    if (o->json) {
        for (int i = 0; i < n; i++) {
            const sv_level *l = &lv[i];
            json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "model", model, "clients",
                                  l->clients, "prompt_tokens", o->prompt_tokens, "max_tokens", o->max_tokens, "tokens",
                                  (json_int_t)l->tokens, "total_tok_s", l->total_tok_s, "decode_tok_s", l->decode_tok_s,
                                  "ttft_p50_ms", l->ttft_p50, "ttft_p99_ms", l->ttft_p99, "itl_p50_ms", l->itl_p50,
                                  "itl_p99_ms", l->itl_p99);
            json_object_set_new(j, "first_token_spread_ms", json_real(l->spread_ms));
            if (l->eng_decode_tok_s > 0) {
                json_object_set_new(j, "engine_total_tok_s", json_real(l->eng_total_tok_s));
                json_object_set_new(j, "engine_decode_tok_s", json_real(l->eng_decode_tok_s));
                json_object_set_new(j, "engine_first_token_spread_ms", json_real(l->eng_spread_ms));
            }
            if (l->peer_decode_tok_s > 0) {
                json_object_set_new(j, "peer_decode_tok_s", json_real(l->peer_decode_tok_s));
                json_object_set_new(j, "ratio", json_real(l->decode_tok_s / l->peer_decode_tok_s));
                json_object_set_new(j, "ratio_total", json_real(l->total_tok_s / l->peer_decode_tok_s));
            }
            char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
            if (s) printf("%s\n", s);
            free(s);
            json_decref(j);
        }
        return;
    }
    printf("serve: %s, prompt %d tokens, %d generated per stream, %d threads, %d rep(s)%s\n", model, o->prompt_tokens,
           o->max_tokens, o->threads, o->reps, o->no_peer ? "" : "; peer: peer-bench -b N (batched decode, no HTTP)");
    printf("%7s %7s %11s %12s %9s %9s %8s %8s %9s %12s %12s %7s %7s\n", "clients", "tokens", "total tok/s", "decode tok/s",
           "ttft p50", "ttft p99", "itl p50", "itl p99", "ft spread", "engine tok/s", "peer tok/s", "ratio", "r_total");
    for (int i = 0; i < n; i++) {
        const sv_level *l = &lv[i];
        printf("%7d %7ld %11.1f %12.1f %9.1f %9.1f %8.2f %8.2f %9.1f", l->clients, l->tokens, l->total_tok_s,
               l->decode_tok_s, l->ttft_p50, l->ttft_p99, l->itl_p50, l->itl_p99, l->spread_ms);
        if (l->eng_decode_tok_s > 0) printf(" %12.1f", l->eng_decode_tok_s);
        else printf(" %12s", "-");
        if (l->peer_decode_tok_s > 0)
            printf(" %12.1f %6.2fx %6.2fx\n", l->peer_decode_tok_s, l->decode_tok_s / l->peer_decode_tok_s,
                   l->total_tok_s / l->peer_decode_tok_s);
        else
            printf(" %12s %7s %7s\n", "-", "-", "-");
    }
    printf("(latencies in ms; ft spread = ms between the first and the last stream's first token (0: one prefill step);\n"
           " engine = the same streams to an in-process engine, no HTTP; ratio = decode tok/s / peer,\n"
           " r_total = total tok/s / peer)\n");
}

/* The --svg plot: one point per level; figures not measured (the engine or
 * the peer not run) are left out, not drawn as 0. */
static int sv_svg(const sv_opts *o, const char *model, const sv_level *lv, int n)
{
    double x[SV_MAX_LEVELS], y[8][SV_MAX_LEVELS];
    bool eng = false, peer = false;
    for (int i = 0; i < n; i++) {
        const sv_level *l = &lv[i];
        x[i] = l->clients;
        y[0][i] = l->total_tok_s, y[1][i] = l->decode_tok_s;
        y[2][i] = l->eng_decode_tok_s > 0 ? l->eng_decode_tok_s : NAN;
        y[3][i] = l->peer_decode_tok_s > 0 ? l->peer_decode_tok_s : NAN;
        y[4][i] = l->ttft_p50, y[5][i] = l->ttft_p99, y[6][i] = l->itl_p50, y[7][i] = l->itl_p99;
        eng |= l->eng_decode_tok_s > 0, peer |= l->peer_decode_tok_s > 0;
    }
    const size_t k = (size_t)n;
    svg_series tput[4] = {{"HTTP total tok/s", x, y[0], k}, {"HTTP decode tok/s", x, y[1], k}};
    int nt = 2;
    if (eng) tput[nt++] = (svg_series){"engine decode tok/s", x, y[2], k};
    if (peer) tput[nt++] = (svg_series){"peer decode tok/s", x, y[3], k};
    const svg_series ttft[2] = {{"TTFT p50", x, y[4], k}, {"TTFT p99", x, y[5], k}};
    const svg_series itl[2] = {{"ITL p50", x, y[6], k}, {"ITL p99", x, y[7], k}};
    char title[256];
    snprintf(title, sizeof title, "serve: %s, prompt %d tokens, %d generated per stream, %d threads", model,
             o->prompt_tokens, o->max_tokens, o->threads);
    svg_doc *d = svg_open(o->svg, 3, title);
    if (!d) return -1;
    svg_lines(d, 0, "throughput", "concurrent clients", "tokens/s", tput, nt);
    svg_lines(d, 1, "time to first token", "concurrent clients", "ms", ttft, 2);
    svg_lines(d, 2, "inter-token latency", "concurrent clients", "ms", itl, 2);
    return svg_close(d);
}

/* ---------------------------------------------------------------- command */

static int sv_parse(int argc, char **argv, sv_opts *o)
{
    memset(o, 0, sizeof *o);
    o->clients_s = "1,4,8,16";
    o->max_tokens = 64;
    o->prompt_tokens = 32;
    o->threads = 2;
    o->reps = 1;
    o->timeout_s = 600;
    const char *pd = getenv("PEER_DIR");
    static char peer[1024];
    snprintf(peer, sizeof peer, "%s/peer-bench", pd && *pd ? pd : "/tmp/llamacpp-peer");
    o->peer = peer;
    const cli_opt opts[] = {
        {"model", 'm', CLI_STR, &o->model, 0, 0, "GGUF", "model file (required)"},
        {"clients", 0, CLI_STR, &o->clients_s, 0, 0, "LIST", "concurrency levels (default 1,4,8,16)"},
        {"max-tokens", 0, CLI_INT, &o->max_tokens, 1, 1 << 16, "N", "tokens generated per stream (default 64)"},
        {"prompt-tokens", 0, CLI_INT, &o->prompt_tokens, 1, 1 << 16, "N", "prompt length, as peer-bench -np (default 32)"},
        {"port", 0, CLI_INT, &o->port, 0, 65535, "N", "server port (default 0: any free one)"},
        {"threads", 't', CLI_INT, &o->threads, 1, 256, "N", "threads for the server and the peer (default 2)"},
        {"reps", 0, CLI_INT, &o->reps, 1, 100, "N", "repetitions per level (default 1)"},
        {"peer", 0, CLI_STR, &o->peer, 0, 0, "PATH", "peer-bench binary (default $PEER_DIR/peer-bench or /tmp/llamacpp-peer/peer-bench)"},
        {"no-peer", 0, CLI_FLAG, &o->no_peer, 0, 0, NULL, "do not run the peer"},
        {"no-engine", 0, CLI_FLAG, &o->no_engine, 0, 0, NULL, "do not also run the engine in-process (no HTTP)"},
        {"no-logprobs", 0, CLI_FLAG, &o->no_logprobs, 0, 0, NULL, "do not ask for logprobs; time text chunks"},
        {"timeout", 0, CLI_INT, &o->timeout_s, 1, 1 << 20, "S", "give up on a stream or the peer after S seconds (default 600)"},
        {"json", 0, CLI_FLAG, &o->json, 0, 0, NULL, "one JSON row per level"},
        {"svg", 0, CLI_STR, &o->svg, 0, 0, "FILE", "plot throughput and latency against clients"},
        {0},
    };
    const char *pos[1];
    int np, rc = cli_parse("bench serve", "-m MODEL [--clients 1,4,8,16] [--max-tokens N] [--port N]", opts, argc, argv,
                           pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if (!o->model) { cli_error("bench serve", "missing -m MODEL"); return 2; }
    if (bench_parse_ints(o->clients_s, o->levels, SV_MAX_LEVELS, &o->n_levels) != 0 || o->n_levels == 0) {
        cli_error("bench serve", "bad value '%s' for --clients (up to %d numbers, e.g. 1,4,8,16)", o->clients_s, SV_MAX_LEVELS);
        return 2;
    }
    for (int i = 0; i < o->n_levels; i++) {
        if (o->levels[i] > SV_MAX_CLIENTS) {
            cli_error("bench serve", "--clients: %d is more than %d", o->levels[i], SV_MAX_CLIENTS);
            return 2;
        }
        if (o->levels[i] > o->max_clients) o->max_clients = o->levels[i];
    }
    if (!o->no_peer && access(o->peer, X_OK) != 0) {
        fprintf(stderr, "pagellm bench serve: no peer at %s (build it: ../shared/peer/build.sh); running without it\n", o->peer);
        o->no_peer = true;
    }
    return 0;
}

/* One level: per rep, the streams over HTTP, then the same streams to the
 * in-process engine (no HTTP, no SSE: what the server adds is the gap),
 * then the peer; all three take turns so that load drifts hit them alike. */
static int sv_level_run(const sv_opts *o, int port, pl_engine *eng, sv_prompts *pr, int n, sv_level *l)
{
    sv_vec ttft = {0}, itl = {0}, et = {0}, ei = {0};
    double tot[100], dec[100], spr[100], peer[100], etot[100], edec[100], espr[100];
    int rc = 0, np = 0, ne = 0;
    memset(l, 0, sizeof *l);
    l->clients = n;
    for (int r = 0; r < o->reps && !rc; r++) {
        sv_rates h, e;
        rc = sv_run_once(o, port, NULL, pr, n, &ttft, &itl, &h);
        tot[r] = h.total, dec[r] = h.decode, spr[r] = h.spread * 1e3, l->tokens = h.tokens;
        if (!rc && eng) {
            rc = sv_run_once(o, 0, eng, pr, n, &et, &ei, &e);
            etot[ne] = e.total, edec[ne] = e.decode, espr[ne] = e.spread * 1e3;
            ne += !rc;
        }
        if (!rc && !o->no_peer) {
            double v = sv_peer(o, n);
            if (v > 0) peer[np++] = v;
        }
    }
    if (!rc) {
        l->total_tok_s = bench_median(tot, (size_t)o->reps);
        l->decode_tok_s = bench_median(dec, (size_t)o->reps);
        l->spread_ms = bench_median(spr, (size_t)o->reps);
        l->eng_spread_ms = bench_median(espr, (size_t)ne);
        l->peer_decode_tok_s = bench_median(peer, (size_t)np);
        l->eng_total_tok_s = bench_median(etot, (size_t)ne);
        l->eng_decode_tok_s = bench_median(edec, (size_t)ne);
        l->ttft_p50 = bench_percentile(ttft.v, ttft.n, 0.5);
        l->ttft_p99 = bench_percentile(ttft.v, ttft.n, 0.99);
        l->itl_p50 = bench_percentile(itl.v, itl.n, 0.5);
        l->itl_p99 = bench_percentile(itl.v, itl.n, 0.99);
    }
    free(ttft.v);
    free(itl.v);
    free(et.v);
    free(ei.v);
    return rc;
}

/* A warm-up stream: pages in the weights and the first-request paths. */
static int sv_warm_up(const sv_opts *o, int port, pl_engine *eng, sv_prompts *pr)
{
    sv_vec wt = {0}, wi = {0};
    sv_rates x;
    int rc = sv_run_once(o, port, eng, pr, 1, &wt, &wi, &x);
    free(wt.v);
    free(wi.v);
    return rc;
}

int bench_serve(int argc, char **argv)
{
    sv_opts o;
    int rc = sv_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    sv_prompts pr;
    if (sv_prompts_init(&o, &pr) != 0) { free(pr.ids); pl_model_free(pr.model); return 1; }
    bench_server srv;
    int port;
    if (sv_server_start(&srv, &o, &port) != 0) { free(pr.ids); pl_model_free(pr.model); return 1; }
    sv_level lv[SV_MAX_LEVELS];
    pl_engine *eng = NULL;
    rc = pr.model ? sv_engine_start(&o, pr.model, &eng) : 0;
    if (!rc) rc = sv_warm_up(&o, port, NULL, &pr);
    if (!rc && eng) rc = sv_warm_up(&o, 0, eng, &pr);
    for (int i = 0; i < o.n_levels && !rc; i++) rc = sv_level_run(&o, port, eng, &pr, o.levels[i], &lv[i]);
    pl_engine_free(eng);
    pl_model_free(pr.model);
    if (bench_server_stop(&srv, rc != 0) != 0) rc = -1;
    free(pr.ids);
    if (rc) return 1;
    const char *base = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model;
    sv_print(&o, base, lv, o.n_levels);
    return o.svg && sv_svg(&o, base, lv, o.n_levels) != 0 ? 1 : 0;
}
