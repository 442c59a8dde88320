/* store_disk.c - the directory tier: index (hash + LRU list by bytes),
 * open-time scan, temp-and-rename puts, verified gets; see store_disk.h.
 *
 *   buckets[hash(key) & mask] -> entry -> entry (hnext chain)
 *   lru: head (least recent) <-> ... <-> tail (most recent), bytes summed
 *
 * The store's reader (gets) and writer (puts) threads call in at once:
 * mu guards the index; file I/O runs outside it, and an entry is found
 * again by key after each file operation (the other thread may have
 * evicted or replaced it meanwhile).
 */
#include "store/store_disk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "store/store_entry.h"

typedef struct disk_entry {
    store_key key;
    store_key parent;                 /* from the entry's header */
    bool has_parent;
    uint64_t bytes;
    struct timespec mtime;            /* at open only: the scan's order */
    bool placed;                      /* at open only: ordered under a descendant */
    struct disk_entry *prev, *next;   /* LRU */
    struct disk_entry *hnext;         /* bucket chain */
} disk_entry;

typedef struct {
    store_backend base;
    char *dir;
    int lock_fd;
    uint64_t max_bytes, bytes, n;
    disk_entry **buckets;
    size_t mask;                      /* buckets - 1, a power of two minus one */
    disk_entry *head, *tail;
    pthread_mutex_t mu;               /* the index: buckets, lru, bytes, n */
    bool mu_ok;
} disk;

#define DISK_PATH_MAX 4096

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

static disk_entry *disk_add(disk *d, const store_key *k, uint64_t bytes)
{
    disk_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->key = *k;
    e->bytes = bytes;
    size_t h = disk_home(d, k);
    e->hnext = d->buckets[h];
    d->buckets[h] = e;
    lru_push_tail(d, e);
    d->bytes += bytes;
    d->n++;
    disk_grow(d);
    return e;
}

static void disk_forget(disk *d, disk_entry *e)
{
    disk_entry **pp = &d->buckets[disk_home(d, &e->key)];
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(d, e);
    d->bytes -= e->bytes;
    d->n--;
    free(e);
}

/* ----------------------------------------------------------------- paths */

static void disk_hex(const store_key *k, char out[33])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        uint8_t byte = (uint8_t)(k->h[i / 8] >> (56 - 8 * (i % 8)));
        out[2 * i] = hx[byte >> 4];
        out[2 * i + 1] = hx[byte & 15];
    }
    out[32] = 0;
}

static bool disk_unhex(const char *s, store_key *k)
{
    k->h[0] = k->h[1] = 0;
    for (int i = 0; i < 32; i++) {
        int c = s[i], v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        k->h[i / 16] = k->h[i / 16] << 4 | (uint64_t)v;
    }
    return true;
}

/* out (DISK_PATH_MAX) = DIR/ab/<hex><ext>. */
static void disk_path(const disk *d, char *out, const store_key *k, const char *ext)
{
    char hex[33];
    disk_hex(k, hex);
    snprintf(out, DISK_PATH_MAX, "%s/%.2s/%s%s", d->dir, hex, hex, ext);
}

/* Makes the 256 directories DIR/00 .. DIR/ff (those missing): at open, so
 * that a put creates one inode (its file), not a directory as well. */
static void disk_make_fanout(const disk *d)
{
    char p[DISK_PATH_MAX];
    for (int i = 0; i < 256; i++) {
        snprintf(p, sizeof p, "%s/%02x", d->dir, i);
        mkdir(p, 0755);
    }
}

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

/* Deletes least recently used files until the bytes fit the limit (mu held). */
static void disk_evict(disk *d)
{
    char path[DISK_PATH_MAX];
    while (d->bytes > d->max_bytes && d->head) {
        disk_path(d, path, &d->head->key, ".kv");
        unlink(path);
        disk_forget(d, d->head);
    }
}

/* ------------------------------------------------------------ get / put */

static uint8_t *disk_read(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) == 0 && st.st_size > 0 && (buf = malloc((size_t)st.st_size))) {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got == (size_t)st.st_size) {
            futimens(fd, NULL); /* the LRU order survives a restart */
            *len = got;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    close(fd);
    return buf;
}

/* Keys come in chain order (a prompt's blocks, first to last), and a lookup
 * stops at its first miss: the LRU is updated last key first, then the
 * ancestors above the batch, so that a chain's head stays the most recent. */
