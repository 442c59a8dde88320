/* test_store_io.c - the tiers' I/O threads and the disk index (src/store):
 * a lookup is not held behind a slow write (reader and writer are separate
 * threads), the writer runs at the lowest priority unless the puts are
 * urgent, the disk backend's reader and writer at once keep its index and
 * segments consistent, and the disk index rebuilt at open from a few thousand
 * chained entries has the LRU order of the former O(files x depth)
 * algorithm (modelled here) with every chain's head kept.
 */
#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rng.h"
#include "store/store.h"
#include "store/store_disk.h"
#include "store/store_entry.h"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char tmpdir[256];

static void rm_tmpdir(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) {}
}

static void mk_tmpdir(const char *tag)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pagellm-test-store-io-%d-%s", (int)getpid(), tag);
    rm_tmpdir();
}

#define ET 4
static const int32_t etok[ET] = {5, 6, 7, 8};

static store_key dkey(uint64_t i) { return (store_key){{i * 0x9e3779b97f4a7c15ull + 1, i}}; }

/* A valid entry for key i whose parent is key `parent` (0: a chain's first block). */
static uint8_t *dval(uint64_t i, uint64_t parent, size_t pay, size_t *len)
{
    store_entry_meta m = {.salt = {11, 22}, .key = dkey(i), .n_tokens = ET, .payload_len = pay};
    if (parent) m.parent = dkey(parent);
    *len = store_entry_size(ET, pay);
    uint8_t *e = malloc(*len);
    uint8_t *p = store_entry_begin(e, &m, etok);
    for (size_t j = 0; j < pay; j++) p[j] = (uint8_t)(i * 31 + j);
    store_entry_seal(e, *len);
    return e;
}

/* ------------------------------------------------- reader and writer */

/* A backend whose puts take put_ms and whose gets answer at once (misses). */
typedef struct {
    store_backend base;
    atomic_int put_ms, puts, gets, in_put;
} slow_put_be;

static int sp_get(store_backend *b, const store_key *keys, size_t n, uint8_t **vals, size_t *lens)
{
    (void)keys;
    ((slow_put_be *)b)->gets++;
    for (size_t i = 0; i < n; i++) vals[i] = NULL, lens[i] = 0;
    return 0;
}

static atomic_int sp_puts_all; /* across closes: store_free frees the backend */

static int sp_put(store_backend *b, const store_key *keys, size_t n, const uint8_t *const *vals, const size_t *lens)
{
    (void)keys, (void)vals, (void)lens;
    slow_put_be *f = (slow_put_be *)b;
    f->in_put = 1;
    usleep((useconds_t)f->put_ms * 1000);
    f->puts += (int)n;
    sp_puts_all += (int)n;
    return 0;
}

static void sp_close(store_backend *b) { free(b); }

static slow_put_be *slow_put_new(int put_ms)
{
    slow_put_be *f = calloc(1, sizeof *f);
    f->base = (store_backend){.name = "slow", .get_many = sp_get, .put_many = sp_put, .close = sp_close};
    f->put_ms = put_ms;
    return f;
}

#define SBYTES 256
static const store_params sparams = {.block_size = ET, .block_bytes = SBYTES, .salt = {7, 8}, .timeout_ms = 1000};

