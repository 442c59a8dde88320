/* bench_http.h - the HTTP side of the benches that drive `pagellm serve`
 * (bench serve, bench soak): the server as a child process and a small
 * HTTP/1.1 client for it.
 *
 *   server  this binary (/proc/self/exe) started with the caller's argv;
 *           its stderr is read for "listening on http://HOST:PORT" (up to
 *           120 s), then drained by a thread so that the server never
 *           blocks on a full pipe (the newest bytes are kept for error
 *           reports). Stopped with SIGTERM (SIGKILL after a grace) - only
 *           this child, by pid.
 *   client  a POSIX socket to 127.0.0.1 only (no libcurl is linked), one
 *           request per connection (Connection: close), chunked transfer
 *           coding decoded, SSE "data:" lines parsed with jansson; every
 *           read has a deadline.
 */
#ifndef PL_BENCH_HTTP_H
#define PL_BENCH_HTTP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench_common.h"

/* ------------------------------------------------------------ the server */

typedef struct {
    const char *who;     /* "bench serve": prefixes its messages */
    bench_child c;
    int fd;              /* the child's stderr, owned by the drain thread */
    pthread_t drain;
    bool draining;
    char tail[2048];     /* the newest stderr bytes, for error reports */
    size_t tail_len;
    pthread_mutex_t mu;
} bench_server;

/* Starts argv (argv[0] "/proc/self/exe", argv[1] "serve", ...) and waits
 * for its port. 0 or -1 (the reason printed). */
int bench_server_start(bench_server *s, const char *who, char *const argv[], int *port);
/* Stops the server; 0 if it exited cleanly (status 0 after SIGTERM). Its
 * stderr tail is shown when asked or when it did not. */
int bench_server_stop(bench_server *s, bool show_tail);
/* The server's resident set in KiB (VmRSS of /proc/PID/status), -1 if unknown. */
long bench_server_rss_kb(const bench_server *s);

/* ------------------------------------------------------------ the client */

typedef struct {
    char *p;
    size_t len, cap;
} bench_buf;

typedef struct {
    /* in */
    int port;
    const char *path;       /* "/v1/completions" (POST with body) or "/metrics" (GET without) */
    char *body;             /* NULL: a GET; not owned */
    double timeout_s;
    bool logprobs;          /* a token chunk is one with logprobs (else one with text) */
    bool sse;               /* the answer is an SSE stream (else the body is kept in raw) */
    bool drop;              /* close the connection after the first SSE event: an abrupt disconnect */
    /* out */
    double *tok_t;          /* [cap_tok] arrival time of each token chunk (may be NULL) */
    int n_tok, cap_tok;
    int events;             /* SSE data: payloads seen */
    int usage_tokens;       /* completion_tokens of the usage chunk, -1 if none (set it before) */
    int status;             /* HTTP status */
    bool done;              /* data: [DONE] seen */
    bool dropped;           /* closed by us as asked (drop) */
    char err[256];
    bench_buf raw;          /* !sse: the body */
    /* parser state */
    int phase;              /* 0 headers, 1 body */
    bench_buf hdr, sse_buf;
    bool chunked;
    int cst;                /* chunk decoder: 0 size line, 1 data, 2 CRLF after data, 3 end */
    uint64_t crem;
    char cline[64];
    size_t cll;
} bench_http;

/* Sends the request and reads the answer to its end, the deadline or (drop)
 * the first event. Sets err on a transport error, a status other than 200,
 * an error chunk, or an SSE stream without data: [DONE] (unless dropped). */
void bench_http_run(bench_http *h);
/* Frees the parser's and raw's buffers (not body or tok_t). */
void bench_http_free(bench_http *h);

/* GET path: the body (malloc'd) of a 200 answer, or NULL (the reason printed, prefixed by who). */
char *bench_http_get(const char *who, int port, const char *path, double timeout_s);

#endif
