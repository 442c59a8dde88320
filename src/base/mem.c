/* mem.c - allocation helpers; see mem.h. */
#include "mem.h"
#include "err.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *mem_alloc_aligned(size_t size, size_t align)
{
    void *p = NULL;
    if (size == 0) size = align;
    size_t rounded = (size + align - 1) & ~(align - 1);
    if (rounded < size || posix_memalign(&p, align, rounded) != 0) {
        err_set(PL_ENOMEM, "out of memory allocating %zu bytes", size);
        return NULL;
    }
    memset(p, 0, rounded);
    return p;
}

void *mem_alloc_huge(size_t size)
{
    const size_t huge = (size_t)2 << 20;
    if (size < huge) return mem_alloc_aligned(size, 64);
    void *p = NULL;
    size_t rounded = (size + huge - 1) & ~(huge - 1);
    if (rounded < size || posix_memalign(&p, huge, rounded) != 0) {
        err_set(PL_ENOMEM, "out of memory allocating %zu bytes", size);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: without it the pages are 4 KiB */
#endif
    memset(p, 0, rounded);
    return p;
}

void mem_free(void *p) { free(p); }

void *mem_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) err_set(PL_ENOMEM, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}
