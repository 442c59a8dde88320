/* utf8.c - the UTF-8 the tokenizer needs, in two flavours on purpose:
 *
 * - lenient, llama.cpp's reading (tok_utf8_canon): a lead byte says how many
 *   bytes follow, continuation bytes are only checked for their top bits, so
 *   overlong forms and surrogates decode; what fails becomes U+FFFD one byte
 *   at a time. BPE must see exactly these codepoints to match llama.cpp.
 * - strict, RFC 3629 (tok_utf8_check / tok_utf8_sanitize): what we promise
 *   to print. Ill-formed input is replaced per maximal subpart (the Unicode
 *   recommendation), so output is always valid UTF-8.
 *
 * Also GPT-2's byte-level alphabet: bytes that are printable Latin-1 stand
 * for themselves, the other 68 map in order to U+0100..U+0143.
 */
#include "tokenizer/tok_impl.h"

#include "base/err.h"

#include <stdlib.h>
#include <string.h>

size_t tok_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* llama.cpp's unicode_cpt_from_utf8: the codepoint at s[0..n) and its byte
 * count in *adv, or -1 when it would throw. Codepoints above U+10FFFF (which
 * make llama.cpp throw later) are refused here too. */
int32_t tok_utf8_decode(const uint8_t *s, size_t n, size_t *adv)
{
    uint8_t b = s[0];
    size_t k;
    uint32_t cp;
    if (b < 0x80) { *adv = 1; return b; }
    if (!(b & 0x40)) return -1;
    if (!(b & 0x20)) k = 2, cp = b & 0x1F;
    else if (!(b & 0x10)) k = 3, cp = b & 0x0F;
    else if (!(b & 0x08)) k = 4, cp = b & 0x07;
    else return -1;
    if (n < k) return -1;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp > 0x10FFFF) return -1;
    *adv = k;
    return (int32_t)cp;
}

static bool wide_space(uint32_t u)
{
    return u == 0x1680 || (u >= 0x2000 && u <= 0x200A) || u == 0x2028 || u == 0x2029 || u == 0x202F ||
           u == 0x205F || u == 0x3000;
}

/* The codepoint the pre-tokenizer regexes see for u. llama.cpp hands its
 * regex engine U+000B in place of every non-ASCII space, so a regex class
 * that lists such a space literally never matches it; we mimic that with
 * placeholders of the same UTF-8 length that only the whitespace class
 * matches (pretok.c): U+0080 for U+0085/U+00A0, U+E001 for the 3-byte
 * spaces. A real U+0080 or U+E000/E001 and the surrogates (which PCRE2
 * refuses) move to U+0081 and U+E002, which like them are no letter,
 * number, mark, punctuation, symbol or space. */
static uint32_t regex_view(uint32_t u)
{
    if (u == 0x85 || u == 0xA0) return 0x80;
    if (u == 0x80) return 0x81;
    if (wide_space(u)) return 0xE001;
    if ((u >= 0xD800 && u <= 0xDFFF) || u == 0xE000 || u == 0xE001) return 0xE002;
    return u;
}

int tok_utf8_canon(const char *text, size_t len, char **canon, char **regex, size_t *n)
{
    size_t cap = len * 3 + 1;
    char *c = malloc(cap), *r = regex ? malloc(cap) : NULL;
    if (!c || (regex && !r)) {
        free(c);
        free(r);
        return err_set(PL_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
    }
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0, o = 0;
    while (i < len) {
        size_t adv = 1;
        int32_t cp = tok_utf8_decode(s + i, len - i, &adv);
        uint32_t u = cp < 0 ? 0xFFFD : (uint32_t)cp;
        size_t k = tok_utf8_encode(u, c + o);
        if (r) tok_utf8_encode(regex_view(u), r + o);
        o += k;
        i += adv;
    }
    c[o] = '\0';
    if (r) r[o] = '\0';
    *canon = c;
    if (regex) *regex = r;
    *n = o;
    return 0;
}

/* Total length of the sequence led by b (0: not a lead byte) and the range
 * allowed for its second byte (Unicode Table 3-7). */
static size_t strict_need(uint8_t b, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0;
    if (b < 0xE0) return 2;
    if (b == 0xE0) *lo = 0xA0;
    if (b == 0xED) *hi = 0x9F;
    if (b < 0xF0) return 3;
    if (b == 0xF0) *lo = 0x90;
    if (b == 0xF4) *hi = 0x8F;
    if (b < 0xF5) return 4;
    return 0;
}

/* Bytes at s[0..n) that are valid so far for the sequence led by s[0]. */
static size_t strict_have(const uint8_t *s, size_t n, size_t need, uint8_t lo, uint8_t hi)
{
    size_t have = 1;
    while (have < need && have < n) {
        uint8_t b = s[have];
        uint8_t l = have == 1 ? lo : 0x80, h = have == 1 ? hi : 0xBF;
        if (b < l || b > h) break;
        have++;
    }
    return have;
}

int tok_utf8_check(const uint8_t *s, size_t n)
{
    uint8_t lo, hi;
    size_t need = strict_need(s[0], &lo, &hi);
    if (need == 0) return 0;
    size_t have = strict_have(s, n, need, lo, hi);
    if (have == need) return (int)need;
    if (have == n) return -(int)have;
    return 0;
}

size_t tok_utf8_sanitize(const char *src, size_t n, char *dst)
{
    const uint8_t *s = (const uint8_t *)src;
    size_t i = 0, o = 0;
    while (i < n) {
        uint8_t lo, hi;
        size_t need = strict_need(s[i], &lo, &hi);
        size_t have = need ? strict_have(s + i, n - i, need, lo, hi) : 1;
        if (need && have == need) {
            if (dst) memcpy(dst + o, src + i, need);
            o += need;
        } else {
            if (dst) memcpy(dst + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
        i += have;
    }
    return o;
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    if (b <= 0x20) return 256u + b;           /* 0x00..0x20 -> U+0100..U+0120 */
    if (b >= 0x7F && b <= 0xA0) return b + 162u; /* 0x7F..0xA0 -> U+0121..U+0142 */
    if (b == 0xAD) return 0x143;
    return b;
}

int tok_cp_to_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp >= 0x100 && cp <= 0x120) return (int)(cp - 256);
    if (cp >= 0x121 && cp <= 0x142) return (int)(cp - 162);
    if (cp == 0x143) return 0xAD;
    return -1;
}
