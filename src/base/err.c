/* err.c - thread-local error text; see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_buf[1024];

int err_set(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return code;
}

int err_prefix(int code, const char *fmt, ...)
{
    char head[512], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    /* truncation is acceptable: the newest context comes first */
    size_t n = strlen(head);
    if (n > sizeof err_buf - 3) n = sizeof err_buf - 3;
    memcpy(err_buf, head, n);
    memcpy(err_buf + n, ": ", 2);
    size_t rest = sizeof err_buf - n - 3;
    size_t ol = strnlen(old, rest);
    memcpy(err_buf + n + 2, old, ol);
    err_buf[n + 2 + ol] = '\0';
    return code;
}

const char *err_msg(void) { return err_buf; }

void err_clear(void) { err_buf[0] = '\0'; }
