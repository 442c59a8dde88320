/* bench_read_runs.c - how fast one core reads memory in runs: RUN bytes
 * from the start of each SLOT-byte slot of a buffer far larger than the
 * caches, the slots visited in order or shuffled, with or without software
 * prefetch ahead. What a decode step's attention reads at depth is such
 * runs: one layer's K (or V) plane of the call's KV heads in each block of
 * the sequence (docs/long-context.md, "The pool's layout at depth").
 *
 *   bench_read_runs RUN SLOT [MIB]
 *
 * RUN: bytes read from each slot (64..SLOT, whole lines); SLOT: bytes from
 * one slot to the next (at most 64 MiB); MIB: the buffer (default 2048, on
 * huge pages where the kernel gives them). Env: ORDER=inorder (default
 * shuffled), PF=bytes ahead, along the visit order, to prefetch into L2 a
 * line at a time as the kernels do (default 0: none).
 *
 * One line, the median of 5 passes over every slot (one more first, not
 * counted), calling-thread wall time:
 *   read runs of RUN B every SLOT B, ORDER, pf PF B: G GB/s
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "micro.h"
#include "rng.h"

static const char *const prog = "bench_read_runs";

/* 16 bytes as one vector (GCC's vector extension: a register on every
 * 64-bit ISA's baseline, so the loop keeps its sums out of memory). */
typedef uint64_t v2u64 __attribute__((vector_size(16)));

/* The 64-byte lines [p, p + run) summed as vectors (the sum keeps the loads). */
static uint64_t read_run(const uint8_t *p, size_t run)
{
    v2u64 a = {0}, b = {0}, c = {0}, d = {0};
    for (size_t i = 0; i < run; i += 64) {
        v2u64 x[4];
        memcpy(x, p + i, 64);
        a += x[0], b += x[1], c += x[2], d += x[3];
    }
    a += b + c + d;
    return a[0] ^ a[1];
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"RUN", "SLOT", "MIB"};
    const int rc = micro_args_count(prog, "RUN SLOT [MIB]", argc, argv, names, 2, 3);
    if (rc) return rc > 0 ? 0 : 2;
    int run, slot, mib = 2048, pf = 0;
    if (micro_arg_int(prog, "SLOT", argv[2], 64, 64 << 20, &slot) || micro_arg_int(prog, "RUN", argv[1], 64, slot, &run) ||
        (argc > 3 && micro_arg_int(prog, "MIB", argv[3], 1, 1 << 20, &mib)))
        return 2;
    if (run % 64 || slot % 64) {
        fprintf(stderr, "%s: RUN and SLOT: whole 64-byte lines (%d, %d)\n", prog, run, slot);
        return 2;
    }
    const char *order = getenv("ORDER"), *pfs = getenv("PF");
    if (order && strcmp(order, "inorder") && strcmp(order, "shuffled")) {
        fprintf(stderr, "%s: ORDER: '%s' is not inorder or shuffled\n", prog, order);
        return 2;
    }
    const int shuffled = !order || !strcmp(order, "shuffled");
    if (pfs && micro_arg_int(prog, "PF", pfs, 0, 64 << 20, &pf)) return 2;
    const size_t bytes = (size_t)mib << 20, n = bytes / (size_t)slot;
    if (n < 2) {
        fprintf(stderr, "%s: MIB: %d MiB hold fewer than 2 slots of %d B\n", prog, mib, slot);
        return 2;
    }
    if (micro_arg_bytes(prog, "MIB", (double)bytes)) return 2;
    uint8_t *buf = mem_alloc_huge(bytes); /* zeroed by writes: real pages, not the shared zero page */
    uint32_t *at = malloc(sizeof *at * n);
    if (!buf || !at) {
        fprintf(stderr, "%s: out of memory\n", prog);
        mem_free(buf), free(at);
        return 1;
    }
    for (size_t i = 0; i < n; i++) at[i] = (uint32_t)i;
    rng_seed(7);
    if (shuffled) rng_shuffle_u32(at, n);
    /* the prefetch runs pf bytes of runs ahead: slot i + pf / run, line (pf % run) / 64 on */
    const size_t ahead = (size_t)pf / (size_t)run, off = (size_t)pf % (size_t)run;
    double gbs[6];
    uint64_t sink = 0;
    for (int pass = 0; pass < 6; pass++) {
        const double t0 = micro_wall_s();
        for (size_t i = 0; i < n; i++) {
            const uint8_t *p = buf + (size_t)at[i] * (size_t)slot;
            if (pf) /* a line ahead per line read, spread as the kernels spread theirs */
                for (size_t l = 0; l < (size_t)run; l += 64) {
                    const size_t la = l + off, j = i + ahead + la / (size_t)run;
                    if (j < n) __builtin_prefetch(buf + (size_t)at[j] * (size_t)slot + la % (size_t)run, 0, 2);
                    sink += read_run(p + l, 64);
                }
            else sink += read_run(p, (size_t)run);
        }
        gbs[pass] = (double)n * (double)run / (micro_wall_s() - t0) * 1e-9;
    }
    micro_doubles_sort(gbs + 1, 5);
    printf("read runs of %d B every %d B, %s, pf %d B: %.1f GB/s\n", run, slot, shuffled ? "shuffled" : "inorder", pf, gbs[3]);
    volatile uint64_t keep = sink; /* the loads' result is used */
    (void)keep;
    mem_free(buf), free(at);
    return 0;
}
