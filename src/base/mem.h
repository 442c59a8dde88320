/* mem.h - checked allocation helpers and overflow-safe size arithmetic.
 *
 * Sizes that come from outside (file headers, requests) are multiplied and
 * added only through these helpers, which report overflow instead of wrapping.
 */
#ifndef PL_BASE_MEM_H
#define PL_BASE_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* a*b into *out; false on overflow (then *out is untouched). */
static inline bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

static inline bool add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

/* Aligned allocation (alignment a power of two >= sizeof(void*)), zeroed.
 * Returns NULL and sets the error text on failure. Free with mem_free. */
void *mem_alloc_aligned(size_t size, size_t align);

/* As mem_alloc_aligned, for a large buffer read at scattered places (the KV
 * pool): from 2 MiB up, 2 MiB aligned and advised to the kernel's huge
 * pages (MADV_HUGEPAGE, where transparent huge pages are "madvise" only),
 * so that a read of a few KiB here and there costs no page walk and the
 * hardware prefetcher runs on past 4 KiB edges. Free with mem_free. */
void *mem_alloc_huge(size_t size);
void mem_free(void *p);

/* malloc/calloc that set the error text on failure. */
void *mem_calloc(size_t n, size_t size);

#endif
