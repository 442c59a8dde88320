/* store.c - the tier chain: per tier a reader thread (the get queue:
 * lookups) and a writer thread (the put queue: write-behind, at the lowest
 * priority), staging accounting, lookup results and deadlines; see store.h.
 *
 * Ownership: a put job is referenced once per tier and freed by the last
 * tier done with it (its bytes then leave the staging count; its buffer may
 * be kept as a spare for the next put). Memory is freed outside the mutex:
 * the engine thread takes it for every put, and a writer preempted while it
 * holds it (it runs at idle priority) would stall the engine. A lookup is
 * referenced by the engine (until store_lookup_free) and by the chain while
 * a tier holds it (one tier at a time); the last reference frees it.
 */
#include "store/store.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "store/store_entry.h"

#define STORE_PUT_BATCH 16
#define STORE_RECENT 4096          /* recently written keys remembered (direct mapped) */
#define STORE_DRAIN_S 5.0          /* store_free writes what is queued for at most this long */
#define STORE_SPARES 8             /* entry buffers kept for reuse (already faulted in) */

enum { KEY_PENDING = 0, KEY_HIT, KEY_MISS };

typedef struct put_job {
    struct put_job *next[STORE_MAX_TIERS];
    store_key key;
    uint8_t *buf;
    size_t len;
    int refs;
    uint64_t seq;              /* queue order, from 1 (store_put_mark) */
    bool sealed;               /* checksum written (under seal_mu): the first writer seals */
} put_job;

struct store_lookup {
    store *s;
    uint32_t n, from;          /* keys; the chain asks keys from `from` on */
    store_key *keys;           /* [n] */
    store_key parent0;
    int32_t *tokens;           /* [n][T] */
    uint8_t *state;            /* [n] KEY_* */
    uint8_t **val;             /* [n] a hit's value (owned) */
    const uint8_t **payload;   /* [n] its block bytes, inside val */
    int refs;
    bool abandoned;
    double deadline;
    struct store_lookup *next; /* tier get queue */
};

typedef struct {
    store *s;
    int idx;
    store_backend *b;
    pthread_t reader, writer;
    bool reader_ok, writer_ok;
    pthread_cond_t get_cv, put_cv;
    put_job *put_head, *put_tail;
    uint64_t inflight_min;     /* seq of the first job being written, 0 if none */
    store_lookup *get_head, *get_tail;
    store_tier_stats st;
} tier;

struct store {
    store_params p;
    pthread_mutex_t mu;
    tier tiers[STORE_MAX_TIERS];
    int n_tiers;
    uint64_t staged;                  /* bytes of put jobs alive */
    uint64_t put_seq;                 /* jobs queued so far */
    bool stop;
    double stop_deadline;
    uint8_t *spare[STORE_SPARES];     /* entry buffers to reuse (mu) */
    int n_spare;
    pthread_mutex_t seal_mu;          /* put_job.sealed */
    store_key recent[STORE_RECENT];   /* engine thread only */
};

static const double hist_bounds[STORE_HIST_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, INFINITY,
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void hist_init(store_hist *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->le, hist_bounds, sizeof h->le);
}

static void hist_observe(store_hist *h, double v)
{
    if (!(v >= 0)) v = 0;
    for (int i = 0; i < STORE_HIST_BUCKETS; i++)
        if (v <= h->le[i]) h->count[i]++;
    h->sum += v;
    h->n++;
}

/* ------------------------------------------------------------- lookups */

static void lookup_destroy(store_lookup *l)
{
    for (uint32_t i = 0; i < l->n; i++) free(l->val[i]);
    free(l->keys);
    free(l->tokens);
    free(l->state);
    free(l->val);
    free(l->payload);
    free(l);
}

/* Drops one reference (mu held); the last frees. */
static void lookup_unref(store_lookup *l)
{
    if (--l->refs == 0) lookup_destroy(l);
}

static void get_push(tier *t, store_lookup *l)
{
    l->next = NULL;
    if (t->get_tail) t->get_tail->next = l;
    else t->get_head = l;
    t->get_tail = l;
    pthread_cond_signal(&t->get_cv);
}

