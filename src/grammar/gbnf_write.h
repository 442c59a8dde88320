/* gbnf_write.h - a growing text buffer and the escapes that put arbitrary
 * code points into GBNF literals and classes (internal to src/grammar:
 * the JSON-schema and regex compilers write GBNF through it).
 */
#ifndef PL_GRAMMAR_GBNF_WRITE_H
#define PL_GRAMMAR_GBNF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;  /* an append failed: the text is incomplete */
} gw_buf;

void gb_add(gw_buf *b, const char *s, size_t n);
void gb_str(gw_buf *b, const char *s);
void gb_fmt(gw_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Code point cp as it must appear inside "..." or [...] of GBNF. */
void gb_lit_cp(gw_buf *b, uint32_t cp);
void gb_class_cp(gw_buf *b, uint32_t cp);
/* A whole GBNF literal "..." of the bytes s[0..n) (valid UTF-8). */
void gb_literal(gw_buf *b, const char *s, size_t n);
void gb_free(gw_buf *b);

#endif
