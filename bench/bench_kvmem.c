/* bench_kvmem.c - `pagellm bench kv-memory`: how many requests of a mixed-
 * length workload run at once in a fixed KV memory, paged against static
 * per-slot reservation, and what share of the allocated KV bytes hold live
 * tokens.
 *
 * Method (the same for both layouts; only ctx.layout differs):
 *   workload   --requests N (64) requests; request i has a prompt of P_i
 *              random token ids and generates exactly O_i tokens (greedy,
 *              ignore_eos), P_i and O_i uniform in [--min-len, --max-len]
 *              drawn from --seed. Prompts are random, so no two requests
 *              share a prefix block: the prefix cache cannot flatter paged
 *              (its token-granular reuse may match a first token by chance;
 *              prefix_hit_tokens says how many).
 *   memory     one KV pool of --kv-mem bytes for both layouts; by default
 *              the room of 8 static slots (8 x slot x bytes per token).
 *   slot       a static sequence reserves n_ctx = 2 x max-len tokens (max
 *              prompt + max output) when it starts, as a server that must
 *              accept any request of the workload has to. Paged sequences
 *              take blocks as they grow, with the same n_ctx as their cap.
 *              If 2 x max-len exceeds the model's declared context, the
 *              lengths are scaled down to fit it. stories260K declares 2048
 *              but was trained on 512-token sequences: bench/run.sh passes
 *              --max-len 256 for it.
 *   engine     all N requests are submitted at once to a real pl_engine
 *              (continuous batching, FCFS admission while the pool has
 *              room, preemption of the newest sequence when growth runs
 *              the pool dry, recompute later). max_seqs = N, so only KV
 *              memory limits concurrency. Tokens are really appended: every
 *              figure below is the engine's own accounting.
 *   per step   after each engine step the engine takes the running
 *              sequences and pl_ctx_kv_stats of that step into its own
 *              sums and peak (pl_engine_metrics: running_peak,
 *              running_steps, kv_*_byte_steps), so every step counts,
 *              however busy the host. The --svg plot's points come from
 *              this thread polling the metrics every ~100 us: a point per
 *              step it sees ("steps_sampled"; a step can be missed when
 *              the poller is descheduled).
 *
 * Reported per layout:
 *   max_concurrent   the most running sequences in any step
 *   mean_concurrent  running sequences averaged over the steps
 *   utilisation      sum(bytes_live) / sum(bytes_allocated) over the
 *                    steps: live tokens' bytes over the bytes of the blocks
 *                    that sequences hold (free and cached-free blocks are
 *                    not "allocated": they are available to anyone)
 *   utilisation at the peak step, preemptions, steps, wall time.
 * The goals: utilisation_paged >= 0.96 and max_concurrent_paged >=
 * 3 x max_concurrent_static.
 *
 * --svg FILE plots the sampled steps of both runs against time: the
 * step's utilisation (bytes_live / bytes_allocated) and its running
 * sequences (bench/svg.h).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "cli.h"
#include "svg.h"

typedef struct {
    const char *model, *kv_dtype, *svg;
    uint64_t kv_mem, seed;
    int requests, min_len, max_len, block_size, threads, batch, slots, timeout_s;
    bool json;
} km_opts;

typedef struct {
    uint32_t max_conc;
    double mean_conc;
    double util, util_peak, pool_fill;
    uint64_t steps, samples, preemptions, generated, prompt_tokens, prefix_hits; /* samples: the plot's points */
    double seconds;
    uint64_t pool_bytes;
    uint32_t blocks_total;
    double *t, *u, *r; /* per sampled step: seconds since the start, utilisation, running (--svg) */
    size_t n_pts, cap_pts;
} km_result;

typedef struct {
    int32_t *prompt;
    uint32_t n_prompt, n_out;
} km_req;

/* ---------------------------------------------------------- workload */

static void km_workload_free(km_req *w, int n)
{
    for (int i = 0; w && i < n; i++) free(w[i].prompt);
    free(w);
}

