/* bench_attn_decode.c - the decode attention call of a GQA model, as
 * forward.c makes it for one thread, with the caches as the engine leaves
 * them: one token's ROWS query heads over N_KV KV heads of REP heads each,
 * all at the same depth, layer after layer.
 *
 *   bench_attn_decode L REPS TYPE N_KV REP ROWS
 *
 * L layers (1..64), each its own fake_kv pool (tests/fake_kv.h, the
 * attention tests' own: head dim 64, shuffled blocks); REPS tokens; TYPE
 * the KV row type: all (or -1), an index 0..7 or a name of f32 f16 bf16
 * q8_0 q4_0 e4m3 e5m2 f16_pool (the pool's own f16 layout), or kivi4 kivi2
 * (sealed KIVI blocks read in place) and kivi4_reader kivi2_reader (the
 * same blocks through the codec's block reader, kv_codec_k_dot /
 * v_axpy, as sequences read them before the in-place kernel); ROWS rows a
 * call, row v on KV head v / REP (so ROWS <= N_KV x REP). TinyLlama's
 * call on one of two threads: 22 L, 4 N_KV, 8 REP, 16 ROWS.
 *
 * Before each token's first layer a read of twice the last-level cache
 * (at least 64 MiB), before every other layer 8 MiB (L2), not timed: a
 * token's weights stream through the caches between two layers' attention.
 * The read buffer is written first, so that its pages are real ones (reads
 * of untouched pages all hit the one zero page and evict nothing).
 * A layer is attn_chunks_run over the ROWS rows, as forward.c calls it:
 * rows past attn_chunk_call_max keys walk the keys in chunks merged by
 * log-sum-exp, so any depth takes up to ATTN_ROWS_CAP rows; the variant
 * is chosen by capping the kernel table (PAGELLM_KERNELS=avx2 / avx512).
 * ONECALL=1 times one attn_paged call over all keys instead (its scores
 * live in scratch at once: ROWS <= attn_rows_max(NCTX)).
 * LAYOUT= where a layer's blocks sit (fake_kv_layout; row types only):
 * shuffled (the default: a pool after much churn), inorder (block i of
 * the sequence is physical block i, packed), split (in order, every
 * block's K plane in one run, then every V plane: a layer of the kv
 * pool), engine (in order, a layer's
 * planes of consecutive blocks L packed blocks apart, as in a block-major
 * pool, whose block holds every layer; L x the memory), apart:N (in
 * order, N packed blocks apart: one layer's arena where N sequences that
 * decode together took a block each in turn; N x the memory).
 * Env: NCTX=n the depth (default 2,048 keys), BS=b keys a block (default
 * 16), TILES=t t calls' worth of ROWS rows each (tile i on the KV heads
 * after tile i - 1's) walking the chunks together in one attn_chunks_run,
 * as a split decode's or a prefill's tiles do (default 1), NOEVICT=1
 * warm caches (no reads), MINT=1 the fastest call x L instead of the mean
 * (a compute-bound kernel's figure on a noisy host).
 * Times are the calling thread's CPU time.
 *
 * One line a type:
 *   decode TYPE hd 64 n_ctx N, L layers x ROWS rows (GQA REP)[, blocks LAYOUT]: avx2 MS, avx512 MS ms/token/thread
 * ms a token (L calls) for the AVX2 and the AVX-512 variant (0.000 where
 * the CPU has no AVX-512). x86-64 with AVX2+FMA+F16C.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_kv.h"
#include "kernels/attention.h"
#include "kernels/attention_chunks.h"
#include "kernels/kernels.h"
#include "kv/kv_codec.h"
#include "micro.h"
#include "rng.h"

static const char *const prog = "bench_attn_decode";

enum { HD = 64, L2_EVICT = 8 << 20 };

typedef struct {
    int L, reps, only, n_kv, rep, rows; /* only: a fake_kv_types index, -1 for all */
    int n_ctx, bs, tiles; /* tiles: calls' worth of rows walking the chunks together (TILES) */
    bool evict, best, one_call;
    fake_kv_layout lay;
    const char *lay_name; /* LAYOUT, or NULL for the default */
} decode_args;

/* The KIVI types, indices FAKE_KV_N_TYPES + 0..3 (not in "all"). */
static const char *const kivi_names[4] = {"kivi4", "kivi2", "kivi4_reader", "kivi2_reader"};

/* The codec's block reader over a fake KIVI cache (kv_view.c's, without
 * the stage: every block is sealed). */
