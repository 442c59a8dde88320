/* bench_http.c - `pagellm serve` as a child and a small HTTP client for
 * it; see bench_http.h. */
#include "bench_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ buffers */

static int buf_add(bench_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

/* Drops the first n bytes. */
static void buf_consume(bench_buf *b, size_t n)
{
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}

/* ----------------------------------------------------------- the client */

static void http_fail(bench_http *c, const char *fmt, const char *arg)
{
    if (!c->err[0]) snprintf(c->err, sizeof c->err, fmt, arg);
}

/* One SSE data payload (a JSON chunk or [DONE]) that arrived at time t. */
static void on_data(bench_http *c, const char *d, double t)
{
    c->events++;
    if (strcmp(d, "[DONE]") == 0) {
        c->done = true;
        return;
    }
    json_error_t je;
    json_t *j = json_loads(d, 0, &je);
    if (!j) { http_fail(c, "bad JSON chunk: %.200s", d); return; }
    json_t *err = json_object_get(j, "error");
    if (err) http_fail(c, "server error: %.200s", json_string_value(json_object_get(err, "message")));
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) c->usage_tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
    json_t *ch = json_object_get(j, "choices");
    for (size_t i = 0; json_is_array(ch) && i < json_array_size(ch); i++) {
        json_t *x = json_array_get(ch, i);
        if (!json_is_null(json_object_get(x, "finish_reason"))) continue; /* the end, not a token */
        const char *text = json_string_value(json_object_get(x, "text"));
        bool token = c->logprobs ? !json_is_null(json_object_get(x, "logprobs")) : text && *text;
        if (token && c->n_tok < c->cap_tok) c->tok_t[c->n_tok++] = t;
    }
    json_decref(j);
}

/* Body bytes: complete lines of the SSE stream, or kept whole. */
static void on_body(bench_http *c, const char *s, size_t n, double t)
{
    if (!c->sse) {
        if (buf_add(&c->raw, s, n)) http_fail(c, "%s", "out of memory");
        return;
    }
    if (buf_add(&c->sse_buf, s, n)) { http_fail(c, "%s", "out of memory"); return; }
    char *nl;
    while (c->sse_buf.len && (nl = memchr(c->sse_buf.p, '\n', c->sse_buf.len))) {
        size_t ll = (size_t)(nl - c->sse_buf.p);
        *nl = 0;
        if (ll && c->sse_buf.p[ll - 1] == '\r') c->sse_buf.p[ll - 1] = 0;
        if (strncmp(c->sse_buf.p, "data:", 5) == 0) on_data(c, c->sse_buf.p + 5 + (c->sse_buf.p[5] == ' '), t);
        buf_consume(&c->sse_buf, ll + 1);
    }
}

/* Transfer-Encoding: chunked, byte by byte between states. */
static void dechunk(bench_http *c, const char *s, size_t n, double t)
{
    size_t i = 0;
    while (i < n && c->cst != 3) {
        if (c->cst == 0) { /* hex size, optional extensions, CRLF */
            char ch = s[i++];
            if (ch != '\n') {
                if (c->cll + 1 < sizeof c->cline) c->cline[c->cll++] = ch;
                continue;
            }
            c->cline[c->cll] = 0;
            c->cll = 0;
            char *end;
            c->crem = strtoull(c->cline, &end, 16);
            if (end == c->cline) { http_fail(c, "bad chunk size line '%.40s'", c->cline); c->cst = 3; return; }
            c->cst = c->crem ? 1 : 3;
        } else if (c->cst == 1) {
            size_t k = n - i < c->crem ? n - i : (size_t)c->crem;
            on_body(c, s + i, k, t);
            i += k;
            c->crem -= k;
            if (!c->crem) c->cst = 2, c->crem = 2;
        } else { /* CRLF after the data */
            i++;
            if (--c->crem == 0) c->cst = 0;
        }
    }
}

/* Response bytes as they arrive. */
static void on_bytes(bench_http *c, const char *s, size_t n, double t)
{
    if (c->phase == 0) {
        if (buf_add(&c->hdr, s, n)) { http_fail(c, "%s", "out of memory"); return; }
        char *end = strstr(c->hdr.p, "\r\n\r\n");
        if (!end) return;
        *end = 0;
        c->status = atoi(c->hdr.p + (strncmp(c->hdr.p, "HTTP/1.", 7) == 0 ? 9 : 0));
        for (char *h = strstr(c->hdr.p, "\r\n"); h; h = strstr(h + 2, "\r\n"))
            if (strncasecmp(h + 2, "transfer-encoding:", 18) == 0 && strstr(h + 20, "chunked")) c->chunked = true;
        size_t used = (size_t)(end - c->hdr.p) + 4;
        c->phase = 1;
        buf_consume(&c->hdr, used); /* what is left is body */
        if (c->hdr.len) {
            if (c->chunked) dechunk(c, c->hdr.p, c->hdr.len, t);
            else on_body(c, c->hdr.p, c->hdr.len, t);
        }
        return;
    }
    if (c->chunked) dechunk(c, s, n, t);
    else on_body(c, s, n, t);
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

void bench_http_run(bench_http *c)
{
    const double deadline = bench_now() + c->timeout_s;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) { http_fail(c, "socket: %s", strerror(errno)); return; }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* loopback only: our own child */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char head[512];
    int hn = c->body ? snprintf(head, sizeof head,
                                "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                                "Accept: text/event-stream\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                                c->path, c->port, strlen(c->body))
                     : snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n",
                                c->path, c->port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write_all(fd, head, (size_t)hn) ||
        (c->body && write_all(fd, c->body, strlen(c->body)))) {
        http_fail(c, "cannot send the request: %s", strerror(errno));
        close(fd);
        return;
    }
    char buf[16384];
    bool eof = false;
    while (!c->done && !c->err[0]) {
        double left = deadline - bench_now();
        if (left <= 0) { http_fail(c, "%s", "timed out"); break; }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue; /* the deadline check ends it */
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { /* EOF (or reset) */
            eof = true;
            if (c->phase == 0 && !c->hdr.len)
                http_fail(c, "the server closed the connection before any answer (%s)", n < 0 ? strerror(errno) : "EOF");
            break;
        }
        on_bytes(c, buf, (size_t)n, bench_now());
        /* a client that goes away mid-stream: the server must free the
         * request's blocks at its next step */
        if (c->drop && c->events > 0 && c->status == 200) { c->dropped = true; break; }
    }
    close(fd);
    if (c->dropped) return;
    if (!c->err[0] && c->status != 200)
        snprintf(c->err, sizeof c->err, "HTTP status %d: %.200s", c->status,
                 c->sse ? (c->sse_buf.p ? c->sse_buf.p : "") : (c->raw.p ? c->raw.p : ""));
    if (!c->err[0] && c->sse && !c->done) http_fail(c, "%s", "the stream ended without data: [DONE]");
    if (!c->err[0] && !c->sse && !eof && c->phase == 0) http_fail(c, "%s", "no answer");
}

