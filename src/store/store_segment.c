/* store_segment.c - segment records: encode, parse, scan; see store_segment.h. */
#include "store/store_segment.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/err.h"
#include "store/store_bytes.h"

static const uint8_t seg_magic[4] = {'P', 'L', 'S', 'G'};

static uint32_t seg_check(const uint8_t *h)
{
    uint8_t b[28];
    memcpy(b, h, 4);
    memcpy(b + 4, h + 8, 8);
    memcpy(b + 12, h + 24, 16);
    return (uint32_t)XXH3_64bits(b, sizeof b);
}

void seg_record_header(uint8_t out[SEG_REC_HEADER], const store_key *key, uint64_t entry_len, uint64_t stamp)
{
    memset(out, 0, SEG_REC_HEADER);
    memcpy(out, seg_magic, 4);
    le_put_u32(out + SEG_STATE_AT, SEG_LIVE);
    le_put_u64(out + 8, entry_len);
    le_put_u64(out + SEG_STAMP_AT, stamp);
    le_put_u64(out + 24, key->h[0]);
    le_put_u64(out + 32, key->h[1]);
    le_put_u32(out + 40, seg_check(out));
}

int seg_record_parse(const uint8_t h[SEG_REC_HEADER], uint32_t *state, store_key *key, uint64_t *entry_len,
                     uint64_t *stamp)
{
    if (memcmp(h, seg_magic, 4) || le_get_u32(h + 40) != seg_check(h) || le_get_u32(h + 44) != 0) return PL_EFORMAT;
    uint32_t s = le_get_u32(h + SEG_STATE_AT);
    if (s != SEG_LIVE && s != SEG_DEAD) return PL_EFORMAT;
    *state = s;
    *entry_len = le_get_u64(h + 8);
    *stamp = le_get_u64(h + SEG_STAMP_AT);
    key->h[0] = le_get_u64(h + 24);
    key->h[1] = le_get_u64(h + 32);
    return 0;
}

int64_t seg_scan(seg_read_fn rd, void *src, uint64_t size, seg_record **recs, size_t *n_recs)
{
    seg_record *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t off = 0;
    while (size - off >= SEG_REC_HEADER) {
        uint8_t h[SEG_REC_HEADER + STORE_ENTRY_HEADER];
        seg_record r = {.off = off};
        if (rd(src, h, SEG_REC_HEADER, off) != SEG_REC_HEADER ||
            seg_record_parse(h, &r.state, &r.key, &r.entry_len, &r.stamp) != 0)
            break;
        if (r.entry_len < STORE_ENTRY_HEADER || r.entry_len > size - off - SEG_REC_HEADER) break;
        store_entry_meta m;
        if (r.state == SEG_LIVE &&
            rd(src, h + SEG_REC_HEADER, STORE_ENTRY_HEADER, off + SEG_REC_HEADER) == STORE_ENTRY_HEADER &&
            store_entry_peek(h + SEG_REC_HEADER, STORE_ENTRY_HEADER, &m) == 0 && (m.parent.h[0] || m.parent.h[1])) {
            r.has_parent = true;
            r.parent = m.parent;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            seg_record *g = realloc(v, nc * sizeof *v);
            if (!g) {
                free(v);
                return -1;
            }
            v = g;
            cap = nc;
        }
        v[n++] = r;
        off += SEG_REC_HEADER + r.entry_len;
    }
    *recs = v;
    *n_recs = n;
    return (int64_t)off;
}
