/* server_head.c - the request-head checker; see server_head.h. The grammar
 * is RFC 9112's (sections 2.2, 3, 5, 6, 7.1) without obsolete line folding,
 * which RFC 9112 section 5.2 lets a server refuse. */
#include "server_head.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define QUOTE_MAX 48 /* bytes of the input quoted in a message */

typedef struct {
    const char *p;
    size_t n;
} span;

/* What the field lines said about the body's framing. */
typedef struct {
    unsigned n_fields;
    bool has_cl, cl_differ;
    uint64_t cl;
    unsigned n_te;
    bool te_chunked;       /* the last Transfer-Encoding is exactly "chunked" */
} framing;

static srv_head_state bad(srv_head_verdict *v, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static srv_head_state bad(srv_head_verdict *v, int status, const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->message, sizeof v->message, fmt, ap);
    va_end(ap);
    v->status = status;
    v->code = code;
    return SRV_HEAD_BAD;
}

/* RFC 9110 section 5.6.2: the characters of a token. */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A field value's bytes: visible ASCII, space, tab and obs-text. */
static bool is_value_char(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

static bool is_hex(unsigned char c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

static int hex_val(unsigned char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }

static bool span_is(span s, const char *lit)
{
    size_t n = strlen(lit);
    if (s.n != n) return false;
    for (size_t i = 0; i < n; i++)
        if ((s.p[i] | 0x20) != (lit[i] | 0x20)) return false;
    return true;
}

static span trim_ows(span s)
{
    while (s.n && (s.p[0] == ' ' || s.p[0] == '\t')) s.p++, s.n--;
    while (s.n && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\t')) s.n--;
    return s;
}

/* The request line: METHOD SP TARGET SP HTTP/D.D, single spaces. */
static srv_head_state request_line(span l, srv_head_verdict *v)
{
    const char *sp1 = memchr(l.p, ' ', l.n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', l.n - (size_t)(sp1 + 1 - l.p)) : NULL;
    int q = (int)(l.n < QUOTE_MAX ? l.n : QUOTE_MAX);
    if (!sp2 || sp1 == l.p || sp2 == sp1 + 1 || memchr(sp2 + 1, ' ', l.n - (size_t)(sp2 + 1 - l.p)))
        return bad(v, 400, "invalid_request_line",
                   "the request line '%.*s' is not METHOD TARGET HTTP/VERSION separated by single spaces", q, l.p);
    for (const char *c = l.p; c < sp1; c++)
        if (!is_tchar((unsigned char)*c))
            return bad(v, 400, "invalid_request_line", "the request method '%.*s' holds a byte that is not a token's (0x%02x)",
                       (int)(sp1 - l.p < QUOTE_MAX ? sp1 - l.p : QUOTE_MAX), l.p, (unsigned char)*c);
    for (const char *c = sp1 + 1; c < sp2; c++)
        if ((unsigned char)*c < 0x21 || (unsigned char)*c == 0x7f)
            return bad(v, 400, "invalid_request_line", "the request target holds the control byte 0x%02x at byte %d",
                       (unsigned char)*c, (int)(c - sp1));
    span ver = {sp2 + 1, l.n - (size_t)(sp2 + 1 - l.p)};
    bool form = ver.n == 8 && memcmp(ver.p, "HTTP/", 5) == 0 && ver.p[5] >= '0' && ver.p[5] <= '9' && ver.p[6] == '.' &&
                ver.p[7] >= '0' && ver.p[7] <= '9';
    if (!form)
        return bad(v, 400, "invalid_request_line", "the request line ends in '%.*s', not an HTTP version (HTTP/1.1)",
                   (int)(ver.n < QUOTE_MAX ? ver.n : QUOTE_MAX), ver.p);
    if (ver.p[5] != '1' || (ver.p[7] != '0' && ver.p[7] != '1'))
        return bad(v, 505, "http_version_not_supported", "HTTP version %.8s is not supported (HTTP/1.0 and HTTP/1.1 are)",
                   ver.p);
    v->head_method = sp1 - l.p == 4 && memcmp(l.p, "HEAD", 4) == 0;
    return SRV_HEAD_MORE;
}

/* Content-Length: 1*DIGIT (RFC 9110 section 8.6); equal repeats are one length. */
static srv_head_state content_length(span val, framing *f, srv_head_verdict *v)
{
    int q = (int)(val.n < QUOTE_MAX ? val.n : QUOTE_MAX);
    uint64_t x = 0;
    bool over = false;
    if (!val.n) return bad(v, 400, "invalid_content_length", "Content-Length is empty");
    for (size_t i = 0; i < val.n; i++) {
        unsigned char c = (unsigned char)val.p[i];
        if (c < '0' || c > '9')
            return bad(v, 400, "invalid_content_length", "Content-Length '%.*s' is not a number of bytes", q, val.p);
        if (x > (UINT64_MAX - 1 - (c - '0')) / 10) over = true;
        else x = x * 10 + (c - '0');
    }
    if (over) return bad(v, 413, "request_too_large", "Content-Length %.*s is too large", q, val.p);
    if (f->has_cl && f->cl != x) f->cl_differ = true;
    f->has_cl = true;
    f->cl = x;
    return SRV_HEAD_MORE;
}

/* One field line (line is its 1-based number in the head). */
static srv_head_state field_line(span l, unsigned line, framing *f, srv_head_verdict *v)
{
    if (l.p[0] == ' ' || l.p[0] == '\t')
        return bad(v, 400, "invalid_header", "header line %u starts with white space (line folding is not accepted)", line);
    const char *colon = memchr(l.p, ':', l.n);
    int q = (int)(l.n < QUOTE_MAX ? l.n : QUOTE_MAX);
    if (!colon) return bad(v, 400, "invalid_header", "header line %u '%.*s' has no ':'", line, q, l.p);
    span name = {l.p, (size_t)(colon - l.p)};
    if (!name.n) return bad(v, 400, "invalid_header", "header line %u has an empty field name", line);
    for (size_t i = 0; i < name.n; i++)
        if (!is_tchar((unsigned char)name.p[i]))
            return bad(v, 400, "invalid_header", "the field name '%.*s' (header line %u) holds the byte 0x%02x, not a token's",
                       (int)(name.n < QUOTE_MAX ? name.n : QUOTE_MAX), name.p, line, (unsigned char)name.p[i]);
    span val = trim_ows((span){colon + 1, l.n - name.n - 1});
    for (size_t i = 0; i < val.n; i++)
        if (!is_value_char((unsigned char)val.p[i]))
            return bad(v, 400, "invalid_header", "the value of %.*s (header line %u) holds the control byte 0x%02x",
                       (int)(name.n < QUOTE_MAX ? name.n : QUOTE_MAX), name.p, line, (unsigned char)val.p[i]);
    if (span_is(name, "Content-Length")) return content_length(val, f, v);
    if (span_is(name, "Transfer-Encoding")) {
        f->n_te++;
        f->te_chunked = span_is(val, "chunked");
    }
    return SRV_HEAD_MORE;
}

/* The line at *pos in b (LF, or CRLF, ending it); false when no LF yet. */
static bool next_line(const char *b, size_t n, size_t *pos, span *line)
{
    const char *lf = memchr(b + *pos, '\n', n - *pos);
    if (!lf) return false;
    line->p = b + *pos;
    line->n = (size_t)(lf - line->p);
    if (line->n && line->p[line->n - 1] == '\r') line->n--;
    *pos = (size_t)(lf - b) + 1;
    return true;
}

enum { CH_SIZE = 0, CH_DATA, CH_DATA_END, CH_TRAILER };

/* A trailer line (RFC 9112 section 7.1.2): a field line, checked alike. */
static srv_head_state trailer_line(span l, srv_chunks *c, srv_head_verdict *v)
{
    if (++c->trailers > SRV_FIELDS_MAX)
        return bad(v, 400, "invalid_chunk", "the chunked body's trailer has more than %d lines", SRV_FIELDS_MAX);
    framing f = {0};
    if (field_line(l, c->trailers, &f, v) != SRV_HEAD_BAD) return SRV_HEAD_MORE;
    char why[sizeof v->message];
    snprintf(why, sizeof why, "%s", v->message);
    return bad(v, 400, "invalid_chunk", "the chunked body's trailer: %s", why);
}

/* A chunk-size line: HEX [BWS] [; extension] (RFC 9112 section 7.1). */
static srv_head_state size_line(span l, srv_chunks *c, srv_head_verdict *v)
{
    size_t i = 0, sig = 0;
    uint64_t size = 0;
    unsigned k = ++c->k;
    while (i < l.n && is_hex((unsigned char)l.p[i])) {
        if (sig || l.p[i] != '0') sig++, size = size << 4 | (uint64_t)hex_val((unsigned char)l.p[i]);
        i++;
    }
    int q = (int)(l.n < QUOTE_MAX ? l.n : QUOTE_MAX);
    if (!i) return bad(v, 400, "invalid_chunk", "chunk %u's size line '%.*s' does not start with a hex size", k, q, l.p);
    if (sig > 16 || size == UINT64_MAX)
        return bad(v, 413, "request_too_large", "chunk %u's size %.*s is too large", k, (int)(i < QUOTE_MAX ? i : QUOTE_MAX),
                   l.p);
    size_t j = i;
    while (j < l.n && (l.p[j] == ' ' || l.p[j] == '\t')) j++;
    if (j < l.n && l.p[j] != ';')
        return bad(v, 400, "invalid_chunk", "chunk %u's size line '%.*s' has bytes after the size that are not an extension",
                   k, q, l.p);
    for (; j < l.n; j++)
        if (!is_value_char((unsigned char)l.p[j]))
            return bad(v, 400, "invalid_chunk", "chunk %u's size line holds the control byte 0x%02x", k, (unsigned char)l.p[j]);
    c->size = c->left = size;
    c->st = size ? CH_DATA : CH_TRAILER;
    return SRV_HEAD_MORE;
}

srv_head_state srv_chunks_feed(srv_chunks *c, const char *b, size_t n, size_t *used, srv_head_verdict *v)
{
    memset(v, 0, sizeof *v);
    size_t pos = 0;
    for (;;) {
        *used = pos;
        if (c->st == CH_DATA) {
            size_t take = n - pos < c->left ? n - pos : (size_t)c->left;
            pos += take;
            c->left -= take;
            *used = pos;
            if (c->left) return SRV_HEAD_MORE;
            c->st = CH_DATA_END;
            continue;
        }
        if (pos == n) return SRV_HEAD_MORE;
        if (c->st == CH_DATA_END) {
            bool lf = b[pos] == '\n', crlf = b[pos] == '\r' && pos + 1 < n && b[pos + 1] == '\n';
            if (b[pos] == '\r' && pos + 1 == n) return SRV_HEAD_MORE;
            if (!lf && !crlf)
                return bad(v, 400, "invalid_chunk", "chunk %u (%llu bytes) is not followed by CRLF", c->k,
                           (unsigned long long)c->size);
            pos += crlf ? 2 : 1;
            c->st = CH_SIZE;
            continue;
        }
        span l;
        size_t at = pos;
        if (!next_line(b, n, &pos, &l)) {
            if (n - at > SRV_CHUNK_LINE_MAX)
                return bad(v, 400, "invalid_chunk", "a line of the chunked body (chunk %u) is longer than %d bytes", c->k + 1,
                           SRV_CHUNK_LINE_MAX);
            return SRV_HEAD_MORE;
        }
        if (l.n > SRV_CHUNK_LINE_MAX)
            return bad(v, 400, "invalid_chunk", "a line of the chunked body (chunk %u) is longer than %d bytes", c->k + 1,
                       SRV_CHUNK_LINE_MAX);
        if (c->st == CH_TRAILER && l.n == 0) {
            *used = pos;
            return SRV_HEAD_OK;
        }
        srv_head_state st = c->st == CH_SIZE ? size_line(l, c, v) : trailer_line(l, c, v);
        if (st == SRV_HEAD_BAD) return st;
    }
}

/* The chunk-size lines among the n body bytes visible after the head;
 * those not yet here are checked as they come (srv_chunks_feed). */
static srv_head_state chunks(const char *b, size_t n, srv_head_verdict *v)
{
    srv_chunks c = {0};
    size_t used;
    srv_head_verdict w;
    if (srv_chunks_feed(&c, b, n, &used, &w) != SRV_HEAD_BAD) return SRV_HEAD_MORE;
    *v = w;
    return SRV_HEAD_BAD;
}

/* After the empty line: the framing rules of RFC 9112 section 6.3. */
static srv_head_state head_end(const char *b, size_t n, size_t pos, const framing *f, srv_head_verdict *v)
{
    if (f->has_cl && f->n_te)
        return bad(v, 400, "invalid_framing",
                   "a request may not have both Content-Length and Transfer-Encoding (RFC 9112 section 6.3)");
    if (f->cl_differ)
        return bad(v, 400, "invalid_framing", "the request has Content-Length headers that differ (RFC 9112 section 6.3)");
    if (f->n_te == 1 && f->te_chunked && chunks(b + pos, n - pos, v) == SRV_HEAD_BAD) return SRV_HEAD_BAD;
    v->head_len = pos;
    if (f->n_te) v->body = f->n_te == 1 && f->te_chunked ? SRV_BODY_CHUNKED : SRV_BODY_UNTIL_CLOSE;
    else if (f->has_cl && f->cl) v->body = SRV_BODY_LENGTH, v->body_len = f->cl;
    return SRV_HEAD_OK;
}

srv_head_state srv_head_check(const char *b, size_t n, srv_head_verdict *v)
{
    memset(v, 0, sizeof *v);
    size_t pos = 0;
    while (pos < n && (b[pos] == '\n' || (b[pos] == '\r' && pos + 1 < n && b[pos + 1] == '\n')))
        pos += b[pos] == '\r' ? 2 : 1; /* empty lines before the request line (RFC 9112 section 2.2) */
    framing f = {0};
    for (unsigned line = 0;; line++) {
        size_t start = pos;
        span l;
        bool whole = next_line(b, n, &pos, &l);
        size_t len = whole ? l.n : n - start;
        if (line == 0 && len > SRV_LINE_MAX)
            return bad(v, 414, "uri_too_long", "the request line is longer than %d bytes", SRV_LINE_MAX);
        if ((whole ? pos : n) > SRV_HEAD_MAX)
            return bad(v, 431, "headers_too_large", "the request head is larger than %d bytes", SRV_HEAD_MAX);
        if (!whole) return SRV_HEAD_MORE;
        srv_head_state st;
        if (line == 0) st = request_line(l, v);
        else if (l.n == 0) return head_end(b, n, pos, &f, v);
        else if (++f.n_fields > SRV_FIELDS_MAX)
            return bad(v, 431, "headers_too_large", "the request has more than %d header lines", SRV_FIELDS_MAX);
        else st = field_line(l, line, &f, v);
        if (st == SRV_HEAD_BAD) return st;
    }
}
