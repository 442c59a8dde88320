/* store_entry.c - encode, seal and verify one tier entry; see store_entry.h. */
#include "store/store_entry.h"

#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "base/err.h"
#include "store/store_bytes.h"

static const uint8_t entry_magic[4] = {'P', 'L', 'K', 'V'};

size_t store_entry_size(uint32_t n_tokens, uint64_t payload_len)
{
    return STORE_ENTRY_HEADER + 4 * (size_t)n_tokens + (size_t)payload_len;
}

uint8_t *store_entry_begin(uint8_t *out, const store_entry_meta *m, const int32_t *tokens)
{
    memset(out, 0, STORE_ENTRY_HEADER);
    memcpy(out, entry_magic, 4);
    le_put_u16(out + 4, STORE_ENTRY_VERSION);
    le_put_u16(out + 6, 0);
    le_put_u64(out + 8, m->salt[0]);
    le_put_u64(out + 16, m->salt[1]);
    le_put_u64(out + 24, m->parent.h[0]);
    le_put_u64(out + 32, m->parent.h[1]);
    le_put_u64(out + 40, m->key.h[0]);
    le_put_u64(out + 48, m->key.h[1]);
    le_put_u32(out + 56, m->n_tokens);
    le_put_u64(out + 64, m->payload_len);
    uint8_t *p = out + STORE_ENTRY_HEADER;
    for (uint32_t i = 0; i < m->n_tokens; i++, p += 4) le_put_u32(p, (uint32_t)tokens[i]);
    return p;
}

static uint64_t entry_checksum(const uint8_t *e, size_t len)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, e, 80);
    XXH3_64bits_update(&st, e + STORE_ENTRY_HEADER, len - STORE_ENTRY_HEADER);
    return XXH3_64bits_digest(&st);
}

void store_entry_seal(uint8_t *e, size_t len) { le_put_u64(e + 80, entry_checksum(e, len)); }

int store_entry_frame_check(const uint8_t *e, size_t len, store_entry_meta *m)
{
    if (!e || len < STORE_ENTRY_HEADER) return err_set(PL_EFORMAT, "store entry: %zu bytes, shorter than its header", len);
    if (memcmp(e, entry_magic, 4)) return err_set(PL_EFORMAT, "store entry: bad magic");
    if (le_get_u16(e + 4) != STORE_ENTRY_VERSION)
        return err_set(PL_EFORMAT, "store entry: version %u, expected %u", le_get_u16(e + 4), STORE_ENTRY_VERSION);
    if (le_get_u16(e + 6) != 0) return err_set(PL_EFORMAT, "store entry: unknown flags 0x%x", le_get_u16(e + 6));
    store_entry_meta x = {.salt = {le_get_u64(e + 8), le_get_u64(e + 16)},
                          .parent = {{le_get_u64(e + 24), le_get_u64(e + 32)}},
                          .key = {{le_get_u64(e + 40), le_get_u64(e + 48)}},
                          .n_tokens = le_get_u32(e + 56),
                          .payload_len = le_get_u64(e + 64)};
    if (x.n_tokens == 0 || x.n_tokens > (1u << 20) || x.payload_len > ((uint64_t)1 << 40) ||
        store_entry_size(x.n_tokens, x.payload_len) != len)
        return err_set(PL_EFORMAT, "store entry: %u tokens and %llu payload bytes do not make its %zu bytes",
                       x.n_tokens, (unsigned long long)x.payload_len, len);
    if (le_get_u32(e + 60) || le_get_u64(e + 72) || le_get_u64(e + 88)) return err_set(PL_EFORMAT, "store entry: reserved bytes set");
    if (entry_checksum(e, len) != le_get_u64(e + 80)) return err_set(PL_EFORMAT, "store entry: checksum mismatch");
    *m = x;
    return 0;
}

int store_entry_peek(const uint8_t *e, size_t len, store_entry_meta *m)
{
    if (!e || len < STORE_ENTRY_HEADER || memcmp(e, entry_magic, 4) || le_get_u16(e + 4) != STORE_ENTRY_VERSION)
        return PL_EFORMAT;
    *m = (store_entry_meta){.salt = {le_get_u64(e + 8), le_get_u64(e + 16)},
                            .parent = {{le_get_u64(e + 24), le_get_u64(e + 32)}},
                            .key = {{le_get_u64(e + 40), le_get_u64(e + 48)}},
                            .n_tokens = le_get_u32(e + 56),
                            .payload_len = le_get_u64(e + 64)};
    return 0;
}

static int key_eq(const store_key *a, const store_key *b) { return a->h[0] == b->h[0] && a->h[1] == b->h[1]; }

int store_entry_verify(const uint8_t *e, size_t len, const store_entry_meta *want, const int32_t *tokens,
                       const uint8_t **payload)
{
    store_entry_meta m;
    int rc = store_entry_frame_check(e, len, &m);
    if (rc) return rc;
    if (m.salt[0] != want->salt[0] || m.salt[1] != want->salt[1])
        return err_set(PL_EFORMAT, "store entry: another salt (model, KV shape or dtype)");
    if (!key_eq(&m.key, &want->key)) return err_set(PL_EFORMAT, "store entry: another key");
    if (!key_eq(&m.parent, &want->parent)) return err_set(PL_EFORMAT, "store entry: another parent key");
    if (m.n_tokens != want->n_tokens || m.payload_len != want->payload_len)
        return err_set(PL_EFORMAT, "store entry: %u tokens / %llu bytes, expected %u / %llu", m.n_tokens,
                       (unsigned long long)m.payload_len, want->n_tokens, (unsigned long long)want->payload_len);
    const uint8_t *p = e + STORE_ENTRY_HEADER;
    for (uint32_t i = 0; i < m.n_tokens; i++, p += 4)
        if (le_get_u32(p) != (uint32_t)tokens[i]) return err_set(PL_EFORMAT, "store entry: token %u differs", i);
    *payload = p;
    return 0;
}