static kv_block_ref kivi_ref(const attn_kv *kv, uint32_t blk, int n_kv)
{
    return (kv_block_ref){.dtype = kv->kv_type == ATTN_KV_KIVI2 ? KV_INT2 : KV_INT4,
                          .plane = {kv->k_base + (size_t)kv->blocks[blk] * kv->block_bytes,
                                    kv->v_base + (size_t)kv->blocks[blk] * kv->block_bytes},
                          .row_bytes = {0, kv->row_bytes},
                          .block_size = kv->block_size,
                          .n_kv_heads = (uint32_t)n_kv,
                          .head_dim = (uint32_t)kv->head_dim};
}

static void kivi_k_dot(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *const *q, int n_q,
                       float *scores, size_t ld, float *scratch)
{
    (void)own;
    const fake_kv *f = ctx;
    const kv_block_ref r = kivi_ref(&f->kv, blk, f->n_kv);
    kv_codec_k_dot(&r, (uint32_t)g, 0, n, q, n_q, scores, ld, scratch);
}

static void kivi_v_axpy(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *w, size_t ldw,
                        int n_q, float *const *acc, float *scratch)
{
    (void)own;
    const fake_kv *f = ctx;
    const kv_block_ref r = kivi_ref(&f->kv, blk, f->n_kv);
    kv_codec_v_axpy(&r, (uint32_t)g, 0, n, w, ldw, n_q, acc, scratch);
}

/* The index in fake_kv_types of TYPE s: all or -1 (-1), 0..7, or a name
 * as fake_kv_type_name prints it, '_' for ' '; -1 after naming it. */
static int decode_arg_type(const char *s, int *only)
{
    if (!strcmp(s, "all") || !strcmp(s, "-1")) return *only = -1, 0;
    char *end;
    const long i = strtol(s, &end, 10);
    if (end != s && !*end && i >= 0 && i < FAKE_KV_N_TYPES) return *only = (int)i, 0;
    for (int k = 0; k < FAKE_KV_N_TYPES; k++) {
        char name[16];
        snprintf(name, sizeof name, "%s", fake_kv_type_name(fake_kv_types[k]));
        for (char *c = name; *c; c++) *c = *c == ' ' ? '_' : *c;
        if (!strcmp(s, name)) return *only = k, 0;
    }
    for (int k = 0; k < 4; k++)
        if (!strcmp(s, kivi_names[k])) return *only = FAKE_KV_N_TYPES + k, 0;
    fprintf(stderr,
            "%s: TYPE: '%s' is not all, -1..%d or one of f32 f16 bf16 q8_0 q4_0 e4m3 e5m2 f16_pool kivi4 kivi2 "
            "kivi4_reader kivi2_reader\n",
            prog, s, FAKE_KV_N_TYPES - 1);
    return -1;
}

/* An environment knob: *out = its whole number in lo..hi, or dflt when
 * unset; -1 after naming it. */
static int decode_env_int(const char *name, long lo, long hi, int dflt, int *out)
{
    const char *v = getenv(name);
    *out = dflt;
    return v ? micro_arg_int(prog, name, v, lo, hi, out) : 0;
}

/* Fills a from argv and the environment; 0, 1 for --help, -1 after naming
 * the bad argument. */
