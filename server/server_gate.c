/* server_gate.c - accept, check and relay every request; see server_gate.h.
 *
 * Slots: one per connection held (capacity of them), found through epoll's
 * data: the slot index times two, plus one for the library's side (two
 * values above them name the listening socket and the stop event). A
 * slot's guard entry is the gate's until the first request is relayed,
 * the library's after (it closes it); the gate's sockets are its own.
 *
 * A connection's phase:
 *   HEAD   a request is due: its head is checked once whole
 *   BODY   the head is passed on; the body follows it as it comes
 *   WAIT   the request is passed on whole; its answer is being passed back
 *          (the client's next bytes wait in `in`)
 *   LINGER an error answer (or the library's last bytes) is sent; the
 *          client's bytes are dropped until it closes or the linger ends
 */
#include "server_gate.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include "server_resp.h"
#include "server_tls.h"

#define GATE_IN (SRV_HEAD_MAX + SRV_CHUNK_LINE_MAX + 4096) /* client bytes held: a whole head, or a chunk line */
#define GATE_OUT 32768           /* answer bytes on their way to the client */
#define GATE_TICK_MS 100         /* how often deadlines are looked at */
#define EV_LISTEN UINT64_MAX
#define EV_STOP (UINT64_MAX - 1)
#define GEN_MASK 0x7fffffffu     /* a slot generation's bits (see ev_tag) */

enum { P_HEAD, P_BODY, P_WAIT, P_LINGER };

typedef struct {
    char in[GATE_IN];            /* from the client; [0, in_fwd) checked and due to the library */
    char out[GATE_OUT];          /* to the client */
    srv_resp resp;               /* where the library's current answer ends */
    srv_chunks ch;               /* a chunked body's framing */
} gate_bufs;

typedef struct {
    int fd;                      /* the client's socket; -1: the slot is free */
    int sfd;                     /* the gate's end of the socket pair; -1 before the first relay */
    srv_tls_conn *tls;           /* under TLS: the client's session (its bytes are decrypted here) */
    bool tls_ready;              /* ... its handshake is done */
    srv_conn *gc;                /* its guard entry while the gate owns it (until the first relay) */
    struct sockaddr_storage addr;
    socklen_t alen;
    int phase;
    bool cl_eof;                 /* the client closed its side */
    bool sv_eof;                 /* the library closed its end */
    bool sv_shut;                /* the client's close is passed on */
    bool wr_shut;                /* LINGER: our side to the client is shut */
    double t_req;                /* HEAD/BODY: the request's deadline (0: none) */
    double t_idle;               /* HEAD/BODY: idle_s after the last byte (0: none) */
    double t_linger;             /* LINGER: when to close */
    srv_body_kind body;
    unsigned long long body_left;
    size_t in_len, in_fwd, out_len;
    gate_bufs *b;
    uint32_t gen;                /* bumped each time the slot is freed: see ev_tag */
} gate_conn;

