/* scheduler.h - continuous batching over one pl_ctx (engine thread only).
 *
 * A sched_seq is one unit of work on the KV cache: the tokens some
 * completions of a request must hold (the prompt, then that completion's
 * generated tokens). A fresh request is ONE sched_seq serving all its n
 * completions: the prompt is prefilled once, and when its logits arrive
 * the engine forks it (sched_fork: copy-on-write blocks) into n sched_seqs
 * of one completion each. A preempted sched_seq loses its ctx sequence and
 * waits to be recomputed from its tokens (prompt + generated so far).
 *
 *   waiting (FCFS; preempted at the front)      running (oldest first)
 *   [pre2][pre1][req7 n=4][req8] ...  --admit-->  [A][B][C c0][C c1]...
 *            ^ push_front on preemption              newest ^ preempted first
 *
 * One step (sched_plan):
 *   1. decodes: every running sequence with one token to feed, oldest
 *      first; when the pool cannot hold their next token the newest
 *      running sequence is preempted (until it fits);
 *   2. prefill chunks of running sequences fill the rest of the token
 *      budget, each chunk cut to what the free KV blocks can hold; in a
 *      step that carries decodes, also to the step's cost (below);
 *   3. waiting sequences are admitted (a sequence waiting on a tier
 *      lookup is passed over until it is done) while budget, sequence slots and
 *      blocks allow (none in a step that preempted): a slot per completion
 *      is reserved at admission, so the fork after prefill always finds
 *      slots. An admitted sequence first takes its cached prefix
 *      (rt_seq_attach_prefix).
 * Cost: a token attending to k keys costs about 1 + k x key_cost depth-0
 * tokens (model_key_cost's estimate at first, then learned from the steps'
 * times, never below the estimate, a decode's key apart from a prompt
 * token's: step_cost.h), so at depth a chunk of the token budget takes
 * several times a depth-0 step (TinyLlama at 16k keys: 6.1x, measured),
 * and every decoding sequence waits for it. A step with decodes is therefore held
 * to the budget's cost as well: decodes first, then prefill chunks cut to
 * the cost left, the step's first chunk never below SCHED_MIN_CUT tokens
 * (a prompt beside many deep decodes still advances). A step without
 * decodes is held to tokens only: nobody waits on its length.
 *
 * The plan never asks the pool for more blocks than it has (the count
 * is rt_seq_append_cost, conservatively for shared blocks), so rt_step
 * fails with PL_EFULL only if that count is wrong; the engine then
 * preempts (sched_preempt_newest) and plans again.
 *
 * Invariants: n_running <= slots_used <= max_seqs, slots_used = sum of
 * n_comp over running; a running sequence holds n_done tokens of KV
 * (= its ctx sequence length) and has 1 <= total - n_done tokens to run;
 * waiting sequences hold no ctx sequence (seq == -1, n_done == 0); a
 * completion that is not done belongs to exactly one sched_seq; the
 * waiting sequences that were never admitted (fresh) come after all the
 * preempted ones.
 */
#ifndef PL_ENGINE_SCHEDULER_H
#define PL_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/runtime.h"
#include "engine/request.h"
#include "engine/step_cost.h"
#include "pagellm.h"

typedef struct sched_seq {
    pl_request *r;
    int32_t comp_lo, n_comp;  /* completions served: r->comp[comp_lo .. comp_lo + n_comp) */
    int32_t seq;              /* ctx sequence; -1 while waiting */
    uint32_t n_done;          /* tokens whose K/V the sequence holds */
    uint64_t order;           /* admission order, larger = newer (a fork keeps its parent's) */
    bool fresh;               /* never admitted: its admission counts prefix hits */
    uint32_t chunk;           /* tokens planned for this step */
    store_lookup *tier;       /* a tier lookup of its prompt's blocks RAM lacks, in flight or done */
    uint32_t tier_first;      /* ... from this chain block on */
    bool tier_tried;          /* looked up once already (a preempted one is not asked again) */
    int32_t peek;             /* prefix_order: cached prefix seen at plan peek_at */
    uint64_t peek_at;
    struct sched_seq *prev, *next; /* waiting list links */
} sched_seq;

