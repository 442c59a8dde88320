/* bench_attention.c - decode attention against its memory floor: one decode
 * token's attention over a paged KV pool with the cache cold, beside a plain
 * read of the same bytes, layer by layer as the engine runs it.
 *
 *   bench_attention [--shape tinyllama|110m|gqa4] [--ctx N[,N...]] [--kv f16|q8_0]
 *                   [--threads T] [--reps R] [--one-call]
 *
 * Long rows go through attn_chunks_run as in the engine (keys in chunks,
 * merged by log-sum-exp); --one-call makes one attn_paged call of all keys
 * instead (what the chunks save).
 *
 * Why cold: in a decode step every layer's matmuls stream far more than the
 * caches hold between two visits of a layer's KV, so attention always finds
 * its KV in DRAM. Here each layer's K/V lines are flushed (clflush) before it
 * runs, outside the timing, and the pool's blocks sit in random order, as in
 * a pool that has served many sequences.
 *
 * Per layer the threads split the query heads as forward.c does for one
 * decode token (each thread a contiguous run of heads, whole GQA groups) and
 * make one attn_paged call each, in one tp_run (a hand-off included, as in
 * the engine). The floor is each thread reading the same bytes with plain
 * AVX2-width loads (no compute), flushed the same way. Prints per context
 * the median over reps of: us a layer for attention and for the read, the
 * KV GB/s each reaches, and attention / read.
 *
 * Built and run by bench/bench_attention.sh against build/libpagellm.a. It
 * takes internal headers (kernels/attention.h, base/threadpool.h), as the
 * tests do: the attention kernel has no public entry.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/threadpool.h"
#include "kernels/attention.h"
#include "kernels/attention_chunks.h"
#include "kernels/kernels.h"
#include "tensor/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
static void flush_line(const void *p) { _mm_clflush(p); }
static void flush_fence(void) { _mm_mfence(); }
/* Sum of len bytes at r (len a multiple of 32) with 32-byte loads: the read
 * floor, as fast as a core reads without computing. */
__attribute__((target("avx2"))) static uint64_t read_bytes(const uint8_t *r, size_t len)
{
    __m256i a = _mm256_setzero_si256();
    for (size_t i = 0; i < len; i += 32) a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(r + i)));
    return (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 3);
}
#else
static void flush_line(const void *p) { (void)p; }
static void flush_fence(void) {}
static uint64_t read_bytes(const uint8_t *r, size_t len)
{
    uint64_t sum = 0;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        uint64_t v;
        memcpy(&v, r + i, 8);
        sum += v;
    }
    return sum;
}
#endif

enum { BLOCK = 16, POOL_SPARE = 8, MAX_CTX_LIST = 8 };

typedef struct {
    const char *name;
    int n_heads, n_kv_heads, head_dim, n_layers;
} shape;

static const shape shapes[] = {
    {"tinyllama", 32, 4, 64, 22}, /* GQA 8 query heads a KV head */
    {"110m", 12, 12, 64, 12},     /* no GQA */
    {"gqa4", 32, 8, 128, 4},      /* Llama-3-8B's heads (4 a KV head, dim 128), 4 layers */
};

typedef struct {
    const shape *s;
    uint32_t kv_type;
    size_t head_bytes, row_bytes, plane_bytes, block_bytes;
    uint8_t *pool;
    uint32_t *blocks;
    int n_ctx, layer, nth;
    float *q, *out, **scratch;
    size_t scratch_floats, work_floats; /* work_floats at the end of scratch: attn_chunks_run's */
    bool one_call;                      /* --one-call: one attn_paged call per thread, no chunks */
    uint64_t sink; /* the read jobs' sums (atomic adds), so the reads are not optimised away */
} bench;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Heads [h0, h1) of thread ith: whole GQA groups, as even as they go. */
static void thread_heads(const bench *b, int ith, int *h0, int *h1)
{
    const int rep = b->s->n_heads / b->s->n_kv_heads, groups = b->s->n_kv_heads;
    *h0 = groups * ith / b->nth * rep;
    *h1 = groups * (ith + 1) / b->nth * rep;
}

