/* stop.c - stop strings over streamed text; see pl_stop_* in pagellm.h.
 *
 * The matcher keeps a hold-back buffer: the shortest tail of the text so far
 * that could still grow into a stop string. Everything before it is safe to
 * emit. Invariant: held is shorter than the longest stop string, so output
 * never waits for more than that many bytes.
 */
#include "pagellm.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"

struct pl_stop {
    char **stops;
    size_t n, max_len;
    char *held;      /* [max_len + len of one feed] grows as needed */
    size_t held_len, held_cap;
    bool stopped;
};

pl_stop *pl_stop_new(const char *const *stops, size_t n)
{
    pl_stop *s = mem_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->stops = mem_calloc(n ? n : 1, sizeof *s->stops);
    if (!s->stops) { free(s); return NULL; }
    for (size_t i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue; /* an empty stop string would stop at once */
        s->stops[s->n] = strdup(stops[i]);
        if (!s->stops[s->n]) {
            err_set(PL_ENOMEM, "out of memory for a stop string");
            pl_stop_free(s);
            return NULL;
        }
        size_t l = strlen(stops[i]);
        if (l > s->max_len) s->max_len = l;
        s->n++;
    }
    return s;
}

void pl_stop_free(pl_stop *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->held);
    free(s);
}

/* Length of the longest suffix of buf[0..len) that is a proper prefix of a stop. */
static size_t partial_tail(const pl_stop *s, const char *buf, size_t len)
{
    size_t best = 0;
    for (size_t i = 0; i < s->n; i++) {
        size_t sl = strlen(s->stops[i]);
        for (size_t k = sl - 1 < len ? sl - 1 : len; k > best; k--)
            if (memcmp(buf + len - k, s->stops[i], k) == 0) { best = k; break; }
    }
    return best;
}

size_t pl_stop_feed(pl_stop *s, const char *text, size_t len, char *out, bool *stopped)
{
    *stopped = s->stopped;
    if (s->stopped) { out[0] = 0; return 0; }
    if (s->held_len + len + 1 > s->held_cap) {
        size_t cap = (s->held_len + len + 1) * 2;
        char *h = realloc(s->held, cap);
        if (!h) { out[0] = 0; return 0; }
        s->held = h;
        s->held_cap = cap;
    }
    memcpy(s->held + s->held_len, text, len);
    s->held_len += len;
    s->held[s->held_len] = 0;
    /* a complete stop string: emit what precedes the earliest one */
    size_t cut = s->held_len + 1;
    for (size_t i = 0; i < s->n; i++) {
        const char *hit = memmem(s->held, s->held_len, s->stops[i], strlen(s->stops[i]));
        if (hit && (size_t)(hit - s->held) < cut) cut = (size_t)(hit - s->held);
    }
    size_t emit;
    if (cut <= s->held_len) {
        s->stopped = *stopped = true;
        emit = cut;
    } else {
        emit = s->held_len - partial_tail(s, s->held, s->held_len);
    }
    memcpy(out, s->held, emit);
    out[emit] = 0;
    memmove(s->held, s->held + emit, s->held_len - emit);
    s->held_len -= emit;
    if (s->stopped) s->held_len = 0;
    return emit;
}

size_t pl_stop_flush(pl_stop *s, char *out)
{
    size_t n = s->stopped ? 0 : s->held_len;
    if (n) memcpy(out, s->held, n);
    out[n] = 0;
    s->held_len = 0;
    return n;
}
