/* bench_matmul.c - one matmul's speed: kern_matmul_mats of M activation
 * rows by one N_OUT x N_IN weight matrix, called again and again on the
 * same (cache-warm) operands.
 *
 *   bench_matmul                      the default set (below), ~45 s
 *   bench_matmul TYPE M N_IN N_OUT    one shape: TYPE any weight type
 *                                     kern_matmul takes (f32 f16 bf16, the
 *                                     Q, K and IQ4 block formats by their
 *                                     ggml names: q4_0 q5_K iq4_xs...), as
 *                                     ggml rows and,
 *                                     where kern_pack_supports it, packed;
 *                                     on 1 and 2 threads
 *
 * The default set: every type at 2048 x 2048, m = 1 and 64, 1 and 2
 * threads, as rows; q4_0 and q8_0 packed too; q4_0 8192 x 8192 (weights
 * larger than L3: the DRAM-bound decode case); then the reference kernels
 * (kern_init(1)) for q4_0, q8_0, q4_K, q6_K at m = 1.
 *
 * One line a run:
 *   VARIANT TYPE rows|packed m=M N_OUTxN_IN threads=T: US us (caller cpu US us)  GFLOP/s  GB/s of weights
 * US is the fastest call of at least 5 and 1 s of calls (other processes
 * on a shared machine only ever slow a call down); "caller cpu" is the
 * calling thread's CPU time in that call (with 2 threads, the hand-off
 * without the work); GB/s counts the weight bytes once a call. Env:
 * BENCH_THP=1 advises the packed copy to huge pages.
 *
 * Operands: tests/mm_data.h, the kernel tests' own (tests/test_kernels.c).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "micro.h"
#include "mm_data.h"
#include "tensor/dtype.h"

static const char *const prog = "bench_matmul";

/* Times one shape (see the top); 0, or -1 when out of memory. */
static int bench_one(uint32_t t, int m, int n_in, int n_out, bool packed, threadpool *tp)
{
    rng_seed(1);
    uint8_t *w = mm_weights_make(t, n_out, n_in);
    float *x = mm_acts_make(m, n_in), *y = malloc(sizeof(float) * (size_t)m * (size_t)n_out);
    const size_t huge = (size_t)1 << 21, pb = packed ? kern_pack_bytes(t, n_in, n_out) : 0;
    void *wp = packed ? aligned_alloc(huge, (pb + huge - 1) & ~(huge - 1)) : NULL;
    if (!w || !x || !y || (packed && !wp)) {
        fprintf(stderr, "%s: out of memory\n", prog);
        free(w), free(x), free(y), free(wp);
        return -1;
    }
    if (packed) {
        if (getenv("BENCH_THP")) madvise(wp, pb, MADV_HUGEPAGE);
        kern_pack(wp, w, t, n_in, n_out);
    }
    const kern_mat mat = {packed ? NULL : w, wp, t, n_in, n_out}, *mp = &mat;
    kern_matmul_mats(1, &y, x, &mp, m, tp); /* warm up */
    double best = 1e30, best_cpu = 1e30;
    const double t0 = micro_wall_s();
    for (int it = 0; it < 5 || micro_wall_s() - t0 < 1.0; it++) {
        const double a = micro_wall_s(), ac = micro_cpu_s();
        kern_matmul_mats(1, &y, x, &mp, m, tp);
        const double b = micro_wall_s() - a, bc = micro_cpu_s() - ac;
        best = b < best ? b : best;
        best_cpu = bc < best_cpu ? bc : best_cpu;
    }
    const double bytes = (double)dtype_row_bytes(t, (uint64_t)n_in) * n_out;
    printf("%-5s %-4s %-6s m=%-3d %dx%d threads=%d: %8.1f us (caller cpu %8.1f us)  %7.1f GFLOP/s  %6.1f GB/s of weights\n",
           kern_variant(), dtype_get(t)->name, packed ? "packed" : "rows", m, n_out, n_in, tp_size(tp), best * 1e6,
           best_cpu * 1e6, 2.0 * m * n_in * n_out / best * 1e-9, bytes / best * 1e-9);
    free(w);
    free(wp);
    free(x);
    free(y);
    return 0;
}

/* The default set (see the top). */
static int bench_default(threadpool *tp2)
{
    static const uint32_t types[] = {DT_Q4_0, DT_Q8_0, DT_Q4_K, DT_Q6_K, DT_F16, DT_BF16, DT_F32};
    int rc = 0;
    for (int k = 0; k < 7; k++)
        for (int mi = 0; mi < 2; mi++)
            for (int th = 0; th < 2 && !rc; th++) rc = bench_one(types[k], mi ? 64 : 1, 2048, 2048, false, th ? tp2 : NULL);
    for (int k = 0; k < 2; k++)
        for (int mi = 0; mi < 2; mi++)
            for (int th = 0; th < 2 && !rc; th++) rc = bench_one(types[k], mi ? 64 : 1, 2048, 2048, true, th ? tp2 : NULL);
    for (int th = 0; th < 2; th++)
        for (int p = 0; p < 2 && !rc; p++) rc = bench_one(DT_Q4_0, 1, 8192, 8192, p, th ? tp2 : NULL);
    kern_init(1);
    for (int k = 0; k < 4 && !rc; k++) rc = bench_one(types[k], 1, 2048, 2048, false, NULL);
    return rc;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"TYPE", "M", "N_IN", "N_OUT"};
    const char *usage = "[TYPE M N_IN N_OUT]";
    const int ac = micro_args_count(prog, usage, argc, argv, names, 0, 4);
    if (ac) return ac > 0 ? 0 : 2;
    if (argc > 1 && argc < 5) { /* all four or none */
        micro_arg_missing(prog, usage, names[argc - 1]);
        return 2;
    }
    uint32_t t = DT_Q8_0;
    int m = 0, n_in = 0, n_out = 0;
    if (argc == 5 && (micro_arg_wtype(prog, "TYPE", argv[1], &t) || micro_arg_int(prog, "M", argv[2], 1, 4096, &m) ||
                      micro_arg_int(prog, "N_IN", argv[3], 1, 1 << 20, &n_in) ||
                      micro_arg_blocks(prog, "N_IN", t, n_in) ||
                      micro_arg_int(prog, "N_OUT", argv[4], 1, 1 << 20, &n_out) ||
                      micro_arg_bytes(prog, "N_IN x N_OUT", 2.0 * (double)dtype_row_bytes(t, (uint64_t)n_in) * n_out +
                                                                4.0 * m * ((double)n_in + n_out))))
        return 2;
    threadpool *tp2 = micro_pool_new(prog, 2);
    if (!tp2) return 1;
    kern_init(0);
    int rc = 0;
    if (argc == 1) rc = bench_default(tp2);
    else {
        const int np = kern_pack_supports(t, n_in) ? 2 : 1; /* packed too where the layout pays */
        for (int th = 0; th < 2 && !rc; th++)
            for (int p = 0; p < np && !rc; p++) rc = bench_one(t, m, n_in, n_out, p, th ? tp2 : NULL);
    }
    tp_free(tp2);
    return rc ? 1 : 0;
}
