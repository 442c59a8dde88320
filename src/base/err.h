/* err.h - error reporting for every module.
 *
 * A function that can fail returns an int status: 0 ok, a negative PL_E*
 * code on failure, and leaves its outputs and state unchanged. The text of the
 * failure (what and where: file, byte offset, field, flag) is kept in a
 * thread-local buffer that err_set() fills and err_msg() reads. Only the
 * newest error is kept; a caller that adds context calls err_prefix().
 */
#ifndef PL_BASE_ERR_H
#define PL_BASE_ERR_H

#include <stddef.h>

enum {
    PL_OK = 0,
    PL_EINVAL = -1,   /* bad argument or bad value from outside */
    PL_EIO = -2,      /* open/read/write/mmap failed */
    PL_ENOMEM = -3,   /* allocation failed */
    PL_EFORMAT = -4,  /* malformed file or data */
    PL_ERANGE = -5,   /* value out of the allowed range */
    PL_ENOTFOUND = -6,/* key, tensor or name not present */
    PL_EUNSUPPORTED = -7, /* well-formed but not supported by this engine */
    PL_EFULL = -8,    /* a fixed-size resource (KV pool, queue) is exhausted */
};

/* Sets the thread's error text (printf-style) and returns code, so that
 * callers can write: return err_set(PL_EFORMAT, "%s: offset %zu: ...", ...). */
int err_set(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "ctx: " to the current error text; returns code unchanged. */
int err_prefix(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The newest error text of this thread ("" if none). */
const char *err_msg(void);

/* Clears the text. */
void err_clear(void);

#endif
