/* bench_prefix.c - `pagellm bench prefix`: time to first token for requests
 * that share a long system prompt, cold (nothing cached) against warm (the
 * prefix cache serves the system prompt's blocks).
 *
 * Method, through the engine API (what `pagellm serve` runs):
 *   prompt     request i = the system prompt (BOS, then ids cycling from 100:
 *              --system-tokens ids in all) + a user suffix of
 *              --suffix-tokens random ids, distinct per request (seeded).
 *   engine     one pl_engine per repetition, prefix cache on (unless
 *              --no-prefix-cache: the baseline, where warm must equal cold),
 *              one sequence at a time, a pool with room for one request.
 *              A warm-up request whose prompt shares no block with the
 *              system prompt runs first, so that first-touch costs (page
 *              faults of the pool and scratch) do not inflate "cold".
 *   timing     requests run one after another; TTFT = from pl_engine_submit
 *              to the first TOKEN event (--max-tokens, default 1, tokens are
 *              generated). Request 0 is cold; requests 1..N-1 are warm.
 *   proof      the DONE event's cached_tokens (prompt tokens served from the
 *              prefix cache, counted by the scheduler at admission) is
 *              reported per request: 0 cold, the system prompt rounded down
 *              to whole blocks when warm.
 * Printed: ttft_cold_ms (median over --reps), ttft_warm_ms (median over
 * every warm request of every repetition), ratio = cold / warm (the
 * issue's goal: >= 20x with a 2,000-token system prompt).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

typedef struct {
    const char *model;
    int system_tokens, suffix_tokens, requests, max_tokens, reps, threads, block_size, timeout_s;
    uint64_t seed;
    bool no_prefix_cache, json;
} pf_opts;

typedef struct {
    int rep, index;
    uint32_t prompt_tokens, cached_tokens;
    double ttft_ms;
} pf_row;

/* Runs one request to its end; *ttft gets the seconds to its first token. */
static int pf_request(pl_engine *e, const int32_t *ids, size_t n, const pf_opts *o, double *ttft, pf_row *row)
{
    pl_request_params p = {0};
    p.prompt = ids;
    p.n_prompt = n;
    p.max_tokens = o->max_tokens;
    p.n = 1;
    pl_sampler_params_default(&p.sampling);
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    p.top_logprobs = -1;
    pl_request *r;
    const double t0 = bench_now(), deadline = t0 + o->timeout_s;
    if (pl_engine_submit(e, &p, &r) != 0) {
        fprintf(stderr, "pagellm bench prefix: submit: %s\n", pl_last_error());
        return -1;
    }
    pl_event ev;
    int status = 0;
    *ttft = -1;
    for (;;) {
        int rc = pl_request_next(r, &ev, 1000);
        if (rc == 2) break; /* ended: every event has been read */
        if (rc == 1 && ev.kind == PL_EV_TOKEN && *ttft < 0) *ttft = bench_now() - t0;
        if (rc == 1 && ev.kind == PL_EV_DONE && row) {
            row->prompt_tokens = ev.prompt_tokens;
            row->cached_tokens = ev.cached_tokens;
        }
        if (rc == 1 && ev.kind == PL_EV_ERROR) {
            fprintf(stderr, "pagellm bench prefix: request failed: %s\n", ev.message);
            status = -1;
            break;
        }
        if (rc < 0 || bench_now() > deadline) {
            fprintf(stderr, "pagellm bench prefix: request did not finish within %d s\n", o->timeout_s);
            status = -1;
            break;
        }
    }
    pl_request_free(r);
    if (!status && *ttft < 0) {
        fprintf(stderr, "pagellm bench prefix: the request produced no token\n");
        status = -1;
    }
    if (row) row->ttft_ms = *ttft * 1e3;
    return status;
}

