/* bench_speed.c - `pagellm bench speed`: the speed table. pagellm and
 * llama.cpp's peer-bench on the same models, in the same run, alternately,
 * with the decode roofline of this machine beside them, and the peak RSS
 * of `pagellm run` against the peer's.
 *
 * Models (--models): SHAPE:TYPE items are made once under --dir (default
 * /tmp/pagellm-bench) as SHAPE-TYPE.gguf, the names bench/run.sh uses:
 * pl_synth(shape, seed 1, f16) then pl_quantize(f16 -> TYPE); each file is
 * written under a temporary name and renamed, so a file that exists is
 * whole and is reused. An item holding '/' or ending in .gguf is a file.
 *
 * Tests (--tests), each mirroring one peer-bench command (peer/README.md):
 *   pp512        prefill of a 512-id prompt (BOS, ids cycling from 100)
 *   tg128        127 greedy decode steps after that prompt: the same run,
 *                as the peer's `-np 512 -ng 128` (llama-bench's tg128
 *                starts from an empty cache instead)
 *   tg128@d2048  a 2048-id prompt (untimed), then 127 timed decode steps
 *                at positions 2048..2174: the peer's `-np 2048 -ng 128`.
 *                (Its `-np 1 -depth 2048` aborts: the depth fill goes in one
 *                batch, larger than its n_batch of max(np, 512).)
 *   tg128x8      8 sequences each prefilled with a 128-id prompt (untimed),
 *                then 127 steps decoding all 8 in one forward pass
 *                (pl_seq_step); tok/s counts all 8: `-np 128 -ng 128 -b 8`.
 *                Our 8 prompts differ (offset ids) so that the prefix cache
 *                shares nothing: llama.cpp keeps 8 separate copies too.
 *   tg32@dN      long contexts, for each KV dtype of --kv-dtypes (default
 *                f16): an N-id prompt (untimed), then 31 timed decode
 *                steps; the peer's `-np N -ng 32 -fa 1 -ctk T -ctv T` (its
 *                flash attention, as its quantized KV needs; KV dtypes it
 *                has: f16, q8_0, q4_0). Roofline bytes: the weights + the
 *                dtype's KV bytes at depth N + 16.
 *   tg32xB@dN    B (2..8) sequences at depth N decoding together, for each
 *                KV dtype: B N-id prompts of their own (offset ids, as
 *                tg128x8), untimed, then 31 steps decoding all B in one
 *                forward pass; tok/s counts all B. The peer's `-np N -ng 32
 *                -b B -fa 1 -ctk T -ctv T` (its one unified cache: each
 *                sequence's attention spans every sequence's cells, masked).
 *                Roofline bytes: the weights + B x the KV at depth N + 16.
 *   tg32@dN+dM   sequences at depths of their own (2..8 of them, e.g.
 *                tg32@d12288+d512: one long conversation beside a short
 *                one) decoding together, as tg32xB@dN otherwise. No peer
 *                figure: peer-bench's sequences share one depth. Roofline
 *                bytes: the weights + each sequence's KV at its depth + 16.
 *   pp512@dN     an N-id prompt (untimed), then 512 more ids timed. The
 *                peer fills its depth in one batch and times only its
 *                prompt, so its figure is 512 / (t(N + 512) - t(N)) from
 *                two runs with -np N and -np N + 512 (`-fa 1`, same dtype).
 *   rss          peak RSS (wait4's ru_maxrss) of `pagellm run -c 2048` on
 *                --rss-model against peer-bench with n_ctx 2048, both with
 *                the same batch, processing the same number of tokens
 *                (see rss_measure).
 * Every timed run of ours uses a fresh context (so that no prefix-cache
 * hit flatters a repeat) and a model loaded once per model and warmed by
 * one short untimed pass (the peer's mmap is populated at load). For each
 * test and rep, ours runs, then the peer: ours, peer, ours, peer... The
 * figure is the median of --reps runs.
 *
 * Roofline: decode is bound by memory reads. Bandwidth is measured here: a
 * --bw-mib buffer (1 GiB, far beyond L3, huge pages advised) read by
 * --threads threads with AVX2 loads. The header shows the median of 5
 * passes at the start; each of our timed runs of a decode test has its
 * own bandwidth, the mean of single passes taken just before, every
 * SP_SAMPLE_EVERY decode steps during (the clock stopped) and just after
 * it, because this machine's bandwidth drifts over minutes and jumps for
 * seconds at a time (bench_model), and so its own roofline and share of
 * it (tok/s / roofline); a test reports the medians over its runs of the
 * three (run_medians). Bytes per step = the weights a step
 * reads (pl_model_decode_bytes: all layers + final norm + output matrix;
 * of a MoE layer the chosen experts: pl_model_step_bytes)
 * + f16 KV of every sequence at its mean context length in the test;
 * roofline tok/s = bandwidth x sequences / bytes per step. pp512 is compute
 * bound: no roofline.
 *
 * Output: a table, or with --json one header object then one row per
 * (model, test): {model, weights, test, pagellm_tok_s, peer_tok_s, ratio,
 * roofline_tok_s, roofline_share, bandwidth_gb_s} (null where absent;
 * roofline_share = pagellm's median share of its runs' rooflines), and for rss {model, weights, test,
 * pagellm_rss_mib, peer_rss_mib, ratio, ctx, tokens}.
 *
 * Invariants: children are only signalled and reaped by their own pid; the
 * RSS children are started before this process maps any model or buffer
 * (a forked child starts with its parent's resident pages counted).
 */
#include <assert.h>
#include <errno.h>
#include <immintrin.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <math.h>

#include "bench_common.h"
#include "cli.h"
#include "fma_peak.h"
#include "svg.h"

#define SP_MAX_MODELS 16
#define SP_MAX_REPS 100
#define SP_PEER_TIMEOUT_S 3600.0
#define SP_SAMPLE_EVERY 16 /* decode steps between two bandwidth samples inside a timed run */
#define SP_MAX_SAMPLES (SP_MAX_REPS * (2 + 128 / SP_SAMPLE_EVERY)) /* per test: before, during, after each run */

enum { T_PP, T_TG, T_DEPTH, T_X8, T_RSS, T_COUNT };
static const char *const test_names[T_COUNT] = {"pp512", "tg128", "tg128@d2048", "tg128x8", "rss"};

/* The shapes of the tests (peer-bench's -np / -ng / -depth / -b). */
enum { PP_N = 512, TG_N = 128, DEPTH_N = 2048, X8_B = 8, X8_PROMPT = 128 };

/* Long-context rows (tg32@dN, tg32xB@dN, pp512@dN), each run for every
 * --kv-dtypes. */
#define SP_MAX_DEPTH_ROWS 8
#define SP_MAX_KV_DTYPES 8
enum { DEPTH_TG_N = 32, DEPTH_PP_N = 512 };
typedef struct {
    bool pp;          /* pp512@dN, else tg32@dN, tg32xB@dN or tg32@dN+dM... */
    bool mixed;       /* tg32@dN+dM...: the sequences at depths of their own */
    int depth;        /* N (mixed: the first) */
    int seqs;         /* B: sequences decoding together (1 but for tg32xB@dN and mixed) */
    int depths[X8_B]; /* each sequence's depth */
} sp_depth_row;

typedef struct {
    const char *dir, *models, *tests, *peer, *rss_model, *json_out, *svg, *kv_dtypes;
    int reps, threads, bw_mib, rss_ctx;
    bool json, no_peer;
    bool want[T_COUNT];
    sp_depth_row dep[SP_MAX_DEPTH_ROWS];
    int n_dep;
    pl_kv_dtype kvd[SP_MAX_KV_DTYPES];
    int n_kvd;
} sp_opts;

typedef struct {
    char shape[64], type[16];  /* "" shape: a file given by path */
    char path[1024];
    char name[128], weights[16];  /* as printed */
} sp_model;

/* ------------------------------------------------------------- parsing */

static bool known_shape(const char *s)
{
    for (const char *const *p = pl_synth_shapes(); *p; p++)
        if (strcmp(*p, s) == 0) return true;
    return false;
}

static bool known_type(const char *t)
{
    static const char *const types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(types[i], t) == 0) return true;
    return false;
}

static bool is_file_spec(const char *s)
{
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 5 && strcmp(s + n - 5, ".gguf") == 0);
}

