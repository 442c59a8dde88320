/* bench_matmul_layers.c - a decode step's matmuls in the order decode runs
 * them: the matrices of LAYERS llama layers, packed on huge pages, each
 * layer q|k|v fused, wo, gate|up fused, down, with one activation row,
 * each pass held to a plain read of the same bytes (stream_probe.h).
 *
 *   bench_matmul_layers TYPE LAYERS [DIM FFN KV_DIM [THREADS]]
 *
 * TYPE: q4_0 or q8_0 (the packed layouts). LAYERS: 1..256. DIM FFN KV_DIM
 * (together; default 2048 5632 256, TinyLlama's shape): the model width,
 * the feed-forward width (both multiples of 32) and the K and V width.
 * THREADS: default 2. Where bench_matmul_stream times one shape alone,
 * this shows how the shapes fare one after another.
 *
 * 9 passes (after one not counted), each a probe read then the step. Lines:
 *   VARIANT TYPE layers L x (dim D, ffn F, kv K), MiB, T threads: probe
 *   GB/s, step/probe R (quartiles A-B)
 *     qkv      MS ms a step  GB/s
 *     wo | gate+up | down     (the same)
 * R is the median of the passes' (bytes / step time) / probe GB/s: the
 * step's share of the bandwidth it could have had; per kind, the median
 * time of its calls over all layers in a step, and its GB/s.
 *
 * Operands: tests/mm_data.h, the kernel tests' own.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "micro.h"
#include "mm_data.h"
#include "stream_probe.h"
#include "tensor/dtype.h"

static const char *const prog = "bench_matmul_layers";

enum { NK = 7, KINDS = 4, REPS = 9 }; /* matrices a layer: q k v o gate up down */

static const char *const kind_names[KINDS] = {"qkv", "wo", "gate+up", "down"};

typedef struct {
    uint32_t t;
    int L, dim, ffn, kvd, nth;
} layers_args;

/* The step's matrices: all of them packed in one huge-page buffer. */
typedef struct {
    int n_in[NK], n_out[NK];
    size_t pb[NK], total; /* packed bytes of each matrix (64-byte rounded), of all layers */
    uint8_t *all;
    kern_mat *mats; /* [L][NK] */
} layers;

/* Fills a from argv; 0, 1 for --help, -1 after naming the bad argument. */
static int layers_args_parse(layers_args *a, int argc, char **argv)
{
    static const char *const names[] = {"TYPE", "LAYERS", "DIM", "FFN", "KV_DIM", "THREADS"};
    const char *usage = "TYPE LAYERS [DIM FFN KV_DIM [THREADS]]";
    const int ac = micro_args_count(prog, usage, argc, argv, names, 2, 6);
    if (ac) return ac;
    if (argc == 4 || argc == 5) return micro_arg_missing(prog, usage, names[argc - 1]);
    *a = (layers_args){DT_Q4_0, 0, 2048, 5632, 256, 2};
    const int ti = dtype_from_name(argv[1]);
    if (ti != DT_Q4_0 && ti != DT_Q8_0) {
        fprintf(stderr, "%s: TYPE: '%s' is not q4_0 or q8_0 (the packed layouts)\n", prog, argv[1]);
        return -1;
    }
    a->t = (uint32_t)ti;
    if (micro_arg_int(prog, "LAYERS", argv[2], 1, 256, &a->L) ||
        (argc > 3 && (micro_arg_int(prog, "DIM", argv[3], 32, 1 << 16, &a->dim) ||
                      micro_arg_blocks(prog, "DIM", a->t, a->dim) ||
                      micro_arg_int(prog, "FFN", argv[4], 32, 1 << 18, &a->ffn) ||
                      micro_arg_blocks(prog, "FFN", a->t, a->ffn) ||
                      micro_arg_int(prog, "KV_DIM", argv[5], 1, 1 << 16, &a->kvd))) ||
        (argc > 6 && micro_arg_int(prog, "THREADS", argv[6], 1, 64, &a->nth)))
        return -1;
    const double layer = (double)dtype_row_bytes(a->t, (uint64_t)a->dim) * (2.0 * a->dim + 2.0 * a->kvd + 2.0 * a->ffn) +
                         (double)dtype_row_bytes(a->t, (uint64_t)a->ffn) * a->dim;
    return micro_arg_bytes(prog, "LAYERS x (DIM FFN KV_DIM)", layer * (a->L + 1));
}

static void layers_free(layers *s)
{
    mem_free(s->all);
    free(s->mats);
}

/* Packs L layers of random weights of a's shape into s; 0, or -1 when out
 * of memory (then s holds nothing). */