void bench_http_free(bench_http *c)
{
    free(c->hdr.p);
    free(c->sse_buf.p);
    free(c->raw.p);
    c->hdr = c->sse_buf = c->raw = (bench_buf){0};
}

char *bench_http_get(const char *who, int port, const char *path, double timeout_s)
{
    bench_http h = {.port = port, .path = path, .timeout_s = timeout_s};
    bench_http_run(&h);
    if (h.err[0]) {
        fprintf(stderr, "pagellm %s: GET %s: %s\n", who, path, h.err);
        bench_http_free(&h);
        return NULL;
    }
    char *body = h.raw.p ? h.raw.p : calloc(1, 1);
    h.raw.p = NULL;
    bench_http_free(&h);
    return body;
}

/* ----------------------------------------------------------- the server */

/* Keeps reading the server's stderr so that it never blocks on the pipe;
 * keeps the tail; exits at EOF (the server exited). */
static void *drain_main(void *arg)
{
    bench_server *s = arg;
    char buf[1024];
    for (;;) {
        ssize_t n = read(s->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        pthread_mutex_lock(&s->mu);
        for (ssize_t i = 0; i < n; i++) {
            if (s->tail_len + 1 >= sizeof s->tail) {
                memmove(s->tail, s->tail + sizeof s->tail / 2, sizeof s->tail / 2);
                s->tail_len -= sizeof s->tail / 2;
            }
            s->tail[s->tail_len++] = buf[i];
        }
        s->tail[s->tail_len] = 0;
        pthread_mutex_unlock(&s->mu);
    }
    close(s->fd);
    return NULL;
}

int bench_server_start(bench_server *s, const char *who, char *const argv[], int *port)
{
    memset(s, 0, sizeof *s);
    s->who = who;
    pthread_mutex_init(&s->mu, NULL);
    if (bench_child_spawn(&s->c, argv, 2) != 0) return -1;
    const double deadline = bench_now() + 120;
    char line[512], last[512] = "";
    int r;
    *port = 0;
    while ((r = bench_child_readline(&s->c, line, sizeof line, deadline)) == 1) {
        const char *at = strstr(line, "listening on http://");
        if (!at) {
            if (line[0]) memcpy(last, line, sizeof last); /* the newest says why, should it not start */
            continue;
        }
        const char *colon = strrchr(at, ':');
        *port = colon ? atoi(colon + 1) : 0;
        break;
    }
    if (*port <= 0) {
        fprintf(stderr, "pagellm %s: the server did not start (%s); its last line: %s\n", who,
                r == 0 ? "it exited" : "no \"listening on\" line within 120 s", last);
        bench_child_stop(&s->c, 5);
        return -1;
    }
    s->fd = s->c.fd;
    s->c.fd = -1; /* the drain thread owns it now */
    if (pthread_create(&s->drain, NULL, drain_main, s) != 0) {
        close(s->fd);
        bench_child_stop(&s->c, 5);
        return -1;
    }
    s->draining = true;
    return 0;
}

int bench_server_stop(bench_server *s, bool show_tail)
{
    int st = bench_child_stop(&s->c, 30);
    if (s->draining) pthread_join(s->drain, NULL); /* EOF once the server is gone */
    const bool clean = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!clean) {
        if (st != -1 && WIFSIGNALED(st)) fprintf(stderr, "pagellm %s: the server died of signal %d\n", s->who, WTERMSIG(st));
        else fprintf(stderr, "pagellm %s: the server exited with status %d\n", s->who, st == -1 ? -1 : WEXITSTATUS(st));
    }
    if ((show_tail || !clean) && s->tail_len) fprintf(stderr, "pagellm %s: server stderr (tail):\n%s\n", s->who, s->tail);
    pthread_mutex_destroy(&s->mu);
    return clean ? 0 : -1;
}

long bench_server_rss_kb(const bench_server *s)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s->c.pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) { kb = strtol(line + 6, NULL, 10); break; }
    fclose(f);
    return kb;
}