/* One --models / --rss-model item into *m (paths filled later). */
static int parse_model(const char *flag, const char *item, size_t len, sp_model *m)
{
    memset(m, 0, sizeof *m);
    char buf[1024];
    if (len == 0 || len >= sizeof buf) { cli_error("bench speed", "bad item in --%s (empty or too long)", flag); return 2; }
    memcpy(buf, item, len);
    buf[len] = 0;
    if (is_file_spec(buf)) {
        snprintf(m->path, sizeof m->path, "%s", buf);
        const char *base = strrchr(buf, '/') ? strrchr(buf, '/') + 1 : buf;
        snprintf(m->name, sizeof m->name, "%.*s", (int)(strlen(base) > 5 && strcmp(base + strlen(base) - 5, ".gguf") == 0
                                                        ? strlen(base) - 5 : strlen(base)), base);
        return 0;
    }
    char *colon = strchr(buf, ':');
    if (!colon) {
        cli_error("bench speed", "bad item '%s' in --%s: want SHAPE:TYPE (e.g. 110m:q4_0) or a .gguf path", buf, flag);
        return 2;
    }
    *colon = 0;
    if (!known_shape(buf) || !known_type(colon + 1) || strlen(buf) >= sizeof m->shape) {
        cli_error("bench speed", "bad item '%s:%s' in --%s: unknown shape or type (shapes: see pagellm synth --help; "
                  "types: f32 f16 bf16 q8_0 q4_0 q4_k_m)", buf, colon + 1, flag);
        return 2;
    }
    /* both parts are short known names (checked above); the precisions only
     * tell the compiler's truncation check so */
    snprintf(m->shape, sizeof m->shape, "%.*s", (int)sizeof m->shape - 1, buf);
    snprintf(m->type, sizeof m->type, "%.*s", (int)sizeof m->type - 1, colon + 1);
    snprintf(m->name, sizeof m->name, "%.*s", (int)sizeof m->name - 1, buf);
    snprintf(m->weights, sizeof m->weights, "%.*s", (int)sizeof m->weights - 1, colon + 1);
    return 0;
}

static int parse_models(const char *list, sp_model *out, int *n)
{
    *n = 0;
    for (const char *s = list; *s;) {
        size_t len = strcspn(s, ",");
        if (*n >= SP_MAX_MODELS) { cli_error("bench speed", "--models: at most %d models", SP_MAX_MODELS); return 2; }
        int rc = parse_model("models", s, len, &out[(*n)++]);
        if (rc) return rc;
        s += len;
        if (*s == ',') s++;
    }
    if (*n == 0) { cli_error("bench speed", "--models is empty"); return 2; }
    return 0;
}

/* A depth N in 1..2^20 at *p (digits only), p advanced past it; 0 if none. */
static int parse_depth(const char **p)
{
    long n = 0;
    const char *s = *p;
    while (*s >= '0' && *s <= '9' && n <= (1 << 20)) n = n * 10 + (*s++ - '0');
    if (s == *p || (*s >= '0' && *s <= '9') || n < 1 || n > (1 << 20)) return 0;
    *p = s;
    return (int)n;
}

/* tg32@dN, tg32xB@dN, tg32@dN+dM... (2..X8_B depths) or pp512@dN (s
 * holds len chars) into *r; false if not one. */
