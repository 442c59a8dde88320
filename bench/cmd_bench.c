/* cmd_bench.c - `pagellm bench`: measurements that are not tests.
 *
 *   bench gen        prefill and decode tokens/s on a synthetic prompt of N
 *                    ids (BOS, then ids cycling from 100: the same prompt
 *                    that llama.cpp's peer-bench -np N builds, so that no
 *                    tokenizer difference enters the comparison); with
 *                    --seqs B, B sequences of that prompt decoded together
 *                    by the engine (one forward pass per step for all B),
 *                    as peer-bench -b B
 *   bench cache      time per decoded token with and without the KV cache
 *                    at several positions: O(n) against O(n^2), as a table
 *                    and an SVG plot
 *   bench kv-memory  paged vs static KV in one memory (bench_kvmem.c)
 *   bench prefix     TTFT cold vs prefix-cache hit (bench_prefix.c)
 *   bench serve      streaming clients against `pagellm serve`, beside the
 *                    peer's batched decode (bench_serve.c)
 *   bench kv-dtype   decode tokens/s at a depth for each KV dtype against
 *                    f16 (bench_kvdtype.c)
 *   bench speed      the speed table vs the peer, roofline, RSS (bench_speed.c)
 *   bench tiers      TTFT cold vs RAM hit vs disk-tier hit (bench_tiers.c)
 *   bench soak       many streaming clients for a while in a small KV pool,
 *                    some disconnecting: errors, latency, KV blocks back to
 *                    0, RSS flat; exit 1 if a check fails (bench_soak.c)
 * bench/run.sh runs these side by side with the llama.cpp peer. Every
 * benchmark prints a table, or JSON with --json.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"
#include "commands.h"
#include "gen_opts.h"
#include "generate.h"

static int32_t argmax(const float *l, uint32_t n)
{
    int32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = (int32_t)i;
    return b;
}

static void synthetic_prompt(const pl_model *m, int32_t *ids, int n)
{
    bench_synthetic_prompt((int32_t)pl_model_n_vocab(m), pl_vocab_bos(pl_model_vocab(m)), ids, n);
}

/* Prefill n_prompt ids, then n_gen greedy steps; returns the rates. */
static int bench_once(pl_model *m, pl_ctx *c, int n_prompt, int n_gen, double *pp, double *tg)
{
    int32_t *ids = malloc(sizeof *ids * (size_t)n_prompt), seq;
    float *logits = malloc(sizeof(float) * pl_model_n_vocab(m));
    synthetic_prompt(m, ids, n_prompt);
    int rc = pl_seq_new(c, &seq);
    double t0 = now_seconds();
    if (!rc) rc = pl_seq_append(c, seq, ids, (size_t)n_prompt, logits);
    double t1 = now_seconds();
    for (int g = 1; !rc && g < n_gen; g++) {
        int32_t t = argmax(logits, pl_model_n_vocab(m));
        rc = pl_seq_append(c, seq, &t, 1, logits);
    }
    double t2 = now_seconds();
    if (!rc) pl_seq_free(c, seq);
    *pp = n_prompt / (t1 - t0);
    *tg = n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0;
    free(ids);
    free(logits);
    return rc;
}

/* B sequences together through the engine (continuous batching): B
 * requests of the same prompt, greedy, n_gen tokens each, prefix cache off
 * so that every prompt is computed. Prefill rate: B * n_prompt over the time
 * until every request has its first token. Decode rate: tokens that arrive
 * after that moment (all B sequences then decode in every step) over the
 * time to the last one; as peer-bench -b B counts B * (n_gen - 1) over its
 * decode loop. */
