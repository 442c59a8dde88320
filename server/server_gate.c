/* server_gate.c - accept, peek and judge request heads; see server_gate.h.
 *
 * Slots: one per connection held (capacity of them), found through epoll's
 * data (the slot index; two values above them name the listening socket
 * and the stop event). A slot's socket is closed only after its guard
 * entry is, so the guard never shuts down a reused fd number.
 */
#include "server_gate.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "server_head.h"
#include "server_openai.h"

#define GATE_PEEK (SRV_HEAD_MAX + 4096) /* the head and the first chunk-size lines after it */
#define GATE_TICK_MS 100                /* how often lingering and idle connections are looked at */
#define EV_LISTEN UINT64_MAX
#define EV_STOP (UINT64_MAX - 1)

typedef struct {
    int fd;                      /* -1: the slot is free */
    srv_conn *gc;                /* its guard entry */
    struct sockaddr_storage addr;
    socklen_t alen;
    bool answered;               /* an error answer was sent: draining until close */
    double t_end;                /* when to close: the linger's end once answered, else idle_s
                                  * after the last byte (0: never) */
} gate_conn;

struct srv_gate {
    srv_gate_params p;
    int lfd, ep, stop_fd;
    pthread_t th;
    bool accepting;              /* the listening socket is in the epoll set */
    gate_conn *conns;            /* [capacity] */
    unsigned *free_ids, n_free;  /* free slots (a stack) */
    char peek[GATE_PEEK];
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void slot_free(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    c->fd = -1;
    c->gc = NULL;
    g->free_ids[g->n_free++] = i;
}

/* Closes a held connection: its guard entry first, then the socket. */
static void slot_close(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    srv_guard_close(g->p.guard, c->gc);
    close(c->fd); /* leaves the epoll set with it */
    slot_free(g, i);
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
    default: return "Bad Request";
    }
}

/* The answer to a bad head: the status, an OpenAI error body, Connection:
 * close. One send: it is far smaller than a socket's buffer. */
static void answer(srv_gate *g, unsigned i, const srv_head_verdict *v)
{
    static const char nomem[] = "{\"error\":{\"message\":\"the request is malformed\",\"type\":\"invalid_request_error\","
                                "\"param\":null,\"code\":\"invalid_request\"}}";
    gate_conn *c = &g->conns[i];
    srv_error e;
    srv_error_set(&e, v->status, "invalid_request_error", NULL, v->code, "%s", v->message);
    char *body = srv_error_json(&e);
    const char *b = body ? body : nomem;
    char msg[1024 + sizeof e.message * 2];
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n%s",
                     v->status, reason_phrase(v->status), g->p.cors_any ? "Access-Control-Allow-Origin: *\r\n" : "",
                     strlen(b), b);
    free(body);
    if (n > 0 && (size_t)n < sizeof msg) (void)!send(c->fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (g->p.answered) g->p.answered(g->p.cls, v->status);
    /* Closing with unread bytes would send a reset that can destroy the
     * answer before the client reads it: read them, say we are done, and
     * wait for the client's close. */
    while (recv(c->fd, g->peek, sizeof g->peek, MSG_DONTWAIT) > 0) {}
    shutdown(c->fd, SHUT_WR);
    c->answered = true;
    c->t_end = mono_now() + SRV_GATE_LINGER_MS / 1000.0;
}

/* Bytes (or a close) on a held connection. */
static void conn_event(srv_gate *g, unsigned i, uint32_t ev)
{
    gate_conn *c = &g->conns[i];
    bool hup = ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
    if (c->answered) {
        ssize_t r;
        while ((r = recv(c->fd, g->peek, sizeof g->peek, MSG_DONTWAIT)) > 0) {}
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || hup) slot_close(g, i);
        return;
    }
    ssize_t n = recv(c->fd, g->peek, sizeof g->peek, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (hup) slot_close(g, i);
        return;
    }
    if (n <= 0) { /* closed or failed before a whole head */
        slot_close(g, i);
        return;
    }
    if (g->p.idle_s) c->t_end = mono_now() + g->p.idle_s;
    srv_head_verdict v;
    switch (srv_head_check(g->peek, (size_t)n, &v)) {
    case SRV_HEAD_MORE:
        if (hup) slot_close(g, i); /* the client stopped sending before the head was whole */
        return;
    case SRV_HEAD_BAD: answer(g, i, &v); return;
    case SRV_HEAD_OK: break;
    }
    epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
    srv_guard_handoff(g->p.guard, c->gc);
    if (g->p.handoff(g->p.cls, c->fd, (struct sockaddr *)&c->addr, c->alen) != 0)
        srv_guard_close(g->p.guard, c->gc); /* refused at once: the library closed the socket */
    slot_free(g, i);
}

static unsigned conns_open(srv_gate *g)
{
    srv_guard_stats st;
    srv_guard_stats_get(g->p.guard, &st);
    return (unsigned)st.open;
}

