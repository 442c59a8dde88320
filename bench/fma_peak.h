/* fma_peak.h - the multiply-add peak of this CPU's vector units, measured:
 * the rate no attention kernel's arithmetic can beat. `bench speed` bounds
 * its decode rows at depth with it (the arithmetic floor beside the
 * bandwidth roofline); bench/micro/bench_fma_peak prints it.
 *
 * Each thread runs 12 independent chains of one instruction (more than an
 * FMA unit's latency times its throughput on any x86 CPU, so no chain
 * waits); a round's time is its wall clock, the best of `rounds` is kept.
 */
#ifndef PL_BENCH_FMA_PEAK_H
#define PL_BENCH_FMA_PEAK_H

#include <stdbool.h>

typedef enum {
    FMA_F32_ZMM,     /* vfmadd zmm: 16 multiply-adds */
    FMA_F32_YMM,     /* vfmadd ymm: 8 */
    FMA_I8_DPBUSD,   /* vpdpbusd zmm: 64 (four u8 x s8 products into each of 16 dwords) */
    FMA_I8_MADDUBS,  /* vpmaddubsw + vpmaddwd + vpaddd ymm, the AVX2 int8 dot: 32 a triple */
    FMA_KIND_COUNT
} fma_kind;

const char *fma_kind_name(fma_kind k);  /* "f32 fma zmm", ... */
int fma_kind_macs(fma_kind k);          /* multiply-adds an instruction (a triple for maddubs) */
bool fma_kind_runs(fma_kind k);         /* this CPU has the instructions (false off x86-64) */

/* Runs kind k on nth threads (1..64), `rounds` rounds: the best round's
 * instructions a second a thread and multiply-adds a second over all
 * threads. 0, or -1 (kind not run here, bad arguments, no thread). */
int fma_peak_measure(fma_kind k, int nth, int rounds, double *instr_per_s_thread, double *macs_per_s);

/* The rates the attention kernels compute with on this CPU, over nth
 * threads: f32 (zmm where AVX-512 runs, else ymm) and int8 (dpbusd zmm
 * where AVX512-VNNI runs, else the AVX2 triple). 0, or -1 (not x86-64 with
 * AVX2 and FMA). */
int fma_peak_kernels(int nth, double *f32_macs_per_s, double *i8_macs_per_s, fma_kind *f32_kind, fma_kind *i8_kind);

#endif