static int bench_seqs_once(pl_model *m, const gen_opts *g, int n_prompt, int n_gen, int B, double *pp, double *tg)
{
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    int rc = gen_opts_ctx_params("bench gen", g, &ep.ctx);
    if (rc) return rc;
    ep.ctx.max_seqs = (uint32_t)B;
    ep.max_batch_tokens = (uint32_t)g->batch;
    ep.prefix_cache = false;
    pl_engine *e;
    if (pl_engine_new(&e, m, &ep) != 0) return -1;
    int32_t *ids = malloc(sizeof *ids * (size_t)n_prompt);
    pl_request **r = calloc((size_t)B, sizeof *r);
    double *stamp = malloc(sizeof(double) * (size_t)B * (size_t)n_gen);
    int *got = calloc((size_t)B, sizeof *got), *ended = calloc((size_t)B, sizeof *ended);
    rc = ids && r && stamp && got && ended ? 0 : -1;
    if (!rc) synthetic_prompt(m, ids, n_prompt);
    pl_request_params p = {0};
    p.prompt = ids;
    p.n_prompt = (size_t)n_prompt;
    p.max_tokens = n_gen;
    p.n = 1;
    pl_sampler_params_default(&p.sampling);
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    p.top_logprobs = -1;
    const double t0 = now_seconds();
    for (int i = 0; i < B && !rc; i++) rc = pl_engine_submit(e, &p, &r[i]);
    /* One thread reads every request's events, stamping each token: it
     * sleeps in the first unfinished request (they advance in lockstep, one
     * token per step), then drains the others without waiting, so that it
     * takes no CPU from the engine while a step runs. */
    for (int left = B; !rc && left > 0;) {
        int first = 0;
        while (ended[first]) first++;
        for (int i = first; i < B && !rc; i++) {
            pl_event ev;
            int k;
            while (!ended[i] && (k = pl_request_next(r[i], &ev, i == first ? 10 : 0)) != 0) {
                if (k == 2) { ended[i] = 1; left--; break; }
                if (ev.kind == PL_EV_ERROR) {
                    fprintf(stderr, "pagellm bench gen: request failed: %s\n", ev.message);
                    rc = -1;
                    break;
                }
                if (ev.kind == PL_EV_TOKEN && got[i] < n_gen) stamp[(size_t)i * n_gen + got[i]++] = now_seconds();
            }
        }
    }
    if (!rc) {
        double all_first = 0, end = 0;
        for (int i = 0; i < B; i++) {
            if (got[i] < 1) { rc = -1; break; }
            all_first = stamp[(size_t)i * n_gen] > all_first ? stamp[(size_t)i * n_gen] : all_first;
            end = stamp[(size_t)i * n_gen + got[i] - 1] > end ? stamp[(size_t)i * n_gen + got[i] - 1] : end;
        }
        long after = 0;
        for (int i = 0; i < B && !rc; i++)
            for (int k = 0; k < got[i]; k++) after += stamp[(size_t)i * n_gen + k] > all_first;
        *pp = (double)B * n_prompt / (all_first - t0);
        *tg = end > all_first ? (double)after / (end - all_first) : 0;
    }
    for (int i = 0; i < B; i++)
        if (r && r[i]) pl_request_free(r[i]);
    pl_engine_free(e);
    free(ids);
    free(r);
    free(stamp);
    free(got);
    free(ended);
    return rc;
}

static int bench_gen(int argc, char **argv)
{
    gen_opts g;
    gen_opts_default(&g);
    int np = 512, ng = 128, reps = 1, seqs = 1;
    bool json = false;
    cli_opt opts[32];
    int n = 0;
    gen_opts_table(&g, opts, &n);
    opts[n++] = (cli_opt){"n-prompt", 0, CLI_INT, &np, 1, 1 << 20, "N", "prompt tokens (default 512)"};
    opts[n++] = (cli_opt){"n-gen", 0, CLI_INT, &ng, 1, 1 << 20, "N", "generated tokens (default 128)"};
    opts[n++] = (cli_opt){"reps", 0, CLI_INT, &reps, 1, 100, "N", "repetitions; the median is reported (default 1)"};
    opts[n++] = (cli_opt){"seqs", 0, CLI_INT, &seqs, 1, 256, "B",
                          "sequences decoded together through the engine, as peer-bench -b B (default 1)"};
    opts[n++] = (cli_opt){"json", 0, CLI_FLAG, &json, 0, 0, NULL, "one JSON line"};
    opts[n] = (cli_opt){0};
    const char *pos[1];
    int npos, rc = cli_parse("bench gen", "-m MODEL [--n-prompt N] [--n-gen N]", opts, argc, argv, pos, 0, &npos);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (!g.model) { cli_error("bench gen", "missing -m MODEL"); return 2; }
    if (!g.ctx) g.ctx = np + ng + 8;
    pl_model *m;
    pl_ctx *c = NULL;
    double pp[100], tg[100];
    if (seqs > 1) {
        if (pl_model_load(&m, g.model) != 0) { cli_error("bench gen", "%s", pl_last_error()); return 1; }
        for (int r = 0; r < reps && !rc; r++) rc = bench_seqs_once(m, &g, np, ng, seqs, &pp[r], &tg[r]);
        if (rc == 2) { pl_model_free(m); return 2; }
    } else {
        if ((rc = gen_opts_open("bench gen", &g, &m, &c))) return rc;
        for (int r = 0; r < reps && !rc; r++) rc = bench_once(m, c, np, ng, &pp[r], &tg[r]);
    }
    if (rc) { cli_error("bench gen", "%s", pl_last_error()); pl_ctx_free(c); pl_model_free(m); return 1; }
    /* median: sort the small arrays */
    for (int i = 0; i < reps; i++)
        for (int j = i + 1; j < reps; j++) {
            if (pp[j] < pp[i]) { double t = pp[i]; pp[i] = pp[j]; pp[j] = t; }
            if (tg[j] < tg[i]) { double t = tg[i]; tg[i] = tg[j]; tg[j] = t; }
        }
    if (json)
        printf("{\"model\":\"%s\",\"n_prompt\":%d,\"n_gen\":%d,\"seqs\":%d,\"prefill_tok_s\":%.2f,\"decode_tok_s\":%.2f}\n",
               g.model, np, ng, seqs, pp[reps / 2], tg[reps / 2]);
    else
        printf("prefill %d tokens x %d: %.1f tok/s; decode %d tokens x %d: %.1f tok/s\n", np, seqs, pp[reps / 2], ng, seqs,
               tg[reps / 2]);
    pl_ctx_free(c);
    pl_model_free(m);
    return 0;
}

