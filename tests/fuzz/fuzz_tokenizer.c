/* fuzz_tokenizer.c - libFuzzer target for the tokenizer: text -> ids ->
 * text, whole and streamed, over real vocabularies.
 *
 * Vocabularies: the GGUF files named in $FUZZ_TOK_VOCABS (':'-separated;
 * tests/fuzz/run.sh passes stories260K.gguf and vocab/ *.gguf: SentencePiece
 * with byte fallback and byte-level BPE), loaded once.
 *
 * Input: byte 0 chooses, the rest is the payload.
 *   byte 0   bits 0-1 vocabulary (mod their count), bit 2 add_bos, bit 3
 *            parse_special, bit 4 "ids" mode
 *   text     the payload is tokenized, then the ids are detokenized whole
 *            (tok_detokenize) and streamed (tok_detok_push ... flush)
 *   ids      the payload is read as little-endian u16 ids (mod the
 *            vocabulary size): detokenized whole and streamed
 *
 * Properties (a broken one aborts, which libFuzzer reports as a crash):
 *   - tokenizing any bytes succeeds; every id is inside the vocabulary;
 *   - detokenizing any ids succeeds; a push never needs more than the
 *     documented 4 * max_piece + 16 bytes; every streamed piece is valid
 *     UTF-8, and so is their concatenation;
 *   - the stream equals the whole text whenever tokenizer.h says it must:
 *     the whole text is valid UTF-8, the ids do not start with BOS (or any
 *     control token), and no whole-text rule applies (SentencePiece: the
 *     first piece's leading space, which the stream keeps; BPE clean-up:
 *     only when the text has none of " ?", " !", " .", " ,", " '");
 *   - round trip: valid UTF-8 text tokenized without BOS and without
 *     special parsing comes back byte for byte - SentencePiece with byte
 *     fallback through tok_detokenize (unless the text holds U+2581 "▁"
 *     itself, which SentencePiece cannot tell from an escaped space),
 *     byte-level BPE through the stream (no clean-up there).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tokenizer/tok_impl.h"
#include "tokenizer/tokenizer.h"

#define FUZZ_MAX_VOCABS 4

typedef struct {
    tok_vocab *v;
    const char *path;
    bool byte_fallback; /* all 256 <0xXX> tokens are there */
    char *out;          /* [cap] one push's output */
    size_t cap;
} fuzz_vocab;

static fuzz_vocab vocabs[FUZZ_MAX_VOCABS];
static int n_vocabs;

static void fail(const fuzz_vocab *fv, const char *what)
{
    fprintf(stderr, "fuzz_tokenizer: broken property with %s: %s (%s)\n", fv ? fv->path : "-", what, err_msg());
    abort();
}

static bool has_byte_tokens(const tok_vocab *v)
{
    int n = 0;
    for (int32_t id = 0; id < tok_vocab_size(v); id++) {
        const char *t = tok_vocab_text(v, id);
        n += strlen(t) == 6 && t[0] == '<' && t[1] == '0' && t[2] == 'x' && t[5] == '>';
    }
    return n >= 256;
}

static void load_vocabs(void)
{
    const char *env = getenv("FUZZ_TOK_VOCABS");
    if (!env || !*env) {
        fprintf(stderr, "fuzz_tokenizer: set FUZZ_TOK_VOCABS to ':'-separated GGUF files\n");
        abort();
    }
    char *list = strdup(env), *save = NULL;
    for (char *p = strtok_r(list, ":", &save); p && n_vocabs < FUZZ_MAX_VOCABS; p = strtok_r(NULL, ":", &save)) {
        fuzz_vocab *fv = &vocabs[n_vocabs];
        if (tok_vocab_load_path(&fv->v, p) != 0) {
            fprintf(stderr, "fuzz_tokenizer: %s: %s (skipped)\n", p, err_msg());
            continue;
        }
        fv->path = strdup(p);
        fv->byte_fallback = tok_vocab_kind(fv->v) == TOK_SPM && has_byte_tokens(fv->v);
        fv->cap = 4 * tok_vocab_max_piece(fv->v) + 16;
        fv->out = malloc(fv->cap);
        n_vocabs++;
    }
    free(list);
    if (n_vocabs == 0) {
        fprintf(stderr, "fuzz_tokenizer: no vocabulary could be loaded from FUZZ_TOK_VOCABS\n");
        abort();
    }
}

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = tok_utf8_check((const uint8_t *)s + i, n - i);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