/* Queues job j to tiers [0, n) if the staging bound allows (mu held);
 * otherwise frees it and counts a dropped write on each. */
static void put_queue(store *s, put_job *j, int n)
{
    if (s->staged + j->len > s->p.staging_bytes || s->stop) {
        for (int i = 0; i < n; i++) s->tiers[i].st.dropped_writes++;
        free(j->buf);
        free(j);
        return;
    }
    s->staged += j->len;
    j->refs = n;
    j->seq = ++s->put_seq;
    for (int i = 0; i < n; i++) {
        tier *t = &s->tiers[i];
        j->next[i] = NULL;
        if (t->put_tail) t->put_tail->next[i] = j;
        else t->put_head = j;
        t->put_tail = j;
        pthread_cond_signal(&t->put_cv);
    }
}

/* Copies of the hits tier t served, to be written to the tiers before it
 * (which missed them: a Redis hit lands on the local disk). No lock. */
static void tier_promote_prepare(const tier *t, const store_lookup *l, const uint32_t *idx, uint32_t m,
                                 uint8_t *const *vals, const size_t *lens, const uint8_t *verdict, put_job **out)
{
    for (uint32_t j = 0; j < m; j++) {
        out[j] = NULL;
        if (t->idx == 0 || verdict[j] != KEY_HIT) continue;
        put_job *pj = calloc(1, sizeof *pj);
        uint8_t *buf = malloc(lens[j]);
        if (!pj || !buf) { free(pj), free(buf); continue; }
        memcpy(buf, vals[j], lens[j]);
        *pj = (put_job){.key = l->keys[idx[j]], .buf = buf, .len = lens[j], .sealed = true};
        out[j] = pj;
    }
}

/* Verifies the values a tier returned for keys idx[0, m) of l (no lock). */
static void tier_verify(const tier *t, const store_lookup *l, const uint32_t *idx, uint32_t m, uint8_t **vals,
                        const size_t *lens, const uint8_t **pay, uint8_t *verdict)
{
    const store_params *p = &t->s->p;
    for (uint32_t j = 0; j < m; j++) {
        uint32_t i = idx[j];
        if (!vals[j]) { verdict[j] = KEY_MISS; continue; }
        store_entry_meta want = {.salt = {p->salt[0], p->salt[1]},
                                 .parent = i ? l->keys[i - 1] : l->parent0,
                                 .key = l->keys[i],
                                 .n_tokens = p->block_size,
                                 .payload_len = p->block_bytes};
        int rc = store_entry_verify(vals[j], lens[j], &want, l->tokens + (size_t)i * p->block_size, &pay[j]);
        verdict[j] = rc == 0 ? KEY_HIT : KEY_PENDING; /* PENDING here: rejected */
    }
}

/* One tier serves lookup l: asks the backend for l's pending keys from
 * l->from on, verifies, records; passes the misses from the first gap on
 * to the next tier, or ends the chain. Called without mu; takes it. */