static int disk_get_many(store_backend *b, const store_key *keys, size_t n, uint8_t **vals, size_t *lens)
{
    disk *d = (disk *)b;
    store_key shallowest;
    bool any = false;
    int rc = 0;
    for (size_t r = n; r-- > 0;) {
        vals[r] = NULL;
        lens[r] = 0;
        pthread_mutex_lock(&d->mu);
        bool known = disk_find(d, &keys[r]) != NULL;
        pthread_mutex_unlock(&d->mu);
        if (!known) continue;
        char path[DISK_PATH_MAX];
        disk_path(d, path, &keys[r], ".kv");
        vals[r] = disk_read(path, &lens[r]);
        int read_errno = errno;
        store_entry_meta m;
        bool torn = vals[r] && store_entry_frame_check(vals[r], lens[r], &m) != 0;
        pthread_mutex_lock(&d->mu);
        disk_entry *e = disk_find(d, &keys[r]); /* the writer may have evicted it meanwhile */
        if (!vals[r]) {
            if (read_errno != ENOENT) rc = PL_EIO;
            if (e) disk_forget(d, e); /* removed behind our back, or unreadable */
        } else if (torn) {
            /* torn or corrupt: deleted now; the value still goes up, for the store to reject and count */
            unlink(path);
            if (e) disk_forget(d, e);
        } else if (e) {
            lru_unlink(d, e);
            lru_push_tail(d, e);
            shallowest = keys[r];
            any = true;
        }
        pthread_mutex_unlock(&d->mu);
    }
    if (any) { /* the blocks above the batch (served from RAM) */
        pthread_mutex_lock(&d->mu);
        disk_entry *e = disk_find(d, &shallowest);
        if (e) disk_touch_ancestors(d, e);
        pthread_mutex_unlock(&d->mu);
    }
    return rc;
}

/* One write() copies at most this much into the page cache. A kernel built
 * without full preemption (PREEMPT_NONE, as on the hosts measured) does
 * not take the CPU from a thread inside a system call: an engine thread
 * woken on the CPU where the writer is copying a whole 576 KiB entry waits
 * for the copy to end (a fraction of a millisecond to a few), the writer's
 * idle priority notwithstanding. Between pieces the return to user space
 * lets the woken thread in. */
#define DISK_WRITE_PIECE ((size_t)64 << 10)

static bool disk_write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n < DISK_WRITE_PIECE ? n : DISK_WRITE_PIECE);
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static int disk_index_put(disk *d, const store_key *k, const uint8_t *v, size_t len, const char *path);

static int disk_put_one(disk *d, const store_key *k, const uint8_t *v, size_t len)
{
    if (len > d->max_bytes) return PL_EFULL;
    char tmp[DISK_PATH_MAX], path[DISK_PATH_MAX];
    disk_path(d, tmp, k, ".tmp");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) { /* DIR/ab removed behind our back: made again */
        char sub[DISK_PATH_MAX];
        snprintf(sub, sizeof sub, "%.*s", (int)(strrchr(tmp, '/') - tmp), tmp);
        mkdir(sub, 0755);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd < 0) return PL_EIO;
    bool ok = disk_write_all(fd, v, len);
    ok = close(fd) == 0 && ok;
    disk_path(d, path, k, ".kv");
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return PL_EIO;
    }
    pthread_mutex_lock(&d->mu);
    int rc = disk_index_put(d, k, v, len, path);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

/* Indexes the file just renamed to path (mu held). */
static int disk_index_put(disk *d, const store_key *k, const uint8_t *v, size_t len, const char *path)
{
    disk_entry *e = disk_find(d, k);
    if (e) {
        d->bytes = d->bytes - e->bytes + len;
        e->bytes = len;
        lru_unlink(d, e);
        lru_push_tail(d, e);
    } else if (!(e = disk_add(d, k, len))) {
        unlink(path);
        return PL_ENOMEM;
    }
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

/* ------------------------------------------------------------------ open */

static bool is_hex2(const char *s)
{
    return strlen(s) == 2 && strspn(s, "0123456789abcdef") == 2;
}

static int cmp_mtime(const void *a, const void *b)
{
    const disk_entry *x = *(disk_entry *const *)a, *y = *(disk_entry *const *)b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : x->mtime.tv_nsec > y->mtime.tv_nsec;
}

/* Indexes the entries of one DIR/ab (ab: the directory's name, which a
 * file's key must start with); removes temp files left by a crash. */
static int disk_scan_leaf(disk *d, const char *leaf, const char *ab)
{
    DIR *dh = opendir(leaf);
    if (!dh) return 0;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(dh))) {
        size_t l = strlen(de->d_name);
        char p[4096];
        store_key k;
        if (snprintf(p, sizeof p, "%s/%s", leaf, de->d_name) >= (int)sizeof p) continue;
        if (l == 36 && strcmp(de->d_name + 32, ".tmp") == 0) {
            unlink(p);
        } else if (l == 35 && strcmp(de->d_name + 32, ".kv") == 0 && strncmp(de->d_name, ab, 2) == 0 &&
                   disk_unhex(de->d_name, &k)) {
            struct stat st;
            if (stat(p, &st) != 0 || !S_ISREG(st.st_mode) || disk_find(d, &k)) continue;
            disk_entry *e = disk_add(d, &k, (uint64_t)st.st_size);
            if (!e) {
                rc = PL_ENOMEM;
                continue;
            }
            e->mtime = st.st_mtim;
            uint8_t head[STORE_ENTRY_HEADER];
            int fd = open(p, O_RDONLY | O_CLOEXEC);
            if (fd >= 0 && pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head) disk_set_parent(e, head, sizeof head);
            if (fd >= 0) close(fd);
        }
    }
    closedir(dh);
    return rc;
}