static bool parse_depth_row(const char *s, size_t len, sp_depth_row *r)
{
    char buf[128];
    int b = 1;
    if (len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    memset(r, 0, sizeof *r);
    const char *p = buf;
    if (strncmp(p, "pp512@d", 7) == 0) r->pp = true, p += 7;
    else if (strncmp(p, "tg32@d", 6) == 0) p += 6;
    else if (strncmp(p, "tg32x", 5) == 0) {
        p += 5;
        b = parse_depth(&p);
        if (b < 2 || b > X8_B || strncmp(p, "@d", 2) != 0) return false;
        p += 2;
    } else return false;
    for (;;) {
        const int n = parse_depth(&p);
        if (!n || r->seqs == X8_B) return false;
        r->depths[r->seqs++] = n;
        if (!*p) break;
        if (r->pp || b > 1 || strncmp(p, "+d", 2) != 0) return false;
        p += 2;
    }
    r->depth = r->depths[0];
    r->mixed = r->seqs > 1;
    if (b > 1) {
        r->seqs = b;
        for (int i = 1; i < b; i++) r->depths[i] = r->depth;
    }
    return true;
}

/* The row's name without its dtype: tg32@d8192, tg32x4@d8192,
 * tg32@d12288+d512, pp512@d16384. */
static void depth_row_name(const sp_depth_row *r, char *out, size_t size)
{
    if (r->pp) { snprintf(out, size, "pp512@d%d", r->depth); return; }
    if (!r->mixed) {
        if (r->seqs > 1) snprintf(out, size, "tg32x%d@d%d", r->seqs, r->depth);
        else snprintf(out, size, "tg32@d%d", r->depth);
        return;
    }
    size_t n = (size_t)snprintf(out, size, "tg32@d%d", r->depths[0]);
    for (int i = 1; i < r->seqs && n < size; i++) n += (size_t)snprintf(out + n, size - n, "+d%d", r->depths[i]);
}

static int parse_tests(sp_opts *o, const char *list)
{
    bool *want = o->want;
    memset(want, 0, sizeof(bool) * T_COUNT);
    o->n_dep = 0;
    int n = 0;
    for (const char *s = list; *s;) {
        size_t len = strcspn(s, ",");
        int t = 0;
        while (t < T_COUNT && !(strlen(test_names[t]) == len && strncmp(test_names[t], s, len) == 0)) t++;
        sp_depth_row dr;
        if (t == T_COUNT && parse_depth_row(s, len, &dr)) {
            if (o->n_dep == SP_MAX_DEPTH_ROWS) {
                cli_error("bench speed", "--tests: at most %d tg32@dN / tg32xB@dN / tg32@dN+dM / pp512@dN rows",
                          SP_MAX_DEPTH_ROWS);
                return 2;
            }
            o->dep[o->n_dep++] = dr;
            n++;
            s += len;
            if (*s == ',') s++;
            continue;
        }
        if (t == T_COUNT) {
            cli_error("bench speed", "unknown test '%.*s' in --tests (pp512, tg128, tg128@d2048, tg128x8, rss, "
                      "tg32@dN, tg32xB@dN, tg32@dN+dM[+dK...], pp512@dN with N in 1..1048576, B and the depths "
                      "of a mixed row in 2..%d)", (int)len, s, X8_B);
            return 2;
        }
        want[t] = true;
        n++;
        s += len;
        if (*s == ',') s++;
    }
    if (n == 0) { cli_error("bench speed", "--tests is empty"); return 2; }
    return 0;
}

/* ------------------------------------------------------------- models */

static int mkdir_p(const char *dir)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static bool file_nonempty(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* Makes dir/SHAPE-TYPE.gguf (through dir/SHAPE-f16.gguf) unless present. */
static int ensure_model(const char *dir, sp_model *m)
{
    if (!m->shape[0]) return file_nonempty(m->path) ? 0 : (cli_error("bench speed", "cannot read model '%s'", m->path), 1);
    char f16[1024], tmp[1100];
    snprintf(f16, sizeof f16, "%s/%s-f16.gguf", dir, m->shape);
    snprintf(m->path, sizeof m->path, "%s/%s-%s.gguf", dir, m->shape, m->type);
    if (file_nonempty(m->path)) return 0;
    if (mkdir_p(dir) != 0) { cli_error("bench speed", "cannot create --dir '%s': %s", dir, strerror(errno)); return 1; }
    if (!file_nonempty(f16)) {
        fprintf(stderr, "bench speed: making %s\n", f16);
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", f16, (int)getpid());
        pl_synth_params p = {.shape = m->shape, .seed = 1, .type = "f16", .out_path = tmp};
        if (pl_synth(&p) != 0 || rename(tmp, f16) != 0) {
            cli_error("bench speed", "cannot make %s: %s", f16, pl_last_error());
            unlink(tmp);
            return 1;
        }
    }
    if (strcmp(m->type, "f16") == 0) return 0;
    fprintf(stderr, "bench speed: making %s\n", m->path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", m->path, (int)getpid());
    if (pl_quantize(f16, tmp, m->type) != 0 || rename(tmp, m->path) != 0) {
        cli_error("bench speed", "cannot make %s: %s", m->path, pl_last_error());
        unlink(tmp);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------- our runs */

static int32_t argmax(const float *l, uint32_t n)
{
    int32_t b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = (int32_t)i;
    return b;
}

/* ids[i] = 100 + (i + offset) % 1000 as peer-bench's prompt and filler,
 * wrapped into small vocabularies; ids[0] = bos if with_bos. */
static void fill_ids(int32_t n_vocab, int32_t bos, int32_t *ids, int n, int offset, bool with_bos)
{
    const int32_t span = n_vocab - 100 < 1000 ? n_vocab - 100 : 1000;
    for (int i = 0; i < n; i++) {
        if (i == 0 && with_bos && bos >= 0) ids[i] = bos;
        else ids[i] = span > 0 ? 100 + (i + offset) % span : (i + offset) % n_vocab;
    }
}

typedef struct {
    pl_model *m;
    int threads;
    uint32_t nv;
    int32_t bos;
    float *logits;  /* [X8_B][nv] */
    /* a bandwidth sample, taken every SP_SAMPLE_EVERY decode steps of a
     * timed run (outside its timing), or NULL */
    void (*sample)(void *arg);
    void *sample_arg;
} sp_ours;

/* Seconds since *t0 added to *sec, then a bandwidth sample every
 * SP_SAMPLE_EVERY steps (step g > 0) with the clock stopped. */
static void decode_lap(sp_ours *o, int g, double *t0, double *sec)
{
    if (g == 0 || g % SP_SAMPLE_EVERY != 0 || !o->sample) return;
    *sec += bench_now() - *t0;
    o->sample(o->sample_arg);
    *t0 = bench_now();
}

static int ctx_open_kv(sp_ours *o, uint32_t n_ctx, uint32_t seqs, pl_kv_dtype kv, pl_ctx **c)
{
    pl_ctx_params p;
    pl_ctx_params_default(&p);
    p.n_ctx = n_ctx;
    p.max_seqs = seqs;
    p.n_threads = o->threads;
    p.kv_dtype = kv;
    return pl_ctx_new(c, o->m, &p);
}

static int ctx_open(sp_ours *o, uint32_t n_ctx, uint32_t seqs, pl_ctx **c)
{
    return ctx_open_kv(o, n_ctx, seqs, PL_KV_F16, c);
}

/* Appends ids in chunks of 512 (one forward pass each). */
static int append(pl_ctx *c, int32_t seq, const int32_t *ids, int n, float *logits)
{
    return pl_seq_append(c, seq, ids, (size_t)n, logits);
}

/* n_steps greedy decode steps of one sequence; seconds (bandwidth samples
 * excluded). */
static int decode_steps(sp_ours *o, pl_ctx *c, int32_t seq, int n_steps, double *sec)
{
    int rc = 0;
    double t0 = bench_now();
    *sec = 0;
    for (int g = 0; g < n_steps && !rc; g++) {
        decode_lap(o, g, &t0, sec);
        int32_t t = argmax(o->logits, o->nv);
        rc = pl_seq_append(c, seq, &t, 1, o->logits);
    }
    *sec += bench_now() - t0;
    return rc;
}

/* pp512 and tg128 in one run (as the peer's -np 512 -ng 128). */
static int ours_pp_tg(sp_ours *o, bool tg, double *pp, double *tgv)
{
    pl_ctx *c;
    int32_t seq, ids[PP_N];
    int rc = ctx_open(o, PP_N + TG_N + 8, 1, &c);
    if (rc) return rc;
    fill_ids((int32_t)o->nv, o->bos, ids, PP_N, 0, true);
    rc = pl_seq_new(c, &seq);
    double t0 = bench_now(), sec = 0;
    if (!rc) rc = append(c, seq, ids, PP_N, o->logits);
    *pp = PP_N / (bench_now() - t0);
    if (!rc && tg) rc = decode_steps(o, c, seq, TG_N - 1, &sec);
    *tgv = tg ? (TG_N - 1) / sec : 0;
    pl_ctx_free(c);
    return rc;
}

static int ours_depth(sp_ours *o, double *tg)
{
    pl_ctx *c;
    int32_t seq, *ids = malloc(sizeof *ids * DEPTH_N);
    int rc = ids ? ctx_open(o, DEPTH_N + TG_N + 8, 1, &c) : PL_ERR_NOMEM;
    if (rc) { free(ids); return rc; }
    fill_ids((int32_t)o->nv, o->bos, ids, DEPTH_N, 0, true);
    double sec = 0;
    rc = pl_seq_new(c, &seq);
    if (!rc) rc = append(c, seq, ids, DEPTH_N, o->logits);
    if (!rc) rc = decode_steps(o, c, seq, TG_N - 1, &sec);
    *tg = (TG_N - 1) / sec;
    pl_ctx_free(c);
    free(ids);
    return rc;
}

/* B (<= X8_B) sequences in KV dtype kv, sequence s a prompt of lens[s]
 * ids of its own (offset ids: the prefix cache shares nothing, as the peer
 * keeps B copies), untimed, then steps - 1 timed steps decoding all B in
 * one forward pass; tok/s of all B. tg128x8, tg32xB@dN and tg32@dN+dM. */
static int ours_together(sp_ours *o, pl_kv_dtype kv, int B, const int *lens, int steps, double *tok)
{
    pl_ctx *c;
    assert(B >= 1 && B <= X8_B && steps >= 2);
    int n = 0;
    for (int s = 0; s < B; s++) n = lens[s] > n ? lens[s] : n;
    int32_t seqs[X8_B], last[X8_B], *ids = malloc(sizeof *ids * (size_t)n);
    int rc = ids ? ctx_open_kv(o, (uint32_t)(n + steps + 8), (uint32_t)B, kv, &c) : PL_ERR_NOMEM;
    if (rc) { free(ids); return rc; }
    for (int s = 0; s < B && !rc; s++) {
        fill_ids((int32_t)o->nv, o->bos, ids, lens[s], 37 * s, true);
        rc = pl_seq_new(c, &seqs[s]);
        if (!rc) rc = append(c, seqs[s], ids, lens[s], o->logits);
        last[s] = argmax(o->logits, o->nv);
    }
    double t0 = bench_now(), sec = 0;
    for (int g = 1; g < steps && !rc; g++) {
        decode_lap(o, g - 1, &t0, &sec);
        rc = pl_seq_step(c, seqs, last, (size_t)B, o->logits);
        for (int s = 0; s < B && !rc; s++) last[s] = argmax(o->logits + (size_t)s * o->nv, o->nv);
    }
    sec += bench_now() - t0;
    *tok = (double)(steps - 1) * B / sec;
    pl_ctx_free(c);
    free(ids);
    return rc;
}

/* A long-context row in KV dtype kv: depth ids (untimed), then 31 timed
 * decode steps (tg32) or 512 more ids timed (pp512); tok/s. */
static int ours_at_depth(sp_ours *o, const sp_depth_row *r, pl_kv_dtype kv, double *tok)
{
    if (r->seqs > 1) return ours_together(o, kv, r->seqs, r->depths, DEPTH_TG_N, tok);
    pl_ctx *c;
    const int n = r->depth + (r->pp ? DEPTH_PP_N : 0);
    int32_t seq, *ids = malloc(sizeof *ids * (size_t)n);
    int rc = ids ? ctx_open_kv(o, (uint32_t)(n + DEPTH_TG_N + 8), 1, kv, &c) : PL_ERR_NOMEM;
    if (rc) { free(ids); return rc; }
    fill_ids((int32_t)o->nv, o->bos, ids, n, 0, true);
    rc = pl_seq_new(c, &seq);
    if (!rc) rc = append(c, seq, ids, r->depth, o->logits);
    double sec = 0;
    if (!rc && r->pp) {
        const double t0 = bench_now();
        rc = append(c, seq, ids + r->depth, DEPTH_PP_N, o->logits);
        sec = bench_now() - t0;
        *tok = DEPTH_PP_N / sec;
    } else if (!rc) {
        rc = decode_steps(o, c, seq, DEPTH_TG_N - 1, &sec);
        *tok = (DEPTH_TG_N - 1) / sec;
    }
    pl_ctx_free(c);
    free(ids);
    return rc;
}

/* One short untimed pass: pages the mapped weights in. */
static int ours_warm(sp_ours *o)
{
    pl_ctx *c;
    int32_t seq, ids[16];
    int rc = ctx_open(o, 32, 1, &c);
    if (rc) return rc;
    fill_ids((int32_t)o->nv, o->bos, ids, 16, 0, true);
    rc = pl_seq_new(c, &seq);
    if (!rc) rc = append(c, seq, ids, 16, o->logits);
    pl_ctx_free(c);
    return rc;
}

/* ---------------------------------------------------------- the peer */

/* Runs peer-bench with args; its prefill and decode tok/s. 0 or -1. */
static int peer_run(const char *peer, const char *model, int threads, const char *const *extra, double *pp, double *tg)
{
    char t[16];
    snprintf(t, sizeof t, "%d", threads);
    char *argv[24];
    int n = 0;
    argv[n++] = (char *)peer;
    argv[n++] = "-m";
    argv[n++] = (char *)model;
    argv[n++] = "-t";
    argv[n++] = t;
    for (int i = 0; extra[i] && n < 23; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    bench_child ch;
    if (bench_child_spawn(&ch, argv, 1) != 0) return -1;
    char *out = bench_child_read_all(&ch, bench_now() + SP_PEER_TIMEOUT_S);
    int st = out ? bench_child_wait(&ch, bench_now() + 30) : bench_child_stop(&ch, 5);
    json_t *j = out && st == 0 ? json_loads(out, 0, NULL) : NULL;
    json_t *p = json_object_get(j, "prefill_tok_s"), *d = json_object_get(j, "decode_tok_s");
    int rc = json_is_number(p) && json_is_number(d) ? 0 : -1;
    if (!rc) {
        *pp = json_number_value(p);
        *tg = json_number_value(d);
    } else {
        fprintf(stderr, "bench speed: peer-bench failed on %s (status %d)\n", model, st);
    }
    json_decref(j);
    free(out);
    return rc;
}

/* -------------------------------------------------------- bandwidth */

/* The probe's buffer is mapped once, asked for huge pages (as the packed
 * weights are, model/weights.c) and written, so that it reads real, 2 MiB
 * mapped pages: a read loop over 4 KiB pages reads ~10% less on this kind of
 * machine, and a roofline below what plain loads can get would flatter
 * every engine against it. */
typedef struct {
    uint8_t *buf;
    size_t n;
    int threads;
    int pf; /* the read loop's prefetch distance (bytes into L2, 0 = none): bw_probe_calibrate */
} bw_probe;

typedef struct {
    const uint8_t *p;
    size_t n;  /* multiple of 128 */
    int pf;
    uint64_t sum;
} bw_part;

__attribute__((target("avx2"))) static void *bw_read_avx2(void *arg)
{
    bw_part *b = arg;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < b->n; i += 128) {
        if (b->pf) { /* may run past the part: a prefetch never faults */
            _mm_prefetch((const char *)b->p + i + b->pf, _MM_HINT_T1);
            _mm_prefetch((const char *)b->p + i + b->pf + 64, _MM_HINT_T1);
        }
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(b->p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(b->p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(b->p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(b->p + i + 96)));
    }
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
    b->sum = v[0] + v[1] + v[2] + v[3]; /* kept, so that the loads are not dropped */
    return NULL;
}

static void *bw_read_scalar(void *arg)
{
    bw_part *b = arg;
    uint64_t s = 0;
    for (size_t i = 0; i < b->n; i += 8) s += *(const uint64_t *)(b->p + i);
    b->sum = s;
    return NULL;
}

static int bw_probe_init(bw_probe *p, int mib, int threads)
{
    p->n = (size_t)mib << 20;
    p->threads = threads;
    p->buf = mmap(NULL, p->n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p->buf == MAP_FAILED) {
        p->buf = NULL;
        return -1;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p->buf, p->n, MADV_HUGEPAGE);
#endif
    for (size_t i = 0; i < p->n; i++) p->buf[i] = (uint8_t)i; /* real pages, not the shared zero page */
    return 0;
}

static void bw_probe_free(bw_probe *p)
{
    if (p->buf) munmap(p->buf, p->n);
    p->buf = NULL;
}

/* GB/s (1e9 bytes) of one pass: the probe's threads each read their part
 * of the buffer once (~35 ms at 1 GiB and 30 GB/s). */
static double bw_probe_pass(const bw_probe *p)
{
    if (!p->buf) return 0;
    void *(*fn)(void *) = __builtin_cpu_supports("avx2") ? bw_read_avx2 : bw_read_scalar;
    bw_part parts[64];
    pthread_t th[64];
    const int threads = p->threads < 64 ? p->threads : 64;
    const size_t per = p->n / (size_t)threads / 128 * 128;
    double t0 = bench_now();
    for (int i = 0; i < threads; i++) {
        parts[i] = (bw_part){p->buf + (size_t)i * per, per, p->pf, 0};
        if (pthread_create(&th[i], NULL, fn, &parts[i]) != 0) fn(&parts[i]), th[i] = 0;
    }
    for (int i = 0; i < threads; i++)
        if (th[i]) pthread_join(th[i], NULL);
    return (double)per * threads / (bench_now() - t0) / 1e9;
}

/* The probe's read loop is the faster on this CPU of plain loads and loads
 * with the lines 8 KiB ahead prefetched into L2: on Zen 4 plain loads read
 * as much (the L2 hardware prefetcher streams alone); on Intel the
 * prefetch reads more, and the decode tiles prefetch there too
 * (kern_impl.h), so a probe of plain loads would set a roofline below what
 * the memory gives (the tiles read more than it: docs/speed.md). 4
 * alternating passes of each, the higher median wins; *gb[2]: the two
 * medians. */
enum { BW_PF_BYTES = 8192 };
static void bw_probe_calibrate(bw_probe *p, double gb[2])
{
    double g[2][4];
    p->pf = 0;
    (void)bw_probe_pass(p);
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 2; k++) {
            p->pf = k ? BW_PF_BYTES : 0;
            g[k][r] = bw_probe_pass(p);
        }
    for (int k = 0; k < 2; k++) gb[k] = bench_median(g[k], 4);
    p->pf = gb[1] > gb[0] ? BW_PF_BYTES : 0;
}

/* The median of `passes` passes after one untimed pass (*best, if not
 * NULL: the fastest). The untimed pass brings the buffer's translations
 * and the threads' start-up out of the timing. */
static double bw_probe_run(const bw_probe *p, int passes, double *best)
{
    if (!p->buf) return 0;
    double gbs[16];
    passes = passes < 1 ? 1 : passes > 15 ? 15 : passes;
    (void)bw_probe_pass(p);
    for (int r = 0; r < passes; r++) gbs[r] = bw_probe_pass(p);
    double med = bench_median(gbs, (size_t)passes); /* sorts */
    if (best) *best = gbs[passes - 1];
    return med;
}

/* --------------------------------------------------------------- RSS */

/* Peak RSS (MiB) of argv run to the end; -1 on failure. */
static double child_peak_rss(char *const argv[])
{
    bench_child ch;
    if (bench_child_spawn(&ch, argv, 1) != 0) return -1;
    char *out = bench_child_read_all(&ch, bench_now() + SP_PEER_TIMEOUT_S);
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    int st = out ? bench_child_wait_rusage(&ch, bench_now() + 30, &ru) : bench_child_stop(&ch, 5);
    free(out);
    if (st != 0) {
        fprintf(stderr, "bench speed: %s exited with status %d\n", argv[0], st);
        return -1;
    }
    return (double)ru.ru_maxrss / 1024.0;
}

/* A prompt text of about n tokens for m's tokenizer, written to path;
 * *got = its real token count (BOS included). */
static int rss_prompt(const char *model_path, const char *path, int n, int *got)
{
    pl_vocab *v;
    if (pl_vocab_load(&v, model_path) != 0) return -1;
    static const char sentence[] = "Once upon a time, a little cat sat on the warm mat and watched the rain. ";
    int32_t *ids;
    size_t k;
    int rc = pl_tokenize(v, sentence, strlen(sentence), false, false, &ids, &k);
    if (!rc) pl_free(ids);
    size_t reps = !rc && k ? (size_t)n / k : 0;
    char *text = reps ? malloc(reps * strlen(sentence) + 1) : NULL;
    FILE *f = text ? fopen(path, "w") : NULL;
    if (f) {
        text[0] = 0;
        for (size_t i = 0; i < reps; i++) memcpy(text + i * strlen(sentence), sentence, strlen(sentence) + 1);
        fputs(text, f);
        rc = fclose(f) == 0 ? pl_tokenize(v, text, strlen(text), pl_vocab_add_bos(v), false, &ids, &k) : -1;
        if (!rc) { *got = (int)k; pl_free(ids); }
    } else {
        rc = -1;
    }
    free(text);
    pl_vocab_free(v);
    return rc;
}

typedef struct {
    double ours, peer;  /* MiB, -1 if not measured */
    int tokens;         /* prompt + generated, each side */
} rss_result;

/* Both sides get the same context (ours: -c CTX; peer-bench sizes its
 * context depth + np + ng + 8 + 256, so with depth = np = (CTX - 328) / 2
 * and -ng 64 it is CTX, e.g. 860 + 860 + 64 + 8 + 256 = 2048), the same
 * batch (the peer's n_batch is np: our -b np; its depth fill must fit one
 * batch, hence depth = np) and the same number of tokens: the peer's
 * depth + np + 64, ours a prompt of about 2 np tokens + 64. */
static int rss_measure(const sp_opts *o, const char *exe, const char *model, rss_result *r)
{
    const int ng = 64, np = (o->rss_ctx - ng - 8 - 256) / 2, depth = np;
    r->ours = r->peer = -1;
    char prompt[] = "/tmp/pagellm-speed-prompt.XXXXXX";
    int fd = mkstemp(prompt), got = 0;
    if (fd < 0) return 1;
    close(fd);
    if (rss_prompt(model, prompt, depth + np, &got) != 0) {
        cli_error("bench speed", "cannot build the RSS prompt: %s", pl_last_error());
        unlink(prompt);
        return 1;
    }
    r->tokens = got + ng;
    char ctx[16], th[16], ngs[16], nps[16], ds[16];
    snprintf(ctx, sizeof ctx, "%d", o->rss_ctx);
    snprintf(th, sizeof th, "%d", o->threads);
    snprintf(ngs, sizeof ngs, "%d", ng);
    snprintf(nps, sizeof nps, "%d", np);
    snprintf(ds, sizeof ds, "%d", depth);
    char *ours[] = {(char *)exe, "run", "-m", (char *)model, "-c", ctx, "-b", nps, "-t", th, "-f", prompt,
                    "-n", ngs, "--ignore-eos", "--temp", "0", "--json", NULL};
    r->ours = child_peak_rss(ours);
    unlink(prompt);
    if (!o->no_peer && access(o->peer, X_OK) == 0) {
        char *peer[] = {(char *)o->peer, "-m", (char *)model, "-np", nps, "-ng", ngs, "-depth", ds, "-t", th, NULL};
        r->peer = child_peak_rss(peer);
    }
    return r->ours < 0 ? 1 : 0;
}

/* ------------------------------------------------------------ output */

static json_t *num_or_null(double v) { return v > 0 ? json_real(v) : json_null(); }

/* The rows printed so far, for --svg: the speed table as bars against the
 * peer, one panel per test (their tok/s differ by orders of magnitude). */
static struct {
    char label[160];
    int test;
    double ours, peer;
} sp_rows[SP_MAX_MODELS * T_RSS];
static int sp_n_rows;

static int sp_svg(const sp_opts *o)
{
    int n_panels = 0;
    for (int t = 0; t < T_RSS; t++)
        for (int i = 0; i < sp_n_rows; i++)
            if (sp_rows[i].test == t) { n_panels++; break; }
    svg_doc *d = svg_open(o->svg, n_panels ? n_panels : 1, "speed: pagellm against llama.cpp's peer-bench (tok/s, median of runs)");
    if (!d) return -1;
    int panel = 0;
    for (int t = 0; t < T_RSS; t++) {
        const char *groups[SP_MAX_MODELS];
        double v[2 * SP_MAX_MODELS];
        int g = 0;
        for (int i = 0; i < sp_n_rows; i++)
            if (sp_rows[i].test == t) groups[g] = sp_rows[i].label, v[g++] = sp_rows[i].ours;
        if (!g) continue;
        for (int i = 0, j = 0; i < sp_n_rows; i++)
            if (sp_rows[i].test == t) v[g + j++] = sp_rows[i].peer > 0 ? sp_rows[i].peer : NAN;
        const char *series[2] = {"pagellm", "peer"}; /* values: ours at v[0..g), the peer's at v[g..2g) */
        svg_bars(d, panel++, test_names[t], "tokens/s", groups, g, series, v, 2);
    }
    return svg_close(d);
}

static FILE *json_out_f; /* --json-out FILE, or NULL */

/* One JSON line to stdout (--json) and/or --json-out; takes j. */
static void emit_json(const sp_opts *o, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (s && o->json) puts(s);
    if (s && json_out_f) fprintf(json_out_f, "%s\n", s), fflush(json_out_f);
    free(s);
    json_decref(j);
}

/* The multiply-add rates of this CPU over the bench's threads (fma_peak.h),
 * measured once before the first decode row at depth; 0 when not. */
static double sp_peak_f32, sp_peak_i8;

/* The arithmetic floor of a decode row at depth (see sp_floor): its
 * tok/s and our share of it, medians over our runs; 0 where none. */
typedef struct {
    double tok_s, share;
} sp_floor_fig;

/* roof, share, bw: the medians over our runs of the test of each run's
 * roofline, share of it and bandwidth (0 for pp512, which has no
 * roofline); fl: the decode rows' floor at depth. */
static void print_row_as(const sp_opts *o, const sp_model *m, int test, const char *label, double ours, double peer,
                         double roof, double share, double bw, sp_floor_fig fl)
{
    if (test >= 0 && sp_n_rows < (int)(sizeof sp_rows / sizeof sp_rows[0])) {
        snprintf(sp_rows[sp_n_rows].label, sizeof sp_rows[0].label, "%s %s", m->name, m->weights);
        sp_rows[sp_n_rows].test = test, sp_rows[sp_n_rows].ours = ours, sp_rows[sp_n_rows].peer = peer;
        sp_n_rows++;
    }
    if (o->json || json_out_f) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "model", m->name, "weights",
                              m->weights, "test", label, "pagellm_tok_s", num_or_null(ours), "peer_tok_s",
                              num_or_null(peer), "ratio", num_or_null(peer > 0 ? ours / peer : 0),
                              "roofline_tok_s", num_or_null(roof), "roofline_share", num_or_null(share),
                              "bandwidth_gb_s", num_or_null(bw), "floor_tok_s", num_or_null(fl.tok_s), "floor_share",
                              num_or_null(fl.share));
        emit_json(o, j);
    }
    if (!o->json) {
        char pr[16] = "-", ra[16] = "-", rf[16] = "-", fo[16] = "-", fp[16] = "-", bs[16] = "-", ft[16] = "-", fs[16] = "-";
        if (fl.tok_s > 0) snprintf(ft, sizeof ft, "%.1f", fl.tok_s), snprintf(fs, sizeof fs, "%.0f%%", 100 * fl.share);
        if (peer > 0) snprintf(pr, sizeof pr, "%.1f", peer), snprintf(ra, sizeof ra, "%.2fx", ours / peer);
        if (roof > 0) snprintf(rf, sizeof rf, "%.1f", roof), snprintf(fo, sizeof fo, "%.0f%%", 100 * share);
        if (roof > 0 && peer > 0) snprintf(fp, sizeof fp, "%.0f%%", 100 * peer / roof);
        if (bw > 0) snprintf(bs, sizeof bs, "%.1f", bw);
        printf("%-16s %-7s %-20s %10.1f %10s %7s %10s %7s %9s %6s %8s %8s\n", m->name, m->weights, label, ours, pr, ra,
               rf, fo, fp, bs, ft, fs);
    }
    fflush(stdout);
}

static void print_row(const sp_opts *o, const sp_model *m, int test, double ours, double peer, double roof, double share,
                      double bw)
{
    print_row_as(o, m, test, test_names[test], ours, peer, roof, share, bw, (sp_floor_fig){0, 0});
}

/* ---------------------------------------------------------------- main */

static int sp_parse(int argc, char **argv, sp_opts *o)
{
    const char *env = getenv("PEER");
    static char peer_default[1024];
    snprintf(peer_default, sizeof peer_default, "%s/peer-bench", getenv("PEER_DIR") ? getenv("PEER_DIR") : "/tmp/llamacpp-peer");
    *o = (sp_opts){.dir = "/tmp/pagellm-bench",
                   .models = "110m:q8_0,110m:q4_0,tinyllama-1.1b:q8_0,tinyllama-1.1b:q4_0,tinyllama-1.1b:f16",
                   .tests = "pp512,tg128,tg128@d2048,tg128x8,rss",
                   .peer = env && *env ? env : peer_default,
                   .rss_model = "tinyllama-1.1b:q4_0",
                   .kv_dtypes = "f16",
                   .reps = 3, .threads = 2, .bw_mib = 1024, .rss_ctx = 2048};
    const cli_opt opts[] = {
        {"models", 0, CLI_STR, &o->models, 0, 0, "LIST", "SHAPE:TYPE items or .gguf paths (default: 110m q8_0/q4_0, tinyllama-1.1b q8_0/q4_0/f16)"},
        {"tests", 0, CLI_STR, &o->tests, 0, 0, "LIST", "of pp512,tg128,tg128@d2048,tg128x8,rss (default: all), "
                                                       "and long-context rows tg32@dN, tg32xB@dN, pp512@dN"},
        {"kv-dtypes", 0, CLI_STR, &o->kv_dtypes, 0, 0, "LIST", "KV dtypes of the long-context rows (default f16)"},
        {"reps", 0, CLI_INT, &o->reps, 1, SP_MAX_REPS, "N", "runs per test and engine; the median is reported (default 3)"},
        {"threads", 't', CLI_INT, &o->threads, 1, 64, "N", "threads, both engines (default 2)"},
        {"dir", 0, CLI_STR, &o->dir, 0, 0, "DIR", "where generated models live (default /tmp/pagellm-bench)"},
        {"peer", 0, CLI_STR, &o->peer, 0, 0, "PATH", "llama.cpp peer-bench (default $PEER, else $PEER_DIR/peer-bench)"},
        {"no-peer", 0, CLI_FLAG, &o->no_peer, 0, 0, NULL, "pagellm only"},
        {"rss-model", 0, CLI_STR, &o->rss_model, 0, 0, "M", "model of the rss test (default tinyllama-1.1b:q4_0)"},
        {"rss-ctx", 0, CLI_INT, &o->rss_ctx, 1, 1 << 20, "N", "context of the rss test (default 2048)"},
        {"bw-mib", 0, CLI_INT, &o->bw_mib, 64, 1 << 16, "MIB", "bandwidth buffer in MiB (default 1024)"},
        {"json", 0, CLI_FLAG, &o->json, 0, 0, NULL, "a header object, then one JSON row per model and test"},
        {"json-out", 0, CLI_STR, &o->json_out, 0, 0, "FILE", "also write the JSON lines to FILE (beside the table)"},
        {"svg", 0, CLI_STR, &o->svg, 0, 0, "FILE", "plot the table as bars against the peer, a panel per test"},
        {0},
    };
    const char *pos[1];
    int np, rc = cli_parse("bench speed", "[--models LIST] [--tests LIST] [--reps N] [--json]", opts, argc, argv, pos, 0, &np);
    if (rc == CLI_HELP) return -1;
    if (rc != CLI_OK) return 2;
    if ((o->rss_ctx - 328) / 2 < 16) { cli_error("bench speed", "--rss-ctx %d too small (>= 360)", o->rss_ctx); return 2; }
    o->n_kvd = 0;
    for (const char *s = o->kv_dtypes; *s;) {
        char name[32];
        const size_t len = strcspn(s, ",");
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), s);
        if (o->n_kvd == SP_MAX_KV_DTYPES || len >= sizeof name || pl_kv_dtype_from_name(name, &o->kvd[o->n_kvd]) != 0) {
            cli_error("bench speed", "--kv-dtypes: '%.*s' is not a KV dtype (or more than %d given)", (int)len, s,
                      SP_MAX_KV_DTYPES);
            return 2;
        }
        o->n_kvd++;
        s += len;
        if (*s == ',') s++;
    }
    if (o->n_kvd == 0) { cli_error("bench speed", "--kv-dtypes is empty"); return 2; }
    return parse_tests(o, o->tests);
}

/* The multiply-add peaks the floors of the depth rows use (a JSON object
 * {"bench": "fma_peak", ...} after the header, or a line). */
static void print_peaks(const sp_opts *o, fma_kind fk, fma_kind ik)
{
    if (o->json || json_out_f) {
        json_t *j = json_pack("{s:s, s:i, s:s, s:o, s:s, s:o}", "bench", "fma_peak", "threads", o->threads, "f32_kind",
                              fma_kind_name(fk), "f32_g_macs_s", num_or_null(sp_peak_f32 * 1e-9), "i8_kind",
                              fma_kind_name(ik), "i8_g_macs_s", num_or_null(sp_peak_i8 * 1e-9));
        emit_json(o, j);
    }
    if (!o->json) {
        if (sp_peak_f32 > 0)
            printf("multiply-add peak over %d threads (best of 3 rounds): f32 %.1f G/s (%s), int8 %.1f G/s (%s)\n",
                   o->threads, sp_peak_f32 * 1e-9, fma_kind_name(fk), sp_peak_i8 * 1e-9, fma_kind_name(ik));
        else printf("multiply-add peak: not measured on this CPU (no floor column)\n");
    }
    fflush(stdout);
}

/* bw == 0: no speed test, so no bandwidth either (only rss). */
static void print_header(const sp_opts *o, double bw, double bw_best, int pf, const double calib[2], bool peer_ok,
                         const char *peer_note)
{
    char cpu[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    for (char line[512]; f && fgets(line, sizeof line, f);)
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (o->json || json_out_f) {
        json_t *j = json_pack("{s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:i, s:i, s:s?}", "bench", "speed", "cpu", cpu,
                              "cores", (int)cores, "threads", o->threads, "reps", o->reps, "bandwidth_gb_s", bw,
                              "bandwidth_best_gb_s", bw_best, "bandwidth_mib", o->bw_mib, "bandwidth_prefetch_bytes",
                              pf, "peer", peer_ok ? o->peer : NULL);
        emit_json(o, j);
    }
    if (!o->json && bw <= 0) printf("machine: %s, %ld cores\n", cpu, cores);
    if (!o->json && bw > 0) {
        printf("machine: %s, %ld cores; memory read bandwidth %.1f GB/s (%d threads, %d MiB, median of 5; best %.1f)\n",
               cpu, cores, bw, o->threads, o->bw_mib, bw_best);
        printf("read loop: %s (calibration, medians of 4: plain loads %.1f GB/s, with the lines %d KiB ahead "
               "prefetched into L2 %.1f)\n",
               pf ? "loads with prefetch" : "plain loads", calib[0], BW_PF_BYTES / 1024, calib[1]);
        printf("%d threads, median of %d runs, pagellm and %s alternately\n", o->threads, o->reps,
               peer_ok ? "peer-bench" : peer_note);
    }
    fflush(stdout);
}

/* Bandwidth samples of one test: single probe passes just before, during
 * (sp_ours.sample) and just after each of our timed runs. */
typedef struct {
    const bw_probe *p;
    double *g;
    int *n;
} bw_sampler;

static void bw_sample(void *arg)
{
    bw_sampler *s = arg;
    if (*s->n < SP_MAX_SAMPLES) s->g[(*s->n)++] = bw_probe_pass(s->p);
}

static double mean_of(const double *v, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    return n ? sum / n : 0;
}

/* The medians over n runs of a test of each run's roofline (its bandwidth
 * bw[i] x per_gbs), its share of it (tok[i] / roofline) and bw[i]. A
 * share is a ratio of two figures of the same run, so a jump of the host's
 * bandwidth moves both of its terms (see bench_model). */
static void run_medians(const double *tok, const double *bw, int n, double per_gbs, double *roof, double *share,
                        double *bw_med)
{
    double r[SP_MAX_REPS], f[SP_MAX_REPS], w[SP_MAX_REPS];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!(bw[i] > 0)) continue; /* no sample (cannot happen: one before and one after each run) */
        r[k] = bw[i] * per_gbs;
        f[k] = tok[i] / r[k];
        w[k++] = bw[i];
    }
    *roof = bench_median(r, (size_t)k);
    *share = bench_median(f, (size_t)k);
    *bw_med = bench_median(w, (size_t)k);
}