static void tier_get(tier *t, store_lookup *l)
{
    store *s = t->s;
    uint32_t n = l->n - l->from, m = 0;
    uint32_t *idx = malloc(n * sizeof *idx);
    store_key *keys = malloc(n * sizeof *keys);
    uint8_t **vals = calloc(n, sizeof *vals), *verdict = calloc(n, 1);
    size_t *lens = calloc(n, sizeof *lens);
    const uint8_t **pay = calloc(n, sizeof *pay);
    put_job **promote = calloc(n, sizeof *promote);
    int rc = 0;
    double dt = 0;
    if (idx && keys && vals && verdict && lens && pay && promote) {
        for (uint32_t i = l->from; i < l->n; i++)
            if (l->state[i] == KEY_PENDING) idx[m] = i, keys[m++] = l->keys[i];
        double t0 = now_s();
        rc = t->b->get_many(t->b, keys, m, vals, lens);
        dt = now_s() - t0;
        tier_verify(t, l, idx, m, vals, lens, pay, verdict);
        tier_promote_prepare(t, l, idx, m, vals, lens, verdict, promote);
    } else {
        rc = PL_ENOMEM;
    }
    pthread_mutex_lock(&s->mu);
    hist_observe(&t->st.get_latency, dt);
    t->st.errors += rc < 0;
    for (uint32_t j = 0; j < m; j++) {
        if (promote[j]) put_queue(s, promote[j], t->idx);
        t->st.bytes_read += lens[j];
        if (verdict[j] == KEY_HIT) {
            l->state[idx[j]] = KEY_HIT;
            l->val[idx[j]] = vals[j];
            l->payload[idx[j]] = pay[j];
            vals[j] = NULL;
            t->st.hits++;
        } else {
            t->st.misses += verdict[j] == KEY_MISS;
            t->st.rejected += verdict[j] != KEY_MISS;
        }
    }
    uint32_t f = 0;
    while (f < l->n && l->state[f] == KEY_HIT) f++;
    if (f < l->n && t->idx + 1 < s->n_tiers && !l->abandoned && !s->stop) {
        l->from = f;
        get_push(&s->tiers[t->idx + 1], l); /* the chain's reference moves on */
    } else {
        for (uint32_t i = 0; i < l->n; i++)
            if (l->state[i] == KEY_PENDING) l->state[i] = KEY_MISS;
        lookup_unref(l);
    }
    pthread_mutex_unlock(&s->mu);
    for (uint32_t j = 0; vals && j < m; j++) free(vals[j]);
    free(idx), free(keys), free(vals), free(verdict), free(lens), free(pay), free(promote);
}

/* ---------------------------------------------------------------- puts */

/* Drops one tier's reference to job (mu held). The last one takes it out
 * of the staging count, keeps its buffer as a spare when it has an entry's
 * size and there is room, and returns the job for put_free (after the
 * mutex is released); NULL while other tiers hold it. A few spares do:
 * malloc reuses the heap a burst freed, so that a second burst of 8
 * prompts faults in ~1k pages on the engine threads with 8 spares, no more
 * than with 64 MiB of them (docs/kv-tiers.md). */
static put_job *put_unref(store *s, put_job *j)
{
    if (--j->refs > 0) return NULL;
    s->staged -= j->len;
    if (s->n_spare < STORE_SPARES && j->len == store_entry_size(s->p.block_size, s->p.block_bytes)) {
        s->spare[s->n_spare++] = j->buf;
        j->buf = NULL;
    }
    return j;
}

static void put_free(put_job *j)
{
    if (!j) return;
    free(j->buf);
    free(j);
}

/* put_unref on jobs[0, k), the memory freed with mu released meanwhile
 * (mu held on entry and exit). */
static void put_unref_all(store *s, put_job **jobs, int k)
{
    for (int i = 0; i < k; i++) jobs[i] = put_unref(s, jobs[i]);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k; i++) put_free(jobs[i]);
    pthread_mutex_lock(&s->mu);
}

/* The engine thread fills an entry; its checksum is computed here, on the
 * first writer that takes it (no lock of the engine's is held). */
static void put_seal(store *s, put_job *j)
{
    pthread_mutex_lock(&s->seal_mu);
    if (!j->sealed) store_entry_seal(j->buf, j->len);
    j->sealed = true;
    pthread_mutex_unlock(&s->seal_mu);
}

