/* fault.h - fault injection of the faults build (`make faults`); see
 * fault.c for the wrapped calls and the PAGELLM_FAULT syntax. */
#ifndef PL_BASE_FAULT_H
#define PL_BASE_FAULT_H

#include <stdbool.h>

typedef enum { FAULT_ALLOC = 0, FAULT_READ, FAULT_WRITE, FAULT_DISK, FAULT_KINDS } fault_kind;

#ifdef PL_FAULTS
/* Counts one operation of kind k; true when PAGELLM_FAULT says it fails. */
bool fault_hit(fault_kind k);
#else
static inline bool fault_hit(fault_kind k) { (void)k; return false; }
#endif

#endif
