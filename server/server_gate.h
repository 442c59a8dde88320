/* server_gate.h - the listening socket of plain-HTTP `pagellm serve`, and a
 * relay between each client and libmicrohttpd that checks every request
 * head, and every chunked body's framing, before libmicrohttpd reads a
 * byte of it, so that a malformed request gets an OpenAI error body
 * (server_head.h) instead of libmicrohttpd's fixed HTML page or a bare
 * close - the first request of a connection and every later one alike.
 *
 *   client socket <──> gate (buffers, checks) <──> socket pair <──> libmicrohttpd
 *
 *   accept ──> guard entry (verdict) ──> wait for a whole head
 *      ├─ bad ────> JSON error, Connection: close; the client's bytes read
 *      │            and dropped until it closes or SRV_GATE_LINGER_MS pass
 *      ├─ too slow (head and body past the request deadline) ──> JSON 408
 *      │            when some of it came, else closed unanswered
 *      └─ valid ──> (first one: a socket pair, one end to libmicrohttpd with
 *                   the client's address) the head, then the body as it
 *                   comes (Content-Length counted, chunks checked), then
 *                   nothing more until libmicrohttpd's answer has been
 *                   passed back whole (server_resp.h); then the next head
 *
 * One request at a time: a bad later request is answered after the answer
 * to the one before it, never in the middle of it. Pipelined requests
 * wait in the gate's buffer, which is bounded: a full buffer stops
 * reading from that side (epoll tells when to go on). Answer bytes are
 * sent to the client as soon as they come (a streamed token is never held).
 *
 * Ends: the client closing its side is passed on (shutdown) once its
 * bytes are, so that the HTTP layer sees a client gone and cancels a
 * generation; a client reset, or a failed send to it, closes both sides at
 * once. libmicrohttpd closing its end ends the connection after the bytes
 * it wrote are sent.
 *
 * Why a relay and not a peek at each request: libmicrohttpd reads a
 * connection's later requests from the socket itself, so a gate that only
 * peeks sees the first one; owning the bytes is the only way to answer
 * every request. The cost is a copy each way and a socket pair per
 * connection (docs/security.md has the measured figures).
 *
 * One thread, epoll (edge-triggered: every event runs the connection's
 * pump until no side can move). Accepting pauses while the guard counts
 * `capacity` connections (as libmicrohttpd stops accepting at its own
 * limit); the kernel's backlog holds the rest.
 *
 * Under TLS (server_tls.h) the gate is the TLS end: each connection's
 * handshake runs here, non-blocking, under the request deadline, and the
 * relay's checks see the decrypted bytes; libmicrohttpd runs without TLS.
 */
#ifndef PL_SERVER_GATE_H
#define PL_SERVER_GATE_H

#include <stdbool.h>
#include <sys/socket.h>

#include "server_guard.h"
#include "server_tls.h"

#define SRV_GATE_LINGER_MS 2000 /* after an error answer: how long the client's bytes are drained */

typedef struct {
    srv_guard *guard;    /* counts and judges each connection from its accept */
    unsigned capacity;   /* connections open at once; accepting pauses there */
    unsigned idle_s;     /* a connection that sends nothing for this long while a request is
                          * due is closed (0: never) */
    double deadline_s;   /* to receive one request's head and body, from the connection's
                          * start or the end of the previous answer (0: none) */
    bool cors_any;       /* error answers carry Access-Control-Allow-Origin: * */
    srv_tls *tls;        /* TLS on every connection (the gate decrypts; NULL: plain HTTP) */
    /* Gives one end of a connection's socket pair to the HTTP library, with
     * the client's address; the library owns fd from then on, success or
     * not (0 ok). */
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
