/* store_disk.c - the directory tier: index (hash + LRU list by bytes) over
 * segment files, open-time scan and migration, appended puts, verified
 * gets; see store_disk.h.
 *
 *   buckets[hash(key) & mask] -> entry -> entry (hnext chain)
 *   lru: head (least recent) <-> ... <-> tail (most recent), bytes summed
 *   segs: oldest -> ... -> active (the one appended to)
 *
 * The store's reader (gets) and writer (puts) threads call in at once:
 * mu guards the index and the segment list; the appends and reads run
 * outside it, and an entry is found again by key after each read (the
 * writer may have evicted or replaced it meanwhile: its segment and offset
 * then differ, and since a record's place is never reused, equal means the
 * bytes read are that record's). Only the writer appends, so a record's
 * place is reserved under mu and written outside it.
 */
#include "store/store_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/err.h"
#include "store/store_bytes.h"
#include "store/store_entry.h"
#include "store/store_segment.h"

typedef struct disk_seg {
    uint32_t id;                      /* DIR/seg/<id as 8 hex>.seg; ids only grow */
    uint64_t size;                    /* bytes of records (the append offset) */
    uint64_t live;                    /* live entries in it */
    uint64_t dead_bytes;              /* evicted records whose hole could not be punched */
    struct disk_seg *next;            /* the next newer segment */
} disk_seg;

typedef struct disk_entry {
    store_key key;
    store_key parent;                 /* from the entry's header */
    bool has_parent;
    uint64_t bytes;                   /* the entry's bytes (the record's, less its header) */
    disk_seg *seg;
    uint64_t off;                     /* of its record in seg */
    uint64_t stamp;                   /* at open only: the scan's order */
    bool placed;                      /* at open only: ordered under a descendant */
    struct disk_entry *prev, *next;   /* LRU */
    struct disk_entry *hnext;         /* bucket chain */
} disk_entry;

typedef struct {
    store_backend base;
    char *dir;
    int lock_fd;
    uint64_t max_bytes, bytes, n;
    uint64_t dead_bytes;              /* sum of the segments' dead_bytes */
    uint64_t seg_cap;                 /* a segment takes no new record past this size */
    uint64_t clock;                   /* the last use stamp given */
    disk_entry **buckets;
    size_t mask;                      /* buckets - 1, a power of two minus one */
    disk_entry *head, *tail;
    disk_seg *oldest, *active;
    int active_fd;                    /* the writer's descriptor of active, or -1 */
    uint32_t next_id;
    bool loading;                     /* the open's scan: segments are not removed under it */
    pthread_mutex_t mu;               /* the index, the segment list, bytes, n, clock */
    bool mu_ok;
} disk;

#define DISK_PATH_MAX 4096
/* A segment takes records until it holds this much (or a quarter of the
 * limit, for small tiers): big enough that a new file (an inode, a
 * directory entry) is rare, small enough that a directory of a few GiB is
 * tens of files. */
#define DISK_SEG_BYTES ((uint64_t)32 << 20)
/* ----------------------------------------------------------------- index */

static size_t disk_home(const disk *d, const store_key *k) { return (size_t)(k->h[0] ^ (k->h[1] >> 7)) & d->mask; }

static disk_entry *disk_find(const disk *d, const store_key *k)
{
    for (disk_entry *e = d->buckets[disk_home(d, k)]; e; e = e->hnext)
        if (e->key.h[0] == k->h[0] && e->key.h[1] == k->h[1]) return e;
    return NULL;
}

