/* server_reasoning.c - <think> ... </think> apart from the answer; see
 * server_reasoning.h. */
#include "server_reasoning.h"

#include <ctype.h>
#include <string.h>

#define OPEN "<think>"
#define CLOSE "</think>"

void srv_think_init(srv_think *t, bool think_open)
{
    memset(t, 0, sizeof *t);
    t->state = think_open ? 1 : 0;
}

/* Longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial(const char *s, size_t n, const char *tag)
{
    size_t tl = strlen(tag);
    for (size_t k = tl - 1; k > 0; k--)
        if (k <= n && memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

static void drop_front(srv_buf *b, size_t k)
{
    memmove(b->p, b->p + k, b->len - k);
    b->len -= k;
    b->p[b->len] = 0;
}

int srv_think_feed(srv_think *t, const char *text, size_t len, srv_buf *reasoning, srv_buf *content)
{
    if (srv_buf_add(&t->pending, text, len)) return PL_ERR_NOMEM;
    for (;;) {
        char *p = t->pending.p;
        size_t n = t->pending.len;
        if (t->state == 0) { /* before the reply's text: is it <think>? */
            size_t i = 0;
            while (i < n && isspace((unsigned char)p[i])) i++;
            size_t rest = n - i, ol = strlen(OPEN);
            if (rest >= ol && memcmp(p + i, OPEN, ol) == 0) { drop_front(&t->pending, i + ol); t->state = 1; continue; }
            if (rest < ol && memcmp(p + i, OPEN, rest) == 0) return 0; /* maybe; wait */
            t->state = 2;
            continue;
        }
        if (t->state == 3) { /* after </think>: the answer's leading whitespace is not content */
            while (t->pending.len && isspace((unsigned char)t->pending.p[0])) drop_front(&t->pending, 1);
            if (!t->pending.len) return 0;
            t->state = 2;
            continue;
        }
        if (t->state == 2) {
            int rc = srv_buf_add(content, p, n);
            t->pending.len = 0;
            return rc;
        }
        const char *hit = memmem(p, n, CLOSE, strlen(CLOSE));
        if (hit) {
            size_t k = (size_t)(hit - p);
            if (srv_buf_add(reasoning, p, k)) return PL_ERR_NOMEM;
            drop_front(&t->pending, k + strlen(CLOSE));
            t->state = 3;
            continue;
        }
        size_t keep = partial(p, n, CLOSE);
        if (srv_buf_add(reasoning, p, n - keep)) return PL_ERR_NOMEM;
        drop_front(&t->pending, n - keep);
        return 0;
    }
}

int srv_think_finish(srv_think *t, srv_buf *reasoning, srv_buf *content)
{
    int rc = 0;
    if (t->pending.len) rc = srv_buf_add(t->state == 1 ? reasoning : content, t->pending.p, t->pending.len);
    t->pending.len = 0;
    return rc;
}

void srv_think_free(srv_think *t) { srv_buf_free(&t->pending); }

bool srv_think_prompt_open(const char *prompt)
{
    size_t n = strlen(prompt);
    while (n && isspace((unsigned char)prompt[n - 1])) n--;
    size_t ol = strlen(OPEN);
    return n >= ol && memcmp(prompt + n - ol, OPEN, ol) == 0;
}
