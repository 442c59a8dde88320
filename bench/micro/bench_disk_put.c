/* bench_disk_put.c - the CPU a disk-tier writer spends per MiB written, by
 * where the filesystem work goes: N entries of KIB KiB each put into a fresh
 * directory, in six ways:
 *
 *   store         store_disk's put_many (the layout this build has: 3,
 *                 records appended to segment files)
 *   store, full   the same with a limit of a quarter of the entries, so
 *                 that most puts evict one (a record marked dead and its
 *                 bytes punched out)
 *   mkdir ab/cd   a file per entry in DIR/ab/cd/ (layout 1), both
 *                 directories made on each put
 *   mkdir ab      a file per entry in DIR/ab/, that directory made on each put
 *   made before   a file per entry in DIR/ab/, the 256 directories made
 *                 untimed (layout 2)
 *   one segment   every entry appended to one file by write() alone
 * A file per entry is written in 64 KiB write()s to a temp file renamed
 * over its name, as layouts 1 and 2 did.
 *
 *   bench_disk_put DIR N KIB [REPS]
 *
 * DIR must not exist (it is made and removed). The ways rotate REPS times
 * (default 5); each prints the median, min and max thread CPU per MiB, e.g.
 *   store        1.20 ms/MiB (1.10-1.40)
 * Keys are random, so a fresh tier's directories are met as in serving.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "micro.h"
#include "store/store_disk.h"
#include "store/store_entry.h"

static const char usage[] = "DIR N KIB [REPS]";

enum { WAY_STORE, WAY_STORE_FULL, WAY_TWO_LEVEL, WAY_ONE_LEVEL, WAY_MADE_BEFORE, WAY_SEGMENT, N_WAYS };
static const char *const way_name[N_WAYS] = {"store", "store, full", "mkdir ab/cd", "mkdir ab", "made before",
                                             "one segment"};

#define PIECE ((size_t)64 << 10)

static void rm_dir(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

static bool write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n < PIECE ? n : PIECE);
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* One entry as a file under dir/<sub>: temp, 64 KiB pieces, rename. */
static bool put_file(const char *dir, const char *sub, const char *hex, const uint8_t *v, size_t len)
{
    char tmp[4200], path[4200];
    snprintf(tmp, sizeof tmp, "%s/%s/%s.tmp", dir, sub, hex);
    snprintf(path, sizeof path, "%s/%s/%s.kv", dir, sub, hex);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    bool ok = write_all(fd, v, len);
    ok = close(fd) == 0 && ok;
    return ok && rename(tmp, path) == 0;
}

/* Puts n entries the given way into dir (made here); the thread CPU
 * seconds of the puts, or -1 on a failed write. */
static double run_way(int way, const char *dir, int n, uint8_t *e, size_t len, uint64_t *seed)
{
    if (mkdir(dir, 0755) != 0) return -1;
    char err[512], p[4200];
    store_backend *b = NULL;
    int seg = -1;
    uint64_t limit = way == WAY_STORE_FULL ? (uint64_t)(n / 4 > 0 ? n / 4 : 1) * len : UINT64_MAX;
    if ((way == WAY_STORE || way == WAY_STORE_FULL) && !(b = store_disk_open(dir, limit, err, sizeof err))) {
        fprintf(stderr, "bench_disk_put: DIR: %s\n", err);
        return -1;
    }
    if (way == WAY_MADE_BEFORE)
        for (int i = 0; i < 256; i++) {
            snprintf(p, sizeof p, "%s/%02x", dir, i);
            mkdir(p, 0755);
        }
    if (way == WAY_SEGMENT) {
        snprintf(p, sizeof p, "%s/segment", dir);
        seg = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (seg < 0) return -1;
    }
    bool ok = true;
    double t0 = micro_cpu_s();
    for (int i = 0; i < n && ok; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        store_entry_meta m = {.salt = {1, 2}, .key = {{*seed, *seed ^ 0x9e3779b97f4a7c15ull}}, .n_tokens = 4,
                              .payload_len = len - store_entry_size(4, 0)};
        int32_t tok[4] = {1, 2, 3, 4};
        store_entry_begin(e, &m, tok);
        store_entry_seal(e, len);
        char hex[33], sub[8];
        snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)m.key.h[0], (unsigned long long)m.key.h[1]);
        if (way == WAY_STORE || way == WAY_STORE_FULL) {
            const uint8_t *v = e;
            ok = b->put_many(b, &m.key, 1, &v, &len) == 0;
        } else if (way == WAY_SEGMENT) {
            ok = write_all(seg, e, len);
        } else {
            snprintf(p, sizeof p, "%s/%.2s", dir, hex);
            if (way != WAY_MADE_BEFORE) mkdir(p, 0755);
            if (way == WAY_TWO_LEVEL) {
                snprintf(p, sizeof p, "%s/%.2s/%.2s", dir, hex, hex + 2);
                mkdir(p, 0755);
                snprintf(sub, sizeof sub, "%.2s/%.2s", hex, hex + 2);
            } else {
                snprintf(sub, sizeof sub, "%.2s", hex);
            }
            ok = put_file(dir, sub, hex, e, len);
        }
    }
    double t = micro_cpu_s() - t0;
    if (b) b->close(b);
    if (seg >= 0) close(seg);
    rm_dir(dir);
    return ok ? t : -1;
}

int main(int argc, char **argv)
{
    const char *prog = "bench_disk_put";
    static const char *const names[] = {"DIR", "N", "KIB", "REPS"};
    int a = micro_args_count(prog, usage, argc, argv, names, 3, 4), n, kib, reps = 5;
    if (a) return a > 0 ? 0 : 2;
    if (micro_arg_int(prog, "N", argv[2], 1, 1000000, &n) || micro_arg_int(prog, "KIB", argv[3], 1, 65536, &kib) ||
        (argc > 4 && micro_arg_int(prog, "REPS", argv[4], 1, 100, &reps)))
        return 2;
    const char *dir = argv[1];
    struct stat st;
    if (stat(dir, &st) == 0 || strlen(dir) > 4000) {
        fprintf(stderr, "%s: DIR: '%s' exists (or is too long); give a new path\n", prog, dir);
        return 2;
    }
    size_t len = (size_t)kib << 10;
    if (len < store_entry_size(4, 0)) len = store_entry_size(4, 0);
    uint8_t *e = calloc(1, len);
    double *t = calloc((size_t)N_WAYS * (size_t)reps, sizeof *t);
    if (!e || !t) return 1;
    uint64_t seed = 42;
    for (int r = 0; r < reps; r++)
        for (int w = 0; w < N_WAYS; w++) {
            int way = (w + r) % N_WAYS; /* rotated, so that each way meets the host's load alike */
            double s = run_way(way, dir, n, e, len, &seed);
            if (s < 0) {
                fprintf(stderr, "%s: DIR: a write to %s failed (%s)\n", prog, dir, way_name[way]);
                rm_dir(dir);
                return 1;
            }
            t[way * reps + r] = s;
        }
    const double mib = (double)n * (double)len / (1 << 20);
    printf("disk put: %d entries of %zu KiB (%.1f MiB) a run, %d runs a way, thread CPU per MiB written:\n", n,
           len >> 10, mib, reps);
    for (int w = 0; w < N_WAYS; w++) {
        double *v = t + w * reps;
        micro_doubles_sort(v, reps);
        printf("  %-12s %6.3f ms/MiB (%.3f-%.3f)\n", way_name[w], 1e3 * v[reps / 2] / mib, 1e3 * v[0] / mib,
               1e3 * v[reps - 1] / mib);
    }
    free(e);
    free(t);
    return 0;
}
