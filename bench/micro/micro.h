/* micro.h - what the micro-benchmarks in bench/micro/ share: clocks, a sort
 * for medians and quartiles, and the checks of their arguments.
 *
 * Arguments: a program takes positional arguments, named in upper case in
 * its usage line. A missing, extra or bad one is refused with one line on
 * stderr that names it ("PROG: NAME: why") and exit code 2; -h or --help
 * prints the usage and exits 0. The helpers print and return a status;
 * only main exits. Header-only.
 */
#ifndef PL_BENCH_MICRO_H
#define PL_BENCH_MICRO_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

/* Monotonic wall-clock seconds. */
static inline double micro_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds of CPU time of the calling thread (what a loaded shared machine
 * disturbs least). */
static inline double micro_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int micro_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) ascending: v[n / 2] is then the median, v[n / 4] and
 * v[3 * n / 4] the quartiles. */
static inline void micro_doubles_sort(double *v, int n) { qsort(v, (size_t)n, sizeof *v, micro_cmp_double); }

/* Names the missing argument name; -1. */
static inline int micro_arg_missing(const char *prog, const char *usage, const char *name)
{
    fprintf(stderr, "%s: %s missing (usage: %s %s)\n", prog, name, prog, usage);
    return -1;
}

/* Checks the count of positional arguments: names[0..n_max) are their
 * names, the first n_min required. 0 to go on, 1 after printing the usage
 * for -h/--help (exit 0), -1 after naming the missing or extra argument
 * (exit 2). */
static inline int micro_args_count(const char *prog, const char *usage, int argc, char **argv,
                                   const char *const *names, int n_min, int n_max)
{
    const int n = argc > 1 ? argc - 1 : 0;
    if (n >= 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: %s %s\n", prog, usage);
        return 1;
    }
    if (n < n_min) return micro_arg_missing(prog, usage, names[n]);
    if (n > n_max) {
        fprintf(stderr, "%s: unexpected argument '%s' (usage: %s %s)\n", prog, argv[n_max + 1], prog, usage);
        return -1;
    }
    return 0;
}

/* *out = s, a whole number in lo..hi; -1 after naming the argument. */
static inline int micro_arg_int(const char *prog, const char *name, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s: '%s' is not a whole number in %ld..%ld\n", prog, name, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* *out = the weight type named s (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K:
 * what kern_matmul multiplies); -1 after naming the argument. */
static inline int micro_arg_wtype(const char *prog, const char *name, const char *s, uint32_t *out)
{
    const int t = dtype_from_name(s);
    if (t < 0 || !kern_matmul_supports((uint32_t)t)) {
        fprintf(stderr, "%s: %s: '%s' is not a weight type kern_matmul takes (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)\n",
                prog, name, s);
        return -1;
    }
    *out = (uint32_t)t;
    return 0;
}

/* 0 if n_in (the argument named name) holds whole blocks of type t; -1
 * after naming it. */
static inline int micro_arg_blocks(const char *prog, const char *name, uint32_t t, int n_in)
{
    const int blk = (int)dtype_get(t)->blck_size;
    if (n_in % blk) {
        fprintf(stderr, "%s: %s: %d is not a multiple of %s's block of %d\n", prog, name, n_in, dtype_get(t)->name, blk);
        return -1;
    }
    return 0;
}

/* tp_new(nth), or NULL after saying so. */
static inline threadpool *micro_pool_new(const char *prog, int nth)
{
    threadpool *tp = tp_new(nth);
    if (!tp) fprintf(stderr, "%s: cannot start %d threads\n", prog, nth);
    return tp;
}

/* 0 if bytes (what the arguments named what ask for) fit in half of this
 * machine's memory; -1 after naming them. */
static inline int micro_arg_bytes(const char *prog, const char *what, double bytes)
{
    const double mem = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (mem > 0 && bytes > mem / 2) {
        fprintf(stderr, "%s: %s: %.0f MiB, more than half of this machine's %.0f MiB\n", prog, what, bytes / 1048576.0,
                mem / 1048576.0);
        return -1;
    }
    return 0;
}

#endif
