/* api_ctx.c - pl_ctx and pl_seq_*: the public face of src/runtime.
 *
 * pl_ctx_new checks pl_ctx_params (errors name the CLI flags), fills the
 * defaults (n_ctx from the window or the model, threads from the cores,
 * SWA from the model) and hands the runtime resolved rt_params; the rest
 * checks arguments from outside and converts the public structs. A pl_ctx
 * is the runtime's rt_ctx (runtime.h).
 */
#include "pagellm.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_impl.h"
#include "base/err.h"
#include "kv/kv_shift.h"
#include "runtime/runtime.h"

void pl_ctx_params_default(pl_ctx_params *p)
{
    memset(p, 0, sizeof *p);
    p->max_seqs = 1;
    p->block_size = 16;
    p->kv_dtype = PL_KV_F16;
    p->layout = PL_KV_PAGED;
    p->max_batch = 512;
}

/* The window's sink blocks and limit (rt_window_limit) of p. */
static rt_params win_of(const pl_ctx_params *p)
{
    return (rt_params){.block_size = p->block_size, .kv_window = p->kv_window, .kv_sinks = p->kv_sinks};
}

static uint32_t win_sink_blocks(const pl_ctx_params *p) { rt_params r = win_of(p); return rt_window_sink_blocks(&r); }
static uint32_t win_limit(const pl_ctx_params *p) { rt_params r = win_of(p); return rt_window_limit(&r); }

/* The window's parameters (after block_size and n_ctx are known). */
static int window_check(const pl_ctx_params *p, bool latent)
{
    if (!p->kv_window) {
        if (p->kv_sinks)
            return err_set(PL_EINVAL, "kv_sinks (--kv-sinks) %u needs kv_window (--kv-window)", p->kv_sinks);
        return 0;
    }
    if (p->kv_window < 2 * p->block_size)
        return err_set(PL_EINVAL, "kv_window (--kv-window) %u must be at least 2 x the KV block size %u = %u: "
                       "whole blocks are dropped", p->kv_window, p->block_size, 2 * p->block_size);
    if (win_limit(p) > p->n_ctx)
        return err_set(PL_EINVAL, "kv_sinks (--kv-sinks) %u (%u in whole blocks of %u) + kv_window (--kv-window) %u "
                       "= %u exceed the context n_ctx (--ctx) %u", p->kv_sinks, win_sink_blocks(p) * p->block_size,
                       p->block_size, p->kv_window, win_limit(p), p->n_ctx);
    if (p->no_kv_cache) return err_set(PL_EINVAL, "kv_window (--kv-window) needs a KV cache (not --no-kv-cache)");
    if (latent ? !kv_shift_latent_supported((kv_dtype)p->kv_dtype) : !kv_shift_supported((kv_dtype)p->kv_dtype))
        return err_set(PL_EUNSUPPORTED, "kv_window (--kv-window) is not supported with KV dtype %s yet (its keys "
                       "are quantized per channel over a block and cannot be re-rotated in place)",
                       pl_kv_dtype_name(p->kv_dtype));
    return 0;
}

/* The sliding-window attention that applies (*swa, 0 = none), after
 * filling the default n_ctx of an SWA context. */
static int swa_check(const model_config *c, pl_ctx_params *p, uint32_t *swa)
{
    const uint32_t w = c->sliding_window;
    *swa = 0;
    if (p->swa != PL_SWA_AUTO && p->swa != PL_SWA_ON && p->swa != PL_SWA_OFF)
        return err_set(PL_EINVAL, "swa (--swa) %d: expected auto, on or off", p->swa);
    if (p->swa == PL_SWA_ON && w == 0 && c->local_window)
        return err_set(PL_EINVAL, "--swa on: %s's window %u holds for its local layers only, as a mask over the "
                       "full cache (its global layers need every position); it applies without --swa",
                       c->arch_name, c->local_window);
    if (p->swa == PL_SWA_ON && w == 0)
        return err_set(PL_EINVAL, "--swa on: the model declares no sliding window (%s.attention.sliding_window)",
                       c->arch_name);
    if (p->swa == PL_SWA_OFF || w == 0) return 0;
    if (p->kv_window)
        return err_set(PL_EINVAL, "--kv-window cannot be combined with the model's sliding-window attention "
                       "(sliding_window %u, --swa auto|on): SWA already keeps only the last %u tokens' KV; pass "
                       "--swa off to use --kv-window instead", w, w);
    if (p->n_ctx == 0 && p->block_size && p->max_batch) {
        const uint32_t piece = p->max_batch < 512 ? p->max_batch : 512;
        const uint64_t n = (uint64_t)w + p->block_size + piece;
        p->n_ctx = n > 1u << 20 ? 1u << 20 : (uint32_t)n;
    }
    if (p->n_ctx <= w) return 0; /* the window never binds: full attention is the same */
    if (!p->swa_keep_blocks && !p->no_kv_cache && p->n_ctx < w + p->block_size)
        return err_set(PL_EINVAL, "n_ctx (--ctx) %u with sliding-window attention %u: at least the window + one "
                       "KV block (%u), or at most the window (then it never slides); or --swa off",
                       p->n_ctx, w, w + p->block_size);
    *swa = w;
    return 0;
}