static void lru_unlink(disk *d, disk_entry *e)
{
    if (e->prev) e->prev->next = e->next;
    else d->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else d->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_head(disk *d, disk_entry *e)
{
    e->prev = NULL;
    e->next = d->head;
    if (d->head) d->head->prev = e;
    else d->tail = e;
    d->head = e;
}

/* Puts e just below p in recency (p stays the more recent). */
static void lru_insert_before(disk *d, disk_entry *e, disk_entry *p)
{
    e->next = p;
    e->prev = p->prev;
    if (p->prev) p->prev->next = e;
    else d->head = e;
    p->prev = e;
}

static void lru_push_tail(disk *d, disk_entry *e)
{
    e->prev = d->tail;
    e->next = NULL;
    if (d->tail) d->tail->next = e;
    else d->head = e;
    d->tail = e;
}

/* Doubles the buckets when they hold more entries than slots (best effort). */
static void disk_grow(disk *d)
{
    if (d->n <= d->mask + 1) return;
    size_t nb = (d->mask + 1) * 2;
    disk_entry **b = calloc(nb, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i <= d->mask; i++)
        for (disk_entry *e = d->buckets[i], *nx; e; e = nx) {
            nx = e->hnext;
            size_t h = (size_t)(e->key.h[0] ^ (e->key.h[1] >> 7)) & (nb - 1);
            e->hnext = b[h];
            b[h] = e;
        }
    free(d->buckets);
    d->buckets = b;
    d->mask = nb - 1;
}

static disk_entry *disk_add(disk *d, const store_key *k, uint64_t bytes, disk_seg *s, uint64_t off)
{
    disk_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->key = *k;
    e->bytes = bytes;
    e->seg = s;
    e->off = off;
    s->live++;
    size_t h = disk_home(d, k);
    e->hnext = d->buckets[h];
    d->buckets[h] = e;
    lru_push_tail(d, e);
    d->bytes += bytes;
    d->n++;
    disk_grow(d);
    return e;
}

/* Takes e out of the index (mu held); its record stays as it is. */
static void disk_forget(disk *d, disk_entry *e)
{
    e->seg->live--;
    disk_entry **pp = &d->buckets[disk_home(d, &e->key)];
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(d, e);
    d->bytes -= e->bytes;
    d->n--;
    free(e);
}

/* -------------------------------------------------------------- segments */

/* out (DISK_PATH_MAX) = DIR/seg/<id>.seg. */
static void seg_path(const disk *d, char *out, uint32_t id)
{
    snprintf(out, DISK_PATH_MAX, "%s/seg/%08" PRIx32 ".seg", d->dir, id);
}

/* Unlinks segment s and takes it out of the list (mu held; no entry of
 * the index is in it). */
static void seg_remove(disk *d, disk_seg *s)
{
    char p[DISK_PATH_MAX];
    seg_path(d, p, s->id);
    unlink(p);
    disk_seg **pp = &d->oldest;
    while (*pp != s) pp = &(*pp)->next;
    *pp = s->next;
    d->dead_bytes -= s->dead_bytes;
    free(s);
}

static disk_seg *seg_new(disk *d, uint32_t id)
{
    disk_seg *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->id = id;
    disk_seg **pp = &d->oldest;
    while (*pp) pp = &(*pp)->next;
    *pp = s;
    return s;
}

/* Evicts e (mu held): its record is marked dead and its entry bytes
 * punched out of the segment (the file keeps its size, the disk blocks are
 * freed), or, when e was the last live entry of a segment no longer
 * appended to, the whole segment is unlinked. Where the filesystem cannot
 * punch holes the dead bytes are counted against the limit until their
 * segment goes. */
static void disk_drop(disk *d, disk_entry *e)
{
    disk_seg *s = e->seg;
    uint64_t off = e->off, bytes = e->bytes;
    disk_forget(d, e);
    if (s->live == 0 && s != d->active && !d->loading) {
        seg_remove(d, s);
        return;
    }
    char p[DISK_PATH_MAX];
    seg_path(d, p, s->id);
    int fd = s == d->active ? d->active_fd : open(p, O_RDWR | O_CLOEXEC);
    if (fd < 0) return; /* gone behind our back: nothing left to free */
    uint8_t dead[4];
    le_put_u32(dead, SEG_DEAD);
    bool marked = pwrite(fd, dead, 4, (off_t)(off + SEG_STATE_AT)) == 4;
    if (!marked || fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(off + SEG_REC_HEADER), (off_t)bytes) != 0) {
        s->dead_bytes += SEG_REC_HEADER + bytes;
        d->dead_bytes += SEG_REC_HEADER + bytes;
    }
    if (fd != d->active_fd) close(fd);
}

/* Makes a new active segment when the active one cannot take need more
 * bytes (mu held; writer only, or open). 0 or PL_EIO. */
static int seg_room(disk *d, uint64_t need)
{
    if (d->active && d->active_fd >= 0 && (d->active->size == 0 || d->active->size + need <= d->seg_cap)) return 0;
    char p[DISK_PATH_MAX];
    seg_path(d, p, d->next_id);
    int fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) { /* DIR/seg removed behind our back: made again */
        char sub[DISK_PATH_MAX];
        snprintf(sub, sizeof sub, "%s/seg", d->dir);
        mkdir(sub, 0755);
        fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    if (fd < 0) return PL_EIO;
    disk_seg *s = seg_new(d, d->next_id++);
    if (!s) {
        close(fd);
        unlink(p);
        return PL_ENOMEM;
    }
    disk_seg *old = d->active;
    if (d->active_fd >= 0) close(d->active_fd);
    d->active = s;
    d->active_fd = fd;
    if (old && old->live == 0) seg_remove(d, old);
    return 0;
}