TEST(lookup_is_not_held_behind_a_slow_write)
{
    store *s;
    CHECK_EQ_INT(store_new(&s, &sparams), 0);
    slow_put_be *f = slow_put_new(400);
    CHECK_EQ_INT(store_add_tier(s, &f->base), 0);
    uint8_t block[SBYTES] = {3};
    uint64_t k1[2] = {1, 1}, root[2] = {0, 0};
    store_put_block(s, k1, root, etok, block);
    for (int i = 0; i < 5000 && !f->in_put; i++) usleep(1000); /* the writer is inside its 400 ms put */
    CHECK(f->in_put);
    uint64_t keys[1][2] = {{2, 2}};
    double t0 = mono();
    store_lookup *l = store_lookup_start(s, root, (const uint64_t(*)[2])keys, etok, 1);
    bool done = false;
    while (!done && mono() - t0 < 2.0) {
        store_lookup_poll(l, &done);
        usleep(1000);
    }
    double dt = mono() - t0;
    INFO("a lookup during a 400 ms write resolved in %.1f ms", dt * 1e3);
    CHECK(done);
    CHECK_MSG(dt < 0.2, "the lookup waited %.3f s for the write", dt);
    CHECK_EQ_INT(f->puts, 0); /* the write was still running: the lookup did not queue behind it */
    store_lookup_free(l);
    int before = sp_puts_all;
    store_free(s); /* writes what is queued (and closes f) */
    CHECK_EQ_INT(sp_puts_all - before, 1);
}

/* This process's threads named `name` with scheduling policy `policy`;
 * SCHED_IDLE also counts a SCHED_OTHER thread at nice 19 (the writer's
 * fallback where SCHED_IDLE is refused). */
static int count_threads(const char *name, int policy)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[300], comm[64] = "";
        snprintf(p, sizeof p, "/proc/self/task/%s/comm", de->d_name);
        FILE *fp = fopen(p, "r");
        if (!fp) continue;
        if (fgets(comm, sizeof comm, fp)) comm[strcspn(comm, "\n")] = 0;
        fclose(fp);
        int tid = atoi(de->d_name), pol = sched_getscheduler(tid);
        bool niced = pol == SCHED_OTHER && getpriority(PRIO_PROCESS, (id_t)tid) == 19;
        if (strcmp(comm, name) == 0 && (pol == policy ? !(policy == SCHED_OTHER && niced) : policy == SCHED_IDLE && niced))
            n++;
    }
    closedir(d);
    return n;
}

static int wait_threads(const char *name, int policy, int want)
{
    int n = 0;
    for (int i = 0; i < 200 && (n = count_threads(name, policy)) != want; i++) usleep(1000);
    return n;
}

TEST(writer_runs_at_the_lowest_priority_unless_urgent)
{
    store *s;
    CHECK_EQ_INT(store_new(&s, &sparams), 0);
    CHECK_EQ_INT(store_add_tier(s, &slow_put_new(0)->base), 0);
    CHECK_EQ_INT(wait_threads("pl-slow-put", SCHED_IDLE, 1), 1);
    CHECK_EQ_INT(count_threads("pl-slow-get", SCHED_OTHER), 1); /* lookups have a deadline */
    store_free(s);
    store_params p = sparams;
    p.urgent_puts = true;
    CHECK_EQ_INT(store_new(&s, &p), 0);
    CHECK_EQ_INT(store_add_tier(s, &slow_put_new(0)->base), 0);
    CHECK_EQ_INT(wait_threads("pl-slow-put", SCHED_OTHER, 1), 1);
    CHECK_EQ_INT(count_threads("pl-slow-put", SCHED_IDLE), 0);
    store_free(s);
}

/* ------------------------------------------ entry buffers reused */

/* A backend that checks every entry it is handed: frame and checksum, and
 * the payload its key's pattern (kp_fill); its puts take put_us each. */
typedef struct {
    store_backend base;
    int put_us;
    atomic_int good, bad;
} check_be;

static void kp_fill(uint8_t *block, uint64_t key)
{
    for (size_t j = 0; j < SBYTES; j++) block[j] = (uint8_t)(key * 13 + j);
}

static int ck_put(store_backend *b, const store_key *keys, size_t n, const uint8_t *const *vals, const size_t *lens)
{
    check_be *c = (check_be *)b;
    for (size_t i = 0; i < n; i++) {
        store_entry_meta m;
        uint8_t want[SBYTES];
        kp_fill(want, keys[i].h[0]);
        bool ok = store_entry_frame_check(vals[i], lens[i], &m) == 0 && m.key.h[0] == keys[i].h[0] &&
                  m.payload_len == SBYTES && memcmp(vals[i] + lens[i] - SBYTES, want, SBYTES) == 0;
        ok ? c->good++ : c->bad++;
        usleep((useconds_t)c->put_us);
    }
    return 0;
}

