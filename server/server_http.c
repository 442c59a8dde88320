/* server_http.c - routes, bodies and generation over libmicrohttpd; see
 * server_http.h for the endpoints and the threading choice.
 *
 * One request's life (all on its connection's thread):
 *
 *   connect   on_connection: the guard's verdict (429/503 for the first
 *             request past a limit) and the deadline for the request
 *   headers   on_request, first call: limits, drain, route, method, key,
 *             framing (Content-Length / Transfer-Encoding), body size (an
 *             answer may be queued right here: 429 503 404 405 401 400 501 413)
 *   body      further calls: appended to conn.body up to --max-body
 *   dispatch  last call: GET handlers answer at once; a completion is
 *             parsed, submitted, then either waited for (blocking) or
 *             answered with a content-reader response that pulls events
 *             (streaming)
 *   end       on_completed: cancels the engine request unless it ended
 *             normally, frees it and the request state; the deadline runs
 *             again for the next request on the connection
 *
 * Every answer this file makes is JSON in OpenAI's error shape when it is
 * an error. Without TLS the server owns the listening socket: server_gate.h
 * accepts and relays every connection through a socket pair whose other
 * end libmicrohttpd reads (MHD_add_connection, with the client's address),
 * checking each request head and chunked body on the way and answering a
 * malformed one itself (JSON too). Under TLS the gate is the TLS end
 * (server_tls.h) and libmicrohttpd sees plaintext alike.
 *
 * Invariant: conn.rs, once submitted, is freed only in on_completed, which
 * MHD calls exactly once per request it presented to on_request, after the
 * content reader's last call.
 */
#include "server_http.h"

#include "server_chat.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server_gate.h"
#include "server_guard.h"
#include "server_tls.h"
#include "server_metrics.h"
#include "server_reqs.h"
#include "server_sse.h"
#include "server_web.h"
#include "server_embed.h"
#include "server_tokenize.h"

#define SRV_POLL_MS 100                 /* how often a waiting generation looks at its client */
#define SRV_KEEPALIVE_S 15.0            /* an idle stream sends an SSE comment this often */
#define SRV_THREAD_STACK (1024 * 1024)  /* per connection thread: the handlers use a few KiB */
#define SRV_SSE_BATCH 8192              /* stream bytes gathered before a write when events come fast */

/* Routes from R_COMPLETIONS on take POST. */
enum { R_NONE, R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_KV, R_WEB, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_EMBEDDINGS, R_APPLY_TEMPLATE };

struct srv {
    struct MHD_Daemon *d;
    srv_http_config cfg;
    pl_engine *e;
    const srv_model_ctx *mc;
    const srv_tokens *tok;
    char model[256];
    long created;
    int port;
    srv_guard *guard;
    srv_gate *gate;
    srv_tls *tls;          /* --tls-cert: the gate's TLS credentials */
    atomic_bool aborting, quiescing, started;
    _Atomic uint64_t responses[SRV_N_CODES];
    _Atomic uint64_t active, disconnects;
};

/* One request on a connection (MHD's con_cls). */
typedef struct {
    srv *s;
    struct MHD_Connection *conn;
    int route;
    char what[96];         /* "POST /v1/completions", for the log */
    int status;            /* the status queued, 0 before */
    bool close;            /* the answer ends the connection (Connection: close) */
    srv_conn *gc;          /* the connection's guard entry */
    bool too_big;
    bool oom;              /* out of memory: the body could not be stored (answered with
                            * reply_oom), or a stream's event (ended by an error frame) */
    size_t oom_pos;        /* bytes of that error frame sent */
    srv_buf body;
    srv_gen_req q;
    srv_reqs rs;           /* the submitted engine requests (one per prompt), rs.n = 0 before */
    bool active;           /* counted in s->active */
    bool gone;             /* the client went away (counted once) */
    double t_watch;        /* when to look at the client next (watch_due) */
    /* streaming */
    srv_sse sse;
    srv_buf out;
    size_t out_pos;
    bool ended;            /* "data: [DONE]" is in out */
    double t0, last_out;
} conn_ctx;

/* The con_cls of a request whose conn_ctx could not be allocated. */
static conn_ctx oom_ctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------- answers */

static void count(srv *s, int status) { atomic_fetch_add(&s->responses[srv_http_code_index(status)], 1); }

/* The answer when the server has no memory to make another: a constant
 * body that needs no allocation of ours (a 503, so clients retry). */
static const char OOM_BODY[] = "{\"error\":{\"message\":\"the server is out of memory; retry later\","
                               "\"type\":\"server_error\",\"param\":null,\"code\":\"out_of_memory\"}}";

static enum MHD_Result reply_oom_conn(srv *s, struct MHD_Connection *conn)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof OOM_BODY - 1, (void *)OOM_BODY, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(conn, 503, r);
    MHD_destroy_response(r);
    count(s, 503);
    return ret;
}