static bool is_control(const tok_vocab *v, int32_t id)
{
    /* control tokens render as nothing whole; BOS is the one that matters */
    return id == tok_vocab_bos(v);
}

static bool has_cleanup_pattern(const char *s, size_t n)
{
    static const char *pat[] = {" ?", " !", " .", " ,", " '"};
    for (size_t i = 0; i < sizeof pat / sizeof pat[0]; i++)
        if (memmem(s, n, pat[i], 2)) return true;
    return false;
}

/* Streams ids through a tok_detok; *out (malloc'd) gets the concatenation. */
static void stream(fuzz_vocab *fv, const int32_t *ids, size_t n, char **out, size_t *len)
{
    tok_detok *d = tok_detok_new(fv->v);
    if (!d) fail(fv, "tok_detok_new");
    size_t cap = 64, m = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        int k = i < n ? tok_detok_push(d, ids[i], fv->out, fv->cap) : tok_detok_flush(d, fv->out, fv->cap);
        if (k < 0) fail(fv, i < n ? "a push failed with the documented room" : "the flush failed");
        if ((size_t)k >= fv->cap || fv->out[k] != 0) fail(fv, "a piece is not NUL-terminated at its length");
        if (!valid_utf8(fv->out, (size_t)k)) fail(fv, "a streamed piece is not valid UTF-8");
        if (m + (size_t)k + 1 > cap) {
            while (m + (size_t)k + 1 > cap) cap *= 2;
            s = realloc(s, cap);
        }
        memcpy(s + m, fv->out, (size_t)k);
        m += (size_t)k;
    }
    s[m] = 0;
    tok_detok_free(d);
    *out = s;
    *len = m;
}

/* Whole vs stream, for any ids. */
static void check_ids(fuzz_vocab *fv, const int32_t *ids, size_t n, char **whole, size_t *wn, char **st, size_t *sn)
{
    if (tok_detokenize(fv->v, ids, n, whole, wn) != 0) fail(fv, "tok_detokenize refused ids in range");
    if ((*whole)[*wn] != 0) fail(fv, "whole text is not NUL-terminated");
    stream(fv, ids, n, st, sn);
    if (!valid_utf8(*st, *sn)) fail(fv, "the stream is not valid UTF-8");
    if (n == 0 || is_control(fv->v, ids[0]) || !valid_utf8(*whole, *wn)) return;
    const char *s = *st;
    size_t k = *sn;
    if (tok_vocab_kind(fv->v) == TOK_SPM) {
        if (k && s[0] == ' ' && !(*wn && (*whole)[0] == ' ' && k == *wn)) s++, k--; /* the first piece's space */
    } else if (has_cleanup_pattern(s, k)) {
        return;
    }
    if (k != *wn || memcmp(s, *whole, k) != 0) fail(fv, "the stream differs from the whole text");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!n_vocabs) load_vocabs();
    if (size == 0) return 0;
    fuzz_vocab *fv = &vocabs[(data[0] & 3) % n_vocabs];
    const bool add_bos = data[0] & 4, special = data[0] & 8, ids_mode = data[0] & 16;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    if (ids_mode) {
        n = len / 2;
        ids = malloc(sizeof *ids * (n ? n : 1));
        for (size_t i = 0; i < n; i++)
            ids[i] = (int32_t)((data[1 + 2 * i] | (uint32_t)data[2 + 2 * i] << 8) % (uint32_t)tok_vocab_size(fv->v));
    } else {
        if (tok_tokenize(fv->v, text, len, add_bos, special, &ids, &n) != 0) fail(fv, "tokenizing bytes failed");
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tok_vocab_size(fv->v)) fail(fv, "an id outside the vocabulary");
    }
    char *whole = NULL, *st = NULL;
    size_t wn = 0, sn = 0;
    check_ids(fv, ids, n, &whole, &wn, &st, &sn);
    if (!ids_mode && !add_bos && !special && valid_utf8(text, len)) {
        if (fv->byte_fallback && !memmem(text, len, "\xe2\x96\x81", 3) && (wn != len || memcmp(whole, text, len) != 0))
            fail(fv, "valid UTF-8 did not round-trip through SentencePiece with byte fallback");
        if (tok_vocab_kind(fv->v) == TOK_BPE && (sn != len || memcmp(st, text, len) != 0))
            fail(fv, "valid UTF-8 did not round-trip through the byte-level BPE stream");
    }
    free(whole);
    free(st);
    free(ids);
    return 0;
}
