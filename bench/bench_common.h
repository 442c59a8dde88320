/* bench_common.h - pieces the `pagellm bench` subcommands share: the
 * subcommand entry points, a seeded RNG, order statistics, the synthetic
 * prompt that llama.cpp's peer-bench builds, and child processes (the
 * server under test and the peer).
 *
 *   bench gen        cmd_bench.c     prefill/decode tokens/s (one sequence)
 *   bench cache      cmd_bench.c     ms per decode step with/without the KV cache
 *   bench kv-memory  bench_kvmem.c   paged vs static KV in the same memory
 *   bench prefix     bench_prefix.c  time to first token, cold vs prefix-cache hit
 *   bench serve      bench_serve.c   streaming clients against `pagellm serve`
 *   bench speed      bench_speed.c   pp/tg/depth/batched decode vs the peer, roofline, peak RSS
 *   bench tiers      bench_tiers.c   time to first token, cold vs RAM vs disk-tier hit
 *   bench soak       bench_soak.c    many clients for a while: errors, KV back to 0, RSS flat
 *
 * Invariants: results are reproducible for a given --seed (the RNG is ours,
 * not libc's); medians and percentiles never read past n; children are
 * only ever signalled by the pid we got from fork().
 */
#ifndef PL_BENCH_COMMON_H
#define PL_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pagellm.h"

int bench_kv_memory(int argc, char **argv);
int bench_prefix(int argc, char **argv);
int bench_serve(int argc, char **argv);
int bench_kv_dtype(int argc, char **argv);
int bench_speed(int argc, char **argv);
int bench_tiers(int argc, char **argv);
int bench_soak(int argc, char **argv);

/* splitmix64: tiny, seedable, the same sequence on every platform. */
typedef struct {
    uint64_t s;
} bench_rng;

uint64_t bench_rng_next(bench_rng *r);
/* Uniform in [lo, hi] (inclusive); lo <= hi. */
uint32_t bench_rng_range(bench_rng *r, uint32_t lo, uint32_t hi);

/* Sort v[0..n) ascending, then the median (0 when n == 0). */
double bench_median(double *v, size_t n);
/* Sort v[0..n), then the p-quantile (0 <= p <= 1), linear between ranks. */
double bench_percentile(double *v, size_t n, double p);

/* peer-bench's -np prompt: BOS, then ids cycling from 100 (wrapped into
 * the vocabulary when it is smaller than 1100 ids, which peer-bench does
 * not do: for those models prompts agree only while 100 + i < n_vocab). */
void bench_synthetic_prompt(int32_t n_vocab, int32_t bos, int32_t *ids, int n);

/* "1,4,8" -> {1, 4, 8}: up to cap numbers in 1..2^20. 0 or -1. */
int bench_parse_ints(const char *s, int *out, int cap, int *n);

/* Monotonic seconds. */
double bench_now(void);

/* A child process with its stdout or stderr readable through fd. */
typedef struct {
    pid_t pid;  /* -1: none */
    int fd;     /* read end of the child's captured stream, -1 if none */
} bench_child;

/* Starts argv[0] (a path) with argv; capture is 1 for stdout, 2 for
 * stderr (the other one goes to /dev/null). 0 or -1 (message printed). */
int bench_child_spawn(bench_child *c, char *const argv[], int capture);
/* Reads one line (without the newline) of at most cap-1 bytes into line,
 * waiting until deadline (bench_now() seconds). 1 = line, 0 = EOF, -1 =
 * timeout or error. Reads byte by byte: only for short start-up output. */
int bench_child_readline(bench_child *c, char *line, size_t cap, double deadline);
/* Reads everything until EOF or deadline into a malloc'd NUL-terminated
 * string (NULL on timeout or error). */
char *bench_child_read_all(bench_child *c, double deadline);
/* SIGTERM, up to grace_s seconds to exit, then SIGKILL; reaps it. Returns
 * the exit status as waitpid reports it, or -1. */
int bench_child_stop(bench_child *c, double grace_s);
/* Waits (bounded by deadline) for a child that exits on its own. */
int bench_child_wait(bench_child *c, double deadline);
/* The same, and fills *ru with the child's resource usage (ru_maxrss: its
 * peak resident set in KiB) when it has been reaped. */
struct rusage;
int bench_child_wait_rusage(bench_child *c, double deadline, struct rusage *ru);

#endif