static enum MHD_Result reply_oom(conn_ctx *c)
{
    c->status = 503;
    return reply_oom_conn(c->s, c->conn);
}

/* Access-Control-Allow-Origin (and Vary when it depends on Origin). */
static void cors_headers(conn_ctx *c, struct MHD_Response *r)
{
    static const srv_cors any = {.any = true};
    const srv_cors *cors = c->s->cfg.cors ? c->s->cfg.cors : &any;
    const char *origin = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Origin");
    const char *allow = srv_cors_allow(cors, origin);
    if (allow) MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    if (!cors->any && cors->n) MHD_add_response_header(r, "Vary", "Origin");
}

/* Queues body (malloc'd; owned from here on) as the answer; NULL (making
 * it ran out of memory) answers reply_oom's. */
static enum MHD_Result reply(conn_ctx *c, int status, const char *ctype, char *body, const char *allow)
{
    if (!body) return reply_oom(c);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 429) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "5");
    if (allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    cors_headers(c, r);
    if (c->close || atomic_load(&c->s->quiescing)) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    c->status = status;
    count(c->s, status);
    return ret;
}

static enum MHD_Result reply_json(conn_ctx *c, int status, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return reply(c, status, "application/json", s, NULL);
}

static enum MHD_Result reply_error(conn_ctx *c, const srv_error *e, const char *allow)
{
    return reply(c, e->status, "application/json", srv_error_json(e), allow);
}

/* ------------------------------------------------------------- routing */

static int route_of(const char *url)
{
    static const struct { const char *path; int route; } t[] = {
        {"/health", R_HEALTH}, {"/metrics", R_METRICS}, {"/v1/models", R_MODELS}, {"/v1/kv", R_KV},
        {"/v1/completions", R_COMPLETIONS}, {"/v1/chat/completions", R_CHAT},
        {"/tokenize", R_TOKENIZE}, {"/detokenize", R_DETOKENIZE}, {"/v1/embeddings", R_EMBEDDINGS},
        {"/apply-template", R_APPLY_TEMPLATE},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(url, t[i].path) == 0) return t[i].route;
    if (strncmp(url, "/v1/models/", 11) == 0 && url[11]) return R_MODEL;
    if (srv_web_find(url)) return R_WEB;
    return R_NONE;
}

static const char *route_allow(int route) { return route >= R_COMPLETIONS ? "POST" : "GET, HEAD"; }

static bool method_ok(int route, const char *method)
{
    if (route >= R_COMPLETIONS) return strcmp(method, "POST") == 0;
    return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

static bool has_keys(const srv_keys *k) { return k && k->n; }

/* The keys guarding a route: the /v1 routes the API keys; /metrics the metrics keys
 * and the API keys, unless --metrics-public; the rest is open. */
static bool authorized(const srv *s, int route, struct MHD_Connection *conn)
{
    const srv_http_config *cfg = &s->cfg;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (route == R_METRICS) {
        if (cfg->metrics_public || (!has_keys(cfg->api_keys) && !has_keys(cfg->metrics_keys))) return true;
        return (has_keys(cfg->api_keys) && srv_keys_match(cfg->api_keys, h)) ||
               (has_keys(cfg->metrics_keys) && srv_keys_match(cfg->metrics_keys, h));
    }
    if (route == R_HEALTH || route == R_WEB || !has_keys(cfg->api_keys)) return true; /* the page holds no data */
    return srv_keys_match(cfg->api_keys, h);
}

/* Message framing (RFC 9112 section 6.3): Content-Length and
 * Transfer-Encoding together, Content-Lengths that differ, or a transfer
 * coding other than one "chunked" make the body's end ambiguous - the
 * ground of request smuggling behind a proxy - so they are refused and the
 * connection closed. */
typedef struct {
    int n_cl, n_te;
    bool cl_differ;
    const char *cl, *te;
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    framing *f = cls;
    (void)kind;
    if (!value) value = "";
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->n_cl++ && strcmp(f->cl, value) != 0) f->cl_differ = true;
        f->cl = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->n_te++;
        f->te = value;
    }
    return MHD_YES;
}

/* 0, or the status of the answer with *e set (400 invalid framing, 501 a
 * transfer coding other than chunked). */
static int framing_check(struct MHD_Connection *conn, srv_error *e)
{
    framing f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_header, &f);
    if (f.n_te && f.n_cl)
        srv_error_set(e, 400, "invalid_request_error", NULL, "invalid_framing",
                      "a request may not have both Content-Length and Transfer-Encoding (RFC 9112 section 6.3)");
    else if (f.cl_differ)
        srv_error_set(e, 400, "invalid_request_error", NULL, "invalid_framing",
                      "the request has Content-Length headers that differ (RFC 9112 section 6.3)");
    else if (f.n_te > 1 || (f.n_te && strchr(f.te, ',') && strcasestr(f.te, "chunked")))
        srv_error_set(e, 400, "invalid_request_error", NULL, "invalid_framing",
                      "only one transfer coding, chunked, is supported (Transfer-Encoding: %.60s)", f.te);
    else if (f.n_te && strcasecmp(f.te, "chunked") != 0)
        srv_error_set(e, 501, "invalid_request_error", NULL, "unsupported_transfer_coding",
                      "the transfer coding '%.60s' is not supported (only chunked)", f.te);
    else
        return 0;
    return e->status;
}

