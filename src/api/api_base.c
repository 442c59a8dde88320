/* api_base.c - pl_last_error and pl_free: the public face of src/base. */
#include "pagellm.h"
#include "base/err.h"

#include <stdlib.h>

const char *pl_last_error(void) { return err_msg(); }

void pl_free(void *p) { free(p); }

/* The public codes are the internal ones (src/base/err.h). */
#define SAME(a, b) _Static_assert((int)(a) == (int)(b), #a " differs from " #b)
SAME(PL_ERR_INVAL, PL_EINVAL);
SAME(PL_ERR_IO, PL_EIO);
SAME(PL_ERR_NOMEM, PL_ENOMEM);
SAME(PL_ERR_FORMAT, PL_EFORMAT);
SAME(PL_ERR_RANGE, PL_ERANGE);
SAME(PL_ERR_NOTFOUND, PL_ENOTFOUND);
SAME(PL_ERR_UNSUPPORTED, PL_EUNSUPPORTED);
SAME(PL_ERR_FULL, PL_EFULL);
