/* request.h - a request between its caller and the engine thread.
 *
 * A pl_request is made (and validated) on the caller's thread by
 * req_new, handed to the engine thread through the engine's submission
 * queue, and read back through its own event queue:
 *
 *   caller                         engine thread
 *   pl_engine_submit -> req_new    (submission queue, engine mutex)
 *                                  scheduler entries point at it
 *   pl_request_next  <- events <-  req_push (request mutex + condvar)
 *   pl_request_cancel -> cancelled (atomic flag, seen at the next step)
 *   pl_request_free  -> release    req_release after the final event
 *
 * Lifetime: two references, the caller's and the engine's. Whichever is
 * dropped last frees the request, so the engine never touches freed memory
 * and a caller may free a running request (it is cancelled first).
 *
 * Fields are grouped by who may touch them:
 *   immutable after req_new ............ anyone
 *   refs, cancelled ..................... atomics, anyone
 *   q*, ended ........................... under mu
 *   comp[], n_live, cached_tokens... .... the engine thread only
 *
 * Invariants: once `ended` is set no event is queued after it; the final
 * event is the last DONE of the request (every completion DONE) or its one
 * ERROR. comp[i].toks holds the prompt then the completion's generated
 * tokens: toks[0..n_prompt + n_gen).
 */
#ifndef PL_ENGINE_REQUEST_H
#define PL_ENGINE_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "pagellm.h"

#define REQ_MAX_N 16     /* completions per request */
#define REQ_MAX_STOPS 16 /* stop strings per request */

/* One completion of a request (engine thread only after submit). */
typedef struct {
    int32_t index;        /* 0..n-1 */
    pl_sampler *smp;      /* seeded with sampling.seed + index */
    pl_detok *dt;
    pl_stop *stop;
    int32_t *toks;        /* [cap_toks] prompt, then generated tokens */
    uint32_t n_gen;       /* generated tokens emitted so far */
    bool done;            /* DONE produced */
    double t_last;        /* when its newest token was sampled (inter-token latency) */
    char *text;           /* [text_cap] safe text not yet placed in an event */
    size_t text_len, text_cap;
    gm_state gm;          /* with a grammar: the matcher state after the tokens so far */
} req_comp;

/* What req_new checks a request against (the engine's fixed shape). */
typedef struct {
    const pl_vocab *vocab;
    uint32_t n_vocab;     /* the model's (token ids must be below it) */
    uint32_t n_ctx;       /* tokens per sequence */
    uint32_t max_seqs;    /* n must not exceed it: completions run side by side */
    bool window;          /* the ctx has a KV window: prompts and completions may pass n_ctx */
    const int32_t *eog;   /* [n_eog] the vocabulary's end-of-generation ids (min_tokens bans them) */
    uint32_t n_eog;
    uint32_t dim;         /* hidden state width: an embedding's length */
    int pooling;          /* pl_pooling of the model */
} req_limits;

/* With a window, max_tokens is capped so that the token history (kept for
 * recomputation after preemption) stays a bounded allocation. */
#define REQ_WINDOW_MAX_TOKENS (1 << 24)

struct pl_request {
    /* immutable after req_new */
    uint64_t id;
    int32_t *prompt;      /* [n_prompt] owned copy */
    uint32_t n_prompt;
    int32_t n;            /* completions */
    int32_t max_tokens;
    int32_t top_logprobs; /* -1: off */
    bool ignore_eos;
    int32_t min_tokens;   /* EOG, stop ids and stop strings wait until n_gen reaches it */
    int32_t *stop_ids;    /* [n_stop_ids] stop_token_ids */
    uint32_t n_stop_ids;
    int32_t *ban;         /* [n_ban] what cannot be sampled before min_tokens: EOG ids, then stop_ids */
    uint32_t n_ban;
    bool embed;           /* an embedding request (pl_request_params.embed) */
    int pooling;          /* its pl_pooling */
    uint32_t dim;
    float *embd;          /* [dim] the pooled sum while running; the normalised vector once done
                           * (written by the engine thread before the final event) */
    bool plp;             /* prompt_logprobs */
    int32_t plp_k;        /* alternatives per prompt token */
    bool plp_sent;        /* the PL_EV_PROMPT events are queued (engine thread) */
    float *plp_rows;      /* [PL_PROMPT_LOGPROBS_CHUNK x n_vocab] one chunk's logits */
    float *plp_lp;        /* [n_prompt] logprob of prompt token i given those before (NAN for 0) */
    int32_t *plp_ids;     /* [n_prompt x plp_k] alternatives */
    float *plp_top;       /* [n_prompt x plp_k] */
    int32_t *plp_n;       /* [n_prompt] alternatives written */
    bool embd_ready;      /* embd is final: set by the engine thread before the final event is
                           * queued, read by the caller under mu after it */
    uint32_t cap_toks;    /* min(n_prompt + max_tokens, n_ctx + 1); n_prompt + max_tokens with a window */
    gm_grammar *grammar;  /* compiled pl_request_params.grammar (NULL: unconstrained); shared by the completions */
    double t_submit;      /* eng_now() at submit */

    atomic_int refs;      /* caller + engine */
    atomic_bool cancelled;

    pthread_mutex_t mu;
    pthread_cond_t cv;    /* signalled on every queued event */
    pl_event *q;          /* [q_cap] ring of events not yet read */
    size_t q_head, q_len, q_cap;
    bool ended;           /* the final event is queued */

    /* engine thread only */
    req_comp *comp;       /* [n] */
    int32_t n_live;       /* completions not DONE */
    uint32_t cached_tokens; /* prompt tokens the first admission found in the prefix cache */
    bool admitted;        /* has been admitted once (prefix metrics are counted then) */
    bool first_token;     /* a token has been sampled (TTFT recorded) */
    bool any_cancelled;   /* some completion ended "cancelled" */
    bool failed;          /* ERROR produced: its scheduler entries are being removed */
    gm_mask_cache *gm_cache; /* masks of recent grammar states (engine_grammar.c) */
    pl_request *next;     /* submission queue link (under the engine's mutex) */
};

/* Monotonic seconds. */
double eng_now(void);

/* Validates p against lim and builds the request with refs = 2 (caller and
 * engine). PL_EINVAL / PL_ERANGE naming the field; nothing allocated then. */
int req_new(pl_request **out, const pl_request_params *p, const req_limits *lim, uint64_t id);

/* Drops one reference; the last frees everything. */
void req_release(pl_request *r);

/* Queues ev (engine thread). final marks the request ended. */
int req_push(pl_request *r, const pl_event *ev, bool final);

/* Whether tok is one of r's stop_token_ids. */
bool req_is_stop_id(const pl_request *r, int32_t tok);

/* Appends safe text to completion c's staging buffer (engine thread). */
int req_text_add(req_comp *c, const char *s, size_t n);

/* Moves up to cap-1 bytes of staged text into dst (NUL-terminated), cut on
 * a UTF-8 boundary; returns the bytes moved. */
size_t req_text_take(req_comp *c, char *dst, size_t cap);

#endif