static km_req *km_workload(const km_opts *o, uint32_t n_vocab)
{
    bench_rng r = {o->seed};
    km_req *w = calloc((size_t)o->requests, sizeof *w);
    for (int i = 0; w && i < o->requests; i++) {
        w[i].n_prompt = bench_rng_range(&r, (uint32_t)o->min_len, (uint32_t)o->max_len);
        w[i].n_out = bench_rng_range(&r, (uint32_t)o->min_len, (uint32_t)o->max_len);
        w[i].prompt = malloc(sizeof(int32_t) * w[i].n_prompt);
        if (!w[i].prompt) {
            km_workload_free(w, i);
            return NULL;
        }
        for (uint32_t j = 0; j < w[i].n_prompt; j++) w[i].prompt[j] = (int32_t)bench_rng_range(&r, 1, n_vocab - 1);
    }
    return w;
}

/* ------------------------------------------------------------ one run */

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Drains pending events; counts finished requests; an ERROR fails the run. */
static int km_drain(pl_request **rq, bool *done, int n, int *n_done)
{
    pl_event ev;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        int rc;
        while ((rc = pl_request_next(rq[i], &ev, 0)) == 1)
            if (ev.kind == PL_EV_ERROR) {
                fprintf(stderr, "pagellm bench kv-memory: request %d failed: %s\n", i, ev.message);
                return -1;
            }
        if (rc == 2) done[i] = true, (*n_done)++;
    }
    return 0;
}

typedef struct {
    uint64_t last_step;
    double t0;
    bool keep; /* record the points (--svg) */
} km_acc;

/* One more point of the series; a failed allocation stops recording (the
 * plot then ends early, which the figures above do not depend on). */
static void km_point(km_result *res, double t, double u, double r)
{
    if (res->n_pts == res->cap_pts) {
        size_t cap = res->cap_pts ? 2 * res->cap_pts : 1024;
        double *nt = realloc(res->t, cap * sizeof *nt);
        if (nt) res->t = nt;
        double *nu = nt ? realloc(res->u, cap * sizeof *nu) : NULL;
        if (nu) res->u = nu;
        double *nr = nu ? realloc(res->r, cap * sizeof *nr) : NULL;
        if (!nr) return;
        res->r = nr;
        res->cap_pts = cap;
    }
    res->t[res->n_pts] = t, res->u[res->n_pts] = u, res->r[res->n_pts] = r;
    res->n_pts++;
}

/* A point of the plot for each new step the poll sees. */
static void km_sample(const pl_engine_metrics *m, km_acc *a, km_result *res)
{
    if (m->steps == a->last_step) return;
    if (a->keep)
        km_point(res, bench_now() - a->t0, m->kv.bytes_allocated ? (double)m->kv.bytes_live / (double)m->kv.bytes_allocated : NAN,
                 m->running);
    a->last_step = m->steps;
    res->samples++;
}

/* The figures: the engine's own sums over every step. */
static void km_figures(const pl_engine_metrics *m, km_result *res)
{
    res->steps = m->steps;
    res->preemptions = m->preemptions;
    res->generated = m->generated_tokens;
    res->prompt_tokens = m->prompt_tokens;
    res->prefix_hits = m->prefix_hit_tokens;
    res->pool_bytes = m->kv.pool_bytes;
    res->blocks_total = m->kv.blocks_total;
    res->max_conc = m->running_peak;
    res->util_peak = m->kv_utilisation_at_peak;
    if (m->steps) {
        res->mean_conc = (double)m->running_steps / (double)m->steps;
        res->pool_fill = m->kv.pool_bytes ? (double)m->kv_allocated_byte_steps / ((double)m->steps * (double)m->kv.pool_bytes) : 0;
    }
    res->util = m->kv_allocated_byte_steps ? (double)m->kv_live_byte_steps / (double)m->kv_allocated_byte_steps : 0;
}

