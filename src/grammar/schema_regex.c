/* schema_regex.c - a JSON schema's "pattern" (a regular-expression subset)
 * and "format" as GBNF over the string's JSON-encoded content.
 *
 * Supported: literals, escapes of metacharacters, \d \w \s \D \W \S, .,
 * [classes] with ranges and ^, (groups) and (?:groups), |, *, +, ?,
 * {m}, {m,}, {m,n} (a lazy ? after them changes nothing here), ^ at the
 * start and $ at the end. An unanchored side may hold any further
 * characters, as the schema's (search) semantics say.
 * Refused with the path: backreferences, lookaround, \b, \p{..}, anchors
 * elsewhere, ^/$ with a top-level |.
 * Characters JSON must escape (", \, controls) are matched in their
 * escaped form when written as literals; inside classes they are left
 * out, and negated classes and . never match them (docs/grammar.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

typedef struct {
    const char *s;
    size_t n, pos;
    const char *path;
    int depth;
    char why[160];
} rx;

static int rx_fail(rx *r, const char *what)
{
    if (!r->why[0]) snprintf(r->why, sizeof r->why, "pattern at offset %zu: %s", r->pos, what);
    return -1;
}

static int rx_peek(const rx *r) { return r->pos < r->n ? (unsigned char)r->s[r->pos] : -1; }

/* Decodes one UTF-8 code point of the pattern. */
static int rx_cp(rx *r, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)r->s + r->pos;
    size_t left = r->n - r->pos;
    unsigned c = s[0];
    int k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!k || (size_t)k > left) return rx_fail(r, "invalid UTF-8");
    uint32_t v = k == 1 ? c : c & (0x7Fu >> k);
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return rx_fail(r, "invalid UTF-8");
        v = v << 6 | (s[i] & 0x3F);
    }
    r->pos += (size_t)k;
    *cp = v;
    return 0;
}

/* A literal code point as its JSON-encoded form. */
static void lit_json(gw_buf *b, uint32_t cp)
{
    static const char *const esc[] = {['\b'] = "\\\\b", ['\f'] = "\\\\f", ['\n'] = "\\\\n", ['\r'] = "\\\\r", ['\t'] = "\\\\t"};
    if (cp == '"') { gb_str(b, "\"\\\\\\\"\""); return; }       /* GBNF "\\\"" = JSON \" */
    if (cp == '\\') { gb_str(b, "\"\\\\\\\\\""); return; }      /* GBNF "\\\\" = JSON \\ */
    if (cp < 0x20) {
        if (cp < sizeof esc / sizeof *esc && esc[cp]) gb_fmt(b, "\"%s\"", esc[cp]);
        else gb_fmt(b, "\"\\\\u00%02X\"", cp);
        return;
    }
    gb_str(b, "\"");
    gb_lit_cp(b, cp);
    gb_str(b, "\"");
}

static void class_range(gw_buf *b, uint32_t lo, uint32_t hi)
{
    /* split around the JSON specials below 0x80 */
    static const uint32_t cuts[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
    uint32_t cur = lo;
    while (cur <= hi) {
        bool skipped = false;
        for (size_t i = 0; i < 4; i++)
            if (cur >= cuts[i][0] && cur <= cuts[i][1]) { cur = cuts[i][1] + 1; skipped = true; }
        if (skipped) continue;
        uint32_t end = hi;
        for (size_t i = 0; i < 4; i++)
            if (cuts[i][0] > cur && cuts[i][0] - 1 < end) end = cuts[i][0] - 1;
        gb_class_cp(b, cur);
        if (end > cur) { gb_str(b, "-"); gb_class_cp(b, end); }
        if (end == UINT32_MAX) break;
        cur = end + 1;
    }
}

/* \d \w \s and their negations as ranges written into a class body. */
static bool shorthand(gw_buf *b, int c, bool *neg)
{
    *neg = c == 'D' || c == 'W' || c == 'S';
    switch (c) {
    case 'd': case 'D': gb_str(b, "0-9"); return true;
    case 'w': case 'W': gb_str(b, "a-zA-Z0-9_"); return true;
    case 's': case 'S': gb_str(b, " "); return true;
    default: return false;
    }
}

static int escape_char(rx *r, int c, uint32_t *cp)
{
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            return rx_fail(r, "this escape (backreference, \\b, \\p...) is not supported");
        *cp = (uint32_t)c;
        return 0;
    }
}

#define NOT_JSON "\"\\\\\\x00-\\x1F\\x7F"

