/* jinja_lex.c - template text -> tokens, with jinja2's whitespace rules as
 * transformers configures them:
 *   - trim_blocks: the first newline after a block or comment tag is dropped;
 *   - lstrip_blocks: spaces and tabs from the start of a line up to a block
 *     or comment tag are dropped ({%+ keeps them);
 *   - "-" inside a tag ({%- -%} {{- -}} {#- -#}) strips all whitespace on
 *     that side;
 *   - newlines become "\n" and one trailing newline of the source is dropped
 *     (keep_trailing_newline off).
 * Inside tags, "}}" and "%}" close the tag only outside brackets, as in
 * jinja2, so that dict literals may nest.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "template/jinja_impl.h"

typedef struct {
    jctx *c;
    jtok *v;
    size_t n, cap;
    int line;
} lexer;

static jtok *push(lexer *L, jtok_kind k, const char *s, size_t n)
{
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *nv = jarena_alloc(L->c, cap * sizeof *nv);
        if (L->n) memcpy(nv, L->v, L->n * sizeof *nv);
        L->v = nv;
        L->cap = cap;
    }
    jtok *t = &L->v[L->n++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->s = s;
    t->n = n;
    t->line = L->line;
    return t;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

static int count_nl(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Python's unicode-escape decoding of a string literal's body. */
static void put_utf8(jctx *c, jbuf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) { u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 63)); u[2] = (char)(0x80 | (cp & 63)); n = 3; }
    else { u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 63)); u[2] = (char)(0x80 | ((cp >> 6) & 63)); u[3] = (char)(0x80 | (cp & 63)); n = 4; }
    jbuf_add(c, b, u, n);
}

static void unescape(lexer *L, const char *s, size_t n, jtok *t)
{
    jctx *c = L->c;
    jbuf b = {0};
    jbuf_add(c, &b, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) { jbuf_addc(c, &b, s[i]); continue; }
        char e = s[++i];
        int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (hex) {
            uint32_t cp = 0;
            if (i + (size_t)hex >= n) jfail(c, L->line, "truncated \\%c escape in a string", e);
            for (int k = 1; k <= hex; k++) {
                char h = s[i + (size_t)k];
                if (!isxdigit((unsigned char)h)) jfail(c, L->line, "bad \\%c escape in a string", e);
                cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
            }
            if (cp > 0x10FFFF) jfail(c, L->line, "\\U escape out of range in a string");
            put_utf8(c, &b, cp);
            i += (size_t)hex;
            continue;
        }
        if (e >= '0' && e <= '7') {
            uint32_t cp = 0;
            int k = 0;
            while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') { cp = cp * 8 + (uint32_t)(s[i] - '0'); i++; k++; }
            i--;
            put_utf8(c, &b, cp);
            continue;
        }
        const char *map = "n\nt\tr\r\\\\''\"\"a\ab\bf\fv\v\n";
        const char *m = NULL;
        for (const char *p = map; p[0] && p[1]; p += 2)
            if (p[0] == e) { m = p; break; }
        if (e == '\n') continue; /* backslash-newline: a line continuation */
        if (m) jbuf_addc(c, &b, m[1]);
        else { jbuf_addc(c, &b, '\\'); jbuf_addc(c, &b, e); }
    }
    t->s = b.s;
    t->n = b.n;
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};

/* Lexes one tag's inside from *pp; stops after its end marker. end: '}' for
 * {{ }}, '%' for {% %}. Sets *strip_after (-) and *trim ("\n?" applies). */