struct srv_gate {
    srv_gate_params p;
    int lfd, ep, stop_fd;
    pthread_t th;
    bool accepting;              /* the listening socket is in the epoll set */
    gate_conn *conns;            /* [capacity] */
    unsigned *free_ids, n_free;  /* free slots (a stack) */
    char scratch[4096];          /* dropped bytes */
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool again(void) { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

/* The client's side, in clear or through its TLS session: as recv/send. */
static ssize_t cl_recv(gate_conn *c, void *b, size_t n)
{
    return c->tls ? srv_tls_recv(c->tls, b, n) : recv(c->fd, b, n, MSG_DONTWAIT);
}

static ssize_t cl_send(gate_conn *c, const void *b, size_t n)
{
    return c->tls ? srv_tls_send(c->tls, b, n) : send(c->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void cl_shut(gate_conn *c)
{
    if (c->tls) srv_tls_bye(c->tls);
    shutdown(c->fd, SHUT_WR);
}

static void slot_free(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    free(c->b);
    *c = (gate_conn){.fd = -1, .sfd = -1, .gen = (c->gen + 1) & GEN_MASK};
    g->free_ids[g->n_free++] = i;
}

/* A socket's epoll data: its slot's generation, the slot, the side. One
 * epoll_wait batch can hold an event of a connection closed earlier in the
 * same batch while a new connection already took its slot (the free slots
 * are a stack); the generation tells such an event from the new one's, so
 * that an old client's reset cannot close the new client's socket. The
 * generation's top bit is never set: no tag equals EV_LISTEN or EV_STOP. */
static uint64_t ev_tag(const srv_gate *g, unsigned i, int side)
{
    return (uint64_t)g->conns[i].gen << 32 | ((uint64_t)i * 2 + (uint64_t)side);
}

/* Closes a held connection: its guard entry (if still the gate's), the
 * socket pair's end (the library sees a client gone), the client's socket. */
static void conn_close(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    srv_guard_close(g->p.guard, c->gc);
    if (c->sfd >= 0) close(c->sfd);
    srv_tls_close(c->tls);
    close(c->fd); /* leaves the epoll set with it */
    slot_free(g, i);
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Bad Request";
    }
}

/* An error answer of the gate's own: the status, an OpenAI error body,
 * Connection: close, queued after whatever the client is still owed; the
 * library's side is closed (a request it was reading ends there), then
 * LINGER. */
static void answer(srv_gate *g, unsigned i, int status, const char *type, const char *code, const char *message)
{
    static const char nomem[] = "{\"error\":{\"message\":\"the request is malformed\",\"type\":\"invalid_request_error\","
                                "\"param\":null,\"code\":\"invalid_request\"}}";
    gate_conn *c = &g->conns[i];
    srv_error e;
    srv_error_set(&e, status, type, NULL, code, "%s", message);
    char *body = srv_error_json(&e);
    const char *b = body ? body : nomem;
    char msg[1024 + sizeof e.message * 2];
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n%s",
                     status, reason_phrase(status), g->p.cors_any ? "Access-Control-Allow-Origin: *\r\n" : "", strlen(b), b);
    free(body);
    if (n > 0 && (size_t)n < sizeof msg && (size_t)n <= GATE_OUT - c->out_len) {
        memcpy(c->b->out + c->out_len, msg, (size_t)n);
        c->out_len += (size_t)n;
    }
    if (g->p.answered) g->p.answered(g->p.cls, status);
    if (c->sfd >= 0) close(c->sfd);
    c->sfd = -1;
    c->phase = P_LINGER;
    c->in_len = c->in_fwd = 0;
    c->t_linger = mono_now() + SRV_GATE_LINGER_MS / 1000.0;
}

/* A fault of the server that a client sees only as a 503 or 500: said on
 * stderr at most once a second, so that the operator learns why. */
static void say_at_most_each_second(const char *what)
{
    static double last;
    const double t = mono_now();
    if (t - last < 1.0) return;
    last = t;
    fprintf(stderr, "pagellm serve: %s\n", what);
}

/* The first valid request: a socket pair, one end to the library with the
 * client's address. false: the connection is answered or closed. */
static bool relay_open(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        answer(g, i, 503, "server_error", "server_overloaded", "the server cannot open a connection for this request; retry later");
        return false;
    }
    srv_conn *gc = c->gc;
    srv_guard_relay(g->p.guard, gc, sv[1]);
    c->gc = NULL; /* the library's from here: it closes the entry */
    if (g->p.handoff(g->p.cls, sv[1], (struct sockaddr *)&c->addr, c->alen) != 0) {
        const int why = errno;
        srv_guard_close(g->p.guard, gc); /* refused at once: the library closed its end and knows no entry */
        close(sv[0]);
        char m[160];
        snprintf(m, sizeof m, "the HTTP library refused a connection (%s); answered 503", strerror(why));
        say_at_most_each_second(m);
        answer(g, i, 503, "server_error", "server_overloaded", "the server cannot take this connection now; retry later");
        return false;
    }
    c->sfd = sv[0];
    struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = ev_tag(g, i, 1)};
    if (epoll_ctl(g->ep, EPOLL_CTL_ADD, c->sfd, &e) != 0) {
        conn_close(g, i);
        return false;
    }
    return true;
}

/* Moves the client's bytes through the request checks: which of them may
 * go to the library. false when the connection was answered or closed. */
