/* server_head.h - checks the head of an HTTP/1.x request, and the
 * chunk-size lines already visible after it, before libmicrohttpd reads
 * it (server_gate.h holds the bytes). What libmicrohttpd would refuse with
 * its own HTML page, or by closing the connection, is refused here with a
 * status and a message for an OpenAI error body.
 *
 *   [CRLF...] METHOD SP TARGET SP HTTP/D.D CRLF      (request line)
 *   NAME ":" OWS VALUE OWS CRLF                       (field lines)
 *   CRLF                                              (end of the head)
 *   HEX[;ext] CRLF DATA CRLF ...                      (chunks, when chunked)
 *
 * Lines may end in LF alone, as libmicrohttpd accepts. The limits stay well
 * below libmicrohttpd's 32 KiB connection buffer, which also holds the
 * parsed fields, so that a head passed on is never refused there:
 *
 *   request line > SRV_LINE_MAX          414
 *   head > SRV_HEAD_MAX, or more than
 *   SRV_FIELDS_MAX field lines           431
 *   version HTTP/D.D other than 1.0, 1.1 505
 *   Content-Length or chunk size > 2^64-2 413
 *   any other malformed line             400
 *
 * An accepted head also says how its body is framed, so that a relay can
 * follow the body to the next request's head; srv_chunks_feed checks a
 * chunked body line by line as its bytes come (chunk-size lines, the CRLF
 * after each chunk's data, the trailer), with the same statuses.
 *
 * Pure: bytes in, verdict out; no allocation, no I/O.
 */
#ifndef PL_SERVER_HEAD_H
#define PL_SERVER_HEAD_H

#include <stddef.h>

#define SRV_LINE_MAX 8192    /* bytes of the request line */
#define SRV_HEAD_MAX 16384   /* bytes of the head, leading empty lines and the final CRLF included */
#define SRV_FIELDS_MAX 100   /* field lines */
#define SRV_CHUNK_LINE_MAX 4096 /* bytes of a chunk-size line or a trailer line */

/* How an accepted request's body ends (RFC 9112 section 6.3). */
typedef enum {
    SRV_BODY_NONE = 0,      /* no body */
    SRV_BODY_LENGTH,        /* body_len bytes */
    SRV_BODY_CHUNKED,       /* chunks, the last one of size 0, then a trailer */
    SRV_BODY_UNTIL_CLOSE,   /* another transfer coding: the HTTP layer refuses it and closes */
} srv_body_kind;

typedef enum {
    SRV_HEAD_MORE = 0, /* no verdict yet: the head is not complete */
    SRV_HEAD_OK,       /* a whole, valid head (head_len bytes) */
    SRV_HEAD_BAD,      /* refused: status, code and message say why */
} srv_head_state;

typedef struct {
    size_t head_len;    /* OK: bytes of the head, its final empty line included */
    int status;         /* BAD: 400, 413, 414, 431 or 505 */
    const char *code;   /* BAD: the OpenAI error code (static) */
    char message[240];  /* BAD: what is wrong and where (may quote the input's bytes) */
    srv_body_kind body; /* OK: how the body is framed */
    unsigned long long body_len; /* OK, SRV_BODY_LENGTH: its bytes */
    int head_method;    /* OK: the method is HEAD (its answer has no body) */
} srv_head_verdict;

/* Looks at the first n bytes a client sent on a connection (the head, then
 * whatever body bytes have come). */
srv_head_state srv_head_check(const char *buf, size_t n, srv_head_verdict *v);

/* A chunked body being read (zero it before the first byte). */
typedef struct {
    int st;                  /* which line or part comes next */
    unsigned long long left; /* bytes of the current chunk's data still to come */
    unsigned long long size; /* the current chunk's size (for messages) */
    unsigned k;              /* the current chunk's number, from 1 */
    unsigned trailers;       /* trailer lines seen */
} srv_chunks;

/* Reads the next n bytes of a chunked body: *used of them are checked (a
 * line is taken only whole, so bytes past *used must be given again with
 * more). MORE: the body goes on; OK: it ended at *used; BAD: v says why
 * (400 invalid_chunk, or 413 for a size past 2^64-2). */
srv_head_state srv_chunks_feed(srv_chunks *c, const char *b, size_t n, size_t *used, srv_head_verdict *v);

#endif
