/* store_disk.h - a KV tier in a local directory (`--kv-disk DIR`).
 *
 *   DIR/lock                      flock'd by the one process using DIR
 *   DIR/layout                    "pagellm kv-disk layout 2": this layout
 *   DIR/ab/<32 hex>.kv            one entry per file, named by its key
 *                                 (ab: the key's first byte; the 256
 *                                 directories are made at open)
 *   DIR/ab/<32 hex>.tmp           a write in progress (renamed when whole)
 *
 * Layout 1 (no DIR/layout) kept entries one level deeper, DIR/ab/cd/; its
 * entries are moved up at open. A DIR/layout of a later layout, or not
 * written by pagellm, is refused.
 * A put writes a temp file and renames it over the real name, so a torn
 * write (crash, full disk) never leaves a partial file under a key's name;
 * leftover temp files are removed at open. Files are not fsync'd: after a
 * power loss a file may hold garbage, which the entry checksum catches (the
 * file is then deleted on read and counted as rejected by the store).
 * An LRU by bytes keeps the files within max_bytes; the index is rebuilt
 * at open from the directory, least recently used first by mtime (a hit
 * touches its file's mtime), so the order survives restarts. Chains are
 * kept from their head: a lookup stops at its first miss, so a block is
 * worth nothing without its ancestors, so ancestors are kept more recent
 * than their descendants (the deepest blocks go first): a new block goes
 * just below its parent, a lookup moves its blocks and their ancestors up,
 * and a block whose parent is not on disk is written as the least recent.
 *
 * The store's reader and writer threads may call it at once
 * (store_backend.h): a lock guards the index, not the file I/O.
 */
#ifndef PL_STORE_DISK_H
#define PL_STORE_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "store/store_backend.h"

/* Opens (creating it if missing) DIR as a tier of at most max_bytes of
 * entries (>= 1). NULL with a message in err when DIR cannot be made or
 * read, or another process holds DIR/lock. */
store_backend *store_disk_open(const char *dir, uint64_t max_bytes, char *err, size_t errlen);

/* Files and bytes indexed now (for tests). */
void store_disk_usage(store_backend *b, uint64_t *files, uint64_t *bytes);

/* The keys of the index, least recently used first, at most max of them
 * into out; returns how many (for tests). */
size_t store_disk_lru(store_backend *b, store_key *out, size_t max);

#endif
