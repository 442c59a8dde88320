/* server_reqs.c - several engine requests read as one; see server_reqs.h.
 *
 * Waiting: each round looks at every live request without blocking, then,
 * if none had an event, blocks on one of them (rotating) for a slice of the
 * timeout, so a reader wakes within that slice for any request.
 */
#include "server_reqs.h"

#include <string.h>

#define SRV_REQS_SLICE_MS 5

int srv_reqs_submit(srv_reqs *s, pl_engine *e, const srv_gen_req *q)
{
    memset(s, 0, sizeof *s);
    s->per = q->p.n;
    for (int i = 0; i < q->n_prompts; i++) s->prompt_total += (uint32_t)(i ? q->more_n[i - 1] : q->n_prompt);
    for (int i = 0; i < q->n_prompts; i++) {
        pl_request_params p = q->p;
        if (i) p.prompt = q->more[i - 1], p.n_prompt = q->more_n[i - 1];
        int rc = pl_engine_submit(e, &p, &s->r[i]);
        if (rc) {
            s->r[i] = NULL;
            srv_reqs_free(s);
            return rc;
        }
        s->n++;
    }
    return 0;
}

/* Takes r[i]'s event if it has one: 1, 0 none, 2 it ended now. */
static int take(srv_reqs *s, int i, pl_event *ev, int timeout_ms)
{
    int rc = pl_request_next(s->r[i], ev, timeout_ms);
    if (rc == 2 || rc < 0) { s->ended[i] = true; return rc == 2 ? 2 : 0; }
    if (rc != 1) return 0;
    if (ev->kind == PL_EV_DONE) {
        s->cached[i] = ev->cached_tokens;
        uint32_t sum = 0;
        for (int k = 0; k < s->n; k++) sum += s->cached[k];
        ev->prompt_tokens = s->prompt_total;
        ev->cached_tokens = sum;
    }
    if (ev->kind != PL_EV_ERROR) ev->index += i * s->per;
    return 1;
}

int srv_reqs_next(srv_reqs *s, pl_event *ev, int timeout_ms)
{
    for (int waited = 0;; waited += SRV_REQS_SLICE_MS) {
        bool live = false;
        for (int k = 0; k < s->n; k++) {
            int i = (s->next + k) % s->n;
            if (s->ended[i]) continue;
            live = true;
            if (take(s, i, ev, 0) == 1) { s->next = (i + 1) % s->n; return 1; }
        }
        if (!live) return 2;
        if (timeout_ms >= 0 && waited >= timeout_ms) return 0;
        for (int k = 0; k < s->n; k++) { /* block on one live request for a slice */
            int i = (s->next + k) % s->n;
            if (s->ended[i]) continue;
            s->next = (i + 1) % s->n;
            if (take(s, i, ev, s->n == 1 && timeout_ms >= 0 ? timeout_ms : SRV_REQS_SLICE_MS) == 1) return 1;
            break;
        }
        if (s->n == 1 && timeout_ms >= 0) waited = timeout_ms; /* one request: its own wait was the timeout */
    }
}

void srv_reqs_cancel(srv_reqs *s)
{
    for (int i = 0; i < s->n; i++) pl_request_cancel(s->r[i]);
}

bool srv_reqs_ended(const srv_reqs *s)
{
    for (int i = 0; i < s->n; i++)
        if (!s->ended[i]) return false;
    return true;
}

void srv_reqs_free(srv_reqs *s)
{
    for (int i = 0; i < SRV_MAX_N; i++) pl_request_free(s->r[i]);
    memset(s, 0, sizeof *s);
}
