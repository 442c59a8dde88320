/* gbnf_write.c - see gbnf_write.h. */
#include "grammar/gbnf_write.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gb_add(gw_buf *b, const char *s, size_t n)
{
    if (b->oom || !n) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void gb_str(gw_buf *b, const char *s) { gb_add(b, s, strlen(s)); }

void gb_fmt(gw_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp) { b->oom = true; return; }
    gb_add(b, tmp, (size_t)k);
}

static void utf8_put(gw_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    gb_add(b, u, n);
}

void gb_lit_cp(gw_buf *b, uint32_t cp)
{
    if (cp == '"' || cp == '\\') { gb_add(b, "\\", 1); utf8_put(b, cp); }
    else if (cp < 0x20 || cp == 0x7F) gb_fmt(b, "\\x%02X", cp);
    else utf8_put(b, cp);
}

void gb_class_cp(gw_buf *b, uint32_t cp)
{
    if (cp == ']' || cp == '[' || cp == '\\' || cp == '^' || cp == '-' || cp == '"') { gb_add(b, "\\", 1); utf8_put(b, cp); }
    else if (cp < 0x20 || cp == 0x7F) gb_fmt(b, "\\x%02X", cp);
    else utf8_put(b, cp);
}

void gb_literal(gw_buf *b, const char *s, size_t n)
{
    gb_add(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
        if (c < 0x80) gb_lit_cp(b, c);
        else gb_add(b, s + i, k <= n - i ? k : n - i);
        i += k;
    }
    gb_add(b, "\"", 1);
}

void gb_free(gw_buf *b)
{
    free(b->p);
    *b = (gw_buf){0};
}
