/* fault.c - fault injection for the faults build (`make faults`, -DPL_FAULTS).
 *
 * The faults build links every project object with -Wl,--wrap for the
 * allocation and file-read calls below, so each call our code makes (the
 * mem_* helpers and every direct malloc/strdup/...) passes through here;
 * calls made inside libc, jansson or libmicrohttpd are not counted. Socket
 * writes are made by libmicrohttpd, so send() and sendmsg() are defined in
 * the executable itself, which takes precedence over libc's for every
 * library of the process, and forward to the next definition.
 *
 * PAGELLM_FAULT picks what fails, as a comma-separated list:
 *   alloc:N   the Nth allocation returns NULL (ENOMEM)
 *   read:N    the Nth file open (for reading) or file mmap fails with EIO
 *   write:N   the Nth socket send fails with EPIPE
 *   disk:N    the Nth write(), pwrite() or pwritev() to a regular file
 *             fails with ENOSPC (a full disk: the KV disk tier's segments)
 *   KIND:N+   the Nth and every later one fail (a persistent fault)
 *   count     print at exit how many of each were made
 *   trace     print the call stack of each injected failure (to find it)
 * N counts from 1. Without PAGELLM_FAULT nothing fails and nothing prints.
 * Outside the faults build this file is empty. */
#include "fault.h"

#ifdef PL_FAULTS

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *const fault_names[FAULT_KINDS] = {"alloc", "read", "write", "disk"};

static struct {
    atomic_flag inited;
    atomic_bool ready;
    bool count, trace;
    uint64_t at[FAULT_KINDS];     /* 0: never */
    bool persist[FAULT_KINDS];
    atomic_uint_fast64_t n[FAULT_KINDS];
} fs;

static void fault_report(void)
{
    fprintf(stderr, "pagellm faults: alloc=%llu read=%llu write=%llu disk=%llu\n",
            (unsigned long long)atomic_load(&fs.n[FAULT_ALLOC]),
            (unsigned long long)atomic_load(&fs.n[FAULT_READ]),
            (unsigned long long)atomic_load(&fs.n[FAULT_WRITE]),
            (unsigned long long)atomic_load(&fs.n[FAULT_DISK]));
}

/* Parses PAGELLM_FAULT once. A malformed value is an error of the test
 * that set it: say so and stop, rather than run without the fault. */
static void fault_init(void)
{
    if (atomic_flag_test_and_set(&fs.inited)) {
        while (!atomic_load(&fs.ready)) {}
        return;
    }
    const char *s = getenv("PAGELLM_FAULT");
    while (s && *s) {
        size_t len = strcspn(s, ",");
        int k = -1;
        for (int i = 0; i < FAULT_KINDS; i++) {
            size_t nl = strlen(fault_names[i]);
            if (len > nl && strncmp(s, fault_names[i], nl) == 0 && s[nl] == ':') k = i;
        }
        if (len == 5 && strncmp(s, "count", 5) == 0) {
            fs.count = true;
        } else if (len == 5 && strncmp(s, "trace", 5) == 0) {
            fs.trace = true;
        } else {
            char *end = NULL;
            unsigned long long at = 0;
            if (k >= 0) at = strtoull(s + strlen(fault_names[k]) + 1, &end, 10);
            if (k < 0 || at == 0 || !end || (end != s + len && !(*end == '+' && end + 1 == s + len))) {
                fprintf(stderr, "PAGELLM_FAULT: bad entry '%.*s' (alloc:N, read:N, write:N, disk:N, KIND:N+, count or trace)\n",
                        (int)len, s);
                _exit(2);
            }
            fs.at[k] = at;
            fs.persist[k] = *end == '+';
        }
        s += len;
        if (*s == ',') s++;
    }
    if (fs.count) atexit(fault_report);
    atomic_store(&fs.ready, true);
}

bool fault_hit(fault_kind k)
{
    if (!atomic_load_explicit(&fs.ready, memory_order_acquire)) fault_init();
    uint64_t i = atomic_fetch_add(&fs.n[k], 1) + 1;
    bool hit = fs.at[k] && (i == fs.at[k] || (fs.persist[k] && i > fs.at[k]));
    if (hit && fs.trace) {
        void *pc[24];
        fprintf(stderr, "pagellm faults: %s %llu fails here:\n", fault_names[k], (unsigned long long)i);
        backtrace_symbols_fd(pc, backtrace(pc, 24), 2);
    }
    return hit;
}

/* ---- allocation (-Wl,--wrap=NAME: our calls to NAME come here) ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

#define FAULT_ALLOC_FAILS() (fault_hit(FAULT_ALLOC) ? (errno = ENOMEM, 1) : 0)

void *__wrap_malloc(size_t n) { return FAULT_ALLOC_FAILS() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return FAULT_ALLOC_FAILS() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return FAULT_ALLOC_FAILS() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return FAULT_ALLOC_FAILS() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return FAULT_ALLOC_FAILS() ? NULL : __real_strndup(s, n); }
int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
    return fault_hit(FAULT_ALLOC) ? ENOMEM : __real_posix_memalign(p, align, n);
}

/* ---- file writes (a full disk) ---- */

ssize_t __real_write(int fd, const void *buf, size_t n);

/* Only writes to regular files count: our code writes sockets and pipes
 * too (the server, the CLI's output), and those are not the disk. */
ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fault_hit(FAULT_DISK)) return errno = ENOSPC, -1;
    return __real_write(fd, buf, n);
}

ssize_t __real_pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t __real_pwritev(int fd, const struct iovec *iov, int cnt, off_t off);

/* The disk tier appends to its segments at known offsets. */
ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fault_hit(FAULT_DISK)) return errno = ENOSPC, -1;
    return __real_pwrite(fd, buf, n, off);
}

ssize_t __wrap_pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fault_hit(FAULT_DISK)) return errno = ENOSPC, -1;
    return __real_pwritev(fd, iov, cnt, off);
}

/* ---- file reads ---- */

int __real_open(const char *path, int flags, ...);
FILE *__real_fopen(const char *path, const char *mode);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);

#define FAULT_READ_FAILS() (fault_hit(FAULT_READ) ? (errno = EIO, 1) : 0)

int __wrap_open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
        return __real_open(path, flags, mode); /* a write path: not a read */
    }
    return FAULT_READ_FAILS() ? -1 : __real_open(path, flags);
}

FILE *__wrap_fopen(const char *path, const char *mode)
{
    if (mode[0] == 'r' && FAULT_READ_FAILS()) return NULL;
    return __real_fopen(path, mode);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    /* an anonymous map is memory, a file map is how a GGUF is read */
    if (flags & MAP_ANONYMOUS) {
        if (fault_hit(FAULT_ALLOC)) return errno = ENOMEM, MAP_FAILED;
    } else if (FAULT_READ_FAILS()) {
        return MAP_FAILED;
    }
    return __real_mmap(addr, len, prot, flags, fd, off);
}

/* ---- socket writes (interposed for the whole process) ---- */

ssize_t send(int fd, const void *p, size_t n, int flags)
{
    static ssize_t (*next)(int, const void *, size_t, int);
    if (!next) next = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    if (fault_hit(FAULT_WRITE)) return errno = EPIPE, -1;
    return next(fd, p, n, flags);
}

ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
    static ssize_t (*next)(int, const struct msghdr *, int);
    if (!next) next = (ssize_t (*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
    if (fault_hit(FAULT_WRITE)) return errno = EPIPE, -1;
    return next(fd, m, flags);
}

#else
typedef int fault_off; /* the normal build: no wrappers */
#endif