/* ----------------------------------------------------------------- chains */

/* Makes e's ancestors on disk more recent than e, nearest first, so that
 * a chain's deepest blocks are evicted first: a lookup stops at its first
 * miss, so a chain's tail is worthless without its head. */
static void disk_touch_ancestors(disk *d, const disk_entry *e)
{
    for (uint64_t depth = 0; e->has_parent && depth < d->n; depth++) {
        disk_entry *p = disk_find(d, &e->parent);
        if (!p || p == e) return;
        lru_unlink(d, p);
        lru_push_tail(d, p);
        e = p;
    }
}

static void disk_set_parent(disk_entry *e, const uint8_t *v, size_t len)
{
    store_entry_meta m;
    e->has_parent = store_entry_peek(v, len, &m) == 0 && (m.parent.h[0] || m.parent.h[1]);
    if (e->has_parent) e->parent = m.parent;
}

/* Evicts least recently used entries until the bytes fit the limit (mu held). */
static void disk_evict(disk *d)
{
    while (d->bytes + d->dead_bytes > d->max_bytes && d->head) disk_drop(d, d->head);
}

/* ------------------------------------------------------------ get / put */

static bool pread_all(int fd, uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return true;
}

/* Keys come in chain order (a prompt's blocks, first to last), and a lookup
 * stops at its first miss: the LRU is updated last key first, then the
 * ancestors above the batch, so that a chain's head stays the most recent.
 * A hit writes its new stamp into its record, so the order survives a
 * restart. */
static int disk_get_many(store_backend *b, const store_key *keys, size_t n, uint8_t **vals, size_t *lens)
{
    disk *d = (disk *)b;
    store_key shallowest = {{0, 0}};
    bool any = false;
    int rc = 0;
    int fd = -1;
    uint32_t fd_id = 0;
    for (size_t r = n; r-- > 0;) {
        vals[r] = NULL;
        lens[r] = 0;
        pthread_mutex_lock(&d->mu);
        disk_entry *e = disk_find(d, &keys[r]);
        uint32_t id = e ? e->seg->id : 0;
        uint64_t off = e ? e->off : 0, len = e ? e->bytes : 0;
        pthread_mutex_unlock(&d->mu);
        if (!e) continue;
        if (fd < 0 || fd_id != id) {
            if (fd >= 0) close(fd);
            char p[DISK_PATH_MAX];
            seg_path(d, p, id);
            fd = open(p, O_RDWR | O_CLOEXEC);
            fd_id = id;
        }
        uint8_t *v = fd >= 0 ? malloc(len) : NULL;
        bool read_ok = v && pread_all(fd, v, len, off + SEG_REC_HEADER);
        if (fd < 0 && errno != ENOENT) rc = PL_EIO;
        store_entry_meta m;
        bool torn = read_ok && store_entry_frame_check(v, len, &m) != 0;
        uint8_t stamp[8];
        pthread_mutex_lock(&d->mu);
        e = disk_find(d, &keys[r]); /* the writer may have evicted or replaced it meanwhile */
        bool same = e && e->seg->id == id && e->off == off;
        if (!read_ok) {
            free(v);
            if (same) disk_drop(d, e); /* its segment removed or cut behind our back */
        } else if (torn && same) {
            /* corrupt: dropped now; the value still goes up, for the store to reject and count */
            disk_drop(d, e);
            vals[r] = v;
            lens[r] = len;
        } else if (same) {
            lru_unlink(d, e);
            lru_push_tail(d, e);
            le_put_u64(stamp, ++d->clock);
            shallowest = keys[r];
            any = true;
            vals[r] = v;
            lens[r] = len;
        } else {
            free(v); /* evicted (its bytes punched) or replaced while read: a miss */
        }
        pthread_mutex_unlock(&d->mu);
        if (read_ok && !torn && same && pwrite(fd, stamp, 8, (off_t)(off + SEG_STAMP_AT)) != 8) rc = PL_EIO;
    }
    if (fd >= 0) close(fd);
    if (any) { /* the blocks above the batch (served from RAM) */
        pthread_mutex_lock(&d->mu);
        disk_entry *e = disk_find(d, &shallowest);
        if (e) disk_touch_ancestors(d, e);
        pthread_mutex_unlock(&d->mu);
    }
    return rc;
}

/* One write copies at most this much into the page cache. A kernel built
 * without full preemption (PREEMPT_NONE, as on the hosts measured) does
 * not take the CPU from a thread inside a system call: an engine thread
 * woken on the CPU where the writer is copying a whole 576 KiB entry waits
 * for the copy to end (a fraction of a millisecond to a few), the writer's
 * idle priority notwithstanding. Between pieces the return to user space
 * lets the woken thread in. */