static bool advance(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    srv_head_verdict v;
    if (c->phase == P_WAIT) {
        if (c->b->resp.due || c->out_len) return true; /* the answer to the last request is still on its way */
        c->phase = P_HEAD;
        double t = mono_now();
        c->t_req = g->p.deadline_s > 0 ? t + g->p.deadline_s : 0;
        c->t_idle = g->p.idle_s ? t + g->p.idle_s : 0;
    }
    if (c->phase == P_HEAD) {
        srv_head_state st = c->in_len ? srv_head_check(c->b->in, c->in_len, &v) : SRV_HEAD_MORE;
        if (st == SRV_HEAD_BAD) {
            answer(g, i, v.status, "invalid_request_error", v.code, v.message);
            return false;
        }
        if (st == SRV_HEAD_MORE) {
            if (!c->cl_eof) return true;
            conn_close(g, i); /* the client stopped sending before a whole head: nothing is owed */
            return false;
        }
        if (c->sfd < 0 && !relay_open(g, i)) return false;
        c->in_fwd = v.head_len;
        srv_resp_expect(&c->b->resp, v.head_method);
        c->body = v.body;
        c->body_left = v.body_len;
        memset(&c->b->ch, 0, sizeof c->b->ch);
        c->phase = P_BODY;
    }
    if (c->phase != P_BODY) return true;
    size_t avail = c->in_len - c->in_fwd, used;
    switch (c->body) {
    case SRV_BODY_NONE: c->phase = P_WAIT; break;
    case SRV_BODY_LENGTH:
        used = avail < c->body_left ? avail : (size_t)c->body_left;
        c->in_fwd += used;
        c->body_left -= used;
        if (!c->body_left) c->phase = P_WAIT;
        break;
    case SRV_BODY_CHUNKED:
        switch (srv_chunks_feed(&c->b->ch, c->b->in + c->in_fwd, avail, &used, &v)) {
        case SRV_HEAD_BAD:
            if (c->b->resp.started) { /* the library answered early: its answer stands, the connection ends */
                conn_close(g, i);
                return false;
            }
            answer(g, i, v.status, "invalid_request_error", v.code, v.message);
            return false;
        case SRV_HEAD_OK: c->phase = P_WAIT; break;
        case SRV_HEAD_MORE: break;
        }
        c->in_fwd += used;
        break;
    case SRV_BODY_UNTIL_CLOSE: c->in_fwd = c->in_len; break; /* the library refuses it and closes */
    }
    if (c->phase == P_WAIT) c->t_req = c->t_idle = 0;
    return true;
}

/* The library's bytes, through the answer tracker. false: not an answer
 * that was due (printed; the connection is to be closed). */
static bool track(gate_conn *c, const char *b, size_t n)
{
    for (size_t pos = 0; pos < n;) {
        size_t used;
        srv_resp_state st = srv_resp_feed(&c->b->resp, b + pos, n - pos, &used);
        if (st == SRV_RESP_BAD) {
            fprintf(stderr, "pagellm serve: the HTTP library wrote bytes that are not a due answer on a relayed "
                            "connection; it is closed\n");
            return false;
        }
        pos += used;
        if (st == SRV_RESP_MORE) break;
    }
    return true;
}

/* LINGER: what is owed is sent, then our side shut, then the client's
 * bytes dropped until it closes (a close with unread bytes would send a
 * reset that can destroy the answer before the client reads it). */
static void linger(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    while (c->out_len) {
        ssize_t w = cl_send(c, c->b->out, c->out_len);
        if (w < 0) {
            if (again()) break;
            conn_close(g, i);
            return;
        }
        memmove(c->b->out, c->b->out + w, c->out_len - (size_t)w);
        c->out_len -= (size_t)w;
    }
    if (!c->out_len && !c->wr_shut) {
        cl_shut(c);
        c->wr_shut = true;
    }
    ssize_t r;
    while ((r = cl_recv(c, g->scratch, sizeof g->scratch)) > 0) {}
    if (r == 0) c->cl_eof = true;
    if ((r < 0 && !again()) || (c->cl_eof && !c->out_len)) conn_close(g, i);
}

