/* resp_reader.h - reads Redis replies (RESP2) from a socket, for the
 * Redis Cluster client's pipelines (redis_cluster.c).
 *
 * Why not hiredis's reader: it grows a buffer 16 KiB at a time and then
 * copies each value out of it. Here a reply's first line is read through a
 * small buffer (RESP_READER_BUF bytes, filled RESP_READER_LINE_READ at a
 * time so that little of a following value lands there) and a value's
 * bytes go straight from the socket into the malloc'd block handed to the
 * caller: one copy, from the kernel.
 *
 * Reads block; the socket's receive timeout (SO_RCVTIMEO, set by hiredis's
 * redisSetTimeout on the same socket) bounds each one. Anything that is
 * not RESP, a line longer than RESP_READER_LINE_MAX, a value longer than
 * RESP_READER_VALUE_MAX or a nesting deeper than 8 makes resp_read fail:
 * the connection is then unusable (its position in the stream is lost).
 */
#ifndef PL_STORE_RESP_READER_H
#define PL_STORE_RESP_READER_H

#include <stddef.h>
#include <stdint.h>

#define RESP_READER_BUF (64 << 10)
#define RESP_READER_LINE_READ 4096
#define RESP_READER_LINE_MAX 1024
#define RESP_READER_VALUE_MAX (1LL << 30) /* Redis caps values at 512 MB */

typedef struct {
    int fd;
    uint8_t *buf; /* buf[pos .. len) read but not consumed */
    size_t pos, len;
    char err[128]; /* why the last resp_read failed */
} resp_reader;

typedef enum {
    RESP_VALUE,  /* bulk string: value (malloc'd, the caller frees it), len */
    RESP_NIL,    /* nil bulk string or nil array */
    RESP_ERROR,  /* "-..." : text, len (without the '-') */
    RESP_STATUS, /* "+..." : text, len */
    RESP_INT,    /* ":..." : text, len */
    RESP_ARRAY,  /* an array, read and dropped */
} resp_kind;

typedef struct {
    resp_kind kind;
    uint8_t *value;   /* RESP_VALUE only */
    const char *text; /* ERROR / STATUS / INT: points into the reader's buffer, valid until the next read */
    size_t len;
} resp_reply;

/* Allocates the buffer (once per reader); 0 or PL_ENOMEM. */
int resp_reader_init(resp_reader *r);

/* Starts reading a new connection (an empty buffer). */
void resp_reader_reset(resp_reader *r, int fd);

void resp_reader_free(resp_reader *r);

/* Whether bytes are read but not consumed (0 at the end of a pipeline's
 * replies: a node sends nothing it was not asked for). */
int resp_reader_pending(const resp_reader *r);

/* Reads one reply; 0, or -1 when the stream broke (r->err says why). */
int resp_read(resp_reader *r, resp_reply *out);

#endif
