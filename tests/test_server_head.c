/* test_server_head.c - the request-head checker (server/server_head.c):
 * which heads pass with which length, which are refused with which status
 * and code, and that a refusal's message names the line; the framing an
 * accepted head announces; a chunked body checked as its bytes come, in
 * any split; and where each of libmicrohttpd's answers ends
 * (server/server_resp.c), as the relay follows them. */
#include <string.h>

#include "server_head.h"
#include "server_resp.h"
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

TEST(announced_framing)
{
    srv_head_verdict v;
    CHECK_EQ_INT(check("GET / HTTP/1.1\r\n\r\n", &v), SRV_HEAD_OK);
    CHECK_EQ_INT(v.body, SRV_BODY_NONE);
    CHECK_EQ_INT(v.head_method, 0);
    CHECK_EQ_INT(check("HEAD / HTTP/1.1\r\n\r\n", &v), SRV_HEAD_OK);
    CHECK_EQ_INT(v.head_method, 1);
    CHECK_EQ_INT(check("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n", &v), SRV_HEAD_OK);
    CHECK_EQ_INT(v.body, SRV_BODY_LENGTH);
    CHECK(v.body_len == 12);
    CHECK_EQ_INT(check("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &v), SRV_HEAD_OK);
    CHECK_EQ_INT(v.body, SRV_BODY_NONE);
    CHECK_EQ_INT(check("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &v), SRV_HEAD_OK);
    CHECK_EQ_INT(v.body, SRV_BODY_CHUNKED);
    CHECK_EQ_INT(check("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", &v), SRV_HEAD_OK);
    CHECK_EQ_INT(v.body, SRV_BODY_UNTIL_CLOSE);
}

/* Feeds body to a chunk reader in pieces of `step` bytes (as a relay gets
 * them: unused bytes given again with the next ones); the state at the
 * end, and in *end the body bytes taken when it ended (OK). */
static srv_head_state feed_split(const char *body, size_t step, size_t *end, srv_head_verdict *v)
{
    srv_chunks c = {0};
    size_t n = strlen(body), done = 0, have = 0;
    srv_head_state st = SRV_HEAD_MORE;
    while (st == SRV_HEAD_MORE && have < n) {
        have = have + step < n ? have + step : n;
        size_t used;
        st = srv_chunks_feed(&c, body + done, have - done, &used, v);
        done += used;
    }
    *end = done;
    return st;
}

TEST(chunks_in_any_split)
{
    static const char *good = "5;x=y\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\n0\r\nX-T: 1\r\n\r\nNEXT";
    for (size_t step = 1; step <= strlen(good); step++) {
        size_t end;
        srv_head_verdict v;
        srv_head_state st = feed_split(good, step, &end, &v);
        CHECK_EQ_INT(st, SRV_HEAD_OK);
        CHECK_EQ_INT((int)end, (int)(strlen(good) - 4)); /* stops before the next request */
    }
    struct { const char *body; int status; const char *text; } bad[] = {
        {"zz\r\n", 400, "chunk 1's size line 'zz'"},
        {"5\r\nhello\r\n5x\r\n", 400, "chunk 2's size line '5x' has bytes after"},
        {"2\r\nhello\r\n", 400, "chunk 1 (2 bytes) is not followed by CRLF"},
        {"1\r\na\r\n0\r\nNoColon\r\n\r\n", 400, "trailer"},
        {"10000000000000000\r\n", 413, "too large"},
        {"1\x01\r\n", 400, "not an extension"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        for (size_t step = 1; step <= strlen(bad[k].body); step++) {
            size_t end;
            srv_head_verdict v;
            int ok = feed_split(bad[k].body, step, &end, &v) == SRV_HEAD_BAD && v.status == bad[k].status &&
                     strstr(v.message, bad[k].text) != NULL;
            if (!ok) printf("  chunks '%s' step %zu -> %d: %s\n", bad[k].body, step, v.status, v.message);
            CHECK(ok);
        }
    /* a size line that never ends is refused once past SRV_CHUNK_LINE_MAX */
    static char longline[SRV_CHUNK_LINE_MAX + 8];
    memset(longline, '1', sizeof longline - 1);
    srv_chunks c = {0};
    size_t used;
    srv_head_verdict v;
    CHECK_EQ_INT(srv_chunks_feed(&c, longline, SRV_CHUNK_LINE_MAX, &used, &v), SRV_HEAD_MORE);
    CHECK_EQ_INT((int)used, 0);
    CHECK_EQ_INT(srv_chunks_feed(&c, longline, sizeof longline - 1, &used, &v), SRV_HEAD_BAD);
    CHECK_EQ_INT(v.status, 400);
}

/* Feeds answer text (the library's bytes) to a tracker `step` bytes at a
 * time after srv_resp_expect(head): how many answers ended, and where the
 * last one did (*end); -1 on BAD. */
static int answers_in(const char *text, bool head, size_t step, size_t *end)
{
    static srv_resp r;
    srv_resp_expect(&r, head);
    size_t n = strlen(text), pos = 0;
    int done = 0;
    *end = 0;
    while (pos < n) {
        size_t take = n - pos < step ? n - pos : step, used;
        srv_resp_state st = srv_resp_feed(&r, text + pos, take, &used);
        pos += used;
        if (st == SRV_RESP_BAD) return -1;
        if (st == SRV_RESP_DONE) {
            done++;
            *end = pos;
            srv_resp_expect(&r, head);
        }
    }
    return done;
}

TEST(answer_ends)
{
    struct { const char *text; bool head; int answers; } cases[] = { /* each ends with its text */
        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, 1},
        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, 1},                     /* HEAD: no body */
        {"HTTP/1.1 204 No Content\r\n\r\n", false, 1},
        {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 1},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false, 1},
        {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 1\r\n\r\nx", false, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (size_t step = 1; step <= strlen(cases[k].text); step++) {
            size_t end;
            int got = answers_in(cases[k].text, cases[k].head, step, &end);
            if (got != cases[k].answers || end != strlen(cases[k].text))
                printf("  answer %zu step %zu: %d answers ending at %zu\n", k, step, got, end);
            CHECK(got == cases[k].answers && end == strlen(cases[k].text));
        }
    /* a body to the close: the close ends it */
    static srv_resp r;
    size_t used;
    srv_resp_expect(&r, false);
    const char *t = "HTTP/1.0 200 OK\r\n\r\nall of it";
    CHECK_EQ_INT(srv_resp_feed(&r, t, strlen(t), &used), SRV_RESP_MORE);
    CHECK(srv_resp_close_ends(&r));
    /* not an answer, or bytes when none is due: BAD */
    size_t end;
    CHECK_EQ_INT(answers_in("<html>oops</html>\r\n", false, 4, &end), -1);
    CHECK_EQ_INT(answers_in("HTTP/1.1 101 Switching Protocols\r\n\r\n", false, 4, &end), -1);
    CHECK_EQ_INT(answers_in("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false, 4, &end), -1);
    srv_resp_expect(&r, false);
    t = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nextra";
    CHECK_EQ_INT(srv_resp_feed(&r, t, strlen(t), &used), SRV_RESP_DONE);
    CHECK_EQ_INT(srv_resp_feed(&r, t + used, strlen(t) - used, &used), SRV_RESP_BAD);
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
    RUN(announced_framing);
    RUN(chunks_in_any_split);
    RUN(answer_ends);
    return test_summary();
}
