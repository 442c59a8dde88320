/* server_tls.h - TLS for the gate's relay (server_gate.h): the gate
 * terminates TLS itself with GnuTLS and relays plaintext to libmicrohttpd,
 * so that requests under TLS get the same checks and JSON error answers as
 * plain ones. Non-blocking: every call returns at once, saying "again"
 * when the socket is not ready (the gate's epoll says when to retry).
 */
#ifndef PL_SERVER_TLS_H
#define PL_SERVER_TLS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct srv_tls srv_tls;           /* a certificate and its key */
typedef struct srv_tls_conn srv_tls_conn; /* one client's session */

/* The PEM certificate (chain) and private key. 0, or -1 with why in err. */
int srv_tls_new(srv_tls **out, const char *cert_pem, const char *key_pem, char *err, size_t errlen);
void srv_tls_free(srv_tls *t);

/* A server session on the non-blocking socket fd (NULL: out of memory). */
srv_tls_conn *srv_tls_accept(srv_tls *t, int fd);
/* 1 the handshake is done, 0 again later, -1 failed (close the connection). */
int srv_tls_handshake(srv_tls_conn *c);
/* As recv/send: > 0 bytes, 0 the client closed (recv), -1 with errno
 * EAGAIN (again later) or EPIPE (the session failed). A send that said
 * EAGAIN must be repeated with at least the same bytes first. */
ssize_t srv_tls_recv(srv_tls_conn *c, void *buf, size_t n);
ssize_t srv_tls_send(srv_tls_conn *c, const void *buf, size_t n);
/* Says "no more data" to the client (close_notify), best effort. */
void srv_tls_bye(srv_tls_conn *c);
void srv_tls_close(srv_tls_conn *c);

#endif
