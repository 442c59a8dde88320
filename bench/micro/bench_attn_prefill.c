/* bench_attn_prefill.c - the attention of one prefill chunk at depth, as
 * forward.c makes it: a chunk of P tokens appended after D tokens already
 * in the cache, TinyLlama's shape (32 query heads, 4 KV heads, head dim
 * 64), one layer on the calling thread.
 *
 *   bench_attn_prefill TYPE [TYPE...]
 *
 * TYPE: f32 f16 bf16 q8_0 q4_0 e4m3 e5m2 f16_pool (the pool's own f16
 * layout) kivi4 kivi2 (sealed KIVI blocks read in place). Env: DEPTH=D
 * (default 4,096), CHUNK=P (default 512), REPS=n layers timed (default 3).
 *
 * The rows are forward.c's plan: vectors (KV head, token, query head of the
 * group) in that order, tiles of ATTN_ROWS_CAP of them (four tokens x the
 * 8 heads of one KV head), up to ATTN_TILES_CAP tiles a attn_chunks_run call
 * (so a chunk of keys read once serves 16 tiles from L2). KIVI runs the
 * engine's split mode: the blocks before a row's own one in place, its own
 * block through the codec's block reader (kv_codec_k_dot / v_axpy; the
 * engine's stage holds that block in f16, here it is sealed codes, which
 * the reader decodes). e4m3 reads every block in place (the engine reads
 * a row's own block through its reader: 1/(D/16 + 1) of its keys).
 * The cache is warm (a prefill reuses each chunk of keys across tiles, so
 * the kernel's compute is the figure).
 *
 * One line a type: CPU ms of the layer's attention, the median of REPS and
 * the fastest (the compute-bound kernel's figure on a loaded host, where
 * other tenants only add time), and GFLOP/s of the fastest, counting
 * 2 x 2 x head_dim flops per (row, key) (Q.K and the V sum; the softmax
 * left out):
 *   prefill TYPE depth D chunk P: MED ms/layer median, MIN fastest, G GFLOP/s
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_kv.h"
#include "kernels/attention.h"
#include "kernels/attention_chunks.h"
#include "kernels/kernels.h"
#include "kv/kv_codec.h"
#include "micro.h"
#include "rng.h"

static const char *const prog = "bench_attn_prefill";

enum { HD = 64, N_HEADS = 32, N_KV = 4, REP = N_HEADS / N_KV, BS = 16, MAX_REPS = 99 };

/* The fake_kv type of name s (fake_kv_type_name's, '_' for ' ', or kivi4 /
 * kivi2); 0 when unknown. */
static uint32_t type_of(const char *s)
{
    if (!strcmp(s, "kivi4")) return ATTN_KV_KIVI4;
    if (!strcmp(s, "kivi2")) return ATTN_KV_KIVI2;
    for (int k = 0; k < FAKE_KV_N_TYPES; k++) {
        char name[16];
        snprintf(name, sizeof name, "%s", fake_kv_type_name(fake_kv_types[k]));
        for (char *c = name; *c; c++) *c = *c == ' ' ? '_' : *c;
        if (!strcmp(s, name)) return fake_kv_types[k];
    }
    return 0;
}

/* The codec's block reader over the fake KIVI cache (bench_attn_decode's:
 * every block sealed, so own is ignored). */
static kv_block_ref kivi_ref(const fake_kv *f, uint32_t blk)
{
    const attn_kv *kv = &f->kv;
    return (kv_block_ref){.dtype = kv->kv_type == ATTN_KV_KIVI2 ? KV_INT2 : KV_INT4,
                          .plane = {kv->k_base + (size_t)kv->blocks[blk] * kv->block_bytes,
                                    kv->v_base + (size_t)kv->blocks[blk] * kv->block_bytes},
                          .row_bytes = {0, kv->row_bytes},
                          .block_size = kv->block_size,
                          .n_kv_heads = (uint32_t)f->n_kv,
                          .head_dim = (uint32_t)kv->head_dim};
}

static void kivi_k_dot(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *const *q, int n_q,
                       float *scores, size_t ld, float *scratch)
{
    (void)own;
    const kv_block_ref r = kivi_ref(ctx, blk);
    kv_codec_k_dot(&r, (uint32_t)g, 0, n, q, n_q, scores, ld, scratch);
}

static void kivi_v_axpy(const void *ctx, int g, uint32_t blk, uint32_t n, bool own, const float *w, size_t ldw,
                        int n_q, float *const *acc, float *scratch)
{
    (void)own;
    const kv_block_ref r = kivi_ref(ctx, blk);
    kv_codec_v_axpy(&r, (uint32_t)g, 0, n, w, ldw, n_q, acc, scratch);
}

static int env_int(const char *name, long lo, long hi, int dflt, int *out)
{
    const char *v = getenv(name);
    *out = dflt;
    return v ? micro_arg_int(prog, name, v, lo, hi, out) : 0;
}