typedef struct {
    uint64_t preemptions;
    uint64_t prefix_query_tokens, prefix_hit_tokens; /* at first admissions only */
    uint64_t prompt_tokens;                          /* prompts admitted (once per request) */
    uint64_t tier_hit_tokens;                        /* of prefix_hit_tokens: loaded from the tiers */
    uint64_t cost_cuts;                              /* prefill chunks cut by a step's cost */
} sched_stats;

typedef struct {
    pl_ctx *ctx;
    kv_pool *pool;
    uint32_t max_seqs, budget;
    double key_cost;          /* a prompt token's key, learned (step_cost; 0: steps are held to tokens only) */
    double key_cost_decode;   /* a decode's key, learned */
    step_cost learn;          /* both, fit to the steps' times from rt_ctx_key_cost */
    uint32_t key_cap;         /* keys a token attends to at most: n_ctx */
    double cost_left;         /* the step being planned: its cost left, INFINITY without decodes */
    bool cut_floor_used;      /* ... its first prefill chunk (SCHED_MIN_CUT) is planned */
    bool prefix_order, prefix_cache;
    store *tiers;             /* the KV tiers, or NULL (sched_set_store) */
    sched_seq **running;      /* [max_seqs] oldest first */
    uint32_t n_running, slots_used;
    sched_seq *wait_head, *wait_tail;
    uint32_t n_waiting;
    uint64_t next_order, n_plans;
    bool preempted_now;       /* a preemption happened in this engine step: admit nothing */
    int admit_rc;             /* sched_plan's *too_big could not start for this error (out of
                               * memory: err_msg() says where), not for the pool's size; 0 else */
    /* the planned step: items[i] runs planned[i]; logits rows [max_seqs][n_vocab] */
    rt_item *items;
    sched_seq **planned;
    int n_items;
    float *logits;
    uint32_t n_vocab;
    sched_stats st;
} sched;

int sched_init(sched *s, pl_ctx *ctx, const pl_engine_params *p, uint32_t n_vocab);
/* Frees the scheduler's own memory; entries left on the lists are freed
 * without touching the ctx (whose sequences die with it). */
void sched_free(sched *s);

/* Tiers below the prefix cache: a waiting sequence whose prompt has full
 * blocks RAM lacks asks them once before its admission and waits (other
 * sequences keep running) until the lookup is done or its deadline passed;
 * then it takes the hits as cached blocks. */
static inline void sched_set_store(sched *s, store *st) { s->tiers = st; }

/* Queues a fresh request (all its completions) at the back. */
int sched_add(sched *s, pl_request *r);

static inline bool sched_idle(const sched *s) { return s->n_running == 0 && s->n_waiting == 0; }

/* Tokens q must hold: the prompt plus its completion's generated tokens. */
static inline uint32_t sched_total(const sched_seq *q)
{
    return q->r->n_prompt + q->r->comp[q->comp_lo].n_gen;
}

/* Call once per engine step, before the first sched_plan. */
void sched_step_begin(sched *s);

/* Plans one step into items/planned/n_items (0: nothing to run). If a
 * running sequence cannot fit the pool even alone, plans nothing and sets
 * *too_big to it (the engine fails its request and plans again). */
int sched_plan(sched *s, sched_seq **too_big);

/* After rt_step succeeded in `seconds` (wall; 0: not timed): the planned
 * tokens are in the KV, and the step's time teaches the key costs
 * (step_cost.h). */
void sched_commit(sched *s, double seconds);

/* Preempts the newest running sequence; false if at most one runs. */
bool sched_preempt_newest(sched *s);

/* Splits q (n_comp > 1, running, all tokens computed) into one sequence
 * per completion: q keeps the first, kids[] get forks of its ctx sequence.
 * Completions that cannot be forked go back to the front of the waiting
 * queue as one group. Returns the number of kids, or PL_ENOMEM with
 * nothing changed. */
int sched_fork(sched *s, sched_seq *q, sched_seq **kids);

/* Removes q (running or waiting), frees its ctx sequence and q. */
void sched_remove(sched *s, sched_seq *q);

/* Whether q's planned item carries a logits row for every token (prompt
 * logprobs, while its prompt runs). */
bool sched_wants_rows(const sched_seq *q);

/* Walks the invariants above and kv_check over the pool and the running
 * sequences (all the ctx's live ones). 0, or PL_EFORMAT naming the first
 * violation. O(blocks + sequences): for tests (PAGELLM_ENGINE_CHECK=1). */
int sched_check(sched *s);

#endif
