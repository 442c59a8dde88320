/* detok.c - ids back to text: token pieces, whole-sequence detokenization
 * and the streaming detokenizer.
 *
 * A piece is what llama.cpp's token_to_piece gives: control, unknown and
 * user-defined tokens render their stored text (control/unknown only when
 * asked for special text), normal tokens their text with ▁ as space (SPM) or
 * with GPT-2's byte alphabet undone (BPE), byte tokens <0xXX> their byte.
 * Pieces are computed once at load (tok_piece_build) and served from a cache.
 *
 * Whole detokenization adds llama.cpp's two whole-text rules (leading-space
 * removal for SPM, clean_spaces for most BPE vocabularies). The stream does
 * not (see tokenizer.h): it prints what llama.cpp prints for generated
 * tokens, holding back only incomplete UTF-8.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- pieces */

typedef struct {
    char *p;
    size_t n, cap;
    int rc;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->rc) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->rc = err_set(PL_ENOMEM, "tokenizer: out of memory building a piece");
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte of a "<0xXX>" token: the hex digits at [3, 5), as llama.cpp's
 * strtol(text.substr(3, 2), 16) reads them. */
static char byte_of(const char *t, size_t n)
{
    int v = 0;
    for (size_t i = 3; i < 5 && i < n && hexval(t[i]) >= 0; i++) v = v * 16 + hexval(t[i]);
    return (char)v;
}

/* SPM: every ▁ becomes a space. */
static void unescape_spaces(strbuf *b, const char *t, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(t + i, "\xE2\x96\x81", 3) == 0) {
            sb_add(b, " ", 1);
            i += 3;
        } else {
            sb_add(b, t + i, 1);
            i++;
        }
    }
}

/* BPE: each codepoint of the text back to the byte it stands for; one that
 * stands for none is spelled as llama.cpp's llama_decode_text does. */
static void decode_bytes(strbuf *b, const char *t, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t adv = 1;
        int32_t cp = tok_utf8_decode((const uint8_t *)t + i, n - i, &adv);
        uint32_t u = cp < 0 ? 0xFFFD : (uint32_t)cp;
        int byte = tok_cp_to_byte(u);
        i += adv;
        if (byte >= 0) {
            char c = (char)byte;
            sb_add(b, &c, 1);
            continue;
        }
        char enc[4], hex[16];
        size_t k = tok_utf8_encode(u, enc);
        sb_add(b, "[UNK_BYTE_0x", 12);
        for (size_t j = 0; j < k; j++) {
            snprintf(hex, sizeof hex, "%02x", (uint8_t)enc[j]);
            sb_add(b, hex, 2);
        }
        sb_add(b, t, n);
        sb_add(b, "]", 1);
    }
}

int tok_piece_build(const tok_vocab *v, int32_t id, char **out, size_t *len)
{
    strbuf b = {0};
    const char *t = tok_text(v, id);
    size_t n = v->len[id];
    uint16_t a = v->attr[id];
    sb_add(&b, "", 0);
    if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
        sb_add(&b, t, n);
    } else if (a & TOK_ATTR_NORMAL) {
        if (v->kind == TOK_SPM) unescape_spaces(&b, t, n);
        else decode_bytes(&b, t, n);
    } else if (a & TOK_ATTR_BYTE) {
        char c = byte_of(t, n);
        sb_add(&b, &c, 1);
    }
    if (b.rc) {
        free(b.p);
        return b.rc;
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

const char *tok_piece(const tok_vocab *v, int32_t id, bool special, size_t *len)
{
    if (!special && (v->attr[id] & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL))) {
        *len = 0;
        return "";
    }
    *len = v->piece_len[id];
    return v->piece + v->piece_off[id];
}

size_t tok_vocab_max_piece(const tok_vocab *v) { return v->max_piece; }

const char *tok_vocab_output_bytes(const tok_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_tokens) { *len = 0; return ""; }
    return tok_piece(v, id, false, len);
}

/* ------------------------------------------------------- clean_spaces */

/* llama.cpp's clean_up_tokenization_spaces, three in-place passes over
 * t[0..n); each returns the new length and, like llama.cpp, always keeps the
 * first byte and reads the neighbours from the partly rewritten buffer. */
static size_t clean_punct(char *t, size_t n)
{
    size_t w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            w--; /* " ?" -> "?" */
        t[w++] = x;
    }
    return w;
}

static size_t clean_lone_quote(char *t, size_t n)
{
    size_t w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = t[i];
        if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
            w--;         /* " ' " -> "'" */
            t[++i] = 0;  /* the space after it is skipped */
        }
        t[w++] = x;
    }
    return w;
}