static int ck_get(store_backend *b, const store_key *keys, size_t n, uint8_t **vals, size_t *lens)
{
    (void)b, (void)keys;
    for (size_t i = 0; i < n; i++) vals[i] = NULL, lens[i] = 0;
    return 0;
}

static int ck_good_all, ck_bad_all; /* store_free frees the backends */

static void ck_close(store_backend *b)
{
    check_be *c = (check_be *)b;
    ck_good_all += c->good;
    ck_bad_all += c->bad;
    free(b);
}

static check_be *check_new(int put_us)
{
    check_be *c = calloc(1, sizeof *c);
    c->base = (store_backend){.name = "check", .get_many = ck_get, .put_many = ck_put, .close = ck_close};
    c->put_us = put_us;
    return c;
}

/* Bursts of puts queue far more entries than are written at once; their
 * buffers come back as spares and are filled again by the next burst while
 * the slower tier may still be writing the last ones: every entry each
 * tier writes must still hold its own block. */
TEST(reused_entry_buffers_keep_every_written_block_intact)
{
    store *s;
    CHECK_EQ_INT(store_new(&s, &sparams), 0);
    CHECK_EQ_INT(store_add_tier(s, &check_new(20)->base), 0);
    CHECK_EQ_INT(store_add_tier(s, &check_new(60)->base), 0);
    ck_good_all = ck_bad_all = 0;
    uint8_t block[SBYTES];
    uint64_t root[2] = {0, 0};
    const int waves = 4, per = 150;
    for (int w = 0; w < waves; w++) {
        uint64_t part = 0;
        for (int i = 0; i < per; i++) {
            uint64_t k[2] = {(uint64_t)(w * per + i + 1) * 7919, (uint64_t)w};
            kp_fill(block, k[0]);
            store_put_block(s, k, root, etok, block);
            if (i == per / 2) part = store_put_mark(s);
        }
        /* the next burst lands once half of this one has come back as
         * spares, while the slower tier still writes the other half */
        for (int i = 0; i < 20000 && !store_put_done(s, part); i++) usleep(200);
    }
    uint64_t mark = store_put_mark(s);
    for (int i = 0; i < 20000 && !store_put_done(s, mark); i++) usleep(1000);
    CHECK(store_put_done(s, mark));
    store_tier_stats st;
    store_tier_stats_get(s, 1, &st);
    CHECK_EQ_INT((int)st.dropped_writes, 0);
    store_free(s);
    CHECK_EQ_INT(ck_bad_all, 0);
    CHECK_EQ_INT(ck_good_all, 2 * waves * per);
}

/* ------------------------------------------ disk: reader and writer */

typedef struct {
    store_backend *b;
    atomic_int stop;
    int bad, hits;
} disk_reader_arg;

#define DW_KEYS 400
#define DW_PAY 2000

static void *disk_reader(void *arg)
{
    disk_reader_arg *a = arg;
    uint64_t r = 12345;
    while (!a->stop) {
        store_key keys[8];
        uint8_t *vals[8];
        size_t lens[8];
        uint64_t first = 1 + (r = r * 6364136223846793005ull + 1442695040888963407ull) % (DW_KEYS - 8);
        for (int i = 0; i < 8; i++) keys[i] = dkey(first + (uint64_t)i);
        a->b->get_many(a->b, keys, 8, vals, lens);
        for (int i = 0; i < 8; i++) {
            if (!vals[i]) continue;
            store_entry_meta m;
            bool ok = store_entry_frame_check(vals[i], lens[i], &m) == 0 && m.key.h[0] == keys[i].h[0] &&
                      m.key.h[1] == keys[i].h[1] && m.payload_len == DW_PAY;
            a->bad += !ok;
            a->hits += ok;
            free(vals[i]);
        }
    }
    return NULL;
}