#define DISK_WRITE_PIECE ((size_t)64 << 10)

/* Writes the record (header h, then v) at off: the header goes with the
 * entry's first piece, the rest in pieces. */
static bool disk_append(int fd, uint64_t off, const uint8_t *h, const uint8_t *v, size_t len)
{
    size_t first = len < DISK_WRITE_PIECE - SEG_REC_HEADER ? len : DISK_WRITE_PIECE - SEG_REC_HEADER;
    struct iovec iov[2] = {{(void *)h, SEG_REC_HEADER}, {(void *)v, first}};
    ssize_t w = pwritev(fd, iov, 2, (off_t)off);
    if (w < (ssize_t)SEG_REC_HEADER) return false;
    size_t done = (size_t)w - SEG_REC_HEADER; /* of v */
    off += (uint64_t)w;
    while (done < len) {
        size_t k = len - done < DISK_WRITE_PIECE ? len - done : DISK_WRITE_PIECE;
        w = pwrite(fd, v + done, k, (off_t)off);
        if (w <= 0) return false;
        done += (size_t)w;
        off += (uint64_t)w;
    }
    return true;
}

/* Indexes the record just written at (s, off) (mu held). */
static int disk_index_put(disk *d, const store_key *k, const uint8_t *v, size_t len, disk_seg *s, uint64_t off)
{
    disk_entry *old = disk_find(d, k);
    if (old) disk_drop(d, old); /* its record is dead: the new one replaces it */
    disk_entry *e = disk_add(d, k, len, s, off);
    if (!e) return PL_ENOMEM; /* the record stays, unindexed: a later open finds it */
    /* Ancestors stay more recent than descendants: a new block goes just
     * below its parent (O(1)); a chain's first block is the most recent;
     * a block whose parent is not on disk is unreachable from it: least. */
    disk_set_parent(e, v, len);
    disk_entry *par = e->has_parent ? disk_find(d, &e->parent) : NULL;
    lru_unlink(d, e);
    if (!e->has_parent) lru_push_tail(d, e);
    else if (par && par != e) lru_insert_before(d, e, par);
    else lru_push_head(d, e);
    disk_evict(d);
    return 0;
}

/* Appends one record to the active segment: its place is reserved under
 * mu, written outside it (only this thread appends), then indexed. */
static int disk_put_one(disk *d, const store_key *k, const uint8_t *v, size_t len)
{
    if (len > d->max_bytes) return PL_EFULL;
    if (len < STORE_ENTRY_HEADER) return PL_EINVAL; /* not an entry: a scan would take it for a torn tail */
    pthread_mutex_lock(&d->mu);
    int rc = seg_room(d, SEG_REC_HEADER + len);
    disk_seg *s = d->active;
    int fd = d->active_fd;
    uint64_t off = 0, stamp = 0;
    if (!rc) {
        off = s->size;
        s->size += SEG_REC_HEADER + len;
        stamp = ++d->clock;
    }
    pthread_mutex_unlock(&d->mu);
    if (rc) return rc;
    uint8_t h[SEG_REC_HEADER];
    seg_record_header(h, k, len, stamp);
    bool ok = disk_append(fd, off, h, v, len);
    pthread_mutex_lock(&d->mu);
    if (!ok) {
        /* the last record of s (no other append ran): cut it off, or, if
         * even that fails, append no more to s (the next put opens
         * another), so that no whole record ever follows a torn one */
        if (ftruncate(fd, (off_t)off) == 0) s->size = off;
        else s->size = d->seg_cap + 1;
        rc = PL_EIO;
    } else {
        rc = disk_index_put(d, k, v, len, s, off);
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}

/* In order: a chain's blocks come parent first, so each finds its parent. */
static int disk_put_many(store_backend *b, const store_key *keys, size_t n, const uint8_t *const *vals,
                         const size_t *lens)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        int r = disk_put_one((disk *)b, &keys[i], vals[i], lens[i]);
        if (r) rc = r;
    }
    return rc;
}

static void disk_close(store_backend *b)
{
    disk *d = (disk *)b;
    if (!d) return;
    while (d->head) disk_forget(d, d->head);
    while (d->oldest) {
        disk_seg *s = d->oldest;
        d->oldest = s->next;
        free(s);
    }
    if (d->active_fd >= 0) close(d->active_fd);
    free(d->buckets);
    if (d->mu_ok) pthread_mutex_destroy(&d->mu);
    if (d->lock_fd >= 0) close(d->lock_fd); /* releases the flock */
    free(d->dir);
    free(d);
}

