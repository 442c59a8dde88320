/* server_tokens.c - token bytes and display strings; see server_tokens.h.
 *
 * Two passes over the vocabulary: the first measures, the second fills two
 * flat arrays (bytes and strings) addressed by offset tables, so the whole
 * table is four allocations whatever the vocabulary size.
 */
#include "server_tokens.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { TOKS_SPM, TOKS_BPE, TOKS_OTHER } toks_kind;

int srv_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) k = 1, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) k = 2, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) k = 3, cp = c & 0x07;
        else return 0;
        if (n - i <= k) return 0; /* truncated */
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
        if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
        i += k + 1;
    }
    return 1;
}

size_t srv_utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

/* GPT-2's byte alphabet: bytes that are printable Latin-1 stand for
 * themselves; the other 68 bytes are numbered from U+0100 in byte order.
 * Returns the byte of code point cp, or -1 if cp is not in the alphabet. */
static int gpt2_byte_of(unsigned cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 0x100 || cp >= 0x100 + 68) return -1;
    unsigned k = cp - 0x100, seen = 0;
    for (unsigned b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (printable) continue;
        if (seen++ == k) return (int)b;
    }
    return -1;
}

/* Decodes one UTF-8 code point at s (valid UTF-8 assumed by the caller's
 * check); returns its length. */
static size_t utf8_next(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    size_t k = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    if (k >= n) k = n - 1;
    unsigned v = k == 0 ? c : k == 1 ? (c & 0x1F) : k == 2 ? (c & 0x0F) : (c & 0x07);
    for (size_t j = 1; j <= k; j++) v = (v << 6) | (s[j] & 0x3F);
    *cp = v;
    return k + 1;
}

/* The bytes of a BPE piece; out must hold strlen(piece) bytes. Pieces with
 * a character outside the alphabet (added tokens) are taken literally. */
static size_t bpe_bytes(const char *piece, char *out)
{
    size_t n = strlen(piece), o = 0;
    const unsigned char *s = (const unsigned char *)piece;
    if (!srv_utf8_valid(piece, n)) goto literal;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        i += utf8_next(s + i, n - i, &cp);
        int b = gpt2_byte_of(cp);
        if (b < 0) goto literal;
        out[o++] = (char)b;
    }
    return o;
literal:
    memcpy(out, piece, n);
    return n;
}

/* The bytes of a SentencePiece piece: <0xNN> is byte NN, ▁ is a space. */
static size_t spm_bytes(const char *piece, char *out, int byte_tokens)
{
    size_t n = strlen(piece), o = 0;
    unsigned v;
    if (byte_tokens && n == 6 && piece[0] == '<' && piece[1] == '0' && piece[2] == 'x' && piece[5] == '>' &&
        sscanf(piece + 3, "%2x", &v) == 1) {
        out[0] = (char)v;
        return 1;
    }
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(piece + i, "\xE2\x96\x81", 3) == 0) { out[o++] = ' '; i += 3; }
        else out[o++] = piece[i++];
    }
    return o;
}

static size_t token_bytes(toks_kind k, const char *piece, char *out)
{
    if (k == TOKS_BPE) return bpe_bytes(piece, out);
    return spm_bytes(piece, out, k == TOKS_SPM);
}

/* Display string of bytes b[0..n) into out (NULL: measure); length without NUL. */
static size_t display(const char *b, size_t n, char *out)
{
    if (srv_utf8_valid(b, n) && !memchr(b, 0, n)) {
        if (out) { memcpy(out, b, n); out[n] = 0; }
        return n;
    }
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (out) memcpy(out, "bytes:", 6);
    o = 6;
    for (size_t i = 0; i < n; i++, o += 4)
        if (out) {
            unsigned char c = (unsigned char)b[i];
            out[o] = '\\', out[o + 1] = 'x', out[o + 2] = hex[c >> 4], out[o + 3] = hex[c & 15];
        }
    if (out) out[o] = 0;
    return o;
}

int srv_tokens_init(srv_tokens *t, const pl_vocab *v, const char *model)
{
    memset(t, 0, sizeof *t);
    toks_kind k = model && strcmp(model, "llama") == 0 ? TOKS_SPM
                  : model && strcmp(model, "gpt2") == 0 ? TOKS_BPE : TOKS_OTHER;
    int32_t n = pl_vocab_size(v);
    size_t nb = 0, ns = 0, maxp = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t pl = strlen(pl_token_piece(v, i));
        nb += pl;
        ns += 6 + 4 * pl + 1;  /* the worst case of display() */
        if (pl > maxp) maxp = pl;
    }
    t->boff = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    t->soff = malloc(sizeof(uint32_t) * ((size_t)n + 1));
    t->bytes = malloc(nb + 1);
    t->strs = malloc(ns + 1);
    char *tmp = malloc(maxp + 1);
    if (!t->boff || !t->soff || !t->bytes || !t->strs || !tmp || ns > UINT32_MAX) {
        free(tmp);
        srv_tokens_free(t);
        return PL_ERR_NOMEM;
    }
    size_t ob = 0, os = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t bl = token_bytes(k, pl_token_piece(v, i), tmp);
        memcpy(t->bytes + ob, tmp, bl);
        t->boff[i] = (uint32_t)ob;
        t->soff[i] = (uint32_t)os;
        ob += bl;
        os += display(tmp, bl, t->strs + os) + 1;
    }
    t->boff[n] = (uint32_t)ob;
    t->soff[n] = (uint32_t)os;
    t->n = n;
    free(tmp);
    return 0;
}

void srv_tokens_free(srv_tokens *t)
{
    free(t->boff);
    free(t->soff);
    free(t->bytes);
    free(t->strs);
    memset(t, 0, sizeof *t);
}

const char *srv_token_str(const srv_tokens *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n) return "";
    return t->strs + t->soff[id];
}

const uint8_t *srv_token_bytes(const srv_tokens *t, int32_t id, size_t *n)
{
    if (!t || id < 0 || id >= t->n) { *n = 0; return (const uint8_t *)""; }
    *n = t->boff[id + 1] - t->boff[id];
    return (const uint8_t *)t->bytes + t->boff[id];
}