/* The peer's figure for a long-context row in KV dtype kv (see the top);
 * 0 or -1 (also for a dtype it lacks). */
static int peer_at_depth(const sp_opts *o, const sp_model *m, const sp_depth_row *r, pl_kv_dtype kv, double *tok)
{
    const char *t = pl_kv_dtype_name(kv);
    if (r->mixed) return -1; /* peer-bench's sequences share one depth */
    if (strcmp(t, "f16") != 0 && strcmp(t, "q8_0") != 0 && strcmp(t, "q4_0") != 0) return -1;
    char np[16], ng[16], nb[16];
    double pp = 0, tg = 0;
    snprintf(np, sizeof np, "%d", r->depth);
    snprintf(ng, sizeof ng, "%d", r->pp ? 1 : DEPTH_TG_N);
    snprintf(nb, sizeof nb, "%d", r->seqs);
    const char *args[] = {"-np", np, "-ng", ng, "-b", nb, "-fa", "1", "-ctk", t, "-ctv", t, NULL};
    if (peer_run(o->peer, m->path, o->threads, args, &pp, &tg) != 0) return -1;
    if (!r->pp) {
        *tok = tg;
        return 0;
    }
    const double t0 = r->depth / pp; /* its prefill of N ids, seconds */
    snprintf(np, sizeof np, "%d", r->depth + DEPTH_PP_N);
    if (peer_run(o->peer, m->path, o->threads, args, &pp, &tg) != 0) return -1;
    const double dt = (r->depth + DEPTH_PP_N) / pp - t0;
    if (!(dt > 0)) return -1;
    *tok = DEPTH_PP_N / dt;
    return 0;
}