void store_disk_usage(store_backend *b, uint64_t *files, uint64_t *bytes)
{
    disk *d = (disk *)b;
    pthread_mutex_lock(&d->mu);
    *files = d->n;
    *bytes = d->bytes;
    pthread_mutex_unlock(&d->mu);
}

size_t store_disk_lru(store_backend *b, store_key *out, size_t max)
{
    disk *d = (disk *)b;
    size_t k = 0;
    pthread_mutex_lock(&d->mu);
    for (const disk_entry *e = d->head; e && k < max; e = e->next) out[k++] = e->key;
    pthread_mutex_unlock(&d->mu);
    return k;
}

int store_disk_locate(store_backend *b, const store_key *k, char *path, size_t cap, uint64_t *off, uint64_t *len)
{
    disk *d = (disk *)b;
    pthread_mutex_lock(&d->mu);
    disk_entry *e = disk_find(d, k);
    if (e) {
        char p[DISK_PATH_MAX];
        seg_path(d, p, e->seg->id);
        snprintf(path, cap, "%s", p);
        *off = e->off + SEG_REC_HEADER;
        *len = e->bytes;
    }
    pthread_mutex_unlock(&d->mu);
    return e ? 0 : PL_ENOTFOUND;
}
/* ------------------------------------------------------------------ open */

static int cmp_stamp(const void *a, const void *b)
{
    const disk_entry *x = *(disk_entry *const *)a, *y = *(disk_entry *const *)b;
    return x->stamp < y->stamp ? -1 : x->stamp > y->stamp;
}

/* The LRU at open, from the entries v[0, n) sorted by stamp: as if each
 * had been used in that order, every use moving the entry's ancestors above
 * it (disk_touch_ancestors, nearest first), in O(n) rather than O(n x chain
 * depth). An ancestor ends where the latest use among its descendants put
 * it, so the uses are walked latest first, and each walk up the parents
 * stops at the first entry already placed (a later use placed it and all
 * above it): every entry is placed at most once. The order is then
 *   the entries no use moved (none of their descendants is on disk), by stamp;
 *   then for each use, oldest first, the ancestors its walk placed, nearest
 *   first (so a chain's head is the most recent of its chain). */
static int disk_order_at_open(disk *d, disk_entry **v, size_t n)
{
    disk_entry **placed = malloc(n * sizeof *placed);
    size_t *start = malloc(n * sizeof *start), *len = malloc(n * sizeof *len);
    if (!placed || !start || !len) {
        free(placed), free(start), free(len);
        return PL_ENOMEM;
    }
    size_t m = 0;
    for (size_t i = n; i-- > 0;) {
        start[i] = m;
        for (disk_entry *e = v[i]; e->has_parent;) {
            disk_entry *p = disk_find(d, &e->parent);
            if (!p || p == e || p->placed) break;
            p->placed = true;
            placed[m++] = p;
            e = p;
        }
        len[i] = m - start[i];
    }
    d->head = d->tail = NULL;
    for (size_t i = 0; i < n; i++)
        if (!v[i]->placed) lru_push_tail(d, v[i]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < len[i]; j++) lru_push_tail(d, placed[start[i] + j]);
    free(placed), free(start), free(len);
    return 0;
}

