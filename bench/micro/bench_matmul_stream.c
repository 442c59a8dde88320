/* bench_matmul_stream.c - a decode step's matmuls against memory: COUNT
 * distinct N_OUT x N_IN matrices, one kern_matmul call each in turn, with
 * weights far larger than the caches and a short call per matrix, each
 * pass held to a plain read of the same bytes (stream_probe.h).
 *
 *   bench_matmul_stream TYPE N_IN N_OUT COUNT [M [THREADS]]
 *
 * TYPE: any weight type kern_matmul takes, by its ggml name (f32 f16 bf16
 * q4_0 q5_K iq4_xs...); packed where kern_pack_supports it, as ggml rows with
 * BENCH_ROWS=1. The matrices sit on huge pages (asked for), one 2 MiB-
 * aligned run each. M rows of activations (default 1, at most 64), THREADS
 * threads (default 2, at most 64). bench_matmul repeats one matrix, whose
 * calls start cache-warm; here every call starts cold.
 *
 * 15 passes (after one not counted), each a probe read then the COUNT
 * calls. One line:
 *   VARIANT TYPE stream m=M COUNT x N_OUTxN_IN (MiB) T threads: kernel GB/s,
 *   probe GB/s (medians of 15); kernel/probe median R (quartiles A-B)
 * R, the median of the passes' kernel/probe ratios, is the kernel's share
 * of the bandwidth it could have had: the figure to compare across runs
 * and machines (GB/s alone swing with the neighbours on a shared host).
 *
 * Operands: tests/mm_data.h, the kernel tests' own.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "micro.h"
#include "mm_data.h"
#include "stream_probe.h"
#include "tensor/dtype.h"

static const char *const prog = "bench_matmul_stream";

typedef struct {
    uint32_t t;
    int n_in, n_out, count, m, nth;
    bool packed;
    size_t bytes, stride; /* one matrix's bytes, and its 2 MiB-rounded run */
} stream_args;

/* Fills a from argv; 0, 1 for --help, -1 after naming the bad argument. */
static int stream_args_parse(stream_args *a, int argc, char **argv)
{
    static const char *const names[] = {"TYPE", "N_IN", "N_OUT", "COUNT", "M", "THREADS"};
    const int ac = micro_args_count(prog, "TYPE N_IN N_OUT COUNT [M [THREADS]]", argc, argv, names, 4, 6);
    if (ac) return ac;
    a->m = 1, a->nth = 2;
    if (micro_arg_wtype(prog, "TYPE", argv[1], &a->t) || micro_arg_int(prog, "N_IN", argv[2], 1, 1 << 20, &a->n_in) ||
        micro_arg_blocks(prog, "N_IN", a->t, a->n_in) || micro_arg_int(prog, "N_OUT", argv[3], 1, 1 << 20, &a->n_out) ||
        micro_arg_int(prog, "COUNT", argv[4], 1, 4096, &a->count) ||
        (argc > 5 && micro_arg_int(prog, "M", argv[5], 1, 64, &a->m)) ||
        (argc > 6 && micro_arg_int(prog, "THREADS", argv[6], 1, 64, &a->nth)))
        return -1;
    a->packed = kern_pack_supports(a->t, a->n_in) && !getenv("BENCH_ROWS");
    a->bytes = a->packed ? kern_pack_bytes(a->t, a->n_in, a->n_out)
                         : dtype_row_bytes(a->t, (uint64_t)a->n_in) * (size_t)a->n_out;
    a->stride = (a->bytes + ((size_t)1 << 21) - 1) & ~(((size_t)1 << 21) - 1);
    return micro_arg_bytes(prog, "N_IN x N_OUT x COUNT", (double)a->stride * a->count + 2.0 * (double)a->bytes);
}

/* The passes (see the top); 0, or -1 when out of memory. */
static int stream_run(const stream_args *a, threadpool *tp)
{
    const size_t total = a->stride * (size_t)a->count;
    rng_seed(1);
    uint8_t *w = mm_weights_make(a->t, a->n_out, a->n_in), *all = aligned_alloc((size_t)1 << 21, total);
    kern_mat *mats = calloc((size_t)a->count, sizeof *mats);
    float *x = mm_acts_make(a->m, a->n_in), *y = malloc(sizeof(float) * (size_t)a->m * (size_t)a->n_out);
    if (!w || !all || !mats || !x || !y) {
        fprintf(stderr, "%s: out of memory\n", prog);
        free(w), free(all), free(mats), free(x), free(y);
        return -1;
    }
    madvise(all, total, MADV_HUGEPAGE);
    memset(all, 0, total);
    for (int i = 0; i < a->count; i++) {
        uint8_t *d = all + a->stride * (size_t)i;
        if (a->packed) kern_pack(d, w, a->t, a->n_in, a->n_out);
        else memcpy(d, w, a->bytes);
        mats[i] = (kern_mat){a->packed ? NULL : d, a->packed ? d : NULL, a->t, a->n_in, a->n_out};
    }
    enum { REPS = 15 };
    double gk[REPS], gp[REPS], ratio[REPS];
    stream_probe sp = {all, total, 0, {0, 0}};
    for (int r = -1; r < REPS; r++) {
        const double tprobe = stream_probe_seconds(tp, &sp);
        const double t0 = micro_wall_s();
        for (int i = 0; i < a->count; i++) {
            const kern_mat *mp = &mats[i];
            kern_matmul_mats(1, &y, x, &mp, a->m, tp);
        }
        const double tk = micro_wall_s() - t0;
        if (r < 0) continue;
        gk[r] = (double)a->bytes * a->count / tk * 1e-9;
        gp[r] = (double)sp.n / tprobe * 1e-9;
        ratio[r] = gk[r] / gp[r];
    }
    micro_doubles_sort(gk, REPS);
    micro_doubles_sort(gp, REPS);
    micro_doubles_sort(ratio, REPS);
    printf("%s %s stream m=%d %d x %dx%d (%.0f MiB) %d threads: kernel %.1f GB/s, probe %.1f GB/s (medians of %d); "
           "kernel/probe median %.3f (quartiles %.3f-%.3f)\n",
           kern_variant(), dtype_get(a->t)->name, a->m, a->count, a->n_out, a->n_in,
           (double)a->bytes * a->count / 1048576.0, a->nth, gk[REPS / 2], gp[REPS / 2], REPS, ratio[REPS / 2],
           ratio[REPS / 4], ratio[3 * REPS / 4]);
    free(w), free(all), free(mats), free(x), free(y);
    return 0;
}

int main(int argc, char **argv)
{
    kern_init(0); /* before the arguments: kern_pack_supports(f16) follows the variant */
    stream_args a;
    const int pr = stream_args_parse(&a, argc, argv);
    if (pr) return pr > 0 ? 0 : 2;
    threadpool *tp = micro_pool_new(prog, a.nth);
    if (!tp) return 1;
    const int rc = stream_run(&a, tp);
    tp_free(tp);
    return rc ? 1 : 0;
}