static int rx_class(rx *r, gw_buf *b)
{
    r->pos++; /* [ */
    bool neg = rx_peek(r) == '^';
    if (neg) r->pos++;
    gw_buf body = {0}, negs = {0};
    bool first = true;
    while (rx_peek(r) != ']' || first) {
        first = false;
        if (rx_peek(r) < 0) { gb_free(&body); gb_free(&negs); return rx_fail(r, "unterminated [class]"); }
        uint32_t lo, hi;
        if (rx_peek(r) == '\\') {
            r->pos++;
            int c = rx_peek(r);
            if (c < 0) break;
            r->pos++;
            bool sn;
            gw_buf tmp = {0};
            if (shorthand(&tmp, c, &sn)) {
                if (sn && !neg) { gb_free(&tmp); gb_free(&body); gb_free(&negs); return rx_fail(r, "\\D, \\W or \\S inside a class is not supported"); }
                if (sn) { gb_free(&tmp); gb_free(&body); gb_free(&negs); return rx_fail(r, "\\D, \\W or \\S inside a negated class is not supported"); }
                gb_add(&body, tmp.p, tmp.n);
                gb_free(&tmp);
                continue;
            }
            if (escape_char(r, c, &lo)) { gb_free(&body); gb_free(&negs); return -1; }
        } else if (rx_cp(r, &lo)) { gb_free(&body); gb_free(&negs); return -1; }
        hi = lo;
        if (rx_peek(r) == '-' && r->pos + 1 < r->n && r->s[r->pos + 1] != ']') {
            r->pos++;
            if (rx_peek(r) == '\\') {
                r->pos++;
                int c = rx_peek(r);
                if (c < 0) break;
                r->pos++;
                if (escape_char(r, c, &hi)) { gb_free(&body); gb_free(&negs); return -1; }
            } else if (rx_cp(r, &hi)) { gb_free(&body); gb_free(&negs); return -1; }
            if (hi < lo) { gb_free(&body); gb_free(&negs); return rx_fail(r, "a range with its bounds reversed"); }
        }
        if (neg) { gb_class_cp(&negs, lo); if (hi > lo) { gb_str(&negs, "-"); gb_class_cp(&negs, hi); } }
        else class_range(&body, lo, hi);
    }
    if (rx_peek(r) != ']') { gb_free(&body); gb_free(&negs); return rx_fail(r, "unterminated [class]"); }
    r->pos++;
    if (neg) gb_fmt(b, "[^%s" NOT_JSON "]", negs.p ? negs.p : "");
    else if (!body.n) { gb_free(&body); gb_free(&negs); return rx_fail(r, "a class with no character JSON strings can hold unescaped"); }
    else gb_fmt(b, "[%s]", body.p);
    gb_free(&body);
    gb_free(&negs);
    return b->oom ? rx_fail(r, "out of memory") : 0;
}

static int rx_alt(rx *r, gw_buf *b);

static int rx_atom(rx *r, gw_buf *b)
{
    int c = rx_peek(r);
    if (c == '(') {
        if (++r->depth > 64) return rx_fail(r, "groups nested too deeply");
        r->pos++;
        if (rx_peek(r) == '?') {
            if (r->pos + 1 < r->n && r->s[r->pos + 1] == ':') r->pos += 2;
            else return rx_fail(r, "lookaround and named groups are not supported");
        }
        gb_str(b, "(");
        if (rx_alt(r, b)) return -1;
        if (rx_peek(r) != ')') return rx_fail(r, "expected ')'");
        r->pos++;
        r->depth--;
        gb_str(b, ")");
        return 0;
    }
    if (c == '[') return rx_class(r, b);
    if (c == '.') { r->pos++; gb_str(b, "[^" NOT_JSON "]"); return 0; }
    if (c == '^' || c == '$') return rx_fail(r, "^ and $ are supported only at the pattern's ends");
    if (c == '*' || c == '+' || c == '?' || c == '{') return rx_fail(r, "a quantifier with nothing to repeat");
    uint32_t cp;
    if (c == '\\') {
        r->pos++;
        int e = rx_peek(r);
        if (e < 0) return rx_fail(r, "a trailing backslash");
        r->pos++;
        bool neg;
        gw_buf tmp = {0};
        if (shorthand(&tmp, e, &neg)) {
            gb_fmt(b, neg ? "[^%s" NOT_JSON "]" : "[%s]", tmp.p);
            gb_free(&tmp);
            return 0;
        }
        if (escape_char(r, e, &cp)) return -1;
    } else if (rx_cp(r, &cp)) return -1;
    lit_json(b, cp);
    return 0;
}