static ssize_t fd_read(void *src, void *buf, size_t n, uint64_t off)
{
    int fd = *(int *)src;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (r <= 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* The newest segment's last record is read whole and its entry checked
 * at open: that is where a process that stopped midway through an append
 * leaves it torn (its header written, not all its bytes; or the file cut
 * short, which the scan finds). It is cut off, so the next append takes
 * its place. Other records are not read whole (a directory of many GiB
 * opens in the time of its headers): after a power loss any record not
 * yet written back may hold garbage (nothing is fsync'd), which the read
 * that meets it finds and drops. Returns the new end. */
static uint64_t seg_verify_tail(int fd, seg_record *r, size_t *n, uint64_t end)
{
    if (*n == 0 || r[*n - 1].state != SEG_LIVE) return end;
    seg_record *last = &r[*n - 1];
    uint8_t *buf = malloc((size_t)last->entry_len);
    if (!buf) return end; /* unchecked: the read will check */
    store_entry_meta m;
    if (fd_read(&fd, buf, (size_t)last->entry_len, last->off + SEG_REC_HEADER) != (ssize_t)last->entry_len ||
        store_entry_frame_check(buf, (size_t)last->entry_len, &m) != 0) {
        end = last->off;
        (*n)--;
    }
    free(buf);
    return end;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The ids of DIR/seg/<8 hex>.seg, ascending, into *ids (malloc'd). */
static int seg_list(const disk *d, uint32_t **ids, size_t *n)
{
    char p[DISK_PATH_MAX];
    snprintf(p, sizeof p, "%s/seg", d->dir);
    *ids = NULL;
    *n = 0;
    DIR *dh = opendir(p);
    if (!dh) return 0;
    size_t cap = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(dh))) {
        const char *s = de->d_name;
        if (strlen(s) != 12 || strcmp(s + 8, ".seg") != 0 || strspn(s, "0123456789abcdef") != 8) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            uint32_t *g = realloc(*ids, cap * sizeof *g);
            if (!g) {
                rc = PL_ENOMEM;
                break;
            }
            *ids = g;
        }
        (*ids)[(*n)++] = (uint32_t)strtoul(s, NULL, 16);
    }
    closedir(dh);
    if (!rc && *n) qsort(*ids, *n, sizeof **ids, cmp_u32);
    return rc;
}

/* Indexes the live records of one segment (its torn tail cut off); a key
 * met twice (a migration interrupted, a replaced record whose mark did not
 * reach the disk) keeps its later record. */
static int seg_load(disk *d, uint32_t id, bool newest)
{
    char p[DISK_PATH_MAX];
    seg_path(d, p, id);
    int fd = open(p, O_RDWR | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    disk_seg *s = fstat(fd, &st) == 0 ? seg_new(d, id) : NULL;
    if (!s) {
        close(fd);
        return PL_ENOMEM;
    }
    seg_record *r;
    size_t n;
    int64_t end = seg_scan(fd_read, &fd, (uint64_t)st.st_size, &r, &n);
    if (end < 0) {
        close(fd);
        return PL_ENOMEM;
    }
    if (newest) end = (int64_t)seg_verify_tail(fd, r, &n, (uint64_t)end);
    if ((uint64_t)end < (uint64_t)st.st_size && ftruncate(fd, end) != 0) {} /* the torn tail; a later append overwrites it anyway */
    s->size = (uint64_t)end;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (r[i].state != SEG_LIVE) continue;
        disk_entry *old = disk_find(d, &r[i].key);
        if (old) disk_drop(d, old);
        disk_entry *e = disk_add(d, &r[i].key, r[i].entry_len, s, r[i].off);
        if (!e) {
            rc = PL_ENOMEM;
            break;
        }
        e->stamp = r[i].stamp;
        e->has_parent = r[i].has_parent;
        e->parent = r[i].parent;
        if (r[i].stamp > d->clock) d->clock = r[i].stamp;
    }
    free(r);
    if (newest && !rc) {
        d->active = s;
        d->active_fd = fd;
    } else {
        close(fd);
    }
    return rc;
}

/* Rebuilds the index from DIR/seg, least recent first: segments oldest
 * first, those left without a live entry removed. */
static int disk_scan(disk *d)
{
    uint32_t *ids;
    size_t nids;
    int rc = seg_list(d, &ids, &nids);
    d->loading = true;
    for (size_t i = 0; i < nids && !rc; i++) rc = seg_load(d, ids[i], i + 1 == nids);
    d->loading = false;
    if (nids) d->next_id = ids[nids - 1] + 1;
    free(ids);
    if (rc) return rc;
    for (disk_seg *s = d->oldest, *nx; s; s = nx) {
        nx = s->next;
        if (s->live == 0 && s != d->active) seg_remove(d, s);
    }
    if (d->n == 0) return 0;
    disk_entry **v = malloc(d->n * sizeof *v);
    if (!v) return PL_ENOMEM;
    size_t k = 0;
    for (disk_entry *e = d->head; e; e = e->next) v[k++] = e;
    qsort(v, k, sizeof *v, cmp_stamp);
    rc = disk_order_at_open(d, v, k);
    free(v);
    return rc;
}

/* ------------------------------------------------------------- migration */

/* One entry file of layout 1 or 2. */
typedef struct {
    char *path;
    store_key key;                    /* from its name */
    struct timespec mtime;
} old_file;

typedef struct {
    old_file *v;
    size_t n, cap;
} old_files;

static bool is_hex2(const char *s) { return strlen(s) == 2 && strspn(s, "0123456789abcdef") == 2; }

static bool unhex_key(const char *s, store_key *k)
{
    k->h[0] = k->h[1] = 0;
    for (int i = 0; i < 32; i++) {
        int c = s[i], v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        k->h[i / 16] = k->h[i / 16] << 4 | (uint64_t)v;
    }
    return true;
}

/* Collects DIR/ab/ *.kv (and DIR/ab/cd/ *.kv of layout 1, depth 1) and
 * deletes temp files of a crashed write; depth 0 = DIR/ab. */
static int old_collect(const char *dirpath, int depth, old_files *out)
{
    DIR *dh = opendir(dirpath);
    if (!dh) return 0;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(dh))) {
        size_t l = strlen(de->d_name);
        char p[DISK_PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dirpath, de->d_name) >= (int)sizeof p) continue;
        if (depth == 0 && is_hex2(de->d_name)) {
            rc = old_collect(p, 1, out);
        } else if (l == 36 && strcmp(de->d_name + 32, ".tmp") == 0) {
            unlink(p);
        } else if (l == 35 && strcmp(de->d_name + 32, ".kv") == 0) {
            struct stat st;
            store_key k;
            if (!unhex_key(de->d_name, &k) || stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
            if (out->n == out->cap) {
                size_t nc = out->cap ? 2 * out->cap : 256;
                old_file *g = realloc(out->v, nc * sizeof *g);
                if (!g) {
                    rc = PL_ENOMEM;
                    break;
                }
                out->v = g;
                out->cap = nc;
            }
            if (!(out->v[out->n].path = strdup(p))) {
                rc = PL_ENOMEM;
                break;
            }
            out->v[out->n].key = k;
            out->v[out->n++].mtime = st.st_mtim;
        }
    }
    closedir(dh);
    return rc;
}

