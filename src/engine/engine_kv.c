/* engine_kv.c - the /v1/kv view of the block pool (pl_engine_kv_json).
 *
 * Two halves, so that a poller does not stall the engine: the engine
 * thread only copies what it owns into a snapshot (eng_kv_snap_take: a few
 * bytes per block and per table entry, no JSON), and the caller formats the
 * snapshot on its own thread (eng_kv_snap_json). Formatting the objects of
 * 100k blocks takes about a second; copying them, well under a millisecond.
 *
 * The JSON:
 *   {"block_size":16, "blocks_total":N, "blocks_used":.., "blocks_cached":..,
 *    "blocks_free":.., "block_bytes":.., "tokens":.., "utilisation":..,
 *    "kv_dtype":"f16", "kv_kind":"kv" (or "latent": one row a token and layer,
 *    head_dim = kv_lora_rank + rope dims; or "layer_groups" with "layer_groups",
 *    "global_bytes", "local_bytes": n_layers is then a block's layer slots and a
 *    sequence's "blocks" its global group's), "n_layers":.., "n_kv_heads":.., "head_dim":..,
 *    "bytes_per_token":.., "pool_bytes":.., with layer groups "group_blocks":[..]
 *    (each group's distinct blocks held, [0] the global group),
 *    "bytes_allocated":.., "bytes_live":.., "bytes_wasted":..,
 *    "running":.., "waiting":.., "steps":.., "preemptions":..,
 *    "evictions":.., "prefix_hit_tokens":.., "prefix_query_tokens":..,
 *    "sequences":[{"seq":3, "request":12, "index":0, "completions":1,
 *                  "tokens":40, "state":"decode", "blocks":[7,2,9],
 *                  with layer groups "groups":[{"group":0, "first_block":0,
 *                  "blocks":[7,2,9]}, {"group":1, "first_block":1, "blocks":[4,8]},
 *                  ...]: each group's table, whose entry 0 is chain block
 *                  first_block (the local groups dropped those behind the
 *                  window)}, ...],
 *    "blocks":[{"id":0, "state":"used", "refcount":2, "cached":true,
 *               "owners":[{"seq":3, "request":12}, ...]}, ...]}
 * With layer groups a block's owners are every table that names it, each
 * with its "group"; so refcount is still the owners' count.
 * state is the pool's: "free", "used" (held by sequences) or "cached"
 * (held by none, kept for prefix hits); cached says the block carries a
 * prefix-cache key (a used block can be cached too). The counters
 * (steps, preemptions, evictions: cached blocks taken for reuse, prefix
 * tokens) only grow, so a poller sees what happened between two looks.
 *
 * PL_KV_JSON_COMPACT replaces "blocks" by three fields of one entry per
 * block, about 4 bytes a block instead of about 70:
 *   "block_states":"ffuuc..." (f free, u used, c cached),
 *   "block_keyed":"0011..." (the cached flag above), "block_refcounts":[0,0,1,2,...]
 * and the owners follow from "sequences".
 */
#include <assert.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

typedef struct {
    int32_t seq;
    uint64_t request;
    int32_t index, completions;
    uint32_t tokens;
    bool decode;
    uint32_t n_blocks;
    uint32_t *blocks; /* into eng_kv_snap.tables */
    uint32_t n_groups;                  /* layer groups: 0 when off; group 0's table is blocks above */
    uint32_t first[KV_GROUPS_MAX];      /* [g] the chain block of group g's table entry 0 */
    uint32_t n_gblocks[KV_GROUPS_MAX];  /* [g] its entries */
    uint32_t *gblocks[KV_GROUPS_MAX];   /* [g] into eng_kv_snap.tables */
} eng_kv_seq;

struct eng_kv_snap {
    atomic_uint refs; /* callers still to format it; the last one frees it */
    pl_kv_stats st;
    const char *dtype; /* a static name */
    bool latent;       /* KV_KIND_LATENT */
    uint32_t n_layers, n_kv_heads, head_dim;
    uint32_t running, waiting;
    uint64_t steps, preemptions, evictions, hit_tokens, query_tokens;
    uint32_t n_blocks;
    uint8_t *state, *keyed;  /* [n_blocks] */
    uint32_t *refcount;      /* [n_blocks] */
    uint32_t n_seqs;
    eng_kv_seq *seqs;        /* [n_seqs] */
    uint32_t *tables;        /* every sequence's table, one after another */
};