static int km_submit_all(pl_engine *e, const km_req *w, int n, pl_request **rq)
{
    for (int i = 0; i < n; i++) {
        pl_request_params p = {0};
        p.prompt = w[i].prompt;
        p.n_prompt = w[i].n_prompt;
        p.max_tokens = (int32_t)w[i].n_out;
        p.n = 1;
        pl_sampler_params_default(&p.sampling);
        p.sampling.temperature = 0;
        p.ignore_eos = true;
        p.top_logprobs = -1;
        if (pl_engine_submit(e, &p, &rq[i]) != 0) {
            fprintf(stderr, "pagellm bench kv-memory: submit %d: %s\n", i, pl_last_error());
            return -1;
        }
    }
    return 0;
}

static int km_run(pl_model *m, const km_opts *o, const km_req *w, pl_kv_layout layout, uint32_t n_ctx,
                  km_result *res)
{
    memset(res, 0, sizeof *res);
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.n_ctx = n_ctx;
    ep.ctx.max_seqs = (uint32_t)o->requests;
    ep.ctx.kv_mem = o->kv_mem;
    ep.ctx.block_size = (uint32_t)o->block_size;
    ep.ctx.n_threads = o->threads;
    ep.ctx.layout = layout;
    if (pl_kv_dtype_from_name(o->kv_dtype, &ep.ctx.kv_dtype) != 0) return -1;
    ep.max_batch_tokens = (uint32_t)(o->batch > o->requests ? o->batch : o->requests);
    ep.ctx.max_batch = ep.max_batch_tokens;
    ep.max_queue = (uint32_t)o->requests + 1;
    pl_engine *e;
    if (pl_engine_new(&e, m, &ep) != 0) {
        fprintf(stderr, "pagellm bench kv-memory: %s\n", pl_last_error());
        return -1;
    }
    const int n = o->requests;
    pl_request **rq = calloc((size_t)n, sizeof *rq);
    bool *done = calloc((size_t)n, sizeof *done);
    int rc = rq && done ? 0 : -1, n_done = 0;
    pl_engine_metrics mt;
    const double t0 = bench_now(), deadline = t0 + o->timeout_s;
    km_acc acc = {.t0 = t0, .keep = o->svg != NULL};
    if (!rc) rc = km_submit_all(e, w, n, rq);
    for (int spin = 0; !rc && n_done < n; spin++) {
        pl_engine_metrics_get(e, &mt);
        km_sample(&mt, &acc, res);
        /* events pile up per token: drain every ~5 ms, not every poll */
        if (spin % 50 == 0) rc = km_drain(rq, done, n, &n_done);
        if (bench_now() > deadline) {
            fprintf(stderr, "pagellm bench kv-memory: %d of %d requests unfinished after %d s (--timeout)\n",
                    n - n_done, n, o->timeout_s);
            rc = -1;
        }
        sleep_us(100);
    }
    res->seconds = bench_now() - t0;
    pl_engine_metrics_get(e, &mt);
    km_figures(&mt, res);
    for (int i = 0; rq && i < n; i++)
        if (rq[i]) pl_request_free(rq[i]);
    free(rq);
    free(done);
    pl_engine_free(e);
    return rc;
}

/* km_run, again (up to 3 runs) when --svg is asked and the poll saw under
 * a quarter of the steps: a small workload on a busy host can finish
 * while this thread waits for a core (0 of 82 steps seen has happened),
 * which would leave the plot empty. The figures do not depend on it.
 * Said on stderr. */
static int km_run_sampled(pl_model *m, const km_opts *o, const km_req *w, pl_kv_layout layout, uint32_t n_ctx,
                          km_result *res)
{
    int rc = 0;
    for (int attempt = 1; attempt <= 3; attempt++) {
        if (attempt > 1) {
            fprintf(stderr, "pagellm bench kv-memory: the sampler saw %llu of %llu steps: run again (%d of 3)\n",
                    (unsigned long long)res->samples, (unsigned long long)res->steps, attempt);
            free(res->t), free(res->u), free(res->r);
        }
        rc = km_run(m, o, w, layout, n_ctx, res);
        if (rc || !o->svg || 4 * res->samples >= res->steps) break;
    }
    return rc;
}

