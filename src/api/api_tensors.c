/* api_tensors.c - pl_file_tensors: the tensor directory of a GGUF file
 * (name, type, shape, place), for `pagellm inspect --tensors` and for
 * comparing two files' per-tensor mixes. A split model lists the
 * tensors of all its shards.
 *
 * Names are copied as pl_file_info's strings are: truncated at a UTF-8
 * boundary to fit, control characters shown as '?'.
 */
#include "pagellm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

static void tensor_name_copy(char *dst, size_t cap, const char *s, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    if (n < len)
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    for (size_t i = 0; i < n; i++) dst[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    dst[n] = '\0';
}

int pl_file_tensors(const char *path, pl_tensor_info **out, uint64_t *n_out)
{
    if (!path || !out || !n_out) return err_set(PL_EINVAL, "pl_file_tensors: NULL argument");
    gguf_file *f;
    int rc = gguf_open_model(&f, path);
    if (rc) return rc;
    const uint64_t n = gguf_tensor_count(f);
    pl_tensor_info *ts = calloc(n ? (size_t)n : 1, sizeof *ts);
    if (!ts) {
        gguf_close(f);
        return err_set(PL_ENOMEM, "%s: out of memory for %llu tensors", path, (unsigned long long)n);
    }
    for (uint64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const dtype_traits *tr = dtype_get(t->type);
        tensor_name_copy(ts[i].name, sizeof ts[i].name, t->name.ptr, (size_t)t->name.len);
        snprintf(ts[i].type, sizeof ts[i].type, "%s", tr && tr->name ? tr->name : "unknown");
        ts[i].n_dims = t->n_dims;
        for (int d = 0; d < 4; d++) ts[i].ne[d] = d < GGUF_MAX_DIMS ? t->ne[d] : 1;
        ts[i].offset = gguf_tensor_file_offset(f, t);
        ts[i].shard = t->shard;
        ts[i].bytes = t->nbytes;
    }
    gguf_close(f);
    *out = ts;
    *n_out = n;
    return 0;
}