/* Seconds per decode step at position pos, with or without the cache. */
static int step_time(pl_model *m, pl_ctx *c, int pos, int steps, double *sec)
{
    int32_t *ids = malloc(sizeof *ids * (size_t)(pos + steps)), seq;
    float *logits = malloc(sizeof(float) * pl_model_n_vocab(m));
    synthetic_prompt(m, ids, pos + steps);
    int rc = pl_seq_new(c, &seq);
    if (!rc) rc = pl_seq_append(c, seq, ids, (size_t)pos, logits);
    double t0 = now_seconds();
    for (int s = 0; !rc && s < steps; s++) rc = pl_seq_append(c, seq, ids + pos + s, 1, logits);
    *sec = (now_seconds() - t0) / steps;
    pl_seq_free(c, seq);
    free(ids);
    free(logits);
    return rc;
}

static void write_svg(const char *path, const int *pos, const double *with, const double *without, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    double ymax = 0;
    for (int i = 0; i < n; i++) ymax = without[i] > ymax ? without[i] : ymax;
    const double W = 640, H = 400, L = 70, B = 50, xmax = pos[n - 1];
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' font-family='sans-serif' font-size='12'>\n", W, H);
    fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n<text x='%g' y='20' font-size='14'>ms per decoded token vs position</text>\n", L);
    fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='black'/><line x1='%g' y1='20' x2='%g' y2='%g' stroke='black'/>\n",
            L, H - B, W - 20, H - B, L, L, H - B);
    const char *colors[2] = {"#1f77b4", "#d62728"}, *names[2] = {"with KV cache (O(n))", "no KV cache (O(n^2))"};
    const double *ys[2] = {with, without};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", colors[k]);
        for (int i = 0; i < n; i++)
            fprintf(f, "%.1f,%.1f ", L + (W - 20 - L) * pos[i] / xmax, H - B - (H - B - 30) * ys[k][i] / ymax);
        fprintf(f, "'/>\n<text x='%g' y='%d' fill='%s'>%s</text>\n", L + 10, 40 + 16 * k, colors[k], names[k]);
    }
    for (int i = 0; i < n; i++)
        fprintf(f, "<text x='%.1f' y='%g' text-anchor='middle'>%d</text>\n", L + (W - 20 - L) * pos[i] / xmax, H - B + 16, pos[i]);
    fprintf(f, "<text x='5' y='%g'>%.1f ms</text><text x='5' y='%g'>0</text>\n", 34.0, ymax * 1e3, H - B);
    fprintf(f, "<text x='%g' y='%g' text-anchor='middle'>position (tokens already in context)</text>\n</svg>\n", W / 2, H - 10);
    fclose(f);
}

