/* bench_kvdtype.c - `pagellm bench kv-dtype`: decode speed of one sequence
 * at a given depth for each KV dtype, against f16.
 *
 * Method (the same as llama.cpp's peer-bench -depth D -ng N): the context
 * is filled with D synthetic ids (BOS, then ids cycling from 100, untimed),
 * then N greedy tokens are decoded one at a time and timed; decode tok/s =
 * (N - 1) / time of the steps after the first. Each dtype gets its own
 * context over the same loaded model; --reps repeats the decode part and
 * reports the median. Every dtype the model can hold is measured (an
 * unsupported one gets a row saying why); ratio = tok/s / f16's tok/s.
 * Beside wall time, the process CPU time per decoded token (all threads):
 * on a machine shared with other work it is the steadier figure of what a
 * dtype costs (its "vs f16" is f16's CPU time over this one's, > 1 means
 * cheaper).
 * Bytes per token come from pl_kv_size_of (the formula: scales included);
 * KIVI's per-sequence f16 staging block is shown apart.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "cli.h"

typedef struct {
    pl_kv_dtype dt;
    int ok;
    char why[256];
    double tok_s, cpu_ms, bytes_per_token;
    uint64_t stage_bytes;
} kvd_row;

static int32_t argmax(const float *l, uint32_t n)
{
    int32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = (int32_t)i;
    return b;
}

/* CPU seconds of the whole process (every thread): on a shared machine
 * the work a step costs, which wall time hides behind other processes. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One dtype: fill depth, decode n_gen, reps times; median tok/s. */
static int run_dtype(pl_model *m, kvd_row *r, int depth, int n_gen, int threads, int reps)
{
    pl_ctx_params cp;
    pl_ctx_params_default(&cp);
    cp.n_threads = threads;
    cp.kv_dtype = r->dt;
    cp.n_ctx = (uint32_t)(depth + n_gen + 8);
    pl_ctx *c = NULL;
    if (pl_ctx_new(&c, m, &cp) != 0) {
        snprintf(r->why, sizeof r->why, "%s", pl_last_error());
        return 0;
    }
    const uint32_t nv = pl_model_n_vocab(m);
    int32_t *ids = malloc(sizeof *ids * (size_t)depth);
    float *logits = malloc(sizeof(float) * nv);
    double rate[100], cpu[100];
    int rc = 0;
    bench_synthetic_prompt((int32_t)nv, pl_vocab_bos(pl_model_vocab(m)), ids, depth);
    for (int k = 0; k < reps && !rc; k++) {
        int32_t seq;
        rc = pl_seq_new(c, &seq);
        if (!rc) rc = pl_seq_append(c, seq, ids, (size_t)depth, logits);
        int32_t t = argmax(logits, nv);
        if (!rc) rc = pl_seq_append(c, seq, &t, 1, logits); /* the first step: warm-up, untimed */
        const double t0 = bench_now(), c0 = cpu_now();
        for (int g = 1; !rc && g < n_gen; g++) {
            t = argmax(logits, nv);
            rc = pl_seq_append(c, seq, &t, 1, logits);
        }
        rate[k] = (n_gen - 1) / (bench_now() - t0);
        cpu[k] = 1e3 * (cpu_now() - c0) / (n_gen - 1);
        pl_seq_free(c, seq);
    }
    if (rc) snprintf(r->why, sizeof r->why, "%s", pl_last_error());
    else {
        r->tok_s = bench_median(rate, (size_t)reps);
        r->cpu_ms = bench_median(cpu, (size_t)reps);
    }
    pl_kv_stats st;
    pl_ctx_kv_stats(c, &st);
    r->bytes_per_token = st.bytes_per_token;
    r->stage_bytes = st.stage_bytes_per_seq;
    free(ids);
    free(logits);
    pl_ctx_free(c);
    return rc == 0;
}