static size_t clean_contractions(char *t, size_t n)
{
    size_t w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = t[i + 1], x2 = i + 2 < n ? t[i + 2] : 0;
            if (x1 == 's' || x1 == 'm') w--; /* " 's" " 'm"; " 't" " 'd" stay */
            else if (x1 != 't' && x1 != 'd' && i + 2 < n && x2 == 'e' && (x1 == 'r' || x1 == 'v')) w--;
        }
        t[w++] = x;
    }
    return w;
}

/* -------------------------------------------------- whole sequences */

static int check_ids(const tok_vocab *v, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= v->n_tokens)
            return err_set(PL_ERANGE, "token id %d (position %zu) is outside the vocabulary of %d tokens", ids[i], i,
                           v->n_tokens);
    return 0;
}

int tok_detokenize(const tok_vocab *v, const int32_t *ids, size_t n, char **text, size_t *len)
{
    int rc = check_ids(v, ids, n);
    if (rc) return rc;
    size_t total = 0, k;
    for (size_t i = 0; i < n; i++) {
        tok_piece(v, ids[i], false, &k);
        total += k;
    }
    char *t = malloc(total + 1);
    if (!t) return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu bytes of text", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = tok_piece(v, ids[i], false, &k);
        /* the space SentencePiece put before the first word (only the
         * very first id's; a BOS there uses the chance up) */
        if (i == 0 && v->add_space_prefix && k && p[0] == ' ') p++, k--;
        memcpy(t + o, p, k);
        o += k;
    }
    if (v->clean_spaces) {
        o = clean_punct(t, o);
        o = clean_lone_quote(t, o);
        o = clean_contractions(t, o);
    }
    t[o] = '\0';
    *text = t;
    *len = o;
    return 0;
}

/* ------------------------------------------------------------ stream */

struct pl_detok {
    const tok_vocab *v;
    char *held;  /* bytes not yet written: an incomplete UTF-8 tail */
    size_t n, cap;
};

tok_detok *tok_detok_new(const tok_vocab *v)
{
    tok_detok *d = calloc(1, sizeof *d);
    if (!d) {
        err_set(PL_ENOMEM, "tokenizer: out of memory for a detokenizer");
        return NULL;
    }
    d->v = v;
    return d;
}

void tok_detok_free(tok_detok *d)
{
    if (!d) return;
    free(d->held);
    free(d);
}

/* Start of the incomplete but still valid UTF-8 sequence ending s[0..n),
 * or n if there is none. */
static size_t complete_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int r = tok_utf8_check((const uint8_t *)s + i, n - i);
        if (r < 0) return i;
        i += r > 0 ? (size_t)r : 1;
    }
    return n;
}

/* Writes the first k bytes of held (made valid UTF-8) to out and drops
 * them, or returns PL_ERANGE with nothing changed. */
static int emit(tok_detok *d, size_t k, char *out, size_t cap)
{
    size_t need = k ? tok_utf8_sanitize(d->held, k, NULL) : 0;
    if (need + 1 > cap)
        return err_set(PL_ERANGE, "detokenizer: %zu bytes of text do not fit an output of %zu bytes", need, cap);
    if (k) tok_utf8_sanitize(d->held, k, out);
    out[need] = '\0';
    if (d->n > k) memmove(d->held, d->held + k, d->n - k);
    d->n -= k;
    return (int)need;
}

int tok_detok_push(tok_detok *d, int32_t id, char *out, size_t cap)
{
    if (!out || !cap) return err_set(PL_EINVAL, "detokenizer: no output buffer");
    if (id < 0 || id >= d->v->n_tokens)
        return err_set(PL_ERANGE, "token id %d is outside the vocabulary of %d tokens", id, d->v->n_tokens);
    size_t k;
    const char *p = tok_piece(d->v, id, false, &k);
    if (d->n + k > d->cap) {
        size_t nc = (d->n + k) * 2 + 16;
        char *nh = realloc(d->held, nc);
        if (!nh) return err_set(PL_ENOMEM, "detokenizer: out of memory");
        d->held = nh;
        d->cap = nc;
    }
    if (k) memcpy(d->held + d->n, p, k);
    size_t old = d->n;
    d->n += k;
    int rc = emit(d, complete_prefix(d->held, d->n), out, cap);
    if (rc < 0) d->n = old; /* as if the token never came */
    return rc;
}

int tok_detok_flush(tok_detok *d, char *out, size_t cap)
{
    if (!out || !cap) return err_set(PL_EINVAL, "detokenizer: no output buffer");
    return emit(d, d->n, out, cap);
}