TEST(disk_reader_and_writer_at_once)
{
    mk_tmpdir("rw");
    char err[300];
    size_t one = store_entry_size(ET, DW_PAY);
    store_backend *b = store_disk_open(tmpdir, 120 * one, err, sizeof err); /* evictions all along */
    CHECK_MSG(b, "%s", err);
    disk_reader_arg a = {.b = b};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, disk_reader, &a) == 0);
    int put_errors = 0;
    for (int round = 0; round < 3; round++)
        for (uint64_t i = 1; i <= DW_KEYS; i++) {
            size_t len;
            uint8_t *v = dval(i, i > 1 ? i - 1 : 0, DW_PAY, &len);
            store_key k = dkey(i);
            const uint8_t *vv = v;
            put_errors += b->put_many(b, &k, 1, &vv, &len) != 0;
            free(v);
        }
    a.stop = 1;
    pthread_join(th, NULL);
    uint64_t files, bytes;
    store_disk_usage(b, &files, &bytes);
    INFO("disk reader + writer: %d verified reads while %d puts ran, %llu files kept", a.hits, 3 * DW_KEYS,
         (unsigned long long)files);
    CHECK_EQ_INT(put_errors, 0);
    CHECK_EQ_INT(a.bad, 0);
    CHECK(files <= 120 && bytes <= 120 * one && files >= 100);
    /* the index and the segments agree: every indexed entry is inside its segment file */
    store_key *lru = malloc(files * sizeof *lru);
    size_t n = store_disk_lru(b, lru, files);
    int missing = 0;
    for (size_t i = 0; i < n; i++) {
        char path[600];
        uint64_t off, len;
        struct stat st;
        missing += store_disk_locate(b, &lru[i], path, sizeof path, &off, &len) != 0 || stat(path, &st) != 0 ||
                   off + len > (uint64_t)st.st_size || len != one;
    }
    free(lru);
    CHECK_EQ_INT(n, files);
    CHECK_EQ_INT(missing, 0);
    b->close(b);
    rm_tmpdir();
}

/* -------------------------------------------------- disk: index at open */

#define IX_N 3000
#define IX_PAY 16

/* The LRU order the former rebuild produced, by its own method: entries in
 * order of their last use, each moving its ancestors (nearest first) to the most recent
 * end. A move at use u, step d is stamp (u + 1) * (IX_N + 1) + d; an entry
 * never moved keeps its mtime rank (below every move). */