/* Bytes of row j's plane (0 = K, 1 = V) in this layer, from KV head g0. */
static const uint8_t *row_at(const bench *b, int plane, int j, int g0)
{
    return b->pool + (size_t)b->blocks[j / BLOCK] * b->block_bytes +
           (size_t)b->layer * 2 * b->plane_bytes + (size_t)plane * b->plane_bytes +
           (size_t)(j % BLOCK) * b->row_bytes + (size_t)g0 * b->head_bytes;
}

static void flush_job(void *arg, int ith, int nth)
{
    const bench *b = arg;
    for (int plane = 0; plane < 2; plane++)
        for (int j = ith; j < b->n_ctx; j += nth) {
            const uint8_t *r = row_at(b, plane, j, 0);
            for (size_t i = 0; i < b->row_bytes; i += 64) flush_line(r + i);
        }
    flush_fence();
}

static void attn_job(void *arg, int ith, int nth)
{
    bench *b = arg;
    (void)nth;
    int h0, h1;
    thread_heads(b, ith, &h0, &h1);
    const int rep = b->s->n_heads / b->s->n_kv_heads, hd = b->s->head_dim;
    attn_row rows[ATTN_ROWS_CAP];
    for (int h = h0; h < h1; h++)
        rows[h - h0] = (attn_row){b->q + (size_t)h * hd, b->out + (size_t)h * hd, b->n_ctx, h / rep, 0};
    const attn_kv kv = {
        .blocks = b->blocks,
        .k_base = b->pool + (size_t)b->layer * 2 * b->plane_bytes, /* this layer's planes in block 0 */
        .v_base = b->pool + (size_t)(b->layer * 2 + 1) * b->plane_bytes,
        .block_bytes = b->block_bytes,
        .v_block_bytes = b->block_bytes,
        .block_size = BLOCK,
        .row_bytes = b->row_bytes,
        .head_bytes = b->head_bytes,
        .kv_type = b->kv_type,
        .head_dim = hd,
    };
    const float scale = 1.0f / sqrtf((float)hd);
    if (b->one_call) {
        attn_paged(&kv, rows, h1 - h0, scale, b->scratch[ith], b->scratch_floats);
    } else { /* as the engine calls it: long rows in chunks */
        const attn_row *tile = rows;
        const int n = h1 - h0;
        attn_chunks_run(&kv, &tile, &n, 1, scale, b->scratch[ith], b->scratch_floats - b->work_floats,
                        b->scratch[ith] + (b->scratch_floats - b->work_floats));
    }
}

static void read_job(void *arg, int ith, int nth)
{
    bench *b = arg;
    (void)nth;
    int h0, h1;
    thread_heads(b, ith, &h0, &h1);
    const int rep = b->s->n_heads / b->s->n_kv_heads;
    const size_t len = (size_t)(h1 - h0) / (size_t)rep * b->head_bytes;
    uint64_t sum = 0;
    for (int plane = 0; plane < 2; plane++)
        for (int j = 0; j < b->n_ctx; j++) /* whole 32-byte loads: a q8_0 run's last bytes are left out */
            sum += read_bytes(row_at(b, plane, j, h0 / rep), len & ~(size_t)31);
    __atomic_fetch_add(&b->sink, sum, __ATOMIC_RELAXED);
}

static int parse_ctx_list(const char *s, int *out)
{
    int n = 0;
    while (*s && n < MAX_CTX_LIST) {
        char *end;
        const long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 65536) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *s ? -1 : n;
}