/* Moves bytes every way they can go until none can. */
static void pump(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    if (c->tls && !c->tls_ready) { /* under the request deadline, as a head is */
        int h = srv_tls_handshake(c->tls);
        if (h < 0) conn_close(g, i);
        if (h <= 0) return;
        c->tls_ready = true;
    }
    for (;;) {
        if (c->phase == P_LINGER) {
            linger(g, i);
            return;
        }
        bool moved = false;
        if (!c->cl_eof && c->in_len < GATE_IN) { /* client -> gate */
            ssize_t r = cl_recv(c, c->b->in + c->in_len, GATE_IN - c->in_len);
            if (r > 0) {
                c->in_len += (size_t)r;
                if (c->t_idle) c->t_idle = mono_now() + g->p.idle_s;
                moved = true;
            } else if (r == 0) {
                c->cl_eof = moved = true;
            } else if (!again()) {
                conn_close(g, i);
                return;
            }
        }
        size_t fwd0 = c->in_fwd;
        int phase0 = c->phase;
        if (!advance(g, i)) {
            if (c->fd >= 0 && c->phase == P_LINGER) continue;
            return;
        }
        moved |= c->in_fwd != fwd0 || c->phase != phase0;
        if (c->sfd >= 0 && c->in_fwd) { /* gate -> library */
            ssize_t w = send(c->sfd, c->b->in, c->in_fwd, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0) {
                memmove(c->b->in, c->b->in + w, c->in_len - (size_t)w);
                c->in_len -= (size_t)w;
                c->in_fwd -= (size_t)w;
                moved = true;
            } else if (w < 0 && !again()) {
                /* the library's end is closed or failing: the client's bytes are
                 * dropped, what the library wrote is still read, and our close
                 * tells it to end the connection (then LINGER) */
                c->in_len = c->in_fwd = 0;
                if (!c->sv_shut) shutdown(c->sfd, SHUT_WR);
                c->sv_shut = moved = true;
            }
        }
        if (c->sfd >= 0 && c->cl_eof && !c->in_len && !c->sv_shut) {
            shutdown(c->sfd, SHUT_WR); /* the client is gone (or done): the library sees it and cancels */
            c->sv_shut = moved = true;
        }
        if (c->sfd >= 0 && !c->sv_eof && c->out_len < GATE_OUT) { /* library -> gate */
            ssize_t r = recv(c->sfd, c->b->out + c->out_len, GATE_OUT - c->out_len, MSG_DONTWAIT);
            if (r > 0) {
                if (!track(c, c->b->out + c->out_len, (size_t)r)) {
                    conn_close(g, i);
                    return;
                }
                c->out_len += (size_t)r;
                moved = true;
            } else if (r == 0 || !again()) {
                c->sv_eof = moved = true;
                if (c->b->resp.due && srv_resp_close_ends(&c->b->resp)) c->b->resp.due = false;
            }
        }
        if (c->out_len) { /* gate -> client */
            ssize_t w = cl_send(c, c->b->out, c->out_len);
            if (w > 0) {
                memmove(c->b->out, c->b->out + w, c->out_len - (size_t)w);
                c->out_len -= (size_t)w;
                moved = true;
            } else if (w < 0 && !again()) {
                conn_close(g, i); /* the client is gone: closing the pair tells the library */
                return;
            }
        }
        if (c->sv_eof && !c->out_len) { /* the library is done and all it wrote is sent */
            if (c->b->resp.due && !c->b->resp.started && !c->cl_eof) {
                /* it closed a request it never answered: the client is told, not left with a bare close */
                say_at_most_each_second("the HTTP library closed a request without answering it; answered 500");
                answer(g, i, 500, "server_error", "internal_error", "the server ended this request without an answer");
                continue;
            }
            if (c->cl_eof) {
                conn_close(g, i);
                return;
            }
            close(c->sfd);
            c->sfd = -1;
            c->phase = P_LINGER;
            c->t_linger = mono_now() + SRV_GATE_LINGER_MS / 1000.0;
            continue;
        }
        if (!moved) return;
    }
}

/* An event on a held connection's client socket (side 0) or pair end (1),
 * named by its ev_tag. */
