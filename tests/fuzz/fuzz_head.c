/* fuzz_head.c - libFuzzer target for the request-head checker
 * (server/server_head.c), which reads every first request head a client
 * sends before libmicrohttpd does.
 *
 * Input: the bytes a client sent, copied into a buffer of exactly their
 * size (ASan catches a read past them).
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - a refusal has one of the statuses 400 413 414 431 505, a code and a
 *     message;
 *   - an accepted head is whole: head_len <= the input and <= SRV_HEAD_MAX,
 *     it ends in an empty line, holds no control byte but HT, CR and LF,
 *     and every CR in it ends a line;
 *   - the accepted head alone is accepted again with the same length (the
 *     body bytes after it never decide whether a head is whole);
 *   - no verdict (more bytes wanted) only while the input could still grow
 *     into a head within SRV_HEAD_MAX;
 *   - the relay's incremental readers do not depend on how the bytes are
 *     split: a chunked body after an accepted head (srv_chunks_feed), and
 *     the whole input as libmicrohttpd's answer stream (srv_resp_feed),
 *     give the same verdicts, statuses and end positions fed in one piece
 *     and fed byte by byte, and never take more bytes than they are given.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_head.h"
#include "server_resp.h"

static void need(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "broken property: %s\n", what);
        abort();
    }
}

static void check_accepted(const char *b, size_t n, const srv_head_verdict *v)
{
    size_t h = v->head_len;
    need(h >= 2 && h <= n && h <= SRV_HEAD_MAX, "an accepted head fits the input and the limit");
    need(b[h - 1] == '\n' && (b[h - 2] == '\n' || (h >= 3 && b[h - 2] == '\r' && b[h - 3] == '\n')),
         "an accepted head ends in an empty line");
    for (size_t i = 0; i < h; i++) {
        unsigned char c = (unsigned char)b[i];
        need(c >= 0x20 ? c != 0x7f : c == '\t' || c == '\r' || c == '\n', "no control byte in an accepted head");
        need(c != '\r' || (i + 1 < h && b[i + 1] == '\n'), "every CR in an accepted head ends a line");
    }
    srv_head_verdict again;
    need(srv_head_check(b, h, &again) == SRV_HEAD_OK && again.head_len == h, "the head alone is accepted alike");
}

/* A chunked body fed in pieces of step bytes (unused bytes given again):
 * the state, the bytes taken and the status of a refusal. */
static srv_head_state chunks_split(const char *b, size_t n, size_t step, size_t *end, int *status)
{
    srv_chunks c = {0};
    size_t done = 0, have = 0;
    srv_head_state st = SRV_HEAD_MORE;
    srv_head_verdict v = {0};
    while (st == SRV_HEAD_MORE && have < n) {
        have = have + step < n ? have + step : n;
        size_t used;
        st = srv_chunks_feed(&c, b + done, have - done, &used, &v);
        need(used <= have - done, "the chunk reader takes no more than it is given");
        done += used;
    }
    *end = done;
    *status = st == SRV_HEAD_BAD ? v.status : 0;
    return st;
}

/* The bytes as an answer stream, step bytes at a time: answers ended, and
 * the position of a BAD verdict (or n). */
static int answers_split(const char *b, size_t n, size_t step, bool head, size_t *bad_at)
{
    static srv_resp r;
    srv_resp_expect(&r, head);
    int done = 0;
    *bad_at = n;
    for (size_t pos = 0; pos < n;) {
        size_t take = n - pos < step ? n - pos : step, used;
        srv_resp_state st = srv_resp_feed(&r, b + pos, take, &used);
        need(used <= take && (st != SRV_RESP_MORE || used == take), "the answer tracker takes what it says");
        pos += used;
        if (st == SRV_RESP_BAD) {
            *bad_at = pos;
            break;
        }
        if (st == SRV_RESP_DONE) done++, srv_resp_expect(&r, head);
    }
    return done;
}

static void check_relay_readers(const char *b, size_t size, const srv_head_verdict *v, srv_head_state st)
{
    if (st == SRV_HEAD_OK && v->body == SRV_BODY_CHUNKED) {
        const char *body = b + v->head_len;
        size_t n = size - v->head_len, e1, e2;
        int s1, s2;
        srv_head_state a = chunks_split(body, n, n ? n : 1, &e1, &s1), c = chunks_split(body, n, 1, &e2, &s2);
        need(a == c && s1 == s2 && (a != SRV_HEAD_OK || e1 == e2), "a chunked body's verdict does not depend on the split");
    }
    bool head = size && (b[0] & 1); /* the first byte picks a HEAD request's answer or another */
    size_t bad1, bad2;
    int n1 = answers_split(b, size, size ? size : 1, head, &bad1), n2 = answers_split(b, size, 1, head, &bad2);
    need(n1 == n2 && bad1 == bad2, "the answers found do not depend on the split");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *b = malloc(size ? size : 1);
    if (!b) return 0;
    memcpy(b, data, size);
    srv_head_verdict v;
    srv_head_state st = srv_head_check(b, size, &v);
    switch (st) {
    case SRV_HEAD_BAD:
        need(v.status == 400 || v.status == 413 || v.status == 414 || v.status == 431 || v.status == 505,
             "a refusal's status is 400 413 414 431 or 505");
        need(v.code && v.code[0] && v.message[0], "a refusal has a code and a message");
        break;
    case SRV_HEAD_OK: check_accepted(b, size, &v); break;
    case SRV_HEAD_MORE: need(size <= SRV_HEAD_MAX, "no verdict only within SRV_HEAD_MAX bytes"); break;
    }
    check_relay_readers(b, size, &v, st);
    free(b);
    return 0;
}
