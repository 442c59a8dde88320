/* test_store.c - the KV tiers (src/store): entry encode and verify against
 * corrupt inputs (every byte flipped, every truncation, wrong salt, a
 * colliding key with other tokens), the disk backend (round trip, LRU within
 * the byte limit, index rebuilt at open in the order of use, the lock
 * against a second opener, a torn segment tail cut at open, corrupt entries
 * dropped, layout-1 and layout-2 directories migrated at open, an unknown
 * layout refused), the store's
 * threads with a slow fake backend (the caller never waits: puts and polls
 * return at once, the deadline turns pending keys into misses, a full
 * staging buffer drops writes (and a gathering fill runs only for the
 * entries taken), a two-tier chain where the second tier serves
 * what the first lost and the hit is written back to the first), the scheduler stepping a decoding request
 * while another waits on a slow lookup, an engine restarted on its disk tier
 * (and the prefill and decode roles), and a randomized run of a RAM pool + prefix
 * cache + disk tier compared with a model of which prefix each block holds.
 */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "kv/kv_check.h"
#include "kv/kv_pool.h"
#include "kv/kv_seq.h"
#include "kv/prefix_cache.h"
#include "rng.h"
#include "store/store.h"
#include "store/store_disk.h"
#include "store/store_entry.h"
#include "store/store_kv.h"
#include "store/store_segment.h"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char tmpdir[256];

static void mk_tmpdir(const char *tag)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pagellm-test-store-%d-%s", (int)getpid(), tag);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) {}
}

static void rm_tmpdir(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) {}
}

/* ---------------------------------------------------------------- entry */

#define ET 4
#define EPAY 64

static uint8_t *entry_make(const store_entry_meta *m, const int32_t *tok, size_t *len)
{
    *len = store_entry_size(m->n_tokens, m->payload_len);
    uint8_t *e = malloc(*len);
    uint8_t *p = store_entry_begin(e, m, tok);
    for (uint64_t i = 0; i < m->payload_len; i++) p[i] = (uint8_t)(i * 7 + 1);
    store_entry_seal(e, *len);
    return e;
}

static const store_entry_meta emeta = {{11, 22}, {{1, 2}}, {{3, 4}}, ET, EPAY};
static const int32_t etok[ET] = {5, 6, 7, 8};

TEST(entry_round_trip)
{
    size_t len;
    uint8_t *e = entry_make(&emeta, etok, &len);
    const uint8_t *pay = NULL;
    CHECK_EQ_INT(len, STORE_ENTRY_HEADER + 4 * ET + EPAY);
    CHECK_EQ_INT(store_entry_verify(e, len, &emeta, etok, &pay), 0);
    CHECK(pay == e + STORE_ENTRY_HEADER + 4 * ET && pay[3] == 22);
    free(e);
}

TEST(entry_every_flipped_byte_rejected)
{
    size_t len;
    uint8_t *e = entry_make(&emeta, etok, &len);
    const uint8_t *pay;
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            e[i] ^= (uint8_t)(1 << bit);
            int rc = store_entry_verify(e, len, &emeta, etok, &pay);
            e[i] ^= (uint8_t)(1 << bit);
            CHECK_MSG(rc == PL_EFORMAT, "byte %zu bit %d flipped was accepted", i, bit);
        }
    free(e);
}

TEST(entry_every_truncation_rejected)
{
    size_t len;
    uint8_t *e = entry_make(&emeta, etok, &len);
    const uint8_t *pay;
    for (size_t n = 0; n < len; n++) CHECK_MSG(store_entry_verify(e, n, &emeta, etok, &pay) == PL_EFORMAT, "%zu bytes", n);
    CHECK(store_entry_verify(NULL, 0, &emeta, etok, &pay) == PL_EFORMAT);
    free(e);
}

TEST(entry_wrong_salt_key_parent_tokens_rejected)
{
    size_t len;
    uint8_t *e = entry_make(&emeta, etok, &len);
    const uint8_t *pay;
    store_entry_meta w = emeta;
    w.salt[1]++;
    CHECK(store_entry_verify(e, len, &w, etok, &pay) == PL_EFORMAT && strstr(err_msg(), "salt"));
    w = emeta, w.key.h[0]++;
    CHECK(store_entry_verify(e, len, &w, etok, &pay) == PL_EFORMAT && strstr(err_msg(), "key"));
    w = emeta, w.parent.h[1]++;
    CHECK(store_entry_verify(e, len, &w, etok, &pay) == PL_EFORMAT && strstr(err_msg(), "parent"));
    w = emeta, w.payload_len = EPAY + 1;
    CHECK(store_entry_verify(e, len, &w, etok, &pay) == PL_EFORMAT);
    /* a colliding key: the entry is well formed and names the key, but holds other tokens */
    int32_t other[ET] = {5, 6, 7, 9};
    CHECK(store_entry_verify(e, len, &emeta, other, &pay) == PL_EFORMAT && strstr(err_msg(), "token"));
    free(e);
}

/* ----------------------------------------------------------------- disk */

static store_key dkey(uint64_t i) { return (store_key){{i * 0x9e3779b97f4a7c15ull + 1, i}}; }

/* A valid entry of `pay` payload bytes for key i, its parent key i - 1
 * (parent 0: the root, a chain's first block). */
static uint8_t *dval_chain(uint64_t i, uint64_t parent, size_t pay, size_t *len)
{
    store_entry_meta m = emeta;
    m.key = dkey(i);
    m.parent = parent ? dkey(parent) : (store_key){{0, 0}};
    m.payload_len = pay;
    return entry_make(&m, etok, len);
}

/* An entry with no parent (so that LRU alone decides). */
static uint8_t *dval(uint64_t i, size_t pay, size_t *len) { return dval_chain(i, 0, pay, len); }

static int disk_put(store_backend *b, uint64_t i, size_t pay)
{
    size_t len;
    uint8_t *v = dval(i, pay, &len);
    store_key k = dkey(i);
    const uint8_t *vv = v;
    int rc = b->put_many(b, &k, 1, &vv, &len);
    free(v);
    return rc;
}

static bool disk_has(store_backend *b, uint64_t i)
{
    store_key k = dkey(i);
    uint8_t *v;
    size_t len;
    b->get_many(b, &k, 1, &v, &len);
    free(v);
    return v != NULL;
}

TEST(disk_round_trip_and_lock)
{
    mk_tmpdir("rt");
    char err[300];
    store_backend *b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    CHECK_EQ_INT(disk_put(b, 1, 100), 0);
    store_key k = dkey(1);
    uint8_t *v;
    size_t len;
    CHECK_EQ_INT(b->get_many(b, &k, 1, &v, &len), 0);
    store_entry_meta m;
    CHECK(v && store_entry_frame_check(v, len, &m) == 0 && m.payload_len == 100);
    free(v);
    CHECK(!disk_has(b, 2));
    /* a second opener of the same directory is refused, naming the lock */
    store_backend *b2 = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK(!b2 && strstr(err, "in use by another process"));
    b->close(b);
    /* bad arguments */
    CHECK(!store_disk_open("", 1, err, sizeof err));
    CHECK(!store_disk_open(tmpdir, 0, err, sizeof err) && strstr(err, "at least"));
    CHECK(!store_disk_open("/proc/version", 1, err, sizeof err));
    /* reopened: still there */
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    CHECK(disk_has(b, 1));
    b->close(b);
    rm_tmpdir();
}