/* A decode step's arithmetic floor at depth (docs/speed.md): the weights
 * read at the run's bandwidth, then attention, which takes at least the
 * longer of reading the dtype's KV at that bandwidth and its multiply-adds
 * at the CPU's peak: 2 x heads x head dim x layers a position of context
 * (scores and the V sum), f32 for every dtype but the scores of q8_0 and
 * q4_0 keys, which are int8 dots. Returns tok/s at bandwidth bw_gbs. */
static double sp_floor(double bw_gbs, double w, double kv_bytes, double depth, const pl_file_info *fi, pl_kv_dtype t)
{
    const double B = bw_gbs * 1e9;
    const double macs = 2.0 * fi->n_heads * fi->head_dim * fi->n_layers * depth;
    const bool i8 = t == PL_KV_Q8_0 || t == PL_KV_Q4_0;
    const double arith = i8 ? macs / 2 / sp_peak_i8 + macs / 2 / sp_peak_f32 : macs / sp_peak_f32;
    const double att = kv_bytes / B > arith ? kv_bytes / B : arith;
    return 1.0 / (w / B + att);
}

/* The long-context rows of one model, each in every --kv-dtypes,
 * ours then the peer, reps times. w: the weight bytes of a decode step. */
static int bench_depth_rows(const sp_opts *o, const sp_model *m, sp_ours *us, const bw_probe *probe, bool peer_ok,
                            double w, const pl_file_info *fi)
{
    static double g[SP_MAX_SAMPLES];
    for (int d = 0; d < o->n_dep; d++)
        for (int k = 0; k < o->n_kvd; k++) {
            const sp_depth_row *r = &o->dep[d];
            double a[SP_MAX_REPS], b[SP_MAX_REPS], ra[SP_MAX_REPS];
            int na = 0, nb = 0, ng = 0, rc = 0;
            bw_sampler smp = {probe, g, &ng};
            for (int rep = 0; rep < o->reps && !rc; rep++) {
                const int s0 = ng;
                if (!r->pp) bw_sample(&smp);
                us->sample = r->pp ? NULL : bw_sample, us->sample_arg = &smp;
                rc = ours_at_depth(us, r, o->kvd[k], &a[na]);
                if (!r->pp) bw_sample(&smp);
                ra[na++] = mean_of(g + s0, ng - s0);
                double pt;
                if (!rc && peer_ok && peer_at_depth(o, m, r, o->kvd[k], &pt) == 0) b[nb++] = pt;
            }
            us->sample = NULL;
            if (rc) return rc;
            /* decode: the weights + this dtype's KV of every sequence at its
             * run's mean depth */
            pl_kv_shape ks = {fi->n_layers, fi->n_kv_heads, fi->head_dim, 16};
            pl_kv_size kvs = {0};
            pl_kv_size_of(&ks, o->kvd[k], &kvs);
            double depth = 0; /* of all the sequences */
            for (int i = 0; i < r->seqs; i++) depth += r->depths[i] + DEPTH_TG_N / 2;
            const double kv_step = kvs.bytes_per_token * depth;
            const double per_gbs = r->pp ? 0 : 1e9 * r->seqs / (w + kv_step);
            double roof = 0, share = 0, bw = 0;
            if (per_gbs > 0) run_medians(a, ra, na, per_gbs, &roof, &share, &bw);
            sp_floor_fig fl = {0, 0};
            if (!r->pp && sp_peak_f32 > 0 && sp_peak_i8 > 0 && fi->n_heads && fi->head_dim) {
                double ft[SP_MAX_REPS], fs[SP_MAX_REPS];
                int nf = 0;
                for (int i = 0; i < na; i++) {
                    if (!(ra[i] > 0)) continue;
                    ft[nf] = r->seqs * sp_floor(ra[i], w, kv_step, depth, fi, o->kvd[k]);
                    fs[nf] = a[i] / ft[nf];
                    nf++;
                }
                fl = (sp_floor_fig){bench_median(ft, (size_t)nf), bench_median(fs, (size_t)nf)};
            }
            char name[128], label[160];
            depth_row_name(r, name, sizeof name);
            snprintf(label, sizeof label, "%s:%s", name, pl_kv_dtype_name(o->kvd[k]));
            print_row_as(o, m, -1, label, bench_median(a, (size_t)na), nb ? bench_median(b, (size_t)nb) : 0, roof, share,
                         bw, fl);
        }
    return 0;
}

