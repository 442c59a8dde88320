/* bench_fma_peak.c - the multiply-add peak of this CPU's vector units
 * (bench/fma_peak.h): the rate no attention kernel's arithmetic can beat,
 * from which docs/long-context.md ("The arithmetic floor at depth 32768")
 * bounds a decode step, and `bench speed` its rows at depth.
 *
 *   bench_fma_peak [THREADS]     (x86-64 with AVX2 and FMA; THREADS 1..64, default 1)
 *
 * Best of 5 rounds. One line a kind the CPU runs:
 *   KIND: G instr/s a thread, G multiply-adds/s a thread, G multiply-adds/s over THREADS threads
 * KIND: f32 fma zmm (16 multiply-adds), f32 fma ymm (8), int8 dpbusd zmm
 * (64: four u8 x s8 products summed into each of 16 dwords), int8 maddubs
 * ymm (32 a triple maddubs + madd + add, AVX2's int8 dot; "instr" counts
 * triples).
 */
#include <stdio.h>

#include "../fma_peak.h"
#include "micro.h"

static const char *const prog = "bench_fma_peak";
static const char *const usage = "[THREADS]";

int main(int argc, char **argv)
{
    static const char *const names[] = {"THREADS"};
    const int rc = micro_args_count(prog, usage, argc, argv, names, 0, 1);
    if (rc) return rc > 0 ? 0 : 2;
    int nth = 1;
    if (argc > 1 && micro_arg_int(prog, "THREADS", argv[1], 1, 64, &nth) != 0) return 2;
    if (!fma_kind_runs(FMA_F32_YMM)) {
        fprintf(stderr, "%s: this CPU has no AVX2 with FMA\n", prog);
        return 2;
    }
    for (int k = 0; k < FMA_KIND_COUNT; k++) {
        if (!fma_kind_runs((fma_kind)k)) continue;
        double ipt = 0, macs1 = 0, ipt_n = 0, macs = 0;
        if (fma_peak_measure((fma_kind)k, 1, 5, &ipt, &macs1) != 0 || fma_peak_measure((fma_kind)k, nth, 5, &ipt_n, &macs) != 0) {
            fprintf(stderr, "%s: cannot start %d threads\n", prog, nth);
            return 1;
        }
        printf("%s: %.2f G instr/s a thread, %.1f G multiply-adds/s a thread, %.1f G multiply-adds/s over %d threads\n",
               fma_kind_name((fma_kind)k), ipt * 1e-9, macs1 * 1e-9, macs * 1e-9, nth);
    }
    return 0;
}