/* One repetition: a fresh engine, warm-up, cold request, warm requests. */
static int pf_rep(pl_model *m, const pf_opts *o, int rep, uint32_t n_ctx, pf_row *rows)
{
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.n_ctx = n_ctx;
    ep.ctx.max_seqs = 1;
    ep.ctx.block_size = (uint32_t)o->block_size;
    ep.ctx.n_threads = o->threads;
    ep.prefix_cache = !o->no_prefix_cache;
    pl_engine *e;
    if (pl_engine_new(&e, m, &ep) != 0) {
        fprintf(stderr, "pagellm bench prefix: %s\n", pl_last_error());
        return -1;
    }
    const int32_t n_vocab = (int32_t)pl_model_n_vocab(m), bos = pl_vocab_bos(pl_model_vocab(m));
    const size_t n = (size_t)o->system_tokens + (size_t)o->suffix_tokens;
    int32_t *ids = malloc(sizeof *ids * n);
    bench_rng rng = {o->seed + (uint64_t)rep * 1000003u};
    int rc = ids ? 0 : -1;
    double t;
    if (!rc) {
        /* warm-up: random ids whose first differs from the system prompt's, so no block is shared */
        const int nw = o->suffix_tokens + 16;
        for (int i = 0; i < nw; i++) ids[i] = (int32_t)bench_rng_range(&rng, 1, (uint32_t)n_vocab - 1);
        if (ids[0] == (bos >= 0 ? bos : 0)) ids[0] = ids[0] == 1 ? 2 : 1;
        rc = pf_request(e, ids, (size_t)nw, o, &t, NULL);
    }
    if (ids) bench_synthetic_prompt(n_vocab, bos, ids, o->system_tokens);
    for (int i = 0; !rc && i < o->requests; i++) {
        for (int j = 0; j < o->suffix_tokens; j++)
            ids[o->system_tokens + j] = (int32_t)bench_rng_range(&rng, 1, (uint32_t)n_vocab - 1);
        rows[i] = (pf_row){.rep = rep, .index = i};
        rc = pf_request(e, ids, n, o, &t, &rows[i]);
    }
    free(ids);
    pl_engine_free(e);
    return rc;
}

static void pf_report(const pf_opts *o, const char *model, const pf_row *rows, int n_rows)
{
    double *cold = malloc(sizeof(double) * (size_t)n_rows), *warm = malloc(sizeof(double) * (size_t)n_rows);
    double *cw = malloc(sizeof(double) * (size_t)n_rows);
    if (!cold || !warm || !cw) { free(cold); free(warm); free(cw); return; }
    size_t nc = 0, nw = 0;
    uint32_t cached_cold = 0, cached_warm_min = UINT32_MAX;
    for (int i = 0; i < n_rows; i++) {
        if (rows[i].index == 0) cold[nc++] = rows[i].ttft_ms, cached_cold += rows[i].cached_tokens;
        else {
            cw[nw] = rows[i].cached_tokens;
            warm[nw++] = rows[i].ttft_ms;
            if (rows[i].cached_tokens < cached_warm_min) cached_warm_min = rows[i].cached_tokens;
        }
    }
    if (!nw) cached_warm_min = 0;
    const double tc = bench_median(cold, nc), tw = bench_median(warm, nw), ratio = tw > 0 ? tc / tw : 0;
    const double cached_warm = bench_median(cw, nw);
    const uint32_t prompt = n_rows ? rows[0].prompt_tokens : 0;
    if (o->json) {
        json_t *j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:b, s:i, s:f, s:f, s:f, s:i, s:i, s:i}", "model", model,
                              "system_tokens", o->system_tokens, "suffix_tokens", o->suffix_tokens, "requests",
                              o->requests, "reps", o->reps, "max_tokens", o->max_tokens, "prefix_cache",
                              !o->no_prefix_cache, "prompt_tokens", (int)prompt, "ttft_cold_ms", tc, "ttft_warm_ms", tw,
                              "ratio", ratio, "cached_tokens_cold", (int)cached_cold, "cached_tokens_warm", (int)cached_warm,
                              "cached_tokens_warm_min", (int)cached_warm_min);
        json_t *a = json_array();
        for (int i = 0; i < n_rows; i++)
            json_array_append_new(a, json_pack("{s:i, s:i, s:i, s:i, s:f}", "rep", rows[i].rep, "request", rows[i].index,
                                               "prompt_tokens", (int)rows[i].prompt_tokens, "cached_tokens",
                                               (int)rows[i].cached_tokens, "ttft_ms", rows[i].ttft_ms));
        json_object_set_new(j, "rows", a);
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        if (s) printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("prefix: %s, system prompt %d tokens + %d-token user suffixes, %d requests x %d rep(s)%s\n", model,
               o->system_tokens, o->suffix_tokens, o->requests, o->reps, o->no_prefix_cache ? ", prefix cache OFF" : "");
        printf("%4s %8s %8s %8s %10s\n", "rep", "request", "prompt", "cached", "ttft ms");
        for (int i = 0; i < n_rows; i++)
            printf("%4d %8d %8u %8u %10.2f%s\n", rows[i].rep, rows[i].index, rows[i].prompt_tokens,
                   rows[i].cached_tokens, rows[i].ttft_ms, rows[i].index == 0 ? "  cold" : "");
        printf("ttft_cold_ms %.2f  ttft_warm_ms %.2f (median of %zu)  ratio %.1fx  cached tokens warm %.0f (cold %u)\n",
               tc, tw, nw, ratio, cached_warm, cached_cold);
    }
    free(cold);
    free(warm);
    free(cw);
}