/* --------------------------------------------------------------- output */

static void km_print_table(const km_opts *o, const char *model, uint32_t slot, double bpt, const km_result *r)
{
    const km_result *p = &r[0], *s = &r[1];
    printf("kv-memory: %s, %d requests, prompt and output lengths uniform in %d..%d (seed %llu)\n", model,
           o->requests, o->min_len, o->max_len, (unsigned long long)o->seed);
    printf("KV pool %.2f MiB = %u blocks of %d tokens (%s, %.1f B/token); a static slot reserves %u tokens\n",
           (double)p->pool_bytes / 1048576.0, p->blocks_total, o->block_size, o->kv_dtype, bpt, slot);
    printf("%-26s %10s %10s\n", "", "paged", "static");
    printf("%-26s %10u %10u   (%.2fx)\n", "max concurrent", p->max_conc, s->max_conc,
           s->max_conc ? (double)p->max_conc / s->max_conc : 0);
    printf("%-26s %10.1f %10.1f\n", "mean concurrent", p->mean_conc, s->mean_conc);
    printf("%-26s %10.3f %10.3f\n", "utilisation (live/alloc)", p->util, s->util);
    printf("%-26s %10.3f %10.3f\n", "utilisation at peak", p->util_peak, s->util_peak);
    printf("%-26s %10.3f %10.3f\n", "pool held by sequences", p->pool_fill, s->pool_fill);
    printf("%-26s %10llu %10llu\n", "preemptions", (unsigned long long)p->preemptions,
           (unsigned long long)s->preemptions);
    printf("%-26s %10llu %10llu\n", "engine steps", (unsigned long long)p->steps, (unsigned long long)s->steps);
    printf("%-26s %10llu %10llu\n", "steps sampled", (unsigned long long)p->samples, (unsigned long long)s->samples);
    printf("%-26s %10.2f %10.2f\n", "seconds", p->seconds, s->seconds);
    printf("%-26s %10.1f %10.1f\n", "generated tok/s", p->seconds > 0 ? (double)p->generated / p->seconds : 0,
           s->seconds > 0 ? (double)s->generated / s->seconds : 0);
    printf("utilisation_paged %.3f  utilisation_static %.3f  max_concurrent_paged %u  max_concurrent_static %u\n",
           p->util, s->util, p->max_conc, s->max_conc);
}

static void km_print_json(const km_opts *o, const char *model, uint32_t slot, double bpt, const km_result *r)
{
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string(model));
    json_object_set_new(j, "requests", json_integer(o->requests));
    json_object_set_new(j, "min_len", json_integer(o->min_len));
    json_object_set_new(j, "max_len", json_integer(o->max_len));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(j, "kv_dtype", json_string(o->kv_dtype));
    json_object_set_new(j, "block_size", json_integer(o->block_size));
    json_object_set_new(j, "bytes_per_token", json_real(bpt));
    json_object_set_new(j, "kv_pool_bytes", json_integer((json_int_t)r[0].pool_bytes));
    json_object_set_new(j, "slot_tokens", json_integer(slot));
    static const char *const names[2] = {"paged", "static"};
    char k[64];
    for (int i = 0; i < 2; i++) {
        const km_result *x = &r[i];
#define KM_SET(field, v)                                        \
    do {                                                        \
        snprintf(k, sizeof k, "%s_%s", field, names[i]);        \
        json_object_set_new(j, k, v);                           \
    } while (0)
        KM_SET("utilisation", json_real(x->util));
        KM_SET("max_concurrent", json_integer(x->max_conc));
        KM_SET("mean_concurrent", json_real(x->mean_conc));
        KM_SET("utilisation_at_peak", json_real(x->util_peak));
        KM_SET("pool_held", json_real(x->pool_fill));
        KM_SET("preemptions", json_integer((json_int_t)x->preemptions));
        KM_SET("steps", json_integer((json_int_t)x->steps));
        KM_SET("steps_sampled", json_integer((json_int_t)x->samples));
        KM_SET("seconds", json_real(x->seconds));
        KM_SET("generated_tokens", json_integer((json_int_t)x->generated));
        KM_SET("prefix_hit_tokens", json_integer((json_int_t)x->prefix_hits));
#undef KM_SET
    }
    json_object_set_new(j, "concurrency_ratio",
                        json_real(r[1].max_conc ? (double)r[0].max_conc / r[1].max_conc : 0));
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* The --svg plot: both layouts' steps over time. */
static int km_svg(const km_opts *o, const char *model, const km_result *r)
{
    char title[256];
    snprintf(title, sizeof title, "kv-memory: %s, %d requests, lengths %d..%d, KV pool %.2f MiB", model, o->requests,
             o->min_len, o->max_len, (double)r[0].pool_bytes / (1 << 20));
    svg_doc *d = svg_open(o->svg, 2, title);
    if (!d) return -1;
    const svg_series u[2] = {{"paged", r[0].t, r[0].u, r[0].n_pts}, {"static", r[1].t, r[1].u, r[1].n_pts}};
    const svg_series c[2] = {{"paged", r[0].t, r[0].r, r[0].n_pts}, {"static", r[1].t, r[1].r, r[1].n_pts}};
    svg_lines(d, 0, "utilisation: live KV bytes / allocated, per engine step", "seconds", "utilisation", u, 2);
    svg_lines(d, 1, "running sequences per engine step", "seconds", "running", c, 2);
    return svg_close(d);
}

