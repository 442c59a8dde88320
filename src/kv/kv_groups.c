/* kv_groups.c - layer groups' plan and the local groups' tables; see
 * kv_groups.h. */
#include "kv/kv_groups.h"

#include <string.h>

#include "base/err.h"

void kv_groups_plan(kv_groups *g, uint32_t n_layers, const bool *local, uint32_t window)
{
    memset(g, 0, sizeof *g);
    if (n_layers > KV_GROUPS_MAX_LAYERS || window < 2) return;
    uint32_t ng = 0, nl = 0;
    for (uint32_t l = 0; l < n_layers; l++) local[l] ? nl++ : ng++;
    if (ng == 0 || nl == 0) return;
    /* blocks of the global count: group 0 has no padding, the local
     * groups at most slots - 1 padded slots in the last one */
    const uint32_t n_local_groups = (nl + ng - 1) / ng;
    if (1 + n_local_groups > KV_GROUPS_MAX) return;
    for (uint32_t l = 0, ig = 0, il = 0; l < n_layers; l++) {
        if (local[l]) {
            g->group[l] = (uint8_t)(1 + il / ng);
            g->slot[l] = (uint16_t)(il++ % ng);
        } else {
            g->group[l] = 0;
            g->slot[l] = (uint16_t)ig++;
        }
    }
    g->n_groups = 1 + n_local_groups;
    g->slots = ng;
    g->window = window;
    g->n_layers = n_layers;
    g->n_global = ng;
    g->n_local = nl;
}

int kv_glocal_init(kv_glocal *x, const kv_groups *g, kv_pool *pool, uint32_t max_ctx)
{
    kv_glocal n = {.dropped = 0};
    for (uint32_t i = 0; i + 1 < g->n_groups; i++) {
        int rc = kv_seq_init(&n.t[i], pool, max_ctx, KV_SEQ_PAGED);
        if (rc) {
            kv_glocal_free(&n, g);
            return rc;
        }
    }
    *x = n;
    return 0;
}

void kv_glocal_free(kv_glocal *x, const kv_groups *g)
{
    for (uint32_t i = 0; i + 1 < g->n_groups; i++) kv_seq_free(&x->t[i]);
    x->dropped = 0;
}

uint32_t kv_groups_first_block(const kv_groups *g, uint32_t block_size, uint32_t n)
{
    /* block i is dead once (i + 1) T <= n + 1 - W: no token from n on sees it */
    if (n + 1 <= g->window || g->n_groups < 2) return 0;
    return (n + 1 - g->window) / block_size;
}

uint32_t kv_glocal_drop_count(const kv_groups *g, const kv_glocal *x, uint32_t n)
{
    if (g->n_groups < 2) return 0;
    const uint32_t want = kv_groups_first_block(g, x->t[0].pool->g.s.block_size, n);
    return want > x->dropped ? want - x->dropped : 0;
}

int64_t kv_glocal_append_cost(const kv_groups *g, const kv_glocal *x, uint32_t n, uint32_t m)
{
    const uint32_t k = kv_glocal_drop_count(g, x, n);
    int64_t cost = 0;
    for (uint32_t i = 0; i + 1 < g->n_groups; i++)
        cost += k ? kv_seq_drop_front_append_cost(&x->t[i], k, m) : (int64_t)kv_seq_append_cost(&x->t[i], m);
    return cost;
}

int kv_glocal_append(kv_glocal *x, const kv_groups *g, uint32_t n, uint32_t m)
{
    const uint32_t k = kv_glocal_drop_count(g, x, n);
    for (uint32_t i = 0; k && i + 1 < g->n_groups; i++) {
        int rc = kv_seq_drop_front(&x->t[i], k);
        assert(rc == 0); /* k x T <= the table's tokens: W >= 1 */
        (void)rc;
    }
    x->dropped += k;
    uint32_t done = 0;
    int rc = 0;
    for (; done + 1 < g->n_groups && !rc; done++) rc = kv_seq_append(&x->t[done], m);
    if (rc) /* undo the appends that succeeded (the failed one changed nothing) */
        for (uint32_t i = 0; i + 1 < done; i++) kv_seq_truncate(&x->t[i], x->t[i].n_tokens - m);
    return rc;
}

