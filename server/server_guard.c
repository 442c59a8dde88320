/* server_guard.c - request deadlines and connection limits; see
 * server_guard.h. The connection list is a doubly linked list under one
 * mutex: counting an address walks it (connections are at most a few
 * thousand, and this happens once per connection). */
#include "server_guard.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pagellm.h"

struct srv_conn {
    srv_conn *prev, *next;
    uint8_t addr[16];      /* IPv4 as ::ffff:a.b.c.d, so both spellings compare equal */
    bool has_addr;
    int fd;                /* -1 while handed off (srv_guard_handoff) */
    int pending_fd;        /* the fd handed off, -1 otherwise */
    bool relayed;          /* behind the gate's relay, which keeps its deadlines: never cut here */
    double deadline;       /* monotonic seconds; 0: none */
    bool cut;              /* shut down by the watchdog */
    srv_conn_verdict verdict;
};

struct srv_guard {
    srv_guard_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* wakes the watchdog to stop */
    pthread_t th;
    bool stop;
    srv_conn *head;
    srv_guard_stats st;
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool addr_key(const struct sockaddr *sa, uint8_t out[16])
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!sa) return false;
    if (sa->sa_family == AF_INET) {
        memcpy(out, mapped, 12);
        memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return true;
    }
    return false;
}

/* The watchdog: every tick, cuts the connections past their deadline. */
static void *watchdog(void *arg)
{
    srv_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)g->p.tick_ms * 1000000L;
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        double t = mono_now();
        for (srv_conn *c = g->head; c; c = c->next)
            if (c->deadline > 0 && t >= c->deadline && !c->cut && c->fd >= 0) {
                shutdown(c->fd, SHUT_RDWR);
                c->cut = true;
                g->st.timeouts++;
            }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int srv_guard_new(srv_guard **out, const srv_guard_params *p)
{
    srv_guard *g = calloc(1, sizeof *g);
    if (!g) return PL_ERR_NOMEM;
    g->p = *p;
    if (!g->p.tick_ms) g->p.tick_ms = 100;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->th, NULL, watchdog, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return PL_ERR_INVAL;
    }
    *out = g;
    return 0;
}

void srv_guard_free(srv_guard *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    while (g->head) { /* none should be left; free them all the same */
        srv_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void unlink_conn(srv_guard *g, srv_conn *c)
{
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    g->st.open--;
}

srv_conn *srv_guard_open(srv_guard *g, const struct sockaddr *addr, int fd)
{
    srv_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->pending_fd = -1;
    c->has_addr = addr_key(addr, c->addr);
    pthread_mutex_lock(&g->mu);
    unsigned all = 0, same = 0;
    for (srv_conn *o = g->head, *next; o; o = next) {
        next = o->next;
        if (fd >= 0 && o->pending_fd == fd) { /* handed off, then dropped by the library: fd is free again */
            unlink_conn(g, o);
            free(o);
            continue;
        }
        all++;
        same += c->has_addr && o->has_addr && memcmp(o->addr, c->addr, 16) == 0;
    }
    if (g->p.per_ip_hard && same >= g->p.per_ip_hard) c->verdict = SRV_CONN_DROP, g->st.over_ip++;
    else if (all >= g->p.max_conns) c->verdict = SRV_CONN_OVER_MAX, g->st.over_max++;
    else if (g->p.per_ip && same >= g->p.per_ip) c->verdict = SRV_CONN_OVER_IP, g->st.over_ip++;
    c->deadline = g->p.deadline_s > 0 ? mono_now() + g->p.deadline_s : 0;
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    g->st.open++;
    pthread_mutex_unlock(&g->mu);
    return c;
}

void srv_guard_close(srv_guard *g, srv_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    unlink_conn(g, c);
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void srv_guard_handoff(srv_guard *g, srv_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->pending_fd = c->fd;
    c->fd = -1;
    pthread_mutex_unlock(&g->mu);
}

void srv_guard_relay(srv_guard *g, srv_conn *c, int lib_fd)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    for (srv_conn *o = g->head, *next; o; o = next) {
        next = o->next;
        if (o != c && o->pending_fd == lib_fd) { /* handed off, then dropped by the library: lib_fd is free again */
            unlink_conn(g, o);
            free(o);
        }
    }
    c->pending_fd = lib_fd;
    c->fd = -1;
    c->relayed = true;
    c->deadline = 0;
    pthread_mutex_unlock(&g->mu);
}

void srv_guard_timed_out(srv_guard *g)
{
    pthread_mutex_lock(&g->mu);
    g->st.timeouts++;
    pthread_mutex_unlock(&g->mu);
}

srv_conn *srv_guard_adopt(srv_guard *g, int fd)
{
    pthread_mutex_lock(&g->mu);
    srv_conn *c = g->head;
    while (c && c->pending_fd != fd) c = c->next;
    if (c) {
        c->fd = c->relayed ? -1 : fd;
        c->pending_fd = -1;
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

srv_conn_verdict srv_guard_verdict(const srv_conn *c) { return c ? c->verdict : SRV_CONN_OVER_MAX; }

void srv_guard_busy(srv_guard *g, srv_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->deadline = 0;
    pthread_mutex_unlock(&g->mu);
}

void srv_guard_idle(srv_guard *g, srv_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->deadline = g->p.deadline_s > 0 ? mono_now() + g->p.deadline_s : 0;
    pthread_mutex_unlock(&g->mu);
}

void srv_guard_stats_get(srv_guard *g, srv_guard_stats *st)
{
    pthread_mutex_lock(&g->mu);
    *st = g->st;
    pthread_mutex_unlock(&g->mu);
}