/* Checks p, fills its defaults, and gives the runtime's settings. */
static int params_resolve(const model *m, pl_ctx_params *p, rt_params *out)
{
    const model_config *c = &m->cfg;
    uint32_t swa;
    int rc = swa_check(c, p, &swa);
    if (rc) return rc;
    if (p->kv_window && !model_rope_shiftable(m))
        return err_set(PL_EUNSUPPORTED,
                       "kv_window (--kv-window) is not supported for this %s model: its RoPE (YaRN, a cos/sin "
                       "multiplier, LongRoPE or a second base for local layers) cannot re-rotate kept keys yet",
                       c->arch_name);
    if (p->kv_window > 1u << 20 || p->kv_sinks > 1u << 20)
        return err_set(PL_EINVAL, "kv_window (--kv-window) %u / kv_sinks (--kv-sinks) %u too large (at most %u)",
                       p->kv_window, p->kv_sinks, 1u << 20);
    if (p->n_ctx == 0 && p->kv_window && p->block_size) p->n_ctx = win_limit(p); /* the window is the context */
    if (p->n_ctx == 0) p->n_ctx = c->ctx_train < 4096 ? c->ctx_train : 4096;
    if (p->n_threads <= 0) p->n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (p->n_threads <= 0) p->n_threads = 1;
    if (p->max_seqs == 0 || p->max_seqs > RT_STEP_MAX_ITEMS)
        return err_set(PL_EINVAL, "max_seqs %u out of range 1..%d", p->max_seqs, RT_STEP_MAX_ITEMS);
    if (p->block_size == 0 || p->block_size > 4096)
        return err_set(PL_EINVAL, "block_size %u out of range 1..4096", p->block_size);
    if (p->max_batch == 0 || p->max_batch > 65536)
        return err_set(PL_EINVAL, "max_batch %u out of range 1..65536", p->max_batch);
    if (p->n_ctx > 1u << 20) return err_set(PL_EINVAL, "n_ctx %u too large", p->n_ctx);
    if (p->n_threads > 256) return err_set(PL_EINVAL, "threads %d out of range 1..256", p->n_threads);
    if ((unsigned)p->kv_dtype >= PL_KV_DTYPE_COUNT) return err_set(PL_EINVAL, "unknown KV dtype %d", (int)p->kv_dtype);
    if (p->layout != PL_KV_PAGED && p->layout != PL_KV_STATIC)
        return err_set(PL_EINVAL, "unknown KV layout %d", (int)p->layout);
    rc = model_kv_dtype_check(m, (kv_dtype)p->kv_dtype);
    if (!rc) rc = window_check(p, c->mla.kv_lora_rank > 0);
    if (rc) return rc;
    *out = (rt_params){
        .n_ctx = p->n_ctx,
        .max_seqs = p->max_seqs,
        .max_batch = p->max_batch,
        .block_size = p->block_size,
        .kv_mem = p->kv_mem,
        .n_threads = p->n_threads,
        .dtype = (kv_dtype)p->kv_dtype,
        .layout = p->layout == PL_KV_STATIC ? KV_SEQ_STATIC : KV_SEQ_PAGED,
        .no_kv_cache = p->no_kv_cache,
        .kv_window = p->kv_window,
        .kv_sinks = p->kv_sinks,
        .swa = swa,
        .swa_keep_blocks = p->swa_keep_blocks,
        .layer_groups = !p->kv_one_table,
    };
    return 0;
}

int pl_ctx_new(pl_ctx **out, pl_model *pm, const pl_ctx_params *params)
{
    if (!out || !pm || !params) return err_set(PL_EINVAL, "pl_ctx_new: NULL argument");
    const model *m = api_model_get(pm);
    pl_ctx_params p = *params;
    rt_params rp;
    int rc = params_resolve(m, &p, &rp);
    if (!rc) rc = rt_ctx_new(out, m, &rp);
    if (!rc) api_model_mark_used(pm);
    return rc;
}

void pl_ctx_free(pl_ctx *c) { rt_ctx_free(c); }
uint32_t pl_ctx_n_ctx(const pl_ctx *c) { return rt_ctx_params(c)->n_ctx; }
uint32_t pl_ctx_kv_window(const pl_ctx *c) { return rt_ctx_params(c)->kv_window; }
uint32_t pl_ctx_swa(const pl_ctx *c) { return rt_ctx_params(c)->swa; }
bool pl_ctx_unbounded(const pl_ctx *c) { return rt_ctx_slides(c); }

