/* bench_tiers.c - `pagellm bench tiers`: time to first token of a long
 * prompt served cold, from the RAM prefix cache, and from a KV tier (the
 * disk, or with --kv-redis a Redis Cluster).
 *
 * Method, through the engine API (what `pagellm serve` runs):
 *   prompt     a shared prefix (BOS, then ids cycling from 100: --prefix-tokens
 *              in all) + a --suffix-tokens random suffix, distinct per request.
 *   cold, RAM  engine A with the tier (--kv-disk DIR, emptied first; or
 *              --kv-redis, whose keys must be new to it): a warm-up request
 *              sharing no block, then the prompt (cold: computed, its blocks
 *              written behind to DIR), then the prefix with another suffix
 *              (a RAM hit). Freeing A writes what is still queued.
 *   tier       per repetition a fresh engine on the tier (empty RAM): warm-up,
 *              then the prefix with a new suffix: its blocks come from the tier.
 *   timing     TTFT = pl_engine_submit to the first TOKEN event (1 token
 *              generated); cached_tokens of each request shows what served it.
 * Printed: ttft_cold_ms, ttft_ram_ms, ttft_tier_ms (median over --reps),
 * tier_read_ms (of that, the time the tier's backend spent in get_many, on
 * its I/O thread; verification and the copy into the pool come on top) and
 * cold / tier.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

typedef struct {
    const char *model, *dir, *redis;
    int prefix_tokens, suffix_tokens, reps, threads, timeout_s;
    bool json;
} bt_opts;

/* One request to its end: *ttft in seconds, *cached its cached_tokens. */
static int bt_request(pl_engine *e, const int32_t *ids, size_t n, const bt_opts *o, double *ttft, uint32_t *cached)
{
    pl_request_params p = {.prompt = ids, .n_prompt = n, .max_tokens = 1, .n = 1, .ignore_eos = true, .top_logprobs = -1};
    pl_sampler_params_default(&p.sampling);
    p.sampling.temperature = 0;
    pl_request *r;
    const double t0 = bench_now();
    if (pl_engine_submit(e, &p, &r) != 0) {
        fprintf(stderr, "pagellm bench tiers: submit: %s\n", pl_last_error());
        return -1;
    }
    pl_event ev;
    int status = 0;
    *ttft = -1;
    for (;;) {
        int rc = pl_request_next(r, &ev, 1000);
        if (rc == 2) break;
        if (rc == 1 && ev.kind == PL_EV_TOKEN && *ttft < 0) *ttft = bench_now() - t0;
        if (rc == 1 && ev.kind == PL_EV_DONE) *cached = ev.cached_tokens;
        if ((rc == 1 && ev.kind == PL_EV_ERROR) || rc < 0 || bench_now() > t0 + o->timeout_s) {
            fprintf(stderr, "pagellm bench tiers: request failed: %s\n", rc == 1 ? ev.message : "timeout");
            status = -1;
            break;
        }
    }
    pl_request_free(r);
    return status || *ttft < 0 ? -1 : 0;
}

static int bt_engine(pl_engine **e, pl_model *m, const bt_opts *o, uint32_t n_ctx)
{
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.n_ctx = n_ctx;
    ep.ctx.max_seqs = 1;
    ep.ctx.n_threads = o->threads;
    ep.kv_disk = o->redis ? NULL : o->dir;
    ep.kv_redis = o->redis;
    ep.kv_tier_timeout_ms = 10000; /* a benchmark measures the tier, it does not give up on it */
    if (pl_engine_new(e, m, &ep) != 0) {
        fprintf(stderr, "pagellm bench tiers: %s\n", pl_last_error());
        return -1;
    }
    return 0;
}

/* The prompt with suffix number k (the prefix stays); a warm-up prompt for k < 0. */
static void bt_prompt(int32_t *ids, const bt_opts *o, int32_t n_vocab, int32_t bos, int k)
{
    bench_rng rng = {(uint64_t)(k + 7) * 1000003u};
    bench_synthetic_prompt(n_vocab, bos, ids, o->prefix_tokens);
    if (k < 0) ids[0] = bos == 5 ? 6 : 5; /* shares no block, nor a first token, with the prefix */
    for (int j = 0; j < o->suffix_tokens; j++)
        ids[o->prefix_tokens + j] = (int32_t)bench_rng_range(&rng, 1, (uint32_t)n_vocab - 1);
}

/* The seconds the engine's tier spent in reads so far (its get histogram's sum). */
static double bt_read_s(pl_engine *e)
{
    pl_engine_metrics mt;
    pl_engine_metrics_get(e, &mt);
    return mt.n_tiers ? mt.tiers[0].get_latency.sum : 0;
}

static int bt_run(pl_model *m, const bt_opts *o, double *cold, double *ram, double *disk, double *read,
                  uint32_t cached[3])
{
    const int32_t n_vocab = (int32_t)pl_model_n_vocab(m), bos = pl_vocab_bos(pl_model_vocab(m));
    const size_t n = (size_t)o->prefix_tokens + (size_t)o->suffix_tokens;
    int32_t *ids = malloc(n * sizeof *ids);
    pl_engine *e = NULL;
    double t;
    uint32_t c;
    int rc = ids ? bt_engine(&e, m, o, (uint32_t)n + 1) : -1;
    if (!rc) bt_prompt(ids, o, n_vocab, bos, -1), rc = bt_request(e, ids, (size_t)o->suffix_tokens + 16, o, &t, &c);
    if (!rc) bt_prompt(ids, o, n_vocab, bos, 0), rc = bt_request(e, ids, n, o, cold, &cached[0]);
    if (!rc) bt_prompt(ids, o, n_vocab, bos, 1), rc = bt_request(e, ids, n, o, ram, &cached[1]);
    pl_engine_free(e);
    for (int r = 0; !rc && r < o->reps; r++) {
        rc = bt_engine(&e, m, o, (uint32_t)n + 1);
        if (!rc) bt_prompt(ids, o, n_vocab, bos, -2 - r), rc = bt_request(e, ids, (size_t)o->suffix_tokens + 16, o, &t, &c);
        double r0 = rc ? 0 : bt_read_s(e);
        if (!rc) bt_prompt(ids, o, n_vocab, bos, 2 + r), rc = bt_request(e, ids, n, o, &disk[r], &cached[2]);
        if (!rc) read[r] = bt_read_s(e) - r0;
        pl_engine_free(e);
    }
    free(ids);
    return rc;
}