int main(int argc, char **argv)
{
    const shape *s = &shapes[0];
    int ctx[MAX_CTX_LIST] = {576, 2112}, n_ctx_list = 2, nth = 2, reps = 5;
    uint32_t kv_type = DT_F16;
    bool one_call = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--one-call")) {
            one_call = true;
            continue;
        }
        if (!v) { fprintf(stderr, "bench_attention: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--shape")) {
            s = NULL;
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
                if (!strcmp(v, shapes[k].name)) s = &shapes[k];
            if (!s) { fprintf(stderr, "bench_attention: --shape: unknown '%s' (tinyllama, 110m, gqa4)\n", v); return 2; }
        } else if (!strcmp(a, "--ctx")) {
            n_ctx_list = parse_ctx_list(v, ctx);
            if (n_ctx_list < 1) { fprintf(stderr, "bench_attention: --ctx: want N[,N...], 1..65536, at most 8\n"); return 2; }
        } else if (!strcmp(a, "--kv")) {
            if (!strcmp(v, "f16")) kv_type = DT_F16;
            else if (!strcmp(v, "q8_0")) kv_type = DT_Q8_0;
            else { fprintf(stderr, "bench_attention: --kv: f16 or q8_0, not '%s'\n", v); return 2; }
        } else if (!strcmp(a, "--threads")) {
            nth = atoi(v);
            if (nth < 1 || nth > 64) { fprintf(stderr, "bench_attention: --threads: 1..64\n"); return 2; }
        } else if (!strcmp(a, "--reps")) {
            reps = atoi(v);
            if (reps < 1 || reps > 1000) { fprintf(stderr, "bench_attention: --reps: 1..1000\n"); return 2; }
        } else {
            fprintf(stderr, "bench_attention: unknown option %s\n", a);
            return 2;
        }
    }
    if (s->n_kv_heads % nth || s->n_heads / nth > ATTN_ROWS_CAP) {
        fprintf(stderr, "bench_attention: %d thread(s) cannot split %s's %d KV heads evenly within %d rows a call\n",
                nth, s->name, s->n_kv_heads, ATTN_ROWS_CAP);
        return 2;
    }
    kern_init(0);
    int max_ctx = 0;
    for (int i = 0; i < n_ctx_list; i++) max_ctx = ctx[i] > max_ctx ? ctx[i] : max_ctx;
    if (one_call && s->n_heads / nth > attn_rows_max(max_ctx)) {
        fprintf(stderr, "bench_attention: %d rows a call over %d keys exceed the kernel's %d\n", s->n_heads / nth,
                max_ctx, attn_rows_max(max_ctx));
        return 2;
    }

    bench b = {.s = s, .kv_type = kv_type, .nth = nth};
    b.head_bytes = (size_t)dtype_row_bytes(kv_type, (uint64_t)s->head_dim);
    b.row_bytes = b.head_bytes * (size_t)s->n_kv_heads;
    b.plane_bytes = b.row_bytes * BLOCK;
    b.block_bytes = 2 * b.plane_bytes * (size_t)s->n_layers;
    const int n_blocks = (max_ctx + BLOCK - 1) / BLOCK + POOL_SPARE;
    const size_t pool_bytes = b.block_bytes * (size_t)n_blocks;
    b.pool = mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    b.blocks = malloc(sizeof *b.blocks * (size_t)n_blocks);
    const size_t qf = (size_t)s->n_heads * (size_t)s->head_dim;
    b.q = malloc(sizeof(float) * qf);
    b.out = malloc(sizeof(float) * qf);
    b.scratch = calloc((size_t)nth, sizeof *b.scratch);
    threadpool *tp = tp_new(nth);
    if (b.pool == MAP_FAILED || !b.blocks || !b.q || !b.out || !b.scratch || !tp) {
        fprintf(stderr, "bench_attention: out of memory (%zu MiB pool)\n", pool_bytes >> 20);
        return 1;
    }
    madvise(b.pool, pool_bytes, MADV_HUGEPAGE); /* as kv_pool does */
    if (!one_call) {
        const int call = max_ctx < (int)attn_chunk_call_max(BLOCK) ? max_ctx : (int)attn_chunk_call_max(BLOCK);
        b.work_floats = attn_chunks_work_floats(s->head_dim);
        b.scratch_floats = attn_scratch_floats(call, s->head_dim) + b.work_floats;
    } else {
        b.scratch_floats = attn_scratch_floats(max_ctx, s->head_dim);
    }
    b.one_call = one_call;
    for (int t = 0; t < nth; t++)
        if (!(b.scratch[t] = malloc(sizeof(float) * b.scratch_floats))) return 1;
    /* values: f16 in [0.125, 0.25), q8_0 blocks of d = 2^-7 and small quants */
    srand(1);
    if (kv_type == DT_F16) {
        for (size_t i = 0; i < pool_bytes / 2; i++) ((uint16_t *)b.pool)[i] = (uint16_t)(0x3000 + (rand() & 0x3ff));
    } else {
        for (size_t i = 0; i < pool_bytes; i++) b.pool[i] = (uint8_t)(rand() % 17 - 8);
        for (size_t off = 0; off + 34 <= pool_bytes; off += 34) { b.pool[off] = 0x00; b.pool[off + 1] = 0x20; }
    }
    for (size_t i = 0; i < qf; i++) b.q[i] = (float)(rand() % 200) / 100.0f - 1.0f;
    for (int i = 0; i < n_blocks; i++) b.blocks[i] = (uint32_t)i;
    for (int i = n_blocks - 1; i > 0; i--) { /* blocks anywhere in the pool */
        const int k = rand() % (i + 1);
        const uint32_t t = b.blocks[i];
        b.blocks[i] = b.blocks[k];
        b.blocks[k] = t;
    }

    printf("decode attention, cache cold: %s (%d heads, %d KV heads, dim %d, %d layers), %s KV, %d threads, median "
           "of %d\n", s->name, s->n_heads, s->n_kv_heads, s->head_dim, s->n_layers,
           kv_type == DT_F16 ? "f16" : "q8_0", nth, reps);
    printf("%8s %12s %10s %12s %10s %10s\n", "keys", "attn us/l", "attn GB/s", "read us/l", "read GB/s", "attn/read");
    double *ta = malloc(sizeof(double) * (size_t)reps), *tr = malloc(sizeof(double) * (size_t)reps);
    if (!ta || !tr) return 1;
    for (int c = 0; c < n_ctx_list; c++) {
        b.n_ctx = ctx[c];
        for (int r = 0; r < reps; r++) {
            double sa = 0, sr = 0;
            for (int l = 0; l < s->n_layers; l++) {
                b.layer = l;
                tp_run(tp, flush_job, &b);
                double t0 = now_s();
                tp_run(tp, attn_job, &b);
                sa += now_s() - t0;
                tp_run(tp, flush_job, &b);
                t0 = now_s();
                tp_run(tp, read_job, &b);
                sr += now_s() - t0;
            }
            ta[r] = sa / s->n_layers;
            tr[r] = sr / s->n_layers;
        }
        qsort(ta, (size_t)reps, sizeof *ta, cmp_double);
        qsort(tr, (size_t)reps, sizeof *tr, cmp_double);
        const double a = ta[reps / 2], rd = tr[reps / 2], bytes = 2.0 * (double)b.row_bytes * b.n_ctx;
        printf("%8d %12.1f %10.2f %12.1f %10.2f %9.2fx\n", b.n_ctx, a * 1e6, bytes / a / 1e9, rd * 1e6,
               bytes / rd / 1e9, a / rd);
    }
    free(ta);
    free(tr);
    for (int t = 0; t < nth; t++) free(b.scratch[t]);
    free(b.scratch);
    free(b.q);
    free(b.out);
    free(b.blocks);
    munmap(b.pool, pool_bytes);
    tp_free(tp);
    return 0;
}
