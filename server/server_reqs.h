/* server_reqs.h - the engine requests behind one HTTP generation: one per
 * prompt of a completions prompt list (OpenAI: choice index = prompt index
 * x n + completion index), read as one stream of events.
 *
 * Events come out with their index remapped to the choice index; a DONE
 * event's prompt_tokens is the sum over every prompt and its cached_tokens
 * the sum over the requests done so far, so that usage adds up however the
 * events interleave. Finished (2) when every request has ended; an ERROR of
 * any request is passed on (its choices get no more events).
 */
#ifndef PL_SERVER_REQS_H
#define PL_SERVER_REQS_H

#include <stdbool.h>

#include "server_openai.h"

typedef struct {
    pl_request *r[SRV_MAX_N];
    bool ended[SRV_MAX_N];
    uint32_t cached[SRV_MAX_N];
    int n;                 /* requests submitted */
    int32_t per;           /* completions per request (n of the request) */
    uint32_t prompt_total; /* prompt tokens over all prompts */
    int next;              /* round-robin start */
} srv_reqs;

/* Submits one request per prompt of q. 0, or the first failing
 * pl_engine_submit's code (those already submitted are freed). */
int srv_reqs_submit(srv_reqs *s, pl_engine *e, const srv_gen_req *q);
/* As pl_request_next over all of them: 1 event, 0 timed out, 2 all ended. */
int srv_reqs_next(srv_reqs *s, pl_event *ev, int timeout_ms);
void srv_reqs_cancel(srv_reqs *s);
/* True when every request ended normally (nothing to cancel). */
bool srv_reqs_ended(const srv_reqs *s);
void srv_reqs_free(srv_reqs *s);

#endif
