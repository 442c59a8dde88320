/* api_base.c - pl_last_error and pl_free: the public face of src/base. */
#include "pagellm.h"
#include "base/err.h"

#include <stdlib.h>

const char *pl_last_error(void) { return err_msg(); }

void pl_free(void *p) { free(p); }
