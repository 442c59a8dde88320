/* server_gate.h - the listening socket of plain-HTTP `pagellm serve`, and a
 * gate that reads each new connection's request head before libmicrohttpd
 * does, so that a malformed head gets an OpenAI error body (server_head.h)
 * instead of libmicrohttpd's fixed HTML page or a bare close.
 *
 *   accept ──> guard entry (verdict, deadline) ──> peek (MSG_PEEK) until the
 *   head is whole
 *      ├─ valid ──> handoff(fd): libmicrohttpd reads the untouched bytes
 *      ├─ bad ────> JSON error, Connection: close; the rest read and dropped
 *      │            until the client closes or SRV_GATE_LINGER_MS pass
 *      └─ silent, slow or gone ──> closed unanswered (the guard's deadline,
 *                                  or idle_s without a byte)
 *
 * One thread, epoll (edge-triggered, so that unread bytes do not wake it
 * again). Accepting pauses while the guard counts `capacity` connections
 * (those here and those served), as libmicrohttpd stops accepting at its
 * own limit; the kernel's backlog holds the rest.
 *
 * Only the first request of a connection passes here: later ones on a
 * keep-alive connection are read by libmicrohttpd alone (docs/security.md).
 * TLS connections never come here (the bytes are encrypted).
 */
#ifndef PL_SERVER_GATE_H
#define PL_SERVER_GATE_H

#include <stdbool.h>
#include <sys/socket.h>

#include "server_guard.h"

#define SRV_GATE_LINGER_MS 2000 /* after an error answer: how long the client's bytes are drained */

typedef struct {
    srv_guard *guard;    /* counts, judges and times each connection from its accept */
    unsigned capacity;   /* connections open at once (held here and served); accepting pauses there */
    unsigned idle_s;     /* a connection that sends nothing for this long is closed (0: never) */
    bool cors_any;       /* error answers carry Access-Control-Allow-Origin: * */
    /* Gives a valid connection to the HTTP library, which owns fd from then
     * on, success or not (0 ok). */
    int (*handoff)(void *cls, int fd, const struct sockaddr *addr, socklen_t len);
    void (*answered)(void *cls, int status); /* an error answer was sent (metrics) */
    void *cls;
} srv_gate_params;

typedef struct srv_gate srv_gate;

/* Starts the gate thread on listen_fd (bound and listening; owned by the
 * gate from here, success or not). 0, or -1 with a message on stderr. */
int srv_gate_start(srv_gate **out, int listen_fd, const srv_gate_params *p);
/* Stops accepting, closes the connections held and frees the gate. */
void srv_gate_stop(srv_gate *g);

#endif
