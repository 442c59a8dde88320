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
void mem_free(void *p);

/* malloc/calloc that set the error text on failure. */
void *mem_calloc(size_t n, size_t size);

#endif