static void conn_event(srv_gate *g, uint64_t tag, uint32_t ev)
{
    const unsigned i = (unsigned)((tag & 0xffffffffu) / 2);
    const int side = (int)(tag & 1);
    assert(i < g->p.capacity);
    gate_conn *c = &g->conns[i];
    if (c->gen != (uint32_t)(tag >> 32)) return; /* its connection was closed earlier in this batch */
    if (side && c->sfd < 0) return;               /* its library end was closed earlier in this batch */
    assert(c->fd >= 0);
    if (!side && (ev & (EPOLLHUP | EPOLLERR))) { /* reset, or closed both ways: nothing more to send it */
        conn_close(g, i);
        return;
    }
    pump(g, i);
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

/* No memory to relay a new plain-HTTP connection: a constant 503, sent
 * once, best effort, then our side shut. */
static void refuse_oom(int fd)
{
    static const char body[] = "{\"error\":{\"message\":\"the server is out of memory; retry later\",\"type\":"
                               "\"server_error\",\"param\":null,\"code\":\"out_of_memory\"}}";
    char msg[512];
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     sizeof body - 1, body);
    if (n > 0 && (size_t)n < sizeof msg) (void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
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
        /* the gate keeps the deadlines (no fd for the guard's watchdog); without
         * memory for an entry (NULL) the connection still passes: the HTTP
         * layer answers its request 503 out_of_memory */
        srv_conn *gc = srv_guard_open(g->p.guard, (struct sockaddr *)&addr, -1);
        bool drop = gc && srv_guard_verdict(gc) == SRV_CONN_DROP;
        gate_bufs *b = drop ? NULL : malloc(sizeof *b);
        if (!b && (drop || g->p.tls)) { /* past the address's hard limit: unanswered */
            srv_guard_close(g->p.guard, gc);
            close(fd);
            continue;
        }
        int one = 1; /* answer bytes go out as they come: a streamed token is not held back */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        unsigned i = g->free_ids[--g->n_free];
        gate_conn *c = &g->conns[i];
        double t = mono_now();
        *c = (gate_conn){.fd = fd, .sfd = -1, .gc = gc, .addr = addr, .alen = alen, .phase = P_HEAD, .b = b, .gen = c->gen};
        if (!b) { /* no memory for its buffers: a constant 503, then LINGER (which needs none) */
            refuse_oom(fd);
            c->phase = P_LINGER;
            c->wr_shut = true;
            c->t_linger = t + SRV_GATE_LINGER_MS / 1000.0;
        } else {
            memset(&c->b->resp, 0, sizeof c->b->resp);
        }
        c->t_req = g->p.deadline_s > 0 ? t + g->p.deadline_s : 0;
        c->t_idle = g->p.idle_s ? t + g->p.idle_s : 0;
        if (g->p.tls && !(c->tls = srv_tls_accept(g->p.tls, fd))) {
            conn_close(g, i);
            continue;
        }
        struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u64 = ev_tag(g, i, 0)};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &e) != 0) conn_close(g, i);
    }
    set_accepting(g, false); /* full: looked at again every tick */
}

/* A request past its deadline: a 408 when some of it came (and no answer
 * has begun), else closed unanswered. */
static void timed_out(srv_gate *g, unsigned i)
{
    gate_conn *c = &g->conns[i];
    srv_guard_timed_out(g->p.guard);
    if (c->phase == P_HEAD ? c->in_len > 0 : !c->b->resp.started) {
        char m[160];
        snprintf(m, sizeof m, "the request's head and body did not arrive within %g s (--header-timeout)", g->p.deadline_s);
        answer(g, i, 408, "invalid_request_error", "request_timeout", m);
        linger(g, i);
    } else {
        conn_close(g, i);
    }
}

/* Every tick: requests past their deadline, silent connections, lingers. */
static void tick(srv_gate *g)
{
    double t = mono_now();
    for (unsigned i = 0; i < g->p.capacity; i++) {
        gate_conn *c = &g->conns[i];
        if (c->fd < 0) continue;
        bool due = c->phase == P_HEAD || c->phase == P_BODY;
        if (c->phase == P_LINGER && t >= c->t_linger) conn_close(g, i);
        else if (due && c->t_req > 0 && t >= c->t_req) timed_out(g, i);
        else if (due && c->t_idle > 0 && t >= c->t_idle) conn_close(g, i);
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
            else conn_event(g, id, evs[k].events);
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
        if (g->conns[i].fd >= 0) conn_close(g, i);
    close(g->lfd);
    close(g->ep);
    close(g->stop_fd);
    free(g->conns);
    free(g->free_ids);
    free(g);
}
