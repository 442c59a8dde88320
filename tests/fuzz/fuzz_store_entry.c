/* fuzz_store_entry.c - libFuzzer target for the KV tier entry reader
 * (src/store/store_entry.h): arbitrary bytes as they might come back from a
 * disk file or a Redis value.
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - store_entry_peek, store_entry_frame_check and store_entry_verify
 *     never read out of bounds, whatever the bytes (ASan); peek agrees
 *     with the frame check on every entry the latter accepts;
 *   - an entry they accept re-encodes from what they report (meta, tokens,
 *     payload) to exactly the input bytes: nothing in a verified entry goes
 *     unchecked;
 *   - store_entry_verify accepts only the entry the reader asked for: its
 *     salt, key, parent key, tokens and payload length.
 * With FUZZ_SEEDGEN it is instead a program that writes seed entries to
 * the directory given as argv[1].
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_entry.h"

#define FT 4
static const store_entry_meta want = {{0x1111, 0x2222}, {{3, 4}}, {{5, 6}}, FT, 64};
static const int32_t want_tok[FT] = {1, 2, 3, 40000};

static void reencode_equal(const uint8_t *data, size_t size, const store_entry_meta *m, const uint8_t *tokbytes)
{
    int32_t tok[64];
    if (m->n_tokens > 64) return;
    for (uint32_t i = 0; i < m->n_tokens; i++)
        tok[i] = (int32_t)((uint32_t)tokbytes[4 * i] | (uint32_t)tokbytes[4 * i + 1] << 8 |
                           (uint32_t)tokbytes[4 * i + 2] << 16 | (uint32_t)tokbytes[4 * i + 3] << 24);
    uint8_t *e = malloc(size);
    if (!e) return;
    uint8_t *p = store_entry_begin(e, m, tok);
    memcpy(p, tokbytes + 4 * m->n_tokens, m->payload_len);
    store_entry_seal(e, size);
    if (memcmp(e, data, size) != 0) abort();
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    store_entry_meta m, peek;
    const int peeked = store_entry_peek(data, size, &peek);
    if (store_entry_frame_check(data, size, &m) == 0) {
        /* what an index reads from a header without the checksum agrees with the checked frame */
        if (peeked != 0 || memcmp(peek.salt, m.salt, sizeof m.salt) || memcmp(&peek.parent, &m.parent, sizeof m.parent) ||
            memcmp(&peek.key, &m.key, sizeof m.key) || peek.n_tokens != m.n_tokens || peek.payload_len != m.payload_len)
            abort();
        if (store_entry_size(m.n_tokens, m.payload_len) != size) abort();
        reencode_equal(data, size, &m, data + STORE_ENTRY_HEADER);
    }
    const uint8_t *pay = NULL;
    if (store_entry_verify(data, size, &want, want_tok, &pay) == 0) {
        if (pay != data + STORE_ENTRY_HEADER + 4 * FT || size != store_entry_size(FT, want.payload_len)) abort();
        if (store_entry_frame_check(data, size, &m) != 0 || m.key.h[0] != want.key.h[0] || m.salt[1] != want.salt[1])
            abort();
    }
    return 0;
}

#ifdef FUZZ_SEEDGEN
int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    for (int k = 0; k < 3; k++) {
        store_entry_meta m = want;
        m.payload_len = k == 0 ? 64 : k == 1 ? 1 : 300;
        size_t len = store_entry_size(FT, m.payload_len);
        uint8_t *e = calloc(1, len);
        uint8_t *p = store_entry_begin(e, &m, want_tok);
        for (uint64_t i = 0; i < m.payload_len; i++) p[i] = (uint8_t)(i * 13);
        store_entry_seal(e, len);
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%d", argv[1], k);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(e, 1, len, f) != len) return 1;
        fclose(f);
        free(e);
    }
    return 0;
}
#endif