static void model_order(const uint64_t *parent, const uint64_t *by_mtime, uint64_t *out)
{
    uint64_t *stamp = calloc(IX_N + 1, sizeof *stamp);
    for (uint64_t r = 0; r < IX_N; r++) stamp[by_mtime[r]] = r;
    for (uint64_t u = 0; u < IX_N; u++) {
        uint64_t d = 0;
        for (uint64_t e = by_mtime[u]; parent[e]; e = parent[e]) stamp[parent[e]] = (u + 1) * (IX_N + 1) + d++;
    }
    for (uint64_t i = 0; i < IX_N; i++) out[i] = i + 1;
    for (uint64_t i = 1; i < IX_N; i++) /* insertion sort by stamp: 3000 entries, fine */
        for (uint64_t j = i; j > 0 && stamp[out[j - 1]] > stamp[out[j]]; j--) {
            uint64_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    free(stamp);
}

TEST(disk_index_rebuild_keeps_order_and_chain_heads)
{
    mk_tmpdir("index");
    char err[300];
    size_t one = store_entry_size(ET, IX_PAY);
    store_backend *b = store_disk_open(tmpdir, (uint64_t)IX_N * one, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    /* a forest: 20 chains of 100 (prompts of 100 blocks), and 1000 entries
     * hanging off random earlier ones (prompts sharing prefixes) */
    uint64_t *parent = calloc(IX_N + 1, sizeof *parent), *by_mtime = malloc(IX_N * sizeof *by_mtime);
    rng_seed(31);
    for (uint64_t i = 1; i <= IX_N; i++) {
        if (i <= 2000) parent[i] = (i - 1) % 100 ? i - 1 : 0;
        else parent[i] = 1 + rng_u32() % (i - 1);
        size_t len;
        uint8_t *v = dval(i, parent[i], IX_PAY, &len);
        store_key k = dkey(i);
        const uint8_t *vv = v;
        CHECK_EQ_INT(b->put_many(b, &k, 1, &vv, &len), 0);
        free(v);
    }
    /* each entry used once, in a random order (each hit stamps its record) */
    for (uint64_t i = 0; i < IX_N; i++) by_mtime[i] = i + 1;
    for (uint64_t i = IX_N - 1; i > 0; i--) {
        uint64_t j = rng_u32() % (i + 1), t = by_mtime[i];
        by_mtime[i] = by_mtime[j];
        by_mtime[j] = t;
    }
    int miss = 0;
    for (uint64_t r = 0; r < IX_N; r++) {
        store_key k = dkey(by_mtime[r]);
        uint8_t *v = NULL;
        size_t len = 0;
        b->get_many(b, &k, 1, &v, &len);
        miss += v == NULL;
        free(v);
    }
    CHECK_EQ_INT(miss, 0);
    b->close(b);
    double t0 = mono();
    b = store_disk_open(tmpdir, (uint64_t)IX_N * one, err, sizeof err);
    double dt = mono() - t0;
    CHECK_MSG(b, "%s", err);
    store_key *got = malloc(IX_N * sizeof *got);
    uint64_t *want = malloc(IX_N * sizeof *want);
    size_t n = b ? store_disk_lru(b, got, IX_N) : 0;
    model_order(parent, by_mtime, want);
    size_t first_diff = IX_N;
    for (size_t i = 0; i < n && first_diff == IX_N; i++)
        if (got[i].h[1] != want[i]) first_diff = i;
    INFO("disk index of %d chained entries rebuilt at open in %.1f ms", IX_N, dt * 1e3);
    CHECK_EQ_INT(n, IX_N);
    CHECK_MSG(first_diff == IX_N, "the LRU order differs from the model at position %zu", first_diff);
    if (b) b->close(b);
    /* a limit of a third: what is kept is closed under ancestors (every chain keeps its head) */
    b = store_disk_open(tmpdir, (uint64_t)(IX_N / 3) * one, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    n = b ? store_disk_lru(b, got, IX_N) : 0;
    bool *kept = calloc(IX_N + 1, 1);
    for (size_t i = 0; i < n; i++) kept[got[i].h[1]] = true;
    int orphans = 0;
    for (uint64_t i = 1; i <= IX_N; i++) orphans += kept[i] && parent[i] && !kept[parent[i]];
    CHECK_EQ_INT(n, IX_N / 3);
    CHECK_EQ_INT(orphans, 0);
    /* and it is the most recent third of the model's order */
    bool same = true;
    for (size_t i = 0; i < n; i++) same &= got[i].h[1] == want[IX_N - n + i];
    CHECK(same);
    if (b) b->close(b);
    free(kept), free(got), free(want), free(parent), free(by_mtime);
    rm_tmpdir();
}

int main(void)
{
    RUN(lookup_is_not_held_behind_a_slow_write);
    RUN(writer_runs_at_the_lowest_priority_unless_urgent);
    RUN(reused_entry_buffers_keep_every_written_block_intact);
    RUN(disk_reader_and_writer_at_once);
    RUN(disk_index_rebuild_keeps_order_and_chain_heads);
    return test_summary();
}