/* One layer's attention of the chunk, forward.c's tiles in order. */
static void layer_attention(const attn_kv *kv, attn_row *rows, int n_vec, float *scratch, size_t sf, float *work)
{
    const attn_row *tiles[ATTN_TILES_CAP];
    int n_rows[ATTN_TILES_CAP], n_tiles = 0;
    for (int v0 = 0; v0 < n_vec; v0 += ATTN_ROWS_CAP) {
        tiles[n_tiles] = rows + v0;
        n_rows[n_tiles++] = n_vec - v0 < ATTN_ROWS_CAP ? n_vec - v0 : ATTN_ROWS_CAP;
        if (n_tiles == ATTN_TILES_CAP || v0 + ATTN_ROWS_CAP >= n_vec) {
            attn_chunks_run(kv, tiles, n_rows, n_tiles, 0.125f, scratch, sf, work);
            n_tiles = 0;
        }
    }
}

/* Times type t; 0, or -1 when out of memory. */
static int bench_type(const char *name, uint32_t t, int D, int P, int reps)
{
    const int n = D + P, n_vec = P * N_HEADS;
    fake_kv f;
    const int made = (t == ATTN_KV_KIVI4 || t == ATTN_KV_KIVI2) ? fake_kv_make_kivi(&f, t, HD, N_KV, n, BS, 9)
                                          : fake_kv_make(&f, t, HD, N_KV, n, BS, 9);
    if (made) return -1;
    const int call_max = (int)attn_chunk_call_max(BS);
    const bool kivi = t == ATTN_KV_KIVI4 || t == ATTN_KV_KIVI2;
    const size_t rdf = kv_codec_scratch_floats(HD, BS, ATTN_ROWS_CAP);
    const size_t sf = attn_scratch_floats(n < call_max ? n : call_max, HD) + (kivi ? rdf : 0);
    const attn_reader rd = {kivi_k_dot, kivi_v_axpy, &f, rdf};
    attn_kv split = f.kv; /* KIVI: the engine's view, a reader with the sealed blocks in place */
    split.reader = &rd;
    split.sealed = &f.kv;
    float *scratch = malloc(sizeof(float) * sf), *work = malloc(sizeof(float) * attn_chunks_work_floats(HD));
    float *q = malloc(sizeof(float) * (size_t)n_vec * HD), *o = malloc(sizeof(float) * (size_t)n_vec * HD);
    attn_row *rows = malloc(sizeof *rows * (size_t)n_vec);
    int rc = -1;
    if (scratch && work && q && o && rows) {
        for (size_t i = 0; i < (size_t)n_vec * HD; i++) q[i] = rng_gauss();
        /* vector v: KV head g, token dt, query head h of g's group (forward.c's attn_vector) */
        for (int v = 0; v < n_vec; v++) {
            const int per_g = P * REP, g = v / per_g, dt = v % per_g / REP, h = g * REP + v % REP;
            const size_t off = ((size_t)dt * N_HEADS + (size_t)h) * HD;
            rows[v] = (attn_row){q + off, o + off, D + dt + 1, g, 0};
        }
        double ms[MAX_REPS];
        for (int r = 0; r < reps; r++) {
            const double t0 = micro_cpu_s();
            layer_attention(kivi ? &split : &f.kv, rows, n_vec, scratch, sf, work);
            ms[r] = (micro_cpu_s() - t0) * 1e3;
        }
        micro_doubles_sort(ms, reps);
        const double med = ms[reps / 2], best = ms[0], keys = (double)P * D + (double)P * (P + 1) / 2;
        const double flops = 4.0 * HD * N_HEADS * keys;
        printf("prefill %-8s depth %d chunk %d: %.2f ms/layer median, %.2f fastest, %.1f GFLOP/s\n", name, D, P, med,
               best, flops / (best * 1e-3) * 1e-9);
        fflush(stdout);
        rc = 0;
    }
    free(scratch), free(work), free(q), free(o), free(rows);
    fake_kv_free(&f);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "%s: TYPE missing\nusage: %s TYPE [TYPE...]   (env DEPTH, CHUNK, REPS)\n", prog, prog);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: %s TYPE [TYPE...]   (env DEPTH, CHUNK, REPS)\n", prog);
        return 0;
    }
    int D, P, reps;
    if (env_int("DEPTH", 0, 1 << 20, 4096, &D) || env_int("CHUNK", 1, 1 << 14, 512, &P) ||
        env_int("REPS", 1, MAX_REPS, 3, &reps))
        return 2;
    for (int i = 1; i < argc; i++)
        if (!type_of(argv[i])) {
            fprintf(stderr, "%s: TYPE: '%s' is not one of f32 f16 bf16 q8_0 q4_0 e4m3 e5m2 f16_pool kivi4 kivi2\n",
                    prog, argv[i]);
            return 2;
        }
    if (micro_arg_bytes(prog, "DEPTH + CHUNK", 2.0 * 4 * HD * N_KV * ((double)D + P + 2 * BS))) return 2;
    kern_init(0);
    for (int i = 1; i < argc; i++)
        if (bench_type(argv[i], type_of(argv[i]), D, P, reps)) {
            fprintf(stderr, "%s: out of memory\n", prog);
            return 1;
        }
    return 0;
}