static int decode_args_parse(decode_args *a, int argc, char **argv)
{
    static const char *const names[] = {"L", "REPS", "TYPE", "N_KV", "REP", "ROWS"};
    const int ac = micro_args_count(prog, "L REPS TYPE N_KV REP ROWS", argc, argv, names, 6, 6);
    if (ac) return ac;
    if (micro_arg_int(prog, "L", argv[1], 1, 64, &a->L) || micro_arg_int(prog, "REPS", argv[2], 1, 100000, &a->reps) ||
        decode_arg_type(argv[3], &a->only) || micro_arg_int(prog, "N_KV", argv[4], 1, ATTN_ROWS_CAP, &a->n_kv) ||
        micro_arg_int(prog, "REP", argv[5], 1, ATTN_ROWS_CAP, &a->rep) ||
        micro_arg_int(prog, "ROWS", argv[6], 1, ATTN_ROWS_CAP, &a->rows) ||
        decode_env_int("NCTX", 1, 1 << 20, 2048, &a->n_ctx) || decode_env_int("BS", 1, 256, 16, &a->bs) ||
        decode_env_int("TILES", 1, ATTN_TILES_CAP, 1, &a->tiles))
        return -1;
    if (a->rows * a->tiles > a->n_kv * a->rep) {
        const int need = (a->rows * a->tiles + a->rep - 1) / a->rep;
        if (a->tiles == 1)
            fprintf(stderr, "%s: ROWS: %d rows need %d KV heads of REP %d, N_KV is %d\n", prog, a->rows, need, a->rep, a->n_kv);
        else
            fprintf(stderr, "%s: ROWS: %d x %d rows (TILES) need %d KV heads of REP %d, N_KV is %d\n", prog, a->rows,
                    a->tiles, need, a->rep, a->n_kv);
        return -1;
    }
    if (a->tiles > 1 && getenv("ONECALL")) {
        fprintf(stderr, "%s: TILES and ONECALL: one call takes one tile\n", prog);
        return -1;
    }
    a->one_call = getenv("ONECALL") != NULL;
    if (a->one_call && a->rows > attn_rows_max(a->n_ctx)) {
        fprintf(stderr, "%s: ROWS: %d rows over %d keys (NCTX) exceed the kernel's %d a call\n", prog, a->rows,
                a->n_ctx, attn_rows_max(a->n_ctx));
        return -1;
    }
    a->evict = !getenv("NOEVICT");
    a->best = getenv("MINT") != NULL;
    a->lay = (fake_kv_layout){true, 1, false};
    a->lay_name = getenv("LAYOUT");
    if (a->lay_name && !strcmp(a->lay_name, "inorder")) a->lay.shuffled = false;
    else if (a->lay_name && !strcmp(a->lay_name, "split")) a->lay = (fake_kv_layout){false, 1, true};
    else if (a->lay_name && !strcmp(a->lay_name, "engine")) a->lay = (fake_kv_layout){false, a->L, false};
    else if (a->lay_name && !strncmp(a->lay_name, "apart:", 6)) {
        char *end;
        long n = strtol(a->lay_name + 6, &end, 10);
        if (*end || n < 1 || n > 64) {
            fprintf(stderr, "%s: LAYOUT: '%s': apart:N takes N in 1..64\n", prog, a->lay_name);
            return -1;
        }
        a->lay = (fake_kv_layout){false, (int)n, false};
    } else if (a->lay_name && strcmp(a->lay_name, "shuffled")) {
        fprintf(stderr, "%s: LAYOUT: '%s' is not shuffled, inorder, split, engine or apart:N\n", prog, a->lay_name);
        return -1;
    }
    if (a->lay_name && a->only >= FAKE_KV_N_TYPES) {
        fprintf(stderr, "%s: LAYOUT: KIVI blocks are laid out shuffled only; name a row type\n", prog);
        return -1;
    }
    /* K and V rows of every layer (of f32 for all types, the widest), spaced as the layout spaces them */
    const double row = a->only < 0 ? 4.0 * HD
                       : a->only < FAKE_KV_N_TYPES ? (double)fake_kv_head_bytes(fake_kv_elem_type(fake_kv_types[a->only]), HD)
                                                   : (double)HD; /* KIVI: under a byte an element */
    return micro_arg_bytes(prog, "L x N_KV x NCTX", 2.0 * row * a->n_kv * ((double)a->n_ctx + 2 * a->bs) * a->L *
                                                        a->lay.stride_blocks);
}

/* A buffer of n bytes, written: reading it evicts n bytes of cache. */
typedef struct {
    uint8_t *buf;
    size_t n;
} evictor;

static int evictor_init(evictor *e)
{
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const size_t two = l3 > 0 ? 2 * (size_t)l3 : 0, floor = (size_t)64 << 20, cap = (size_t)1 << 30;
    e->n = two > floor ? (two < cap ? two : cap) : floor;
    e->buf = malloc(e->n);
    if (!e->buf) return -1;
    memset(e->buf, 1, e->n);
    return 0;
}

/* Reads bytes (at most e->n) of the buffer, a line at a time. */
static void evictor_read(evictor *e, size_t bytes)
{
    bytes = bytes < e->n ? bytes : e->n;
    unsigned x = 0;
    for (size_t i = 0; i < bytes; i += 64) x += ((volatile uint8_t *)e->buf)[i];
    e->buf[0] = (uint8_t)(x | 1);
}

/* Keys a call sees at most: the depth, or a chunk pair (attn_chunks_run). */
static int decode_call_ctx(const decode_args *a)
{
    const int cm = (int)attn_chunk_call_max((uint32_t)a->bs);
    return a->one_call || a->n_ctx < cm ? a->n_ctx : cm;
}

/* One layer's attention, variant v (0 AVX2, 1 AVX-512): the chunked
 * engine path under the kernel table capped to v (decode_time sets it),
 * or one call of that variant. */
static void decode_layer(const decode_args *a, int v, const fake_kv *f, const attn_row *rows, float *scratch,
                         size_t sf, float *work)
{
    if (a->one_call) (v ? attn_paged_avx512 : attn_paged_avx2)(&f->kv, rows, a->rows, 0.125f, scratch, sf);
    else {
        const attn_row *tiles[ATTN_TILES_CAP];
        int n[ATTN_TILES_CAP];
        for (int t = 0; t < a->tiles; t++) tiles[t] = rows + (size_t)t * a->rows, n[t] = a->rows;
        attn_chunks_run(&f->kv, tiles, n, a->tiles, 0.125f, scratch, sf, work);
    }
}