/* Layout 1 kept entries in DIR/ab/cd/: moves those of DIR/ab/cd up into
 * DIR/ab (rename keeps the mtime, so the LRU order survives), drops their
 * temp files and removes the emptied directory. A crash midway leaves
 * entries in one place or the other; the next open moves the rest. */
static void disk_migrate_leaf(const char *mid, const char *cd)
{
    char leaf[4096];
    if (snprintf(leaf, sizeof leaf, "%s/%s", mid, cd) >= (int)sizeof leaf) return;
    DIR *dh = opendir(leaf);
    if (!dh) return;
    const char *ab = strrchr(mid, '/') + 1;
    struct dirent *de;
    while ((de = readdir(dh))) {
        size_t l = strlen(de->d_name);
        char from[4096], to[4096];
        if (snprintf(from, sizeof from, "%s/%s", leaf, de->d_name) >= (int)sizeof from) continue;
        if (l == 36 && strcmp(de->d_name + 32, ".tmp") == 0) unlink(from);
        else if (l == 35 && strcmp(de->d_name + 32, ".kv") == 0 && strncmp(de->d_name, ab, 2) == 0 &&
                 strncmp(de->d_name + 2, cd, 2) == 0 &&
                 snprintf(to, sizeof to, "%s/%s", mid, de->d_name) < (int)sizeof to)
            rename(from, to);
    }
    closedir(dh);
    rmdir(leaf); /* fails, harmlessly, if something else is left in it */
}

/* The LRU at open, from the entries v[0, n) sorted by mtime: as if each
 * had been used in that order, every use moving the entry's ancestors above
 * it (disk_touch_ancestors, nearest first), in O(n) rather than O(n x chain
 * depth). An ancestor ends where the latest use among its descendants put
 * it, so the uses are walked latest first, and each walk up the parents
 * stops at the first entry already placed (a later use placed it and all
 * above it): every entry is placed at most once. The order is then
 *   the entries no use moved (none of their descendants is on disk), by mtime;
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

/* Rebuilds the index from DIR, least recent first, and applies the limit;
 * entries of layout 1 are moved into layout 2 first. */
static int disk_scan(disk *d)
{
    int rc = 0;
    for (int i = 0; i < 256 && !rc; i++) {
        char mid[4096], ab[3];
        snprintf(ab, sizeof ab, "%02x", i);
        snprintf(mid, sizeof mid, "%s/%s", d->dir, ab);
        DIR *dm = opendir(mid);
        if (!dm) continue;
        /* the names first: entries renamed into mid while it is read may or may not be listed */
        char (*sub)[3] = NULL;
        size_t nsub = 0;
        struct dirent *c;
        while ((c = readdir(dm)))
            if (is_hex2(c->d_name)) {
                char(*g)[3] = realloc(sub, (nsub + 1) * sizeof *sub);
                if (!g) {
                    rc = PL_ENOMEM;
                    break;
                }
                sub = g;
                memcpy(sub[nsub++], c->d_name, 3);
            }
        closedir(dm);
        for (size_t j = 0; j < nsub && !rc; j++) disk_migrate_leaf(mid, sub[j]);
        free(sub);
        if (!rc) rc = disk_scan_leaf(d, mid, ab);
    }
    if (rc || d->n == 0) return rc;
    disk_entry **v = malloc(d->n * sizeof *v);
    if (!v) return PL_ENOMEM;
    size_t k = 0;
    for (disk_entry *e = d->head; e; e = e->next) v[k++] = e;
    qsort(v, k, sizeof *v, cmp_mtime);
    rc = disk_order_at_open(d, v, k);
    free(v);
    if (rc) return rc;
    disk_evict(d);
    return 0;
}

/* DIR/layout names the on-disk layout: "pagellm kv-disk layout 2\n".
 * Missing: layout 1 (DIR/ab/cd/, before the file existed), migrated at open. */
#define DISK_LAYOUT 2
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
    d->base = (store_backend){.name = "disk", .get_many = disk_get_many, .put_many = disk_put_many, .close = disk_close};
    d->max_bytes = max_bytes;
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
    /* Best effort, both: on a full disk the tier still opens (its puts fail
     * and are counted); a put makes its directory if missing, and a DIR
     * without its layout file is read as layout 1, whose migration finds
     * nothing to move in a layout-2 directory. */
    disk_make_fanout(d);
    int rc = disk_scan(d);
    if (rc) return disk_fail(d, err, errlen, "kv-disk: cannot read %s: %s", dir, rc == PL_ENOMEM ? "out of memory" : strerror(errno));
    if (layout < DISK_LAYOUT) disk_layout_write(dir);
    return &d->base;
}
