/* server_guard.h - what one client may hold of `pagellm serve`: a deadline
 * for each request's head and body, connections per client address, and
 * connections in all.
 *
 *   accept ──> open: verdict OK | OVER_IP (429) | OVER_MAX (503), deadline armed
 *   head and body received ──> busy: deadline off while the answer is made and sent
 *   answer sent, keep-alive ──> idle: deadline armed again for the next request
 *   closed ──> close
 *
 * The deadline counts from the connection's start (first request) or from
 * the end of the previous answer (later ones), so bytes that trickle in do
 * not extend it, and an idle keep-alive connection ends after it too. A
 * watchdog thread shuts down (shutdown(2), both ways) the socket of every
 * connection past its deadline; the HTTP layer then sees the client gone
 * and closes the connection. Nothing is sent: a client that has not sent a
 * whole request in that time gets no answer. Connections behind the
 * request gate's relay (server_gate.h, every connection of `pagellm
 * serve`) are timed by the gate instead, which can answer 408.
 *
 * Verdicts are decided once, when the connection opens, by counting the
 * connections open at that moment (DROP: past per_ip_hard, closed at
 * once); the HTTP layer answers the first request of a connection that is over a limit with 429 or 503 and closes it. The
 * HTTP library's own hard limits stay above these (a reserve), so that
 * those answers can be sent.
 *
 * Knows sockets and addresses only, never HTTP. Thread-safe: one mutex
 * around the connection list, taken by the HTTP threads and the watchdog.
 * Invariant: a connection's fd is shut down only while the connection is in
 * the list, i.e. before srv_guard_close, so never after the fd is closed
 * and reused.
 */
#ifndef PL_SERVER_GUARD_H
#define PL_SERVER_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct {
    unsigned max_conns;   /* connections served at once; more: OVER_MAX */
    unsigned per_ip;      /* connections of one client address; more: OVER_IP (0: no limit) */
    double deadline_s;    /* to receive one request's head and body (0: none) */
    unsigned tick_ms;     /* how often the watchdog looks (default 100 when 0) */
    unsigned per_ip_hard; /* connections of one address past which a new one is dropped unanswered
                           * (0: no such limit; the HTTP library's own limit applies then) */
} srv_guard_params;

typedef enum { SRV_CONN_OK = 0, SRV_CONN_OVER_IP, SRV_CONN_OVER_MAX, SRV_CONN_DROP } srv_conn_verdict;

typedef struct srv_guard srv_guard;
typedef struct srv_conn srv_conn;

/* Starts the watchdog thread. 0, PL_ERR_NOMEM or PL_ERR_INVAL (no thread). */
int srv_guard_new(srv_guard **out, const srv_guard_params *p);
/* Stops the watchdog and frees the guard; every connection must be closed. */
void srv_guard_free(srv_guard *g);

/* A new connection from addr (may be NULL) on socket fd. NULL when out of
 * memory (the HTTP layer then treats it as OVER_MAX). */
srv_conn *srv_guard_open(srv_guard *g, const struct sockaddr *addr, int fd);
void srv_guard_close(srv_guard *g, srv_conn *c);
/* Passing a connection's socket to the HTTP library (server_gate.h): the
 * entry stays counted, and its deadline runs on, but the watchdog leaves
 * the socket alone until srv_guard_adopt names it again - the library may
 * close it before that. An entry still waiting when its fd number comes
 * back from accept is one the library dropped; srv_guard_open frees it. */
void srv_guard_handoff(srv_guard *g, srv_conn *c);
/* Passing a relayed connection (server_gate.h): the library gets lib_fd,
 * one end of a socket pair, and the gate keeps the client's socket and
 * the request deadlines; the watchdog never cuts this entry. Adopted by
 * lib_fd as srv_guard_handoff's are. */
void srv_guard_relay(srv_guard *g, srv_conn *c, int lib_fd);
/* A connection cut at a deadline kept outside the guard (the relay's). */
void srv_guard_timed_out(srv_guard *g);
/* The handed-off entry of socket fd, now the library's; NULL when none. */
srv_conn *srv_guard_adopt(srv_guard *g, int fd);
srv_conn_verdict srv_guard_verdict(const srv_conn *c);
void srv_guard_busy(srv_guard *g, srv_conn *c);   /* the request is in: deadline off */
void srv_guard_idle(srv_guard *g, srv_conn *c);   /* waiting for a request: deadline on */

typedef struct {
    uint64_t open;        /* connections now */
    uint64_t timeouts;    /* connections cut at their deadline */
    uint64_t over_ip, over_max; /* connections refused by verdict */
} srv_guard_stats;
void srv_guard_stats_get(srv_guard *g, srv_guard_stats *st);

#endif
