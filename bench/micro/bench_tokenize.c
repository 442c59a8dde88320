/* bench_tokenize.c - tokenizer throughput: tokenizes one text file with each
 * vocabulary given and prints MB/s (best of several runs, one thread).
 *
 *   bench_tokenize TEXT VOCAB.gguf...
 *
 * One line per vocabulary:
 *   tokenize llama-spm: 1.000 MiB -> 262144 tokens in 0.123 s = 8.13 MB/s (load 0.020 s)
 * and, for the same ids, detokenization speed. Built and run by
 * bench/bench_tokenize.sh against build/libpagellm.a; uses only pagellm.h.
 */
#include "pagellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    if (b) b[n] = '\0', *len = (size_t)n;
    return b;
}

/* The short name of a vocabulary file: ggml-vocab-NAME.gguf -> NAME. */
static const char *short_name(const char *path, char *buf, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "ggml-vocab-", 11) == 0) base += 11;
    snprintf(buf, cap, "%s", base);
    char *dot = strstr(buf, ".gguf");
    if (dot) *dot = '\0';
    return buf;
}

static int bench_one(const char *path, const char *text, size_t len, int runs)
{
    char name[128];
    short_name(path, name, sizeof name);
    pl_vocab *v = NULL;
    double t0 = now_s();
    if (pl_vocab_load(&v, path) != 0) {
        fprintf(stderr, "bench_tokenize: %s\n", pl_last_error());
        return 1;
    }
    double t_load = now_s() - t0, best = 1e30, best_detok = 1e30;
    size_t n = 0;
    for (int r = 0; r < runs; r++) {
        int32_t *ids = NULL;
        char *back = NULL;
        size_t blen = 0;
        double a = now_s();
        int rc = pl_tokenize(v, text, len, false, false, &ids, &n);
        double b = now_s();
        if (!rc) rc = pl_detokenize(v, ids, n, &back, &blen);
        double c = now_s();
        pl_free(ids);
        pl_free(back);
        if (rc) {
            fprintf(stderr, "bench_tokenize: %s\n", pl_last_error());
            pl_vocab_free(v);
            return 1;
        }
        if (b - a < best) best = b - a;
        if (c - b < best_detok) best_detok = c - b;
    }
    double mb = (double)len / 1e6;
    printf("tokenize %s: %.3f MiB -> %zu tokens in %.3f s = %.2f MB/s (load %.3f s)\n", name,
           (double)len / (1024.0 * 1024.0), n, best, mb / best, t_load);
    printf("detokenize %s: %zu tokens in %.3f s = %.2f MB/s\n", name, n, best_detok, mb / best_detok);
    pl_vocab_free(v);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenize TEXT VOCAB.gguf...\n");
        return 2;
    }
    size_t len = 0;
    char *text = read_file(argv[1], &len);
    if (!text) {
        fprintf(stderr, "bench_tokenize: cannot read %s\n", argv[1]);
        return 1;
    }
    int rc = 0;
    for (int i = 2; i < argc && !rc; i++) rc = bench_one(argv[i], text, len, 3);
    free(text);
    return rc;
}
