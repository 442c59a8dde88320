/* server_resp.h - follows the answers libmicrohttpd writes on a relayed
 * connection (server_gate.h), to tell where each one ends: the relay
 * passes the client's next request on only after the answer to the last
 * one, so that an error answer of its own can never overtake it.
 *
 *   status line, field lines, empty line   (the head; lines up to SRV_RESP_LINE_MAX)
 *   1xx                  an interim answer: the final one follows
 *   HEAD request, 204, 304  no body
 *   Transfer-Encoding: chunked   chunks, the last of size 0, a trailer
 *   Content-Length: N    N bytes
 *   neither              the body ends when the connection closes
 *
 * Our own server writes these answers, so they are well formed; anything
 * else (bytes when no answer is due, a malformed line, 101) is BAD, and the
 * relay then closes the connection rather than guess.
 *
 * Pure: bytes in, positions out; no allocation, no I/O.
 */
#ifndef PL_SERVER_RESP_H
#define PL_SERVER_RESP_H

#include <stdbool.h>
#include <stddef.h>

#define SRV_RESP_LINE_MAX 8192 /* bytes of one line of an answer's head or chunk framing */

typedef enum {
    SRV_RESP_MORE = 0, /* all bytes taken; the answer goes on (or none is due) */
    SRV_RESP_DONE,     /* an answer ended after *used bytes */
    SRV_RESP_BAD,      /* not a well-formed answer, or bytes when none is due */
} srv_resp_state;

typedef struct {
    int st;                  /* where in an answer the next byte falls */
    bool due;                /* an answer is expected (srv_resp_expect) */
    bool head_method;        /* ... to a HEAD request */
    bool started;            /* a byte of the final answer has come */
    int status;              /* the current answer's status */
    bool chunked, has_len;
    unsigned long long left; /* body or chunk bytes still to come */
    char line[SRV_RESP_LINE_MAX];
    size_t line_n;
} srv_resp;

/* A request was passed on: its answer is due next. */
void srv_resp_expect(srv_resp *r, bool head_method);
/* Takes up to n bytes of the answer stream. DONE: the answer ended after
 * *used of them (the rest, if any, need another call); MORE: *used == n. */
srv_resp_state srv_resp_feed(srv_resp *r, const char *b, size_t n, size_t *used);
/* The connection closed: true when that ends the current answer (a body
 * that runs to the close), false when an answer was cut short or none was due. */
bool srv_resp_close_ends(const srv_resp *r);

#endif