/* ms a token of variant v (0 AVX2, 1 AVX-512) over the L pools f. */
static double decode_time(const decode_args *a, int v, const fake_kv *f, const attn_row *rows, float *scratch,
                          size_t sf, float *work, evictor *e)
{
    setenv("PAGELLM_KERNELS", v ? "avx512" : "avx2", 1);
    kern_init(0);
    double t = 0;
    for (int i = 0; i < a->reps; i++)
        for (int l = 0; l < a->L; l++) {
            if (a->evict) evictor_read(e, l == 0 ? e->n : (size_t)L2_EVICT);
            const double t0 = micro_cpu_s();
            decode_layer(a, v, &f[l], rows, scratch, sf, work);
            const double dt = micro_cpu_s() - t0;
            if (!a->best) t += dt;
            else if (t == 0 || dt * a->reps * a->L < t) t = dt * a->reps * a->L; /* the best call x L, as a token */
        }
    return t / a->reps * 1e3;
}

/* Times type index ti and prints its line; 0, or -1 when out of memory. */
static int decode_type(const decode_args *a, int ti, evictor *e)
{
    const int n = a->n_ctx, R = a->rows * a->tiles;
    fake_kv *f = calloc((size_t)a->L, sizeof *f);
    const int kivi = ti - FAKE_KV_N_TYPES; /* 0..3, or < 0 */
    attn_reader *rd = kivi >= 2 ? calloc((size_t)a->L, sizeof *rd) : NULL;
    const size_t rdf = kv_codec_scratch_floats(HD, (uint32_t)a->bs, ATTN_ROWS_CAP);
    const size_t sf = attn_scratch_floats(decode_call_ctx(a), HD) + (kivi >= 2 ? rdf : 0);
    float *scratch = malloc(sizeof(float) * sf), *q = malloc(sizeof(float) * R * HD), *o = malloc(sizeof(float) * R * HD);
    float *work = malloc(sizeof(float) * attn_chunks_work_floats(HD));
    int made = 0;
    bool ok = f && scratch && q && o && work && (kivi < 2 || rd);
    while (ok && made < a->L)
        if ((kivi >= 0 ? fake_kv_make_kivi(&f[made], kivi % 2 ? ATTN_KV_KIVI2 : ATTN_KV_KIVI4, HD, a->n_kv, n, a->bs,
                                           9 + (uint64_t)made)
                       : fake_kv_make_laid(&f[made], fake_kv_types[ti], HD, a->n_kv, n, a->bs, 9 + (uint64_t)made,
                                           a->lay)) == 0)
            made++;
        else ok = false;
    if (ok && kivi >= 2)
        for (int l = 0; l < a->L; l++) {
            rd[l] = (attn_reader){kivi_k_dot, kivi_v_axpy, &f[l], rdf};
            f[l].kv.reader = &rd[l];
        }
    if (ok) {
        for (int i = 0; i < R * HD; i++) q[i] = rng_gauss();
        attn_row rows[ATTN_ROWS_CAP * ATTN_TILES_CAP];
        for (int v = 0; v < R; v++) rows[v] = (attn_row){q + v * HD, o + v * HD, n, v / a->rep, 0};
        const double t2 = decode_time(a, 0, f, rows, scratch, sf, work, e);
        const double t512 = attn_avx512_available() ? decode_time(a, 1, f, rows, scratch, sf, work, e) : 0;
        printf("decode %-5s hd %d n_ctx %d, %d layers x %d rows (GQA %d)%s%s: avx2 %.3f, avx512 %.3f ms/token/thread\n",
               kivi >= 0 ? kivi_names[kivi] : fake_kv_type_name(fake_kv_types[ti]), HD, n, a->L, R, a->rep,
               a->lay_name ? ", blocks " : "", a->lay_name ? a->lay_name : "", t2, t512);
        fflush(stdout);
    }
    for (int l = 0; l < made; l++) fake_kv_free(&f[l]);
    free(f), free(scratch), free(q), free(o), free(rd), free(work);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    decode_args a;
    const int pr = decode_args_parse(&a, argc, argv);
    if (pr) return pr > 0 ? 0 : 2;
    if (!attn_avx2_available()) {
        fprintf(stderr, "%s: this CPU lacks AVX2+FMA+F16C, which the timed variants need\n", prog);
        return 1;
    }
    kern_init(0);
    evictor e = {NULL, 0};
    if (a.evict && evictor_init(&e)) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    int rc = 0;
    for (int ti = 0; ti < FAKE_KV_N_TYPES + 4 && !rc; ti++)
        if ((a.only < 0 && ti < FAKE_KV_N_TYPES) || ti == a.only) rc = decode_type(&a, ti, &e);
    if (rc) fprintf(stderr, "%s: out of memory\n", prog);
    free(e.buf);
    return rc ? 1 : 0;
}
