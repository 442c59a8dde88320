/* store_disk.h - a KV tier in a local directory (`--kv-disk DIR`).
 *
 *   DIR/lock                      flock'd by the one process using DIR
 *   DIR/layout                    "pagellm kv-disk layout 3": this layout
 *   DIR/seg/<8 hex>.seg           segment files, ids ascending with age:
 *                                 entries appended as records
 *                                 (store_segment.h), the newest appended to
 *
 * A put appends one record to the newest segment (a new one is made when
 * it would pass 32 MiB, or a quarter of the limit for small tiers): no
 * file is created per entry, which is what the writer's CPU went to in
 * layout 2 (one file per entry). The index (key -> segment, offset,
 * length) lives in memory and is rebuilt at open from the records'
 * headers; the newest segment's last entry is also checked whole there,
 * and a torn tail (a crash midway through an append) is cut off. Nothing is
 * fsync'd: after a power loss a record may hold garbage, which the entry
 * checksum catches on read (the record is then dropped and the value
 * counted as rejected by the store).
 *
 * Eviction is by entry, not by segment: an LRU by bytes keeps the entries
 * within max_bytes; an evicted record is marked dead and its bytes punched
 * out of the file (fallocate PUNCH_HOLE: the blocks are freed, the offsets
 * of the others stay), and a segment left with no live record is deleted.
 * Each record carries a use stamp (rewritten on a hit), so the LRU order
 * survives restarts. Chains are kept from their head: a lookup stops at
 * its first miss, so a block is worth nothing without its ancestors, so
 * ancestors are kept more recent than their descendants (the deepest
 * blocks go first): a new block goes just below its parent, a lookup moves
 * its blocks and their ancestors up, and a block whose parent is not on
 * disk is written as the least recent. The limit counts entry bytes; each
 * record's 48-byte header and the partial filesystem blocks at a hole's
 * ends come on top. Where holes cannot be punched, dead records count
 * against the limit until their segment goes.
 *
 * Layouts 1 (DIR/ab/cd/<key>.kv, no DIR/layout) and 2 (DIR/ab/<key>.kv)
 * are migrated at open: each file verified, appended, deleted. A DIR/layout
 * of a later layout, or not written by pagellm, is refused.
 *
 * The store's reader and writer threads may call it at once
 * (store_backend.h): a lock guards the index, not the reads and appends.
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

/* Where key k's entry is: its segment file into path (cap bytes), the
 * entry's offset in it and its length. 0, or PL_ENOTFOUND (for tests). */
int store_disk_locate(store_backend *b, const store_key *k, char *path, size_t cap, uint64_t *off, uint64_t *len);

#endif