static int bt_parse(int argc, char **argv, bt_opts *o)
{
    *o = (bt_opts){.prefix_tokens = 2000, .suffix_tokens = 16, .reps = 3, .timeout_s = 600};
    const cli_opt opts[] = {
        {"model", 'm', CLI_STR, &o->model, 0, 0, "GGUF", "model file (required)"},
        {"prefix-tokens", 0, CLI_INT, &o->prefix_tokens, 32, 1 << 20, "N", "shared prefix length, BOS included (default 2000)"},
        {"suffix-tokens", 0, CLI_INT, &o->suffix_tokens, 1, 1 << 16, "N", "distinct suffix per request (default 16)"},
        {"reps", 0, CLI_INT, &o->reps, 1, 100, "N", "disk hits, each from a fresh engine (default 3)"},
        {"threads", 't', CLI_INT, &o->threads, 1, 256, "N", "threads (default: one per core)"},
        {"kv-disk", 0, CLI_STR, &o->dir, 0, 0, "DIR", "the disk tier's directory, emptied first (default: a temporary one)"},
        {"kv-redis", 0, CLI_STR, &o->redis, 0, 0, "HOST:PORT[,...]", "measure a Redis Cluster tier instead of the disk (flush it first)"},
        {"timeout", 0, CLI_INT, &o->timeout_s, 1, 1 << 20, "S", "give up on a request after S seconds (default 600)"},
        {"json", 0, CLI_FLAG, &o->json, 0, 0, NULL, "one JSON object"},
        {0},
    };
    const char *pos[1];
    int np, rc = cli_parse("bench tiers", "-m MODEL [--prefix-tokens N] [--kv-disk DIR]", opts, argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if (!o->model) { cli_error("bench tiers", "missing -m MODEL"); return 2; }
    return 0;
}

/* Empties (or makes) the tier directory: the cold request must be cold. */
static int bt_fresh_dir(const char *dir)
{
    char cmd[4200];
    if (strchr(dir, '\'')) return -1;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    return system(cmd) == 0 ? 0 : -1;
}

int bench_tiers(int argc, char **argv)
{
    bt_opts o;
    int rc = bt_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char tmp[64] = "";
    if (!o.dir) {
        snprintf(tmp, sizeof tmp, "/tmp/pagellm-bench-tiers-%d", (int)getpid());
        o.dir = tmp;
    }
    if (!o.redis && bt_fresh_dir(o.dir)) { cli_error("bench tiers", "cannot empty %s", o.dir); return 1; }
    pl_model *m;
    if (pl_model_load(&m, o.model) != 0) { cli_error("bench tiers", "%s", pl_last_error()); return 1; }
    const uint32_t train = pl_model_n_ctx_train(m);
    if (train && (uint32_t)(o.prefix_tokens + o.suffix_tokens + 1) > train) {
        o.prefix_tokens = (int)train - o.suffix_tokens - 1;
        fprintf(stderr, "pagellm bench tiers: prefix cut to %d tokens to fit the model's context of %u\n", o.prefix_tokens, train);
    }
    double cold = 0, ram = 0, *disk = calloc((size_t)o.reps, sizeof *disk), *read = calloc((size_t)o.reps, sizeof *read);
    uint32_t cached[3] = {0};
    rc = disk && read ? bt_run(m, &o, &cold, &ram, disk, read, cached) : -1;
    const double d = disk ? bench_median(disk, (size_t)o.reps) * 1e3 : 0, rd = read ? bench_median(read, (size_t)o.reps) * 1e3 : 0;
    const char *base = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model, *tier = o.redis ? "redis" : "disk";
    if (!rc && o.json)
        printf("{\"model\":\"%s\",\"tier\":\"%s\",\"prefix_tokens\":%d,\"suffix_tokens\":%d,\"reps\":%d,"
               "\"ttft_cold_ms\":%.3f,\"ttft_ram_ms\":%.3f,\"ttft_tier_ms\":%.3f,\"tier_read_ms\":%.3f,\"cached_cold\":%u,"
               "\"cached_ram\":%u,\"cached_tier\":%u}\n",
               base, tier, o.prefix_tokens, o.suffix_tokens, o.reps, cold * 1e3, ram * 1e3, d, rd, cached[0], cached[1],
               cached[2]);
    else if (!rc)
        printf("tiers: %s, prefix %d tokens + %d-token suffixes, tier %s\n"
               "ttft_cold_ms %.2f (cached %u)  ttft_ram_ms %.2f (cached %u)  ttft_tier_ms %.2f (cached %u, median of %d; "
               "tier reads %.2f ms)  cold/tier %.1fx\n",
               base, o.prefix_tokens, o.suffix_tokens, tier, cold * 1e3, cached[0], ram * 1e3, cached[1], d, cached[2],
               o.reps, rd, d > 0 ? cold * 1e3 / d : 0);
    free(disk);
    free(read);
    pl_model_free(m);
    if (tmp[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd)) {}
    }
    return rc ? 1 : 0;
}