static void set_accepting(srv_gate *g, bool on)
{
    if (g->accepting == on) return;
    struct epoll_event e = {.events = on ? EPOLLIN : 0, .data.u64 = EV_LISTEN};
    epoll_ctl(g->ep, EPOLL_CTL_MOD, g->lfd, &e);
    g->accepting = on;
}

/* Takes the waiting connections while there is room for them. */
static void accept_ready(srv_gate *g)
{
    while (g->n_free && conns_open(g) < g->p.capacity) {
        struct sockaddr_storage addr;
        socklen_t alen = sizeof addr;
        int fd = accept4(g->lfd, (struct sockaddr *)&addr, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                set_accepting(g, false); /* out of descriptors: try again at the next tick */
            return;
        }
        /* without memory for an entry (NULL) the connection still passes: the
         * HTTP layer answers its request 503 out_of_memory */
        srv_conn *gc = srv_guard_open(g->p.guard, (struct sockaddr *)&addr, fd);
        if (gc && srv_guard_verdict(gc) == SRV_CONN_DROP) { /* past the address's hard limit */
            srv_guard_close(g->p.guard, gc);
            close(fd);
            continue;
        }
        unsigned i = g->free_ids[--g->n_free];
        gate_conn *c = &g->conns[i];
        *c = (gate_conn){.fd = fd, .gc = gc, .addr = addr, .alen = alen};
        c->t_end = g->p.idle_s ? mono_now() + g->p.idle_s : 0;
        struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.u64 = i};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &e) != 0) slot_close(g, i);
    }
    set_accepting(g, false); /* full: looked at again every tick */
}

/* Every tick: lingering answers and silent connections past their time. */
static void tick(srv_gate *g)
{
    double t = mono_now();
    for (unsigned i = 0; i < g->p.capacity; i++) {
        gate_conn *c = &g->conns[i];
        if (c->fd >= 0 && c->t_end > 0 && t >= c->t_end) slot_close(g, i);
    }
    if (!g->accepting && g->n_free && conns_open(g) < g->p.capacity) set_accepting(g, true);
}

static void *gate_main(void *arg)
{
    srv_gate *g = arg;
    struct epoll_event evs[64];
    double next_tick = mono_now();
    for (;;) {
        int n = epoll_wait(g->ep, evs, 64, GATE_TICK_MS);
        for (int k = 0; k < n; k++) {
            uint64_t id = evs[k].data.u64;
            if (id == EV_STOP) return NULL;
            if (id == EV_LISTEN) accept_ready(g);
            else if (g->conns[id].fd >= 0) conn_event(g, (unsigned)id, evs[k].events);
        }
        if (mono_now() >= next_tick) {
            tick(g);
            next_tick = mono_now() + GATE_TICK_MS / 1000.0;
        }
    }
}

int srv_gate_start(srv_gate **out, int listen_fd, const srv_gate_params *p)
{
    srv_gate *g = calloc(1, sizeof *g);
    if (g) {
        g->p = *p;
        g->lfd = listen_fd;
        g->ep = g->stop_fd = -1;
        g->conns = calloc(p->capacity, sizeof *g->conns);
        g->free_ids = calloc(p->capacity, sizeof *g->free_ids);
    }
    if (!g || !g->conns || !g->free_ids) {
        fprintf(stderr, "pagellm serve: out of memory starting the request gate\n");
        goto fail;
    }
    for (unsigned i = p->capacity; i-- > 0;) slot_free(g, i);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event el = {.events = EPOLLIN, .data.u64 = EV_LISTEN}, es = {.events = EPOLLIN, .data.u64 = EV_STOP};
    if (g->ep < 0 || g->stop_fd < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, listen_fd, &el) != 0 ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->stop_fd, &es) != 0) {
        fprintf(stderr, "pagellm serve: cannot start the request gate: %s\n", strerror(errno));
        goto fail;
    }
    g->accepting = true;
    int rc = pthread_create(&g->th, NULL, gate_main, g);
    if (rc != 0) {
        fprintf(stderr, "pagellm serve: cannot start the request gate's thread: %s\n", strerror(rc));
        goto fail;
    }
    *out = g;
    return 0;
fail:
    close(listen_fd);
    if (g) {
        if (g->ep >= 0) close(g->ep);
        if (g->stop_fd >= 0) close(g->stop_fd);
        free(g->conns);
        free(g->free_ids);
        free(g);
    }
    return -1;
}

void srv_gate_stop(srv_gate *g)
{
    if (!g) return;
    uint64_t one = 1;
    (void)!write(g->stop_fd, &one, sizeof one);
    pthread_join(g->th, NULL);
    for (unsigned i = 0; i < g->p.capacity; i++)
        if (g->conns[i].fd >= 0) slot_close(g, i);
    close(g->lfd);
    close(g->ep);
    close(g->stop_fd);
    free(g->conns);
    free(g->free_ids);
    free(g);
}