static int bench_cache(int argc, char **argv)
{
    gen_opts g;
    gen_opts_default(&g);
    const char *svg = NULL, *pos_list = "128,512,1024,2048";
    int steps = 4;
    bool json = false;
    cli_opt opts[32];
    int n = 0;
    gen_opts_table(&g, opts, &n);
    opts[n++] = (cli_opt){"svg", 0, CLI_STR, &svg, 0, 0, "FILE", "write the plot here"};
    opts[n++] = (cli_opt){"steps", 0, CLI_INT, &steps, 1, 1000, "N", "decode steps averaged per point (default 4)"};
    opts[n++] = (cli_opt){"positions", 0, CLI_STR, &pos_list, 0, 0, "LIST", "increasing positions (default 128,512,1024,2048)"};
    opts[n++] = (cli_opt){"json", 0, CLI_FLAG, &json, 0, 0, NULL, "JSON rows"};
    opts[n] = (cli_opt){0};
    const char *pos_s[1];
    int npos, rc = cli_parse("bench cache", "-m MODEL [--svg FILE]", opts, argc, argv, pos_s, 0, &npos);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (!g.model) { cli_error("bench cache", "missing -m MODEL"); return 2; }
    int positions[16], np = 0;
    double with[16], without[16];
    if (bench_parse_ints(pos_list, positions, 16, &np) != 0 || np == 0) {
        cli_error("bench cache", "bad value '%s' for --positions (up to 16 increasing numbers >= 1)", pos_list);
        return 2;
    }
    for (int i = 1; i < np; i++)
        if (positions[i] <= positions[i - 1]) {
            cli_error("bench cache", "--positions must increase: %d after %d", positions[i], positions[i - 1]);
            return 2;
        }
    g.ctx = positions[np - 1] + steps + 8;
    for (int mode = 0; mode < 2 && !rc; mode++) {
        g.no_kv_cache = mode == 1;
        pl_model *m;
        pl_ctx *c;
        if ((rc = gen_opts_open("bench cache", &g, &m, &c))) return rc;
        for (int i = 0; i < np && !rc; i++)
            rc = step_time(m, c, positions[i], mode ? 1 : steps, mode ? &without[i] : &with[i]);
        if (rc) cli_error("bench cache", "%s", pl_last_error());
        pl_ctx_free(c);
        pl_model_free(m);
    }
    if (rc) return 1;
    if (!json) printf("%8s %16s %16s %8s\n", "position", "with cache ms", "no cache ms", "ratio");
    for (int i = 0; i < np; i++) {
        if (json) printf("{\"position\":%d,\"ms_with_cache\":%.3f,\"ms_without_cache\":%.3f}\n", positions[i], with[i] * 1e3, without[i] * 1e3);
        else printf("%8d %16.3f %16.3f %7.1fx\n", positions[i], with[i] * 1e3, without[i] * 1e3, without[i] / with[i]);
    }
    if (svg) write_svg(svg, positions, with, without, np);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } benches[] = {
        {"gen", bench_gen}, {"cache", bench_cache}, {"kv-memory", bench_kv_memory},
        {"prefix", bench_prefix}, {"serve", bench_serve}, {"kv-dtype", bench_kv_dtype},
        {"speed", bench_speed}, {"tiers", bench_tiers}, {"soak", bench_soak},
    };
    for (size_t i = 0; argc >= 2 && i < sizeof benches / sizeof benches[0]; i++)
        if (strcmp(argv[1], benches[i].name) == 0) return benches[i].fn(argc - 1, argv + 1);
    bool help = argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
    fprintf(help ? stdout : stderr,
            "usage: pagellm bench gen|cache|kv-memory|prefix|serve|kv-dtype|speed|tiers|soak [options]   (pagellm bench gen --help)\n"
            "  gen        prefill and decode tokens/s on a synthetic prompt\n"
            "  cache      ms per decoded token with and without the KV cache at positions 128..2048\n"
            "  kv-memory  concurrency and KV utilisation, paged vs static, in one KV memory\n"
            "  prefix     time to first token: cold vs a shared system prompt from the prefix cache\n"
            "  serve      streaming clients against pagellm serve vs llama.cpp's batched decode\n"
            "  kv-dtype   decode tokens/s at depth 2048 for each KV dtype, against f16\n"
            "  speed      pp512, tg128, depth and batched decode vs llama.cpp, roofline, peak RSS\n"
            "  tiers      time to first token of a long prompt: cold vs RAM prefix cache vs disk tier\n"
            "  soak       many streaming clients for a while in a small KV pool: errors, KV back to 0, RSS flat\n");

    if (!help && argc >= 2) fprintf(stderr, "pagellm bench: unknown benchmark '%s'\n", argv[1]);
    return help ? 0 : 2;
}
