/* bench_attn_calls.c - the cost of one paged-attention call a row, for
 * every KV row type, cache-warm: the reference against the AVX2 variant,
 * one row a call and 16 rows a call.
 *
 *   bench_attn_calls          (no arguments; x86-64 with AVX2+FMA+F16C)
 *
 * Data: tests/fake_kv.h's pool (the attention tests' own): head dim 64,
 * one KV head, 2,048 keys in blocks of 16, shuffled. The rows are 16
 * queries of that head at n_ctx 2,033..2,048 (a GQA group of 16, or 16
 * prefill tokens). Times are the calling thread's CPU time (a loaded
 * machine disturbs them least): the reference one call of one row, AVX2
 * the mean of 50 calls.
 *
 * One line a type (f32 f16 bf16 q8_0 q4_0 e4m3 e5m2, and "f16 pool", the
 * pool's own f16 layout):
 *   TYPE hd 64 n_ctx 2048: ref US us/row, avx2 US us/row alone, US us/row in 16s
 * "in 16s" is one call of the 16 rows divided by 16: what sharing a call's
 * key loads among a group's rows saves against "alone".
 * bench_attn_decode times the decode call with the caches cold.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fake_kv.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "micro.h"
#include "rng.h"

static const char *const prog = "bench_attn_calls";

enum { HD = 64, N_CTX = 2048, ROWS = 16, REPS = 50 };

/* Times fake_kv type t and prints its line; 0, or -1 when out of memory. */
static int bench_type(uint32_t t)
{
    fake_kv f;
    if (fake_kv_make(&f, t, HD, 1, N_CTX, 16, 9) != 0) return -1;
    const size_t sf = attn_scratch_floats(N_CTX, HD);
    float *scratch = malloc(sizeof(float) * sf), *q = malloc(sizeof(float) * ROWS * HD);
    float *o = malloc(sizeof(float) * ROWS * HD);
    if (!scratch || !q || !o) {
        free(scratch), free(q), free(o);
        fake_kv_free(&f);
        return -1;
    }
    for (int i = 0; i < ROWS * HD; i++) q[i] = rng_gauss();
    attn_row rows[ROWS];
    for (int v = 0; v < ROWS; v++) rows[v] = (attn_row){q + v * HD, o + v * HD, N_CTX - (ROWS - 1) + v, 0, 0};
    double t0 = micro_cpu_s();
    attn_paged_ref(&f.kv, rows, 1, 0.125f, scratch, sf);
    const double t_ref = micro_cpu_s() - t0;
    t0 = micro_cpu_s();
    for (int i = 0; i < REPS; i++) attn_paged_avx2(&f.kv, rows, 1, 0.125f, scratch, sf);
    const double t_one = (micro_cpu_s() - t0) / REPS;
    t0 = micro_cpu_s();
    for (int i = 0; i < REPS; i++) attn_paged_avx2(&f.kv, rows, ROWS, 0.125f, scratch, sf);
    const double t_rows = (micro_cpu_s() - t0) / REPS / ROWS;
    printf("%-5s hd %d n_ctx %d: ref %.1f us/row, avx2 %.1f us/row alone, %.1f us/row in 16s\n", fake_kv_type_name(t),
           HD, N_CTX, t_ref * 1e6, t_one * 1e6, t_rows * 1e6);
    free(scratch);
    free(q);
    free(o);
    fake_kv_free(&f);
    return 0;
}

int main(int argc, char **argv)
{
    const int ac = micro_args_count(prog, "(no arguments)", argc, argv, NULL, 0, 0);
    if (ac) return ac > 0 ? 0 : 2;
    if (!attn_avx2_available()) {
        fprintf(stderr, "%s: this CPU lacks AVX2+FMA+F16C, which the timed variant needs\n", prog);
        return 1;
    }
    kern_init(0);
    for (int ti = 0; ti < FAKE_KV_N_TYPES; ti++)
        if (bench_type(fake_kv_types[ti])) {
            fprintf(stderr, "%s: out of memory\n", prog);
            return 1;
        }
    return 0;
}