int pl_seq_new(pl_ctx *c, int32_t *out)
{
    if (!out) return err_set(PL_EINVAL, "pl_seq_new: NULL argument");
    return rt_seq_new(c, out);
}

void pl_seq_free(pl_ctx *c, int32_t id) { rt_seq_free(c, id); }
uint32_t pl_seq_len(const pl_ctx *c, int32_t id) { return rt_seq_len(c, id); }
const int32_t *pl_seq_tokens(const pl_ctx *c, int32_t id) { return rt_seq_tokens(c, id); }
uint64_t pl_seq_n_dropped(const pl_ctx *c, int32_t id) { return rt_seq_dropped(c, id); }
int pl_seq_truncate(pl_ctx *c, int32_t id, uint32_t n) { return rt_seq_truncate(c, id, n); }

/* The token array of an append: present, and a count the runtime can hold. */
static int tokens_arg(const char *fn, const int32_t *tokens, size_t n)
{
    if (!tokens && n) return err_set(PL_EINVAL, "%s: NULL tokens", fn);
    if (n > UINT32_MAX) return err_set(PL_ERANGE, "%s: %zu tokens at once (at most %u)", fn, n, UINT32_MAX);
    return 0;
}

int pl_seq_append(pl_ctx *c, int32_t id, const int32_t *tokens, size_t n, float *logits)
{
    int rc = tokens_arg("pl_seq_append", tokens, n);
    return rc ? rc : rt_seq_append(c, id, tokens, (uint32_t)n, logits);
}

int pl_seq_append_all(pl_ctx *c, int32_t id, const int32_t *tokens, size_t n, float *logits)
{
    int rc = tokens_arg("pl_seq_append_all", tokens, n);
    if (!rc && !logits) rc = err_set(PL_EINVAL, "pl_seq_append_all: NULL logits");
    return rc ? rc : rt_seq_append_all(c, id, tokens, (uint32_t)n, logits);
}

int pl_seq_step(pl_ctx *c, const int32_t *seqs, const int32_t *tokens, size_t n, float *logits)
{
    const uint32_t max = rt_ctx_params(c)->max_seqs;
    if (n == 0 || n > max || n > RT_STEP_MAX_ITEMS)
        return err_set(PL_EINVAL, "pl_seq_step: %zu sequences (1..%u)", n, max);
    if (!seqs || !tokens) return err_set(PL_EINVAL, "pl_seq_step: NULL argument");
    rt_item *items = malloc(n * sizeof *items);
    if (!items) return err_set(PL_ENOMEM, "out of memory");
    const size_t nv = rt_ctx_n_vocab(c);
    for (size_t i = 0; i < n; i++) items[i] = (rt_item){.seq = seqs[i], .tokens = &tokens[i], .n = 1, .logits = logits ? logits + i * nv : NULL};
    int rc = rt_step(c, items, (int)n);
    free(items);
    return rc;
}

void pl_ctx_kv_stats(pl_ctx *c, pl_kv_stats *out)
{
    rt_kv_stats r;
    rt_ctx_kv_stats(c, &r);
    const kv_stats *st = &r.kv;
    *out = (pl_kv_stats){
        .block_size = rt_ctx_params(c)->block_size,
        .blocks_total = st->blocks_total,
        .blocks_used = st->blocks_used,
        .blocks_cached = st->blocks_cached,
        .blocks_free = st->blocks_free,
        .bytes_per_token = st->bytes_per_token,
        .block_bytes = st->block_bytes,
        .pool_bytes = st->pool_bytes,
        .tokens = st->tokens,
        .bytes_allocated = st->bytes_allocated,
        .bytes_live = st->bytes_live,
        .bytes_wasted = st->bytes_wasted,
        .utilisation = st->utilisation,
        .stage_bytes_per_seq = r.stage_bytes_per_seq,
        .stage_bytes = r.stage_bytes,
        .layer_groups = r.n_groups,
        .global_bytes = r.n_groups ? r.group_bytes[0] : st->bytes_allocated,
        .local_bytes = r.group_bytes[1],
    };
    _Static_assert(PL_KV_GROUPS_MAX == KV_GROUPS_MAX, "one bound");
    memcpy(out->group_blocks, r.group_blocks, sizeof out->group_blocks);
}

uint64_t pl_seq_kv_bytes(const pl_ctx *c, int32_t id)
{
    const kv_seq *kv = rt_seq_kv(c, id);
    const kv_glocal *lg = rt_seq_kv_local(c, id);
    const kv_groups *g = rt_ctx_groups(c);
    return (kv ? kv_seq_bytes_held(kv) : 0) + (lg ? kv_glocal_bytes(lg, g) : 0);
}
