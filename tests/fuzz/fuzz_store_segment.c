/* fuzz_store_segment.c - libFuzzer target for the disk tier's segment scan
 * (src/store/store_segment.h): arbitrary bytes as a segment file found at
 * open, after a crash, a torn append or a damaged disk.
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - seg_scan never reads outside the file (the reader below checks every
 *     request; ASan checks the scan's own buffers);
 *   - the records it returns tile the file from offset 0 with no gap, each
 *     inside it, and the end it returns is where the last one ends;
 *   - each record re-encodes from what it reports (key, length, stamp,
 *     state) to exactly the header bytes in the file;
 *   - a record appended at the end it returns (what the tier does after
 *     cutting a torn tail) is found by the next scan, after the same
 *     records: a torn tail never hides later appends.
 * With FUZZ_SEEDGEN it is instead a program that writes seed segments to
 * the directory given as argv[1].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_bytes.h"
#include "store/store_segment.h"

typedef struct {
    const uint8_t *p;
    size_t n;
} mem_src;

static ssize_t mem_read(void *src, void *buf, size_t n, uint64_t off)
{
    const mem_src *m = src;
    if (off > m->n || n > m->n - off) abort(); /* the scan asked past the end it was told */
    memcpy(buf, m->p + off, n);
    return (ssize_t)n;
}

/* A record of an entry with n_tok tokens and pay payload bytes, into out
 * (cap bytes); its length, or 0 when it does not fit. */
static size_t make_record(uint8_t *out, size_t cap, uint64_t key, uint64_t parent, uint32_t pay, uint64_t stamp)
{
    static const int32_t tok[2] = {7, 9};
    store_entry_meta m = {{1, 2}, {{parent, parent ? 1 : 0}}, {{key, 3}}, 2, pay};
    size_t len = store_entry_size(2, pay);
    if (SEG_REC_HEADER + len > cap) return 0;
    seg_record_header(out, &m.key, len, stamp);
    uint8_t *p = store_entry_begin(out + SEG_REC_HEADER, &m, tok);
    memset(p, 0x5a, pay);
    store_entry_seal(out + SEG_REC_HEADER, len);
    return SEG_REC_HEADER + len;
}

#ifdef FUZZ_SEEDGEN
int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    for (int k = 0; k < 3; k++) {
        uint8_t buf[2048];
        size_t n = 0;
        for (int r = 0; r <= k; r++) n += make_record(buf + n, sizeof buf - n, (uint64_t)r + 10, (uint64_t)r, 40u * (uint32_t)r + 1, (uint64_t)r + 1);
        if (k == 2) buf[4] = 'D', buf[5] = 'E', buf[6] = 'A', buf[7] = 'D'; /* a dead first record */
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%d", argv[1], k);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, n, f) != n) return 1;
        fclose(f);
    }
    return 0;
}
#else
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mem_src src = {data, size};
    seg_record *r = NULL;
    size_t n = 0;
    int64_t end = seg_scan(mem_read, &src, size, &r, &n);
    if (end < 0) return 0; /* out of memory */
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].off != at || r[i].entry_len > size || r[i].off + SEG_REC_HEADER + r[i].entry_len > size) abort();
        uint8_t h[SEG_REC_HEADER];
        seg_record_header(h, &r[i].key, r[i].entry_len, r[i].stamp);
        le_put_u32(h + SEG_STATE_AT, r[i].state);
        if (memcmp(h, data + r[i].off, SEG_REC_HEADER) != 0) abort();
        at = r[i].off + SEG_REC_HEADER + r[i].entry_len;
    }
    if ((uint64_t)end != at) abort();
    /* append after the cut: found, after the same records */
    uint8_t rec[512];
    size_t rl = make_record(rec, sizeof rec, 0xabcdef, 0, 100, 99);
    uint8_t *joined = malloc((size_t)end + rl);
    if (joined) {
        memcpy(joined, data, (size_t)end);
        memcpy(joined + end, rec, rl);
        mem_src s2 = {joined, (size_t)end + rl};
        seg_record *r2 = NULL;
        size_t n2 = 0;
        int64_t end2 = seg_scan(mem_read, &s2, s2.n, &r2, &n2);
        if (end2 >= 0) {
            if ((uint64_t)end2 != s2.n || n2 != n + 1 || r2[n].off != (uint64_t)end || r2[n].key.h[0] != 0xabcdef ||
                r2[n].state != SEG_LIVE || r2[n].stamp != 99)
                abort();
            for (size_t i = 0; i < n; i++)
                if (r2[i].off != r[i].off || r2[i].entry_len != r[i].entry_len) abort();
        }
        free(r2);
        free(joined);
    }
    free(r);
    return 0;
}
#endif