/* Connections past the guard's limits: answered once, then closed. */
static bool over_limit(conn_ctx *c, srv_error *e)
{
    if (!c->gc) { /* the guard had no memory for this connection's entry */
        srv_out_of_memory(e);
        return true;
    }
    switch (srv_guard_verdict(c->gc)) {
    case SRV_CONN_OVER_IP:
        srv_error_set(e, 429, "rate_limit_error", NULL, "too_many_connections",
                      "too many connections from your address (at most %u, --max-conns-per-ip); retry later",
                      c->s->cfg.max_conns_per_ip);
        return true;
    case SRV_CONN_OVER_MAX:
        srv_error_set(e, 503, "server_error", NULL, "server_overloaded",
                      "the server has too many connections (at most %u, --max-conns); retry later", c->s->cfg.max_conns);
        return true;
    default: return false;
    }
}

/* An OPTIONS request (a CORS preflight): no key needed, no body read. */
static enum MHD_Result preflight(conn_ctx *c)
{
    static const srv_cors any = {.any = true};
    const srv_cors *cors = c->s->cfg.cors ? c->s->cfg.cors : &any;
    const char *origin = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Origin");
    if (origin && !srv_cors_allow(cors, origin)) {
        srv_error e;
        srv_error_set(&e, 403, "invalid_request_error", NULL, "cors_origin_not_allowed",
                      "the origin '%.100s' is not allowed (--cors-origin)", origin);
        return reply_error(c, &e, NULL);
    }
    char methods[64], hdrs[1200];
    snprintf(methods, sizeof methods, "%s, OPTIONS", route_allow(c->route));
    srv_cors_allow_headers(MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers"),
                           hdrs, sizeof hdrs);
    char *body = strdup("");
    if (!body) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(0, body, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, methods);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
    MHD_add_response_header(r, "Access-Control-Allow-Headers", hdrs);
    MHD_add_response_header(r, "Access-Control-Max-Age", SRV_CORS_MAX_AGE);
    cors_headers(c, r);
    enum MHD_Result ret = MHD_queue_response(c->conn, 204, r);
    MHD_destroy_response(r);
    c->status = 204;
    count(c->s, 204);
    return ret;
}

/* The first call: everything that can be refused from the headers alone. */
static enum MHD_Result on_headers(conn_ctx *c, const char *url, const char *method)
{
    srv_error e;
    c->route = route_of(url);
    if (over_limit(c, &e)) {
        c->close = true;
        return reply_error(c, &e, NULL);
    }
    if (c->route == R_NONE) {
        srv_error_set(&e, 404, "invalid_request_error", NULL, "not_found", "no such endpoint: %s %s", method, url);
        return reply_error(c, &e, NULL);
    }
    if (strcmp(method, "OPTIONS") == 0) return preflight(c);
    if (!method_ok(c->route, method)) {
        srv_error_set(&e, 405, "invalid_request_error", NULL, "method_not_allowed", "%s %s is not allowed (allowed: %s)",
                      method, url, route_allow(c->route));
        return reply_error(c, &e, route_allow(c->route));
    }
    if (!authorized(c->s, c->route, c->conn)) {
        srv_error_set(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                      "missing or incorrect API key (send Authorization: Bearer KEY)");
        return reply_error(c, &e, NULL);
    }
    if (framing_check(c->conn, &e)) {
        c->close = true;
        return reply_error(c, &e, NULL);
    }
    if (c->route >= R_COMPLETIONS && atomic_load(&c->s->quiescing)) {
        srv_error_set(&e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
        return reply_error(c, &e, NULL);
    }
    const char *cl = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > c->s->cfg.max_body) {
        srv_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                      "the request body of %s bytes exceeds the limit of %llu bytes (--max-body)", cl,
                      (unsigned long long)c->s->cfg.max_body);
        c->close = true; /* the body is not read */
        return reply_error(c, &e, NULL);
    }
    return MHD_YES;
}

/* --------------------------------------------------------- GET handlers */

/* OpenAI's model object, vLLM's max_model_len, and llama-server's "meta"
 * (n_ctx is the context a request gets, n_ctx_train the file's). */
