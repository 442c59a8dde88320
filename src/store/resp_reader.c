/* resp_reader.c - Redis replies read from a socket; see resp_reader.h. */
#include "store/resp_reader.h"

#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int resp_reader_init(resp_reader *r)
{
    if (r->buf) return 0;
    r->buf = malloc(RESP_READER_BUF);
    return r->buf ? 0 : PL_ENOMEM;
}

void resp_reader_reset(resp_reader *r, int fd)
{
    r->fd = fd;
    r->pos = r->len = 0;
    r->err[0] = '\0';
}

void resp_reader_free(resp_reader *r)
{
    free(r->buf);
    r->buf = NULL;
}

int resp_reader_pending(const resp_reader *r) { return r->pos < r->len; }

static int io_failed(resp_reader *r, ssize_t got)
{
    snprintf(r->err, sizeof r->err, "%s",
             got == 0 ? "connection closed" : errno == EAGAIN || errno == EWOULDBLOCK ? "timeout" : strerror(errno));
    return -1;
}

/* Reads at most max more bytes into the buffer (compacting it first). */
static int fill(resp_reader *r, size_t max)
{
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    size_t room = RESP_READER_BUF - r->len;
    if (room == 0) return -1;
    for (;;) {
        ssize_t got = recv(r->fd, r->buf + r->len, room < max ? room : max, 0);
        if (got > 0) {
            r->len += (size_t)got;
            return 0;
        }
        if (got < 0 && errno == EINTR) continue;
        return io_failed(r, got);
    }
}

/* The next line without its CRLF; *line points into the buffer. */
static int read_line(resp_reader *r, const char **line, size_t *len)
{
    for (;;) {
        const uint8_t *p = r->buf + r->pos;
        size_t avail = r->len - r->pos;
        const uint8_t *nl = avail ? memchr(p, '\n', avail) : NULL;
        if (nl) {
            if (nl == p || nl[-1] != '\r') {
                snprintf(r->err, sizeof r->err, "protocol error: a line without CR LF");
                return -1;
            }
            *line = (const char *)p;
            *len = (size_t)(nl - p) - 1;
            r->pos += (size_t)(nl - p) + 1;
            return 0;
        }
        if (avail > RESP_READER_LINE_MAX) {
            snprintf(r->err, sizeof r->err, "protocol error: a reply line over %d bytes", RESP_READER_LINE_MAX);
            return -1;
        }
        if (fill(r, RESP_READER_LINE_READ)) return -1;
    }
}

/* Exactly n bytes into dst: the buffered ones, then straight from the socket. */
static int read_exact(resp_reader *r, uint8_t *dst, size_t n)
{
    size_t have = r->len - r->pos, k = have < n ? have : n;
    memcpy(dst, r->buf + r->pos, k);
    r->pos += k;
    while (k < n) {
        ssize_t got = recv(r->fd, dst + k, n - k, 0);
        if (got > 0) {
            k += (size_t)got;
            continue;
        }
        if (got < 0 && errno == EINTR) continue;
        return io_failed(r, got);
    }
    return 0;
}

/* The integer of a "$..." / "*..." line body. */
static int parse_int(resp_reader *r, const char *s, size_t n, long long *v)
{
    char buf[24], *end;
    if (n == 0 || n >= sizeof buf) goto bad;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    *v = strtoll(buf, &end, 10);
    if (errno || *end) goto bad;
    return 0;
bad:
    snprintf(r->err, sizeof r->err, "protocol error: bad length \"%.*s\"", (int)(n > 20 ? 20 : n), s);
    return -1;
}

static int read_reply(resp_reader *r, resp_reply *out, int depth)
{
    const char *l;
    size_t n;
    long long v;
    if (read_line(r, &l, &n)) return -1;
    if (n == 0) {
        snprintf(r->err, sizeof r->err, "protocol error: an empty line");
        return -1;
    }
    *out = (resp_reply){.text = l + 1, .len = n - 1};
    switch (l[0]) {
    case '-': out->kind = RESP_ERROR; return 0;
    case '+': out->kind = RESP_STATUS; return 0;
    case ':': out->kind = RESP_INT; return 0;
    case '$': {
        if (parse_int(r, l + 1, n - 1, &v)) return -1;
        *out = (resp_reply){.kind = RESP_NIL};
        if (v == -1) return 0;
        if (v < 0 || v > RESP_READER_VALUE_MAX) {
            snprintf(r->err, sizeof r->err, "protocol error: value length %lld", v);
            return -1;
        }
        uint8_t *val = malloc(v ? (size_t)v : 1), crlf[2];
        if (!val) {
            snprintf(r->err, sizeof r->err, "out of memory for a value of %lld bytes", v);
            return -1;
        }
        if (read_exact(r, val, (size_t)v) || read_exact(r, crlf, 2)) {
            free(val);
            return -1;
        }
        if (crlf[0] != '\r' || crlf[1] != '\n') {
            free(val);
            snprintf(r->err, sizeof r->err, "protocol error: a value not followed by CR LF");
            return -1;
        }
        *out = (resp_reply){.kind = RESP_VALUE, .value = val, .len = (size_t)v};
        return 0;
    }
    case '*': {
        if (parse_int(r, l + 1, n - 1, &v)) return -1;
        if (depth >= 8) {
            snprintf(r->err, sizeof r->err, "protocol error: arrays nested over 8 deep");
            return -1;
        }
        for (long long e = 0; e < v; e++) {
            resp_reply sub;
            if (read_reply(r, &sub, depth + 1)) return -1;
            if (sub.kind == RESP_VALUE) free(sub.value);
        }
        *out = (resp_reply){.kind = v < 0 ? RESP_NIL : RESP_ARRAY};
        return 0;
    }
    default:
        snprintf(r->err, sizeof r->err, "protocol error: reply type '%c'", l[0]);
        return -1;
    }
}

int resp_read(resp_reader *r, resp_reply *out) { return read_reply(r, out, 0); }