static int pf_parse(int argc, char **argv, pf_opts *o)
{
    *o = (pf_opts){.system_tokens = 2000, .suffix_tokens = 16, .requests = 8, .max_tokens = 1, .reps = 1,
                   .block_size = 16, .timeout_s = 600, .seed = 1};
    const cli_opt opts[] = {
        {"model", 'm', CLI_STR, &o->model, 0, 0, "GGUF", "model file (required)"},
        {"system-tokens", 0, CLI_INT, &o->system_tokens, 1, 1 << 20, "N", "shared system prompt length, BOS included (default 2000)"},
        {"suffix-tokens", 0, CLI_INT, &o->suffix_tokens, 1, 1 << 16, "N", "distinct user suffix per request (default 16)"},
        {"requests", 'n', CLI_INT, &o->requests, 2, 4096, "N", "requests, the first cold (default 8)"},
        {"max-tokens", 0, CLI_INT, &o->max_tokens, 1, 1 << 16, "N", "tokens generated per request (default 1)"},
        {"reps", 0, CLI_INT, &o->reps, 1, 100, "N", "repetitions, each with a fresh engine (default 1)"},
        {"threads", 't', CLI_INT, &o->threads, 1, 256, "N", "threads (default: one per core)"},
        {"block-size", 0, CLI_INT, &o->block_size, 1, 4096, "N", "tokens per KV block (default 16)"},
        {"seed", 's', CLI_U64, &o->seed, 0, 0, "N", "suffix seed (default 1)"},
        {"no-prefix-cache", 0, CLI_FLAG, &o->no_prefix_cache, 0, 0, NULL, "baseline: the engine without its prefix cache"},
        {"timeout", 0, CLI_INT, &o->timeout_s, 1, 1 << 20, "S", "give up on a request after S seconds (default 600)"},
        {"json", 0, CLI_FLAG, &o->json, 0, 0, NULL, "one JSON object"},
        {0},
    };
    const char *pos[1];
    int np, rc = cli_parse("bench prefix", "-m MODEL [--system-tokens N] [--requests N]", opts, argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if (!o->model) { cli_error("bench prefix", "missing -m MODEL"); return 2; }
    return 0;
}

int bench_prefix(int argc, char **argv)
{
    pf_opts o;
    int rc = pf_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    pl_model *m;
    if (pl_model_load(&m, o.model) != 0) { cli_error("bench prefix", "%s", pl_last_error()); return 1; }
    const uint32_t train = pl_model_n_ctx_train(m);
    uint64_t need = (uint64_t)o.system_tokens + (uint64_t)o.suffix_tokens + (uint64_t)o.max_tokens;
    if (train && need > train) {
        int cut = (int)train - o.suffix_tokens - o.max_tokens;
        if (cut < 1) {
            cli_error("bench prefix", "the model's context of %u tokens cannot hold a %d-token suffix and %d generated",
                      train, o.suffix_tokens, o.max_tokens);
            pl_model_free(m);
            return 2;
        }
        fprintf(stderr, "pagellm bench prefix: system prompt cut from %d to %d tokens to fit the model's context of %u\n",
                o.system_tokens, cut, train);
        o.system_tokens = cut;
        need = train;
    }
    const int n_rows = o.requests * o.reps;
    pf_row *rows = calloc((size_t)n_rows, sizeof *rows);
    rc = rows ? 0 : -1;
    for (int r = 0; !rc && r < o.reps; r++) rc = pf_rep(m, &o, r, (uint32_t)need, rows + (size_t)r * o.requests);
    const char *base = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model;
    if (!rc) pf_report(&o, base, rows, n_rows);
    free(rows);
    pl_model_free(m);
    return rc ? 1 : 0;
}