static json_t *model_obj(const srv *s)
{
    const pl_model *m = s->mc->model;
    json_t *meta = json_pack("{s:I, s:I, s:I, s:I, s:b}", "n_ctx", (json_int_t)s->mc->n_ctx, "n_ctx_train",
                             (json_int_t)pl_model_n_ctx_train(m), "n_vocab", (json_int_t)pl_model_n_vocab(m), "n_embd",
                             (json_int_t)pl_model_n_embd(m), "chat_template", pl_model_chat_template(m) != NULL);
    return json_pack("{s:s, s:s, s:I, s:s, s:I, s:o}", "id", s->model, "object", "model", "created",
                     (json_int_t)s->created, "owned_by", "pagellm", "max_model_len", (json_int_t)s->mc->n_ctx, "meta",
                     meta);
}

static enum MHD_Result handle_model(conn_ctx *c, const char *url)
{
    if (strcmp(url + 11, c->s->model) == 0) return reply_json(c, 200, model_obj(c->s));
    srv_error e;
    srv_error_set(&e, 404, "invalid_request_error", "model", "model_not_found", "the model '%s' does not exist (this server has '%s')",
                  url + 11, c->s->model);
    return reply_error(c, &e, NULL);
}

static enum MHD_Result handle_metrics(conn_ctx *c)
{
    srv *s = c->s;
    pl_engine_metrics m;
    pl_engine_metrics_get(s->e, &m);
    srv_http_stats h;
    for (int i = 0; i < SRV_N_CODES; i++) h.responses[i] = atomic_load(&s->responses[i]);
    h.active = atomic_load(&s->active);
    h.disconnects = atomic_load(&s->disconnects);
    srv_guard_stats g;
    srv_guard_stats_get(s->guard, &g);
    h.conns_open = g.open, h.timeouts = g.timeouts, h.over_ip = g.over_ip, h.over_max = g.over_max;
    return reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", srv_metrics_text(&m, &h), NULL);
}

static enum MHD_Result handle_kv(conn_ctx *c)
{
    /* ?compact=1: the blocks as per-block strings (pl_engine_kv_json_ex), what the web page polls */
    const char *cv = MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, "compact");
    unsigned flags = 0;
    if (cv && (strcmp(cv, "1") == 0 || strcmp(cv, "true") == 0)) flags = PL_KV_JSON_COMPACT;
    else if (cv && strcmp(cv, "0") != 0 && strcmp(cv, "false") != 0) {
        srv_error e;
        srv_error_set(&e, 400, "invalid_request_error", "compact", "invalid_value",
                      "compact must be 1, true, 0 or false (got '%.40s')", cv);
        return reply_error(c, &e, NULL);
    }
    char *j = pl_engine_kv_json_ex(c->s->e, flags);
    if (!j) {
        srv_error e;
        srv_error_set(&e, 500, "server_error", NULL, NULL, "cannot snapshot the KV cache: %s", pl_last_error());
        return reply_error(c, &e, NULL);
    }
    char *copy = strdup(j); /* MHD frees with free(); the API's memory goes back through pl_free */
    pl_free(j);
    return reply(c, 200, "application/json", copy, NULL);
}

static enum MHD_Result handle_web(conn_ctx *c, const char *url)
{
    struct MHD_Response *r = srv_web_response(srv_web_find(url));
    if (!r) return MHD_NO;
    if (c->close || atomic_load(&c->s->quiescing)) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    c->status = 200;
    count(c->s, 200);
    return ret;
}

