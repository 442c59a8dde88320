/* bench_disk_index.c - how long the disk KV tier takes to open a directory
 * (store_disk_open: scan, header reads, LRU order with chains kept from
 * their head), for CHAINS chains of DEPTH entries each written in chain
 * order (a prompt of DEPTH x 16 tokens per chain).
 *
 *   bench_disk_index DIR CHAINS DEPTH
 *
 * DIR must not exist (it is made and removed). Prints the write time, then
 * the open time of 3 opens (median), e.g.
 *   disk index: 1 x 20000 entries written in 5.7 s; open: median 0.41 s (0.40-0.45)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "micro.h"
#include "store/store_disk.h"
#include "store/store_entry.h"

static const char usage[] = "DIR CHAINS DEPTH";

static store_key chain_key(int chain, int depth)
{
    uint64_t i = (uint64_t)chain << 32 | (uint64_t)depth;
    return (store_key){{i * 0x9e3779b97f4a7c15ull + 1, i}};
}

static void rm_dir(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

int main(int argc, char **argv)
{
    const char *prog = "bench_disk_index";
    static const char *const names[] = {"DIR", "CHAINS", "DEPTH"};
    int a = micro_args_count(prog, usage, argc, argv, names, 3, 3), chains, depth;
    if (a) return a > 0 ? 0 : 2;
    if (micro_arg_int(prog, "CHAINS", argv[2], 1, 1000000, &chains) ||
        micro_arg_int(prog, "DEPTH", argv[3], 1, 1000000, &depth))
        return 2;
    const char *dir = argv[1];
    struct stat st;
    if (stat(dir, &st) == 0 || strlen(dir) > 4000) {
        fprintf(stderr, "%s: DIR: '%s' exists (or is too long); give a new path\n", prog, dir);
        return 2;
    }
    char err[512];
    store_backend *b = store_disk_open(dir, UINT64_MAX, err, sizeof err);
    if (!b) {
        fprintf(stderr, "%s: DIR: %s\n", prog, err);
        return 1;
    }
    int32_t tok[4] = {1, 2, 3, 4};
    const size_t len = store_entry_size(4, 16);
    uint8_t *e = calloc(1, len);
    int failed = !e;
    double t0 = micro_wall_s();
    for (int c = 0; c < chains && !failed; c++)
        for (int d = 0; d < depth && !failed; d++) {
            store_entry_meta m = {.salt = {1, 2}, .key = chain_key(c, d), .n_tokens = 4, .payload_len = 16};
            if (d) m.parent = chain_key(c, d - 1);
            store_entry_begin(e, &m, tok);
            store_entry_seal(e, len);
            const uint8_t *v = e;
            failed = b->put_many(b, &m.key, 1, &v, &len) != 0;
        }
    const double t_write = micro_wall_s() - t0;
    b->close(b);
    free(e);
    if (failed) {
        fprintf(stderr, "%s: DIR: a write to %s failed\n", prog, dir);
        rm_dir(dir);
        return 1;
    }
    double t[3];
    for (int r = 0; r < 3; r++) {
        t0 = micro_wall_s();
        b = store_disk_open(dir, UINT64_MAX, err, sizeof err);
        t[r] = micro_wall_s() - t0;
        if (!b) {
            fprintf(stderr, "%s: DIR: %s\n", prog, err);
            rm_dir(dir);
            return 1;
        }
        b->close(b);
    }
    micro_doubles_sort(t, 3);
    printf("disk index: %d x %d entries written in %.1f s; open: median %.3f s (%.3f-%.3f)\n", chains, depth, t_write,
           t[1], t[0], t[2]);
    rm_dir(dir);
    return 0;
}