/* An entry of several write pieces (64 KiB) and a remainder comes back
 * byte for byte, also after a restart. */
TEST(disk_round_trip_of_a_large_entry)
{
    mk_tmpdir("big");
    char err[300];
    const size_t pay = 3 * 65536 + 1234;
    store_backend *b = store_disk_open(tmpdir, 8 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    size_t len;
    uint8_t *want = dval(5, pay, &len);
    store_key k = dkey(5);
    const uint8_t *vv = want;
    CHECK_EQ_INT(b->put_many(b, &k, 1, &vv, &len), 0);
    for (int round = 0; round < 2; round++) {
        uint8_t *v = NULL;
        size_t got = 0;
        CHECK_EQ_INT(b->get_many(b, &k, 1, &v, &got), 0);
        CHECK(v && got == len && memcmp(v, want, len) == 0);
        free(v);
        b->close(b);
        b = store_disk_open(tmpdir, 8 << 20, err, sizeof err);
        CHECK_MSG(b, "%s", err);
    }
    b->close(b);
    free(want);
    rm_tmpdir();
}

TEST(disk_lru_within_limit_survives_restart)
{
    mk_tmpdir("lru");
    char err[300];
    size_t one = store_entry_size(ET, 1000);
    store_backend *b = store_disk_open(tmpdir, 3 * one, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ_INT(disk_put(b, (uint64_t)i, 1000), 0);
        usleep(20000); /* distinct mtimes */
    }
    CHECK(disk_has(b, 1)); /* 1 becomes the most recent: 2 is the least */
    usleep(20000);
    CHECK_EQ_INT(disk_put(b, 4, 1000), 0);
    uint64_t files, bytes;
    store_disk_usage(b, &files, &bytes);
    CHECK_EQ_INT(files, 3);
    CHECK(bytes <= 3 * one);
    CHECK(!disk_has(b, 2));
    /* used in the order 1, 3, 4, apart by more than the file times' grain */
    CHECK(disk_has(b, 1));
    usleep(20000);
    CHECK(disk_has(b, 3));
    usleep(20000);
    CHECK(disk_has(b, 4));
    /* an entry larger than the whole limit is refused, nothing evicted */
    CHECK(disk_put(b, 9, 4 * 1000) < 0);
    CHECK(disk_has(b, 3));
    b->close(b);
    /* reopened with a smaller limit: the index comes back from the files, oldest mtime evicted first
     * (order of use now: 1, 3, 4 as read above) */
    b = store_disk_open(tmpdir, 2 * one, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    store_disk_usage(b, &files, &bytes);
    CHECK_EQ_INT(files, 2);
    CHECK(!disk_has(b, 1) && disk_has(b, 3) && disk_has(b, 4));
    b->close(b);
    rm_tmpdir();
}

/* A chain 1 -> 2 -> ... written within a limit of 3 entries keeps its
 * head: the deepest blocks go, a block whose parent is gone goes first, and
 * the order survives a restart. */
TEST(disk_lru_keeps_a_chain_head)
{
    mk_tmpdir("chain");
    char err[300];
    size_t one = store_entry_size(ET, 1000);
    store_backend *b = store_disk_open(tmpdir, 3 * one, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    store_key k[7];
    uint8_t *v[7];
    size_t len[7];
    for (int i = 1; i <= 6; i++) k[i] = dkey((uint64_t)i), v[i] = dval_chain((uint64_t)i, (uint64_t)i - 1, 1000, &len[i]);
    CHECK_EQ_INT(b->put_many(b, k + 1, 4, (const uint8_t *const *)v + 1, len + 1), 0);
    CHECK_EQ_INT(b->put_many(b, k + 5, 2, (const uint8_t *const *)v + 5, len + 5), 0);
    CHECK(disk_has(b, 1) && disk_has(b, 2) && disk_has(b, 3) && !disk_has(b, 4) && !disk_has(b, 5) && !disk_has(b, 6));
    /* an unrelated block pushes out the deepest of the chain */
    CHECK_EQ_INT(disk_put(b, 9, 1000), 0);
    CHECK(disk_has(b, 1) && disk_has(b, 2) && !disk_has(b, 3));
    usleep(20000); /* file times are coarse: 9 is used last, and known to be */
    CHECK(disk_has(b, 9));
    b->close(b);
    b = store_disk_open(tmpdir, 2 * one, err, sizeof err); /* the head survives a restart and a smaller limit */
    CHECK_MSG(b, "%s", err);
    bool h1 = disk_has(b, 1), h2 = disk_has(b, 2), h9 = disk_has(b, 9);
    CHECK_MSG(h1 && !h2 && h9, "after the restart: 1 %d, 2 %d, 9 %d", h1, h2, h9);
    for (int i = 1; i <= 6; i++) free(v[i]);
    b->close(b);
    rm_tmpdir();
}

/* Where key i's entry sits: its segment file, the entry's offset and length. */
static bool disk_where(store_backend *b, uint64_t i, char *path, size_t cap, uint64_t *off, uint64_t *len)
{
    store_key k = dkey(i);
    return store_disk_locate(b, &k, path, cap, off, len) == 0;
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Overwrites one byte of path at off with its complement. */
static bool flip_byte(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    uint8_t c;
    bool ok = fd >= 0 && pread(fd, &c, 1, (off_t)off) == 1;
    c = (uint8_t)~c;
    ok = ok && pwrite(fd, &c, 1, (off_t)off) == 1;
    if (fd >= 0) close(fd);
    return ok;
}

static bool append_bytes(const char *path, const char *bytes, size_t n)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    bool ok = fd >= 0 && write(fd, bytes, n) == (ssize_t)n;
    if (fd >= 0) close(fd);
    return ok;
}

/* Puts keys [from, to] (100 payload bytes each, no parents) and closes. */
static void disk_fill(uint64_t from, uint64_t to, uint64_t limit)
{
    char err[300];
    store_backend *b = store_disk_open(tmpdir, limit, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    for (uint64_t i = from; i <= to; i++) CHECK_EQ_INT(disk_put(b, i, 100), 0);
    b->close(b);
}

/* A crash midway through an append leaves a torn record at the newest
 * segment's tail: cut off at open, whether the file ends inside the entry,
 * inside a record header, or holds the record whole but with wrong bytes
 * (the newest segment's last entry is checked whole at open). A damaged
 * record before the tail is dropped by the read that meets it, a damaged
 * header cuts the segment there, and appends go on after what is left. */
TEST(disk_torn_tail_cut_at_open)
{
    mk_tmpdir("torn");
    char err[300], seg[600], seg2[600];
    uint64_t off, len, off2, len2;
    disk_fill(1, 4, 1 << 20);
    store_backend *b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(disk_where(b, 4, seg, sizeof seg, &off, &len));
    CHECK(disk_where(b, 1, seg2, sizeof seg2, &off2, &len2) && strcmp(seg, seg2) == 0); /* one segment */
    b->close(b);
    /* 1. the file ends inside entry 4 */
    CHECK(truncate(seg, (off_t)(off + len - 10)) == 0);
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(disk_has(b, 1) && disk_has(b, 2) && disk_has(b, 3) && !disk_has(b, 4));
    CHECK_EQ_INT(file_size(seg), (off_t)(off - SEG_REC_HEADER)); /* cut where record 4 began */
    CHECK_EQ_INT(disk_put(b, 5, 100), 0);
    b->close(b);
    /* 2. a torn record header after the last record */
    CHECK(append_bytes(seg, "PLSG\0\0\0\0garbage", 15));
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(disk_has(b, 1) && disk_has(b, 3) && disk_has(b, 5));
    CHECK(disk_where(b, 5, seg2, sizeof seg2, &off, &len));
    CHECK_EQ_INT(file_size(seg), (off_t)(off + len));
    b->close(b);
    /* 3. the last record whole in length, a byte of its entry flipped */
    CHECK(flip_byte(seg, off + len - 1));
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(disk_has(b, 1) && disk_has(b, 3) && !disk_has(b, 5));
    CHECK_EQ_INT(file_size(seg), (off_t)(off - SEG_REC_HEADER));
    /* 4. a record before the tail with a flipped entry byte: indexed at open
     * (only the last record is read whole there), handed up by the read that
     * meets it (for the store to reject), dropped, and gone after a restart */
    CHECK(disk_where(b, 2, seg2, sizeof seg2, &off, &len));
    b->close(b);
    CHECK(flip_byte(seg, off + 50));
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    uint64_t files, bytes;
    store_disk_usage(b, &files, &bytes);
    CHECK_EQ_INT(files, 3);
    store_key k2 = dkey(2);
    uint8_t *v2 = NULL;
    size_t got2 = 0;
    store_entry_meta m2;
    b->get_many(b, &k2, 1, &v2, &got2);
    CHECK(v2 && got2 == len && store_entry_frame_check(v2, got2, &m2) != 0);
    free(v2);
    store_disk_usage(b, &files, &bytes);
    CHECK_EQ_INT(files, 2);
    b->close(b);
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(disk_has(b, 1) && !disk_has(b, 2) && disk_has(b, 3));
    /* 5. a record header's length flipped: the segment ends before it */
    CHECK(disk_where(b, 3, seg2, sizeof seg2, &off, &len));
    b->close(b);
    CHECK(flip_byte(seg, off - SEG_REC_HEADER + 9));
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(disk_has(b, 1) && !disk_has(b, 3));
    CHECK_EQ_INT(file_size(seg), (off_t)(off - SEG_REC_HEADER));
    CHECK_EQ_INT(disk_put(b, 6, 100), 0); /* and appends go on */
    b->close(b);
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(disk_has(b, 1) && disk_has(b, 6));
    b->close(b);
    rm_tmpdir();
}

/* A key whose earlier record is still marked live (a replaced record whose
 * mark did not reach the disk) keeps its later record at open, also when
 * the earlier one was its segment's only other live record. */
TEST(disk_key_met_twice_keeps_the_later_record)
{
    mk_tmpdir("twice");
    char err[300], seg[600], seg2[600];
    uint64_t off1, len1, off2, len2;
    store_backend *b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK_EQ_INT(disk_put(b, 1, 100), 0);
    CHECK(disk_where(b, 1, seg, sizeof seg, &off1, &len1));
    CHECK_EQ_INT(disk_put(b, 1, 200), 0); /* replaced: the first record marked dead */
    CHECK(disk_where(b, 1, seg2, sizeof seg2, &off2, &len2));
    CHECK(strcmp(seg, seg2) == 0 && off2 > off1 && len2 == len1 + 100);
    b->close(b);
    int fd = open(seg, O_RDWR);
    CHECK(fd >= 0 && pwrite(fd, "LIVE", 4, (off_t)(off1 - SEG_REC_HEADER + 4)) == 4);
    if (fd >= 0) close(fd);
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    uint64_t files, bytes;
    store_disk_usage(b, &files, &bytes);
    CHECK_EQ_INT(files, 1);
    CHECK_EQ_INT(bytes, len2);
    store_key k = dkey(1);
    uint8_t *v = NULL;
    size_t got = 0;
    store_entry_meta m;
    b->get_many(b, &k, 1, &v, &got);
    CHECK(v && got == len2 && store_entry_frame_check(v, got, &m) == 0 && m.payload_len == 200);
    free(v);
    b->close(b);
    rm_tmpdir();
}

/* An entry damaged in an older segment (not checked whole at open) is
 * handed up by the read that meets it (for the store to reject and count),
 * dropped, and stays dropped after a restart; evicting every entry of a
 * segment deletes its file. */
TEST(disk_corrupt_entry_in_older_segment)
{
    mk_tmpdir("corrupt");
    char err[300], seg1[600], seg2[600], seg3[600];
    uint64_t off, len, off2, len2, off3, len3;
    size_t one = store_entry_size(ET, 100);
    uint64_t limit = 12 * (uint64_t)one; /* segments of 3 entries' bytes: 2 records each */
    disk_fill(1, 6, limit);
    store_backend *b = store_disk_open(tmpdir, limit, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(disk_where(b, 1, seg1, sizeof seg1, &off, &len));
    CHECK(disk_where(b, 3, seg2, sizeof seg2, &off2, &len2));
    CHECK(disk_where(b, 6, seg3, sizeof seg3, &off3, &len3));
    CHECK(strcmp(seg1, seg2) != 0 && strcmp(seg2, seg3) != 0);
    b->close(b);
    CHECK(flip_byte(seg1, off + len - 1));
    b = store_disk_open(tmpdir, limit, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    store_key k = dkey(1);
    uint8_t *v = NULL;
    size_t got = 0;
    b->get_many(b, &k, 1, &v, &got);
    store_entry_meta m;
    CHECK(v && got == len && store_entry_frame_check(v, got, &m) != 0);
    free(v);
    CHECK(!disk_has(b, 1) && disk_has(b, 2));
    b->close(b);
    b = store_disk_open(tmpdir, limit, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    CHECK(!disk_has(b, 1) && disk_has(b, 2));
    /* used since: 2 (hit), then 6: a smaller limit evicts 3, 4, 5, the
     * least recent, and the segment of 3 and 4 goes */
    CHECK(disk_has(b, 6));
    b->close(b);
    b = store_disk_open(tmpdir, 2 * (uint64_t)one, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    struct stat st;
    CHECK(stat(seg2, &st) != 0 && stat(seg1, &st) == 0);
    CHECK(disk_has(b, 6) && disk_has(b, 2) && !disk_has(b, 3) && !disk_has(b, 5));
    b->close(b);
    rm_tmpdir();
}

/* Writes text to path; true when whole. */
static bool write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Key i's file in layout 2 (DIR/ab/<hex>.kv) or 1 (DIR/ab/cd/<hex>.kv),
 * its directories made. */
static void old_layout_file(uint64_t i, int layout, char *out, size_t cap)
{
    store_key k = dkey(i);
    char hex[33], d[600];
    for (int j = 0; j < 16; j++) sprintf(hex + 2 * j, "%02x", (unsigned)(uint8_t)(k.h[j / 8] >> (56 - 8 * (j % 8))));
    snprintf(d, sizeof d, "%s/%.2s", tmpdir, hex);
    mkdir(d, 0755);
    if (layout == 1) {
        snprintf(d + strlen(d), sizeof d - strlen(d), "/%.2s", hex + 2);
        mkdir(d, 0755);
    }
    snprintf(out, cap, "%s/%s.kv", d, hex);
}

/* Writes key i's entry as a file of an old layout, of the given mtime. */
static bool old_layout_put(uint64_t i, int layout, int64_t mtime)
{
    char path[700];
    old_layout_file(i, layout, path, sizeof path);
    size_t len;
    uint8_t *v = dval(i, 1000, &len);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(v, 1, len, f) == len;
    ok = f && fclose(f) == 0 && ok;
    free(v);
    struct timespec t[2] = {{mtime, 0}, {mtime, 0}};
    return ok && utimensat(AT_FDCWD, path, t, 0) == 0;
}

static int count_files(const char *pattern)
{
    char cmd[900];
    snprintf(cmd, sizeof cmd, "find %s %s | wc -l", tmpdir, pattern);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p && fscanf(p, "%d", &n) != 1) n = -1;
    if (p) pclose(p);
    return n;
}

/* Directories of layouts 1 and 2 (one file per entry; here both at once,
 * no DIR/layout, a crash's temp file, a damaged file) open with their
 * entries verified and appended to a segment, the LRU order of their
 * mtimes kept, the files and their directories removed and DIR/layout
 * naming layout 3. An interrupted migration (DIR/layout still 2, an entry
 * both in a segment and as a file) ends at the next open with the entry
 * once. */
TEST(disk_layouts_1_and_2_migrated_at_open)
{
    mk_tmpdir("migrate");
    CHECK(mkdir(tmpdir, 0755) == 0);
    char err[300], path[700];
    size_t one = store_entry_size(ET, 1000);
    static const int age[6] = {0, 100, 400, 200, 300, 50}; /* recency: 5 (damaged), 1, 3, 4, 2 (most recent) */
    for (int i = 1; i <= 5; i++) CHECK(old_layout_put((uint64_t)i, i % 2 ? 1 : 2, 1700000000 + age[i]));
    old_layout_file(5, 1, path, sizeof path);
    CHECK(truncate(path, 500) == 0);
    old_layout_file(9, 2, path, sizeof path);
    snprintf(path + strlen(path) - 3, 8, ".tmp");
    CHECK(write_text(path, "torn"));
    CHECK_EQ_INT(count_files("-name '*.kv'"), 5);

    store_backend *b = store_disk_open(tmpdir, 3 * one, err, sizeof err); /* room for 3: the least recent (1) goes */
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    store_key lru[8];
    size_t n = store_disk_lru(b, lru, 8);
    CHECK_EQ_INT((int)n, 3);
    uint64_t want[3] = {3, 4, 2};
    for (size_t i = 0; i < n && i < 3; i++) CHECK_MSG(lru[i].h[1] == want[i], "lru[%zu] is key %llu", i, (unsigned long long)lru[i].h[1]);
    CHECK(disk_has(b, 2) && disk_has(b, 3) && disk_has(b, 4) && !disk_has(b, 1) && !disk_has(b, 5));
    b->close(b);
    CHECK_EQ_INT(count_files("-name '*.kv' -o -name '*.tmp'"), 0);
    CHECK_EQ_INT(count_files("-mindepth 1 -type d"), 1); /* DIR/seg alone */
    char text[64] = {0};
    snprintf(path, sizeof path, "%s/layout", tmpdir);
    FILE *f = fopen(path, "r");
    CHECK(f && fgets(text, sizeof text, f));
    if (f) fclose(f);
    CHECK_MSG(strcmp(text, "pagellm kv-disk layout 3\n") == 0, "layout file '%s'", text);

    /* interrupted: 3 is in a segment and still a file; 6 a file only */
    CHECK(old_layout_put(3, 2, 1700000500) && old_layout_put(6, 2, 1700000600));
    CHECK(write_text(path, "pagellm kv-disk layout 2\n"));
    b = store_disk_open(tmpdir, 4 * one, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    if (!b) return;
    uint64_t files, bytes;
    store_disk_usage(b, &files, &bytes);
    CHECK_EQ_INT(files, 4);
    CHECK(disk_has(b, 2) && disk_has(b, 3) && disk_has(b, 4) && disk_has(b, 6));
    b->close(b);
    CHECK_EQ_INT(count_files("-name '*.kv'"), 0);
    rm_tmpdir();
}

/* A later layout, or a layout file pagellm did not write, is refused. */
TEST(disk_layout_unknown_refused)
{
    mk_tmpdir("layout4");
    char err[300], path[600];
    store_backend *b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    CHECK_EQ_INT(disk_put(b, 1, 100), 0);
    b->close(b);
    snprintf(path, sizeof path, "%s/layout", tmpdir);
    CHECK(write_text(path, "pagellm kv-disk layout 4\n"));
    CHECK(!store_disk_open(tmpdir, 1 << 20, err, sizeof err));
    CHECK_MSG(strstr(err, "layout 4"), "%s", err);
    CHECK(write_text(path, "something else\n"));
    CHECK(!store_disk_open(tmpdir, 1 << 20, err, sizeof err));
    CHECK_MSG(strstr(err, "layout"), "%s", err);
    CHECK(write_text(path, "pagellm kv-disk layout 3\n")); /* and the entry is still there */
    b = store_disk_open(tmpdir, 1 << 20, err, sizeof err);
    CHECK_MSG(b, "%s", err);
    CHECK(disk_has(b, 1));
    b->close(b);
    rm_tmpdir();
}

/* ------------------------------------------------------- store threads */

/* A fake backend: a map in memory, each call sleeping delay_ms (gets:
 * get_delay_ms when set); the store's reader and writer call it at once. */
typedef struct {
    store_backend base;
    atomic_int delay_ms, get_delay_ms;
    atomic_int gets, puts;
    pthread_mutex_t mu;
    store_key keys[64];
    uint8_t *vals[64];
    size_t lens[64];
    int n;
} fake_be;

static int fake_get(store_backend *b, const store_key *keys, size_t n, uint8_t **vals, size_t *lens)
{
    fake_be *f = (fake_be *)b;
    usleep((useconds_t)(f->get_delay_ms ? f->get_delay_ms : f->delay_ms) * 1000);
    f->gets++;
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < n; i++) {
        vals[i] = NULL, lens[i] = 0;
        for (int j = 0; j < f->n; j++)
            if (f->keys[j].h[0] == keys[i].h[0] && f->keys[j].h[1] == keys[i].h[1]) {
                vals[i] = malloc(f->lens[j]);
                memcpy(vals[i], f->vals[j], f->lens[j]);
                lens[i] = f->lens[j];
            }
    }
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static int fake_put(store_backend *b, const store_key *keys, size_t n, const uint8_t *const *vals, const size_t *lens)
{
    fake_be *f = (fake_be *)b;
    usleep((useconds_t)f->delay_ms * 1000);
    pthread_mutex_lock(&f->mu);
    for (size_t i = 0; i < n && f->n < 64; i++) {
        f->keys[f->n] = keys[i];
        f->vals[f->n] = malloc(lens[i]);
        memcpy(f->vals[f->n], vals[i], lens[i]);
        f->lens[f->n++] = lens[i];
        f->puts++;
    }
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static void fake_close(store_backend *b)
{
    fake_be *f = (fake_be *)b;
    for (int j = 0; j < f->n; j++) free(f->vals[j]);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static fake_be *fake_new(int delay_ms)
{
    fake_be *f = calloc(1, sizeof *f);
    f->base = (store_backend){.name = "fake", .get_many = fake_get, .put_many = fake_put, .close = fake_close};
    f->delay_ms = delay_ms;
    pthread_mutex_init(&f->mu, NULL);
    return f;
}

#define ST 4
#define SBYTES 256

static const store_params sparams = {.block_size = ST, .block_bytes = SBYTES, .salt = {7, 8}, .timeout_ms = 100};

TEST(store_never_waits_on_a_slow_tier)
{
    store *s;
    CHECK_EQ_INT(store_new(&s, &sparams), 0);
    fake_be *f = fake_new(300);
    CHECK_EQ_INT(store_add_tier(s, &f->base), 0);
    uint8_t block[SBYTES];
    for (int i = 0; i < SBYTES; i++) block[i] = (uint8_t)i;
    int32_t tok[2 * ST] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t keys[2][2] = {{100, 1}, {200, 2}}, root[2] = {0, 0};
    double t0 = mono();
    store_put_block(s, keys[0], root, tok, block);
    store_put_block(s, keys[1], keys[0], tok + ST, block);
    store_put_block(s, keys[1], keys[0], tok + ST, block); /* written already: skipped */
    const uint64_t mark = store_put_mark(s);
    store_lookup *l = store_lookup_start(s, root, (const uint64_t(*)[2])keys, tok, 2);
    bool done;
    uint32_t hits = store_lookup_poll(l, &done);
    double dt = mono() - t0;
    CHECK(mark == 2 && !store_put_done(s, mark) && store_put_done(s, 0));
    INFO("store: 2 puts + lookup start + poll against a 300 ms tier took %.3f ms on the caller", dt * 1e3);
    CHECK_MSG(dt < 0.05, "the caller waited %.3f s", dt);
    CHECK(!done && hits == 0);
    /* the deadline (100 ms) passes while the tier is still busy: done, nothing hit */
    usleep(150 * 1000);
    hits = store_lookup_poll(l, &done);
    CHECK(done && hits == 0);
    store_lookup_free(l);
    /* once the puts are written, a lookup finds both, verified */
    for (int i = 0; i < 200 && !store_put_done(s, mark); i++) usleep(10000);
    CHECK_EQ_INT(f->puts, 2); /* done means written */
    f->delay_ms = 0;
    l = store_lookup_start(s, root, (const uint64_t(*)[2])keys, tok, 2);
    for (int i = 0; i < 200 && !(store_lookup_poll(l, &done), done); i++) usleep(2000);
    CHECK_EQ_INT(store_lookup_poll(l, &done), 2);
    CHECK(memcmp(store_lookup_block(l, 1), block, SBYTES) == 0);
    store_lookup_free(l);
    /* other tokens under the same key: rejected, counted */
    int32_t other[2 * ST] = {1, 2, 3, 4, 5, 6, 7, 9};
    l = store_lookup_start(s, root, (const uint64_t(*)[2])keys, other, 2);
    for (int i = 0; i < 200 && !(store_lookup_poll(l, &done), done); i++) usleep(2000);
    CHECK_EQ_INT(store_lookup_poll(l, &done), 1);
    store_lookup_free(l);
    store_tier_stats st;
    store_tier_stats_get(s, 0, &st);
    CHECK_EQ_INT(st.rejected, 1);
    CHECK(st.hits >= 3 && st.puts == 2 && st.bytes_written == 2 * store_entry_size(ST, SBYTES));
    store_free(s);
}

/* A store whose staging holds two entries, over one fake tier that takes
 * 200 ms a call (*f); NULL if it cannot be made. */
static store *two_entry_store(fake_be **f)
{
    store_params p = sparams;
    p.staging_bytes = 2 * store_entry_size(ST, SBYTES);
    store *s;
    if (store_new(&s, &p)) return NULL;
    *f = fake_new(200);
    if (store_add_tier(s, &(*f)->base) == 0) return s;
    store_free(s); /* the tier closed the backend */
    return NULL;
}

TEST(store_full_staging_drops_writes)
{
    fake_be *f;
    store *s = two_entry_store(&f);
    CHECK(s);
    uint8_t block[SBYTES] = {0};
    int32_t tok[ST] = {1, 2, 3, 4};
    uint64_t root[2] = {0, 0};
    double t0 = mono();
    for (uint64_t i = 1; i <= 10; i++) store_put_block(s, (uint64_t[2]){i, i}, root, tok, block);
    CHECK(mono() - t0 < 0.05);
    store_tier_stats st;
    store_tier_stats_get(s, 0, &st);
    CHECK_MSG(st.dropped_writes >= 7, "%llu dropped", (unsigned long long)st.dropped_writes);
    store_free(s); /* writes what was staged */
}

/* A fill writing byte i + seed of the payload; counts its calls. */
typedef struct {
    int calls;
    uint8_t seed;
} fill_count;

static void fill_pattern(const void *user, uint8_t *payload, size_t len)
{
    fill_count *c = (fill_count *)(uintptr_t)user;
    c->calls++;
    for (size_t i = 0; i < len; i++) payload[i] = (uint8_t)(i + c->seed);
}

/* The write-behind gathers a pool block straight into its entry: the fill
 * runs once for each entry the store takes, never for a key written
 * already nor for a write the full staging drops, and its bytes are what a
 * lookup serves. */
TEST(store_fill_runs_only_for_entries_taken)
{
    fake_be *f;
    store *s = two_entry_store(&f);
    CHECK(s);
    int32_t tok[ST] = {1, 2, 3, 4};
    uint64_t root[2] = {0, 0}, key[2] = {5, 6};
    fill_count c = {.seed = 3};
    store_put_block_fill(s, key, root, tok, fill_pattern, &c);
    store_put_block_fill(s, key, root, tok, fill_pattern, &c); /* written already */
    CHECK_EQ_INT(c.calls, 1);
    for (uint64_t i = 1; i <= 10; i++) store_put_block_fill(s, (uint64_t[2]){i, i}, root, tok, fill_pattern, &c);
    store_tier_stats st;
    store_tier_stats_get(s, 0, &st);
    CHECK_MSG(st.dropped_writes >= 7, "%llu dropped", (unsigned long long)st.dropped_writes);
    CHECK_EQ_INT(c.calls, 1 + 10 - (int)st.dropped_writes);
    const uint64_t mark = store_put_mark(s);
    for (int i = 0; i < 500 && !store_put_done(s, mark); i++) usleep(10000);
    CHECK(store_put_done(s, mark));
    f->delay_ms = 0;
    store_lookup *l = store_lookup_start(s, root, (const uint64_t(*)[2])key, tok, 1);
    bool done = false;
    for (int i = 0; i < 200 && !(store_lookup_poll(l, &done), done); i++) usleep(2000);
    CHECK_EQ_INT(store_lookup_poll(l, &done), 1);
    const uint8_t *got = store_lookup_block(l, 0);
    bool same = true;
    for (int i = 0; i < SBYTES; i++) same &= got[i] == (uint8_t)(i + 3);
    CHECK(same);
    store_lookup_free(l);
    store_free(s);
}

TEST(store_two_tiers_chain)
{
    store *s;
    CHECK_EQ_INT(store_new(&s, &sparams), 0);
    fake_be *a = fake_new(0), *b = fake_new(0);
    CHECK_EQ_INT(store_add_tier(s, &a->base), 0);
    CHECK_EQ_INT(store_add_tier(s, &b->base), 0);
    uint8_t block[SBYTES] = {1};
    int32_t tok[3 * ST] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    uint64_t keys[3][2] = {{1, 1}, {2, 2}, {3, 3}}, root[2] = {0, 0};
    for (int i = 0; i < 3; i++) store_put_block(s, keys[i], i ? keys[i - 1] : root, tok + i * ST, block);
    for (int i = 0; i < 200 && (a->puts < 3 || b->puts < 3); i++) usleep(5000);
    /* tier a loses its middle entry: b serves it */
    pthread_mutex_lock(&a->mu);
    free(a->vals[1]);
    a->vals[1] = malloc(10);
    a->lens[1] = 10;
    pthread_mutex_unlock(&a->mu);
    bool done;
    store_lookup *l = store_lookup_start(s, root, (const uint64_t(*)[2])keys, tok, 3);
    for (int i = 0; i < 200 && !(store_lookup_poll(l, &done), done); i++) usleep(2000);
    CHECK_EQ_INT(store_lookup_poll(l, &done), 3);
    store_lookup_free(l);
    store_tier_stats sa, sb;
    store_tier_stats_get(s, 0, &sa);
    store_tier_stats_get(s, 1, &sb);
    CHECK(sa.hits == 2 && sa.rejected == 1 && sb.hits == 1);
    CHECK_STR(store_tier_name(s, 1), "fake");
    /* b's hit is written back to a, which missed it */
    for (int i = 0; i < 200 && a->puts < 4; i++) usleep(5000);
    CHECK_EQ_INT(a->puts, 4);
    CHECK(a->keys[3].h[0] == 2 && a->lens[3] == store_entry_size(ST, SBYTES));
    CHECK_EQ_INT(b->puts, 3);
    store_free(s);
}

/* ------------------------------------------- randomized RAM + disk tier */

#define RT 4
#define RMAX 48
static const kv_shape rshape = {2, 1, 4, RT, KV_F32, KV_KIND_KV};

/* The row of token position p: a pattern of the whole prefix up to p. */
static uint32_t rpat(const int32_t *tok, uint32_t p)
{
    uint32_t h = 2166136261u;
    for (uint32_t i = 0; i <= p; i++) h = (h ^ (uint32_t)tok[i]) * 16777619u;
    return h;
}

static void rwrite(kv_pool *pool, const kv_seq *q, const int32_t *tok, uint32_t from, uint32_t to)
{
    for (uint32_t p = from; p < to; p++) {
        uint32_t b = q->table[p / RT], v = rpat(tok, p);
        for (uint32_t l = 0; l < rshape.n_layers; l++) {
            memcpy(kv_block_k(pool, b, l) + (p % RT) * pool->g.row_bytes[0], &v, 4);
            memcpy(kv_block_v(pool, b, l) + (p % RT) * pool->g.row_bytes[1], &v, 4);
        }
    }
}

static bool rcheck(const kv_pool *pool, const kv_seq *q, const int32_t *tok, uint32_t to)
{
    for (uint32_t p = 0; p < to; p++) {
        uint32_t b = q->table[p / RT], v = rpat(tok, p), k, w;
        for (uint32_t l = 0; l < rshape.n_layers; l++) {
            memcpy(&k, kv_block_k(pool, b, l) + (p % RT) * pool->g.row_bytes[0], 4);
            memcpy(&w, kv_block_v(pool, b, l) + (p % RT) * pool->g.row_bytes[1], 4);
            if (k != v || w != v) return false;
        }
    }
    return true;
}

TEST(random_ram_and_disk_against_model)
{
    mk_tmpdir("rand");
    kv_pool pool;
    prefix_cache pc;
    const uint64_t fp[2] = {3, 4};
    CHECK_EQ_INT(kv_pool_init(&pool, &rshape, 24), 0);
    CHECK_EQ_INT(prefix_init(&pc, &pool, fp), 0);
    char err[300];
    store_backend *disk = store_disk_open(tmpdir, 1 << 24, err, sizeof err);
    CHECK_MSG(disk, "%s", err);
    store_params sp = {.block_size = RT, .block_bytes = pool.g.block_bytes, .timeout_ms = 2000};
    memcpy(sp.salt, pc.salt, sizeof sp.salt);
    store *s;
    CHECK_EQ_INT(store_new(&s, &sp), 0);
    CHECK_EQ_INT(store_add_tier(s, disk), 0);
    /* the model: every full-block prefix ever computed (its tokens), which the disk must serve */
    static int32_t seen[4096][RMAX];
    static uint32_t seen_len[4096];
    uint32_t n_seen = 0;
    rng_seed(31);
    uint64_t tier_blocks = 0, ram_blocks = 0;
    for (int it = 0; it < 300; it++) {
        int32_t tok[RMAX];
        uint32_t n = 2 + rng_u32() % (RMAX - 2);
        if (n_seen && rng_u32() % 3) { /* extend or cut an earlier prefix: hits likely */
            uint32_t j = rng_u32() % n_seen;
            memcpy(tok, seen[j], sizeof tok);
            for (uint32_t i = seen_len[j]; i < RMAX; i++) tok[i] = (int32_t)(rng_u32() % 3);
        } else {
            for (uint32_t i = 0; i < RMAX; i++) tok[i] = (int32_t)(rng_u32() % 3);
        }
        kv_seq q;
        CHECK_EQ_INT(kv_seq_init(&q, &pool, RMAX, KV_SEQ_PAGED), 0);
        prefix_cursor cur;
        uint32_t hit;
        CHECK_EQ_INT(prefix_attach(&pc, &q, tok, n, false, &cur, &hit), 0);
        if (hit % RT) kv_seq_truncate(&q, hit / RT * RT), hit = hit / RT * RT;
        /* the tiers for the full blocks RAM lacks */
        uint64_t keys[RMAX / RT][2];
        uint32_t nb = (n - 1) / RT, k = prefix_chain_keys(&pc, tok, nb, keys);
        CHECK_EQ_INT(k, hit / RT);
        uint32_t expect = k; /* the model: the longest run of blocks computed before */
        while (expect < nb) {
            bool found = false;
            for (uint32_t j = 0; j < n_seen && !found; j++)
                found = seen_len[j] >= (expect + 1) * RT && !memcmp(seen[j], tok, (expect + 1) * RT * sizeof *tok);
            if (!found) break;
            expect++;
        }
        if (nb > k) {
            store_lookup *l = store_lookup_start(s, k ? keys[k - 1] : PREFIX_ROOT, (const uint64_t(*)[2])keys + k,
                                                 tok + k * RT, nb - k);
            bool done = false;
            uint32_t got = 0;
            for (int w = 0; w < 4000 && !done; w++) {
                got = store_lookup_poll(l, &done);
                if (!done) usleep(500);
            }
            CHECK_MSG(got == expect - k, "iteration %d: tier served %u blocks, the model says %u", it, got, expect - k);
            const uint8_t *blocks[RMAX / RT];
            for (uint32_t i = 0; i < got; i++) blocks[i] = store_lookup_block(l, i);
            uint32_t loaded = store_kv_load(&pc, &q, &cur, tok, blocks, got, 2);
            store_lookup_free(l);
            tier_blocks += loaded;
            hit += loaded * RT;
        }
        ram_blocks += k;
        CHECK_MSG(rcheck(&pool, &q, tok, hit), "iteration %d: a served row holds another prefix", it);
        /* compute the rest, register, write behind */
        if (kv_seq_append(&q, n - hit) == 0) {
            rwrite(&pool, &q, tok, hit, n);
            uint32_t from = cur.n_blocks;
            uint64_t par[2] = {cur.hash[0], cur.hash[1]};
            prefix_register(&pc, &q, tok, &cur);
            store_kv_publish(s, &pool, &q, tok, 0, from, cur.n_blocks, par);
            if (n / RT > 0 && n_seen < 4096) {
                memcpy(seen[n_seen], tok, sizeof tok);
                seen_len[n_seen++] = n / RT * RT;
            }
        }
        CHECK_EQ_INT(kv_check(&pool, (kv_seq *[]){&q}, 1), 0);
        CHECK_EQ_INT(prefix_check(&pc), 0);
        kv_seq_free(&q);
        /* let the write-behind land, so that the model (all computed blocks on disk) holds;
         * the writer runs at idle priority, which a saturated host can hold off for seconds */
        for (int w = 0; w < 40000 && store_staged_bytes(s); w++) usleep(500);
        CHECK_EQ_INT(store_staged_bytes(s), 0);
    }
    INFO("random RAM + disk: %llu blocks from RAM, %llu from disk", (unsigned long long)ram_blocks,
         (unsigned long long)tier_blocks);
    CHECK(tier_blocks > 50);
    store_free(s);
    prefix_free(&pc);
    kv_pool_free(&pool);
    rm_tmpdir();
}

/* ------------------------------------- the scheduler around a slow tier */

static pl_request *sched_req(const req_limits *lim, uint32_t n, int32_t max_tokens, int32_t first, uint64_t id)
{
    int32_t *ids = malloc(n * sizeof *ids);
    for (uint32_t i = 0; i < n; i++) ids[i] = first + (int32_t)(i % 200);
    pl_request_params p = {.prompt = ids, .n_prompt = n, .max_tokens = max_tokens, .n = 1, .top_logprobs = -1};
    pl_sampler_params_default(&p.sampling);
    pl_request *r = NULL;
    if (req_new(&r, &p, lim, id) != 0) r = NULL;
    free(ids);
    return r;
}

/* A request whose prompt waits on a 300 ms tier lookup stays in the waiting
 * queue while a decoding request keeps stepping: no plan waits on the tier;
 * at the lookup's deadline it is admitted and computes its prompt. */
TEST(scheduler_steps_others_while_a_lookup_waits)
{
    pl_model *m;
    if (pl_model_load(&m, SHARED_MODELS "/stories260K.gguf") != 0) {
        test_skip("scheduler_steps_others_while_a_lookup_waits", "stories260K.gguf not found");
        return;
    }
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.n_ctx = 512;
    ep.ctx.max_seqs = 2;
    ep.ctx.n_threads = 1;
    ep.max_batch_tokens = 16;
    ep.ctx.max_batch = 16;
    pl_ctx *ctx;
    CHECK_EQ_INT(pl_ctx_new(&ctx, m, &ep.ctx), 0);
    const uint32_t nv = pl_model_n_vocab(m);
    sched sc;
    CHECK_EQ_INT(sched_init(&sc, ctx, &ep, nv), 0);
    const kv_pool *pool = rt_ctx_pool(ctx);
    store_params sp = {.block_size = pool->g.s.block_size, .block_bytes = pool->g.block_bytes, .timeout_ms = 150};
    memcpy(sp.salt, rt_ctx_prefix_cache(ctx)->salt, sizeof sp.salt);
    store *st;
    CHECK_EQ_INT(store_new(&st, &sp), 0);
    fake_be *f = fake_new(0); /* a's own lookup (a miss) is quick; b's takes 300 ms */
    CHECK_EQ_INT(store_add_tier(st, &f->base), 0);
    rt_ctx_set_store(ctx, st);
    sched_set_store(&sc, st);
    req_limits lim = {.vocab = pl_model_vocab(m), .n_vocab = nv, .n_ctx = 512, .max_seqs = 2, .window = false};
    pl_request *a = sched_req(&lim, 40, 200, 3, 1), *b = sched_req(&lim, 64, 4, 7, 2);
    CHECK(a && b);
    CHECK_EQ_INT(sched_add(&sc, a), 0);
    /* step until a runs, then b arrives; its lookup meets a 300 ms tier */
    sched_seq *big;
    double worst = 0, t_b = 0;
    int steps_while_b_waits = 0, admitted_b_at = -1;
    for (int step = 0; step < 60 && admitted_b_at < 0; step++) {
        if (sc.n_running == 1 && t_b == 0) {
            f->delay_ms = 300;
            CHECK_EQ_INT(sched_add(&sc, b), 0);
            t_b = mono();
        }
        sched_step_begin(&sc);
        double t0 = mono();
        int n = sched_plan(&sc, &big);
        double dt = mono() - t0;
        worst = dt > worst ? dt : worst;
        CHECK(!big);
        bool b_planned = false;
        for (int i = 0; i < n; i++) b_planned |= sc.planned[i]->r == b;
        if (t_b > 0 && !b_planned) steps_while_b_waits += n > 0;
        if (b_planned) admitted_b_at = step;
        if (n == 0) { usleep(5000); continue; }
        CHECK_EQ_INT(rt_step(ctx, sc.items, n), 0);
        sched_commit(&sc, 0); /* untimed: the key costs stay the model's */
        for (int i = 0; i < n; i++) /* what sampling does (the engine's part): one more token */
            if (sc.items[i].logits) {
                req_comp *c = &sc.planned[i]->r->comp[sc.planned[i]->comp_lo];
                c->toks[sc.planned[i]->r->n_prompt + c->n_gen++] = 5;
            }
        CHECK_MSG(sched_check(&sc) == 0, "step %d: %s", step, err_msg());
        usleep(10000); /* a step of a real model takes this long or more */
    }
    INFO("scheduler: %d steps of the other request while the lookup waited; slowest plan %.3f ms; admitted after %.0f ms",
         steps_while_b_waits, worst * 1e3, (mono() - t_b) * 1e3);
    CHECK_MSG(worst < 0.05, "a plan took %.3f s", worst);
    CHECK_MSG(steps_while_b_waits >= 5, "%d steps", steps_while_b_waits);
    CHECK(admitted_b_at > 0);
    CHECK(mono() - t_b >= 0.14); /* the deadline, not the 300 ms tier */
    while (sc.n_running) sched_remove(&sc, sc.running[0]);
    while (sc.wait_head) sched_remove(&sc, sc.wait_head);
    req_release(a), req_release(a), req_release(b), req_release(b);
    sched_free(&sc);
    pl_ctx_free(ctx);
    store_free(st);
    pl_model_free(m);
}

/* ------------------------------------------------- the engine, restarted */

/* Runs one greedy request to its end: its tokens, cached_tokens, finish. */
static int eng_run(pl_engine *e, const int32_t *ids, size_t n, int max_tokens, int32_t *out, int *n_out,
                   uint32_t *cached, const char **finish)
{
    pl_request_params p = {.prompt = ids, .n_prompt = n, .max_tokens = max_tokens, .n = 1, .top_logprobs = -1};
    pl_sampler_params_default(&p.sampling);
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    pl_request *r;
    if (pl_engine_submit(e, &p, &r) != 0) return -1;
    pl_event ev;
    int rc;
    *n_out = 0;
    while ((rc = pl_request_next(r, &ev, 10000)) == 1) {
        if (ev.kind == PL_EV_TOKEN) out[(*n_out)++] = ev.token;
        if (ev.kind == PL_EV_DONE) *cached = ev.cached_tokens, *finish = ev.finish_reason;
        if (ev.kind == PL_EV_ERROR) break;
    }
    pl_request_free(r);
    return rc == 2 ? 0 : -1;
}

static pl_engine *eng_open(pl_model *m, int role)
{
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.ctx.n_ctx = 512;
    ep.ctx.max_seqs = 2;
    ep.ctx.n_threads = 1;
    ep.kv_disk = tmpdir;
    ep.kv_tier_timeout_ms = 5000;
    ep.role = role;
    pl_engine *e = NULL;
    if (pl_engine_new(&e, m, &ep) != 0) return NULL;
    return e;
}

/* The disk tier through the public API: a prompt computed by one engine is
 * served from disk by the next (same greedy tokens); a prefill-role engine
 * answers with one token and its blocks serve a decode-role engine; the
 * tiers' counters say so. */
TEST(engine_restart_is_served_from_disk)
{
    pl_model *m;
    if (pl_model_load(&m, SHARED_MODELS "/stories260K.gguf") != 0) {
        test_skip("engine_restart_is_served_from_disk", "stories260K.gguf not found");
        return;
    }
    mk_tmpdir("eng");
    int32_t ids[300], a[16], b[16];
    for (int i = 0; i < 300; i++) ids[i] = 1 + (i * 37) % 400;
    int na, nb;
    uint32_t ca = 99, cb = 0;
    const char *fin = NULL;
    pl_engine *e = eng_open(m, PL_ROLE_MIXED);
    CHECK_MSG(e, "%s", pl_last_error());
    CHECK_EQ_INT(eng_run(e, ids, 300, 16, a, &na, &ca, &fin), 0);
    pl_engine_free(e); /* writes what is queued */
    e = eng_open(m, PL_ROLE_MIXED);
    CHECK(e);
    CHECK_EQ_INT(eng_run(e, ids, 300, 16, b, &nb, &cb, &fin), 0);
    pl_engine_metrics mt;
    pl_engine_metrics_get(e, &mt);
    pl_engine_free(e);
    CHECK(ca == 0 && na == 16 && nb == 16);
    CHECK_MSG(cb == 288, "cached %u", cb); /* 18 full blocks of the 299 tokens before the last */
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(mt.n_tiers == 1 && strcmp(mt.tiers[0].name, "disk") == 0 && mt.tiers[0].hits == 18);
    CHECK(mt.tier_hit_tokens == 288 && mt.tiers[0].get_latency.n >= 1);
    /* prefill role on another prompt, then decode role */
    ids[0] = 2;
    e = eng_open(m, PL_ROLE_PREFILL);
    CHECK(e);
    CHECK_EQ_INT(eng_run(e, ids, 300, 16, a, &na, &ca, &fin), 0);
    CHECK(na == 1 && ca == 0 && fin && strcmp(fin, "length") == 0);
    pl_engine_free(e);
    e = eng_open(m, PL_ROLE_DECODE);
    CHECK(e);
    CHECK_EQ_INT(eng_run(e, ids, 300, 16, b, &nb, &cb, &fin), 0);
    pl_engine_free(e);
    CHECK(nb == 16 && cb == 288 && a[0] == b[0]);
    /* roles need a tier */
    pl_engine_params ep;
    pl_engine_params_default(&ep);
    ep.role = PL_ROLE_PREFILL;
    CHECK(pl_engine_new(&e, m, &ep) == PL_ERR_INVAL && strstr(pl_last_error(), "KV tier"));
    pl_model_free(m);
    rm_tmpdir();
}

int main(void)
{
    RUN(entry_round_trip);
    RUN(entry_every_flipped_byte_rejected);
    RUN(entry_every_truncation_rejected);
    RUN(entry_wrong_salt_key_parent_tokens_rejected);
    RUN(disk_round_trip_and_lock);
    RUN(disk_round_trip_of_a_large_entry);
    RUN(disk_lru_within_limit_survives_restart);
    RUN(disk_lru_keeps_a_chain_head);
    RUN(disk_torn_tail_cut_at_open);
    RUN(disk_key_met_twice_keeps_the_later_record);
    RUN(disk_corrupt_entry_in_older_segment);
    RUN(disk_layouts_1_and_2_migrated_at_open);
    RUN(disk_layout_unknown_refused);
    RUN(store_never_waits_on_a_slow_tier);
    RUN(store_full_staging_drops_writes);
    RUN(store_fill_runs_only_for_entries_taken);
    RUN(store_two_tiers_chain);
    RUN(random_ram_and_disk_against_model);
    RUN(scheduler_steps_others_while_a_lookup_waits);
    RUN(engine_restart_is_served_from_disk);
    return test_summary();
}