static enum MHD_Result handle_health(conn_ctx *c)
{
    if (atomic_load(&c->s->quiescing)) {
        srv_error e;
        srv_error_set(&e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
        json_t *o = srv_error_obj(&e);
        json_object_set_new(o, "status", json_string("shutting_down")); /* as llama-server's /health says it */
        return reply_json(c, 503, o);
    }
    return reply_json(c, 200, json_pack("{s:s}", "status", "ok"));
}

/* ---------------------------------------------------------- generation */

/* True when the client has closed its side of the connection. */
static bool client_closed(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Cancels the request if the server is aborting (its final events then
 * still arrive and are served) or if the client went away (returns true:
 * stop serving it). */
static bool watch(conn_ctx *c)
{
    if (atomic_load(&c->s->aborting)) srv_reqs_cancel(&c->rs);
    if (c->gone || !client_closed(c->conn)) return c->gone;
    c->gone = true;
    srv_reqs_cancel(&c->rs);
    atomic_fetch_add(&c->s->disconnects, 1);
    return true;
}

/* watch() every SRV_POLL_MS by the clock: tokens may come without a
 * pause, so waits that time out are not enough to look at the client. */
static bool watch_due(conn_ctx *c)
{
    double t = now_s();
    if (t < c->t_watch) return false;
    c->t_watch = t + SRV_POLL_MS / 1000.0;
    return watch(c);
}

static enum MHD_Result run_blocking(conn_ctx *c, const char *id)
{
    srv *s = c->s;
    srv_result res;
    srv_result_init(&res, srv_gen_req_choices(&c->q));
    pl_event ev;
    int rc, nomem = 0;
    while ((rc = srv_reqs_next(&c->rs, &ev, SRV_POLL_MS)) != 2 && rc >= 0) {
        if (rc == 1) nomem |= srv_result_add(&res, &c->q, s->tok, &ev) != 0;
        if (watch_due(c)) { srv_result_free(&res); return MHD_NO; } /* MHD closes the connection */
    }
    srv_error e;
    enum MHD_Result ret;
    if (res.failed || nomem) {
        srv_error_set(&e, 500, "server_error", NULL, NULL, "%s", nomem ? "out of memory" : res.message);
        ret = reply_error(c, &e, NULL);
    } else {
        ret = reply(c, 200, "application/json", srv_result_json(&res, &c->q, id, (long)time(NULL), s->model), NULL);
    }
    srv_result_free(&res);
    return ret;
}

/* Waits for events and formats them into c->out (at least one byte unless
 * the stream ended). -1: stop the stream (client gone); SSE_OOM: no memory
 * to format an event (c->out holds whole frames only). */
#define SSE_OOM (-2)
static int sse_pump(conn_ctx *c)
{
    pl_event ev;
    int rc = srv_reqs_next(&c->rs, &ev, SRV_POLL_MS);
    while (rc == 1) {
        if (srv_sse_event(&c->sse, &ev, &c->out)) return SSE_OOM;
        if (c->out.len >= SRV_SSE_BATCH) break;
        rc = srv_reqs_next(&c->rs, &ev, 0); /* gather what is ready into one write */
    }
    if (rc == 2 || rc < 0) {
        if (srv_sse_finish(&c->sse, &c->out)) return SSE_OOM;
        c->ended = true;
    }
    if (!c->ended && watch_due(c)) return -1;
    double t = now_s();
    if (c->out.len) { c->last_out = t; return 0; }
    if (t - c->last_out >= SRV_KEEPALIVE_S) {
        c->last_out = t;
        return srv_sse_comment(&c->out, "keep-alive") ? SSE_OOM : 0;
    }
    return 0;
}

/* The stream's last frame after SSE_OOM: the error, from constant bytes. */
static const char OOM_FRAME_HEAD[] = "data: ", OOM_FRAME_TAIL[] = "\n\n";

static ssize_t sse_oom_frame(conn_ctx *c, char *buf, size_t max)
{
    const size_t a = sizeof OOM_FRAME_HEAD - 1, b = sizeof OOM_BODY - 1, t = sizeof OOM_FRAME_TAIL - 1;
    size_t n = 0;
    while (n < max && c->oom_pos < a + b + t) {
        size_t i = c->oom_pos++;
        buf[n++] = i < a ? OOM_FRAME_HEAD[i] : i < a + b ? OOM_BODY[i - a] : OOM_FRAME_TAIL[i - a - b];
    }
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

/* MHD's content reader for a stream: blocks (this connection's thread)
 * until there is something to send. */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    conn_ctx *c = cls;
    (void)pos;
    while (c->out_pos == c->out.len) {
        if (c->oom) return sse_oom_frame(c, buf, max);
        if (c->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        c->out.len = 0;
        c->out_pos = 0;
        int rc = sse_pump(c);
        if (rc == SSE_OOM) {
            /* the frames made so far, then the error; the request ends here */
            srv_reqs_cancel(&c->rs);
            c->oom = c->ended = true;
        } else if (rc < 0) {
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = c->out.len - c->out_pos;
    if (n > max) n = max;
    memcpy(buf, c->out.p + c->out_pos, n);
    c->out_pos += n;
    return (ssize_t)n;
}

static enum MHD_Result start_stream(conn_ctx *c, const char *id)
{
    srv_sse_init(&c->sse, &c->q, c->s->tok, id, (long)time(NULL), c->s->model);
    c->last_out = now_s();
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_reader, c, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    cors_headers(c, r);
    enum MHD_Result ret = MHD_queue_response(c->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    c->status = 200;
    count(c->s, 200);
    return ret;
}

static enum MHD_Result submit_failed(conn_ctx *c, int rc)
{
    srv_error e;
    if (rc == PL_ERR_FULL)
        srv_error_set(&e, 503, "server_error", NULL, "server_overloaded",
                      "the server is busy: its request queue is full; retry later");
    else if (rc == PL_ERR_UNSUPPORTED)
        srv_error_set(&e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    else if (rc == PL_ERR_INVAL || rc == PL_ERR_RANGE)
        srv_error_set(&e, 400, "invalid_request_error", NULL, NULL, "%s", pl_last_error());
    else
        srv_error_set(&e, 500, "server_error", NULL, NULL, "%s", pl_last_error());
    return reply_error(c, &e, NULL);
}

static enum MHD_Result handle_generation(conn_ctx *c, srv_kind kind)
{
    srv *s = c->s;
    srv_error e;
    if (srv_gen_req_parse(s->mc, kind, c->body.p ? c->body.p : "", c->body.len, &c->q, &e) != 0)
        return reply_error(c, &e, NULL);
    int rc = srv_reqs_submit(&c->rs, s->e, &c->q);
    if (rc != 0) return submit_failed(c, rc);
    c->active = true;
    atomic_fetch_add(&s->active, 1);
    char id[64];
    srv_make_id(id, sizeof id, kind == SRV_CHAT ? "chatcmpl-" : "cmpl-");
    return c->q.stream ? start_stream(c, id) : run_blocking(c, id);
}

static bool embed_gone(void *cls) { return watch_due(cls); }

static enum MHD_Result handle_embeddings(conn_ctx *c)
{
    srv_error e;
    char *json = NULL;
    if (srv_embed_run(c->s->e, c->s->mc, c->s->model, c->body.p ? c->body.p : "", c->body.len, embed_gone, c, &json,
                      &e) != 0)
        return c->gone ? MHD_NO : reply_error(c, &e, NULL); /* gone: MHD closes the connection */
    return reply(c, 200, "application/json", json, NULL);
}

/* ------------------------------------------------------------ MHD hooks */

static enum MHD_Result dispatch(conn_ctx *c, const char *url)
{
    srv_error e;
    switch (c->route) {
    case R_HEALTH: return handle_health(c);
    case R_METRICS: return handle_metrics(c);
    case R_MODELS: return reply_json(c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_obj(c->s)));
    case R_MODEL: return handle_model(c, url);
    case R_KV: return handle_kv(c);
    case R_WEB: return handle_web(c, url);
    default: break;
    }
    if (c->oom) return reply_oom(c);
    if (c->too_big) {
        srv_error_set(&e, 413, "invalid_request_error", NULL, "request_too_large",
                      "the request body exceeds the limit of %llu bytes (--max-body)",
                      (unsigned long long)c->s->cfg.max_body);
        return reply_error(c, &e, NULL);
    }
    if (c->route == R_EMBEDDINGS) return handle_embeddings(c);
    if (c->route == R_TOKENIZE || c->route == R_DETOKENIZE) {
        const char *b = c->body.p ? c->body.p : "";
        json_t *o = c->route == R_TOKENIZE ? srv_tokenize(c->s->mc, c->s->tok, b, c->body.len, &e)
                                           : srv_detokenize(c->s->mc, b, c->body.len, &e);
        return o ? reply_json(c, 200, o) : reply_error(c, &e, NULL);
    }
    if (c->route == R_APPLY_TEMPLATE) {
        char *j = srv_apply_template(c->s->mc, c->body.p ? c->body.p : "", c->body.len, &e);
        return j ? reply(c, 200, "application/json", j, NULL) : reply_error(c, &e, NULL);
    }
    return handle_generation(c, c->route == R_CHAT ? SRV_CHAT : SRV_COMPLETIONS);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *data, size_t *size, void **con_cls)
{
    (void)version;
    conn_ctx *c = *con_cls;
    if (c == &oom_ctx) { /* answered already; what is left of the body is dropped */
        *size = 0;
        return MHD_YES;
    }
    if (!c) {
        if (!(c = calloc(1, sizeof *c))) {
            *con_cls = &oom_ctx;
            return reply_oom_conn(cls, conn);
        }
        c->s = cls;
        c->conn = conn;
        c->t0 = now_s();
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        c->gc = ci ? ci->socket_context : NULL;
        snprintf(c->what, sizeof c->what, "%s %.80s", method, url);
        *con_cls = c;
        return on_headers(c, url, method);
    }
    if (*size) {
        /* body bytes; after an early answer, or past the limit, they are dropped */
        if (!c->status && !c->too_big) {
            if (c->body.len + *size > c->s->cfg.max_body) c->too_big = true, srv_buf_free(&c->body);
            else if (!c->oom && srv_buf_add(&c->body, data, *size)) c->oom = true, srv_buf_free(&c->body);
        }
        *size = 0;
        return MHD_YES;
    }
    srv_guard_busy(c->s->guard, c->gc); /* the whole request is in */
    if (c->status) return MHD_YES;      /* answered from the headers */
    return dispatch(c, url);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    srv *s = cls;
    conn_ctx *c = *con_cls;
    (void)conn;
    if (c == &oom_ctx) *con_cls = NULL;
    if (!c || c == &oom_ctx) return;
    if (c->rs.n) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
            srv_reqs_cancel(&c->rs); /* their blocks are freed at the engine's next step */
            if (!c->gone && toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN) atomic_fetch_add(&s->disconnects, 1);
        }
        srv_reqs_free(&c->rs);
    }
    if (c->active) atomic_fetch_sub(&s->active, 1);
    srv_guard_idle(s->guard, c->gc); /* the next request on this connection has its own deadline */
    if (s->cfg.verbose) {
        if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
            fprintf(stderr, "pagellm serve: %s %d %.3f s\n", c->what, c->status, now_s() - c->t0);
        else
            fprintf(stderr, "pagellm serve: %s %d, connection ended early (%s) after %.3f s\n", c->what, c->status,
                    c->gone ? "client went away" : "closed", now_s() - c->t0);
    }
    srv_sse_free(&c->sse);
    srv_gen_req_free(&c->q);
    srv_buf_free(&c->body);
    srv_buf_free(&c->out);
    free(c);
    *con_cls = NULL;
}

/* A connection opens or closes (the daemon's threads): its guard entry,
 * kept in MHD's per-connection socket context. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context, enum MHD_ConnectionNotificationCode code)
{
    srv *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ad = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        srv_conn *gc = fd ? srv_guard_adopt(s->guard, fd->connect_fd) : NULL; /* the gate's entry */
        if (!gc && fd) gc = srv_guard_open(s->guard, ad ? ad->client_addr : NULL, fd->connect_fd);
        *socket_context = gc;
    } else {
        srv_guard_close(s->guard, *socket_context);
        *socket_context = NULL;
    }
}

/* MHD's own messages: always while starting (a port in use...), then only
 * with --verbose (a client that goes away makes MHD say so). */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    const srv *s = cls;
    if (atomic_load(&s->started) && !s->cfg.verbose) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = 0;
    fprintf(stderr, "pagellm serve: http: %s\n", line);
}

/* ------------------------------------------------------------ lifetime */

#define SRV_PEM_MAX (1 << 20) /* bytes of a certificate or key file */

static struct addrinfo *resolve(const srv_http_config *cfg)
{
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(cfg->host, NULL, &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "pagellm serve: cannot resolve --host '%s': %s\n", cfg->host, gai_strerror(rc));
        return NULL;
    }
    if (ai->ai_family == AF_INET) ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)cfg->port);
    else if (ai->ai_family == AF_INET6) ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)cfg->port);
    return ai;
}

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family != AF_INET6) return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* The whole file at path, malloc'd and NUL-terminated; NULL (printed, naming flag and file) on failure. */
static char *pem_read(const char *flag, const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc(SRV_PEM_MAX + 1) : NULL;
    size_t n = buf ? fread(buf, 1, SRV_PEM_MAX + 1, f) : 0;
    bool bad = !f || !buf || ferror(f) || n == 0 || n > SRV_PEM_MAX;
    if (bad)
        fprintf(stderr, "pagellm serve: cannot read %s %s: %s\n", flag, path,
                !f || ferror(f) ? strerror(errno) : !buf ? "out of memory" : n == 0 ? "the file is empty" : "larger than 1 MiB");
    if (f) fclose(f);
    if (bad) { free(buf); return NULL; }
    buf[n] = 0;
    return buf;
}