/* ---------------------------------------------------------------- command */

static int km_parse(int argc, char **argv, km_opts *o)
{
    *o = (km_opts){.kv_dtype = "f16", .seed = 1, .requests = 64, .min_len = 32, .max_len = 1024, .block_size = 16,
                   .batch = 512, .slots = 8, .timeout_s = 900};
    const cli_opt opts[] = {
        {"model", 'm', CLI_STR, &o->model, 0, 0, "GGUF", "model file (required)"},
        {"kv-mem", 0, CLI_SIZE, &o->kv_mem, 1, 1e15, "BYTES", "KV pool for both layouts (default: --slots static slots)"},
        {"slots", 0, CLI_INT, &o->slots, 1, 4096, "N", "default pool = N static slots (default 8)"},
        {"requests", 'n', CLI_INT, &o->requests, 1, 4096, "N", "requests in the workload (default 64)"},
        {"min-len", 0, CLI_INT, &o->min_len, 1, 1 << 19, "N", "shortest prompt and output (default 32)"},
        {"max-len", 0, CLI_INT, &o->max_len, 1, 1 << 19, "N", "longest prompt and output (default 1024; scaled to the context)"},
        {"seed", 's', CLI_U64, &o->seed, 0, 0, "N", "workload seed (default 1)"},
        {"block-size", 0, CLI_INT, &o->block_size, 1, 4096, "N", "tokens per KV block (default 16)"},
        {"kv-dtype", 0, CLI_STR, &o->kv_dtype, 0, 0, "T", "KV element type (default f16; names as for run --kv-dtype)"},
        {"threads", 't', CLI_INT, &o->threads, 1, 256, "N", "threads (default: one per core)"},
        {"batch", 'b', CLI_INT, &o->batch, 1, 65536, "N", "engine token budget per step (default 512)"},
        {"timeout", 0, CLI_INT, &o->timeout_s, 1, 1 << 20, "S", "give up after S seconds per layout (default 900)"},
        {"json", 0, CLI_FLAG, &o->json, 0, 0, NULL, "one JSON object"},
        {"svg", 0, CLI_STR, &o->svg, 0, 0, "FILE", "plot utilisation and running sequences over time, paged vs static"},
        {0},
    };
    const char *pos[1];
    int np, rc = cli_parse("bench kv-memory", "-m MODEL [--kv-mem BYTES] [--requests N] [--min-len N --max-len N]",
                           opts, argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if (!o->model) { cli_error("bench kv-memory", "missing -m MODEL"); return 2; }
    if (o->min_len > o->max_len) { cli_error("bench kv-memory", "--min-len %d > --max-len %d", o->min_len, o->max_len); return 2; }
    pl_kv_dtype dt;
    if (pl_kv_dtype_from_name(o->kv_dtype, &dt) != 0) { cli_error("bench kv-memory", "bad --kv-dtype: %s", pl_last_error()); return 2; }
    return 0;
}

/* Scales the lengths down when a max-length request would not fit the
 * model's context; keeps the min/max ratio. */
static void km_fit_context(km_opts *o, uint32_t ctx_train)
{
    if (ctx_train == 0 || (uint64_t)2 * o->max_len <= ctx_train) return;
    int old_min = o->min_len, old_max = o->max_len;
    o->max_len = (int)(ctx_train / 2);
    o->min_len = (int)((double)old_min * o->max_len / old_max);
    if (o->min_len < 1) o->min_len = 1;
    fprintf(stderr, "pagellm bench kv-memory: lengths %d..%d scaled to %d..%d to fit the model's context of %u\n",
            old_min, old_max, o->min_len, o->max_len, ctx_train);
}

/* Bytes per token and per block from the file's shape (pl_kv_size_of). */
static int km_kv_size(const char *path, const km_opts *o, pl_kv_size *sz)
{
    pl_file_info fi;
    pl_kv_dtype dt;
    if (pl_file_inspect(path, &fi) != 0 || pl_kv_dtype_from_name(o->kv_dtype, &dt) != 0) return -1;
    pl_kv_shape sh = {fi.n_layers, fi.n_kv_heads, fi.head_dim, (uint32_t)o->block_size};
    return pl_kv_size_of(&sh, dt, sz);
}

int bench_kv_memory(int argc, char **argv)
{
    km_opts o;
    int rc = km_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    pl_model *m;
    if (pl_model_load(&m, o.model) != 0) { cli_error("bench kv-memory", "%s", pl_last_error()); return 1; }
    km_fit_context(&o, pl_model_n_ctx_train(m));
    const uint32_t slot = 2u * (uint32_t)o.max_len;
    const uint32_t slot_blocks = (slot + (uint32_t)o.block_size - 1) / (uint32_t)o.block_size;
    pl_kv_size sz;
    if (km_kv_size(o.model, &o, &sz) != 0) {
        cli_error("bench kv-memory", "%s", pl_last_error());
        pl_model_free(m);
        return 1;
    }
    if (!o.kv_mem) o.kv_mem = (uint64_t)o.slots * slot_blocks * sz.bytes_per_block;
    if (o.kv_mem < (uint64_t)slot_blocks * sz.bytes_per_block) {
        cli_error("bench kv-memory", "--kv-mem %llu holds no static slot of %u tokens (%llu bytes)",
                  (unsigned long long)o.kv_mem, slot, (unsigned long long)slot_blocks * sz.bytes_per_block);
        pl_model_free(m);
        return 2;
    }
    km_req *w = km_workload(&o, pl_model_n_vocab(m));
    km_result res[2];
    memset(res, 0, sizeof res);
    rc = w ? 0 : -1;
    if (!rc) rc = km_run_sampled(m, &o, w, PL_KV_PAGED, slot, &res[0]);
    if (!rc) rc = km_run_sampled(m, &o, w, PL_KV_STATIC, slot, &res[1]);
    km_workload_free(w, o.requests);
    const char *base = strrchr(o.model, '/') ? strrchr(o.model, '/') + 1 : o.model;
    if (!rc) {
        if (o.json) km_print_json(&o, base, slot, sz.bytes_per_token, res);
        else km_print_table(&o, base, slot, sz.bytes_per_token, res);
        if (o.svg && km_svg(&o, base, res) != 0) rc = -1;
    }
    for (int i = 0; i < 2; i++) free(res[i].t), free(res[i].u), free(res[i].r);
    pl_model_free(m);
    return rc ? 1 : 0;
}