/* Writes up to STORE_PUT_BATCH queued jobs of t (mu held on entry and exit). */
static void tier_put_batch(tier *t)
{
    store *s = t->s;
    put_job *jobs[STORE_PUT_BATCH];
    int k = 0;
    while (k < STORE_PUT_BATCH && t->put_head) {
        jobs[k] = t->put_head;
        t->put_head = jobs[k]->next[t->idx];
        k++;
    }
    if (!t->put_head) t->put_tail = NULL;
    if (s->stop && now_s() > s->stop_deadline) { /* shutting down and out of time: drop */
        t->st.dropped_writes += (uint64_t)k;
        put_unref_all(s, jobs, k);
        return;
    }
    store_key keys[STORE_PUT_BATCH];
    const uint8_t *vals[STORE_PUT_BATCH];
    size_t lens[STORE_PUT_BATCH], bytes = 0;
    for (int i = 0; i < k; i++) keys[i] = jobs[i]->key, vals[i] = jobs[i]->buf, lens[i] = jobs[i]->len, bytes += lens[i];
    t->inflight_min = k ? jobs[0]->seq : 0;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k; i++) put_seal(s, jobs[i]);
    double t0 = now_s();
    int rc = t->b->put_many(t->b, keys, (size_t)k, vals, lens);
    double dt = now_s() - t0;
    pthread_mutex_lock(&s->mu);
    hist_observe(&t->st.put_latency, dt);
    t->inflight_min = 0;
    t->st.puts += (uint64_t)k;
    if (rc < 0) t->st.errors++;
    else t->st.bytes_written += bytes;
    put_unref_all(s, jobs, k);
}