/* Runs the selected tests of one model, ours then the peer, reps times. */
static int bench_model(const sp_opts *o, const sp_model *m, const bw_probe *probe, bool peer_ok)
{
    sp_ours us = {.threads = o->threads};
    pl_file_info fi;
    if (pl_file_inspect(m->path, &fi) != 0 || pl_model_load(&us.m, m->path) != 0) {
        cli_error("bench speed", "%s", pl_last_error());
        return 1;
    }
    us.nv = pl_model_n_vocab(us.m);
    us.bos = pl_vocab_bos(pl_model_vocab(us.m));
    us.logits = malloc(sizeof(float) * us.nv * X8_B);
    int rc = us.logits ? ours_warm(&us) : PL_ERR_NOMEM;
    /* KV f16 bytes per token (the context default); roofline per test */
    pl_kv_shape ks = {fi.n_layers, fi.n_kv_heads, fi.head_dim, 16};
    pl_kv_size kvs = {0};
    pl_kv_size_of(&ks, PL_KV_F16, &kvs);
    const double w = (double)pl_model_decode_bytes(us.m), kv = kvs.bytes_per_token;
    const double w8 = (double)pl_model_step_bytes(us.m, X8_B); /* MoE: the experts 8 tokens choose */
    /* tok/s per GB/s of bandwidth: sequences / bytes per step */
    const double per_gbs[T_COUNT] = {0, 1e9 / (w + kv * (PP_N + TG_N / 2)), 1e9 / (w + kv * (DEPTH_N + TG_N / 2)),
                                     1e9 * X8_B / (w8 + X8_B * kv * (X8_PROMPT + TG_N / 2)), 0};
    /* a: ours, b: the peer's, g: the bandwidth samples of our runs (see
     * bw_sampler; their mean is the run's bandwidth). A shared host's
     * bandwidth drifts over minutes and jumps for seconds at a time (other
     * tenants), so a probe at the start, or a few passes beside a run, can
     * land in or out of a jump by chance; samples spread through the run
     * weigh the jumps as long as they last, as the run's tok/s does. Each
     * run is paired with its own samples (ra: the run's bandwidth) and a
     * row reports medians over runs (run_medians): pooling every run's
     * samples against the median run's tok/s would count a fast run inside
     * a jump in the bandwidth but not in the tok/s. docs/speed.md. */
    static double a[T_COUNT][SP_MAX_REPS], b[T_COUNT][SP_MAX_REPS], g[T_COUNT][SP_MAX_SAMPLES];
    static double ra[T_COUNT][SP_MAX_REPS];
    int na[T_COUNT] = {0}, nb[T_COUNT] = {0}, ng[T_COUNT] = {0};
    bw_sampler smp[T_COUNT];
    for (int t = 0; t < T_COUNT; t++) smp[t] = (bw_sampler){probe, g[t], &ng[t]};
    const bool pptg = o->want[T_PP] || o->want[T_TG];
    for (int r = 0; r < o->reps && !rc; r++) {
        double pp = 0, tg = 0;
        if (pptg) {
            const int s0 = ng[T_TG];
            if (o->want[T_TG]) bw_sample(&smp[T_TG]);
            us.sample = o->want[T_TG] ? bw_sample : NULL, us.sample_arg = &smp[T_TG];
            rc = ours_pp_tg(&us, o->want[T_TG], &pp, &tg);
            if (o->want[T_TG]) bw_sample(&smp[T_TG]);
            a[T_PP][na[T_PP]++] = pp;
            ra[T_TG][na[T_TG]] = mean_of(g[T_TG] + s0, ng[T_TG] - s0);
            a[T_TG][na[T_TG]++] = tg;
            const char *args[] = {"-np", "512", "-ng", o->want[T_TG] ? "128" : "1", NULL};
            if (!rc && peer_ok && peer_run(o->peer, m->path, o->threads, args, &pp, &tg) == 0) {
                b[T_PP][nb[T_PP]++] = pp;
                b[T_TG][nb[T_TG]++] = tg;
            }
        }
        if (!rc && o->want[T_DEPTH]) {
            const int s0 = ng[T_DEPTH];
            bw_sample(&smp[T_DEPTH]);
            us.sample = bw_sample, us.sample_arg = &smp[T_DEPTH];
            rc = ours_depth(&us, &tg);
            bw_sample(&smp[T_DEPTH]);
            ra[T_DEPTH][na[T_DEPTH]] = mean_of(g[T_DEPTH] + s0, ng[T_DEPTH] - s0);
            a[T_DEPTH][na[T_DEPTH]++] = tg;
            const char *args[] = {"-np", "2048", "-ng", "128", NULL};
            if (!rc && peer_ok && peer_run(o->peer, m->path, o->threads, args, &pp, &tg) == 0) b[T_DEPTH][nb[T_DEPTH]++] = tg;
        }
        if (!rc && o->want[T_X8]) {
            const int s0 = ng[T_X8];
            bw_sample(&smp[T_X8]);
            us.sample = bw_sample, us.sample_arg = &smp[T_X8];
            int lens[X8_B];
            for (int i = 0; i < X8_B; i++) lens[i] = X8_PROMPT;
            rc = ours_together(&us, PL_KV_F16, X8_B, lens, TG_N, &tg);
            bw_sample(&smp[T_X8]);
            ra[T_X8][na[T_X8]] = mean_of(g[T_X8] + s0, ng[T_X8] - s0);
            a[T_X8][na[T_X8]++] = tg;
            const char *args[] = {"-np", "128", "-ng", "128", "-b", "8", NULL};
            if (!rc && peer_ok && peer_run(o->peer, m->path, o->threads, args, &pp, &tg) == 0) b[T_X8][nb[T_X8]++] = tg;
        }
    }
    if (rc) cli_error("bench speed", "%s: %s", m->path, pl_last_error());
    for (int t = 0; t < T_RSS && !rc; t++) {
        if (!o->want[t]) continue;
        double roof = 0, share = 0, bw = 0;
        if (per_gbs[t] > 0) run_medians(a[t], ra[t], na[t], per_gbs[t], &roof, &share, &bw);
        print_row(o, m, t, bench_median(a[t], (size_t)na[t]), bench_median(b[t], (size_t)nb[t]), roof, share, bw);
    }
    if (!rc && (rc = bench_depth_rows(o, m, &us, probe, peer_ok, w, &fi)) != 0)
        cli_error("bench speed", "%s: %s", m->path, pl_last_error());
    free(us.logits);
    pl_model_free(us.m);
    return rc ? 1 : 0;
}

