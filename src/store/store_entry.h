/* store_entry.h - the value of one KV tier entry: one full KV block with
 * what proves it is the block a prompt asks for.
 *
 * Layout (little endian, no padding; header 96 bytes):
 *
 *   0   magic "PLKV"          4   version u16   6   flags u16 (0: raw payload)
 *   8   salt [2]u64           the prefix cache's salt (model, KV shape, dtype)
 *   24  parent key [2]u64     the key of the block before it (PREFIX_ROOT first)
 *   40  key [2]u64            the block's own chained key (the tier's key)
 *   56  n_tokens u32          the block size T
 *   60  reserved u32 (0)
 *   64  payload_len u64       the block's bytes
 *   72  reserved u64 (0)
 *   80  checksum u64          XXH3-64 of bytes [0, 80) and [96, end)
 *   88  reserved u64 (0)
 *   96  tokens [T]u32         the block's token ids
 *   96 + 4T  payload          all layers' K and V planes, exactly as the pool
 *                              lays one block out (kv_pool.h)
 *
 * A read is used only if every field agrees with what the reader expects
 * (store_entry_verify): magic, version, flags, salt, key, parent key, the
 * prompt's token ids, the payload length and the checksum. Anything else is
 * a miss (counted as rejected): a lost, stale, truncated or colliding entry
 * costs a recompute, never a wrong block. Compression was measured and does
 * not pay for KV bytes (docs/kv-tiers.md), so flags must be 0.
 */
#ifndef PL_STORE_ENTRY_H
#define PL_STORE_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "store/store_backend.h"

#define STORE_ENTRY_VERSION 1
#define STORE_ENTRY_HEADER 96

/* What an entry claims to be. */
typedef struct {
    uint64_t salt[2];
    store_key parent, key;
    uint32_t n_tokens;
    uint64_t payload_len;
} store_entry_meta;

/* Bytes of an entry with n_tokens tokens and payload_len payload bytes. */
size_t store_entry_size(uint32_t n_tokens, uint64_t payload_len);

/* Writes the header and the tokens into out (store_entry_size bytes) and
 * returns where the payload goes; the caller copies the payload there and
 * then calls store_entry_seal. */
uint8_t *store_entry_begin(uint8_t *out, const store_entry_meta *m, const int32_t *tokens);
/* Computes and writes the checksum of a complete entry of len bytes. */
void store_entry_seal(uint8_t *e, size_t len);

/* The frame alone: magic, version, flags, lengths and checksum agree
 * (what a backend can check without knowing which block it expects).
 * 0, or PL_EFORMAT with the reason in the error text. *m filled on 0. */
int store_entry_frame_check(const uint8_t *e, size_t len, store_entry_meta *m);

/* The header's claims alone (magic and version checked, nothing else, no
 * checksum): for an index that needs an entry's parent key cheaply. 0 or
 * PL_EFORMAT. */
int store_entry_peek(const uint8_t *e, size_t len, store_entry_meta *m);

/* The frame, and that it is the entry `want` names holding tokens[0, T):
 * 0 with *payload pointing into e, or PL_EFORMAT naming the first field that
 * disagrees. */
int store_entry_verify(const uint8_t *e, size_t len, const store_entry_meta *want, const int32_t *tokens,
                       const uint8_t **payload);

#endif