/* Serves lookups, oldest first; they have a deadline the engine waits on. */
static void *tier_reader_main(void *arg)
{
    tier *t = arg;
    store *s = t->s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (t->get_head) {
            store_lookup *l = t->get_head;
            t->get_head = l->next;
            if (!t->get_head) t->get_tail = NULL;
            if (l->abandoned || s->stop) {
                lookup_unref(l);
                continue;
            }
            pthread_mutex_unlock(&s->mu);
            tier_get(t, l);
            pthread_mutex_lock(&s->mu);
        } else if (s->stop) {
            break;
        } else {
            pthread_cond_wait(&t->get_cv, &s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The writer yields the CPU to everything else: SCHED_IDLE, or nice 19
 * where that is refused. It does not need to come back while serving
 * (an unprivileged thread cannot), since nothing waits on it but the
 * prefill role, whose store keeps its writer at normal priority
 * (store_params.urgent_puts). */
static void writer_lower_priority(const tier *t)
{
    if (t->s->p.urgent_puts) return;
    struct sched_param sp = {0};
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) != 0) setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
}

/* At shutdown the engine waits for the queued writes (STORE_DRAIN_S): back
 * to normal priority where allowed (CAP_SYS_NICE or RLIMIT_NICE), so that
 * other processes' load does not starve the drain; otherwise unchanged. */
static void writer_restore_priority(const tier *t)
{
    if (t->s->p.urgent_puts) return;
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
}

/* Writes the put queue in order, a batch at a time. */
static void *tier_writer_main(void *arg)
{
    tier *t = arg;
    store *s = t->s;
    writer_lower_priority(t);
    bool restored = false;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->stop && !restored) {
            restored = true;
            pthread_mutex_unlock(&s->mu);
            writer_restore_priority(t);
            pthread_mutex_lock(&s->mu);
        }
        if (t->put_head) tier_put_batch(t);
        else if (s->stop) break;
        else pthread_cond_wait(&t->put_cv, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ----------------------------------------------------------- life cycle */

int store_new(store **out, const store_params *p)
{
    if (!p->block_size || !p->block_bytes) return err_set(PL_EINVAL, "store: block size and bytes must be >= 1");
    store *s = mem_calloc(1, sizeof *s);
    if (!s) return err_set(PL_ENOMEM, "store: out of memory");
    s->p = *p;
    if (!s->p.timeout_ms) s->p.timeout_ms = STORE_TIMEOUT_MS_DEFAULT;
    if (!s->p.staging_bytes) s->p.staging_bytes = STORE_STAGING_DEFAULT;
    if (pthread_mutex_init(&s->mu, NULL)) {
        free(s);
        return err_set(PL_ENOMEM, "store: cannot make its lock");
    }
    if (pthread_mutex_init(&s->seal_mu, NULL)) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return err_set(PL_ENOMEM, "store: cannot make its lock");
    }
    *out = s;
    return 0;
}

int store_add_tier(store *s, store_backend *b)
{
    if (s->n_tiers == STORE_MAX_TIERS) {
        b->close(b);
        return err_set(PL_ERANGE, "store: at most %d tiers", STORE_MAX_TIERS);
    }
    tier *t = &s->tiers[s->n_tiers];
    memset(t, 0, sizeof *t);
    t->s = s;
    t->idx = s->n_tiers;
    t->b = b;
    hist_init(&t->st.get_latency);
    hist_init(&t->st.put_latency);
    if (pthread_cond_init(&t->get_cv, NULL)) {
        b->close(b);
        return err_set(PL_ENOMEM, "store: cannot make a tier's condition variable");
    }
    if (pthread_cond_init(&t->put_cv, NULL)) {
        pthread_cond_destroy(&t->get_cv);
        b->close(b);
        return err_set(PL_ENOMEM, "store: cannot make a tier's condition variable");
    }
    pthread_mutex_lock(&s->mu); /* lookups read n_tiers under mu */
    s->n_tiers++;
    pthread_mutex_unlock(&s->mu);
    char name[16];
    if (pthread_create(&t->reader, NULL, tier_reader_main, t) != 0)
        return err_set(PL_ENOMEM, "store: cannot start the %s tier's reader thread", b->name);
    t->reader_ok = true;
    snprintf(name, sizeof name, "pl-%.5s-get", b->name);
    pthread_setname_np(t->reader, name);
    if (pthread_create(&t->writer, NULL, tier_writer_main, t) != 0)
        return err_set(PL_ENOMEM, "store: cannot start the %s tier's writer thread", b->name);
    t->writer_ok = true;
    snprintf(name, sizeof name, "pl-%.5s-put", b->name);
    pthread_setname_np(t->writer, name);
    return 0;
}

void store_free(store *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    s->stop_deadline = now_s() + STORE_DRAIN_S;
    for (int i = 0; i < s->n_tiers; i++) {
        pthread_cond_signal(&s->tiers[i].get_cv);
        pthread_cond_signal(&s->tiers[i].put_cv);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_tiers; i++) {
        if (s->tiers[i].reader_ok) pthread_join(s->tiers[i].reader, NULL);
        if (s->tiers[i].writer_ok) pthread_join(s->tiers[i].writer, NULL);
    }
    for (int i = 0; i < s->n_tiers; i++) { /* what a thread that never ran left queued */
        tier *t = &s->tiers[i];
        while (t->get_head) {
            store_lookup *l = t->get_head;
            t->get_head = l->next;
            lookup_unref(l);
        }
        while (t->put_head) {
            put_job *j = t->put_head;
            t->put_head = j->next[i];
            put_free(put_unref(s, j));
        }
        t->b->close(t->b);
        pthread_cond_destroy(&t->get_cv);
        pthread_cond_destroy(&t->put_cv);
    }
    for (int i = 0; i < s->n_spare; i++) free(s->spare[i]);
    pthread_mutex_destroy(&s->seal_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int store_n_tiers(const store *s) { return s->n_tiers; }

const char *store_tier_name(const store *s, int i) { return s->tiers[i].b->name; }
const store_backend *store_tier_backend(const store *s, int i) { return s->tiers[i].b; }

void store_tier_stats_get(store *s, int i, store_tier_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->tiers[i].st;
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------- write-behind */

uint64_t store_staged_bytes(store *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t b = s->staged;
    pthread_mutex_unlock(&s->mu);
    return b;
}

static store_key *recent_slot(store *s, const uint64_t key[2])
{
    return &s->recent[(key[0] ^ (key[1] >> 11)) & (STORE_RECENT - 1)];
}

void store_put_block_fill(store *s, const uint64_t key[2], const uint64_t parent[2], const int32_t *tokens,
                          store_fill_fn fill, const void *user)
{
    if (s->n_tiers == 0) return;
    store_key *r = recent_slot(s, key);
    if (r->h[0] == key[0] && r->h[1] == key[1]) return; /* written already */
    const size_t len = store_entry_size(s->p.block_size, s->p.block_bytes);
    uint8_t *buf = NULL;
    pthread_mutex_lock(&s->mu);
    bool room = s->staged + len <= s->p.staging_bytes;
    if (!room)
        for (int i = 0; i < s->n_tiers; i++) s->tiers[i].st.dropped_writes++;
    else if (s->n_spare)
        buf = s->spare[--s->n_spare];
    pthread_mutex_unlock(&s->mu);
    if (!room) return; /* checked before the copy, so that a full buffer costs nothing */
    put_job *j = calloc(1, sizeof *j);
    if (!buf) buf = malloc(len);
    if (!j || !buf) {
        free(j), free(buf);
        return;
    }
    store_entry_meta m = {.salt = {s->p.salt[0], s->p.salt[1]},
                          .parent = {{parent[0], parent[1]}},
                          .key = {{key[0], key[1]}},
                          .n_tokens = s->p.block_size,
                          .payload_len = s->p.block_bytes};
    /* the one copy the engine thread makes (the pool block may be reused
     * at once); the checksum is left to the writer (put_seal) */
    fill(user, store_entry_begin(buf, &m, tokens), s->p.block_bytes);
    *j = (put_job){.key = m.key, .buf = buf, .len = len};
    *r = m.key;
    pthread_mutex_lock(&s->mu);
    put_queue(s, j, s->n_tiers);
    pthread_mutex_unlock(&s->mu);
}

static void fill_copy(const void *block, uint8_t *payload, size_t len) { memcpy(payload, block, len); }

void store_put_block(store *s, const uint64_t key[2], const uint64_t parent[2], const int32_t *tokens,
                     const uint8_t *block)
{
    store_put_block_fill(s, key, parent, tokens, fill_copy, block);
}

uint64_t store_put_mark(store *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t m = s->put_seq;
    pthread_mutex_unlock(&s->mu);
    return m;
}

bool store_put_done(store *s, uint64_t mark)
{
    bool done = true;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_tiers && done; i++) {
        const tier *t = &s->tiers[i];
        /* each tier writes its queue in order: its oldest pending job decides */
        done = !(t->put_head && t->put_head->seq <= mark) && !(t->inflight_min && t->inflight_min <= mark);
    }
    pthread_mutex_unlock(&s->mu);
    return done;
}

/* --------------------------------------------------------------- lookup */

store_lookup *store_lookup_start(store *s, const uint64_t parent0[2], const uint64_t (*keys)[2], const int32_t *tokens,
                                 uint32_t n)
{
    if (s->n_tiers == 0 || n == 0) return NULL;
    const size_t T = s->p.block_size;
    store_lookup *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->s = s;
    l->n = n;
    l->keys = malloc(n * sizeof *l->keys);
    l->tokens = malloc(n * T * sizeof *l->tokens);
    l->state = calloc(n, 1);
    l->val = calloc(n, sizeof *l->val);
    l->payload = calloc(n, sizeof *l->payload);
    if (!l->keys || !l->tokens || !l->state || !l->val || !l->payload) {
        lookup_destroy(l);
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) l->keys[i] = (store_key){{keys[i][0], keys[i][1]}};
    l->parent0 = (store_key){{parent0[0], parent0[1]}};
    memcpy(l->tokens, tokens, n * T * sizeof *tokens);
    l->deadline = now_s() + s->p.timeout_ms * 1e-3;
    l->refs = 2; /* the engine's, the chain's */
    pthread_mutex_lock(&s->mu);
    get_push(&s->tiers[0], l);
    pthread_mutex_unlock(&s->mu);
    return l;
}

uint32_t store_lookup_poll(store_lookup *l, bool *done)
{
    pthread_mutex_lock(&l->s->mu);
    uint32_t k = 0;
    while (k < l->n && l->state[k] == KEY_HIT) k++;
    *done = k == l->n || l->state[k] == KEY_MISS || now_s() >= l->deadline;
    pthread_mutex_unlock(&l->s->mu);
    return k;
}

const uint8_t *store_lookup_block(const store_lookup *l, uint32_t i)
{
    return i < l->n && l->state[i] == KEY_HIT ? l->payload[i] : NULL;
}

void store_lookup_free(store_lookup *l)
{
    if (!l) return;
    store *s = l->s;
    pthread_mutex_lock(&s->mu);
    l->abandoned = true;
    lookup_unref(l);
    pthread_mutex_unlock(&s->mu);
}