int bench_kv_dtype(int argc, char **argv)
{
    const char *model = NULL, *only = NULL;
    int depth = 2048, n_gen = 32, threads = 2, reps = 1;
    bool json = false;
    cli_opt opts[] = {
        {"model", 'm', CLI_STR, &model, 0, 0, "PATH", "GGUF model"},
        {"depth", 0, CLI_INT, &depth, 1, 1 << 20, "N", "tokens in the context before decoding (default 2048)"},
        {"n-gen", 0, CLI_INT, &n_gen, 2, 1 << 20, "N", "tokens decoded (default 32)"},
        {"threads", 't', CLI_INT, &threads, 1, 256, "N", "threads (default 2)"},
        {"reps", 0, CLI_INT, &reps, 1, 100, "N", "repetitions of the decode; the median is reported (default 1)"},
        {"dtypes", 0, CLI_STR, &only, 0, 0, "LIST", "comma-separated KV dtypes (default: all; f16 is always run)"},
        {"json", 0, CLI_FLAG, &json, 0, 0, NULL, "one JSON line per dtype"},
        {0},
    };
    const char *pos[1];
    int npos, rc = cli_parse("bench kv-dtype", "-m MODEL [--depth N] [--n-gen N] [--dtypes LIST]", opts, argc, argv,
                             pos, 0, &npos);
    if (rc == CLI_HELP) return 0;
    if (rc != CLI_OK) return 2;
    if (!model) { cli_error("bench kv-dtype", "missing -m MODEL"); return 2; }
    kvd_row rows[PL_KV_DTYPE_COUNT];
    int n = 0;
    rows[n++] = (kvd_row){.dt = PL_KV_F16};
    for (int t = 0; t < PL_KV_DTYPE_COUNT; t++) {
        if (t == PL_KV_F16) continue;
        if (only) { /* exact names in the comma list */
            const char *name = pl_kv_dtype_name((pl_kv_dtype)t), *p = only;
            const size_t len = strlen(name);
            bool found = false;
            while (p && *p && !found) {
                found = strncmp(p, name, len) == 0 && (p[len] == ',' || p[len] == 0);
                p = strchr(p, ',');
                if (p) p++;
            }
            if (!found) continue;
        }
        rows[n++] = (kvd_row){.dt = (pl_kv_dtype)t};
    }
    if (only) { /* every name must be a dtype */
        char buf[256];
        snprintf(buf, sizeof buf, "%s", only);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            pl_kv_dtype d;
            if (pl_kv_dtype_from_name(tok, &d) != 0) {
                cli_error("bench kv-dtype", "--dtypes: %s", pl_last_error());
                return 2;
            }
        }
    }
    pl_model *m;
    if (pl_model_load(&m, model) != 0) {
        cli_error("bench kv-dtype", "%s", pl_last_error());
        return 1;
    }
    if (!json)
        printf("decode at depth %d, %d tokens, %d threads (%s)\n%-10s %10s %9s %13s %9s %12s %14s\n", depth, n_gen,
               threads, model, "kv dtype", "tok/s", "vs f16", "cpu ms/token", "vs f16", "bytes/token", "stage B/seq");
    int failed = 0;
    for (int i = 0; i < n; i++) {
        kvd_row *r = &rows[i];
        r->ok = run_dtype(m, r, depth, n_gen, threads, reps);
        const char *name = pl_kv_dtype_name(r->dt);
        if (!r->ok) {
            if (i == 0) failed = 1;
            if (json) printf("{\"kv_dtype\":\"%s\",\"error\":\"%s\"}\n", name, r->why);
            else printf("%-10s n/a: %s\n", name, r->why);
            fflush(stdout);
            continue;
        }
        const double ratio = rows[0].ok && rows[0].tok_s > 0 ? r->tok_s / rows[0].tok_s : 0;
        const double cratio = rows[0].ok && r->cpu_ms > 0 ? rows[0].cpu_ms / r->cpu_ms : 0; /* > 1: cheaper */
        if (json)
            printf("{\"kv_dtype\":\"%s\",\"depth\":%d,\"n_gen\":%d,\"threads\":%d,\"decode_tok_s\":%.3f,"
                   "\"vs_f16\":%.4f,\"cpu_ms_per_token\":%.3f,\"cpu_vs_f16\":%.4f,\"bytes_per_token\":%.2f,"
                   "\"stage_bytes_per_seq\":%llu}\n",
                   name, depth, n_gen, threads, r->tok_s, ratio, r->cpu_ms, cratio, r->bytes_per_token,
                   (unsigned long long)r->stage_bytes);
        else
            printf("%-10s %10.2f %8.3fx %13.2f %8.3fx %12.1f %14llu\n", name, r->tok_s, ratio, r->cpu_ms, cratio,
                   r->bytes_per_token, (unsigned long long)r->stage_bytes);
        fflush(stdout);
    }
    pl_model_free(m);
    return failed;
}