/* The connections MHD itself takes beyond --max-conns, so that those past
 * the limit can still be answered 503 (and those past the per-address
 * limit 429) before they are closed. */
static unsigned conn_reserve(unsigned max_conns)
{
    unsigned r = max_conns / 8;
    return r < 4 ? 4 : r > 64 ? 64 : r;
}

/* MHD_start_daemon with the options of cfg. No TLS there: the gate is the
 * TLS end and relays plaintext. */
static struct MHD_Daemon *daemon_start(srv *s, const struct addrinfo *ai)
{
    const srv_http_config *cfg = &s->cfg;
    unsigned reserve = conn_reserve(cfg->max_conns);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0) | MHD_USE_NO_LISTEN_SOCKET;
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, /* first, so that it catches everything */
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_LIMIT, cfg->max_conns + reserve,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_conns_per_ip ? cfg->max_conns_per_ip + reserve / 2 : 0u,
                            MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s,
                            MHD_OPTION_THREAD_STACK_SIZE, (size_t)SRV_THREAD_STACK,
                            MHD_OPTION_END);
}

/* The gate's listening socket on ai (non-blocking), or -1 (printed). */
static int listen_socket(const srv_http_config *cfg, const struct addrinfo *ai)
{
    int one = 1, fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
              (ai->ai_family != AF_INET6 || setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0) &&
              bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0;
    if (ok) return fd;
    fprintf(stderr, "pagellm serve: cannot listen on %s port %d: %s\n", cfg->host, cfg->port, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
}

static int gate_handoff(void *cls, int fd, const struct sockaddr *addr, socklen_t len)
{
    srv *s = cls;
    return MHD_add_connection(s->d, fd, addr, len) == MHD_YES ? 0 : -1;
}

static void gate_answered(void *cls, int status) { count(cls, status); }

/* Plain HTTP: the listening socket and the gate in front of the daemon. 0 or 1 (printed). */
static int gate_start(srv *s, int lfd)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(lfd, (struct sockaddr *)&sa, &len) == 0)
        s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    srv_gate_params gp = {
        .guard = s->guard,
        .capacity = s->cfg.max_conns + conn_reserve(s->cfg.max_conns),
        .idle_s = s->cfg.timeout_s,
        .deadline_s = s->cfg.header_timeout_s,
        .cors_any = !s->cfg.cors || s->cfg.cors->any,
        .tls = s->tls,
        .handoff = gate_handoff,
        .answered = gate_answered,
        .cls = s,
    };
    return srv_gate_start(&s->gate, lfd, &gp) == 0 ? 0 : 1;
}