/* Removes DIR/ab's layout-1 leaves and then DIR/ab itself, those empty. */
static void old_rmdirs(const char *mid)
{
    DIR *dh = opendir(mid);
    if (!dh) return;
    struct dirent *de;
    while ((de = readdir(dh))) {
        char p[DISK_PATH_MAX];
        if (is_hex2(de->d_name) && snprintf(p, sizeof p, "%s/%s", mid, de->d_name) < (int)sizeof p) rmdir(p);
    }
    closedir(dh);
    rmdir(mid);
}

static int cmp_old_mtime(const void *a, const void *b)
{
    const old_file *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : x->mtime.tv_nsec > y->mtime.tv_nsec;
}

static uint8_t *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && (buf = malloc((size_t)st.st_size))) {
        if (fd_read(&fd, buf, (size_t)st.st_size, 0) == (ssize_t)st.st_size) *len = (size_t)st.st_size;
        else free(buf), buf = NULL;
    }
    close(fd);
    return buf;
}

static int disk_put_one(disk *d, const store_key *k, const uint8_t *v, size_t len);

/* Layouts 1 and 2 kept one file per entry (DIR/ab/cd/ and DIR/ab/): each
 * file is read, its frame verified, and appended under the key its name
 * gives, oldest mtime first (so the LRU order
 * of its hits survives), then deleted, and the emptied directories removed.
 * A file whose entry does not verify is deleted unread into the tier. A
 * crash midway leaves some files; DIR/layout still names the old layout,
 * so the next open goes on with them (a file already appended is met again
 * in a segment and only deleted); so does a put that fails (a full disk).
 * 0 when done, 1 when files are left, PL_ENOMEM. */
static int disk_migrate(disk *d)
{
    old_files f = {0};
    int rc = 0;
    for (int i = 0; i < 256 && !rc; i++) {
        char mid[DISK_PATH_MAX];
        snprintf(mid, sizeof mid, "%s/%02x", d->dir, i);
        rc = old_collect(mid, 0, &f);
    }
    if (!rc && f.n) qsort(f.v, f.n, sizeof *f.v, cmp_old_mtime);
    for (size_t i = 0; i < f.n; i++) {
        size_t len = 0;
        uint8_t *v = rc ? NULL : read_file(f.v[i].path, &len);
        store_entry_meta m;
        if (v && store_entry_frame_check(v, len, &m) == 0 && !disk_find(d, &f.v[i].key) && len <= d->max_bytes &&
            disk_put_one(d, &f.v[i].key, v, len) != 0)
            rc = 1; /* kept, for the next open */
        else if (!rc)
            unlink(f.v[i].path);
        free(v);
        free(f.v[i].path);
    }
    free(f.v);
    for (int i = 0; i < 256 && !rc; i++) {
        char mid[DISK_PATH_MAX];
        snprintf(mid, sizeof mid, "%s/%02x", d->dir, i);
        old_rmdirs(mid);
    }
    return rc;
}
/* DIR/layout names the on-disk layout: "pagellm kv-disk layout 3\n".
 * Missing: layout 1 (DIR/ab/cd/, before the file existed); 1 and 2 are
 * migrated at open. */
