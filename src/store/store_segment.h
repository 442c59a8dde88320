/* store_segment.h - the records of the disk tier's segment files
 * (store_disk.h, layout 3): one record per entry, appended.
 *
 * Record (little endian, header 48 bytes):
 *
 *   0   magic "PLSG"
 *   4   state u32          SEG_LIVE, or SEG_DEAD once evicted (then its
 *                          entry bytes are a punched hole)
 *   8   entry_len u64      the entry's bytes (store_entry.h) that follow
 *   16  stamp u64          the tier's use clock at the entry's last put or
 *                          hit: the LRU order, rebuilt at open
 *   24  key [2]u64         the key it was put under (the backend's key;
 *                          the entry's own header may claim another, which
 *                          the store's verification then refuses)
 *   40  check u32          low 32 bits of XXH3-64 of bytes [0, 4), [8, 16)
 *                          and [24, 40): what never changes
 *   44  reserved u32 (0)
 *   48  the entry
 *
 * state and stamp are rewritten in place, so the check leaves them out;
 * the entry carries its own checksum, verified on every read.
 *
 * A scan (at open) walks the records from offset 0 and stops at the first
 * one that cannot be whole: fewer than 32 bytes left, a bad magic, check or
 * state, or a length past the file's end or too short for an entry header.
 * Everything from there on is
 * a torn tail (a crash midway through an append) and is cut off.
 */
#ifndef PL_STORE_SEGMENT_H
#define PL_STORE_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store/store_entry.h"

#define SEG_REC_HEADER 48
#define SEG_STATE_AT 4
#define SEG_STAMP_AT 16
#define SEG_LIVE 0x4556494cu /* "LIVE" */
#define SEG_DEAD 0x44414544u /* "DEAD" */

/* The header of a live record of an entry of entry_len bytes. */
void seg_record_header(uint8_t out[SEG_REC_HEADER], const store_key *key, uint64_t entry_len, uint64_t stamp);

/* 0 with the fields, or PL_EFORMAT when h is not a record header. */
int seg_record_parse(const uint8_t h[SEG_REC_HEADER], uint32_t *state, store_key *key, uint64_t *entry_len,
                     uint64_t *stamp);

/* One record found by a scan. */
typedef struct {
    uint64_t off;          /* of the record header */
    uint64_t entry_len;
    uint64_t stamp;
    uint32_t state;
    store_key key;
    bool has_parent;       /* live records whose entry header names a parent */
    store_key parent;
} seg_record;

/* Reads n bytes at off from src into buf: the bytes read, fewer at the end. */
typedef ssize_t (*seg_read_fn)(void *src, void *buf, size_t n, uint64_t off);

/* Scans a segment of size bytes: *recs (malloc'd, the caller frees) gets
 * the whole records in order, *n_recs their count; returns the offset where
 * the whole records end (size when nothing is torn), or -1 when out of
 * memory. */
int64_t seg_scan(seg_read_fn rd, void *src, uint64_t size, seg_record **recs, size_t *n_recs);

#endif