void eng_kv_snap_free(eng_kv_snap *s)
{
    if (!s) return;
    free(s->state);
    free(s->keyed);
    free(s->refcount);
    free(s->seqs);
    free(s->tables);
    free(s);
}

void eng_kv_snap_set_refs(eng_kv_snap *s, unsigned n) { atomic_store(&s->refs, n); }

void eng_kv_snap_release(eng_kv_snap *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) eng_kv_snap_free(s);
}

/* The running sequences and their tables. */
static int eng_kv_take_seqs(pl_engine *e, eng_kv_snap *s)
{
    const sched *sc = &e->sc;
    const kv_groups *kg = rt_ctx_groups(e->ctx);
    const uint32_t ng = kg ? kg->n_groups : 0;
    size_t n_entries = 0;
    for (uint32_t i = 0; i < sc->n_running; i++) {
        const kv_seq *kv = rt_seq_kv(e->ctx, sc->running[i]->seq);
        const kv_glocal *lg = rt_seq_kv_local(e->ctx, sc->running[i]->seq);
        n_entries += kv ? kv->n_blocks : 0;
        for (uint32_t g = 1; lg && g < ng; g++) n_entries += lg->t[g - 1].n_blocks;
    }
    s->seqs = calloc(sc->n_running ? sc->n_running : 1, sizeof *s->seqs);
    s->tables = malloc((n_entries ? n_entries : 1) * sizeof *s->tables);
    if (!s->seqs || !s->tables) return -1;
    size_t at = 0;
    for (uint32_t i = 0; i < sc->n_running; i++) {
        const sched_seq *q = sc->running[i];
        const kv_seq *kv = rt_seq_kv(e->ctx, q->seq);
        eng_kv_seq *o = &s->seqs[s->n_seqs++];
        o->seq = q->seq;
        o->request = q->r->id;
        o->index = q->comp_lo;
        o->completions = q->n_comp;
        o->tokens = kv ? kv->n_tokens : 0;
        o->decode = sched_total(q) - q->n_done == 1 && q->r->comp[q->comp_lo].n_gen;
        o->n_blocks = kv ? kv->n_blocks : 0;
        o->blocks = s->tables + at;
        if (o->n_blocks) memcpy(o->blocks, kv->table, o->n_blocks * sizeof *o->blocks);
        at += o->n_blocks;
        const kv_glocal *lg = rt_seq_kv_local(e->ctx, q->seq);
        if (!kv || !lg) continue;
        o->n_groups = ng;
        o->n_gblocks[0] = o->n_blocks;
        o->gblocks[0] = o->blocks;
        for (uint32_t g = 1; g < ng; g++) {
            const kv_seq *t = &lg->t[g - 1];
            o->first[g] = lg->dropped;
            o->n_gblocks[g] = t->n_blocks;
            o->gblocks[g] = s->tables + at;
            if (t->n_blocks) memcpy(o->gblocks[g], t->table, t->n_blocks * sizeof *t->table);
            at += t->n_blocks;
        }
    }
    assert(at == n_entries);
    return 0;
}

eng_kv_snap *eng_kv_snap_take(pl_engine *e)
{
    eng_kv_snap *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    kv_pool *pool = rt_ctx_pool(e->ctx);
    pl_ctx_kv_stats(e->ctx, &s->st);
    s->dtype = kv_dtype_name(pool->g.s.dtype);
    s->latent = pool->g.s.kind == KV_KIND_LATENT;
    s->n_layers = pool->g.s.n_layers, s->n_kv_heads = pool->g.s.n_kv_heads, s->head_dim = pool->g.s.head_dim;
    const sched *sc = &e->sc;
    const prefix_cache *pc = rt_ctx_prefix_cache(e->ctx);
    s->running = sc->n_running, s->waiting = sc->n_waiting;
    s->steps = e->m.steps, s->preemptions = sc->st.preemptions, s->evictions = pc ? pc->st.evictions : 0;
    s->hit_tokens = sc->st.prefix_hit_tokens, s->query_tokens = sc->st.prefix_query_tokens;
    s->n_blocks = pool->n_blocks;
    const size_t nb = pool->n_blocks ? pool->n_blocks : 1;
    s->state = malloc(nb), s->keyed = malloc(nb), s->refcount = malloc(nb * sizeof *s->refcount);
    if (!s->state || !s->keyed || !s->refcount || eng_kv_take_seqs(e, s) != 0) {
        eng_kv_snap_free(s);
        return NULL;
    }
    for (uint32_t b = 0; b < pool->n_blocks; b++) {
        const kv_block *k = &pool->blocks[b];
        s->state[b] = k->state;
        s->keyed[b] = (k->flags & KV_BLOCK_HASHED) != 0;
        s->refcount[b] = k->refcount;
    }
    atomic_store(&s->refs, 1);
    return s;
}