static int layers_make(layers *s, const layers_args *a)
{
    const int n_in[NK] = {a->dim, a->dim, a->dim, a->dim, a->dim, a->dim, a->ffn};
    const int n_out[NK] = {a->dim, a->kvd, a->kvd, a->dim, a->ffn, a->ffn, a->dim};
    memset(s, 0, sizeof *s);
    memcpy(s->n_in, n_in, sizeof n_in);
    memcpy(s->n_out, n_out, sizeof n_out);
    size_t per_layer = 0;
    for (int k = 0; k < NK; k++) {
        s->pb[k] = (kern_pack_bytes(a->t, n_in[k], n_out[k]) + 63) & ~(size_t)63;
        per_layer += s->pb[k];
    }
    s->total = per_layer * (size_t)a->L;
    s->all = mem_alloc_huge(s->total); /* as the packed weights: 2 MiB pages */
    s->mats = calloc((size_t)a->L * NK, sizeof *s->mats);
    uint8_t *src[NK] = {0};
    int ok = s->all && s->mats;
    rng_seed(1);
    for (int k = 0; k < NK && ok; k++) ok = (src[k] = mm_weights_make(a->t, n_out[k], n_in[k])) != NULL;
    for (int l = 0; l < a->L && ok; l++) {
        size_t off = per_layer * (size_t)l;
        for (int k = 0; k < NK; k++) {
            kern_pack(s->all + off, src[k], a->t, n_in[k], n_out[k]);
            s->mats[l * NK + k] = (kern_mat){NULL, s->all + off, a->t, n_in[k], n_out[k]};
            off += s->pb[k];
        }
    }
    for (int k = 0; k < NK; k++) free(src[k]);
    if (!ok) layers_free(s);
    return ok ? 0 : -1;
}

/* One decode step over every layer: acc[kind] += its seconds. */
static void layers_step(const layers *s, int L, float **y, const float *x, threadpool *tp, double acc[KINDS])
{
    for (int l = 0; l < L; l++) {
        const kern_mat *m = &s->mats[l * NK];
        const kern_mat *qkv[3] = {&m[0], &m[1], &m[2]}, *wo = &m[3], *gu[2] = {&m[4], &m[5]}, *down = &m[6];
        double a = micro_wall_s();
        kern_matmul_mats(3, y, x, qkv, 1, tp);
        double b = micro_wall_s();
        acc[0] += b - a;
        kern_matmul_mats(1, y, x, &wo, 1, tp);
        a = micro_wall_s();
        acc[1] += a - b;
        kern_matmul_mats(2, y, x, gu, 1, tp);
        b = micro_wall_s();
        acc[2] += b - a;
        kern_matmul_mats(1, y, x, &down, 1, tp);
        acc[3] += micro_wall_s() - b;
    }
}

/* The passes and the lines (see the top); 0, or -1 when out of memory. */
static int layers_run(const layers_args *a, threadpool *tp)
{
    layers s;
    if (layers_make(&s, a)) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return -1;
    }
    const int wide = a->ffn > a->dim ? a->ffn : a->dim, ny = wide > a->kvd ? wide : a->kvd;
    float *x = mm_acts_make(1, wide), *y[3] = {0};
    int ok = x != NULL;
    for (int i = 0; i < 3 && ok; i++) ok = (y[i] = malloc(sizeof(float) * (size_t)ny)) != NULL;
    double tk[KINDS][REPS], ratio[REPS], gp[REPS];
    stream_probe sp = {s.all, s.total, 0, {0, 0}};
    for (int r = -1; r < REPS && ok; r++) {
        const double tprobe = stream_probe_seconds(tp, &sp);
        double acc[KINDS] = {0};
        const double t0 = micro_wall_s();
        layers_step(&s, a->L, y, x, tp, acc);
        const double step = micro_wall_s() - t0;
        if (r < 0) continue;
        for (int k = 0; k < KINDS; k++) tk[k][r] = acc[k];
        gp[r] = (double)s.total / tprobe * 1e-9;
        ratio[r] = (double)s.total / step * 1e-9 / gp[r];
    }
    if (ok) {
        micro_doubles_sort(gp, REPS);
        micro_doubles_sort(ratio, REPS);
        printf("%s %s layers %d x (dim %d, ffn %d, kv %d), %.0f MiB, %d threads: probe %.1f GB/s, step/probe %.3f "
               "(quartiles %.3f-%.3f)\n",
               kern_variant(), dtype_get(a->t)->name, a->L, a->dim, a->ffn, a->kvd, (double)s.total / 1048576.0, a->nth,
               gp[REPS / 2], ratio[REPS / 2], ratio[REPS / 4], ratio[3 * REPS / 4]);
        const size_t kb[KINDS] = {s.pb[0] + s.pb[1] + s.pb[2], s.pb[3], s.pb[4] + s.pb[5], s.pb[6]};
        for (int k = 0; k < KINDS; k++) {
            micro_doubles_sort(tk[k], REPS);
            printf("  %-8s %7.3f ms a step  %6.1f GB/s\n", kind_names[k], tk[k][REPS / 2] * 1e3,
                   (double)kb[k] * a->L / tk[k][REPS / 2] * 1e-9);
        }
    } else fprintf(stderr, "%s: out of memory\n", prog);
    for (int i = 0; i < 3; i++) free(y[i]);
    free(x);
    layers_free(&s);
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    layers_args a;
    const int pr = layers_args_parse(&a, argc, argv);
    if (pr) return pr > 0 ? 0 : 2;
    threadpool *tp = micro_pool_new(prog, a.nth);
    if (!tp) return 1;
    kern_init(0);
    const int rc = layers_run(&a, tp);
    tp_free(tp);
    return rc ? 1 : 0;
}