#define DISK_LAYOUT 3
#define DISK_LAYOUT_TEXT "pagellm kv-disk layout "

/* The layout DIR says it has (1 when it says nothing), or -1 when the file
 * is there but is not one this code wrote. */
static int disk_layout_read(const char *dir)
{
    char p[4096], buf[64] = {0};
    snprintf(p, sizeof p, "%s/layout", dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 1 : -1;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    size_t pre = strlen(DISK_LAYOUT_TEXT);
    if (r <= (ssize_t)pre || strncmp(buf, DISK_LAYOUT_TEXT, pre) != 0) return -1;
    char *end;
    long v = strtol(buf + pre, &end, 10);
    return end != buf + pre && *end == '\n' && v >= 1 && v < 1000000 ? (int)v : -1;
}

/* Writes DIR/layout (temp and rename, so it is whole or absent). */
static int disk_layout_write(const char *dir)
{
    char p[4096], tmp[4096], text[64];
    snprintf(p, sizeof p, "%s/layout", dir);
    snprintf(tmp, sizeof tmp, "%s/layout.tmp", dir);
    int n = snprintf(text, sizeof text, DISK_LAYOUT_TEXT "%d\n", DISK_LAYOUT);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    bool ok = write(fd, text, (size_t)n) == n;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, p) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static store_backend *disk_fail(disk *d, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static store_backend *disk_fail(disk *d, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    disk_close(&d->base);
    return NULL;
}

store_backend *store_disk_open(const char *dir, uint64_t max_bytes, char *err, size_t errlen)
{
    disk *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "kv-disk: out of memory");
        return NULL;
    }
    d->lock_fd = -1;
    d->active_fd = -1;
    d->base = (store_backend){.name = "disk", .get_many = disk_get_many, .put_many = disk_put_many, .close = disk_close};
    d->max_bytes = max_bytes;
    d->seg_cap = max_bytes / 4 < DISK_SEG_BYTES ? max_bytes / 4 : DISK_SEG_BYTES;
    d->dir = strdup(dir ? dir : "");
    d->buckets = calloc(1024, sizeof *d->buckets);
    d->mask = 1023;
    if (!d->dir || !d->buckets) return disk_fail(d, err, errlen, "kv-disk: out of memory");
    if (pthread_mutex_init(&d->mu, NULL) != 0) return disk_fail(d, err, errlen, "kv-disk: cannot make its lock");
    d->mu_ok = true;
    if (!dir || !*dir) return disk_fail(d, err, errlen, "kv-disk: empty directory name");
    if (max_bytes == 0) return disk_fail(d, err, errlen, "kv-disk: the size limit must be at least 1 byte");
    if (strlen(dir) > 3000) return disk_fail(d, err, errlen, "kv-disk: directory name too long");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return disk_fail(d, err, errlen, "kv-disk: cannot create %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return disk_fail(d, err, errlen, "kv-disk: %s is not a directory", dir);
    char lock[4096];
    snprintf(lock, sizeof lock, "%s/lock", dir);
    d->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (d->lock_fd < 0) return disk_fail(d, err, errlen, "kv-disk: cannot open %s: %s", lock, strerror(errno));
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return disk_fail(d, err, errlen,
                         errno == EWOULDBLOCK ? "kv-disk: %s is in use by another process (%s is locked)"
                                              : "kv-disk: cannot lock %s (%s)",
                         dir, errno == EWOULDBLOCK ? lock : strerror(errno));
    int layout = disk_layout_read(dir);
    if (layout < 0) return disk_fail(d, err, errlen, "kv-disk: %s/layout is unreadable or not pagellm's", dir);
    if (layout > DISK_LAYOUT)
        return disk_fail(d, err, errlen, "kv-disk: %s holds layout %d, this build knows layout %d at most (give another directory)",
                         dir, layout, DISK_LAYOUT);
    /* Best effort: on a full disk the tier still opens (its puts fail and
     * are counted); a put makes DIR/seg again if it is missing. */
    char segdir[4096];
    snprintf(segdir, sizeof segdir, "%s/seg", dir);
    mkdir(segdir, 0755);
    int rc = disk_scan(d), left = 0;
    if (!rc && layout < DISK_LAYOUT) rc = (left = disk_migrate(d)) < 0 ? left : 0;
    if (!rc) disk_evict(d);
    if (rc) return disk_fail(d, err, errlen, "kv-disk: cannot read %s: %s", dir, rc == PL_ENOMEM ? "out of memory" : strerror(errno));
    if (layout < DISK_LAYOUT && left == 0) disk_layout_write(dir);
    return &d->base;
}