/* ---------------------------------------------------------------- format */

static const char *eng_block_state(uint8_t st)
{
    switch (st) {
    case KV_BLOCK_FREE: return "free";
    case KV_BLOCK_USED: return "used";
    case KV_BLOCK_CACHED: return "cached";
    default: return "?";
    }
}

static void jset_int(json_t *o, const char *k, long long v) { json_object_set_new(o, k, json_integer(v)); }

static json_t *eng_json_seqs(const eng_kv_snap *s)
{
    json_t *arr = json_array();
    for (uint32_t i = 0; arr && i < s->n_seqs; i++) {
        const eng_kv_seq *q = &s->seqs[i];
        json_t *o = json_object(), *bl = json_array();
        jset_int(o, "seq", q->seq);
        jset_int(o, "request", (long long)q->request);
        jset_int(o, "index", q->index);
        jset_int(o, "completions", q->completions);
        jset_int(o, "tokens", q->tokens);
        json_object_set_new(o, "state", json_string(q->decode ? "decode" : "prefill"));
        for (uint32_t j = 0; j < q->n_blocks; j++) json_array_append_new(bl, json_integer(q->blocks[j]));
        json_object_set_new(o, "blocks", bl);
        if (q->n_groups) {
            json_t *gs = json_array();
            for (uint32_t g = 0; g < q->n_groups; g++) {
                json_t *go = json_object(), *gb = json_array();
                jset_int(go, "group", g);
                jset_int(go, "first_block", q->first[g]);
                for (uint32_t j = 0; j < q->n_gblocks[g]; j++) json_array_append_new(gb, json_integer(q->gblocks[g][j]));
                json_object_set_new(go, "blocks", gb);
                json_array_append_new(gs, go);
            }
            json_object_set_new(o, "groups", gs);
        }
        json_array_append_new(arr, o);
    }
    return arr;
}

/* Every block as an object, its owners from the sequences' tables. */
static json_t *eng_json_blocks(const eng_kv_snap *s)
{
    json_t **owners = calloc(s->n_blocks ? s->n_blocks : 1, sizeof *owners);
    json_t *arr = owners ? json_array() : NULL;
    for (uint32_t i = 0; arr && i < s->n_seqs; i++) {
        const eng_kv_seq *q = &s->seqs[i];
        const uint32_t ng = q->n_groups ? q->n_groups : 1;
        for (uint32_t g = 0; g < ng; g++) {
            const uint32_t n = q->n_groups ? q->n_gblocks[g] : q->n_blocks;
            const uint32_t *tb = q->n_groups ? q->gblocks[g] : q->blocks;
            for (uint32_t j = 0; j < n; j++) {
                uint32_t b = tb[j];
                assert(b < s->n_blocks);
                if (!owners[b]) owners[b] = json_array();
                json_t *w = json_pack("{s:i, s:I}", "seq", q->seq, "request", (json_int_t)q->request);
                if (q->n_groups) jset_int(w, "group", g);
                json_array_append_new(owners[b], w);
            }
        }
    }
    for (uint32_t b = 0; arr && b < s->n_blocks; b++) {
        json_t *o = json_object();
        jset_int(o, "id", b);
        json_object_set_new(o, "state", json_string(eng_block_state(s->state[b])));
        jset_int(o, "refcount", s->refcount[b]);
        json_object_set_new(o, "cached", json_boolean(s->keyed[b]));
        json_object_set_new(o, "owners", owners[b] ? owners[b] : json_array());
        owners[b] = NULL;
        json_array_append_new(arr, o);
    }
    for (uint32_t b = 0; owners && b < s->n_blocks; b++) json_decref(owners[b]);
    free(owners);
    return arr;
}

/* The compact form's three per-block fields. */
/* head (the rest of the object, dumped, ending in '}') with the compact
 * blocks' three fields written in by hand: block_states and block_keyed
 * (a letter or digit per block, nothing to escape) and block_refcounts.
 * Through jansson, an integer object per block and the escaping of two
 * strings of a character per block took ~24 ms of an HTTP thread per poll
 * of a 104k-block pool (docs/web.md); by hand it is one pass. */