static void print_rss(const sp_opts *o, const sp_model *m, const rss_result *r)
{
    if (o->json || json_out_f) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:i, s:i}", "model", m->name, "weights", m->weights,
                              "test", "rss", "pagellm_rss_mib", num_or_null(r->ours), "peer_rss_mib",
                              num_or_null(r->peer), "ratio", num_or_null(r->peer > 0 ? r->ours / r->peer : 0), "ctx",
                              o->rss_ctx, "tokens", r->tokens);
        emit_json(o, j);
    }
    if (!o->json) {
        printf("peak RSS, %s %s, context %d, %d tokens processed: pagellm run %.1f MiB, peer-bench ", m->name,
               m->weights, o->rss_ctx, r->tokens, r->ours);
        if (r->peer > 0) printf("%.1f MiB, ratio %.2fx\n", r->peer, r->ours / r->peer);
        else printf("not measured\n");
    }
    fflush(stdout);
}

int bench_speed(int argc, char **argv)
{
    sp_opts o;
    int rc = sp_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    sp_model models[SP_MAX_MODELS], rss_m;
    int n_models = 0;
    bool any_speed = o.want[T_PP] || o.want[T_TG] || o.want[T_DEPTH] || o.want[T_X8] || o.n_dep > 0;
    if (any_speed && (rc = parse_models(o.models, models, &n_models))) return rc;
    if (o.want[T_RSS] && (rc = parse_model("rss-model", o.rss_model, strlen(o.rss_model), &rss_m))) return rc;
    if (o.json_out && !(json_out_f = fopen(o.json_out, "w"))) {
        cli_error("bench speed", "cannot write --json-out '%s': %s", o.json_out, strerror(errno));
        return 2;
    }
    const bool peer_ok = !o.no_peer && access(o.peer, X_OK) == 0;
    const char *peer_note = o.no_peer ? "no peer (--no-peer)" : "no peer (not found)";
    if (!o.no_peer && !peer_ok) fprintf(stderr, "bench speed: peer '%s' not found; pagellm only\n", o.peer);
    char exe[1024];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) { cli_error("bench speed", "cannot find /proc/self/exe"); return 1; }
    exe[el] = 0;
    for (int i = 0; i < n_models; i++)
        if ((rc = ensure_model(o.dir, &models[i]))) return rc;
    if (o.want[T_RSS] && (rc = ensure_model(o.dir, &rss_m))) return rc;
    for (int i = 0; i < n_models; i++) { /* file items: their dominant weight type */
        pl_file_info fi;
        if (models[i].weights[0]) continue;
        if (pl_file_inspect(models[i].path, &fi) != 0) { cli_error("bench speed", "%s", pl_last_error()); return 1; }
        int best = 0;
        for (int t = 1; t < fi.n_types; t++)
            if (fi.types[t].bytes > fi.types[best].bytes) best = t;
        snprintf(models[i].weights, sizeof models[i].weights, "%s", fi.n_types ? fi.types[best].type : "?");
    }
    /* RSS first: nothing of ours is mapped yet (see the header) */
    rss_result rr = {-1, -1, 0};
    if (o.want[T_RSS] && rss_measure(&o, exe, rss_m.path, &rr) != 0) fprintf(stderr, "bench speed: the rss test failed\n");
    bw_probe probe = {0};
    if (any_speed && bw_probe_init(&probe, o.bw_mib, o.threads) != 0) {
        cli_error("bench speed", "cannot map the %d MiB bandwidth buffer (--bw-mib): %s", o.bw_mib, strerror(errno));
        return 1;
    }
    double calib[2] = {0, 0};
    if (any_speed) bw_probe_calibrate(&probe, calib);
    double bw_best = 0, bw = any_speed ? bw_probe_run(&probe, 5, &bw_best) : 0;
    bool dep_tg = false;
    for (int d = 0; d < o.n_dep; d++) dep_tg = dep_tg || !o.dep[d].pp;
    fma_kind fk = FMA_F32_YMM, ik = FMA_I8_MADDUBS;
    if (dep_tg && fma_peak_kernels(o.threads, &sp_peak_f32, &sp_peak_i8, &fk, &ik) != 0) sp_peak_f32 = sp_peak_i8 = 0;
    print_header(&o, bw, bw_best, probe.pf, calib, peer_ok, peer_note);
    if (dep_tg) print_peaks(&o, fk, ik);
    if (o.want[T_RSS]) print_rss(&o, &rss_m, &rr);
    if (!o.json && any_speed)
        printf("%-16s %-7s %-20s %10s %10s %7s %10s %7s %9s %6s %8s %8s\n", "model", "weights", "test", "pagellm", "peer",
               "ratio", "roofline", "pl/roof", "peer/roof", "GB/s", "floor", "pl/floor");
    int status = 0;
    for (int i = 0; i < n_models && !status; i++) status = bench_model(&o, &models[i], &probe, peer_ok);
    bw_probe_free(&probe);
    if (!o.json && any_speed)
        printf("(tok/s; roofline = bandwidth x sequences / bytes read per decode step, where a run's bandwidth (GB/s) is "
               "the mean of probe passes taken just before, every %d decode steps during (outside the timing) and just "
               "after it; roofline, pl/roof and GB/s are the medians over our runs of each run's own; floor, for decode "
               "at depth = 1 / (weights / bandwidth + the longer of KV / bandwidth and attention's multiply-adds at the "
               "peak above), and pl/floor, likewise)\n",
               SP_SAMPLE_EVERY);
    if (json_out_f) fclose(json_out_f);
    json_out_f = NULL;
    if (!status && o.svg && any_speed && sp_svg(&o) != 0) status = 1;
    return status ? status : (o.want[T_RSS] && rr.ours < 0 ? 1 : 0);
}