static void lex_tag(lexer *L, const char **pp, const char *end, char close, bool *strip_after, bool *plus)
{
    jctx *c = L->c;
    const char *p = *pp;
    int depth = 0;
    for (;;) {
        while (p < end && is_ws(*p)) { if (*p == '\n') L->line++; p++; }
        if (p >= end) jfail(c, L->line, "unexpected end of template inside a tag");
        /* end markers, only outside brackets */
        if (depth == 0) {
            const char *q = p;
            bool minus = false, pl = false;
            if (*q == '-' && q + 2 < end + 1 && q[1] == close && q + 2 <= end && q[2] == '}') { minus = true; q++; }
            else if (*q == '+' && close == '%' && q + 2 <= end && q[1] == close && q[2] == '}') { pl = true; q++; }
            if (q + 1 < end && q[0] == close && q[1] == '}') {
                *strip_after = minus;
                *plus = pl;
                *pp = q + 2;
                return;
            }
        }
        jstep(c);
        if (isalpha((unsigned char)*p) || *p == '_') {
            const char *s = p;
            while (p < end && (isalnum((unsigned char)*p) || *p == '_')) p++;
            push(L, JT_NAME, jarena_strdup(c, s, (size_t)(p - s)), (size_t)(p - s));
        } else if (isdigit((unsigned char)*p)) {
            const char *s = p;
            while (p < end && (isdigit((unsigned char)*p) || *p == '_')) p++;
            bool fl = false;
            if (p + 1 < end && *p == '.' && isdigit((unsigned char)p[1])) {
                fl = true;
                p++;
                while (p < end && (isdigit((unsigned char)*p) || *p == '_')) p++;
            }
            if (p < end && (*p == 'e' || *p == 'E')) {
                const char *q = p + 1;
                if (q < end && (*q == '+' || *q == '-')) q++;
                if (q < end && isdigit((unsigned char)*q)) {
                    fl = true;
                    p = q;
                    while (p < end && isdigit((unsigned char)*p)) p++;
                }
            }
            char num[64];
            size_t k = 0;
            for (const char *q = s; q < p && k + 1 < sizeof num; q++)
                if (*q != '_') num[k++] = *q;
            num[k] = 0;
            jtok *t = push(L, fl ? JT_FLOAT : JT_INT, NULL, 0);
            if (fl) t->f = strtod(num, NULL);
            else {
                char *e;
                unsigned long long u = strtoull(num, &e, 10);
                if (u > INT64_MAX || k >= sizeof num - 1) jfail(c, L->line, "integer literal too large");
                t->i = (int64_t)u;
            }
        } else if (*p == '\'' || *p == '"') {
            char q = *p++;
            const char *s = p;
            while (p < end && *p != q) {
                if (*p == '\\' && p + 1 < end) p++;
                if (*p == '\n') L->line++;
                p++;
            }
            if (p >= end) jfail(c, L->line, "unterminated string literal");
            jtok *t = push(L, JT_STRING, NULL, 0);
            unescape(L, s, (size_t)(p - s), t);
            p++;
        } else {
            size_t n = 1;
            for (int k = 0; ops2[k]; k++)
                if (p + 1 < end && p[0] == ops2[k][0] && p[1] == ops2[k][1]) n = 2;
            if (n == 1 && !strchr("+-*/%~[](){}<>=.:|,;!", *p))
                jfail(c, L->line, "unexpected character '%c' in a tag", *p);
            if (n == 1 && *p == '!') jfail(c, L->line, "unexpected character '!' in a tag");
            if (*p == '(' || *p == '[' || *p == '{') depth++;
            if ((*p == ')' || *p == ']' || *p == '}') && depth > 0) depth--;
            push(L, JT_OP, jarena_strdup(c, p, n), n);
            p += n;
        }
    }
}

/* Normalizes newlines and drops one trailing newline (jinja2's defaults). */
static char *normalize(jctx *c, const char *src, size_t n, size_t *out_n)
{
    char *s = jarena_alloc(c, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else s[k++] = src[i];
    }
    if (k && s[k - 1] == '\n') k--;
    s[k] = 0;
    *out_n = k;
    return s;
}

int jlex(jctx *c, const char *src0, size_t n0, jtok **toks, size_t *ntok)
{
    lexer L = {.c = c, .line = 1};
    size_t n;
    const char *src = normalize(c, src0, n0, &n);
    const char *p = src, *end = src + n;
    bool strip_next = false, trim_nl = false, line_starting = true;
    while (p < end) {
        /* the next tag opening */
        const char *t = p;
        while (t + 1 < end && !(t[0] == '{' && (t[1] == '{' || t[1] == '%' || t[1] == '#'))) t++;
        if (t + 1 >= end) t = end;
        const char *ds = p, *de = t;
        if (strip_next) while (ds < de && is_ws(*ds)) ds++;
        else if (trim_nl && ds < de && *ds == '\n') ds++;
        char kind = t < end ? t[1] : 0;
        char ctl = t + 2 < end ? t[2] : 0;
        if (kind && ctl == '-') {
            while (de > ds && is_ws(de[-1])) de--;
        } else if (kind && kind != '{' && ctl != '+') {
            const char *lp = de;
            while (lp > ds && lp[-1] != '\n') lp--;
            bool at_line = lp > ds || line_starting;
            const char *q = lp;
            while (q < de && is_ws(*q)) q++;
            if (at_line && q == de && lp < de) de = lp;
        }
        if (de > ds) push(&L, JT_DATA, ds, (size_t)(de - ds));
        L.line += count_nl(p, (size_t)(t - p));
        if (t >= end) break;
        p = t + 2;
        if (ctl == '-' || ctl == '+') p++;
        bool strip_after = false, plus = false;
        if (kind == '#') {
            const char *q = p;
            while (q + 1 < end && !(q[0] == '#' && q[1] == '}')) q++;
            if (q + 1 >= end) jfail(c, L.line, "missing end of comment tag");
            strip_after = q > p && q[-1] == '-';
            plus = q > p && q[-1] == '+';
            L.line += count_nl(p, (size_t)(q - p));
            p = q + 2;
        } else {
            push(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, NULL, 0);
            lex_tag(&L, &p, end, kind == '{' ? '}' : '%', &strip_after, &plus);
            push(&L, kind == '{' ? JT_VAR_END : JT_BLOCK_END, NULL, 0);
        }
        strip_next = strip_after;
        trim_nl = kind != '{' && !strip_after && !plus;
        /* jinja2's "line_starting": did the end tag's match end in a newline */
        line_starting = false;
        if (strip_after) {
            const char *q = p;
            while (q < end && is_ws(*q)) q++;
            line_starting = q > p && q[-1] == '\n';
        } else if (trim_nl && p < end && *p == '\n') line_starting = true;
    }
    push(&L, JT_EOF, NULL, 0);
    *toks = L.v;
    *ntok = L.n;
    return 0;
}