/* The TLS credentials from the files of --tls-cert and --tls-key (NULL
 * without them), or exit status 1 (printed). */
static int tls_load(const srv_http_config *cfg, srv_tls **tls)
{
    *tls = NULL;
    if (!cfg->tls_cert) return 0;
    char *cert = pem_read("--tls-cert", cfg->tls_cert), *key = cert ? pem_read("--tls-key", cfg->tls_key) : NULL;
    char why[256];
    int rc = key && srv_tls_new(tls, cert, key, why, sizeof why) != 0 ? 1 : 0;
    if (rc)
        fprintf(stderr, "pagellm serve: cannot use TLS: --tls-cert %s and --tls-key %s are not a PEM certificate and its "
                        "private key (GnuTLS: %s)\n", cfg->tls_cert, cfg->tls_key, why);
    if (key) memset(key, 0, strlen(key)); /* GnuTLS keeps its own copy */
    free(cert), free(key);
    return !key ? 1 : rc;
}

int srv_start(srv **out, const srv_http_config *cfg, pl_engine *e, const srv_model_ctx *mc, const srv_tokens *tok,
              const char *model_name)
{
    srv_tls *tls;
    if (tls_load(cfg, &tls)) return 1;
    srv *s = calloc(1, sizeof *s);
    if (!s) fprintf(stderr, "pagellm serve: out of memory\n");
    struct addrinfo *ai = s ? resolve(cfg) : NULL;
    /* past its share and half the reserve an address's new connections are
     * dropped at once, as libmicrohttpd's own limit does without the gate */
    unsigned hard = cfg->max_conns_per_ip ? cfg->max_conns_per_ip + conn_reserve(cfg->max_conns) / 2 : 0;
    srv_guard_params gp = {cfg->max_conns, cfg->max_conns_per_ip, cfg->header_timeout_s, 0, hard};
    int lfd = ai ? listen_socket(cfg, ai) : -1;
    if (!ai || lfd < 0 || srv_guard_new(&s->guard, &gp) != 0) {
        if (ai && lfd >= 0) fprintf(stderr, "pagellm serve: out of memory starting the connection guard\n");
        if (ai) freeaddrinfo(ai);
        if (lfd >= 0) close(lfd);
        free(s);
        srv_tls_free(tls);
        return 1;
    }
    s->tls = tls;
    s->cfg = *cfg;
    s->e = e, s->mc = mc, s->tok = tok;
    s->created = (long)time(NULL);
    snprintf(s->model, sizeof s->model, "%s", model_name);
    bool open_to_all = !is_loopback(ai->ai_addr) && !has_keys(cfg->api_keys);
    s->d = daemon_start(s, ai);
    freeaddrinfo(ai);
    if (!s->d) {
        fprintf(stderr, "pagellm serve: cannot start the HTTP daemon (the line above says why)\n");
        close(lfd);
        srv_guard_free(s->guard);
        srv_tls_free(tls);
        free(s);
        return 1;
    }
    if (gate_start(s, lfd) != 0) {
        MHD_stop_daemon(s->d);
        srv_guard_free(s->guard);
        srv_tls_free(tls);
        free(s);
        return 1;
    }
    atomic_store(&s->started, true);
    if (open_to_all)
        fprintf(stderr, "pagellm serve: WARNING: listening on %s without an API key: anyone who can reach this "
                        "address can use the model and read /v1/kv and /metrics (set --api-key or --api-key-file, or "
                        "listen on 127.0.0.1 behind a proxy that checks clients)\n", cfg->host);
    *out = s;
    return 0;
}

int srv_port(const srv *s) { return s->port; }

void srv_quiesce(srv *s) { atomic_store(&s->quiescing, true); }

uint64_t srv_active(srv *s) { return atomic_load(&s->active); }

void srv_abort(srv *s) { atomic_store(&s->aborting, true); }

void srv_stop(srv *s)
{
    if (!s) return;
    srv_abort(s);
    srv_gate_stop(s->gate); /* first: it hands connections to the daemon */
    MHD_stop_daemon(s->d);
    srv_guard_free(s->guard); /* after the daemon: every connection has been closed */
    srv_tls_free(s->tls);     /* after the gate: its sessions are closed */
    free(s);
}