static char *eng_json_splice_compact(const eng_kv_snap *s, const char *head)
{
    const size_t hl = strlen(head), n = s->n_blocks;
    assert(hl >= 2 && head[hl - 1] == '}');
    char *out = malloc(hl + 13 * n + 96), *p = out; /* a refcount: up to 10 digits and a comma */
    if (!out) return NULL;
    memcpy(p, head, hl - 1);
    p += hl - 1;
    if (hl > 2) *p++ = ',';
    p += sprintf(p, "\"block_states\":\"");
    for (size_t b = 0; b < n; b++) {
        const char *name = eng_block_state(s->state[b]);
        *p++ = name[0]; /* f, u, c (or ?) */
    }
    p += sprintf(p, "\",\"block_keyed\":\"");
    for (size_t b = 0; b < n; b++) *p++ = s->keyed[b] ? '1' : '0';
    p += sprintf(p, "\",\"block_refcounts\":[");
    for (size_t b = 0; b < n; b++) {
        char d[12];
        int k = 0;
        uint32_t v = (uint32_t)s->refcount[b];
        do d[k++] = (char)('0' + v % 10); while ((v /= 10) != 0);
        while (k) *p++ = d[--k];
        if (b + 1 < n) *p++ = ',';
    }
    memcpy(p, "]}", 3);
    return out;
}

char *eng_kv_snap_json(const eng_kv_snap *s, unsigned flags)
{
    const pl_kv_stats *st = &s->st;
    json_t *root = json_object();
    if (!root) return NULL;
    jset_int(root, "block_size", st->block_size);
    jset_int(root, "blocks_total", st->blocks_total);
    jset_int(root, "blocks_used", st->blocks_used);
    jset_int(root, "blocks_cached", st->blocks_cached);
    jset_int(root, "blocks_free", st->blocks_free);
    jset_int(root, "block_bytes", (long long)st->block_bytes);
    jset_int(root, "tokens", (long long)st->tokens);
    json_object_set_new(root, "utilisation", json_real(st->utilisation));
    json_object_set_new(root, "kv_dtype", json_string(s->dtype));
    json_object_set_new(root, "kv_kind", json_string(s->latent ? "latent" : st->layer_groups ? "layer_groups" : "kv"));
    if (st->layer_groups) { /* a sequence's "blocks" are its global group's table, "groups" every group's */
        jset_int(root, "layer_groups", st->layer_groups);
        jset_int(root, "global_bytes", (long long)st->global_bytes);
        jset_int(root, "local_bytes", (long long)st->local_bytes);
        json_t *gb = json_array();
        for (uint32_t g = 0; g < st->layer_groups && g < PL_KV_GROUPS_MAX; g++)
            json_array_append_new(gb, json_integer(st->group_blocks[g]));
        json_object_set_new(root, "group_blocks", gb);
    }
    jset_int(root, "n_layers", s->n_layers);
    jset_int(root, "n_kv_heads", s->n_kv_heads);
    jset_int(root, "head_dim", s->head_dim);
    json_object_set_new(root, "bytes_per_token", json_real(st->bytes_per_token));
    jset_int(root, "pool_bytes", (long long)st->pool_bytes);
    jset_int(root, "bytes_allocated", (long long)st->bytes_allocated);
    jset_int(root, "bytes_live", (long long)st->bytes_live);
    jset_int(root, "bytes_wasted", (long long)st->bytes_wasted);
    jset_int(root, "running", s->running);
    jset_int(root, "waiting", s->waiting);
    jset_int(root, "steps", (long long)s->steps);
    jset_int(root, "preemptions", (long long)s->preemptions);
    jset_int(root, "evictions", (long long)s->evictions);
    jset_int(root, "prefix_hit_tokens", (long long)s->hit_tokens);
    jset_int(root, "prefix_query_tokens", (long long)s->query_tokens);
    json_object_set_new(root, "sequences", eng_json_seqs(s));
    if (!(flags & PL_KV_JSON_COMPACT)) json_object_set_new(root, "blocks", eng_json_blocks(s));
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (out && (flags & PL_KV_JSON_COMPACT)) {
        char *full = eng_json_splice_compact(s, out);
        free(out);
        out = full;
    }
    return out;
}
