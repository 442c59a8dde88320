/* server_http.h - the HTTP side of `pagellm serve` (libmicrohttpd): routes,
 * bodies, API key, errors, blocking and streaming (SSE) generation, and
 * cancelling a generation whose client went away.
 *
 *   GET  /health                 {"status": "ok"}; 503 (an OpenAI error) while draining
 *   GET  /metrics                Prometheus text (server_metrics.h); once keys are set it
 *                                needs an API key or a metrics key, unless metrics_public
 *   GET  /v1/models[/ID]         the one model, named by its file's basename
 *   GET  /v1/kv[?compact=1]      pl_engine_kv_json_ex: every KV block
 *   GET  /, /web/NAME            the web page (server_web.h); open without a key
 *   POST /v1/completions         server_openai.h
 *   POST /v1/chat/completions
 *   POST /tokenize, /detokenize  server_tokenize.h (llama-server's shapes)
 *   POST /v1/embeddings          server_embed.h
 *   OPTIONS any route            CORS preflight, no key needed (server_cors.h)
 *   POST /apply-template         the chat prompt a request would get (server_chat.h)
 *
 * Connections: without TLS the server listens itself and each new
 * connection's first request head passes server_gate.h (malformed heads
 * answered there with JSON) before libmicrohttpd takes the socket; with
 * TLS libmicrohttpd listens.
 *
 * Threads: one per connection (MHD_USE_THREAD_PER_CONNECTION). A
 * generation is a blocking loop over pl_request_next on its connection's
 * thread - for a stream, inside the content reader - so the code reads top
 * to bottom and needs no locks of its own (the engine API is thread-safe;
 * server counters are atomics). The engine's token queue has no readiness
 * descriptor to put into a poll loop, which is what the suspend/resume
 * alternative would need. Many concurrent streams cost one mostly idle
 * thread each (a small stack, see SRV_THREAD_STACK); --max-conns bounds
 * them, and server_guard.h holds each client to its share and each request
 * to a deadline.
 *
 * A client that goes away is noticed within SRV_POLL_MS (100 ms): the
 * generation loops look at the socket that often (POLLRDHUP), whether
 * tokens are flowing or not, and a failed write ends the connection too;
 * either way the engine request is cancelled (the request-completed
 * callback makes sure) and its blocks are freed at the engine's next step.
 */
#ifndef PL_SERVER_HTTP_H
#define PL_SERVER_HTTP_H

#include <stdint.h>

#include "pagellm.h"
#include "server_cors.h"
#include "server_keys.h"
#include "server_openai.h"
#include "server_tokens.h"

typedef struct {
    const char *host;          /* numeric address or name to bind ("127.0.0.1") */
    int port;                  /* 0: any free port */
    const srv_keys *api_keys;  /* keys for the /v1 routes; NULL or empty: no authentication */
    const srv_keys *metrics_keys; /* keys for /metrics besides the API keys (NULL: none) */
    bool metrics_public;       /* /metrics without a key even when keys are set */
    uint64_t max_body;         /* request body bytes (413 beyond) */
    unsigned max_conns;        /* connections served at once (503 beyond) */
    unsigned max_conns_per_ip; /* connections of one client address (429 beyond; 0: no limit) */
    unsigned timeout_s;        /* a connection silent this long is closed (0: never) */
    unsigned header_timeout_s; /* to receive a request's head and body (0: no deadline) */
    const char *tls_cert, *tls_key; /* PEM files: HTTPS (both or neither) */
    bool verbose;              /* one log line per request on stderr */
    const srv_cors *cors;      /* --cors-origin (server_cors.h); NULL: every origin ("*") */
} srv_http_config;

typedef struct srv srv;

/* Binds and starts serving. The model context, token table and engine
 * must outlive the server. Errors are printed; returns 0 or 1. */
int srv_start(srv **out, const srv_http_config *cfg, pl_engine *e, const srv_model_ctx *mc, const srv_tokens *tok,
              const char *model_name);
/* The bound port (the chosen one when cfg->port was 0). */
int srv_port(const srv *s);
/* Starts draining (shutdown, step 1): connections are still accepted, but
 * new generations get 503, /health answers 503 and every answer closes its
 * connection; running requests go on. */
void srv_quiesce(srv *s);
/* Generations being served now. */
uint64_t srv_active(srv *s);
/* Cancels every generation being served (shutdown when draining takes too long). */
void srv_abort(srv *s);
/* Closes every connection, joins the threads and frees the server. */
void srv_stop(srv *s);

#endif
