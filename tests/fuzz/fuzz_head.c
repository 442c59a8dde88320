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
 *     into a head within SRV_HEAD_MAX.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_head.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *b = malloc(size ? size : 1);
    if (!b) return 0;
    memcpy(b, data, size);
    srv_head_verdict v;
    switch (srv_head_check(b, size, &v)) {
    case SRV_HEAD_BAD:
        need(v.status == 400 || v.status == 413 || v.status == 414 || v.status == 431 || v.status == 505,
             "a refusal's status is 400 413 414 431 or 505");
        need(v.code && v.code[0] && v.message[0], "a refusal has a code and a message");
        break;
    case SRV_HEAD_OK: check_accepted(b, size, &v); break;
    case SRV_HEAD_MORE: need(size <= SRV_HEAD_MAX, "no verdict only within SRV_HEAD_MAX bytes"); break;
    }
    free(b);
    return 0;
}