void kv_glocal_truncate(kv_glocal *x, const kv_groups *g, uint32_t n)
{
    const uint32_t base = x->dropped * (g->n_groups > 1 ? x->t[0].pool->g.s.block_size : 0);
    assert(n >= base);
    for (uint32_t i = 0; i + 1 < g->n_groups; i++) kv_seq_truncate(&x->t[i], n - base);
}

bool kv_glocal_holds_window(const kv_groups *g, const kv_glocal *x, uint32_t n)
{
    if (x->dropped == 0 || g->n_groups < 2) return true;
    return (uint64_t)x->dropped * x->t[0].pool->g.s.block_size + g->window <= (uint64_t)n + 1;
}

int kv_glocal_fork(kv_glocal *child, const kv_glocal *parent, const kv_groups *g)
{
    kv_glocal c = {.dropped = parent->dropped};
    for (uint32_t i = 0; i + 1 < g->n_groups; i++) {
        int rc = kv_seq_fork(&c.t[i], &parent->t[i]);
        if (rc) {
            for (uint32_t j = 0; j < i; j++) kv_seq_free(&c.t[j]);
            return rc;
        }
    }
    *child = c;
    return 0;
}

uint64_t kv_glocal_bytes(const kv_glocal *x, const kv_groups *g)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i + 1 < g->n_groups; i++) b += kv_seq_bytes_held(&x->t[i]);
    return b;
}

uint32_t kv_glocal_tables(kv_glocal *x, const kv_groups *g, kv_seq **out)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i + 1 < g->n_groups; i++) out[n++] = &x->t[i];
    return n;
}

#define GROUPS_BAD(...) err_set(PL_EFORMAT, "kv_glocal_check: " __VA_ARGS__)

int kv_glocal_check(const kv_glocal *x, const kv_groups *g, uint32_t n)
{
    if (g->n_groups < 2) return 0;
    const uint32_t T = x->t[0].pool->g.s.block_size;
    const uint64_t base = (uint64_t)x->dropped * T;
    if (base > n) return GROUPS_BAD("%u blocks dropped but the sequence holds %u positions", x->dropped, n);
    for (uint32_t i = 0; i + 1 < g->n_groups; i++) {
        const kv_seq *t = &x->t[i];
        if (t->mode != KV_SEQ_PAGED) return GROUPS_BAD("group %u: not paged", i + 1);
        if (t->n_tokens + base != n)
            return GROUPS_BAD("group %u holds positions [%llu, %llu), the global group [0, %u)", i + 1,
                              (unsigned long long)base, (unsigned long long)(base + t->n_tokens), n);
        if (t->n_blocks != x->t[0].n_blocks)
            return GROUPS_BAD("group %u has %u blocks, group 1 %u", i + 1, t->n_blocks, x->t[0].n_blocks);
    }
    if (!kv_glocal_holds_window(g, x, n))
        return GROUPS_BAD("position %llu dropped, but the window of %u before position %u needs it",
                          (unsigned long long)base - 1, g->window, n);
    return 0;
}

int kv_groups_check_owners(kv_pool *pool, kv_seq *const *tables, const uint8_t *group, size_t n)
{
    memset(pool->scratch, 0, (size_t)pool->n_blocks * sizeof *pool->scratch);
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < tables[i]->n_blocks; j++) {
            const uint32_t b = tables[i]->table[j], mark = (uint32_t)group[i] + 1;
            if (pool->scratch[b] && pool->scratch[b] != mark)
                return GROUPS_BAD("block %u is in tables of groups %u and %u", b, pool->scratch[b] - 1, group[i]);
            pool->scratch[b] = mark;
        }
    return 0;
}
