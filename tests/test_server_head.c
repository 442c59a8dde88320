/* test_server_head.c - the request-head checker (server/server_head.c):
 * which heads pass with which length, which are refused with which status
 * and code, and that a refusal's message names the line. */
#include <string.h>

#include "server_head.h"
#include "test.h"

/* The state for the whole of s (NUL-terminated); v filled. */
static srv_head_state check(const char *s, srv_head_verdict *v) { return srv_head_check(s, strlen(s), v); }

static int refused(const char *s, int status, const char *code, const char *text)
{
    srv_head_verdict v;
    int ok = check(s, &v) == SRV_HEAD_BAD && v.status == status && !strcmp(v.code, code) && strstr(v.message, text);
    if (!ok) printf("  '%.60s' -> status %d code %s: %s\n", s, v.status, v.code ? v.code : "-", v.message);
    return ok;
}

static int passes(const char *s, size_t head_len)
{
    srv_head_verdict v;
    srv_head_state st = check(s, &v);
    int ok = st == SRV_HEAD_OK && v.head_len == head_len;
    if (!ok) printf("  '%.60s' -> state %d len %zu: %s\n", s, (int)st, v.head_len, v.message);
    return ok;
}

TEST(valid_heads_pass_with_their_length)
{
    CHECK(passes("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 33));
    CHECK(passes("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/9.9\r\n\r\n", 33)); /* a pipelined one is not looked at */
    CHECK(passes("GET / HTTP/1.0\n\n", 16));                                            /* LF alone ends a line */
    CHECK(passes("\r\n\r\nGET / HTTP/1.1\r\n\r\n", 22));                                 /* empty lines before */
    CHECK(passes("OPTIONS * HTTP/1.1\r\nX-A:\t v\xe9 \r\nX-Empty:\r\n\r\n", 43));       /* tab, obs-text, empty value */
    CHECK(passes("POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 005\r\n\r\nhello", 59)); /* equal lengths */
    CHECK(passes("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\n\r\n", 47));
    CHECK(passes("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\npartial", 47)); /* the rest is not here yet */
}

TEST(incomplete_heads_wait)
{
    srv_head_verdict v;
    CHECK_EQ_INT(check("", &v), SRV_HEAD_MORE);
    CHECK_EQ_INT(check("\r", &v), SRV_HEAD_MORE);
    CHECK_EQ_INT(check("GET / HT", &v), SRV_HEAD_MORE);
    CHECK_EQ_INT(check("GET / HTTP/1.1\r\nHost: x\r\n", &v), SRV_HEAD_MORE);
    CHECK_EQ_INT(check("GET / HTTP/1.1\r\nHost: x\r\n\r", &v), SRV_HEAD_MORE);
}

TEST(bad_request_lines)
{
    CHECK(refused("GARBAGE\r\n\r\n", 400, "invalid_request_line", "'GARBAGE'"));
    CHECK(refused("GET  / HTTP/1.1\r\n\r\n", 400, "invalid_request_line", "single spaces"));
    CHECK(refused("GET / HTTP/1.1 x\r\n\r\n", 400, "invalid_request_line", "single spaces"));
    CHECK(refused("G(T / HTTP/1.1\r\n\r\n", 400, "invalid_request_line", "method"));
    CHECK(refused("GET /a\x01 HTTP/1.1\r\n\r\n", 400, "invalid_request_line", "0x01"));
    CHECK(refused("GET / http/1.1\r\n\r\n", 400, "invalid_request_line", "not an HTTP version"));
    CHECK(refused("GET / HTTP/1.12\r\n\r\n", 400, "invalid_request_line", "not an HTTP version"));
    CHECK(refused("GET / HTTP/2.0\r\n\r\n", 505, "http_version_not_supported", "HTTP/2.0"));
    CHECK(refused("GET / HTTP/1.2\r\n\r\n", 505, "http_version_not_supported", "HTTP/1.2"));
    CHECK(refused("GET / HTTP/1.1\rX\r\n\r\n", 400, "invalid_request_line", "not an HTTP version"));
}

TEST(bad_field_lines_name_the_line)
{
    CHECK(refused("GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400, "invalid_header", "header line 2"));
    CHECK(refused("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "invalid_header", "'Host '"));
    CHECK(refused("GET / HTTP/1.1\r\n: x\r\n\r\n", 400, "invalid_header", "empty field name"));
    CHECK(refused("GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400, "invalid_header", "folding"));
    CHECK(refused("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400, "invalid_header", "0x0d"));
    CHECK(refused("GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400, "invalid_header", "0x7f"));
    /* a bad line is refused at once, before the head is whole */
    CHECK(refused("GET / HTTP/1.1\r\nNoColon\r\n", 400, "invalid_header", "header line 1"));
}

TEST(framing)
{
    CHECK(refused("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, "invalid_content_length", "'1x'"));
    CHECK(refused("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "invalid_content_length", "'-1'"));
    CHECK(refused("POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", 400, "invalid_content_length", "'1, 1'"));
    CHECK(refused("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400, "invalid_content_length", "empty"));
    CHECK(passes("POST / HTTP/1.1\r\nContent-Length: 18446744073709551614\r\n\r\n", 57));
    CHECK(refused("POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\n", 413, "request_too_large", "too large"));
    CHECK(refused("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, "invalid_framing", "differ"));
    CHECK(refused("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "invalid_framing",
                  "both"));
}

TEST(visible_chunks)
{
    const char *h = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    char b[256];
    snprintf(b, sizeof b, "%szz\r\n", h);
    CHECK(refused(b, 400, "invalid_chunk", "chunk 1"));
    snprintf(b, sizeof b, "%s5x\r\nhello\r\n", h);
    CHECK(refused(b, 400, "invalid_chunk", "not an extension"));
    snprintf(b, sizeof b, "%s2\r\nhello\r\n", h);
    CHECK(refused(b, 400, "invalid_chunk", "not followed by CRLF"));
    snprintf(b, sizeof b, "%s1\r\na\r\nq\r\n", h);
    CHECK(refused(b, 400, "invalid_chunk", "chunk 2"));
    snprintf(b, sizeof b, "%s10000000000000000\r\n", h);
    CHECK(refused(b, 413, "request_too_large", "too large"));
    snprintf(b, sizeof b, "%s0000000000000000000001\r\na\r\n", h); /* leading zeros are no size */
    CHECK(passes(b, strlen(h)));
    /* another transfer coding: the HTTP layer answers it (400/501) */
    CHECK(passes("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nzz\r\n", 44));
}

TEST(limits)
{
    static char b[SRV_HEAD_MAX + 2048];
    memset(b, 'a', sizeof b);
    memcpy(b, "GET /", 5);
    CHECK_EQ_INT(srv_head_check(b, SRV_LINE_MAX, &(srv_head_verdict){0}), SRV_HEAD_MORE);
    srv_head_verdict v;
    CHECK_EQ_INT(srv_head_check(b, SRV_LINE_MAX + 1, &v), SRV_HEAD_BAD);
    CHECK_EQ_INT(v.status, 414);
    /* a head of exactly SRV_HEAD_MAX passes; one byte more is 431, whole or
     * not; an unfinished one waits up to SRV_HEAD_MAX bytes */
    size_t n = (size_t)snprintf(b, sizeof b, "GET / HTTP/1.1\r\nX: ");
    memset(b + n, 'v', SRV_HEAD_MAX - n - 4);
    memcpy(b + SRV_HEAD_MAX - 4, "\r\n\r\n", 4);
    CHECK_EQ_INT(srv_head_check(b, SRV_HEAD_MAX, &v), SRV_HEAD_OK);
    CHECK_EQ_INT(v.head_len, SRV_HEAD_MAX);
    memset(b + n, 'v', SRV_HEAD_MAX - n - 3);
    memcpy(b + SRV_HEAD_MAX - 3, "\r\n\r\n", 4);
    CHECK_EQ_INT(srv_head_check(b, SRV_HEAD_MAX + 1, &v), SRV_HEAD_BAD);
    CHECK_EQ_INT(v.status, 431);
    memset(b + n, 'v', sizeof b - n);
    CHECK_EQ_INT(srv_head_check(b, SRV_HEAD_MAX, &v), SRV_HEAD_MORE);
    CHECK_EQ_INT(srv_head_check(b, SRV_HEAD_MAX + 1, &v), SRV_HEAD_BAD);
    CHECK_EQ_INT(v.status, 431);
    /* field lines: SRV_FIELDS_MAX pass, one more is 431 */
    n = (size_t)snprintf(b, sizeof b, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < SRV_FIELDS_MAX; i++) n += (size_t)snprintf(b + n, sizeof b - n, "X:1\r\n");
    memcpy(b + n, "\r\n", 3);
    CHECK_EQ_INT(check(b, &v), SRV_HEAD_OK);
    memcpy(b + n, "X:1\r\n\r\n", 8);
    CHECK(refused(b, 431, "headers_too_large", "header lines"));
}

int main(void)
{
    RUN(valid_heads_pass_with_their_length);
    RUN(incomplete_heads_wait);
    RUN(bad_request_lines);
    RUN(bad_field_lines_name_the_line);
    RUN(framing);
    RUN(visible_chunks);
    RUN(limits);
    return test_summary();
}