static int rx_count(rx *r, unsigned *v)
{
    if (rx_peek(r) < '0' || rx_peek(r) > '9') return rx_fail(r, "expected a number in {m,n}");
    unsigned long x = 0;
    while (rx_peek(r) >= '0' && rx_peek(r) <= '9') {
        x = x * 10 + (unsigned long)(rx_peek(r) - '0');
        if (x > 1000) return rx_fail(r, "a repetition count above 1000");
        r->pos++;
    }
    *v = (unsigned)x;
    return 0;
}

static int rx_quant(rx *r, gw_buf *b)
{
    int c = rx_peek(r);
    if (c == '*' || c == '+' || c == '?') { r->pos++; gb_fmt(b, "%c", c); }
    else if (c == '{') {
        r->pos++;
        unsigned mn, mx;
        if (rx_count(r, &mn)) return -1;
        if (rx_peek(r) == ',') {
            r->pos++;
            if (rx_peek(r) == '}') gb_fmt(b, "{%u,}", mn);
            else {
                if (rx_count(r, &mx)) return -1;
                if (mx < mn) return rx_fail(r, "{m,n} with n < m");
                gb_fmt(b, "{%u,%u}", mn, mx);
            }
        } else gb_fmt(b, "{%u}", mn);
        if (rx_peek(r) != '}') return rx_fail(r, "expected '}'");
        r->pos++;
    } else return 0;
    if (rx_peek(r) == '?') r->pos++; /* lazy: the same strings */
    if (rx_peek(r) == '*' || rx_peek(r) == '+' || rx_peek(r) == '{' || rx_peek(r) == '?')
        return rx_fail(r, "a quantifier after a quantifier");
    return 0;
}

static int rx_seq(rx *r, gw_buf *b)
{
    bool any = false;
    while (r->pos < r->n && rx_peek(r) != '|' && rx_peek(r) != ')') {
        gw_buf atom = {0};
        if (rx_atom(r, &atom) || rx_quant(r, &atom)) { gb_free(&atom); return -1; }
        gb_str(b, " ");
        if (atom.p) gb_add(b, atom.p, atom.n);
        gb_free(&atom);
        any = true;
    }
    if (!any) gb_str(b, " \"\"");
    return 0;
}

static int rx_alt(rx *r, gw_buf *b)
{
    if (rx_seq(r, b)) return -1;
    while (rx_peek(r) == '|') {
        r->pos++;
        gb_str(b, " |");
        if (rx_seq(r, b)) return -1;
    }
    return 0;
}

int sc_regex(sc_ctx *c, const char *pattern, const char *path, gw_buf *body)
{
    size_t n = strlen(pattern);
    bool start = n && pattern[0] == '^';
    bool end = n > (size_t)start && pattern[n - 1] == '$' && (n < 2 || pattern[n - 2] != '\\');
    rx r = {.s = pattern, .n = n - end, .pos = start, .path = path};
    if (n > 4096) return err_set(PL_EINVAL, "json_schema: %s: a pattern longer than 4096 bytes is not supported", path);
    gw_buf e = {0};
    int rc = rx_alt(&r, &e);
    if (!rc && r.pos < r.n) rc = rx_fail(&r, "unbalanced ')'");
    if (!rc && (start || end)) {
        int depth = 0;
        for (size_t i = start; i < r.n; i++) {
            char ch = r.s[i];
            if (ch == '\\') { i++; continue; }
            if (ch == '[') { while (i < r.n && r.s[i] != ']') i += r.s[i] == '\\' ? 2 : 1; continue; }
            depth += ch == '(' ? 1 : ch == ')' ? -1 : 0;
            if (ch == '|' && depth == 0) { rc = rx_fail(&r, "^ or $ with a top-level | (group the alternatives)"); break; }
        }
    }
    if (rc) {
        gb_free(&e);
        return err_set(PL_EINVAL, "json_schema: %s: %s", path, r.why);
    }
    sc_need(c, "space");
    gb_fmt(body, "%s(%s )%s", start ? "" : "char* ", e.p ? e.p : "", end ? "" : " char*");
    gb_free(&e);
    return 0;
}

int sc_format(sc_ctx *c, const char *format, const char *path, gw_buf *body)
{
    (void)c;
    static const char *const date = "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1])";
    static const char *const time =
        "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+\\-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
    if (strcmp(format, "date") == 0) gb_str(body, date);
    else if (strcmp(format, "time") == 0) gb_str(body, time);
    else if (strcmp(format, "date-time") == 0) gb_fmt(body, "%s \"T\" %s", date, time);
    else if (strcmp(format, "uuid") == 0)
        gb_str(body, "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}");
    else return err_set(PL_EINVAL, "json_schema: %s: format '%.40s' is not supported (date, time, date-time, uuid are)", path, format);
    return 0;
}
